/* SPDX-License-Identifier: MIT */
/*
 * The sim device's NCCL (runtime/device/sim/nccl_sim.c) without executors: ranks are
 * forked processes calling the backend on their own host buffers.
 *
 * - 3 ranks: sums over several steps (more than one slot), wrapping int8
 *   products, int64 minimum, bf16 sums, fp16 averages, broadcast, reduce,
 *   all-gather, reduce-scatter, a send/recv ring in a group;
 * - an id not made by the sim, too many ranks: ncclInvalidArgument;
 * - a peer that never joins: ncclSystemError after PHOS_NCCL_TIMEOUT_MS, no
 *   segment left behind;
 * - a peer that exits (a zombie until reaped): ncclRemoteError at once.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "nccl_dev.h"

static const struct phos_nccl_ops *nc = &phos_nccl_sim;

static int coll(void *comm, int kind, int type, int op, int peer, uint64_t count, const void *send, void *recv)
{
	struct phos_nccl_coll k = { .kind = kind, .type = type, .op = op, .peer = peer, .count = count,
				    .send = (uint64_t)(uintptr_t)send, .recv = (uint64_t)(uintptr_t)recv };

	return nc->coll(comm, &k, NULL);
}

static uint16_t bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	return (uint16_t)(x >> 16);   /* exact for the values used */
}

/* One rank of three: its failures, as the exit status. */
static int rank_main(const uint8_t *id, int rank, int n)
{
	struct phos_nccl_params p = { .nranks = n, .rank = rank, .blocking = -1 };
	const size_t N = 200000;   /* 800 KB of floats: several 256 KiB steps */
	float *a = malloc(N * 4 * n), *b = malloc(N * 4 * n);
	void *comm = NULL;

	CHECK(nc->init(id, &p, &comm) == 0, "rank %d init", rank);
	if (!comm)
		return 1;
	for (size_t i = 0; i < N; i++)
		a[i] = (float)(rank + 1) * (float)(i % 101);
	CHECK(coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_FLOAT32, PHOS_NCCL_SUM, 0, N, a, b) == 0, "allreduce");
	CHECK(b[0] == 0 && b[N - 1] == 6.0f * (float)((N - 1) % 101) && b[12345] == 6.0f * (12345 % 101),
	      "allreduce sum: %g", b[N - 1]);

	{
		int8_t x[4] = { 100, -3, 7, (int8_t)(rank + 1) }, y[4];

		CHECK(coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_INT8, PHOS_NCCL_PROD, 0, 4, x, y) == 0, "prod");
		CHECK(y[0] == 64 /* 10^6 mod 256 */ && y[1] == -27 &&
		      y[3] == 6, "int8 prod wraps: %d %d %d", y[0], y[1], y[3]);
	}
	{
		int64_t x[2] = { -(int64_t)rank * 5000000000ll, rank }, y[2];

		CHECK(coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_INT64, PHOS_NCCL_MIN, 0, 2, x, y) == 0, "min");
		CHECK(y[0] == -10000000000ll && y[1] == 0, "int64 min");
	}
	{
		uint16_t x[3] = { bf16(1.5f), bf16(-2.0f), bf16(256.0f) }, y[3];

		CHECK(coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_BFLOAT16, PHOS_NCCL_SUM, 0, 3, x, y) == 0, "bf16");
		CHECK(y[0] == bf16(4.5f) && y[1] == bf16(-6.0f) && y[2] == bf16(768.0f), "bf16 sum %#x", y[0]);
	}
	{
		uint16_t x = (uint16_t)(0x3c00 + (rank << 10)), y = 0;   /* 1, 2, 4 */

		CHECK(coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_FLOAT16, PHOS_NCCL_AVG, 0, 1, &x, &y) == 0, "f16");
		/* (1 + 2 + 4) / 3 = 2.3333: fp16 0x40ab (mantissa 170.67 rounds up) */
		CHECK(y == 0x40ab, "fp16 avg %#x", y);
	}
	/* broadcast from rank 2, reduce (max) to rank 1 */
	CHECK(coll(comm, PHOS_NCCL_BROADCAST, PHOS_NCCL_FLOAT32, 0, 2, N, a, b) == 0, "broadcast");
	CHECK(b[100] == 3.0f * 100, "broadcast value %g", b[100]);
	b[7] = -1;
	CHECK(coll(comm, PHOS_NCCL_REDUCE, PHOS_NCCL_FLOAT32, PHOS_NCCL_MAX, 1, N, a, b) == 0, "reduce");
	CHECK(rank == 1 ? b[7] == 21.0f : b[7] == -1.0f, "reduce writes at the root only: %g", b[7]);
	/* all-gather, in place */
	for (size_t i = 0; i < N; i++)
		b[rank * N + i] = (float)(rank * 10 + (int)(i % 3));
	CHECK(coll(comm, PHOS_NCCL_ALL_GATHER, PHOS_NCCL_FLOAT32, 0, 0, N, b + rank * N, b) == 0, "allgather");
	for (int r = 0; r < n; r++)
		CHECK(b[r * N + 4] == (float)(r * 10 + 1) && b[r * N + N - 1] == (float)(r * 10 + (int)((N - 1) % 3)),
		      "allgather block %d", r);
	/* reduce-scatter: block d of each rank's send holds d + rank */
	for (int d = 0; d < n; d++)
		for (size_t i = 0; i < N; i++)
			a[d * N + i] = (float)(d + rank);
	CHECK(coll(comm, PHOS_NCCL_REDUCE_SCATTER, PHOS_NCCL_FLOAT32, PHOS_NCCL_SUM, 0, N, a, b) == 0, "rs");
	CHECK(b[0] == (float)(3 * rank + 3) && b[N - 1] == (float)(3 * rank + 3), "reduce-scatter %g", b[0]);
	/* a ring of sends and receives, in a group (each alone would wait forever) */
	for (size_t i = 0; i < N; i++)
		a[i] = (float)rank + (float)i;
	nc->group_start();
	CHECK(coll(comm, PHOS_NCCL_SEND, PHOS_NCCL_FLOAT32, 0, (rank + 1) % n, N, a, NULL) == 0, "send");
	CHECK(coll(comm, PHOS_NCCL_RECV, PHOS_NCCL_FLOAT32, 0, (rank + n - 1) % n, N, NULL, b) == 0, "recv");
	CHECK(nc->group_end() == 0, "group end");
	CHECK(b[9] == (float)((rank + n - 1) % n) + 9.0f && b[N - 1] == (float)((rank + n - 1) % n) + (float)(N - 1),
	      "ring: got %g", b[9]);
	CHECK(nc->group_end() == PHOS_NCCL_INVALID_USAGE, "group end without a start");
	nc->destroy(comm);
	free(a);
	free(b);
	return failures;
}

