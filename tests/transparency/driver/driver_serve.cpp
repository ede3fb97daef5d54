// SPDX-License-Identifier: MIT
//
// A function written against the driver API: at init it loads kernels.cu's
// PTX with cuModuleLoadData and fills two buffers; each request runs saxpy
// (y = x + y) on the GPU state and answers the sum of y. The state lives in
// device memory and the module in the executor, so a snapshot taken at
// phos_fn_serve and restored must answer exactly what the original process
// answers (test_transparency_driver). Natively it reads requests on stdin.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels_embedded.h"
#include "phos/fn.h"

#define CU(call)                                                                        \
	do {                                                                            \
		CUresult cu_r_ = (call);                                                \
		if (cu_r_ != CUDA_SUCCESS) {                                            \
			fprintf(stderr, "driver_serve: %s:%d: %s: %d\n", __FILE__, __LINE__, #call, \
				(int)cu_r_);                                            \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

enum { N = 1000 };

struct state {
	CUfunction saxpy;
	CUdeviceptr x, y;
	int calls;
};

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *s = (struct state *)arg;
	float a = 1.0f, y[N];
	int n = N;
	double sum = 0;
	void *args[] = { &a, &s->x, &s->y, &n };
	char *body = (char *)malloc(128);

	(void)req;
	CU(cuLaunchKernel(s->saxpy, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CU(cuMemcpyDtoH(y, s->y, sizeof(y)));
	for (int i = 0; i < N; i++)
		sum += y[i];
	s->calls++;
	resp->len = (size_t)snprintf(body, 128, "{\"call\":%d,\"sum\":%.1f,\"y1\":%.1f}", s->calls, sum, y[1]);
	resp->body = body;
	return 0;
}

int main(void)
{
	static struct state s;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	float x[N], y[N];

	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&mod, kernels_ptx));
	CU(cuModuleGetFunction(&s.saxpy, mod, "_Z9drv_saxpyfPKfPfi"));
	for (int i = 0; i < N; i++) {
		x[i] = (float)i * 0.5f;
		y[i] = (float)(N - i);
	}
	CU(cuMemAlloc(&s.x, sizeof(x)));
	CU(cuMemAlloc(&s.y, sizeof(y)));
	CU(cuMemcpyHtoD(s.x, x, sizeof(x)));
	CU(cuMemcpyHtoD(s.y, y, sizeof(y)));
	return phos_fn_serve(handle, &s);
}
