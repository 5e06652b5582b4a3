/* What a program sees of virtual time (crates/preload/tests/vtime.rs runs it under
 * `smartcon run --emulate SPEC=IMAGE --virtual-time`).
 *
 *   vtime io IMAGE N SLEEP_US   N 4 KiB preads at scattered offsets, one usleep, one
 *                               nanosleep of SLEEP_US each; prints what the clocks moved by
 *   vtime threads IMAGE CPU_MS  the main thread waits on one pread while a second thread
 *                               computes for CPU_MS of its own CPU time; prints the
 *                               computing thread's elapsed time and the main thread's
 *   vtime waits IMAGE           seven threads in timed and event waits (a condition
 *                               variable timing out, one signalled, one untimed, poll,
 *                               select, sem_timedwait, poll on a pipe) while the main
 *                               thread waits on one pread, then signals, writes the pipe
 *                               and waits (on a condition variable) for them all; prints
 *                               each wait's result and virtual elapsed time, and how often
 *                               a clock read went back against an earlier one
 *   vtime fork IMAGE            a forked child waits on one pread while the parent sleeps
 *                               in slices until the child has exited; prints the parent's
 *                               elapsed time and the child's
 *   vtime helper IMAGE PIECES   as UML's ubd thread: a helper process sharing the memory
 *                               (clone(CLONE_VM), no CLONE_THREAD) reads PIECES contiguous
 *                               4 KiB pieces of one request, then writes to a pipe that
 *                               the main thread polls; prints the helper's virtual time
 *                               over its pieces and up to the end of its write
 *   vtime helperlate IMAGE PIECES DELAY_MS
 *                               as `helper`, but the helper burns DELAY_MS of its own CPU
 *                               between its pieces and its write while the main thread
 *                               runs on, reading the clock, until the write is done
 *   vtime cpuchild IMAGE MS     a process made by a raw clone(2) (as UML's guest stub makes
 *                               a guest's new process) burns MS of its own CPU and stops;
 *                               the parent waits for it with waitpid; prints the parent's
 *                               elapsed time
 *   vtime handler IMAGE N       sleeps 100 s (virtual time: the clock jumps that far from
 *                               the real one), then makes N 4 KiB preads while a real
 *                               interval timer (setitimer, 20 us) sends SIGALRM, whose
 *                               handler reads the monotonic clock as a guest kernel's timer
 *                               interrupt does; prints how many readings the handler made
 *                               and how many were below the main thread's reading before
 *                               the pread it interrupted (a reading of the real clock)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/wait.h>
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

/* Every clock read of mode_waits goes through here: under a lock, so a read that returns
 * less than one made before it is a real step back of the shared clock. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t seen_last;
static int backwards;

static int64_t mono(void) {
    pthread_mutex_lock(&seen_lock);
    int64_t t = ns(CLOCK_MONOTONIC);
    if (t < seen_last)
        backwards++;
    else
        seen_last = t;
    pthread_mutex_unlock(&seen_lock);
    return t;
}

enum { W_COND_TIMEOUT, W_COND_SIGNALLED, W_COND_UNTIMED, W_POLL, W_SELECT, W_SEM, W_PIPE, W_COUNT };
static const char *wait_names[W_COUNT] = {"cond_timeout", "cond_signalled", "cond_untimed", "poll",
                                          "select",       "sem",            "pipe"};
static int64_t wait_rc[W_COUNT], wait_ns[W_COUNT];
static int64_t start_ns;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mono_cond, untimed_cond, done_cond = PTHREAD_COND_INITIALIZER;
static int signalled, done;
static sem_t sem;
static int pipe_fds[2];

static void *waiter(void *arg) {
    int which = (int)(intptr_t)arg;
    int64_t rc = 0, t0 = mono();
    struct timespec ts;
    switch (which) {
    case W_COND_TIMEOUT: /* nobody signals it: times out after 5 s (monotonic clock) */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 5;
        pthread_mutex_lock(&lock);
        do
            rc = pthread_cond_timedwait(&mono_cond, &lock, &ts);
        while (rc == 0);
        pthread_mutex_unlock(&lock);
        break;
    case W_COND_SIGNALLED: /* signalled after the main thread's pread, long before 100 s */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 100;
        pthread_mutex_lock(&lock);
        while (!signalled && rc == 0)
            rc = pthread_cond_timedwait(&mono_cond, &lock, &ts);
        pthread_mutex_unlock(&lock);
        break;
    case W_COND_UNTIMED:
        pthread_mutex_lock(&lock);
        while (!signalled)
            rc = pthread_cond_wait(&untimed_cond, &lock);
        pthread_mutex_unlock(&lock);
        break;
    case W_POLL:
        rc = poll(NULL, 0, 7000);
        break;
    case W_SELECT: {
        struct timeval tv = {3, 0};
        rc = select(0, NULL, NULL, NULL, &tv);
        break;
    }
    case W_SEM:
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 4;
        rc = sem_timedwait(&sem, &ts) == 0 ? 0 : errno;
        break;
    case W_PIPE: { /* data comes after the main thread's pread, long before 50 s */
        struct pollfd p = {pipe_fds[0], POLLIN, 0};
        rc = poll(&p, 1, 50000);
        break;
    }
    }
    int64_t t1 = mono();
    pthread_mutex_lock(&lock);
    wait_rc[which] = rc;
    wait_ns[which] = t1 - t0;
    done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static int mode_waits(const char *image) {
    int fd = open(image, O_RDONLY);
    if (fd < 0 || pipe(pipe_fds) != 0 || sem_init(&sem, 0, 0) != 0) {
        perror("setup");
        return 1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&mono_cond, &attr);
    pthread_cond_init(&untimed_cond, NULL);
    start_ns = mono();
    pthread_t t[W_COUNT];
    for (int i = 0; i < W_COUNT; i++)
        if (pthread_create(&t[i], NULL, waiter, (void *)(intptr_t)i) != 0)
            return 1;
    char buf[4096];
    if (pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) {
        perror("pread");
        return 1;
    }
    int64_t pread_ns = mono() - start_ns;
    pthread_mutex_lock(&lock);
    signalled = 1;
    pthread_cond_broadcast(&mono_cond);
    pthread_cond_signal(&untimed_cond);
    pthread_mutex_unlock(&lock);
    if (write(pipe_fds[1], "x", 1) != 1)
        return 1;
    pthread_mutex_lock(&lock);
    while (done < W_COUNT)
        pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < W_COUNT; i++)
        pthread_join(t[i], NULL);
    int64_t total_ns = mono() - start_ns;
    printf("pread_ns=%lld total_ns=%lld backwards=%d", (long long)pread_ns, (long long)total_ns, backwards);
    for (int i = 0; i < W_COUNT; i++)
        printf(" %s_rc=%lld %s_ns=%lld", wait_names[i], (long long)wait_rc[i], wait_names[i], (long long)wait_ns[i]);
    printf("\n");
    close(fd);
    return 0;
}

