//! `smartcon model --calibrate` on real inputs: a host profile from `smartcon ctx --quick`,
//! a probe profile of a small emulated device and an `evaluate --tiny` results.jsonl, all
//! generated here. Checks that every cell with block and smart results and a probed latency
//! gets a row, and that the figures are sane (finite, positive, the latency is the probe's
//! spin latency). No timing is asserted.

use std::path::Path;
use std::process::{Command, Output};

fn smartcon(home: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", home)
        .args(args)
        .output()
        .expect("run smartcon");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn calibrate_runs_on_a_real_probe_and_evaluation() {
    // Removed when dropped, also when the test panics.
    let scratch = tempfile::Builder::new().prefix("smartcon-calibrate-test-").tempdir().unwrap();
    let home = scratch.path().to_path_buf();
    let target = "emu:optane,size=16m";
    smartcon(&home, &["ctx", "--quick"]);
    smartcon(&home, &["probe", target, "--duration", "20ms", "--sizes", "4k,64k"]);
    let report = home.join("report");
    smartcon(
        &home,
        &["evaluate", "--tiny", "--duration", "20ms", "--loads", "bm-only", "--out", report.to_str().unwrap()],
    );
    let results = report.join("results.jsonl");
    let out = smartcon(&home, &["model", "--calibrate", "--results", results.to_str().unwrap(), "--json"]);
    let recs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let rows: Vec<&serde_json::Value> = recs.iter().filter(|r| r["type"] == "calibration").collect();
    // --tiny: iozone-rand-read and iozone-seq-write at 4k and 64k (the mail server's mixed
    // op has no probed latency), bm-only.
    // Other studies evaluate adds (e.g. the polling study) may add rows of their own.
    let rows: Vec<&serde_json::Value> =
        rows.into_iter().filter(|r| r["workload"].as_str().unwrap().starts_with("iozone-")).collect();
    let mut cells: Vec<(String, u64)> =
        rows.iter().map(|r| (r["workload"].as_str().unwrap().to_string(), r["bs_bytes"].as_u64().unwrap())).collect();
    cells.sort();
    assert_eq!(
        cells,
        [
            ("iozone-rand-read".to_string(), 4096),
            ("iozone-rand-read".to_string(), 65536),
            ("iozone-seq-write".to_string(), 4096),
            ("iozone-seq-write".to_string(), 65536)
        ]
    );
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join("profiles/emu_optane_size_16m.json")).unwrap())
            .unwrap();
    for r in rows {
        assert_eq!(r["device"], target);
        assert_eq!(r["measured_strategy"], "smart");
        for f in ["predicted_ratio", "measured_ratio", "device_latency_ns"] {
            let v = r[f].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{f} = {v} in {r}");
        }
        // The model's ratio of two CPIs and a measured IOPS ratio stay within a sane band.
        assert!(r["predicted_ratio"].as_f64().unwrap() < 100.0, "{r}");
        assert!(r["measured_ratio"].as_f64().unwrap() < 100.0, "{r}");
        // The device latency is the probe's spin latency of that op and size.
        let spin = profile["latencies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| {
                l["op"] == r["op"]
                    && l["bs_bytes"] == r["bs_bytes"]
                    && l["strategy"] == "spin"
                    && l.get("background_ios").is_none()
            })
            .expect("probed point");
        assert_eq!(r["latency_strategy"], "spin");
        assert_eq!(r["device_latency_ns"], spin["lat_ns_mean"]);
    }
}
