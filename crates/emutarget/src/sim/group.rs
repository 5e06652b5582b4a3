//! The group call in the seeded simulation: the merge device's protocol (paper 002's
//! temporal merge, `smartcon_workloads::merge`) on the virtual clock, with the engine's own
//! [`smartcon_engine::smartport::GroupCall`] deciding and waiting for every command.
//!
//! Threads issue synchronous one-page requests. A request waits in one FIFO queue; when a
//! channel is free, the oldest waiting request's thread leads: its port's
//! [`SmartTargetPort::submit_group`] takes the queue's requests that have arrived (oldest
//! first, at most `members_max`) as one command, which starts on the channel at once (the
//! fixed latency once, then the pages one after another: [`PageTransfer`]); the leader
//! waits as its port decides ([`smartcon_engine::smartport::GroupCall::wait`], on the
//! command's page status on the virtual clock) and runs each member's post-I/O work
//! (`post_ns` of its CPU), releasing the member's thread. Serialized: one wait for the whole
//! command, then every member's work; pipelined: a wait for each member's page (the first
//! from submission, the next ones from the last seen), its work as soon as it is done. The
//! channel is free again when the leader has finished; a released thread submits its next
//! request at its release.
//!
//! What it checks ([`GroupChecks`]): every request submitted is released once; no release
//! before the model's instant of its page; the device's in-flight counters back at zero
//! after every command, with no leave that found fewer than it removed; no clock moving
//! backwards.
//!
//! As [`super::run_cell`]: each command runs to its end once submitted, in the order of the
//! submissions; the commands on other channels that are not yet seen done are the decision's
//! backlog ahead. Not modelled: the hand-over of leadership and the leader's bounded turn
//! (every dispatch has its own leader, the oldest waiting request's thread), the followers'
//! wake-up cost (they are released at the leader's instant), a poll's channel cost.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use smartcon_devemu::pages::PageTransfer;
use smartcon_devemu::{EmuSpec, Op};
use smartcon_engine::clock::{Clock, Sleeper};
use smartcon_engine::decision::{DeviceState, Reason, Strategy};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::smartport::{GroupWait, SmartPort, SmartPortOptions};
use smartcon_engine::target::InFlight;
use smartcon_engine::wait::{Pending, PollParams, Status};

use super::{SimConfig, SimRng, VirtualTime, CLOCK_READ_NS};
use crate::emu::model_profile;

/// The page of page-unit completion (the merge device's).
pub const PAGE_BYTES: u64 = 4096;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct GroupJob {
    pub op: Op,
    pub threads: u32,
    /// The largest command, in requests (one page each).
    pub members_max: u32,
    pub pipelined: bool,
    pub strategy: StrategyChoice,
    pub poll: PollParams,
    pub spin_budget_ns: u64,
    /// The leader's CPU per released request (copy-out, verification, wake-up).
    pub post_ns: u64,
    /// Requests submitted in all (then the threads stop).
    pub requests: u64,
}

/// What the run checked of itself; [`GroupChecks::violations`] must be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupChecks {
    pub submitted: u64,
    pub released: u64,
    /// Releases before the model's instant of the member's page.
    pub early: u64,
    /// Commands after which the device's in-flight counters were not back at zero.
    pub inflight_leaks: u64,
    /// Leaves that found fewer requests or bytes in flight than they removed.
    pub unmatched_leaves: u64,
    /// A thread's clock, or the order of the submissions, moving backwards.
    pub backwards: u64,
    /// Calls whose release count did not match their members ([`GroupCall::finish`]'s error).
    ///
    /// [`GroupCall::finish`]: smartcon_engine::smartport::GroupCall::finish
    pub unfinished: u64,
}

impl GroupChecks {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.submitted != self.released {
            v.push(format!("{} requests submitted, {} released", self.submitted, self.released));
        }
        for (n, what) in [
            (self.early, "requests released before the model's instant"),
            (self.inflight_leaks, "commands left the in-flight counters off zero"),
            (self.unmatched_leaves, "leaves found fewer in flight than they removed"),
            (self.backwards, "moves of a clock backwards"),
            (self.unfinished, "commands finished with members not released once"),
        ] {
            if n > 0 {
                v.push(format!("{n} {what}"));
            }
        }
        v
    }
}

