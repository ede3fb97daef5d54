/* SPDX-License-Identifier: MIT */
/* The channel: records arrive in order and intact across ring wrap-around,
 * synchronous calls get their own reply, either side sees the other die, and
 * a closed fence settles only once no section is open and no record posted
 * in one is left, and holds new sections until it opens. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"

#define N_RECORDS 200000

#include "check.h"

static size_t payload_len(uint64_t i)
{
	/* Mix of tiny and large records so that the ring wraps at odd offsets. */
	return (i % 97 == 0) ? 300000 + (i % 5000) : (i * 7919) % 1500;
}

static void fill(uint8_t *buf, size_t len, uint64_t i)
{
	for (size_t k = 0; k < len; k++)
		buf[k] = (uint8_t)(i * 31 + k);
}

/* Child: the function side. Posts N_RECORDS async records, every 1000th one sync. */
static int producer(int sock)
{
	struct phos_channel *ch;
	static uint8_t buf[400000];
	int r = phos_channel_connect_new(sock, &ch);

	if (r < 0)
		return 10;
	for (uint64_t i = 1; i <= N_RECORDS; i++) {
		size_t len = payload_len(i);
		struct phos_memcpy body = { .dst = i, .len = len };

		fill(buf, len, i);
		if (i % 1000 == 0) {
			const struct phos_reply *rep;

			r = phos_channel_call(ch, PHOS_OP_MEMCPY_H2D, &body, sizeof(body), buf, len, &rep);
			if (r < 0 || rep->status != (int32_t)(i % 7) || rep->len != 8 ||
			    memcmp(rep + 1, &i, 8) != 0)
				return 11;
		} else if (!phos_channel_post(ch, PHOS_OP_MEMCPY_H2D, 0, &body, sizeof(body), buf, len)) {
			return 12;
		}
	}
	phos_channel_free(ch);
	return 0;
}

/* Child of the fence test: plain A, fenced B (told, then held in the
 * section until told), then a section that must wait for the fence: C
 * fenced, D plain. */
static int fence_producer(int sock, int told, int go)
{
	struct phos_channel *ch;
	char c = 0;

	if (phos_channel_connect_new(sock, &ch) < 0)
		return 30;
	if (!phos_channel_post(ch, PHOS_OP_DEVICE_SYNC, 0, NULL, 0, NULL, 0) ||
	    phos_channel_section_enter(ch) < 0 ||
	    !phos_channel_post(ch, PHOS_OP_DEVICE_SYNC, 0, NULL, 0, NULL, 0))
		return 31;
	if (write(told, "s", 1) != 1 || read(go, &c, 1) != 1)
		return 32;
	phos_channel_section_leave(ch);
	if (phos_channel_section_enter(ch) < 0 || !phos_channel_post(ch, PHOS_OP_DEVICE_SYNC, 0, NULL, 0, NULL, 0))
		return 33;
	phos_channel_section_leave(ch);
	if (!phos_channel_post(ch, PHOS_OP_DEVICE_SYNC, 0, NULL, 0, NULL, 0))
		return 34;
	phos_channel_free(ch);
	return 0;
}

/* The next record's flags (-1: none within ms), consumed. */
static int next_flags(struct phos_channel *ch, int ms)
{
	const struct phos_rec_hdr *h;
	int flags;

	if (phos_channel_next(ch, ms, &h) != 1)
		return -1;
	flags = (int)h->flags;
	phos_channel_consume(ch, h);
	return flags;
}

static void test_fence(void)
{
	int sv[2], told[2], go[2], status, r;
	struct phos_channel *ch;
	struct timespec t0, t1;
	bool settled = false;
	char c = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || pipe(told) < 0 || pipe(go) < 0)
		exit(1);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(fence_producer(sv[1], told[1], go[0]));
	}
	close(sv[1]);
	r = phos_channel_serve_new(sv[0], 2u << 20, &ch);
	CHECK(r == 0, "fence: serve_new: %d", r);
	if (r < 0)
		exit(1);
	CHECK(read(told[0], &c, 1) == 1, "fence: the producer entered its section");
	CHECK(!phos_channel_fence_settled(ch), "an open fence is never settled");
	phos_channel_fence_close(ch);
	CHECK(!phos_channel_fence_settled(ch), "a section is open: not settled");
	CHECK(write(go[1], "g", 1) == 1, "fence: go");
	CHECK(next_flags(ch, 5000) == 0, "A: a plain record");
	CHECK(!phos_channel_fence_settled(ch), "B, posted in a section, is still in the ring: not settled");
	CHECK(next_flags(ch, 5000) == PHOS_REC_FENCED, "B: a fenced record");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {   /* the producer's next section may count itself for a moment */
		settled = phos_channel_fence_settled(ch);
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while (!settled && t1.tv_sec - t0.tv_sec < 5);
	CHECK(settled, "no section open, no fenced record left: settled");
	CHECK(next_flags(ch, 300) == -1, "the next section waits at the closed fence");
	phos_channel_fence_open(ch);
	CHECK(next_flags(ch, 5000) == PHOS_REC_FENCED, "C, after the fence opened: fenced");
	CHECK(next_flags(ch, 5000) == 0, "D, after its section: plain");
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fence producer status %d", status);
	phos_channel_free(ch);
	close(told[0]), close(told[1]), close(go[0]), close(go[1]);
}

