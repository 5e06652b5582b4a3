//! `smartcon trace` (being built; see the open issue).

#[derive(clap::Args)]
pub struct TraceArgs {}

pub fn run(_args: TraceArgs) -> anyhow::Result<()> {
    anyhow::bail!("`smartcon trace` is not built yet")
}
