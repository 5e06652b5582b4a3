//! `smartcon merge-bench` end to end: bad input is one line on stderr and exit 2 with
//! nothing on stdout; a short run writes one "merge_result" per configuration with every
//! documented field, a "merge_summary" with the pipelined/serialized ratios, and an SVG
//! when asked. No timing is asserted.

use std::process::{Command, Output};

fn smartcon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartcon")).arg("merge-bench").args(args).output().expect("run smartcon")
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let cases: &[&[&str]] = &[
        &["--threads", "0"],
        &["--threads", "100000"],
        &["--max-merge", "0"],
        &["--max-merge", "100000"],
        &["--poll-interval", "0"],
        &["--poll-interval", "1h"],
        &["--alpha", "0"],
        &["--alpha", "10s"],
        &["--sampling", "2s", "--duration", "1s"],
        &["--bs", "6k"],
        &["--bs", "1m"],
        &["--ops", "trim"],
        &["--patterns", "zigzag"],
        &["--target", "/dev/null"],
        &["--target", "emu:floppy"],
        &["--duration", "0"],
        &["--rounds", "0"],
        &["--strategies", "fast"],
        &["--strategies", ""],
        &["--plot", "/nonexistent-smartcon-dir/merge.svg"],
    ];
    for args in cases {
        let out = smartcon(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("smartcon: error: "), "{args:?}: {stderr}");
    }
}

#[test]
fn a_short_run_writes_every_record_and_the_plot() {
    // Removed when dropped, also when the test panics.
    let scratch = tempfile::Builder::new().prefix("smartcon-merge-bench-").tempdir().unwrap();
    let dir = scratch.path();
    let svg = dir.join("merge.svg");
    let out = smartcon(&[
        "--target",
        "emu:optane,channels=1,size=16m",
        "--threads",
        "8",
        "--duration",
        "80ms",
        "--sampling",
        "10ms",
        "--ops",
        "read,write",
        "--patterns",
        "rand",
        "--span",
        "8m",
        "--rounds",
        "2",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let results: Vec<&serde_json::Value> = recs.iter().filter(|r| r["type"] == "merge_result").collect();
    // 2 ops x 1 pattern x (reference + 4 combinations) x 2 rounds, interleaved.
    assert_eq!(results.len(), 20);
    let rounds: Vec<u64> = results.iter().take(10).map(|r| r["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
    for r in &results {
        for field in [
            "target",
            "op",
            "pattern",
            "bs_bytes",
            "threads",
            "config",
            "round",
            "merge",
            "pipelined",
            "polling",
            "poll_interval_ns",
            "alpha_ns",
            "sampling_ns",
            "max_merge_pages",
            "ios",
            "duration_ns",
            "iops",
            "lat_ns_p50",
            "lat_ns_p99",
            "lat_ns_mean",
            "cpu_ns",
            "cpu_pct",
            "device_requests",
            "pages",
            "pages_per_request_mean",
            "releases",
            "polls",
            "sleeps",
            "leader_turns",
            "prediction_error_ns_mean",
            "strategy",
            "waits",
            "reasons",
            "interrupted",
        ] {
            assert!(r.get(field).is_some(), "merge_result lacks {field}: {r}");
        }
        assert_eq!(r["ios"], r["releases"], "every waiter released once: {r}");
        // The default strategies are the paper's two pollings, under their old names.
        let (polling, strategy) = (r["polling"].as_str().unwrap(), r["strategy"].as_str().unwrap());
        assert!(matches!((polling, strategy), ("fixed", "poll") | ("dynamic", "hybrid")), "{r}");
        assert_eq!(r["waits"][strategy], r["device_requests"], "every device request waited by {strategy}: {r}");
        assert!(r["iops"].as_f64().unwrap() > 0.0);
        assert!(r["lat_ns_p50"].as_u64().unwrap() <= r["lat_ns_p99"].as_u64().unwrap());
    }
    assert_eq!(results.iter().filter(|r| r["merge"] == false).count(), 4);
    let summary = recs.iter().find(|r| r["type"] == "merge_summary").expect("a summary record");
    assert_eq!(summary["ratios"].as_array().unwrap().len(), 4);
    assert_eq!(summary["rounds"], 2);
    assert!(summary["read_ratio_mean"].as_f64().unwrap() > 0.0);
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.contains("<svg") && svg_text.contains("fixed/pipelined"));
}

#[test]
fn the_table_names_the_ratio() {
    let out = smartcon(&[
        "--target",
        "emu:optane,channels=1,size=16m",
        "--threads",
        "4",
        "--duration",
        "40ms",
        "--sampling",
        "5ms",
        "--ops",
        "read",
        "--patterns",
        "seq",
        "--span",
        "4m",
        "--no-reference",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("fixed/serialized") && text.contains("dynamic/pipelined"), "{text}");
    assert!(!text.contains("no-merge"));
    assert!(text.contains("pipelined/serialized IOPS, reads:"), "{text}");
}

/// merge-bench accepted the engine's `--io-cpus`, `--spin-budget`, `--cpu-window` and
/// `--destructive` and ignored them; a flag the merge device cannot honour is not offered.
#[test]
fn flags_the_merge_device_cannot_honour_are_refused() {
    for flag in [&["--io-cpus", "1"][..], &["--spin-budget", "1ms"], &["--cpu-window", "100ms"], &["--destructive"]] {
        let out = smartcon(flag);
        assert_eq!(out.status.code(), Some(2), "{flag:?} was accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument"), "{flag:?}");
    }
}

/// `--strategies` takes any `--strategy`: each gets its serialized and pipelined rows under
/// its own name, the reference row waits with the first, and every device request is counted
/// under the way its leader waited (smart: its decisions).
#[test]
fn any_strategy_names_its_rows_and_counts_its_waits() {
    let out = smartcon(&[
        "--target",
        "emu:optane,channels=1,size=16m",
        "--threads",
        "4",
        "--duration",
        "40ms",
        "--ops",
        "read",
        "--patterns",
        "rand",
        "--span",
        "8m",
        "--strategies",
        "block,smart",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let configs: Vec<&str> =
        recs.iter().filter(|r| r["type"] == "merge_result").map(|r| r["config"].as_str().unwrap()).collect();
    assert_eq!(
        configs,
        ["no-merge/block", "block/serialized", "block/pipelined", "smart/serialized", "smart/pipelined"]
    );
    for r in recs.iter().filter(|r| r["type"] == "merge_result") {
        let waits = r["waits"].as_object().unwrap();
        let total: u64 = waits.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(total, r["device_requests"].as_u64().unwrap(), "{r}");
        let reasons: u64 = r["reasons"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        if r["strategy"] == "block" {
            assert_eq!(waits.keys().collect::<Vec<_>>(), ["block"], "{r}");
            assert_eq!(reasons, 0, "a fixed strategy has no reasons: {r}");
        } else {
            assert!(waits.keys().all(|k| ["block", "spin", "sync"].contains(&k.as_str())), "{r}");
            assert_eq!(reasons, total, "every decision has its reason: {r}");
        }
    }
}
