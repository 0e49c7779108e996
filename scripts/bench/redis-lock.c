/* Redis as a lock, the way a Redis lock client uses it, for comparison with
 * coterie: CLIENTS processes, each with its own TCP connection (TCP_NODELAY)
 * to 127.0.0.1:PORT and its own token, loop for SECONDS:
 *
 *   acquire: SET lock <token> NX PX 30000, sent again at once while the
 *            reply is nil (someone else holds it): how a client waits;
 *   release: EVALSHA <sha> 1 lock <token>, the compare-and-delete script
 *            `if redis.call('get',KEYS[1])==ARGV[1] then return
 *            redis.call('del',KEYS[1]) else return 0 end`, loaded once per
 *            connection with SCRIPT LOAD (what redis-py's Lock does).
 *
 * Raw RESP over a socket, no hiredis; blocking reads, one command in flight.
 * With `pipelined`, a client that holds sends its release and its next SET
 * in one write and then reads both replies: one round trip a cycle, as
 * coterie's chained cycle (the release sent with the next request) is, so
 * that the two are compared like for like.
 * The clients connect and load the script first, then start together.
 * Prints one JSON line: cycles (acquire + release) per second over all
 * clients, and the acquire latency (first SET sent to the OK read) p50 and
 * p99 in microseconds over all acquires, and SETs sent per acquire.
 *
 * Usage: redis-lock PORT CLIENTS SECONDS [pipelined] */
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CAP (1u << 22) /* acquire latencies kept per client */

static const char *UNLOCK =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

struct stats {
    uint64_t cycles, sets, lost, kept;
    double end;
};

struct conn {
    int fd;
    char buf[4096];
    size_t start, end;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "redis-lock: %s\n", what);
    exit(1);
}

static void send_all(struct conn *c, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(c->fd, p, n);
        if (w <= 0) die("write to redis failed");
        p += w, n -= (size_t)w;
    }
}

/* The next reply line, without its CRLF, NUL-terminated in the buffer. */
static char *read_line(struct conn *c) {
    for (;;) {
        char *lf = memchr(c->buf + c->start, '\n', c->end - c->start);
        if (lf) {
            char *line = c->buf + c->start;
            c->start = (size_t)(lf - c->buf) + 1;
            if (lf > line && lf[-1] == '\r') lf[-1] = 0;
            *lf = 0;
            return line;
        }
        if (c->start > 0) {
            memmove(c->buf, c->buf + c->start, c->end - c->start);
            c->end -= c->start, c->start = 0;
        }
        if (c->end == sizeof c->buf) die("reply line too long");
        ssize_t r = read(c->fd, c->buf + c->end, sizeof c->buf - c->end);
        if (r <= 0) die("redis closed the connection");
        c->end += (size_t)r;
    }
}

/* RESP: a command as an array of bulk strings. */
static size_t resp(char *out, size_t cap, int argc, const char **argv) {
    size_t n = (size_t)snprintf(out, cap, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += (size_t)snprintf(out + n, cap - n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (n >= cap) die("command too long");
    return n;
}

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (void *)&a, sizeof a)) die("cannot connect to redis");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The reply to a release: :1 if the lock was still ours. */
static void released(struct conn *c, struct stats *st) {
    char *line = read_line(c);
    if (strcmp(line, ":1") != 0) {
        if (line[0] != ':') die(line);
        st->lost++; /* it was not ours any more: cannot happen within 30 s */
    }
    st->cycles++;
}

