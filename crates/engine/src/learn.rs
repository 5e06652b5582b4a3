//! The online check of the spin branches: does spinning pay here, now?
//!
//! The Decision Module spins (branches `cpu_available` and `spin_cheaper`) on thresholds a
//! probe measured once, on a host that may have changed since: the same VM's local disk
//! gave 1.45 x at 4 KiB by spinning one day and 1.02 x the next, and a workload can make
//! spinning slower than blocking where the probe saw it pay (postmark on the local disk:
//! its buffered I/O goes to io_uring's worker thread, and a spinner competes with that
//! worker for the CPU, 2.7 x slower than blocking). Spinning that does not shorten the wait
//! by a clear margin only burns a CPU the others could use.
//!
//! [`SpinCheck`] keeps, per port, for each (op, power-of-two size) the mean wait of the
//! I/Os that spun and of those that blocked, measured as the port sees them (submit to
//! completion), and it now and then waits the other way to keep both figures current
//! (a *trial*): a burst of [`TRIAL_BURST`] I/Os, the first of which are not counted, since
//! a way's wait depends on the way before it. A size starts blocking, then tries spinning;
//! then one burst in [`TRIAL_PERIOD`] I/Os, or, once the two figures are far apart, as few
//! as keep the trials' cost near 1 %: the cost the two means predict, or, for the spin
//! check, what the trials were measured to cost with the change back (a spin after blocks
//! may wait a tick for a kernel worker woken on its CPU).
//! Where blocking waits no more than `1 + `[`GAIN_MIN`] times as long as spinning, the
//! port blocks instead, with reason `spin_unpaid`, until the figures say otherwise.
//!
//! The verdict is paired, as the evaluate's judge is: each trial burst is compared with the
//! waits of the other way just before and just after it, and the log of each such ratio
//! goes into a slow mean ([`WARM_PAIRS`] to start, then about the last twenty), crossed
//! with a little hysteresis. A device whose waits swing for both ways alike (others' I/O
//! coming and going) made the two ways' own means, taken at different moments, disagree by
//! more than the gain: in the tenth session's default evaluate smart blocked as unpaid on
//! 24-74 % of its I/Os in ten io-intensive local-disk cells that spin won by 1.05-1.43 x.
//! The per-way means still serve the first verdict where the ways are [`DECISIVE_FACTOR`]
//! apart, a trial's early end, and the outlier caps.
//!
//! It only ever turns a spin into a block, never the other way: what spinning takes from
//! *other* runnable work is not seen from one thread's waits, so where the rule blocks,
//! it keeps blocking. It is not part of [`crate::decision::decide`], which stays pure: the
//! port applies it after the decision, for `smart` and `smart-hybrid` only (`paper` is the
//! paper's rule as written).
//!
//! What a port learnt outlives it: when it closes, its checks are kept ([`keep`]) for the
//! next port of the same strategy on the same device in this process ([`take`]), which
//! starts from those figures with one trial burst per measured size to bring them up to
//! date, instead of measuring both ways afresh. Fresh, a check spends its first three bursts
//! of each way (48 I/Os and the switches) on trials: in the evaluate's 30 ms turns that
//! was 11-23% of smart's I/Os in the io-intensive emu:nvme cells, where blocking trials
//! cost twice a spin and smart lost to spin and sync by 1.06-1.09 x (tenth session's
//! targeted runs). A program that opens a file, reads it and closes it pays the same.
//!
//! Non-goals: sharing what one port learnt with the ports open beside it (each thread sees
//! its own waits, which is what it decides for), or learning anything about a device's
//! other branches (class, size threshold, queue limit).

use crate::decision::{Reason, Strategy};

