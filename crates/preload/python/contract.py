"""The contract of preadv2/pwritev2 and libaio from Python, as c/contract_v2.c and
c/contract_aio.c check it from C: each operation is done on file A the way a Python
program does it (os.preadv/os.pwritev with flags, which CPython makes preadv2/pwritev2,
and libaio's io_submit/io_getevents through ctypes, found in the process's global scope
as a program linked with libaio finds them, so the preloaded library's are the ones
called) and on file B (an identical copy) through syscall(2). Results, errno, data and
the files' final bytes must agree.

Prints one line per single check (the same with and without the library), "MISMATCH"
lines when the sides disagree, and exits with the number of mismatches (100: set-up
failed). Without libaio.so.1 the libaio part says so and is skipped.

Usage: python3 contract.py DIR   (DIR on a file system that supports O_DIRECT)
"""

import ctypes
import errno
import mmap
import os
import platform
import sys

BS = 4096
FILE_BYTES = 256 * 1024 + 1000  # an end of file that is not block-aligned
LOOPS = 1200
DEPTH = 4
RWF_HIPRI, RWF_DSYNC, RWF_NOWAIT = 0x1, 0x2, 0x8
IO_CMD_PREAD, IO_CMD_PWRITE = 0, 1

# System call numbers: x86-64 and AArch64.
SYS = {
    "x86_64": {"preadv2": 327, "pwritev2": 328, "io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209},
    "aarch64": {"preadv2": 286, "pwritev2": 287, "io_setup": 0, "io_destroy": 1, "io_getevents": 4, "io_submit": 2},
}[platform.machine()]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

mismatches = 0
quiet = False


def raw(name, *args):
    """syscall(2), answering as libaio does: the result, or a negative errno."""
    r = libc.syscall(ctypes.c_long(SYS[name]), *[ctypes.c_long(a) for a in args])
    return -ctypes.get_errno() if r < 0 else r


def report(name, a, b):
    global mismatches
    if not quiet:
        print(f"{name}: {a}")
    if a != b:
        print(f"MISMATCH {name}: python {a}, syscall {b}")
        mismatches += 1


def aligned(n):
    return mmap.mmap(-1, max(n, BS))  # page-aligned, zeroed


def make_file(path):
    data = bytes((131 + i * 7 + (i >> 9)) & 0xFF for i in range(FILE_BYTES))
    with open(path, "wb") as f:
        f.write(data)


def py_preadv2(fd, buf, off, flags):
    try:
        return os.preadv(fd, [buf], off, flags)
    except OSError as e:
        return -e.errno


def py_pwritev2(fd, buf, off, flags):
    try:
        return os.pwritev(fd, [buf], off, flags)
    except OSError as e:
        return -e.errno


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def raw_v2(name, fd, buf, off, flags):
    iov = Iovec(ctypes.addressof(ctypes.c_char.from_buffer(buf)), len(buf))
    return raw(name, fd, ctypes.addressof(iov), 1, off, 0, flags)


def v2_both(name, fa, fb, bufa, bufb, off, flags, write):
    """One preadv2/pwritev2 on both sides; RWF_NOWAIT's EAGAIN (either side) is redone."""
    for _ in range(1000):
        if write:
            ra, rb = py_pwritev2(fa, bufa, off, flags), raw_v2("pwritev2", fb, bufb, off, flags)
        else:
            ra, rb = py_preadv2(fa, bufa, off, flags), raw_v2("preadv2", fb, bufb, off, flags)
        if not (flags & RWF_NOWAIT) or -errno.EAGAIN not in (ra, rb):
            break
    report(name, ra, rb)
    if not write and ra > 0 and bufa[:ra] != bufb[:ra]:
        report(name + " data", "differs", "same")


# libaio through ctypes: the kernel's struct iocb and io_event.
class Iocb(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
        ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32),
    ]


class IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class Aio:
    """One side's context: through libaio (the global scope's io_submit) or syscall(2)."""

    def __init__(self, fd, through_libaio):
        self.fd, self.libaio = fd, through_libaio
        self.ctx = ctypes.c_ulong(0)
        r = libc.io_setup(64, ctypes.byref(self.ctx)) if through_libaio else raw("io_setup", 64, ctypes.addressof(self.ctx))
        if r != 0:
            sys.exit(f"io_setup: {r}")
        self.cbs = (Iocb * 8)()
        self.ptrs = (ctypes.POINTER(Iocb) * 8)()
        self.bufs = [aligned(BS) for _ in range(8)]
        self.events = (IoEvent * 8)()

    def submit(self, n):
        if self.libaio:
            return libc.io_submit(self.ctx, n, self.ptrs)
        return raw("io_submit", self.ctx.value, n, ctypes.addressof(self.ptrs))

    def getevents(self, min_nr, nr):
        if self.libaio:
            return libc.io_getevents(self.ctx, min_nr, nr, self.events, None)
        return raw("io_getevents", self.ctx.value, min_nr, nr, ctypes.addressof(self.events), 0)

    def batch(self, reqs, min_nr):
        """Submits (op, offset, flags, data) requests, reaps them; each request's res."""
        for i, (op, off, flags, data) in enumerate(reqs):
            cb, buf = self.cbs[i], self.bufs[i]
            buf[:] = data if op == IO_CMD_PWRITE else b"\xee" * BS
            ctypes.memset(ctypes.addressof(cb), 0, ctypes.sizeof(cb))
            cb.data, cb.opcode, cb.fildes, cb.rw_flags = i, op, self.fd, flags
            cb.buf, cb.nbytes, cb.offset = ctypes.addressof(ctypes.c_char.from_buffer(buf)), BS, off
            self.ptrs[i] = ctypes.pointer(cb)
        submitted = self.submit(len(reqs))
        res = [submitted if submitted < 0 else None] * len(reqs)
        got = 0
        while got < max(submitted, 0):
            r = self.getevents(min(min_nr, submitted - got), submitted - got)
            if r <= 0:
                break
            for e in range(r):
                res[self.events[e].data] = self.events[e].res
            got += r
        return submitted, res

    def destroy(self):
        return libc.io_destroy(self.ctx) if self.libaio else raw("io_destroy", self.ctx.value)


def aio_both(name, a, b, reqs, min_nr):
    """One batch on both sides; RWF_NOWAIT's EAGAIN (either side) is redone."""
    for _ in range(1000):
        sa, ra = a.batch(reqs, min_nr)
        sb, rb = b.batch(reqs, min_nr)
        nowait = any(f & RWF_NOWAIT for _, _, f, _ in reqs)
        if not nowait or -errno.EAGAIN not in ra + rb + [sa, sb]:
            break
    report(name + " submitted", sa, sb)
    report(name + " results", ra, rb)
    for i, (op, _, _, _) in enumerate(reqs):
        n = ra[i] or 0
        if op == IO_CMD_PREAD and n > 0 and a.bufs[i][:n] != b.bufs[i][:n]:
            report(f"{name} #{i} data", "differs", "same")


