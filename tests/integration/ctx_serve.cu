// A function that sets device limits and stream attributes at init, as a
// program tuning its context does, and then serves: each request answers
// the limits and attributes as CUDA reports them now, and a request count.
// A copy restored from a checkpoint taken between two requests must answer
// the same values (its new executor set them again) and count on.
//
//   ctx_serve    requests on stdin (phos_fn_serve), one JSON line each:
//                {"n":N,"stack":B,"fifo":B,"policy_s":P,"policy_0":P,"ok":BOOL}
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>
#include <phos/fn.h>

struct state {
	cudaStream_t s;
	int n;
};

static int policy(cudaStream_t s)
{
	cudaStreamAttrValue v;

	memset(&v, 0, sizeof(v));
	if (cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v) != cudaSuccess)
		return -100;
	return (int)v.syncPolicy;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	size_t stack = 0, fifo = 0;
	char out[256];
	int ps, p0;

	(void)req;
	st->n++;
	bool ok = cudaDeviceGetLimit(&stack, cudaLimitStackSize) == cudaSuccess &&
		  cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize) == cudaSuccess;
	ps = policy(st->s);
	p0 = policy(0);
	snprintf(out, sizeof(out), "{\"n\":%d,\"stack\":%zu,\"fifo\":%zu,\"policy_s\":%d,\"policy_0\":%d,\"ok\":%s}", st->n,
		 stack, fifo, ps, p0, ok && ps == cudaSyncPolicyYield && p0 == cudaSyncPolicySpin ? "true" : "false");
	resp->body = strdup(out);
	if (!resp->body)
		return 500;
	resp->len = strlen(out);
	return 0;
}

int main(void)
{
	static state st;
	cudaStreamAttrValue v;

	if (cudaStreamCreate(&st.s) != cudaSuccess || cudaDeviceSetLimit(cudaLimitStackSize, 4096) != cudaSuccess ||
	    cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 3 << 20) != cudaSuccess) {
		fprintf(stderr, "ctx_serve: setting the limits failed\n");
		return 1;
	}
	memset(&v, 0, sizeof(v));
	v.syncPolicy = cudaSyncPolicyYield;
	if (cudaStreamSetAttribute(st.s, cudaStreamAttributeSynchronizationPolicy, &v) != cudaSuccess) {
		fprintf(stderr, "ctx_serve: setting the stream's attribute failed\n");
		return 1;
	}
	v.syncPolicy = cudaSyncPolicySpin;
	if (cudaStreamSetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &v) != cudaSuccess) {
		fprintf(stderr, "ctx_serve: setting the default stream's attribute failed\n");
		return 1;
	}
	return phos_fn_serve(handle, &st);
}
