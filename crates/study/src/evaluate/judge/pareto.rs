//! The Pareto verdict of a run: smart against block, spin and sync in every single-thread
//! cell on the paired rule, the cells lost and why, the whole-cell rule of earlier reports
//! beside it, and the judge's floor (what the rule calls where smart waited as one fixed
//! strategy).

use serde::Serialize;

use super::*;

pub(super) const FIXED: [StrategyChoice; 3] = [BLOCK, SPIN, StrategyChoice::Fixed(Strategy::Sync)];

/// A cell where a fixed strategy dominates smart, and smart's usual branch there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LostCell {
    /// "load target workload size".
    pub cell: String,
    pub load: Load,
    pub target: String,
    /// The fixed strategy that dominates (the one with the most IOPS among those that do).
    pub better: Strategy,
    /// Its figure of merit over smart's: the geometric mean of the per-round ratios.
    pub perf_ratio: f64,
    /// The 90% interval of `perf_ratio` from the rounds (both ends equal with one round).
    pub perf_ratio_interval: [f64; 2],
    /// Rounds compared.
    pub rounds: usize,
    /// The co-runner's work beside it over beside smart, per round (loads with a co-runner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corunner_ratio: Option<f64>,
    /// Its I/O threads' CPU less smart's, mean over the rounds, points of one CPU (bm-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_pct_more: Option<f64>,
    /// The axis it won on: more of the figure of merit, or nearly the same figure at a
    /// clear gain for the co-runner (or, in bm-only, at clearly less CPU).
    pub axis: Axis,
    /// The decision branch smart took most there, with its share.
    pub smart_reason: String,
}

/// The Pareto judgement of a run: how many cells were judged, the lost ones (round by
/// round), and how many the earlier whole-cell rule called lost, for comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pareto {
    pub judged: usize,
    pub lost: Vec<LostCell>,
    /// Cells lost by [`dominates_whole_cell`] (the rule of earlier reports).
    pub lost_whole_cell: usize,
}

/// Whether `fixed` dominates `smart` in their cell, compared round by round (see
/// [`pareto`]); the lost cell if so.
pub fn dominates(smart: &Cell, fixed: &Cell) -> Option<LostCell> {
    let better = fixed_strategy(fixed).filter(|s| matches!(s, Strategy::Block | Strategy::Spin | Strategy::Sync))?;
    let b = beats_cell(fixed, smart)?;
    Some(LostCell {
        cell: cell_name(smart),
        load: smart.load,
        target: smart.result.target.clone(),
        better,
        perf_ratio: b.perf.gmean,
        perf_ratio_interval: [b.perf.lo, b.perf.hi],
        rounds: b.perf.rounds,
        corunner_ratio: b.corunner_ratio,
        cpu_pct_more: b.cpu_pct_more,
        axis: b.axis,
        smart_reason: main_reason(smart),
    })
}

/// The rule of earlier reports: whole cells against each other, a difference counted
/// only beyond the larger of the two strategies' turn spreads. A swing that hits every
/// strategy of a round alike widens that spread, so this rule forgives real losses; it is
/// kept to show the difference beside the paired figure.
pub fn dominates_whole_cell(smart: &Cell, fixed: &Cell) -> bool {
    let (ps, pf) = (smart.perf(), fixed.perf());
    if ps <= 0.0 || pf <= 0.0 || fixed_strategy(fixed).is_none() {
        return false;
    }
    let r = pf / ps;
    let perf_turns = |c: &Cell| c.turns.iter().map(|t| t.perf).collect::<Vec<f64>>();
    let perf_spread = turn_spread(&perf_turns(smart)).max(turn_spread(&perf_turns(fixed)));
    let faster = r >= 1.0 + PARETO_PERF_GAIN && r - 1.0 > perf_spread;
    match (smart.corunner_rate(), fixed.corunner_rate()) {
        (Some(ks), Some(kf)) if ks > 0.0 => {
            let k = kf / ks;
            let rate_turns = |c: &Cell| c.turns.iter().filter_map(|t| t.corunner_work_per_s).collect::<Vec<f64>>();
            let rate_spread = turn_spread(&rate_turns(smart)).max(turn_spread(&rate_turns(fixed)));
            (faster && k >= PARETO_CORUNNER_KEPT)
                || ((r - 1.0).abs() <= PARETO_PERF_GAIN && k >= 1.0 + PARETO_CORUNNER_GAIN && k - 1.0 > rate_spread)
        }
        (None, None) if smart.load == Load::BmOnly => faster && fixed.cpu_pct() - smart.cpu_pct() <= 0.0,
        _ => false,
    }
}