/// Spinning pays when blocking waits longer than spinning by more than this share. The
/// evaluate's judge calls a spinning smart beaten, with no load, when blocking gives 0.98 x
/// its IOPS at 20 points less CPU, and the probe's size rule tolerates 3 %: 5 % keeps a
/// margin above both for the noise of the two means.
pub const GAIN_MIN: f64 = 0.05;
/// I/Os in a row that a trial waits the other way. A way's wait depends on what the thread
/// did just before (a vCPU that halted between blocking waits, a spinner's first wait
/// after sleeping): a lone trial measures the switch, not the way. Measured on the team's
/// VM: lone spins among blocks waited as long as the blocks, while spinning throughout was
/// 1.28 x faster.
pub const TRIAL_BURST: u32 = 8;
/// The first waits after each change of way are not counted.
pub const SWITCH_SKIP: u32 = 2;
/// Samples of each way a size needs before its verdict counts (three bursts' worth), unless
/// the two ways are [`DECISIVE_FACTOR`] apart. One burst's worth (6) was too few: a wait's
/// spread on the team's VM is about half its mean (the local disk beside four I/O workers:
/// 4 KiB-64 KiB waits with p50 0.7-0.9 x the mean), so six samples a side put the ratio of
/// two means within +/-25% of the truth, and a port that spun 1.2 x faster than it blocked
/// judged spinning unpaid in a third of the evaluate's 30 ms turns (`spin_unpaid` 23-41% of
/// smart's I/Os in the cells spin won by 1.18-1.22 x). With 18 a side it is +/-12%.
pub const WARM_SAMPLES: u32 = 3 * (TRIAL_BURST - SWITCH_SKIP);
/// The same for the block check ([`TwoWays::patient`]): one burst's worth. Its two ways
/// both sleep, and beside the crunchers the plain call gained 1.06-1.16 x over io_uring's
/// wait on the local disk's writes; with 18 samples a side the check rarely reached a
/// verdict within an evaluate turn of 30 ms, and smart lost 5 such cells to `sync` (ninth
/// session's default run), where with 6 it had lost 1.
pub const PATIENT_WARM_SAMPLES: u32 = TRIAL_BURST - SWITCH_SKIP;
/// I/Os between trials near the boundary (by [`SURE_MARGIN`]): 3 % of the I/Os.
pub const TRIAL_PERIOD: u32 = 256;
/// The same for the block check ([`TwoWays::patient`]): 0.8 % of the I/Os. Its trials of
/// the way not taken wait in the way that loses, and beside busy CPUs that way's waits
/// have a tail of scheduler slices that the capped means do not weigh: an O_DIRECT write
/// through io_uring completes in a kworker that waits for a CPU. In the eighteenth
/// session's default run smart's writes to the local disk beside the crunchers took the
/// plain call on 97 % of its I/Os and still gave 0.93-0.98 x the fixed plain call's IOPS
/// (p50 the same, p99.9 4.0 ms against 3.2-3.7), and lost three cells to it.
pub const TRIAL_PERIOD_PATIENT: u32 = 1024;
/// At least this many I/Os between trials once the means are far from the boundary.
pub const TRIAL_PERIOD_SURE: u32 = 1024;
/// At most this many where only the trials' measured cost ([`TRIAL_COST`]) spaces them.
/// The block check's trials are not spaced by it at all: beside the crunchers both its ways
/// wait scheduler slices now and then, and one such wait in a trial would put the next one
/// 65,536 I/Os away, a whole cell of a way the host may no longer favour.
pub const TRIAL_PERIOD_COSTLY: u32 = 4096;
/// At most this many.
pub const TRIAL_PERIOD_MAX: u32 = 65_536;
/// Far from the boundary, the trials' extra wait is kept to this share of the whole: the
/// extra the two ways' means predict, or, if more, what the trials were measured to cost
/// (their waits and the first two after each, over the preferred way's mean). The change
/// back is the larger part where a kernel worker was woken on this CPU while the thread
/// slept: the first spin after a trial of blocks waited a tick (1 ms against 33 us) on a
/// loop device in the twentieth session. A trial every 1,024 spins then costs about 3 %,
/// and in the bm-only cells of the loop device where smart spun as spin did, it gave
/// 0.96-0.98 x spin's IOPS (the geometric mean per run, five default runs of the eighteenth
/// and nineteenth sessions; how much of that the trials were is not measured).
pub const TRIAL_COST: f64 = 0.01;
/// How far (as a share of the boundary) the ratio of the means must lie from it for the
/// verdict to count as sure.
pub const SURE_MARGIN: f64 = 0.25;
/// Means this many times apart (either way) decide after one sample each.
pub const DECISIVE_FACTOR: f64 = 2.0;
/// A trial's wait this many times the preferred way's mean ends the trial at once and is
/// counted, even where a later wait after a change would not be: a spinner that starves
/// the kernel worker its I/O waits for takes a scheduler slice per wait (4 ms against
/// 60 us), far beyond what a change of way costs. The very first wait after the change is
/// not judged so: a kernel worker that was woken on this CPU while the thread slept is
/// starved by the first spin until the tick moves it (a loop device's reads: 1.04 ms
/// against 57 us blocked, then 33 us a spin), and one such wait made the check block for
/// a whole evaluate cell (twentieth session, `/dev/loop` 64 KiB sequential reads, bm-only,
/// in one of three traced runs; untraced, a turn at 0.45 x spin's IOPS).
pub const HOPELESS_FACTOR: f64 = 8.0;
/// Trials whose pairs a verdict needs (three bursts' worth, as [`WARM_SAMPLES`]), unless
/// the two ways are [`DECISIVE_FACTOR`] apart; the block check needs [`PATIENT_PAIRS`].
pub const WARM_PAIRS: u32 = 5;
/// The same for the block check ([`TwoWays::patient`]).
pub const PATIENT_PAIRS: u32 = 1;
/// The weight of a new pair in the paired mean, once there are this many pairs' inverse:
/// a verdict rests on the last twenty or so pairs (ten trials, each paired with the waits
/// before and after it), not on the last burst. With 0.2 a simulated swing of the device
/// (a_swing_that_hits_both_ways_alike_does_not_hide_the_gain) still blocked 5.5 % of the
/// I/Os as unpaid where spinning gained 1.15 x; with 0.1, 0-3.7 % over five seeds.
const PAIR_ALPHA: f64 = 0.1;
/// Hysteresis about the boundary, in the log of the ratio: the alternative is taken when
/// the paired gain exceeds `gain_min` by this much, and left when it falls this much short.
/// A verdict near the boundary then holds through a trial or two that say otherwise.
pub const PAIR_HYSTERESIS: f64 = 0.02;
/// A pair further than this (in the log of the ratio) from the paired mean counts as this
/// far: 1.5 x, three times the scatter of a pair of six waits a side with a spread of
/// half the mean.
const PAIR_STEP_MAX: f64 = 0.405;
/// While the last pair disagrees with the paired verdict (the host may have changed), a
/// trial at least this often, so new pairs settle it soon.
pub const TRIAL_PERIOD_DOUBT: u32 = 64;
/// The weight of a new sample in a mean.
const ALPHA: f64 = 0.125;
/// A sample above this many times the mean counts as this many times (a preemption or a
/// page fault must not swing the verdict on its own).
const OUTLIER_FACTOR: f64 = 4.0;
/// Power-of-two size classes: 512 B and below, ..., 16 MiB and above.
const BUCKETS: usize = 16;
const BUCKET_SHIFT_MIN: u32 = 9;

/// A mean with a sample count.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    ns: f64,
    n: u32,
}

impl Mean {
    fn add(&mut self, sample_ns: f64) {
        if self.n == 0 {
            self.ns = sample_ns;
        } else {
            let s = sample_ns.min(self.ns * OUTLIER_FACTOR);
            // The first samples weigh as a plain mean, then as an exponential one.
            let w = (1.0 / (self.n + 1) as f64).max(ALPHA);
            self.ns += w * (s - self.ns);
        }
        self.n = self.n.saturating_add(1);
    }
}

