//! The SmartCon Decision Module (paper Sec. 5.1, Fig. 6): one pure function.
//!
//! For each I/O it answers "context-switch or busy-wait?" by checking, cheapest first:
//!
//! 1. the two device-class bits: a mainstream device always blocks, a very fast one is
//!    always busy-waited in the caller's context (`sync`: the caller does the device's work
//!    inline, as the paper's ramdisk driver and its predecessor's polling pseudo device do;
//!    spinning on a ring instead would compete with the kernel worker that io_uring hands
//!    such inline-completing devices to, as measured on zram). Not in the paper: above
//!    the host's measured size for it (`very_fast_bytes_max`), a very fast device's request
//!    blocks while others' CPU utilization is above the CPU threshold, since there a
//!    thread that waits inline for a long device time does less I/O than one that blocks
//!    (beside crunchers, measured per host by the probe; see [`Thresholds`]);
//! 2. the request size plus the bytes already in flight ahead of it on the same device
//!    against the size threshold (the backlog rule of Sec. 5.1): at or above it, block
//!    (the paper says "greater than"; `>=` is smartcon's reading, see below);
//! 3. the number of I/Os in flight ahead of it against the queue limit Q (Fig. 7): more than
//!    Q, block (Q = 0: spin only when no other I/O is in flight);
//! 4. (not in the paper) whether spinning for this request costs everyone no more than
//!    blocking would: the request size at or below the profile's bound for its op
//!    (`spin_cheaper_bytes_max` for reads, `spin_cheaper_write_bytes_max` for writes). The
//!    bound comes from the host's measured outcome where it was measured: the longest
//!    device time at which a spinning I/O thread did at least as much I/O as a blocking
//!    one while co-running crunchers kept >= 97% of their work (`HostWaitCost`), since a
//!    blocking wait costs others more than the waiting thread's own CPU clock shows (the
//!    waking CPU's interrupt, a VM's halt exit, the preempted cruncher's switch); else
//!    from the CPU clocks. The I/Os ahead are not added here: branch 3 has already bounded
//!    them to Q. Then spin whatever the utilization: the paper's CPU check exists to spare
//!    other work the CPU a spinner burns, and where blocking costs them as much it spares
//!    no one;
//! 5. CPU utilization against the CPU threshold (Sec. 4.2): above it, block. (The paper's
//!    figure is machine-wide, the spinner included; leaving our threads out, below, is
//!    smartcon's own.)
//!
//! Otherwise spin. Every result carries its reason so a run can count the branches taken.
//! The inline path (`sync`) needs no branch of its own here: a device whose smallest
//! request completes inline in less time than a blocking I/O's CPU is very fast (branch 1).
//!
//! The size threshold is "the size from which blocking costs no more than spinning"
//! (the probe's rule), so a request whose size plus backlog *reaches* it blocks.
//! The CPU utilization is that of everything on the machine except this engine's own I/O
//! threads: counting our own spinning would make a spinning thread see a busy CPU and stop
//! spinning, then see an idle one and start again (on 2 cores one spinner alone is 50%).
//!
//! [`decide_paper`] is the paper's rule as written, for the `paper` strategy beside `smart`:
//! declared classes ([`declared_class`]), `>` at the size threshold, Q = 0, no branch 4,
//! and machine-wide CPU utilization with the spinner included. docs/evaluate.md has the
//! table of where the two differ and why.
//!
//! Non-goals: learning, hysteresis, per-thread state. The function is a table; tests pin it.

use serde::{Deserialize, Serialize};

