/* SPDX-License-Identifier: MIT */
/*
 * session: GPU-resident state that lives on across calls, as a chat session's
 * KV cache or a game's world does (issue 13: what a migration must carry).
 *
 *   init:    --state-mib M MiB (default 64, at most 65536) of 32-bit words in
 *            blocks of --block-mib B MiB (default 64: a paged KV cache's
 *            blocks; each its own allocation), word i = i % 65536
 *            (session_fill), and a call counter, both in device memory
 *   request: {"write_kib": K} (default --write-kib, 64; 0..1048576)
 *   call c:  session_bump adds 1 to K KiB of words starting at word
 *            (c - 1) * K * 256 (wrapping around the state), one launch per
 *            block it touches (each launch's write set is that block: a
 *            call dirties only the blocks it writes), and counts the call
 *            on the device; sum_direct sums every block
 *   reply:   {"counter": c, "cpu_counter": c, "sum": S, "expected": E,
 *            "max_abs_err", "tol": 0, "ok": S == E and both counters agree}
 *
 * The words stay below 2^32 for 2^16 calls of the whole state, so the sum
 * after a call is the first sum plus K*256 per call (E, kept by the CPU):
 * the GPU state, the CPU state and a client's count must agree exactly,
 * after any number of snapshots, checkpoints and migrations.
 *
 * Usage: session [--state-mib M] [--block-mib B] [--write-kib K]
 */
#include <cuda_runtime.h>

#include "example.h"
#include "int_sum.cuh"

#define THREADS 256
#define BLOCKS 1024
#define MAX_STATE_MIB 65536
#define MAX_WRITE_KIB (1u << 20)
#define MAX_BLOCKS 65536

__global__ void session_fill(unsigned *s, unsigned long long n)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s[i] = (unsigned)(i % 65536);
}

/* Adds 1 to s[start, start + len) of a block of n words (start + len <= n),
 * and count to the call counter. */
__global__ void session_bump(unsigned *s, unsigned long long n, unsigned long long start, unsigned long long len,
			     unsigned long long *counter, int count)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < len;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s[start + i] += 1;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*counter += count;
}

struct session {
	unsigned **d_block;                /* nblocks blocks of block_words words */
	unsigned long long nblocks, block_words;
	unsigned long long words;
	unsigned long long *d_counter, *d_sum;
	unsigned long long calls;          /* CPU state */
	unsigned long long expected;       /* the sum after `calls` calls */
	unsigned long long write_kib;
};

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	static const char *const known[] = { "write_kib", NULL };
	struct session *s = (struct session *)arg;
	unsigned long long counter = 0, sum = 0, len, start;
	struct ex_err err;
	long long kib;
	json_t *root = ex_request_parse(req, &err);

	if (!root)
		return ex_reply_error(resp, 400, err.msg);
	if (ex_request_known(root, known, &err) ||
	    ex_request_int(root, "write_kib", (long long)s->write_kib, 0, MAX_WRITE_KIB, &kib, NULL, &err)) {
		json_decref(root);
		return ex_reply_error(resp, 400, err.msg);
	}
	json_decref(root);
	len = (unsigned long long)kib * 256;
	if (len > s->words)
		len = s->words;
	start = (s->calls * len) % s->words;
	/* the window, block by block (wrapping around the state); the counter once */
	for (unsigned long long done = 0, k = 0; done < len || k == 0; k++) {
		unsigned long long w = (start + done) % s->words, b = w / s->block_words, in = w % s->block_words;
		unsigned long long seg = len - done < s->block_words - in ? len - done : s->block_words - in;

		LAUNCH_TRY(&err, session_bump<<<BLOCKS, THREADS>>>(s->d_block[b], s->block_words, in, seg, s->d_counter,
								   k == 0));
		done += seg;
		if (len == 0)
			break;
	}
	CUDA_TRY(&err, cudaMemset(s->d_sum, 0, sizeof(sum)));
	for (unsigned long long b = 0; b < s->nblocks; b++)
		LAUNCH_TRY(&err, sum_direct<<<BLOCKS, THREADS>>>(s->d_block[b], s->block_words, s->d_sum));
	CUDA_TRY(&err, cudaMemcpy(&sum, s->d_sum, sizeof(sum), cudaMemcpyDeviceToHost));
	CUDA_TRY(&err, cudaMemcpy(&counter, s->d_counter, sizeof(counter), cudaMemcpyDeviceToHost));
	s->calls++;
	s->expected += len;
	{
		double diff = sum > s->expected ? (double)(sum - s->expected) : (double)(s->expected - sum);

		return ex_reply(resp, json_pack("{s:I,s:I,s:I,s:I,s:f,s:f,s:b}", "counter", (json_int_t)counter,
						"cpu_counter", (json_int_t)s->calls, "sum", (json_int_t)sum, "expected",
						(json_int_t)s->expected, "max_abs_err", diff, "tol", 0.0, "ok",
						sum == s->expected && counter == s->calls), 0);
	}
fail:
	return ex_reply_error(resp, 500, err.msg);
}

int main(int argc, char **argv)
{
	unsigned long long mib = 64, block_mib = 64, write_kib = 64;
	struct session s;
	struct ex_err err;

	memset(&s, 0, sizeof(s));
	for (int i = 1; i < argc; i++) {
		int bad;

		if (strcmp(argv[i], "--state-mib") == 0)
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_STATE_MIB, &mib, &err);
		else if (strcmp(argv[i], "--block-mib") == 0)
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_STATE_MIB, &block_mib, &err);
		else if (strcmp(argv[i], "--write-kib") == 0)
			bad = ex_arg_u64(argc, argv, &i, 0, MAX_WRITE_KIB, &write_kib, &err);
		else {
			ex_err_set(&err, "unknown argument \"%s\"; usage: session [--state-mib M] [--block-mib B] [--write-kib K]", argv[i]);
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "session: %s\n", err.msg);
			return 2;
		}
	}
	if (mib % block_mib || mib / block_mib > MAX_BLOCKS) {
		fprintf(stderr, "session: --state-mib must be a multiple of --block-mib, in at most %d blocks\n", MAX_BLOCKS);
		return 2;
	}
	s.nblocks = mib / block_mib;
	s.block_words = block_mib * (1ull << 20) / sizeof(unsigned);
	s.words = s.nblocks * s.block_words;
	s.write_kib = write_kib;
	/* the first sum: 65536-word periods of 0..65535 in every block (blocks are whole periods) */
	s.expected = (s.words / 65536) * (65536ull * 65535 / 2);
	s.d_block = (unsigned **)calloc(s.nblocks, sizeof(unsigned *));
	if (!s.d_block) {
		fprintf(stderr, "session: out of memory\n");
		return 1;
	}
	for (unsigned long long b = 0; b < s.nblocks; b++) {
		CUDA_TRY(&err, cudaMalloc(&s.d_block[b], s.block_words * sizeof(unsigned)));
		LAUNCH_TRY(&err, session_fill<<<BLOCKS, THREADS>>>(s.d_block[b], s.block_words));
	}
	CUDA_TRY(&err, cudaMalloc(&s.d_counter, sizeof(unsigned long long)));
	CUDA_TRY(&err, cudaMalloc(&s.d_sum, sizeof(unsigned long long)));
	CUDA_TRY(&err, cudaMemset(s.d_counter, 0, sizeof(unsigned long long)));
	CUDA_TRY(&err, cudaDeviceSynchronize());
	return phos_fn_serve(handle, &s) ? 1 : 0;
fail:
	fprintf(stderr, "session: init failed: %s\n", err.msg);
	return 1;
}
