//! `smartcon emulate vm`: a whole operating system on an emulated device (the first system
//! of the fifth seed: a real OS, with its file system, page cache, journal and I/O
//! scheduler, on a virtual device), built on User-Mode Linux.
//!
//! Design: Debian's `linux.uml` is an ordinary dynamically linked host program, so the
//! preload library reaches it. The guest's root is the host's own root on hostfs, read-only
//! (the guest runs the host's tar, wc, fio); its one block device `/dev/ubda` is the image
//! file, which UML's ubd helper thread reads and writes with `pread64`/`pwrite64`/`fsync`:
//! the library serves each of those from the device model (`crate::sweep::emulate_env`),
//! in real time (the seed's reference system) or in virtual time, where UML's clock, its
//! timer and its idle wait are the library's ([`smartcon_preload`'s `vclock`]). The guest
//! runs a generated `/bin/sh` init: it mounts proc, sysfs, devtmpfs, a tmpfs on /tmp and
//! this run's working directory (hostfs, read-write, at `/tmp/.smartcon`), sets the
//! scheduler, mounts the device at /mnt (`--fs ext4`), runs CMD there with its clock read
//! before and after, writes CMD's status, the two instants and /proc/stat's CPU lines to
//! the working directory, syncs, unmounts and powers off.
//!
//! What this run creates: the working directory (init script, result, UML's `uml_dir`,
//! UML's memory file under TMPDIR, a temporary image unless `--image`), and UML's
//! processes, all in one process group this module starts. Both are written down first
//! ([`VmRecord`] under `$SMARTCON_HOME/vms`), ended on exit, error and interrupt, and
//! `smartcon cleanup` ends a group whose leader is still the recorded linux.uml and
//! removes the directory after a SIGKILL.
//!
//! Non-goals: more than one device, networking, a guest root other than the host's, and
//! formatting the image through the model (mkfs runs on the host, at host speed, before boot).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_preload_contract::env::{EmulateEnv, PreloadEnv};
use smartcon_preload_contract::launch::Launch;

use crate::sweep::{self, EmuTotals};

/// The schedulers the guest kernel offers for `/dev/ubda` (bfq is a module it loads).
pub const SCHEDULERS: [&str; 4] = ["none", "mq-deadline", "bfq", "kyber"];
/// Guest memory (MiB): enough for a page cache that matters, small enough for a shared host.
pub const GUEST_MEM_MIB_DEFAULT: u64 = 256;
/// The image size when neither `--size` nor the spec's `size=` gives one.
pub const IMAGE_BYTES_DEFAULT: u64 = 1 << 30;
/// How long an ended guest's processes get to exit after SIGKILL before the run gives up.
const KILL_WAIT_MS_MAX: u64 = 5_000;

/// Kernel parameters that skip start-up work the guest never uses: the raid6 algorithm
/// benchmark and the legacy pty devices.
pub const BOOT_TRIMS: [&str; 2] = ["initcall_blacklist=raid6_select_algo", "pty.legacy_count=0"];

/// The seed's accuracy criterion: a request within 2% of its model time.
pub const WITHIN_PPM: u64 = 20_000;

/// Where the guest's working directory appears inside it.
const GUEST_WORK: &str = "/tmp/.smartcon";

/// The file system on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fs {
    Ext4,
    None,
}

/// What the guest's virtual clock moves with while the guest runs (`--guest-clock`); it
/// jumps over idle time either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestClock {
    /// The CPU time of UML's kernel process and its guest processes (the guest's one CPU
    /// busy), whatever else the host runs: the default.
    Cpu,
    /// The wall clock (the host's load shows up as guest time).
    Wall,
}

/// The niceness UML's processes ask for on the host: first on its CPUs, so that other
/// programs' load stays out of the real-time reference as far as the host allows. Also
/// the nice of UML's own autogroup (its session), what counts against other sessions.
pub const GUEST_NICE: i32 = -20;
/// UML's processes run on one host CPU in both modes (the last the caller may use; UML is
/// a uniprocessor, so its kernel and guest processes hand over to each other on one CPU
/// instead of waking an idle one: pinned, the reference used a third of the CPU time and
/// its guest time fell 18-23%, docs/vm.md; the guest CPU clock of virtual time counts that
/// CPU time, so it is pinned too, to be measured the same way). The real-time reference's
/// processes also run in the host's round-robin real-time class at
/// this (the lowest) priority, when allowed (root): on this kernel (EEVDF) a woken task at
/// nice -20 in an autogroup at -20 still waited for the running one, and UML wakes one of
/// its processes at every guest system call and page fault (a ptrace round trip), so the
/// reference's processes waited 3.1 s for host CPUs beside 1.5 s of CPU (load 24); in the
/// real-time class, 0.08 s (docs/vm.md). The kernel's real-time throttling (95% of each
/// CPU by default) leaves the host's other programs their share. Virtual time does not
/// need it: its guest clock counts CPU time, whatever the host's load.
pub const REFERENCE_RR_PRIORITY: i32 = 1;
/// [`GUEST_NICE`] as written to `/proc/self/autogroup`.
const AUTOGROUP_NICE_TEXT: &[u8] = b"-20";

