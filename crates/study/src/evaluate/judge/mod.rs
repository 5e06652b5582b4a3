//! The criteria a report is judged by, each with its measured figure, whether it was met,
//! and its source in the papers (SmartCon = Gim et al., "SmartCon: Smart Context Switching
//! for Fast Storage IO Devices").
//!
//! Each criterion looks at the cells it applies to and names the worst one with the
//! decision branch smart took most there, so a miss says where and why. A criterion that
//! no cell of the run applies to is `met: None` (not judged), never a pass.
//!
//! The files, one job each: `paired.rs` the paired rule (one strategy beats another round by
//! round, on the figure of merit and on the co-runner's work or the CPU); `pareto.rs` the
//! Pareto verdict of a run (smart against every fixed strategy, cell by cell, the whole-cell
//! rule of earlier reports beside it, and the judge's floor); `paper.rs` smart against the
//! paper's rule as written; `criteria.rs` the criteria a report lists, each with its figure.
//! This file holds what they share: how a cell is found and named.

mod criteria;
mod paired;
mod paper;
mod pareto;

use smartcon_engine::decision::{DeviceClass, Strategy};
use smartcon_engine::job::StrategyChoice;
use smartcon_util::units::format_size;

use super::{Cell, Load, Workload};

pub use criteria::*;
pub use paired::*;
pub use paper::*;
pub use pareto::*;

const BLOCK: StrategyChoice = StrategyChoice::Fixed(Strategy::Block);
const SPIN: StrategyChoice = StrategyChoice::Fixed(Strategy::Spin);
const SMART: StrategyChoice = StrategyChoice::Smart;

/// The cell of the same load, workload, target and size as `c`, under `strategy`.
pub fn find<'a>(cells: &'a [Cell], c: &Cell, strategy: StrategyChoice) -> Option<&'a Cell> {
    cells.iter().find(|x| x.same_cell(c) && x.result.strategy == strategy)
}

/// `c`'s figure of merit against block's in the same cell.
pub fn gain(cells: &[Cell], c: &Cell) -> Option<f64> {
    find(cells, c, BLOCK).filter(|b| b.perf() > 0.0).map(|b| c.perf() / b.perf())
}

/// "load target workload size": how the report names a cell.
pub fn cell_name(c: &Cell) -> String {
    format!("{} {} {} {}", c.load.name(), c.result.target, c.workload.name(), format_size(c.result.bs_bytes))
}

/// The decision branch smart took most in a cell, with its share: the usual "why".
pub fn main_reason(c: &Cell) -> String {
    let total: u64 = c.result.decisions.by_reason.values().sum();
    match c.result.decisions.by_reason.iter().max_by_key(|(_, v)| **v) {
        Some((k, v)) if total > 0 => format!("{} {:.0}%", k.name(), *v as f64 * 100.0 / total as f64),
        _ => "no decisions".into(),
    }
}

/// The co-runner's work rate beside `strategy` on target `t` under the CPU-intensive load.
pub fn corunner_rate(cells: &[Cell], t: &str, strategy: StrategyChoice) -> Option<f64> {
    let (w, r) = cells
        .iter()
        .filter(|c| c.result.target == t && c.load == Load::CpuIntensive && c.result.strategy == strategy)
        .filter_map(|c| c.corunner.as_ref())
        .fold((0u64, 0u64), |a, k| (a.0 + k.work, a.1 + k.real_ns));
    (r > 0).then(|| w as f64 / r as f64)
}

/// What the tests of the judge's files share: cells, targets and rounds to judge.
#[cfg(test)]
mod test_support {
    use super::*;
    pub(super) use crate::evaluate::merge::tests::record;
    pub(super) use crate::evaluate::{Corunner, CorunnerKind, TurnFigures};
    pub(super) use smartcon_engine::decision::Reason;

