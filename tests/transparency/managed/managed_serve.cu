// SPDX-License-Identifier: MIT
// A function that keeps its state in managed memory: init fills a table
// there; each request runs a kernel over it that adds the request count, and
// answers the checksum the host computes from the same memory. Snapshotted
// at phos_fn_serve and restored, the table and the counter must come back.
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <cuda_runtime.h>

#include <phos/fn.h>

static const int N = 1 << 16;

struct state {
	float *table;   // managed
	int *calls;     // managed
};

__global__ void mg_serve_step(float *t, int n, const int *calls)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		t[i] += (float)*calls;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	double sum = 0, want = 0;
	char out[160];

	(void)req;
	(*st->calls)++;
	mg_serve_step<<<(N + 255) / 256, 256>>>(st->table, N, st->calls);
	if (cudaDeviceSynchronize() != cudaSuccess)
		return -1;
	// table[i] = (i % 13) + 1 + 2 + ... + calls
	long tri = (long)*st->calls * (*st->calls + 1) / 2;
	for (int i = 0; i < N; i++) {
		sum += st->table[i];
		want += (double)(i % 13) + (double)tri;
	}
	snprintf(out, sizeof(out), "{\"ok\":%s,\"calls\":%d,\"sum\":%.1f}", sum == want ? "true" : "false",
		 *st->calls, sum);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static state st;

	if (cudaMallocManaged(&st.table, N * sizeof(float)) != cudaSuccess ||
	    cudaMallocManaged(&st.calls, sizeof(int)) != cudaSuccess) {
		fprintf(stderr, "cudaMallocManaged: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	for (int i = 0; i < N; i++)
		st.table[i] = (float)(i % 13);
	*st.calls = 0;
	return phos_fn_serve(handle, &st);
}
