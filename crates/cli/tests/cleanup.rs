//! `smartcon cleanup` removes exactly what smartcon made and a record names, and nothing
//! else (issues 22 and 29): a forged or stale record never costs a user a file, a loop device
//! or a zram device; an unreadable record is reported and skipped, the rest still cleaned;
//! a stale claim does not block an empty `--out`; `emulate mount` locks its directory and
//! refuses a non-empty one.
//!
//! Each test runs the real binary in its own scratch world (SMARTCON_HOME, TMPDIR). Parts
//! that need root, losetup, zram or FUSE say why they skip.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_smartcon");

struct World {
    /// Removed when the World is dropped (also when the test panics).
    _scratch: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new(name: &str) -> World {
        let scratch = tempfile::Builder::new().prefix(&format!("smartcon-cleanup-{name}-")).tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        for d in ["home/devices", "home/outputs", "tmp", "user"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        World { _scratch: scratch, root }
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn command(&self, args: &[&OsStr]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("SMARTCON_HOME", self.home())
            .env("TMPDIR", self.root.join("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.command(&args).output().unwrap()
    }
}

/// Every `smartcon cleanup` also removes, by name, what gone runs left in /dev/shm and on
/// mounts: a test that makes such leftovers holds this for writing, so that no other test's
/// cleanup removes them before its own does (the others hold it for reading).
static BY_NAME: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A pid no process has now (a child that has exited and been reaped).
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn losetup_attach(file: &Path) -> Option<PathBuf> {
    let o = Command::new("losetup").args(["--find", "--show"]).arg(file).output().ok()?;
    o.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

fn loop_backing(dev: &Path) -> Option<PathBuf> {
    let name = dev.file_name()?.to_str()?;
    let t = std::fs::read(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(OsStr::from_bytes(t.trim_ascii_end())))
}

/// Detaches `dev`, trying again for a while: just after an unmount the device can still be
/// busy for a moment, and a detach refused then left a test's loop devices attached.
fn losetup_detach(dev: &Path) {
    let name = dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let backing = PathBuf::from(format!("/sys/block/{name}/loop/backing_file"));
    for _ in 0..100 {
        let _ = Command::new("losetup").arg("-d").arg(dev).stderr(Stdio::null()).status();
        if !backing.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("could not detach {}", dev.display());
}

/// Issue 22's finding 4: a record in `$SMARTCON_HOME/devices/` naming a dead owner and a
/// loop device over a user's file made cleanup detach the device and delete the file. Here
/// three forged records name the user's loop device and file (the block-device record, the
/// mount record, `emulate mount`'s record) and one names a file in /dev/shm with smartcon's
/// own name but without the creating run's mark: all survive, each is reported.
#[test]
fn a_forged_record_costs_the_user_nothing() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    if !root() {
        eprintln!("skipped: attaching a loop device over a user's file needs root");
        return;
    }
    if Command::new("losetup").arg("--version").output().is_err() {
        eprintln!("skipped: losetup is not installed (Debian package mount)");
        return;
    }
    let w = World::new("forged");
    let user_file = w.root.join("user/data.img");
    std::fs::write(&user_file, vec![0x42u8; 1 << 20]).unwrap();
    let pid = dead_pid();
    // A file named as smartcon names its ramdisks, but not made by the recorded run.
    let shm_file = PathBuf::from(format!("/dev/shm/smartcon-loop-{pid}-1.img"));
    std::fs::write(&shm_file, vec![0x43u8; 1 << 20]).unwrap();
    let Some(dev) = losetup_attach(&user_file) else {
        let _ = std::fs::remove_file(&shm_file);
        eprintln!("skipped: losetup could not attach a loop device here");
        return;
    };
    let shm_dev = losetup_attach(&shm_file);
    let devices = w.home().join("devices");
    let owner = format!("owner\n{pid}\n0\n");
    std::fs::write(devices.join(format!("{pid}-0.rec")), format!("{owner}loop\n{}\n", user_file.display())).unwrap();
    std::fs::write(
        devices.join(format!("{pid}-1.rec")),
        format!("{owner}loop\nx:{}\n", hex(shm_file.as_os_str().as_bytes())),
    )
    .unwrap();
    let user_mnt = w.root.join("user/mnt");
    std::fs::create_dir(&user_mnt).unwrap();
    std::fs::write(
        devices.join(format!("{pid}-2.rec")),
        format!("{owner}mount\n{}\n{}\n", user_mnt.display(), user_file.display()),
    )
    .unwrap();
    let record = serde_json::json!({
        "pid": pid, "spec": "emu:nvme", "dir": user_mnt, "work": devices.join(format!("m-{pid}-1")),
        "fuse_mount": null, "backing": user_file, "loop_device": dev, "ext4_mounted": true, "state": "ready",
    });
    std::fs::write(devices.join(format!("m-{pid}-1.json")), record.to_string()).unwrap();

    let out = w.run(&["cleanup"]);
    let said = text(&out);
    let attached = loop_backing(&dev);
    let shm_attached = shm_dev.as_deref().and_then(loop_backing);
    // Undo what the test made before asserting.
    losetup_detach(&dev);
    if let Some(d) = &shm_dev {
        losetup_detach(d);
    }
    let shm_kept = std::fs::read(&shm_file).map(|b| b.len());
    let _ = std::fs::remove_file(&shm_file);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(std::fs::read(&user_file).unwrap(), vec![0x42u8; 1 << 20], "the user's file survives");
    assert_eq!(attached.as_deref(), Some(user_file.as_path()), "the user's loop device stays attached: {said}");
    assert_eq!(shm_kept.ok(), Some(1 << 20), "a /dev/shm file without the run's mark survives: {said}");
    if shm_dev.is_some() {
        assert_eq!(shm_attached.as_deref(), Some(shm_file.as_path()), "its loop device stays: {said}");
    }
    assert!(user_mnt.is_dir(), "the user's directory stays");
    assert!(said.contains("left alone"), "{said}");
    // Only its own paths: cleanup also removes, by name, what other (gone) runs left in /dev/shm.
    let own = [user_file.display().to_string(), shm_file.display().to_string(), dev.display().to_string()];
    assert!(!said.lines().any(|l| l.contains("removed") && own.iter().any(|p| l.contains(p.as_str()))), "{said}");
}

/// A record that is not UTF-8 (or not a record at all) made cleanup exit 2 and skip the
/// others. Now it is reported and skipped, and a good record beside it (naming a file whose
/// name is not UTF-8 either) is still cleaned up.
#[test]
fn an_unreadable_record_is_skipped_and_the_rest_cleaned() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new("unreadable");
    let pid = dead_pid();
    std::fs::write(w.home().join("devices/bad.rec"), b"owner\n\xff\xfe\n\x80zram\n").unwrap();
    std::fs::write(w.home().join("devices/bad.json"), b"{\"pid\": \xff").unwrap();
    std::fs::write(w.home().join("outputs/out-1-0.rec"), b"\xff\xff garbage").unwrap();
    // A temporary name a killed run left, in a directory whose name is not UTF-8.
    let odd = w.root.join(OsStr::from_bytes(b"user/\xff\xfe dir"));
    std::fs::create_dir(&odd).unwrap();
    let tmp = odd.join(format!(".r.json.smartcon-{pid}.tmp"));
    std::fs::write(&tmp, b"half").unwrap();
    let record = format!("pid {pid}\nstart 0\ntmp {}\n", hex(tmp.as_os_str().as_bytes()));
    std::fs::write(w.home().join(format!("outputs/out-{pid}-0.rec")), record).unwrap();
    let out = w.run(&["cleanup"]);
    let said = text(&out);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!tmp.exists(), "the good record's leftover is removed: {said}");
    assert!(said.contains("bad.rec") && said.contains("bad.json"), "each unreadable record is named: {said}");
    assert!(w.home().join("devices/bad.rec").exists(), "an unreadable record is left alone");
    assert!(said.lines().all(|l| !l.contains('\u{fffd}')), "names are escaped, not made lossy: {said}");
}

/// A `.smartcon-claim` a killed run left (its pid gone, or empty for a while) does not block
/// an empty `--out`; `cleanup` removes a claim a killed run recorded.
#[test]
fn a_stale_claim_does_not_block_an_empty_out_dir() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new("claim");
    let pid = dead_pid();
    for (name, claim) in
        [("dead", format!("{pid} 12345\n")), ("older-build", format!("{pid}\n")), ("empty", String::new())]
    {
        let out_dir = w.root.join("user").join(name);
        std::fs::create_dir(&out_dir).unwrap();
        let c = out_dir.join(".smartcon-claim");
        std::fs::write(&c, claim).unwrap();
        if name == "empty" {
            // Empty: a run killed between creating the claim and writing its pid. Fresh, it
            // may be a run starting right now; a minute old, it is stale.
            let r = w.run(&["emulate", "replay", "--device", "emu:nvme", "--out", out_dir.to_str().unwrap()]);
            assert_eq!(r.status.code(), Some(2), "a fresh empty claim is respected: {}", text(&r));
            let old = std::time::SystemTime::now() - Duration::from_secs(60);
            std::fs::File::options().write(true).open(&c).unwrap().set_modified(old).unwrap();
        }
        let r = w.run(&["emulate", "replay", "--device", "emu:nvme", "--out", out_dir.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(0), "{name}: {}", text(&r));
        assert!(out_dir.join("results.jsonl").is_file() && !c.exists(), "{name}: {}", text(&r));
    }
    // A live run's claim is respected: this test's own pid with its start time.
    let busy = w.root.join("user/busy");
    std::fs::create_dir(&busy).unwrap();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start = stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(19).unwrap().to_string();
    std::fs::write(busy.join(".smartcon-claim"), format!("{} {start}\n", std::process::id())).unwrap();
    let r = w.run(&["emulate", "replay", "--device", "emu:nvme", "--out", busy.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert_eq!(text(&r).trim_end().lines().count(), 1, "{}", text(&r));
    // cleanup removes a recorded claim of a dead run, and nothing of a live one.
    let stale = w.root.join("user/stale");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join(".smartcon-claim"), format!("{pid} 1\n")).unwrap();
    let record = format!("pid {pid}\nstart 1\nclaim {}\n", hex(stale.join(".smartcon-claim").as_os_str().as_bytes()));
    // (The runs above removed the records folder once it was empty.)
    std::fs::create_dir_all(w.home().join("outputs")).unwrap();
    std::fs::write(w.home().join(format!("outputs/out-{pid}-0.rec")), record).unwrap();
    let r = w.run(&["cleanup"]);
    assert!(!stale.join(".smartcon-claim").exists(), "{}", text(&r));
    assert!(busy.join(".smartcon-claim").exists(), "{}", text(&r));
}

/// A stale zram record must not remove a device someone else made since with the same id
/// (the issue: one of disksize 0 was removed), nor one of another size; the recorded size,
/// unused, is removed.
#[test]
fn a_stale_zram_record_removes_only_the_recorded_size() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    if !root() {
        eprintln!("skipped: zram devices need root");
        return;
    }
    let control = Path::new("/sys/class/zram-control/hot_add");
    if !control.exists() {
        let _ = Command::new("modprobe").arg("zram").status();
    }
    let Ok(id) = std::fs::read_to_string(control) else {
        eprintln!("skipped: zram is not available (modprobe zram)");
        return;
    };
    let id: u32 = id.trim().parse().unwrap();
    let sys = format!("/sys/block/zram{id}");
    let w = World::new("zram");
    let pid = dead_pid();
    let record = |size: u64| format!("owner\n{pid}\n0\nzram\n{id}\n{size}\n");
    let rec = w.home().join(format!("devices/{pid}-0.rec"));
    // Size 0 (not set up yet, by whoever made it): kept.
    std::fs::write(&rec, record(64 << 20)).unwrap();
    let zero = w.run(&["cleanup"]);
    let kept_zero = Path::new(&sys).exists();
    // 32 MiB against a record of 64 MiB: kept.
    let sized = std::fs::write(format!("{sys}/disksize"), (32u64 << 20).to_string()).is_ok();
    let other = w.run(&["cleanup"]);
    let kept_other = Path::new(&sys).exists();
    // The recorded size, unused: removed.
    std::fs::write(&rec, record(32 << 20)).unwrap();
    let same = w.run(&["cleanup"]);
    let removed = !Path::new(&sys).exists();
    if !removed {
        let _ = std::fs::write(format!("{sys}/reset"), "1");
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", id.to_string());
    }
    eprintln!("{}\n{}\n{}", text(&zero), text(&other), text(&same));
    assert!(kept_zero, "a zram device of size 0 is not the recorded one: {}", text(&zero));
    assert!(sized, "could not size zram{id}");
    assert!(kept_other, "a zram device of another size is kept: {}", text(&other));
    assert!(removed, "the recorded size, unused, is removed: {}", text(&same));
}

/// Why a test that makes loop file systems cannot run here, if it cannot.
fn loop_fs_skip_reason() -> Option<&'static str> {
    if !root() {
        return Some("loop devices and mounts need root");
    }
    if Command::new("mkfs.ext4").arg("-V").output().is_err()
        || Command::new("losetup").arg("--version").output().is_err()
    {
        return Some("mkfs.ext4 (e2fsprogs) or losetup (mount) is not installed");
    }
    None
}

fn mounted(dir: &Path) -> bool {
    let text = std::fs::read("/proc/self/mounts").unwrap_or_default();
    text.split(|&b| b == b'\n').any(|l| l.split(|&b| b == b' ').nth(1) == Some(dir.as_os_str().as_bytes()))
}

/// A loop file system made with TMPDIR not UTF-8, killed with SIGKILL: the record keeps the
/// mount point byte for byte, so cleanup unmounts it and removes the loop device and file
/// (a lossy record reported success and left both).
#[test]
fn a_loop_file_system_under_a_non_utf8_tmpdir_is_cleaned_after_kill() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = loop_fs_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let w = World::new("tmpdir");
    let tmpdir = w.root.join(OsStr::from_bytes(b"tmp/\xff\xfe"));
    std::fs::create_dir(&tmpdir).unwrap();
    let args: Vec<&OsStr> =
        ["evaluate", "--targets", "loopfs:32m", "--tiny", "--skip-polling", "--out"].iter().map(OsStr::new).collect();
    let out_dir = w.root.join("user/report");
    let mut c = w.command(&args);
    c.arg(&out_dir).env("TMPDIR", &tmpdir).process_group(0);
    let mut child = c.spawn().unwrap();
    let pid = child.id();
    // Until its file system is mounted under TMPDIR (bounded).
    let up = Instant::now();
    let mount_point = || {
        std::fs::read_dir(&tmpdir).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| n.as_bytes().starts_with(format!("smartcon-loopfs-{pid}").as_bytes()))
                && mounted(p)
        })
    };
    let mut point = None;
    while point.is_none() && up.elapsed() < Duration::from_secs(60) && child.try_wait().unwrap().is_none() {
        point = mount_point();
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = child.wait();
    let Some(point) = point else {
        eprintln!("skipped: the loop file system did not come up");
        let _ = w.run(&["cleanup"]);
        return;
    };
    let out = w.run(&["cleanup"]);
    let said = text(&out);
    eprintln!("{said}");
    let backing_left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("smartcon-loop-{pid}-")))
        .collect();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!mounted(&point), "the ext4 mount is gone: {said}");
    assert!(!point.exists(), "its directory is gone: {said}");
    assert!(backing_left.is_empty(), "the backing file is gone: {backing_left:?}");
    assert!(!out_dir.exists(), "the claimed report directory is gone: {said}");
    let left: Vec<_> = std::fs::read_dir(w.home().join("devices")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "no record left: {left:?}");
}

