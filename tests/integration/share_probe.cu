// A function for the shared-buffer tests (issue 42): "weights" built at init
// that a request reads or, when it asks, writes.
//
//   init      NBUF weight buffers of MIB MiB each, filled on the GPU (fill),
//             and a device table of their pointers (for the opaque kernel)
//   {"op":"sum","buf":k}            the weighted sum of buffer k, copied back
//                                   (nothing written on the device)
//   {"op":"bump","buf":k,"by":x}    bump_all(buf k, x): an exact kernel that
//                                   writes the buffer; then its sum
//   {"op":"bump_table","buf":k,"by":x}  bump_via_table(table, k, x): the same
//                                   through the pointer table, an opaque kernel
//   "sleep_ms": t (any op, at most 60000) holds the instance that long first;
//   "n": m sums only the first m floats of the buffer (bench/sharing.py)
//   reply {"buf":k,"sum":S}
//
// Sums are of exact small multiples of 1/1000 in double: any instance that
// saw another instance's write would answer a different sum.
//
// Usage: share_probe [NBUF (default 4)] [MIB (default 4, at most 4095)]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <phos/fn.h>
#include <unistd.h>

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

/* The buffer is read from device memory: no parameter names it (opaque). */
__global__ void bump_via_table(float **table, int k, int n, float by)
{
	float *x = table[k];

	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] += by;
}

struct state {
	int nbuf, n;
	float **buf, **table;
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

static int answer(struct phos_fn_response *resp, int code, const char *text)
{
	resp->body = strdup(text);
	resp->len = strlen(resp->body);
	return code;
}

/* The value of "key" in the (flat) JSON body: past its colon and blanks, or NULL. */
static const char *field(const char *body, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(body, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	return p;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	const char *op = field(req->body, "op"), *b = field(req->body, "buf"), *by_s = field(req->body, "by"),
		   *sl = field(req->body, "sleep_ms"), *n_s = field(req->body, "n");
	long k = b ? strtol(b, NULL, 10) : -1, ms = sl ? strtol(sl, NULL, 10) : 0;
	long n = n_s ? strtol(n_s, NULL, 10) : st->n;
	float by = by_s ? strtof(by_s, NULL) : 0.0f;
	double s = 0;
	char *out;

	if (!op || *op != '"' || k < 0 || k >= st->nbuf || n < 1 || n > st->n)
		return answer(resp, 400, "{\"error\":\"op, buf 0..NBUF-1, n 1..the buffer's floats\"}");
	op++;
	if (ms > 0 && ms <= 60000)
		usleep((useconds_t)ms * 1000);
	if (!strncmp(op, "bump_table\"", 11)) {
		bump_via_table<<<8, 128>>>(st->table, (int)k, st->n, by);
	} else if (!strncmp(op, "bump\"", 5)) {
		bump_all<<<8, 128>>>(st->buf[k], st->n, by);
	} else if (strncmp(op, "sum\"", 4)) {
		return answer(resp, 400, "{\"error\":\"op: sum, bump or bump_table\"}");
	}
	CK(cudaGetLastError());
	CK(cudaMemcpy(st->host, st->buf[k], (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		s += st->host[i] * (double)((i % 7) + 1);
	if (asprintf(&out, "{\"buf\":%ld,\"sum\":%.17g}", k, s) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	int mib = argc > 2 ? atoi(argv[2]) : 4;

	st.nbuf = argc > 1 ? atoi(argv[1]) : 4;
	if (st.nbuf < 1 || st.nbuf > 256 || mib < 1 || mib > 4095) {
		fprintf(stderr, "usage: share_probe [NBUF 1..256] [MIB 1..4095]\n");
		return 2;
	}
	st.n = (int)((size_t)mib * (1 << 20) / sizeof(float));
	st.buf = (float **)calloc((size_t)st.nbuf, sizeof(*st.buf));
	st.host = (float *)malloc((size_t)st.n * sizeof(float));
	for (int i = 0; i < st.nbuf; i++) {
		CK(cudaMalloc(&st.buf[i], (size_t)st.n * sizeof(float)));
		fill<<<16, 256>>>(st.buf[i], st.n, 1u + (unsigned)i);
	}
	CK(cudaMalloc(&st.table, (size_t)st.nbuf * sizeof(float *)));
	CK(cudaMemcpy(st.table, st.buf, (size_t)st.nbuf * sizeof(float *), cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize());
	return phos_fn_serve(handle, &st);
}