/// What to run.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// `emu:PRESET[,key=value...]`, with `size=` when `--size` was given.
    pub spec: String,
    pub fs: Fs,
    pub scheduler: Option<String>,
    /// A kept image (created when missing); None: a temporary one, removed at the end.
    pub image: Option<PathBuf>,
    pub virtual_time: bool,
    /// Guest CPU time is divided by this in virtual time (1: the host's speed).
    pub cpu_speed: f64,
    /// What the guest's virtual clock moves with while the guest runs.
    pub guest_clock: GuestClock,
    pub command: Vec<OsString>,
    /// libsmartcon.so.
    pub library: PathBuf,
    pub kernel: PathBuf,
    pub mem_mib: u64,
    /// The working directory's parent (TMPDIR).
    pub tmp_dir: PathBuf,
    /// Host files linked (else copied) into the working directory before boot: the guest
    /// sees them in `$SMARTCON_VM_WORK` (what a sweep's command reads, e.g. its archive).
    pub inputs: Vec<PathBuf>,
    /// Shell text the guest runs in /mnt before CMD, outside CMD's time (a file to read).
    pub prepare: Option<String>,
    /// The guest's console (CMD's output) goes to /dev/null instead of smartcon's stdout.
    pub quiet_console: bool,
}

/// What one guest run measured.
#[derive(Debug, Clone, Serialize)]
pub struct VmResult {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub spec: String,
    pub virtual_time: bool,
    pub cpu_speed: f64,
    /// What the virtual clock moved with while the guest ran (None in real time).
    pub guest_clock: Option<GuestClock>,
    pub fs: Fs,
    pub scheduler: Option<String>,
    pub command: Vec<String>,
    /// CMD's exit status in the guest (128 + N after signal N).
    pub exit_code: i32,
    /// CMD's duration by the guest's own clock (virtual time under --virtual-time).
    pub guest_ns: u64,
    /// The whole run's wall time (boot, CMD, shutdown).
    pub wall_ns: u64,
    /// Wall time from start until the guest's init started CMD.
    pub boot_wall_ns: u64,
    /// Wall time while CMD ran (from the guest's start mark to its end mark, host-observed).
    pub command_wall_ns: u64,
    /// guest_ns / command_wall_ns: how much faster than real time the guest ran CMD.
    pub speedup: f64,
    /// The guest CPU's busy share while CMD ran (from its /proc/stat: not idle, not iowait).
    pub guest_cpu_utilization: f64,
    /// The device's requests (all of the run: boot, CMD, shutdown).
    pub device: EmuTotals,
    /// The device's time over the guest's CMD time (requests of the whole run).
    pub device_share: f64,
    /// The share of the device's requests that came back to the guest's ubd thread within
    /// 2% of their model time after the model's instant (the seed's criterion; the
    /// histogram is `device.lateness`); None when none were served.
    pub within_2pct: Option<f64>,
    /// The niceness UML's processes ran at on the host ([`GUEST_NICE`] when allowed, i.e.
    /// as root; else the caller's).
    pub host_nice: Option<i32>,
    /// The nice of UML's autogroup on the host (its own session's: [`GUEST_NICE`] when
    /// allowed), what weighs against other sessions' load; None without autogroups.
    pub host_autogroup_nice: Option<i32>,
    /// UML's processes ran in the host's round-robin real-time class
    /// ([`REFERENCE_RR_PRIORITY`]): the real-time reference, as root.
    pub host_round_robin: bool,
    /// The one host CPU UML's processes were pinned to (in both modes); None: not pinned.
    pub host_cpu: Option<u32>,
    /// What CMD left in `$SMARTCON_VM_WORK/output` (a sweep's fio JSON), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// A run's record, written before anything is created.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    /// The smartcon process.
    pub owner_pid: u32,
    /// linux.uml's pid, also its process group's id (0 before it starts).
    pub pid: u32,
    /// Its start time (field 22 of /proc/PID/stat), so a reused pid is not taken for it.
    pub start_ticks: u64,
    pub work: PathBuf,
}

