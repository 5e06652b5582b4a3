//! The System Monitor's window against noise (SmartCon Sec. 4.2: "We run the experiment a
//! number of times with different observation window sizes: from 50 to 1000ms.
//! Observations become noisy and the observation accuracy gradually decreases with smaller
//! window size ... window size of 100 msec is a reasonable compromise").
//!
//! One monitor per window runs at once (each its own ticker on /proc/stat, as the engine's
//! is), so every window sees the same load and the same noise. The load is a square wave:
//! phases of `phase_ns`, alternately without and with `workers` number crunchers. The
//! truth of a phase is the machine-wide utilization /proc/stat gives over its steady part
//! (from `settle_ns` after its step to its end). Every `sample_ns` each monitor's
//! machine-wide figure (the paper's CPU_Stat, the `paper` strategy's signal) is read.
//!
//! Per window: the mean distance of a steady reading from its phase's truth, the spread of
//! the readings within a phase, how often a steady reading falls on the wrong side of the
//! midpoint between the loaded and the unloaded truth (what a threshold there would get
//! wrong), and how long after a step the reading first crosses that midpoint (the price of
//! a long window).
//!
//! Non-goals: choosing the window for the engine (the default stays 100 ms); other
//! signals than the machine-wide utilization.

use std::sync::atomic::{AtomicBool, Ordering};

use smartcon_engine::clock::now_ns;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::monitor::{SystemMonitor, WINDOW_NS_MAX, WINDOW_NS_MIN};
use smartcon_workloads::load::CpuLoad;

use crate::{Event, Progress};

/// The least difference between the loaded and the unloaded truth (percentage points) for
/// the figures to mean anything: on a machine other processes keep saturated, both phases
/// read 100% and every window is "exact".
pub const CONTRAST_MIN_PP: f64 = 5.0;

/// The study's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowPlan {
    /// The windows compared (the paper's 50 to 1,000 ms).
    pub windows_ns: Vec<u64>,
    /// Length of one phase (without, then with the crunchers).
    pub phase_ns: u64,
    /// Pairs of phases.
    pub cycles: u32,
    /// The part of a phase after its step left out of the steady figures (at least the
    /// longest window, so every window's reading lies inside the phase).
    pub settle_ns: u64,
    /// Number crunchers in the loaded phases.
    pub workers: u32,
    /// Time between two readings.
    pub sample_ns: u64,
}

impl WindowPlan {
    /// The default study: five cycles of 3 s phases (30 s); `quick`: two cycles of 2 s.
    pub fn preset(quick: bool) -> WindowPlan {
        let (phase_ns, cycles) = if quick { (2_000_000_000, 2) } else { (3_000_000_000, 5) };
        WindowPlan {
            windows_ns: vec![50_000_000, 100_000_000, 200_000_000, 500_000_000, 1_000_000_000],
            phase_ns,
            cycles,
            settle_ns: 1_000_000_000,
            workers: 1,
            sample_ns: 10_000_000,
        }
    }

    pub fn validate(&self) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.windows_ns.is_empty() {
            return usage("the window study needs at least one window".into());
        }
        if let Some(w) = self.windows_ns.iter().find(|w| !(WINDOW_NS_MIN..=WINDOW_NS_MAX).contains(w)) {
            return usage(format!("window {w} ns is outside the monitor's {WINDOW_NS_MIN}..={WINDOW_NS_MAX} ns"));
        }
        let longest = *self.windows_ns.iter().max().unwrap();
        if self.settle_ns < longest {
            return usage("the settling time must be at least the longest window".into());
        }
        if self.phase_ns < self.settle_ns + 10 * self.sample_ns {
            return usage("a phase must leave at least ten readings after its settling time".into());
        }
        if self.cycles == 0 || self.workers == 0 || self.sample_ns == 0 {
            return usage("cycles, workers and the sampling interval must be positive".into());
        }
        Ok(())
    }
}

/// One phase of the square wave, with its truth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub start_ns: u64,
    pub end_ns: u64,
    pub loaded: bool,
    /// Machine-wide utilization over [start + settle, end], percent, from /proc/stat.
    pub truth_pct: f64,
}

/// The readings of every window at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub at_ns: u64,
    /// Percent, in the order of the plan's windows.
    pub pct: Vec<f64>,
}

