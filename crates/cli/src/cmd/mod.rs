//! One module per subcommand.
pub mod bench;
pub mod cachesim;
pub mod cleanup;
pub mod compare_fio;
pub mod ctx;
pub mod devices;
pub mod emulate;
pub mod ets;
pub mod evaluate;
pub mod fleet;
pub mod io;
pub mod merge_bench;
pub mod model;
pub mod probe;
pub mod report;
pub mod run;
pub mod trace;
