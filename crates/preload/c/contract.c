/* The system call contract, call by call: every operation is done twice with the same
 * arguments, on file A through libc (interposed when run under libsmartcon.so) and on
 * file B (an identical copy) through syscall(2), which no LD_PRELOAD can reach. Results,
 * errno, file offsets and data must agree; the files must end identical.
 *
 * Prints one line per check with the libc side's result (the same with and without the
 * library), "MISMATCH ..." lines when the two sides disagree, and exits with the number
 * of mismatches (0 = the contract held).
 *
 * Usage: contract DIR   (DIR on a file system that supports O_DIRECT) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define BS 4096
#define FILE_BYTES (64 * 1024 + 1000) /* an end of file that is not block-aligned */
#include "contract_common.h"

static char path_a[4096], path_b[4096];

/* One operation on both sides. */
#define PREAD(name, fa, fb, bufa, bufb, len, off)                                                    \
    do {                                                                                               \
        errno = 0;                                                                                     \
        long ra_ = pread(fa, bufa, len, off);                                                          \
        int ea_ = errno;                                                                               \
        errno = 0;                                                                                     \
        long rb_ = syscall(SYS_pread64, fb, bufb, (size_t)(len), (long)(off));                                           \
        int eb_ = errno;                                                                               \
        check(name, ra_, ea_, rb_, eb_, bufa, bufb, len);                                              \
    } while (0)
#define PWRITE(name, fa, fb, buf, len, off)                                                          \
    do {                                                                                               \
        errno = 0;                                                                                     \
        long ra_ = pwrite(fa, buf, len, off);                                                          \
        int ea_ = errno;                                                                               \
        errno = 0;                                                                                     \
        long rb_ = syscall(SYS_pwrite64, fb, buf, (size_t)(len), (long)(off));                                           \
        int eb_ = errno;                                                                               \
        check(name, ra_, ea_, rb_, eb_, NULL, NULL, 0);                                                \
    } while (0)

static int open_both(int flags, int *fb) {
    int fa = open(path_a, flags);
    *fb = (int)syscall(SYS_openat, AT_FDCWD, path_b, flags, 0);
    if (fa < 0 || *fb < 0) {
        perror("open");
        exit(100);
    }
    return fa;
}

/* ---- threads: positional reads and disjoint writes from several threads at once ---- */
struct thread_arg {
    int fa, fb, index, bad;
};

static void *thread_main(void *p) {
    struct thread_arg *t = p;
    unsigned char *a = aligned(BS), *b = aligned(BS), *w = aligned(BS);
    unsigned seed = 12345u + (unsigned)t->index;
    for (int i = 0; i < 300; i++) {
        seed = seed * 1103515245u + 12345u;
        off_t off = (off_t)((seed >> 8) % 16) * BS;
        long ra = pread(t->fa, a, BS, off), rb = syscall(SYS_pread64, t->fb, b, (size_t)BS, (long)off);
        if (ra != rb || (ra > 0 && memcmp(a, b, (size_t)ra) != 0)) t->bad++;
        if (i % 10 == 0) {
            /* Each thread writes its own block (blocks 16 + index), on both files. */
            fill(w, BS, seed);
            off_t woff = (off_t)(16 + t->index) * BS;
            if (pwrite(t->fa, w, BS, woff) != BS || syscall(SYS_pwrite64, t->fb, w, (size_t)BS, (long)woff) != BS) t->bad++;
        }
    }
    free(a);
    free(b);
    free(w);
    return NULL;
}

/* ---- signals: a timer interrupts reads; the handler does I/O of its own ---- */
static int sig_fa, sig_fb;
static volatile int sig_bad;
static unsigned char *sig_a, *sig_b;

