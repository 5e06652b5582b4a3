//! `hybrid`: dynamic interval polling (paper 002, Sec. 3.2) with sleeping.
//!
//! 1. Sampling phase (the first `sampling` of each thread's run, and for any request class
//!    seen too rarely so far): fixed-interval polls every `interval`, response times
//!    recorded per op and size class ([`Predictor`]).
//! 2. Dynamic phase: predict the completion P = submission + estimate + backlog ahead.
//!    Sleep in the kernel until P minus a margin, but only when the sleep and its median
//!    overshoot take more off the spinning than the sleep costs the thread in CPU, as
//!    measured on its own sleeps ([`SleepCost`]; half the median overshoot where no CPU
//!    clock is read); then
//!    wait without polling until P; poll; if not done, poll every `alpha` until done. The
//!    first poll's outcome corrects the prediction (caught at once: shrink; late: grow by
//!    the error).
//!
//! The margin is chosen as issue 27's oracle chooses its sleep, on the thread's own last
//! [`OVERSHOOT_WINDOW`] overshoots (woke - asked) instead of the host's distribution: the
//! least margin whose expected wake past the completion is at most
//! [`LATE_BUDGET_PER_MILLE`] of the predicted latency, plus a correction that the sleeps'
//! measured lateness moves ([`LATE_GAIN`]). Until issue 27's fourth session it
//! was a tracked 90th percentile, which woke the thread early for nine sleeps in ten and
//! spun the difference: 0.07 of a CPU above the oracle on emu:nvme of hosts A-D (0.39
//! against 0.32 on host A), at 0.97 x spin's IOPS where 0.95 was allowed. An overshoot
//! over twice the window's median counts as that much (a preemption or the timer's tail),
//! so neither one millisecond sample nor a burst of late wake-ups can stop the sleeping
//! ([`OvershootWindow::margin`]). Until the window holds
//! [`OVERSHOOT_SAMPLES_MIN`] overshoots every predicted I/O sleeps. A window that says
//! sleeping does not pay would stop the thread from sleeping and so from measuring again:
//! after [`EXPLORE_ON_TIME_AFTER`] predicted I/Os without a sleep, it sleeps once to the
//! usual target if that still lies ahead (on time, so free), and after [`EXPLORE_AFTER`]
//! until just before the prediction (on a device faster than the wake-up that costs one
//! late completion in that many); each such re-measure that finds sleeping still does not
//! pay doubles the wait for both, up to [`EXPLORE_AFTER_MAX`]. (On the development VMs the
//! overshoot grows with the sleep: 15 us for short sleeps, 25 us at 50 us, with a long
//! tail.)
//!
//! When the CPUs are busy with other work (the System Monitor above the profile's CPU
//! threshold, as SmartCon's Decision Module reads it), polling time is taken from the other
//! processes, and a poller that burned its share is preempted for milliseconds. Then
//! hybrid sleeps until the predicted completion itself (not before it) and polls once
//! awake: like `block`, it pays the wake-up instead of taking CPU.
//!
//! On a host where a kernel sleep costs more than the device takes (the 2-core KVM VMs
//! smartcon is developed on: about 16 us per timer sleep, measured by `smartcon bench
//! --hybrid`), hybrid never sleeps on a 10 us device and is fixed-alpha polling after a
//! predicted wait: spin's latency, and no CPU saved, because none can be.

use super::predictor::{Feedback, Predictor};
use super::{poll_every, predict_or_sample, Pending, PollParams, Status, WaitPolicy, Waited};
use crate::error::Error;

/// Overshoots kept: the last this many timer-woken sleeps' (woke - asked), the sample the
/// wake-up margin is chosen from.
pub const OVERSHOOT_WINDOW: usize = 64;
/// The lateness hybrid allows itself, per mille of the predicted latency: it wakes as late
/// as keeps its mean wake past the completion within this. 40 per mille costs about 4% of
/// spin's IOPS, inside issue 27's 5% (the oracle's bound), with room for the polls at alpha
/// and the prediction's error. Until the twenty-third session it was 35 on the window's
/// estimate alone, whose clip at twice the median left a tail uncounted: on the presets the
/// runs came out 3-4% late all the same, and on that session's host (sleeps 37-49 us late
/// with a p99 of 116 us) 7%, 0.93 x spin's IOPS. With the measured lateness correcting the
/// estimate ([`LATE_GAIN`]) the budget is what the runs lose: simulated, 35 gave
/// 0.966 x spin's IOPS on that host at 0.84 x its CPU (the oracle 0.78), 40 gives 0.961
/// at 0.80-0.83, 45 0.956 at 0.79-0.80 (seeds 1-7); hosts A-D 0.96 at 0.04 or less of a
/// CPU above their oracles.
pub const LATE_BUDGET_PER_MILLE: u64 = 40;
/// Overshoots the window must hold before its quantiles decide that sleeping does not pay:
/// until then every predicted I/O sleeps (to just before the prediction where the usual
/// target is not ahead). One or two samples are no distribution: a first sleep woken from
/// the tail once stopped a thread from sleeping for the rest of its run.
pub const OVERSHOOT_SAMPLES_MIN: usize = OVERSHOOT_WINDOW;
/// While the window says sleeping does not pay, every this long the thread re-measures
/// [`REMEASURES_BELOW_MEDIAN`] times in a row (on the next predicted I/Os), so that a
/// lateness epoch of the host that has passed is found by [`REMEASURES_BELOW_MEDIAN`] within
/// this, whatever the backed-off re-measures' spacing (4096 I/Os are 340 ms on emu:nvme).
/// Until the nineteenth session the window's samples older than this left it, the window
/// emptied, and the thread slept on every predicted I/O until it was full again: on a host
/// where sleeping never pays, 64 late wake-ups per 250 ms. In the simulation of issue 27's
/// host A on emu:optane (10 us reads, sleeps woken a p90 of 216 us late) that was about
/// 58 of the 325 sleeps in each quarter second and took hybrid to 0.948 x spin's IOPS
/// (seed 1). Four re-measures per 250 ms cost a fifteenth of that, and an epoch that has
/// passed still ends within the 250 ms (the flipped run of the fourteenth session's ten,
/// docs/simulate.md, skipped its sleep on 3,715 of about 35,300 I/Os with a window of p50
/// 41 us, p90 77 us, where the others saw p90 27-45 us: the reason for the limit).
pub const OVERSHOOT_AGE_NS_MAX: u64 = 250_000_000;
/// Re-measures in a row, while the window says sleeping does not pay, that each woke less
/// late than the window's median, and so little late that the usual sleep would pay at that
/// overshoot: then the lateness epoch that filled the window has passed, and its samples
/// (those older than the first of these) leave it (eighteenth session). In the seventeenth
/// session's quiet run one of five real runs held off sleeping for 255 ms (3,048 predicted
/// I/Os at 11,961 IOPS, 0.909 sleeps per I/O against 0.993), the age limit and a few
/// milliseconds: only that limit ended the epoch. With the backed-off re-measures (after 16,
/// 32, 64, 128 I/Os) four take about 240 I/Os, 20 ms on emu:nvme. A re-measure below the
/// median at which sleeping would still not pay does not count (nineteenth session): on a
/// device faster than any wake-up (emu:optane on issue 27's host A) four below the median
/// came one time in 16, emptied the window and cost a window of late wake-ups, though no
/// epoch that mattered had passed.
pub const REMEASURES_BELOW_MEDIAN: u32 = 4;
/// Predicted I/Os without a sleep after which one sleep re-measures the overshoot, waking
/// just before the prediction (late by the overshoot if the estimate was right).
pub const EXPLORE_AFTER: u32 = 128;
/// The same where a sleep to the usual target still wakes in time: it costs no latency, so
/// it is taken more often (this many times as often as the re-measure before the
/// prediction, backing off with it).
pub const EXPLORE_ON_TIME_AFTER: u32 = 16;
/// Each re-measuring sleep that finds sleeping still does not pay doubles the wait for the
/// next, up to this: on a device faster than the wake-up (a 10 us one on a VM whose sleeps
/// wake 30 us late, with a millisecond tail) a re-measure every 128 I/Os cost 2-10% of
/// spin's IOPS in the simulation of issue 27's hosts; one every 4096 costs a tenth of that.
pub const EXPLORE_AFTER_MAX: u32 = 4096;

