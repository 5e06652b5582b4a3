//! Where a trace file's bytes come from ([`TraceInput`]): a file, standard input or a
//! decompressor through a 64 KiB `BufReader` ([`TraceInput::file`], [`TraceInput::buffered`]);
//! or, asked for by [`TraceInput::direct`] (`smartcon emulate replay --direct-read`), a
//! regular file read with `O_DIRECT` by a reader thread into two reused, page-aligned
//! blocks, ahead of the parser, without the kernel's copy out of the page cache and without
//! leaving the file in it (a trace of 100 M records is GBs of cache, which pushes other
//! files' pages out).
//!
//! The command reads files through the page cache since issue 33's memory check (the
//! direct reader was its default for one session): on a 100 M-record fio v3 iolog in the
//! page cache, alternated, the `BufReader` took as much CPU time a record as four 1 MiB
//! direct blocks in huge pages (13.7 and 14.8 M records a second of CPU against 13.3 and
//! 15.1, load 5-6) in 8.3-8.4 MB of peak RSS against 16.5; two direct blocks of 256 KiB
//! took 12-22% more CPU (11.7 and 11.5 M/s) in 8.3-8.6 MB. The direct reader's gain is
//! wall time (the copy is not on the parser's thread: 14.2-14.9 M records a second of wall
//! time against 11.5-12.0).
//!
//! Why not `mmap`: a mapped file that another process truncates raises SIGBUS at the next
//! read of a page beyond its new end, and one that is rewritten in place changes under the
//! parser's `&[u8]` (undefined behaviour for Rust, whatever the parser then does). Checking
//! the size or the modification time first is a race, `MAP_POPULATE` does not keep the
//! pages (a truncation unmaps them), and a read lease can be broken by the kernel after
//! `lease-break-time`. Reads into our own memory have no such case: the kernel writes a
//! block only inside our `read` call, and a file that changes meanwhile gives other bytes
//! (as a `read` through the page cache would), never a fault or a slice that changes.
//!
//! `O_DIRECT` reads the disk, not the page cache, even for a file that is cached (the
//! kernel first writes back its dirty pages, so the bytes are the file's). Its rules
//! (buffer, offset and length aligned to the logical block) are met by page-aligned blocks
//! of a whole number of pages read from offset 0. A file system that refuses the flag, or
//! the first read (EINVAL: a logical block larger than a page), is an error: asked for, the
//! direct read is not replaced by the page cache. A read refused later (a short read that
//! left the offset unaligned) makes the thread drop `O_DIRECT` and read on. Memory is
//! constant: [`BLOCKS`] blocks of [`BLOCK_BYTES`] (512 KiB), whatever the file's length.
//! Until issue 33's memory check they were four 1 MiB blocks, each in a 2 MiB transparent
//! huge page (8 MiB resident, the command's peak RSS 16.5-17 MB against 7 MB for a closed
//! loop); two of 256 KiB in ordinary pages are 512 KiB (and took 12-22% more CPU a record
//! than the huge pages on a 100 M-record trace, above).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes a block holds (a whole number of pages). Issue 33, 5 M-record fio v3 iolog, the
/// command's CPU time a record against four 1 MiB blocks in huge pages (alternated, load
/// 6-11): two blocks of 256 KiB 0.88-0.91x, three of 128 KiB 0.80x, four of 64 KiB 0.68x
/// (the cost of a read, not of its bytes, grows with the number of reads).
pub const BLOCK_BYTES: usize = 256 << 10;
/// Blocks in use: the one the parser reads and the one being read.
pub const BLOCKS: usize = 2;
/// Page alignment, all `O_DIRECT` needs of the buffer (a page covers every logical block
/// size up to 4 KiB; a larger one refuses the read, which falls back to the page cache).
/// No huge page: one is 2 MiB resident, four times the two blocks together.
const ALIGN: usize = 4096;

/// The buffer of a file, standard input or a decompressor read through the page cache
/// ([`TraceInput::buffered`]): 64 KiB, a pipe's default capacity.
pub const BUFFER_BYTES: usize = 64 << 10;

/// A block of [`BLOCK_BYTES`] at the first [`ALIGN`]ed address of a `Vec` one page longer
/// (no raw allocation: the block is a sub-slice, and the `Vec`'s heap memory does not
/// move).
struct Block {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl Block {
    fn new() -> Block {
        const { assert!(BLOCK_BYTES.is_multiple_of(ALIGN)) };
        let bytes = vec![0u8; BLOCK_BYTES + ALIGN];
        let start = bytes.as_ptr().align_offset(ALIGN);
        Block { bytes, start, len: 0 }
    }

