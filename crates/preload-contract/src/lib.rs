//! The contract between `libsmartcon.so` (crates/preload) and the programs that start a
//! command with it (`smartcon run`, `smartcon emulate sweep`, `smartcon emulate vm`), in one
//! place:
//!
//! - [`env`]: the environment variables the library reads, and the one function that
//!   builds them ([`env::PreloadEnv::vars`]);
//! - [`record`]: the JSON Lines records each process image appends at exit
//!   (`preload_process`, `emu_process`), written by the library with these types and read
//!   back by the CLI with the same ones;
//! - [`launch`]: one way to start the command with the library preloaded and wait for it,
//!   passing on a stop (Ctrl-C, SIGTERM) as the caller decides.
//!
//! The library is a separate shared object, never linked into the binaries that start it
//! (linking it would interpose their own calls), so the two sides share this crate, not
//! each other's code.
//!
//! Non-goals: the C ABI of include/smartcon.h (its header is its contract), and any I/O or
//! timing code.

pub mod env;
pub mod launch;
pub mod record;
