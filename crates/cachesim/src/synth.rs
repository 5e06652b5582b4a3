//! Synthetic trace generators for tests and experiments.
//!
//! Each generator is an endless, seeded, deterministic stream of records shaped like an
//! in-order program: a 4-byte instruction fetch per instruction and one data access every
//! `FETCHES_PER_DATA` instructions, so about one instruction in three touches memory. The
//! data addresses follow the kind:
//!
//! - `stream`: sequential 8-byte accesses that never come back (no reuse beyond the line).
//! - `loop`: sequential 8-byte accesses cycling over the working set.
//! - `random`: uniform 8-byte-aligned accesses over the working set.
//! - `phased`: alternates two passes of `loop` over the working set with a stream over
//!   twice as many new bytes, so the reuse a context switch destroys changes over time.
//! - `hotcold`: 7 accesses in 8 uniform over the first eighth of the working set, the rest
//!   uniform over all of it.
//!
//! Each component of a kind issues its accesses from its own small code loop, so the PCs
//! separate the components the way SHiP expects real code to. Non-goals: modelling any real
//! program; these are controlled stimuli whose reuse is known by construction.

use crate::error::{Error, ErrorKind, Result};
use crate::trace::{AccessKind, Record};

pub const FETCHES_PER_DATA: u32 = 3;
const CODE_BASE: u64 = 0x40_0000;
const COMPONENT_CODE_BYTES: u64 = 0x1_0000;
const LOOP_INSTRUCTIONS: u64 = 256;
const DATA_BASE: u64 = 0x1000_0000;
/// Stream regions start far above any working set.
const STREAM_BASE: u64 = 0x100_0000_0000;
const ACCESS_BYTES: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthKind {
    Stream,
    Loop,
    Random,
    Phased,
    HotCold,
}

impl SynthKind {
    pub const ALL: [SynthKind; 5] =
        [SynthKind::Stream, SynthKind::Loop, SynthKind::Random, SynthKind::Phased, SynthKind::HotCold];

    pub fn name(self) -> &'static str {
        match self {
            SynthKind::Stream => "stream",
            SynthKind::Loop => "loop",
            SynthKind::Random => "random",
            SynthKind::Phased => "phased",
            SynthKind::HotCold => "hotcold",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        SynthKind::ALL.into_iter().find(|k| k.name() == text)
    }
}

/// A seeded xorshift64* generator: fast, deterministic, good enough for address choice.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..bound` (bound > 0), by multiply-shift.
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// An endless generator; take as many records as needed.
#[derive(Debug, Clone)]
pub struct Synth {
    kind: SynthKind,
    slots: u64,
    rng: Rng,
    /// Data accesses issued so far.
    data_index: u64,
    /// Instructions since the last data access.
    since_data: u32,
    /// Per-component position in its code loop.
    pc_step: [u64; 2],
    pending: Option<Record>,
    loop_pos: u64,
    stream_pos: u64,
}