/// `$SMARTCON_HOME/vms`.
pub fn records_dir() -> PathBuf {
    smartcon_engine::profile::smartcon_home().join("vms")
}

fn record_file(work: &Path) -> PathBuf {
    let name = work.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    records_dir().join(format!("{name}.json"))
}

impl VmRecord {
    fn save(&self) -> Result<(), Error> {
        let dir = records_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(ErrorKind::Setup, &dir, e))?;
        let path = record_file(&self.work);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("vm record: {e}")))?;
        std::fs::write(&tmp, text).map_err(|e| Error::io(ErrorKind::Setup, &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(ErrorKind::Setup, &path, e))
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(record_file(&self.work));
    }
}

/// Field 22 (start time) and the executable of a live, non-zombie process.
fn process_identity(pid: u32) -> Option<(u64, PathBuf)> {
    let stat = smartcon_util::procfs::process_stat(pid).filter(|s| s.is_alive())?;
    let start = stat.start_ticks;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    Some((start, exe))
}

/// Whether any process of group `pgid` is left.
fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks; a negative pid names the group.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

/// Kills every process of group `pgid` and waits (bounded) until none is left.
fn kill_group(pgid: u32) -> bool {
    // SAFETY: the group is ours (its leader is our child, not yet reaped, or was checked
    // against its record); a group id stays reserved while any member lives.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
    for _ in 0..KILL_WAIT_MS_MAX / 10 {
        if !group_alive(pgid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Ends what killed `emulate vm` runs left: a group whose leader is still the recorded
/// linux.uml (same start time), then the working directory. One line per record.
pub fn cleanup() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(records_dir()) else { return Vec::new() };
    let mut out = Vec::new();
    for path in entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")) {
        let Some(record) = std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<VmRecord>(&t).ok())
        else {
            continue;
        };
        if process_identity(record.owner_pid).is_some() {
            out.push(format!("{}: smartcon pid {} is still running it", record.work.display(), record.owner_pid));
            continue;
        }
        let mut line = format!("{}: removed", record.work.display());
        if record.pid != 0 && process_identity(record.pid).is_some_and(|(start, _)| start == record.start_ticks) {
            if kill_group(record.pid) {
                line.push_str(&format!(" the guest (linux.uml pid {} and its group),", record.pid));
            } else {
                out.push(format!("{}: guest pid {} did not end after SIGKILL", record.work.display(), record.pid));
                continue;
            }
        }
        if record.work.file_name().is_some_and(|n| n.to_string_lossy().starts_with("smartcon-vm-")) {
            let _ = std::fs::remove_dir_all(&record.work);
        }
        line.push_str(" its working directory");
        let _ = std::fs::remove_file(&path);
        out.push(line);
    }
    out
}

/// linux.uml on PATH (or /usr/bin), or one line saying how to install it.
pub fn find_kernel() -> Result<PathBuf, Error> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("linux.uml"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Setup,
                "linux.uml (User-Mode Linux) is not installed: apt-get install user-mode-linux".to_string(),
            )
        })
}