/// Sleeps whose CPU cost is measured in full before it is sampled, and the measured costs
/// the median is taken over.
pub const SLEEP_COST_WARM: u32 = 16;
/// After those, one sleep in this many is measured (two reads of the thread's CPU clock, a
/// system call each on the host).
pub const SLEEP_COST_EVERY: u32 = 8;
/// A sleep pays when the time it takes off the spinning (the sleep and its overshoot) is
/// more than its measured CPU cost by this share: the two figures' noise, and the colder
/// cache after a sleep, which no clock here sees.
pub const SLEEP_PAY_MARGIN: f64 = 0.05;

/// What this thread's timed sleeps cost it in CPU, measured around the sleeps themselves
/// (the thread's CPU clock before and after, [`Status::thread_cpu_ns`]): the median of the
/// last [`SLEEP_COST_WARM`] measured, every sleep until there are that many, then one usual
/// sleep in [`SLEEP_COST_EVERY`] and every re-measuring one (those are rare, and a thread
/// that has stopped sleeping must still learn when sleeping became cheap). The median,
/// because a sleep during which the host took the vCPU away is charged to the thread in
/// full: on this session's host one real run's first sixteen sleeps averaged 130 us where
/// `smartcon host` measured 41-48, and the mean held the thread off sleeping for the run.
///
/// It is the bar for a sleep that pays. Until the twenty-third session the bar was half the
/// overshoot's median, an assumption that a sleep costs its thread about the overshoot: on
/// that session's host a 20 us sleep woke 37-44 us late and cost 41 us of the thread's CPU
/// (`smartcon host`'s `sleep_cpu`), and the sleeps an 80 us device allows (about 20-30 us,
/// after the margin) sat on that bar: real hybrid slept on 0.06-0.45 of its I/Os in five
/// runs, at 0.76-0.97 x spin's CPU, against an oracle's 0.78.
#[derive(Debug, Clone, Copy, Default)]
struct SleepCost {
    recent_ns: [u64; SLEEP_COST_WARM as usize],
    measured: u32,
    since: u32,
    median_ns: u64,
}

impl SleepCost {
    /// Whether the next sleep is measured (`exploring`: a re-measuring sleep).
    fn due(&mut self, exploring: bool) -> bool {
        if self.measured < SLEEP_COST_WARM || exploring {
            return true;
        }
        self.since += 1;
        if self.since >= SLEEP_COST_EVERY {
            self.since = 0;
            return true;
        }
        false
    }

    fn add(&mut self, cpu_ns: u64) {
        self.recent_ns[self.measured as usize % self.recent_ns.len()] = cpu_ns;
        self.measured = self.measured.saturating_add(1);
        let n = (self.measured as usize).min(self.recent_ns.len());
        let mut sorted = self.recent_ns;
        let sorted = &mut sorted[..n];
        sorted.sort_unstable();
        self.median_ns = sorted[n / 2];
    }

    /// The bar: how long a sleep must be, at an overshoot of `overshoot_ns`, to pay for
    /// itself. Where nothing is measured yet (or the status has no CPU clock), half the
    /// overshoot, the rule before the cost was measured.
    fn bar_ns(&self, overshoot_ns: u64) -> u64 {
        if self.measured == 0 {
            return overshoot_ns / 2;
        }
        ((self.median_ns as f64 * (1.0 + SLEEP_PAY_MARGIN)) as u64).saturating_sub(overshoot_ns)
    }
}

/// The weight of one wait's lateness in the margin's correction (about the last 32 waits).
/// The window's estimate clips its tail at twice the median (so that a burst cannot stop
/// the sleeping, [`OvershootWindow::margin`]); what the clip leaves out shows in the sleeps'
/// own lateness past the prediction, and this correction adds it to the margin until the
/// mean lateness is the budget. A burst of late wake-ups is paid back by a wider margin
/// for a while, never by a stop: a wait without a sleep counts as on time and narrows it.
pub const LATE_GAIN: f64 = 1.0 / 32.0;

