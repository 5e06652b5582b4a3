//! Replay on emulated devices: the fifth seed's storage device emulator as a library.
//!
//! [`replay::replay_trace`] and [`replay::replay_closed`] drive devemu's stateful device
//! with a trace streamed from a file ([`trace`]: blkparse, fio iolog v2/v3, the MSR
//! Cambridge, Alibaba and Tencent block-trace CSVs, gzip or not) or a closed-loop job, in
//! virtual time and constant memory: idle gaps are skipped, so a replay takes the CPU time
//! of its events, not the device's time, and latencies go into histograms ([`stats`]).
//! [`realtime::run_real_time`] replays the same arrivals (streamed again) through the
//! engine's emulated target in real time (the seed's reference system) and measures how
//! late real completions are against the model. [`replay_result`] turns both into the
//! `replay_result` record (docs/json.md).
//!
//! [`mount`] exposes an emulated device to unmodified programs as a block device (a FUSE
//! file, [`fuse`], under a direct-I/O loop device, optionally with ext4), recording what it
//! made ([`records`]) so a killed run can be cleaned up.
//!
//! Non-goals: the CLI (crates/cli renders these records).

pub mod fuse;
pub mod fuse_abi;
pub mod fuse_session;
pub mod fuse_uring;
pub mod handoff;
pub mod mount;
pub mod realtime;
pub mod records;
pub mod replay;
pub mod scenario;
pub mod stats;
pub mod sweep;
pub mod trace;
pub mod trace_input;
pub mod vm;
pub mod vmsweep;

use serde::Serialize;
use smartcon_devemu::EmuSpec;
use smartcon_engine::error::{Error, ErrorKind};

use crate::realtime::RealTimeRun;
use crate::replay::{PerOp, VirtualRun};
use crate::trace::{TraceError, TraceIo};

impl From<TraceError> for Error {
    /// "trace " and the line's error, which stays the source.
    fn from(e: TraceError) -> Error {
        Error { kind: ErrorKind::Usage, message: format!("trace {e}"), errno: None, source: Some(Box::new(e)) }
    }
}

/// Offsets of a trace taken on a larger device are folded into the emulated capacity
/// (block-aligned modulo, keeping their distances within the span); returns how many moved.
/// A streamed trace folds as it reads ([`trace::TraceOptions::capacity_bytes`]).
pub fn fit_to_capacity(ios: &mut [TraceIo], capacity_bytes: u64) -> Result<u64, Error> {
    let mut moved = 0;
    for io in ios.iter_mut() {
        moved += u64::from(trace::fold_into(io, capacity_bytes)?);
    }
    Ok(moved)
}

/// The real-time part of a `replay_result` record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealTimeFields {
    pub strategy: &'static str,
    /// I/Os by the strategy they waited with and, for `smart` and `paper`, by reason.
    pub decisions: smartcon_engine::stats::Decisions,
    /// `block` I/Os waited for with the reference wait.
    pub reference_waits: u64,
    pub threads: u64,
    pub fifo: bool,
    pub wall_ns: u64,
    pub lat_ns_mean: f64,
    pub lat_ns_p50: u64,
    pub lat_ns_p99: u64,
    pub by_op: PerOp,
    pub lateness_ns_p50: u64,
    pub start_late_ns_p99: u64,
    /// (real - virtual) / virtual, in percent.
    pub mean_error_pct: f64,
    pub p50_error_pct: f64,
    pub p99_error_pct: f64,
    /// I/Os the fault scenario failed in real time (left out of the figures above).
    pub errors_read: u64,
    pub errors_write: u64,
}

/// The `replay_result` record (docs/json.md, section `replay_result`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayResult {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub device: String,
    /// `trace:FORMAT:PATH` or `closed:OP,PATTERN,BS,qd=N,think=NS`.
    pub workload: String,
    pub ios: u64,
    pub lat_ns_mean: f64,
    pub lat_ns_p50: u64,
    pub lat_ns_p99: u64,
    pub lat_ns_p999: u64,
    pub lat_ns_max: u64,
    pub read: stats::LatencySummary,
    pub write: stats::LatencySummary,
    pub sim_ns: u64,
    pub wall_ns: u64,
    pub speedup: f64,
    pub requests_per_s_wall: f64,
    /// Requests per second of the replay thread's CPU time.
    pub requests_per_s_cpu: f64,
    pub iops: f64,
    pub throughput_bytes_per_s: f64,
    pub device_utilization: f64,
    pub rollbacks: u64,
    pub outstanding_max: u64,
    /// I/Os the fault scenario failed (0 without `--faults`).
    pub errors_read: u64,
    pub errors_write: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_2pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_20us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lateness_ns_p99: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_time: Option<RealTimeFields>,
    /// A trace replay: what its reader saw (set by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<trace::TraceStats>,
}