/// One (op, size) class of a [`TwoWays`]: the base way, and the alternative that must
/// prove itself faster by the gain to be taken.
#[derive(Debug, Clone, Copy)]
struct Class {
    alt: Mean,
    base: Mean,
    /// I/Os since the last trial ended.
    since_trial: u32,
    /// I/Os left in the trial under way (0: none).
    trial_left: u32,
    /// Waits still to charge to the last trial: its own and the first after it, which pay
    /// for the change back ([`TRIAL_COST`]).
    cost_left: u32,
    /// Their excess over the preferred way's mean so far, and that mean at the trial's start.
    cost_acc: f64,
    cost_pref: f64,
    /// What a trial cost, measured: the mean excess wait of the last trials, ns.
    trial_cost: Mean,
    /// Samples still to leave out after a change of way.
    skip: u32,
    /// The way of the last sample (`None` before any).
    last_alt: Option<bool>,
    /// The base way is preferred: the alternative did not prove itself. The base way first
    /// until measured: blocking is never far worse than spinning, while a spin can be.
    base_preferred: bool,
    /// Both ways sleep (the block check): a long wait is a scheduling delay either way
    /// could have met, not a sign of the way, so no trial is ended as hopeless and no
    /// verdict is taken from one sample of each way (see [`TwoWays::patient`]).
    patient: bool,
    /// The run under way (I/Os in a row waited one way): its last counted waits.
    run: Run,
    /// The run before it: its way and the mean of its last counted waits.
    prev: Option<(bool, f64)>,
    /// A short run (a trial) that ended and waits to be paired with the first counted
    /// waits of the run after it.
    pending: Option<(bool, f64)>,
    /// The log of base-over-alternative wait, from runs next to each other in time (see
    /// [`TwoWays`]): its mean over the recent pairs, and how many.
    paired: Mean,
    /// The last pair's log ratio.
    last_pair: f64,
    /// `paired`'s mean as a ratio (its exp, taken when a pair comes, not per I/O).
    paired_ratio: f64,
}

/// The counted waits of the run under way: the last [`RUN_KEEP`] of them, and its length.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    last: [f32; RUN_KEEP],
    kept: u8,
    at: u8,
    len: u32,
    /// Paired with the trial before it already.
    paired: bool,
}

/// Counted waits a run is paired by: a trial burst's, after its switch.
const RUN_KEEP: usize = (TRIAL_BURST - SWITCH_SKIP) as usize;

impl Run {
    fn push(&mut self, wait_ns: f64) {
        self.last[self.at as usize] = wait_ns as f32;
        self.at = ((self.at as usize + 1) % RUN_KEEP) as u8;
        self.kept = (self.kept + 1).min(RUN_KEEP as u8);
    }

    fn mean(&self) -> Option<f64> {
        (self.kept > 0)
            .then(|| self.last[..self.kept as usize].iter().map(|&x| x as f64).sum::<f64>() / self.kept as f64)
    }
}

impl Default for Class {
    fn default() -> Self {
        Class {
            alt: Mean::default(),
            base: Mean::default(),
            since_trial: 0,
            trial_left: 0,
            cost_left: 0,
            cost_acc: 0.0,
            cost_pref: 0.0,
            trial_cost: Mean::default(),
            skip: 0,
            last_alt: None,
            base_preferred: true,
            patient: false,
            run: Run::default(),
            prev: None,
            pending: None,
            paired: Mean::default(),
            last_pair: 0.0,
            paired_ratio: 1.0,
        }
    }
}

impl Class {
    /// Enough samples of both ways: [`WARM_SAMPLES`] each ([`PATIENT_WARM_SAMPLES`] for the
    /// block check), or one each when they differ by more than [`DECISIVE_FACTOR`].
    fn warm(&self) -> bool {
        self.paired_warm() || (!self.patient && self.alt.n >= 1 && self.base.n >= 1 && self.decisive())
    }

    /// Enough pairs for the paired verdict.
    fn paired_warm(&self) -> bool {
        self.paired.n >= if self.patient { PATIENT_PAIRS } else { WARM_PAIRS }
    }

    fn decisive(&self) -> bool {
        !(1.0 / DECISIVE_FACTOR..=DECISIVE_FACTOR).contains(&self.unpaired_ratio())
    }

    /// The base way's mean wait over the alternative's, each way's mean on its own.
    fn unpaired_ratio(&self) -> f64 {
        if self.alt.ns > 0.0 {
            self.base.ns / self.alt.ns
        } else {
            f64::INFINITY
        }
    }

    /// The base way's wait over the alternative's: from the pairs once there are enough,
    /// else from the two means.
    fn ratio(&self) -> f64 {
        if self.paired_warm() {
            self.paired_ratio
        } else {
            self.unpaired_ratio()
        }
    }

    /// One pair of neighbouring runs, `(way, mean wait)` each, of different ways.
    fn pair(&mut self, a: (bool, f64), b: (bool, f64)) {
        let (base, alt) = if a.0 { (b.1, a.1) } else { (a.1, b.1) };
        if !(base > 0.0 && alt > 0.0) {
            return;
        }
        let limit = OUTLIER_FACTOR.ln();
        let mut x = (base / alt).ln().clamp(-limit, limit);
        self.last_pair = x;
        if self.paired_warm() {
            // A pair across a swing of the device (the load changed between the two runs)
            // says little of the ways: it moves the mean by a bounded step.
            x = x.clamp(self.paired.ns - PAIR_STEP_MAX, self.paired.ns + PAIR_STEP_MAX);
        }
        let m = &mut self.paired;
        if m.n == 0 {
            m.ns = x;
        } else {
            m.ns += (1.0 / (m.n + 1) as f64).max(PAIR_ALPHA) * (x - m.ns);
        }
        m.n = m.n.saturating_add(1);
        self.paired_ratio = m.ns.exp();
    }

    /// The run under way has ended (the way changes): a short one (a trial, or a burst
    /// while both ways are measured) is paired with the run before it, unless that run was
    /// paired with it already, and waits to be paired with the run after it.
    fn end_run(&mut self) {
        let Some(way) = self.last_alt else { return };
        let mut run = std::mem::take(&mut self.run);
        let Some(mean) = run.mean() else {
            self.prev = None;
            return;
        };
        if let Some(p) = self.pending.take() {
            // A run shorter than a burst's counted waits, after a trial.
            if !run.paired && p.0 != way {
                self.pair(p, (way, mean));
                run.paired = true;
            }
        }
        if run.len <= TRIAL_BURST {
            if let Some(p) = self.prev {
                if p.0 != way && !run.paired {
                    self.pair(p, (way, mean));
                }
            }
            self.pending = Some((way, mean));
        }
        self.prev = Some((way, mean));
    }

