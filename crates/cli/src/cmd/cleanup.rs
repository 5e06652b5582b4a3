//! `smartcon cleanup`: removes what a killed smartcon left, from the records made at
//! creation: loop and zram devices, mounts and images (`smartcon_workloads::blockdev`), and
//! the FUSE servers' mounts and loop devices of `emulate mount` (`smartcon_emulate::mount`;
//! `smartcon emulate cleanup` does only those); both kinds are recorded in one folder,
//! `$SMARTCON_HOME/devices` (`smartcon_util::loopmount`), and the mounts' folder of older
//! builds is still read. Each part checks an item before it touches it. Outputs a killed
//! run had claimed (their temporary names, empty placeholders and claims) are recorded
//! under `$SMARTCON_HOME/outputs` and removed the same way (`smartcon_util::paths`).
//!
//! Then, without records: what a killed run left under smartcon's own names with its pid
//! (loop ramdisks in /dev/shm with their owner marks, the file systems mounted from them on
//! `smartcon-TAG-PID-N`, scratch paths in `$TMPDIR`), once that run is gone
//! (`smartcon_workloads::leftovers`): a deleted `SMARTCON_HOME` no longer hides them.

#[derive(clap::Args)]
pub struct CleanupArgs {}

pub fn run(_args: CleanupArgs) -> anyhow::Result<()> {
    let report = smartcon_workloads::blockdev::cleanup_recorded()?;
    report.removed.iter().for_each(|r| println!("removed {r}"));
    report.kept.iter().for_each(|k| eprintln!("smartcon: note: kept {k}"));
    let mounts = smartcon_emulate::mount::cleanup();
    mounts.iter().for_each(|line| println!("{line}"));
    let vms = smartcon_emulate::vm::cleanup();
    vms.iter().for_each(|line| println!("{line}"));
    // Outputs a killed run claimed: temporary names, empty placeholders, claims (issue 29).
    let outputs = smartcon_util::paths::cleanup_records(&crate::paths::records_dir());
    outputs.iter().for_each(|line| println!("{line}"));
    // What no record names any more (a killed run whose home was deleted): found by
    // smartcon's own names with a gone run's pid, after the records had their say.
    let named = smartcon_workloads::leftovers::cleanup_by_name(&std::env::temp_dir());
    named.removed.iter().for_each(|r| println!("removed {r}"));
    named.kept.iter().for_each(|k| eprintln!("smartcon: note: kept {k}"));
    let nothing = [&report.removed, &report.kept, &named.removed, &named.kept].iter().all(|l| l.is_empty());
    if nothing && mounts.is_empty() && vms.is_empty() && outputs.is_empty() {
        println!("nothing to clean up ({})", smartcon_workloads::blockdev::records_dir().display());
    }
    Ok(())
}
