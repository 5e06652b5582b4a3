//! The SmartCon study (Sec. 7) on this machine's devices: targets x loads x workloads x
//! sizes x strategies, one record per cell.
//!
//! - [`plan`]: the matrix after defaults and limits ([`plan::Plan`]);
//! - [`run`]: opens the targets (creating loop/zram devices where asked), probes those
//!   without a profile, and runs the turns: per cell the strategies take turns in a
//!   balanced order under the same load, so gains are ratios taken within one run;
//! - [`merge`]: a cell's turns (and a workload's phases) into one record, exactly;
//! - [`judge`]: the criteria the report is judged by, each with its source in the papers.
//!
//! The records are typed ([`Cell`], [`Corunner`]); their JSON names are documented in
//! docs/json.md and are the same as before the study left the CLI.
//!
//! Non-goals: statistical repetition within a run (run twice and compare), and the paper's
//! exact benchmark binaries (the workloads are "-like": same shape, documented parameters).

use serde::Serialize;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::profile::Profile;
use smartcon_engine::stats::JobResult;
use smartcon_workloads::postmark::PostmarkCounts;

pub mod fleet;
pub mod host;
pub mod judge;
pub mod kcpu;
pub mod merge;
pub mod plan;
pub mod run;

/// What runs beside the measured job (Sec. 7: "three system loads").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Load {
    /// Nothing else.
    BmOnly,
    /// Number crunchers, one per CPU by default.
    CpuIntensive,
    /// I/O workers on the same target, on the mainstream path.
    IoIntensive,
}

impl Load {
    pub const ALL: [Load; 3] = [Load::BmOnly, Load::CpuIntensive, Load::IoIntensive];

    pub fn name(self) -> &'static str {
        match self {
            Load::BmOnly => "bm-only",
            Load::CpuIntensive => "cpu-intensive",
            Load::IoIntensive => "io-intensive",
        }
    }

    pub fn parse(text: &str) -> Result<Load, Error> {
        parse_named(text, &Load::ALL, Load::name, "load")
    }
}

/// The workloads of Sec. 7.3-7.5 (see [`smartcon_workloads::workload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    IozoneRandRead,
    IozoneRandWrite,
    IozoneSeqRead,
    IozoneSeqWrite,
    Fileserver,
    Mailserver,
    Multistreamread,
    Singlestreamread,
    Postmark,
}

impl Workload {
    pub const ALL: [Workload; 9] = [
        Workload::IozoneRandRead,
        Workload::IozoneRandWrite,
        Workload::IozoneSeqRead,
        Workload::IozoneSeqWrite,
        Workload::Fileserver,
        Workload::Mailserver,
        Workload::Multistreamread,
        Workload::Singlestreamread,
        Workload::Postmark,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::IozoneRandRead => "iozone-rand-read",
            Workload::IozoneRandWrite => "iozone-rand-write",
            Workload::IozoneSeqRead => "iozone-seq-read",
            Workload::IozoneSeqWrite => "iozone-seq-write",
            Workload::Fileserver => "fileserver",
            Workload::Mailserver => "mailserver",
            Workload::Multistreamread => "multistreamread",
            Workload::Singlestreamread => "singlestreamread",
            Workload::Postmark => "postmark",
        }
    }

    pub fn parse(text: &str) -> Result<Workload, Error> {
        parse_named(text, &Workload::ALL, Workload::name, "workload")
    }

    /// The cells of this workload at `sizes` (Postmark: one cell of its block size).
    pub fn cells(self, sizes: &[u64]) -> Vec<smartcon_workloads::workload::CellPlan> {
        if self == Workload::Postmark {
            let block_bytes = smartcon_workloads::postmark::PostmarkSpec::default().block_bytes;
            return vec![smartcon_workloads::workload::CellPlan { bs_bytes: block_bytes, phases: Vec::new() }];
        }
        smartcon_workloads::workload::cells(self.name(), sizes).unwrap_or_default()
    }

    /// Whether the workload writes to the target.
    pub fn writes(self) -> bool {
        smartcon_workloads::workload::writes(self.name())
    }
}

fn parse_named<T: Copy>(text: &str, all: &[T], name: fn(T) -> &'static str, what: &str) -> Result<T, Error> {
    all.iter().copied().find(|x| name(*x) == text).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|x| name(*x)).collect();
        Error::new(ErrorKind::Usage, format!("unknown {what} {text:?}; use {}", names.join(", ")))
    })
}

/// What kind of co-runner a load is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CorunnerKind {
    /// Number crunchers; work is crunch batches.
    Cpu,
    /// I/O workers (threads of this process); work is I/Os.
    Io,
    /// I/O workers as separate processes (`--io-workers-as-processes`); work is I/Os.
    #[serde(rename = "io_processes")]
    IoProcesses,
}

/// What the co-running load did during one cell (Table VI).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Corunner {
    pub kind: CorunnerKind,
    pub workers: u32,
    pub real_ns: u64,
    pub work: u64,
    pub work_per_s: f64,
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Machine-wide iowait over the cell, percent of all CPU time.
    pub iowait_pct: f64,
}