/// A run's figures: the same seed gives the same record, byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupRecord {
    pub strategy: &'static str,
    pub commands: u64,
    pub requests: u64,
    pub members_mean: f64,
    /// Commands by the way their leader waited, and by the decision's reason.
    pub by_strategy: BTreeMap<&'static str, u64>,
    pub by_reason: BTreeMap<&'static str, u64>,
    /// Per request, from its submission to its release.
    pub latency_ns_mean: f64,
    /// Per request, its release minus the model's instant of its page.
    pub release_late_ns_mean: f64,
    /// The leaders' CPU, user and system, over all threads.
    pub cpu_ns: u64,
    pub end_ns: u64,
    /// FNV-1a over every release (thread, instant) in order: any change of any instant shows.
    pub release_digest: u64,
}

/// One simulated run.
#[derive(Debug)]
pub struct GroupRun {
    pub record: GroupRecord,
    pub checks: GroupChecks,
}

/// A command in service as the leader sees it on the virtual clock.
struct SimPages<'t> {
    time: &'t VirtualTime,
    transfer: PageTransfer,
    want: u32,
    acked: u32,
}

impl Status for SimPages<'_> {
    fn now_ns(&self) -> u64 {
        self.time.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        let now = self.time.now_ns();
        self.acked = self.transfer.acked(now);
        // A poll reads the status and the clock: it takes a clock read's time.
        self.time.spin_until(now + CLOCK_READ_NS);
        Ok(self.acked >= self.want)
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.time.sleep_until(at_ns);
        Ok(())
    }

    fn spin_until(&mut self, at_ns: u64) {
        self.time.spin_until(at_ns);
    }

    fn block(&mut self) -> Result<(), Error> {
        while self.acked < self.want {
            self.time.block_until(self.transfer.page_done_ns(self.want - 1));
            self.acked = self.transfer.acked(self.time.now_ns());
        }
        Ok(())
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        self.time.thread_cpu_ns()
    }
}

