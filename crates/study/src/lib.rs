//! The experiments smartcon runs, as a library: each takes a typed plan, a progress
//! callback and a stop flag, and returns typed records. Nothing here prints; the CLI
//! renders what comes back (tables, markdown, SVG, progress bars).
//!
//! Non-goals: argument parsing and rendering (the `smartcon` binary), the I/O core
//! (`smartcon-engine`), and the loads and workloads themselves (`smartcon-workloads`).

pub mod merge_bench;
pub mod polling;
