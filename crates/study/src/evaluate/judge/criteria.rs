//! The criteria a report lists, each judged on the cells it applies to, with its measured
//! figure, whether it was met, and its source in the papers.

use serde::Serialize;

use super::*;

/// One criterion, judged on a run's cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Criterion {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub criterion: String,
    /// Where the criterion comes from: the paper's section, figure or table.
    pub source: &'static str,
    pub measured: String,
    /// The measured figure in a few words ("244 of 273 cells (89%)"), for a table a person
    /// scans; `measured` has the whole of it.
    pub figure: String,
    /// `None` when this run has no cell the criterion applies to.
    pub met: Option<bool>,
    /// The Pareto criterion's lost cells, each with smart's main branch there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<LostCell>,
    /// The smart-against-paper criterion's cells, each with its verdict and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versus_paper: Vec<PaperCell>,
}

/// What the criteria need to know of a target.
#[derive(Debug, Clone)]
pub struct TargetInfo {
    pub label: String,
    pub class: DeviceClass,
    pub size_threshold_bytes: u64,
    /// A file on the local disk (not a ramdisk smartcon created).
    pub local_disk: bool,
    /// Each probe of the target in this run, in order (empty when its profile was stored).
    pub probed: Vec<ProbedThresholds>,
}

/// One probe's size thresholds, as the judge compares two probes of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbedThresholds {
    /// The threshold with nothing else in flight: the one the probe's check kept.
    pub idle_bytes: u64,
    /// The threshold beside others' I/O: the one drawn from the size sweep.
    pub busy_bytes: u64,
}

impl ProbedThresholds {
    pub fn of(p: &smartcon_engine::profile::Profile) -> ProbedThresholds {
        let t = p.thresholds();
        ProbedThresholds {
            idle_bytes: t.size_threshold_bytes,
            busy_bytes: t.size_threshold_busy_bytes.max(t.size_threshold_bytes),
        }
    }
}

/// The spread of smart/block over cells where both waited the same way: how far two turns
/// of the same thing differ here, the yardstick for a 3% criterion.
pub fn noise_note(ratios: &[f64]) -> String {
    let Some((mean, sd)) = smartcon_util::stats::mean_sample_sd(ratios).filter(|_| ratios.len() >= 3) else {
        return String::new();
    };
    let n = ratios.len() as f64;
    // A loss is systematic when the mean is below 1 by more than 1.5% and by more than two
    // standard errors of the mean.
    let loss = mean < 0.985 && 1.0 - mean > 2.0 * sd / n.sqrt();
    let verdict = match (loss, 2.0 * sd > 0.03) {
        (false, true) => ": no systematic loss, and a spread from cell to cell that a 3% bound cannot hold",
        (false, false) => ": no systematic loss",
        (true, _) => ": lower on average, by more than turn-to-turn noise explains",
    };
    format!(
        ". Over all {} cells where smart blocked on every I/O, smart/block averages {mean:.3} (standard deviation {sd:.3}){verdict}",
        ratios.len()
    )
}

pub(super) const NONE: &str = "no such cell in this run";

/// The short figure of a criterion no cell applies to.
pub(super) const NO_CELL: &str = "no cell";

/// Every criterion, judged on `cells`; `targets` says what smart knew of each target.
pub fn criteria(cells: &[Cell], targets: &[TargetInfo]) -> Vec<Criterion> {
    vec![
        small_reads_gain(cells, targets),
        large_requests_block(cells, targets),
        cpu_load_no_loss(cells),
        corunner_no_loss(cells),
        corunner_every_cell(cells),
        pareto_front(cells),
        versus_paper(cells),
        fewer_switches(cells, targets),
        probes_agree(targets),
    ]
}