fn fnv(h: &mut u64, x: u64) {
    for b in x.to_le_bytes() {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Runs `job` on the emulated device `spec` (its channels; its pages of [`PAGE_BYTES`]) on
/// the simulated machine `cfg`.
pub fn run_group_cell(spec: &EmuSpec, job: &GroupJob, cfg: &SimConfig) -> Result<GroupRun, Error> {
    cfg.validate()?;
    if job.threads == 0 || job.members_max == 0 || job.requests == 0 {
        return Err(Error::new(
            ErrorKind::Usage,
            "a group cell needs threads, requests and commands of a request or more",
        ));
    }
    let threads = job.threads as usize;
    let mut rng = SimRng::new(cfg.seed ^ 0x6a09_e667_f3bc_c909);
    let time = Arc::new(VirtualTime::new(cfg, job.threads, SimRng::new(rng.next_u64())));
    let profile = model_profile(spec, Some(&cfg.host_wait_cost()), cfg.cores);
    let crunchers_pct = (cfg.crunchers.min(cfg.cores) * 100 / cfg.cores).min(100);
    let monitor = Arc::new(SystemMonitor::fixed(crunchers_pct.max(cfg.host.background_busy_pct.round() as u32)));
    let device = Arc::new(InFlight::default());
    let mut ports = Vec::with_capacity(threads);
    for i in 0..threads {
        time.switch_to(i, 0);
        let options = SmartPortOptions {
            strategy: job.strategy,
            spin_budget_ns: job.spin_budget_ns,
            poll: job.poll,
            profile: Some(profile.clone()),
            monitor: Some(monitor.clone()),
            time: Some(time.clone()),
            ..Default::default()
        };
        ports.push(SmartPort::for_group(&spec.label, device.clone(), None, options)?);
    }
    let timing = *spec.model.timing(job.op);
    let overhead_ns = cfg.host.spin_overhead_ns as u64;
    let mut checks = GroupChecks::default();
    let mut ready: BinaryHeap<Reverse<(u64, usize)>> =
        (0..threads.min(job.requests as usize)).map(|i| Reverse((0, i))).collect();
    let mut issued = ready.len() as u64;
    let mut queue: VecDeque<(usize, u64)> = VecDeque::new();
    let mut free_at = vec![0u64; spec.model.channels.max(1) as usize];
    // Commands not yet seen done: (seen instant, requests, bytes).
    let mut active: BinaryHeap<Reverse<(u64, u32, u64)>> = BinaryHeap::new();
    let (mut commands, mut latency_sum, mut late_sum, mut digest) = (0u64, 0u128, 0u128, 0xcbf2_9ce4_8422_2325u64);
    let mut last_dispatch = 0u64;
    let mut end_ns = 0u64;
    loop {
        let channel = (0..free_at.len()).min_by_key(|&c| (free_at[c], c)).expect("a channel");
        let dispatch_at = queue.front().map(|&(_, arrival)| arrival.max(free_at[channel]));
        let arrival = ready.peek().map(|Reverse((at, _))| *at);
        match (arrival, dispatch_at) {
            (Some(a), d) if d.is_none_or(|d| a <= d) => {
                let Reverse((at, i)) = ready.pop().expect("peeked");
                queue.push_back((i, at));
                checks.submitted += 1;
            }
            (_, Some(at)) => {
                if at < last_dispatch {
                    checks.backwards += 1;
                }
                last_dispatch = at;
                let mut members = Vec::with_capacity(job.members_max as usize);
                while members.len() < job.members_max as usize && queue.front().is_some_and(|&(_, a)| a <= at) {
                    members.push(queue.pop_front().expect("looked"));
                }
                let leader = members[0].0;
                let n = members.len() as u32;
                while active.peek().is_some_and(|Reverse((seen, ..))| *seen <= at) {
                    active.pop();
                }
                let (others, others_bytes) =
                    active.iter().fold((0u32, 0u64), |(c, b), Reverse((_, k, by))| (c + k, b + by));
                device.set_others(others, others_bytes);
                time.switch_to(leader, at);
                let port = &mut ports[leader];
                let mut call = port.submit_group(job.op, n, n as u64 * PAGE_BYTES)?;
                let submit = time.now_ns();
                let mut status = SimPages {
                    time: &time,
                    transfer: PageTransfer::new(submit, &timing, PAGE_BYTES, n),
                    want: n,
                    acked: 0,
                };
                let mut releases = Vec::with_capacity(members.len());
                if !job.pipelined {
                    let ahead = DeviceState { inflight_count: n - 1, inflight_bytes: (n as u64 - 1) * PAGE_BYTES };
                    let pending = Pending { op: job.op, bytes: PAGE_BYTES, ahead, submit_ns: submit };
                    call.wait(&pending, &mut status, GroupWait::FromSubmission)?;
                    for k in 0..n {
                        time.busy(job.post_ns);
                        call.release(1)?;
                        releases.push((k, time.now_ns()));
                    }
                } else {
                    let mut seen_ns = submit;
                    for k in 0..n {
                        if status.acked < k + 1 {
                            status.want = k + 1;
                            let (from, from_ns) = if status.acked == 0 {
                                (GroupWait::FromSubmission, submit)
                            } else {
                                (GroupWait::FromLast, seen_ns)
                            };
                            let bytes = (k + 1 - status.acked) as u64 * PAGE_BYTES;
                            let pending =
                                Pending { op: job.op, bytes, ahead: DeviceState::default(), submit_ns: from_ns };
                            call.wait(&pending, &mut status, from)?;
                            seen_ns = time.now_ns();
                        }
                        time.busy(job.post_ns);
                        call.release(1)?;
                        releases.push((k, time.now_ns()));
                    }
                }
                if call.finish().is_err() {
                    checks.unfinished += 1;
                }
                checks.inflight_leaks += u64::from(device.ours() != 0);
                let done = time.now_ns();
                if done < at {
                    checks.backwards += 1;
                }
                free_at[channel] = done;
                active.push(Reverse((done, n, n as u64 * PAGE_BYTES)));
                commands += 1;
                for (k, released_ns) in releases {
                    let (thread, arrived) = members[k as usize];
                    let model_ns = status.transfer.page_done_ns(k);
                    checks.early += u64::from(released_ns < model_ns);
                    checks.released += 1;
                    latency_sum += (released_ns - arrived) as u128;
                    late_sum += released_ns.saturating_sub(model_ns) as u128;
                    fnv(&mut digest, thread as u64);
                    fnv(&mut digest, released_ns);
                    end_ns = end_ns.max(released_ns);
                    if issued < job.requests {
                        issued += 1;
                        ready.push(Reverse((released_ns + overhead_ns, thread)));
                    }
                }
            }
            _ => break,
        }
    }
    checks.unmatched_leaves = device.unmatched_leaves();
    checks.backwards += time.backwards();
    let mut by_strategy = BTreeMap::new();
    let mut by_reason = BTreeMap::new();
    let mut cpu_ns = 0;
    for (i, port) in ports.iter().enumerate() {
        let c = port.counters();
        for s in Strategy::ALL {
            if c.by_strategy[s.index()] > 0 {
                *by_strategy.entry(s.name()).or_insert(0) += c.by_strategy[s.index()];
            }
        }
        for r in Reason::ALL {
            if c.by_reason[r.index()] > 0 {
                *by_reason.entry(r.name()).or_insert(0) += c.by_reason[r.index()];
            }
        }
        let u = time.usage(i);
        cpu_ns += u.user_ns + u.sys_ns;
    }
    let requests = checks.released;
    Ok(GroupRun {
        record: GroupRecord {
            strategy: job.strategy.name(),
            commands,
            requests,
            members_mean: requests as f64 / commands.max(1) as f64,
            by_strategy,
            by_reason,
            latency_ns_mean: latency_sum as f64 / requests.max(1) as f64,
            release_late_ns_mean: late_sum as f64 / requests.max(1) as f64,
            cpu_ns,
            end_ns,
            release_digest: digest,
        },
        checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_engine::host::{HostModel, PRESETS};

    fn job(strategy: &str, threads: u32, pipelined: bool) -> GroupJob {
        GroupJob {
            op: Op::Read,
            threads,
            members_max: 32,
            pipelined,
            strategy: StrategyChoice::parse(strategy).unwrap(),
            poll: PollParams { sampling_ns: 200_000, ..PollParams::DEFAULT },
            spin_budget_ns: smartcon_engine::job::SPIN_BUDGET_NS_DEFAULT,
            post_ns: 500,
            requests: 4_000,
        }
    }

    fn spec(text: &str) -> EmuSpec {
        smartcon_devemu::parse_spec(text).unwrap()
    }

    #[test]
    fn the_same_seed_gives_the_same_group_run_and_its_invariants_hold() {
        let cfg = SimConfig::new(11, HostModel::preset("host-c").unwrap());
        for s in ["block", "spin", "sync", "poll", "hybrid", "smart", "dip"] {
            for pipelined in [false, true] {
                let j = job(s, 16, pipelined);
                let a = run_group_cell(&spec("emu:optane,channels=1"), &j, &cfg).unwrap();
                let b = run_group_cell(&spec("emu:optane,channels=1"), &j, &cfg).unwrap();
                assert_eq!(a.checks.violations(), Vec::<String>::new(), "{s} pipelined={pipelined}");
                assert_eq!(a.checks.released, 4_000, "{s}");
                let (ja, jb) = (serde_json::to_string(&a.record).unwrap(), serde_json::to_string(&b.record).unwrap());
                assert_eq!(ja, jb, "{s} pipelined={pipelined}: the same seed, the same run");
                assert!(a.record.members_mean > 1.0, "{s}: 16 threads on one channel merge: {ja}");
                assert_eq!(a.record.by_strategy.values().sum::<u64>(), a.record.commands, "{s}: {ja}");
                if s == "block" || s == "hybrid" {
                    // Their waits draw from the seed's wake-ups: another seed, another run.
                    let c = run_group_cell(&spec("emu:optane,channels=1"), &j, &SimConfig { seed: 12, ..cfg.clone() })
                        .unwrap();
                    assert_ne!(a.record.release_digest, c.record.release_digest, "{s}");
                }
            }
        }
    }

    /// Hybrid in a group call measures its sleeps on the simulated thread's CPU clock,
    /// which the command's status passes through from the virtual time.
    #[test]
    fn the_command_status_reads_the_simulated_thread_cpu_clock() {
        let cfg = SimConfig::new(3, HostModel::preset("host-a").unwrap());
        let time = VirtualTime::new(&cfg, 1, SimRng::new(1));
        let timing = *spec("emu:optane,channels=1").model.timing(Op::Read);
        let status =
            SimPages { time: &time, transfer: PageTransfer::new(0, &timing, PAGE_BYTES, 1), want: 1, acked: 0 };
        assert_eq!(status.thread_cpu_ns(), time.thread_cpu_ns());
        assert!(status.thread_cpu_ns().is_some());
    }

    #[test]
    fn the_leader_waits_as_its_strategy_says() {
        let cfg = SimConfig::new(3, HostModel::preset("host-a").unwrap());
        let run = |s: &str| run_group_cell(&spec("emu:optane,channels=1"), &job(s, 1, false), &cfg).unwrap().record;
        let (spin, block) = (run("spin"), run("block"));
        // One thread, one request a command: spin sees each page within a few clock reads
        // of the model's instant; block pays the host's wake-up after it.
        assert!(spin.release_late_ns_mean < 4.0 * CLOCK_READ_NS as f64 + 500.0, "{spin:?}");
        assert!(block.release_late_ns_mean > spin.release_late_ns_mean + 1_000.0, "{block:?} vs {spin:?}");
        assert_eq!(spin.by_strategy.get("spin"), Some(&spin.commands));
        assert_eq!(block.by_strategy.get("block"), Some(&block.commands));
    }

    #[test]
    fn random_groups_on_every_host_lose_no_request_and_release_none_early() {
        let mut rng = SimRng::new(0x5eed);
        let strategies = ["block", "spin", "sync", "poll", "hybrid", "smart", "smart-hybrid", "dip", "half-mean"];
        let devices = ["emu:optane", "emu:nvme", "emu:optane,channels=1", "emu:sata-ssd,channels=2", "emu:nvram"];
        for case in 0..300u64 {
            let host = PRESETS[(rng.next_u64() % PRESETS.len() as u64) as usize];
            let cfg = SimConfig {
                crunchers: (rng.next_u64() % 3) as u32,
                ..SimConfig::new(case, HostModel::preset(host).unwrap())
            };
            let s = strategies[(rng.next_u64() % strategies.len() as u64) as usize];
            let d = devices[(rng.next_u64() % devices.len() as u64) as usize];
            let j = GroupJob {
                op: if rng.next_u64().is_multiple_of(2) { Op::Read } else { Op::Write },
                threads: 1 + (rng.next_u64() % 16) as u32,
                members_max: 1 + (rng.next_u64() % 32) as u32,
                pipelined: rng.next_u64().is_multiple_of(2),
                post_ns: rng.next_u64() % 2_000,
                requests: 50 + rng.next_u64() % 400,
                ..job(s, 1, false)
            };
            let r = run_group_cell(&spec(d), &j, &cfg).unwrap();
            assert_eq!(r.checks.violations(), Vec::<String>::new(), "case {case}: {s} on {d}, {j:?}");
            assert_eq!(r.checks.released, j.requests, "case {case}: every request, exactly");
        }
    }
}
