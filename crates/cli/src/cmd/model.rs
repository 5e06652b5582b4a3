//! `smartcon model` (being built; see the open issue).

#[derive(clap::Args)]
pub struct ModelArgs {}

pub fn run(_args: ModelArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon model` is not built yet")
}
