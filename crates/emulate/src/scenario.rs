//! Fault scenarios in TOML, turned into devemu's [`FaultPlan`].
//!
//! ```toml
//! seed = 7                  # errors are drawn from (seed, request id): reproducible
//! stall_timeout = "30s"     # a stall longer than this is rejected (default 30 s)
//!
//! [[error]]                 # requests that fail; every key optional
//! op = "write"              # read | write (default: both)
//! offset_min = 0            # bytes, the range [offset_min, offset_max) they overlap
//! offset_max = 1048576
//! start = "10ms"            # arrivals in [start, end)
//! end = "20ms"
//! probability = 0.5         # default 1
//!
//! [[spike]]                 # service times x factor for requests starting in the window
//! start = "50ms"
//! end = "60ms"
//! factor = 10.0
//!
//! [[stall]]                 # no completion in [start, start + duration)
//! start = "100ms"
//! duration = "5ms"
//! ```
//!
//! Durations need a unit; instants are in the replay's (virtual) time from its start.
//! Unknown keys are errors, so a misspelt key does not silently disable a fault.

use serde::Deserialize;
use smartcon_devemu::fault::{ErrorRule, Spike, Stall, STALL_TIMEOUT_NS_DEFAULT};
use smartcon_devemu::units::parse_duration_ns;
use smartcon_devemu::{FaultPlan, Op};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    seed: u64,
    stall_timeout: Option<String>,
    #[serde(default)]
    error: Vec<RawError>,
    #[serde(default)]
    spike: Vec<RawSpike>,
    #[serde(default)]
    stall: Vec<RawStall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawError {
    op: Option<String>,
    offset_min: Option<u64>,
    offset_max: Option<u64>,
    start: Option<String>,
    end: Option<String>,
    probability: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpike {
    start: String,
    end: String,
    factor: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStall {
    start: String,
    duration: String,
}

fn dur(what: &str, text: &str) -> Result<u64, String> {
    parse_duration_ns(text).map_err(|e| format!("{what}: {e}"))
}

/// Parses a scenario and validates it.
pub fn parse(text: &str) -> Result<FaultPlan, String> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    for (i, e) in raw.error.iter().enumerate() {
        let n = i + 1;
        let op = match e.op.as_deref() {
            None => None,
            Some("read") => Some(Op::Read),
            Some("write") => Some(Op::Write),
            Some(o) => return Err(format!("error {n}: op {o:?} is not read or write")),
        };
        let range = match (e.offset_min, e.offset_max) {
            (None, None) => None,
            (a, b) => Some((a.unwrap_or(0), b.unwrap_or(u64::MAX))),
        };
        let window_ns = match (&e.start, &e.end) {
            (None, None) => None,
            (a, b) => Some((
                a.as_deref().map(|t| dur("start", t)).transpose()?.unwrap_or(0),
                b.as_deref().map(|t| dur("end", t)).transpose()?.unwrap_or(u64::MAX),
            )),
        };
        errors.push(ErrorRule { op, range, window_ns, probability: e.probability.unwrap_or(1.0) });
    }
    let spikes = raw
        .spike
        .iter()
        .map(|s| Ok(Spike { start_ns: dur("start", &s.start)?, end_ns: dur("end", &s.end)?, factor: s.factor }))
        .collect::<Result<Vec<_>, String>>()?;
    let stalls = raw
        .stall
        .iter()
        .map(|s| Ok(Stall { start_ns: dur("start", &s.start)?, duration_ns: dur("duration", &s.duration)? }))
        .collect::<Result<Vec<_>, String>>()?;
    let plan = FaultPlan { seed: raw.seed, errors, spikes, stalls };
    let timeout = raw.stall_timeout.as_deref().map(|t| dur("stall_timeout", t)).transpose()?;
    plan.validate(timeout.unwrap_or(STALL_TIMEOUT_NS_DEFAULT))?;
    Ok(plan)
}

/// Reads and parses a scenario file.
pub fn load(path: &std::path::Path) -> Result<FaultPlan, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_scenario_and_mistakes() {
        let plan = parse(
            "seed = 7\n[[error]]\nop = \"write\"\noffset_min = 0\noffset_max = 4096\n\
             [[spike]]\nstart = \"1ms\"\nend = \"2ms\"\nfactor = 3.0\n[[stall]]\nstart = \"5ms\"\nduration = \"1ms\"\n",
        )
        .unwrap();
        assert_eq!(plan.seed, 7);
        assert_eq!(plan.errors[0].range, Some((0, 4096)));
        assert_eq!(plan.spikes[0].end_ns, 2_000_000);
        assert_eq!(plan.stalls[0].duration_ns, 1_000_000);
        assert!(parse("[[eror]]\n").is_err());
        assert!(parse("[[error]]\nop = \"erase\"\n").is_err());
        assert!(parse("[[stall]]\nstart = \"0s\"\nduration = \"1m\"\n").unwrap_err().contains("stall timeout"));
        assert!(parse("stall_timeout = \"2m\"\n[[stall]]\nstart = \"0s\"\nduration = \"1m\"\n").is_ok());
        assert!(parse("[[spike]]\nstart = \"1ms\"\nend = \"1ms\"\nfactor = 2.0\n").is_err());
    }
}
