/* The contract of libaio's io_submit/io_getevents, request by request, as contract.c checks
 * the synchronous calls: each operation is done on file A through libaio (interposed when
 * run under libsmartcon.so) and on file B (an identical copy) through syscall(2) on a
 * context of its own. Each request's result (the event's res) and each call's return and
 * errno must agree, the data read must agree, and the files must end identical.
 *
 * Reads and writes (IO_CMD_PREAD/PWRITE/PREADV/PWRITEV) with aio_rw_flags 0, RWF_HIPRI and
 * RWF_NOWAIT, one or several buffers, batches of 8 reaped with min_nr 8 and with min_nr 1,
 * timeouts (none pending: zero and 1 ms), the end of file, an unaligned buffer (the event's
 * -EINVAL), a bad descriptor (io_submit's -EBADF), min_nr > nr (-EINVAL), an eventfd
 * request. Then LOOPS requests of each of: reads with flags 0, RWF_HIPRI and RWF_NOWAIT,
 * writes with flags 0 and RWF_HIPRI, in batches of DEPTH, compared one by one.
 *
 * Prints one line per single check (the same with and without the library), "MISMATCH"
 * lines when the sides disagree, and exits with the number of mismatches.
 *
 * Usage: contract_aio DIR   (DIR on a file system that supports O_DIRECT) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BS 4096
#define FILE_BYTES (256 * 1024 + 1000) /* an end of file that is not block-aligned */
#define LOOPS 1200
#define DEPTH 4
#define BATCH_MAX 8
#include "contract_common.h"

/* While a RWF_NOWAIT attempt may still be redone: mismatches are counted, not printed. */
static int silent;

static void mismatch(const char *name, const char *what, long a, long b) {
    if (!silent) printf("MISMATCH %s: %s: libaio %ld, syscall %ld\n", name, what, a, b);
    mismatches++;
}

/* The raw side, as libaio's functions answer: a negative errno. */
static long raw_setup(unsigned n, io_context_t *ctx) {
    long r = syscall(SYS_io_setup, n, ctx);
    return r < 0 ? -errno : r;
}
static long raw_submit(io_context_t ctx, long nr, struct iocb **cbs) {
    long r = syscall(SYS_io_submit, ctx, nr, cbs);
    return r < 0 ? -errno : r;
}
static long raw_getevents(io_context_t ctx, long min_nr, long nr, struct io_event *ev, struct timespec *ts) {
    long r = syscall(SYS_io_getevents, ctx, min_nr, nr, ev, ts);
    return r < 0 ? -errno : r;
}

struct side {
    int fd;
    io_context_t ctx;
    char *buf; /* BATCH_MAX * 2 blocks, aligned */
    struct iocb cb[BATCH_MAX];
    struct iocb *cbs[BATCH_MAX];
    struct iovec iov[BATCH_MAX][2];
    long res[BATCH_MAX];
};

/* One request of a batch: `op` 0 pread, 1 pwrite, 2 preadv, 3 pwritev; `segs` buffers of
 * `len` bytes at block `slot` of the side's buffer (+ `skew` bytes: unaligned). */
static void prep(struct side *s, int i, int op, int segs, size_t len, long long off, int flags, int skew,
                 const char *wdata) {
    char *p = s->buf + (size_t)i * 2 * BS + skew;
    struct iocb *cb = &s->cb[i];
    if (op == 1 || op == 3) memcpy(p, wdata, len * segs);
    else memset(p, 0xee, len * segs);
    for (int k = 0; k < segs; k++) {
        s->iov[i][k].iov_base = p + (size_t)k * len;
        s->iov[i][k].iov_len = len;
    }
    switch (op) {
    case 0: io_prep_pread(cb, s->fd, p, len, off); break;
    case 1: io_prep_pwrite(cb, s->fd, p, len, off); break;
    case 2: io_prep_preadv(cb, s->fd, s->iov[i], segs, off); break;
    default: io_prep_pwritev(cb, s->fd, s->iov[i], segs, off); break;
    }
    cb->aio_rw_flags = flags;
    cb->data = (void *)(intptr_t)i;
    s->cbs[i] = cb;
    s->res[i] = 12345; /* never a result */
}

/* Submits n prepared requests on both sides and reaps them (min_nr `min` per call, no
 * timeout), then compares the submissions, each request's result and the data read. */