/// Two probes of a target in one run: their size thresholds (with nothing else in flight,
/// and beside others' I/O) within one size step (a factor of two) of each other.
pub(super) fn probes_agree(targets: &[TargetInfo]) -> Criterion {
    let twice: Vec<&TargetInfo> = targets.iter().filter(|t| t.probed.len() >= 2).collect();
    let within = |a: u64, b: u64| a.max(b) <= a.min(b).saturating_mul(2);
    let agree = |t: &TargetInfo| {
        let (a, b) = (t.probed[0], t.probed[1]);
        within(a.idle_bytes, b.idle_bytes) && within(a.busy_bytes, b.busy_bytes)
    };
    let parts: Vec<String> = twice
        .iter()
        .map(|t| {
            let (a, b) = (t.probed[0], t.probed[1]);
            format!(
                "{}: {} and {} with nothing else in flight, {} and {} beside others' I/O",
                t.label,
                format_size(a.idle_bytes),
                format_size(b.idle_bytes),
                format_size(a.busy_bytes),
                format_size(b.busy_bytes)
            )
        })
        .collect();
    criterion(
        "two probes of the same target give the same size threshold +- one size step",
        "SmartCon Sec. 4.1 (Device Monitor)",
        if parts.is_empty() {
            "no target was probed twice in this run (a probed fast device is, when its profile is measured here)".into()
        } else {
            parts.join("; ")
        },
        (!twice.is_empty()).then(|| twice.iter().all(|t| agree(t))),
    )
    .figure(|| format!("{} of {} targets", twice.iter().filter(|t| agree(t)).count(), twice.len()))
}

pub(super) fn criterion(criterion: &str, source: &'static str, measured: String, met: Option<bool>) -> Criterion {
    Criterion {
        record_type: "criterion",
        criterion: criterion.into(),
        source,
        measured,
        figure: NO_CELL.into(),
        met,
        lost: Vec::new(),
        versus_paper: Vec::new(),
    }
}

impl Criterion {
    /// The criterion with its short figure, where a cell was judged.
    fn figure(mut self, figure: impl FnOnce() -> String) -> Criterion {
        if self.met.is_some() {
            self.figure = figure();
        }
        self
    }
}

pub(super) fn smart_cells(cells: &[Cell], f: impl Fn(&Cell) -> bool) -> Vec<&Cell> {
    cells.iter().filter(|c| c.result.strategy == SMART && f(c)).collect()
}

pub(super) fn local_file(targets: &[TargetInfo], t: &str) -> bool {
    targets.iter().any(|i| i.label == t && i.local_disk)
}

pub(super) fn small_reads_gain(cells: &[Cell], targets: &[TargetInfo]) -> Criterion {
    let v = smart_cells(cells, |c| {
        c.load == Load::BmOnly
            && c.workload == Workload::IozoneRandRead
            && c.result.bs_bytes == 4096
            && local_file(targets, &c.result.target)
    });
    let parts: Vec<String> = v
        .iter()
        .map(|c| {
            let spin = find(cells, c, SPIN).and_then(|x| gain(cells, x));
            format!(
                "{}: smart {:.2}x, spin {} (smart's decisions: {})",
                c.result.target,
                gain(cells, c).unwrap_or(0.0),
                spin.map(|g| format!("{g:.2}x")).unwrap_or_else(|| "-".into()),
                main_reason(c)
            )
        })
        .collect();
    criterion(
        "local-disk file, 4 KiB random read, bm-only: smart >= 1.3 x block IOPS",
        "smartcon's own bound for the local disk (SmartCon Fig. 9 shows ramdisk sequential reads gaining about 20% BM-only; the paper has no local-disk random-read figure)",
        if parts.is_empty() { NONE.into() } else { parts.join("; ") },
        (!v.is_empty()).then(|| v.iter().all(|c| gain(cells, c).unwrap_or(0.0) >= 1.3)),
    )
    .figure(|| {
        let lowest = v.iter().map(|c| gain(cells, c).unwrap_or(0.0)).fold(f64::INFINITY, f64::min);
        format!("smart {lowest:.2}x block{}", if v.len() > 1 { " (lowest target)" } else { "" })
    })
}

