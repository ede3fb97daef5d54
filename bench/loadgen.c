/* SPDX-License-Identifier: MIT */
/*
 * A closed-loop HTTP/1.1 load generator for bench/load.py: C keep-alive
 * connections to one loopback address, each sending the same POST as soon as
 * its previous answer is complete, for a fixed time. One thread, epoll.
 *
 *   loadgen HOST PORT PATH BODY CONCURRENCY SECONDS
 *
 * Prints one JSON line: requests, errors (connection failures and non-2xx
 * answers), requests per second, latency p50/p90/p99/max in ms (from writing
 * the request to reading the last byte of the answer), and the count per
 * status. Latencies are kept in a bounded reservoir (the first 4 M answers).
 * Only loopback addresses are accepted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define MAX_SAMPLES (4u << 20)
#define RBUF 65536

struct conn {
	int fd;
	double t0;              /* request written */
	size_t sent;            /* bytes of the request written */
	char buf[RBUF];
	size_t have;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int conn_open(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* Whether buf holds one whole answer; its status and length into ret_*. */
static bool answer_complete(const char *buf, size_t have, int *ret_status, size_t *ret_len)
{
	const char *end = memmem(buf, have, "\r\n\r\n", 4), *cl;
	size_t hlen, blen = 0;

	if (!end)
		return false;
	hlen = (size_t)(end - buf) + 4;
	cl = memmem(buf, hlen, "Content-Length:", 15);
	if (!cl)
		cl = memmem(buf, hlen, "content-length:", 15);
	if (cl)
		blen = strtoul(cl + 15, NULL, 10);
	if (have < hlen + blen)
		return false;
	*ret_status = have >= 12 ? atoi(buf + 9) : 0;
	*ret_len = hlen + blen;
	return true;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct epoll_event ev, evs[256];
	static struct conn conns[MAX_CONNS];
	char req[8192];
	size_t reqlen;
	long status[600] = { 0 };
	double *lat, t_end;
	size_t nlat = 0;
	long requests = 0, errors = 0;
	int c, ep;
	double secs, t_start;

	if (argc != 7) {
		fprintf(stderr, "usage: %s HOST PORT PATH BODY CONCURRENCY SECONDS\n", argv[0]);
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 || (ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "loadgen: %s is not a loopback IPv4 address\n", argv[1]);
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	c = atoi(argv[5]);
	secs = atof(argv[6]);
	if (c < 1 || c > MAX_CONNS || secs <= 0 || secs > 3600) {
		fprintf(stderr, "loadgen: concurrency 1..%d, seconds 0..3600\n", MAX_CONNS);
		return 2;
	}
	reqlen = (size_t)snprintf(req, sizeof(req),
				  "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
				  "Content-Length: %zu\r\n\r\n%s",
				  argv[3], argv[1], argv[2], strlen(argv[4]), argv[4]);
	if (reqlen >= sizeof(req))
		return 2;
	lat = malloc(MAX_SAMPLES * sizeof(*lat));
	ep = epoll_create1(0);
	if (!lat || ep < 0)
		return 1;
	t_start = now();
	for (int i = 0; i < c; i++) {
		conns[i].fd = conn_open(&sa);
		if (conns[i].fd < 0) {
			fprintf(stderr, "loadgen: connect: %s\n", strerror(errno));
			return 1;
		}
		ev.events = EPOLLIN | EPOLLOUT;
		ev.data.u32 = (uint32_t)i;
		epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
		conns[i].t0 = now();
	}
	t_end = now() + secs;
	while (now() < t_end) {
		int n = epoll_wait(ep, evs, 256, 100);

		for (int k = 0; k < n; k++) {
			struct conn *cn = &conns[evs[k].data.u32];
			ssize_t r;

			if (cn->sent < reqlen && (evs[k].events & EPOLLOUT)) {
				r = write(cn->fd, req + cn->sent, reqlen - cn->sent);
				if (r > 0)
					cn->sent += (size_t)r;
				if (cn->sent == reqlen) {
					ev.events = EPOLLIN;
					ev.data.u32 = evs[k].data.u32;
					epoll_ctl(ep, EPOLL_CTL_MOD, cn->fd, &ev);
				}
			}
			if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
				int st;
				size_t len;

				r = read(cn->fd, cn->buf + cn->have, RBUF - cn->have);
				if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
					/* closed: count an error and reconnect */
					errors++;
					epoll_ctl(ep, EPOLL_CTL_DEL, cn->fd, NULL);
					close(cn->fd);
					cn->fd = conn_open(&sa);
					if (cn->fd < 0)
						return 1;
					cn->have = cn->sent = 0;
					cn->t0 = now();
					ev.events = EPOLLIN | EPOLLOUT;
					ev.data.u32 = evs[k].data.u32;
					epoll_ctl(ep, EPOLL_CTL_ADD, cn->fd, &ev);
					continue;
				}
				if (r > 0)
					cn->have += (size_t)r;
				if (answer_complete(cn->buf, cn->have, &st, &len)) {
					double t = now();

					requests++;
					if (st >= 0 && st < 600)
						status[st]++;
					if (st < 200 || st > 299)
						errors++;
					if (nlat < MAX_SAMPLES)
						lat[nlat++] = (t - cn->t0) * 1e3;
					memmove(cn->buf, cn->buf + len, cn->have - len);
					cn->have -= len;
					cn->sent = 0;
					cn->t0 = t;
					ev.events = EPOLLIN | EPOLLOUT;
					ev.data.u32 = evs[k].data.u32;
					epoll_ctl(ep, EPOLL_CTL_MOD, cn->fd, &ev);
				} else if (cn->have == RBUF) {
					errors++;       /* an answer bigger than we keep */
					cn->have = 0;
				}
			}
		}
	}
	secs = now() - t_start;
	qsort(lat, nlat, sizeof(*lat), cmp_double);
#define PCT(p) (nlat ? lat[(size_t)((double)(nlat - 1) * (p))] : 0.0)
	printf("{\"concurrency\":%d,\"seconds\":%.3f,\"requests\":%ld,\"errors\":%ld,\"rps\":%.1f,"
	       "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"status\":{",
	       c, secs, requests, errors, requests / secs, PCT(0.5), PCT(0.9), PCT(0.99), PCT(1.0));
	for (int s = 0, first = 1; s < 600; s++)
		if (status[s]) {
			printf("%s\"%d\":%ld", first ? "" : ",", s, status[s]);
			first = 0;
		}
	printf("}}\n");
	for (int i = 0; i < c; i++)
		close(conns[i].fd);
	free(lat);
	return 0;
}
