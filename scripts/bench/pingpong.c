/* The floor for coterie's lock latency on this machine: a TCP round trip
 * between two processes on loopback, TCP_NODELAY, 16-byte messages, blocking
 * reads (so each side sleeps between messages, as an idle node does).
 * Prints round trips per second and microseconds per round trip.
 *
 * `pingpong N K` instead passes a message round a ring of K processes (2 to 256)
 * (each connected to the next over loopback, as above), N laps, and
 * prints one-way hops per second and microseconds per hop: the floor for
 * a chain of messages, such as a lock handed from one client to another
 * through their nodes.
 *
 * `pingpong N K star` instead times N cycles of a star: a client sends to
 * a hub, the hub sends to each of K spokes and waits for all K answers,
 * then answers the client; each of K + 2 processes on loopback, as above.
 * It prints cycles per second and microseconds per cycle: the floor for a
 * request that must hear from every peer, as Ricart-Agrawala's does.
 * `pingpong N K star-oneway` is the same star with each spoke answering on
 * a connection of its own: what connections one way each cost. */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int listener(struct sockaddr_in *a) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof *a;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (void *)a, sizeof *a) || listen(s, 1) || getsockname(s, (void *)a, &len)) exit(1);
    return s;
}

static int dial(struct sockaddr_in *a) {
    int one = 1, c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (void *)a, sizeof *a)) exit(1);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

/* Sends what arrives on `in` to `out` until `in` closes. */
static void relay(int in, int out) {
    char b[64];
    int one = 1;
    setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (ssize_t r; (r = read(in, b, sizeof b)) > 0;) write(out, b, r);
}

/* Sends 16 bytes on `out` and waits for them on `in`, n times: seconds. */
static double timed(int out, int in, int n) {
    char b[64] = "0123456789abcdef";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        write(out, b, 16);
        read(in, b, sizeof b);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* K processes in a ring: process i dials process i+1 and accepts from
 * process i-1; process 0 sends the message round N times. */
static int ring(int n, int k) {
    struct sockaddr_in a[256];
    int l[256];
    if (k < 2 || k > 256) return 1;
    for (int i = 0; i < k; i++) l[i] = listener(&a[i]);
    for (int i = 1; i < k; i++) {
        if (fork() == 0) {
            int out = dial(&a[(i + 1) % k]);
            relay(accept(l[i], 0, 0), out);
            close(out);
            exit(0);
        }
    }
    int out = dial(&a[1]), in = accept(l[0], 0, 0);
    double dt = timed(out, in, n), hops = (double)n * k;
    printf("%.0f %.1f\n", hops / dt, dt / hops * 1e6);
    close(out);
    while (wait(0) > 0) {}
    return 0;
}

/* A client, a hub and k spokes: each client message goes out to every
 * spoke and the hub answers once all have. With `oneway`, each spoke
 * answers on a connection of its own that it dials to the hub, so every
 * connection carries one direction (as coterie's peer connections did
 * before they were shared, one per pair): each message then costs an empty
 * acknowledgement segment back as well. */
static int star(int n, int k, int oneway) {
    struct sockaddr_in hub_addr, spoke_addr[64], back_addr;
    int hub_l = listener(&hub_addr), spoke_l[64], back_l = listener(&back_addr);
    if (k < 1 || k > 64 || listen(back_l, 64)) return 1;
    for (int i = 0; i < k; i++) {
        spoke_l[i] = listener(&spoke_addr[i]);
        if (fork() == 0) {
            int c = accept(spoke_l[i], 0, 0), out = c;
            if (oneway) {
                char id = (char)i;
                out = dial(&back_addr);
                if (write(out, &id, 1) != 1) exit(1);
            }
            relay(c, out);
            exit(0);
        }
    }
    if (fork() == 0) {
        int spoke[64], back[64], client = accept(hub_l, 0, 0), one = 1;
        char b[64];
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (int i = 0; i < k; i++) back[i] = spoke[i] = dial(&spoke_addr[i]);
        for (int i = 0; oneway && i < k; i++) {
            int c = accept(back_l, 0, 0);
            char id;
            if (read(c, &id, 1) != 1 || id < 0 || id >= k) exit(1);
            back[(int)id] = c;
        }
        for (ssize_t r; (r = read(client, b, sizeof b)) > 0;) {
            for (int i = 0; i < k; i++) write(spoke[i], b, r);
            for (int i = 0; i < k; i++) read(back[i], b, sizeof b);
            write(client, b, r);
        }
        for (int i = 0; i < k; i++) close(spoke[i]);
        exit(0);
    }
    int c = dial(&hub_addr);
    double dt = timed(c, c, n);
    printf("%.0f %.1f\n", n / dt, dt / n * 1e6);
    close(c);
    while (wait(0) > 0) {}
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    if (argc > 3 && strcmp(argv[3], "star") == 0) return star(n, atoi(argv[2]), 0);
    if (argc > 3 && strcmp(argv[3], "star-oneway") == 0) return star(n, atoi(argv[2]), 1);
    if (argc > 2) return ring(n, atoi(argv[2]));
    struct sockaddr_in a;
    int s = listener(&a);
    if (fork() == 0) {
        int c = accept(s, 0, 0);
        relay(c, c);
        exit(0);
    }
    int c = dial(&a);
    double dt = timed(c, c, n);
    printf("%.0f %.1f\n", n / dt, dt / n * 1e6);
    close(c);
    wait(0);
    return 0;
}