/// Two `emulate mount` on one directory at once: one mounts, the other gets one line and
/// exit 2, leaving nothing; a non-empty directory is refused without `--force`.
#[test]
fn emulate_mount_locks_its_directory_and_refuses_a_non_empty_one() {
    let _scan = BY_NAME.read().unwrap_or_else(|e| e.into_inner());
    if !root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: emulate mount needs root and /dev/fuse");
        return;
    }
    let w = World::new("mountlock");
    let full = w.root.join("user/full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("mine.txt"), b"keep").unwrap();
    let r = w.run(&["emulate", "mount", "emu:nvme", full.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert_eq!(text(&r).trim_end().lines().count(), 1, "{}", text(&r));
    assert!(text(&r).contains("--force"), "{}", text(&r));
    assert!(!mounted(&full) && std::fs::read(full.join("mine.txt")).unwrap() == b"keep");

    let dir = w.root.join("user/mnt");
    std::fs::create_dir(&dir).unwrap();
    let spawn = || {
        let mut c = w.command(&[OsStr::new("emulate"), OsStr::new("mount"), OsStr::new("emu:nvme"), dir.as_os_str()]);
        c.process_group(0);
        c.spawn().unwrap()
    };
    let mut a = spawn();
    let mut b = spawn();
    // One of them is refused at once; the other comes up (bounded).
    let up = Instant::now();
    let (mut winner, loser_status, loser_out) = loop {
        if let Some(s) = a.try_wait().unwrap() {
            break (b, s, a.wait_with_output().unwrap());
        }
        if let Some(s) = b.try_wait().unwrap() {
            break (a, s, b.wait_with_output().unwrap());
        }
        assert!(up.elapsed() < Duration::from_secs(60), "neither mount was refused");
        std::thread::sleep(Duration::from_millis(20));
    };
    while !mounted(&dir) && up.elapsed() < Duration::from_secs(60) && winner.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let came_up = mounted(&dir);
    // A third, once it is mounted: refused by the record.
    let third = w.run(&["emulate", "mount", "emu:nvme", dir.to_str().unwrap()]);
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(winner.id() as i32, libc::SIGINT) };
    let end = Instant::now();
    while winner.try_wait().unwrap().is_none() && end.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = winner.kill();
    let _ = winner.wait();
    let loser_said =
        format!("{}{}", String::from_utf8_lossy(&loser_out.stdout), String::from_utf8_lossy(&loser_out.stderr));
    let left: Vec<_> = std::fs::read_dir(w.home().join("devices")).unwrap().flatten().map(|e| e.file_name()).collect();
    if !left.is_empty() || mounted(&dir) {
        let _ = w.run(&["cleanup"]);
    }
    eprintln!("second: {loser_said}third: {}", text(&third));
    assert_eq!(loser_status.code(), Some(2), "{loser_said}");
    assert_eq!(loser_said.trim_end().lines().count(), 1, "{loser_said}");
    assert!(came_up, "the first mount came up");
    assert_eq!(third.status.code(), Some(2), "{}", text(&third));
    assert_eq!(text(&third).trim_end().lines().count(), 1, "{}", text(&third));
    assert!(left.is_empty() && !mounted(&dir), "nothing left: {left:?}");
}

/// A process's start time in clock ticks (field 22 of /proc/PID/stat).
fn start_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// A run that is over, with the start time its owner marks would hold.
fn gone_run() -> (u32, u64) {
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = child.id();
    let start = start_ticks(pid).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    (pid, start)
}

/// Writes the owner mark smartcon writes beside a scratch path: `.NAME.smartcon-owner`.
fn mark(path: &Path, pid: u32, start: u64) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap());
    name.push(".smartcon-owner");
    let mark = path.with_file_name(name);
    std::fs::write(&mark, format!("{pid} {start}\n")).unwrap();
    mark
}

