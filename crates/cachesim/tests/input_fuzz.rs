//! Traces and lackey logs are files users hand in (`smartcon cachesim --trace`, `smartcon
//! trace convert`), so their readers must answer every input with a typed error naming the
//! file and the line or byte, never a panic and never a shorter run (issue 11). Property
//! tests feed random bytes, random edits of a valid file, and every truncation of one.
//!
//! For the binary trace the promise is stronger and is checked too: any change to a valid
//! trace's bytes is an error (the header's length and count and the checksum over decoded
//! values catch it), so a damaged trace never simulates as a different run.
//!
//! Case counts are small (256 per property) so the file runs in about a second.

use smartcon_util::fuzz::mutate;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use smartcon_cachesim::trace::{convert_lackey_file, AccessKind, Record, TraceReader, TraceWriter, MAGIC};
use smartcon_cachesim::ErrorKind;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// A file of this process for one test (tests run in parallel threads).
fn scratch(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("smartcon-fuzz-{}-{test}", std::process::id()))
}

/// Records with every kind, repeated and fresh pcs, small and huge (10-byte varint) deltas.
fn records() -> Vec<Record> {
    let mut v = Vec::new();
    let mut pc = 0x40_1000u64;
    for i in 0..60u64 {
        pc = pc.wrapping_add(4 + i % 7);
        v.push(Record::fetch(pc, 4));
        let kind = [AccessKind::Read, AccessKind::Write, AccessKind::Modify][(i % 3) as usize];
        let addr = if i % 10 == 9 { 0x7fff_ffff_ffff_fff0 - i } else { 0x1000 + i * 8 };
        v.push(Record::data(pc, addr, kind, 8));
    }
    v.push(Record::fetch(0xffff_ffff_ffff_0000, 2));
    v.push(Record::data(0x10, 0x20, AccessKind::Read, 1));
    v
}

fn valid_trace() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let path = scratch("valid.trace");
        let mut w = TraceWriter::create(&path).unwrap();
        for r in records() {
            w.push(&r).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(TraceReader::read_all(&path).unwrap(), records(), "the valid trace reads back");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    })
}

/// Reads `bytes` as a trace: the records, or an error of a trace kind naming the file; a
/// panic fails with what was fed.
fn read_trace(test: &str, bytes: &[u8], what: &str) -> Option<Vec<Record>> {
    let path = scratch(&format!("{test}.trace"));
    std::fs::write(&path, bytes).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| TraceReader::read_all(&path)));
    std::fs::remove_file(&path).unwrap();
    match outcome {
        Err(_) => panic!("TraceReader panicked on {what} ({} bytes): {bytes:?}", bytes.len()),
        Ok(Err(e)) => {
            assert_eq!(e.kind, ErrorKind::Usage, "{what}: {e:?}");
            assert!(
                [
                    "truncated trace",
                    "corrupt trace",
                    "unfinished trace",
                    "not a smartcon trace",
                    "after the last record"
                ]
                .iter()
                .any(|w| e.message.contains(w)),
                "{what}: says how the trace is broken: {}",
                e.message
            );
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(e.message.contains(&*name), "the error names the file: {}", e.message);
            None
        }
        Ok(Ok(records)) => Some(records),
    }
}

const LACKEY: &str = "==1234== Lackey, an example Valgrind tool\n\
I  0401000,3\n L 7ff000ff8,8\nI  0401003,4\n S 7ff000ff0,8\n M 0601040,4\nI  0401007,2\n\
==1234== \n\nI  0401009,5\n L 0000010,1\n";

