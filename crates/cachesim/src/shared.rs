//! Cores sharing one LLC: per-sharer CS-miss estimation (seeds/003 Sec. III-A and Fig. 9,
//! "2 cores share a 4 MB cache").
//!
//! Each core has its own Table II L1 I, L1 D and L2 (LRU, never flushed) and runs one task,
//! its sharer; the cores' accesses reach one LLC in the order of their clocks (the core
//! whose clock is behind goes next, a few records at a time). Every LLC line carries an
//! owner tag, the core whose task filled it: a lookup matches the tag *and* the owner (the
//! tasks have separate address spaces), and a context switch on a core invalidates that
//! core's lines only. The paper's results are "for the case when the ways are equally
//! partitioned among the sharers and the LRU replacement policy is employed within each
//! partition" ([`Partition::Ways`]); [`Partition::Global`] is one LRU over all ways, where
//! the sharers take lines from each other on demand.
//!
//! Estimation follows Sec. III-A: one ATD, whatever the number of sharers (one valid bit per
//! way of each sampled set), and a CS-MISS-CNT per sharer chosen by the owner tag of the MTD
//! line that hit. Switching a sharer in clears the ATD bits of the ways that sharer owns in
//! the MTD and its counters. The MTD is a second, never-flushed shared LLC of the same
//! geometry and partition fed the same stream; the ground truth stamps every MTD line with
//! its owner's schedule number, as in [`crate::estimator`].
//!
//! Both cores slice uniformly with the same slice (2.5 ms by default) and switch at the same
//! moments (to within one record); their co-runners are not simulated, as in the private
//! study: a switch is the invalidation of the sharer's lines. LRU only (the paper's
//! configuration for Fig. 9).

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::cache::{Cache, CacheStats};
use crate::estimator::{Estimate, SampledAtd};
use crate::geometry::Geometry;
use crate::hierarchy::{HierarchyConfig, Timing};
use crate::policy::Lru;
use crate::sched::{run_parallel, Schedule, TaskRun, TaskSpec, BASE_SLICE_CYCLES, SCHEDULES_MAX};
use crate::source::RecordSource;
use crate::trace::{AccessKind, Record};
use crate::{Error, ErrorKind, Result};

/// The most sharers of one LLC (the owner tag is a byte; the ways are split evenly).
pub const SHARERS_MAX: usize = 8;

/// How the sharers divide the LLC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Partition {
    /// Each sharer gets ways/sharers ways of every set, LRU within them (the paper's).
    Ways,
    /// One LRU over all ways: lines go to whichever sharer needs them.
    Global,
}

impl Partition {
    pub const ALL: [Partition; 2] = [Partition::Ways, Partition::Global];

    pub fn name(self) -> &'static str {
        match self {
            Partition::Ways => "ways",
            Partition::Global => "global",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Partition::ALL.into_iter().find(|p| p.name() == text)
    }
}

/// Where a shared-LLC access landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedOutcome {
    pub hit: bool,
    pub set: usize,
    pub way: usize,
}

/// One LRU LLC shared by `sharers` cores, with an owner tag per line.
pub struct SharedLlc {
    geometry: Geometry,
    ways: usize,
    set_mask: u64,
    sharers: usize,
    partition: Partition,
    /// `block + 1`, 0 for an invalid line.
    tags: Vec<u64>,
    owners: Vec<u8>,
    stamps: Vec<u64>,
    clock: u64,
    /// Per sharer.
    pub stats: Vec<CacheStats>,
}

