//! A Postmark-like small-file transaction workload (Katcher 1997; SmartCon Sec. 7.2-7.4,
//! Fig. 11b, 13b, 16b) in a directory, with every data I/O waited for by a strategy.
//!
//! Postmark builds a pool of small files, then runs transactions; each transaction is one
//! create-or-delete (by the create bias) and one read-or-append (by the read bias) on a
//! random file of the pool. It reports transactions per second.
//!
//! How the wait strategy applies (our interpretation; the paper's kernel decides inside the
//! block layer, which only data requests reach):
//! - file data moves through one [`SmartTargetPort`] (one io_uring), one request at a time,
//!   in chunks of the read/write block size, and each chunk is waited for as the strategy
//!   says, by the same glue a job uses: `block` sleeps in `io_uring_enter`, `spin` polls
//!   the completion queue with the spin budget, `sync` is a plain pread/pwrite, `hybrid`,
//!   `poll` and `half-mean` poll at their policy's instants (with `poll`'s parameters;
//!   a run shorter than hybrid's sampling phase stays in it, polling at the fixed
//!   interval), `smart` and `smart-hybrid` run the Decision Module per chunk against the
//!   device's in-flight counters and the System Monitor. The record carries the name of
//!   the strategy that ran and counts each chunk under the wait it got;
//! - creating, opening, closing and deleting files are metadata system calls, always
//!   synchronous: no strategy applies to them, and their time counts in the transaction;
//! - files are opened with O_DIRECT so reads and appends reach the device (the point of the
//!   study) rather than the page cache; where the file system refuses O_DIRECT the workload
//!   falls back to buffered I/O and says so in the result (`direct: false`).
//!
//! Parameters ([`PostmarkSpec::default`]): Postmark's defaults scaled to O_DIRECT and to
//! a cell of a few hundred milliseconds: 500 files (Postmark: 500), sizes 4-12 KiB in 4 KiB
//! steps (Postmark: 500 B - 9.77 KB; O_DIRECT needs whole blocks), read and write block
//! 4 KiB (Postmark: 512 B), read bias and create bias 50% (Postmark: 5 of 10), transactions
//! until the cell's time runs out (Postmark: 500, which this machine finishes in well under
//! a second) or `transactions_max`. A file is never appended past 4 x the largest size
//! (a bound on growth; such an append becomes a read).
//!
//! The pool is built before the clock starts and removed after it stops (Postmark times
//! them separately; we report only the transaction phase). The same seed gives the same
//! sequence of transactions, so strategies compared with one seed do identical work.
//! The scratch directory is removed on every way out (error, Ctrl-C via `stop`, panic).
//!
//! Non-goals: Postmark's subdirectories and its buffered-I/O default; more than one thread.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;

use serde::Serialize;
use smartcon_devemu::Op;
use smartcon_util::rng::Rng;

use smartcon_engine::clock::{now_ns, tighten_timer_slack};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{JobSpec, Pattern, StrategyChoice, SPIN_BUDGET_NS_DEFAULT};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPortOptions, SmartTargetPort};
use smartcon_engine::stats::{JobResult, ThreadStats};
use smartcon_engine::target::{check_whole, AlignedBuf, Target};
use smartcon_engine::wait::PollParams;

/// Limits: beyond these the input is a mistake, not a workload.
pub const FILES_MAX: u32 = 100_000;
pub const FILE_BYTES_MAX: u64 = 64 << 20;
pub const TRANSACTIONS_MAX: u64 = 100_000_000;
/// A file grows by appends to at most this many times the largest creation size.
pub const GROWTH_FACTOR_MAX: u64 = 4;

/// The workload's parameters (see the module header for how they map to Postmark's).
#[derive(Debug, Clone)]
pub struct PostmarkSpec {
    /// Files in the pool at the start.
    pub files: u32,
    pub size_bytes_min: u64,
    pub size_bytes_max: u64,
    /// Read and write chunk size (one I/O each).
    pub block_bytes: u64,
    /// Stop after this many transactions or `duration_ns`, whichever comes first.
    pub transactions_max: u64,
    pub duration_ns: u64,
    /// Share of read-or-append steps that read, percent.
    pub read_bias_pct: u32,
    /// Share of create-or-delete steps that create, percent.
    pub create_bias_pct: u32,
    pub strategy: StrategyChoice,
    pub seed: u64,
    pub spin_budget_ns: u64,
    /// The polling strategies' parameters (`hybrid`, `poll`, `half-mean`, `smart-hybrid`).
    pub poll: PollParams,
}

