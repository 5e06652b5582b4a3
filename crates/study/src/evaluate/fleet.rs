//! One host of a fleet survey (`smartcon fleet`): what a storage team compares across
//! hosts, taken from one evaluate run on that host. The survey's driver (python/smartcon_ray)
//! runs `smartcon evaluate --fleet-host NODE_ID` on every node and collects these records;
//! `smartcon report` puts them side by side.
//!
//! Non-goals: measuring anything beyond what evaluate measured; the record only gathers its
//! host figures, its paired Pareto judgement and its probed thresholds under one name.

use serde::Serialize;
use smartcon_engine::profile::Profile;

use super::host::HostRecord;
use super::judge::Pareto;

/// The thresholds a probe (or the built-in model) found for one target of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetThresholds {
    pub target: String,
    pub source: String,
    pub class: String,
    pub size_threshold_bytes: u64,
    pub queue_limit: u32,
    pub cpu_threshold_pct: u32,
    pub spin_cheaper_bytes_max: u64,
}

/// The `fleet_host` record (docs/json.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetHost {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// The Ray node id the task was pinned to.
    pub node_id: String,
    /// The host's name (/proc/sys/kernel/hostname).
    pub host: String,
    pub kernel: String,
    pub cpus: u32,
    /// CPU a blocking wait burns in the waiting thread (None: not measured in this run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_cpu_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin_overhead_ns: Option<f64>,
    /// How late a timed sleep of `sleep_asked_ns` wakes (the wake-up cost).
    pub sleep_asked_ns: u64,
    pub wakeup_overshoot_ns_p50: u64,
    pub wakeup_overshoot_ns_p99: u64,
    /// Single-thread cells judged on the paired Pareto rule, and those where smart is on
    /// the front (not beaten by a fixed strategy).
    pub pareto_judged: usize,
    pub pareto_front: usize,
    /// pareto_front / pareto_judged; None when no cell was judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pareto_share: Option<f64>,
    /// The local disk's 4 KiB random-read gains over block (None: the run had no such cell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_disk_4k_spin_gain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_disk_4k_smart_gain: Option<f64>,
    pub thresholds: Vec<FleetThresholds>,
    /// Cells the evaluate run measured, and its wall time.
    pub cells: usize,
    pub evaluate_ns: u64,
}

impl FleetHost {
    /// The record of one host's evaluate run.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        node_id: &str,
        host: &str,
        machine: &super::MachineRecord,
        record: &HostRecord,
        pareto: &Pareto,
        profiles: &[(String, &Profile)],
        cells: usize,
        evaluate_ns: u64,
    ) -> Self {
        let front = pareto.judged - pareto.lost.len();
        assert!(pareto.lost.len() <= pareto.judged, "a lost cell is a judged cell");
        FleetHost {
            record_type: "fleet_host",
            node_id: node_id.to_string(),
            host: host.to_string(),
            kernel: machine.kernel.clone(),
            cpus: machine.cpus,
            block_cpu_ns: record.block_cpu_ns,
            spin_overhead_ns: record.spin_overhead_ns,
            sleep_asked_ns: record.sleep_asked_ns,
            wakeup_overshoot_ns_p50: record.sleep_overshoot_ns_p50,
            wakeup_overshoot_ns_p99: record.sleep_overshoot_ns_p99,
            pareto_judged: pareto.judged,
            pareto_front: front,
            pareto_share: (pareto.judged > 0).then(|| front as f64 / pareto.judged as f64),
            local_disk_4k_spin_gain: record.local_disk_4k_spin_gain,
            local_disk_4k_smart_gain: record.local_disk_4k_smart_gain,
            thresholds: profiles
                .iter()
                .map(|(target, p)| FleetThresholds {
                    target: target.clone(),
                    source: p.source.clone(),
                    class: p.class.name().to_string(),
                    size_threshold_bytes: p.size_threshold_bytes,
                    queue_limit: p.queue_limit,
                    cpu_threshold_pct: p.cpu_threshold_pct,
                    spin_cheaper_bytes_max: p.spin_cheaper_bytes_max,
                })
                .collect(),
            cells,
            evaluate_ns,
        }
    }
}

/// This host's name, as the kernel has it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}