/// How a thread waits for its I/O. `Ord` follows the declaration, so maps keyed by it
/// (the records' decision counts) list strategies in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Sleep in the kernel until the completion wakes the thread (context switch).
    Block,
    /// Busy-wait on the completion, bounded by a budget, then sleep.
    Spin,
    /// A plain positional syscall (pread/pwrite); programmed I/O on emulated devices.
    Sync,
    /// Dynamic interval polling: sleep until just before the predicted completion, then
    /// poll (crate::wait::hybrid).
    Hybrid,
    /// Fixed-interval polling (crate::wait::fixed), a baseline.
    #[serde(rename = "poll")]
    FixedPoll,
    /// Linux's removed hybrid polling: sleep half the mean, then poll (a baseline).
    #[serde(rename = "half-mean")]
    HalfMean,
    /// Linux 6.13's IORING_SETUP_HYBRID_IOPOLL: sleep half the ring's minimum completion
    /// time once, then poll (crate::wait::iopoll, a peer).
    #[serde(rename = "iopoll-hybrid")]
    IopollHybrid,
    /// DPAS's per-I/O adaptive sleep with its mode switch over polling, PAS and
    /// interrupts (crate::wait::pas, a peer).
    Pas,
    /// Dynamic interval polling as the paper has it: busy delay without touching the device
    /// until the predicted completion, then poll (crate::wait::dip).
    Dip,
}

impl Strategy {
    pub const ALL: [Strategy; 9] = [
        Strategy::Block,
        Strategy::Spin,
        Strategy::Sync,
        Strategy::Hybrid,
        Strategy::FixedPoll,
        Strategy::HalfMean,
        Strategy::IopollHybrid,
        Strategy::Pas,
        Strategy::Dip,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Block => "block",
            Strategy::Spin => "spin",
            Strategy::Sync => "sync",
            Strategy::Hybrid => "hybrid",
            Strategy::FixedPoll => "poll",
            Strategy::HalfMean => "half-mean",
            Strategy::IopollHybrid => "iopoll-hybrid",
            Strategy::Pas => "pas",
            Strategy::Dip => "dip",
        }
    }

    /// The strategies that wait by polling at chosen instants (crate::wait).
    pub fn is_polling(self) -> bool {
        matches!(
            self,
            Strategy::Hybrid
                | Strategy::FixedPoll
                | Strategy::HalfMean
                | Strategy::IopollHybrid
                | Strategy::Pas
                | Strategy::Dip
        )
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The device-class bits of Sec. 4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceClass {
    /// Slower than a context switch by far (disks, SATA SSDs under load): always block.
    Mainstream,
    /// Comparable to a context switch: decide per I/O.
    Fast,
    /// Faster than a context switch (memory-class devices): always busy-wait inline (sync).
    VeryFast,
}

impl DeviceClass {
    pub fn name(self) -> &'static str {
        match self {
            DeviceClass::Mainstream => "mainstream",
            DeviceClass::Fast => "fast",
            DeviceClass::VeryFast => "very_fast",
        }
    }
}

/// Why a decision came out as it did; one per branch of Fig. 6. The JSON names are those
/// of [`Reason::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    MainstreamDevice,
    VeryFastDevice,
    SizeAtThreshold,
    QueueOverLimit,
    CpuBusy,
    CpuAvailable,
    /// Spinning for this request costs no more CPU than blocking would (branch 4): spun
    /// whatever the utilization. Last, so the earlier indices (and the C header's) stay.
    SpinCheaper,
    /// Not a branch of [`decide`]: the rule said spin, and the port blocked because its
    /// own waits showed spinning gaining too little there (see [`crate::learn`]).
    SpinUnpaid,
    /// Not a branch of [`decide`]: the rule said spin, and the port waited the way it
    /// does not currently prefer, to keep measuring it (see [`crate::learn`]).
    Trial,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::MainstreamDevice,
        Reason::VeryFastDevice,
        Reason::SizeAtThreshold,
        Reason::QueueOverLimit,
        Reason::CpuBusy,
        Reason::CpuAvailable,
        Reason::SpinCheaper,
        Reason::SpinUnpaid,
        Reason::Trial,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Reason::MainstreamDevice => "mainstream_device",
            Reason::VeryFastDevice => "very_fast_device",
            Reason::SizeAtThreshold => "size_at_threshold",
            Reason::QueueOverLimit => "queue_over_limit",
            Reason::CpuBusy => "cpu_busy",
            Reason::CpuAvailable => "cpu_available",
            Reason::SpinCheaper => "spin_cheaper",
            Reason::SpinUnpaid => "spin_unpaid",
            Reason::Trial => "trial",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The request being decided on.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub bytes: u64,
    /// A write: branch 4 has a bound per op, since a device's writes and reads can take
    /// very different times (an NVMe SSD's buffered write about 20 us, its read 80 us).
    pub write: bool,
}