/// Makes `path` look an hour old, as a leftover of a run killed long ago: cleanup takes
/// leftovers by name only once they are a minute old.
fn age(path: &Path) {
    let then = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(path).unwrap().set_modified(then).unwrap();
}

/// A killed run whose SMARTCON_HOME was deleted leaves no record (the review's loopfs
/// leftovers of pids 2345 and 2541): cleanup finds what it left by smartcon's own names with
/// the gone run's pid, and leaves alone the same names of a live run, a gone pid's name
/// without its mark, a mark naming another pid, and a name that is not smartcon's.
#[test]
fn leftovers_without_a_record_are_found_by_their_names() {
    let _scan = BY_NAME.write().unwrap_or_else(|e| e.into_inner());
    let w = World::new("byname");
    let tmp = w.root.join("tmp");
    let (gone, gone_start) = gone_run();
    let me = std::process::id();
    let my_start = start_ticks(me).unwrap();
    // A directory or a file in TMPDIR (or an absolute path), made now.
    let dir = |name: String| {
        let p = tmp.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let file = |name: String| {
        let p = tmp.join(name);
        std::fs::write(&p, b"data").unwrap();
        p
    };
    // The gone run's: a sweep's tree and a tmp: target's file with their marks, crosscheck's
    // unmarked directory, an empty mount directory, a loop ramdisk's file with its mark.
    let sweep = dir(format!("smartcon-sweep-{gone}"));
    std::fs::create_dir_all(sweep.join("tree/a")).unwrap();
    std::fs::write(sweep.join("tree/a/f"), b"x").unwrap();
    let sweep_mark = mark(&sweep, gone, gone_start);
    let target = file(format!("smartcon-{gone}-77.tmp"));
    mark(&target, gone, gone_start);
    let cross = dir(format!("smartcon-crosscheck-{gone}"));
    std::fs::write(cross.join("trace.sct"), b"t").unwrap();
    let mount_dir = dir(format!("smartcon-loopfs-{gone}-5"));
    let image = file(format!("/dev/shm/smartcon-loop-{gone}-424242.img"));
    let image_mark = mark(&image, gone, gone_start);
    // A run that had this test's pid before it: its mark holds another start time.
    let reused = file(format!("smartcon-run-{me}.jsonl"));
    mark(&reused, me, my_start + 1);
    // To keep: a live run's (this test's) names, marked or not.
    let live_sweep = dir(format!("smartcon-sweep-{me}"));
    mark(&live_sweep, me, my_start);
    let live_cross = dir(format!("smartcon-crosscheck-{me}"));
    let live_mount_dir = dir(format!("smartcon-loopfs-{me}-5"));
    let live_image = file(format!("/dev/shm/smartcon-loop-{me}-424242.img"));
    let live_image_mark = mark(&live_image, me, my_start);
    // To keep: a gone pid's names without proof (no mark; a mark naming another pid), and a
    // name that is not smartcon's.
    let unmarked = file(format!("smartcon-run-{gone}.jsonl"));
    let other = dead_pid();
    assert_ne!(other, gone);
    let misnamed = dir(format!("smartcon-vmsweep-{gone}"));
    mark(&misnamed, other, 1);
    let users = file(format!("notes-{gone}"));
    mark(&users, gone, gone_start);
    // All of it old, the live run's too (it is kept for being alive, not for being new).
    let shm = [&image, &image_mark, &live_image, &live_image_mark];
    std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .chain(shm.iter().map(|p| p.to_path_buf()))
        .for_each(|p| age(&p));

    let out = w.run(&["cleanup"]);
    let said = text(&out);
    let live_image_kept = live_image.exists() && live_image_mark.exists();
    // Undo what the test made outside its world before asserting.
    for p in [&live_image, &live_image_mark, &image, &image_mark] {
        let _ = std::fs::remove_file(p);
    }
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(0), "{said}");
    for p in [&sweep, &sweep_mark, &target, &cross, &mount_dir, &reused] {
        assert!(std::fs::symlink_metadata(p).is_err(), "{} is removed: {said}", p.display());
    }
    assert!(said.contains(&format!("removed file {}", image.display())), "{said}");
    assert!(live_image_kept, "a live run's loop file and its mark stay: {said}");
    for p in [&live_sweep, &live_cross, &live_mount_dir, &unmarked, &misnamed, &users] {
        assert!(p.exists(), "{} is kept: {said}", p.display());
    }
}

