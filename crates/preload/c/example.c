/* The C ABI in use: write a file with O_DIRECT through a port, read it back, check the
 * data, show the counters and an error. Usage: example FILE
 * Exits 0 when everything checked out. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smartcon.h"

#define BS 4096
#define BLOCKS 64

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: example FILE\n");
        return 2;
    }
    if (smartcon_abi_version() != SMARTCON_ABI_VERSION) {
        fprintf(stderr, "library ABI %u, header %u\n", smartcon_abi_version(), SMARTCON_ABI_VERSION);
        return 1;
    }
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        perror(argv[1]);
        return 2;
    }
    smartcon_port *port = smartcon_open(fd, "smart");
    if (port == NULL) {
        fprintf(stderr, "smartcon_open: %s\n", smartcon_last_error());
        return 1;
    }
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, BS, BS) != 0) return 1;

    for (int i = 0; i < BLOCKS; i++) {
        memset(buf, i, BS);
        if (smartcon_write_at(port, buf, BS, (uint64_t)i * BS) != BS) {
            fprintf(stderr, "write_at %d: %s\n", i, smartcon_last_error());
            return 1;
        }
    }
    int bad = 0;
    for (int i = BLOCKS - 1; i >= 0; i--) {
        ssize_t n = smartcon_read_at(port, buf, BS, (uint64_t)i * BS);
        if (n != BS || buf[0] != (unsigned char)i || buf[BS - 1] != (unsigned char)i) bad++;
    }
    /* Past the end: 0 bytes, not an error. */
    ssize_t end = smartcon_read_at(port, buf, BS, (uint64_t)BLOCKS * BS);
    /* O_DIRECT with a misaligned buffer: EINVAL and a message, no I/O. */
    errno = 0;
    ssize_t unaligned = smartcon_read_at(port, buf + 1, 512, 0);
    int unaligned_errno = errno;

    struct smartcon_counters c;
    if (smartcon_counters(port, &c) != 0) return 1;
    uint64_t waited = c.by_strategy[SMARTCON_STRATEGY_BLOCK] + c.by_strategy[SMARTCON_STRATEGY_SPIN] +
                      c.by_strategy[SMARTCON_STRATEGY_SYNC] + c.by_strategy[SMARTCON_STRATEGY_HYBRID];
    printf("ios %llu bytes %llu block %llu spin %llu p50 %llu ns p99 %llu ns\n", (unsigned long long)c.ios,
           (unsigned long long)c.bytes, (unsigned long long)c.by_strategy[SMARTCON_STRATEGY_BLOCK],
           (unsigned long long)c.by_strategy[SMARTCON_STRATEGY_SPIN], (unsigned long long)c.lat_ns_p50,
           (unsigned long long)c.lat_ns_p99);
    printf("read past the end: %zd\n", end);
    printf("misaligned read: %zd errno %d (%s)\n", unaligned, unaligned_errno, smartcon_last_error());
    printf("bad blocks: %d\n", bad);
    smartcon_close(port);
    close(fd);
    free(buf);
    /* 64 writes + 64 reads + the read at the end; the refused read is not an I/O. */
    int ok = bad == 0 && end == 0 && unaligned == -1 && unaligned_errno == EINVAL && c.ios == 2 * BLOCKS + 1 &&
             waited == c.ios && c.bytes == 2ull * BLOCKS * BS && c.lat_ns_p50 > 0;
    return ok ? 0 : 1;
}