static void client(int id, int port, double seconds, int pipelined, int ready, int go,
                   volatile double *start, struct stats *st, uint32_t *lat_ns) {
    struct conn c = {.fd = connect_to(port)};
    char token[64], sha[64], set[256], del[256], both[512], load[512];
    snprintf(token, sizeof token, "client-%d-pid-%d", id, (int)getpid());

    const char *load_argv[] = {"SCRIPT", "LOAD", UNLOCK};
    send_all(&c, load, resp(load, sizeof load, 3, load_argv));
    char *line = read_line(&c);
    if (line[0] != '$') die("SCRIPT LOAD failed");
    snprintf(sha, sizeof sha, "%s", read_line(&c));

    const char *set_argv[] = {"SET", "lock", token, "NX", "PX", "30000"};
    const char *del_argv[] = {"EVALSHA", sha, "1", "lock", token};
    size_t set_n = resp(set, sizeof set, 6, set_argv), del_n = resp(del, sizeof del, 5, del_argv);
    memcpy(both, del, del_n);
    memcpy(both + del_n, set, set_n);
    int holding = 0;

    char b = 0;
    if (write(ready, &b, 1) != 1) die("ready pipe");
    if (read(go, &b, 1) != 0) die("go pipe"); /* EOF: the parent says go */
    double deadline = *start + seconds, t = now();
    while (t < deadline) {
        double asked = t;
        int granted = 0;
        if (holding) {
            /* pipelined: the release and the next SET in one write */
            send_all(&c, both, del_n + set_n);
            st->sets++;
            released(&c, st);
            line = read_line(&c);
            if (line[0] == '+') granted = 1;
            else if (strcmp(line, "$-1") != 0) die(line);
        }
        while (!granted) {
            send_all(&c, set, set_n);
            st->sets++;
            line = read_line(&c);
            if (line[0] == '+') break;                  /* +OK: ours */
            if (strcmp(line, "$-1") != 0) die(line);    /* not nil: an error */
        }
        t = now();
        if (st->kept < CAP) {
            double ns = (t - asked) * 1e9;
            lat_ns[st->kept++] = ns > 4e9 ? 4000000000u : (uint32_t)ns;
        }
        if (pipelined) {
            holding = 1;
        } else {
            send_all(&c, del, del_n);
            released(&c, st);
        }
        t = now();
    }
    if (holding) {
        send_all(&c, del, del_n);
        released(&c, st);
    }
    st->end = t;
    close(c.fd);
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "pipelined") == 0)) {
        fprintf(stderr, "usage: redis-lock PORT CLIENTS SECONDS [pipelined]\n");
        return 2;
    }
    int port = atoi(argv[1]), clients = atoi(argv[2]), pipelined = argc == 5;
    double seconds = atof(argv[3]);
    if (port <= 0 || clients <= 0 || seconds <= 0) die("bad arguments");
    size_t shared = sizeof(double) + (size_t)clients * (sizeof(struct stats) + CAP * sizeof(uint32_t));
    char *mem = mmap(0, shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) die("mmap failed");
    volatile double *start = (double *)mem;
    struct stats *st = (struct stats *)(mem + sizeof(double));
    uint32_t *lat = (uint32_t *)(st + clients);

    int ready[2], go[2];
    pid_t *pids = calloc((size_t)clients, sizeof *pids);
    if (!pids || pipe(ready) || pipe(go)) die("pipe failed");
    for (int i = 0; i < clients; i++) {
        if ((pids[i] = fork()) == 0) {
            close(ready[0]), close(go[1]);
            client(i, port, seconds, pipelined, ready[1], go[0], start, &st[i],
                   lat + (size_t)i * CAP);
            exit(0);
        }
    }
    close(ready[1]), close(go[0]);
    char b;
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    for (int i = 0; i < clients; i++) {
        /* A client that dies before it is ready never writes: give up. */
        if (poll(&p, 1, 10000) != 1 || read(ready[0], &b, 1) != 1) {
            for (int j = 0; j < clients; j++) kill(pids[j], SIGTERM);
            while (wait(0) > 0) {}
            die("the clients did not all get ready within 10 s");
        }
    }
    *start = now();
    close(go[1]);
    int failed = 0, status;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    if (failed) die("a client failed");

    uint64_t cycles = 0, sets = 0, lost = 0, kept = 0;
    double end = *start;
    for (int i = 0; i < clients; i++) {
        cycles += st[i].cycles, sets += st[i].sets, lost += st[i].lost;
        if (st[i].end > end) end = st[i].end;
        memmove(lat + kept, lat + (size_t)i * CAP, st[i].kept * sizeof(uint32_t));
        kept += st[i].kept;
    }
    if (kept == 0) die("no lock cycle completed");
    qsort(lat, kept, sizeof(uint32_t), by_value);
    double elapsed = end - *start;
    printf("{\"clients\": %d, \"seconds\": %.3f, \"cycles\": %llu, \"cycles_per_s\": %.1f, "
           "\"acquire_p50_us\": %.1f, \"acquire_p99_us\": %.1f, \"sets_per_acquire\": %.2f, \"lost\": %llu}\n",
           clients, elapsed, (unsigned long long)cycles, cycles / elapsed, lat[kept / 2] / 1e3,
           lat[kept * 99 / 100] / 1e3, (double)sets / (double)cycles, (unsigned long long)lost);
    return lost ? 1 : 0;
}
