//! `smartcon evaluate` (being built; see the open issue).

#[derive(clap::Args)]
pub struct EvaluateArgs {}

pub fn run(_args: EvaluateArgs) -> anyhow::Result<()> {
    anyhow::bail!("this subcommand is not built yet")
}
