//! The one place a taken I/O is performed: [`Port::read_at`] and [`Port::write_at`], and
//! at the file offset [`Port::read_current`] and [`Port::write_current`].
//!
//! Both the interposed calls and the C ABI reach the device only through here, and here
//! only through the engine's [`SmartPort`] (the decide-then-wait glue exists once, in the
//! engine). This module adds nothing to the decision: it opens the port with the options
//! it is given and turns the port's counters into the library's.

use smartcon_engine::error::Error;
use smartcon_engine::smartport::{PortCounters, SmartPort, SmartPortOptions};

use crate::record::Counters;

/// One thread's port on one descriptor (Send, not Sync). Never closes the descriptor.
pub struct Port {
    inner: SmartPort,
}

impl Port {
    /// Opens a port on a descriptor the caller owns.
    pub fn open(fd: i32, options: SmartPortOptions) -> Result<Port, Error> {
        Ok(Port { inner: SmartPort::open(fd, options)? })
    }

    /// One positional read, waited for as the decision says; Ok(n < len) is end of file.
    /// Err carries pread's errno (EINVAL, before any I/O, for misaligned O_DIRECT).
    #[inline]
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        self.inner.read_at(buf, offset)
    }

    /// One positional write, as `read_at`.
    #[inline]
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<usize, Error> {
        self.inner.write_at(buf, offset)
    }

    /// One read at the descriptor's file offset, which it advances, as read(2) does:
    /// decided, waited for and counted as `read_at`. Err carries read's errno (EINVAL for
    /// misaligned O_DIRECT, the offset unchanged).
    #[inline]
    pub fn read_current(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        self.inner.read_current(buf)
    }

    /// One write at the descriptor's file offset, as `read_current`.
    #[inline]
    pub fn write_current(&mut self, buf: &[u8]) -> Result<usize, Error> {
        self.inner.write_current(buf)
    }

    /// What the port did so far.
    pub fn counters(&self) -> Counters {
        from_port(self.inner.counters())
    }

    /// The device the descriptor is on, as the engine names it (`blk:vda`): whose stored
    /// profile the port decides with.
    pub fn device_id(&self) -> &str {
        self.inner.device_id()
    }

    /// Lines the user should see once (no profile for the device, a buffered descriptor).
    pub fn notes(&self) -> &[String] {
        self.inner.notes()
    }
}

fn from_port(c: &PortCounters) -> Counters {
    let mut out = Counters { ios: c.ios, bytes: c.bytes, hist: c.hist.clone(), ..Default::default() };
    out.by_strategy.copy_from_slice(&c.by_strategy);
    out.by_reason.copy_from_slice(&c.by_reason);
    out
}