pub(super) fn large_requests_block(cells: &[Cell], targets: &[TargetInfo]) -> Criterion {
    let v = smart_cells(cells, |c| {
        c.load == Load::BmOnly && c.result.bs_bytes >= 256 << 10 && local_file(targets, &c.result.target)
    });
    let extra_cpu = |c: &Cell| find(cells, c, BLOCK).map(|b| c.cpu_pct() - b.cpu_pct());
    let ok = |c: &Cell| gain(cells, c).unwrap_or(0.0) >= 0.97 && extra_cpu(c).is_some_and(|d| d <= 5.0);
    let worst_gain = v.iter().map(|c| (gain(cells, c).unwrap_or(0.0), *c)).min_by(|a, b| a.0.total_cmp(&b.0));
    let worst_cpu = v.iter().filter_map(|c| extra_cpu(c).map(|d| (d, *c))).max_by(|a, b| a.0.total_cmp(&b.0));
    let threshold = |t: &str| {
        targets.iter().find(|i| i.label == t).map(|i| format_size(i.size_threshold_bytes)).unwrap_or("-".into())
    };
    criterion(
        "local-disk file, 256 KiB and above, bm-only: smart within 3% of block and <= 5 points more CPU",
        "SmartCon Sec. 5.1 (size threshold: large requests block), Fig. 8 (CPU of the I/O thread)",
        match (worst_gain, worst_cpu) {
            (Some((g, gc)), Some((d, dc))) => format!(
                "{} of {} cells; lowest smart/block {g:.3} ({}), most extra CPU {d:+.1} points ({}; smart's decisions: {}, size threshold of the profile: {})",
                v.iter().filter(|c| ok(c)).count(),
                v.len(),
                cell_name(gc),
                cell_name(dc),
                main_reason(dc),
                threshold(&dc.result.target)
            ),
            _ => NONE.into(),
        },
        (!v.is_empty()).then(|| v.iter().all(|c| ok(c))),
    )
    .figure(|| format!("{} of {} cells", v.iter().filter(|c| ok(c)).count(), v.len()))
}

pub(super) fn cpu_load_no_loss(cells: &[Cell]) -> Criterion {
    let v = smart_cells(cells, |c| c.load == Load::CpuIntensive);
    let g = |c: &Cell| gain(cells, c).unwrap_or(0.0);
    let worst = v.iter().map(|c| (g(c), *c)).min_by(|a, b| a.0.total_cmp(&b.0));
    // A cell where smart blocked on every I/O waited exactly as block did: a gap there is
    // the difference between two turns of the same thing on a shared machine.
    let blocked_all = |c: &Cell| c.result.ios > 0 && c.result.decisions.count(Strategy::Block) == c.result.ios;
    let misses: Vec<&&Cell> = v.iter().filter(|c| g(c) < 0.97).collect();
    let noise: Vec<f64> = v.iter().filter(|c| blocked_all(c)).filter_map(|c| gain(cells, c)).collect();
    criterion(
        "cpu-intensive: smart nowhere more than 3% below block",
        "SmartCon Sec. 7.3, Fig. 12(b) (CPU-intensive load: busy-waiting only when CPU cycles are left)",
        match worst {
            Some((w, c)) => format!(
                "{} of {} cells >= 0.97x; lowest {w:.3} ({}; smart's decisions: {}); of the {} cells below, smart blocked on every I/O in {} (so it waited as block did and the gap is turn-to-turn noise){}",
                v.iter().filter(|c| g(c) >= 0.97).count(),
                v.len(),
                cell_name(c),
                main_reason(c),
                misses.len(),
                misses.iter().filter(|c| blocked_all(c)).count(),
                noise_note(&noise)
            ),
            None => NONE.into(),
        },
        worst.map(|(w, _)| w >= 0.97),
    )
    .figure(|| {
        let lowest = worst.map_or(0.0, |(w, _)| w);
        format!("{} of {} cells >= 0.97x; lowest {lowest:.3}", v.iter().filter(|c| g(c) >= 0.97).count(), v.len())
    })
}

pub(super) fn corunner_no_loss(cells: &[Cell]) -> Criterion {
    let mut targets: Vec<&str> = Vec::new();
    for c in cells.iter().filter(|c| c.load == Load::CpuIntensive) {
        if !targets.contains(&c.result.target.as_str()) {
            targets.push(&c.result.target);
        }
    }
    let ratios: Vec<(&str, f64)> = targets
        .iter()
        .filter_map(|t| match (corunner_rate(cells, t, SMART), corunner_rate(cells, t, BLOCK)) {
            (Some(s), Some(b)) if b > 0.0 => Some((*t, s / b)),
            _ => None,
        })
        .collect();
    criterion(
        "cpu-intensive: the co-running CPU benchmark loses <= 3% of its work beside smart against beside block",
        "SmartCon Sec. 7.3, Table VI (Dhrystone beside SmartCon)",
        if ratios.is_empty() {
            NONE.into()
        } else {
            "work rate beside smart / beside block: ".to_string()
                + &ratios.iter().map(|(t, r)| format!("{t} {r:.3}")).collect::<Vec<_>>().join(", ")
        },
        (!ratios.is_empty()).then(|| ratios.iter().all(|(_, r)| *r >= 0.97)),
    )
    .figure(|| {
        let lowest = ratios.iter().map(|(_, r)| *r).fold(f64::INFINITY, f64::min);
        format!("smart/block {lowest:.3}{}", if ratios.len() > 1 { " (lowest target)" } else { "" })
    })
}

