//! What `smartcon run` tells the preloaded library, through the environment.
//!
//! The library is inert unless `SMARTCON_PRELOAD_STRATEGY` names a strategy: a C program
//! that links libsmartcon.so for the C ABI gets plain pass-through wrappers. The variables
//! are read once, in the constructor, with `getenv` (no allocation before it is needed).
//!
//! | variable | meaning |
//! |---|---|
//! | `SMARTCON_PRELOAD_STRATEGY` | `smart`, `block`, `spin`, `hybrid` or `smart-hybrid`: interposition on |
//! | `SMARTCON_PRELOAD_STATS` | a file each process appends its record to at exit (JSON Lines) |
//! | `SMARTCON_PRELOAD_BUFFERED` | `1`: take buffered regular files on block devices too |
//! | `SMARTCON_PRELOAD_INHERIT` | `0`: remove the preload from the environment, so programs this one executes run untouched |

use std::ffi::CStr;

use smartcon_engine::job::StrategyChoice;

pub const ENV_STRATEGY: &str = "SMARTCON_PRELOAD_STRATEGY";
pub const ENV_STATS: &str = "SMARTCON_PRELOAD_STATS";
pub const ENV_BUFFERED: &str = "SMARTCON_PRELOAD_BUFFERED";
pub const ENV_INHERIT: &str = "SMARTCON_PRELOAD_INHERIT";

/// The strategies `smartcon run` offers (the polling baselines need a device model).
pub const STRATEGY_NAMES: [&str; 5] = ["smart", "block", "spin", "hybrid", "smart-hybrid"];

#[derive(Debug, Clone)]
pub struct Config {
    pub strategy: StrategyChoice,
    pub stats_path: Option<std::path::PathBuf>,
    pub buffered: bool,
    pub inherit: bool,
}

/// Parses a strategy name `smartcon run` and the C ABI accept.
pub fn parse_strategy(name: &str) -> Option<StrategyChoice> {
    if !STRATEGY_NAMES.contains(&name) {
        return None;
    }
    StrategyChoice::parse(name)
}

fn getenv(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; getenv returns NULL or a NUL-terminated string that
    // stays valid until the environment changes, and it is copied at once.
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated (above).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Config {
    /// The configuration from the environment, or `None` when interposition is off (the
    /// variable is absent or names no strategy we take).
    pub fn from_env() -> Option<Config> {
        let strategy = parse_strategy(&getenv(ENV_STRATEGY)?)?;
        Some(Config {
            strategy,
            stats_path: getenv(ENV_STATS).filter(|s| !s.is_empty()).map(Into::into),
            buffered: getenv(ENV_BUFFERED).as_deref() == Some("1"),
            inherit: getenv(ENV_INHERIT).as_deref() != Some("0"),
        })
    }
}

/// Removes this library from `LD_PRELOAD` and the SMARTCON_PRELOAD_* variables from the
/// environment, so programs this process executes run untouched. Called from the
/// constructor, before the program's own threads exist (setenv is not thread-safe).
pub fn drop_from_environment() {
    if let Some(list) = getenv("LD_PRELOAD") {
        let kept: Vec<&str> =
            list.split([' ', ':']).filter(|p| !p.is_empty() && !p.ends_with("/libsmartcon.so")).collect();
        // SAFETY: NUL-terminated strings; single-threaded at constructor time.
        unsafe {
            if kept.is_empty() {
                libc::unsetenv(c"LD_PRELOAD".as_ptr());
            } else if let Ok(v) = std::ffi::CString::new(kept.join(":")) {
                libc::setenv(c"LD_PRELOAD".as_ptr(), v.as_ptr(), 1);
            }
        }
    }
    for name in [ENV_STRATEGY, ENV_STATS, ENV_BUFFERED, ENV_INHERIT] {
        if let Ok(c) = std::ffi::CString::new(name) {
            // SAFETY: as above.
            unsafe { libc::unsetenv(c.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_run_offers_parse_and_others_do_not() {
        for n in STRATEGY_NAMES {
            assert_eq!(parse_strategy(n).map(|s| s.name()), Some(n));
        }
        assert!(parse_strategy("poll").is_none());
        assert!(parse_strategy("sync").is_none());
        assert!(parse_strategy("").is_none());
    }
}
