//! What `smartcon run` tells the preloaded library, through the environment.
//!
//! The library is inert unless `SMARTCON_PRELOAD_STRATEGY` names a strategy: a C program
//! that links libsmartcon.so for the C ABI gets plain pass-through wrappers. The variables
//! are read once, in the constructor, with `getenv` (no allocation before it is needed).
//!
//! The variables and their meaning are the contract's (`smartcon_preload_contract::env`),
//! shared with the programs that set them. The configuration is kept here, set once by the
//! constructor ([`init`]) and read by every layer above ([`get`]).

use std::ffi::CStr;
use std::sync::OnceLock;

use smartcon_engine::job::StrategyChoice;
use smartcon_preload_contract::env;
pub use smartcon_preload_contract::env::STRATEGY_NAMES;

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// Reads the environment once (the constructor) and drops the library from it when asked;
/// returns whether interposition is on.
pub fn init() -> bool {
    let config = Config::from_env();
    if let Some(c) = &config {
        if !c.inherit {
            drop_from_environment();
        }
    }
    let on = config.is_some();
    let _ = CONFIG.set(config);
    on
}

/// The configuration, when interposition is on.
pub fn get() -> Option<&'static Config> {
    CONFIG.get().and_then(|c| c.as_ref())
}

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
        let strategy = parse_strategy(&getenv(env::STRATEGY)?)?;
        Some(Config {
            strategy,
            stats_path: getenv(env::STATS).filter(|s| !s.is_empty()).map(Into::into),
            buffered: getenv(env::BUFFERED).as_deref() == Some("1"),
            inherit: getenv(env::INHERIT).as_deref() != Some("0"),
        })
    }
}

/// Removes this library from `LD_PRELOAD` and the interposition's variables from the
/// environment, so programs this process executes run untouched. Called from the
/// constructor, before the program's own threads exist (setenv is not thread-safe).
fn drop_from_environment() {
    if let Some(list) = getenv("LD_PRELOAD") {
        let kept: Vec<&str> = list
            .split([' ', ':'])
            .filter(|p| !p.is_empty() && !p.ends_with(&format!("/{}", env::LIBRARY_FILE)))
            .collect();
        // SAFETY: NUL-terminated strings; single-threaded at constructor time.
        unsafe {
            if kept.is_empty() {
                libc::unsetenv(c"LD_PRELOAD".as_ptr());
            } else if let Ok(v) = std::ffi::CString::new(kept.join(":")) {
                libc::setenv(c"LD_PRELOAD".as_ptr(), v.as_ptr(), 1);
            }
        }
    }
    // The emulated image's variables stay: without LD_PRELOAD nothing reads them, and this
    // image's own emulation reads them after this runs.
    for name in [env::STRATEGY, env::STATS, env::BUFFERED, env::INHERIT] {
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
