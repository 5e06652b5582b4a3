//! The model's inputs: one column of Table III (SmartCon Sec. 6) per system variant, and the
//! memory and device latencies that a projection varies.
//!
//! Everything is in processor cycles, as in the table; a latency given in nanoseconds is
//! converted at the model's clock (1.86 GHz, the paper's Core2Duo) by the caller. Values are
//! checked on the way in ([`SystemParams::validate`]) so a projection never runs on a negative
//! latency or a probability outside 0..1. Non-goal: deriving these parameters from hardware
//! counters (this VM has none); calibration replaces only the context-switch cost and the
//! device latency.

use serde::Serialize;

use crate::{out_of_range, Error};

/// The paper's platform clock (Intel Core2Duo, 1.86 GHz), used to turn ns into cycles.
pub const PAPER_CLOCK_GHZ: f64 = 1.86;

/// Cachelines per storage page: 4 KiB page / 64 B line (Table III caption).
pub const LINES_PER_PAGE: f64 = 64.0;

/// One column of Table III.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemParams {
    pub name: &'static str,
    /// U, as a fraction (Table III gives 32.9% and 35.7%).
    pub cpu_utilization: f64,
    /// l, the path length normalised to SmartCon's.
    pub path_length_norm: f64,
    pub cpi0_cycles: f64,
    pub tau_l1_cycles: f64,
    pub p_l1: f64,
    pub tau_l2_cycles: f64,
    pub p_l2: f64,
    pub tau_tlb0_cycles: f64,
    pub p_tlb: f64,
    pub tau_ctx_cycles: f64,
    pub p_ctx: f64,
    /// P_mem exactly as printed in the table (1.56); [`crate::Interpretation`] says how it is
    /// read.
    pub p_mem_as_printed: f64,
}

/// Table III, SmartCon column.
pub const SMARTCON: SystemParams = SystemParams {
    name: "smartcon",
    cpu_utilization: 0.329,
    path_length_norm: 1.0,
    cpi0_cycles: 1.0,
    tau_l1_cycles: 3.0,
    p_l1: 0.115,
    tau_l2_cycles: 14.0,
    p_l2: 0.000255,
    tau_tlb0_cycles: 2.0,
    p_tlb: 0.124,
    tau_ctx_cycles: 1488.0,
    p_ctx: 0.00316,
    p_mem_as_printed: 1.56,
};

/// Table III, Mainstream column.
pub const MAINSTREAM: SystemParams = SystemParams {
    name: "mainstream",
    cpu_utilization: 0.357,
    path_length_norm: 1.14,
    cpi0_cycles: 1.0,
    tau_l1_cycles: 3.0,
    p_l1: 0.244,
    tau_l2_cycles: 14.0,
    p_l2: 0.000324,
    tau_tlb0_cycles: 2.0,
    p_tlb: 0.133,
    tau_ctx_cycles: 1488.0,
    p_ctx: 0.00778,
    p_mem_as_printed: 1.56,
};

/// The three DRAM clocks of Table III with their tau_mem0 in cycles.
pub const DRAM_CLOCKS: [(&str, f64); 3] = [("ddr533", 111.88), ("ddr800", 74.4), ("ddr1067", 55.94)];

/// tau_mem0 of the paper's platform memory (DDR2 800, Table V), used under NVRAM devices.
pub const DRAM_DEFAULT_TAU_MEM0_CYCLES: f64 = 74.4;

fn check_probability(name: &'static str, value: f64) -> Result<(), Error> {
    if !(0.0..=1.0).contains(&value) || !value.is_finite() {
        return Err(out_of_range(name, value, "a probability in 0..=1"));
    }
    Ok(())
}

fn check_nonnegative(name: &'static str, value: f64) -> Result<(), Error> {
    if !value.is_finite() || value < 0.0 {
        return Err(out_of_range(name, value, "a finite value >= 0"));
    }
    Ok(())
}

fn check_positive(name: &'static str, value: f64) -> Result<(), Error> {
    if !value.is_finite() || value <= 0.0 {
        return Err(out_of_range(name, value, "a finite value > 0"));
    }
    Ok(())
}

impl SystemParams {
    /// Rejects probabilities outside 0..1, negative latencies and a zero utilization or path
    /// length (which would divide by zero in Eq. 6).
    pub fn validate(&self) -> Result<(), Error> {
        check_positive("cpu_utilization", self.cpu_utilization)?;
        check_probability("cpu_utilization", self.cpu_utilization)?;
        check_positive("path_length_norm", self.path_length_norm)?;
        check_nonnegative("cpi0_cycles", self.cpi0_cycles)?;
        check_nonnegative("tau_l1_cycles", self.tau_l1_cycles)?;
        check_probability("p_l1", self.p_l1)?;
        check_nonnegative("tau_l2_cycles", self.tau_l2_cycles)?;
        check_probability("p_l2", self.p_l2)?;
        check_nonnegative("tau_tlb0_cycles", self.tau_tlb0_cycles)?;
        check_probability("p_tlb", self.p_tlb)?;
        check_nonnegative("tau_ctx_cycles", self.tau_ctx_cycles)?;
        check_probability("p_ctx", self.p_ctx)?;
        // The printed 1.56 is only a probability when read as a percentage, so the range
        // check is on the value the interpretation produces, in `Interpretation::p_mem`.
        check_nonnegative("p_mem", self.p_mem_as_printed)?;
        Ok(())
    }
}

/// Where the model is evaluated: the memory under the cache and the storage device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latencies {
    /// tau_mem0, one cacheline from DRAM.
    pub tau_mem0_cycles: f64,
    /// tau_nvram, one 4 KiB page from the storage device, before any context switch.
    pub tau_nvram_cycles: f64,
}

impl Latencies {
    pub fn validate(&self) -> Result<(), Error> {
        check_nonnegative("tau_mem0_cycles", self.tau_mem0_cycles)?;
        check_nonnegative("tau_nvram_cycles", self.tau_nvram_cycles)?;
        Ok(())
    }
}

/// Nanoseconds to cycles at `clock_ghz`.
pub fn ns_to_cycles(ns: f64, clock_ghz: f64) -> f64 {
    ns * clock_ghz
}