static int segments(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += strncmp(e->d_name, "phos-nccl-", 10) == 0;
	closedir(d);
	return n;
}

int main(void)
{
	uint8_t id[PHOS_NCCL_ID_BYTES];
	struct phos_nccl_params p = { .nranks = 3, .blocking = -1 };
	void *comm = NULL;
	int before = segments();
	pid_t kids[3];

	setenv("PHOS_NCCL_TIMEOUT_MS", "10000", 1);
	CHECK(nc->unique_id(id) == 0, "unique id");
	for (int r = 0; r < 3; r++) {
		kids[r] = fork();
		if (kids[r] == 0)
			_exit(rank_main(id, r, 3) ? 1 : 0);
	}
	for (int r = 0; r < 3; r++) {
		int st = 0;

		waitpid(kids[r], &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d of 3 failed (%#x)", r, st);
	}

	/* bad ids and sizes */
	{
		uint8_t bad[PHOS_NCCL_ID_BYTES] = { 1, 2, 3 };

		CHECK(nc->init(bad, &p, &comm) == PHOS_NCCL_INVALID_ARGUMENT, "a foreign id is refused");
		p.nranks = 9;
		CHECK(nc->init(id, &p, &comm) == PHOS_NCCL_INVALID_ARGUMENT, "9 ranks are refused");
	}

	/* a peer that never comes: an error after the timeout, nothing left behind */
	{
		struct timespec t0, t1;

		setenv("PHOS_NCCL_TIMEOUT_MS", "300", 1);
		nc->unique_id(id);
		p.nranks = 2;
		p.rank = 0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		CHECK(nc->init(id, &p, &comm) == PHOS_NCCL_SYSTEM_ERROR, "init alone times out");
		clock_gettime(CLOCK_MONOTONIC, &t1);
		CHECK(t1.tv_sec - t0.tv_sec < 5, "... in bounded time");
		CHECK(segments() == before, "no segment left after a failed init");
	}

	/* a peer that exits after joining: ncclRemoteError, at once */
	{
		pid_t kid;
		float x = 1, y = 0;
		int st, r;

		setenv("PHOS_NCCL_TIMEOUT_MS", "20000", 1);
		nc->unique_id(id);
		kid = fork();
		if (kid == 0) {
			struct phos_nccl_params q = { .nranks = 2, .rank = 1, .blocking = -1 };
			void *c = NULL;

			_exit(nc->init(id, &q, &c) == 0 ? 0 : 1);   /* joins, then dies */
		}
		p.rank = 0;
		CHECK(nc->init(id, &p, &comm) == 0, "init with the short-lived peer");
		usleep(100000);   /* it has exited: a zombie until waited for */
		r = coll(comm, PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_FLOAT32, PHOS_NCCL_SUM, 0, 1, &x, &y);
		CHECK(r == PHOS_NCCL_REMOTE_ERROR, "a dead peer gives ncclRemoteError, got %d", r);
		CHECK(nc->async_error(comm, &st) == 0 && st == PHOS_NCCL_REMOTE_ERROR, "and an async error");
		nc->abort(comm);
		waitpid(kid, &st, 0);
	}

	/* nonblocking: both ranks in this process, driven from this one thread
	 * (as the executor's dispatcher drives ranks that are threads of one
	 * function): every call answers ncclInProgress at once, async_error
	 * answers it until the work is done */
	{
		struct phos_nccl_params q[2] = { { .nranks = 2, .rank = 0, .blocking = 0 },
						 { .nranks = 2, .rank = 1, .blocking = 0 } };
		void *c[2] = { NULL, NULL };
		float x[2][4], y[2][4];
		int st;

		setenv("PHOS_NCCL_TIMEOUT_MS", "10000", 1);
		nc->unique_id(id);
		for (int r = 0; r < 2; r++)
			CHECK(nc->init(id, &q[r], &c[r]) == PHOS_NCCL_IN_PROGRESS && c[r], "nonblocking init %d", r);
		for (int r = 0; r < 2; r++) {
			while (nc->async_error(c[r], &st) == 0 && st == PHOS_NCCL_IN_PROGRESS)
				usleep(100);
			CHECK(st == 0, "rank %d joined: %d", r, st);
		}
		for (int r = 0; r < 2; r++)
			for (int i = 0; i < 4; i++)
				x[r][i] = (float)(10 * r + i);
		for (int r = 0; r < 2; r++)
			CHECK(coll(c[r], PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_FLOAT32, PHOS_NCCL_SUM, 0, 4, x[r], y[r]) ==
				      PHOS_NCCL_IN_PROGRESS, "nonblocking all-reduce %d", r);
		for (int r = 0; r < 2; r++) {
			while (nc->async_error(c[r], &st) == 0 && st == PHOS_NCCL_IN_PROGRESS)
				usleep(100);
			CHECK(st == 0 && y[r][0] == 10.0f && y[r][3] == 16.0f, "rank %d: %d, sum %g %g", r, st, y[r][0],
			      y[r][3]);
		}
		/* each rank's group alone (a thread's own group): ncclInProgress, then the ring */
		for (int r = 0; r < 2; r++) {
			CHECK(nc->group_start() == 0, "group start");
			coll(c[r], PHOS_NCCL_SEND, PHOS_NCCL_FLOAT32, 0, 1 - r, 4, x[r], NULL);
			coll(c[r], PHOS_NCCL_RECV, PHOS_NCCL_FLOAT32, 0, 1 - r, 4, NULL, y[r]);
			CHECK(nc->group_end() == PHOS_NCCL_IN_PROGRESS, "group end of rank %d in progress", r);
		}
		for (int r = 0; r < 2; r++) {
			while (nc->async_error(c[r], &st) == 0 && st == PHOS_NCCL_IN_PROGRESS)
				usleep(100);
			CHECK(st == 0 && y[r][1] == x[1 - r][1], "rank %d received %g", r, y[r][1]);
		}
		/* a rank whose peer never joins: in progress, a call on it refused
		 * meanwhile, and abort ends its join at once */
		nc->unique_id(id);
		CHECK(nc->init(id, &q[1], &c[1]) == PHOS_NCCL_IN_PROGRESS, "a lone nonblocking join");
		CHECK(nc->async_error(c[1], &st) == 0 && st == PHOS_NCCL_IN_PROGRESS, "still joining");
		CHECK(coll(c[1], PHOS_NCCL_ALL_REDUCE, PHOS_NCCL_FLOAT32, PHOS_NCCL_SUM, 0, 4, x[1], y[1]) ==
			      PHOS_NCCL_INVALID_USAGE, "a call while its join is in progress is refused");
		nc->abort(c[1]);
		nc->destroy(c[0]);
	}
	CHECK(segments() == before, "no segments left");
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
