//! `smartcon cachesim` (being built; see the open issue).

#[derive(clap::Args)]
pub struct CachesimArgs {}

pub fn run(_args: CachesimArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon cachesim` is not built yet")
}
