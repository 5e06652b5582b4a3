//! What a measured [`HostProfile`] says, as the JSON Lines records of `smartcon ctx`, and
//! how a profile is stored.
//!
//! The derived figures live here, not in the CLI: the refill cost per KiB of an indirect
//! point, and how the ring's raw two-process figure compares with `perf bench sched pipe`.
//! Non-goals: printing (the CLI renders tables and plots from these records).

use std::path::Path;

use serde::Serialize;

use crate::{internal, os, Error, HostProfile, IndirectPoint};

/// raw / perf within this range means the two methods agree within 25 %.
pub const AGREEMENT_RANGE: std::ops::RangeInclusive<f64> = 0.75..=1.25;

/// One ring size of the direct cost (`"type":"ctx_direct"`).
#[derive(Debug, Clone, Serialize)]
pub struct DirectRecord {
    pub r#type: &'static str,
    pub procs: usize,
    pub us_per_switch: f64,
    pub us_per_switch_raw: f64,
}

/// One array size of the indirect cost (`"type":"ctx_indirect"`).
#[derive(Debug, Clone, Serialize)]
pub struct IndirectRecord {
    pub r#type: &'static str,
    pub array_bytes: u64,
    pub us_per_switch: f64,
    pub us_per_switch_raw: f64,
    pub us_hot: f64,
    /// (us_per_switch - direct) / (array_bytes / 1024): refill cost per KiB.
    pub us_per_kib_refilled: f64,
}

/// The wake-up latencies (`"type":"wakeup"`).
#[derive(Debug, Clone, Serialize)]
pub struct WakeupRecord {
    pub r#type: &'static str,
    pub same_cpu_us: f64,
    pub cross_cpu_us: Option<f64>,
}

/// lmbench's `lat_ctx` figures side by side (`"type":"lat_ctx"`): the plain per-switch cost
/// (`-s 0`) and with a 2 MB working set per process (`-s 2048`), both for a ring of
/// `procs` with the single-process time subtracted, as lat_ctx subtracts its overhead.
#[derive(Debug, Clone, Serialize)]
pub struct LatCtxRecord {
    pub r#type: &'static str,
    pub procs: usize,
    pub plain_us: Option<f64>,
    pub s2048_us: Option<f64>,
}

/// The outside check (`"type":"perf_sched_pipe"`).
#[derive(Debug, Clone, Serialize)]
pub struct PerfRecord {
    pub r#type: &'static str,
    pub perf_us_per_switch: Option<f64>,
    pub raw_two_process_us_per_switch: f64,
    /// raw / perf; within [`AGREEMENT_RANGE`] means the two methods agree within 25%.
    pub raw_over_perf: Option<f64>,
    pub skipped: Option<String>,
}

impl HostProfile {
    /// The direct cost in us (0 without a measurement).
    pub fn direct_us(&self) -> f64 {
        self.ctx_direct_ns().unwrap_or(0.0) / 1e3
    }

    /// The refill cost per KiB of one indirect point: what the switch costs beyond the
    /// direct cost, spread over the array (never negative).
    pub fn us_per_kib_refilled(&self, p: &IndirectPoint) -> f64 {
        (p.us_per_switch - self.direct_us()).max(0.0) / (p.array_bytes as f64 / 1024.0)
    }

    /// The ring's raw two-process time per switch, if a two-process ring ran.
    pub fn raw_two_process_us(&self) -> Option<f64> {
        self.direct.iter().find(|p| p.procs == 2).map(|p| p.us_per_switch_raw)
    }

    /// raw two-process / perf, when both exist and perf is positive.
    pub fn raw_over_perf(&self) -> Option<f64> {
        match (self.raw_two_process_us(), self.perf_sched_pipe_us_per_switch) {
            (Some(r), Some(p)) if p > 0.0 => Some(r / p),
            _ => None,
        }
    }

    pub fn direct_records(&self) -> Vec<DirectRecord> {
        let record = |p: &crate::DirectPoint| DirectRecord {
            r#type: "ctx_direct",
            procs: p.procs,
            us_per_switch: p.us_per_switch,
            us_per_switch_raw: p.us_per_switch_raw,
        };
        self.direct.iter().map(record).collect()
    }

    pub fn indirect_records(&self) -> Vec<IndirectRecord> {
        let record = |p: &IndirectPoint| IndirectRecord {
            r#type: "ctx_indirect",
            array_bytes: p.array_bytes,
            us_per_switch: p.us_per_switch,
            us_per_switch_raw: p.us_per_switch_raw,
            us_hot: p.us_hot,
            us_per_kib_refilled: self.us_per_kib_refilled(p),
        };
        self.indirect.iter().map(record).collect()
    }

    /// lat_ctx's two figures for a ring of `procs` (the indirect ring's size): `None` where
    /// that ring size or the 2 MiB array was not measured.
    pub fn lat_ctx_record(&self, procs: usize) -> LatCtxRecord {
        LatCtxRecord {
            r#type: "lat_ctx",
            procs,
            plain_us: self.direct.iter().find(|p| p.procs == procs).map(|p| p.us_per_switch),
            s2048_us: self.indirect.iter().find(|p| p.array_bytes == crate::LAT_CTX_S_BYTES).map(|p| p.us_per_switch),
        }
    }

