//! Bounds that agree everywhere, the sizes half (issue 22): every flag, spec key and target
//! that takes a size parses it with the one parser (`units::parse_size_in`) and its kind's
//! bounds, so each command refuses a zero, a too-large and a malformed size alike: exit
//! status 2, one line on stderr naming the kind's bounds, nothing on stdout. Before, the
//! same size got different answers by command ("must be more than 0", "1 byte to 64 MiB",
//! "1..=1073741824 (the device's capacity)", "between 1 MiB and 64 GiB" for a `tmp:` file
//! but 16 GiB for an emulated device, a malformed size without its bounds).
//!
//! The table: each row is a command with `{S}` where the size goes, and the kind whose
//! bounds the refusal must name. Nothing here needs root: every case ends at the size.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_smartcon");

/// How each kind's bounds read in a refusal (`SizeRange::describe`).
const IO: &str = "an I/O size is 512 to 64m bytes, a multiple of 512";
const DEVICE: &str = "a device size is 1m to 16g bytes, a multiple of 4k";
const RAMDISK: &str = "a RAM disk size is 1m to 8g bytes, a multiple of 4k";
const TREE: &str = "a tree size is 4k to 16g bytes, a multiple of 4k";

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    // On the local disk (O_DIRECT), not a tmpfs.
    tempfile::Builder::new().prefix(&format!("sizes-{name}-")).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn every_command_refuses_a_zero_a_too_large_and_a_malformed_size_with_one_line_naming_the_bound() {
    let dir_guard = scratch("table");
    let dir = dir_guard.path().to_path_buf();
    let home = dir.join("home");
    let out = dir.join("report");
    let img = dir.join("disk.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (out, img, mnt, tmpdir) =
        (out.to_str().unwrap(), img.to_str().unwrap(), mnt.to_str().unwrap(), dir.to_str().unwrap());
    let rows: Vec<(Vec<String>, &str)> = [
        // I/O sizes.
        ("io --target emu:nvram --duration 1ms --bs {S}", IO),
        ("bench --targets emu:nvram --duration 1ms --sizes 4k,{S}", IO),
        ("probe emu:nvram --duration 1ms --sizes {S}", IO),
        ("evaluate --tiny --out OUT --sizes {S}", IO),
        ("compare-fio emu:nvram --bs {S}", IO),
        ("merge-bench --duration 1ms --rounds 1 --bs {S}", IO),
        ("emulate replay --device emu:nvme --ios 10 --bs {S}", IO),
        // Devices, files and regions.
        ("io --target emu:nvram,size={S} --duration 1ms", DEVICE),
        ("io --target tmp:{S}@TMPDIR --duration 1ms", DEVICE),
        ("io --target emu:nvram --duration 1ms --span {S}", DEVICE),
        ("bench --targets emu:nvram --sizes 4k --duration 1ms --span {S}", DEVICE),
        ("compare-fio emu:nvram --span {S}", DEVICE),
        ("merge-bench --duration 1ms --rounds 1 --span {S}", DEVICE),
        ("evaluate --tiny --out OUT --file-size {S}", DEVICE),
        ("evaluate --study acs --tiny --out OUT --file-size {S}", DEVICE),
        ("emulate replay --device emu:nvme,size={S} --ios 10", DEVICE),
        ("emulate sweep --device emu:nvme --plan-only --tree-size {S}", TREE),
        ("emulate sweep --device emu:nvme,size={S} --plan-only", DEVICE),
        ("emulate mount emu:nvme MNT --size {S}", DEVICE),
        ("emulate mount emu:nvme,size={S} MNT", DEVICE),
        ("emulate vm emu:nvme --size {S} -- true", DEVICE),
        ("run --emulate emu:nvram,size={S}=IMG -- true", DEVICE),
        // Devices created for a run in RAM.
        ("evaluate --tiny --out OUT --targets loop:{S}", RAMDISK),
        ("evaluate --tiny --out OUT --targets zram:{S}", RAMDISK),
    ]
    .iter()
    .map(|(line, kind)| {
        let words = line.replace("OUT", out).replace("IMG", img).replace("MNT", mnt).replace("TMPDIR", tmpdir);
        (words.split(' ').map(String::from).collect(), *kind)
    })
    .collect();
    let mut problems = Vec::new();
    for (args, kind) in &rows {
        for size in ["0", "1p", "4x"] {
            let args: Vec<String> = args.iter().map(|a| a.replace("{S}", size)).collect();
            let o = Command::new(BIN).env("SMARTCON_HOME", &home).env("TMPDIR", &dir).args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            let said = format!("`smartcon {}`: exit {:?}, stderr {err:?}", args.join(" "), o.status.code());
            if o.status.code() != Some(2) {
                problems.push(format!("{said}: not exit 2"));
            } else if err.trim_end().lines().count() != 1 {
                problems.push(format!("{said}: not one line"));
            } else if !err.contains(kind) {
                problems.push(format!("{said}: does not name the bound ({kind})"));
            } else if !o.stdout.is_empty() {
                problems.push(format!("{said}: wrote to stdout"));
            }
        }
    }
    assert!(!Path::new(out).exists(), "a refused run claimed its report directory");
    assert!(!Path::new(img).exists(), "a refused run created the image");
    assert!(problems.is_empty(), "{} of {} cases:\n{}", problems.len(), rows.len() * 3, problems.join("\n"));
}

/// The same size is a size of its kind everywhere: the largest of each kind is taken by one
/// command and the next page up refused by another with the same words.
#[test]
fn the_largest_size_of_a_kind_is_one_bound_for_every_command() {
    let dir_guard = scratch("edge");
    let dir = dir_guard.path().to_path_buf();
    let refused = |args: &[&str], kind: &str| {
        let o = Command::new(BIN).env("SMARTCON_HOME", dir.join("home")).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(kind), "{args:?}: {err}");
    };
    // 64 MiB is an I/O size (a replay of one request), 64 MiB + 512 is not, for io as for replay.
    let o = Command::new(BIN)
        .env("SMARTCON_HOME", dir.join("home"))
        .args(["emulate", "replay", "--device", "emu:nvram", "--ios", "1", "--bs", "64m"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    refused(&["io", "--target", "emu:nvram", "--duration", "1ms", "--bs", "67109376"], IO);
    refused(&["emulate", "replay", "--device", "emu:nvram", "--ios", "1", "--bs", "67109376"], IO);
    // 16 GiB is a device size: an emulated device takes it; a tmp: file one page larger is
    // refused with the same words (it was allowed up to 64 GiB).
    let o = Command::new(BIN)
        .env("SMARTCON_HOME", dir.join("home"))
        .args(["emulate", "replay", "--device", "emu:nvram,size=16g", "--ios", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tmp = format!("tmp:{}@{}", (16u64 << 30) + 4096, dir.display());
    refused(&["io", "--target", &tmp, "--duration", "1ms"], DEVICE);
    refused(&["io", "--target", "emu:nvram,size=17179873280", "--duration", "1ms"], DEVICE);
}