/// What is ahead of the request on the same device.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceState {
    pub inflight_count: u32,
    pub inflight_bytes: u64,
}

/// The System Monitor's reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemState {
    /// CPU utilization, 0..=100: for [`decide`] everything but this engine's I/O threads
    /// (the others' demand); for [`decide_paper`] the whole machine's, the spinner included.
    pub cpu_utilization_pct: u32,
}

/// The thresholds of one device (see [`crate::profile::Profile`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub class: DeviceClass,
    /// Requests whose size plus backlog reaches this block.
    pub size_threshold_bytes: u64,
    /// Where others' requests are in flight ahead on the device, this threshold replaces
    /// `size_threshold_bytes` when it is larger (0: none). The probe draws the size
    /// threshold from latencies and then checks smart against block without a load, where
    /// CPU is what spinning costs ([`crate::profile::ThresholdCheck`]); the check may move
    /// it down for a gain that does not pay its CPU on an idle device. Beside others' I/O
    /// the measurement that applies is the queue probe's (Q, Fig. 7, measured with
    /// background readers) and the drawn threshold: on the team's VM (eighteenth session)
    /// the check moved the local disk's 1 MiB down to 16 KiB, and with that threshold
    /// counting the others' backlog smart blocked at 4 KiB beside the I/O workers, where
    /// spinning gave 1.09-1.19 x with the workers doing 1.02-1.12 x more.
    #[serde(default)]
    pub size_threshold_busy_bytes: u64,
    /// Above this utilization (others', in percent) the engine blocks.
    pub cpu_threshold_pct: u32,
    /// Spin only when at most this many I/Os are in flight ahead (Q of Fig. 7).
    pub queue_limit: u32,
    /// Reads of at most this size (with no more than `queue_limit` I/Os ahead) cost no
    /// more spinning than blocking: they spin whatever the utilization (0: none).
    pub spin_cheaper_bytes_max: u64,
    /// The same for writes.
    pub spin_cheaper_write_bytes_max: u64,
    /// A very fast device's inline path is taken for reads of at most this size
    /// whatever the load; larger ones block when others' utilization is above the CPU
    /// threshold (`u64::MAX`: the whole class, the paper's rule). On an emulated device the
    /// inline path is a busy wait for the device time, and beside crunchers a thread that
    /// waits so gets its fair share of the CPU and misses completions while preempted,
    /// where a blocking one is woken at each: the host measures the device time from which
    /// blocking does more I/O ([`crate::profile::HostWaitCost::inline_wins_service_ns_max`]).
    #[serde(default = "whole_class")]
    pub very_fast_bytes_max: u64,
    /// The same for writes.
    #[serde(default = "whole_class")]
    pub very_fast_write_bytes_max: u64,
}

/// [`Thresholds::very_fast_bytes_max`] where none was given: the whole class.
fn whole_class() -> u64 {
    u64::MAX
}

impl Thresholds {
    /// The thresholds the paper's rule ([`decide_paper`]) runs on: the device class as
    /// declared (see [`declared_class`]), Q as given (the paper's 0, or Fig. 7's 1), no
    /// spin-cheaper bound; the size and CPU thresholds as profiled (the same rules as the
    /// paper's: Sec. 4.1's size sweep, Table II's "100% minus busy-wait's share").
    pub fn paper(self, class: DeviceClass, queue_limit: u32) -> Thresholds {
        Thresholds {
            class,
            queue_limit,
            spin_cheaper_bytes_max: 0,
            spin_cheaper_write_bytes_max: 0,
            very_fast_bytes_max: u64::MAX,
            very_fast_write_bytes_max: u64::MAX,
            size_threshold_busy_bytes: 0,
            ..self
        }
    }
}

