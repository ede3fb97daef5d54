// SPDX-License-Identifier: MIT
// phos-fn only (run under phos-fn, never natively): the executor's own checks
// of pitched copy and set records, which the preload never sends malformed.
// Sends such records through the stand-in's private phos_preload_call
// (dlsym) and checks that each is refused with cudaErrorInvalidValue and left
// device memory as it was. Exits 77 when not under phos-fn.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <vector>

#include <cuda_runtime.h>

#include "proto.h"

typedef int (*call_fn)(uint32_t op, const void *body, size_t body_len, const void *payload, size_t payload_len,
		       void *out, size_t out_cap, size_t *ret_len, int *ret_blas);

static int failures;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			failures++;                                        \
		}                                                          \
	} while (0)

int main()
{
	call_fn call = (call_fn)dlsym(RTLD_DEFAULT, "phos_preload_call");
	const size_t N = 1 << 16;
	std::vector<unsigned char> host(N, 0x42), back(N);
	unsigned char *d;

	if (!call) {
		printf("proto2d: not under phos-fn, skipped\n");
		return 77;
	}
	if (cudaMalloc(&d, N) != cudaSuccess || cudaMemset(d, 0x24, N) != cudaSuccess) {
		printf("proto2d: cudaMalloc/cudaMemset failed\n");
		return 1;
	}
	uint64_t base = (uint64_t)(uintptr_t)d;
	struct phos_memcpy_2d good = {};
	good.dst = base;
	good.dpitch = 256;
	good.spitch = 64;
	good.width = 64;
	good.height = 4;
	good.depth = 1;
	good.dir = PHOS_COPY_H2D;

	struct {
		const char *what;
		struct phos_memcpy_2d c;
		size_t payload;
	} bad[8];
	int n = 0;
	bad[n] = { "payload shorter than the rows", good, 64 * 4 - 1 };
	n++;
	bad[n] = { "payload longer than the rows", good, 64 * 4 + 8 };
	n++;
	bad[n] = { "pitch below width", good, 64 * 4 };
	bad[n].c.dpitch = 63;
	n++;
	bad[n] = { "rows past the end of the buffer", good, 64 * 4 };
	bad[n].c.dst = base + N - 256;
	n++;
	bad[n] = { "overlapping slices", good, 64 * 4 * 2 };
	bad[n].c.depth = 2;
	bad[n].c.dslice = 256;
	n++;
	bad[n] = { "pitch that overflows", good, 64 * 4 };
	bad[n].c.dpitch = UINT64_MAX / 2;
	n++;
	bad[n] = { "unknown direction", good, 64 * 4 };
	bad[n].c.dir = 9;
	n++;
	bad[n] = { "a D2H reply over the reply area (and the buffer)", good, 0 };
	bad[n].c.dir = PHOS_COPY_D2H;
	bad[n].c.src = base;
	bad[n].c.spitch = 64;
	bad[n].c.width = 64;
	bad[n].c.height = (PHOS_REPLY_MAX / 64) + 1;
	n++;
	std::vector<unsigned char> payload(PHOS_REC_MAX_PAYLOAD, 0x99), out(PHOS_REPLY_MAX);
	for (int i = 0; i < n; i++) {
		int r = call(PHOS_OP_MEMCPY_2D, &bad[i].c, sizeof(bad[i].c), payload.data(), bad[i].payload,
			     out.data(), out.size(), NULL, NULL);
		CHECK(r == cudaErrorInvalidValue, "%s: %d, want cudaErrorInvalidValue", bad[i].what, r);
	}
	struct phos_memset_2d m = {};
	m.dst = base + N - 100;
	m.pitch = 64;
	m.width = 64;
	m.height = 2;
	m.depth = 1;
	m.value = 0x11;
	int r = call(PHOS_OP_MEMSET_2D, &m, sizeof(m), NULL, 0, NULL, 0, NULL, NULL);
	CHECK(r == cudaErrorInvalidValue, "memset rows past the end: %d", r);

	/* nothing landed, and the good record works */
	cudaMemcpy(back.data(), d, N, cudaMemcpyDeviceToHost);
	bool same = true;
	for (unsigned char c : back)
		same &= c == 0x24;
	CHECK(same, "a refused record changed device memory");
	r = call(PHOS_OP_MEMCPY_2D, &good, sizeof(good), host.data(), 64 * 4, NULL, 0, NULL, NULL);
	CHECK(r == cudaSuccess, "the good record: %d", r);
	cudaMemcpy(back.data(), d, N, cudaMemcpyDeviceToHost);
	CHECK(back[0] == 0x42 && back[63] == 0x42 && back[64] == 0x24 && back[768 + 63] == 0x42 && back[768 + 64] == 0x24,
	      "the good record's rows");
	cudaFree(d);
	if (failures) {
		printf("proto2d: %d failure(s)\n", failures);
		return 1;
	}
	printf("proto2d: ok\n");
	return 0;
}
