//! Context-switch miss estimation: Algorithm 1 with the Sec. V-C divergence check, and the
//! exact ground truth it estimates.
//!
//! The auxiliary tag directory (ATD) shadows one set in `2^sample_shift` of the main tag
//! directory (MTD) with one valid bit per way. Switching a task in invalidates the ATD,
//! which emulates a context switch for the sampled sets; afterwards an access that hits in
//! the MTD but finds its ATD bit invalid is a CS miss (the line was only there because the
//! task kept its cache), and every access sets its ATD bit. The sampled sets alternate
//! between two halves with one counter each; at switch-out the sum, shifted left by
//! `sample_shift`, is the estimate, and `|a - b| / (a + b)` is the divergence that Sec. V-C
//! compares with 0.15 to decide whether to trust it.
//!
//! Ground truth is the same question asked of every line exactly: each MTD line carries the
//! number of the schedule in which the task last brought it in or touched it; a hit on a
//! line stamped by an earlier schedule is a CS miss. With every set sampled
//! (`sample_shift = 0`) the estimate equals the ground truth by construction, which a test
//! checks; with 1/16 of the sets it is a Monte-Carlo sample of it.

use crate::error::{Error, ErrorKind, Result};

/// The paper's sampling: 1/16 of the sets (Sec. V-B, Table III).
pub const SAMPLE_SHIFT_DEFAULT: u32 = 4;
/// Sampled sets are those whose low `sample_shift` bits equal this pattern (masked), not
/// zero: DRRIP's leader sets sit at multiples of the constituency size, so sampling the sets
/// at multiples of 16 would sample only leaders, whose insertion policy is fixed and unlike
/// the followers'. With sets at offset 0 the 1 MiB DRRIP sweep showed 36-48% errors.
pub(crate) const SAMPLE_OFFSET_BITS: usize = 0b0101;

/// Sec. V-C: above this divergence the estimate is ignored and the slice kept.
pub const DIVERGENCE_MAX: f64 = 0.15;

/// The sparsest sampling either study accepts (1 set in 65536).
pub const SAMPLE_SHIFT_MAX: u32 = 16;

/// The estimate read at switch-out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// CS-MISS-CNT of the two halves of the sample sets.
    pub half_counts: [u64; 2],
    /// (a + b) << sample_shift.
    pub cs_misses: u64,
    /// |a - b| / (a + b), 0 when both are 0.
    pub divergence: f64,
}

impl Estimate {
    pub fn trusted(&self) -> bool {
        self.divergence <= DIVERGENCE_MAX
    }

    /// Algorithm 1 `estimate_cs_penalty()` plus the Sec. V-C divergence, from the two half
    /// counters of sets sampled one in `2^sample_shift`.
    pub fn of(half_counts: [u64; 2], sample_shift: u32) -> Estimate {
        let [a, b] = half_counts;
        let sum = a + b;
        let divergence = if sum == 0 { 0.0 } else { a.abs_diff(b) as f64 / sum as f64 };
        Estimate { half_counts, cs_misses: sum << sample_shift, divergence }
    }
}

/// The ATD itself, for one task ([`AtdEstimator`]) and for the sharers of one LLC
/// (`crate::shared::SharedAtd`): the sampling rule (which sets, which half) and one valid
/// bit per way of each sampled set. Whose counter a CS miss goes to is the caller's.
pub(crate) struct SampledAtd {
    sample_shift: u32,
    sample_mask: usize,
    sample_offset: usize,
    /// One valid bit per way, one word per sampled set.
    valid: Vec<u64>,
    ways: usize,
}

impl SampledAtd {
    pub(crate) fn new(sets: usize, ways: u32, sample_shift: u32) -> Result<Self> {
        let sampled = sets.checked_shr(sample_shift).unwrap_or(0);
        if ways > 64 || sampled < 2 || sample_shift > SAMPLE_SHIFT_MAX {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("cannot sample 1/{} of {sets} sets into two halves", 1u64 << sample_shift.min(63)),
            ));
        }
        Ok(SampledAtd {
            sample_shift,
            sample_mask: (1usize << sample_shift) - 1,
            sample_offset: ((1usize << sample_shift) - 1) & SAMPLE_OFFSET_BITS,
            valid: vec![0; sampled],
            ways: ways as usize,
        })
    }

    pub(crate) fn sample_shift(&self) -> u32 {
        self.sample_shift
    }

    /// Algorithm 1 `initialize()` for every line.
    pub(crate) fn clear(&mut self) {
        self.valid.fill(0);
    }

    /// `initialize()` for the lines `owned(set, way)` names only: a sharer switched in.
    pub(crate) fn clear_where(&mut self, owned: impl Fn(usize, usize) -> bool) {
        for (index, word) in self.valid.iter_mut().enumerate() {
            let set = (index << self.sample_shift) | self.sample_offset;
            for way in 0..self.ways {
                if owned(set, way) {
                    *word &= !(1u64 << way);
                }
            }
        }
    }

    /// Algorithm 1 `count_cs_misses()`: an MTD access landed in `way` of `set`. Returns the
    /// half whose counter takes a CS miss (a sampled set, an MTD hit on an invalid ATD way);
    /// the way is valid afterwards.
    #[inline]
    pub(crate) fn on_access(&mut self, set: usize, way: usize, mtd_hit: bool) -> Option<usize> {
        if set & self.sample_mask != self.sample_offset {
            return None;
        }
        let index = set >> self.sample_shift;
        let bit = 1u64 << way;
        let word = &mut self.valid[index];
        let cs_miss = mtd_hit && *word & bit == 0;
        *word |= bit;
        cs_miss.then_some(index & 1)
    }
}