/// What the kernel and the device's name say of a device, for [`declared_class`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeclaredFacts {
    /// The kernel marks the device rotational (`queue/rotational`).
    pub rotational: bool,
    /// The device's data lives in RAM: zram, brd, pmem, or a loop device whose backing
    /// file is on tmpfs (e.g. /dev/shm).
    pub ram_backed: bool,
}

/// The device class as the paper sets it: declared by the device's type, not measured
/// (Sec. 4.1: two bits in the request queue, set for ramdisks and NVRAM, and for
/// mainstream devices). Very fast: RAM-backed block devices and the emulated NVRAM;
/// mainstream: rotating disks (the kernel's flag) and SATA-class devices (`sd*` that the
/// kernel calls non-rotational; the emulated SATA SSD, HDD and SD card); fast otherwise.
/// `device_id` is a port's (`blk:zram0`, `emu:optane,size=16m`). Pure: the caller reads
/// the facts (see `profile::declared_class_of`).
pub fn declared_class(device_id: &str, facts: DeclaredFacts) -> DeviceClass {
    if let Some(emu) = device_id.strip_prefix("emu:") {
        return match emu.split(',').next().unwrap_or("") {
            "nvram" => DeviceClass::VeryFast,
            "sata-ssd" | "hdd" | "sdcard" => DeviceClass::Mainstream,
            _ => DeviceClass::Fast,
        };
    }
    let name = device_id.strip_prefix("blk:").unwrap_or(device_id);
    let ram_name = ["zram", "ram", "pmem"].iter().any(|p| name.starts_with(p));
    if ram_name || facts.ram_backed {
        DeviceClass::VeryFast
    } else if facts.rotational || name.starts_with("sd") {
        DeviceClass::Mainstream
    } else {
        DeviceClass::Fast
    }
}

/// A decision and its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub strategy: Strategy,
    pub reason: Reason,
}

/// Decides how to wait for one I/O. Pure, branch-cheap, allocation-free.
#[inline]
pub fn decide(request: Request, device: DeviceState, system: SystemState, t: &Thresholds) -> Decision {
    let (strategy, reason) = match t.class {
        DeviceClass::Mainstream => (Strategy::Block, Reason::MainstreamDevice),
        DeviceClass::VeryFast => {
            let inline_max = if request.write { t.very_fast_write_bytes_max } else { t.very_fast_bytes_max };
            if request.bytes > inline_max && system.cpu_utilization_pct > t.cpu_threshold_pct {
                (Strategy::Block, Reason::CpuBusy)
            } else {
                (Strategy::Sync, Reason::VeryFastDevice)
            }
        }
        DeviceClass::Fast => {
            let size_max = if device.inflight_count > 0 {
                t.size_threshold_bytes.max(t.size_threshold_busy_bytes)
            } else {
                t.size_threshold_bytes
            };
            if request.bytes.saturating_add(device.inflight_bytes) >= size_max {
                (Strategy::Block, Reason::SizeAtThreshold)
            } else if device.inflight_count > t.queue_limit {
                (Strategy::Block, Reason::QueueOverLimit)
            } else if request.bytes
                <= if request.write { t.spin_cheaper_write_bytes_max } else { t.spin_cheaper_bytes_max }
            {
                (Strategy::Spin, Reason::SpinCheaper)
            } else if system.cpu_utilization_pct > t.cpu_threshold_pct {
                (Strategy::Block, Reason::CpuBusy)
            } else {
                (Strategy::Spin, Reason::CpuAvailable)
            }
        }
    };
    Decision { strategy, reason }
}

