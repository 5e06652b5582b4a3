//! Calibration: the model with this host's context-switch cost and this machine's device
//! latencies, set against what the evaluation measured.
//!
//! Inputs are the files other subcommands write: device profiles from `smartcon probe`
//! (`profiles/<name>.json`) and evaluation records (`results.jsonl`, whose `profile` records
//! carry the profiles the evaluation used, also those of devices it created and did not
//! store). They are read with small
//! structs of their own that ignore unknown fields, so this module depends only on the few
//! fields it uses. For each device and each (workload, op, pattern, size, load) cell that has
//! both a `block` result and a `smart` (else `spin`) result, the measured gain is the ratio of
//! their IOPS and the predicted gain is Eq. 6 with tau_nvram = the device's 4 KiB-class
//! latency from the profile and tau_ctx = the host's direct switch cost. Non-goal: refitting
//! the cache-miss probabilities of Table III (no hardware counters here), so the prediction
//! keeps the paper's SmartCon/Mainstream miss behaviour.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{DeviceLatency, Error, ErrorKind, Model};

/// One entry of a probe profile's `latencies` list.
#[derive(Debug, Clone, Deserialize)]
pub struct ProfileLatency {
    pub op: String,
    pub bs_bytes: u64,
    pub strategy: String,
    pub lat_ns_mean: f64,
    /// Points of the queue probe (other I/Os in flight) are not the device's own latency.
    #[serde(default)]
    pub background_ios: u32,
}

/// The parts of a probe profile that calibration uses.
#[derive(Debug, Clone, Deserialize)]
pub struct DeviceProfile {
    pub device: String,
    #[serde(default)]
    pub latencies: Vec<ProfileLatency>,
}

/// The parts of an evaluation `result` record that calibration uses.
#[derive(Debug, Clone, Deserialize)]
pub struct ResultRecord {
    pub target: String,
    /// The device behind the target (`blk:vda` for a file on it); profiles are per device.
    #[serde(default)]
    pub device: String,
    /// The evaluation's workload: cells of different workloads can share op, pattern and size.
    #[serde(default)]
    pub workload: String,
    pub op: String,
    #[serde(default)]
    pub pattern: String,
    pub bs_bytes: u64,
    pub strategy: String,
    pub iops: f64,
    #[serde(default)]
    pub load: String,
}

/// Predicted against measured gain for one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationRow {
    pub device: String,
    pub workload: String,
    pub op: String,
    pub pattern: String,
    pub bs_bytes: u64,
    pub load: String,
    /// The profile latency used as tau_nvram (ns, one access of `bs_bytes`).
    pub device_latency_ns: f64,
    /// Which strategy's profile entry gave that latency.
    pub latency_strategy: String,
    pub predicted_ratio: f64,
    pub measured_ratio: f64,
    /// `smart` when the results hold it, else `spin`.
    pub measured_strategy: String,
}

/// "PATH:LINE" (or "PATH" for a whole file, `line_number` 0): where a bad record is.
fn place(path: &Path, line_number: usize) -> String {
    match line_number {
        0 => path.display().to_string(),
        n => format!("{}:{n}", path.display()),
    }
}

/// A record that parses but makes no sense: "PATH:LINE: MESSAGE".
fn bad(kind: ErrorKind, path: &Path, line_number: usize, message: impl std::fmt::Display) -> Error {
    Error::new(kind, format!("{}: {message}", place(path, line_number)))
}

/// A record that does not parse: "PATH:LINE: WHAT: the parser's message", the parser's error
/// as the source.
fn unparsed(
    kind: ErrorKind,
    path: &Path,
    line_number: usize,
    what: impl std::fmt::Display,
    e: serde_json::Error,
) -> Error {
    Error::with_source(kind, format!("{}: {what}", place(path, line_number)), e)
}

/// "cannot read PATH: the reason", the `io::Error` as the source.
fn unreadable(path: &Path, source: std::io::Error) -> Error {
    Error::with_source(ErrorKind::Io, format_args!("cannot read {}", path.display()), source)
}

/// Reads one probe profile.
pub fn read_profile(path: &Path) -> Result<DeviceProfile, Error> {
    let text = smartcon_util::paths::read_text(path).map_err(|source| unreadable(path, source))?;
    let profile: DeviceProfile =
        serde_json::from_str(&text).map_err(|e| unparsed(ErrorKind::Profile, path, 0, "not a device profile", e))?;
    for l in &profile.latencies {
        if !l.lat_ns_mean.is_finite() || l.lat_ns_mean < 0.0 {
            return Err(bad(
                ErrorKind::Profile,
                path,
                0,
                format!("negative or non-finite lat_ns_mean {} for {} {}", l.lat_ns_mean, l.op, l.bs_bytes),
            ));
        }
    }
    Ok(profile)
}