/// One shell word, single-quoted.
fn quote(arg: &[u8]) -> String {
    let text = String::from_utf8_lossy(arg);
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The guest's init script.
fn init_script(opts: &VmOptions, work: &Path) -> String {
    let command: Vec<String> = opts.command.iter().map(|a| quote(a.as_bytes())).collect();
    let work_q = quote(work.as_os_str().as_bytes());
    let sched = match opts.scheduler.as_deref() {
        None => String::new(),
        Some("bfq") => "grep -qw bfq /sys/block/ubda/queue/scheduler || insmod \"$(find /usr/lib/uml/modules/$(uname -r) -name bfq.ko | head -n 1)\" || fail 'cannot load the bfq module (insmod is the host'\\''s: apt-get install kmod)'\n\
                        echo bfq > /sys/block/ubda/queue/scheduler || fail 'cannot set scheduler bfq'\n"
            .to_string(),
        Some(s) => format!("echo {s} > /sys/block/ubda/queue/scheduler || fail 'cannot set scheduler {s}'\n"),
    };
    let mount = match opts.fs {
        Fs::Ext4 => "mount -t ext4 /dev/ubda /mnt || fail 'cannot mount /dev/ubda (ext4) at /mnt'\n",
        Fs::None => "",
    };
    let umount = match opts.fs {
        Fs::Ext4 => "umount /mnt || echo 'smartcon vm: umount /mnt failed' >&2\n",
        Fs::None => "",
    };
    format!(
        "#!/bin/sh\n\
         # smartcon emulate vm: the guest's init (generated; removed with the run).\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb\n\
         W={GUEST_WORK}; export SMARTCON_VM_WORK=$W\n\
         off() {{ sync; poweroff -f -f >/dev/null 2>&1; echo o > /proc/sysrq-trigger; }}\n\
         fail() {{ echo \"$1\" > $W/setup-error; off; }}\n\
         mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null\n\
         # The console passes CMD's bytes as they are (no \\n to \\r\\n).\n\
         stty -opost 2>/dev/null\n\
         mount -t tmpfs tmp /tmp && mkdir -p $W && mount -t hostfs none $W -o {work_q} || {{ echo 'smartcon vm: cannot mount the working directory' >&2; off; }}\n\
         {sched}{mount}cd /mnt || fail 'cannot enter /mnt'\n\
         {prepare}\
         date +%s%N > $W/started\n\
         s0=$(date +%s%N); c0=$(head -n 1 /proc/stat)\n\
         {cmd} </dev/null\n\
         st=$?\n\
         s1=$(date +%s%N); c1=$(head -n 1 /proc/stat)\n\
         echo \"$st\" > $W/ended\n\
         cd /\n\
         sync\n\
         {umount}printf '%s\\n' \"$st\" \"$s0\" \"$s1\" \"$c0\" \"$c1\" > $W/result.tmp && mv $W/result.tmp $W/result\n\
         off\n",
        cmd = command.join(" "),
        prepare = match &opts.prepare {
            Some(p) => format!("( {p} ) </dev/null || fail 'the preparation before CMD failed'\n"),
            None => String::new(),
        },
    )
}

/// user+nice+system+irq+softirq+steal and the total of a /proc/stat `cpu` line.
fn cpu_busy_total(line: &str) -> Option<(u64, u64)> {
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

/// The guest's result file: status, start and end instants (ns), and two /proc/stat lines.
struct GuestResult {
    exit_code: i32,
    guest_ns: u64,
    cpu_utilization: f64,
}

fn parse_result(text: &str) -> Option<GuestResult> {
    let lines: Vec<&str> = text.lines().collect();
    let exit_code = lines.first()?.trim().parse().ok()?;
    let s0: u64 = lines.get(1)?.trim().parse().ok()?;
    let s1: u64 = lines.get(2)?.trim().parse().ok()?;
    let (b0, t0) = cpu_busy_total(lines.get(3)?)?;
    let (b1, t1) = cpu_busy_total(lines.get(4)?)?;
    let cpu_utilization = if t1 > t0 { (b1.saturating_sub(b0)) as f64 / (t1 - t0) as f64 } else { 0.0 };
    Some(GuestResult { exit_code, guest_ns: s1.saturating_sub(s0), cpu_utilization })
}

/// The image: the kept one (created sparse and formatted when missing) or a temporary one
/// in `work`. Returns its path.
fn prepare_image(opts: &VmOptions, work: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf, Error> {
    let (path, existing) = match &opts.image {
        Some(p) => {
            let existing = p.exists();
            sweep::prepare_image(&opts.spec, p)?;
            (p.clone(), existing)
        }
        None => {
            let p = work.join("disk.img");
            sweep::prepare_image(&opts.spec, &p)?;
            (p, false)
        }
    };
    if opts.fs == Fs::Ext4 && !existing {
        say(&format!("formatting {} (ext4, on the host)", path.display()));
        // Inode tables and journal written now, so no lazy-init thread writes them in the
        // guest while CMD is measured.
        let out = std::process::Command::new("mkfs.ext4")
            .args(["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&path)
            .output()
            .map_err(|e| Error::new(ErrorKind::Setup, format!("mkfs.ext4: {e} (apt-get install e2fsprogs)")))?;
        if !out.status.success() {
            return Err(Error::new(
                ErrorKind::Setup,
                format!("mkfs.ext4 {}: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim()),
            ));
        }
    }
    Ok(path)
}

/// Boots the guest, runs CMD, and returns what it measured. `say` gets progress lines;
/// `stop` (Ctrl-C) ends the guest. Everything created is removed before returning.
pub fn run_vm(opts: &VmOptions, stop: &AtomicBool, say: &mut dyn FnMut(&str)) -> Result<VmResult, Error> {
    if !(opts.cpu_speed > 0.0 && opts.cpu_speed.is_finite()) {
        return Err(Error::new(ErrorKind::Usage, format!("--cpu-speed {}: must be above 0", opts.cpu_speed)));
    }
    if let Some(s) = &opts.scheduler {
        if !SCHEDULERS.contains(&s.as_str()) {
            return Err(Error::new(ErrorKind::Usage, format!("--scheduler {s}: use one of {}", SCHEDULERS.join(", "))));
        }
    }
    let work = opts.tmp_dir.join(format!("smartcon-vm-{}", std::process::id()));
    let mut record = VmRecord { owner_pid: std::process::id(), work: work.clone(), ..VmRecord::default() };
    record.save()?;
    let r = std::fs::create_dir(&work)
        .map_err(|e| Error::io(ErrorKind::Setup, &work, e))
        .and_then(|()| boot(opts, &work, &mut record, stop, say));
    if record.pid != 0 && group_alive(record.pid) && !kill_group(record.pid) {
        say(&format!("guest pid {} did not end; `smartcon cleanup` ends it", record.pid));
        return r;
    }
    let _ = std::fs::remove_dir_all(&work);
    record.remove();
    r
}

fn boot(
    opts: &VmOptions,
    work: &Path,
    record: &mut VmRecord,
    stop: &AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<VmResult, Error> {
    let image = prepare_image(opts, work, say)?;
    for input in &opts.inputs {
        let name = input
            .file_name()
            .ok_or_else(|| Error::new(ErrorKind::Usage, format!("vm input {}: not a file name", input.display())))?;
        let to = work.join(name);
        if std::fs::hard_link(input, &to).is_err() {
            std::fs::copy(input, &to).map_err(|e| Error::io(ErrorKind::Setup, input, e))?;
        }
    }
    let init = work.join("init");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&init, init_script(opts, work)).map_err(|e| Error::io(ErrorKind::Setup, &init, e))?;
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(ErrorKind::Setup, &init, e))?;
    }
    let stats = work.join("emu.jsonl");
    let mut cmd = std::process::Command::new(&opts.kernel);
    cmd.arg(format!("mem={}M", opts.mem_mib))
        .args(["rootfstype=hostfs", "rootflags=/", "ro"])
        .arg(format!("init={}", init.display()))
        .arg(format!("ubd0={}", image.display()))
        .args(["con0=null,fd:1", "con=null", "ssl=null", "quiet", "loglevel=0"])
        // Boot time (docs/vm.md, measured with initcall_debug): the kernel's raid6
        // benchmark (for btrfs's RAID 5/6, never used here) took 0.85 s and the 256 legacy
        // BSD ptys' setup 0.68 s of a 2.1 s boot.
        .args(BOOT_TRIMS)
        .arg(format!("uml_dir={}", work.display()))
        .arg(format!("umid=smartcon-vm-{}", std::process::id()));
    let emulate = EmulateEnv {
        cpu_speed: Some(opts.cpu_speed),
        cpu_clock: opts.guest_clock == GuestClock::Cpu,
        ..sweep::emulate_env(&opts.spec, &image, opts.virtual_time, &stats)
    };
    Launch { library: opts.library.clone(), env: PreloadEnv { emulate: Some(emulate), ..Default::default() } }
        .apply(&mut cmd);
    cmd.env("TMPDIR", uml_tmp_dir(work)).stdin(std::process::Stdio::null());
    let round_robin = !opts.virtual_time;
    // The guest first on the host's CPUs: the real-time reference counts the time its
    // processes wait for a host CPU as guest time, so on a shared host other programs'
    // load shows in it (docs/vm.md). With the kernel's autogroups (Debian's default) a
    // process's nice weighs only against its own session, so UML gets a session of its
    // own (also its process group, which `kill_group` ends) and that session's autogroup
    // gets [`GUEST_NICE`] against the other sessions; within it, nice -20 too. Inherited
    // by UML's every process.
    // SAFETY: setsid, setpgid, setpriority, open, write and close are async-signal-safe
    // and touch only the child itself (its session, group, priority, and the autogroup
    // file only of the session it just made, through a descriptor closed on every path);
    // the path and the text are static; sched_setscheduler, sched_getaffinity and
    // sched_setaffinity (system calls, async-signal-safe) read and set only the child's
    // own policy and CPUs, from values on its stack (an all-zero cpu_set_t is valid).
    // A failure (not root, no autogroups, no real-time class) leaves the priority as it
    // was, which the record says (`host_nice`, `host_autogroup_nice`, `host_round_robin`);
    // the group is made by one call or the other.
    unsafe {
        cmd.pre_exec(move || {
            let own_session = libc::setsid() >= 0;
            if !own_session && libc::setpgid(0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Only a session of its own: the caller's autogroup is the caller's.
            let fd = if own_session {
                libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC)
            } else {
                -1
            };
            if fd >= 0 {
                let text = AUTOGROUP_NICE_TEXT;
                libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, GUEST_NICE);
            if round_robin {
                let param = libc::sched_param { sched_priority: REFERENCE_RR_PRIORITY };
                libc::sched_setscheduler(0, libc::SCHED_RR, &param);
            }
            // One host CPU for the uniprocessor guest, in both modes: the last one allowed.
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                if let Some(cpu) = (0..libc::CPU_SETSIZE as usize).rev().find(|&c| libc::CPU_ISSET(c, &set)) {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut one);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
                }
            }
            Ok(())
        })
    };
    if opts.quiet_console {
        cmd.stdout(std::process::Stdio::null());
    }
    say(&format!(
        "booting {} ({} MiB, root on hostfs read-only, /dev/ubda = {} on {}, {} time)",
        opts.kernel.display(),
        opts.mem_mib,
        image.display(),
        opts.spec,
        if opts.virtual_time { "virtual" } else { "real" }
    ));
    let start = std::time::Instant::now();
    let mut child = cmd.spawn().map_err(|e| Error::io(ErrorKind::Setup, &opts.kernel, e))?;
    record.pid = child.id();
    let host_nice = host_nice(record.pid);
    let host_autogroup_nice =
        std::fs::read_to_string(format!("/proc/{}/autogroup", record.pid)).ok().and_then(|t| autogroup_nice(&t));
    // SAFETY: a query of our child's policy (a pid that is ours until reaped).
    let host_round_robin = unsafe { libc::sched_getscheduler(record.pid as libc::pid_t) } == libc::SCHED_RR;
    let host_cpu = single_cpu(record.pid);
    record.start_ticks = process_identity(record.pid).map_or(0, |(s, _)| s);
    record.save()?;
    let started_mark = work.join("started");
    let mut boot_wall_ns = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::io(ErrorKind::Setup, &opts.kernel, e))? {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            kill_group(record.pid);
            let _ = child.wait();
            return Err(Error::new(ErrorKind::Interrupted, "interrupted; the guest was ended".to_string()));
        }
        if boot_wall_ns == 0 && started_mark.exists() {
            boot_wall_ns = start.elapsed().as_nanos() as u64;
            say(&format!("guest up after {:.2} s wall; running the command", boot_wall_ns as f64 / 1e9));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let wall_ns = start.elapsed().as_nanos() as u64;
    let end_mark_ns = std::fs::metadata(work.join("ended")).and_then(|m| m.modified()).ok();
    if let Ok(text) = std::fs::read_to_string(work.join("setup-error")) {
        return Err(Error::new(ErrorKind::Setup, format!("in the guest: {}", text.trim())));
    }
    let Some(guest) = std::fs::read_to_string(work.join("result")).ok().and_then(|t| parse_result(&t)) else {
        return Err(Error::new(
            ErrorKind::Setup,
            format!(
                "the guest ended ({}) without CMD's result (its console is above)",
                match (status.code(), status.signal()) {
                    (Some(c), _) => format!("linux.uml exit {c}"),
                    (_, Some(s)) => format!("linux.uml killed by signal {s}"),
                    _ => "?".into(),
                }
            ),
        ));
    };
    // The wall time CMD took: from the start mark's modification to the end mark's.
    let started_at = std::fs::metadata(&started_mark).and_then(|m| m.modified()).ok();
    let command_wall_ns = match (started_at, end_mark_ns) {
        (Some(a), Some(b)) => b.duration_since(a).map_or(0, |d| d.as_nanos() as u64),
        _ => 0,
    };
    let (_, device) = sweep::summary(&opts.spec, opts.virtual_time, &stats);
    let device_share = if guest.guest_ns > 0 { device.device_ns as f64 / guest.guest_ns as f64 } else { 0.0 };
    let within_2pct = device.lateness.share_within(WITHIN_PPM);
    let output = std::fs::read_to_string(work.join("output")).ok();
    Ok(VmResult {
        kind: "emulate_vm",
        spec: opts.spec.clone(),
        virtual_time: opts.virtual_time,
        cpu_speed: opts.cpu_speed,
        guest_clock: opts.virtual_time.then_some(opts.guest_clock),
        fs: opts.fs,
        scheduler: opts.scheduler.clone(),
        command: opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        exit_code: guest.exit_code,
        guest_ns: guest.guest_ns,
        wall_ns,
        boot_wall_ns,
        command_wall_ns,
        speedup: if command_wall_ns > 0 { guest.guest_ns as f64 / command_wall_ns as f64 } else { 0.0 },
        guest_cpu_utilization: guest.cpu_utilization,
        device,
        device_share,
        within_2pct,
        host_nice,
        host_autogroup_nice,
        host_round_robin,
        host_cpu,
        output,
    })
}

/// The niceness UML's main process runs at (asked: [`GUEST_NICE`]), from field 19 of
/// /proc/PID/stat; None when unreadable.
fn host_nice(pid: u32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..].split_ascii_whitespace().nth(16)?.parse().ok()
}

/// The CPU `pid` may run on when it is exactly one, else None.
fn single_cpu(pid: u32) -> Option<u32> {
    // SAFETY: an all-zero cpu_set_t is valid; sched_getaffinity only writes it, and
    // CPU_ISSET only reads it within CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set));
        match (cpus.next(), cpus.next()) {
            (Some(c), None) => Some(c as u32),
            _ => None,
        }
    }
}

