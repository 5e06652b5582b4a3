//! Profile files are handed in by users (`--profile FILE`, or a stored profile edited by
//! hand), so `Profile::load` must answer every input, however broken, with a typed error
//! naming the file, never a panic (issue 11). Property tests feed it random bytes, random
//! byte edits of a valid profile, and every truncation of one; an `Ok` profile must also
//! be usable (its thresholds read) without panicking.
//!
//! Case counts are small (256 per property) so the file runs in about a second.

use smartcon_util::fuzz::{mutate, JSON_BYTES};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use smartcon_engine::profile::{LatencyPoint, Profile};

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// A file of this process for one test (tests run in parallel threads).
fn scratch(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("smartcon-fuzz-{}-{test}.json", std::process::id()))
}

/// A valid profile file, with every optional field present so edits can reach them.
fn valid_profile() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let mut p = Profile::paper_default("blk:nvme0n1");
        p.wakeup_ns = Some(4200.5);
        p.io_cpus = Some("0-1".into());
        for (bs_bytes, lat_ns_mean) in [(4096, 9000.0), (65536, 31000.25)] {
            p.latencies.push(LatencyPoint {
                op: "read".into(),
                bs_bytes,
                strategy: "spin".into(),
                lat_ns_mean,
                cpu_pct: 99.5,
                background_ios: 2,
            });
        }
        let path = scratch("valid");
        p.save(&path).unwrap();
        let loaded = Profile::load(&path).expect("the valid profile loads");
        assert_eq!(loaded, p);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    })
}

/// Loads `bytes` from this test's file: Ok, or an error whose message names the file; a
/// panic fails with what was fed.
fn check(test: &str, bytes: &[u8], what: &str) {
    let path = scratch(test);
    std::fs::write(&path, bytes).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Profile::load(&path).map(|p| {
            let _ = p.thresholds();
        })
    }));
    std::fs::remove_file(&path).unwrap();
    match outcome {
        Err(_) => {
            panic!("Profile::load panicked on {what} ({} bytes): {:?}", bytes.len(), String::from_utf8_lossy(bytes))
        }
        Ok(Err(e)) => {
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(e.to_string().contains(&*name), "the error names the file: {e}");
        }
        Ok(Ok(())) => {}
    }
}

fn edit_byte() -> impl Strategy<Value = u8> {
    prop_oneof![any::<u8>(), proptest::sample::select(JSON_BYTES)]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check("random", &bytes, "random bytes");
    }

    #[test]
    fn edited_profiles_never_panic(edits in proptest::collection::vec((any::<usize>(), edit_byte(), any::<u8>()), 1..6)) {
        let bytes = mutate(valid_profile(), &edits);
        check("edited", &bytes, "an edited profile");
    }
}

#[test]
fn every_truncation_is_an_error_or_a_profile_never_a_panic() {
    let valid = valid_profile();
    for n in 0..=valid.len() {
        check("truncated", &valid[..n], &format!("the valid profile cut to {n} bytes"));
    }
}
