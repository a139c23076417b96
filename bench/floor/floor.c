// The machine's floor for a probe (issue #15, item 3): the least a prober
// can do per TCP or HTTP probe on loopback, to put podprobe's and the
// kubelet's handler CPU in proportion. One thread, one epoll loop, no
// allocation per probe: N targets, each probed every PERIOD_MS from a random
// start within one period (as bench/probe-load schedules them), a missed
// tick skipped. Each probe: a non-blocking socket with SO_LINGER {1, 1 s}
// (and TCP_NODELAY for HTTP, as Go's dialer), connect; TCP: close once
// connected; HTTP: write one minimal GET with "Connection: close", read to
// EOF, check the status line says 2xx or 3xx, close. Before each close the
// linger is turned off, as podprobe does (T3): the same FIN on the wire,
// and the close does not wait for its ACK. gRPC: one write of the
// client preface, an empty SETTINGS, the Health/Check HEADERS (HPACK
// literals, no Huffman, no dynamic table) and its DATA with END_STREAM
// (the empty request), as any HTTP/2 client may send before it has read the
// server's SETTINGS; then read frames, acknowledging the server's SETTINGS
// and PINGs (HTTP/2 requires both), until the trailers (HEADERS with
// END_STREAM); a probe passes when the response message is SERVING
// (08 01); no GOAWAY, close. The server is the same
// external one (`kubelet-probes serve`) the Rust and Go harnesses probe, and
// CPU is this process's own (getrusage), as they measure theirs.
//
// Usage: floor tcp|http|grpc N PERIOD_MS DURATION_S PORT [TARGETS]
// Prints one JSON line in bench/probe-load's shape. A measurement, not a
// test: CI does not run it. Without TARGETS only 127.0.0.1 is connected to;
// with it (a file of IPv4 addresses, one per line: bench/node's pod IPs on
// the node's bridge), target i is address i mod the file's count.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { IDLE, CONNECTING, READING };
enum { TCP, HTTP, GRPC };

