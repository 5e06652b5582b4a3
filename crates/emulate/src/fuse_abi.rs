//! The parts of the FUSE kernel ABI (`include/uapi/linux/fuse.h`, protocol 7.42+) that the
//! emulate-mount server speaks: opcodes, the fixed in-structs it reads and the out-structs it
//! writes, and the FUSE-over-io_uring entry layout.
//!
//! Structs are read and written as bytes at their documented offsets (native endian, as the
//! kernel lays them out), not transmuted: a short or malformed message is a typed `None`, never
//! undefined behaviour. The layouts are pinned by tests against the header's sizes.
//!
//! Non-goals: opcodes a one-file, read-only-directory file system never needs (create, mkdir,
//! rename, locks, xattrs: those get ENOSYS or EPERM from the handler).

/// The protocol major version.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version this server speaks (FUSE over io_uring needs 7.42's entry layout).
pub const KERNEL_MINOR_VERSION: u32 = 42;
pub const ROOT_ID: u64 = 1;

pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
pub const GETATTR: u32 = 3;
pub const SETATTR: u32 = 4;
pub const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const WRITE: u32 = 16;
pub const STATFS: u32 = 17;
pub const RELEASE: u32 = 18;
pub const FSYNC: u32 = 20;
pub const FLUSH: u32 = 25;
pub const INIT: u32 = 26;
pub const OPENDIR: u32 = 27;
pub const READDIR: u32 = 28;
pub const RELEASEDIR: u32 = 29;
pub const FSYNCDIR: u32 = 30;
pub const ACCESS: u32 = 34;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const BATCH_FORGET: u32 = 42;

// INIT flags (fuse_init_in/out.flags, and flags2 for bits 32..63).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
pub const FUSE_ASYNC_DIO: u64 = 1 << 15;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
pub const FUSE_INIT_EXT: u64 = 1 << 30;
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;

// fuse_open_out.open_flags.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;

/// fuse_setattr_in.valid: the size is being set.
pub const FATTR_SIZE: u32 = 1 << 3;

pub const IN_HEADER_BYTES: usize = 40;
pub const OUT_HEADER_BYTES: usize = 16;
pub const ATTR_BYTES: usize = 88;
pub const ENTRY_OUT_BYTES: usize = 40 + ATTR_BYTES;
pub const ATTR_OUT_BYTES: usize = 16 + ATTR_BYTES;
pub const OPEN_OUT_BYTES: usize = 16;
pub const WRITE_OUT_BYTES: usize = 8;
pub const STATFS_OUT_BYTES: usize = 80;
pub const INIT_OUT_BYTES: usize = 64;

/// io_uring: `struct fuse_uring_req_header` is in_out[128], op_in[128], then
/// `struct fuse_uring_ent_in_out` (flags, commit_id, payload_sz, padding, reserved).
pub const URING_IN_OUT_BYTES: usize = 128;
pub const URING_OP_IN_BYTES: usize = 128;
pub const URING_HEADER_BYTES: usize = URING_IN_OUT_BYTES + URING_OP_IN_BYTES + 32;
pub const URING_ENT_OFFSET: usize = URING_IN_OUT_BYTES + URING_OP_IN_BYTES;
/// `fuse_uring_ent_in_out.payload_sz`, from the start of the header.
pub const URING_PAYLOAD_SZ_OFFSET: usize = URING_ENT_OFFSET + 16;
pub const URING_CMD_REGISTER: u32 = 1;
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;
/// Header + payload: the iovec count a REGISTER must carry.
pub const URING_IOV_SEGS: u32 = 2;

const _: () = assert!(URING_HEADER_BYTES == 288);
const _: () = assert!(IN_HEADER_BYTES <= URING_IN_OUT_BYTES);