int main(void)
{
	int sv[2];
	struct phos_channel *ch;
	static uint8_t expect[400000];
	uint64_t got = 0;
	pid_t pid;
	int status, r;

	signal(SIGPIPE, SIG_IGN);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(producer(sv[1]));
	}
	close(sv[1]);
	r = phos_channel_serve_new(sv[0], 2u << 20, &ch);
	CHECK(r == 0, "serve_new: %d", r);
	if (r < 0)
		return 1;

	for (;;) {
		const struct phos_rec_hdr *h;

		r = phos_channel_next(ch, 5000, &h);
		if (r == -EPIPE)
			break;
		CHECK(r == 1, "next returned %d after %llu records", r, (unsigned long long)got);
		if (r != 1)
			break;
		got++;
		const struct phos_memcpy *body = (const void *)(h + 1);
		size_t len = payload_len(got);

		CHECK(h->seq == got, "seq %llu, expected %llu", (unsigned long long)h->seq,
		      (unsigned long long)got);
		CHECK(h->op == PHOS_OP_MEMCPY_H2D && body->dst == got && body->len == len &&
			      h->len == sizeof(*body) + len,
		      "record %llu header mismatch", (unsigned long long)got);
		fill(expect, len, got);
		CHECK(memcmp(body + 1, expect, len) == 0, "record %llu payload corrupt",
		      (unsigned long long)got);
		if (h->flags & PHOS_REC_SYNC) {
			uint64_t seq = h->seq;

			memcpy(phos_channel_reply_data(ch), &got, 8);
			phos_channel_consume(ch, h);
			phos_channel_reply(ch, seq, (int32_t)(got % 7), 0, 8);
		} else {
			phos_channel_consume(ch, h);
		}
		if (failures > 5)
			break;
	}
	waitpid(pid, &status, 0);
	CHECK(got == N_RECORDS, "received %llu of %d records", (unsigned long long)got, N_RECORDS);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer exit status %d", status);
	phos_channel_free(ch);

	/* A producer whose executor died gets -EPIPE from a call instead of hanging. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		struct phos_channel *c;
		const struct phos_reply *rep;

		close(sv[0]);
		if (phos_channel_connect_new(sv[1], &c) < 0)
			_exit(20);
		_exit(phos_channel_call(c, PHOS_OP_DEVICE_SYNC, NULL, 0, NULL, 0, &rep) == -EPIPE ? 0 : 21);
	}
	close(sv[1]);
	/* In two steps this time, as a pooled executor makes its next channel
	 * ahead: made (not connected), then attached once a function comes. */
	r = phos_channel_make(2u << 20, &ch);
	CHECK(r == 0, "make: %d", r);
	if (r < 0)
		return 1;
	CHECK(phos_channel_socket(ch) < 0, "a made channel has no socket yet");
	r = phos_channel_attach(ch, sv[0]);
	CHECK(r == 0, "attach: %d", r);
	{
		int extra[2];

		/* A second attach is refused, and the socket it was given is closed. */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, extra) == 0) {
			CHECK(phos_channel_attach(ch, extra[0]) == -EINVAL, "second attach refused");
			CHECK(fcntl(extra[0], F_GETFD) < 0 && errno == EBADF, "refused socket closed");
			close(extra[1]);
		}
	}
	phos_channel_free(ch); /* the executor goes away without replying */
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "dead executor: child status %d", status);

	test_fence();

	if (failures)
		return 1;
	printf("channel: %d records in order and intact; the fence holds\n", N_RECORDS);
	return 0;
}
