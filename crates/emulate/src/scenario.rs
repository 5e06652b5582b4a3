//! Fault scenarios in TOML: the parser lives with the plan in devemu
//! ([`smartcon_devemu::fault`], where the format is documented), so the engine's emulated
//! targets (`emu:PRESET,faults=FILE`) read the same files as the virtual-time replay.

use smartcon_devemu::FaultPlan;
use smartcon_engine::error::Error;

/// Parses a scenario and validates it.
pub fn parse(text: &str) -> Result<FaultPlan, Error> {
    smartcon_devemu::fault::parse_scenario(text)
}

/// Reads and parses a scenario file (the message names it).
pub fn load(path: &std::path::Path) -> Result<FaultPlan, Error> {
    smartcon_devemu::fault::load_scenario(path)
}