    /// A cell whose figure of merit is `iops` (1000 I/Os over 1e9/iops * 1000 ns).
    pub(super) fn cell(load: Load, target: &str, bs: u64, strategy: StrategyChoice, iops: f64) -> Cell {
        let duration_ns = (1000.0 * 1e9 / iops) as u64;
        let mut r = record(strategy, &[10_000; 1000], duration_ns, 10.0);
        r.target = target.into();
        r.bs_bytes = bs;
        Cell {
            result: r,
            load,
            workload: Workload::IozoneRandRead,
            corunner: None,
            tps: None,
            postmark: None,
            turns: Vec::new(),
        }
    }

    pub(super) fn disk() -> Vec<TargetInfo> {
        vec![TargetInfo {
            label: "disk".into(),
            class: DeviceClass::Fast,
            size_threshold_bytes: 65536,
            local_disk: true,
            probed: Vec::new(),
        }]
    }

    pub(super) fn by_name<'a>(c: &'a [Criterion], prefix: &str) -> &'a Criterion {
        c.iter().find(|x| x.criterion.starts_with(prefix)).unwrap()
    }

    pub(super) fn corunner(work: u64) -> Corunner {
        Corunner {
            kind: CorunnerKind::Cpu,
            workers: 2,
            real_ns: 1_000_000_000,
            work,
            work_per_s: work as f64,
            user_ns: 0,
            sys_ns: 0,
            iowait_pct: 0.0,
        }
    }

    /// A cell under `load` with `iops`, co-runner work `work` (per s) and turns' figures.
    pub(super) fn loaded(load: Load, strategy: StrategyChoice, iops: f64, work: u64, turns: &[(f64, f64)]) -> Cell {
        let mut c = cell(load, "emu:optane", 4096, strategy, iops);
        c.corunner = Some(corunner(work));
        c.turns = turns
            .iter()
            .map(|&(perf, w)| TurnFigures { perf, corunner_work_per_s: Some(w), cpu_pct: 10.0, kernel_cpu_pct: 0.0 })
            .collect();
        c
    }

    pub(super) const SYNC: StrategyChoice = StrategyChoice::Fixed(Strategy::Sync);

    /// Rounds that swing 2x for every strategy alike (as a shared VM's do) and a fixed
    /// strategy 10% ahead of smart in every one of them.
    pub(super) fn swinging(ahead: &[f64]) -> (Cell, Cell) {
        let l = Load::CpuIntensive;
        let swing = [32.0, 37.0, 51.0, 51.0, 52.0, 52.0, 29.0, 36.0];
        let smart_turns: Vec<(f64, f64)> = swing.iter().map(|k| (k * 1000.0, 2000.0 - k * 10.0)).collect();
        let fixed_turns: Vec<(f64, f64)> =
            swing.iter().zip(ahead.iter().cycle()).map(|(k, a)| (k * 1000.0 * a, 2000.0 - k * 10.0)).collect();
        let mean = |t: &[(f64, f64)]| t.iter().map(|x| x.0).sum::<f64>() / t.len() as f64;
        let smart = loaded(l, SMART, mean(&smart_turns), 1500, &smart_turns);
        let spin = loaded(l, SPIN, mean(&fixed_turns), 1500, &fixed_turns);
        (smart, spin)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn the_corunner_rate_is_summed_work_over_summed_time() {
        let k = |work, real_ns| Corunner {
            kind: CorunnerKind::Cpu,
            workers: 2,
            real_ns,
            work,
            work_per_s: 0.0,
            user_ns: 0,
            sys_ns: 0,
            iowait_pct: 0.0,
        };
        let mut cells = vec![
            cell(Load::CpuIntensive, "t", 4096, BLOCK, 1000.0),
            cell(Load::CpuIntensive, "t", 8192, BLOCK, 1000.0),
            cell(Load::CpuIntensive, "t", 4096, SMART, 1000.0),
        ];
        cells[0].corunner = Some(k(100, 1_000));
        cells[1].corunner = Some(k(300, 1_000));
        cells[2].corunner = Some(k(190, 1_000));
        let c = by_name(&criteria(&cells, &[]), "cpu-intensive: the co-running").clone();
        assert_eq!(c.measured, "work rate beside smart / beside block: t 0.950");
        assert_eq!(c.met, Some(false));
    }
}
