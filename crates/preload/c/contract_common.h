/* What the contract programs (contract.c, contract_v2.c, contract_aio.c) share: the
 * transcript's counters and checks, and the helpers that make and compare their files.
 * Each program defines BS (the block size) and FILE_BYTES (its files' size) before it
 * includes this file. Functions are static inline, so a program that does not call one
 * (contract_aio.c reports through its own `mismatch`) compiles clean under -Wall -Werror.
 *
 * The transcript: one line per check with the libc side's result (none while `quiet`),
 * and a "MISMATCH ..." line, counted in `mismatches`, when the libc side and the
 * syscall(2) side disagree. */
#ifndef SMARTCON_CONTRACT_COMMON_H
#define SMARTCON_CONTRACT_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* The preadv2/pwritev2 flags, for C libraries older than them (values from linux/fs.h). */
#ifndef RWF_HIPRI
#define RWF_HIPRI 0x00000001
#endif
#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

static int mismatches;
/* Set while a loop runs its many calls: only disagreements are printed. */
static int quiet;

static inline void check(const char *name, long ra, int ea, long rb, int eb, const void *da, const void *db, size_t n) {
    int data_ok = (ra <= 0 || da == NULL || memcmp(da, db, (size_t)ra < n ? (size_t)ra : n) == 0);
    if (!quiet) printf("%s: ret=%ld errno=%d\n", name, ra, ra < 0 ? ea : 0);
    if (ra != rb || (ra < 0 && ea != eb) || !data_ok) {
        printf("MISMATCH %s: libc ret=%ld errno=%d, syscall ret=%ld errno=%d, data %s\n", name, ra, ea, rb, eb,
               data_ok ? "same" : "differs");
        mismatches++;
    }
}

static inline void check_offsets(const char *name, int fa, int fb) {
    off_t oa = lseek(fa, 0, SEEK_CUR), ob = lseek(fb, 0, SEEK_CUR);
    if (!quiet) printf("%s offset: %ld\n", name, (long)oa);
    if (oa != ob) {
        printf("MISMATCH %s offset: libc %ld, syscall %ld\n", name, (long)oa, (long)ob);
        mismatches++;
    }
}

static inline void *aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, BS, n) != 0) {
        perror("posix_memalign");
        exit(100);
    }
    memset(p, 0, n);
    return p;
}

static inline void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

static inline void make_file(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    unsigned char *p = aligned(FILE_BYTES);
    fill(p, FILE_BYTES, 1);
    if (fd < 0 || syscall(SYS_pwrite64, fd, p, FILE_BYTES, 0) != FILE_BYTES) {
        perror("make_file");
        exit(100);
    }
    close(fd);
    free(p);
}

static inline int same_files(const char *a, const char *b) {
    int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
    char x[8192], y[8192];
    int same = fa >= 0 && fb >= 0;
    while (same) {
        long na = syscall(SYS_read, fa, x, sizeof x), nb = syscall(SYS_read, fb, y, sizeof y);
        if (na != nb || (na > 0 && memcmp(x, y, (size_t)na) != 0)) same = 0;
        if (na <= 0) break;
    }
    close(fa);
    close(fb);
    return same;
}

/* The two files of a contract program under DIR, its one argument: DIR/STEM-a (the libc
 * side) into `pa` and DIR/STEM-b (the syscall(2) side) into `pb`, each of `size` bytes,
 * made identical. Without DIR: a usage line naming `program` and exit 100. */
static inline void make_files(int argc, char **argv, const char *program, const char *stem, char *pa, char *pb,
                              size_t size) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", program);
        exit(100);
    }
    snprintf(pa, size, "%s/%s-a", argv[1], stem);
    snprintf(pb, size, "%s/%s-b", argv[1], stem);
    make_file(pa);
    make_file(pb);
}

/* read(2)/write(2) through libc (the library interposes them) on `fa` and by syscall(2) on
 * `fb`: results, errno, the data read and both file offsets compared. */
#define READ(name, fa, fb, bufa, bufb, len)                    \
    do {                                                       \
        errno = 0;                                             \
        long ra_ = read(fa, bufa, len);                        \
        int ea_ = errno;                                       \
        errno = 0;                                             \
        long rb_ = syscall(SYS_read, fb, bufb, (size_t)(len)); \
        int eb_ = errno;                                       \
        check(name, ra_, ea_, rb_, eb_, bufa, bufb, len);      \
        check_offsets(name, fa, fb);                           \
    } while (0)
#define WRITE(name, fa, fb, buf, len)                          \
    do {                                                       \
        errno = 0;                                             \
        long ra_ = write(fa, buf, len);                        \
        int ea_ = errno;                                       \
        errno = 0;                                             \
        long rb_ = syscall(SYS_write, fb, buf, (size_t)(len)); \
        int eb_ = errno;                                       \
        check(name, ra_, ea_, rb_, eb_, NULL, NULL, 0);        \
        check_offsets(name, fa, fb);                           \
    } while (0)

#endif
