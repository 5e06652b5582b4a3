//! `smartcon report RESULTS.jsonl [--out DIR]`: the summary, plots and report.html of a
//! results file (python/smartcon_ray's driver calls it after a sweep or a fleet survey; a
//! serial `emulate replay --out` writes the same file). The renderers are
//! smartcon_report::distributed; this module reads the file and writes the directory.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use smartcon_report::distributed::{summary_md, Records};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A results file (JSON Lines) written by a sweep, a fleet survey or `emulate replay --out`.
    #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub results: PathBuf,
    /// The report directory (must not exist or be empty). Default: beside RESULTS, which
    /// must not hold a summary.md yet.
    #[arg(long, value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: Option<PathBuf>,
}

pub fn run(args: ReportArgs) -> Result<()> {
    // Claimed and checked before anything is read (crate::paths).
    let out = args.out.as_deref().map(|d| crate::paths::out_dir("--out", d)).transpose()?;
    crate::paths::input("RESULTS", &args.results, false)?;
    let text = std::fs::read_to_string(&args.results).with_context(|| format!("read {}", args.results.display()))?;
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) if v["type"].is_string() => values.push(v),
            Ok(_) => bail!("{} line {}: a record without a \"type\"", args.results.display(), i + 1),
            Err(e) => bail!("{} line {}: not JSON ({e})", args.results.display(), i + 1),
        }
    }
    let records = Records::of(values);
    if records.rendered() == 0 {
        bail!("{}: no record this report renders (replay_result, fleet_host, point_failed)", args.results.display());
    }
    match out {
        Some(out) => {
            write(&records, Some(out.dir()), &args.results, Some(out.path()))?;
            out.commit()?;
            Ok(())
        }
        None => write(&records, None, &args.results, None),
    }
}

/// Writes summary.md, the plots and report.html for `records` into `out` (a directory the
/// caller claimed), else beside `results` (refusing to replace a summary there). `shown` is
/// the directory named in the closing line (a claimed output's final path, not the
/// temporary one the files are written into).
pub fn write(
    records: &Records,
    out: Option<&std::path::Path>,
    results: &std::path::Path,
    shown: Option<&std::path::Path>,
) -> Result<()> {
    let dir = match out {
        Some(dir) => dir.to_path_buf(),
        None => {
            let dir = results.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            for name in ["summary.md", "report.html"] {
                if dir.join(name).exists() {
                    bail!("{} exists; give --out DIR for another report", dir.join(name).display());
                }
            }
            dir.to_path_buf()
        }
    };
    let (md, plots) = summary_md(records, Some(&dir))?;
    std::fs::write(dir.join("summary.md"), &md)?;
    let page = smartcon_report::html::Page {
        title: "smartcon report",
        subtitle: &results.display().to_string(),
        top: "",
        body_md: &md,
        bottom: "",
    };
    smartcon_report::html::write_report_html(&dir, &page)?;
    println!(
        "report: {} (report.html, summary.md, {plots} plots)",
        smartcon_util::paths::escape(shown.unwrap_or(&dir))
    );
    Ok(())
}
