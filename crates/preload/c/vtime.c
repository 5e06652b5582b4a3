/* What a program sees of virtual time (crates/preload/tests/vtime.rs runs it under
 * `smartcon run --emulate SPEC=IMAGE --virtual-time`).
 *
 *   vtime io IMAGE N SLEEP_US   N 4 KiB preads at scattered offsets, one usleep, one
 *                               nanosleep of SLEEP_US each; prints what the clocks moved by
 *   vtime threads IMAGE CPU_MS  the main thread waits on one pread while a second thread
 *                               computes for CPU_MS of its own CPU time; prints the
 *                               computing thread's elapsed time and the main thread's
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t tod_ns(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
}

static int mode_io(const char *image, long n, long sleep_us) {
    int fd = open(image, O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    char buf[4096];
    int64_t m0 = ns(CLOCK_MONOTONIC), b0 = ns(CLOCK_BOOTTIME), r0 = tod_ns();
    time_t t0 = time(NULL);
    for (long i = 0; i < n; i++) {
        off_t off = (off_t)((i * 7919) % 4096) * 65536;
        if (pread(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf) {
            perror("pread");
            return 1;
        }
    }
    usleep((useconds_t)sleep_us);
    struct timespec req = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
    nanosleep(&req, NULL);
    int64_t m1 = ns(CLOCK_MONOTONIC), b1 = ns(CLOCK_BOOTTIME), r1 = tod_ns();
    time_t t1 = time(NULL);
    printf("mono_ns=%lld boot_ns=%lld tod_ns=%lld time_s=%lld\n", (long long)(m1 - m0), (long long)(b1 - b0),
           (long long)(r1 - r0), (long long)(t1 - t0));
    close(fd);
    return 0;
}

static long cpu_ms;
static int64_t compute_elapsed_ns;

static void *compute(void *arg) {
    (void)arg;
    int64_t start = ns(CLOCK_MONOTONIC), cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
    volatile uint64_t x = 1;
    while (ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < cpu_ms * 1000000)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ULL + 1;
    compute_elapsed_ns = ns(CLOCK_MONOTONIC) - start;
    return NULL;
}

static int mode_threads(const char *image) {
    int fd = open(image, O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    char buf[4096];
    pthread_t t;
    int64_t m0 = ns(CLOCK_MONOTONIC);
    if (pthread_create(&t, NULL, compute, NULL) != 0)
        return 1;
    if (pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) {
        perror("pread");
        return 1;
    }
    int64_t m1 = ns(CLOCK_MONOTONIC);
    pthread_join(t, NULL);
    printf("compute_ns=%lld main_ns=%lld\n", (long long)compute_elapsed_ns, (long long)(m1 - m0));
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "io") == 0)
        return mode_io(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "threads") == 0) {
        cpu_ms = atol(argv[3]);
        return mode_threads(argv[2]);
    }
    fprintf(stderr, "usage: vtime io IMAGE N SLEEP_US | vtime threads IMAGE CPU_MS\n");
    return 2;
}
