//! The analytic CPI model of SmartCon (Sec. 6, Eq. 1-6, Table III) and its calibration.
//!
//! The equations are evaluated exactly as printed:
//!
//! ```text
//! (1) CPI      = CPI_base + P_L2 * tau_mem + tau_TLB
//! (2) CPI_base = CPI_0 + tau_cache,  tau_cache = tau_L1 + P_L1 * tau_L2
//! (3) tau_mem  = tau_mem0 + P_mem * tau_IO
//! (4) tau_IO   = tau_nvram + P_ctx * tau_ctx
//! (5) tau_TLB  = tau_TLB0 + P_TLB * tau_mem0
//! (6) rho      = CPI_i * l_i * U_j / (CPI_j * l_j * U_i)   (j = SmartCon, i = Mainstream)
//! ```
//!
//! The text leaves a few readings open; each is a field of [`Interpretation`], the default is
//! the reading we believe the authors meant, and the CLI prints the effect of every
//! alternative next to the default (docs/ctx-model.md lists them). Non-goals: modelling the
//! CPU a spinning waiter burns (the paper's model has no term for it, so in the model
//! SmartCon never stops paying; the host's break-even latency comes from `smartcon ctx`),
//! and fitting the cache miss probabilities (no hardware counters on the machines we run on).

pub mod calibrate;
pub mod params;
pub mod report;

use serde::Serialize;

pub use params::{Latencies, SystemParams, MAINSTREAM, SMARTCON};

/// The workspace's one error type (`smartcon_util::error`): every function here returns it,
/// with the name of the offending value or file in its message and, where a file could not
/// be read or parsed, the `io` or `serde_json` error as its `source()`.
pub use smartcon_util::error::{Error, ErrorKind};

/// "model parameter NAME = VALUE is out of range: expected EXPECTED" (a usage error).
pub(crate) fn out_of_range(name: &str, value: f64, expected: &str) -> Error {
    Error::new(ErrorKind::Usage, format!("model parameter {name} = {value} is out of range: expected {expected}"))
}

/// How P_mem = 1.56 in Table III is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PMemReading {
    /// 1.56 % = 0.0156: the text derives it as (64 B / 4096 B) * 100 = 1.6 "%".
    Percent,
    /// 1.56 taken literally, as the table prints it (not a probability).
    Literal,
}

/// Which terms of Eq. 6 form the performance ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RatioForm {
    /// Eq. 6 as printed: CPI, path length l and utilization U.
    Eq6,
    /// CPI and path length only: the utilization difference ignored.
    CpiPathLength,
    /// Eq. 6 with U inverted (U_i / U_j): reading U as the CPU a transaction costs rather
    /// than the share of the CPU the benchmark gets.
    Eq6UtilizationInverted,
}

/// The readings the paper leaves open.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interpretation {
    pub p_mem: PMemReading,
    pub ratio: RatioForm,
    /// How many device accesses one 4 KiB page costs when a device is given by its
    /// per-cacheline latency: 64 as the Table III caption says (tau_nvram = tau_mem0 * 64),
    /// or 1 (one access per page).
    pub accesses_per_page: f64,
}

impl Default for Interpretation {
    fn default() -> Self {
        Interpretation { p_mem: PMemReading::Percent, ratio: RatioForm::Eq6, accesses_per_page: 64.0 }
    }
}

impl Interpretation {
    /// P_mem as a probability under this reading.
    pub fn p_mem(&self, printed: f64) -> f64 {
        match self.p_mem {
            PMemReading::Percent => printed / 100.0,
            PMemReading::Literal => printed,
        }
    }