/// Reads every `*.json` profile in a directory (sorted by name; a missing directory is empty).
pub fn read_profiles(dir: &Path) -> Result<Vec<DeviceProfile>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(unreadable(dir, source)),
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths.iter().map(|p| read_profile(p)).collect()
}

/// Reads the records of one `type` from a JSON Lines file, skipping the others; `check`
/// refuses a record that parses but makes no sense (it is given the record's 1-based line
/// number, for the error it returns).
fn read_typed<T: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &str,
    check: impl Fn(&T, usize) -> Result<(), Error>,
) -> Result<Vec<T>, Error> {
    let text = smartcon_util::paths::read_text(path).map_err(|source| unreadable(path, source))?;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| unparsed(ErrorKind::Usage, path, index + 1, "not JSON", e))?;
        if value.get("type").and_then(|t| t.as_str()) != Some(kind) {
            continue;
        }
        let record: T = serde_json::from_value(value)
            .map_err(|e| unparsed(ErrorKind::Usage, path, index + 1, format_args!("not a {kind} record"), e))?;
        check(&record, index + 1)?;
        out.push(record);
    }
    Ok(out)
}

/// Reads the `profile` records of an evaluation's JSON Lines file (the profiles `smart`
/// used); other record types are skipped.
pub fn read_result_profiles(path: &Path) -> Result<Vec<DeviceProfile>, Error> {
    read_typed(path, "profile", |_: &DeviceProfile, _| Ok(()))
}

/// Reads the `result` records of a JSON Lines file; other record types are skipped.
pub fn read_results(path: &Path) -> Result<Vec<ResultRecord>, Error> {
    read_typed(path, "result", |r: &ResultRecord, line_number| {
        if !r.iops.is_finite() || r.iops < 0.0 {
            return Err(bad(ErrorKind::Usage, path, line_number, format!("iops {} is negative or not finite", r.iops)));
        }
        Ok(())
    })
}

/// The profile latency for (op, bs): the `spin` entry (the device without a switch), else
/// `sync`, else `block`; at the exact size, else the nearest size.
pub fn device_latency(profile: &DeviceProfile, op: &str, bs_bytes: u64) -> Option<(f64, String)> {
    let rank = |s: &str| match s {
        "spin" => 0,
        "sync" => 1,
        "block" => 2,
        _ => 3,
    };
    profile
        .latencies
        .iter()
        .filter(|l| l.op == op && rank(&l.strategy) < 3 && l.background_ios == 0)
        .min_by_key(|l| (l.bs_bytes.abs_diff(bs_bytes), rank(&l.strategy)))
        .map(|l| (l.lat_ns_mean, l.strategy.clone()))
}

/// Calibrates against an evaluation's results file: the profiles the evaluation recorded
/// come first (they include devices it created for the run and did not store), then the
/// stored ones in `profiles_dir`. Every file is read before anything is computed.
pub fn calibrate_files(model: &Model, results: &Path, profiles_dir: &Path) -> Result<Vec<CalibrationRow>, Error> {
    let mut profiles = read_result_profiles(results)?;
    profiles.extend(read_profiles(profiles_dir)?);
    let records = read_results(results)?;
    calibrate(model, &profiles, &records)
}

