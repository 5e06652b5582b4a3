//! The JSON Lines records `libsmartcon.so` appends, one per process image, at exit, `_exit`
//! or exec (docs/json.md describes every field). The library writes them with these types
//! and the CLI reads them with the same ones, so a field cannot be renamed on one side only.
//!
//! Reading is lenient: a missing field is its default (a record of an older library, or a
//! test's partial line), lines of another type and lines that are not JSON are skipped
//! ([`parse_lines`]).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A record type: its `type` field.
pub trait Record: DeserializeOwned {
    const TYPE: &'static str;
    fn kind(&self) -> &str;
}

/// The records of type `R` in JSON Lines `text`, in order.
pub fn parse_lines<R: Record>(text: &str) -> Vec<R> {
    text.lines().filter_map(|l| serde_json::from_str::<R>(l).ok()).filter(|r| r.kind() == R::TYPE).collect()
}

/// What one process image did with its taken I/O (`SMARTCON_PRELOAD_STATS`).
///
/// A record is cumulative for its image (`image` is unique per process image: a fork or an
/// exec starts a new one), so a reader keeps the last record of each image and sums over
/// images. Latencies travel as the histogram's recorded buckets (`[value_ns, count]`), so
/// the reader merges exact histograms, not percentiles.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProcessRecord {
    /// Always [`ProcessRecord::TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    pub pid: u32,
    /// Unique per process image (pid, start time, fork count).
    pub image: String,
    pub ios: u64,
    pub bytes: u64,
    pub by_strategy: BTreeMap<String, u64>,
    pub by_reason: BTreeMap<String, u64>,
    /// Calls on taken descriptors that went to the real system call instead.
    pub passed_through: u64,
    /// `passed_through` by reason (`refused`, `reentrant`, `no_port`, `shared_offset`,
    /// `append`, `vectored`, `rwf_flags`).
    pub passed_through_by: BTreeMap<String, u64>,
    /// Ways of reaching data the library saw and did not take: `io_uring`, `libaio`,
    /// `mmap`, `raw_syscall`.
    pub not_taken: BTreeMap<String, u64>,
    /// Taken `preadv2`/`pwritev2` calls that asked to be polled (RWF_HIPRI).
    pub hipri: u64,
    /// The latency histogram: `[value_ns, count]` for each recorded bucket.
    pub lat_ns: Vec<[u64; 2]>,
    /// Lines the user should see once (no profile for a device, ...).
    pub notes: Vec<String>,
}

impl Record for ProcessRecord {
    const TYPE: &'static str = "preload_process";
    fn kind(&self) -> &str {
        &self.kind
    }
}