impl SharedLlc {
    pub fn new(geometry: Geometry, sharers: usize, partition: Partition) -> Result<Self> {
        let ways = geometry.ways as usize;
        if sharers == 0 || sharers > SHARERS_MAX {
            return Err(Error::new(ErrorKind::Usage, format!("{sharers} sharers: 1 to {SHARERS_MAX} share an LLC")));
        }
        if partition == Partition::Ways && !ways.is_multiple_of(sharers) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("{ways} ways cannot be split evenly among {sharers} sharers"),
            ));
        }
        let mut tags = Vec::new();
        tags.try_reserve_exact(geometry.lines())
            .map_err(|e| Error::new(ErrorKind::Usage, format!("cannot allocate a shared cache of {geometry}: {e}")))?;
        tags.resize(geometry.lines(), 0);
        Ok(SharedLlc {
            geometry,
            ways,
            set_mask: geometry.sets() as u64 - 1,
            sharers,
            partition,
            tags,
            owners: vec![0; geometry.lines()],
            stamps: vec![0; geometry.lines()],
            clock: 0,
            stats: vec![CacheStats::default(); sharers],
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The ways `sharer` may hold lines in.
    #[inline]
    pub fn ways_of(&self, sharer: usize) -> std::ops::Range<usize> {
        match self.partition {
            Partition::Ways => {
                let share = self.ways / self.sharers;
                sharer * share..(sharer + 1) * share
            }
            Partition::Global => 0..self.ways,
        }
    }

    /// Looks up `block` of `sharer`, filling it (LRU within the sharer's ways) on a miss.
    #[inline]
    pub fn access(&mut self, sharer: usize, block: u64) -> SharedOutcome {
        let set = (block & self.set_mask) as usize;
        let base = set * self.ways;
        let tag = block + 1;
        let owner = sharer as u8;
        let ways = self.ways_of(sharer);
        self.clock += 1;
        let stats = &mut self.stats[sharer];
        stats.accesses += 1;
        for way in ways.clone() {
            let i = base + way;
            if self.tags[i] == tag && self.owners[i] == owner {
                stats.hits += 1;
                self.stamps[i] = self.clock;
                return SharedOutcome { hit: true, set, way };
            }
        }
        stats.misses += 1;
        // An invalid way first, else the least recently used of the sharer's ways.
        let way = ways
            .clone()
            .find(|&w| self.tags[base + w] == 0)
            .unwrap_or_else(|| ways.min_by_key(|&w| self.stamps[base + w]).expect("at least one way"));
        let i = base + way;
        self.tags[i] = tag;
        self.owners[i] = owner;
        self.stamps[i] = self.clock;
        SharedOutcome { hit: false, set, way }
    }

    /// The owner of a valid line, `None` for an invalid one.
    #[inline]
    pub fn owner_at(&self, set: usize, way: usize) -> Option<usize> {
        let i = set * self.ways + way;
        (self.tags[i] != 0).then_some(self.owners[i] as usize)
    }

    /// Invalidates every line of `sharer` (a context switch on its core).
    pub fn flush_owner(&mut self, sharer: usize) {
        let owner = sharer as u8;
        for (tag, o) in self.tags.iter_mut().zip(&self.owners) {
            if *o == owner {
                *tag = 0;
            }
        }
    }

    /// Valid lines owned by `sharer`.
    pub fn valid_lines_of(&self, sharer: usize) -> usize {
        self.tags.iter().zip(&self.owners).filter(|(t, o)| **t != 0 && **o as usize == sharer).count()
    }

    /// Whether `sharer` holds `block`, without touching LRU state or counts.
    pub fn contains(&self, sharer: usize, block: u64) -> bool {
        let base = (block & self.set_mask) as usize * self.ways;
        (0..self.ways).any(|w| self.tags[base + w] == block + 1 && self.owners[base + w] as usize == sharer)
    }
}

/// Algorithm 1 with one ATD for all sharers (the private study's sampling rule,
/// [`SampledAtd`]) and one CS-MISS-CNT (two halves) per sharer.
pub struct SharedAtd {
    atd: SampledAtd,
    counts: Vec<[u64; 2]>,
}

impl SharedAtd {
    pub fn new(sets: usize, ways: u32, sample_shift: u32, sharers: usize) -> Result<Self> {
        Ok(SharedAtd { atd: SampledAtd::new(sets, ways, sample_shift)?, counts: vec![[0; 2]; sharers] })
    }

    /// `sharer` is switched in: the ATD bits of the MTD ways it owns, and its counters, clear.
    pub fn switch_in(&mut self, sharer: usize, mtd: &SharedLlc) {
        self.atd.clear_where(|set, way| mtd.owner_at(set, way) == Some(sharer));
        self.counts[sharer] = [0; 2];
    }

    /// An MTD access of `sharer` landed in `way` of `set`.
    #[inline]
    pub fn on_access(&mut self, sharer: usize, set: usize, way: usize, mtd_hit: bool) {
        // A hit means the line's owner tag is `sharer`: a CS miss is its counter's.
        if let Some(half) = self.atd.on_access(set, way, mtd_hit) {
            self.counts[sharer][half] += 1;
        }
    }

    /// The estimate of `sharer` since its switch-in.
    pub fn estimate(&self, sharer: usize) -> Estimate {
        Estimate::of(self.counts[sharer], self.atd.sample_shift())
    }
}

/// Exact CS misses per sharer: every MTD line stamped with its owner's schedule number.
pub struct SharedTruth {
    ways: usize,
    stamps: Vec<u32>,
    schedule: Vec<u32>,
    cs_misses: Vec<u64>,
}

impl SharedTruth {
    pub fn new(sets: usize, ways: u32, sharers: usize) -> Self {
        SharedTruth {
            ways: ways as usize,
            stamps: vec![0; sets * ways as usize],
            schedule: vec![0; sharers],
            cs_misses: vec![0; sharers],
        }
    }

    pub fn switch_in(&mut self, sharer: usize) {
        self.schedule[sharer] += 1;
        self.cs_misses[sharer] = 0;
    }

    #[inline]
    pub fn on_access(&mut self, sharer: usize, set: usize, way: usize, mtd_hit: bool) {
        let stamp = &mut self.stamps[set * self.ways + way];
        if mtd_hit && *stamp != self.schedule[sharer] {
            self.cs_misses[sharer] += 1;
        }
        *stamp = self.schedule[sharer];
    }

    pub fn cs_misses(&self, sharer: usize) -> u64 {
        self.cs_misses[sharer]
    }
}

/// A core's private levels and clock.
struct Core {
    l1i: Cache<Lru>,
    l1d: Cache<Lru>,
    l2: Option<Cache<Lru>>,
    records: u64,
    instructions: u64,
    cycles: u64,
}

/// The shared LLC, its MTD, the ATD and the ground truth.
struct SharedLevel {
    llc: SharedLlc,
    mtd: SharedLlc,
    atd: SharedAtd,
    truth: SharedTruth,
    timing: Timing,
}

impl SharedLevel {
    /// One line of `sharer` that missed its L2; returns the stall.
    #[inline]
    fn access(&mut self, sharer: usize, block: u64) -> u64 {
        let hit = self.llc.access(sharer, block).hit;
        let o = self.mtd.access(sharer, block);
        self.atd.on_access(sharer, o.set, o.way, o.hit);
        self.truth.on_access(sharer, o.set, o.way, o.hit);
        if hit {
            self.timing.llc_hit_cycles
        } else {
            self.timing.memory_cycles
        }
    }

    fn switch_in(&mut self, sharer: usize) {
        self.llc.flush_owner(sharer);
        self.atd.switch_in(sharer, &self.mtd);
        self.truth.switch_in(sharer);
    }
}

impl Core {
    fn new(config: &HierarchyConfig) -> Result<Self> {
        Ok(Core {
            l1i: Cache::try_new(config.l1i)?,
            l1d: Cache::try_new(config.l1d)?,
            l2: config.l2.map(Cache::try_new).transpose()?,
            records: 0,
            instructions: 0,
            cycles: 0,
        })
    }

    /// One record through the private levels and, on an L2 miss, the shared one.
    #[inline]
    fn access(&mut self, sharer: usize, shared: &mut SharedLevel, line_shift: u32, r: &Record) {
        self.records += 1;
        let fetch = r.kind == AccessKind::Fetch;
        if fetch {
            self.instructions += 1;
            self.cycles += 1;
        }
        let first = r.addr >> line_shift;
        let last = r.addr.wrapping_add(u64::from(r.size_bytes.max(1)) - 1) >> line_shift;
        self.cycles += self.line(sharer, shared, first, r.pc, fetch);
        if last != first {
            self.cycles += self.line(sharer, shared, last, r.pc, fetch);
        }
    }

    #[inline]
    fn line(&mut self, sharer: usize, shared: &mut SharedLevel, block: u64, pc: u64, fetch: bool) -> u64 {
        let l1 = if fetch { &mut self.l1i } else { &mut self.l1d };
        if l1.access(block, pc).hit {
            return 0;
        }
        if let Some(l2) = self.l2.as_mut() {
            if l2.access(block, pc).hit {
                return shared.timing.l2_hit_cycles;
            }
        }
        shared.access(sharer, block)
    }
}

/// Parameters of one shared-LLC run.
#[derive(Debug, Clone)]
pub struct SharedConfig {
    /// Table II for the private levels; `llc` is the shared cache.
    pub hierarchy: HierarchyConfig,
    pub partition: Partition,
    /// Per sharer.
    pub instructions: u64,
    pub slice_cycles: u64,
    pub sample_shift: u32,
}

/// Records a core runs before the clocks are compared again.
const INTERLEAVE_RECORDS: usize = 16;

/// Per-core state of a run.
struct Lane {
    core: Core,
    source: RecordSource,
    batch: Vec<Record>,
    done: bool,
    slice_end: u64,
    start: (u64, u64),
    /// Flushed-LLC and MTD misses at switch-in.
    misses_at_start: (u64, u64),
    schedules: Vec<Schedule>,
}

/// Runs one task per core on the shared LLC until every task has its instructions (or its
/// trace ended); each sharer's run is a [`TaskRun`], as a task's of the private study. `stop` ends it early (the run is then partial).
pub fn run_shared(tasks: &[TaskSpec], config: &SharedConfig, stop: &AtomicBool) -> Result<Vec<TaskRun>> {
    let n = tasks.len();
    let g = config.hierarchy.llc;
    config.hierarchy.validate()?;
    let mut shared = SharedLevel {
        llc: SharedLlc::new(g, n, config.partition)?,
        mtd: SharedLlc::new(g, n, config.partition)?,
        atd: SharedAtd::new(g.sets(), g.ways, config.sample_shift, n)?,
        truth: SharedTruth::new(g.sets(), g.ways, n),
        timing: config.hierarchy.timing,
    };
    let line_shift = g.line_shift();
    let mut lanes = tasks
        .iter()
        .map(|t| {
            Ok(Lane {
                core: Core::new(&config.hierarchy)?,
                source: RecordSource::open(&t.source)?,
                batch: Vec::with_capacity(64),
                done: false,
                slice_end: 0,
                start: (0, 0),
                misses_at_start: (0, 0),
                schedules: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    for (sharer, lane) in lanes.iter_mut().enumerate() {
        shared.switch_in(sharer);
        lane.slice_end = config.slice_cycles;
    }
    let mut steps = 0u64;
    // The core whose clock is furthest behind goes next.
    while let Some(sharer) = (0..n).filter(|&i| !lanes[i].done).min_by_key(|&i| lanes[i].core.cycles) {
        steps += 1;
        if steps.is_multiple_of(1 << 14) && stop.load(Ordering::Relaxed) {
            break;
        }
        let lane = &mut lanes[sharer];
        if lane.batch.is_empty() {
            lane.source.fill(&mut lane.batch, 64)?;
        }
        let mut ended = lane.batch.is_empty();
        let mut used = 0;
        let mut slice_over = false;
        for r in lane.batch.iter().take(INTERLEAVE_RECORDS) {
            lane.core.access(sharer, &mut shared, line_shift, r);
            used += 1;
            if lane.core.instructions >= config.instructions {
                ended = true;
                break;
            }
            if lane.core.cycles >= lane.slice_end {
                slice_over = true;
                break;
            }
        }
        lane.batch.drain(..used);
        if slice_over || ended {
            close_schedule(lane, sharer, &shared, config.slice_cycles);
            if lane.schedules.len() >= SCHEDULES_MAX {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("task {} needs more than {SCHEDULES_MAX} schedules", tasks[sharer].name),
                ));
            }
        }
        if ended {
            lane.done = true;
        } else if slice_over {
            shared.switch_in(sharer);
            lane.slice_end = lane.core.cycles + config.slice_cycles;
            lane.start = (lane.core.cycles, lane.core.instructions);
            lane.misses_at_start = (shared.llc.stats[sharer].misses, shared.mtd.stats[sharer].misses);
        }
    }
    Ok(lanes
        .into_iter()
        .zip(tasks)
        .enumerate()
        .map(|(sharer, (lane, t))| TaskRun {
            task: t.name.clone(),
            records: lane.core.records,
            instructions: lane.core.instructions,
            cycles: lane.core.cycles,
            llc_accesses: shared.llc.stats[sharer].accesses,
            llc_misses: shared.llc.stats[sharer].misses,
            schedules: lane.schedules,
        })
        .collect())
}

/// Ends the lane's current schedule (nothing if it ran no instruction).
fn close_schedule(lane: &mut Lane, sharer: usize, shared: &SharedLevel, slice_cycles: u64) {
    let instructions = lane.core.instructions - lane.start.1;
    if instructions == 0 && lane.core.cycles == lane.start.0 {
        return;
    }
    let estimate = shared.atd.estimate(sharer);
    let flushed = shared.llc.stats[sharer].misses - lane.misses_at_start.0;
    let mtd = shared.mtd.stats[sharer].misses - lane.misses_at_start.1;
    lane.schedules.push(Schedule {
        slice_cycles,
        cycles: lane.core.cycles - lane.start.0,
        instructions,
        cs_misses_estimated: estimate.cs_misses,
        cs_misses_exact: shared.truth.cs_misses(sharer),
        cs_misses_excess: flushed as i64 - mtd as i64,
        divergence: estimate.divergence,
        estimate_ignored: !estimate.trusted(),
    });
}

/// One sharer of the Fig. 9 study.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SharedRecord {
    pub r#type: &'static str,
    pub partition: &'static str,
    pub group: usize,
    pub sharer: usize,
    pub task: String,
    /// The other tasks on the same LLC.
    pub sharing_with: Vec<String>,
    pub llc_size_bytes: u64,
    pub llc_ways: u32,
    pub slice_ms: f64,
    pub records: u64,
    pub instructions: u64,
    pub ipc: f64,
    pub schedules: usize,
    pub llc_misses: u64,
    pub cs_misses_exact: u64,
    pub cs_misses_estimated: u64,
    pub cs_misses_excess: i64,
    pub cs_misses_exact_per_schedule: f64,
    pub divergent_schedules: usize,
    pub estimation_error_pct: Option<f64>,
}

/// The closing figures of one partition.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SharedSummaryRecord {
    pub r#type: &'static str,
    pub partition: &'static str,
    pub llc_size_bytes: u64,
    pub sharers: usize,
    pub estimation_error_pct_mean: Option<f64>,
    pub estimation_error_pct_max: Option<f64>,
    pub estimation_sharers: usize,
    pub sharers_within_5pct: usize,
    pub wall_ns: u64,
}

/// The Fig. 9 study: groups of tasks, each group on one shared LLC, per partition.
#[derive(Debug, Clone)]
pub struct SharedPlan {
    /// Each group shares one LLC (two tasks for the paper's two cores).
    pub groups: Vec<Vec<TaskSpec>>,
    pub partitions: Vec<Partition>,
    pub llc_size_bytes: u64,
    pub instructions: u64,
    pub slice_cycles: u64,
    pub sample_shift: u32,
    pub threads: usize,
}

impl SharedPlan {
    /// The paper's four pairs over the private study's eight tasks, each task a sharer once.
    pub fn default_groups() -> Vec<Vec<TaskSpec>> {
        let suite = TaskSpec::default_suite();
        let by = |name: &str| suite.iter().find(|t| t.name == name).expect("in the suite").clone();
        [("loop:1m", "hotcold:4m"), ("loop:1536k", "random:1m"), ("loop:512k", "phased:1m"), ("stream", "loop:128k")]
            .iter()
            .map(|(a, b)| vec![by(a), by(b)])
            .collect()
    }

    /// Checks the whole plan and returns one run's configuration (partition to be set).
    pub fn config(&self) -> Result<SharedConfig> {
        let mut hierarchy = HierarchyConfig::table_ii();
        hierarchy.llc = hierarchy.llc.with_size(self.llc_size_bytes).map_err(crate::ets::llc)?;
        let parameter = |d: String| Error::new(ErrorKind::Usage, d);
        if self.threads == 0 {
            return Err(parameter("--threads must be at least 1".into()));
        }
        if self.groups.is_empty() || self.partitions.is_empty() {
            return Err(parameter("nothing to run: no task group or no partition".into()));
        }
        if let Some(g) = self.groups.iter().find(|g| g.len() < 2 || g.len() > SHARERS_MAX) {
            return Err(parameter(format!(
                "a shared LLC takes 2 to {SHARERS_MAX} tasks; got {} ({})",
                g.len(),
                g.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join("+")
            )));
        }
        if self.instructions < crate::ets::INSTRUCTIONS_MIN {
            return Err(parameter(format!("--instructions {} is below the 1M minimum", self.instructions)));
        }
        if self.slice_cycles < BASE_SLICE_CYCLES / 10 || self.slice_cycles > crate::ets::UNIFORM_SLICE_MAX_CYCLES {
            return Err(parameter("--slice must be 0.25 to 100 ms".into()));
        }
        for g in &self.groups {
            for p in &self.partitions {
                // The group sizes are checked above: what is left is the LLC's shape.
                SharedLlc::new(hierarchy.llc, g.len(), *p).map(|_| ()).map_err(crate::ets::llc)?;
            }
        }
        SharedAtd::new(hierarchy.llc.sets(), hierarchy.llc.ways, self.sample_shift, 2).map_err(|_| {
            parameter(format!("--sample-shift {} leaves fewer than two sample sets", self.sample_shift))
        })?;
        Ok(SharedConfig {
            hierarchy,
            partition: Partition::Ways,
            instructions: self.instructions,
            slice_cycles: self.slice_cycles,
            sample_shift: self.sample_shift,
        })
    }

    /// Simulations the plan runs (for a progress bar).
    pub fn runs(&self) -> usize {
        self.groups.len() * self.partitions.len()
    }
}

/// Runs the plan, partition by partition, group by group; `on_done` after each run. A set
/// `stop` is an `Interrupted` error.
pub fn run_plan(plan: &SharedPlan, stop: &AtomicBool, on_done: &(dyn Fn() + Sync)) -> Result<Vec<SharedRecord>> {
    let base = plan.config()?;
    let jobs: Vec<(Partition, usize)> =
        plan.partitions.iter().flat_map(|&p| (0..plan.groups.len()).map(move |g| (p, g))).collect();
    let run = |&(partition, g): &(Partition, usize)| {
        run_shared(&plan.groups[g], &SharedConfig { partition, ..base.clone() }, stop)
    };
    let results = run_parallel(&jobs, plan.threads, run, on_done);
    if stop.load(Ordering::Relaxed) {
        return Err(Error::new(ErrorKind::Interrupted, "interrupted; no results printed"));
    }
    let mut records = Vec::new();
    for ((partition, g), runs) in jobs.iter().zip(results) {
        let runs = runs?;
        let group = &plan.groups[*g];
        for (sharer, run) in runs.iter().enumerate() {
            records.push(SharedRecord {
                r#type: "ets_shared",
                partition: partition.name(),
                group: *g,
                sharer,
                task: run.task.clone(),
                sharing_with: group
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != sharer)
                    .map(|(_, t)| t.name.clone())
                    .collect(),
                llc_size_bytes: plan.llc_size_bytes,
                llc_ways: base.hierarchy.llc.ways,
                slice_ms: crate::sched::cycles_to_ns(plan.slice_cycles) as f64 / 1e6,
                records: run.records,
                instructions: run.instructions,
                ipc: run.ipc(),
                schedules: run.schedules.len(),
                llc_misses: run.llc_misses,
                cs_misses_exact: run.cs_misses_exact(),
                cs_misses_estimated: run.cs_misses_estimated(),
                cs_misses_excess: run.schedules.iter().map(|s| s.cs_misses_excess).sum(),
                cs_misses_exact_per_schedule: run.cs_misses_exact() as f64 / run.schedules.len().max(1) as f64,
                divergent_schedules: run.schedules.iter().filter(|s| s.estimate_ignored).count(),
                estimation_error_pct: run.estimation_error().map(|e| 100.0 * e),
            });
        }
    }
    Ok(records)
}

