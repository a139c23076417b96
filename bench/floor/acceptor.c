// The least a TCP server can do per probe connection (issue #15, item 5):
// one thread, one epoll loop on a loopback listener; each accepted
// connection is read until EOF, as an application's port that the prober
// closes first (the same part `kubelet-probes serve` plays with a goroutine
// per connection), then closed. It lets a prober run at rates where the Go
// server's own CPU would take most of a 2-core machine.
//
// Usage: acceptor
// Binds 127.0.0.1 on a free port, prints {"tcp":PORT} and runs until
// SIGTERM or SIGINT. A measurement aid, not a test: CI does not run it.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

int main(void) {
    int ln = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (ln < 0 || bind(ln, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(ln, 4096) != 0 || getsockname(ln, (struct sockaddr *)&addr, &len) != 0) {
        perror("acceptor: listen");
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ln};
    epoll_ctl(ep, EPOLL_CTL_ADD, ln, &ev);
    printf("{\"tcp\":%d}\n", ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event events[256];
    char buf[4096];
    while (!stop) {
        int got = epoll_wait(ep, events, 256, 100);
        for (int e = 0; e < got; e++) {
            int fd = events[e].data.fd;
            if (fd == ln) {
                int c;
                while ((c = accept4(ln, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            ssize_t r;
            while ((r = read(fd, buf, sizeof buf)) > 0) {
            }
            if (r == 0 || errno != EAGAIN) close(fd);  // also leaves the epoll set
        }
    }
    return 0;
}