/// One cpu-intensive cell's co-runner beside smart against beside block.
#[derive(Debug, Clone, PartialEq)]
pub struct CorunnerKept {
    pub cell: String,
    /// Work rate beside smart / beside block, over the whole cell.
    pub ratio: f64,
    /// The same round by round (each round runs every strategy once, in a balanced order,
    /// so a round's two turns saw the same machine): geometric mean and 90% interval.
    pub paired: smartcon_util::stats::PairedRatio,
    pub smart_reason: String,
}

impl CorunnerKept {
    /// Below `kept` beyond the noise of the rounds: the whole cell's ratio is under it and
    /// so is the upper end of the paired 90% interval. With one round the interval is the
    /// ratio itself.
    pub fn lost_beyond_noise(&self, kept: f64) -> bool {
        self.ratio < kept && self.paired.hi < kept
    }
}

/// The co-runner's kept work in every single-thread cpu-intensive cell.
pub fn corunner_kept(cells: &[Cell]) -> Vec<CorunnerKept> {
    let rate = |c: &Cell| c.corunner.as_ref().map(|k| k.work_per_s).filter(|r| *r > 0.0);
    smart_cells(cells, |c| c.load == Load::CpuIntensive && c.result.threads == 1)
        .into_iter()
        .filter_map(|s| {
            let b = find(cells, s, BLOCK)?;
            let ratio = rate(s)? / rate(b)?;
            let work = |c: &Cell| rounds_of(c, |t| t.corunner_work_per_s, rate(c));
            let paired = smartcon_util::stats::PairedRatio::of(&work(s), &work(b))?;
            Some(CorunnerKept { cell: cell_name(s), ratio, paired, smart_reason: main_reason(s) })
        })
        .collect()
}

pub(super) fn corunner_every_cell(cells: &[Cell]) -> Criterion {
    let kept = corunner_kept(cells);
    let bound = PARETO_CORUNNER_KEPT;
    let below: Vec<&CorunnerKept> = kept.iter().filter(|k| k.ratio < bound).collect();
    let lost: Vec<&CorunnerKept> = kept.iter().filter(|k| k.lost_beyond_noise(bound)).collect();
    let name = |k: &CorunnerKept| {
        format!(
            "{} {:.3} (rounds {:.3}, 90% {:.3}-{:.3}; smart: {})",
            k.cell, k.ratio, k.paired.gmean, k.paired.lo, k.paired.hi, k.smart_reason
        )
    };
    let measured = if kept.is_empty() {
        NONE.into()
    } else {
        let mut m = format!(
            "{} of {} cells >= {bound:.2} by the whole cell's work; {} below {bound:.2} beyond the noise of their rounds",
            kept.len() - below.len(),
            kept.len(),
            lost.len()
        );
        if !lost.is_empty() {
            m += &format!(": {}", lost.iter().map(|k| name(k)).collect::<Vec<_>>().join("; "));
        }
        let noise: Vec<&&CorunnerKept> = below.iter().filter(|k| !k.lost_beyond_noise(bound)).collect();
        if !noise.is_empty() {
            m += &format!(
                ". Below {bound:.2} within the noise: {}",
                noise.iter().map(|k| name(k)).collect::<Vec<_>>().join("; ")
            );
        }
        m
    };
    criterion(
        "cpu-intensive, every cell: the co-runner keeps >= 97% of the work it does beside block (a cell is lost when below, beyond the noise of its rounds: the upper end of the 90% interval of the per-round ratios < 0.97)",
        "SmartCon Sec. 7.3, Table VI (Dhrystone beside SmartCon), per cell",
        measured,
        (!kept.is_empty()).then_some(lost.is_empty()),
    )
    .figure(|| format!("{} of {} cells lost beyond noise", lost.len(), kept.len()))
}

/// Lost cells listed in the criterion's text; the record's `lost` field has them all.
pub(super) const LOST_LISTED_MAX: usize = 40;