/// The size of the fixed in-struct (`in_args[0]`) that precedes the payload of `opcode` in a
/// /dev/fuse message. Over io_uring the kernel puts this struct in `op_in` and the rest in
/// the payload; splitting /dev/fuse messages the same way lets one handler serve both.
/// LOOKUP's arg 0 is empty since Linux 6.14 (the name is payload), as is STATFS's.
pub fn op_in_bytes(opcode: u32) -> usize {
    match opcode {
        FORGET | OPEN | OPENDIR | ACCESS | INTERRUPT => 8,
        GETATTR | FSYNC | FSYNCDIR | BATCH_FORGET => 16,
        RELEASE | RELEASEDIR | FLUSH => 24,
        // fuse_read_in / fuse_write_in grew from 24 to 40 bytes in 7.9.
        READ | READDIR | WRITE => 40,
        SETATTR => 88,
        // 64 bytes since 7.36; a transport takes what the message has.
        INIT => 64,
        _ => 0,
    }
}

pub fn u16_at(b: &[u8], offset: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(offset..offset + 2)?.try_into().ok()?))
}

pub fn u32_at(b: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(offset..offset + 4)?.try_into().ok()?))
}

pub fn u64_at(b: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(offset..offset + 8)?.try_into().ok()?))
}

/// Writes fields at increasing offsets into a byte buffer; `ok()` says whether all fit.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
    fits: bool,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8]) -> Writer<'a> {
        Writer { buf, pos: 0, fits: true }
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        match self.buf.get_mut(self.pos..self.pos + b.len()) {
            Some(dst) => dst.copy_from_slice(b),
            None => self.fits = false,
        }
        self.pos += b.len();
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    pub fn zeros(&mut self, n: usize) -> &mut Self {
        match self.buf.get_mut(self.pos..self.pos + n) {
            Some(dst) => dst.fill(0),
            None => self.fits = false,
        }
        self.pos += n;
        self
    }

    /// Bytes written, or None when the buffer was too small.
    pub fn written(&self) -> Option<usize> {
        self.fits.then_some(self.pos)
    }
}

/// `struct fuse_in_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
}

impl InHeader {
    pub fn parse(b: &[u8]) -> Option<InHeader> {
        Some(InHeader { len: u32_at(b, 0)?, opcode: u32_at(b, 4)?, unique: u64_at(b, 8)?, nodeid: u64_at(b, 16)? })
    }
}

/// `struct fuse_out_header` into `buf`.
pub fn out_header(buf: &mut [u8], len: u32, error: i32, unique: u64) -> Option<usize> {
    Writer::new(buf).u32(len).u32(error as u32).u64(unique).written()
}

/// `struct fuse_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Attr {
    fn write(&self, w: &mut Writer<'_>) {
        // ino, size, blocks, atime, mtime, ctime; the three nsec; mode, nlink, uid, gid, rdev,
        // blksize, flags.
        w.u64(self.ino).u64(self.size).u64(self.size / 512).u64(0).u64(0).u64(0);
        w.u32(0).u32(0).u32(0).u32(self.mode).u32(self.nlink).u32(self.uid).u32(self.gid).u32(0).u32(4096).u32(0);
    }
}

/// `struct fuse_entry_out` (nodeid = attr.ino, generation 0).
pub fn entry_out(buf: &mut [u8], attr: &Attr, valid_s: u64) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u64(attr.ino).u64(0).u64(valid_s).u64(valid_s).u32(0).u32(0);
    attr.write(&mut w);
    w.written()
}

/// `struct fuse_attr_out`.
pub fn attr_out(buf: &mut [u8], attr: &Attr, valid_s: u64) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u64(valid_s).u32(0).u32(0);
    attr.write(&mut w);
    w.written()
}

/// `struct fuse_open_out`.
pub fn open_out(buf: &mut [u8], fh: u64, open_flags: u32) -> Option<usize> {
    Writer::new(buf).u64(fh).u32(open_flags).u32(0).written()
}

/// `struct fuse_write_out`.
pub fn write_out(buf: &mut [u8], size: u32) -> Option<usize> {
    Writer::new(buf).u32(size).u32(0).written()
}

/// `struct fuse_statfs_out` (`struct fuse_kstatfs`).
pub fn statfs_out(buf: &mut [u8], blocks: u64) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u64(blocks).u64(0).u64(0).u64(2).u64(0).u32(4096).u32(255).u32(4096).u32(0).zeros(24);
    w.written()
}