    /// The verdict, from the pairs once warm (with [`PAIR_HYSTERESIS`]), before that from
    /// the means where they are [`DECISIVE_FACTOR`] apart.
    /// `edge` is `ln(1 + gain_min)`, taken once per [`TwoWays`].
    fn judge(&mut self, gain_min: f64, edge: f64) {
        if self.paired_warm() {
            let x = self.paired.ns;
            self.base_preferred =
                if self.base_preferred { x <= edge + PAIR_HYSTERESIS } else { x < edge - PAIR_HYSTERESIS };
        } else if self.warm() {
            self.base_preferred = self.unpaired_ratio() <= 1.0 + gain_min;
        }
    }

    /// The last pair says the other way: the host may have changed.
    fn in_doubt(&self, edge: f64) -> bool {
        self.paired_warm() && (self.last_pair <= edge) != self.base_preferred
    }

    /// I/Os between trials: one burst until warm; [`TRIAL_PERIOD`] near the boundary; far
    /// from it, as many as keep the trials' extra wait within [`TRIAL_COST`] of the total
    /// (at least [`TRIAL_PERIOD_SURE`], at most [`TRIAL_PERIOD_MAX`]).
    fn period(&self, gain_min: f64, edge: f64) -> u32 {
        if !self.warm() {
            return TRIAL_BURST;
        }
        if self.in_doubt(edge) {
            return TRIAL_PERIOD_DOUBT;
        }
        let r = self.ratio();
        if (r / (1.0 + gain_min) - 1.0).abs() <= SURE_MARGIN {
            return if self.patient { TRIAL_PERIOD_PATIENT } else { TRIAL_PERIOD };
        }
        let worse_over_better = if r >= 1.0 { r } else { 1.0 / r };
        let by_ways = TRIAL_BURST as f64 * (worse_over_better - 1.0) / TRIAL_COST;
        // What the trials were measured to cost, the change back included (the spin check
        // only, and at most [`TRIAL_PERIOD_COSTLY`] apart for it).
        let preferred = if self.base_preferred { self.base.ns } else { self.alt.ns };
        let measured = if !self.patient && self.trial_cost.n > 0 && preferred > 0.0 {
            (self.trial_cost.ns / (TRIAL_COST * preferred)).min(TRIAL_PERIOD_COSTLY as f64)
        } else {
            0.0
        };
        by_ways.max(measured).ceil().clamp(TRIAL_PERIOD_SURE as f64, TRIAL_PERIOD_MAX as f64) as u32
    }
}

/// Which of two ways to wait a port takes, per op and size, from its own waits: the base
/// way unless the alternative waits less by more than `gain_min` (a share of its wait),
/// with trials of the way not taken. Allocation-free, a few nanoseconds a call.
#[derive(Debug, Clone)]
pub struct TwoWays {
    classes: [[Class; BUCKETS]; 2],
    gain_min: f64,
    /// `ln(1 + gain_min)`: the paired verdict's edge, taken once, not per I/O.
    edge: f64,
}

/// One wait as [`TwoWays::pick`] chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The alternative way (else the base way).
    pub alt: bool,
    /// A trial: the way not preferred now, or any wait before both ways are measured.
    pub trial: bool,
}

fn bucket(bytes: u64) -> usize {
    let log2 = 63 - bytes.max(1).leading_zeros();
    (log2.saturating_sub(BUCKET_SHIFT_MIN) as usize).min(BUCKETS - 1)
}

impl TwoWays {
    pub fn new(gain_min: f64) -> TwoWays {
        TwoWays { classes: [[Class::default(); BUCKETS]; 2], gain_min, edge: (1.0 + gain_min).ln() }
    }

    /// Two ways that both sleep: no trial ends early, every verdict waits for
    /// [`PATIENT_WARM_SAMPLES`] of each way, and a way's first sample counts at most
    /// `OUTLIER_FACTOR` times the other way's mean. Beside a cruncher on every core both
    /// ways' waits have a tail of scheduler slices (p99 4-8 ms against a 60 us median, 4 KiB
    /// writes on the local disk): one such wait as the plain call's first trial ended it,
    /// was decisive, and put the next trial 65,536 I/Os away, so the port blocked through
    /// io_uring at 0.45 x the plain call's IOPS for the whole run.
    pub fn patient(gain_min: f64) -> TwoWays {
        let class = Class { patient: true, ..Class::default() };
        TwoWays { classes: [[class; BUCKETS]; 2], gain_min, edge: (1.0 + gain_min).ln() }
    }

    fn class(&mut self, bytes: u64, write: bool) -> &mut Class {
        &mut self.classes[write as usize][bucket(bytes)]
    }

    /// The way for the next I/O of this op and size.
    #[inline]
    pub fn pick(&mut self, bytes: u64, write: bool) -> Pick {
        let (gain_min, edge) = (self.gain_min, self.edge);
        let c = self.class(bytes, write);
        let trial = if c.trial_left > 0 {
            c.trial_left -= 1;
            true
        } else {
            c.since_trial += 1;
            if c.since_trial > c.period(gain_min, edge) {
                c.since_trial = 0;
                c.trial_left = TRIAL_BURST - 1;
                c.cost_left = TRIAL_BURST + SWITCH_SKIP;
                c.cost_acc = 0.0;
                c.cost_pref = if c.base_preferred { c.base.ns } else { c.alt.ns };
                true
            } else {
                false
            }
        };
        Pick { alt: c.base_preferred == trial, trial: trial || !c.warm() }
    }

