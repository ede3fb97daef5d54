/* SPDX-License-Identifier: MIT */
/*
 * io_uring I/O: a 64 MiB file written and read back at depth 8 (buffered and
 * O_DIRECT, whole and odd-sized operations), short transfers resubmitted (a
 * pipe fed in pieces), reads past EOF, bad arguments, depth limits, and the
 * "uio_write"/"uio_read" fault points. Skips (77) without io_uring.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "uring_io.h"

#define MiB (1u << 20)
#define FILE_SIZE (64u * MiB)
#define DEPTH 8

#include "check.h"

static char path[PATH_MAX];

#define TAG(i) ((void *)(uintptr_t)((i) + 1))
#define TAG_INDEX(t) ((size_t)(uintptr_t)(t) - 1)

/* Collects completions until none is in flight; results[i] of the op tagged i. */
static void drain(struct phos_uio *u, int *results, unsigned char *seen, size_t n)
{
	void *tag;
	int res, r;

	while ((r = phos_uio_complete(u, true, &tag, &res)) == 1) {
		size_t i = TAG_INDEX(tag);

		CHECK(i < n && !seen[i], "bad or repeated tag %zu", i);
		if (i < n) {
			seen[i] = 1;
			results[i] = res;
		}
	}
	CHECK(r == 0 && phos_uio_inflight(u) == 0, "drain: %d, %u in flight", r, phos_uio_inflight(u));
}

/* Queues ops over [0, FILE_SIZE) with sizes from sizes[] (cycled), reads when
 * !write, and checks that each completed with 0. */
static void run_ops(struct phos_uio *u, int fd, unsigned char *buf, bool write, const size_t *sizes,
		    size_t nsizes)
{
	size_t n = 0, off = 0, cap = FILE_SIZE / 4096 + 1;
	int *results = calloc(cap, sizeof(int));
	unsigned char *seen = calloc(cap, 1);

	while (off < FILE_SIZE) {
		size_t len = sizes[n % nsizes];
		unsigned flags = n % 2 ? PHOS_UIO_ASYNC : 0;
		int r;

		if (len > FILE_SIZE - off)
			len = FILE_SIZE - off;
		r = write ? phos_uio_write(u, fd, buf + off, len, off, TAG(n), flags)
			  : phos_uio_read(u, fd, buf + off, len, off, TAG(n), flags);
		CHECK(r == 0, "queue op %zu: %d", n, r);
		CHECK(phos_uio_inflight(u) <= DEPTH, "%u in flight", phos_uio_inflight(u));
		off += len;
		n++;
	}
	drain(u, results, seen, n);
	for (size_t i = 0; i < n; i++)
		CHECK(seen[i] && results[i] == 0, "op %zu: seen %d result %d", i, seen[i], results[i]);
	free(results);
	free(seen);
}

/* One op, waited for: its result. */
static int one_op(struct phos_uio *u, bool write, int fd, void *buf, size_t len, uint64_t off)
{
	void *tag = NULL;
	int res = 1, r;

	r = write ? phos_uio_write(u, fd, buf, len, off, TAG(7), 0)
		  : phos_uio_read(u, fd, buf, len, off, TAG(7), 0);
	if (r < 0)
		return r;
	r = phos_uio_complete(u, true, &tag, &res);
	CHECK(r == 1 && tag == TAG(7), "complete: %d", r);
	return res;
}