    /// The alternatives worth showing beside the default, one changed field each.
    pub fn alternatives(&self) -> Vec<(&'static str, Interpretation)> {
        let mut out = Vec::new();
        let flipped_p_mem = match self.p_mem {
            PMemReading::Percent => PMemReading::Literal,
            PMemReading::Literal => PMemReading::Percent,
        };
        out.push(("p_mem read the other way", Interpretation { p_mem: flipped_p_mem, ..*self }));
        for (label, form) in [
            ("ratio: Eq. 6 as printed", RatioForm::Eq6),
            ("ratio without U", RatioForm::CpiPathLength),
            ("ratio with U inverted", RatioForm::Eq6UtilizationInverted),
        ] {
            if form != self.ratio {
                out.push((label, Interpretation { ratio: form, ..*self }));
            }
        }
        let other_accesses = if self.accesses_per_page == 64.0 { 1.0 } else { 64.0 };
        out.push((
            if other_accesses == 1.0 { "1 device access per page" } else { "64 device accesses per page" },
            Interpretation { accesses_per_page: other_accesses, ..*self },
        ));
        out
    }
}

/// Every term of Eq. 1-5 for one system, so a reader can check the arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpiBreakdown {
    pub tau_cache_cycles: f64,
    pub cpi_base: f64,
    pub tau_io_cycles: f64,
    pub tau_mem_cycles: f64,
    pub tau_tlb_cycles: f64,
    pub cpi: f64,
}

/// Eq. 1-5 for one system at one memory and device latency.
pub fn cpi(system: &SystemParams, at: &Latencies, interp: &Interpretation) -> CpiBreakdown {
    let tau_cache_cycles = system.tau_l1_cycles + system.p_l1 * system.tau_l2_cycles; // Eq. 2
    let cpi_base = system.cpi0_cycles + tau_cache_cycles; // Eq. 2
    let tau_io_cycles = at.tau_nvram_cycles + system.p_ctx * system.tau_ctx_cycles; // Eq. 4
    let tau_mem_cycles = at.tau_mem0_cycles + interp.p_mem(system.p_mem_as_printed) * tau_io_cycles; // Eq. 3
    let tau_tlb_cycles = system.tau_tlb0_cycles + system.p_tlb * at.tau_mem0_cycles; // Eq. 5
    let cpi = cpi_base + system.p_l2 * tau_mem_cycles + tau_tlb_cycles; // Eq. 1
    CpiBreakdown { tau_cache_cycles, cpi_base, tau_io_cycles, tau_mem_cycles, tau_tlb_cycles, cpi }
}

/// Eq. 6: the performance of `j` (SmartCon) relative to `i` (Mainstream); > 1 means j wins.
pub fn ratio(cpi_i: f64, system_i: &SystemParams, cpi_j: f64, system_j: &SystemParams, form: RatioForm) -> f64 {
    let (l_i, l_j) = (system_i.path_length_norm, system_j.path_length_norm);
    let (u_i, u_j) = (system_i.cpu_utilization, system_j.cpu_utilization);
    match form {
        RatioForm::Eq6 => (cpi_i * l_i * u_j) / (cpi_j * l_j * u_i),
        RatioForm::CpiPathLength => (cpi_i * l_i) / (cpi_j * l_j),
        RatioForm::Eq6UtilizationInverted => (cpi_i * l_i * u_i) / (cpi_j * l_j * u_j),
    }
}

/// How a device's latency is given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DeviceLatency {
    /// A RAM disk on DRAM at one Table III clock: the memory is that DRAM too, and
    /// tau_nvram = tau_mem0 * accesses_per_page.
    Dram { tau_mem0_cycles: f64 },
    /// A memory technology given by its per-cacheline read latency (Fig. 1, Sec. 7.6).
    PerLineNs { ns: f64 },
    /// A storage device given by the latency of one 4 KiB access (what fio or `probe` sees).
    PerPageNs { ns: f64 },
}

/// A named device to project.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    pub name: String,
    pub latency: DeviceLatency,
}

/// The devices of Sec. 7.6 / Fig. 18 and Table IV: DDR 533/800/1067 RAM disks and the
/// NVRAM technologies PCRAM 70 ns, FRAM 68 ns, MRAM 35 ns.
pub fn paper_devices() -> Vec<Device> {
    let mut devices: Vec<Device> = params::DRAM_CLOCKS
        .iter()
        .map(|(name, m0)| Device { name: name.to_string(), latency: DeviceLatency::Dram { tau_mem0_cycles: *m0 } })
        .collect();
    for (name, ns) in [("pcram", 70.0), ("fram", 68.0), ("mram", 35.0)] {
        devices.push(Device { name: name.to_string(), latency: DeviceLatency::PerLineNs { ns } });
    }
    devices
}