    /// What one such I/O waited, from submission to completion as the port saw it.
    #[inline]
    pub fn record(&mut self, bytes: u64, write: bool, alt: bool, wait_ns: u64) {
        let (gain_min, edge) = (self.gain_min, self.edge);
        let c = self.class(bytes, write);
        if c.cost_left > 0 {
            c.cost_acc += wait_ns as f64 - c.cost_pref;
            c.cost_left -= 1;
            if c.cost_left == 0 && c.cost_pref > 0.0 {
                c.trial_cost.add(c.cost_acc.max(0.0));
            }
        }
        if c.last_alt != Some(alt) {
            c.end_run();
            c.skip = SWITCH_SKIP;
            c.last_alt = Some(alt);
        }
        c.run.len = c.run.len.saturating_add(1);
        let (this, other) = if alt { (&mut c.alt, c.base) } else { (&mut c.base, c.alt) };
        let mut wait_ns = wait_ns as f64;
        if c.patient && this.n == 0 && other.n > 0 {
            wait_ns = wait_ns.min(OUTLIER_FACTOR * other.ns);
        }
        // A trial's wait far beyond the preferred way's mean: the way is worse now, and
        // more of it would only cost; counted, and the trial ends. Not the first wait after
        // the change, which pays for the way before it (see [`HOPELESS_FACTOR`]).
        let hopeless = !c.patient
            && alt == c.base_preferred
            && c.skip < SWITCH_SKIP
            && other.n > 0
            && wait_ns > HOPELESS_FACTOR * other.ns;
        let counted = if hopeless {
            c.trial_left = 0;
            true
        } else if c.skip > 0 {
            c.skip -= 1;
            false
        } else {
            true
        };
        if counted {
            // Capped as the way's mean caps it, so a pair is not one preemption.
            let capped = if this.n > 0 { wait_ns.min(OUTLIER_FACTOR * this.ns) } else { wait_ns };
            this.add(wait_ns);
            c.run.push(capped);
            // The first counted waits after a trial: the pair after it.
            if c.run.kept as usize == RUN_KEEP && !c.run.paired {
                if let Some(p) = c.pending.take() {
                    if p.0 != alt {
                        c.pair(p, (alt, c.run.mean().unwrap_or(0.0)));
                        c.run.paired = true;
                    }
                }
            }
        }
        c.judge(gain_min, edge);
    }

    /// Whether the base way is preferred for this op and size now.
    pub fn base_preferred(&self, bytes: u64, write: bool) -> bool {
        self.classes[write as usize][bucket(bytes)].base_preferred
    }

    /// Kept figures taken up by a new port: every size with samples of either way tries the
    /// way not preferred on its next I/O (a burst), so a verdict from an earlier load is
    /// checked before it is trusted for a whole period.
    fn refresh(&mut self) {
        for c in self.classes.iter_mut().flatten() {
            if c.alt.n > 0 || c.base.n > 0 {
                c.trial_left = 0;
                c.since_trial = u32::MAX - 1;
            }
            // A new port's first run follows nothing of its own: no pair across ports.
            (c.run, c.prev, c.pending, c.last_alt) = (Run::default(), None, None, None);
        }
    }
}

/// How the port waits for one I/O the rule said to spin for, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub strategy: Strategy,
    pub reason: Reason,
    /// The way the wait is measured under: `true` spun, `false` blocked.
    pub spun: bool,
}

/// The spin check of one port (see the module doc): blocking the base way, spinning the
/// alternative that must gain [`GAIN_MIN`].
#[derive(Debug, Clone)]
pub struct SpinCheck(TwoWays);

impl Default for SpinCheck {
    fn default() -> Self {
        SpinCheck(TwoWays::new(GAIN_MIN))
    }
}

impl SpinCheck {
    pub fn new() -> SpinCheck {
        SpinCheck::default()
    }

    /// The wait for an I/O whose decision was to spin for `reason`: spin as decided, a
    /// block where spinning was measured not to pay (`spin_unpaid`), or a trial of the
    /// way not preferred now, and every wait until both ways are measured (`trial`).
    /// `spin` is the strategy the port spins with (`Spin`, or `Hybrid` for smart-hybrid).
    #[inline]
    pub fn choose(&mut self, bytes: u64, write: bool, reason: Reason, spin: Strategy) -> Choice {
        let p = self.0.pick(bytes, write);
        let reason = match (p.trial, p.alt) {
            (true, _) => Reason::Trial,
            (false, true) => reason,
            (false, false) => Reason::SpinUnpaid,
        };
        Choice { strategy: if p.alt { spin } else { Strategy::Block }, reason, spun: p.alt }
    }

    /// What one such I/O waited, from submission to completion as the port saw it.
    #[inline]
    pub fn record(&mut self, bytes: u64, write: bool, spun: bool, wait_ns: u64) {
        self.0.record(bytes, write, spun, wait_ns);
    }

    /// Whether spinning was measured not to pay for this op and size (for tests, reports).
    pub fn unpaid(&self, bytes: u64, write: bool) -> bool {
        self.0.base_preferred(bytes, write)
    }
}

/// A blocking wait by the plain system call (`sync`) is taken over io_uring's blocking
/// wait when it waits less by more than this share.
pub const SYNC_GAIN_MIN: f64 = 0.03;

/// The block check of one port on a descriptor: when the rule blocks, wait in io_uring (the
/// base way) or by the plain pread/pwrite (the alternative), whichever this port measured
/// to wait less. Both sleep, so what others get of the CPU is the same; where io_uring
/// hands a device's I/O to its worker thread (a loop device, an appending O_DIRECT write),
/// the plain call saves that hand-off: on the team's VM `sync` gave 1.04 to 1.6 x the IOPS
/// of `block` in the cells where smart blocked on the loop device under load. Not for
/// emulated devices, whose `sync` is served in the caller's context, spinning.
///
/// For reads io_uring is the base way and the plain call must prove itself; for writes it is
/// the other way round. An O_DIRECT write through io_uring completes in a kernel
/// workqueue (iomap's `dio/DEV`: `iomap_dio_complete_work`, one work item per write, counted
/// with `perf stat -e workqueue:workqueue_queue_work` on ext4 here; reads queue none),
/// while the plain call completes in the writer's own context. Beside busy CPUs that
/// kworker waits for one: under the cpu-intensive load the plain call gave 1.09-1.21 x
/// io_uring's IOPS in every write cell of the local disk over two 30-round runs, reads
/// 0.93-1.07 x (thirteenth session). With io_uring as the base for writes too, the check's
/// noisy pairs (scheduler slices in both ways' waits) kept 20-30 % of smart's writes on it,
/// and smart lost those cells to `sync` by 1.05-1.18 x.
#[derive(Debug, Clone)]
pub struct BlockCheck(TwoWays);

