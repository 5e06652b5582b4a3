//! The engine and its device emulator, put together: the layer above both.
//!
//! The engine (`smartcon-engine`) knows ports, waits and decisions, and nothing of how an
//! emulated device is modelled; devemu (`smartcon-devemu`) knows the models and nothing of
//! the engine. This crate holds what needs the two at once:
//!
//! - [`emu`]: the emulated-device target, a devemu model and RAM store behind the engine's
//!   `Port`, on the real clock or an injected one;
//! - [`sim`]: the seeded simulation, the engine's own port, decision and waits with devemu
//!   on a virtual clock in one process;
//! - [`target`]: the registry of target kinds a `--target` names (a path, `tmp:SIZE`,
//!   `emu:PRESET`), parsed and opened.
//!
//! Non-goals: anything the engine can do without a device model. Files, block devices and
//! temporary files stay the engine's own targets; this crate only names them.

pub mod emu;
pub mod sim;
pub mod target;