/// Algorithm 1 for one task: the ATD and one CS-MISS-CNT of two halves.
pub struct AtdEstimator {
    atd: SampledAtd,
    counts: [u64; 2],
}

impl AtdEstimator {
    pub fn new(sets: usize, ways: u32, sample_shift: u32) -> Result<Self> {
        Ok(AtdEstimator { atd: SampledAtd::new(sets, ways, sample_shift)?, counts: [0; 2] })
    }

    /// Algorithm 1 `initialize()`: the task is switched in.
    pub fn switch_in(&mut self) {
        self.atd.clear();
        self.counts = [0; 2];
    }

    /// Algorithm 1 `count_cs_misses()`: an MTD access landed in `way` of `set`.
    #[inline]
    pub fn on_access(&mut self, set: usize, way: usize, mtd_hit: bool) {
        if let Some(half) = self.atd.on_access(set, way, mtd_hit) {
            self.counts[half] += 1;
        }
    }

    /// Algorithm 1 `estimate_cs_penalty()` plus the Sec. V-C divergence.
    pub fn estimate(&self) -> Estimate {
        Estimate::of(self.counts, self.atd.sample_shift())
    }
}

/// Exact CS misses: per-line stamps of the schedule that last brought in or used the line.
pub struct GroundTruth {
    ways: usize,
    stamps: Vec<u32>,
    schedule: u32,
    cs_misses: u64,
}

impl GroundTruth {
    pub fn new(sets: usize, ways: u32) -> Self {
        GroundTruth { ways: ways as usize, stamps: vec![0; sets * ways as usize], schedule: 0, cs_misses: 0 }
    }

    pub fn switch_in(&mut self) {
        self.schedule += 1;
        self.cs_misses = 0;
    }

    #[inline]
    pub fn on_access(&mut self, set: usize, way: usize, mtd_hit: bool) {
        let stamp = &mut self.stamps[set * self.ways + way];
        if mtd_hit && *stamp != self.schedule {
            self.cs_misses += 1;
        }
        *stamp = self.schedule;
    }

    /// CS misses since the last switch-in.
    pub fn cs_misses(&self) -> u64 {
        self.cs_misses
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::geometry::Geometry;
    use crate::policy::{Drrip, Lru, ReplacementPolicy, Ship};
    use crate::synth::{Rng, Synth, SynthKind};

    fn check_full_sampling_is_exact<P: ReplacementPolicy>() {
        let g = Geometry::new(256 << 10, 16, 64).unwrap();
        let mut mtd: Cache<P> = Cache::new(g);
        let mut full = AtdEstimator::new(g.sets(), 16, 0).unwrap();
        let mut truth = GroundTruth::new(g.sets(), 16);
        let mut sampled = AtdEstimator::new(g.sets(), 16, 2).unwrap();
        let mut synth = Synth::new(SynthKind::HotCold, 512 << 10, 11).unwrap();
        let mut rng = Rng::new(5);
        let (mut total_truth, mut total_sampled) = (0u64, 0u64);
        for schedule in 0..40 {
            full.switch_in();
            truth.switch_in();
            sampled.switch_in();
            let accesses = 2_000 + rng.below(20_000);
            for r in synth.by_ref().filter(|r| r.kind.is_data()).take(accesses as usize) {
                let o = mtd.access(r.addr >> 6, r.pc);
                full.on_access(o.set, o.way, o.hit);
                truth.on_access(o.set, o.way, o.hit);
                sampled.on_access(o.set, o.way, o.hit);
            }
            assert_eq!(full.estimate().cs_misses, truth.cs_misses(), "schedule {schedule}");
            if schedule > 0 {
                assert!(truth.cs_misses() > 0);
            }
            total_truth += truth.cs_misses();
            total_sampled += sampled.estimate().cs_misses;
        }
        let error = total_sampled.abs_diff(total_truth) as f64 / total_truth as f64;
        assert!(error < 0.10, "1/4 sampling error {error}");
    }

    #[test]
    fn every_set_sampled_equals_ground_truth() {
        check_full_sampling_is_exact::<Lru>();
        check_full_sampling_is_exact::<Drrip>();
        check_full_sampling_is_exact::<Ship>();
    }

    #[test]
    fn algorithm_1_counts_only_mtd_hits_with_invalid_atd() {
        let mut e = AtdEstimator::new(32, 4, 4).unwrap(); // sets 5 and 21 are sampled
        e.switch_in();
        e.on_access(5, 1, true); // CS miss in half 0
        e.on_access(5, 1, true); // now valid: not again
        e.on_access(21, 2, true); // CS miss in half 1
        e.on_access(21, 3, false); // MTD miss: no count, becomes valid
        e.on_access(21, 3, true);
        e.on_access(0, 0, true); // not sampled
        e.on_access(16, 0, true); // not sampled
        let est = e.estimate();
        assert_eq!(est.half_counts, [1, 1]);
        assert_eq!(est.cs_misses, 2 << 4);
        assert_eq!(est.divergence, 0.0);
        e.on_access(5, 0, true);
        e.on_access(5, 2, true);
        let est = e.estimate();
        assert_eq!(est.half_counts, [3, 1]);
        assert!((est.divergence - 0.5).abs() < 1e-12 && !est.trusted());
        e.switch_in();
        assert_eq!(e.estimate().cs_misses, 0);
        assert!(AtdEstimator::new(16, 4, 4).is_err());
    }
}