impl Default for BlockCheck {
    fn default() -> Self {
        BlockCheck(TwoWays::patient(SYNC_GAIN_MIN))
    }
}

impl BlockCheck {
    pub fn new() -> BlockCheck {
        BlockCheck::default()
    }

    /// How to block for the next I/O of this op and size: `Sync` or `Block`.
    #[inline]
    pub fn choose(&mut self, bytes: u64, write: bool) -> Strategy {
        // The alternative is the plain call for reads, io_uring for writes (above).
        if self.0.pick(bytes, write).alt != write {
            Strategy::Sync
        } else {
            Strategy::Block
        }
    }

    /// What one such I/O waited; `sync` when it was the plain call.
    #[inline]
    pub fn record(&mut self, bytes: u64, write: bool, sync: bool, wait_ns: u64) {
        self.0.record(bytes, write, sync != write, wait_ns);
    }
}

/// A port's checks, kept when it closes for the next port on the same device.
#[derive(Debug, Clone, Default)]
pub struct Learnt {
    pub spin: SpinCheck,
    pub block: Option<BlockCheck>,
}

/// At most this many ports' checks are kept per device and strategy (a job's threads each
/// keep their own), and for at most this many devices and strategies (the oldest go).
const KEPT_PER_KEY: usize = 64;
const KEPT_KEYS: usize = 64;

static KEPT: std::sync::Mutex<Vec<(String, Vec<Learnt>)>> = std::sync::Mutex::new(Vec::new());

/// The checks a closed port on `key` (device and strategy) left, refreshed (a trial burst
/// per measured size first), or fresh ones.
pub fn take(key: &str) -> Learnt {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut l) = kept.iter_mut().find(|(k, _)| k == key).and_then(|(_, v)| v.pop()) else {
        return Learnt::default();
    };
    drop(kept);
    l.spin.0.refresh();
    if let Some(b) = l.block.as_mut() {
        b.0.refresh();
    }
    l
}