/// Converts `bytes` as a lackey log: Ok, or an error naming the input file; on an error
/// no output is left behind. A panic fails with what was fed.
fn convert(test: &str, bytes: &[u8], what: &str) {
    let input = scratch(&format!("{test}.lackey"));
    let output = scratch(&format!("{test}.out.trace"));
    std::fs::write(&input, bytes).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| convert_lackey_file(&input, &output)));
    std::fs::remove_file(&input).unwrap();
    match outcome {
        Err(_) => panic!("convert_lackey_file panicked on {what}: {:?}", String::from_utf8_lossy(bytes)),
        Ok(Err(e)) => {
            assert_eq!(e.kind, ErrorKind::Usage, "{what}: {e:?}");
            assert!(e.message.contains("line") || e.message.contains("lackey"), "{what}: {}", e.message);
            let name = input.file_name().unwrap().to_string_lossy();
            assert!(e.message.contains(&*name), "the error names the file: {}", e.message);
            assert!(!output.exists(), "no trace is left after an error");
        }
        Ok(Ok(stats)) => {
            let n = TraceReader::read_all(&output).expect("a converted trace reads").len();
            assert_eq!(n as u64, stats.records);
            std::fs::remove_file(&output).unwrap();
        }
    }
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6)
}

/// Bytes lackey lines are made of, so edits often keep a line's shape.
const LACKEY_BYTES: &[u8] = b"0123456789abcdefILSM ,=\n";

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_are_not_a_trace(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        read_trace("random", &bytes, "random bytes");
    }

    /// Past the magic, so the header and record decoding see random input.
    #[test]
    fn random_bytes_after_the_magic_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&body);
        read_trace("magic", &bytes, "the magic and random bytes");
    }

    /// A plausible header (its body length right) over random records: decoding must
    /// refuse them, not run off the end.
    #[test]
    fn random_bodies_under_a_plausible_header_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256), count in 0u64..200) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&valid_trace()[24..32]);
        bytes.extend_from_slice(&body);
        read_trace("header", &bytes, "a random body");
    }

    #[test]
    fn any_edit_of_a_valid_trace_is_an_error(edits in edits()) {
        let bytes = mutate(valid_trace(), &edits);
        let read = read_trace("edited", &bytes, "an edited trace");
        prop_assert!(bytes == valid_trace() || read.is_none(), "an edited trace read as {} records", read.map_or(0, |r| r.len()));
    }

    #[test]
    fn random_lackey_logs_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        convert("lackey-random", &bytes, "random bytes");
    }

    #[test]
    fn edited_lackey_logs_never_panic(edits in proptest::collection::vec((any::<usize>(), prop_oneof![any::<u8>(), proptest::sample::select(LACKEY_BYTES)], any::<u8>()), 1..6)) {
        let bytes = mutate(LACKEY.as_bytes(), &edits);
        convert("lackey-edited", &bytes, "an edited lackey log");
    }
}

#[test]
fn every_truncation_of_a_trace_is_an_error() {
    let valid = valid_trace();
    for n in 0..valid.len() {
        let read = read_trace("truncated", &valid[..n], &format!("the valid trace cut to {n} bytes"));
        assert!(read.is_none(), "cut to {n} bytes, the trace read as a shorter run");
    }
    assert_eq!(read_trace("whole", valid, "the whole trace"), Some(records()));
}

#[test]
fn every_truncation_of_a_lackey_log_converts_or_is_an_error() {
    for n in 0..=LACKEY.len() {
        convert("lackey-truncated", &LACKEY.as_bytes()[..n], &format!("the lackey log cut to {n} bytes"));
    }
}

/// Every single-bit flip of a valid trace, exhaustively: each one is an error. This pins
/// a varint's tenth byte, where bits beyond 64 used to be dropped so that a flip decoded to
/// the same value and the damaged trace read as valid.
#[test]
fn every_bit_flip_of_a_trace_is_an_error() {
    let valid = valid_trace();
    let mut bytes = valid.to_vec();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            bytes[i] ^= 1 << bit;
            let read = read_trace("flipped", &bytes, &format!("bit {bit} of byte {i} flipped"));
            assert!(read.is_none(), "bit {bit} of byte {i} flipped, the trace still read");
            bytes[i] ^= 1 << bit;
        }
    }
}
