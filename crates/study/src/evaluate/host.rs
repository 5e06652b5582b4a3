//! What the machine was, as the decision sees it: the figures a reader needs before the
//! rest of a report. The host under these VMs changes from one session to the next (a
//! blocking wait burnt 9.7 us of CPU on one and 32 us on another; the local disk's 4 KiB
//! spin gain went from 1.08 x to 1.45 x), so every report states its own: the CPU a
//! blocking wait burns, how late a timed sleep wakes, the local disk's spin gain measured
//! in this run, and how far the rounds swing for every strategy alike.
//!
//! Non-goals: measuring what the run measures anyway (the gains come from its cells), and
//! judging (see [`super::judge`]).

use serde::Serialize;
use smartcon_engine::host::HostModel;
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::profile::HostWaitCost;
use smartcon_util::stats::{common_swing, median, PairedRatio};

use super::judge::{find, TargetInfo};
use super::{Cell, Load, Workload};

/// The `host` record of an evaluate run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRecord {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// CPU a blocking wait burns in the waiting thread (timer, switch out, switch in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_cpu_ns: Option<f64>,
    /// CPU a spinning wait burns beyond the device time (submission, polling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin_overhead_ns: Option<f64>,
    /// A timed sleep of `sleep_asked_ns` (timer slack 1 ns) wakes this late: the median
    /// and the 99th percentile over `sleep_count` sleeps.
    pub sleep_asked_ns: u64,
    pub sleep_count: usize,
    pub sleep_overshoot_ns_p50: u64,
    pub sleep_overshoot_ns_p99: u64,
    /// Local-disk file, 4 KiB random reads, bm-only: spin's and smart's IOPS over block's
    /// (geometric mean of the per-round ratios), if the run has that cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_disk_4k_spin_gain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_disk_4k_smart_gain: Option<f64>,
    /// How far a cell's rounds swing for every strategy alike, per load: the median over
    /// the cells of (max - min) / median of the rounds' common factor.
    pub common_swing: Vec<LoadSwing>,
    /// `$SMARTCON_HOME/host.json` as `smartcon host` measured it, when stored (not measured
    /// by the run: the caller reads it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_model: Option<HostModel>,
}

/// The common swing of one load's cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSwing {
    pub load: Load,
    pub cells: usize,
    pub median: f64,
    pub max: f64,
}

/// The sleep the overshoot is measured with: about a fast SSD's read.
pub const SLEEP_ASKED_NS: u64 = 20_000;
/// Sleeps measured: about 20-40 ms in all on these hosts.
pub const SLEEP_COUNT: usize = 400;