/// Keeps a closing port's checks for the next port on `key`.
pub fn keep(key: &str, learnt: Learnt) {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = kept.iter().position(|(k, _)| k == key) {
        let (_, v) = &mut kept[i];
        if v.len() < KEPT_PER_KEY {
            v.push(learnt);
        }
        return;
    }
    if kept.len() >= KEPT_KEYS {
        kept.remove(0);
    }
    kept.push((key.to_string(), vec![learnt]));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` decisions of `bytes` reads where spinning waits `spin_ns` and blocking
    /// `block_ns`; returns how many spun.
    fn run(check: &mut SpinCheck, n: u32, bytes: u64, spin_ns: u64, block_ns: u64) -> u32 {
        let mut spun = 0;
        for _ in 0..n {
            let c = check.choose(bytes, false, Reason::CpuAvailable, Strategy::Spin);
            check.record(bytes, false, c.spun, if c.spun { spin_ns } else { block_ns });
            spun += c.spun as u32;
        }
        spun
    }

    #[test]
    fn a_ports_checks_outlive_it_and_are_tried_again_before_they_are_trusted() {
        let key = "test-device\0smart";
        let mut first = SpinCheck::new();
        run(&mut first, 2_000, 4096, 10_000, 14_000);
        assert!(!first.unpaid(4096, false));
        keep(key, Learnt { spin: first, block: None });
        // The next port starts from the verdict: no warm-up, so over 200 I/Os it blocks
        // only in one refresh burst (8), where a fresh check spends 48 on trials.
        let mut next = take(key).spin;
        let first_pick = next.choose(4096, false, Reason::CpuAvailable, Strategy::Spin);
        assert_eq!((first_pick.spun, first_pick.reason), (false, Reason::Trial), "a burst of the other way first");
        next.record(4096, false, false, 14_000);
        let spun = run(&mut next, 199, 4096, 10_000, 14_000);
        assert_eq!(199 - spun, TRIAL_BURST - 1);
        let fresh = run(&mut SpinCheck::new(), 200, 4096, 10_000, 14_000);
        assert!(200 - fresh >= 3 * TRIAL_BURST, "a fresh check blocked {} times", 200 - fresh);
        // Taken once: the next port on that key starts fresh; another key never shares.
        assert!(take(key).spin.0.classes.iter().flatten().all(|c| c.alt.n == 0 && c.base.n == 0));
        assert!(take("other\0smart").spin.0.classes.iter().flatten().all(|c| c.alt.n == 0));
    }

    #[test]
    fn where_spinning_pays_it_spins_but_for_the_trials() {
        let mut check = SpinCheck::new();
        let spun = run(&mut check, 10_000, 4096, 10_000, 14_000);
        assert!(!check.unpaid(4096, false));
        // Three bursts of blocks between three of spins (24), then 1.4 x is sure: a burst
        // of 8 blocks after every 1024 spins (72).
        let blocked = 10_000 - spun;
        assert!((90..=105).contains(&blocked), "blocked {blocked}");
    }

    #[test]
    fn where_blocking_is_as_fast_it_blocks_and_keeps_trying_spin() {
        let mut check = SpinCheck::new();
        let spun = run(&mut check, 10_000, 256 << 10, 500_000, 510_000);
        assert!(check.unpaid(256 << 10, false));
        // 1.02 x is near the boundary: a burst of 8 spins after every 256 blocks.
        assert!((290..=330).contains(&spun), "spun {spun}");
        // Spinning slower than blocking (a spinner beside io_uring's worker on its CPU):
        // a burst of 8 spins after every 1136 blocks (a spin costs 2.4 x a block).
        let mut check = SpinCheck::new();
        let spun = run(&mut check, 10_000, 4096, 160_000, 66_000);
        assert!(check.unpaid(4096, false));
        assert!((60..=80).contains(&spun), "spun {spun}");
        // A spinner that waits a scheduler slice (4 ms) for a 60 us I/O: each trial ends at
        // its second spin (the first pays for the change), twice in 100,000 I/Os.
        let mut check = SpinCheck::new();
        let spun = run(&mut check, 100_000, 4096, 4_000_000, 60_000);
        assert!((2..=6).contains(&spun), "spun {spun}");
    }

    #[test]
    fn trials_are_spaced_by_what_they_cost_with_the_change_back() {
        // Spinning 33 us against 57 us blocked, and the first spin after blocks waits a
        // tick (1 ms): a trial costs about 1.2 ms, not the 0.2 ms its eight blocks do.
        let mut check = SpinCheck::new();
        let mut last = None;
        let (mut total, mut trials) = (0u64, 0u32);
        for _ in 0..40_000 {
            let c = check.choose(65536, false, Reason::CpuAvailable, Strategy::Spin);
            trials += (c.reason == Reason::Trial && last == Some(true) && !c.spun) as u32;
            let first = last != Some(c.spun);
            last = Some(c.spun);
            let wait = match (c.spun, first) {
                (true, true) => 1_000_000,
                (true, false) => 33_000,
                (false, _) => 57_000,
            };
            check.record(65536, false, c.spun, wait);
            total += wait;
        }
        assert!(!check.unpaid(65536, false));
        // Spinning throughout would take 40,000 x 33 us; the trials may add about 1 %.
        let extra = total as f64 / (40_000.0 * 33_000.0) - 1.0;
        assert!(extra < 0.015, "the trials cost {:.1} % ({trials} trials)", extra * 100.0);
        assert!(trials >= 5, "{trials} trials: still checked now and then");
    }

    #[test]
    fn the_block_checks_trials_are_not_spaced_by_a_slow_wait() {
        // The plain call 25 us, io_uring's wait 50 us, and the first plain call after each
        // trial of io_uring meets a scheduler slice (4 ms): the check takes the plain call
        // and still tries io_uring every 1,024 reads or so, as its two means say.
        let mut check = BlockCheck::new();
        let mut last = None;
        let (mut plain, mut uring) = (0u32, 0u32);
        for _ in 0..60_000 {
            let sync = check.choose(4096, false) == Strategy::Sync;
            let first = last != Some(sync);
            last = Some(sync);
            check.record(
                4096,
                false,
                sync,
                if !sync {
                    50_000
                } else if first {
                    4_000_000
                } else {
                    25_000
                },
            );
            plain += sync as u32;
            uring += !sync as u32;
        }
        assert!(plain > 55_000, "the plain call on {plain} of 60,000 reads");
        let trials = uring / TRIAL_BURST;
        assert!(trials >= 60_000 / (TRIAL_PERIOD_SURE + TRIAL_BURST) - 2, "{trials} trials of io_uring");
        // The spin check's spacing by cost stops at TRIAL_PERIOD_COSTLY: spinning 10 us
        // against 20 us, the first spin after blocks 5 ms.
        let mut check = SpinCheck::new();
        let (mut last, mut blocked) = (None, 0);
        for _ in 0..60_000 {
            let c = check.choose(4096, false, Reason::CpuAvailable, Strategy::Spin);
            let first = last != Some(c.spun);
            last = Some(c.spun);
            check.record(
                4096,
                false,
                c.spun,
                if !c.spun {
                    20_000
                } else if first {
                    5_000_000
                } else {
                    10_000
                },
            );
            blocked += !c.spun as u32;
        }
        let trials = blocked / TRIAL_BURST;
        assert!(trials >= 60_000 / (TRIAL_PERIOD_COSTLY + TRIAL_BURST) - 1, "{trials} trials");
    }

    #[test]
    fn a_starved_first_spin_after_blocking_does_not_make_spinning_unpaid() {
        // A loop device's reads: the first spin after a run of blocks waits a tick (the
        // kernel worker was woken on this CPU), the rest 33 us against 57 us blocked.
        // Counting that first spin as hopeless ended every trial at once and blocked.
        for first_spin_ns in [1_040_000, 4_000_000] {
            let mut check = SpinCheck::new();
            let mut last = None;
            let mut spun = 0;
            for _ in 0..5_000 {
                let c = check.choose(65536, false, Reason::CpuAvailable, Strategy::Spin);
                let first = last != Some(c.spun);
                last = Some(c.spun);
                let wait = match (c.spun, first) {
                    (true, true) => first_spin_ns,
                    (true, false) => 33_000,
                    (false, _) => 57_000,
                };
                check.record(65536, false, c.spun, wait);
                spun += c.spun as u32;
            }
            assert!(!check.unpaid(65536, false), "first spin {first_spin_ns} ns");
            assert!(spun > 4_800, "spun {spun} of 5,000 (first spin {first_spin_ns} ns)");
        }
    }

    #[test]
    fn a_lone_wait_after_a_change_of_way_is_not_counted() {
        // Each way's first two waits after a change are slow (the switch), the rest as the
        // way goes: spinning pays 1.15 x, which counting the switch would hide (the first
        // trial of spinning would average 15 us against blocking's 11.5 us).
        let mut check = SpinCheck::new();
        let (mut last, mut run_len) = (None, 0);
        for _ in 0..5_000 {
            let c = check.choose(4096, false, Reason::CpuAvailable, Strategy::Spin);
            run_len = if last == Some(c.spun) { run_len + 1 } else { 0 };
            last = Some(c.spun);
            let steady = if c.spun { 10_000 } else { 11_500 };
            check.record(4096, false, c.spun, if run_len < 2 { 30_000 } else { steady });
        }
        assert!(!check.unpaid(4096, false));
    }

    #[test]
    fn the_verdict_follows_the_host_when_it_changes() {
        let mut check = SpinCheck::new();
        run(&mut check, 2_000, 4096, 10_000, 15_000);
        assert!(!check.unpaid(4096, false));
        run(&mut check, 2_000, 4096, 10_000, 10_100);
        assert!(check.unpaid(4096, false), "blocking became as fast: block");
        run(&mut check, 2_000, 4096, 10_000, 15_000);
        assert!(!check.unpaid(4096, false), "and back");
    }

    #[test]
    fn sizes_and_ops_are_judged_apart() {
        let mut check = SpinCheck::new();
        run(&mut check, 1_000, 4096, 10_000, 15_000);
        run(&mut check, 1_000, 1 << 20, 2_000_000, 2_010_000);
        assert!(!check.unpaid(4096, false));
        assert!(check.unpaid(1 << 20, false));
        assert!(check.unpaid(1 << 20, true), "writes of that size were never measured: block first");
        assert_eq!((bucket(1), bucket(512), bucket(4096), bucket(u64::MAX)), (0, 0, 3, BUCKETS - 1));
    }

    #[test]
    fn the_block_check_takes_the_plain_call_only_where_it_waits_less() {
        let run = |sync_ns: u64, ring_ns: u64| {
            let mut check = BlockCheck::new();
            let mut synced = 0;
            for _ in 0..5_000 {
                let s = check.choose(16384, false);
                assert!(matches!(s, Strategy::Sync | Strategy::Block));
                let sync = s == Strategy::Sync;
                check.record(16384, false, sync, if sync { sync_ns } else { ring_ns });
                synced += sync as u32;
            }
            synced
        };
        // The loop device: io_uring's hand-off to its worker, 1.3 x the plain call's wait.
        assert!(run(40_000, 52_000) > 4_800);
        // The same wait both ways (within 3 %): io_uring, as ever, but for the trials.
        assert!(run(50_000, 51_000) < 200);
    }

    #[test]
    fn for_writes_the_block_check_starts_from_the_plain_call_and_io_uring_must_prove_itself() {
        let run = |sync_ns: u64, ring_ns: u64| {
            let mut check = BlockCheck::new();
            let mut synced = 0;
            for _ in 0..5_000 {
                let sync = check.choose(16384, true) == Strategy::Sync;
                check.record(16384, true, sync, if sync { sync_ns } else { ring_ns });
                synced += sync as u32;
            }
            synced
        };
        // The same wait both ways (within 3 %): the plain call, but for the trials.
        assert!(run(51_000, 50_000) > 4_800);
        // io_uring 1.3 x faster: io_uring.
        assert!(run(52_000, 40_000) < 200);
        // Reads keep io_uring first where the two are alike.
        let mut check = BlockCheck::new();
        let mut synced = 0;
        for _ in 0..5_000 {
            let sync = check.choose(16384, false) == Strategy::Sync;
            check.record(16384, false, sync, if sync { 51_000 } else { 50_000 });
            synced += sync as u32;
        }
        assert!(synced < 200, "reads synced {synced}");
    }

    #[test]
    fn a_scheduling_delay_on_the_first_plain_call_does_not_lock_the_block_check() {
        // Beside crunchers: both ways wait 60 us but for a scheduler slice now and then;
        // the plain call is 2 x faster in the mean of the rest. Its first trial meets a
        // 6 ms slice.
        let mut check = BlockCheck::new();
        let (mut synced, mut first_sync) = (0, true);
        for i in 0..5_000u32 {
            let s = check.choose(4096, true);
            let sync = s == Strategy::Sync;
            let mut wait = if sync { 60_000 } else { 120_000 };
            if (sync && first_sync) || i % 97 == 0 {
                wait = 6_000_000;
            }
            first_sync &= !sync;
            check.record(4096, true, sync, wait);
            synced += sync as u32;
        }
        assert!(synced > 4_500, "synced {synced} of 5000");
    }

    #[test]
    fn one_outlier_does_not_flip_a_verdict() {
        let mut check = SpinCheck::new();
        run(&mut check, 1_000, 4096, 10_000, 15_000);
        // A spin that took 8 ms (the thread was preempted): counted as 4 x the mean.
        check.record(4096, false, true, 8_000_000);
        assert!(!check.unpaid(4096, false));
    }

    #[test]
    fn the_reasons_name_what_happened() {
        let mut check = SpinCheck::new();
        let mut choices = Vec::new();
        for _ in 0..2_000 {
            let c = check.choose(4096, false, Reason::SpinCheaper, Strategy::Hybrid);
            check.record(4096, false, c.spun, if c.spun { 10_000 } else { 20_000 });
            choices.push(c);
        }
        // Measuring both ways: a burst of blocks, then of spins, all trials.
        let block = Choice { strategy: Strategy::Block, reason: Reason::Trial, spun: false };
        let hybrid = Choice { strategy: Strategy::Hybrid, reason: Reason::Trial, spun: true };
        assert!(choices[..8].iter().all(|c| *c == block));
        assert_eq!(choices[8], hybrid);
        // Then the rule's own reason while spinning, and trials of blocking now and then.
        let decided = Choice { strategy: Strategy::Hybrid, reason: Reason::SpinCheaper, spun: true };
        // (Three bursts of each way, 8 I/Os each, before the verdict: 48.)
        assert!(choices[48..1000].iter().all(|c| *c == decided));
        assert!(choices[..48].iter().all(|c| c.reason == Reason::Trial));
        assert!(choices.iter().filter(|c| **c == block).count() > 8);
    }

    /// The device's wait swings for both ways alike (others' I/O comes and goes: here 60 us
    /// and 140 us in turns of 150 I/Os), each wait scattered by +/-50 %, and spinning waits
    /// 1.15 x less throughout. A verdict from each way's own recent mean compared a trial's
    /// spins with blocks from another phase of the swing: it blocked 5-16 % of the I/Os as
    /// unpaid over five seeds (this one: 12 %); paired with the waits beside them, the
    /// trials see the gain (0-3.7 %).
    #[test]
    fn a_swing_that_hits_both_ways_alike_does_not_hide_the_gain() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut noise = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            0.5 + (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut check = SpinCheck::new();
        let (mut unpaid, n) = (0, 20_000);
        for i in 0..n {
            let c = check.choose(4096, false, Reason::CpuAvailable, Strategy::Spin);
            let device = if (i / 150) % 2 == 0 { 60_000.0 } else { 140_000.0 };
            let wait = device * noise() * if c.spun { 1.0 } else { 1.15 };
            check.record(4096, false, c.spun, wait as u64);
            unpaid += (c.reason == Reason::SpinUnpaid) as u32;
        }
        assert!(unpaid < n / 20, "blocked as unpaid on {unpaid} of {n} I/Os");
    }
}
