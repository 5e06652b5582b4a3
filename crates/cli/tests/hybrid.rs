//! The polling strategies as a user runs them: the interval sweep reports a best interval
//! among the ones asked for and draws it; hybrid's records carry its prediction error and
//! a check against spin and block; bad polling input exits 2. No timing is asserted.

use std::process::{Command, Output};

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-hybrid-test-{name}-")).tempdir().unwrap()
}

fn run(args: &[&str]) -> Output {
    // An empty home: no stored profile of the user's steers smart.
    let home = scratch("home");
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home.path()).args(args).output().unwrap()
}

fn records(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn interval_sweep_reports_the_best_interval_and_draws_the_curve() {
    let dir_guard = scratch("sweep");
    let dir = dir_guard.path().to_path_buf();
    let svg = dir.join("fig1.svg");
    let out = run(&[
        "bench",
        "--targets",
        "emu:optane,poll_cost=200ns,size=16m",
        "--ops",
        "read",
        "--sizes",
        "4k",
        "--strategies",
        "block,spin,hybrid,dip",
        "--sweep-interval",
        "500ns,2us,8us",
        "--duration",
        "80ms",
        "--sampling",
        "10ms",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let recs = records(&out);
    let polls: Vec<_> = recs.iter().filter(|r| r["type"] == "result" && r["strategy"] == "poll").collect();
    let intervals: Vec<u64> = polls.iter().map(|r| r["polling"]["interval_ns"].as_u64().unwrap()).collect();
    assert_eq!(intervals, vec![500, 2_000, 8_000]);
    let sweep = recs.iter().find(|r| r["type"] == "interval_sweep").expect("an interval_sweep record");
    let best = sweep["best_interval_ns"].as_u64().unwrap();
    assert!(intervals.contains(&best));
    // The best is the one with the lowest mean latency among the poll runs.
    let lowest =
        polls.iter().min_by(|a, b| a["lat_ns_mean"].as_f64().partial_cmp(&b["lat_ns_mean"].as_f64()).unwrap()).unwrap();
    assert_eq!(lowest["polling"]["interval_ns"].as_u64(), Some(best));
    assert!(sweep["block_lat_ns_mean"].as_f64().unwrap() > 0.0 && sweep["spin_lat_ns_mean"].as_f64().unwrap() > 0.0);
    assert!(sweep["dip_lat_ns_mean"].as_f64().unwrap() > 0.0 && sweep["hybrid_lat_ns_mean"].as_f64().unwrap() > 0.0);
    let check = recs.iter().find(|r| r["type"] == "hybrid_check").expect("a hybrid_check record");
    assert!(check["iops_vs_spin"].as_f64().unwrap() > 0.0);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    for series in [
        "fixed-interval polling",
        "block (interrupt-like sleep)",
        "spin (back-to-back polls)",
        "dip (wait without polling, then poll)",
        "hybrid (sleep, then poll)",
        "poll interval (us)",
    ] {
        assert!(text.contains(series), "missing {series:?} in the plot");
    }
}

#[test]
fn hybrid_records_carry_the_prediction_after_sampling() {
    for strategy in ["hybrid", "dip", "poll", "half-mean", "iopoll-hybrid", "pas"] {
        let out = run(&[
            "io",
            "--target",
            "emu:nvme,size=16m",
            "--strategy",
            strategy,
            "--duration",
            "150ms",
            "--sampling",
            "20ms",
            "--json",
        ]);
        let r = &records(&out)[0];
        let p = &r["polling"];
        assert_eq!(p["ios"].as_u64(), r["ios"].as_u64(), "{strategy}: every I/O polled");
        assert!(p["polls_per_io"].as_f64().unwrap() >= 1.0);
        if strategy == "hybrid" || strategy == "dip" {
            let predicted = p["predicted_ios"].as_u64().unwrap();
            assert!(predicted > 0 && predicted < r["ios"].as_u64().unwrap(), "sampled first, then predicted: {p}");
            // (The overshoot is only measured when the CPUs are not busy, so it is not asserted.)
            assert!(p["pred_err_ns_p50"].as_u64().is_some() && p["pred_err_ns_p90"].as_u64().is_some(), "{p}");
        } else {
            assert_eq!(p["predicted_ios"].as_u64(), Some(0), "{strategy} predicts nothing");
        }
    }
}

#[test]
fn bad_polling_input_exits_2() {
    for (args, needle) in [
        (vec!["bench", "--targets", "emu:optane", "--load", "heavy"], "unknown load"),
        (vec!["bench", "--targets", "emu:optane", "--plot", "x.svg"], "--sweep-interval"),
        (vec!["bench", "--targets", "emu:optane", "--sweep-interval", "1us,0"], "--sweep-interval"),
        (vec!["io", "--target", "emu:optane", "--strategy", "smart-hybrid", "--alpha", "1ms"], "alpha"),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
    assert!(!std::path::Path::new("x.svg").exists());
}

#[test]
fn evaluate_reports_the_polling_study() {
    let dir_guard = scratch("evaluate");
    let dir = dir_guard.path().to_path_buf();
    let out_dir = dir.join("report");
    let out = run(&[
        "evaluate",
        "--tiny",
        "--loads",
        "bm-only",
        "--workloads",
        "iozone-rand-read",
        "--sizes",
        "4k",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(out_dir.join("results.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let study: Vec<_> = recs.iter().filter(|r| r["workload"] == "polling-study").collect();
    for strategy in ["block", "spin", "hybrid", "dip", "poll", "half-mean", "iopoll-hybrid", "pas", "smart-hybrid"] {
        for load in ["bm-only", "cpu-intensive"] {
            assert!(study.iter().any(|r| r["strategy"] == strategy && r["load"] == load), "{strategy} under {load}");
        }
    }
    assert!(recs.iter().any(|r| r["type"] == "interval_sweep"));
    assert_eq!(recs.iter().filter(|r| r["type"] == "hybrid_check").count(), 2, "one check per load");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains("## Hybrid waiting and polling") && summary.contains("best interval"));
    let sweep_runs: Vec<_> = recs.iter().filter(|r| r["workload"] == "poll-interval-sweep").collect();
    for strategy in ["block", "spin", "dip", "hybrid"] {
        assert!(sweep_runs.iter().any(|r| r["strategy"] == strategy), "{strategy} on the poll_cost device");
    }
    let contention = &summary[summary.find("Fig. 1's contention").expect("the poll_cost table")..];
    for strategy in ["dip", "hybrid"] {
        assert!(contention.lines().any(|l| l.split_whitespace().any(|w| w == strategy)), "{strategy}: {contention}");
    }
    let merges: Vec<_> =
        recs.iter().filter(|r| r["type"] == "merge_result" && r["workload"] == "merge-study").collect();
    assert_eq!(merges.len(), 10, "read and write x (merge off + 4 merge configurations)");
    for r in &merges {
        assert_eq!(r["releases"], r["ios"], "every waiter released once: {r}");
    }
    assert!(summary.contains("pipelined post-I/O at"));
    for plot in ["polling-interval.svg", "hybrid.svg", "merge.svg"] {
        let svg = std::fs::read_to_string(out_dir.join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{plot}");
    }
    let svg = std::fs::read_to_string(out_dir.join("hybrid.svg")).unwrap();
    assert!(svg.contains("hybrid IOPS / spin IOPS") && svg.contains("hybrid CPU / spin CPU"));
}