def main():
    global quiet
    if len(sys.argv) != 2:
        sys.exit("usage: contract.py DIR")
    pa, pb = os.path.join(sys.argv[1], "py-a"), os.path.join(sys.argv[1], "py-b")
    make_file(pa)
    make_file(pb)
    fa, fb = os.open(pa, os.O_RDWR | os.O_DIRECT), os.open(pb, os.O_RDWR | os.O_DIRECT)
    ba, bb, w = aligned(BS), aligned(BS), aligned(BS)
    w[:] = bytes((9 * 131 + i * 7) & 0xFF for i in range(BS))

    for flags, fname in [(0, "flags 0"), (RWF_HIPRI, "hipri"), (RWF_NOWAIT, "nowait")]:
        v2_both(f"preadv2 {fname}", fa, fb, ba, bb, 8 * BS, flags, False)
    v2_both("preadv2 at the end", fa, fb, ba, bb, FILE_BYTES - 1000, 0, False)
    v2_both("preadv2 past the end", fa, fb, ba, bb, FILE_BYTES + BS, RWF_HIPRI, False)
    v2_both("preadv2 unaligned offset", fa, fb, ba, bb, 100, 0, False)
    v2_both("preadv2 bad flags", fa, fb, ba, bb, 0, 0x40000000, False)
    for flags, fname in [(0, "flags 0"), (RWF_HIPRI, "hipri"), (RWF_DSYNC, "dsync")]:
        v2_both(f"pwritev2 {fname}", fa, fb, w, w, 20 * BS, flags, True)

    try:
        ctypes.CDLL("libaio.so.1", mode=ctypes.RTLD_GLOBAL)
        have_libaio = True
    except OSError:
        have_libaio = False
        print("libaio: skipped (no libaio.so.1)")
    if have_libaio:
        for name in ("io_setup", "io_submit", "io_getevents", "io_destroy"):
            getattr(libc, name).restype = ctypes.c_int
        a, b = Aio(fa, True), Aio(fb, False)
        for flags, fname in [(0, "flags 0"), (RWF_HIPRI, "hipri"), (RWF_NOWAIT, "nowait")]:
            aio_both(f"libaio read {fname}", a, b, [(IO_CMD_PREAD, 3 * BS, flags, None)], 1)
        aio_both("libaio read at the end", a, b, [(IO_CMD_PREAD, FILE_BYTES - 1000, 0, None)], 1)
        aio_both("libaio read unaligned offset", a, b, [(IO_CMD_PREAD, 100, 0, None)], 1)
        aio_both("libaio write hipri", a, b, [(IO_CMD_PWRITE, 21 * BS, RWF_HIPRI, bytes(w))], 1)
        batch = [(IO_CMD_PREAD if i % 3 else IO_CMD_PWRITE, (30 + i) * BS, RWF_HIPRI * (i % 2), bytes(w)) for i in range(8)]
        aio_both("libaio batch of 8, min_nr 8", a, b, batch, 8)
        aio_both("libaio batch of 8, min_nr 1", a, b, batch, 1)

    # Many of each kind, printed only when they disagree.
    quiet = True
    for flags in (0, RWF_HIPRI, RWF_NOWAIT):
        for i in range(LOOPS):
            v2_both("loop preadv2", fa, fb, ba, bb, (i * 7 % 64) * BS, flags, False)
    for flags in (0, RWF_HIPRI):
        for i in range(LOOPS):
            w[0] = i & 0xFF
            v2_both("loop pwritev2", fa, fb, w, w, (32 + i * 5 % 32) * BS, flags, True)
    if have_libaio:
        for flags in (0, RWF_HIPRI, RWF_NOWAIT):
            for i in range(0, LOOPS, DEPTH):
                reqs = [(IO_CMD_PREAD, ((i + j) * 7 % 64) * BS, flags, None) for j in range(DEPTH)]
                aio_both("loop libaio read", a, b, reqs, 1)
        for flags in (0, RWF_HIPRI):
            for i in range(0, LOOPS, DEPTH):
                reqs = [(IO_CMD_PWRITE, (64 + (i + j) * 5 % 32) * BS, flags, bytes([(i + j) & 0xFF]) + bytes(w[1:]))
                        for j in range(DEPTH)]
                aio_both("loop libaio write", a, b, reqs, DEPTH)
    quiet = False
    print(f"loops: {LOOPS} of each kind")
    if have_libaio:
        report("io_destroy", a.destroy(), b.destroy())
    os.close(fa)
    os.close(fb)
    with open(pa, "rb") as x, open(pb, "rb") as y:
        same = x.read() == y.read()
    print("files identical:", "yes" if same else "no")
    total = mismatches + (0 if same else 1)
    print("mismatches:", total)
    sys.exit(min(total, 99))


if __name__ == "__main__":
    main()