pub(super) fn pareto_front(cells: &[Cell]) -> Criterion {
    let p = pareto(cells);
    let front = p.judged - p.lost.len();
    let mut by_where: Vec<(String, usize)> = Vec::new();
    for l in &p.lost {
        let key = format!("{} {}", l.load.name(), l.target);
        match by_where.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => by_where.push((key, 1)),
        }
    }
    let describe = |l: &LostCell| {
        let axis = match (l.corunner_ratio, l.cpu_pct_more) {
            (Some(k), _) => format!("co-runner {k:.2}"),
            (None, Some(d)) => format!("CPU {d:+.1} points"),
            (None, None) => String::new(),
        };
        format!(
            "{}: {} {:.2}x (90% {:.2}-{:.2}, {} rounds), {axis} (smart: {})",
            l.cell,
            l.better.name(),
            l.perf_ratio,
            l.perf_ratio_interval[0],
            l.perf_ratio_interval[1],
            l.rounds,
            l.smart_reason
        )
    };
    let mut measured = format!(
        "{front} of {} single-thread cells on the front ({:.1}%) round by round; {} by whole cells against the turns' spread (the rule of earlier reports)",
        p.judged,
        front as f64 * 100.0 / p.judged.max(1) as f64,
        p.judged - p.lost_whole_cell
    );
    if !p.lost.is_empty() {
        measured += "; lost by load and target: ";
        measured += &by_where.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ");
        measured += "; lost cells: ";
        measured += &p.lost.iter().take(LOST_LISTED_MAX).map(describe).collect::<Vec<_>>().join("; ");
        if p.lost.len() > LOST_LISTED_MAX {
            measured += &format!(
                "; and {} more (the criterion record in results.jsonl lists all)",
                p.lost.len() - LOST_LISTED_MAX
            );
        }
    }
    if let Some(c) = floor(cells).clause() {
        measured += "; ";
        measured += &c;
    }
    Criterion {
        record_type: "criterion",
        criterion: "single-thread cells: smart on the Pareto front in >= 95%, round by round (no fixed strategy gives >= 5% more IOPS, the geometric mean of the per-round ratios with the lower end of its 90% interval above 1, with its co-runner keeping >= 97% of its work beside smart, or >= 98% of smart's IOPS with >= 3% more co-runner work; bm-only: the same IOPS test at no more than 5 points more CPU, or >= 98% of smart's IOPS at 20 or more points less CPU)".into(),
        source: "SmartCon Sec. 7, Fig. 9, 12, 15 and Table VI (the adaptive choice against the fixed mechanisms, and its side effect on co-running work)",
        measured: if p.judged == 0 { NONE.into() } else { measured },
        figure: if p.judged == 0 {
            NO_CELL.into()
        } else {
            format!("{front} of {} cells ({:.0}%)", p.judged, front as f64 * 100.0 / p.judged as f64)
        },
        met: (p.judged > 0).then_some(front as f64 >= 0.95 * p.judged as f64),
        lost: p.lost,
        versus_paper: Vec::new(),
    }
}

pub(super) fn versus_paper(cells: &[Cell]) -> Criterion {
    let v = smart_vs_paper(cells);
    let lost = v.iter().filter(|c| c.verdict == Verdict::Lost).count();
    let mut measured = paper_headline(cells).unwrap_or_else(|| NONE.into());
    for (load, target, [w, t, l], why) in paper_tally(&v) {
        let why: Vec<String> = why.iter().map(|(a, n)| format!("{a} {n}")).collect();
        measured += &format!(
            "; {} {target}: {w}/{t}/{l}{}",
            load.name(),
            if why.is_empty() { String::new() } else { format!(" ({})", why.join(", ")) }
        );
    }
    Criterion {
        record_type: "criterion",
        criterion: "single-thread cells: smart not dominated by paper (the paper's Decision Module as written) in >= 95%, on the Pareto criterion's paired rule; won/tied/lost per load and target, with what decided the cells won or lost".into(),
        source: "smartcon's own: smart's additions to SmartCon Sec. 4-5 (spin-cheaper, measured classes, profiled Q, the others' CPU demand, >= at the size threshold) against the paper's rule on the same machine",
        measured,
        figure: if v.is_empty() {
            NO_CELL.into()
        } else {
            let n = |x: Verdict| v.iter().filter(|c| c.verdict == x).count();
            format!("won {}, tied {}, lost {} of {}", n(Verdict::Won), n(Verdict::Tied), lost, v.len())
        },
        met: (!v.is_empty()).then(|| (v.len() - lost) as f64 >= 0.95 * v.len() as f64),
        lost: Vec::new(),
        versus_paper: v,
    }
}