impl Default for PostmarkSpec {
    fn default() -> Self {
        PostmarkSpec {
            files: 500,
            size_bytes_min: 4 << 10,
            size_bytes_max: 12 << 10,
            block_bytes: 4 << 10,
            transactions_max: TRANSACTIONS_MAX,
            duration_ns: 1_000_000_000,
            read_bias_pct: 50,
            create_bias_pct: 50,
            strategy: StrategyChoice::Smart,
            seed: 1,
            spin_budget_ns: SPIN_BUDGET_NS_DEFAULT,
            poll: PollParams::DEFAULT,
        }
    }
}

impl PostmarkSpec {
    pub fn validate(&self) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.files == 0 || self.files > FILES_MAX {
            return usage(format!("postmark file count must be 1..={FILES_MAX}"));
        }
        if self.block_bytes == 0 || self.block_bytes > FILE_BYTES_MAX || !self.block_bytes.is_multiple_of(512) {
            return usage("postmark block size must be a multiple of 512 bytes up to 64 MiB".into());
        }
        if self.size_bytes_min == 0
            || self.size_bytes_min > self.size_bytes_max
            || self.size_bytes_max > FILE_BYTES_MAX
            || !self.size_bytes_min.is_multiple_of(self.block_bytes)
            || !self.size_bytes_max.is_multiple_of(self.block_bytes)
        {
            return usage("postmark file sizes must be whole blocks with min <= max <= 64 MiB".into());
        }
        if self.transactions_max == 0 || self.transactions_max > TRANSACTIONS_MAX {
            return usage(format!("postmark transactions must be 1..={TRANSACTIONS_MAX}"));
        }
        if self.duration_ns == 0 || self.duration_ns > smartcon_engine::job::DURATION_NS_MAX {
            return usage("duration must be more than 0 and at most 24 h".into());
        }
        if self.read_bias_pct > 100 || self.create_bias_pct > 100 {
            return usage("postmark biases are percentages (0..=100)".into());
        }
        if self.spin_budget_ns == 0 || self.spin_budget_ns > smartcon_engine::smartport::SPIN_BUDGET_NS_MAX {
            return usage("spin budget must be more than 0 and at most 10 s".into());
        }
        if self.strategy.polls() {
            // Ranges only: a cell shorter than hybrid's sampling phase polls at the
            // sampling interval throughout, which is how hybrid starts (module header).
            self.poll.validate(smartcon_engine::job::DURATION_NS_MAX)?;
        }
        Ok(())
    }
}

/// What one run did, beside the engine's result record of its data I/Os.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PostmarkCounts {
    pub transactions: u64,
    pub creates: u64,
    pub deletes: u64,
    pub reads: u64,
    pub appends: u64,
    /// Transactions per second over the transaction phase.
    pub tps: f64,
    pub files_start: u32,
    pub files_end: u32,
    /// False when the file system refused O_DIRECT (the page cache served the data).
    pub direct: bool,
}

pub struct PostmarkResult {
    /// The data I/Os as a job record (`op` = "mixed", `pattern` = "postmark"; IOPS are
    /// data I/Os per second, latencies per chunk, CPU and context switches of the thread
    /// over the whole transaction phase including the metadata calls).
    pub job: JobResult,
    pub counts: PostmarkCounts,
}

/// The scratch directory; removed with everything in it on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An open file descriptor, closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn open_raw(path: &Path, flags: libc::c_int) -> std::io::Result<Fd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Fd(fd))
}

fn open_fd(path: &Path, flags: libc::c_int) -> Result<Fd, Error> {
    open_raw(path, flags).map_err(|e| Error::io(ErrorKind::Io, path, e))
}