static void batch_both(const char *name, struct side *a, struct side *b, int n, int min) {
    long sa = io_submit(a->ctx, n, a->cbs);
    long sb = raw_submit(b->ctx, n, b->cbs);
    if (!quiet) printf("%s: submitted %ld\n", name, sa);
    if (sa != sb) mismatch(name, "io_submit", sa, sb);
    /* A refused submission's error stands for its first request's result. */
    if (sa < 0) a->res[0] = sa;
    if (sb < 0) b->res[0] = sb;
    struct side *sides[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        struct side *s = sides[k];
        long want = k == 0 ? sa : sb;
        struct io_event ev[BATCH_MAX];
        for (long got = 0; got < want;) {
            long m = min < want - got ? min : want - got;
            long r = k == 0 ? io_getevents(s->ctx, m, want - got, ev, NULL) : raw_getevents(s->ctx, m, want - got, ev, NULL);
            if (r < m) {
                if (silent) break;
                printf("MISMATCH %s: io_getevents on side %d returned %ld for min_nr %ld\n", name, k, r, m);
                mismatches++;
                break;
            }
            for (long e = 0; e < r; e++) s->res[(intptr_t)ev[e].data] = (long)ev[e].res;
            got += r;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!quiet) printf("%s #%d: res=%ld\n", name, i, a->res[i]);
        if (a->res[i] != b->res[i]) mismatch(name, "event res", a->res[i], b->res[i]);
        int reads = a->cb[i].aio_lio_opcode == IO_CMD_PREAD || a->cb[i].aio_lio_opcode == IO_CMD_PREADV;
        if (reads && a->res[i] > 0) {
            const char *pa = a->cb[i].aio_lio_opcode == IO_CMD_PREAD ? a->cb[i].u.c.buf : a->iov[i][0].iov_base;
            const char *pb = b->cb[i].aio_lio_opcode == IO_CMD_PREAD ? b->cb[i].u.c.buf : b->iov[i][0].iov_base;
            if (memcmp(pa, pb, (size_t)a->res[i]) != 0) {
                if (!silent) printf("MISMATCH %s #%d: data differs\n", name, i);
                mismatches++;
            }
        }
    }
}

/* One request on both sides; RWF_NOWAIT may answer -EAGAIN on either side at the kernel's
 * whim: both are redone then, and only the last attempt's disagreement is printed. */
static void one_both(const char *name, struct side *a, struct side *b, int op, int segs, size_t len, long long off,
                     int flags, int skew, const char *w) {
    for (int tries = 0;; tries++) {
        prep(a, 0, op, segs, len, off, flags, skew, w);
        prep(b, 0, op, segs, len, off, flags, skew, w);
        int q = quiet, before = mismatches;
        quiet = 1;
        silent = (flags & RWF_NOWAIT) != 0;
        batch_both(name, a, b, 1, 1);
        quiet = q;
        silent = 0;
        int again = a->res[0] == -EAGAIN || b->res[0] == -EAGAIN;
        if ((flags & RWF_NOWAIT) && again && tries < 1000) {
            mismatches = before;
            continue;
        }
        if ((flags & RWF_NOWAIT) && mismatches > before)
            printf("MISMATCH %s: res libaio %ld, syscall %ld\n", name, a->res[0], b->res[0]);
        if (!quiet) printf("%s: res=%ld\n", name, a->res[0]);
        return;
    }
}

static void calls_both(const char *name, long ra, long rb) {
    printf("%s: %ld\n", name, ra);
    if (ra != rb) mismatch(name, "return", ra, rb);
}

