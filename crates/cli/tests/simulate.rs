//! `smartcon bench --simulate` as a user runs it: the same seed prints the same records byte
//! for byte, every record is marked as simulated and has a real bench's fields, the host
//! model comes from a preset or a file, and bad input exits 2 with one line. No timing is
//! asserted (the simulation's speed is a figure in docs/simulate.md).

use std::process::{Command, Output};

/// A scratch directory, removed when dropped (also when the test panics).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-simulate-test-{tag}-")).tempdir().unwrap()
}

fn run(tag: &str, args: &[&str]) -> Output {
    // An empty home: no host.json of this machine picks the host model.
    let home = scratch(tag);
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home.path()).args(args).output().unwrap()
}

const CELLS: [&str; 14] = [
    "bench",
    "--simulate",
    "--json",
    "--targets",
    "emu:nvme,emu:optane",
    "--ops",
    "read",
    "--sizes",
    "4k",
    "--strategies",
    "block,spin,sync,hybrid,smart",
    "--duration",
    "200ms",
    "--load",
];

#[test]
fn the_same_seed_prints_the_same_records_and_each_is_marked_simulated() {
    for load in ["bm-only", "cpu-intensive"] {
        let args: Vec<&str> = CELLS.iter().copied().chain([load, "--seed", "42", "--host", "host-b"]).collect();
        let (a, b) = (run("a", &args), run("b", &args));
        assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
        assert_eq!(a.stdout, b.stdout, "{load}: two runs of one seed differ");
        let records: Vec<serde_json::Value> =
            String::from_utf8_lossy(&a.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let results: Vec<_> = records.iter().filter(|r| r["type"] == "result").collect();
        assert_eq!(results.len(), 10, "{load}: 2 devices x 5 strategies");
        for r in records.iter().filter(|r| r["type"] == "result" || r["type"] == "summary") {
            assert_eq!(r["simulated"]["seed"], 42, "{r}");
            assert_eq!(r["simulated"]["host"], "host-b", "{r}");
            assert_eq!(r["simulated"]["crunchers"], if load == "bm-only" { 0 } else { 2 }, "{r}");
        }
        for r in &results {
            for field in ["iops", "lat_ns_p50", "cpu_user_pct", "cpu_sys_pct", "decisions", "accuracy"] {
                assert!(r.get(field).is_some(), "{load}: a simulated result lacks {field}: {r}");
            }
            assert!(r["ios"].as_u64().unwrap() > 100, "{r}");
        }
        let other: Vec<&str> = CELLS.iter().copied().chain([load, "--seed", "43", "--host", "host-b"]).collect();
        assert_ne!(run("c", &other).stdout, a.stdout, "{load}: another seed, other draws");
    }
}

#[test]
fn the_host_model_comes_from_a_file_and_cores_from_the_flag() {
    let dir_guard = scratch("file");
    let dir = dir_guard.path();
    let mut model = smartcon_engine::host::HostModel::preset("bare-metal").unwrap();
    model.name = "from-a-file".into();
    let path = dir.join("host.json");
    std::fs::write(&path, serde_json::to_string(&model).unwrap()).unwrap();
    let args: Vec<&str> =
        CELLS.iter().copied().chain(["bm-only", "--host", path.to_str().unwrap(), "--cores", "3"]).collect();
    let out = run("file-run", &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["simulated"]["host"], "from-a-file");
    assert_eq!(first["simulated"]["cores"], 3);
}

#[test]
fn bad_simulation_input_is_a_one_line_usage_error() {
    for (args, says) in [
        (vec!["bench", "--simulate", "--host", "host-z"], "neither a preset"),
        (vec!["bench", "--simulate", "--targets", "tmp:16m"], "emulated devices only"),
        (vec!["bench", "--simulate", "--cores", "0"], "--cores 0"),
        (vec!["bench", "--simulate", "--host", "measured"], "smartcon host"),
        (vec!["bench", "--seed", "3"], "--simulate"),
        // Checked before anything is measured: emulated targets, and a stored host model.
        (vec!["bench", "--compare-simulated", "--targets", "tmp:16m"], "emulated devices only"),
        (vec!["bench", "--compare-simulated", "--targets", "emu:optane"], "smartcon host"),
        (vec!["bench", "--compare-simulated", "--simulate"], "--simulate"),
        (vec!["bench", "--presets-table"], "--simulate"),
        (vec!["bench", "--host", "host-b", "--targets", "emu:optane"], "--simulate or --compare-simulated"),
        (vec!["bench", "--compare-simulated", "--host", "host-z", "--targets", "emu:optane"], "neither a preset"),
    ] {
        let out = run("bad", &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn the_presets_table_takes_one_host() {
    let out = run("table", &["bench", "--simulate", "--presets-table", "--host", "host-b", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 1, "only the host given: {rows:?}");
    assert_eq!(rows[0]["type"], "preset_row");
    assert_eq!(rows[0]["host"], "host-b");
}

/// `--compare-simulated --host`: the real cells against a given host model, and hybrid
/// against spin beside the oracle for that host (issue 27: hybrid's level against this
/// host's oracle in one command). The real cells are short; no figure is asserted, only
/// that each record is there and consistent with the cells it names.
#[test]
fn compare_simulated_puts_hybrid_beside_the_hosts_oracle() {
    let out = run(
        "oracle",
        &[
            "bench",
            "--compare-simulated",
            "--host",
            "host-c",
            "--targets",
            "emu:nvme",
            "--sizes",
            "4k",
            "--ops",
            "read",
            "--strategies",
            "spin,hybrid",
            "--duration",
            "100ms",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |t: &str| records.iter().filter(|r| r["type"] == t).collect::<Vec<_>>();
    assert_eq!(of("compare_simulated").len(), 3, "block, spin and hybrid: {records:?}");
    let oracle = of("hybrid_oracle");
    assert_eq!(oracle.len(), 1, "{records:?}");
    let o = oracle[0];
    assert_eq!(o["host"], "host-c");
    assert_eq!(o["target"], "emu:nvme");
    let cpu = |r: &serde_json::Value| r["cpu_user_pct"].as_f64().unwrap() + r["cpu_sys_pct"].as_f64().unwrap();
    let results = of("result");
    let (spin, hybrid) = (
        results.iter().find(|r| r["strategy"] == "spin").unwrap(),
        results.iter().find(|r| r["strategy"] == "hybrid").unwrap(),
    );
    let measured_cpu = o["measured"]["cpu_over_spin"].as_f64().unwrap();
    assert!((measured_cpu - cpu(hybrid) / cpu(spin)).abs() < 1e-9, "{o}");
    let share = o["oracle"]["cpu_share"].as_f64().unwrap();
    assert!((o["cpu_over_oracle"].as_f64().unwrap() - (measured_cpu - share)).abs() < 1e-9, "{o}");
    assert!(o["simulated"]["iops_over_spin"].as_f64().unwrap() > 0.0, "{o}");
}

/// `--compare-simulated --measured FILE`: a saved real run compared again, without
/// measuring, gives the records the run itself printed (the same host model and seed), so
/// that two models can be judged against one real run; a simulated file or another load's
/// run is refused.
#[test]
fn a_saved_real_run_compares_as_the_run_itself_did() {
    let home = scratch("saved");
    let dir = home.path();
    let cells = [
        "bench",
        "--compare-simulated",
        "--host",
        "host-c",
        "--targets",
        "emu:optane",
        "--sizes",
        "4k",
        "--ops",
        "read",
        "--strategies",
        "spin,hybrid",
        "--duration",
        "50ms",
        "--json",
    ];
    let smartcon = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", dir).args(args).output().unwrap()
    };
    let real = smartcon(&cells);
    assert!(real.status.success(), "{}", String::from_utf8_lossy(&real.stderr));
    let saved = dir.join("real.jsonl");
    std::fs::write(&saved, &real.stdout).unwrap();
    let again: Vec<&str> = cells.iter().copied().chain(["--measured", saved.to_str().unwrap()]).collect();
    let out = smartcon(&again);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let compared = |text: &[u8]| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(text)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["type"] == "compare_simulated" || r["type"] == "hybrid_oracle")
            .collect()
    };
    let (a, b) = (compared(&real.stdout), compared(&out.stdout));
    assert_eq!(a.len(), 4, "3 cells and the oracle line");
    assert_eq!(b.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        // The same figures; a float read back from text may differ in its last bit.
        assert!(same_json(x, y), "{x} against {y}");
    }
    assert!(!String::from_utf8_lossy(&out.stderr).contains("done after"), "nothing measured again");
    // Another load's run, and a simulated run, are refused.
    let other: Vec<&str> = again.iter().copied().chain(["--load", "cpu-intensive"]).collect();
    let err = smartcon(&other);
    assert_eq!(err.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&err.stderr).contains("give --load bm-only"));
    let sim_args: Vec<&str> =
        cells.iter().map(|a| if *a == "--compare-simulated" { "--simulate" } else { a }).collect();
    let sim = smartcon(&sim_args);
    assert!(sim.status.success(), "{}", String::from_utf8_lossy(&sim.stderr));
    std::fs::write(&saved, &sim.stdout).unwrap();
    let err = smartcon(&again);
    assert!(String::from_utf8_lossy(&err.stderr).contains("a simulated record"), "{err:?}");
}

/// JSON values equal but for floats' last bits (a float read back from its text).
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(1.0)
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_json(v, w)),
        _ => a == b,
    }
}
