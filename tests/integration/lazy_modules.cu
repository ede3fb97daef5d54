// Two translation units, two fatbins (lazy_other.cu is the second): this one
// is used, the other never is. Its module also holds a __device__ variable
// that the host never names. test_lazy_modules.py checks that a snapshot
// holds the used module with every kernel and variable of it, and nothing of
// the other (CUDA_MODULE_LOADING=EAGER: both), and that the restored
// function computes as before.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <phos/fn.h>

__device__ int lz_counter;   // never named by the host

__global__ void lz_fill(int *x, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = 3 * i + 1;
}

__global__ void lz_idle(int *x)
{
	x[0] = 0;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

struct state {
	int n;
	int *buf, *host;
};

static int handle(void *p, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)p;
	long sum = 0;
	char *out;

	lz_fill<<<4, 128>>>(st->buf, st->n);
	CK(cudaGetLastError());
	CK(cudaMemcpy(st->host, st->buf, (size_t)st->n * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < st->n; i++)
		sum += st->host[i];
	if (asprintf(&out, "{\"sum\":%ld}", sum) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static struct state st;

	st.n = 1000;
	st.host = (int *)malloc((size_t)st.n * sizeof(int));
	CK(cudaMalloc(&st.buf, (size_t)st.n * sizeof(int)));
	CK(cudaMemset(st.buf, 0, (size_t)st.n * sizeof(int)));
	lz_fill<<<4, 128>>>(st.buf, st.n);   // init uses this module before the snapshot
	CK(cudaDeviceSynchronize());
	return phos_fn_serve(handle, &st);
}