/// The paper's Decision Module as written (Sec. 4.1, 4.2, 5.1), for the `paper` strategy:
/// the class bits, then "if total IO size is *greater than* IO size threshold ... context
/// switch" (size plus the bytes ahead, `>`), then the queue against Q (the paper's Q = 0:
/// busy-wait "only when the respective IO device is not busy"), then CPU utilization, last.
/// No spin-cheaper branch. `system.cpu_utilization_pct` must be the machine-wide figure,
/// the spinner included (the paper's CPU_Stat), and `t` thresholds from
/// [`Thresholds::paper`]. The very fast branch answers `Sync` (busy-waiting in the
/// caller's context), as [`decide`] does: in user space the paper's busy-wait on a ramdisk
/// is the plain call. Pure, allocation-free, as [`decide`].
#[inline]
pub fn decide_paper(request: Request, device: DeviceState, system: SystemState, t: &Thresholds) -> Decision {
    let (strategy, reason) = match t.class {
        DeviceClass::Mainstream => (Strategy::Block, Reason::MainstreamDevice),
        DeviceClass::VeryFast => (Strategy::Sync, Reason::VeryFastDevice),
        DeviceClass::Fast => {
            if request.bytes.saturating_add(device.inflight_bytes) > t.size_threshold_bytes {
                (Strategy::Block, Reason::SizeAtThreshold)
            } else if device.inflight_count > t.queue_limit {
                (Strategy::Block, Reason::QueueOverLimit)
            } else if system.cpu_utilization_pct > t.cpu_threshold_pct {
                (Strategy::Block, Reason::CpuBusy)
            } else {
                (Strategy::Spin, Reason::CpuAvailable)
            }
        }
    };
    Decision { strategy, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Thresholds = Thresholds {
        class: DeviceClass::Fast,
        size_threshold_bytes: 64 << 10,
        cpu_threshold_pct: 50,
        queue_limit: 0,
        spin_cheaper_bytes_max: 0,
        spin_cheaper_write_bytes_max: 0,
        very_fast_bytes_max: u64::MAX,
        very_fast_write_bytes_max: u64::MAX,
        size_threshold_busy_bytes: 0,
    };

    fn d(bytes: u64, count: u32, ahead: u64, cpu: u32, t: &Thresholds) -> (Strategy, Reason) {
        let r = decide(
            Request { bytes, write: false },
            DeviceState { inflight_count: count, inflight_bytes: ahead },
            SystemState { cpu_utilization_pct: cpu },
            t,
        );
        (r.strategy, r.reason)
    }

    #[test]
    fn every_branch() {
        use Reason::*;
        use Strategy::*;
        let table: &[(u64, u32, u64, u32, Strategy, Reason)] = &[
            // bytes, in flight, bytes ahead, cpu%, expected
            (4096, 0, 0, 0, Spin, CpuAvailable),
            (4096, 0, 0, 50, Spin, CpuAvailable), // at the CPU threshold still spins
            (4096, 0, 0, 51, Block, CpuBusy),
            (64 << 10, 0, 0, 0, Block, SizeAtThreshold), // reaching the threshold blocks
            ((64 << 10) - 512, 0, 0, 0, Spin, CpuAvailable),
            (4096, 1, 4096, 0, Block, QueueOverLimit),
            (4096, 1, 60 << 10, 0, Block, SizeAtThreshold), // backlog counts toward the size
        ];
        for &(bytes, count, ahead, cpu, s, r) in table {
            assert_eq!(
                d(bytes, count, ahead, cpu, &FAST),
                (s, r),
                "bytes={bytes} count={count} ahead={ahead} cpu={cpu}"
            );
        }
        let q1 = Thresholds { queue_limit: 1, ..FAST };
        assert_eq!(d(4096, 1, 4096, 0, &q1), (Spin, CpuAvailable));
        assert_eq!(d(4096, 2, 8192, 0, &q1), (Block, QueueOverLimit));
    }

    #[test]
    fn the_checked_threshold_holds_on_an_idle_device_and_the_drawn_one_beside_others_io() {
        use Reason::*;
        use Strategy::*;
        // The eighteenth session's local disk: drawn at 1 MiB, checked down to 16 KiB, Q 4.
        let t =
            Thresholds { size_threshold_bytes: 16 << 10, size_threshold_busy_bytes: 1 << 20, queue_limit: 4, ..FAST };
        // Nothing ahead: the check's threshold.
        assert_eq!(d(4096, 0, 0, 0, &t), (Spin, CpuAvailable));
        assert_eq!(d(16 << 10, 0, 0, 0, &t), (Block, SizeAtThreshold));
        // Others' requests ahead: the drawn threshold, the backlog counted, then Q.
        assert_eq!(d(64 << 10, 2, 128 << 10, 0, &t), (Spin, CpuAvailable));
        assert_eq!(d(64 << 10, 4, 1 << 20, 0, &t), (Block, SizeAtThreshold));
        assert_eq!(d(4096, 5, 20 << 10, 0, &t), (Block, QueueOverLimit));
        // A drawn threshold below the checked one never lowers it, and 0 is none.
        let low = Thresholds { size_threshold_busy_bytes: 8 << 10, ..t };
        assert_eq!(d(12 << 10, 1, 0, 0, &low), (Spin, CpuAvailable));
        let none = Thresholds { size_threshold_busy_bytes: 0, ..t };
        assert_eq!(d(16 << 10, 1, 0, 0, &none), (Block, SizeAtThreshold));
        // The paper's rule keeps one threshold.
        assert_eq!(t.paper(DeviceClass::Fast, 0).size_threshold_busy_bytes, 0);
    }

    #[test]
    fn class_bits_come_first() {
        use Reason::*;
        use Strategy::*;
        let main = Thresholds { class: DeviceClass::Mainstream, ..FAST };
        let vfast = Thresholds { class: DeviceClass::VeryFast, ..FAST };
        // Conditions that would block (huge, queued, busy) do not matter to a very fast device,
        // and conditions that would spin do not matter to a mainstream one.
        assert_eq!(d(1 << 20, 9, 1 << 30, 100, &vfast), (Sync, VeryFastDevice));
        assert_eq!(d(512, 0, 0, 0, &main), (Block, MainstreamDevice));
    }

    #[test]
    fn a_very_fast_device_blocks_its_large_requests_only_when_others_want_the_cpu() {
        use Reason::*;
        use Strategy::*;
        let vfast = Thresholds {
            class: DeviceClass::VeryFast,
            very_fast_bytes_max: 256 << 10,
            very_fast_write_bytes_max: 1 << 20,
            ..FAST
        };
        // At or below the bound: inline whatever the load (the paper's rule).
        assert_eq!(d(256 << 10, 0, 0, 100, &vfast), (Sync, VeryFastDevice));
        // Above it: inline while the CPU is free (at the threshold still), block when busy.
        assert_eq!(d((256 << 10) + 512, 0, 0, 50, &vfast), (Sync, VeryFastDevice));
        assert_eq!(d((256 << 10) + 512, 0, 0, 51, &vfast), (Block, CpuBusy));
        // Writes have their own bound.
        let w = |bytes: u64, cpu: u32| {
            let r = decide(
                Request { bytes, write: true },
                DeviceState::default(),
                SystemState { cpu_utilization_pct: cpu },
                &vfast,
            );
            (r.strategy, r.reason)
        };
        assert_eq!(w(1 << 20, 100), (Sync, VeryFastDevice));
        assert_eq!(w(2 << 20, 100), (Block, CpuBusy));
        // The backlog is not the bound's business (the inline path has none of its own).
        assert_eq!(d(4096, 9, 1 << 30, 100, &vfast), (Sync, VeryFastDevice));
        // The paper's rule keeps the whole class inline.
        let paper = vfast.paper(DeviceClass::VeryFast, 0);
        let r = decide_paper(
            Request { bytes: 1 << 20, write: false },
            DeviceState::default(),
            SystemState { cpu_utilization_pct: 100 },
            &paper,
        );
        assert_eq!((r.strategy, r.reason), (Sync, VeryFastDevice));
    }

    #[test]
    fn order_size_before_queue_before_cpu() {
        use Reason::*;
        // All three conditions fail: the size check must be the one reported.
        assert_eq!(d(1 << 20, 5, 0, 100, &FAST).1, SizeAtThreshold);
        // Size passes, queue and CPU fail: queue is reported.
        assert_eq!(d(4096, 5, 0, 100, &FAST).1, QueueOverLimit);
        // Only CPU fails.
        assert_eq!(d(4096, 0, 0, 100, &FAST).1, CpuBusy);
    }

    #[test]
    fn overflow_cannot_turn_a_block_into_a_spin() {
        assert_eq!(d(u64::MAX, 0, u64::MAX, 0, &FAST).0, Strategy::Block);
        let cheap = Thresholds {
            spin_cheaper_bytes_max: u64::MAX - 1,
            spin_cheaper_write_bytes_max: u64::MAX - 1,
            size_threshold_bytes: u64::MAX,
            ..FAST
        };
        // A saturated sum reaches the size threshold before the cheap bound is looked at.
        assert_eq!(d(u64::MAX, 0, u64::MAX, 100, &cheap).0, Strategy::Block);
        assert_eq!(d(u64::MAX - 1, 0, 1, 100, &cheap).0, Strategy::Block);
    }

    #[test]
    fn spinning_that_costs_no_more_cpu_than_blocking_ignores_the_utilization() {
        use Reason::*;
        use Strategy::*;
        // Spinning up to 8 KiB costs no more CPU than blocking; Q = 1.
        let t = Thresholds {
            spin_cheaper_bytes_max: 8 << 10,
            spin_cheaper_write_bytes_max: 8 << 10,
            queue_limit: 1,
            ..FAST
        };
        let table: &[(u64, u32, u64, u32, Strategy, Reason)] = &[
            // bytes, in flight, bytes ahead, cpu%, expected
            (4096, 0, 0, 100, Spin, SpinCheaper),    // busy CPU: spun anyway
            (4096, 0, 0, 0, Spin, SpinCheaper),      // idle CPU: the cheaper branch is named
            (8192, 0, 0, 100, Spin, SpinCheaper),    // at the bound still cheap
            (8192 + 512, 0, 0, 100, Block, CpuBusy), // past it the CPU threshold decides
            (8192 + 512, 0, 0, 50, Spin, CpuAvailable),
            (4096, 1, 4096, 100, Spin, SpinCheaper), // one ahead, within Q: served beside it
            (4096, 1, 32768, 100, Spin, SpinCheaper), // the bytes ahead count for the size rule only
            (4096, 1, 60 << 10, 100, Block, SizeAtThreshold),
            (4096, 2, 0, 0, Block, QueueOverLimit), // the paper's branches keep their order
            (64 << 10, 0, 0, 0, Block, SizeAtThreshold),
        ];
        for &(bytes, count, ahead, cpu, s, r) in table {
            assert_eq!(d(bytes, count, ahead, cpu, &t), (s, r), "bytes={bytes} count={count} ahead={ahead} cpu={cpu}");
        }
        // The class bits still come first.
        let main = Thresholds { class: DeviceClass::Mainstream, ..t };
        assert_eq!(d(512, 0, 0, 100, &main), (Block, MainstreamDevice));
        let vfast = Thresholds { class: DeviceClass::VeryFast, ..t };
        assert_eq!(d(512, 0, 0, 100, &vfast), (Sync, VeryFastDevice));
    }

    fn p(bytes: u64, count: u32, ahead: u64, cpu: u32, t: &Thresholds) -> (Strategy, Reason) {
        let r = decide_paper(
            Request { bytes, write: false },
            DeviceState { inflight_count: count, inflight_bytes: ahead },
            SystemState { cpu_utilization_pct: cpu },
            t,
        );
        (r.strategy, r.reason)
    }

    #[test]
    fn paper_rule_every_branch() {
        use Reason::*;
        use Strategy::*;
        // A profile with a spin-cheaper bound and Q = 3, as smart's may have: `paper`
        // drops the bound and takes Q = 0.
        let profiled = Thresholds {
            spin_cheaper_bytes_max: 8 << 10,
            spin_cheaper_write_bytes_max: 8 << 10,
            queue_limit: 3,
            ..FAST
        };
        let t = profiled.paper(DeviceClass::Fast, 0);
        assert_eq!((t.queue_limit, t.spin_cheaper_bytes_max, t.spin_cheaper_write_bytes_max), (0, 0, 0));
        let table: &[(u64, u32, u64, u32, Strategy, Reason)] = &[
            // bytes, in flight, bytes ahead, cpu%, expected
            (4096, 0, 0, 0, Spin, CpuAvailable),
            (4096, 0, 0, 50, Spin, CpuAvailable), // at the CPU threshold still spins
            (4096, 0, 0, 51, Block, CpuBusy),     // no spin-cheaper: a busy CPU blocks 4 KiB
            (64 << 10, 0, 0, 0, Spin, CpuAvailable), // "greater than": at the threshold spins
            ((64 << 10) + 512, 0, 0, 0, Block, SizeAtThreshold),
            (4096, 1, 4096, 0, Block, QueueOverLimit), // Q = 0: one ahead blocks
            (4096, 1, 60 << 10, 0, Block, QueueOverLimit), // total 64 KiB: not over the size
            (4096, 1, (60 << 10) + 512, 0, Block, SizeAtThreshold), // backlog counts toward the size
            (1 << 20, 5, 0, 100, Block, SizeAtThreshold), // order: size, queue, CPU
            (4096, 5, 0, 100, Block, QueueOverLimit),
        ];
        for &(bytes, count, ahead, cpu, s, r) in table {
            assert_eq!(p(bytes, count, ahead, cpu, &t), (s, r), "bytes={bytes} count={count} ahead={ahead} cpu={cpu}");
        }
        // smart on the same profile spins the busy 4 KiB and the queued one: the difference.
        assert_eq!(d(4096, 0, 0, 51, &profiled), (Spin, SpinCheaper));
        assert_eq!(p(4096, 0, 0, 51, &t), (Block, CpuBusy));
        // Fig. 7's Q = 1 as an option.
        let q1 = profiled.paper(DeviceClass::Fast, 1);
        assert_eq!(p(4096, 1, 4096, 0, &q1), (Spin, CpuAvailable));
        assert_eq!(p(4096, 2, 8192, 0, &q1), (Block, QueueOverLimit));
        // The class bits come first, whatever else holds.
        assert_eq!(p(1 << 20, 9, 1 << 30, 100, &profiled.paper(DeviceClass::VeryFast, 0)), (Sync, VeryFastDevice));
        assert_eq!(p(512, 0, 0, 0, &profiled.paper(DeviceClass::Mainstream, 0)), (Block, MainstreamDevice));
        assert_eq!(p(u64::MAX, 0, u64::MAX, 0, &t).0, Block, "a saturated sum blocks");
    }

    #[test]
    fn declared_classes_follow_the_device_type() {
        use DeviceClass::*;
        let none = DeclaredFacts::default();
        let rot = DeclaredFacts { rotational: true, ..none };
        let ram = DeclaredFacts { ram_backed: true, ..none };
        let table: &[(&str, DeclaredFacts, DeviceClass)] = &[
            ("blk:zram0", none, VeryFast),
            ("blk:ram0", none, VeryFast),
            ("blk:pmem1", none, VeryFast),
            ("blk:loop0", ram, VeryFast),  // a loop over /dev/shm
            ("blk:loop0", none, Fast),     // a loop over a file on disk: as its name says nothing
            ("blk:vda", rot, Mainstream),  // the kernel's rotational flag
            ("blk:sda", none, Mainstream), // SATA-class
            ("blk:nvme0n1", none, Fast),
            ("emu:nvram", none, VeryFast),
            ("emu:nvram,size=16m", none, VeryFast),
            ("emu:optane,size=16m,channels=2", none, Fast),
            ("emu:nvme", none, Fast),
            ("emu:sata-ssd", none, Mainstream),
            ("emu:hdd", none, Mainstream),
            ("emu:sdcard", none, Mainstream),
        ];
        for &(id, facts, want) in table {
            assert_eq!(declared_class(id, facts), want, "{id} {facts:?}");
        }
    }

    #[test]
    fn reasons_keep_their_indices_and_names() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
        assert_eq!(Reason::SpinCheaper.index(), 6, "appended: the C header's indices stay");
    }
}
