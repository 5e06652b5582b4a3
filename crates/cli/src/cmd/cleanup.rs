//! `smartcon cleanup`: removes the devices and images a killed smartcon left, from the records
//! made at creation; the logic and its checks are `smartcon_workloads::blockdev`.

#[derive(clap::Args)]
pub struct CleanupArgs {}

pub fn run(_args: CleanupArgs) -> anyhow::Result<()> {
    let report = smartcon_workloads::blockdev::cleanup_recorded()?;
    report.removed.iter().for_each(|r| println!("removed {r}"));
    report.kept.iter().for_each(|k| eprintln!("smartcon: note: kept {k}"));
    if report.removed.is_empty() && report.kept.is_empty() {
        println!("nothing to clean up ({})", smartcon_workloads::blockdev::records_dir().display());
    }
    Ok(())
}