static void test_file(void)
{
	static const size_t mib[] = { MiB };
	static const size_t direct_odd[] = { 4096, 3 * 4096, MiB + 4096, 7 * 4096, 2 * MiB - 4096 };
	static const size_t odd[] = { 1000003, 12345, 1, 4096, 777777, 3 * MiB + 5 };
	unsigned char *src, *dst = NULL;
	struct phos_uio *u;
	char scratch[8192];
	int fd, dfd, r;

	src = malloc(FILE_SIZE);
	CHECK(posix_memalign((void **)&dst, 4096, FILE_SIZE) == 0, "memalign");
	for (size_t i = 0; i < FILE_SIZE / 8; i++)
		((uint64_t *)src)[i] = i * 0x9e3779b97f4a7c15ull ^ (i >> 7);
	CHECK(phos_uio_new(DEPTH, &u) == 0, "new");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "open %s: %m", path);
	run_ops(u, fd, src, true, mib, 1);
	CHECK(fsync(fd) == 0, "fsync");

	dfd = open(path, O_RDONLY | O_DIRECT);
	if (dfd < 0 && errno == EINVAL) {
		fprintf(stderr, "no O_DIRECT on this filesystem: buffered reads\n");
		dfd = open(path, O_RDONLY);
	}
	CHECK(dfd >= 0, "open %s: %m", path);
	memset(dst, 0, FILE_SIZE);
	run_ops(u, dfd, dst, false, mib, 1);
	CHECK(memcmp(src, dst, FILE_SIZE) == 0, "1 MiB reads differ");
	memset(dst, 0, FILE_SIZE);
	run_ops(u, dfd, dst, false, direct_odd, sizeof(direct_odd) / sizeof(direct_odd[0]));
	CHECK(memcmp(src, dst, FILE_SIZE) == 0, "odd O_DIRECT reads differ");
	memset(dst, 0, FILE_SIZE);
	run_ops(u, fd, dst, false, odd, sizeof(odd) / sizeof(odd[0]));
	CHECK(memcmp(src, dst, FILE_SIZE) == 0, "odd buffered reads differ");

	/* past EOF: partly, and entirely */
	memset(scratch, 0, sizeof(scratch)); /* for valgrind, see test_short */
	r = one_op(u, false, fd, scratch, 8192, FILE_SIZE - 4096);
	CHECK(r == -ENODATA, "read across EOF: %d", r);
	CHECK(!memcmp(scratch, src + FILE_SIZE - 4096, 4096), "bytes before EOF");
	r = one_op(u, false, fd, scratch, 1, FILE_SIZE);
	CHECK(r == -ENODATA, "read at EOF: %d", r);
	r = one_op(u, false, dfd, dst, 8192, FILE_SIZE - 4096);
	CHECK(r == -ENODATA, "O_DIRECT read across EOF: %d", r);
	r = one_op(u, false, fd, scratch, 0, 0);
	CHECK(r == 0, "empty read: %d", r);
	r = one_op(u, false, dfd, dst, 4096, 0);
	CHECK(r == 0, "O_DIRECT read: %d", r);
	r = one_op(u, true, dfd, src, 4096, 0);
	CHECK(r == -EBADF, "write to a read-only fd: %d", r);

	/* freeing with operations in flight waits for them */
	for (unsigned i = 0; i < 2 * DEPTH; i++)
		CHECK(phos_uio_read(u, fd, dst + (size_t)i * MiB, MiB, (uint64_t)i * MiB, TAG(i),
				    PHOS_UIO_ASYNC) == 0, "queue");
	CHECK(phos_uio_inflight(u) > 0 && phos_uio_inflight(u) <= DEPTH, "in flight");
	phos_uio_free(u);
	close(fd);
	close(dfd);
	free(src);
	free(dst);
}

/* Short reads are resubmitted: a pipe fed in pieces by a child. */
static void test_short(void)
{
	unsigned char want[8192], got[8192];
	struct phos_uio *u;
	int p[2], r;
	pid_t pid;

	for (size_t i = 0; i < sizeof(want); i++)
		want[i] = (unsigned char)(i * 7 + 3);
	CHECK(pipe(p) == 0 && phos_uio_new(2, &u) == 0, "pipe/new");
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		for (size_t off = 0; off < sizeof(want); off += 1000) {
			size_t n = sizeof(want) - off < 1000 ? sizeof(want) - off : 1000;

			if (write(p[1], want + off, n) != (ssize_t)n)
				_exit(1);
			usleep(2000);
		}
		if (write(p[1], want, 100) != 100) /* then 100 bytes and EOF */
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	/* Valgrind does not see io_uring's kernel-side writes: start from known bytes. */
	memset(got, 0, sizeof(got));
	r = one_op(u, false, p[0], got, sizeof(got), 0);
	CHECK(r == 0 && !memcmp(want, got, sizeof(got)), "pieced read: %d", r);
	r = one_op(u, false, p[0], got, sizeof(got), 0);
	CHECK(r == -ENODATA, "read past the writer's end: %d", r);
	waitpid(pid, NULL, 0);
	close(p[0]);
	phos_uio_free(u);
}

