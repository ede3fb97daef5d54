// A function whose GPU buffers, device variable, streams, events, cuBLAS handle,
// pinned host memory and CPU variables all hold state built at init. Each
// request reports all of it value by value and then changes it, so a restored
// copy must answer exactly like the original process would have.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <phos/fn.h>

__device__ float dev_scale;

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
	int n_small, n_big;
	float *small, *big, *tiny;
	float *pinned;
	cudaStream_t stream;
	cudaEvent_t ev;
	cublasHandle_t blas;
	long counter;              /* CPU state */
	double *cpu_table;         /* CPU heap state */
	unsigned seed;
};

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static double sum_device(const float *d, int n, float *host)
{
	double s = 0;

	CK(cudaMemcpy(host, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		s += host[i] * (double)((i % 7) + 1);
	return s;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	float *host = (float *)malloc((size_t)st->n_big * sizeof(float));
	float scale = 0, dot = 0;
	double cpu = 0, pinned = 0;
	char *out;

	(void)req;
	CK(cudaMemcpyFromSymbol(&scale, dev_scale, sizeof(float)));
	for (int i = 0; i < 1000; i++)
		cpu += st->cpu_table[i];
	for (int i = 0; i < 1024; i++)
		pinned += st->pinned[i];
	if (cublasSdot(st->blas, st->n_small, st->small, 1, st->small, 1, &dot) != CUBLAS_STATUS_SUCCESS)
		return 500;
	double s_small = sum_device(st->small, st->n_small, host);
	double s_big = sum_device(st->big, st->n_big, host);
	double s_tiny = sum_device(st->tiny, 16, host);
	if (asprintf(&out, "{\"counter\":%ld,\"cpu\":%.17g,\"pinned\":%.17g,\"scale\":%.9g,\"dot\":%.9g,"
			   "\"small\":%.17g,\"big\":%.17g,\"tiny\":%.17g}",
		     st->counter, cpu, pinned, scale, dot, s_small, s_big, s_tiny) < 0)
		return 500;
	/* Change everything for the next request. */
	st->counter++;
	st->cpu_table[st->counter % 1000] += 1.5;
	st->pinned[st->counter % 1024] += 2.0f;
	bump_all<<<8, 128, 0, st->stream>>>(st->small, st->n_small, 0.25f);
	CK(cudaEventRecord(st->ev, st->stream));
	CK(cudaEventSynchronize(st->ev));
	scale *= 1.5f;
	CK(cudaMemcpyToSymbol(dev_scale, &scale, sizeof(float)));
	CK(cudaMemcpyAsync(st->tiny, st->pinned, 16 * sizeof(float), cudaMemcpyHostToDevice, st->stream));
	CK(cudaStreamSynchronize(st->stream));
	free(host);
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	float scale = 3.0f;

	st.seed = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
	st.n_small = 1 << 16;
	st.n_big = (5 << 20) / 4; /* 5 MiB: whole 2 MiB chunks */
	CK(cudaStreamCreateWithPriority(&st.stream, cudaStreamNonBlocking, -1));
	CK(cudaEventCreateWithFlags(&st.ev, cudaEventDisableTiming));
	CK(cudaMalloc(&st.small, (size_t)st.n_small * sizeof(float)));
	CK(cudaMalloc(&st.big, (size_t)st.n_big * sizeof(float)));
	CK(cudaMalloc(&st.tiny, 16 * sizeof(float)));
	CK(cudaMallocHost(&st.pinned, 1024 * sizeof(float)));
	fill<<<16, 256, 0, st.stream>>>(st.small, st.n_small, st.seed);
	float *h = (float *)malloc((size_t)st.n_big * sizeof(float));
	for (int i = 0; i < st.n_big; i++)
		h[i] = (float)((i * 7 + st.seed) % 113);
	CK(cudaMemcpy(st.big, h, (size_t)st.n_big * sizeof(float), cudaMemcpyHostToDevice));
	free(h);
	for (int i = 0; i < 1024; i++)
		st.pinned[i] = (float)(i % 17);
	CK(cudaMemcpyAsync(st.tiny, st.pinned, 16 * sizeof(float), cudaMemcpyHostToDevice, st.stream));
	CK(cudaMemcpyToSymbol(dev_scale, &scale, sizeof(float)));
	if (cublasCreate(&st.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(st.blas, st.stream) != CUBLAS_STATUS_SUCCESS)
		return 1;
	st.cpu_table = (double *)malloc(1000 * sizeof(double));
	for (int i = 0; i < 1000; i++)
		st.cpu_table[i] = i * 0.5 + st.seed;
	st.counter = 100;
	CK(cudaStreamSynchronize(st.stream));
	return phos_fn_serve(handle, &st);
}
