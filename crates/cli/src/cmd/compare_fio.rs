//! `smartcon compare_fio` (being built; see the open issue).

#[derive(clap::Args)]
pub struct CompareFioArgs {}

pub fn run(_args: CompareFioArgs) -> anyhow::Result<()> {
    anyhow::bail!("this subcommand is not built yet")
}