/// One window's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRow {
    pub window_ns: u64,
    /// Steady readings (after the settling time of their phase).
    pub steady: usize,
    /// Mean |reading - phase truth|, percentage points.
    pub mean_abs_err_pp: f64,
    /// The readings' standard deviation around their phase's mean reading, pooled.
    pub spread_pp: f64,
    /// Share of steady readings on the wrong side of the midpoint between the loaded and
    /// the unloaded truth, percent.
    pub wrong_side_pct: f64,
    /// Median time from a step to the first reading past the midpoint, ms (None if no step
    /// was crossed).
    pub lag_ms_median: Option<f64>,
}

/// The whole outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowOutcome {
    pub plan: WindowPlan,
    pub phases: Vec<Phase>,
    pub rows: Vec<WindowRow>,
    /// Mean truth of the unloaded and of the loaded phases, percent.
    pub idle_truth_pct: f64,
    pub loaded_truth_pct: f64,
}

/// The figures of every window from the phases and the readings (pure: the tests feed it
/// made-up readings).
pub fn summarize(plan: &WindowPlan, phases: &[Phase], readings: &[Reading]) -> (Vec<WindowRow>, f64, f64) {
    let mean = |xs: &mut dyn Iterator<Item = f64>| {
        let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        if n == 0 {
            f64::NAN
        } else {
            s / n as f64
        }
    };
    let idle = mean(&mut phases.iter().filter(|p| !p.loaded).map(|p| p.truth_pct));
    let loaded = mean(&mut phases.iter().filter(|p| p.loaded).map(|p| p.truth_pct));
    let mid = (idle + loaded) / 2.0;
    let rows = plan
        .windows_ns
        .iter()
        .enumerate()
        .map(|(w, &window_ns)| {
            let (mut steady, mut abs_err, mut sq, mut wrong) = (0usize, 0.0, 0.0, 0usize);
            let mut lags = Vec::new();
            for (k, p) in phases.iter().enumerate() {
                let in_phase: Vec<&Reading> =
                    readings.iter().filter(|r| r.at_ns >= p.start_ns && r.at_ns < p.end_ns).collect();
                let steady_here: Vec<f64> =
                    in_phase.iter().filter(|r| r.at_ns >= p.start_ns + plan.settle_ns).map(|r| r.pct[w]).collect();
                if !steady_here.is_empty() {
                    let m = steady_here.iter().sum::<f64>() / steady_here.len() as f64;
                    for &x in &steady_here {
                        abs_err += (x - p.truth_pct).abs();
                        sq += (x - m) * (x - m);
                        if (x > mid) != p.loaded {
                            wrong += 1;
                        }
                    }
                    steady += steady_here.len();
                }
                // A step: the phase before had the other state.
                if k > 0 && phases[k - 1].loaded != p.loaded {
                    let crossed = in_phase.iter().find(|r| (r.pct[w] > mid) == p.loaded);
                    if let Some(r) = crossed {
                        lags.push((r.at_ns - p.start_ns) as f64 / 1e6);
                    }
                }
            }
            lags.sort_by(|a, b| a.total_cmp(b));
            let n = steady.max(1) as f64;
            WindowRow {
                window_ns,
                steady,
                mean_abs_err_pp: abs_err / n,
                spread_pp: (sq / n).sqrt(),
                wrong_side_pct: 100.0 * wrong as f64 / n,
                lag_ms_median: (!lags.is_empty()).then(|| lags[lags.len() / 2]),
            }
        })
        .collect();
    (rows, idle, loaded)
}

fn busy_total() -> Result<(u64, u64), Error> {
    smartcon_util::procfs::cpu_times()
        .map(|t| (t.busy_ns, t.total_ns))
        .ok_or_else(|| Error::new(ErrorKind::Setup, "cannot read /proc/stat".to_string()))
}