impl Synth {
    /// `working_set_bytes` must hold at least one 8-byte slot (it is ignored by `stream`).
    pub fn new(kind: SynthKind, working_set_bytes: u64, seed: u64) -> Result<Self> {
        if working_set_bytes < ACCESS_BYTES {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("working set of {working_set_bytes} bytes is below one {ACCESS_BYTES}-byte access"),
            ));
        }
        Ok(Synth {
            kind,
            slots: working_set_bytes / ACCESS_BYTES,
            rng: Rng::new(seed),
            data_index: 0,
            since_data: 0,
            pc_step: [0; 2],
            pending: None,
            loop_pos: 0,
            stream_pos: 0,
        })
    }

    fn pc(&mut self, component: usize) -> u64 {
        let step = self.pc_step[component];
        self.pc_step[component] = (step + 1) % LOOP_INSTRUCTIONS;
        CODE_BASE + component as u64 * COMPONENT_CODE_BYTES + step * 4
    }

    fn next_loop(&mut self) -> u64 {
        let a = DATA_BASE + self.loop_pos * ACCESS_BYTES;
        self.loop_pos = (self.loop_pos + 1) % self.slots;
        a
    }

    fn next_stream(&mut self) -> u64 {
        let a = STREAM_BASE + self.stream_pos * ACCESS_BYTES;
        self.stream_pos += 1;
        a
    }

    /// The next data address and the code component issuing it.
    fn next_data(&mut self) -> (u64, usize) {
        let i = self.data_index;
        self.data_index += 1;
        match self.kind {
            SynthKind::Stream => (self.next_stream(), 0),
            SynthKind::Loop => (self.next_loop(), 0),
            SynthKind::Random => (DATA_BASE + self.rng.below(self.slots) * ACCESS_BYTES, 0),
            SynthKind::Phased => {
                // Two loop passes over the working set, then a stream of the same length.
                let period = 4 * self.slots;
                if i % period < 2 * self.slots {
                    (self.next_loop(), 0)
                } else {
                    (self.next_stream(), 1)
                }
            }
            SynthKind::HotCold => {
                if self.rng.below(8) < 7 {
                    let hot = (self.slots / 8).max(1);
                    (DATA_BASE + self.rng.below(hot) * ACCESS_BYTES, 0)
                } else {
                    (DATA_BASE + self.rng.below(self.slots) * ACCESS_BYTES, 1)
                }
            }
        }
    }
}

impl Iterator for Synth {
    type Item = Record;

    #[inline]
    fn next(&mut self) -> Option<Record> {
        if let Some(r) = self.pending.take() {
            return Some(r);
        }
        self.since_data += 1;
        if self.since_data < FETCHES_PER_DATA {
            let component =
                if self.kind == SynthKind::Phased && (self.data_index / self.slots) % 4 >= 2 { 1 } else { 0 };
            return Some(Record::fetch(self.pc(component), 4));
        }
        self.since_data = 0;
        let (addr, component) = self.next_data();
        let pc = self.pc(component);
        let kind = if self.rng.below(4) == 0 { AccessKind::Write } else { AccessKind::Read };
        self.pending = Some(Record::data(pc, addr, kind, ACCESS_BYTES as u8));
        Some(Record::fetch(pc, 4))
    }
}

/// Records in a synthetic trace holding `data_accesses` data accesses (fetches included);
/// an error when the count does not fit in 64 bits.
pub fn records_for(data_accesses: u64) -> Result<u64> {
    data_accesses.checked_mul(u64::from(FETCHES_PER_DATA) + 1).ok_or_else(|| {
        Error::new(ErrorKind::Usage, format!("{data_accesses} data accesses is more records than 64 bits count"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn data_lines(kind: SynthKind, ws: u64, n: usize) -> HashSet<u64> {
        Synth::new(kind, ws, 7).unwrap().filter(|r| r.kind.is_data()).take(n).map(|r| r.addr >> 6).collect()
    }

    #[test]
    fn kinds_touch_what_they_promise() {
        let ws = 64 << 10;
        assert_eq!(data_lines(SynthKind::Loop, ws, 100_000).len(), (ws / 64) as usize);
        assert_eq!(data_lines(SynthKind::Stream, ws, 80_000).len(), 10_000);
        let random = data_lines(SynthKind::Random, ws, 100_000);
        assert!(random.len() <= (ws / 64) as usize && random.len() > 900);
        let s = Synth::new(SynthKind::Loop, ws, 1).unwrap();
        let first: Vec<Record> = s.take(8).collect();
        assert_eq!(first.iter().filter(|r| r.kind.is_data()).count(), 2);
        assert!(first.iter().all(|r| r.kind == AccessKind::Fetch || r.pc == first[2].pc || r.pc == first[6].pc));
        assert_eq!(records_for(2).unwrap(), 8);
        assert!(records_for(u64::MAX / 2).is_err());
        // Same seed, same stream.
        let a: Vec<Record> = Synth::new(SynthKind::HotCold, ws, 3).unwrap().take(1000).collect();
        let b: Vec<Record> = Synth::new(SynthKind::HotCold, ws, 3).unwrap().take(1000).collect();
        assert_eq!(a, b);
        assert!(Synth::new(SynthKind::Loop, 4, 1).is_err());
    }
}
