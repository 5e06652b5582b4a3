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