impl HostRecord {
    /// The record of a run: `wait` is the host wait cost the run used, `overshoots_ns` the
    /// sorted overshoots of [`SLEEP_COUNT`] sleeps of [`SLEEP_ASKED_NS`].
    pub fn of(cells: &[Cell], targets: &[TargetInfo], wait: Option<&HostWaitCost>, overshoots_ns: &[u64]) -> Self {
        let pct = |p: f64| -> u64 {
            if overshoots_ns.is_empty() {
                return 0;
            }
            overshoots_ns[((overshoots_ns.len() - 1) as f64 * p).round() as usize]
        };
        let smart = StrategyChoice::Smart;
        let local_4k = cells.iter().find(|c| {
            c.result.strategy == smart
                && c.load == Load::BmOnly
                && c.workload == Workload::IozoneRandRead
                && c.result.bs_bytes == 4096
                && c.result.threads == 1
                && targets.iter().any(|t| t.label == c.result.target && t.local_disk)
        });
        let perf = |c: &Cell| c.turns.iter().map(|t| t.perf).collect::<Vec<f64>>();
        let gain = |s: StrategyChoice| {
            let c = local_4k?;
            let b = find(cells, c, StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Block))?;
            let x = if s == smart { c } else { find(cells, c, s)? };
            PairedRatio::of(&perf(x), &perf(b)).map(|r| r.gmean)
        };
        HostRecord {
            record_type: "host",
            block_cpu_ns: wait.map(|w| w.block_cpu_ns),
            spin_overhead_ns: wait.map(|w| w.spin_overhead_ns),
            sleep_asked_ns: SLEEP_ASKED_NS,
            sleep_count: overshoots_ns.len(),
            sleep_overshoot_ns_p50: pct(0.5),
            sleep_overshoot_ns_p99: pct(0.99),
            local_disk_4k_spin_gain: gain(StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Spin)),
            local_disk_4k_smart_gain: gain(smart),
            common_swing: Load::ALL.iter().filter_map(|&l| load_swing(cells, l)).collect(),
            host_model: None,
        }
    }

    /// One paragraph for the head of a report.
    pub fn text(&self) -> String {
        let us = |ns: f64| format!("{:.1} us", ns / 1000.0);
        let mut s = String::from("This host: ");
        s += &match (self.block_cpu_ns, self.spin_overhead_ns) {
            (Some(b), Some(sp)) => {
                format!(
                    "a blocking wait burns {} of the waiting thread's CPU, a spinning one {} beyond the device time; ",
                    us(b),
                    us(sp)
                )
            }
            _ => "the blocking wait's CPU was not measured in this run; ".into(),
        };
        s += &format!(
            "a timed sleep of {} wakes {} late (median; p99 {})",
            us(self.sleep_asked_ns as f64),
            us(self.sleep_overshoot_ns_p50 as f64),
            us(self.sleep_overshoot_ns_p99 as f64)
        );
        s += &match (self.local_disk_4k_spin_gain, self.local_disk_4k_smart_gain) {
            (Some(sp), Some(sm)) => format!(
                "; on the local disk, 4 KiB random reads with nothing else running, spin gives {sp:.2} x block's IOPS and smart {sm:.2} x (round by round)"
            ),
            _ => "; the run has no local-disk 4 KiB cell to give the spin gain".into(),
        };
        if !self.common_swing.is_empty() {
            s += &format!(
                ". A cell's rounds swing for every strategy alike by {} (median over cells; max - min over median): a swing the paired judge cancels, and which a comparison of whole cells would mistake for noise between strategies",
                self.common_swing
                    .iter()
                    .map(|w| format!("{:.0}% {} (max {:.0}%)", w.median * 100.0, w.load.name(), w.max * 100.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        s += ".";
        if let Some(m) = &self.host_model {
            s += &format!(" {}", model_text(m));
        }
        s
    }
}

/// One sentence naming a stored host model's figures (`smartcon host`).
pub fn model_text(m: &HostModel) -> String {
    let us = |ns: f64| format!("{:.1} us", ns / 1000.0);
    let sleeps: Vec<String> = m
        .sleep
        .iter()
        .map(|p| format!("{:.0} us: {}/{}", p.requested_ns / 1000.0, us(p.overshoot.p50_ns), us(p.overshoot.p99_ns)))
        .collect();
    let switch = match (m.switch_direct_ns, m.switch_indirect_ns) {
        (Some(d), Some(i)) => format!("; a context switch {} direct, {} indirect", us(d), us(i)),
        _ => String::new(),
    };
    format!(
        "Its host model (host.json, {}): sleeps overshoot (p50/p99) {}; a wake-up across cores takes {} (p99 {}), {} more onto an idle core, and costs the waker {} of CPU{switch}; blocking through io_uring waits {:+.1} us per I/O against pread idle and {:+.1} us beside a spinner on every core.",
        m.source,
        sleeps.join(", "),
        us(m.wakeup.p50_ns),
        us(m.wakeup.p99_ns),
        us(m.idle_wake_extra_ns),
        us(m.waker_cpu_ns),
        m.block_path.uring_extra_idle_ns / 1000.0,
        m.block_path.uring_extra_beside_spinners_ns / 1000.0,
    )
}

/// The common swing of `load`'s multi-round cells, `None` without any.
fn load_swing(cells: &[Cell], load: Load) -> Option<LoadSwing> {
    let mut swings: Vec<f64> = cells
        .iter()
        .filter(|c| c.load == load && c.result.strategy == StrategyChoice::Smart && c.turns.len() >= 2)
        .map(|c| {
            let turns: Vec<Vec<f64>> =
                cells.iter().filter(|x| x.same_cell(c)).map(|x| x.turns.iter().map(|t| t.perf).collect()).collect();
            common_swing(&turns)
        })
        .collect();
    if swings.is_empty() {
        return None;
    }
    let max = swings.iter().copied().fold(0.0, f64::max);
    Some(LoadSwing { load, cells: swings.len(), median: median(&mut swings), max })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::merge::tests::record;
    use crate::evaluate::TurnFigures;
    use smartcon_engine::decision::{DeviceClass, Strategy};

    #[test]
    fn the_header_names_a_stored_host_model_and_only_then() {
        let mut h = HostRecord::of(&[], &[], None, &[]);
        assert!(!h.text().contains("host model"));
        let m = HostModel::preset("host-c").unwrap();
        h.host_model = Some(m.clone());
        let t = h.text();
        assert!(t.contains("Its host model (host.json"), "{t}");
        assert!(t.contains("5 us: 16.0 us/27.0 us"), "{t}");
        let extra = format!("{:+.1} us per I/O against pread idle", m.block_path.uring_extra_idle_ns / 1000.0);
        assert!(t.contains(&extra), "{t}");
        assert!(serde_json::to_string(&h).unwrap().contains("\"host_model\":{"));
    }

    fn cell(strategy: StrategyChoice, turns: &[f64]) -> Cell {
        let mut r = record(strategy, &[10_000; 100], 1_000_000_000, 10.0);
        r.target = "disk".into();
        r.bs_bytes = 4096;
        Cell {
            result: r,
            load: Load::BmOnly,
            workload: Workload::IozoneRandRead,
            corunner: None,
            tps: None,
            postmark: None,
            turns: turns
                .iter()
                .map(|&perf| TurnFigures { perf, corunner_work_per_s: None, cpu_pct: 10.0, kernel_cpu_pct: 0.0 })
                .collect(),
        }
    }

    #[test]
    fn the_host_record_states_the_runs_own_figures() {
        let cells = vec![
            cell(StrategyChoice::Fixed(Strategy::Block), &[100.0, 200.0]),
            cell(StrategyChoice::Fixed(Strategy::Spin), &[130.0, 260.0]),
            cell(StrategyChoice::Smart, &[120.0, 240.0]),
        ];
        let disk = [TargetInfo {
            label: "disk".into(),
            class: DeviceClass::Fast,
            size_threshold_bytes: 1 << 20,
            local_disk: true,
            probed: Vec::new(),
        }];
        let wait = HostWaitCost {
            version: HostWaitCost::VERSION,
            block_cpu_ns: 9700.0,
            spin_overhead_ns: 230.0,
            switch_ns: None,
            spin_harmless_service_ns_max: Some(20_000.0),
            beside_crunchers: Vec::new(),
            inline_wins_service_ns_max: None,
            inline_write_wins_service_ns_max: None,
            inline_beside_crunchers: Vec::new(),
            source: "t".into(),
        };
        let overshoots: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let h = HostRecord::of(&cells, &disk, Some(&wait), &overshoots);
        assert_eq!((h.sleep_overshoot_ns_p50, h.sleep_overshoot_ns_p99), (51_000, 99_000));
        assert!((h.local_disk_4k_spin_gain.unwrap() - 1.3).abs() < 1e-9, "{h:?}");
        assert!((h.local_disk_4k_smart_gain.unwrap() - 1.2).abs() < 1e-9, "{h:?}");
        // Every strategy doubled in round 2: round factors 1/sqrt(2) and sqrt(2), whose
        // range over their median is 2/3.
        let w = &h.common_swing[0];
        assert_eq!((w.load, w.cells), (Load::BmOnly, 1));
        assert!((w.median - 2.0 / 3.0).abs() < 1e-9 && w.median == w.max, "{w:?}");
        let t = h.text();
        assert!(
            t.contains("a blocking wait burns 9.7 us") && t.contains("spin gives 1.30 x") && t.contains("bm-only"),
            "{t}"
        );
        // Not a local disk: no gain to state, and the text says so.
        let not_local = [TargetInfo { local_disk: false, ..disk[0].clone() }];
        let h = HostRecord::of(&cells, &not_local, None, &[]);
        assert_eq!((h.local_disk_4k_spin_gain, h.block_cpu_ns), (None, None));
        assert!(h.text().contains("no local-disk 4 KiB cell"), "{}", h.text());
    }
}