int main(int argc, char **argv) {
    char pa[4096], pb[4096];
    make_files(argc, argv, "contract_aio", "aio", pa, pb, sizeof pa);
    struct side a = {0}, b = {0};
    a.fd = open(pa, O_RDWR | O_DIRECT);
    b.fd = open(pb, O_RDWR | O_DIRECT);
    if (a.fd < 0 || b.fd < 0) {
        perror("open O_DIRECT");
        return 100;
    }
    long ia = io_setup(64, &a.ctx), ib = raw_setup(64, &b.ctx);
    if (ia != 0 || ib != 0) {
        fprintf(stderr, "io_setup: %ld / %ld (is aio-max-nr reached?)\n", ia, ib);
        return 100;
    }
    a.buf = aligned(BATCH_MAX * 2 * BS + BS);
    b.buf = aligned(BATCH_MAX * 2 * BS + BS);
    char *w = aligned(2 * BS);
    fill((unsigned char *)w, 2 * BS, 9);

    one_both("pread flags 0", &a, &b, 0, 1, BS, 0, 0, 0, w);
    one_both("pread hipri", &a, &b, 0, 1, BS, 8 * BS, RWF_HIPRI, 0, w);
    one_both("pread nowait", &a, &b, 0, 1, BS, 16 * BS, RWF_NOWAIT, 0, w);
    one_both("preadv 1 buffer", &a, &b, 2, 1, BS, 3 * BS, 0, 0, w);
    one_both("preadv 2 buffers", &a, &b, 2, 2, BS, 5 * BS, RWF_HIPRI, 0, w);
    one_both("pread at the end", &a, &b, 0, 1, 2 * BS, FILE_BYTES - 1000, 0, 0, w);
    one_both("pread past the end", &a, &b, 0, 1, BS, FILE_BYTES + 2 * BS, RWF_HIPRI, 0, w);
    one_both("pread unaligned buffer", &a, &b, 0, 1, BS, 0, 0, 1, w);
    one_both("pread unaligned offset", &a, &b, 0, 1, BS, 100, 0, 0, w);
    one_both("pwrite flags 0", &a, &b, 1, 1, BS, 20 * BS, 0, 0, w);
    one_both("pwrite hipri", &a, &b, 1, 1, BS, 21 * BS, RWF_HIPRI, 0, w);
    one_both("pwritev 2 buffers", &a, &b, 3, 2, BS, 22 * BS, 0, 0, w);
    one_both("pwrite unaligned", &a, &b, 1, 1, BS, 0, 0, 3, w);

    /* A batch of 8 reads and writes, reaped all at once and one by one. */
    for (int min = 8; min >= 1; min -= 7) {
        for (int i = 0; i < 8; i++) {
            int op = i % 3 == 2 ? 1 : 0, flags = i % 2 ? RWF_HIPRI : 0;
            prep(&a, i, op, 1, BS, (long long)(30 + i) * BS, flags, 0, w);
            prep(&b, i, op, 1, BS, (long long)(30 + i) * BS, flags, 0, w);
        }
        batch_both(min == 8 ? "batch of 8, min_nr 8" : "batch of 8, min_nr 1", &a, &b, 8, min);
    }

    /* A bad descriptor: io_submit fails the first request itself. */
    prep(&a, 0, 0, 1, BS, 0, 0, 0, w);
    prep(&b, 0, 0, 1, BS, 0, 0, 0, w);
    a.cb[0].aio_fildes = b.cb[0].aio_fildes = 1000;
    calls_both("io_submit bad fd", io_submit(a.ctx, 1, a.cbs), raw_submit(b.ctx, 1, b.cbs));

    /* An eventfd request (passed through by the library), reaped with io_getevents. */
    int efa = eventfd(0, 0), efb = eventfd(0, 0);
    prep(&a, 0, 0, 1, BS, 2 * BS, 0, 0, w);
    prep(&b, 0, 0, 1, BS, 2 * BS, 0, 0, w);
    io_set_eventfd(&a.cb[0], efa);
    io_set_eventfd(&b.cb[0], efb);
    batch_both("eventfd request", &a, &b, 1, 1);
    close(efa);
    close(efb);

    /* Nothing pending: a zero timeout and a 1 ms one return 0; min_nr > nr is EINVAL. */
    struct io_event ev[2];
    struct timespec zero = {0, 0}, ms = {0, 1000000};
    calls_both("io_getevents nothing pending, zero timeout", io_getevents(a.ctx, 1, 2, ev, &zero),
               raw_getevents(b.ctx, 1, 2, ev, &zero));
    calls_both("io_getevents nothing pending, 1 ms", io_getevents(a.ctx, 1, 2, ev, &ms), raw_getevents(b.ctx, 1, 2, ev, &ms));
    calls_both("io_getevents min_nr > nr", io_getevents(a.ctx, 2, 1, ev, NULL), raw_getevents(b.ctx, 2, 1, ev, NULL));

    /* Many of each kind, DEPTH in flight, printed only when they disagree. */
    quiet = 1;
    int read_flags[3] = {0, RWF_HIPRI, RWF_NOWAIT};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < LOOPS; i += DEPTH) {
            if (read_flags[k] & RWF_NOWAIT) {
                /* One at a time: -EAGAIN is redone on both sides. */
                for (int j = 0; j < DEPTH; j++)
                    one_both("loop read nowait", &a, &b, 0, 1, BS, (long long)(((i + j) * 7) % 64) * BS, RWF_NOWAIT, 0, w);
                continue;
            }
            for (int j = 0; j < DEPTH; j++) {
                long long off = (long long)(((i + j) * 7) % 64) * BS;
                prep(&a, j, 0, 1, BS, off, read_flags[k], 0, w);
                prep(&b, j, 0, 1, BS, off, read_flags[k], 0, w);
            }
            batch_both("loop read", &a, &b, DEPTH, 1);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < LOOPS; i += DEPTH) {
            for (int j = 0; j < DEPTH; j++) {
                long long off = (long long)(32 + ((i + j) * 5) % 32) * BS;
                w[0] = (char)(i + j);
                prep(&a, j, 1, 1, BS, off, k ? RWF_HIPRI : 0, 0, w);
                prep(&b, j, 1, 1, BS, off, k ? RWF_HIPRI : 0, 0, w);
            }
            batch_both("loop write", &a, &b, DEPTH, DEPTH);
        }
    quiet = 0;
    printf("loops: %d reads of each of 3 flags, %d writes of each of 2\n", LOOPS, LOOPS);

    calls_both("io_destroy", io_destroy(a.ctx), syscall(SYS_io_destroy, b.ctx));
    close(a.fd);
    close(b.fd);
    int same = same_files(pa, pb);
    printf("files identical: %s\n", same ? "yes" : "no");
    if (!same) mismatches++;
    printf("mismatches: %d\n", mismatches);
    return mismatches;
}
