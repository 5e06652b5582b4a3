//! `smartcon ctx` (being built; see the open issue).

#[derive(clap::Args)]
pub struct CtxArgs {}

pub fn run(_args: CtxArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon ctx` is not built yet")
}
