//! The experiments smartcon runs, as a library: each takes a typed plan, a progress
//! callback and a stop flag, and returns typed records. Nothing here prints; the CLI
//! renders what comes back (tables, markdown, SVG, progress bars).
//!
//! - [`probe`]: the Device Monitor's measuring loop (Sec. 4.1, Table II, Fig. 7);
//! - [`evaluate`]: the study of Sec. 7: [`evaluate::plan`], [`evaluate::run`] (the turn
//!   loop), [`evaluate::merge`] (turns into cells, exactly) and [`evaluate::judge`] (the
//!   criteria, each with its source in the papers);
//! - [`bench`]: the summaries of a `bench` matrix;
//! - [`window`]: the System Monitor's window against noise (Sec. 4.2).
//!
//! Threads that must stop each other are tied by the engine's stop guards
//! ([`smartcon_engine::stop`]): a panic in a worker or in the measuring code ends the run
//! with an [`ErrorKind::Internal`] error instead of hanging it.
//!
//! Non-goals: argument parsing and rendering (the `smartcon` binary), the I/O core
//! (`smartcon-engine`), and the loads and workloads themselves (`smartcon-workloads`).

use std::sync::atomic::AtomicBool;

use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::stop::StopOnDrop;

pub mod acs;
pub mod bench;
pub mod compare_fio;
pub mod evaluate;
pub mod host;
pub mod merge_bench;
pub mod polling;
pub mod probe;
pub mod simtable;
pub mod window;

/// What a running experiment tells its caller, for a progress bar and notes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// The run has this many steps in all (turns, measurements).
    Steps(u64),
    /// A step starts; what it measures.
    Starting(&'a str),
    /// A step is done.
    Done,
    /// Something the user should know (a skipped target, a placement, a warning).
    Note(&'a str),
}

/// The progress callback every experiment takes.
pub type Progress<'a> = dyn FnMut(Event<'_>) + 'a;

/// The order in which `n` strategies take their turns in round `round`: a Williams
/// design (a balanced Latin square). Over `n` rounds (`2n` for odd `n`) every strategy
/// goes first equally often and follows every other strategy equally often, so what one
/// strategy leaves behind (a spinner's deferred kernel work, a warmed cache) weighs on all
/// the others alike instead of always on the one after it, as a plain rotation does.
pub fn turn_order(n: usize, round: usize) -> Vec<usize> {
    let base = (0..n).map(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => n - j / 2,
    });
    let mut row: Vec<usize> = base.map(|x| (x + round) % n.max(1)).collect();
    if n % 2 == 1 && (round / n) % 2 == 1 {
        row.reverse();
    }
    row
}

/// Runs `f` in a thread scope whose background threads end when `stop` is set. `stop` is
/// set by a guard when `f` returns or unwinds, and a panic anywhere in the scope (in `f`
/// or in a thread it spawned) becomes an [`ErrorKind::Internal`] error naming `role`,
/// instead of a scope that waits forever for threads nobody told to stop.
pub fn stopping_scope<'env, T>(
    stop: &'env AtomicBool,
    role: &str,
    f: impl for<'scope> FnOnce(&'scope std::thread::Scope<'scope, 'env>) -> Result<T, Error>,
) -> Result<T, Error> {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::thread::scope(|s| {
            let _stop = StopOnDrop(stop);
            f(s)
        })
    }));
    caught.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(Error::new(ErrorKind::Internal, format!("the {role} panicked ({what}); the run was stopped")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Each round is a permutation; over a full cycle each ordered pair of neighbours
    /// occurs equally often and each strategy leads equally often.
    #[test]
    fn turn_order_is_a_balanced_latin_square() {
        for n in 1..=7usize {
            let cycle = if n % 2 == 0 { n } else { 2 * n };
            let mut pairs = vec![vec![0u32; n]; n];
            let mut first = vec![0u32; n];
            for r in 0..cycle {
                let row = turn_order(n, r);
                let mut sorted = row.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n} round {r}: not a permutation");
                first[row[0]] += 1;
                for w in row.windows(2) {
                    pairs[w[0]][w[1]] += 1;
                }
            }
            let want = (cycle / n) as u32;
            assert!(first.iter().all(|&f| f == want), "n={n}: leaders {first:?}");
            for (a, row) in pairs.iter().enumerate() {
                for (b, &count) in row.iter().enumerate() {
                    if a != b {
                        assert_eq!(count, if n % 2 == 0 { 1 } else { 2 }, "n={n}: pair {a}->{b}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_panic_in_the_scope_stops_its_workers_and_becomes_an_error() {
        let stop = AtomicBool::new(false);
        let r: Result<(), Error> = stopping_scope(&stop, "measuring code", |s| {
            // A background worker that runs until told to stop, as the I/O load does.
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            });
            panic!("boom");
        });
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal);
        assert!(e.message.contains("measuring code") && e.message.contains("boom"), "{e}");
        assert!(stop.load(Ordering::SeqCst));
    }

    #[test]
    fn a_normal_end_of_the_scope_stops_its_workers_too() {
        let stop = AtomicBool::new(false);
        let n = stopping_scope(&stop, "test", |s| {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            });
            Ok(7)
        });
        assert_eq!(n.unwrap(), 7);
    }
}
