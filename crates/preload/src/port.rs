//! The one place a taken I/O is performed: [`Port::read_at`] and [`Port::write_at`].
//!
//! Both the interposed calls and the C ABI reach the device only through here, and here
//! only through the engine's `SmartPort` (the decide-then-wait glue exists once, in the
//! engine). This module adds nothing to the decision: it opens the port with the options
//! the process was given and turns the port's counters into the library's.
//!
//! INTERIM: until the engine's SmartPort lands on this branch, `read_at`/`write_at` are a
//! plain pread/pwrite through the real libc functions (counted as `sync`), so everything
//! around them (descriptor table, contract, counters, `smartcon run`, the C ABI) is
//! exercised already.

use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::StrategyChoice;

use crate::record::Counters;

/// One thread's port on one descriptor (Send, not Sync). Never closes the descriptor.
pub struct Port {
    fd: i32,
    counters: Counters,
    notes: Vec<String>,
}

fn now_ns() -> u64 {
    smartcon_engine::clock::now_ns()
}

fn os_error(what: &str, fd: i32) -> Error {
    let e = crate::real::errno();
    Error::os(ErrorKind::Io, e, format!("{what} on fd {fd}: {}", std::io::Error::from_raw_os_error(e)))
}

impl Port {
    /// Opens a port on a descriptor the caller owns.
    pub fn open(fd: i32, strategy: StrategyChoice) -> Result<Port, Error> {
        let _ = strategy;
        if crate::fdtable::probe(fd).is_none() {
            return Err(Error::os(ErrorKind::Usage, libc::EBADF, format!("fd {fd} is not open")));
        }
        Ok(Port { fd, counters: Counters::default(), notes: Vec::new() })
    }

    fn record(&mut self, start_ns: u64, bytes: usize) {
        let c = &mut self.counters;
        c.ios += 1;
        c.bytes += bytes as u64;
        c.by_strategy[Strategy::Sync.index()] += 1;
        c.hist.saturating_record(now_ns().saturating_sub(start_ns).max(1));
    }

    /// One positional read; Ok(n < len) is end of file. Err carries pread's errno.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let start_ns = now_ns();
        // SAFETY: buf is a valid writable slice of buf.len() bytes.
        let n = unsafe { crate::real::pread(self.fd, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(os_error("pread", self.fd));
        }
        self.record(start_ns, n as usize);
        Ok(n as usize)
    }

    /// One positional write. Err carries pwrite's errno.
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<usize, Error> {
        let start_ns = now_ns();
        // SAFETY: buf is a valid readable slice of buf.len() bytes.
        let n = unsafe { crate::real::pwrite(self.fd, buf.as_ptr().cast(), buf.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(os_error("pwrite", self.fd));
        }
        self.record(start_ns, n as usize);
        Ok(n as usize)
    }

    /// What the port did so far.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// Lines the user should see once.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}