/// The nice of `/proc/PID/autogroup`'s text ("/autogroup-42 nice -20").
fn autogroup_nice(text: &str) -> Option<i32> {
    let mut words = text.split_ascii_whitespace();
    words.find(|w| *w == "nice")?;
    words.next()?.parse().ok()
}

/// Where UML puts its memory file (created and unlinked at once, so nothing is left): a
/// tmpfs when there is one (/dev/shm), else the working directory (UML warns that guest
/// memory on a disk-backed file is slow).
#[allow(clippy::unnecessary_cast)] // f_type and the magic numbers' types differ between libcs
fn uml_tmp_dir(work: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let on_tmpfs = || {
        let c = std::ffi::CString::new("/dev/shm").ok()?;
        // SAFETY: an all-zero statfs is valid; statfs only writes it.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a valid out pointer.
        (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_type as i64 == libc::TMPFS_MAGIC as i64)
    };
    if on_tmpfs().unwrap_or(false) {
        shm.to_path_buf()
    } else {
        work.to_path_buf()
    }
}

/// The one-line summary.
pub fn summary_line(r: &VmResult) -> String {
    format!(
        "emulate vm: exit {}; CMD took {:.3} s of guest time ({}) in {:.3} s wall ({:.2} x real time); whole run {:.2} s wall (boot {:.2} s); guest CPU {:.0}% busy; {} reads, {} writes, {} flushes on {}, device time {:.3} s ({:.0}% of CMD's time); {}",
        r.exit_code,
        r.guest_ns as f64 / 1e9,
        match r.guest_clock {
            None => "real",
            Some(GuestClock::Cpu) => "virtual, guest CPU clock",
            Some(GuestClock::Wall) => "virtual, wall clock",
        },
        r.command_wall_ns as f64 / 1e9,
        r.speedup,
        r.wall_ns as f64 / 1e9,
        r.boot_wall_ns as f64 / 1e9,
        r.guest_cpu_utilization * 100.0,
        r.device.reads,
        r.device.writes,
        r.device.flushes,
        r.spec,
        r.device.device_ns as f64 / 1e9,
        r.device_share * 100.0,
        accuracy_text(r)
    )
}

