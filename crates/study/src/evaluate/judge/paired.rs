//! The paired rule: whether one strategy dominates another in a cell, comparing their
//! rounds pair by pair (turn `i` of each ran in round `i`), with its bounds, and the spread
//! of a cell's turns that the whole-cell rule reads.

use serde::Serialize;

use super::*;

/// The Pareto criterion's bounds: a fixed strategy beats smart in a cell when it gives at
/// least this much more of the figure of merit (the geometric mean of the per-round
/// ratios, with the lower end of its 90% interval above 1)...
pub const PARETO_PERF_GAIN: f64 = 0.05;

/// ...while the co-runner keeps at least this share of the work it does beside smart
/// (the geometric mean of the per-round ratios),
pub const PARETO_CORUNNER_KEPT: f64 = 0.97;

/// or nearly the same figure of merit (at least [`PARETO_PERF_SAME`]) with at least this
/// much more co-runner work (lower end of its interval above 1).
pub const PARETO_CORUNNER_GAIN: f64 = 0.03;

/// "Nearly the same figure of merit": the geometric mean of the per-round ratios.
pub const PARETO_PERF_SAME: f64 = 0.98;

/// bm-only: the faster strategy may spend at most this many more points of one CPU,
pub const PARETO_CPU_PCT_MORE_MAX: f64 = 5.0;

/// or one with nearly the same IOPS at least this many points less.
pub const PARETO_CPU_PCT_LESS_MIN: f64 = 20.0;

/// The axis on which one strategy beat another in a cell (see [`beats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// >= 5% more of the figure of merit (IOPS; transactions for postmark), surely.
    Perf,
    /// Nearly the same figure with >= 3% more co-runner work, surely.
    Corunner,
    /// bm-only: nearly the same figure at 20 or more points less CPU.
    Cpu,
}

impl Axis {
    pub fn name(self) -> &'static str {
        match self {
            Axis::Perf => "perf",
            Axis::Corunner => "co-runner",
            Axis::Cpu => "cpu",
        }
    }
}

/// How far turns of the same thing differ: (max - min) / median of the values; 0 with
/// fewer than two turns (no yardstick: the bounds alone judge).
pub fn turn_spread(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mut v = values.to_vec();
    let median = crate::probe::median(&mut v);
    let (lo, hi) = (v[0], v[v.len() - 1]);
    if median > 0.0 {
        (hi - lo) / median
    } else {
        0.0
    }
}

/// A cell's per-round figures on one axis; the whole cell's as one round if the record has
/// no turns (a record of an older run, or a test's).
pub(super) fn rounds_of(
    c: &Cell,
    turn: impl Fn(&crate::evaluate::TurnFigures) -> Option<f64>,
    whole: Option<f64>,
) -> Vec<f64> {
    if c.turns.is_empty() {
        whole.into_iter().collect()
    } else {
        c.turns.iter().map(|t| turn(t).unwrap_or(0.0)).collect()
    }
}

/// Whether `a` dominates `b` in their cell, compared round by round, whatever the two
/// strategies are: the rule [`pareto`] applies to a fixed strategy against smart, and
/// [`smart_vs_paper`] to smart and paper both ways ([`beats`] on the cells' turns).
pub fn beats_cell(a: &Cell, b: &Cell) -> Option<Beat> {
    let with_corunner = match (b.corunner_rate(), a.corunner_rate()) {
        (Some(_), Some(_)) => true,
        (None, None) if b.load == Load::BmOnly => false,
        _ => return None,
    };
    beats(&turns_of(a), &turns_of(b), with_corunner)
}

/// A cell's turns; the whole cell as one turn if the record has none (a record of an
/// older run, or a test's).
pub fn turns_of(c: &Cell) -> Vec<crate::evaluate::TurnFigures> {
    if c.turns.is_empty() {
        vec![crate::evaluate::TurnFigures {
            perf: c.perf(),
            corunner_work_per_s: c.corunner_rate(),
            cpu_pct: c.cpu_pct(),
            kernel_cpu_pct: 0.0,
        }]
    } else {
        c.turns.clone()
    }
}

/// How `a` beat `b`, round by round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beat {
    /// a's figure of merit over b's, per round.
    pub perf: smartcon_util::stats::PairedRatio,
    /// The co-runner's work beside a over beside b (geometric mean of the rounds), under a load.
    pub corunner_ratio: Option<f64>,
    /// a's CPU less b's, mean over the rounds, points of one CPU (no co-runner).
    pub cpu_pct_more: Option<f64>,
    /// Which test a passed: the figure of merit, or the other axis at nearly the same figure.
    pub axis: Axis,
}

/// Whether `a` dominates `b` on both axes, comparing their turns round by round (turn `i`
/// of each ran in round `i`). With a co-runner: a's figure of merit is surely >= 1.05 x
/// b's (geometric mean of the per-round ratios, lower end of the 90% interval above 1)
/// while the co-runner keeps >= 0.97 of its work, or >= 0.98 x with the co-runner's work
/// surely >= 1.03 x. Without one: the same figure-of-merit test at no more than 5 points
/// more CPU, or >= 0.98 x at 20 or more points less. The rule of [`pareto`], for any two
/// strategies (the polling study uses it for smart-hybrid against its peers).
pub fn beats(
    a: &[crate::evaluate::TurnFigures],
    b: &[crate::evaluate::TurnFigures],
    with_corunner: bool,
) -> Option<Beat> {
    use smartcon_util::stats::PairedRatio;
    let axis = |t: &[crate::evaluate::TurnFigures], f: fn(&crate::evaluate::TurnFigures) -> f64| {
        t.iter().map(f).collect::<Vec<f64>>()
    };
    let r = PairedRatio::of(&axis(a, |t| t.perf), &axis(b, |t| t.perf))?;
    let faster = r.surely_at_least(1.0 + PARETO_PERF_GAIN);
    if with_corunner {
        let work = |t: &crate::evaluate::TurnFigures| t.corunner_work_per_s.unwrap_or(0.0);
        let k = PairedRatio::of(&axis(a, work), &axis(b, work))?;
        let by_perf = faster && k.gmean >= PARETO_CORUNNER_KEPT;
        let won = by_perf || (r.gmean >= PARETO_PERF_SAME && k.surely_at_least(1.0 + PARETO_CORUNNER_GAIN));
        let axis = if by_perf { Axis::Perf } else { Axis::Corunner };
        won.then_some(Beat { perf: r, corunner_ratio: Some(k.gmean), cpu_pct_more: None, axis })
    } else {
        let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.io_cpu_pct() - y.io_cpu_pct()).collect();
        let more = smartcon_util::stats::mean(&diffs)?;
        let by_perf = faster && more <= PARETO_CPU_PCT_MORE_MAX;
        let won = by_perf || (r.gmean >= PARETO_PERF_SAME && more <= -PARETO_CPU_PCT_LESS_MIN);
        let axis = if by_perf { Axis::Perf } else { Axis::Cpu };
        won.then_some(Beat { perf: r, corunner_ratio: None, cpu_pct_more: Some(more), axis })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turn_spread_is_max_minus_min_over_the_median() {
        assert_eq!(turn_spread(&[]), 0.0);
        assert_eq!(turn_spread(&[5.0]), 0.0);
        assert!((turn_spread(&[90.0, 100.0, 110.0]) - 0.2).abs() < 1e-12);
        assert_eq!(turn_spread(&[0.0, 0.0]), 0.0);
    }
}
