//! Calibration reads files users hand in: probe profiles (`profiles/*.json`) and an
//! evaluation's `results.jsonl`. Each reader must answer every input with a typed error
//! naming the file (and the line, for JSON Lines), never a panic (issue 11); what reads
//! fine must also calibrate without panicking, since its numbers (latencies, IOPS) flow
//! into the model. Property tests feed random bytes, random edits of a valid file, and
//! every truncation of one.
//!
//! Case counts are small (256 per property) so the file runs in about a second.

use smartcon_util::fuzz::{mutate, JSON_BYTES};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use smartcon_model::calibrate::{calibrate, read_profile, read_result_profiles, read_results};
use smartcon_model::{Error, Model};

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// A file of this process for one test (tests run in parallel threads).
fn scratch(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("smartcon-fuzz-{}-{test}", std::process::id()))
}

const PROFILE: &str = r#"{"version":1,"device":"emu:optane","source":"probe","class":"very_fast",
"size_threshold_bytes":65536,"cpu_threshold_pct":85,"queue_limit":4,
"latencies":[{"op":"read","bs_bytes":4096,"strategy":"block","lat_ns_mean":14000.0,"cpu_pct":20.0},
{"op":"read","bs_bytes":4096,"strategy":"spin","lat_ns_mean":10000.0,"cpu_pct":100.0,"background_ios":0},
{"op":"write","bs_bytes":65536,"strategy":"sync","lat_ns_mean":2.5e4,"cpu_pct":100.0,"background_ios":3}]}
"#;

const RESULTS: &str = concat!(
    r#"{"type":"run","note":"skipped"}"#,
    "\n",
    r#"{"type":"profile","device":"emu:optane","latencies":[{"op":"read","bs_bytes":4096,"strategy":"spin","lat_ns_mean":9000.0}]}"#,
    "\n",
    r#"{"type":"result","target":"emu:optane","device":"emu:optane","workload":"w","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"block","iops":50000.0,"load":"bm-only"}"#,
    "\n\n",
    r#"{"type":"result","target":"emu:optane","device":"emu:optane","workload":"w","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"smart","iops":65000.0,"load":"bm-only"}"#,
    "\n",
    r#"{"type":"result","target":"emu:optane","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"spin","iops":0,"load":"bm-only"}"#,
    "\n",
);

/// Runs `read` on `bytes` written to this test's file and calibrates what it returns; Ok,
/// or an error naming the file. A panic fails with what was fed.
fn check<T>(test: &str, bytes: &[u8], what: &str, read: fn(&Path) -> Result<T, Error>, use_it: fn(T)) {
    let path = scratch(test);
    std::fs::write(&path, bytes).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| read(&path).map(use_it)));
    std::fs::remove_file(&path).unwrap();
    match outcome {
        Err(_) => panic!("{test}: panicked on {what}: {:?}", String::from_utf8_lossy(bytes)),
        Ok(Err(e)) => {
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(e.to_string().contains(&*name), "the error names the file: {e}");
        }
        Ok(Ok(())) => {}
    }
}

fn model() -> Model {
    Model { clock_ghz: 2.0, ..Model::default() }.with_tau_ctx_cycles(4000.0)
}

/// Each reader, and calibration over what it read beside the valid other half.
fn check_all(test: &str, which: Input, bytes: &[u8], what: &str) {
    match which {
        Input::Profile => check(&format!("{test}-profile.json"), bytes, what, read_profile, |p| {
            let results = read_valid_results();
            let _ = calibrate(&model(), &[p], &results);
        }),
        Input::Results => {
            check(&format!("{test}-results.jsonl"), bytes, what, read_results, |r| {
                let profiles = vec![read_valid_profile()];
                let _ = calibrate(&model(), &profiles, &r);
            });
            check(&format!("{test}-result-profiles.jsonl"), bytes, what, read_result_profiles, |p| {
                let _ = calibrate(&model(), &p, &read_valid_results());
            });
        }
    }
}

#[derive(Clone, Copy)]
enum Input {
    Profile,
    Results,
}

fn read_valid_profile() -> smartcon_model::calibrate::DeviceProfile {
    let path = scratch(&format!("valid-profile-{:?}.json", std::thread::current().id()));
    std::fs::write(&path, PROFILE).unwrap();
    let p = read_profile(&path).expect("the valid profile reads");
    std::fs::remove_file(&path).unwrap();
    p
}

fn read_valid_results() -> Vec<smartcon_model::calibrate::ResultRecord> {
    let path = scratch(&format!("valid-results-{:?}.jsonl", std::thread::current().id()));
    std::fs::write(&path, RESULTS).unwrap();
    let r = read_results(&path).expect("the valid results read");
    std::fs::remove_file(&path).unwrap();
    r
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    proptest::collection::vec(
        (any::<usize>(), prop_oneof![any::<u8>(), proptest::sample::select(JSON_BYTES)], any::<u8>()),
        1..6,
    )
}

#[test]
fn the_valid_inputs_calibrate() {
    let rows = calibrate(&model(), &[read_valid_profile()], &read_valid_results()).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_all("random", Input::Profile, &bytes, "random bytes");
        check_all("random", Input::Results, &bytes, "random bytes");
    }

    #[test]
    fn edited_profiles_never_panic(edits in edits()) {
        check_all("edited", Input::Profile, &mutate(PROFILE.as_bytes(), &edits), "an edited profile");
    }

    #[test]
    fn edited_results_never_panic(edits in edits()) {
        check_all("edited", Input::Results, &mutate(RESULTS.as_bytes(), &edits), "edited results");
    }
}

#[test]
fn every_truncation_reads_or_is_an_error() {
    for n in 0..=PROFILE.len() {
        check_all("truncated", Input::Profile, &PROFILE.as_bytes()[..n], &format!("the profile cut to {n} bytes"));
    }
    for n in 0..=RESULTS.len() {
        check_all("truncated", Input::Results, &RESULTS.as_bytes()[..n], &format!("the results cut to {n} bytes"));
    }
}
