//! Fault injection: I/O errors (on ranges, with a probability), latency spikes (service
//! times x factor inside a window) and stalls (no completion inside a window), all
//! deterministic: an error is drawn from a hash of the plan's seed and the request id, so a
//! replay with the same plan fails the same requests.
//!
//! The plan is plain data, read from a TOML scenario ([`parse_scenario`], format below).
//! Windows are in the device's time: virtual time from the start of a replay, or real
//! time from the opening of an engine target (`emu:PRESET,faults=FILE`). Non-goals: partial
//! transfers, and errors that depend on device wear.
//!
//! Scenario format:
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
//! Durations need a unit; instants are in the device's time (above).
//! Unknown keys are errors, so a misspelt key does not silently disable a fault.

use serde::{Deserialize, Serialize};

use crate::model::Op;
use smartcon_util::error::{Error, ErrorKind};
use smartcon_util::units::parse_duration_ns;

use crate::usage;

/// Requests that fail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorRule {
    /// Only this op (None: both).
    pub op: Option<Op>,
    /// Requests overlapping [offset_min, offset_max) (None: all offsets).
    pub range: Option<(u64, u64)>,
    /// Arrivals inside [start_ns, end_ns) (None: always).
    pub window_ns: Option<(u64, u64)>,
    /// The chance a matching request fails, 0..=1.
    pub probability: f64,
}

/// Service times of requests starting inside the window are multiplied by `factor`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spike {
    pub start_ns: u64,
    pub end_ns: u64,
    pub factor: f64,
}

/// No request completes inside [start_ns, start_ns + duration_ns): completions that would
/// fall inside move to its end (the channel stays busy until then).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stall {
    pub start_ns: u64,
    pub duration_ns: u64,
}

/// The default limit on a stall: the Linux SCSI layer's default command timeout (30 s).
pub const STALL_TIMEOUT_NS_DEFAULT: u64 = 30_000_000_000;

