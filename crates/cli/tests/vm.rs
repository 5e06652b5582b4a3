//! `smartcon emulate vm` end to end: a User-Mode Linux guest boots on an emulated device,
//! runs a command whose exit status comes back, and what it fsyncs to ext4 is in the image
//! for a second run (virtual time, then real time). Skips with the reason when linux.uml
//! is not installed (Debian's user-mode-linux; scripts/test.sh installs it as root).
//! Asserts no wall-clock timing: the guest's own clock is checked only against the sleep it
//! was asked to make.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn smartcon(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home).args(args).output().expect("run smartcon")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smartcon-vm-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn uml_available() -> bool {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain([PathBuf::from("/usr/bin")])
        .any(|d| d.join("linux.uml").is_file());
    if !found {
        eprintln!("skipping: linux.uml is not installed (apt-get install user-mode-linux)");
    }
    found && mkfs_available()
}

fn mkfs_available() -> bool {
    let ok = Command::new("mkfs.ext4").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: mkfs.ext4 is missing (apt-get install e2fsprogs)");
    }
    ok
}

fn json_record(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["type"] == "emulate_vm")
        .unwrap_or_else(|| panic!("no emulate_vm record in {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_guest_returns_its_status_and_fsynced_data_survives_into_a_second_run() {
    if !uml_available() {
        return;
    }
    let home = scratch("home");
    let image = home.join("disk.img");
    let image_arg = image.to_str().unwrap();
    // Virtual time: the guest writes and fsyncs a file on ext4, sleeps 3 s of its own
    // time, and exits 5.
    let script = "printf 'kept across runs\\n' > kept && sync kept && sleep 3; exit 5";
    let out = smartcon(
        &home,
        &[
            "emulate",
            "vm",
            "emu:nvme",
            "--size",
            "64m",
            "--image",
            image_arg,
            "--virtual-time",
            "--json",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(out.status.code(), Some(5), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let r = json_record(&out);
    assert_eq!(r["exit_code"], 5);
    assert_eq!(r["virtual_time"], true);
    // The guest's clock saw its sleep (virtual time still counts it).
    assert!(r["guest_ns"].as_u64().unwrap() >= 3_000_000_000, "{r}");
    // The device served the guest's requests (mount, the file, the journal).
    assert!(r["device"]["writes"].as_u64().unwrap() > 0, "{r}");
    assert!(image.is_file(), "--image is kept");

    // Real time, the same image: the file is there (it was mounted, not formatted again).
    let out = smartcon(&home, &["emulate", "vm", "emu:nvme", "--image", image_arg, "--", "cat", "kept"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept across runs\n");

    // Nothing left: no record, no working directory of this home's runs.
    let vms = home.join("vms");
    let left: Vec<_> = std::fs::read_dir(&vms).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "records left: {left:?}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn bad_vm_flags_are_one_line_and_exit_2() {
    let home = scratch("flags");
    for args in [
        &["emulate", "vm", "emu:hdd", "--cpu-speed", "0", "--virtual-time", "--", "true"][..],
        &["emulate", "vm", "emu:hdd", "--cpu-speed", "2", "--", "true"][..],
        &["emulate", "vm", "emu:nosuch", "--", "true"][..],
        &["emulate", "vm", "emu:hdd,size=1g", "--size", "2g", "--", "true"][..],
    ] {
        let out = smartcon(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1, "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&home);
}
