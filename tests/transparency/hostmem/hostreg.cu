// SPDX-License-Identifier: MIT
// cudaHostRegister as a user writes it: a malloc'd buffer (not page aligned,
// with neighbours in its first and last pages) registered, copied to the
// device and back asynchronously, unregistered and used again.
//
//   hostreg [strict]   strict (under phos-fn): the registered pages are the
//                      shared memfd the executor DMAs from (/proc/self/maps)
//   hostreg loop N     N rounds instead of 3, a JSON line printed before
//                      them: a run to checkpoint while its memory is
//                      registered (a restore maps it again at its address)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static bool mapped_from_memfd(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool hit = false;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)p >= lo && (unsigned long)p < hi)
			hit = strstr(line, "phos-hostreg") != NULL;
	}
	if (f)
		fclose(f);
	return hit;
}

int main(int argc, char **argv)
{
	bool strict = argc > 1 && !strcmp(argv[1], "strict");
	int rounds = argc > 2 && !strcmp(argv[1], "loop") ? atoi(argv[2]) : 3;
	const size_t n = (3u << 20) + 100;           // bytes, not a page multiple
	unsigned char *block = (unsigned char *)malloc(n + 8192);
	unsigned char *buf = block + 1000, *back = (unsigned char *)malloc(n);
	unsigned char *dev = nullptr;
	cudaStream_t s;

	if (!block || !back)
		return 2;
	for (size_t i = 0; i < n + 8192; i++)
		block[i] = (unsigned char)(i * 7 + 3);
	CHECK(cudaStreamCreate(&s) == cudaSuccess, "stream");
	CHECK(cudaMalloc(&dev, n) == cudaSuccess, "malloc");
	CHECK(cudaHostRegister(buf, n, cudaHostRegisterDefault) == cudaSuccess, "register");
	CHECK(cudaHostRegister(back, n, cudaHostRegisterPortable) == cudaSuccess, "register back");
	if (strict)
		CHECK(mapped_from_memfd(buf) && mapped_from_memfd(back), "registered pages are shared with the executor");
	// the neighbours in the first and last pages kept their bytes
	for (size_t i = 0; i < n + 8192; i++)
		if (block[i] != (unsigned char)(i * 7 + 3)) {
			CHECK(false, "byte %zu changed by registering", i);
			break;
		}
	CHECK(cudaHostRegister(buf + 64, 64, 0) == cudaErrorHostMemoryAlreadyRegistered, "twice");
	CHECK(cudaGetLastError() == cudaErrorHostMemoryAlreadyRegistered, "sticky until read");
	CHECK(cudaHostRegister(nullptr, 64, 0) == cudaErrorInvalidValue, "NULL");
	cudaGetLastError();

	if (rounds < 1)
		return 2;
	if (argc > 2) {
		printf("{\"loop\": %d}\n", rounds);
		fflush(stdout);
	}
	for (int round = 0; round < rounds; round++) {
		for (size_t i = 0; i < n; i++)
			buf[i] = (unsigned char)(i * 13 + (unsigned)round);
		memset(back, 0, n);
		CHECK(cudaMemcpyAsync(dev, buf, n, cudaMemcpyHostToDevice, s) == cudaSuccess, "h2d");
		CHECK(cudaMemsetAsync(dev + 5, 0xab, 7, s) == cudaSuccess, "memset");
		CHECK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s) == cudaSuccess, "d2h");
		CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
		size_t bad = n;
		for (size_t i = 0; i < n && bad == n; i++) {
			unsigned char want = i >= 5 && i < 12 ? 0xab : (unsigned char)(i * 13 + (unsigned)round);
			if (back[i] != want)
				bad = i;
		}
		CHECK(bad == n, "round %d: byte %zu came back wrong", round, bad);
	}
	CHECK(cudaHostUnregister(buf) == cudaSuccess, "unregister");
	CHECK(cudaHostUnregister(buf) == cudaErrorHostMemoryNotRegistered, "unregister twice");
	cudaGetLastError();
	CHECK(cudaHostUnregister(back) == cudaSuccess, "unregister back");
	// still the program's memory, with its data, after unregistering
	buf[0] = 42;
	CHECK(buf[0] == 42 && buf[n - 1] == (unsigned char)((n - 1) * 13 + (unsigned)(rounds - 1)),
	      "memory usable after unregister");
	// plain pageable copies still work
	CHECK(cudaMemcpy(back, dev, 4096, cudaMemcpyDeviceToHost) == cudaSuccess, "pageable d2h");
	CHECK(back[100] == (unsigned char)(100 * 13 + (unsigned)(rounds - 1)), "pageable d2h contents");
	cudaFree(dev);
	cudaStreamDestroy(s);
	free(back);
	free(block);
	if (failures)
		return 1;
	printf("hostreg: ok\n");
	return 0;
}