fn error_pct(real: f64, model: f64) -> f64 {
    if model == 0.0 {
        0.0
    } else {
        (real - model) / model * 100.0
    }
}

/// Builds the record from a virtual run and, optionally, its real-time replay.
pub fn replay_result(spec: &EmuSpec, workload: String, v: &VirtualRun, real: Option<&RealTimeRun>) -> ReplayResult {
    let sim_s = v.sim_ns as f64 / 1e9;
    ReplayResult {
        record_type: "replay_result",
        device: spec.label.clone(),
        workload,
        ios: v.ios,
        lat_ns_mean: v.all.lat_ns_mean,
        lat_ns_p50: v.all.lat_ns_p50,
        lat_ns_p99: v.all.lat_ns_p99,
        lat_ns_p999: v.all.lat_ns_p999,
        lat_ns_max: v.all.lat_ns_max,
        read: v.by_op.read,
        write: v.by_op.write,
        sim_ns: v.sim_ns,
        wall_ns: v.wall_ns,
        speedup: v.speedup(),
        requests_per_s_wall: v.ios as f64 / (v.wall_ns.max(1) as f64 / 1e9),
        requests_per_s_cpu: v.ios as f64 / (v.cpu_ns.max(1) as f64 / 1e9),
        iops: if sim_s > 0.0 { v.ios as f64 / sim_s } else { 0.0 },
        throughput_bytes_per_s: if sim_s > 0.0 { v.bytes as f64 / sim_s } else { 0.0 },
        device_utilization: v.device_utilization,
        rollbacks: v.rollbacks,
        outstanding_max: v.outstanding_max,
        errors_read: v.errors[0],
        errors_write: v.errors[1],
        within_2pct: real.map(|r| r.within_2pct),
        within_20us: real.map(|r| r.within_20us),
        lateness_ns_p99: real.map(|r| r.lateness_ns_p99),
        real_time: real.map(|r| RealTimeFields {
            strategy: r.strategy,
            decisions: r.decisions.clone(),
            reference_waits: r.reference_waits,
            threads: r.threads,
            fifo: r.fifo,
            wall_ns: r.wall_ns,
            lat_ns_mean: r.all.lat_ns_mean,
            lat_ns_p50: r.all.lat_ns_p50,
            lat_ns_p99: r.all.lat_ns_p99,
            by_op: r.by_op.clone(),
            lateness_ns_p50: r.lateness_ns_p50,
            start_late_ns_p99: r.start_late_ns_p99,
            mean_error_pct: error_pct(r.all.lat_ns_mean, v.all.lat_ns_mean),
            p50_error_pct: error_pct(r.all.lat_ns_p50 as f64, v.all.lat_ns_p50 as f64),
            errors_read: r.errors[0],
            errors_write: r.errors[1],
            p99_error_pct: error_pct(r.all.lat_ns_p99 as f64, v.all.lat_ns_p99 as f64),
        }),
        trace: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_devemu::{parse_spec, Op};

    #[test]
    fn folding_keeps_ios_inside_the_device() {
        let mut ios = vec![TraceIo { arrival_ns: 0, op: Op::Read, offset: 5 << 30, bytes: 4096, stream: 0 }];
        assert_eq!(fit_to_capacity(&mut ios, 1 << 30).unwrap(), 1);
        assert!(ios[0].offset + 4096 <= 1 << 30 && ios[0].offset % 512 == 0);
        ios[0].bytes = 2 << 30;
        assert!(fit_to_capacity(&mut ios, 1 << 30).is_err());
    }

    #[test]
    fn record_carries_the_documented_fields() {
        let spec = parse_spec("emu:sdcard").unwrap();
        let w = replay::Workload::Closed(replay::ClosedLoop {
            op: Op::Read,
            sequential: false,
            bs_bytes: 4096,
            qd: 1,
            ios: 100,
            think_ns: 0,
            seed: 1,
        });
        let v = replay::run_virtual(&spec, &w, false).unwrap();
        assert_eq!(v.bytes_max, 4096);
        let r = replay_result(&spec, "closed".into(), &v, None);
        let json = serde_json::to_value(&r).unwrap();
        for key in ["device", "ios", "lat_ns_mean", "lat_ns_p50", "lat_ns_p99", "sim_ns", "wall_ns", "speedup"] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert_eq!(json["type"], "replay_result");
        assert_eq!(json["sim_ns"], 100 * 5_700);
        assert!(json.get("within_2pct").is_none());
    }
}
