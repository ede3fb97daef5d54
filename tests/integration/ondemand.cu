// A function with many GPU buffers built at init, for the on-demand restore
// test: a request names one buffer ("7"), the handler runs a kernel on that
// buffer alone (read+write set: that buffer), copies it back and answers its
// weighted sum. So a restored copy touches only the buffer it is asked for.
//
// Usage: ondemand [NBUF (default 16)] [MIB per buffer (default 2)] [SEED] [NZERO]
// NZERO > 0: the last NZERO buffers hold zeros only, and buffer 0 zeros in its
// second half (a restore from a hot snapshot sets such 4 MiB chunks on the
// device instead of copying them: exec_hot.c).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <phos/fn.h>

__global__ void fill(float *x, int n, unsigned seed)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = (float)((i * 2654435761u + seed) % 1000u) * 0.001f;
}

__global__ void bump_all(float *x, int n, float by)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] += by;
}

struct state {
	int nbuf, n;
	float **buf;
	float *host;
};

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char *end, *out;
	long i = strtol(req->body, &end, 10);
	double s = 0;

	if (end == req->body || i < 0 || i >= st->nbuf) {
		resp->body = strdup("{\"error\":\"name a buffer: 0..NBUF-1\"}");
		resp->len = strlen(resp->body);
		return 400;
	}
	bump_all<<<8, 128>>>(st->buf[i], st->n, 0.0f);   /* touches buffer i on the device */
	CK(cudaGetLastError());
	CK(cudaMemcpy(st->host, st->buf[i], (size_t)st->n * sizeof(float), cudaMemcpyDeviceToHost));
	for (int k = 0; k < st->n; k++)
		s += st->host[k] * (double)((k % 7) + 1);
	if (asprintf(&out, "{\"buf\":%ld,\"sum\":%.17g}", i, s) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	int mib = argc > 2 ? atoi(argv[2]) : 2;
	unsigned seed = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
	int nzero = argc > 4 ? atoi(argv[4]) : 0;

	st.nbuf = argc > 1 ? atoi(argv[1]) : 16;
	if (st.nbuf < 1 || st.nbuf > 4096 || mib < 1 || mib > 4096 || nzero < 0 || nzero >= st.nbuf) {
		fprintf(stderr, "usage: ondemand [NBUF 1..4096] [MIB 1..4096] [SEED] [NZERO 0..NBUF-1]\n");
		return 2;
	}
	st.n = (int)((size_t)mib * (1 << 20) / sizeof(float));
	st.buf = (float **)calloc((size_t)st.nbuf, sizeof(*st.buf));
	st.host = (float *)malloc((size_t)st.n * sizeof(float));
	for (int i = 0; i < st.nbuf; i++) {
		CK(cudaMalloc(&st.buf[i], (size_t)st.n * sizeof(float)));
		if (i >= st.nbuf - nzero) {
			CK(cudaMemset(st.buf[i], 0, (size_t)st.n * sizeof(float)));
			continue;
		}
		fill<<<16, 256>>>(st.buf[i], st.n, seed + (unsigned)i);
		if (i == 0 && nzero)
			CK(cudaMemset(st.buf[i] + st.n / 2, 0, (size_t)(st.n - st.n / 2) * sizeof(float)));
	}
	CK(cudaDeviceSynchronize());
	return phos_fn_serve(handle, &st);
}