/// Predicted beside measured gain for every cell with a profile and both results.
/// `model` must already carry the host's tau_ctx and clock.
pub fn calibrate(
    model: &Model,
    profiles: &[DeviceProfile],
    results: &[ResultRecord],
) -> Result<Vec<CalibrationRow>, Error> {
    model.validate()?;
    // (target, device, workload, op, pattern, bs, load) -> strategy -> iops; BTreeMap keeps
    // the output ordered.
    type Key = (String, String, String, String, String, u64, String);
    let mut cells: BTreeMap<Key, BTreeMap<String, f64>> = BTreeMap::new();
    for r in results {
        cells
            .entry((
                r.target.clone(),
                r.device.clone(),
                r.workload.clone(),
                r.op.clone(),
                r.pattern.clone(),
                r.bs_bytes,
                r.load.clone(),
            ))
            .or_default()
            .insert(r.strategy.clone(), r.iops);
    }
    let mut rows = Vec::new();
    for ((target, device, workload, op, pattern, bs_bytes, load), by_strategy) in cells {
        let Some(profile) = profiles.iter().find(|p| p.device == target || (!device.is_empty() && p.device == device))
        else {
            continue;
        };
        let Some(&block) = by_strategy.get("block") else {
            continue;
        };
        let (measured_strategy, fast) = match (by_strategy.get("smart"), by_strategy.get("spin")) {
            (Some(&s), _) => ("smart", s),
            (None, Some(&s)) => ("spin", s),
            _ => continue,
        };
        if block <= 0.0 {
            continue;
        }
        let Some((device_latency_ns, latency_strategy)) = device_latency(profile, &op, bs_bytes) else {
            continue;
        };
        let at = model.latencies(DeviceLatency::PerPageNs { ns: device_latency_ns })?;
        let predicted_ratio = model.project_at(&target, &at).ratio;
        rows.push(CalibrationRow {
            device: target,
            workload,
            op,
            pattern,
            bs_bytes,
            load,
            device_latency_ns,
            latency_strategy,
            predicted_ratio,
            measured_ratio: fast / block,
            measured_strategy: measured_strategy.to_string(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("smartcon-model-cal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("profiles")).unwrap();
        dir
    }

    #[test]
    fn calibrate_pairs_profiles_with_results() {
        let dir = fixture_dir("ok");
        std::fs::write(
            dir.join("profiles/optane.json"),
            r#"{"version":1,"device":"emu:optane","class":"very_fast","size_threshold_bytes":65536,
               "cpu_threshold_pct":85.0,"queue_limit":4,"extra":{"ignored":true},
               "latencies":[{"op":"read","bs_bytes":4096,"strategy":"block","lat_ns_mean":14000.0,"cpu_pct":20.0},
                            {"op":"read","bs_bytes":4096,"strategy":"spin","lat_ns_mean":10000.0,"cpu_pct":100.0}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("results.jsonl"),
            concat!(
                r#"{"type":"run","note":"skipped"}"#, "\n",
                r#"{"type":"result","target":"emu:optane","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"block","iops":50000.0,"lat_ns_mean":20000.0,"load":"bm-only"}"#, "\n",
                r#"{"type":"result","target":"emu:optane","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"smart","iops":65000.0,"lat_ns_mean":15000.0,"load":"bm-only"}"#, "\n",
                r#"{"type":"result","target":"emu:nand","op":"read","pattern":"rand","bs_bytes":4096,"strategy":"block","iops":9000.0,"load":"bm-only"}"#, "\n",
            ),
        )
        .unwrap();
        let profiles = read_profiles(&dir.join("profiles")).unwrap();
        let results = read_results(&dir.join("results.jsonl")).unwrap();
        assert_eq!(results.len(), 3);
        let model = Model { clock_ghz: 2.0, ..Model::default() }.with_tau_ctx_cycles(4000.0);
        let rows = calibrate(&model, &profiles, &results).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let row = &rows[0];
        assert_eq!(row.device, "emu:optane");
        assert_eq!(row.latency_strategy, "spin");
        assert_eq!(row.device_latency_ns, 10000.0);
        assert!((row.measured_ratio - 1.3).abs() < 1e-12);
        let at = crate::Latencies { tau_mem0_cycles: 74.4, tau_nvram_cycles: 20000.0 };
        let expected = model.project_at("x", &at).ratio;
        assert!((row.predicted_ratio - expected).abs() < 1e-12);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn malformed_results_name_the_line() {
        let dir = fixture_dir("bad");
        std::fs::write(dir.join("results.jsonl"), "{\"type\":\"result\",\"target\":\"x\"}\n").unwrap();
        let e = read_results(&dir.join("results.jsonl")).unwrap_err().to_string();
        assert!(e.contains(":1:"), "{e}");
        std::fs::write(dir.join("profiles/broken.json"), "{").unwrap();
        assert!(read_profiles(&dir.join("profiles")).unwrap_err().to_string().contains("broken.json"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_keep_the_parser_and_io_errors_as_their_source() {
        use std::error::Error as _;
        let dir = fixture_dir("sources");
        std::fs::write(dir.join("results.jsonl"), "{\"type\":\"result\",\"target\":\"x\"}\n").unwrap();
        let e = read_results(&dir.join("results.jsonl")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        let cause = e.source().expect("the parser's error");
        assert!(cause.downcast_ref::<serde_json::Error>().is_some(), "{cause:?}");
        assert!(e.message.ends_with(&cause.to_string()), "{e}");

        let e = read_results(&dir.join("missing.jsonl")).unwrap_err();
        assert!(e.message.starts_with("cannot read "), "{e}");
        let cause = e.source().and_then(|c| c.downcast_ref::<std::io::Error>()).expect("the io error");
        assert_eq!(cause.kind(), std::io::ErrorKind::NotFound);

        std::fs::write(dir.join("profiles/broken.json"), "{").unwrap();
        let e = read_profiles(&dir.join("profiles")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Profile);
        assert!(e.message.contains("broken.json: not a device profile: "), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