pub(super) fn fixed_strategy(c: &Cell) -> Option<Strategy> {
    match c.result.strategy {
        StrategyChoice::Fixed(s) => Some(s),
        _ => None,
    }
}

/// smart against every fixed strategy (block, spin, sync) in every single-thread cell, on
/// both axes, round by round: each round ran every strategy once in a balanced order, so
/// round i of smart and of a fixed strategy shared the machine's state, and their ratio
/// cancels what hit both. A cell is lost when a fixed strategy's figure of merit (IOPS;
/// transactions for postmark) over smart's, the geometric mean of the per-round ratios,
/// at least 1.05 with the lower end of its 90% interval above 1, while its co-runner keeps
/// at least 97% of the work it does beside smart; or when it gives at least 98% of smart's
/// figure with at least 3% more co-runner work (lower end above 1). In bm-only cells,
/// which have no co-runner: the same IOPS test at no more than 5 points more CPU of the
/// I/O threads, or at least 98% of smart's IOPS at 20 or more points less CPU. Multi-thread cells are left out:
/// their threads share the device queue, which the criterion's single-thread figures do
/// not speak to.
pub fn pareto(cells: &[Cell]) -> Pareto {
    let judged = judge_cells(cells);
    Pareto {
        judged: judged.len(),
        lost_whole_cell: judged.iter().filter(|j| j.lost_whole_cell).count(),
        lost: judged.into_iter().filter_map(|j| j.lost).collect(),
    }
}

/// One single-thread cell as [`pareto`] judges it: smart's record there, the fixed
/// strategy that dominates smart (the one with the most IOPS among those that do) if any,
/// and whether the whole-cell rule of earlier reports called it lost.
#[derive(Debug, Clone)]
pub struct JudgedCell<'a> {
    pub smart: &'a Cell,
    pub lost: Option<LostCell>,
    pub lost_whole_cell: bool,
}

impl JudgedCell<'_> {
    /// `front`, or the name of the fixed strategy that beats smart: what a report's map
    /// shows of the cell.
    pub fn verdict(&self) -> &'static str {
        self.lost.as_ref().map_or("front", |l| l.better.name())
    }
}

/// Every cell [`pareto`] judges, in the order of `cells`, with its verdict: the one place
/// the Pareto rule is applied to a run (the criterion, the headline and the report's map
/// all read it).
pub fn judge_cells(cells: &[Cell]) -> Vec<JudgedCell<'_>> {
    let mut out = Vec::new();
    for c in cells.iter().filter(|c| c.result.strategy == SMART && c.result.threads == 1) {
        let rivals: Vec<&Cell> = FIXED.iter().filter_map(|s| find(cells, c, *s)).collect();
        if rivals.is_empty() || c.perf() <= 0.0 {
            continue;
        }
        let lost = rivals.iter().filter_map(|f| dominates(c, f)).max_by(|a, b| a.perf_ratio.total_cmp(&b.perf_ratio));
        out.push(JudgedCell { smart: c, lost, lost_whole_cell: rivals.iter().any(|f| dominates_whole_cell(c, f)) });
    }
    out
}

/// The judge's own floor in a run: the single-thread cells where smart waited one and the
/// same way as a fixed strategy on every I/O (no trial, no check at work), and how often
/// the paired rule still called a winner between the two. What it calls there is the
/// rounds' noise, not a difference of decisions: a front figure is read against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Floor {
    /// Cells where smart waited as one fixed strategy on every I/O.
    pub cells: usize,
    /// Of those, where the rule called that strategy the winner (a lost cell, by chance).
    pub fixed_won: usize,
    /// And where it called smart the winner over it.
    pub smart_won: usize,
}

impl Floor {
    /// "in 120 cells ...": one clause for a headline or a criterion, `None` without cells.
    pub fn clause(&self) -> Option<String> {
        (self.cells > 0).then(|| {
            format!(
                "the judge's floor in this run: in {} cells smart waited as one fixed strategy on every I/O, and the same rule still called that strategy the winner in {} ({:.1}%) and smart in {} ({:.1}%)",
                self.cells,
                self.fixed_won,
                self.fixed_won as f64 * 100.0 / self.cells as f64,
                self.smart_won,
                self.smart_won as f64 * 100.0 / self.cells as f64
            )
        })
    }
}

