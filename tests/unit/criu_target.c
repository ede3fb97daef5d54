/* SPDX-License-Identifier: MIT */
/*
 * A stand-in function process for the CRIU tests (no CUDA).
 *
 *   criu_target SEED
 *
 * At start it builds state from SEED: a 1 MiB heap buffer filled by a
 * generator, its checksum, and a counter. Then it serves two line protocols
 * until its channel closes:
 *   fd 3 (the channel socket): "get\n" -> "seed=S count=N sum=X buf=Y\n", where
 *          X is the checksum computed at start, Y the checksum of the buffer
 *          now, N the number of "get"s answered before; the counter then
 *          increments (and one byte of the buffer changes with it);
 *   fd 0 (stdin, when it is a pipe): each line "L\n" -> "echo L\n" on fd 1.
 * A restored copy must answer exactly what the original would have.
 *
 *   criu_target SEED HOLD   also holds a socket that is not a unix one, for
 *   the socket-table shim's checks (runtime/criu/criu_sockdiag.c): HOLD "inet", a
 *   TCP listening socket; "child-inet", a child process holds it; "own-files",
 *   no such socket, but a thread with an fd table of its own.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_SIZE (1u << 20)

struct target {
	uint64_t seed;
	uint64_t count;
	uint64_t sum_at_start;
	uint8_t *buf;
};

static uint64_t checksum(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;   /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads what is there into a line buffer; answers each complete line with
 * answer(). Returns 0, or -1 at EOF or error. */
struct line_in {
	int fd;
	char buf[256];
	size_t len;
};

static int serve_lines(struct target *t, struct line_in *in, int out,
		       int (*answer)(struct target *, const char *, int))
{
	ssize_t r = read(in->fd, in->buf + in->len, sizeof(in->buf) - 1 - in->len);
	char *nl;

	if (r < 0 && errno == EINTR)
		return 0;
	if (r <= 0)
		return -1;
	in->len += (size_t)r;
	in->buf[in->len] = '\0';
	while ((nl = strchr(in->buf, '\n'))) {
		*nl = '\0';
		if (answer(t, in->buf, out) < 0)
			return -1;
		in->len -= (size_t)(nl + 1 - in->buf);
		memmove(in->buf, nl + 1, in->len + 1);
	}
	if (in->len == sizeof(in->buf) - 1)
		in->len = 0;   /* an overlong line: dropped */
	return 0;
}

static int answer_channel(struct target *t, const char *line, int out)
{
	char reply[160];
	int n;

	if (strcmp(line, "get") != 0)
		n = snprintf(reply, sizeof(reply), "error unknown request\n");
	else {
		n = snprintf(reply, sizeof(reply), "seed=%" PRIu64 " count=%" PRIu64 " sum=%016" PRIx64 " buf=%016" PRIx64 "\n",
			     t->seed, t->count, t->sum_at_start, checksum(t->buf, BUF_SIZE));
		t->buf[t->count % BUF_SIZE] ^= 0x5a;
		t->count++;
	}
	return write_all(out, reply, (size_t)n);
}

static int answer_stdin(struct target *t, const char *line, int out)
{
	char reply[300];
	int n = snprintf(reply, sizeof(reply), "echo %s\n", line);

	return write_all(out, reply, (size_t)n < sizeof(reply) ? (size_t)n : sizeof(reply) - 1);
}

static int listen_tcp(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0)
		return -1;
	return fd;
}

static void *own_files_main(void *arg)
{
	int *ready = arg;

	if (unshare(CLONE_FILES) == 0)
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
	else
		__atomic_store_n(ready, -1, __ATOMIC_RELEASE);
	for (;;)
		pause();
	return NULL;
}

/* What HOLD asks for (see the top), before the first answer: 0 or -1. */
static int hold(const char *what)
{
	if (!strcmp(what, "inet"))
		return listen_tcp() < 0 ? -1 : 0;
	if (!strcmp(what, "child-inet")) {
		int p[2];
		char c = 0;
		pid_t pid;

		if (pipe(p) < 0 || (pid = fork()) < 0)
			return -1;
		if (pid == 0) {   /* dies with the namespace's init, its parent */
			close(p[0]);
			if (listen_tcp() < 0 || write(p[1], "r", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		close(p[1]);
		return read(p[0], &c, 1) == 1 && c == 'r' ? close(p[0]) : -1;
	}
	if (!strcmp(what, "own-files")) {
		static int ready;
		pthread_t th;

		if (pthread_create(&th, NULL, own_files_main, &ready) != 0)
			return -1;
		while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
			usleep(1000);
		return ready > 0 ? 0 : -1;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct target t = { .seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 };
	struct line_in chan = { .fd = 3 }, in = { .fd = 0 };
	uint64_t x = t.seed | 1;
	struct pollfd pfd[2];

	t.buf = malloc(BUF_SIZE);
	if (!t.buf)
		return 1;
	for (size_t i = 0; i < BUF_SIZE; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;   /* xorshift64 */
		t.buf[i] = (uint8_t)x;
	}
	t.sum_at_start = checksum(t.buf, BUF_SIZE);
	if (argc > 2 && hold(argv[2]) < 0)
		return 1;

	pfd[0] = (struct pollfd){ .fd = 3, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = 0, .events = POLLIN };
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (pfd[0].revents && serve_lines(&t, &chan, 3, answer_channel) < 0)
			break;   /* the channel closed: done */
		if (pfd[1].revents && serve_lines(&t, &in, 1, answer_stdin) < 0)
			pfd[1].fd = -1;   /* stdin at EOF (or /dev/null): channel only */
	}
	free(t.buf);
	return 0;
}
