//! `smartcon probe` (being built; see the open issue).

#[derive(clap::Args)]
pub struct ProbeArgs {}

pub fn run(_args: ProbeArgs) -> anyhow::Result<()> {
    anyhow::bail!("this subcommand is not built yet")
}
