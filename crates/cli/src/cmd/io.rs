//! `smartcon io` (being built; see the open issue).

#[derive(clap::Args)]
pub struct IoArgs {}

pub fn run(_args: IoArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon io` is not built yet")
}
