// SPDX-License-Identifier: MIT
// Large copies between device memory and ordinary (pageable) host memory, as
// a CUDA program does them: sync and async, on the legacy and on created
// streams, odd sizes and offsets around the stand-in's staging chunks (8 MiB),
// several host threads copying at once, a copy after a memset on its stream
// (stream order), and CUDA's error for a copy from a device address that is
// not allocated. Checks every byte; exits 1 on a wrong answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

static int failures;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); \
		}                                                          \
	} while (0)
#define OK(call)                                                                            \
	do {                                                                                \
		cudaError_t e_ = (call);                                                    \
		if (e_ != cudaSuccess) {                                                    \
			fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				cudaGetErrorName(e_));                                       \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

/* A byte per position with no period: chunks swapped or repeated show. */
static unsigned char pattern(size_t i, unsigned seed)
{
	unsigned long long x = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 32;
	return (unsigned char)x;
}

/* H2D of a pattern, D2H back at an odd host offset; bytes around the
 * destination keep their value. With bump, a memset of the first third runs
 * in between on the copies' stream. */
static void round_trip(size_t n, size_t hoff, bool async, cudaStream_t s, unsigned seed, bool bump)
{
	std::vector<unsigned char> src(n), out(n + hoff + 64, 0xEE);
	unsigned char *d;

	for (size_t i = 0; i < n; i++)
		src[i] = pattern(i, seed);
	OK(cudaMalloc(&d, n + 4096));
	if (async) {
		OK(cudaMemcpyAsync(d + 7, src.data(), n, cudaMemcpyHostToDevice, s));
		if (bump)
			OK(cudaMemsetAsync(d + 7, 0x5A, n / 3, s));
		OK(cudaMemcpyAsync(out.data() + hoff, d + 7, n, cudaMemcpyDeviceToHost, s));
		OK(cudaStreamSynchronize(s));
	} else {
		OK(cudaMemcpy(d + 7, src.data(), n, cudaMemcpyHostToDevice));
		if (bump)
			OK(cudaMemset(d + 7, 0x5A, n / 3));
		OK(cudaMemcpy(out.data() + hoff, d + 7, n, cudaMemcpyDeviceToHost));
	}
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++)
		if (out[hoff + i] != (bump && i < n / 3 ? 0x5A : src[i]) && !bad++)
			first = i;
	for (size_t i = 0; i < hoff; i++)
		bad += out[i] != 0xEE;
	for (size_t i = hoff + n; i < out.size(); i++)
		bad += out[i] != 0xEE;
	CHECK(!bad, "%zu bytes (offset %zu, %s%s): %zu wrong bytes, first at %zu", n, hoff,
	      async ? "async" : "sync", bump ? ", after a memset" : "", bad, first);
	OK(cudaFree(d));
}

int main()
{
	static const size_t sizes[] = { (2u << 20) - 1, 2u << 20, (8u << 20) - 3, 8u << 20, (8u << 20) + 1,
					(16u << 20) + 4097, 37u << 20 };
	cudaStream_t s;
	unsigned seed = 1;

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	for (size_t n : sizes) {
		round_trip(n, 0, false, 0, seed++, false);
		round_trip(n, 3, true, s, seed++, true);
		round_trip(n, 4096, true, 0, seed++, false);
		round_trip(n, 1, false, 0, seed++, true);
	}

	// Several host threads, each on its own stream, copying at once.
	std::vector<std::thread> ts;
	for (int t = 0; t < 4; t++)
		ts.emplace_back([t] {
			cudaStream_t ts_;
			OK(cudaStreamCreate(&ts_));
			for (int k = 0; k < 3; k++)
				round_trip((12u << 20) + 1000 * t + k, (size_t)t, true, ts_, 100 + 10 * t + k, k & 1);
			OK(cudaStreamDestroy(ts_));
		});
	for (auto &t : ts)
		t.join();

	// A copy from device memory that was freed is refused as CUDA refuses it.
	unsigned char *gone;
	std::vector<unsigned char> sink(4u << 20);
	OK(cudaMalloc(&gone, sink.size()));
	OK(cudaFree(gone));
	cudaError_t e = cudaMemcpy(sink.data(), gone, sink.size(), cudaMemcpyDeviceToHost);
	CHECK(e != cudaSuccess, "a copy from freed device memory succeeded");
	cudaGetLastError();
	// The process goes on working after it.
	round_trip(9u << 20, 5, false, 0, 999, true);

	OK(cudaStreamDestroy(s));
	if (failures) {
		fprintf(stderr, "pageable: %d check(s) failed\n", failures);
		return 1;
	}
	printf("pageable: ok\n");
	return 0;
}