pub struct Hybrid {
    params: PollParams,
    sampling_end_ns: u64,
    predictor: Predictor,
    overshoots: OvershootWindow,
    since_sleep: u32,
    /// The current wait between re-measuring sleeps: [`EXPLORE_AFTER`], doubled by each one
    /// that finds sleeping still does not pay, back to the start when a sleep pays.
    explore_after: u32,
    /// Re-measures in a row below the window's median, and when the first of them woke
    /// ([`REMEASURES_BELOW_MEDIAN`]).
    below_median: u32,
    below_median_since_ns: u64,
    /// When the window was last known current: a sleep that paid, or the start of the last
    /// round of [`REMEASURES_BELOW_MEDIAN`] re-measures ([`OVERSHOOT_AGE_NS_MAX`]).
    current_ns: u64,
    /// Re-measures left in that round.
    refresh_left: u32,
    cpu_busy: bool,
    sleep_cost: SleepCost,
    /// What the margin adds to the window's estimate, ns (>= 0): moved by each usual sleep's
    /// lateness against the budget ([`LATE_GAIN`]).
    late_adj_ns: f64,
}

impl Hybrid {
    pub fn new(params: PollParams, start_ns: u64) -> Hybrid {
        Hybrid {
            params,
            sampling_end_ns: start_ns + params.sampling_ns,
            predictor: Predictor::new(params.alpha_ns, params.interval_ns),
            overshoots: OvershootWindow::default(),
            since_sleep: 0,
            explore_after: EXPLORE_AFTER,
            below_median: 0,
            below_median_since_ns: 0,
            current_ns: start_ns,
            refresh_left: 0,
            cpu_busy: false,
            sleep_cost: SleepCost::default(),
            late_adj_ns: 0.0,
        }
    }

    pub fn predictor(&self) -> &Predictor {
        &self.predictor
    }

    /// Moves the margin's correction by one wait's lateness past the prediction against the
    /// budget: the margin grows while the sleeps wake later than the budget on average, and
    /// shrinks (to the window's own estimate, no further) while they wake within it.
    fn adjust_lateness(&mut self, late_ns: u64, budget_ns: u64) {
        let step = LATE_GAIN * (late_ns as f64 - budget_ns as f64);
        self.late_adj_ns = (self.late_adj_ns + step).max(0.0);
    }

    fn record_overshoot(&mut self, asked_ns: u64, woke_ns: u64) {
        if woke_ns < asked_ns {
            return; // woken by the completion, not by the timer
        }
        self.overshoots.push(woke_ns - asked_ns, woke_ns);
    }
}

/// The last [`OVERSHOOT_WINDOW`] overshoots, in arrival order (with the instant each was
/// seen) and sorted.
#[derive(Debug, Clone, Default)]
struct OvershootWindow {
    ring: std::collections::VecDeque<(u64, u64)>,
    sorted: Vec<u64>,
}

impl OvershootWindow {
    fn push(&mut self, seen: u64, at_ns: u64) {
        if self.ring.len() == OVERSHOOT_WINDOW {
            self.pop_oldest();
        }
        self.ring.push_back((seen, at_ns));
        let i = self.sorted.partition_point(|&x| x <= seen);
        self.sorted.insert(i, seen);
    }