pub(super) fn fewer_switches(cells: &[Cell], targets: &[TargetInfo]) -> Criterion {
    // Where smart may spin: a mainstream device always blocks, by design.
    let spinnable = |t: &str| targets.iter().any(|i| i.label == t && i.class != DeviceClass::Mainstream);
    let v = smart_cells(cells, |c| {
        c.load == Load::BmOnly && c.result.bs_bytes == 4096 && c.tps.is_none() && spinnable(&c.result.target)
    });
    let ratio = |c: &Cell| find(cells, c, BLOCK).map(|b| c.csw_per_io() / b.csw_per_io().max(1e-9));
    let worst = v.iter().filter_map(|c| ratio(c).map(|r| (r, *c))).max_by(|a, b| a.0.total_cmp(&b.0));
    criterion(
        "4 KiB, bm-only, devices smart may spin on: smart's context switches per I/O <= 1/5 of block's",
        "smartcon's own bound (SmartCon Fig. 10: voluntary switches \"remain almost the same\"; involuntary ones drop to about 1/6 under the CPU-intensive load)",
        match worst {
            Some((r, c)) => format!(
                "{} of {} cells; highest smart/block {r:.3} ({}; smart's decisions: {}; its switches: {} voluntary, {} involuntary{})",
                v.iter().filter(|c| ratio(c).is_some_and(|r| r <= 0.2)).count(),
                v.len(),
                cell_name(c),
                main_reason(c),
                c.result.ctx_voluntary,
                c.result.ctx_involuntary,
                // A spinner switched out involuntarily about once per I/O is preempted by
                // work the kernel does for the I/O on its CPU (on the local disk: the direct
                // I/O write completion, a kworker; docs/evaluate.md).
                if c.result.ctx_involuntary * 2 > c.result.ios {
                    ", i.e. the spinner was preempted about once per I/O (see \"Where the I/O threads run\" in docs/evaluate.md)"
                } else {
                    ""
                }
            ),
            None => NONE.into(),
        },
        worst.map(|(r, _)| r <= 0.2),
    )
    .figure(|| {
        format!(
            "{} of {} cells; highest {:.2}",
            v.iter().filter(|c| ratio(c).is_some_and(|r| r <= 0.2)).count(),
            v.len(),
            worst.map_or(0.0, |(r, _)| r)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn two_probes_agree_within_one_size_step_or_the_criterion_fails() {
        let t = |probes: &[(u64, u64)]| TargetInfo {
            probed: probes
                .iter()
                .map(|&(i, b)| ProbedThresholds { idle_bytes: i << 10, busy_bytes: b << 10 })
                .collect(),
            ..disk()[0].clone()
        };
        let c = probes_agree(&[t(&[(128, 1024), (256, 512)])]);
        assert_eq!(c.met, Some(true), "{}", c.measured);
        assert!(c.measured.contains("128k and 256k"), "{}", c.measured);
        // Two steps apart on either threshold is a miss.
        assert_eq!(probes_agree(&[t(&[(64, 1024), (256, 1024)])]).met, Some(false));
        assert_eq!(probes_agree(&[t(&[(128, 256), (128, 1024)])]).met, Some(false));
        // One probe, or none: not measured, not met.
        let one = probes_agree(&[t(&[(128, 1024)]), t(&[])]);
        assert_eq!(one.met, None);
        assert_eq!(one.figure, NO_CELL);
        // Every target probed twice counts.
        let two = probes_agree(&[t(&[(128, 1024), (128, 1024)]), t(&[(16, 64), (128, 64)])]);
        assert_eq!((two.met, two.figure.as_str()), (Some(false), "1 of 2 targets"));
    }

    #[test]
    fn a_criterion_without_cells_is_not_judged() {
        let c = criteria(&[], &[]);
        assert_eq!(c.len(), 9);
        assert!(c.iter().all(|x| x.met.is_none() && !x.source.is_empty()), "{c:?}");
        assert!(c.iter().all(|x| x.figure == "no cell" || x.figure == "not measured"), "{c:?}");
        assert!(c.iter().all(|x| !x.criterion.contains("issue") && !x.measured.contains("issue")));
    }

    #[test]
    fn small_reads_pass_at_1_3_and_name_the_decisions() {
        let mut cells = vec![
            cell(Load::BmOnly, "disk", 4096, BLOCK, 1000.0),
            cell(Load::BmOnly, "disk", 4096, SPIN, 1400.0),
            cell(Load::BmOnly, "disk", 4096, SMART, 1350.0),
        ];
        let c = criteria(&cells, &disk());
        let small = by_name(&c, "local-disk file, 4 KiB");
        assert_eq!(small.met, Some(true));
        assert!(small.measured.contains("smart 1.35x, spin 1.40x (smart's decisions: cpu_busy 100%)"), "{small:?}");
        cells[2] = cell(Load::BmOnly, "disk", 4096, SMART, 1250.0);
        assert_eq!(by_name(&criteria(&cells, &disk()), "local-disk file, 4 KiB").met, Some(false));
        // spin: 1400 / 1250 = 1.12x at the same CPU (record() gives every cell 10%): lost.
        let front = by_name(&criteria(&cells, &disk()), "single-thread cells: smart on the Pareto").clone();
        assert_eq!(front.met, Some(false));
        assert!(
            front.measured.starts_with("0 of 1 single-thread cells on the front (0.0%) round by round; 0 by whole cells against the turns' spread (the rule of earlier reports); lost by load and target: bm-only disk 1; lost cells: bm-only disk iozone-rand-read 4k: spin 1.12x (90% 1.12-1.12, 1 rounds), CPU +0.0 points"),
            "{front:?}"
        );
        assert_eq!(front.lost.len(), 1);
    }

    #[test]
    fn large_requests_must_cost_no_more_cpu_than_five_points() {
        let mut smart = cell(Load::BmOnly, "disk", 256 << 10, SMART, 990.0);
        let cells = vec![cell(Load::BmOnly, "disk", 256 << 10, BLOCK, 1000.0), smart.clone()];
        assert_eq!(by_name(&criteria(&cells, &disk()), "local-disk file, 256").met, Some(true));
        smart.result.cpu_user_pct = 16.0; // 6 points above block's 10
        let cells = vec![cells[0].clone(), smart];
        let c = by_name(&criteria(&cells, &disk()), "local-disk file, 256").clone();
        assert_eq!(c.met, Some(false));
        assert!(
            c.measured.contains("most extra CPU +6.0 points")
                && c.measured.contains("size threshold of the profile: 64k"),
            "{c:?}"
        );
    }

    #[test]
    fn cpu_load_misses_where_smart_blocked_count_as_noise() {
        let mut cells = Vec::new();
        for (i, g) in [0.96, 0.99, 1.01, 0.95].iter().enumerate() {
            let t = format!("t{i}");
            cells.push(cell(Load::CpuIntensive, &t, 4096, BLOCK, 1000.0));
            cells.push(cell(Load::CpuIntensive, &t, 4096, SMART, 1000.0 * g));
        }
        let c = by_name(&criteria(&cells, &[]), "cpu-intensive: smart nowhere").clone();
        assert_eq!(c.met, Some(false));
        // record() makes every I/O a block decision, so both misses are noise.
        assert!(c.measured.starts_with("2 of 4 cells >= 0.97x; lowest 0.950"), "{c:?}");
        assert!(c.measured.contains("of the 2 cells below, smart blocked on every I/O in 2"), "{c:?}");
        assert!(c.measured.contains("Over all 4 cells"), "{c:?}");
    }

    #[test]
    fn context_switches_are_judged_only_where_smart_may_spin() {
        let mut block = cell(Load::BmOnly, "disk", 4096, BLOCK, 1000.0);
        block.result.ctx_voluntary = 1000;
        let mut smart = cell(Load::BmOnly, "disk", 4096, SMART, 1000.0);
        smart.result.ctx_voluntary = 100;
        smart.result.decisions.by_reason = [(Reason::CpuAvailable, 1000)].into();
        let cells = vec![block, smart];
        let c = by_name(&criteria(&cells, &disk()), "4 KiB, bm-only").clone();
        assert_eq!(c.met, Some(true));
        assert!(c.measured.contains("highest smart/block 0.100") && c.measured.contains("cpu_available 100%"), "{c:?}");
        let mainstream = vec![TargetInfo { class: DeviceClass::Mainstream, ..disk()[0].clone() }];
        assert_eq!(by_name(&criteria(&cells, &mainstream), "4 KiB, bm-only").met, None);
    }

    #[test]
    fn the_noise_note_tells_spread_from_loss() {
        assert_eq!(noise_note(&[1.0, 0.9]), "", "too few cells to say anything");
        let steady = noise_note(&[1.0, 1.0, 1.0]);
        assert!(steady.ends_with("no systematic loss"), "{steady}");
        let spread = noise_note(&[0.9, 1.1, 1.0, 0.95, 1.05]);
        assert!(spread.contains("averages 1.000") && spread.contains("cannot hold"), "{spread}");
        let low = noise_note(&[0.9, 0.92, 0.91]);
        assert!(low.contains("lower on average"), "{low}");
        // A mean of 0.983 with a wide spread over 81 cells is within noise (the default
        // run's figures).
        let mut wide: Vec<f64> = (0..80).map(|i| if i % 2 == 0 { 0.983 - 0.11 } else { 0.983 + 0.11 }).collect();
        wide.push(0.983);
        let wide = noise_note(&wide);
        assert!(wide.contains("no systematic loss") && wide.contains("cannot hold"), "{wide}");
    }

    #[test]
    fn the_pareto_criterion_counts_single_thread_cells_and_names_the_lost_ones() {
        let l = Load::CpuIntensive;
        let mut cells = vec![
            loaded(l, SMART, 1000.0, 1000, &[]),
            loaded(l, BLOCK, 1000.0, 1000, &[]),
            loaded(l, SPIN, 2000.0, 1000, &[]),
            loaded(l, SYNC, 2600.0, 990, &[]),
        ];
        cells[0].result.decisions.by_reason = [(Reason::CpuBusy, 900), (Reason::SpinCheaper, 100)].into();
        // A second cell (8k) where smart is on the front: spin is faster but costs the co-runner.
        for (s, iops, work) in [(SMART, 1000.0, 1000), (BLOCK, 990.0, 1000), (SPIN, 1500.0, 800)] {
            let mut c = loaded(l, s, iops, work, &[]);
            c.result.bs_bytes = 8192;
            cells.push(c);
        }
        // A multi-thread cell is left out, however it compares.
        for (s, iops) in [(SMART, 100.0), (SPIN, 1000.0)] {
            let mut c = loaded(l, s, iops, 1000, &[]);
            c.result.bs_bytes = 16384;
            c.result.threads = 4;
            cells.push(c);
        }
        let p = pareto(&cells);
        assert_eq!(p.judged, 2);
        assert_eq!(p.lost.len(), 1);
        let lost = &p.lost[0];
        // Of the two dominating strategies the one with more IOPS is named.
        assert_eq!((lost.better, (lost.perf_ratio * 100.0).round()), (Strategy::Sync, 260.0));
        assert_eq!(lost.smart_reason, "cpu_busy 90%");
        let c = by_name(&criteria(&cells, &[]), "single-thread cells: smart on the Pareto").clone();
        assert_eq!(c.met, Some(false), "1 of 2 on the front is below 95%");
        assert!(
            c.measured.starts_with(
                "1 of 2 single-thread cells on the front (50.0%) round by round; 1 by whole cells against the turns' spread (the rule of earlier reports); lost by load and target: cpu-intensive emu:optane 1; lost cells: cpu-intensive emu:optane iozone-rand-read 4k: sync 2.60x (90% 2.60-2.60, 1 rounds), co-runner 0.99 (smart: cpu_busy 90%)"
            ),
            "{c:?}"
        );
        assert_eq!(c.lost, p.lost);
        assert_eq!(c.figure, "1 of 2 cells (50%)");
        assert!(pareto_headline(&cells).unwrap().contains("in 1 of 2 single-thread cells (50%"));
        // The cells one by one, as a report's map reads them: the same rule, cell by cell.
        let j = judge_cells(&cells);
        let verdicts: Vec<(u64, &str)> = j.iter().map(|j| (j.smart.result.bs_bytes, j.verdict())).collect();
        assert_eq!(verdicts, vec![(4096, "sync"), (8192, "front")]);
        assert_eq!(j[0].lost.as_ref(), p.lost.first());
        // Without the dominated cell, every judged cell is on the front: met.
        let rest: Vec<Cell> = cells.into_iter().filter(|c| c.result.bs_bytes != 4096).collect();
        assert_eq!(by_name(&criteria(&rest, &[]), "single-thread cells: smart on the Pareto").met, Some(true));
    }
}