/// One cell of the matrix: a `result` record with the cell's load and workload.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    #[serde(flatten)]
    pub result: JobResult,
    pub load: Load,
    pub workload: Workload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corunner: Option<Corunner>,
    /// Postmark only: transactions per second (the workload's figure of merit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tps: Option<f64>,
    /// Postmark only: what the transactions did, and the directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postmark: Option<PostmarkRecord>,
    /// Each turn's own figures before the merge, in round order: the Pareto criterion
    /// compares strategies round by round, since a round's turns shared the machine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnFigures>,
}

/// One turn's figures (the merged record holds their exact sums).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TurnFigures {
    /// The figure of merit: IOPS, or transactions per second for postmark.
    pub perf: f64,
    /// The co-runner's work per second during the turn, if a load ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corunner_work_per_s: Option<f64>,
    /// CPU of the I/O threads during the turn, percent of one CPU (user + system).
    pub cpu_pct: f64,
    /// CPU of the kernel's threads and this process's io_uring workers during the turn,
    /// percent of one CPU: what the I/O costs outside its thread ([`kcpu`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kernel_cpu_pct: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl TurnFigures {
    /// The CPU the turn's I/O cost: its threads' and the kernel's for it ([`kcpu`]).
    pub fn io_cpu_pct(&self) -> f64 {
        self.cpu_pct + self.kernel_cpu_pct
    }
}

impl Cell {
    /// The cell's figure of merit: transactions per second for postmark, else IOPS.
    pub fn perf(&self) -> f64 {
        self.tps.unwrap_or(self.result.iops)
    }

    /// CPU the cell's I/O cost, percent of one CPU: the I/O threads' (user + system), and
    /// the kernel threads' and io_uring workers' beside them (the turns' mean, [`kcpu`]).
    pub fn cpu_pct(&self) -> f64 {
        self.result.cpu_user_pct + self.result.cpu_sys_pct + self.kernel_cpu_pct()
    }

    /// The kernel threads' and io_uring workers' CPU during the cell's turns, their mean,
    /// percent of one CPU (0 where not measured).
    pub fn kernel_cpu_pct(&self) -> f64 {
        if self.turns.is_empty() {
            return 0.0;
        }
        self.turns.iter().map(|t| t.kernel_cpu_pct).sum::<f64>() / self.turns.len() as f64
    }

    /// Context switches (voluntary + involuntary) per I/O.
    pub fn csw_per_io(&self) -> f64 {
        let r = &self.result;
        if r.ios == 0 {
            0.0
        } else {
            (r.ctx_voluntary + r.ctx_involuntary) as f64 / r.ios as f64
        }
    }

    /// The co-runner's work rate over the cell's turns, if a load ran.
    pub fn corunner_rate(&self) -> Option<f64> {
        self.corunner.as_ref().filter(|k| k.real_ns > 0).map(|k| k.work as f64 * 1e9 / k.real_ns as f64)
    }

    /// Whether `other` is the same cell (load, workload, target, size), any strategy.
    pub fn same_cell(&self, other: &Cell) -> bool {
        self.load == other.load
            && self.workload == other.workload
            && self.result.target == other.result.target
            && self.result.bs_bytes == other.result.bs_bytes
    }
}

/// The postmark part of a cell's record.
#[derive(Debug, Clone, Serialize)]
pub struct PostmarkRecord {
    pub dir: String,
    #[serde(flatten)]
    pub counts: PostmarkCounts,
    pub size_bytes_min: u64,
    pub size_bytes_max: u64,
    pub block_bytes: u64,
    pub read_bias_pct: u32,
    pub create_bias_pct: u32,
}

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct MachineRecord {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: u32,
    pub note: &'static str,
}

impl MachineRecord {
    /// This machine, from /proc.
    pub fn here() -> MachineRecord {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        MachineRecord {
            record_type: "machine",
            kernel,
            cpu_model,
            cpus: smartcon_engine::profile::online_cpus(),
            note: "timings are from one run; the machine may have been shared",
        }
    }
}

/// The profile smart used on a target.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileRecord<'a> {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: &'a str,
    #[serde(flatten)]
    pub profile: &'a Profile,
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_and_workloads_keep_their_json_names() {
        for l in Load::ALL {
            assert_eq!(serde_json::to_value(l).unwrap(), l.name());
            assert_eq!(Load::parse(l.name()).unwrap(), l);
        }
        for w in Workload::ALL {
            assert_eq!(serde_json::to_value(w).unwrap(), w.name());
            assert_eq!(Workload::parse(w.name()).unwrap(), w);
        }
        for name in smartcon_workloads::workload::NAMES.iter().chain([&smartcon_workloads::workload::POSTMARK]) {
            assert!(Workload::parse(name).is_ok(), "{name}");
        }
        let e = Load::parse("busy").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("bm-only, cpu-intensive, io-intensive"), "{e}");
    }
}