    fn room(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + BLOCK_BYTES]
    }

    fn data(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

/// A trace's bytes: see the module's text.
pub struct TraceInput(Inner);

enum Inner {
    Direct(DirectInput),
    Buffered(BufReader<Box<dyn Read + Send>>),
}

impl TraceInput {
    /// A file, through the page cache (as [`TraceInput::buffered`] reads it; see the
    /// module's text for why not by `O_DIRECT`).
    pub fn file(file: File) -> TraceInput {
        TraceInput::buffered(Box::new(file))
    }

    /// A regular file read by `O_DIRECT` blocks on a reader thread (`smartcon emulate
    /// replay --direct-read`); an error where the file system refuses the flag, or the
    /// thread cannot start: asked for, it is not replaced by the page cache.
    pub fn direct(file: File) -> io::Result<TraceInput> {
        Ok(TraceInput(Inner::Direct(DirectInput::new(file)?)))
    }

    /// Any reader (standard input, a decompressor), through a [`BUFFER_BYTES`] buffer.
    pub fn buffered(input: Box<dyn Read + Send>) -> TraceInput {
        TraceInput(Inner::Buffered(BufReader::with_capacity(BUFFER_BYTES, input)))
    }

    /// Whether the bytes come by `O_DIRECT` blocks (a test's question).
    pub fn is_direct(&self) -> bool {
        matches!(self.0, Inner::Direct(_))
    }

    /// The reader thread's CPU time so far (0 without one): a replay counts it with its own.
    pub fn reader_cpu_ns(&self) -> Arc<AtomicU64> {
        match &self.0 {
            Inner::Direct(d) => d.cpu_ns.clone(),
            Inner::Buffered(_) => Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Read for TraceInput {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match &mut self.0 {
            Inner::Direct(d) => d.read(out),
            Inner::Buffered(b) => b.read(out),
        }
    }
}

impl BufRead for TraceInput {
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match &mut self.0 {
            Inner::Direct(d) => d.fill_buf(),
            Inner::Buffered(b) => b.fill_buf(),
        }
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        match &mut self.0 {
            Inner::Direct(d) => d.consume(n),
            Inner::Buffered(b) => b.consume(n),
        }
    }
}

/// The parser's end of the reader thread: blocks received full, handed back when read.
/// A line that straddles two blocks is not whole in [`BufRead::fill_buf`]'s slice, so the
/// trace reader takes it through its general path (which reads across the boundary), as it
/// does at a `BufReader`'s boundary.
pub struct DirectInput {
    full: Option<Receiver<io::Result<Block>>>,
    empty: Option<SyncSender<Block>>,
    current: Option<Block>,
    at: usize,
    cpu_ns: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl DirectInput {
    /// Starts the reader thread on `file` with `O_DIRECT` set; an error when the flag is
    /// refused (a file system without it, tmpfs before Linux 6.6) or the thread cannot start.
    fn new(file: File) -> io::Result<DirectInput> {
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on the descriptor `file` owns (open for the call); F_GETFL and
        // F_SETFL read and change its status flags only.
        let set = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_DIRECT) == 0
        };
        if !set {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("the file system refuses O_DIRECT ({e})")));
        }
        let (full_tx, full_rx) = sync_channel::<io::Result<Block>>(BLOCKS);
        let (empty_tx, empty_rx) = sync_channel::<Block>(BLOCKS);
        for _ in 0..BLOCKS {
            empty_tx.send(Block::new()).expect("room for every block");
        }
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let cpu = cpu_ns.clone();
        let thread = std::thread::Builder::new()
            .name("trace-read".into())
            .spawn(move || read_blocks(file, &empty_rx, &full_tx, &cpu))?;
        Ok(DirectInput {
            full: Some(full_rx),
            empty: Some(empty_tx),
            current: None,
            at: 0,
            cpu_ns,
            thread: Some(thread),
        })
    }
}