/// One summary per partition of the plan.
pub fn summaries(plan: &SharedPlan, records: &[SharedRecord], wall_ns: u64) -> Vec<SharedSummaryRecord> {
    plan.partitions
        .iter()
        .map(|p| {
            let mine: Vec<&SharedRecord> = records.iter().filter(|r| r.partition == p.name()).collect();
            let errors: Vec<f64> = mine.iter().filter_map(|r| r.estimation_error_pct).collect();
            SharedSummaryRecord {
                r#type: "ets_shared_summary",
                partition: p.name(),
                llc_size_bytes: plan.llc_size_bytes,
                sharers: mine.len(),
                estimation_error_pct_mean: crate::ets::mean(errors.iter().copied()),
                estimation_error_pct_max: errors.iter().copied().reduce(f64::max),
                estimation_sharers: errors.len(),
                sharers_within_5pct: errors.iter().filter(|&&e| e <= 5.0).count(),
                wall_ns,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Rng, SynthKind};

    fn small() -> Geometry {
        Geometry::new(64 << 10, 16, 64).unwrap() // 64 sets
    }

    /// The owner-tag invariants: a line belongs to the sharer that filled it and is found by
    /// that sharer only; under way partitioning a sharer's lines stay in its ways; flushing a
    /// sharer invalidates exactly its lines.
    #[test]
    fn owner_tags_separate_the_sharers() {
        for partition in Partition::ALL {
            let g = small();
            let mut c = SharedLlc::new(g, 2, partition).unwrap();
            let mut rng = Rng::new(3);
            let mut filled = [std::collections::HashSet::new(), std::collections::HashSet::new()];
            for _ in 0..20_000 {
                let sharer = rng.below(2) as usize;
                let block = rng.below(3_000);
                let o = c.access(sharer, block);
                assert_eq!(c.owner_at(o.set, o.way), Some(sharer));
                assert!(c.ways_of(sharer).contains(&o.way));
                filled[sharer].insert(block);
            }
            let mut per_owner = [0usize; 2];
            for set in 0..g.sets() {
                for way in 0..16 {
                    if let Some(owner) = c.owner_at(set, way) {
                        per_owner[owner] += 1;
                        assert!(c.ways_of(owner).contains(&way), "{partition:?}: sharer {owner}'s line in way {way}");
                    }
                }
            }
            assert_eq!(per_owner, [c.valid_lines_of(0), c.valid_lines_of(1)]);
            assert_eq!(per_owner[0] + per_owner[1], g.lines(), "full after 20,000 accesses over 3,000 blocks each");
            if partition == Partition::Ways {
                assert_eq!(per_owner, [g.lines() / 2; 2]);
            }
            // The same block number of the other sharer is another line.
            let block = (0..3_000).find(|&b| c.contains(0, b) && !c.contains(1, b)).unwrap();
            assert!(!c.access(1, block).hit);
            assert!(c.contains(0, block) || partition == Partition::Global);
            // A switch on core 1 leaves core 0's lines alone.
            let before0 = c.valid_lines_of(0);
            c.flush_owner(1);
            assert_eq!(c.valid_lines_of(1), 0);
            assert_eq!(c.valid_lines_of(0), before0);
            assert_eq!(c.stats[0].accesses + c.stats[1].accesses, 20_001);
        }
        assert!(SharedLlc::new(small(), 3, Partition::Ways).is_err(), "16 ways do not split 3 ways");
        assert!(SharedLlc::new(small(), 3, Partition::Global).is_ok());
    }

    /// A plan whose LLC shape cannot be built names `--llc`; a bad group names the groups.
    #[test]
    fn a_plan_refuses_an_llc_it_cannot_build_by_its_flag() {
        let plan = |llc_size_bytes: u64, group: usize| SharedPlan {
            groups: vec![SharedPlan::default_groups()[0].iter().cycle().take(group).cloned().collect()],
            partitions: vec![Partition::Ways],
            llc_size_bytes,
            instructions: 1_000_000,
            slice_cycles: BASE_SLICE_CYCLES,
            sample_shift: 4,
            threads: 1,
        };
        assert!(plan(2 << 20, 2).config().is_ok());
        let e = plan(3 << 20, 2).config().unwrap_err();
        assert!(e.message.starts_with("--llc: ") && e.message.contains("power of two"), "{e}");
        let e = plan(2 << 20, 3).config().unwrap_err();
        assert_eq!(e.message, "--llc: 16 ways cannot be split evenly among 3 sharers");
        let e = plan(2 << 20, 1).config().unwrap_err();
        assert!(e.message.starts_with("a shared LLC takes 2 to "), "{e}");
    }

    /// With way partitioning each sharer's LRU is its own: the same access stream of one
    /// sharer hits and misses exactly as in a private cache of its ways, whatever the other
    /// sharer does.
    #[test]
    fn way_partitions_do_not_interfere() {
        let g = small();
        let private = Geometry::new(32 << 10, 8, 64).unwrap(); // 64 sets x 8 ways
        let mut shared = SharedLlc::new(g, 2, Partition::Ways).unwrap();
        let mut alone: Cache<Lru> = Cache::new(private);
        let mut rng = Rng::new(9);
        for _ in 0..50_000 {
            let b = rng.below(1_000);
            assert_eq!(shared.access(0, b).hit, alone.access(b, 0).hit);
            shared.access(1, rng.below(100_000));
        }
        assert!(alone.stats.hits > 10_000);
    }

    fn check_full_sampling_is_exact(partition: Partition) {
        let mut hierarchy = HierarchyConfig::table_ii();
        hierarchy.llc = Geometry::new(1 << 20, 16, 64).unwrap();
        let config = SharedConfig {
            hierarchy,
            partition,
            instructions: 6_000_000,
            slice_cycles: BASE_SLICE_CYCLES / 2,
            sample_shift: 0,
        };
        let tasks = [
            TaskSpec::synth("loop:512k", SynthKind::Loop, 512 << 10, 1),
            TaskSpec::synth("hotcold:2m", SynthKind::HotCold, 2 << 20, 2),
        ];
        let stop = AtomicBool::new(false);
        let runs = run_shared(&tasks, &config, &stop).unwrap();
        for run in &runs {
            assert!(run.schedules.len() >= 3, "{partition:?} {}: {} schedules", run.task, run.schedules.len());
            assert!(run.cs_misses_exact() > 0, "{partition:?} {}", run.task);
            for s in &run.schedules {
                assert_eq!(s.cs_misses_estimated, s.cs_misses_exact, "{partition:?} {}", run.task);
            }
            assert!(run.instructions >= config.instructions);
        }
    }

    /// Every set sampled: each sharer's estimate equals its exact count in every schedule,
    /// so the per-sharer counters take exactly the sharer's CS misses (a counter that took the
    /// other sharer's hits, or an ATD cleared for the wrong owner, would differ).
    #[test]
    fn every_set_sampled_equals_each_sharers_ground_truth() {
        check_full_sampling_is_exact(Partition::Ways);
        check_full_sampling_is_exact(Partition::Global);
    }

    /// A sharer that never reuses has no CS misses and no estimate, however many its
    /// neighbour has; and the 1/16-sampled estimate of the neighbour is close.
    #[test]
    fn per_sharer_counters_do_not_mix() {
        let config = SharedConfig {
            hierarchy: HierarchyConfig { llc: Geometry::new(4 << 20, 16, 64).unwrap(), ..HierarchyConfig::table_ii() },
            partition: Partition::Ways,
            instructions: 12_000_000,
            slice_cycles: BASE_SLICE_CYCLES,
            sample_shift: 4,
        };
        let tasks = [
            TaskSpec::synth("stream", SynthKind::Stream, 1 << 20, 1),
            TaskSpec::synth("loop:1m", SynthKind::Loop, 1 << 20, 2),
        ];
        let runs = run_shared(&tasks, &config, &AtomicBool::new(false)).unwrap();
        assert_eq!((runs[0].cs_misses_exact(), runs[0].cs_misses_estimated()), (0, 0));
        assert!(runs[1].cs_misses_exact() > 10_000, "{}", runs[1].cs_misses_exact());
        let err = runs[1].estimation_error().unwrap();
        assert!(err < 0.05, "error {err}");
    }
}
