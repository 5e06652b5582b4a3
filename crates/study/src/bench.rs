//! What a `bench` matrix comes to: smart against the better of block and spin per cell.

use serde::Serialize;
use smartcon_engine::decision::Strategy;
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::stats::JobResult;

/// The `summary` record of a bench run under one load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub cells: usize,
    pub smart_cells: usize,
    /// Cells where smart reached at least 0.97 x the better of block and spin.
    pub smart_within_3pct: usize,
    pub smart_ratio_min: Option<f64>,
    pub load: String,
    pub interrupted: bool,
}

/// The record of the same target, op and size as `r` under `strategy`.
pub fn find<'a>(results: &'a [JobResult], r: &JobResult, strategy: StrategyChoice) -> Option<&'a JobResult> {
    results.iter().find(|x| x.target == r.target && x.op == r.op && x.bs_bytes == r.bs_bytes && x.strategy == strategy)
}

/// smart's IOPS against the better of block and spin, per cell.
pub fn summarize(results: &[JobResult], load: &str, interrupted: bool) -> Summary {
    let (mut smart_cells, mut ok, mut min) = (0, 0, None::<f64>);
    for r in results.iter().filter(|r| r.strategy == StrategyChoice::Smart) {
        let best = [Strategy::Block, Strategy::Spin]
            .iter()
            .filter_map(|s| find(results, r, StrategyChoice::Fixed(*s)))
            .map(|x| x.iops)
            .fold(0.0, f64::max);
        if best > 0.0 {
            let ratio = r.iops / best;
            smart_cells += 1;
            ok += (ratio >= 0.97) as usize;
            min = Some(min.map_or(ratio, |m| m.min(ratio)));
        }
    }
    Summary {
        record_type: "summary",
        cells: results.len(),
        smart_cells,
        smart_within_3pct: ok,
        smart_ratio_min: min,
        load: load.to_string(),
        interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::merge::tests::record;

    #[test]
    fn smart_is_compared_with_the_better_fixed_strategy_of_its_cell() {
        let at = |s, iops: f64, bs| {
            let mut r = record(s, &[10_000; 100], (100.0 * 1e9 / iops) as u64, 0.0);
            r.bs_bytes = bs;
            r
        };
        let results = vec![
            at(StrategyChoice::Fixed(Strategy::Block), 1000.0, 4096),
            at(StrategyChoice::Fixed(Strategy::Spin), 2000.0, 4096),
            at(StrategyChoice::Smart, 1900.0, 4096),
            at(StrategyChoice::Fixed(Strategy::Block), 1000.0, 8192),
            at(StrategyChoice::Smart, 900.0, 8192),
        ];
        let s = summarize(&results, "bm-only", false);
        assert_eq!((s.cells, s.smart_cells, s.smart_within_3pct), (5, 2, 0));
        assert!((s.smart_ratio_min.unwrap() - 0.9).abs() < 1e-3, "{s:?}");
    }
}