/// The reader thread: each empty block filled from the file (short only at the end) and
/// sent on, until the end, an error, or the parser's end is gone. A read refused (EINVAL)
/// at the file's start is an error (the file system takes the flag but not the read: a
/// logical block larger than a page); later, where a short read left the offset unaligned,
/// the thread reads on through the page cache.
fn read_blocks(mut file: File, empty: &Receiver<Block>, full: &SyncSender<io::Result<Block>>, cpu: &AtomicU64) {
    let mut direct = true;
    let mut first = true;
    while let Ok(mut block) = empty.recv() {
        let mut len = 0;
        let result = loop {
            if len == BLOCK_BYTES {
                break Ok(());
            }
            match file.read(&mut block.room()[len..]) {
                Ok(0) => break Ok(()),
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if first && len == 0 && e.raw_os_error() == Some(libc::EINVAL) => {
                    break Err(io::Error::new(e.kind(), format!("the file system refuses O_DIRECT reads ({e})")));
                }
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    direct = false;
                    // SAFETY: fcntl on the descriptor `file` owns; the flags change only.
                    let cleared = unsafe {
                        let fd = file.as_raw_fd();
                        let fl = libc::fcntl(fd, libc::F_GETFL);
                        fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_DIRECT) == 0
                    };
                    if !cleared {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        block.len = len;
        first = false;
        cpu.store(crate::replay::thread_cpu_ns(), Ordering::Relaxed);
        let last = result.is_err() || len < BLOCK_BYTES;
        if full.send(result.map(|()| block)).is_err() || last {
            break;
        }
    }
}

impl Read for DirectInput {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for DirectInput {
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.current.as_ref().is_none_or(|b| self.at == b.len) {
            self.next_block()?;
        }
        Ok(self.current.as_ref().map_or(&[][..], |b| &b.data()[self.at..]))
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.at += n;
        debug_assert!(self.current.as_ref().is_some_and(|b| self.at <= b.len) || n == 0);
    }
}

impl DirectInput {
    /// The block read is handed back and the next one taken (none at the end, after an
    /// error or when the thread is gone: the input ends).
    #[cold]
    fn next_block(&mut self) -> io::Result<()> {
        if let (Some(done), Some(empty)) = (self.current.take(), &self.empty) {
            let _ = empty.try_send(done);
        }
        self.at = 0;
        let Some(full) = &self.full else { return Ok(()) };
        match full.recv() {
            Ok(Ok(block)) => self.current = Some(block),
            Ok(Err(e)) => {
                self.full = None;
                return Err(e);
            }
            Err(_) => self.full = None,
        }
        Ok(())
    }
}

impl Drop for DirectInput {
    fn drop(&mut self) {
        // The thread stops at its next send or its wait for an empty block (both channels'
        // other ends gone) or at the end; one read at most is waited for.
        self.full = None;
        self.empty = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// The file read by `O_DIRECT`, or None (said, the test then checks nothing more) where
    /// the temporary directory's file system refuses the flag: then the error says so.
    fn direct(path: &std::path::Path) -> Option<TraceInput> {
        match TraceInput::direct(File::open(path).unwrap()) {
            Ok(input) => Some(input),
            Err(e) => {
                assert!(e.to_string().contains("refuses O_DIRECT"), "{e}");
                eprintln!("skipped: {} ({e})", path.display());
                None
            }
        }
    }

    #[test]
    fn a_file_reads_back_whole_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        // Empty, one byte, a block exactly, around it, and several blocks and a tail.
        for n in [0, 1, 4095, 4096, BLOCK_BYTES - 1, BLOCK_BYTES, BLOCK_BYTES + 1, 5 * BLOCK_BYTES + 777] {
            let path = dir.path().join(format!("f{n}"));
            let want = bytes(n);
            std::fs::write(&path, &want).unwrap();
            let Some(mut input) = direct(&path) else { return };
            assert!(input.is_direct());
            let mut got = Vec::new();
            // Through BufRead in odd steps, then the rest by Read.
            let mut step = 1;
            while got.len() < n / 2 {
                let avail = input.fill_buf().unwrap();
                assert!(!avail.is_empty());
                let k = avail.len().min(step);
                got.extend_from_slice(&avail[..k]);
                input.consume(k);
                step = step * 3 + 1;
            }
            input.read_to_end(&mut got).unwrap();
            assert_eq!(got.len(), n, "{n} bytes");
            assert!(got == want, "{n} bytes differ");
            assert!(input.fill_buf().unwrap().is_empty());
        }
    }

    #[test]
    fn dropped_early_the_reader_thread_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes(12 * BLOCK_BYTES)).unwrap();
        let Some(mut input) = direct(&path) else { return };
        assert_eq!(input.fill_buf().unwrap().len(), BLOCK_BYTES);
        drop(input); // joins the thread: a test that hangs here fails by its timeout
    }
}