    pub fn wakeup_record(&self) -> WakeupRecord {
        WakeupRecord { r#type: "wakeup", same_cpu_us: self.wakeup_same_cpu_us, cross_cpu_us: self.wakeup_cross_cpu_us }
    }

    pub fn perf_record(&self) -> PerfRecord {
        PerfRecord {
            r#type: "perf_sched_pipe",
            perf_us_per_switch: self.perf_sched_pipe_us_per_switch,
            raw_two_process_us_per_switch: self.raw_two_process_us().unwrap_or(f64::NAN),
            raw_over_perf: self.raw_over_perf(),
            skipped: self.perf_skipped_reason.clone(),
        }
    }

    /// Writes the profile as pretty JSON, through a temporary file and a rename so a reader
    /// never sees half a profile; creates the directory. Returns whether it replaced a file.
    pub fn write(&self, path: &Path) -> Result<bool, Error> {
        let os = |what: &'static str| move |source| os(what, source);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(os("creating the host profile's directory"))?;
        }
        let replaced = path.exists();
        let text = serde_json::to_string_pretty(self).map_err(|e| internal(e.to_string()))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").map_err(os("writing the host profile"))?;
        std::fs::rename(&tmp, path).map_err(os("renaming the host profile into place"))?;
        Ok(replaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheSizes, DirectPoint, HOST_PROFILE_VERSION};

    fn profile() -> HostProfile {
        HostProfile {
            version: HOST_PROFILE_VERSION,
            created_unix_s: 0,
            quick: true,
            cpu: 0,
            cross_cpu: Some(1),
            clock_ghz: Some(2.0),
            cache: CacheSizes::default(),
            pipe_overhead_us: 1.0,
            direct: vec![
                DirectPoint { procs: 4, us_per_switch: 3.0, us_per_switch_raw: 4.0 },
                DirectPoint { procs: 2, us_per_switch: 2.0, us_per_switch_raw: 3.0 },
            ],
            indirect: vec![
                IndirectPoint { array_bytes: 1 << 20, us_per_switch: 12.0, us_per_switch_raw: 20.0, us_hot: 8.0 },
                IndirectPoint { array_bytes: 32 << 10, us_per_switch: 1.0, us_per_switch_raw: 2.0, us_hot: 1.0 },
            ],
            wakeup_same_cpu_us: 5.0,
            wakeup_cross_cpu_us: None,
            perf_sched_pipe_us_per_switch: Some(2.5),
            perf_runs: 3,
            perf_skipped_reason: None,
        }
    }

    #[test]
    fn derived_figures_on_a_synthetic_profile() {
        let p = profile();
        assert_eq!(p.direct_us(), 2.0, "the smallest ring");
        // (12 - 2) us over 1024 KiB.
        assert!((p.us_per_kib_refilled(&p.indirect[0]) - 10.0 / 1024.0).abs() < 1e-12);
        assert_eq!(p.us_per_kib_refilled(&p.indirect[1]), 0.0, "never negative");
        assert_eq!(p.raw_over_perf(), Some(3.0 / 2.5));
        assert!(AGREEMENT_RANGE.contains(&p.raw_over_perf().unwrap()));
        let perf = p.perf_record();
        assert_eq!(perf.raw_two_process_us_per_switch, 3.0);
        assert_eq!(p.direct_records().len(), 2);
        assert_eq!(p.indirect_records()[0].r#type, "ctx_indirect");
        let no_perf = HostProfile { perf_sched_pipe_us_per_switch: None, ..profile() };
        assert_eq!(no_perf.raw_over_perf(), None);
    }

    #[test]
    fn a_written_profile_reads_back_and_a_rewrite_says_it_replaced() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-ctxcost-report-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("sub").join("host.json");
        let p = profile();
        assert!(!p.write(&path).unwrap());
        assert_eq!(HostProfile::read(&path).unwrap(), p);
        assert!(p.write(&path).unwrap());
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn a_bad_profile_is_a_profile_error_with_the_parser_as_its_source() {
        use std::error::Error as _;
        let scratch = tempfile::Builder::new().prefix("smartcon-ctxcost-report-").tempdir().unwrap();
        let path = scratch.path().join("host.json");
        let missing = HostProfile::read(&path).unwrap_err();
        assert_eq!(missing.kind, crate::ErrorKind::Profile);
        assert!(
            missing.message.ends_with("host.json: not found; run `smartcon ctx` first to measure this host"),
            "{missing}"
        );
        std::fs::write(&path, "{").unwrap();
        let e = HostProfile::read(&path).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Profile);
        assert!(e.message.starts_with("host profile ") && e.message.contains("host.json: not JSON: "), "{e}");
        let cause = e.source().expect("the parser's error");
        assert!(cause.downcast_ref::<serde_json::Error>().is_some(), "{cause:?}");
        assert!(e.message.ends_with(&cause.to_string()), "{e}");
    }
}