static void on_alarm(int s) {
    (void)s;
    int saved = errno;
    long ra = pread(sig_fa, sig_a, BS, 0), rb = syscall(SYS_pread64, sig_fb, sig_b, (size_t)BS, 0L);
    if (ra != rb || (ra > 0 && memcmp(sig_a, sig_b, (size_t)ra) != 0)) sig_bad++;
    errno = saved;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    make_files(argc, argv, "contract", "contract", path_a, path_b, sizeof path_a);
    unsigned char *a = aligned(4 * BS), *b = aligned(4 * BS), *w = aligned(4 * BS);
    fill(w, 4 * BS, 9);

    int fb, fa = open_both(O_RDWR | O_DIRECT, &fb);

    /* Positional: full, end of file, past it, unaligned, bad descriptors. */
    PREAD("pread 4k at 0", fa, fb, a, b, BS, 0);
    PREAD("pread 8k at 8k", fa, fb, a, b, 2 * BS, 2 * BS);
    PREAD("pread short at eof", fa, fb, a, b, BS, 64 * 1024);
    PREAD("pread past eof", fa, fb, a, b, BS, 128 * 1024);
    PREAD("pread unaligned buffer", fa, fb, a + 1, b + 1, BS, 0);
    PREAD("pread unaligned offset", fa, fb, a, b, BS, 1);
    PREAD("pread unaligned length", fa, fb, a, b, 100, 0);
    PREAD("pread negative offset", fa, fb, a, b, BS, -4096);
    PREAD("pread zero length", fa, fb, a, b, 0, 0);
    PREAD("pread bad fd", -1, -1, a, b, BS, 0);
    unsigned char *volatile null_buffer = NULL; /* volatile: the compiler may not see it is NULL */
    PREAD("pread NULL buffer", fa, fb, null_buffer, null_buffer, BS, 0);
    check_offsets("after preads", fa, fb);
    PWRITE("pwrite 4k at 4k", fa, fb, w, BS, BS);
    PWRITE("pwrite 8k extends the file", fa, fb, w, 2 * BS, 68 * 1024);
    PWRITE("pwrite unaligned", fa, fb, w + 3, BS, 0);
    PREAD("pread back", fa, fb, a, b, 4 * BS, 0);
    check_offsets("after pwrites", fa, fb);

    /* Vectored. */
    struct iovec va1[1] = {{a, BS}}, vb1[1] = {{b, BS}};
    errno = 0;
    long ra = preadv(fa, va1, 1, BS), rb = syscall(SYS_preadv, fb, vb1, 1, (long)BS, 0L);
    check("preadv one buffer", ra, errno, rb, errno, a, b, BS);
    struct iovec va2[2] = {{a, BS}, {a + BS, BS}}, vb2[2] = {{b, BS}, {b + BS, BS}};
    ra = preadv(fa, va2, 2, 0);
    rb = syscall(SYS_preadv, fb, vb2, 2, 0L, 0L);
    check("preadv two buffers", ra, errno, rb, errno, a, b, 2 * BS);
    struct iovec wv[1] = {{w, BS}};
    ra = pwritev(fa, wv, 1, 2 * BS);
    rb = syscall(SYS_pwritev, fb, wv, 1, (long)(2 * BS), 0L);
    check("pwritev one buffer", ra, errno, rb, errno, NULL, NULL, 0);

    /* read/write move the offset; short read at end of file; then EINVAL at an
     * unaligned offset. */
    lseek(fa, 0, SEEK_SET);
    lseek(fb, 0, SEEK_SET);
    READ("read 4k", fa, fb, a, b, BS);
    READ("read 8k", fa, fb, a, b, 2 * BS);
    WRITE("write 4k", fa, fb, w, BS);
    READ("read after write", fa, fb, a, b, BS);
    lseek(fa, 72 * 1024, SEEK_SET);
    lseek(fb, 72 * 1024, SEEK_SET);
    READ("read at eof", fa, fb, a, b, BS);
    lseek(fa, 64 * 1024, SEEK_SET);
    lseek(fb, 64 * 1024, SEEK_SET);
    READ("read to eof", fa, fb, a, b, 4 * BS);
    READ("read unaligned buffer", fa, fb, a + 1, b + 1, BS);

    /* dup shares the offset; dup2 onto a number; close then reuse of the number by a pipe. */
    int da = dup(fa), db = (int)syscall(SYS_dup, fb);
    lseek(fa, 0, SEEK_SET);
    lseek(fb, 0, SEEK_SET);
    READ("read on dup", da, db, a, b, BS);
    check_offsets("original after read on dup", fa, fb);
    int d2a = dup2(fa, 40), d2b = (int)syscall(SYS_dup3, fb, 41, 0);
    (void)d2b;
    printf("dup2: %d\n", d2a);
    READ("read on dup2", 40, 41, a, b, BS);
    close(40);
    syscall(SYS_close, 41);
    close(da);
    syscall(SYS_close, db);
    int pa[2];
    if (pipe(pa) != 0) return 100;
    if (pa[0] != da && pa[1] != da) dup2(pa[0], da); /* make sure the reused number is a pipe */
    else da = pa[0];
    if (write(pa[1], "hello", 5) != 5) mismatches++;
    errno = 0;
    long rp = read(da, a, 100);
    printf("read pipe on a reused number: ret=%ld\n", rp);
    if (rp != 5 || memcmp(a, "hello", 5) != 0) {
        printf("MISMATCH pipe read: %ld\n", rp);
        mismatches++;
    }
    close(pa[0]);
    close(pa[1]);
    if (da != pa[0]) close(da);

    /* fcntl F_SETFL: without O_DIRECT an unaligned read is fine. */
    fcntl(fa, F_SETFL, 0);
    syscall(SYS_fcntl, fb, F_SETFL, 0);
    PREAD("pread unaligned after clearing O_DIRECT", fa, fb, a + 1, b + 1, 100, 3);
    fcntl(fa, F_SETFL, O_DIRECT);
    syscall(SYS_fcntl, fb, F_SETFL, O_DIRECT);
    PREAD("pread unaligned after setting O_DIRECT again", fa, fb, a + 1, b + 1, 100, 3);

    /* O_APPEND: write goes to the end; pwrite too (Linux ignores its offset). */
    int fb2, fa2 = open_both(O_RDWR | O_DIRECT | O_APPEND, &fb2);
    WRITE("append write", fa2, fb2, w, BS);
    PWRITE("append pwrite at 0", fa2, fb2, w, BS, 0);
    check_offsets("after appends", fa2, fb2);
    close(fa2);
    syscall(SYS_close, fb2);

    /* Read-only descriptor: write is EBADF. */
    int fb3, fa3 = open_both(O_RDONLY | O_DIRECT, &fb3);
    PWRITE("pwrite on read-only", fa3, fb3, w, BS, 0);
    WRITE("write on read-only", fa3, fb3, w, BS);
    close(fa3);
    syscall(SYS_close, fb3);

    /* Threads. */
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){fa, fb, i, 0};
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    int thread_bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        thread_bad += args[i].bad;
    }
    printf("threads: %d disagreements\n", thread_bad);
    mismatches += thread_bad;

    /* Signals: a 200 us timer without SA_RESTART interrupts a run of reads. */
    sig_fa = fa;
    sig_fb = fb;
    sig_a = aligned(BS);
    sig_b = aligned(BS);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    int sig_loop_bad = 0;
    for (int i = 0; i < 2000; i++) {
        off_t off = (off_t)(i % 16) * BS;
        long x = pread(fa, a, BS, off), y = syscall(SYS_pread64, fb, b, (size_t)BS, (long)off);
        if (x != BS || x != y || memcmp(a, b, BS) != 0) sig_loop_bad++;
    }
    struct itimerval off_timer = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off_timer, NULL);
    printf("signals: %d disagreements\n", sig_loop_bad + sig_bad);
    mismatches += sig_loop_bad + sig_bad;

    /* fork: the child does its own I/O (its own ring) and reads on shared offsets. */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int bad = 0;
        for (int i = 0; i < 100; i++) {
            long x = pread(fa, a, BS, (off_t)(i % 16) * BS), y = syscall(SYS_pread64, fb, b, (size_t)BS, (long)(i % 16) * BS);
            if (x != y || memcmp(a, b, BS) != 0) bad++;
        }
        lseek(fa, 0, SEEK_SET);
        lseek(fb, 0, SEEK_SET);
        long x = read(fa, a, BS), y = syscall(SYS_read, fb, b, (size_t)BS);
        if (x != y || memcmp(a, b, BS) != 0) bad++;
        _exit(bad > 100 ? 100 : bad);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("fork: child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) mismatches++;
    check_offsets("parent after the child's read", fa, fb);
    /* After the fork the descriptors are shared: read still exact. */
    READ("read after fork", fa, fb, a, b, BS);

    /* The files end identical. */
    close(fa);
    syscall(SYS_close, fb);
    int ca = (int)syscall(SYS_openat, AT_FDCWD, path_a, O_RDONLY, 0);
    int cb = (int)syscall(SYS_openat, AT_FDCWD, path_b, O_RDONLY, 0);
    static unsigned char whole_a[1 << 20], whole_b[1 << 20];
    long na = syscall(SYS_pread64, ca, whole_a, sizeof whole_a, 0L);
    long nb = syscall(SYS_pread64, cb, whole_b, sizeof whole_b, 0L);
    printf("final size: %ld\n", na);
    if (na != nb || memcmp(whole_a, whole_b, (size_t)na) != 0) {
        printf("MISMATCH final contents differ (%ld vs %ld bytes)\n", na, nb);
        mismatches++;
    }
    printf("mismatches: %d\n", mismatches);
    return mismatches > 99 ? 99 : mismatches;
}
