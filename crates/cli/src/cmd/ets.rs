//! `smartcon ets` (being built; see the open issue).

#[derive(clap::Args)]
pub struct EtsArgs {}

pub fn run(_args: EtsArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon ets` is not built yet")
}
