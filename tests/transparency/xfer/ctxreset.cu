// SPDX-License-Identifier: MIT
// A function that changes its context on every call: the stack-size and
// persisting-L2 limits and the default stream's synchronization policy. Each
// answer says what it found at the start of the call:
//   {"stack":N,"l2":N,"policy":N,"heap":N,"want_heap":N,"spolicy":N,"sprio":N}
// Restored many times on a warm pool, every instance must find the same
// values: an executor handed to the next function puts back what the last one
// changed (tests/integration/test_transparency_xfer.py).
// Its init sets the malloc heap size and the policy and priority of a stream
// of its own (as attributes): what init set is part of the snapshot, so
// every restored instance finds them (heap == want_heap, spolicy 3 = yield,
// sprio = the greatest priority).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include <phos/fn.h>

static size_t want_heap;
static cudaStream_t mine;

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	size_t stack = 0, l2 = 0, heap = 0;
	cudaStreamAttrValue v = {}, sp = {}, pr = {};
	cudaDeviceProp p;
	char out[256];

	(void)state;
	(void)req;
	if (cudaDeviceGetLimit(&stack, cudaLimitStackSize) != cudaSuccess ||
	    cudaDeviceGetLimit(&l2, cudaLimitPersistingL2CacheSize) != cudaSuccess ||
	    cudaStreamGetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &v) != cudaSuccess ||
	    cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize) != cudaSuccess ||
	    cudaStreamGetAttribute(mine, cudaStreamAttributeSynchronizationPolicy, &sp) != cudaSuccess ||
	    cudaStreamGetAttribute(mine, cudaStreamAttributePriority, &pr) != cudaSuccess ||
	    cudaGetDeviceProperties(&p, 0) != cudaSuccess)
		return 500;
	snprintf(out, sizeof(out),
		 "{\"stack\":%zu,\"l2\":%zu,\"policy\":%d,\"heap\":%zu,\"want_heap\":%zu,\"spolicy\":%d,\"sprio\":%d}",
		 stack, l2, (int)v.syncPolicy, heap, want_heap, (int)sp.syncPolicy, pr.priority);
	/* change all three for whoever comes next */
	cudaStreamAttrValue blocking = {};
	blocking.syncPolicy = cudaSyncPolicyBlockingSync;
	if (cudaDeviceSetLimit(cudaLimitStackSize, stack + 4096) != cudaSuccess ||
	    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)p.persistingL2CacheMaxSize / 2) != cudaSuccess ||
	    cudaStreamSetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &blocking) != cudaSuccess)
		return 500;
	resp->body = strdup(out);       /* phos_fn_serve frees it */
	if (!resp->body)
		return 500;
	resp->len = strlen(out);
	return 0;
}

int main()
{
	void *d;

	cudaStreamAttrValue yield = {}, prio = {};
	int least = 0, greatest = 0;

	if (cudaMalloc(&d, 4096) != cudaSuccess || cudaStreamCreate(&mine) != cudaSuccess ||
	    cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess)
		return 1;
	yield.syncPolicy = cudaSyncPolicyYield;
	prio.priority = greatest;
	if (cudaDeviceGetLimit(&want_heap, cudaLimitMallocHeapSize) != cudaSuccess ||
	    cudaDeviceSetLimit(cudaLimitMallocHeapSize, want_heap + (16u << 20)) != cudaSuccess ||
	    cudaDeviceGetLimit(&want_heap, cudaLimitMallocHeapSize) != cudaSuccess ||
	    cudaStreamSetAttribute(mine, cudaStreamAttributeSynchronizationPolicy, &yield) != cudaSuccess ||
	    cudaStreamSetAttribute(mine, cudaStreamAttributePriority, &prio) != cudaSuccess)
		return 1;
	return phos_fn_serve(handle, nullptr);
}
