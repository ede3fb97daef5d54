// SPDX-License-Identifier: MIT
// A function that changes its context on every call: the stack-size and
// persisting-L2 limits and the default stream's synchronization policy. Each
// answer says what it found at the start of the call:
//   {"stack":N,"l2":N,"policy":N}
// Restored many times on a warm pool, every instance must find the same
// values: an executor handed to the next function puts back what the last one
// changed (tests/integration/test_transparency_xfer.py).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include <phos/fn.h>

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	size_t stack = 0, l2 = 0;
	cudaStreamAttrValue v = {};
	cudaDeviceProp p;
	char out[256];

	(void)state;
	(void)req;
	if (cudaDeviceGetLimit(&stack, cudaLimitStackSize) != cudaSuccess ||
	    cudaDeviceGetLimit(&l2, cudaLimitPersistingL2CacheSize) != cudaSuccess ||
	    cudaStreamGetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &v) != cudaSuccess ||
	    cudaGetDeviceProperties(&p, 0) != cudaSuccess)
		return 500;
	snprintf(out, sizeof(out), "{\"stack\":%zu,\"l2\":%zu,\"policy\":%d}", stack, l2, (int)v.syncPolicy);
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

	if (cudaMalloc(&d, 4096) != cudaSuccess)
		return 1;
	return phos_fn_serve(handle, nullptr);
}