/// The model: both Table III columns, the clock for ns -> cycles, the DRAM under NVRAM
/// devices, and the interpretation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub smartcon: SystemParams,
    pub mainstream: SystemParams,
    pub clock_ghz: f64,
    /// tau_mem0 of the main memory when the device is not itself the DRAM.
    pub tau_mem0_cycles: f64,
    pub interp: Interpretation,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            smartcon: SMARTCON,
            mainstream: MAINSTREAM,
            clock_ghz: params::PAPER_CLOCK_GHZ,
            tau_mem0_cycles: params::DRAM_DEFAULT_TAU_MEM0_CYCLES,
            interp: Interpretation::default(),
        }
    }
}

/// One row of Fig. 18: both CPIs and the ratio for one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Projection {
    pub device: String,
    pub tau_mem0_cycles: f64,
    pub tau_nvram_cycles: f64,
    pub smartcon: CpiBreakdown,
    pub mainstream: CpiBreakdown,
    pub ratio: f64,
}

impl Model {
    /// Checks every parameter; run before any projection on user-supplied values.
    pub fn validate(&self) -> Result<(), Error> {
        self.smartcon.validate()?;
        self.mainstream.validate()?;
        for (name, value) in [("clock_ghz", self.clock_ghz), ("accesses_per_page", self.interp.accesses_per_page)] {
            if !value.is_finite() || value <= 0.0 {
                return Err(out_of_range(name, value, "a finite value > 0"));
            }
        }
        if !self.tau_mem0_cycles.is_finite() || self.tau_mem0_cycles < 0.0 {
            return Err(out_of_range("tau_mem0_cycles", self.tau_mem0_cycles, "a finite value >= 0"));
        }
        for system in [&self.smartcon, &self.mainstream] {
            let p_mem = self.interp.p_mem(system.p_mem_as_printed);
            if self.interp.p_mem == PMemReading::Percent && !(0.0..=1.0).contains(&p_mem) {
                return Err(out_of_range("p_mem", p_mem, "a probability in 0..=1 (as a percentage: 0..=100)"));
            }
        }
        Ok(())
    }

    /// Sets the context-switch cost of both systems (Table III uses the same for both).
    pub fn with_tau_ctx_cycles(mut self, tau_ctx_cycles: f64) -> Self {
        self.smartcon.tau_ctx_cycles = tau_ctx_cycles;
        self.mainstream.tau_ctx_cycles = tau_ctx_cycles;
        self
    }

    /// The memory and device latency in cycles for a device under this model.
    pub fn latencies(&self, latency: DeviceLatency) -> Result<Latencies, Error> {
        let at = match latency {
            DeviceLatency::Dram { tau_mem0_cycles } => {
                Latencies { tau_mem0_cycles, tau_nvram_cycles: tau_mem0_cycles * self.interp.accesses_per_page }
            }
            DeviceLatency::PerLineNs { ns } => Latencies {
                tau_mem0_cycles: self.tau_mem0_cycles,
                tau_nvram_cycles: params::ns_to_cycles(ns, self.clock_ghz) * self.interp.accesses_per_page,
            },
            DeviceLatency::PerPageNs { ns } => Latencies {
                tau_mem0_cycles: self.tau_mem0_cycles,
                tau_nvram_cycles: params::ns_to_cycles(ns, self.clock_ghz),
            },
        };
        at.validate()?;
        Ok(at)
    }

    /// Eq. 1-6 for one device.
    pub fn project(&self, device: &Device) -> Result<Projection, Error> {
        let at = self.latencies(device.latency)?;
        Ok(self.project_at(&device.name, &at))
    }

