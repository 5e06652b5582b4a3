//! A stateful device in explicit time: channels, a queue discipline, per-channel heads,
//! look-ahead to the next completion and rollback (the fifth seed's emulator server).
//!
//! The state is the set of requests in service (one per channel), the queue of requests
//! waiting for a channel, and each channel's head. Requests are dispatched to the lowest
//! idle channel when they arrive, and when a channel frees up the discipline picks the next
//! queued request for it (FCFS: the oldest; SJF: the shortest nominal service; priority:
//! the highest priority, then the oldest). Service is not preemptive.
//!
//! [`Device::next_completion_ns`] simulates ahead: it completes the earliest request in
//! service and dispatches the next queued one to its channel, remembering what it changed.
//! If a request then arrives before that instant, it could have changed the dispatch (a
//! shorter job, a higher priority) or completes earlier on a free channel, so
//! [`Device::submit`] rolls the state back to the arrival instant and re-simulates from
//! there. Events at the same instant: completions first (lowest channel first), then
//! arrivals. [`simulate_batch`] runs the same rules knowing every arrival in advance; the
//! property test holds the two equal.
//!
//! [`FcfsDevice`] is the real-time form: with FCFS a request's completion is fixed when it
//! arrives (it takes the channel that frees first), so the engine gets its instant at
//! submission without look-ahead.
//!
//! Non-goals: preemption, and queue limits (the caller bounds its queue depth).
//!
//! The files, one job each: this one holds the vocabulary all three devices share (the
//! discipline, a request, a completion, the misuse error, per-stream sequential detection,
//! the FCFS-only check); `rollback.rs` the device with a queue discipline, its look-ahead and
//! rollback, and the batch reference; `virtual_fcfs.rs` the cheaper virtual-time device for
//! FCFS; `realtime.rs` the real-time FCFS device on the model's [`ChannelSet`].

mod realtime;
mod rollback;
mod virtual_fcfs;

use serde::Serialize;
use smartcon_util::error::{Error, ErrorKind};

#[cfg(doc)]
use crate::model::ChannelSet;
use crate::model::Op;
use crate::preset::EmuSpec;
use crate::table::Pattern;
use crate::usage;

pub use realtime::FcfsDevice;
pub use rollback::{simulate_batch, simulate_batch_with_faults, Device};
pub use virtual_fcfs::{Placed, VirtualFcfs};

/// How queued requests are picked when a channel frees up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Discipline {
    #[default]
    Fcfs,
    /// Shortest (nominal) job first.
    Sjf,
    /// Highest `priority` first, FCFS among equals.
    Priority,
}

impl Discipline {
    pub fn name(self) -> &'static str {
        match self {
            Discipline::Fcfs => "fcfs",
            Discipline::Sjf => "sjf",
            Discipline::Priority => "priority",
        }
    }

    pub fn parse(text: &str) -> Option<Discipline> {
        match text {
            "fcfs" => Some(Discipline::Fcfs),
            "sjf" => Some(Discipline::Sjf),
            "priority" => Some(Discipline::Priority),
            _ => None,
        }
    }
}

/// A request as the device sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub arrival_ns: u64,
    pub op: Op,
    pub offset: u64,
    pub bytes: u64,
    /// Higher is served first under [`Discipline::Priority`].
    pub priority: u8,
    /// Sequential detection is per stream (a thread, a file, a process).
    pub stream: u32,
}

/// A finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Completion {
    pub id: u64,
    pub op: Op,
    pub bytes: u64,
    pub pattern: Pattern,
    pub channel: u32,
    pub arrival_ns: u64,
    pub start_ns: u64,
    pub complete_ns: u64,
    /// The fault plan failed this request (it still took its time).
    pub error: bool,
}

/// Misuse of the explicit-time interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// An arrival earlier than an instant the device already committed.
    ArrivalInPast { arrival_ns: u64, now_ns: u64 },
    /// An arrival after the looked-ahead completion, which must be taken first.
    CompletionPending { arrival_ns: u64, completion_ns: u64 },
}

impl std::fmt::Display for TimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeError::ArrivalInPast { arrival_ns, now_ns } => {
                write!(f, "arrival at {arrival_ns} ns is before the device's time {now_ns} ns")
            }
            TimeError::CompletionPending { arrival_ns, completion_ns } => {
                write!(f, "arrival at {arrival_ns} ns: take the completion at {completion_ns} ns first")
            }
        }
    }
}

impl std::error::Error for TimeError {}
impl From<TimeError> for Error {
    /// A usage error whose message is the misuse's own text and whose source is itself.
    fn from(e: TimeError) -> Error {
        Error::from_source(ErrorKind::Usage, e)
    }
}

/// Per-stream sequential detection: the byte after the stream's last request.
#[derive(Debug, Clone, Default)]
struct Streams {
    last_end: Vec<Option<u64>>,
}

impl Streams {
    #[inline]
    fn classify(&mut self, stream: u32, offset: u64, bytes: u64) -> Pattern {
        let i = stream as usize;
        if i >= self.last_end.len() {
            self.last_end.resize(i + 1, None);
        }
        let pattern = if self.last_end[i] == Some(offset) { Pattern::Sequential } else { Pattern::Random };
        self.last_end[i] = Some(offset + bytes);
        pattern
    }
}

/// The one check of the devices that serve FCFS only ([`VirtualFcfs`], [`FcfsDevice`]):
/// `spec`'s discipline must be FCFS, else a usage error `LABEL: queue=NAME WHY`. Returns the
/// number of channels, which sizes their per-channel state.
fn fcfs_channels(spec: &EmuSpec, why: &str) -> Result<usize, Error> {
    if spec.discipline != Discipline::Fcfs {
        return Err(usage(format!("{}: queue={} {why}", spec.label, spec.discipline.name())));
    }
    Ok(spec.model.channels as usize)
}

#[cfg(test)]
fn req(id: u64, arrival_ns: u64, op: Op, offset: u64, bytes: u64, priority: u8) -> Request {
    Request { id, arrival_ns, op, offset, bytes, priority, stream: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultPlan;
    use crate::preset::parse_spec;

    #[test]
    fn the_fcfs_only_devices_refuse_another_discipline_with_one_check() {
        let sjf = parse_spec("emu:hdd,queue=sjf").unwrap();
        let e = FcfsDevice::with_faults(sjf.clone(), FaultPlan::default(), 0).expect_err("refused");
        assert_eq!(
            e.message,
            "emu:hdd,queue=sjf: queue=sjf needs the virtual-time replay (smartcon emulate replay); real time serves FCFS only"
        );
        let e = VirtualFcfs::with_faults(sjf, FaultPlan::default()).expect_err("refused");
        assert!(e.message.contains("queue=sjf") && e.message.contains("FCFS only"), "{}", e.message);
        let fcfs = parse_spec("emu:hdd,channels=2").unwrap();
        assert!(FcfsDevice::with_faults(fcfs.clone(), FaultPlan::default(), 0).is_ok());
        assert!(VirtualFcfs::with_faults(fcfs, FaultPlan::default()).is_ok());
    }

    #[test]
    fn a_misuse_becomes_a_usage_error_with_itself_as_source() {
        let misuse = TimeError::ArrivalInPast { arrival_ns: 5, now_ns: 9 };
        let e = Error::from(misuse.clone());
        assert_eq!(e.kind, ErrorKind::Usage);
        assert_eq!(e.message, "arrival at 5 ns is before the device's time 9 ns");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.downcast_ref::<TimeError>(), Some(&misuse));
    }
}
