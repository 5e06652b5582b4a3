//! The target kinds a `--target` argument names, parsed and opened: a path (a file or a
//! block device), `tmp:SIZE[@DIR]` (a temporary file) and `emu:PRESET[,key=value...]` (an
//! emulated device). The first two are the engine's own targets; the third is [`crate::emu`]'s.
//! The engine's target vocabulary (`Target`, `Port`, `OpenOptions`, `AlignedBuf`...) is
//! re-exported beside them, so that a caller has one path for both.

use std::path::PathBuf;

use smartcon_devemu::EmuSpec;
use smartcon_engine::error::{Error, ErrorKind};
pub use smartcon_engine::target::*;
use smartcon_util::units;

use crate::emu;

/// What `--target` said.
#[derive(Debug, Clone)]
pub enum TargetSpec {
    Emu(EmuSpec),
    Path(PathBuf),
    Temp { size_bytes: u64, dir: Option<PathBuf> },
}

/// The largest temporary file smartcon will create: a device size's bound
/// ([`units::DEVICE_SIZE`], the size of every `tmp:` file, emulated device and region).
pub const TEMP_BYTES_MAX: u64 = units::DEVICE_SIZE.max_bytes;

/// Parses a `--target` argument.
pub fn parse_target(text: &str) -> Result<TargetSpec, Error> {
    if text.starts_with("emu:") {
        return smartcon_devemu::parse_spec(text).map(TargetSpec::Emu);
    }
    if let Some(rest) = text.strip_prefix("tmp:") {
        let (size, dir) = match rest.split_once('@') {
            Some((s, d)) => (s, Some(PathBuf::from(d))),
            None => (rest, None),
        };
        let size_bytes = units::parse_size_in(size, units::DEVICE_SIZE)
            .map_err(|e| Error::new(ErrorKind::Usage, format!("tmp target {text:?}: {e}")))?;
        return Ok(TargetSpec::Temp { size_bytes, dir });
    }
    if text.is_empty() {
        return Err(Error::new(ErrorKind::Usage, "empty target"));
    }
    Ok(TargetSpec::Path(PathBuf::from(text)))
}

/// Opens a target.
pub fn open(spec: &TargetSpec, options: OpenOptions) -> Result<Box<dyn Target>, Error> {
    match spec {
        TargetSpec::Emu(e) => Ok(Box::new(emu::EmuTarget::new(e.clone())?)),
        TargetSpec::Path(p) => Ok(Box::new(file::FileTarget::open(p, options)?)),
        TargetSpec::Temp { size_bytes, dir } => Ok(Box::new(file::FileTarget::temporary(*size_bytes, dir.as_deref())?)),
    }
}
