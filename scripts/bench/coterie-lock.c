/* coterie's lock from a blocking C client, the way scripts/bench/redis-lock.c
 * takes Redis's: one TCP connection (TCP_NODELAY) to a node's client port at
 * 127.0.0.1:PORT, blocking reads, for SECONDS. It separates what the node
 * costs from what coterie's own (tokio) client costs.
 *
 * Each cycle is coterie's chained one (what `coterie workload` does when
 * its clients do not think): the release of the previous entry and the
 * next acquire in one write, then the two answers (RELEASED, GRANTED) read
 * back. One round trip a cycle; the first acquire goes alone.
 *
 * The frames are the client protocol's (crates/coterie-client/src/
 * protocol.rs): a 4-byte big-endian length, then the bincode body with
 * varint integers. ClientRequest::Acquire is variant 0, Release variant 1;
 * Acquire's fields in order: names (a length, then each name's length and
 * bytes), permits (0: the cluster's count), timeout_ms (None), try_lock
 * (false), value (None), client (the label in listings), mode (Write,
 * variant 1). The test `the_c_clients_frames_are_the_protocols` in
 * crates/coterie-client/src/protocol.rs holds these bytes. ClientResponse::
 * Granted is variant 0, Released variant 3. A cluster with a secret is
 * not supported (no handshake): use it on an open one, as the bench does.
 *
 * Prints one JSON line: cycles per second, and the time from sending a
 * cycle's write to reading its grant, p50 and p99 in microseconds.
 *
 * Usage: coterie-lock PORT SECONDS */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CAP (1u << 22)

static unsigned char in[65536];
static size_t have;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Appends the frame of body[0..len) to out; returns the new end. */
static unsigned char *frame(unsigned char *out, const unsigned char *body, size_t len) {
    out[0] = len >> 24, out[1] = len >> 16, out[2] = len >> 8, out[3] = len;
    memcpy(out + 4, body, len);
    return out + 4 + len;
}

/* Reads frames until `want` have come; fails unless the last one's body
 * starts with variant `last` (the grant). */
static int answers(int fd, int want, unsigned char last) {
    for (int got = 0;;) {
        while (have >= 4) {
            size_t len = (size_t)in[0] << 24 | in[1] << 16 | in[2] << 8 | in[3];
            if (have < 4 + len) break;
            unsigned char variant = len ? in[4] : 0xff;
            memmove(in, in + 4 + len, have - 4 - len);
            have -= 4 + len;
            if (++got == want) {
                if (variant != last) {
                    fprintf(stderr, "coterie-lock: answer of variant %u, not %u\n", variant, last);
                    return -1;
                }
                return 0;
            }
        }
        ssize_t n = recv(fd, in + have, sizeof in - have, 0);
        if (n <= 0) {
            perror("coterie-lock: recv");
            return -1;
        }
        have += (size_t)n;
    }
}

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: coterie-lock PORT SECONDS\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double seconds = atof(argv[2]);
    static const unsigned char acquire[] = {
        0,                                  /* ClientRequest::Acquire */
        1, 7, 'd', 'e', 'f', 'a', 'u', 'l', 't', /* names: ["default"] */
        0,                                  /* permits: 0 */
        0,                                  /* timeout_ms: None */
        0,                                  /* try_lock: false */
        0,                                  /* value: None */
        12, 'c', 'o', 't', 'e', 'r', 'i', 'e', '-', 'l', 'o', 'c', 'k', /* client */
        1,                                  /* mode: Mode::Write */
    };
    static const unsigned char release[] = {1}; /* ClientRequest::Release */
    unsigned char first[64], chained[64];
    size_t first_len = frame(first, acquire, sizeof acquire) - first;
    size_t chained_len = frame(frame(chained, release, sizeof release), acquire, sizeof acquire) - chained;

    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("coterie-lock: connect");
        return 1;
    }
    if (send(fd, first, first_len, MSG_NOSIGNAL) != (ssize_t)first_len || answers(fd, 1, 0) != 0)
        return 1;
    uint32_t *lat = malloc(CAP * sizeof *lat);
    uint64_t cycles = 0;
    double start = now(), end = start + seconds, t = start;
    while (t < end) {
        if (send(fd, chained, chained_len, MSG_NOSIGNAL) != (ssize_t)chained_len) return 1;
        if (answers(fd, 2, 0) != 0) return 1;
        double after = now();
        if (cycles < CAP) lat[cycles] = (uint32_t)((after - t) * 1e6);
        cycles++;
        t = after;
    }
    size_t kept = cycles < CAP ? cycles : CAP;
    qsort(lat, kept, sizeof *lat, cmp);
    printf("{\"cycles_per_s\": %.1f, \"cycles\": %llu, \"acquire_p50_us\": %u, \"acquire_p99_us\": %u}\n",
           cycles / (t - start), (unsigned long long)cycles, kept ? lat[kept / 2] : 0,
           kept ? lat[kept * 99 / 100] : 0);
    return 0;
}
