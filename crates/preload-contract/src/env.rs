//! The environment `libsmartcon.so` reads, once, in its constructor.
//!
//! | variable | meaning |
//! |---|---|
//! | `SMARTCON_PRELOAD_STRATEGY` | `smart`, `block`, `spin`, `hybrid` or `smart-hybrid`: interposition on (absent: the library is inert), and how a served read or write of an `--emulate` image waits |
//! | `SMARTCON_PRELOAD_STATS` | each process image appends one `preload_process` record here |
//! | `SMARTCON_PRELOAD_BUFFERED` | `1`: take buffered regular files on block devices too |
//! | `SMARTCON_PRELOAD_INHERIT` | `0`: remove the library from the environment at load |
//! | `SMARTCON_PRELOAD_EMU_SPEC` | `emu:PRESET[,key=value...]`: serve the image's I/O from this device model |
//! | `SMARTCON_PRELOAD_EMU_PATH` | the image file the model serves (any descriptor of it) |
//! | `SMARTCON_PRELOAD_VIRTUAL_TIME` | `1`: the program's clocks and sleeps run in virtual time |
//! | `SMARTCON_PRELOAD_EMU_STATS` | each process image appends one `emu_process` record here |
//! | `SMARTCON_PRELOAD_CPU_SPEED` | with virtual time: the program's CPU is this many times the host's |
//! | `SMARTCON_PRELOAD_GUEST_CLOCK` | with virtual time: `cpu`: the clock moves with the CPU time of the program's processes while it runs (a uniprocessor guest kernel); `wall` or absent: with the real clock |

use std::ffi::OsString;
use std::path::PathBuf;

pub const STRATEGY: &str = "SMARTCON_PRELOAD_STRATEGY";
pub const STATS: &str = "SMARTCON_PRELOAD_STATS";
pub const BUFFERED: &str = "SMARTCON_PRELOAD_BUFFERED";
pub const INHERIT: &str = "SMARTCON_PRELOAD_INHERIT";
pub const EMU_SPEC: &str = "SMARTCON_PRELOAD_EMU_SPEC";
pub const EMU_PATH: &str = "SMARTCON_PRELOAD_EMU_PATH";
pub const VIRTUAL_TIME: &str = "SMARTCON_PRELOAD_VIRTUAL_TIME";
pub const EMU_STATS: &str = "SMARTCON_PRELOAD_EMU_STATS";
pub const CPU_SPEED: &str = "SMARTCON_PRELOAD_CPU_SPEED";
pub const GUEST_CLOCK: &str = "SMARTCON_PRELOAD_GUEST_CLOCK";

/// Every variable above: what the library removes from the environment when it must not
/// be inherited.
pub const ALL: [&str; 10] =
    [STRATEGY, STATS, BUFFERED, INHERIT, EMU_SPEC, EMU_PATH, VIRTUAL_TIME, EMU_STATS, CPU_SPEED, GUEST_CLOCK];

/// The file name cargo gives the library (beside the `smartcon` binary).
pub const LIBRARY_FILE: &str = "libsmartcon.so";

/// The strategies the library takes (the polling baselines need a device model).
pub const STRATEGY_NAMES: [&str; 5] = ["smart", "block", "spin", "hybrid", "smart-hybrid"];

/// What one launch asks of the library; [`PreloadEnv::vars`] turns it into variables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreloadEnv {
    /// Interposition on, with this strategy (one of [`STRATEGY_NAMES`]); `None`: only the
    /// emulated image (if any) is served, with the reference wait.
    pub strategy: Option<String>,
    pub stats: Option<PathBuf>,
    pub buffered: bool,
    pub inherit: bool,
    pub emulate: Option<EmulateEnv>,
}

/// `--emulate SPEC=PATH` and its clock.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulateEnv {
    pub spec: String,
    pub image: PathBuf,
    pub virtual_time: bool,
    /// Where the `emu_process` records go.
    pub stats: PathBuf,
    /// With virtual time: the program's CPU is this many times the host's.
    pub cpu_speed: Option<f64>,
    /// With virtual time: the clock moves with the CPU time of the program's processes
    /// while it runs, not with the wall (a uniprocessor guest kernel: `emulate vm`).
    pub cpu_clock: bool,
}

impl PreloadEnv {
    /// The variables to set (only those with something to say: an absent strategy leaves
    /// the interposition off).
    pub fn vars(&self) -> Vec<(&'static str, OsString)> {
        let flag = |on: bool| OsString::from(if on { "1" } else { "0" });
        let mut v = Vec::new();
        if let Some(s) = &self.strategy {
            v.push((STRATEGY, s.into()));
            if let Some(p) = &self.stats {
                v.push((STATS, p.into()));
            }
            v.push((BUFFERED, flag(self.buffered)));
            v.push((INHERIT, flag(self.inherit)));
        }
        if let Some(e) = &self.emulate {
            v.push((EMU_SPEC, e.spec.as_str().into()));
            v.push((EMU_PATH, e.image.as_os_str().into()));
            v.push((VIRTUAL_TIME, flag(e.virtual_time)));
            v.push((EMU_STATS, e.stats.as_os_str().into()));
            if let Some(x) = e.cpu_speed {
                v.push((CPU_SPEED, x.to_string().into()));
            }
            if e.virtual_time && e.cpu_clock {
                v.push((GUEST_CLOCK, "cpu".into()));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_asked_for_is_set() {
        assert!(PreloadEnv::default().vars().is_empty(), "nothing asked: the library stays inert");
        let run = PreloadEnv {
            strategy: Some("spin".into()),
            stats: Some("/tmp/s.jsonl".into()),
            inherit: true,
            ..Default::default()
        };
        let names: Vec<&str> = run.vars().iter().map(|(k, _)| *k).collect();
        assert_eq!(names, [STRATEGY, STATS, BUFFERED, INHERIT]);
        assert!(run.vars().contains(&(INHERIT, "1".into())));
        let emu = PreloadEnv {
            emulate: Some(EmulateEnv {
                spec: "emu:hdd".into(),
                image: "/tmp/i.img".into(),
                virtual_time: true,
                stats: "/tmp/e.jsonl".into(),
                cpu_speed: Some(2.0),
                cpu_clock: true,
            }),
            ..Default::default()
        };
        let vars = emu.vars();
        assert!(vars.iter().all(|(k, _)| *k != STRATEGY), "a sweep's run takes nothing but the image");
        assert!(vars.contains(&(VIRTUAL_TIME, "1".into())) && vars.contains(&(CPU_SPEED, "2".into())));
        assert!(vars.contains(&(GUEST_CLOCK, "cpu".into())));
        assert!(vars.iter().all(|(k, _)| ALL.contains(k)));
    }
}
