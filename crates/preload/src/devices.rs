//! This process's System Monitor and per-device in-flight counters: what a decision reads,
//! for the taken descriptors' ports ([`crate::process`]) and the emulated image's waits
//! ([`crate::emu`]) alike.
//!
//! Not the engine's process-wide ones: after a fork those would be the parent's (a monitor
//! whose ticker thread is not in the child, counters holding the parent's in-flight I/O).
//! The lock is held across fork by the routing layer's prepare handler; the child leaks
//! the parent's contents and starts afresh.
//!
//! Service layer: reads the configuration, nothing above it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use smartcon_engine::job::StrategyChoice;
use smartcon_engine::monitor::{SystemMonitor, ThreadRegistration, WINDOW_NS_DEFAULT};
use smartcon_engine::smartport::SmartPortOptions;
use smartcon_engine::target::InFlight;

use crate::guard::Spin;

static DEVICES: Spin<Option<Devices>> = Spin::new(None);

struct Devices {
    monitor: Option<Arc<SystemMonitor>>,
    inflight: HashMap<u64, Arc<InFlight>>,
}

/// Whether the run's strategy reads the System Monitor (a fixed one never does).
pub fn needs_monitor() -> bool {
    crate::config::get().is_some_and(|c| !matches!(c.strategy, StrategyChoice::Fixed(_)))
}

/// The process's monitor, started on first use (a fixed strategy never needs it; the
/// engine still wants one, so it gets an idle one that is never started twice), and a note
/// for the user when it could not start.
pub fn monitor() -> (Arc<SystemMonitor>, Option<String>) {
    let mut note = None;
    let mut d = DEVICES.lock();
    let d = d.get_or_insert_with(|| Devices { monitor: None, inflight: HashMap::new() });
    let m = d
        .monitor
        .get_or_insert_with(|| {
            if !needs_monitor() {
                return Arc::new(SystemMonitor::fixed(0));
            }
            match SystemMonitor::try_start(WINDOW_NS_DEFAULT) {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    note = Some(format!("the System Monitor did not start ({e}); smart sees an idle CPU"));
                    Arc::new(SystemMonitor::fixed(0))
                }
            }
        })
        .clone();
    (m, note)
}

/// The in-flight counters of device `dev` (st_rdev of a block device, else st_dev).
pub fn inflight(dev: u64) -> Arc<InFlight> {
    let mut d = DEVICES.lock();
    let d = d.get_or_insert_with(|| Devices { monitor: None, inflight: HashMap::new() });
    d.inflight.entry(dev).or_default().clone()
}

/// The port options of the interposed calls: the run's strategy, this process's monitor
/// and the device's in-flight counters; and the monitor's note, if any.
pub fn port_options(dev: u64) -> (SmartPortOptions, Option<String>) {
    let (monitor, note) = monitor();
    let options = SmartPortOptions {
        strategy: crate::config::get().map_or(StrategyChoice::Smart, |c| c.strategy),
        monitor: Some(monitor),
        inflight: Some(inflight(dev)),
        ..Default::default()
    };
    (options, note)
}

thread_local! {
    /// This thread's registration with the monitor, and which monitor it is with.
    static REGISTERED: RefCell<Option<(usize, ThreadRegistration)>> = const { RefCell::new(None) };
}

/// Leaves the calling thread's CPU time out of the monitor's figure (a spinner must not see
/// its own spinning as load), once per thread and monitor. A registration with another
/// monitor (the parent's, before a fork) is forgotten, not dropped: that monitor's ticker
/// is not in this process.
pub fn register_current_thread(monitor: &Arc<SystemMonitor>) {
    let key = Arc::as_ptr(monitor) as usize;
    let _ = REGISTERED.try_with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else { return };
        if r.as_ref().is_some_and(|(k, _)| *k == key) {
            return;
        }
        if let Some(old) = r.take() {
            std::mem::forget(old);
        }
        *r = Some((key, monitor.register_current_thread()));
    });
}

/// Held across fork (the routing layer's prepare handler), released in parent and child.
pub fn fork_prepare() {
    std::mem::forget(DEVICES.lock());
}

pub fn fork_parent() {
    DEVICES.unlock_after_fork();
}

/// The child: the parent's monitor (its ticker is not here) and counters are leaked.
pub fn fork_child() {
    // SAFETY: the child is single-threaded and fork_prepare holds the lock.
    unsafe { std::mem::forget(DEVICES.held_value().take()) };
    DEVICES.unlock_after_fork();
}
