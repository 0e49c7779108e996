// delay-proxy: a TCP proxy that holds every chunk it forwards for a fixed
// time, to put a server (Redis, etcd) a LAN's distance away on loopback.
//
// Usage: delay-proxy LISTEN_PORT UPSTREAM_PORT DELAY_US
//
// Each accepted connection gets its own connection to 127.0.0.1:UPSTREAM_PORT
// and a thread per direction, which reads a chunk, waits until DELAY_US after
// it was read, and writes it on: one-way delay DELAY_US each way, so a round
// trip through the proxy costs 2 * DELAY_US more than without it. A thread
// forwards one chunk at a time, so a chunk read while an earlier one waits is
// held longer; the lock clients measured here send one request and wait for
// its answer, for which the delay is exact. The wait sleeps to 60 us before
// the deadline and spins the rest (a plain sleep overshoots by tens of us).
// Prints "listening PORT" once it accepts.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long delay_ns;
static int upstream_port;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void wait_until(int64_t deadline) {
    int64_t sleep_to = deadline - 60000;
    if (sleep_to > now_ns()) {
        struct timespec t = {sleep_to / 1000000000, sleep_to % 1000000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    }
    while (now_ns() < deadline) {
    }
}

struct lane {
    int from, to;
};

static void *forward(void *arg) {
    struct lane *l = arg;
    char buf[65536];
    for (;;) {
        ssize_t n = read(l->from, buf, sizeof buf);
        if (n <= 0) break;
        wait_until(now_ns() + delay_ns);
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(l->to, buf + off, n - off);
            if (w <= 0) goto done;
            off += w;
        }
    }
done:
    shutdown(l->to, SHUT_WR);
    shutdown(l->from, SHUT_RD);
    free(l);
    return NULL;
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void spawn(int from, int to) {
    struct lane *l = malloc(sizeof *l);
    l->from = from;
    l->to = to;
    pthread_t t;
    pthread_create(&t, NULL, forward, l);
    pthread_detach(t);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: delay-proxy LISTEN_PORT UPSTREAM_PORT DELAY_US\n");
        return 2;
    }
    int port = atoi(argv[1]);
    upstream_port = atoi(argv[2]);
    delay_ns = atol(argv[3]) * 1000;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 128)) {
        perror("delay-proxy: listen");
        return 1;
    }
    printf("listening %d\n", port);
    fflush(stdout);
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        int u = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in up = {.sin_family = AF_INET, .sin_port = htons(upstream_port)};
        up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(u, (struct sockaddr *)&up, sizeof up)) {
            perror("delay-proxy: upstream");
            close(c);
            close(u);
            continue;
        }
        nodelay(c);
        nodelay(u);
        spawn(c, u);
        spawn(u, c);
    }
}
