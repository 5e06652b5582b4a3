/* read(2)/write(2) at the file offset, call by call (tests/offset.rs): every call is made
 * on file A through libc (the library's read/write when preloaded, which go to its port at
 * the file offset) and on file B, an identical copy, through syscall(2), which no preload
 * reaches. After each call the two results, errno, data read and file offsets must agree;
 * at the end the two files must be identical. The sequence: reads in a row (the offset
 * must move by each), lseek by the program between them (SEEK_SET, SEEK_CUR, SEEK_END),
 * writes then reads over them, a short read at end of file and reads past it, a read at
 * a misaligned offset and into a misaligned buffer (EINVAL, offset unchanged), and a
 * loop of whole-file passes. Every descriptor is O_DIRECT, so the library takes it.
 *
 * Prints one line per check (the libc side's result and offset: the same transcript with
 * and without the library), "MISMATCH ..." lines, and "taken: N" (the reads and writes
 * the library should have taken); exits with the number of mismatches.
 *
 * Usage: offset DIR   (DIR on a file system that supports O_DIRECT) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BS 4096
#define FILE_BYTES (64 * 1024 + 1000) /* an end of file that is not block-aligned */
#include "contract_common.h"

static char path_a[4096], path_b[4096];
/* The aligned, whole-block calls the library takes (the misaligned ones it passes on). */
static long taken;

#define SEEK(fa, fb, off, whence)                                                                                     \
    do {                                                                                                              \
        off_t oa_ = lseek(fa, off, whence), ob_ = (off_t)syscall(SYS_lseek, fb, (long)(off), whence);                 \
        if (oa_ != ob_) {                                                                                             \
            printf("MISMATCH lseek(%ld, %d): libc %ld, syscall %ld\n", (long)(off), whence, (long)oa_, (long)ob_);    \
            mismatches++;                                                                                             \
        }                                                                                                             \
    } while (0)

int main(int argc, char **argv) {
    make_files(argc, argv, "offset", "offset", path_a, path_b, sizeof path_a);
    int fa = open(path_a, O_RDWR | O_DIRECT);
    int fb = (int)syscall(SYS_openat, AT_FDCWD, path_b, O_RDWR | O_DIRECT, 0);
    if (fa < 0 || fb < 0) {
        perror("open O_DIRECT");
        return 100;
    }
    unsigned char *a = aligned(8 * BS), *b = aligned(8 * BS), *w = aligned(4 * BS);
    fill(w, 4 * BS, 9);

    /* Reads in a row: each starts where the last ended. */
    READ("read 4k at 0", fa, fb, a, b, BS);
    READ("read 4k at 4k", fa, fb, a, b, BS);
    READ("read 8k at 8k", fa, fb, a, b, 2 * BS);
    taken += 3;
    /* The program's own lseek between reads. */
    SEEK(fa, fb, BS, SEEK_CUR);
    READ("read after SEEK_CUR +4k", fa, fb, a, b, BS);
    SEEK(fa, fb, 2 * BS, SEEK_SET);
    READ("read after SEEK_SET 8k", fa, fb, a, b, BS);
    SEEK(fa, fb, -(off_t)(3 * BS) - 1000, SEEK_END);
    READ("read after SEEK_END -13288", fa, fb, a, b, BS);
    taken += 3;
    /* Writes move the offset too; the reads after them see the data. */
    SEEK(fa, fb, 4 * BS, SEEK_SET);
    WRITE("write 4k at 16k", fa, fb, w, BS);
    WRITE("write 8k at 20k", fa, fb, w + BS, 2 * BS);
    SEEK(fa, fb, -(off_t)(3 * BS), SEEK_CUR);
    READ("read back 12k at 16k", fa, fb, a, b, 3 * BS);
    taken += 3;
    /* End of file: a short read, then nothing (the offset stays). */
    SEEK(fa, fb, 15 * BS, SEEK_SET);
    READ("read 8k at 60k (short)", fa, fb, a, b, 2 * BS);
    taken += 1;
    READ("read at end of file", fa, fb, a, b, BS);
    SEEK(fa, fb, 20 * BS, SEEK_SET);
    READ("read past end of file", fa, fb, a, b, BS);
    taken += 1;
    /* Misaligned O_DIRECT: EINVAL before any I/O, the offset unchanged. */
    SEEK(fa, fb, 100, SEEK_SET);
    READ("read at misaligned offset 100", fa, fb, a, b, BS);
    WRITE("write at misaligned offset 100", fa, fb, w, BS);
    SEEK(fa, fb, BS, SEEK_SET);
    READ("read into misaligned buffer", fa, fb, a + 1, b + 1, BS);
    READ("read of misaligned length", fa, fb, a, b, BS + 1);
    READ("read after the refusals", fa, fb, a, b, BS);
    taken += 1;
    /* Whole-file passes, block by block, to the short read at its end. */
    quiet = 1;
    for (int pass = 0; pass < 4; pass++) {
        SEEK(fa, fb, 0, SEEK_SET);
        for (int i = 0; i < 17; i++) {
            if (pass == 2 && i == 5) WRITE("write in a pass", fa, fb, w + 2 * BS, BS);
            else READ("read in a pass", fa, fb, a, b, BS);
            taken++;
        }
    }
    quiet = 0;
    check_offsets("after the passes", fa, fb);
    close(fa);
    syscall(SYS_close, fb);
    if (!same_files(path_a, path_b)) {
        printf("MISMATCH the files differ at the end\n");
        mismatches++;
    }
    printf("taken: %ld\n", taken);
    printf("mismatches: %d\n", mismatches);
    return mismatches;
}