/// The per-thread state of a run: port, buffer and the pool.
struct Runner<'a> {
    spec: &'a PostmarkSpec,
    target: &'a dyn Target,
    profile: &'a Profile,
    monitor: &'a SystemMonitor,
    dir: PathBuf,
    /// Opened on the first file (a port needs a descriptor), then moved from file to file.
    port: Option<SmartTargetPort<'a>>,
    buf: AlignedBuf,
    rng: Rng,
    direct: bool,
    /// Pool: (file number, size in bytes). Bounded by FILES_MAX plus creations.
    pool: Vec<(u64, u64)>,
    next_file: u64,
}

impl Runner<'_> {
    fn path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("pm{n:08}"))
    }

    fn open(&mut self, n: u64, flags: libc::c_int) -> Result<Fd, Error> {
        let path = self.path(n);
        if self.direct {
            match open_raw(&path, flags | libc::O_DIRECT) {
                Ok(fd) => return Ok(fd),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && flags & libc::O_CREAT != 0 => {
                    // A file system without O_DIRECT: fall back, once for all (without
                    // O_EXCL: the failed open may have created the file).
                    let fd = open_fd(&path, flags & !libc::O_EXCL)?;
                    self.direct = false;
                    return Ok(fd);
                }
                Err(e) => return Err(Error::io(ErrorKind::Io, &path, e)),
            }
        }
        open_fd(&path, flags)
    }

    fn random_size(&mut self) -> u64 {
        let b = self.spec.block_bytes;
        let (lo, hi) = (self.spec.size_bytes_min / b, self.spec.size_bytes_max / b);
        (lo + self.rng.below(hi - lo + 1)) * b
    }

    /// Moves the port to `fd` (opens it on the first file).
    fn port_on(&mut self, fd: &Fd) -> Result<(), Error> {
        match &mut self.port {
            Some(port) => port.set_fd(fd.0)?,
            None => {
                let options = SmartPortOptions {
                    strategy: self.spec.strategy,
                    spin_budget_ns: self.spec.spin_budget_ns,
                    poll: self.spec.poll,
                    block_wait: smartcon_engine::smartport::BlockWait::Kernel,
                    profile: Some(self.profile.clone()),
                    monitor: Some(Arc::new(self.monitor.clone())),
                    inflight: None,
                    time: None,
                };
                self.port = Some(SmartTargetPort::open_on(fd.0, self.target.inflight(), options)?);
            }
        }
        Ok(())
    }

    /// One data I/O of one block, decided and waited for by the port (which counts it).
    fn io(&mut self, fd: &Fd, op: Op, offset: u64) -> Result<(), Error> {
        let len = self.spec.block_bytes as usize;
        self.port_on(fd)?;
        let Runner { port: Some(port), buf, .. } = self else {
            return Err(Error::new(ErrorKind::Internal, "postmark: the port did not open"));
        };
        let moved = match op {
            Op::Read => port.read_at(&mut buf.as_mut_slice()[..len], offset),
            Op::Write => port.write_at(&buf.as_slice()[..len], offset),
        };
        let moved = moved.map_err(|e| Error { message: format!("postmark: {}", e.message), ..e })?;
        check_whole(moved, len, op, offset)
    }

    /// Creates a file of a random size, written block by block.
    fn create(&mut self) -> Result<(), Error> {
        let n = self.next_file;
        self.next_file += 1;
        let size = self.random_size();
        let fd = self.open(n, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)?;
        let mut off = 0;
        while off < size {
            self.io(&fd, Op::Write, off)?;
            off += self.spec.block_bytes;
        }
        self.pool.push((n, size));
        Ok(())
    }

    fn delete(&mut self) -> Result<(), Error> {
        if self.pool.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.pool.len() as u64) as usize;
        let (n, _) = self.pool.swap_remove(i);
        let path = self.path(n);
        std::fs::remove_file(&path).map_err(|e| Error::io(ErrorKind::Io, &path, e))
    }

    fn read(&mut self, i: usize) -> Result<(), Error> {
        let (n, size) = self.pool[i];
        let fd = self.open(n, libc::O_RDONLY)?;
        let mut off = 0;
        while off < size {
            self.io(&fd, Op::Read, off)?;
            off += self.spec.block_bytes;
        }
        Ok(())
    }

    fn append(&mut self, i: usize, bytes: u64) -> Result<(), Error> {
        let (n, size) = self.pool[i];
        let fd = self.open(n, libc::O_WRONLY)?;
        let mut off = size;
        while off < size + bytes {
            self.io(&fd, Op::Write, off)?;
            off += self.spec.block_bytes;
        }
        self.pool[i].1 = size + bytes;
        Ok(())
    }
}

