//! `smartcon devices` (being built; see the open issue).

#[derive(clap::Args)]
pub struct DevicesArgs {}

pub fn run(_args: DevicesArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon devices` is not built yet")
}
