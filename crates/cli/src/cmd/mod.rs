//! One module per subcommand.
pub mod bench;
pub mod cachesim;
pub mod ctx;
pub mod devices;
pub mod ets;
pub mod io;
pub mod model;
pub mod trace;