static int mode_fork(const char *image) {
    int fd = open(image, O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    int64_t m0 = ns(CLOCK_MONOTONIC);
    pid_t child = fork();
    if (child == 0) {
        char buf[4096];
        int64_t c0 = ns(CLOCK_MONOTONIC);
        if (pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
            _exit(1);
        printf("child_ns=%lld ", (long long)(ns(CLOCK_MONOTONIC) - c0));
        fflush(stdout);
        _exit(0);
    }
    /* As fio's parent waits for its jobs: short sleeps, then a look. */
    int status = 0;
    while (waitpid(child, &status, WNOHANG) == 0)
        usleep(10000);
    printf("parent_ns=%lld child_ok=%d\n", (long long)(ns(CLOCK_MONOTONIC) - m0),
           WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    return 0;
}

static int helper_fd, helper_pipe[2];
static long helper_pieces;
static int64_t helper_pieces_ns, helper_request_ns;

static int helper(void *arg) {
    (void)arg;
    char buf[4096];
    int64_t t0 = ns(CLOCK_MONOTONIC);
    for (long i = 0; i < helper_pieces; i++)
        if (pread(helper_fd, buf, sizeof buf, (off_t)i * 4096) != (ssize_t)sizeof buf)
            return 1;
    helper_pieces_ns = ns(CLOCK_MONOTONIC) - t0;
    char done = 1;
    if (write(helper_pipe[1], &done, 1) != 1)
        return 1;
    helper_request_ns = ns(CLOCK_MONOTONIC) - t0;
    return 0;
}

static int mode_helper(const char *image, long pieces) {
    helper_fd = open(image, O_RDONLY);
    if (helper_fd < 0 || pipe(helper_pipe) != 0) {
        perror("open");
        return 1;
    }
    helper_pieces = pieces;
    static char stack[65536];
    pid_t child = clone(helper, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
    if (child < 0) {
        perror("clone");
        return 1;
    }
    struct pollfd p = {helper_pipe[0], POLLIN, 0};
    char done;
    if (poll(&p, 1, -1) != 1 || read(helper_pipe[0], &done, 1) != 1)
        return 1;
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 1;
    printf("pieces_ns=%lld request_ns=%lld\n", (long long)helper_pieces_ns, (long long)helper_request_ns);
    return 0;
}

static long helper_delay_ms;
static volatile int helper_done;

static int helper_late(void *arg) {
    (void)arg;
    char buf[4096];
    for (long i = 0; i < helper_pieces; i++)
        if (pread(helper_fd, buf, sizeof buf, (off_t)i * 4096) != (ssize_t)sizeof buf)
            return 1;
    /* The helper's own work before it hands the request back: its CPU, not the clock's. */
    int64_t c0 = ns(CLOCK_THREAD_CPUTIME_ID);
    while (ns(CLOCK_THREAD_CPUTIME_ID) - c0 < helper_delay_ms * 1000000LL)
        ;
    char done = 1;
    if (write(helper_pipe[1], &done, 1) != 1)
        return 1;
    __atomic_store_n(&helper_done, 1, __ATOMIC_RELEASE);
    return 0;
}

static int mode_helper_late(const char *image, long pieces, long delay_ms) {
    helper_fd = open(image, O_RDONLY);
    if (helper_fd < 0 || pipe(helper_pipe) != 0) {
        perror("open");
        return 1;
    }
    helper_pieces = pieces;
    helper_delay_ms = delay_ms;
    static char stack[65536];
    int64_t m0 = ns(CLOCK_MONOTONIC);
    pid_t child = clone(helper_late, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
    if (child < 0) {
        perror("clone");
        return 1;
    }
    /* Running throughout: the clock never jumps, it moves with the main thread's time. */
    while (!__atomic_load_n(&helper_done, __ATOMIC_ACQUIRE))
        (void)ns(CLOCK_MONOTONIC);
    char done;
    if (read(helper_pipe[0], &done, 1) != 1)
        return 1;
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 1;
    printf("elapsed_ns=%lld\n", (long long)(ns(CLOCK_MONOTONIC) - m0));
    return 0;
}

static int mode_cpu_child(long ms) {
    int64_t m0 = ns(CLOCK_MONOTONIC);
    /* Not glibc's fork or clone: nothing of the library's runs for it. */
    long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) {
        perror("clone");
        return 1;
    }
    if (pid == 0) {
        struct timespec t;
        do
            syscall(SYS_clock_gettime, CLOCK_PROCESS_CPUTIME_ID, &t);
        while (t.tv_sec * 1000LL + t.tv_nsec / 1000000 < ms);
        syscall(SYS_kill, syscall(SYS_getpid), SIGSTOP);
        syscall(SYS_exit, 0);
    }
    int status = 0;
    if (waitpid((pid_t)pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status))
        return 1;
    int64_t elapsed = ns(CLOCK_MONOTONIC) - m0;
    kill((pid_t)pid, SIGKILL);
    waitpid((pid_t)pid, &status, 0);
    printf("elapsed_ns=%lld\n", (long long)elapsed);
    return 0;
}

static volatile int64_t handler_floor_ns;
static volatile long handler_reads, handler_backwards;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    handler_reads++;
    if (ns(CLOCK_MONOTONIC) < handler_floor_ns)
        handler_backwards++;
    errno = saved;
}

static int mode_handler(const char *image, long n) {
    int fd = open(image, O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    struct timespec away = {100, 0};
    nanosleep(&away, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 20}, {0, 20}};
    setitimer(ITIMER_REAL, &every, NULL);
    char buf[4096];
    for (long i = 0; i < n; i++) {
        handler_floor_ns = ns(CLOCK_MONOTONIC);
        off_t off = (off_t)((i * 7919) % 4096) * 65536;
        if (pread(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf) {
            perror("pread");
            return 1;
        }
    }
    struct itimerval off_timer = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off_timer, NULL);
    printf("handler_reads=%ld handler_backwards=%ld\n", handler_reads, handler_backwards);
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "helper") == 0)
        return mode_helper(argv[2], atol(argv[3]));
    if (argc == 5 && strcmp(argv[1], "helperlate") == 0)
        return mode_helper_late(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "handler") == 0)
        return mode_handler(argv[2], atol(argv[3]));
    if (argc == 4 && strcmp(argv[1], "cpuchild") == 0)
        return mode_cpu_child(atol(argv[3]));
    if (argc == 3 && strcmp(argv[1], "waits") == 0)
        return mode_waits(argv[2]);
    if (argc == 3 && strcmp(argv[1], "fork") == 0)
        return mode_fork(argv[2]);
    if (argc == 5 && strcmp(argv[1], "io") == 0)
        return mode_io(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "threads") == 0) {
        cpu_ms = atol(argv[3]);
        return mode_threads(argv[2]);
    }
    fprintf(stderr, "usage: vtime io IMAGE N SLEEP_US | vtime threads IMAGE CPU_MS | vtime waits|fork IMAGE | "
                    "vtime helper IMAGE PIECES | vtime helperlate IMAGE PIECES DELAY_MS | vtime cpuchild IMAGE MS\n");
    return 2;
}
