//! What `smartcon model` reports, as typed records: the projection of every device, the
//! ratio under every alternative reading of the paper, and the gap to the figures the paper
//! quotes with the context-switch cost that would close it.
//!
//! Table III's numbers live once, in [`crate::params`]; this module only looks them up
//! ([`dram_tau_mem0_cycles`]) and holds the paper's quoted ratios ([`paper_ratio`]).
//! Non-goals: printing (the CLI renders a [`Report`]) and reading files.

use serde::Serialize;

use crate::{params, Device, DeviceLatency, Error, Model, Projection};

/// tau_mem0 in cycles of the Table III row for a DRAM clock in MHz (533, 800 or 1067).
pub fn dram_tau_mem0_cycles(clock_mhz: u32) -> Option<f64> {
    let name = format!("ddr{clock_mhz}");
    params::DRAM_CLOCKS.iter().find(|(n, _)| *n == name).map(|&(_, cycles)| cycles)
}

/// The ratio the paper quotes for one of its devices: Table IV's model column for the DDR
/// clocks (1.24 / 1.23 / 1.24), Fig. 18's "about 80 %" gain for the NVRAM technologies.
pub fn paper_ratio(device: &str) -> Option<f64> {
    match device {
        "ddr533" | "ddr1067" => Some(1.24),
        "ddr800" => Some(1.23),
        "pcram" | "fram" | "mram" => Some(1.8),
        _ => None,
    }
}

/// One device's projection (`"type":"projection"`).
#[derive(Debug, Clone, Serialize)]
pub struct ProjectionRecord {
    pub r#type: &'static str,
    pub device: String,
    pub latency: DeviceLatency,
    pub tau_mem0_cycles: f64,
    pub tau_nvram_cycles: f64,
    pub cpi_smartcon: f64,
    pub cpi_mainstream: f64,
    pub ratio: f64,
}

/// One device's ratio under one alternative reading (`"type":"interpretation"`).
#[derive(Debug, Clone, Serialize)]
pub struct InterpretationRecord {
    pub r#type: &'static str,
    pub reading: &'static str,
    pub device: String,
    pub ratio: f64,
    pub ratio_default: f64,
}

/// The equations against the paper's figure for one device (`"type":"paper_gap"`).
#[derive(Debug, Clone, Serialize)]
pub struct GapRecord {
    pub r#type: &'static str,
    pub device: String,
    pub ratio: f64,
    pub paper_ratio: f64,
    /// The context-switch cost (both systems) at which the equations give the paper's ratio.
    pub tau_ctx_cycles_for_paper_ratio: Option<f64>,
}

/// Everything the model says about a list of devices.
#[derive(Debug, Clone)]
pub struct Report {
    pub projections: Vec<Projection>,
    /// Per alternative reading: its label and the ratio per device, in device order.
    pub alternatives: Vec<(&'static str, Vec<f64>)>,
    pub gaps: Vec<GapRecord>,
    devices: Vec<Device>,
}

impl Report {
    /// Projects every device under the model and every alternative reading.
    pub fn new(model: &Model, devices: &[Device]) -> Result<Report, Error> {
        let projections: Vec<Projection> = devices.iter().map(|d| model.project(d)).collect::<Result<_, _>>()?;
        let mut alternatives = Vec::new();
        for (label, interp) in model.interp.alternatives() {
            let alt = Model { interp, ..model.clone() };
            let ratios = devices.iter().map(|d| alt.project(d).map(|p| p.ratio)).collect::<Result<_, _>>()?;
            alternatives.push((label, ratios));
        }
        let mut gaps = Vec::new();
        for (d, p) in devices.iter().zip(&projections) {
            if let Some(paper) = paper_ratio(&d.name) {
                let at = model.latencies(d.latency)?;
                gaps.push(GapRecord {
                    r#type: "paper_gap",
                    device: d.name.clone(),
                    ratio: p.ratio,
                    paper_ratio: paper,
                    tau_ctx_cycles_for_paper_ratio: model.tau_ctx_for_ratio(paper, &at),
                });
            }
        }
        Ok(Report { projections, alternatives, gaps, devices: devices.to_vec() })
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn projection_records(&self) -> Vec<ProjectionRecord> {
        self.devices
            .iter()
            .zip(&self.projections)
            .map(|(d, p)| ProjectionRecord {
                r#type: "projection",
                device: d.name.clone(),
                latency: d.latency,
                tau_mem0_cycles: p.tau_mem0_cycles,
                tau_nvram_cycles: p.tau_nvram_cycles,
                cpi_smartcon: p.smartcon.cpi,
                cpi_mainstream: p.mainstream.cpi,
                ratio: p.ratio,
            })
            .collect()
    }

    /// Reading by reading, device by device.
    pub fn interpretation_records(&self) -> Vec<InterpretationRecord> {
        let mut out = Vec::new();
        for (label, ratios) in &self.alternatives {
            for ((d, r), p) in self.devices.iter().zip(ratios).zip(&self.projections) {
                out.push(InterpretationRecord {
                    r#type: "interpretation",
                    reading: label,
                    device: d.name.clone(),
                    ratio: *r,
                    ratio_default: p.ratio,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paper_devices;

    #[test]
    fn table_iii_dram_rows_are_looked_up_once() {
        assert_eq!(dram_tau_mem0_cycles(533), Some(111.88));
        assert_eq!(dram_tau_mem0_cycles(800), Some(74.4));
        assert_eq!(dram_tau_mem0_cycles(1067), Some(55.94));
        assert_eq!(dram_tau_mem0_cycles(800), Some(params::DRAM_DEFAULT_TAU_MEM0_CYCLES));
        assert_eq!(dram_tau_mem0_cycles(666), None);
    }

    #[test]
    fn the_report_has_a_record_per_device_reading_and_quoted_figure() {
        let model = Model::default();
        let mut devices = paper_devices();
        devices.push(Device { name: "optane".into(), latency: DeviceLatency::PerPageNs { ns: 10_000.0 } });
        let r = Report::new(&model, &devices).unwrap();
        let projections = r.projection_records();
        assert_eq!(projections.len(), 7);
        assert_eq!(projections[0].device, "ddr533");
        assert_eq!(projections[0].ratio, model.project(&devices[0]).unwrap().ratio);
        assert_eq!(r.interpretation_records().len(), r.alternatives.len() * 7);
        // Six of the seven devices have a figure in the paper; optane does not.
        assert_eq!(r.gaps.len(), 6);
        assert!(r.gaps.iter().all(|g| g.device != "optane"));
        let ddr800 = r.gaps.iter().find(|g| g.device == "ddr800").unwrap();
        assert_eq!(ddr800.paper_ratio, 1.23);
        // The cost that closes the gap does close it.
        if let Some(tau) = ddr800.tau_ctx_cycles_for_paper_ratio {
            let p = model.clone().with_tau_ctx_cycles(tau).project(&devices[1]).unwrap();
            assert!((p.ratio - 1.23).abs() < 1e-6, "{}", p.ratio);
        }
    }
}
