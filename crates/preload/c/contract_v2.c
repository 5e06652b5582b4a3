/* The contract of preadv2/pwritev2, call by call, as contract.c checks the other calls:
 * each operation is done on file A through libc (interposed when run under libsmartcon.so)
 * and on file B (an identical copy) through syscall(2), which no LD_PRELOAD reaches.
 * Results, errno, file offsets and data must agree; the files must end identical.
 *
 * Flags 0 and RWF_HIPRI (taken by the library: positional, and at offset -1 the file
 * offset), RWF_NOWAIT and RWF_DSYNC (passed through), several buffers (passed through),
 * unaligned buffers (EINVAL from the kernel), a bad descriptor (EBADF), bad flags
 * (EOPNOTSUPP), the end of file. Then LOOPS reads of each of flags 0, RWF_HIPRI and
 * RWF_NOWAIT and LOOPS writes of flags 0 and RWF_HIPRI, compared one by one.
 *
 * Prints one line per single check (the same with and without the library), "MISMATCH"
 * lines when the sides disagree, and exits with the number of mismatches.
 *
 * Usage: contract_v2 DIR   (DIR on a file system that supports O_DIRECT) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define BS 4096
#define FILE_BYTES (256 * 1024 + 1000) /* an end of file that is not block-aligned */
#define LOOPS 1200
#include "contract_common.h"

/* One preadv2 on both sides, with the same vector shape over bufa and bufb. RWF_NOWAIT
 * may answer EAGAIN on either side at the kernel's whim: both are redone then. */
static void preadv2_both(const char *name, int fa, int fb, char *bufa, char *bufb, int cnt, size_t seg, off_t off,
                         int flags) {
    struct iovec va[4], vb[4];
    for (int i = 0; i < cnt; i++) {
        va[i].iov_base = bufa + i * seg;
        va[i].iov_len = seg;
        vb[i].iov_base = bufb + i * seg;
        vb[i].iov_len = seg;
    }
    long ra, rb;
    int ea, eb;
    for (int tries = 0;; tries++) {
        off_t before_a = lseek(fa, 0, SEEK_CUR), before_b = lseek(fb, 0, SEEK_CUR);
        errno = 0;
        ra = preadv2(fa, va, cnt, off, flags);
        ea = errno;
        errno = 0;
        rb = syscall(SYS_preadv2, fb, vb, cnt, (long)off, 0L, flags);
        eb = errno;
        if (!(flags & RWF_NOWAIT) || tries > 1000 || ((ra >= 0 || ea != EAGAIN) && (rb >= 0 || eb != EAGAIN))) break;
        lseek(fa, before_a, SEEK_SET);
        lseek(fb, before_b, SEEK_SET);
    }
    check(name, ra, ea, rb, eb, bufa, bufb, (size_t)cnt * seg);
    check_offsets(name, fa, fb);
}

static void pwritev2_both(const char *name, int fa, int fb, char *buf, int cnt, size_t seg, off_t off, int flags) {
    struct iovec v[4];
    for (int i = 0; i < cnt; i++) {
        v[i].iov_base = buf + i * seg;
        v[i].iov_len = seg;
    }
    errno = 0;
    long ra = pwritev2(fa, v, cnt, off, flags);
    int ea = errno;
    errno = 0;
    long rb = syscall(SYS_pwritev2, fb, v, cnt, (long)off, 0L, flags);
    int eb = errno;
    check(name, ra, ea, rb, eb, NULL, NULL, 0);
    check_offsets(name, fa, fb);
}

int main(int argc, char **argv) {
    char pa[4096], pb[4096];
    make_files(argc, argv, "contract_v2", "v2", pa, pb, sizeof pa);
    int fa = open(pa, O_RDWR | O_DIRECT), fb = open(pb, O_RDWR | O_DIRECT);
    if (fa < 0 || fb < 0) {
        perror("open O_DIRECT");
        return 100;
    }
    char *ba = aligned(4 * BS + BS), *bb = aligned(4 * BS + BS), *w = aligned(4 * BS);
    fill((unsigned char *)w, 4 * BS, 9);

    preadv2_both("preadv2 flags 0", fa, fb, ba, bb, 1, BS, 0, 0);
    preadv2_both("preadv2 hipri", fa, fb, ba, bb, 1, BS, 8 * BS, RWF_HIPRI);
    preadv2_both("preadv2 nowait", fa, fb, ba, bb, 1, BS, 16 * BS, RWF_NOWAIT);
    preadv2_both("preadv2 hipri|nowait", fa, fb, ba, bb, 1, BS, 4 * BS, RWF_HIPRI | RWF_NOWAIT);
    preadv2_both("preadv2 2 buffers", fa, fb, ba, bb, 2, BS, 2 * BS, 0);
    preadv2_both("preadv2 at the end", fa, fb, ba, bb, 1, 2 * BS, FILE_BYTES - 1000, 0);
    preadv2_both("preadv2 past the end", fa, fb, ba, bb, 1, BS, FILE_BYTES + 2 * BS, RWF_HIPRI);
    preadv2_both("preadv2 unaligned buffer", fa, fb, ba + 1, bb + 1, 1, BS, 0, 0);
    preadv2_both("preadv2 unaligned offset", fa, fb, ba, bb, 1, BS, 100, RWF_HIPRI);
    preadv2_both("preadv2 negative offset", fa, fb, ba, bb, 1, BS, -5, 0);
    preadv2_both("preadv2 bad flags", fa, fb, ba, bb, 1, BS, 0, 0x40000000);
    preadv2_both("preadv2 bad fd", -1, -1, ba, bb, 1, BS, 0, 0);
    /* Offset -1: the file offset, which moves. */
    lseek(fa, 3 * BS, SEEK_SET);
    lseek(fb, 3 * BS, SEEK_SET);
    preadv2_both("preadv2 at the file offset", fa, fb, ba, bb, 1, BS, -1, 0);
    preadv2_both("preadv2 hipri at the file offset", fa, fb, ba, bb, 1, BS, -1, RWF_HIPRI);
    pwritev2_both("pwritev2 flags 0", fa, fb, w, 1, BS, 5 * BS, 0);
    pwritev2_both("pwritev2 hipri", fa, fb, w, 1, BS, 6 * BS, RWF_HIPRI);
    pwritev2_both("pwritev2 dsync", fa, fb, w, 1, BS, 7 * BS, RWF_DSYNC);
    pwritev2_both("pwritev2 2 buffers", fa, fb, w, 2, BS, 10 * BS, 0);
    pwritev2_both("pwritev2 at the file offset", fa, fb, w, 1, BS, -1, RWF_HIPRI);
    pwritev2_both("pwritev2 unaligned", fa, fb, w + 3, 1, BS, 0, 0);

    /* Many of each kind, one by one, printed only when they disagree. */
    quiet = 1;
    int kinds[3] = {0, RWF_HIPRI, RWF_NOWAIT};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < LOOPS; i++)
            preadv2_both("loop read", fa, fb, ba, bb, 1, BS, (off_t)((i * 7) % 64) * BS, kinds[k]);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < LOOPS; i++) {
            w[0] = (char)i;
            pwritev2_both("loop write", fa, fb, w, 1, BS, (off_t)(32 + (i * 5) % 32) * BS, kinds[k]);
        }
    quiet = 0;
    printf("loops: %d reads of each of 3 flags, %d writes of each of 2\n", LOOPS, LOOPS);

    close(fa);
    close(fb);
    int same = same_files(pa, pb);
    printf("files identical: %s\n", same ? "yes" : "no");
    if (!same) mismatches++;
    printf("mismatches: %d\n", mismatches);
    return mismatches;
}