static void test_args(void)
{
	struct phos_uio *u = NULL;
	void *tag;
	int res;

	CHECK(phos_uio_new(0, &u) == -EINVAL && !u, "depth 0");
	CHECK(phos_uio_new(4097, &u) == -EINVAL && !u, "depth 4097");
	CHECK(phos_uio_new(4096, &u) == 0, "depth 4096");
	phos_uio_free(u);
	CHECK(phos_uio_new(3, &u) == 0, "depth 3");
	CHECK(phos_uio_complete(u, false, &tag, &res) == 0, "nothing finished");
	CHECK(phos_uio_complete(u, true, &tag, &res) == 0, "nothing in flight");
	CHECK(phos_uio_read(u, -1, &res, 4, 0, NULL, 0) == -EINVAL, "bad fd");
	CHECK(phos_uio_read(u, 0, NULL, 4, 0, NULL, 0) == -EINVAL, "NULL buffer");
	CHECK(phos_uio_read(u, 0, &res, 4, 0, NULL, 1u << 5) == -EINVAL, "unknown flag");
	CHECK(phos_uio_inflight(u) == 0 && phos_uio_inflight(NULL) == 0, "inflight");
	phos_uio_free(u);
	phos_uio_free(NULL);
}

/* In a child, so that PHOS_FAULT is read there first: the third write and the
 * second read fail, the others succeed. */
static void test_fault(void)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		unsigned char buf[5][4096], back[4096], zero[4096] = { 0 };
		int results[5], fd, r;
		unsigned char seen[5] = { 0 };
		struct phos_uio *u;

		setenv("PHOS_FAULT", "uio_write:2,uio_read:1", 1);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		CHECK(fd >= 0 && phos_uio_new(2, &u) == 0, "open/new");
		for (int i = 0; i < 5; i++) {
			memset(buf[i], 'a' + i, sizeof(buf[i]));
			CHECK(phos_uio_write(u, fd, buf[i], 4096, (uint64_t)i * 4096, TAG(i), 0) == 0, "queue");
		}
		drain(u, results, seen, 5);
		for (int i = 0; i < 5; i++)
			CHECK(seen[i] && results[i] == (i == 2 ? -ENOSPC : 0), "write %d: %d", i, results[i]);
		CHECK(pread(fd, back, 4096, 2 * 4096) == 4096 && !memcmp(back, zero, 4096),
		      "the failed write wrote");
		CHECK(pread(fd, back, 4096, 3 * 4096) == 4096 && !memcmp(back, buf[3], 4096), "write 3");
		memset(back, 0, sizeof(back)); /* for valgrind, see test_short */
		r = one_op(u, false, fd, back, 4096, 0);
		CHECK(r == 0 && !memcmp(back, buf[0], 4096), "first read: %d", r);
		r = one_op(u, false, fd, back, 4096, 0);
		CHECK(r == -EIO, "second read: %d", r);
		r = one_op(u, false, fd, back, 4096, 4096);
		CHECK(r == 0 && !memcmp(back, buf[1], 4096), "third read: %d", r);
		phos_uio_free(u);
		close(fd);
		_exit(failures ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0, "fault child failed");
}

int main(void)
{
	const char *t = getenv("TMPDIR");
	struct phos_uio *u;
	int r, fd;

	r = phos_uio_new(DEPTH, &u);
	if (r == -ENOSYS || r == -EPERM) {
		fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
		return 77;
	}
	CHECK(r == 0, "phos_uio_new: %d", r);
	phos_uio_free(u);
	snprintf(path, sizeof(path), "%s/phos-uio-test-XXXXXX", t && *t ? t : "/tmp");
	fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	close(fd);
	test_fault();
	test_args();
	test_short();
	test_file();
	unlink(path);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