    /// Drops the overshoots seen before `at_ns`.
    fn drop_before(&mut self, at_ns: u64) {
        while self.ring.front().is_some_and(|&(_, at)| at < at_ns) {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((old, _)) = self.ring.pop_front() {
            if let Ok(i) = self.sorted.binary_search(&old) {
                self.sorted.remove(i);
            }
        }
    }

    fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The median, `None` before any sleep.
    fn p50(&self) -> Option<u64> {
        let n = self.sorted.len();
        (n > 0).then(|| self.sorted[n / 2])
    }

    /// The 90th percentile (the cap on the margin), `None` before any sleep.
    fn p90(&self) -> Option<u64> {
        let n = self.sorted.len();
        (n > 0).then(|| self.sorted[(n * 9 / 10).min(n - 1)])
    }

    /// The least margin m (wake m before the completion) whose expected lateness over the
    /// window, mean((min(o, clip) - m)+), is at most `budget_ns`. An overshoot longer than
    /// twice the window's median counts as that (`clip`): a wake-up that late was a
    /// preemption or the timer's tail, not the body the margin is for, and a tail counted
    /// whole pushed the margin up, the sleeps shorter and their overshoots (a short sleep's
    /// tail is longer on these VMs) further up until the thread stopped sleeping. The
    /// median is the anchor because a burst of late wake-ups moves it least: at twice the
    /// 90th percentile, which a burst of seven in the window's 64 moves, the simulation of
    /// issue 27's host A stopped sleeping for a quarter of a 3 s run (seed 5).
    fn margin(&self, budget_ns: u64) -> Option<u64> {
        let n = self.sorted.len();
        let clip_ns = self.p50()?.saturating_mul(2);
        let budget_total = budget_ns as u128 * n as u128;
        // With the top k samples above m (m between the (k+1)-th and the k-th largest):
        // sum(top k) - k m = budget_total.
        let mut top_sum: u128 = 0;
        for k in 1..=n {
            let c = self.sorted[n - k].min(clip_ns) as u128;
            top_sum += c;
            let below = if k < n { self.sorted[n - k - 1].min(clip_ns) as u128 } else { 0 };
            // The lateness with m at the next sample down; if it is within the budget, m lies
            // in this segment.
            if top_sum.saturating_sub(k as u128 * below) >= budget_total || k == n {
                let m = top_sum.saturating_sub(budget_total) / k as u128;
                return Some((m as u64).max(below as u64).min(c as u64));
            }
        }
        None
    }
}

impl WaitPolicy for Hybrid {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        let sampled = predict_or_sample(
            &mut self.predictor,
            self.sampling_end_ns,
            self.params.interval_ns,
            req,
            status,
            &mut waited,
        )?;
        // Sampling phase: the request was waited for by fixed-interval polling.
        let Some(latency) = sampled else { return Ok(waited) };
        let ahead_bytes = req.ahead.inflight_bytes;
        let predicted = req.submit_ns + latency;
        waited.predicted_done_ns = Some(predicted);
        let alpha = self.params.alpha_ns;
        let now = status.now_ns();
        // The bar for a sleep that pays (below) is its measured CPU cost; the margin keeps
        // the mean wake past the prediction within the lateness budget.
        let p90 = self.overshoots.p90().unwrap_or(0);
        let p50 = self.overshoots.p50().unwrap_or(0);
        let budget = latency.saturating_mul(LATE_BUDGET_PER_MILLE) / 1000;
        // Never earlier than the window's 90th percentile (the rule before the budget): a
        // margin grown by a tail shortens the sleeps, whose overshoots (a short sleep's tail
        // is longer on these VMs) grew it further until the thread stopped sleeping.
        let margin = self.overshoots.margin(budget).unwrap_or(0).min(p90) + self.late_adj_ns as u64;
        let mut wake_at = predicted.saturating_sub(margin + alpha);
        // Sleep only if the sleep is long enough to pay for itself: the sleep and its median
        // overshoot against its measured CPU cost (`SleepCost::bar_ns`; half the median where
        // unmeasured). Before the twenty-third session the bar was half the median; before
        // the fourteenth, half the 90th percentile, which a burst of seven late wake-ups in
        // the window's 64 moves:
        // the thread stopped sleeping, and the window, which only sleeps refresh, held the
        // burst for 64 re-measures, seconds as they back off. The margin is already anchored
        // on the median for the same reason (`OvershootWindow::margin`). This is one
        // mechanism of real hybrid's flips, not the only one: in eight quiet 3 s runs on
        // emu:nvme the old bar flipped to about half its I/Os asleep in 2, this one in 1
        // (fourteenth session, docs/simulate.md).
        let mut sleep = wake_at > now + self.sleep_cost.bar_ns(p50);
        let measuring = self.overshoots.len() < OVERSHOOT_SAMPLES_MIN;
        if sleep {
            self.explore_after = EXPLORE_AFTER;
            self.below_median = 0;
            self.refresh_left = 0;
            self.current_ns = now;
        } else if !measuring && !self.cpu_busy && now.saturating_sub(self.current_ns) > OVERSHOOT_AGE_NS_MAX {
            // The window may be an epoch's that has passed: a round of re-measures
            // (OVERSHOOT_AGE_NS_MAX) that can end it.
            self.current_ns = now;
            self.refresh_left = REMEASURES_BELOW_MEDIAN;
            self.below_median = 0;
        }
        let refreshing = self.refresh_left > 0 && !self.cpu_busy;
        let mut exploring = false;
        self.since_sleep += 1;
        if self.cpu_busy {
            // Give the CPU away until the completion is due; the overshoot is paid.
            wake_at = predicted;
            sleep = wake_at > now;
        } else if !sleep
            && wake_at > now
            && (measuring
                || refreshing
                || self.since_sleep >= self.explore_after / (EXPLORE_AFTER / EXPLORE_ON_TIME_AFTER))
        {
            // A sleep that still wakes in time, though it may not pay: it re-measures at no
            // cost in latency. It backs off with the re-measure below: at a fixed one in 16
            // it put 0.06 sleeps per I/O into a run whose sleeps did not pay and none into
            // one where the usual target was not ahead (issue 27's "does not flip").
            sleep = true;
            exploring = true;
        } else if !sleep
            && (measuring || refreshing || self.since_sleep >= self.explore_after)
            && predicted > now + 2 * alpha
        {
            wake_at = predicted - alpha;
            sleep = true;
            exploring = true;
        }
        if !self.cpu_busy && !exploring && !measuring && !sleep {
            // Waited without a sleep: no lateness. The correction relaxes, so that one that
            // made the sleeps too short to pay does not hold them off for good.
            self.adjust_lateness(0, budget);
        }
        if sleep {
            self.since_sleep = 0;
            // Its CPU cost, measured where the status has a CPU clock, and not while the CPUs
            // are busy (a cruncher's core: neither this host's sleep nor a sleep that could pay).
            let cpu_before =
                if !self.cpu_busy && self.sleep_cost.due(exploring) { status.thread_cpu_ns() } else { None };
            status.sleep_until(wake_at)?;
            waited.sleeps += 1;
            if let (Some(a), Some(b)) = (cpu_before, status.thread_cpu_ns()) {
                self.sleep_cost.add(b.saturating_sub(a));
            }
            let woke = status.now_ns();
            if !self.cpu_busy && !exploring {
                self.adjust_lateness(woke.saturating_sub(predicted), budget);
            }
            if !self.cpu_busy {
                // Under contention the wake-up waits for a CPU: not this host's overshoot.
                self.record_overshoot(wake_at, woke);
            }
            if exploring && refreshing {
                self.refresh_left -= 1;
            }
            if exploring && !measuring && !self.cpu_busy && woke >= wake_at {
                // A re-measure that woke less late than the window's median, and so little
                // late that the usual sleep would pay at that overshoot, counts towards the
                // epoch having passed (REMEASURES_BELOW_MEDIAN).
                let o = woke - wake_at;
                let pays_at_o =
                    predicted.saturating_sub(o.saturating_sub(budget) + alpha) > now + self.sleep_cost.bar_ns(o);
                if o < p50 && pays_at_o {
                    if self.below_median == 0 {
                        self.below_median_since_ns = woke;
                    }
                    self.below_median += 1;
                    if self.below_median >= REMEASURES_BELOW_MEDIAN {
                        self.overshoots.drop_before(self.below_median_since_ns);
                        self.below_median = 0;
                    }
                } else {
                    self.below_median = 0;
                }
            }
            if exploring && !measuring {
                // Would the usual sleep pay now, with the overshoot just measured? If not,
                // wait twice as long before the next re-measure.
                let o = self.overshoots.p90().unwrap_or(0);
                let m = self.overshoots.margin(budget).unwrap_or(0).min(o);
                let pays = predicted.saturating_sub(m + alpha)
                    > now + self.sleep_cost.bar_ns(self.overshoots.p50().unwrap_or(0));
                if !pays {
                    self.explore_after = self.explore_after.saturating_mul(2).min(EXPLORE_AFTER_MAX);
                }
            }
            if woke < wake_at {
                // The device woke us (io_uring): it is done, or nearly.
                waited.polls += 1;
                if status.poll()? {
                    waited.seen_ns = status.now_ns();
                    self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::CaughtAtOnce);
                    return Ok(waited);
                }
            }
        }
        status.spin_until(predicted);
        waited.polls += 1;
        if status.poll()? {
            waited.seen_ns = status.now_ns();
            // Woken past the prediction (on purpose when the CPUs are busy, by the overshoot's
            // tail otherwise), "done at the first poll" says nothing about the estimate:
            // shrinking on it walked the estimate down by as many steps as sleeps overshot,
            // so a run with more preemptions predicted earlier and spun longer (its CPU with
            // the machine's load of the moment, issue 27's five runs).
            if waited.seen_ns <= predicted + alpha {
                self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::CaughtAtOnce);
            }
            return Ok(waited);
        }
        let first = status.now_ns();
        poll_every(status, first + alpha, alpha, &mut waited)?;
        let error_ns = waited.seen_ns.saturating_sub(predicted);
        self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::Late { error_ns });
        Ok(waited)
    }

    fn set_cpu_busy(&mut self, busy: bool) {
        self.cpu_busy = busy;
    }

    fn overshoot_ns(&self) -> Option<u64> {
        self.overshoots.p90()
    }

    fn sleep_cpu_ns(&self) -> Option<u64> {
        (self.sleep_cost.measured > 0).then_some(self.sleep_cost.median_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;
    use smartcon_util::Op;

    const PARAMS: PollParams = PollParams { interval_ns: 1_000, alpha_ns: 100, sampling_ns: 1_000_000 };

    /// Runs `n` back-to-back I/Os of `service_ns` on a virtual device from `*t` (a thread
    /// without a CPU clock).
    fn run(h: &mut Hybrid, t: &mut u64, n: usize, service_ns: u64, overshoot_ns: u64) -> Vec<(Waited, VirtualDevice)> {
        run_on(h, t, n, service_ns, &[overshoot_ns], None)
    }

    /// `n` I/Os of `service_ns` whose sleeps overshoot by `overshoots` in turn, and, where
    /// the thread has a CPU clock, cost it `sleep_cpu_ns` each.
    fn run_on(
        h: &mut Hybrid,
        t: &mut u64,
        n: usize,
        service_ns: u64,
        overshoots: &[u64],
        sleep_cpu_ns: Option<u64>,
    ) -> Vec<(Waited, VirtualDevice)> {
        (0..n)
            .map(|i| {
                let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: *t };
                let mut dev = VirtualDevice::new(*t, *t + service_ns, overshoots[i % overshoots.len()]);
                dev.sleep_cpu_ns = sleep_cpu_ns;
                let w = h.wait(&req, &mut dev).unwrap();
                assert!(w.seen_ns >= *t + service_ns, "never seen before it is done");
                *t = w.seen_ns;
                (w, dev)
            })
            .collect()
    }

    #[test]
    fn samples_then_sleeps_and_wakes_on_time() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        let sampling = run(&mut h, &mut t, 200, 80_000, 5_000);
        assert!(sampling.iter().take(12).all(|(w, _)| w.sleeps == 0 && w.predicted_done_ns.is_none()));
        let dynamic = run(&mut h, &mut t, 200, 80_000, 5_000);
        let tail = &dynamic[100..];
        // It sleeps through most of the 80 us and sees the completion within a few alphas.
        assert!(tail.iter().all(|(w, _)| w.sleeps == 1));
        // A fixed 5 us overshoot: it wakes as late as the lateness budget allows, no later.
        let late: Vec<u64> = tail.iter().map(|(w, d)| w.seen_ns - d.done_ns).collect();
        let budget = 80_000 * LATE_BUDGET_PER_MILLE / 1000;
        assert!(late.iter().all(|&l| l <= budget + 1_000), "{late:?}");
        // The overshoot was learned, so the wake-up lands before the completion.
        let o = h.overshoot_ns().unwrap();
        assert!((4_000..=7_000).contains(&o), "overshoot {o}");
        assert!(tail.iter().all(|(_, d)| d.slept_ns >= 70_000));
    }

    #[test]
    fn does_not_sleep_when_the_wait_is_shorter_than_the_overshoot() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        let sampling = run(&mut h, &mut t, 100, 10_000, 16_000);
        let dynamic = run(&mut h, &mut t, 200, 10_000, 16_000);
        // The window's first sleeps to learn the overshoot, then only the re-measuring one
        // after EXPLORE_AFTER I/Os (then twice as many): a 16 us wake-up on a 10 us device.
        let sleeps: u32 = sampling.iter().chain(&dynamic).map(|(w, _)| w.sleeps).sum();
        let most = OVERSHOOT_SAMPLES_MIN as u32 + 1 + 200 / EXPLORE_AFTER;
        assert!((OVERSHOOT_SAMPLES_MIN as u32..=most).contains(&sleeps), "{sleeps} sleeps");
        let on_time = dynamic.iter().filter(|(w, d)| w.seen_ns - d.done_ns <= 1_000).count();
        assert!(on_time >= 200 - most as usize, "{on_time} of 200 seen within 1 us");
        assert!(dynamic.iter().all(|(w, _)| w.predicted_done_ns.is_some()));
    }

    #[test]
    fn re_measures_ever_more_rarely_while_sleeping_does_not_pay() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 10_000, 16_000);
        let dynamic = run(&mut h, &mut t, 20_000, 10_000, 16_000);
        // The window's first 8, then 128, 256, ... 4096, then every 4096: 8 + 6 + 3
        // re-measures in 20,000 I/Os, not 156.
        let sleeps: u32 = dynamic.iter().map(|(w, _)| w.sleeps).sum();
        let first = OVERSHOOT_SAMPLES_MIN as u32;
        assert!((first + 6..=first + 12).contains(&sleeps), "{sleeps} sleeps in 20000 I/Os");
        assert_eq!(h.explore_after, EXPLORE_AFTER_MAX);
        // A device slow enough that sleeping pays resets it.
        run(&mut h, &mut t, 300, 80_000, 16_000);
        assert_eq!(h.explore_after, EXPLORE_AFTER);
    }

    #[test]
    fn sleeps_to_the_prediction_when_the_cpus_are_busy() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 10_000, 16_000);
        run(&mut h, &mut t, 50, 10_000, 16_000);
        h.set_cpu_busy(true);
        let busy = run(&mut h, &mut t, 50, 10_000, 16_000);
        // Every I/O sleeps (the 10 us device is shorter than the wake-up, but polling would
        // take the CPU from the other work) and is seen at the first poll after waking.
        assert!(busy.iter().all(|(w, _)| w.sleeps == 1 && w.polls == 1));
        assert!(busy.iter().all(|(_, d)| d.slept_ns >= 16_000));
        // Waking late on purpose teaches the predictor nothing: the estimate holds.
        let est = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        assert!((9_000..=10_500).contains(&est), "estimate {est}");
    }

    #[test]
    fn a_burst_of_late_wake_ups_does_not_move_the_estimate() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 5_000);
        run(&mut h, &mut t, 200, 80_000, 5_000);
        let before = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        // Preemptions: 30 sleeps in a row wake 40 us late, past the prediction. The first
        // poll then comes late, and "done by then" says nothing about the device time.
        let mut late = 0;
        let mut lowest = before;
        for _ in 0..30 {
            let (w, d) = run(&mut h, &mut t, 1, 80_000, 40_000).pop().unwrap();
            late += usize::from(w.seen_ns > d.done_ns + 1_000);
            lowest = lowest.min(h.predictor().estimate_ns(Op::Read, 4096).unwrap());
        }
        assert!(late >= 5, "{late} woke late");
        // Taking them as "caught at once" walked it down by the doubling step, tens of us.
        assert!(lowest + 1_000 >= before, "the estimate walked down from {before} to {lowest}");
        let after = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        assert!((78_000..=81_000).contains(&after), "estimate {after}");
    }

    /// Back-to-back I/Os of `service_ns` whose sleeps overshoot by `overshoots` in turn.
    fn run_varied(
        h: &mut Hybrid,
        t: &mut u64,
        n: usize,
        service_ns: u64,
        overshoots: &[u64],
    ) -> Vec<(Waited, VirtualDevice)> {
        run_on(h, t, n, service_ns, overshoots, None)
    }

    #[test]
    fn wakes_as_late_as_the_lateness_budget_allows() {
        // Overshoots of 10-40 us, evenly: the old 90th percentile woke 37 us early and spun it.
        let overshoots: Vec<u64> = (0..31).map(|i| 10_000 + i * 1_000).collect();
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 20_000);
        run_varied(&mut h, &mut t, 300, 80_000, &overshoots);
        let tail = run_varied(&mut h, &mut t, 620, 80_000, &overshoots);
        assert!(tail.iter().all(|(w, _)| w.sleeps == 1));
        let n = tail.len() as f64;
        let late = tail.iter().map(|(w, d)| (w.seen_ns - d.done_ns) as f64).sum::<f64>() / n;
        // The expected wake past the completion stays within the budget (3.5% of the 80 us,
        // 2.8 us), and is not far under it: the margin is not a high quantile.
        let budget = (80_000 * LATE_BUDGET_PER_MILLE / 1000) as f64;
        assert!(late <= budget + 500.0, "{late} ns late on average");
        assert!(late >= 1_500.0, "{late} ns late on average: woke too early");
        // What it spins after waking (the 80 us less the time asleep, overshoot included):
        // a margin at the 90th percentile (37 us) spins 12 us per I/O, the budget's (27 us)
        // about 4.
        let spun = tail.iter().map(|(_, d)| 80_000u64.saturating_sub(d.slept_ns) as f64).sum::<f64>() / n;
        assert!(spun < 7_000.0, "spun {spun} ns per I/O after waking");
    }

    #[test]
    fn a_first_sleep_from_the_tail_does_not_stop_the_sleeping() {
        // The first sleep after sampling wakes 200 us late (a preemption), the rest 5 us.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 5_000);
        run(&mut h, &mut t, 1, 80_000, 200_000);
        let rest = run(&mut h, &mut t, 300, 80_000, 5_000);
        let sleeps: u32 = rest.iter().map(|(w, _)| w.sleeps).sum();
        assert!(sleeps >= 295, "{sleeps} sleeps in 300 I/Os");
        // Once the 200 us sample has left the window, each wakes within the lateness budget
        // (a fixed 5 us overshoot: the margin is 5 us less the budget).
        let budget = 80_000 * LATE_BUDGET_PER_MILLE / 1000;
        assert!(rest[100..].iter().all(|(w, d)| w.seen_ns - d.done_ns <= budget + 1_000));
    }

    #[test]
    fn a_sleep_is_taken_where_it_takes_more_off_the_spinning_than_it_costs() {
        // An 80 us device, sleeps 20 us late. Where a sleep costs its thread 5 us of CPU,
        // the ~55 us sleep the margin allows saves about 70 us of spinning: every I/O sleeps.
        // Where it costs 120 us (more than the whole wait), no sleep pays: only the window's
        // first sleeps and the backed-off re-measures sleep. The old bar (half the overshoot,
        // 10 us) slept on both.
        let mut cheap = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run_on(&mut cheap, &mut t, 200, 80_000, &[20_000], Some(5_000));
        let tail = run_on(&mut cheap, &mut t, 400, 80_000, &[20_000], Some(5_000));
        let sleeps: u32 = tail.iter().map(|(w, _)| w.sleeps).sum();
        assert!(sleeps >= 395, "{sleeps} sleeps in 400 I/Os at 5 us a sleep");
        assert_eq!(cheap.sleep_cost.median_ns, 5_000);

        let mut dear = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run_on(&mut dear, &mut t, 200, 80_000, &[20_000], Some(120_000));
        let tail = run_on(&mut dear, &mut t, 400, 80_000, &[20_000], Some(120_000));
        let sleeps: u32 = tail.iter().map(|(w, _)| w.sleeps).sum();
        assert!(sleeps <= 40, "{sleeps} sleeps in 400 I/Os at 120 us a sleep");
        // Without a CPU clock (the status has none) the old bar stands: it sleeps.
        let mut blind = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut blind, &mut t, 200, 80_000, 20_000);
        let tail = run(&mut blind, &mut t, 400, 80_000, 20_000);
        assert!(tail.iter().all(|(w, _)| w.sleeps == 1));
    }

    #[test]
    fn a_few_sleeps_charged_a_preemption_do_not_set_the_cost() {
        // The first sleeps after sampling are charged 300 us each (the host took the vCPU
        // away during them), the rest 5 us. The mean of the first sixteen (97 us) would put
        // the bar above the ~55 us sleep and stop the sleeping; their median does not.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        let first = run_on(&mut h, &mut t, 20, 80_000, &[20_000], Some(300_000));
        let dear: u32 = first.iter().map(|(w, _)| w.sleeps).sum();
        assert!((3..=7).contains(&dear), "{dear} of the first sleeps charged 300 us");
        run_on(&mut h, &mut t, 200, 80_000, &[20_000], Some(5_000));
        let tail = run_on(&mut h, &mut t, 400, 80_000, &[20_000], Some(5_000));
        let sleeps: u32 = tail.iter().map(|(w, _)| w.sleeps).sum();
        assert!(sleeps >= 395, "{sleeps} sleeps in 400 I/Os");
    }

    #[test]
    fn the_margin_grows_until_the_sleeps_wake_within_the_budget_on_average() {
        // A tail past twice the median, which the window's estimate counts as twice the
        // median: of every ten sleeps nine wake 10 us late and one 100 us. The window alone
        // put the margin near 20 us and the I/Os about 9 us late on average, 2.8 x the
        // budget (3.2 us of the 80): the measured lateness widens the margin until the mean
        // is the budget.
        let overshoots = [10_000, 10_000, 10_000, 100_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000];
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run_on(&mut h, &mut t, 200, 80_000, &overshoots, Some(3_000));
        run_on(&mut h, &mut t, 2_000, 80_000, &overshoots, Some(3_000));
        let tail = run_on(&mut h, &mut t, 2_000, 80_000, &overshoots, Some(3_000));
        let n = tail.len() as f64;
        let late = tail.iter().map(|(w, d)| w.seen_ns.saturating_sub(d.done_ns) as f64).sum::<f64>() / n;
        let budget = (80_000 * LATE_BUDGET_PER_MILLE / 1000) as f64;
        assert!(late <= budget * 1.25, "{late:.0} ns late on average, budget {budget}");
        assert!(late >= budget * 0.5, "{late:.0} ns late on average: the margin is wider than the budget asks");
        // And it still sleeps on (nearly) every I/O.
        let sleeps: u32 = tail.iter().map(|(w, _)| w.sleeps).sum();
        assert!(sleeps as f64 >= 0.95 * n, "{sleeps} sleeps");
    }

    #[test]
    fn a_burst_from_the_tail_does_not_stop_the_sleeping() {
        // Seen in the simulation of issue 27's host A (seed 5, 3 s): a run of sleeps woken
        // 50-95 us late on a 20-30 us body. Here 16 in a row at 70 us on a 20 us body, a
        // quarter of the window. Counted whole (a clip at twice the 90th percentile, now
        // 70 us), they put the margin at 59 us: a 21 us sleep, under half the 90th
        // percentile, so the thread stopped sleeping, and the window, which only sleeps
        // refresh, held the burst for 64 re-measures (seconds, as they back off). Counted
        // as twice the median (40 us), the margin stays near 29 us and it sleeps on.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 20_000);
        run(&mut h, &mut t, 100, 80_000, 20_000);
        let burst = run(&mut h, &mut t, 16, 80_000, 70_000);
        let rest = run(&mut h, &mut t, 300, 80_000, 20_000);
        let sleeps: u32 = burst.iter().chain(&rest).map(|(w, _)| w.sleeps).sum();
        assert_eq!(sleeps, 316, "{sleeps} sleeps in 316 I/Os");
        // The burst woke past the completion, and the lateness it cost is paid back by a
        // wider margin for a while (LATE_GAIN: the mean lateness is what the budget holds),
        // then the margin is back under twice the median: each sleep asks for more than
        // 80 - 40 - alpha us (slept_ns holds the 20 us overshoot as well).
        assert!(rest[200..].iter().all(|(_, d)| d.slept_ns >= 59_000), "a sleep asked for under 39 us");
    }

    #[test]
    fn a_burst_of_an_eighth_of_the_window_does_not_stop_the_sleeping() {
        // Eight wake-ups 150 us late in a row on a 25 us body (a host's preemption epoch).
        // They are the window's top eighth, so its 90th percentile is 150 us: with half of
        // that as the bar, the 52 us sleep the margin allows did not pay, the thread
        // stopped sleeping, and the re-measures that could flush the burst backed off.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 25_000);
        run(&mut h, &mut t, 100, 80_000, 25_000);
        run(&mut h, &mut t, 8, 80_000, 150_000);
        let rest = run(&mut h, &mut t, 400, 80_000, 25_000);
        let sleeps: u32 = rest.iter().map(|(w, _)| w.sleeps).sum();
        assert_eq!(sleeps, 400, "{sleeps} sleeps in 400 I/Os after the burst");
    }

    #[test]
    fn a_lateness_epoch_that_passed_does_not_hold_the_thread_off_sleeping() {
        // The host wakes sleeps 60 us late for a whole window (an epoch of its load), and
        // the thread stops sleeping on the 80 us device; then it wakes them 20 us late again.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 20_000);
        run(&mut h, &mut t, 200, 80_000, 60_000);
        let off = run(&mut h, &mut t, 200, 80_000, 20_000);
        let slept: u32 = off.iter().map(|(w, _)| w.sleeps).sum();
        assert!(slept < 50, "{slept} sleeps in 200 I/Os: the epoch did not stop the sleeping");
        // Only the backed-off re-measures refreshed the window, one sample in 16 to 4096
        // I/Os, so the epoch's samples held it for seconds. Re-measures below the window's
        // median end the epoch (and a round of them every OVERSHOOT_AGE_NS_MAX at the
        // latest), and the thread measures the host afresh.
        let after = run(&mut h, &mut t, 6_000, 80_000, 20_000);
        let elapsed = after.last().unwrap().0.seen_ns - off.last().unwrap().0.seen_ns;
        assert!(elapsed > OVERSHOOT_AGE_NS_MAX + 64 * 100_000, "{elapsed} ns: too short a run to tell");
        let tail: u32 = after[after.len() - 1_000..].iter().map(|(w, _)| w.sleeps).sum();
        assert_eq!(tail, 1_000, "{tail} sleeps in the last 1000 I/Os");
    }

    /// Eighteenth session: once the epoch has passed, four re-measures below the window's
    /// median end it, not the 250 ms age limit (about 3,000 I/Os of 80 us here). Fails on
    /// the age limit alone: the thread would not sleep again within the 2,000 I/Os.
    #[test]
    fn re_measures_below_the_median_end_a_lateness_epoch_that_passed() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 20_000);
        run(&mut h, &mut t, 200, 80_000, 60_000);
        let after = run(&mut h, &mut t, 2_000, 80_000, 20_000);
        let elapsed = after.last().unwrap().0.seen_ns - after[0].0.seen_ns;
        assert!(elapsed < OVERSHOOT_AGE_NS_MAX, "{elapsed} ns: the age limit could have acted");
        // The re-measures, backed off during the epoch, come every 128-512 I/Os: four of
        // them within the first 1,700, and from then on it sleeps on every I/O.
        let slept: u32 = after[1_700..].iter().map(|(w, _)| w.sleeps).sum();
        assert_eq!(slept, 300, "{slept} sleeps in the last 300 I/Os");
        // While the epoch lasts, the re-measures (woken as late as the window) change nothing.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 20_000);
        run(&mut h, &mut t, 200, 80_000, 60_000);
        let during = run(&mut h, &mut t, 600, 80_000, 60_000);
        let slept: u32 = during.iter().map(|(w, _)| w.sleeps).sum();
        assert!(slept < 20, "{slept} sleeps in 600 I/Os of the epoch");
    }

    /// Nineteenth session: on a device faster than any wake-up, re-measures that wake less
    /// late than the window's median but still too late for a sleep to pay do not end the
    /// "epoch". Fails on the eighteenth session's rule: four of them emptied the window and
    /// the thread slept on the next 60 I/Os to fill it again.
    #[test]
    fn re_measures_below_the_median_at_which_sleeping_would_not_pay_keep_the_window() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 10_000, 200_000);
        run(&mut h, &mut t, 100, 10_000, 200_000);
        let after = run(&mut h, &mut t, 4_000, 10_000, 50_000);
        let elapsed = after.last().unwrap().0.seen_ns - after[0].0.seen_ns;
        assert!(elapsed < OVERSHOOT_AGE_NS_MAX, "{elapsed} ns: the age limit could have acted");
        // The backed-off re-measures after 128, 256, 512, 1024 and 2048 I/Os, no more.
        let slept: u32 = after.iter().map(|(w, _)| w.sleeps).sum();
        assert!(slept <= 6, "{slept} sleeps in 4000 I/Os");
        // Where sleeping would pay at the re-measures' overshoot, the same four end it.
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 60_000);
        run(&mut h, &mut t, 200, 80_000, 60_000);
        let after = run(&mut h, &mut t, 2_000, 80_000, 20_000);
        let slept: u32 = after[1_700..].iter().map(|(w, _)| w.sleeps).sum();
        assert_eq!(slept, 300, "{slept} sleeps in the last 300 I/Os");
    }

    /// Nineteenth session: a window that says sleeping does not pay is checked every
    /// OVERSHOOT_AGE_NS_MAX with a few re-measures, not emptied and measured afresh. Fails on
    /// the eighteenth session's age limit: 64 late wake-ups every 250 ms (on issue 27's host
    /// A in the simulation, emu:optane, 0.948 x spin's IOPS).
    #[test]
    fn a_window_that_says_sleeping_does_not_pay_is_not_measured_afresh_by_age() {
        // Overshoots of 20-330 us in turn on a 10 us device: sleeping never pays.
        let overshoots: Vec<u64> = (0..32).map(|i| 20_000 + i * 10_000).collect();
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run_varied(&mut h, &mut t, 200, 10_000, &overshoots);
        let start = t;
        let after = run_varied(&mut h, &mut t, 200_000, 10_000, &overshoots);
        let elapsed = t - start;
        assert!(elapsed > 7 * OVERSHOOT_AGE_NS_MAX, "{elapsed} ns: too short a run to tell");
        let slept: u32 = after.iter().map(|(w, _)| w.sleeps).sum();
        // The backed-off re-measures (6 up to one per 4096 I/Os, then about 47) and a round
        // of four per 250 ms (8 rounds): about 85. The age limit slept about 58 times per 250 ms.
        assert!(slept <= 120, "{slept} sleeps in 200000 I/Os over {elapsed} ns");
        let iops_loss = after.iter().filter(|(w, d)| w.seen_ns > d.done_ns + 1_000).count();
        assert!(iops_loss <= 120, "{iops_loss} I/Os seen late");
    }

    #[test]
    fn polls_far_less_than_fixed_interval_polling() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 40_000, 3_000);
        let dynamic = run(&mut h, &mut t, 100, 40_000, 3_000);
        let polls: u32 = dynamic.iter().map(|(w, _)| w.polls).sum();
        // Fixed 1 us polling would poll 40 times per I/O.
        assert!(polls <= 100 * 4, "{polls} polls for 100 I/Os");
    }
}
