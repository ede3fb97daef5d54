// SPDX-License-Identifier: MIT
//
// The driver's virtual memory management as PyTorch's expandable segments
// use it (issue 16): a reserved range, physical handles mapped side by side
// into it, access set, a kernel over a tensor that spans three mappings, the
// middle mapping unmapped, released and replaced. Each request runs the
// kernel again over the whole span and checks every value, then maps a new
// handle into the reservation, uses it, unmaps and releases it: after a
// snapshot at phos_fn_serve is restored the mappings must hold their data and
// the reservation must still be the program's.
//
//   vmm_serve [pointers]   "pointers": the reservation's base and x on stderr
//   vmm_serve refusals     (phos-fn only) what phos-fn refuses, codes on stdout
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_embedded.h"
#include "phos/fn.h"

#define CU(call)                                                                        \
	do {                                                                            \
		CUresult cu_r_ = (call);                                                \
		if (cu_r_ != CUDA_SUCCESS) {                                            \
			fprintf(stderr, "vmm_serve: %s:%d: %s: %d\n", __FILE__, __LINE__, #call, \
				(int)cu_r_);                                            \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

enum { MIB = 1 << 20, PART = 4 * MIB, SPAN = 3 * PART, N = SPAN / 4, RESV = 64 * MIB };

struct state {
	CUfunction saxpy;
	CUdeviceptr base, x;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	float *host_y, *host_x;
	int calls;
};

static float y0(int i)
{
	return (float)(i % 1000) * 0.25f;
}

static float x0(int i)
{
	return (float)(i % 7);
}

static void saxpy(struct state *s)
{
	float a = 1.0f;
	int n = N;
	CUdeviceptr y = s->base;
	void *args[] = { &a, &s->x, &y, &n };

	CU(cuLaunchKernel(s->saxpy, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

// y after k kernels: y0 + k x, every value exact in float
static int check(struct state *s, int k, char *why, size_t len)
{
	CU(cuMemcpyDtoH(s->host_y, s->base, SPAN));
	for (int i = 0; i < N; i++)
		if (s->host_y[i] != y0(i) + (float)k * x0(i)) {
			snprintf(why, len, "y[%d] = %g, want %g", i, s->host_y[i], y0(i) + (float)k * x0(i));
			return 0;
		}
	return 1;
}

static CUmemGenericAllocationHandle map_part(struct state *s, CUdeviceptr at)
{
	CUmemGenericAllocationHandle h;

	CU(cuMemCreate(&h, PART, &s->prop, 0));
	CU(cuMemMap(at, PART, 0, h, 0));
	CU(cuMemSetAccess(at, PART, &s->access, 1));
	return h;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *s = (struct state *)arg;
	char why[160] = "", *body = (char *)malloc(256);
	unsigned char probe[16];
	int ok;

	(void)req;
	s->calls++;
	saxpy(s);   // across the three mappings
	ok = check(s, 1 + s->calls, why, sizeof(why));
	// a new mapping further in the reservation, used, then given back
	CUdeviceptr at = s->base + 8 * PART;
	CUmemGenericAllocationHandle h = map_part(s, at);
	CU(cuMemsetD8(at + PART - 16, (unsigned char)(0x40 + s->calls), 16));
	CU(cuMemcpyDtoH(probe, at + PART - 16, 16));
	if (ok && probe[15] != 0x40 + s->calls) {
		snprintf(why, sizeof(why), "a new mapping read back %d", probe[15]);
		ok = 0;
	}
	CU(cuMemUnmap(at, PART));
	CU(cuMemRelease(h));
	resp->len = (size_t)snprintf(body, 256, "{\"call\": %d, \"ok\": %s, \"why\": \"%s\"}", s->calls,
				     ok ? "true" : "false", why);
	resp->body = body;
	return 0;
}

int main(int argc, char **argv)
{
	static struct state s;
	CUmemGenericAllocationHandle h[3];
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUdeviceptr other;
	size_t gran = 0;
	char why[160];

	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&mod, kernels_ptx));
	CU(cuModuleGetFunction(&s.saxpy, mod, "_Z9drv_saxpyfPKfPfi"));
	s.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	s.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	s.prop.location.id = 0;
	s.access.location = s.prop.location;
	s.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU(cuMemGetAllocationGranularity(&gran, &s.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	if (!gran || PART % gran) {
		fprintf(stderr, "vmm_serve: granularity %zu\n", gran);
		return 1;
	}
	CU(cuMemAddressReserve(&s.base, RESV, 0, 0, 0));
	for (int i = 0; i < 3; i++)
		h[i] = map_part(&s, s.base + (CUdeviceptr)i * PART);
	s.host_y = (float *)malloc(SPAN);
	s.host_x = (float *)malloc(SPAN);
	for (int i = 0; i < N; i++) {
		s.host_y[i] = y0(i);
		s.host_x[i] = x0(i);
	}
	CU(cuMemAlloc(&s.x, SPAN));
	CU(cuMemcpyHtoD(s.x, s.host_x, SPAN));
	CU(cuMemcpyHtoD(s.base, s.host_y, SPAN));   // one copy into three mappings
	saxpy(&s);
	if (!check(&s, 1, why, sizeof(why))) {
		fprintf(stderr, "vmm_serve: after the first kernel: %s\n", why);
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "refusals")) {
		CUmemGenericAllocationHandle extra;

		CU(cuMemCreate(&extra, PART, &s.prop, 0));
		printf("map twice: %d\n", (int)cuMemMap(s.base + 10 * PART, PART, 0, h[0], 0));
		printf("map in part: %d\n", (int)cuMemMap(s.base + 10 * PART, PART / 2, 0, extra, 0));
		printf("map outside: %d\n", (int)cuMemMap(s.x, PART, 0, extra, 0));
		printf("unmap in part: %d\n", (int)cuMemUnmap(s.base, PART / 2));
		printf("free while mapped: %d\n", (int)cuMemAddressFree(s.base, RESV));
		return 0;
	}
	// the middle mapping replaced by a new one: its part written again
	CU(cuMemUnmap(s.base + PART, PART));
	CU(cuMemRelease(h[1]));
	h[1] = map_part(&s, s.base + PART);
	CU(cuMemcpyHtoD(s.base + PART, (const char *)s.host_y + PART, PART));   // (still y after one kernel)
	if (!check(&s, 1, why, sizeof(why))) {
		fprintf(stderr, "vmm_serve: after the new middle mapping: %s\n", why);
		return 1;
	}
	CU(cuMemAlloc(&other, PART));
	if (other >= s.base && other < s.base + RESV) {
		fprintf(stderr, "vmm_serve: cuMemAlloc gave 0x%llx, inside the reservation\n", (unsigned long long)other);
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "pointers"))
		fprintf(stderr, "pointers {\"base\": %llu, \"x\": %llu}\n", (unsigned long long)s.base,
			(unsigned long long)s.x);
	return phos_fn_serve(handle, &s);
}
