//! Workloads of the evaluation (SmartCon Sec. 7.3-7.5) as data: each is a list of cells,
//! each cell a list of phases the engine runs as jobs, one after another, for a share of
//! the cell's time. The evaluation merges a cell's phases into one record.
//!
//! - IOZone-like (`iozone-{rand,seq}-{read,write}`): one phase per record size.
//! - Filebench-like personalities, with their parameters written down here (Filebench's own
//!   defaults scaled to a 2-core machine and to the engine's one-file targets):
//!   - `fileserver`: 1 MiB sequential, half writes then half reads, 2 threads (Filebench:
//!     50 threads over many files; here the file is the target);
//!   - `mailserver`: 16 KiB random, half reads and half writes, each write followed by an
//!     fsync (Filebench varmail: 16 threads, 16 KiB mean, fsync after every append). The
//!     flush waits with the phase's strategy (`smart` flushes with `block`: a flush waits on
//!     the device's cache, far beyond any spin threshold); the record counts them in
//!     `fsyncs`, and their time is in the cell's wall time (so in IOPS), not in the I/O
//!     latencies;
//!   - `multistreamread`: 1 MiB sequential reads by 4 threads, each its own stream;
//!   - `singlestreamread`: 1 MiB sequential reads by 1 thread.
//! - `postmark` ([`POSTMARK`]): the Postmark-like small-file workload needs a directory,
//!   not a target's byte range, so it is not a list of phases; it lives in
//!   [`crate::postmark`] and the evaluation runs it on targets that sit on a file system.
//!
//! Non-goals: directory trees and think time.

use smartcon_devemu::Op;

use smartcon_engine::job::Pattern;

/// The workload names, in report order.
pub const NAMES: [&str; 8] = [
    "iozone-rand-read",
    "iozone-rand-write",
    "iozone-seq-read",
    "iozone-seq-write",
    "fileserver",
    "mailserver",
    "multistreamread",
    "singlestreamread",
];

/// The Postmark-like workload's name (see [`crate::postmark`]).
pub const POSTMARK: &str = "postmark";

/// True for every workload the evaluation knows, phases or Postmark.
pub fn is_known(name: &str) -> bool {
    name == POSTMARK || cells(name, &[4096]).is_some()
}

/// One job of a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub op: Op,
    pub pattern: Pattern,
    pub bs_bytes: u64,
    pub threads: u32,
    /// Share of the cell's time, in percent (the phases of a cell add up to 100).
    pub share_pct: u32,
    /// Writes only: fsync after every this many writes per thread (0 = never).
    pub fsync_every: u32,
}

/// One cell: the size it is reported under and its phases.
#[derive(Debug, Clone, PartialEq)]
pub struct CellPlan {
    pub bs_bytes: u64,
    pub phases: Vec<Phase>,
}

const MIB: u64 = 1 << 20;

fn one(op: Op, pattern: Pattern, bs_bytes: u64, threads: u32) -> Phase {
    Phase { op, pattern, bs_bytes, threads, share_pct: 100, fsync_every: 0 }
}

/// The cells of a workload; IOZone-like ones take the record sizes, personalities have their
/// own. `None` for an unknown name.
pub fn cells(name: &str, sizes: &[u64]) -> Option<Vec<CellPlan>> {
    let iozone = |op, pattern| {
        sizes.iter().map(|&bs| CellPlan { bs_bytes: bs, phases: vec![one(op, pattern, bs, 1)] }).collect()
    };
    Some(match name {
        "iozone-rand-read" => iozone(Op::Read, Pattern::Rand),
        "iozone-rand-write" => iozone(Op::Write, Pattern::Rand),
        "iozone-seq-read" => iozone(Op::Read, Pattern::Seq),
        "iozone-seq-write" => iozone(Op::Write, Pattern::Seq),
        "fileserver" => vec![CellPlan {
            bs_bytes: MIB,
            phases: vec![
                Phase {
                    op: Op::Write,
                    pattern: Pattern::Seq,
                    bs_bytes: MIB,
                    threads: 2,
                    share_pct: 50,
                    fsync_every: 0,
                },
                Phase { op: Op::Read, pattern: Pattern::Seq, bs_bytes: MIB, threads: 2, share_pct: 50, fsync_every: 0 },
            ],
        }],
        "mailserver" => vec![CellPlan {
            bs_bytes: 16 << 10,
            phases: vec![
                Phase {
                    op: Op::Read,
                    pattern: Pattern::Rand,
                    bs_bytes: 16 << 10,
                    threads: 1,
                    share_pct: 50,
                    fsync_every: 0,
                },
                Phase {
                    op: Op::Write,
                    pattern: Pattern::Rand,
                    bs_bytes: 16 << 10,
                    threads: 1,
                    share_pct: 50,
                    // varmail: fsync after every append.
                    fsync_every: 1,
                },
            ],
        }],
        "multistreamread" => vec![CellPlan { bs_bytes: MIB, phases: vec![one(Op::Read, Pattern::Seq, MIB, 4)] }],
        "singlestreamread" => vec![CellPlan { bs_bytes: MIB, phases: vec![one(Op::Read, Pattern::Seq, MIB, 1)] }],
        _ => return None,
    })
}

/// True when some phase of the workload writes.
pub fn writes(name: &str) -> bool {
    cells(name, &[4096]).is_some_and(|c| c.iter().any(|cell| cell.phases.iter().any(|p| p.op == Op::Write)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_workload_has_cells_whose_phases_fill_the_time() {
        for name in NAMES {
            let cells = cells(name, &[4096, 65536]).unwrap();
            assert!(!cells.is_empty(), "{name}");
            for c in cells {
                assert_eq!(c.phases.iter().map(|p| p.share_pct).sum::<u32>(), 100, "{name}");
                assert!(c.phases.iter().all(|p| p.threads >= 1 && p.bs_bytes > 0));
            }
        }
        // Postmark is known but is no list of phases (it needs a directory).
        assert!(cells(POSTMARK, &[4096]).is_none() && is_known(POSTMARK) && !is_known("bonnie"));
        // Only writes flush, and the mail server's writes do.
        for name in NAMES {
            for c in cells(name, &[4096]).unwrap() {
                assert!(c.phases.iter().all(|p| p.fsync_every == 0 || p.op == Op::Write), "{name}");
            }
        }
        let mail = cells("mailserver", &[4096]).unwrap();
        assert!(mail[0].phases.iter().any(|p| p.op == Op::Write && p.fsync_every == 1));
        assert_eq!(cells("iozone-seq-write", &[4096, 65536]).unwrap().len(), 2);
        assert!(writes("mailserver") && !writes("multistreamread"));
    }
}
