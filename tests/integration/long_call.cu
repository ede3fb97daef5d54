// A serving function whose calls run long and whose state lives on across
// calls (a session), for the invoker's instance checkpoints (issue 11):
//
//   request {"steps": N, "pause_us": P}   (N 0..100000, P 0..1000000)
//   each step: x[i] = x[i] * 1103515245 + 12345 + step (uint32, wrapping) on a
//              GPU buffer of 1024 words, a stream synchronize, then P us of
//              sleep on the CPU; `step` counts on across calls
//   answer     {"calls": C, "step": S, "sum": X}: C calls so far (this one
//              included), S steps so far, X the 64-bit sum of the buffer
//
// Integers only, so the GPU, the sim twin and the test's Python reference
// agree exactly. x starts as x[i] = i.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <cuda_runtime.h>
#include <phos/fn.h>

#define N 1024

__global__ void lc_step(unsigned *x, int n, unsigned step)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = x[i] * 1103515245u + 12345u + step;
}

struct state {
	unsigned *x;
	unsigned host[N];
	long calls;
	unsigned step;
	cudaStream_t s;
};

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

/* The number after "key": in body, or def; -1 when it is out of 0..max. */
static long field(const char *body, const char *key, long def, long max)
{
	const char *p = strstr(body, key);
	char *end;
	long v;

	if (!p)
		return def;
	p += strlen(key);
	while (*p == '"' || *p == ':' || *p == ' ')
		p++;
	v = strtol(p, &end, 10);
	return end == p || v < 0 || v > max ? -1 : v;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	long steps = field(req->body, "\"steps\"", 1, 100000), pause = field(req->body, "\"pause_us\"", 0, 1000000);
	unsigned long long sum = 0;
	char *out;

	if (steps < 0 || pause < 0) {
		resp->body = strdup("{\"error\":\"steps 0..100000, pause_us 0..1000000\"}");
		resp->len = strlen(resp->body);
		return 400;
	}
	for (long k = 0; k < steps; k++) {
		lc_step<<<4, 256, 0, st->s>>>(st->x, N, st->step);
		CK(cudaGetLastError());
		CK(cudaStreamSynchronize(st->s));
		st->step++;
		if (pause)
			usleep((useconds_t)pause);
	}
	CK(cudaMemcpyAsync(st->host, st->x, sizeof(st->host), cudaMemcpyDeviceToHost, st->s));
	CK(cudaStreamSynchronize(st->s));
	for (int i = 0; i < N; i++)
		sum += st->host[i];
	st->calls++;
	if (asprintf(&out, "{\"calls\":%ld,\"step\":%u,\"sum\":%llu}", st->calls, st->step, sum) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static struct state st;

	for (int i = 0; i < N; i++)
		st.host[i] = (unsigned)i;
	CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	CK(cudaMalloc(&st.x, sizeof(st.host)));
	CK(cudaMemcpy(st.x, st.host, sizeof(st.host), cudaMemcpyHostToDevice));
	return phos_fn_serve(handle, &st);
}
