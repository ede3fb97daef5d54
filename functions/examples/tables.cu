/* SPDX-License-Identifier: MIT */
/*
 * tables: indirect access through a pointer table kept in device memory, the
 * case parameter-based speculation cannot see (issue 9).
 *
 *   init:    --tables N (default 8, at most 64) tables of --table-mib M MiB
 *            (default 4, at most 4096) each, filled on the GPU by fill_table
 *            (an exact kernel); a device array d_tabs[N] of the tables' device
 *            pointers, uploaded with cudaMemcpy.
 *   request: {"table": k, "direct": false} (defaults)
 *
 *       sum_table(d_tabs, k, n, d_sum)      the kernel reads d_tabs[k] from
 *         └─ tabs[k][i] for every i           device memory, then the table:
 *                                             OPAQUE (ptx_access.h)
 *       "direct": true → sum_direct(d_table[k], n, d_sum): the same sum with
 *                        the table as a parameter: EXACT
 *
 *   reply:   {"table":k,"sum":S,"expected":E,"max_abs_err":|S-E|,"tol":0,"ok":S==E}
 *
 * Values are integers and the sum is a 64-bit integer, so GPU, sim twin and CPU
 * reference agree exactly whatever the summation order. Under on-demand
 * restore sum_table must wait for the whole restore: a table that was not
 * restored yet would give a wrong sum with HTTP 200.
 *
 * Usage: tables [--tables N] [--table-mib M]
 */
#include <cuda_runtime.h>

#include "example.h"
#include "int_sum.cuh"

#define THREADS 256
#define BLOCKS 1024
#define MAX_TABLES 64
#define MAX_TABLE_MIB 4096

/* The value of element i of table k (mirrored in sim_twins.c). */
__host__ __device__ static inline unsigned table_value(unsigned k, unsigned long long i)
{
	return (unsigned)((k + 1) * 2654435761u) ^ (unsigned)(i * 40503u) ^ (unsigned)(i >> 7);
}

__global__ void fill_table(unsigned *t, unsigned long long n, unsigned k)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		t[i] = table_value(k, i);
}

__global__ void sum_table(unsigned *const *tabs, int k, unsigned long long n, unsigned long long *sum)
{
	const unsigned *t = tabs[k];
	unsigned long long s = 0;

	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s += t[i];
	atomicAdd(sum, s);
}

struct tables {
	int ntables;
	unsigned long long elems;            /* per table */
	unsigned *d_table[MAX_TABLES];
	unsigned **d_tabs;                   /* device copy of d_table */
	unsigned long long *d_sum;
	unsigned long long expected[MAX_TABLES];
};

static void tables_free(struct tables *t)
{
	for (int k = 0; k < t->ntables; k++)
		cudaFree(t->d_table[k]);
	cudaFree(t->d_tabs);
	cudaFree(t->d_sum);
	memset(t, 0, sizeof(*t));
}

static int tables_init(struct tables *t, int ntables, unsigned long long mib, struct ex_err *err)
{
	memset(t, 0, sizeof(*t));
	t->ntables = ntables;
	t->elems = mib * (1ull << 20) / sizeof(unsigned);
	for (int k = 0; k < ntables; k++) {
		CUDA_TRY(err, cudaMalloc(&t->d_table[k], t->elems * sizeof(unsigned)));
		LAUNCH_TRY(err, fill_table<<<BLOCKS, THREADS>>>(t->d_table[k], t->elems, (unsigned)k));
		t->expected[k] = 0;
		for (unsigned long long i = 0; i < t->elems; i++)
			t->expected[k] += table_value((unsigned)k, i);
	}
	CUDA_TRY(err, cudaMalloc(&t->d_tabs, ntables * sizeof(unsigned *)));
	CUDA_TRY(err, cudaMemcpy(t->d_tabs, t->d_table, ntables * sizeof(unsigned *), cudaMemcpyHostToDevice));
	CUDA_TRY(err, cudaMalloc(&t->d_sum, sizeof(unsigned long long)));
	CUDA_TRY(err, cudaDeviceSynchronize());
	return 0;
fail:
	tables_free(t);
	return -1;
}

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	static const char *const known[] = { "table", "direct", NULL };
	struct tables *t = (struct tables *)state;
	unsigned long long sum = 0;
	struct ex_err err;
	long long k;
	bool direct;
	json_t *root = ex_request_parse(req, &err);

	if (!root)
		return ex_reply_error(resp, 400, err.msg);
	if (ex_request_known(root, known, &err) || ex_request_int(root, "table", 0, 0, t->ntables - 1, &k, NULL, &err) ||
	    ex_request_bool(root, "direct", false, &direct, &err)) {
		json_decref(root);
		return ex_reply_error(resp, 400, err.msg);
	}
	json_decref(root);

	CUDA_TRY(&err, cudaMemset(t->d_sum, 0, sizeof(sum)));
	if (direct)
		LAUNCH_TRY(&err, sum_direct<<<BLOCKS, THREADS>>>(t->d_table[k], t->elems, t->d_sum));
	else
		LAUNCH_TRY(&err, sum_table<<<BLOCKS, THREADS>>>(t->d_tabs, (int)k, t->elems, t->d_sum));
	CUDA_TRY(&err, cudaMemcpy(&sum, t->d_sum, sizeof(sum), cudaMemcpyDeviceToHost));
	{
		unsigned long long want = t->expected[k];
		double diff = sum > want ? (double)(sum - want) : (double)(want - sum);

		return ex_reply(resp, json_pack("{s:I, s:b, s:I, s:I, s:f, s:f, s:b}", "table", (json_int_t)k, "direct", direct, "sum",
						(json_int_t)sum, "expected", (json_int_t)want, "max_abs_err", diff,
						"tol", 0.0, "ok", sum == want), 0);
	}
fail:
	return ex_reply_error(resp, 500, err.msg);
}

int main(int argc, char **argv)
{
	unsigned long long ntables = 8, mib = 4;
	struct tables t;
	struct ex_err err;
	int rc;

	for (int i = 1; i < argc; i++) {
		int bad;

		if (strcmp(argv[i], "--tables") == 0)
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_TABLES, &ntables, &err);
		else if (strcmp(argv[i], "--table-mib") == 0)
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_TABLE_MIB, &mib, &err);
		else {
			ex_err_set(&err, "unknown argument \"%s\"; usage: tables [--tables N] [--table-mib M]", argv[i]);
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "tables: %s\n", err.msg);
			return 2;
		}
	}
	if (tables_init(&t, (int)ntables, mib, &err)) {
		fprintf(stderr, "tables: init failed: %s\n", err.msg);
		return 1;
	}
	rc = phos_fn_serve(handle, &t);
	tables_free(&t);
	return rc ? 1 : 0;
}
