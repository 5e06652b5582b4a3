//! smart against the paper's rule as written (`StrategyChoice::Paper`): won, tied or lost
//! per cell on the paired rule both ways, and which of smart's additions decided.

use serde::Serialize;

use super::*;

/// smart against paper in one cell, on the paired rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// smart dominates paper.
    Won,
    /// Neither dominates (a trade-off, or the same within the rounds' noise).
    Tied,
    /// paper dominates smart.
    Lost,
}

/// One cell where both smart and paper ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaperCell {
    /// "load target workload size".
    pub cell: String,
    pub load: Load,
    pub target: String,
    pub verdict: Verdict,
    /// smart's figure of merit over paper's: the geometric mean of the per-round ratios.
    pub perf_ratio: f64,
    pub smart_reason: String,
    pub paper_reason: String,
    /// Which of smart's departures from the paper's rule made the two decide differently
    /// there (from the two main branches; see [`addition`]).
    pub addition: String,
}

/// The branch a strategy's decisions took most in a cell.
pub(super) fn main_branch(c: &Cell) -> Option<smartcon_engine::decision::Reason> {
    c.result.decisions.by_reason.iter().filter(|(_, v)| **v > 0).max_by_key(|(_, v)| **v).map(|(k, _)| *k)
}

/// Which of smart's additions to the paper's rule separates smart's main branch `s` from
/// paper's `p` in a cell: the spin-cheaper branch, the measured device class, the
/// profiled queue limit Q, the CPU signal (the others' demand against the machine-wide
/// utilization), or the size boundary (`>=` against "greater than"). "same branch" when
/// both took the same one: then the two decided alike and any difference is noise.
pub fn addition(s: Option<smartcon_engine::decision::Reason>, p: Option<smartcon_engine::decision::Reason>) -> String {
    use smartcon_engine::decision::Reason::*;
    let class = |r| matches!(r, Some(MainstreamDevice) | Some(VeryFastDevice));
    let cpu = |r| matches!(r, Some(CpuBusy) | Some(CpuAvailable));
    match (s, p) {
        (Some(a), Some(b)) if a == b => format!("same branch ({})", a.name()),
        (Some(SpinCheaper), _) => "spin_cheaper (smart's own branch)".into(),
        (Some(SpinUnpaid | Trial), _) => "spin check (smart's own, from its measured waits)".into(),
        _ if class(s) || class(p) => "device class (measured, not declared)".into(),
        (_, Some(QueueOverLimit)) => "queue limit Q (profiled, not 0)".into(),
        _ if cpu(s) && cpu(p) => "CPU signal (others' demand, not machine-wide)".into(),
        _ if s == Some(SizeAtThreshold) || p == Some(SizeAtThreshold) => "size boundary (>= against >)".into(),
        (a, b) => {
            format!("{} against {}", a.map_or("no decisions", |r| r.name()), b.map_or("no decisions", |r| r.name()))
        }
    }
}

/// smart against paper (`StrategyChoice::Paper`) in every single-thread cell where both
/// ran, on the paired rule of [`pareto`] both ways: won where smart dominates paper, lost
/// where paper dominates smart, tied otherwise; with what made them decide differently.
pub fn smart_vs_paper(cells: &[Cell]) -> Vec<PaperCell> {
    let mut out = Vec::new();
    for s in cells.iter().filter(|c| c.result.strategy == SMART && c.result.threads == 1) {
        let Some(p) = find(cells, s, StrategyChoice::Paper) else { continue };
        if s.perf() <= 0.0 || p.perf() <= 0.0 {
            continue;
        }
        let verdict = if beats_cell(s, p).is_some() {
            Verdict::Won
        } else if beats_cell(p, s).is_some() {
            Verdict::Lost
        } else {
            Verdict::Tied
        };
        let perf = |c: &Cell| rounds_of(c, |t| Some(t.perf), Some(c.perf()));
        let ratio = smartcon_util::stats::PairedRatio::of(&perf(s), &perf(p)).map_or(s.perf() / p.perf(), |r| r.gmean);
        out.push(PaperCell {
            cell: cell_name(s),
            load: s.load,
            target: s.result.target.clone(),
            verdict,
            perf_ratio: ratio,
            smart_reason: main_reason(s),
            paper_reason: main_reason(p),
            addition: addition(main_branch(s), main_branch(p)),
        });
    }
    out
}

/// One row of [`paper_tally`]: load, target, cells won/tied/lost, and what decided the
/// cells won or lost (each addition with its count).
pub type PaperTallyRow = (Load, String, [usize; 3], Vec<(String, usize)>);

/// Per load and target: cells won, tied and lost by smart against paper, and, where
/// smart won or lost, what decided the cell (each addition with its count).
pub fn paper_tally(v: &[PaperCell]) -> Vec<PaperTallyRow> {
    let mut out: Vec<PaperTallyRow> = Vec::new();
    for c in v {
        let i = match out.iter().position(|(l, t, ..)| *l == c.load && *t == c.target) {
            Some(i) => i,
            None => {
                out.push((c.load, c.target.clone(), [0; 3], Vec::new()));
                out.len() - 1
            }
        };
        let row = &mut out[i];
        row.2[c.verdict as usize] += 1;
        if c.verdict != Verdict::Tied {
            match row.3.iter_mut().find(|(a, _)| *a == c.addition) {
                Some((_, n)) => *n += 1,
                None => row.3.push((c.addition.clone(), 1)),
            }
        }
    }
    out
}