    /// Eq. 1-6 at given latencies (no validation of `at`; callers validated it).
    pub fn project_at(&self, name: &str, at: &Latencies) -> Projection {
        let smartcon = cpi(&self.smartcon, at, &self.interp);
        let mainstream = cpi(&self.mainstream, at, &self.interp);
        let ratio = ratio(mainstream.cpi, &self.mainstream, smartcon.cpi, &self.smartcon, self.interp.ratio);
        Projection {
            device: name.to_string(),
            tau_mem0_cycles: at.tau_mem0_cycles,
            tau_nvram_cycles: at.tau_nvram_cycles,
            smartcon,
            mainstream,
            ratio,
        }
    }

    /// The context-switch cost (cycles, same for both systems) at which the ratio reaches
    /// `target` at these latencies, or None when no cost up to 1e12 cycles reaches it. The
    /// ratio grows with tau_ctx because Mainstream switches more often (P_ctx) and misses L2
    /// more often, so bisection finds the single crossing.
    pub fn tau_ctx_for_ratio(&self, target: f64, at: &Latencies) -> Option<f64> {
        let ratio_at = |tau: f64| self.clone().with_tau_ctx_cycles(tau).project_at("", at).ratio;
        let (mut low, mut high) = (0.0f64, 1e12f64);
        if ratio_at(low) >= target {
            return Some(0.0);
        }
        if ratio_at(high) < target {
            return None;
        }
        // 200 halvings of 1e12 reach far below one cycle; the bound keeps the loop finite.
        for _ in 0..200 {
            let mid = 0.5 * (low + high);
            if ratio_at(mid) >= target {
                high = mid;
            } else {
                low = mid;
            }
            if high - low < 1e-6 {
                break;
            }
        }
        Some(high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-12)
    }

    /// Pinned against arithmetic done by hand for the SmartCon column at DDR 533
    /// (tau_mem0 = 111.88, tau_nvram = 111.88 * 64 = 7160.32), P_mem = 1.56 % = 0.0156:
    /// tau_cache = 3 + 0.115*14 = 4.61; CPI_base = 5.61;
    /// tau_IO = 7160.32 + 0.00316*1488 = 7165.02208;
    /// tau_mem = 111.88 + 0.0156*7165.02208 = 223.6543444...;
    /// tau_TLB = 2 + 0.124*111.88 = 15.87312;
    /// CPI = 5.61 + 0.000255*223.6543444 + 15.87312 = 21.5401519...
    #[test]
    fn smartcon_column_at_ddr533_matches_hand_arithmetic() {
        let model = Model::default();
        let at = model.latencies(DeviceLatency::Dram { tau_mem0_cycles: 111.88 }).unwrap();
        assert_eq!(at.tau_nvram_cycles, 7160.32);
        let b = cpi(&SMARTCON, &at, &model.interp);
        assert!(close(b.tau_cache_cycles, 4.61, 1e-12));
        assert!(close(b.cpi_base, 5.61, 1e-12));
        assert!(close(b.tau_io_cycles, 7165.02208, 1e-12));
        assert!(close(b.tau_mem_cycles, 223.654344448, 1e-9));
        assert!(close(b.tau_tlb_cycles, 15.87312, 1e-12));
        assert!(close(b.cpi, 21.5401518578, 1e-9), "cpi {}", b.cpi);
    }