/// The review's leftover itself, as root: an ext4 file system on a loop device over a gone
/// run's /dev/shm file, mounted on `smartcon-loopfs-PID-N`, with no record anywhere: cleanup
/// unmounts it, detaches the device and removes the file. A user's loop device mounted on a
/// directory of the same shape is left mounted.
#[test]
fn a_gone_runs_loop_file_system_without_a_record_is_removed() {
    let _scan = BY_NAME.write().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = loop_fs_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let w = World::new("byname-root");
    let tmp = w.root.join("tmp");
    let (gone, gone_start) = gone_run();
    let image = PathBuf::from(format!("/dev/shm/smartcon-loop-{gone}-1.img"));
    let image_mark = mark(&image, gone, gone_start);
    let users = w.root.join("user/u.img");
    let made = |file: &Path, dir: &Path| -> Option<PathBuf> {
        std::fs::File::create(file).ok()?.set_len(32 << 20).ok()?;
        let dev = losetup_attach(file)?;
        let ok = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&dev).status().is_ok_and(|s| s.success())
            && std::fs::create_dir(dir).is_ok()
            && Command::new("mount").arg(&dev).arg(dir).status().is_ok_and(|s| s.success());
        if !ok {
            losetup_detach(&dev);
            return None;
        }
        Some(dev)
    };
    let mount_dir = tmp.join(format!("smartcon-loopfs-{gone}-1"));
    let users_dir = tmp.join(format!("smartcon-loopfs-{gone}-2"));
    let (Some(dev), Some(users_dev)) = (made(&image, &mount_dir), made(&users, &users_dir)) else {
        for d in [&mount_dir, &users_dir] {
            let _ = Command::new("umount").arg(d).status();
        }
        let _ = w.run(&["cleanup"]);
        let _ = std::fs::remove_file(&image);
        let _ = std::fs::remove_file(&image_mark);
        eprintln!("skipped: could not make the loop file systems here");
        return;
    };
    age(&image_mark);
    let out = w.run(&["cleanup"]);
    let said = text(&out);
    let (mounted_after, attached_after) = (mounted(&mount_dir), loop_backing(&dev));
    let users_mounted = mounted(&users_dir);
    // Undo what is left before asserting.
    for d in [&users_dir, &mount_dir] {
        if mounted(d) {
            let _ = Command::new("umount").arg(d).status();
        }
    }
    losetup_detach(&users_dev);
    if attached_after.is_some() {
        losetup_detach(&dev);
    }
    let image_left = image.exists() || image_mark.exists();
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&image_mark);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!mounted_after && !mount_dir.exists(), "the gone run's mount and directory are gone: {said}");
    assert_ne!(attached_after.as_deref(), Some(image.as_path()), "its loop device is detached: {said}");
    assert!(!image_left, "its file and mark are removed: {said}");
    assert!(users_mounted, "a user's loop device on a look-alike directory stays mounted: {said}");
    assert!(said.contains("left alone"), "{said}");
}
