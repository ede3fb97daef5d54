/* SPDX-License-Identifier: MIT */
/*
 * Slow clients for bench/load.py: N connections spread over S loopback
 * source addresses (127.0.0.2 ...), each sending one byte of a request's
 * headers every INTERVAL ms and never finishing them, the way a slow-trickle
 * attack holds a server's connections. A connection the server closes is
 * opened again one INTERVAL later. One thread, epoll.
 *
 *   trickle HOST PORT CONNECTIONS SOURCES SECONDS INTERVAL_MS
 *
 * It ends after SECONDS, or at SIGTERM. Prints one JSON line: connects made, connects refused or failed, closed
 * by the server, and the connections open (established from here) sampled
 * each second: min, median, max. Only loopback addresses are accepted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 65536
#define MAX_SAMPLES 3600

static const char header[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

struct slot {
	int fd;                 /* -1: closed, reopened at `next` */
	unsigned sent;
	double next;            /* next byte, or next connect */
	struct in_addr src;
};

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int main(int argc, char **argv)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	static struct slot slots[MAX_CONNS];
	static int samples[MAX_SAMPLES];
	struct epoll_event evs[512];
	struct rlimit rl;
	long connects = 0, failed = 0, closed = 0;
	int n, sources, ep, open_now = 0, nsamples = 0;
	double secs, interval, t_end, next_sample;

	if (argc != 7) {
		fprintf(stderr, "usage: %s HOST PORT CONNECTIONS SOURCES SECONDS INTERVAL_MS\n", argv[0]);
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1 || (ntohl(to.sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "trickle: %s is not a loopback IPv4 address\n", argv[1]);
		return 2;
	}
	to.sin_port = htons((uint16_t)atoi(argv[2]));
	n = atoi(argv[3]);
	sources = atoi(argv[4]);
	secs = atof(argv[5]);
	interval = atof(argv[6]) / 1000;
	if (n < 1 || n > MAX_CONNS || sources < 1 || sources > 250 || secs <= 0 || secs > MAX_SAMPLES ||
	    interval <= 0 || interval > 60) {
		fprintf(stderr, "trickle: connections 1..%d, sources 1..250, seconds 0..%d, interval 1..60000 ms\n",
			MAX_CONNS, MAX_SAMPLES);
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)n + 64 ? rl.rlim_max : (rlim_t)n + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	ep = epoll_create1(0);
	if (ep < 0)
		return 1;
	signal(SIGTERM, on_term);
	for (int i = 0; i < n; i++) {
		slots[i].fd = -1;
		slots[i].src.s_addr = htonl(0x7f000002u + (uint32_t)(i % sources));
		slots[i].next = now() + interval * i / n;   /* spread the connects over one interval */
	}
	t_end = now() + secs;
	next_sample = now() + 1;
	while (!stop && now() < t_end) {
		double t = now();
		int k = epoll_wait(ep, evs, 512, 5);

		for (int e = 0; e < k; e++) {
			struct slot *s = &slots[evs[e].data.u32];
			char buf[4096];
			ssize_t r = read(s->fd, buf, sizeof(buf));

			if (r == 0 || (r < 0 && errno != EAGAIN)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
				close(s->fd);
				s->fd = -1;
				s->next = t + interval;
				closed++;
				open_now--;
			}
		}
		t = now();
		for (int i = 0; i < n; i++) {
			struct slot *s = &slots[i];

			if (s->next > t)
				continue;
			if (s->fd < 0) {
				struct sockaddr_in from = { .sin_family = AF_INET, .sin_addr = s->src };
				struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i };
				int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

				/* not blocking: a full backlog must not stall the others */
				connects++;
				if (fd < 0 || bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
				    (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS)) {
					if (fd >= 0)
						close(fd);
					failed++;
					s->next = t + interval;
					continue;
				}
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				s->fd = fd;
				s->sent = 0;
				open_now++;
			}
			/* the next byte of headers that never end */
			char b = s->sent < sizeof(header) - 1 ? header[s->sent] : 'a';

			if (write(s->fd, &b, 1) == 1)
				s->sent++;
			s->next = t + interval;
		}
		if (t >= next_sample && nsamples < MAX_SAMPLES) {
			samples[nsamples++] = open_now;
			next_sample += 1;
		}
	}
	qsort(samples, (size_t)nsamples, sizeof(int), cmp_int);
	printf("{\"connections\":%d,\"sources\":%d,\"interval_ms\":%.0f,\"seconds\":%.1f,\"connects\":%ld,"
	       "\"connects_failed\":%ld,\"closed_by_server\":%ld,\"open_min\":%d,\"open_median\":%d,\"open_max\":%d}\n",
	       n, sources, interval * 1000, secs, connects, failed, closed, nsamples ? samples[0] : 0,
	       nsamples ? samples[nsamples / 2] : 0, nsamples ? samples[nsamples - 1] : 0);
	for (int i = 0; i < n; i++)
		if (slots[i].fd >= 0)
			close(slots[i].fd);
	return 0;
}
