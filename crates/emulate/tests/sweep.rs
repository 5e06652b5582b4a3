//! The faster-storage sweep end to end: a small tar-and-wc run through libsmartcon.so at
//! two factors. Needs the library built beside the test binary (`cargo build --release`);
//! skips, saying so, when it is not there or `tar` is missing. No timing bound: the checks
//! are the table's arithmetic and what the records must contain.

use std::path::PathBuf;

use smartcon_emulate::sweep::{plot_svg, run_sweep, table, SweepOptions};

fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.join("libsmartcon.so"), deps.parent()?.join("libsmartcon.so")].into_iter().find(|p| p.exists())
}

#[test]
fn sweep_predicts_each_factor_and_checks_1x_in_real_time() {
    let Some(library) = library() else {
        eprintln!("skipped: libsmartcon.so is not built (cargo build --release -p smartcon-preload)");
        return;
    };
    if std::process::Command::new("tar").arg("--version").output().is_err() {
        eprintln!("skipped: tar is not installed");
        return;
    }
    let work_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sweep-{}", std::process::id()));
    let opts = SweepOptions {
        device: "emu:nvme,lat=2ms,channels=1".into(),
        speedups: vec![1.0, 4.0],
        command: None,
        library,
        work_dir: work_dir.clone(),
        tree_bytes: 256 << 10,
        check_real_time: true,
    };
    let r = run_sweep(&opts).expect("the sweep runs");
    assert_eq!(r.points.iter().map(|p| p.speedup).collect::<Vec<_>>(), vec![1.0, 4.0]);
    let (one, four) = (&r.points[0], &r.points[1]);
    // tar wrote the archive and read it back through the device, in each point.
    for p in [one, four] {
        assert!(p.totals.writes > 0 && p.totals.reads > 0, "{:?}", p.totals);
        assert!(p.totals.skew_ns > 0, "virtual time skipped the device waits: {:?}", p.totals);
        // Every wait lasts at least the model's time, so the prediction holds them all.
        assert!(p.predicted_ns >= p.totals.device_ns, "{p:?}");
    }
    assert_eq!(one.totals.reads, four.totals.reads, "the same program does the same I/O");
    assert!(four.totals.device_ns < one.totals.device_ns, "a 4 x device serves faster");
    assert_eq!(four.ideal_ns, (one.predicted_ns as f64 / 4.0).round() as u64);
    assert!((one.speedup_over_1x - 1.0).abs() < 1e-9);
    assert!(four.speedup_over_1x > 1.0, "{four:?}");
    assert!(r.real_time_1x_ns.is_some() && r.real_time_1x_error_pct.is_some());
    let text = table(&r);
    assert!(text.contains("| 4 |") && text.contains("real time"), "{text}");
    let svg = work_dir.join("sweep.svg");
    plot_svg(&r, &svg).expect("the plot");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}