/// What one process image's emulated device served (`SMARTCON_PRELOAD_EMU_STATS`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EmuProcessRecord {
    /// Always [`EmuProcessRecord::TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    pub pid: u32,
    /// The device's canonical `emu:` label, and the image file.
    pub spec: String,
    pub path: String,
    pub virtual_time: bool,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    /// Sum over requests of the model's completion minus arrival.
    pub device_ns: u64,
    pub wall_ns: u64,
    pub skew_ns: i64,
    pub jumped_ns: u64,
    pub jumps: u64,
    /// User + system CPU time of the process (getrusage).
    pub cpu_ns: u64,
    pub image_opens: u64,
    /// I/O to the image that went around the model, by kind.
    pub around_model: BTreeMap<String, u64>,
    /// The strategy served requests waited by (`SMARTCON_PRELOAD_STRATEGY`); `None`: the
    /// reference wait (sleep, then poll to the model's instant).
    pub strategy: Option<String>,
    /// Served requests by the way they waited (`block`, `spin`, `sync`, `hybrid`).
    pub by_strategy: BTreeMap<String, u64>,
    /// ... and by the decision's reason (smart and smart-hybrid).
    pub by_reason: BTreeMap<String, u64>,
    /// Spins that reached their budget and slept for the rest.
    pub spin_fell_back: u64,
    /// `fsync`/`fdatasync` calls on the image (served by the model: done when the requests
    /// before them are), and the real time the real calls took.
    pub flushes: u64,
    pub flush_real_ns: u64,
    /// Requests of a clone helper (UML's ubd thread) put on the model as the continuation
    /// of its previous one (one guest request split into page-sized calls).
    pub pieces_joined: u64,
    /// Of those, the pieces whose model completion was already past when they were issued
    /// (the pieces before them took longer than the model gives the whole request): their
    /// data half runs past the model's instant (`lateness.data_overran` counts them too),
    /// and where that overrun is more than 2 % of the request's model time they come back
    /// late.
    pub pieces_due_before_issue: u64,
    /// Virtual time: timer signals raised because the program's idle check kept finding
    /// its POSIX timer disarmed (a lost timer interrupt repaired; UML's stall).
    pub lost_ticks_kicked: u64,
    /// Virtual time on the guest CPU clock: a tracer's `PTRACE_SETREGSET` writes of a
    /// stopped tracee's XSAVE area that were not made because they wrote back what it held
    /// (UML's kernel thread at each guest system call; the preload library's `fpset`).
    pub ptrace_fp_sets_skipped: u64,
    /// How late served requests came back after the model's instant.
    pub lateness: LatenessRecord,
}

/// How late served requests came back to the program after the model's completion
/// instant, on its clock (virtual or real), as a share of each request's model time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LatenessRecord {
    /// Upper bucket edges in millionths of the request's model time; `counts` has one
    /// more bucket, past the last edge.
    pub edges_ppm: Vec<u64>,
    pub counts: Vec<u64>,
    pub max_ns: u64,
    pub sum_ns: u64,
    /// Requests whose real data half alone ran past the model's instant.
    pub data_overran: u64,
    /// Virtual time: the real ns of overruns (while every other thread waited) and of
    /// flushes' real calls kept off the clock, and the wake-ups after a jump kept off it
    /// (`wakes_settled`: how many).
    pub data_hidden_ns: u64,
    pub wake_hidden_ns: u64,
    pub wakes_settled: u64,
    /// Virtual time: requests of a helper (UML's ubd thread) that the program's clock
    /// reached before the helper handed them back, and the ns the program ran past their
    /// instants meanwhile, which the clock held at the instant does not count; the pauses
    /// of the program's threads at such an instant, and their real ns.
    pub capped: u64,
    pub capped_ns: u64,
    pub pauses: u64,
    pub paused_ns: u64,
    /// Virtual time on the guest CPU clock: its readings, and the process CPU clocks they
    /// read (system calls, whose CPU is on the clock when a counted process makes them;
    /// a process stopped under the program's ptrace is not read).
    pub cpu_clock_readings: u64,
    pub cpu_clock_reads: u64,
    /// Readings of the reading process's own CPU clock served without a system call
    /// (extrapolated while its thread kept its CPU: the preload library's `ownclock`).
    pub cpu_clock_fast_reads: u64,
    /// Of the reading process's blocking waits (UML's kernel thread's `wait4`), those its
    /// own CPU clock was carried across without a system call after them.
    pub cpu_clock_carried_waits: u64,
    /// Virtual time: caps (a helper's request holding the clock at its instant) still set
    /// the preload library's `CAP_HOLD_MAX_NS` of real time after they were
    /// set, so the guard let the clock run past them; the longest real time a cap was set
    /// before its hand-back; and the pauses at a cap that ended by their time bound, not
    /// by a hand-back.
    pub caps_expired: u64,
    pub cap_held_max_ns: u64,
    pub pauses_timed_out: u64,
}

