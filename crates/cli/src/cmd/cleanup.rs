//! `smartcon cleanup`: removes what a killed smartcon left, from the records made at
//! creation: loop and zram devices, mounts and images (`smartcon_workloads::blockdev`), and
//! the FUSE servers' mounts and loop devices of `emulate mount` (`smartcon_emulate::mount`;
//! `smartcon emulate cleanup` does only those); both kinds are recorded in one folder,
//! `$SMARTCON_HOME/devices` (`smartcon_util::loopmount`), and the mounts' folder of older
//! builds is still read. Each part checks an item before it touches
//! it; nothing without a record is touched. Outputs a killed run had claimed (their
//! temporary names, empty placeholders and claims) are recorded under
//! `$SMARTCON_HOME/outputs` and removed the same way (`smartcon_util::paths`).

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
    if report.removed.is_empty() && report.kept.is_empty() && mounts.is_empty() && vms.is_empty() && outputs.is_empty()
    {
        println!("nothing to clean up ({})", smartcon_workloads::blockdev::records_dir().display());
    }
    Ok(())
}