/// A seeded fault scenario.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct FaultPlan {
    pub seed: u64,
    pub errors: Vec<ErrorRule>,
    pub spikes: Vec<Spike>,
    pub stalls: Vec<Stall>,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl FaultPlan {
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty() && self.spikes.is_empty() && self.stalls.is_empty()
    }

    /// Checks the plan; a stall longer than `stall_timeout_ns` is an error, because a host
    /// would time the device out (nothing may wait forever).
    pub fn validate(&self, stall_timeout_ns: u64) -> Result<(), Error> {
        for (i, e) in self.errors.iter().enumerate() {
            if !(0.0..=1.0).contains(&e.probability) {
                return Err(usage(format!("error rule {}: probability must be 0..=1", i + 1)));
            }
            if e.range.is_some_and(|(a, b)| a >= b) || e.window_ns.is_some_and(|(a, b)| a >= b) {
                return Err(usage(format!("error rule {}: a range or window must end after it starts", i + 1)));
            }
        }
        for (i, s) in self.spikes.iter().enumerate() {
            if s.start_ns >= s.end_ns || !(s.factor.is_finite() && s.factor > 0.0 && s.factor <= 1e6) {
                return Err(usage(format!("spike {}: needs start < end and a factor in (0, 1e6]", i + 1)));
            }
        }
        for (i, s) in self.stalls.iter().enumerate() {
            if s.duration_ns > stall_timeout_ns {
                return Err(usage(format!(
                    "stall {}: {} ns is longer than the stall timeout ({} ns): a host would reset the device; \
                     shorten the stall or raise stall_timeout",
                    i + 1,
                    s.duration_ns,
                    stall_timeout_ns
                )));
            }
        }
        // Overlapping stalls chain (a completion moved to one's end may land in the next):
        // the chain is what a request waits, so it must fit the timeout too.
        let mut spans: Vec<(u64, u64)> =
            self.stalls.iter().map(|s| (s.start_ns, s.start_ns.saturating_add(s.duration_ns))).collect();
        spans.sort_unstable();
        let mut chain: Option<(u64, u64)> = None;
        for (a, b) in spans {
            chain = match chain {
                Some((ca, cb)) if a < cb => Some((ca, cb.max(b))),
                _ => Some((a, b)),
            };
            if let Some((ca, cb)) = chain.filter(|(ca, cb)| cb - ca > stall_timeout_ns) {
                return Err(usage(format!(
                    "stalls from {ca} ns to {cb} ns chain into {} ns, longer than the stall timeout ({} ns)",
                    cb - ca,
                    stall_timeout_ns
                )));
            }
        }
        Ok(())
    }

    /// Whether request `id` fails.
    pub fn fails(&self, id: u64, op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> bool {
        self.errors.iter().enumerate().any(|(i, e)| {
            e.op.is_none_or(|o| o == op)
                && e.range.is_none_or(|(a, b)| offset < b && offset + bytes > a)
                && e.window_ns.is_none_or(|(a, b)| (a..b).contains(&arrival_ns))
                && {
                    let draw = splitmix64(self.seed ^ splitmix64(id) ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
                    ((draw >> 11) as f64 / (1u64 << 53) as f64) < e.probability
                }
        })
    }

    /// The service time after spikes, for a request starting at `start_ns`.
    pub fn spiked_ns(&self, start_ns: u64, service_ns: u64) -> u64 {
        let mut ns = service_ns;
        for s in &self.spikes {
            if (s.start_ns..s.end_ns).contains(&start_ns) {
                ns = ((ns as f64 * s.factor).round() as u64).max(1);
            }
        }
        ns
    }

    /// The completion instant after stalls.
    pub fn stalled_ns(&self, complete_ns: u64) -> u64 {
        let mut t = complete_ns;
        // Stalls may chain (one ends inside the next); a pass per stall settles it.
        for _ in 0..self.stalls.len() {
            for s in &self.stalls {
                if (s.start_ns..s.start_ns + s.duration_ns).contains(&t) {
                    t = s.start_ns + s.duration_ns;
                }
            }
        }
        t
    }
}

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

fn dur(what: &str, text: &str) -> Result<u64, Error> {
    parse_duration_ns(text).map_err(|e| usage(format!("{what}: {e}")))
}

/// Parses a scenario and validates it.
pub fn parse_scenario(text: &str) -> Result<FaultPlan, Error> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| Error::from_source(ErrorKind::Usage, e))?;
    let mut errors = Vec::new();
    for (i, e) in raw.error.iter().enumerate() {
        let n = i + 1;
        let op = match e.op.as_deref() {
            None => None,
            Some("read") => Some(Op::Read),
            Some("write") => Some(Op::Write),
            Some(o) => return Err(usage(format!("error {n}: op {o:?} is not read or write"))),
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
        .collect::<Result<Vec<_>, Error>>()?;
    let stalls = raw
        .stall
        .iter()
        .map(|s| Ok(Stall { start_ns: dur("start", &s.start)?, duration_ns: dur("duration", &s.duration)? }))
        .collect::<Result<Vec<_>, Error>>()?;
    let plan = FaultPlan { seed: raw.seed, errors, spikes, stalls };
    let timeout = raw.stall_timeout.as_deref().map(|t| dur("stall_timeout", t)).transpose()?;
    plan.validate(timeout.unwrap_or(STALL_TIMEOUT_NS_DEFAULT))?;
    Ok(plan)
}

/// Reads and parses a scenario file.
pub fn load_scenario(path: &std::path::Path) -> Result<FaultPlan, Error> {
    let text = smartcon_util::paths::read_text(path)
        .map_err(|e| Error::with_source(ErrorKind::Usage, format!("cannot read {}", path.display()), e))?;
    parse_scenario(&text).map_err(|e| Error { message: format!("{}: {}", path.display(), e.message), ..e })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_follow_rules_and_seed() {
        let plan = FaultPlan {
            seed: 3,
            errors: vec![
                ErrorRule { op: Some(Op::Write), range: Some((4096, 8192)), window_ns: None, probability: 1.0 },
                ErrorRule { op: Some(Op::Read), range: None, window_ns: None, probability: 0.25 },
            ],
            ..FaultPlan::default()
        };
        assert!(plan.fails(0, Op::Write, 0, 8192, 0));
        assert!(!plan.fails(0, Op::Write, 8192, 4096, 0));
        let failed = (0..10_000).filter(|&id| plan.fails(id, Op::Read, 0, 4096, 0)).count();
        assert!((2_300..2_700).contains(&failed), "{failed}");
        // Deterministic: the same ids fail again.
        let again = (0..10_000).filter(|&id| plan.fails(id, Op::Read, 0, 4096, 0)).count();
        assert_eq!(failed, again);
    }

    #[test]
    fn spikes_and_stalls_and_the_timeout() {
        let plan = FaultPlan {
            spikes: vec![Spike { start_ns: 100, end_ns: 200, factor: 3.0 }],
            stalls: vec![Stall { start_ns: 1_000, duration_ns: 500 }, Stall { start_ns: 1_400, duration_ns: 400 }],
            ..FaultPlan::default()
        };
        assert_eq!(plan.spiked_ns(150, 10), 30);
        assert_eq!(plan.spiked_ns(200, 10), 10);
        assert_eq!(plan.stalled_ns(999), 999);
        // Inside the first stall, whose end lies inside the second: out after both.
        assert_eq!(plan.stalled_ns(1_200), 1_800);
        assert!(plan.validate(1_000).is_ok());
        assert!(plan.validate(450).unwrap_err().message.contains("stall 1"));
        // 500 and 400 ns each, but chained they stall 800 ns.
        assert!(plan.validate(700).unwrap_err().message.contains("chain"));
    }

    #[test]
    fn full_scenario_and_mistakes() {
        let plan = parse_scenario(
            "seed = 7\n[[error]]\nop = \"write\"\noffset_min = 0\noffset_max = 4096\n\
             [[spike]]\nstart = \"1ms\"\nend = \"2ms\"\nfactor = 3.0\n[[stall]]\nstart = \"5ms\"\nduration = \"1ms\"\n",
        )
        .unwrap();
        assert_eq!(plan.seed, 7);
        assert_eq!(plan.errors[0].range, Some((0, 4096)));
        assert_eq!(plan.spikes[0].end_ns, 2_000_000);
        assert_eq!(plan.stalls[0].duration_ns, 1_000_000);
        assert!(parse_scenario("[[eror]]\n").is_err());
        assert!(parse_scenario("[[error]]\nop = \"erase\"\n").is_err());
        assert!(parse_scenario("[[stall]]\nstart = \"0s\"\nduration = \"1m\"\n")
            .unwrap_err()
            .message
            .contains("stall timeout"));
        assert!(parse_scenario("stall_timeout = \"2m\"\n[[stall]]\nstart = \"0s\"\nduration = \"1m\"\n").is_ok());
        assert!(parse_scenario("[[spike]]\nstart = \"1ms\"\nend = \"1ms\"\nfactor = 2.0\n").is_err());
    }
}