struct slot {
    struct sockaddr_in addr;
    int request_len;
    char request[256];
    int fd;
    int state;
    uint64_t due_ns;    // next probe
    uint64_t began_ns;  // current probe
    size_t got;         // HTTP: bytes of the status line kept; gRPC: of frames buffered
    char head[16];
    int serving;        // gRPC: the response said SERVING
    unsigned char frames[1024];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double rusage_s(const struct timeval *tv) { return tv->tv_sec + tv->tv_usec / 1e6; }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Appends an HTTP/2 frame header (RFC 9113 4.1) to p.
static unsigned char *frame_header(unsigned char *p, size_t len, int type, int flags, uint32_t stream) {
    *p++ = (unsigned char)(len >> 16);
    *p++ = (unsigned char)(len >> 8);
    *p++ = (unsigned char)len;
    *p++ = (unsigned char)type;
    *p++ = (unsigned char)flags;
    *p++ = (unsigned char)(stream >> 24);
    *p++ = (unsigned char)(stream >> 16);
    *p++ = (unsigned char)(stream >> 8);
    *p++ = (unsigned char)stream;
    return p;
}

// Appends an HPACK string literal (no Huffman; every string here is < 127).
static unsigned char *hpack_string(unsigned char *p, const char *s) {
    size_t len = strlen(s);
    *p++ = (unsigned char)len;
    memcpy(p, s, len);
    return p + len;
}

// The whole gRPC Health/Check request to `authority`; returns its length.
static int grpc_request(unsigned char *out, const char *authority) {
    unsigned char block[160], *b = block;
    *b++ = 0x83;  // :method POST (static index 3)
    *b++ = 0x86;  // :scheme http (6)
    *b++ = 0x04;  // :path (4), literal without indexing
    b = hpack_string(b, "/grpc.health.v1.Health/Check");
    *b++ = 0x01;  // :authority (1)
    b = hpack_string(b, authority);
    *b++ = 0x0f, *b++ = 0x10;  // content-type (31)
    b = hpack_string(b, "application/grpc");
    *b++ = 0x0f, *b++ = 0x2b;  // user-agent (58)
    b = hpack_string(b, "kube-probe/1.35");
    *b++ = 0x00;  // a new name
    b = hpack_string(b, "te");
    b = hpack_string(b, "trailers");
    unsigned char *p = out;
    memcpy(p, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    p += 24;
    p = frame_header(p, 0, 0x4, 0, 0);  // SETTINGS
    p = frame_header(p, (size_t)(b - block), 0x1, 0x4, 1);  // HEADERS, END_HEADERS
    memcpy(p, block, (size_t)(b - block));
    p += b - block;
    p = frame_header(p, 5, 0x0, 0x1, 1);  // DATA, END_STREAM: an empty message
    memset(p, 0, 5);
    p += 5;
    return (int)(p - out);
}

// Consumes the complete frames buffered in s->frames: acknowledges SETTINGS
// and PINGs, notes a SERVING response. Returns 1 once the trailers came,
// -1 on a write failure or a frame larger than the buffer, else 0.
static int grpc_frames(struct slot *s) {
    size_t at = 0;
    int finished = 0;
    unsigned char acks[9 + 17 * 4], *a = acks;
    while (s->got - at >= 9) {
        unsigned char *f = s->frames + at;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        if (len + 9 > sizeof s->frames) return -1;
        if (s->got - at < len + 9) break;
        int type = f[3], flags = f[4];
        uint32_t stream = ((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]) & 0x7fffffffu;
        if (type == 0x4 && !(flags & 0x1)) {
            a = frame_header(a, 0, 0x4, 0x1, 0);  // SETTINGS ack
        } else if (type == 0x6 && !(flags & 0x1) && len == 8 && a + 17 <= acks + sizeof acks) {
            a = frame_header(a, 8, 0x6, 0x1, 0);  // PING ack, the same 8 bytes
            memcpy(a, f + 9, 8);
            a += 8;
        } else if (type == 0x0 && stream == 1 && len >= 7) {
            s->serving = f[9 + 5] == 0x08 && f[9 + 6] == 0x01;
        } else if (type == 0x1 && stream == 1 && (flags & 0x1)) {
            finished = 1;
        }
        at += len + 9;
    }
    memmove(s->frames, s->frames + at, s->got - at);
    s->got -= at;
    if (a > acks && !finished && write(s->fd, acks, (size_t)(a - acks)) != a - acks) return -1;
    return finished;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: floor tcp|http|grpc N PERIOD_MS DURATION_S PORT [TARGETS]\n");
        return 2;
    }
    int kind = strcmp(argv[1], "http") == 0 ? HTTP : strcmp(argv[1], "grpc") == 0 ? GRPC : TCP;
    if (kind == TCP && strcmp(argv[1], "tcp") != 0) {
        fprintf(stderr, "floor: kind must be tcp, http or grpc\n");
        return 2;
    }
    int n = atoi(argv[2]);
    uint64_t period = (uint64_t)atoll(argv[3]) * 1000000u;
    uint64_t duration = (uint64_t)atoll(argv[4]) * 1000000000u;
    int port = atoi(argv[5]);
    if (n <= 0 || period == 0 || duration == 0 || port <= 0 || port > 65535) {
        fprintf(stderr, "floor: N, PERIOD_MS, DURATION_S and PORT must be positive\n");
        return 2;
    }
    // The targets' addresses: loopback, or those TARGETS lists.
    struct in_addr *hosts = malloc(sizeof *hosts);
    size_t nhosts = 1;
    if (!hosts) return 2;
    hosts[0].s_addr = htonl(INADDR_LOOPBACK);
    if (argc == 7) {
        FILE *f = fopen(argv[6], "r");
        if (!f) {
            perror("floor: TARGETS");
            return 2;
        }
        char line[64];
        nhosts = 0;
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (!*line) continue;
            struct in_addr *grown = realloc(hosts, (nhosts + 1) * sizeof *hosts);
            if (!grown) return 2;
            hosts = grown;
            if (inet_pton(AF_INET, line, &hosts[nhosts]) != 1) {
                fprintf(stderr, "floor: not an IPv4 address: %s\n", line);
                return 2;
            }
            nhosts++;
        }
        fclose(f);
        if (nhosts == 0) {
            fprintf(stderr, "floor: no address in %s\n", argv[6]);
            return 2;
        }
    }
    struct slot *slots = calloc((size_t)n, sizeof *slots);
    if (!slots) return 2;
    for (int i = 0; i < n; i++) {
        struct slot *s = &slots[i];
        s->addr.sin_family = AF_INET;
        s->addr.sin_port = htons((uint16_t)port);
        s->addr.sin_addr = hosts[(size_t)i % nhosts];
        char host[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &s->addr.sin_addr, host, sizeof host);
        if (kind == GRPC) {
            char authority[32];
            snprintf(authority, sizeof authority, "%s:%d", host, port);
            s->request_len = grpc_request((unsigned char *)s->request, authority);
        } else {
            s->request_len = snprintf(s->request, sizeof s->request,
                                      "GET /healthz HTTP/1.1\r\nHost: %s:%d\r\n"
                                      "User-Agent: kube-probe/1.35\r\nAccept: */*\r\n"
                                      "Connection: close\r\n\r\n",
                                      host, port);
        }
    }
    size_t cap = (size_t)n * (size_t)(duration / period + 2);
    uint64_t *latencies = malloc(cap * sizeof *latencies);
    if (!latencies) return 2;
    int ep = epoll_create1(0);
    srand((unsigned)now_ns());

    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    uint64_t start = now_ns(), end = start + duration;
    for (int i = 0; i < n; i++) {
        slots[i].fd = -1;
        slots[i].due_ns = start + (uint64_t)((double)rand() / RAND_MAX * (double)period);
    }
    size_t probes = 0, failures = 0;
    struct linger linger = {.l_onoff = 1, .l_linger = 1}, no_linger = {0};
    int one = 1;
    struct epoll_event events[256];