impl LatenessRecord {
    /// Adds another process's buckets (same edges; a record without buckets adds nothing).
    pub fn add(&mut self, other: &LatenessRecord) {
        if other.counts.is_empty() {
            return;
        }
        if self.counts.is_empty() {
            self.edges_ppm = other.edges_ppm.clone();
            self.counts = vec![0; other.counts.len()];
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
        self.data_overran += other.data_overran;
        self.data_hidden_ns += other.data_hidden_ns;
        self.wake_hidden_ns += other.wake_hidden_ns;
        self.wakes_settled += other.wakes_settled;
        self.capped += other.capped;
        self.capped_ns += other.capped_ns;
        self.pauses += other.pauses;
        self.paused_ns += other.paused_ns;
        self.cpu_clock_readings += other.cpu_clock_readings;
        self.cpu_clock_reads += other.cpu_clock_reads;
        self.cpu_clock_fast_reads += other.cpu_clock_fast_reads;
        self.cpu_clock_carried_waits += other.cpu_clock_carried_waits;
        self.caps_expired += other.caps_expired;
        self.cap_held_max_ns = self.cap_held_max_ns.max(other.cap_held_max_ns);
        self.pauses_timed_out += other.pauses_timed_out;
    }

    /// Requests counted.
    pub fn requests(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The share of requests within `ppm` millionths of their model time (an edge of the
    /// buckets; None when `ppm` is not one, or nothing was counted).
    pub fn share_within(&self, ppm: u64) -> Option<f64> {
        let i = self.edges_ppm.iter().position(|&e| e == ppm)?;
        let total = self.requests();
        (total > 0).then(|| self.counts[..=i].iter().sum::<u64>() as f64 / total as f64)
    }
}

impl Record for EmuProcessRecord {
    const TYPE: &'static str = "emu_process";
    fn kind(&self) -> &str {
        &self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_reads_only_its_own_lines_and_fills_what_is_missing() {
        let text = "{\"type\":\"emu_process\",\"reads\":2,\"skew_ns\":-5}\n{\"type\":\"preload_process\",\"ios\":9,\"image\":\"1-2-0\"}\nnot json\n{\"type\":\"emu_process\",\"reads\":3,\"by_strategy\":{\"spin\":3}}\n";
        let emu: Vec<EmuProcessRecord> = parse_lines(text);
        assert_eq!(emu.len(), 2);
        assert_eq!((emu[0].reads, emu[0].skew_ns, emu[0].strategy.as_deref()), (2, -5, None));
        assert_eq!(emu[1].by_strategy.get("spin"), Some(&3));
        let taken: Vec<ProcessRecord> = parse_lines(text);
        assert_eq!((taken.len(), taken[0].ios, taken[0].image.as_str()), (1, 9, "1-2-0"));
    }

    #[test]
    fn lateness_buckets_add_up_across_processes() {
        let a = LatenessRecord {
            edges_ppm: vec![10_000, 20_000],
            counts: vec![90, 5, 5],
            max_ns: 7,
            sum_ns: 100,
            ..Default::default()
        };
        let mut total = LatenessRecord::default();
        total.add(&a);
        total.add(&LatenessRecord::default());
        total.add(&LatenessRecord { counts: vec![100, 0, 0], max_ns: 3, ..a.clone() });
        assert_eq!(
            (total.requests(), total.counts.clone(), total.max_ns, total.sum_ns),
            (200, vec![190, 5, 5], 7, 200)
        );
        assert_eq!(total.share_within(20_000), Some(195.0 / 200.0));
        assert_eq!(total.share_within(10_000), Some(0.95));
        assert_eq!(total.share_within(30_000), None);
        assert_eq!(LatenessRecord::default().share_within(20_000), None);
    }

    #[test]
    fn a_record_round_trips() {
        let r = EmuProcessRecord {
            kind: EmuProcessRecord::TYPE.into(),
            reads: 4,
            strategy: Some("block".into()),
            by_strategy: [("block".to_string(), 4)].into(),
            ..Default::default()
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains("\"type\":\"emu_process\""), "{line}");
        assert_eq!(parse_lines::<EmuProcessRecord>(&line), [r]);
    }
}
