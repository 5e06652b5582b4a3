//! How steady the probe's "what a blocking wait costs everyone" bound is on this host.
//!
//! ```text
//! cargo run --release -p smartcon-study --example harm_watch -- [REPEATS [ROUNDS [TURN_MS]]]
//! ```
//!
//! Runs the probe's co-runner comparison ([`smartcon_study::probe::measure_beside_crunchers`]:
//! one cruncher per CPU, spin against block at device times of 5-80 us, in ROUNDS
//! interleaved rounds of TURN_MS turns, by default the probe's) REPEATS times (default 3) and prints each run's points (IOPS spinning over
//! blocking, the crunchers' work beside the spinner over beside the blocker, each with its
//! 90% interval), the bound [`smartcon_study::probe::harmless_bound`] finds, and the one the
//! walk it replaced found on the same points. The bound decides `spin_cheaper` on every emulated
//! preset, so a spread between repeats is a spread in smart's decisions between runs.

use std::sync::atomic::AtomicBool;

use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::HarmPoint;

/// The bound as it was found before the fits: the first point, shortest time first, where
/// the spinner lost IOPS or the crunchers kept less than 0.97 of their work ends the walk.
fn walk(points: &[HarmPoint]) -> Option<f64> {
    let mut bound = None;
    for p in points {
        if p.iops_ratio < 1.0 || p.corunner_ratio < smartcon_study::probe::HARM_CORUNNER_KEPT {
            return bound.or(Some(0.0));
        }
        bound = Some(p.service_ns);
    }
    bound
}

fn main() {
    let arg = |i: usize| std::env::args().nth(i).and_then(|s| s.parse::<u64>().ok());
    let repeats = arg(1).unwrap_or(3);
    let rounds = arg(2).map_or(smartcon_study::probe::HARM_ROUNDS, |r| r as usize);
    let turn_ns = arg(3).map_or(smartcon_study::probe::HARM_TURN_NS, |ms| ms * 1_000_000);
    let monitor = SystemMonitor::start(smartcon_engine::monitor::WINDOW_NS_DEFAULT);
    let stop = AtomicBool::new(false);
    for run in 1..=repeats {
        let t = std::time::Instant::now();
        let (bound, points) =
            smartcon_study::probe::measure_beside_crunchers_with(&monitor, &stop, rounds, turn_ns).expect("measure");
        let us = |b: Option<f64>| b.map_or("none".into(), |b| format!("{:.1} us", b / 1e3));
        println!(
            "run {run} ({:.1} s): bound {} (point by point, the rule before the fits: {})",
            t.elapsed().as_secs_f64(),
            us(bound),
            us(walk(&points))
        );
        for p in &points {
            println!(
                "  {:5.1} us: iops x{:.2}  crunchers x{:.3} [{:.3}, {:.3}]  ({} rounds)",
                p.service_ns / 1e3,
                p.iops_ratio,
                p.corunner_ratio,
                p.corunner_lo,
                p.corunner_hi,
                p.rounds
            );
        }
    }
}
