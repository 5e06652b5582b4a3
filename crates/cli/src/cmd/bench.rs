//! `smartcon bench` (being built; see the open issue).

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon bench` is not built yet")
}
