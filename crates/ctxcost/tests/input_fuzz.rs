//! The host profile (`smartcon ctx` writes it; `smartcon model` and the engine's class rule
//! read it back) is a file a user may hand in or edit, so `HostProfile::read` must answer
//! every input with a typed error naming the file, never a panic (issue 11). A profile it
//! accepts must have a usable direct cost: the CLI relies on that (`ctx_direct_ns` after a
//! successful read). Property tests feed random bytes, random edits of a valid profile,
//! and every truncation of one.
//!
//! Case counts are small (256 per property) so the file runs in about a second.

use smartcon_util::fuzz::{mutate, JSON_BYTES};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use smartcon_ctxcost::cache::CacheSizes;
use smartcon_ctxcost::{DirectPoint, HostProfile, IndirectPoint, HOST_PROFILE_VERSION};

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// A file of this process for one test (tests run in parallel threads).
fn scratch(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("smartcon-fuzz-{}-{test}.json", std::process::id()))
}

/// A valid profile with every optional field present so edits can reach them.
fn valid_profile() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let p = HostProfile {
            version: HOST_PROFILE_VERSION,
            created_unix_s: 1_700_000_000,
            quick: true,
            cpu: 0,
            cross_cpu: Some(1),
            clock_ghz: Some(2.5),
            cache: CacheSizes { l1d_bytes: Some(48 << 10), l2_bytes: Some(1 << 20), llc_bytes: Some(32 << 20) },
            pipe_overhead_us: 1.25,
            direct: vec![
                DirectPoint { procs: 2, us_per_switch: 1.5, us_per_switch_raw: 2.75 },
                DirectPoint { procs: 4, us_per_switch: 1.75, us_per_switch_raw: 3.0 },
            ],
            indirect: vec![
                IndirectPoint { array_bytes: 1 << 20, us_per_switch: 4.0, us_per_switch_raw: 9.0, us_hot: 5.0 },
                IndirectPoint { array_bytes: 4 << 20, us_per_switch: 12.0, us_per_switch_raw: 30.0, us_hot: 18.0 },
            ],
            wakeup_same_cpu_us: 3.0,
            wakeup_cross_cpu_us: Some(6.5),
            perf_sched_pipe_us_per_switch: Some(2.0),
            perf_runs: 3,
            perf_skipped_reason: None,
        };
        serde_json::to_vec_pretty(&p).unwrap()
    })
}

/// Reads `bytes` as a host profile: Ok with a usable direct cost, or an error naming the
/// file. A panic fails with what was fed.
fn check(test: &str, bytes: &[u8], what: &str) {
    let path = scratch(test);
    std::fs::write(&path, bytes).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        HostProfile::read(&path).map(|p| {
            let direct = p.ctx_direct_ns().expect("a profile that reads has a direct cost");
            assert!(direct.is_finite() && direct > 0.0, "direct cost {direct}");
            let _ = p.sleep_cost_ns();
        })
    }));
    std::fs::remove_file(&path).unwrap();
    match outcome {
        Err(_) => panic!("HostProfile::read panicked on {what}: {:?}", String::from_utf8_lossy(bytes)),
        Ok(Err(e)) => {
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(e.to_string().contains(&*name), "the error names the file: {e}");
        }
        Ok(Ok(())) => {}
    }
}

#[test]
fn the_valid_profile_reads() {
    let path = scratch("valid");
    std::fs::write(&path, valid_profile()).unwrap();
    let p = HostProfile::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(p.ctx_direct_ns(), Some(1500.0));
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check("random", &bytes, "random bytes");
    }

    #[test]
    fn edited_profiles_never_panic(edits in proptest::collection::vec((any::<usize>(), prop_oneof![any::<u8>(), proptest::sample::select(JSON_BYTES)], any::<u8>()), 1..6)) {
        check("edited", &mutate(valid_profile(), &edits), "an edited profile");
    }
}

#[test]
fn every_truncation_reads_or_is_an_error() {
    let valid = valid_profile();
    for n in 0..=valid.len() {
        check("truncated", &valid[..n], &format!("the profile cut to {n} bytes"));
    }
}
