//! Workloads of the evaluation (SmartCon Sec. 7.3-7.5) as data: each is a list of cells,
//! each cell a list of phases the engine runs as jobs, one after another, for a share of
//! the cell's time. The evaluation merges a cell's phases into one record.
//!
//! - IOZone-like (`iozone-{rand,seq}-{read,write}`): one phase per record size.
//! - Filebench-like personalities, with their parameters written down here (Filebench's own
//!   defaults scaled to a 2-core machine and to the engine's one-file targets):
//!   - `fileserver`: 1 MiB sequential, half writes then half reads, 2 threads (Filebench:
//!     50 threads over many files; here the file is the target);
//!   - `mailserver`: 16 KiB random, half reads and half writes (Filebench varmail: 16
//!     threads, 16 KiB mean, fsync after appends). The engine has no fsync operation yet, so
//!     writes are O_DIRECT (on the device, but the disk's cache is not flushed);
//!   - `multistreamread`: 1 MiB sequential reads by 4 threads, each its own stream;
//!   - `singlestreamread`: 1 MiB sequential reads by 1 thread.
//!
//! Non-goals: directory trees, file creation and deletion (the Postmark-like workload is not
//! built), think time.

use smartcon_devemu::Op;

use crate::job::Pattern;

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

/// One job of a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub op: Op,
    pub pattern: Pattern,
    pub bs_bytes: u64,
    pub threads: u32,
    /// Share of the cell's time, in percent (the phases of a cell add up to 100).
    pub share_pct: u32,
}

/// One cell: the size it is reported under and its phases.
#[derive(Debug, Clone, PartialEq)]
pub struct CellPlan {
    pub bs_bytes: u64,
    pub phases: Vec<Phase>,
}

const MIB: u64 = 1 << 20;

fn one(op: Op, pattern: Pattern, bs_bytes: u64, threads: u32) -> Phase {
    Phase {
        op,
        pattern,
        bs_bytes,
        threads,
        share_pct: 100,
    }
}

/// The cells of a workload; IOZone-like ones take the record sizes, personalities have their
/// own. `None` for an unknown name.
pub fn cells(name: &str, sizes: &[u64]) -> Option<Vec<CellPlan>> {
    let iozone = |op, pattern| {
        sizes
            .iter()
            .map(|&bs| CellPlan {
                bs_bytes: bs,
                phases: vec![one(op, pattern, bs, 1)],
            })
            .collect()
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
                },
                Phase {
                    op: Op::Read,
                    pattern: Pattern::Seq,
                    bs_bytes: MIB,
                    threads: 2,
                    share_pct: 50,
                },
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
                },
                Phase {
                    op: Op::Write,
                    pattern: Pattern::Rand,
                    bs_bytes: 16 << 10,
                    threads: 1,
                    share_pct: 50,
                },
            ],
        }],
        "multistreamread" => vec![CellPlan {
            bs_bytes: MIB,
            phases: vec![one(Op::Read, Pattern::Seq, MIB, 4)],
        }],
        "singlestreamread" => vec![CellPlan {
            bs_bytes: MIB,
            phases: vec![one(Op::Read, Pattern::Seq, MIB, 1)],
        }],
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
        assert!(cells("postmark", &[4096]).is_none());
        assert_eq!(cells("iozone-seq-write", &[4096, 65536]).unwrap().len(), 2);
        assert!(writes("mailserver") && !writes("multistreamread"));
    }
}