/// "; the clock held at 592 requests' instants (28.1 ms of guest CPU past them, not on
/// its clock; the guest paused 212 times)": what the guest ran past a completion that
/// UML's ubd thread had not handed back yet (virtual time), which the clock does not
/// count. Empty when nothing was held.
fn held_text(l: &smartcon_preload_contract::record::LatenessRecord) -> String {
    if l.capped == 0 && l.caps_expired == 0 {
        return String::new();
    }
    let expired = if l.caps_expired > 0 {
        format!("; {} held past the 250 ms guard, which let the clock run on", l.caps_expired)
    } else {
        String::new()
    };
    format!(
        "; the clock held at {} requests' instants ({:.1} ms of guest CPU past them, not on its clock; the guest paused {} times{expired})",
        l.capped,
        l.capped_ns as f64 / 1e6,
        l.pauses
    )
}

/// "99.6% of 1,115 guest requests back within 2% of the model's instant (latest 0.21 ms
/// late)": each guest request once, however many page pieces UML's ubd thread moved it in.
pub fn accuracy_text(r: &VmResult) -> String {
    let l = &r.device.lateness;
    match r.within_2pct {
        Some(share) => format!(
            "{:.1}% of {} guest requests back within 2% of the model's instant (latest {:.3} ms late{}); {} page pieces joined to their request{}{}{}",
            share * 100.0,
            l.requests(),
            l.max_ns as f64 / 1e6,
            if l.data_overran > 0 { format!(", {} data halves ran past it", l.data_overran) } else { String::new() },
            r.device.pieces_joined,
            if r.device.pieces_due_before_issue > 0 {
                format!(" ({} of them already due by the model when issued)", r.device.pieces_due_before_issue)
            } else {
                String::new()
            },
            if r.device.lost_ticks_kicked > 0 {
                format!("; {} lost timer interrupts repaired", r.device.lost_ticks_kicked)
            } else {
                String::new()
            },
            held_text(l)
        ),
        None => "no requests served".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_guest_shell() {
        assert_eq!(quote(b"plain"), "'plain'");
        assert_eq!(quote(b"it's"), r"'it'\''s'");
        assert_eq!(quote(b"$HOME `x`"), "'$HOME `x`'");
    }

    #[test]
    fn the_autogroups_nice_is_read_from_its_line() {
        assert_eq!(autogroup_nice("/autogroup-2854 nice -20\n"), Some(-20));
        assert_eq!(autogroup_nice("/autogroup-7 nice 0"), Some(0));
        assert_eq!(autogroup_nice("/autogroup-7"), None);
        assert_eq!(autogroup_nice(""), None);
        assert_eq!(std::str::from_utf8(AUTOGROUP_NICE_TEXT).unwrap().parse::<i32>().unwrap(), GUEST_NICE);
    }

    #[test]
    fn the_guest_result_gives_status_time_and_utilization() {
        let text = "3\n1000000000\n3500000000\ncpu 100 0 100 700 100 0 0 0 0 0\ncpu 200 0 200 1200 200 0 0 0 0 0\n";
        let r = parse_result(text).expect("parses");
        assert_eq!(r.exit_code, 3);
        assert_eq!(r.guest_ns, 2_500_000_000);
        // busy +200 of +800 ticks (idle +500, iowait +100).
        assert!((r.cpu_utilization - 0.25).abs() < 1e-9, "{}", r.cpu_utilization);
        assert!(parse_result("0\n1\n").is_none());
    }

    #[test]
    fn the_init_script_runs_the_command_in_mnt_with_its_words_quoted() {
        let opts = VmOptions {
            spec: "emu:hdd".into(),
            fs: Fs::Ext4,
            scheduler: Some("bfq".into()),
            image: None,
            virtual_time: false,
            cpu_speed: 1.0,
            guest_clock: GuestClock::Cpu,
            command: vec!["sh".into(), "-c".into(), "echo 'x' > f".into()],
            library: PathBuf::from("/lib.so"),
            kernel: PathBuf::from("/usr/bin/linux.uml"),
            mem_mib: 256,
            tmp_dir: PathBuf::from("/tmp"),
            inputs: Vec::new(),
            prepare: Some("dd if=/dev/zero of=f bs=1M count=1".into()),
            quiet_console: false,
        };
        let s = init_script(&opts, Path::new("/tmp/smartcon-vm-1"));
        assert!(s.contains(r"'sh' '-c' 'echo '\''x'\'' > f' </dev/null"), "{s}");
        assert!(s.contains("mount -t ext4 /dev/ubda /mnt"));
        assert!(s.contains("insmod") && s.contains("echo bfq > /sys/block/ubda/queue/scheduler"));
        // The preparation runs in /mnt before CMD's start mark, outside its time.
        let prep = s.find("( dd if=/dev/zero of=f bs=1M count=1 )").expect("preparation");
        assert!(s.find("cd /mnt").unwrap() < prep && prep < s.find("date +%s%N > $W/started").unwrap(), "{s}");
        let none = init_script(&VmOptions { fs: Fs::None, scheduler: None, prepare: None, ..opts }, Path::new("/w"));
        assert!(!none.contains("mount -t ext4") && !none.contains("scheduler") && !none.contains("( "));
    }
}