/// Runs the workload in a fresh scratch directory inside `dir`. `target` is the device the
/// directory lives on (its in-flight counters are what `smart` and the I/O load share, and
/// its label and device name go into the record); `profile` holds its thresholds.
pub fn run(
    dir: &Path,
    spec: &PostmarkSpec,
    target: &dyn Target,
    profile: &Profile,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<PostmarkResult, Error> {
    spec.validate()?;
    check_dir(dir)?;
    let scratch_path = dir.join(format!("smartcon-postmark-{}-{}", std::process::id(), now_ns() % 1_000_000_007));
    std::fs::create_dir(&scratch_path).map_err(|e| Error::io(ErrorKind::Target, &scratch_path, e))?;
    let scratch = Scratch(scratch_path);
    let _registration = monitor.register_current_thread();
    tighten_timer_slack();
    let mut r = Runner {
        spec,
        target,
        profile,
        monitor,
        dir: scratch.0.clone(),
        port: None,
        buf: AlignedBuf::new(spec.block_bytes as usize),
        rng: Rng::new(spec.seed),
        direct: true,
        pool: Vec::with_capacity(spec.files as usize),
        next_file: 0,
    };
    smartcon_engine::verify::fill(r.buf.as_mut_slice(), 0, spec.block_bytes, smartcon_engine::job::FILL_SEED);
    // The pool, untimed (Postmark times it apart from the transactions).
    for _ in 0..spec.files {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        r.create()?;
    }
    let files_start = r.pool.len() as u32;
    let mut counts = PostmarkCounts {
        transactions: 0,
        creates: 0,
        deletes: 0,
        reads: 0,
        appends: 0,
        tps: 0.0,
        files_start,
        files_end: 0,
        direct: true,
    };
    let growth_max = spec.size_bytes_max * GROWTH_FACTOR_MAX;
    // The measurement starts now: the pool's I/O is not counted (Postmark times it apart).
    let start_ns = match &mut r.port {
        Some(port) => {
            port.reset_counters();
            port.counters().start_ns
        }
        None => now_ns(),
    };
    let end_ns = start_ns + spec.duration_ns;
    while counts.transactions < spec.transactions_max && !stop.load(Ordering::Relaxed) {
        // Create or delete.
        if r.rng.percent(spec.create_bias_pct) || r.pool.is_empty() {
            r.create()?;
            counts.creates += 1;
        } else {
            r.delete()?;
            counts.deletes += 1;
        }
        // Read or append, on a random file of the pool.
        if !r.pool.is_empty() {
            let i = r.rng.below(r.pool.len() as u64) as usize;
            let read = r.rng.percent(spec.read_bias_pct);
            let bytes = r.random_size().min(growth_max.saturating_sub(r.pool[i].1));
            if read || bytes == 0 {
                r.read(i)?;
                counts.reads += 1;
            } else {
                r.append(i, bytes)?;
                counts.appends += 1;
            }
        }
        counts.transactions += 1;
        if now_ns() >= end_ns {
            break;
        }
    }
    let stats = match &mut r.port {
        Some(port) => port.finish(),
        None => {
            // No file was ever opened (stopped before the first): an empty record.
            let mut s = ThreadStats::new();
            s.begin();
            s.end();
            s
        }
    };
    counts.files_end = r.pool.len() as u32;
    counts.direct = r.direct;
    let wall_ns = stats.end_ns.saturating_sub(stats.start_ns).max(1);
    counts.tps = counts.transactions as f64 * 1e9 / wall_ns as f64;
    let mut js = JobSpec::new(Op::Read, Pattern::Rand, spec.block_bytes, spec.strategy);
    js.duration_ns = spec.duration_ns;
    js.seed = spec.seed;
    js.spin_budget_ns = spec.spin_budget_ns;
    js.poll = spec.poll;
    let mut job =
        JobResult::from_threads(target, &js, profile, std::slice::from_ref(&stats), stop.load(Ordering::Relaxed));
    job.op = smartcon_engine::stats::RecordOp::Mixed;
    job.pattern = smartcon_engine::stats::RecordPattern::Postmark;
    job.model_service_ns = None;
    drop(r);
    drop(scratch);
    Ok(PostmarkResult { job, counts })
}

/// The directory must exist and be a directory (a file there is a usage error).
pub fn check_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::new(
            ErrorKind::Usage,
            format!("{} is not a directory; postmark needs a directory to create its files in", dir.display()),
        )),
        Err(e) => Err(Error::io(ErrorKind::Target, dir, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_emutarget::target::{open, parse_target, OpenOptions};

    fn small(strategy: StrategyChoice, seed: u64) -> PostmarkSpec {
        PostmarkSpec {
            files: 20,
            transactions_max: 200,
            duration_ns: 60_000_000_000,
            strategy,
            seed,
            ..PostmarkSpec::default()
        }
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("smartcon-pm-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn transactions_are_counted_and_the_directory_is_left_empty() {
        let dir = scratch_dir("run");
        let t = open(&parse_target("emu:optane,size=16m").unwrap(), OpenOptions::default()).unwrap();
        let monitor = SystemMonitor::fixed(0);
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        for s in StrategyChoice::names() {
            let spec = small(StrategyChoice::parse(s).unwrap(), 7);
            let p = Profile::paper_default("x");
            let r = run(&dir, &spec, t.as_ref(), &p, &monitor, &stop).unwrap();
            let c = &r.counts;
            assert_eq!(c.transactions, 200, "{s}");
            assert_eq!(c.creates + c.deletes, 200);
            // A delete can empty the small pool, and then that transaction has no second step.
            assert!(c.reads + c.appends <= 200 && c.reads + c.appends >= 150, "{c:?}");
            assert_eq!(c.files_start, 20);
            assert_eq!(c.files_end as u64, 20 + c.creates - c.deletes);
            assert!(c.tps > 0.0);
            // Every transaction moves at least one block through the engine.
            assert!(
                r.job.ios >= 200
                    && r.job.strategy.name() == s
                    && r.job.pattern == smartcon_engine::stats::RecordPattern::Postmark
            );
            // Each strategy really waits its way: the polling ones poll (smart-hybrid where
            // it would spin: an idle CPU and one I/O at a time), the others do not.
            let choice = StrategyChoice::parse(s).unwrap();
            assert_eq!(r.job.polling.is_some(), choice.polls(), "{s}: {:?}", r.job.polling);
            if let StrategyChoice::Fixed(f) = choice {
                assert_eq!(r.job.decisions.by_strategy.get(&f), Some(&r.job.ios), "{s}");
            }
            seen.push((c.creates, c.deletes, c.reads, c.appends, r.job.ios));
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "scratch removed after {s}");
        }
        // The same seed does the same work under every strategy.
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        // Without a pool to delete from, biases of 0% create still work; 100% create never deletes.
        let spec = PostmarkSpec {
            create_bias_pct: 100,
            read_bias_pct: 0,
            ..small(StrategyChoice::parse("block").unwrap(), 3)
        };
        let r = run(&dir, &spec, t.as_ref(), &Profile::paper_default("x"), &monitor, &stop).unwrap();
        assert_eq!((r.counts.creates, r.counts.deletes, r.counts.reads), (200, 0, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_where_a_directory_is_needed_and_bad_parameters_are_usage_errors() {
        let dir = scratch_dir("bad");
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = check_dir(&file).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.to_string().contains("not a directory"));
        let bad = PostmarkSpec { size_bytes_min: 6000, ..PostmarkSpec::default() };
        assert_eq!(bad.validate().unwrap_err().kind, ErrorKind::Usage);
        let bad = PostmarkSpec { files: 0, ..PostmarkSpec::default() };
        assert_eq!(bad.validate().unwrap_err().kind, ErrorKind::Usage);
        assert!(PostmarkSpec::default().validate().is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