/// Runs the study: the monitors, the square wave of crunchers, the readings.
pub fn run(plan: &WindowPlan, stop: &AtomicBool, progress: &mut Progress<'_>) -> Result<WindowOutcome, Error> {
    plan.validate()?;
    let monitors = plan.windows_ns.iter().map(|&w| SystemMonitor::try_start(w)).collect::<Result<Vec<_>, Error>>()?;
    let _stop_monitors = StopMonitors(&monitors);
    let phases_n = 2 * plan.cycles as usize;
    progress(Event::Steps(phases_n as u64 + 1));
    // Let the longest window fill before the first phase.
    progress(Event::Starting("the monitors' windows fill"));
    std::thread::sleep(std::time::Duration::from_nanos(plan.settle_ns));
    progress(Event::Done);
    let mut phases = Vec::with_capacity(phases_n);
    let mut readings = Vec::new();
    for k in 0..phases_n {
        let loaded = k % 2 == 1;
        progress(Event::Starting(if loaded { "a phase with the crunchers" } else { "a phase without them" }));
        let start_ns = now_ns();
        let load = if loaded { Some(CpuLoad::start(plan.workers)?) } else { None };
        let end_ns = start_ns + plan.phase_ns;
        let mut steady_from: Option<(u64, u64)> = None;
        let mut next = start_ns;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::new(ErrorKind::Interrupted, "interrupted".to_string()));
            }
            let now = now_ns();
            if now >= end_ns {
                break;
            }
            if steady_from.is_none() && now >= start_ns + plan.settle_ns {
                steady_from = Some(busy_total()?);
            }
            readings.push(Reading { at_ns: now, pct: monitors.iter().map(|m| m.total_utilization_pct()).collect() });
            next += plan.sample_ns;
            let now = now_ns();
            if next > now {
                std::thread::sleep(std::time::Duration::from_nanos(next - now));
            }
        }
        let (b1, t1) = busy_total()?;
        drop(load);
        let (b0, t0) = steady_from.unwrap_or((b1, t1));
        let truth_pct = if t1 > t0 { 100.0 * (b1 - b0) as f64 / (t1 - t0) as f64 } else { f64::NAN };
        phases.push(Phase { start_ns, end_ns, loaded, truth_pct });
        progress(Event::Done);
    }
    let (rows, idle_truth_pct, loaded_truth_pct) = summarize(plan, &phases, &readings);
    Ok(WindowOutcome { plan: plan.clone(), phases, rows, idle_truth_pct, loaded_truth_pct })
}

/// Stops the monitors' tickers however the run ends.
struct StopMonitors<'a>(&'a [SystemMonitor]);

impl Drop for StopMonitors<'_> {
    fn drop(&mut self) {
        for m in self.0 {
            m.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> WindowPlan {
        WindowPlan {
            windows_ns: vec![50_000_000, 1_000_000_000],
            phase_ns: 3_000_000_000,
            cycles: 1,
            settle_ns: 1_000_000_000,
            workers: 1,
            sample_ns: 10_000_000,
        }
    }

    /// A noisy short window and a smooth late one: the short one errs more and crosses
    /// sooner; the long one never errs and crosses later. Numbers are exact by
    /// construction.
    #[test]
    fn short_windows_are_noisy_and_quick_long_ones_smooth_and_late() {
        let p = plan();
        let s = 1_000_000_000u64;
        let phases = [
            Phase { start_ns: 0, end_ns: 3 * s, loaded: false, truth_pct: 20.0 },
            Phase { start_ns: 3 * s, end_ns: 6 * s, loaded: true, truth_pct: 70.0 },
        ];
        let mut readings = Vec::new();
        for i in 0..600u64 {
            let at = i * 10_000_000;
            let loaded = at >= 3 * s;
            let truth = if loaded { 70.0 } else { 20.0 };
            // short: +-30 around the truth, alternating; long: the truth, 500 ms late.
            let short = truth + if i % 2 == 0 { 30.0 } else { -30.0 };
            let long = if at >= 3 * s + 500_000_000 { 70.0 } else { 20.0 };
            readings.push(Reading { at_ns: at, pct: vec![short, long] });
        }
        let (rows, idle, loaded) = summarize(&p, &phases, &readings);
        assert_eq!((idle, loaded), (20.0, 70.0));
        assert_eq!(rows[0].steady, 400);
        assert!((rows[0].mean_abs_err_pp - 30.0).abs() < 1e-9);
        assert!((rows[0].spread_pp - 30.0).abs() < 1e-9);
        // 20+30 = 50 > 45 in the idle phase (wrong), 70-30 = 40 < 45 in the loaded (wrong):
        // every other reading is on the wrong side.
        assert!((rows[0].wrong_side_pct - 50.0).abs() < 1e-9);
        assert_eq!(rows[0].lag_ms_median, Some(0.0));
        assert_eq!(rows[1].mean_abs_err_pp, 0.0);
        assert_eq!(rows[1].wrong_side_pct, 0.0);
        assert_eq!(rows[1].lag_ms_median, Some(500.0));
    }

    #[test]
    fn the_plan_is_checked() {
        assert!(WindowPlan::preset(false).validate().is_ok());
        assert!(WindowPlan::preset(true).validate().is_ok());
        let mut p = plan();
        p.windows_ns = vec![10_000_000];
        assert!(p.validate().is_err());
        let mut p = plan();
        p.settle_ns = 500_000_000;
        assert!(p.validate().is_err());
        let mut p = plan();
        p.phase_ns = 1_050_000_000;
        assert!(p.validate().is_err());
    }
}