/// One `struct fuse_dirent` (name padded to 8 bytes) appended at `pos`; None when it does not fit.
pub fn dirent(buf: &mut [u8], pos: usize, ino: u64, next_off: u64, kind: u32, name: &str) -> Option<usize> {
    let padded = (24 + name.len()).next_multiple_of(8);
    let dst = buf.get_mut(pos..pos + padded)?;
    let mut w = Writer::new(dst);
    w.u64(ino).u64(next_off).u32(name.len() as u32).u32(kind).bytes(name.as_bytes());
    w.zeros(padded - 24 - name.len());
    w.written().map(|n| pos + n)
}

/// What the server answers to INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOut {
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u64,
    pub max_background: u16,
    pub max_write: u32,
    pub max_pages: u16,
}

/// `struct fuse_init_out` (64 bytes since 7.23; the kernel reads what its minor knows).
pub fn init_out(buf: &mut [u8], o: &InitOut) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u32(KERNEL_VERSION).u32(o.minor).u32(o.max_readahead).u32(o.flags as u32);
    w.u16(o.max_background).u16(o.max_background * 3 / 4).u32(o.max_write).u32(1);
    w.u16(o.max_pages).u16(0).u32((o.flags >> 32) as u32).u32(0).u16(0).zeros(22);
    w.written()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_structs_have_the_header_sizes() {
        let mut b = [0u8; 512];
        let attr = Attr { ino: 2, size: 1 << 20, mode: 0o100600, nlink: 1, uid: 0, gid: 0 };
        assert_eq!(entry_out(&mut b, &attr, 1), Some(ENTRY_OUT_BYTES));
        assert_eq!(entry_out(&mut b, &attr, 1), Some(128));
        assert_eq!(attr_out(&mut b, &attr, 1), Some(104));
        assert_eq!(open_out(&mut b, 0, FOPEN_DIRECT_IO), Some(OPEN_OUT_BYTES));
        assert_eq!(write_out(&mut b, 4096), Some(WRITE_OUT_BYTES));
        assert_eq!(statfs_out(&mut b, 10), Some(STATFS_OUT_BYTES));
        let o = InitOut { minor: 42, max_readahead: 0, flags: 0, max_background: 64, max_write: 1, max_pages: 1 };
        assert_eq!(init_out(&mut b, &o), Some(INIT_OUT_BYTES));
        assert_eq!(out_header(&mut b, 16, -2, 7), Some(OUT_HEADER_BYTES));
        assert_eq!(u32_at(&b, 4), Some((-2i32) as u32));
        // Attr fields land where struct fuse_attr has them: mode at 60, blksize at 80.
        attr_out(&mut b, &attr, 1).unwrap();
        assert_eq!(u32_at(&b, 16 + 60), Some(0o100600));
        assert_eq!(u32_at(&b, 16 + 80), Some(4096));
    }

    #[test]
    fn init_out_splits_the_flags_at_bit_32() {
        let mut b = [0u8; 64];
        let flags = FUSE_INIT_EXT | FUSE_OVER_IO_URING | FUSE_ASYNC_READ;
        let o =
            InitOut { minor: 42, max_readahead: 4096, flags, max_background: 64, max_write: 1 << 20, max_pages: 256 };
        init_out(&mut b, &o).unwrap();
        assert_eq!(u32_at(&b, 12), Some((FUSE_INIT_EXT | FUSE_ASYNC_READ) as u32));
        // flags2 at 32: FUSE_OVER_IO_URING is bit 41, i.e. bit 9 of flags2.
        assert_eq!(u32_at(&b, 32), Some(1 << 9));
        assert_eq!(u32_at(&b, 20), Some(1 << 20));
        assert_eq!(u16_at(&b, 28), Some(256));
    }

    #[test]
    fn short_buffers_and_messages_are_refused() {
        let mut small = [0u8; 8];
        assert_eq!(write_out(&mut small, 1), Some(8));
        assert_eq!(open_out(&mut small, 0, 0), None);
        assert_eq!(InHeader::parse(&[0u8; 20]), None);
        assert_eq!(dirent(&mut small, 0, 1, 1, 4, "."), None);
        let mut b = [0u8; 64];
        // 24 bytes + "disk" padded to 32.
        assert_eq!(dirent(&mut b, 0, 2, 3, 8, "disk"), Some(32));
        assert_eq!(&b[24..28], b"disk");
    }
}
