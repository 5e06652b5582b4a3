//! Runs the real `smartcon ctx --quick` and `smartcon model` on a temporary SMARTCON_HOME:
//! finite positive figures in the documented JSON fields, the host profile written where
//! `model` finds it, and bad input refused with exit 2.

use std::process::Command;

fn smartcon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_smartcon"))
}

fn positive(v: &serde_json::Value, field: &str) -> f64 {
    let x = v[field].as_f64().unwrap_or_else(|| panic!("{field} missing in {v}"));
    assert!(x.is_finite() && x > 0.0, "{field} = {x} in {v}");
    x
}

#[test]
fn ctx_quick_then_model_reads_the_host_profile() {
    // Removed when dropped, also when the test panics.
    let scratch = tempfile::Builder::new().prefix("smartcon-ctx-test-").tempdir().unwrap();
    let home = scratch.path().join("home");
    let out = smartcon().args(["ctx", "--quick", "--json"]).env("SMARTCON_HOME", &home).output().unwrap();
    assert!(out.status.success(), "ctx failed: {}", String::from_utf8_lossy(&out.stderr));
    let records: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |t: &'static str| records.iter().filter(move |r| r["type"] == t);
    assert!(of("ctx_direct").count() >= 2);
    for r in of("ctx_direct") {
        positive(r, "us_per_switch_raw");
        let net = r["us_per_switch"].as_f64().unwrap();
        assert!(net.is_finite() && net >= 0.0 && net <= r["us_per_switch_raw"].as_f64().unwrap());
    }
    let two = of("ctx_direct").find(|r| r["procs"] == 2).expect("two-process ring");
    positive(two, "us_per_switch");
    assert!(of("ctx_indirect").count() >= 3);
    for r in of("ctx_indirect") {
        positive(r, "array_bytes");
        positive(r, "us_per_switch_raw");
        assert!(r["us_per_switch"].as_f64().unwrap().is_finite());
    }
    // lat_ctx's two figures side by side: 2 MiB is always among the quick sizes.
    let lat = of("lat_ctx").next().expect("lat_ctx record");
    assert_eq!(lat["procs"], 2);
    let s2048 = of("ctx_indirect").find(|r| r["array_bytes"] == 2 << 20).expect("a 2 MiB point");
    assert_eq!(lat["s2048_us"], s2048["us_per_switch"]);
    assert_eq!(lat["plain_us"], two["us_per_switch"]);
    let wake = of("wakeup").next().expect("wakeup record");
    positive(wake, "same_cpu_us");
    if !wake["cross_cpu_us"].is_null() {
        positive(wake, "cross_cpu_us");
    }
    let perf = of("perf_sched_pipe").next().expect("perf record");
    if perf["perf_us_per_switch"].is_null() {
        eprintln!("perf comparison skipped: {}", perf["skipped"]);
    } else {
        positive(perf, "perf_us_per_switch");
    }
    assert!(home.join("host.json").exists());

    let out = smartcon().args(["model", "--calibrate", "--json"]).env("SMARTCON_HOME", &home).output().unwrap();
    assert!(out.status.success(), "model failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let projections: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "projection")
        .collect();
    assert_eq!(projections.len(), 6);
    for p in &projections {
        positive(p, "cpi_smartcon");
        positive(p, "cpi_mainstream");
        positive(p, "ratio");
    }
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    // The home itself must not exist at first: bad input creates nothing.
    let scratch = tempfile::Builder::new().prefix("smartcon-ctx-bad-").tempdir().unwrap();
    let home = scratch.path().join("home");
    for args in [
        vec!["ctx", "--procs", "0"],
        vec!["ctx", "--sizes", "900g"],
        vec!["ctx", "--indirect-procs", "-3"],
        vec!["model", "--device", "x=-1us"],
        vec!["model", "--calibrate"],
        vec!["model", "--dram", "900"],
    ] {
        let out = smartcon().args(&args).env("SMARTCON_HOME", &home).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("error"), "{args:?}");
    }
    assert!(!home.exists(), "bad input wrote {}", home.display());
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("host.json"), "{\"version\": 1}").unwrap();
    let out = smartcon().args(["model", "--calibrate"]).env("SMARTCON_HOME", &home).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