    for (;;) {
        uint64_t t = now_ns();
        // Start every probe that is due; find the next due time.
        uint64_t next = UINT64_MAX;
        int active = 0;
        for (int i = 0; i < n; i++) {
            struct slot *s = &slots[i];
            if (s->state != IDLE) {
                active = 1;
                continue;
            }
            if (s->due_ns >= end) continue;
            if (s->due_ns <= t) {
                s->began_ns = t;
                s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof linger);
                if (kind != TCP) setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                int rc = connect(s->fd, (struct sockaddr *)&s->addr, sizeof s->addr);
                if (rc != 0 && errno != EINPROGRESS) {
                    failures++;
                    close(s->fd);
                    s->fd = -1;
                } else {
                    s->state = CONNECTING;
                    s->got = 0;
                    s->serving = 0;
                    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)i};
                    epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
                    active = 1;
                }
                do s->due_ns += period; while (s->due_ns <= t);
            }
            if (s->state == IDLE && s->due_ns < next) next = s->due_ns;
        }
        if (!active && next == UINT64_MAX) break;
        // Rounded up: waking early would spin until the probe is due.
        int wait_ms = next == UINT64_MAX ? 100 : (int)((next > t ? next - t + 999999u : 0) / 1000000u);
        int got = epoll_wait(ep, events, 256, wait_ms);
        for (int e = 0; e < got; e++) {
            struct slot *s = &slots[events[e].data.u32];
            int done = 0, ok = 0;
            if (s->state == CONNECTING) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err != 0) {
                    done = 1;
                } else if (kind == TCP) {
                    done = ok = 1;
                } else if (write(s->fd, s->request, (size_t)s->request_len) != s->request_len) {
                    done = 1;
                } else {
                    s->state = READING;
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = events[e].data.u32};
                    epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
                }
            } else if (kind == GRPC) {
                ssize_t r;
                int state = 0;
                while (state == 0 && (r = read(s->fd, s->frames + s->got, sizeof s->frames - s->got)) > 0) {
                    s->got += (size_t)r;
                    state = grpc_frames(s);
                }
                if (state != 0 || r == 0 || (r < 0 && errno != EAGAIN)) {
                    done = 1;
                    ok = state == 1 && s->serving;
                }
            } else {
                char buf[4096];
                ssize_t r;
                while ((r = read(s->fd, buf, sizeof buf)) > 0) {
                    size_t keep = sizeof s->head - s->got;
                    if (keep > (size_t)r) keep = (size_t)r;
                    memcpy(s->head + s->got, buf, keep);
                    s->got += keep;
                }
                if (r == 0 || (r < 0 && errno != EAGAIN)) {
                    done = 1;
                    // "HTTP/1.1 2xx" or 3xx
                    ok = r == 0 && s->got >= 12 && (s->head[9] == '2' || s->head[9] == '3');
                }
            }
            if (done) {
                // As podprobe's ProbeStream: linger off just before the
                // close, so it never waits for the FIN's ACK (same wire).
                setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof no_linger);
                close(s->fd);  // also removes it from the epoll set
                s->fd = -1;
                s->state = IDLE;
                if (!ok) failures++;
                if (probes < cap) latencies[probes] = now_ns() - s->began_ns;
                probes++;
            }
        }
    }
    getrusage(RUSAGE_SELF, &after);
    double elapsed = (now_ns() - start) / 1e9;
    double user = rusage_s(&after.ru_utime) - rusage_s(&before.ru_utime);
    double sys = rusage_s(&after.ru_stime) - rusage_s(&before.ru_stime);
    size_t kept = probes < cap ? probes : cap;
    qsort(latencies, kept, sizeof *latencies, cmp_u64);
    printf("{\"impl\":\"c-floor\",\"kind\":\"%s\",\"n\":%d,\"period_ms\":%llu,"
           "\"duration_s\":%.3f,\"probes\":%zu,\"failures\":%zu,\"probes_per_sec\":%.1f,"
           "\"cpu_user_s\":%.4f,\"cpu_sys_s\":%.4f,\"cpu_s_per_1k\":%.5f,"
           "\"max_rss_kib\":%ld,\"p50_us\":%llu,\"p99_us\":%llu}\n",
           argv[1], n, (unsigned long long)(period / 1000000u), elapsed, probes, failures,
           probes / elapsed, user, sys, probes ? (user + sys) / probes * 1000.0 : 0.0,
           after.ru_maxrss, kept ? (unsigned long long)(latencies[kept / 2] / 1000u) : 0ull,
           kept ? (unsigned long long)(latencies[kept * 99 / 100] / 1000u) : 0ull);
    return 0;
}