    /// Mainstream column at DDR 533 by hand: tau_cache = 3 + 0.244*14 = 6.416; CPI_base = 7.416;
    /// tau_IO = 7160.32 + 0.00778*1488 = 7171.89664; tau_mem = 111.88 + 0.0156*7171.89664
    /// = 223.7615876; tau_TLB = 2 + 0.133*111.88 = 16.88004;
    /// CPI = 7.416 + 0.000324*223.7615876 + 16.88004 = 24.3685387...
    /// rho = 24.3685387*1.14*0.329 / (21.5401519*1*0.357) = 1.18855...
    #[test]
    fn mainstream_column_and_ratio_at_ddr533_match_hand_arithmetic() {
        let model = Model::default();
        let p = model
            .project(&Device { name: "ddr533".into(), latency: DeviceLatency::Dram { tau_mem0_cycles: 111.88 } })
            .unwrap();
        assert!(close(p.mainstream.cpi_base, 7.416, 1e-12));
        assert!(close(p.mainstream.tau_io_cycles, 7171.89664, 1e-12));
        assert!(close(p.mainstream.tau_mem_cycles, 223.761587584, 1e-9));
        assert!(close(p.mainstream.tau_tlb_cycles, 16.88004, 1e-12));
        assert!(close(p.mainstream.cpi, 24.3685387544, 1e-9), "cpi {}", p.mainstream.cpi);
        let by_hand = 24.3685387544 * 1.14 * 0.329 / (21.5401518578 * 0.357);
        assert!(close(p.ratio, by_hand, 1e-9), "ratio {} vs {}", p.ratio, by_hand);
        assert!(p.ratio > 1.18 && p.ratio < 1.20);
    }

    #[test]
    fn literal_p_mem_multiplies_the_io_term_by_one_hundred() {
        let mut model = Model::default();
        let at = Latencies { tau_mem0_cycles: 111.88, tau_nvram_cycles: 7160.32 };
        let percent = cpi(&SMARTCON, &at, &model.interp);
        model.interp.p_mem = PMemReading::Literal;
        let literal = cpi(&SMARTCON, &at, &model.interp);
        let io_term = |b: &CpiBreakdown| b.tau_mem_cycles - 111.88;
        assert!(close(io_term(&literal), 100.0 * io_term(&percent), 1e-9));
    }

    #[test]
    fn ratio_forms_differ_by_the_utilization_factor() {
        let mut model = Model::default();
        let device = &paper_devices()[1];
        let eq6 = model.project(device).unwrap().ratio;
        model.interp.ratio = RatioForm::CpiPathLength;
        let no_u = model.project(device).unwrap().ratio;
        model.interp.ratio = RatioForm::Eq6UtilizationInverted;
        let inverted = model.project(device).unwrap().ratio;
        assert!(close(eq6, no_u * 0.329 / 0.357, 1e-12));
        assert!(close(inverted, no_u * 0.357 / 0.329, 1e-12));
    }

    #[test]
    fn per_line_devices_take_64_accesses_per_page_at_the_paper_clock() {
        let model = Model::default();
        let at = model.latencies(DeviceLatency::PerLineNs { ns: 70.0 }).unwrap();
        assert!(close(at.tau_nvram_cycles, 70.0 * 1.86 * 64.0, 1e-12));
        assert_eq!(at.tau_mem0_cycles, 74.4);
        let page = model.latencies(DeviceLatency::PerPageNs { ns: 70.0 }).unwrap();
        assert!(close(page.tau_nvram_cycles, 70.0 * 1.86, 1e-12));
    }

    #[test]
    fn bad_parameters_are_rejected_by_name() {
        let mut model = Model::default();
        model.smartcon.p_l1 = 1.5;
        let e = model.validate().unwrap_err().to_string();
        assert!(e.contains("p_l1"), "{e}");
        let mut model = Model::default();
        model.mainstream.tau_l2_cycles = -1.0;
        assert!(model.validate().unwrap_err().to_string().contains("tau_l2_cycles"));
        let model = Model::default();
        assert!(model.latencies(DeviceLatency::PerPageNs { ns: -5.0 }).is_err());
        assert!(Model::default().validate().is_ok());
    }

    #[test]
    fn solved_tau_ctx_reproduces_the_target_ratio() {
        let model = Model::default();
        let at = model.latencies(DeviceLatency::PerLineNs { ns: 70.0 }).unwrap();
        let tau = model.tau_ctx_for_ratio(1.8, &at).expect("reachable");
        let r = model.clone().with_tau_ctx_cycles(tau).project_at("x", &at).ratio;
        assert!(close(r, 1.8, 1e-6), "{r}");
        let below = model.clone().with_tau_ctx_cycles(tau * 0.9).project_at("x", &at).ratio;
        assert!(below < 1.8);
    }
}