/// One line: smart against paper over all cells, or `None` if no cell had both.
pub fn paper_headline(cells: &[Cell]) -> Option<String> {
    let v = smart_vs_paper(cells);
    let n = |x: Verdict| v.iter().filter(|c| c.verdict == x).count();
    (!v.is_empty()).then(|| {
        format!(
            "smart against paper (the paper's rule as written), paired round by round: won {}, tied {}, lost {} of {} single-thread cells.",
            n(Verdict::Won),
            n(Verdict::Tied),
            n(Verdict::Lost),
            v.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn smart_against_paper_counts_cells_won_tied_and_lost_with_what_decided_them() {
        const PAPER: StrategyChoice = StrategyChoice::Paper;
        let l = Load::CpuIntensive;
        let on = |mut c: Cell, target: &str, r: Reason| {
            c.result.target = target.into();
            c.result.decisions.by_reason = [(r, 1000)].into();
            c
        };
        let cells = vec![
            // smart spins (its spin-cheaper branch) at 1.3x paper's IOPS, the crunchers keep
            // 99% of their work: won.
            on(loaded(l, SMART, 1300.0, 990, &[]), "a", Reason::SpinCheaper),
            on(loaded(l, PAPER, 1000.0, 1000, &[]), "a", Reason::CpuBusy),
            // The same branch and 1% apart: tied.
            on(loaded(l, SMART, 1000.0, 1000, &[]), "b", Reason::CpuBusy),
            on(loaded(l, PAPER, 1010.0, 1000, &[]), "b", Reason::CpuBusy),
            // paper blocks on a queue smart spins behind: 99% of smart's IOPS with 5% more
            // co-runner work: lost.
            on(loaded(l, SMART, 1000.0, 1000, &[]), "c", Reason::CpuAvailable),
            on(loaded(l, PAPER, 990.0, 1050, &[]), "c", Reason::QueueOverLimit),
            // A fixed strategy's cell is no paper cell.
            on(loaded(l, BLOCK, 2000.0, 1000, &[]), "c", Reason::MainstreamDevice),
        ];
        let v = smart_vs_paper(&cells);
        let verdicts: Vec<(&str, Verdict)> = v.iter().map(|c| (c.target.as_str(), c.verdict)).collect();
        assert_eq!(verdicts, vec![("a", Verdict::Won), ("b", Verdict::Tied), ("c", Verdict::Lost)]);
        assert!((v[0].perf_ratio - 1.3).abs() < 1e-9, "{:?}", v[0]);
        let tally = paper_tally(&v);
        assert_eq!(tally[0].2, [1, 0, 0]);
        assert_eq!(tally[0].3, vec![("spin_cheaper (smart's own branch)".to_string(), 1)]);
        assert_eq!((tally[1].2, tally[1].3.len()), ([0, 1, 0], 0), "a tie names no addition");
        assert_eq!(tally[2].3, vec![("queue limit Q (profiled, not 0)".to_string(), 1)]);
        let c = by_name(&criteria(&cells, &[]), "single-thread cells: smart not dominated by paper").clone();
        assert_eq!(c.met, Some(false), "1 of 3 lost is more than 5%");
        assert!(c.measured.contains("won 1, tied 1, lost 1 of 3"), "{}", c.measured);
        assert_eq!(c.figure, "won 1, tied 1, lost 1 of 3");
        assert!(c.measured.contains("cpu-intensive a: 1/0/0 (spin_cheaper"), "{}", c.measured);
        assert_eq!(c.versus_paper.len(), 3);
        // A cell won alone meets it; without a paper cell it is not judged.
        assert_eq!(by_name(&criteria(&cells[..2], &[]), "single-thread cells: smart not").met, Some(true));
        assert_eq!(by_name(&criteria(&[cells[0].clone()], &[]), "single-thread cells: smart not").met, None);
    }

    #[test]
    fn the_addition_that_decided_is_read_from_the_two_main_branches() {
        use Reason::*;
        let a = |s, p| addition(Some(s), Some(p));
        assert_eq!(a(CpuBusy, CpuBusy), "same branch (cpu_busy)");
        assert_eq!(a(SpinCheaper, CpuBusy), "spin_cheaper (smart's own branch)");
        assert_eq!(a(SpinUnpaid, CpuAvailable), "spin check (smart's own, from its measured waits)");
        assert_eq!(a(CpuAvailable, MainstreamDevice), "device class (measured, not declared)");
        assert_eq!(a(VeryFastDevice, CpuAvailable), "device class (measured, not declared)");
        assert_eq!(a(CpuAvailable, QueueOverLimit), "queue limit Q (profiled, not 0)");
        assert_eq!(a(CpuAvailable, CpuBusy), "CPU signal (others' demand, not machine-wide)");
        assert_eq!(a(SizeAtThreshold, CpuAvailable), "size boundary (>= against >)");
        assert_eq!(addition(None, Some(CpuBusy)), "no decisions against cpu_busy");
    }
}
