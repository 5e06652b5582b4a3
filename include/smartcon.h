/* smartcon.h: the C ABI of libsmartcon.so.
 *
 * A port does positional reads and writes on a descriptor you own (a regular file or a
 * block device, O_DIRECT or not) and waits for each the way smartcon's decision says:
 * sleep in the kernel (block) or busy-wait (spin), per I/O, from the device's profile
 * (stored by `smartcon probe` under $SMARTCON_HOME; else the paper's defaults), the bytes
 * in flight and the CPU load.
 *
 * Errors are -1 (or NULL) with errno set as pread(2)/pwrite(2) would set it; on an
 * O_DIRECT descriptor a buffer, length or offset that is not a multiple of the device's
 * logical block size is EINVAL before any I/O. smartcon_last_error() says what was wrong.
 *
 * A port belongs to one thread at a time: open one per thread (a port used by two threads
 * at once answers EBUSY). The library never closes your descriptor.
 *
 * Build:   cc prog.c -I include -L target/release -lsmartcon -Wl,-rpath,$PWD/target/release
 * Linking libsmartcon.so does not change your program's other I/O: the library's
 * interposition is active only under `smartcon run` (SMARTCON_PRELOAD_STRATEGY set). */
#ifndef SMARTCON_H
#define SMARTCON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SMARTCON_ABI_VERSION 2u

/* Indices of smartcon_counters.by_strategy: how an I/O was waited for. */
enum {
    SMARTCON_STRATEGY_BLOCK = 0,
    SMARTCON_STRATEGY_SPIN = 1,
    SMARTCON_STRATEGY_SYNC = 2,
    SMARTCON_STRATEGY_HYBRID = 3,
    SMARTCON_STRATEGY_POLL = 4,
    SMARTCON_STRATEGY_HALF_MEAN = 5,
    SMARTCON_STRATEGY_IOPOLL_HYBRID = 6,
    SMARTCON_STRATEGY_PAS = 7,
    SMARTCON_STRATEGY_DIP = 8
};

/* Indices of smartcon_counters.by_reason: the decision's branch (smart only). */
enum {
    SMARTCON_REASON_MAINSTREAM_DEVICE = 0,
    SMARTCON_REASON_VERY_FAST_DEVICE = 1,
    SMARTCON_REASON_SIZE_AT_THRESHOLD = 2,
    SMARTCON_REASON_QUEUE_OVER_LIMIT = 3,
    SMARTCON_REASON_CPU_BUSY = 4,
    SMARTCON_REASON_CPU_AVAILABLE = 5,
    SMARTCON_REASON_SPIN_CHEAPER = 6, /* spinning costs no more CPU than blocking: spun at any load */
    SMARTCON_REASON_SPIN_UNPAID = 7, /* the rule said spin; this thread's waits showed it gains < 5%: blocked */
    SMARTCON_REASON_TRIAL = 8 /* the rule said spin; waited the other way to keep measuring both */
};

#define SMARTCON_COUNTER_SLOTS 16

struct smartcon_counters {
    uint64_t ios;   /* I/Os completed through the port */
    uint64_t bytes; /* bytes transferred */
    uint64_t by_strategy[SMARTCON_COUNTER_SLOTS];
    uint64_t by_reason[SMARTCON_COUNTER_SLOTS];
    uint64_t lat_ns_p50; /* per-I/O latency, decision to completion (0 with no I/O) */
    uint64_t lat_ns_p99;
    uint64_t lat_ns_max;
};

typedef struct smartcon_port smartcon_port;

/* SMARTCON_ABI_VERSION of the library: check it equals the header's. */
unsigned smartcon_abi_version(void);

/* Opens a port on fd. strategy: "smart" (NULL), "block", "spin", "hybrid" or
 * "smart-hybrid". NULL with errno on failure (EBADF, EINVAL for an unknown strategy). */
smartcon_port *smartcon_open(int fd, const char *strategy);

/* Reads len bytes at offset; the bytes read (fewer at end of file, 0 past it) or -1. */
ssize_t smartcon_read_at(smartcon_port *port, void *buf, size_t len, uint64_t offset);

/* Writes len bytes at offset; the bytes written or -1. */
ssize_t smartcon_write_at(smartcon_port *port, const void *buf, size_t len, uint64_t offset);

/* Fills *out with what the port did so far; 0 or -1. */
int smartcon_counters(const smartcon_port *port, struct smartcon_counters *out);

/* The message of this thread's last failure ("" if none); valid until the next call. */
const char *smartcon_last_error(void);

/* Closes the port (not the descriptor). NULL is ignored. */
void smartcon_close(smartcon_port *port);

#ifdef __cplusplus
}
#endif
#endif /* SMARTCON_H */
