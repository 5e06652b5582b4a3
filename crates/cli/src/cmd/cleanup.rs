//! `smartcon cleanup`: removes what a smartcon killed before it could clean up left behind
//! (loop devices, their /dev/shm images, ext4 mounts, zram devices), from the records
//! written under `$SMARTCON_HOME/devices/` when they were created. The logic, and the
//! checks that each thing is still the one recorded, are `smartcon_workloads::blockdev`.

use anyhow::Result;
use smartcon_workloads::blockdev;

#[derive(clap::Args)]
pub struct CleanupArgs {}

pub fn run(_args: CleanupArgs) -> Result<()> {
    let report = blockdev::cleanup_recorded()?;
    for r in &report.removed {
        println!("removed {r}");
    }
    for k in &report.kept {
        eprintln!("smartcon: note: kept {k}");
    }
    if report.removed.is_empty() && report.kept.is_empty() {
        println!("nothing to clean up ({})", blockdev::records_dir().display());
    }
    Ok(())
}