/// The floor of a run's judge (see [`Floor`]).
pub fn floor(cells: &[Cell]) -> Floor {
    let mut f = Floor { cells: 0, fixed_won: 0, smart_won: 0 };
    for c in cells.iter().filter(|c| c.result.strategy == SMART && c.result.threads == 1 && c.perf() > 0.0) {
        let ways = &c.result.decisions.by_strategy;
        let only = match ways.iter().filter(|(_, n)| **n > 0).collect::<Vec<_>>()[..] {
            [(s, _)] => *s,
            _ => continue,
        };
        if !matches!(only, Strategy::Block | Strategy::Spin | Strategy::Sync) {
            continue;
        }
        let Some(fixed) = find(cells, c, StrategyChoice::Fixed(only)).filter(|x| x.perf() > 0.0) else { continue };
        f.cells += 1;
        f.fixed_won += beats_cell(fixed, c).is_some() as usize;
        f.smart_won += beats_cell(c, fixed).is_some() as usize;
    }
    f
}

/// One line for the report's head: how many single-thread cells smart is on the front in,
/// round by round, with the earlier whole-cell figure beside it.
pub fn pareto_headline(cells: &[Cell]) -> Option<String> {
    let p = pareto(cells);
    let pct = |n: usize| n as f64 * 100.0 / p.judged.max(1) as f64;
    (p.judged > 0).then(|| {
        format!(
            "smart on the Pareto front against block, spin and sync in {} of {} single-thread cells ({:.0}%), compared round by round (a cell is lost where a fixed strategy gives >= 5% more IOPS, the lower end of the 90% interval of the per-round ratios above 1, at no cost to the co-runner or, in bm-only, at no more than 5 points more CPU; or the same IOPS at a clear gain on the other axis). By whole cells against the turns' spread, the rule of earlier reports: {} of {}.",
            p.judged - p.lost.len(),
            p.judged,
            pct(p.judged - p.lost.len()),
            p.judged - p.lost_whole_cell,
            p.judged
        ) + &floor(cells).clause().map(|c| format!(" As a yardstick, {c}.")).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn a_fixed_strategy_dominates_only_on_both_axes_and_beyond_the_rounds_noise() {
        let l = Load::IoIntensive;
        let smart = loaded(l, SMART, 1000.0, 1000, &[]);
        let lost = |f: Cell| dominates(&smart, &f).map(|x| (x.better, (x.perf_ratio * 100.0).round() / 100.0));
        // Without turns each cell is one round: 10% more IOPS, the co-runner keeps 98%.
        assert_eq!(lost(loaded(l, SPIN, 1100.0, 980, &[])), Some((Strategy::Spin, 1.1)));
        // 10% more IOPS but the co-runner keeps 96%: a trade-off, not a loss.
        assert_eq!(lost(loaded(l, SPIN, 1100.0, 960, &[])), None);
        // 4% more IOPS: within the 5% bound.
        assert_eq!(lost(loaded(l, SPIN, 1040.0, 1000, &[])), None);
        // 98% of the IOPS with 4% more co-runner work: dominated; 2% more: not.
        assert_eq!(lost(loaded(l, BLOCK, 980.0, 1040, &[])), Some((Strategy::Block, 0.98)));
        assert_eq!(lost(loaded(l, BLOCK, 1000.0, 1020, &[])), None);
        // 96% of the IOPS with more co-runner work: a trade-off.
        assert_eq!(lost(loaded(l, BLOCK, 960.0, 1100, &[])), None);
        // The lost cell says which axis decided.
        let axis = |f: Cell| dominates(&smart, &f).map(|x| x.axis);
        assert_eq!(axis(loaded(l, SPIN, 1100.0, 980, &[])), Some(Axis::Perf));
        assert_eq!(axis(loaded(l, BLOCK, 980.0, 1040, &[])), Some(Axis::Corunner));
    }

    #[test]
    fn a_common_swing_no_longer_hides_a_loss() {
        let (smart, spin) = swinging(&[1.10]);
        // The whole-cell rule of earlier reports forgives it: the turns spread 0.5 apart.
        assert!(!dominates_whole_cell(&smart, &spin));
        // Round by round every ratio is 1.10: lost, with a tight interval.
        let l = dominates(&smart, &spin).expect("a 10% loss in every round is a loss");
        assert_eq!((l.better, l.rounds), (Strategy::Spin, 8));
        assert!((l.perf_ratio - 1.10).abs() < 1e-9 && l.perf_ratio_interval[0] > 1.09, "{l:?}");
        assert_eq!(l.corunner_ratio.map(|k| (k * 1000.0).round()), Some(1000.0));
        let p = pareto(&[smart, spin]);
        assert_eq!((p.judged, p.lost.len(), p.lost_whole_cell), (1, 1, 0));
    }

    #[test]
    fn the_floor_counts_the_cells_where_smart_waited_as_a_fixed_strategy() {
        let ways = |mut c: Cell, target: &str, w: &[(Strategy, u64)]| {
            c.result.target = target.into();
            c.result.decisions.by_strategy = w.iter().copied().collect();
            c
        };
        // a: smart spun on every I/O, and spin's rounds ran 10% ahead (the rounds' luck):
        // the rule calls spin the winner, which the floor counts. b: both spun alike.
        // c: smart blocked on some I/Os (a trial): not the same wait, not counted.
        let (smart_a, spin_a) = swinging(&[1.10]);
        let (smart_b, spin_b) = swinging(&[1.0]);
        let (smart_c, spin_c) = swinging(&[1.10]);
        let all = [(Strategy::Spin, 1000)];
        let cells = vec![
            ways(smart_a, "a", &all),
            ways(spin_a, "a", &all),
            ways(smart_b, "b", &all),
            ways(spin_b, "b", &all),
            ways(smart_c, "c", &[(Strategy::Spin, 990), (Strategy::Block, 10)]),
            ways(spin_c, "c", &all),
        ];
        let f = floor(&cells);
        assert_eq!(f, Floor { cells: 2, fixed_won: 1, smart_won: 0 });
        assert!(f.clause().unwrap().contains("in 2 cells smart waited as one fixed strategy"), "{:?}", f.clause());
        // The front figure itself is not moved by it: a and c are lost.
        assert_eq!(pareto(&cells).lost.len(), 2);
        assert!(pareto_headline(&cells)
            .unwrap()
            .contains("the same rule still called that strategy the winner in 1 (50.0%)"));
        assert_eq!(floor(&cells[4..]).clause(), None);
    }

    #[test]
    fn a_real_tie_is_not_called_a_loss() {
        // Rounds that go either way by up to 12% around a tie, under the same common swing.
        let (smart, spin) = swinging(&[1.12, 0.90, 1.08, 0.94]);
        assert_eq!(dominates(&smart, &spin), None);
        // A gain of 8% on average that one round of four contradicts: not surely above 1...
        let (smart, spin) = swinging(&[1.25, 1.20, 0.85, 1.20]);
        let r = smartcon_util::stats::PairedRatio::of(
            &spin.turns.iter().map(|t| t.perf).collect::<Vec<_>>(),
            &smart.turns.iter().map(|t| t.perf).collect::<Vec<_>>(),
        )
        .unwrap();
        assert!(r.gmean >= 1.05, "{r:?}");
        assert!(r.lo <= 1.0, "{r:?}");
        assert_eq!(dominates(&smart, &spin), None);
    }

    #[test]
    fn bm_only_compares_cpu_round_by_round() {
        let mut smart = cell(Load::BmOnly, "disk", 256 << 10, SMART, 1000.0);
        let mut block = cell(Load::BmOnly, "disk", 256 << 10, BLOCK, 1000.0);
        let turns = |perf: [f64; 2], cpu: [f64; 2]| {
            perf.iter()
                .zip(cpu)
                .map(|(&p, c)| TurnFigures { perf: p, corunner_work_per_s: None, cpu_pct: c, kernel_cpu_pct: 0.0 })
                .collect()
        };
        // The same IOPS in both rounds, smart spinning at 90 points more CPU: block wins.
        smart.turns = turns([1000.0, 600.0], [100.0, 100.0]);
        block.turns = turns([990.0, 600.0], [10.0, 12.0]);
        let l = dominates(&smart, &block).expect("the same IOPS at 89 points less CPU");
        assert_eq!((l.better, l.cpu_pct_more.map(f64::round), l.axis), (Strategy::Block, Some(-89.0), Axis::Cpu));
        // Block at 95% of smart's IOPS: a trade-off.
        block.turns = turns([950.0, 570.0], [10.0, 12.0]);
        assert_eq!(dominates(&smart, &block), None);
        // 10% more IOPS at 4 points more CPU: lost; at 6 points more: a trade-off.
        block.turns = turns([1100.0, 660.0], [104.0, 104.0]);
        assert!(dominates(&smart, &block).is_some());
        block.turns = turns([1100.0, 660.0], [106.0, 106.0]);
        assert_eq!(dominates(&smart, &block), None);
    }

    #[test]
    fn bm_only_counts_the_cpu_the_kernel_spends_for_a_strategy() {
        // The seventeenth session's 256 KiB O_DIRECT write: io_uring's wait cost its thread
        // 24 % and the dio completion kworker 20 %; the plain call its thread 45 % and the
        // kernel 1 %, at the same IOPS. By the threads' clocks block saves 21 points and
        // wins on CPU; counted whole it spends 2 more, and smart's plain call is not beaten.
        let mut smart = cell(Load::BmOnly, "disk", 256 << 10, SMART, 1000.0);
        let mut block = cell(Load::BmOnly, "disk", 256 << 10, BLOCK, 1000.0);
        let turns = |cpu: f64, kernel: f64| {
            (0..4)
                .map(|_| TurnFigures { perf: 1000.0, corunner_work_per_s: None, cpu_pct: cpu, kernel_cpu_pct: kernel })
                .collect::<Vec<_>>()
        };
        smart.turns = turns(45.0, 0.0);
        block.turns = turns(24.0, 0.0);
        assert_eq!(dominates(&smart, &block).map(|l| l.axis), Some(Axis::Cpu), "the threads' clocks alone");
        smart.turns = turns(45.0, 1.0);
        block.turns = turns(24.0, 20.0);
        assert_eq!(dominates(&smart, &block), None);
        // The cell's CPU figure (the criteria's and the plots') counts it too.
        assert_eq!((block.cpu_pct() - block.result.cpu_user_pct - block.result.cpu_sys_pct).round(), 20.0);
    }

    #[test]
    fn a_cell_loses_co_runner_work_only_beyond_the_noise_of_its_rounds() {
        let l = Load::CpuIntensive;
        let turns = |ws: &[f64]| ws.iter().map(|&w| (1000.0, w)).collect::<Vec<_>>();
        let judge = |smart_turns: &[f64], smart_work: u64| {
            let block = loaded(l, BLOCK, 1000.0, 1000, &turns(&[1000.0; 8]));
            let smart = loaded(l, SMART, 1000.0, smart_work, &turns(smart_turns));
            let k = corunner_kept(&[smart, block]);
            assert_eq!(k.len(), 1);
            (k[0].ratio, k[0].lost_beyond_noise(0.97))
        };
        // Every round 10% down: a loss, however few the rounds.
        assert_eq!(judge(&[900.0; 8], 900), (0.9, true));
        // 4% down over the cell, but the rounds range from -30% to +30%: noise.
        assert_eq!(judge(&[700.0, 1300.0, 950.0, 900.0, 1000.0, 800.0, 1100.0, 930.0], 960), (0.96, false));
        // 2% down: within the bound whatever the rounds say.
        assert_eq!(judge(&[980.0; 8], 980), (0.98, false));
        // The criterion fails on the first and names the cell.
        let block = loaded(l, BLOCK, 1000.0, 1000, &turns(&[1000.0; 8]));
        let smart = loaded(l, SMART, 1000.0, 900, &turns(&[900.0; 8]));
        let c = corunner_every_cell(&[smart, block]);
        assert_eq!(c.met, Some(false));
        assert!(c.measured.starts_with("0 of 1 cells >= 0.97") && c.measured.contains("emu:optane"), "{}", c.measured);
    }

    #[test]
    fn bm_only_cells_weigh_iops_against_the_cpu_spent() {
        let smart = cell(Load::BmOnly, "emu:optane", 4096, SMART, 1000.0); // 10% CPU
        let mut spin = cell(Load::BmOnly, "emu:optane", 4096, SPIN, 1300.0);
        spin.result.cpu_user_pct = 100.0;
        // 30% more IOPS for 90 more points of CPU: not dominated.
        assert_eq!(dominates(&smart, &spin), None);
        // 20% more IOPS at the same CPU: dominated, with the CPU difference named.
        let sync = cell(Load::BmOnly, "emu:optane", 4096, SYNC, 1200.0);
        let l = dominates(&smart, &sync).unwrap();
        assert_eq!((l.better, l.cpu_pct_more, l.corunner_ratio), (Strategy::Sync, Some(0.0), None));
    }
}
