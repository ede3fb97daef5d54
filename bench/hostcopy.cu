// Host memory copies as a program sees them (issue 12): wall-clock time of a
// synchronous cudaMemcpy between the device and
//   pageable    malloc'd, touched memory
//   registered  malloc'd memory passed to cudaHostRegister
//   pinned      cudaMallocHost memory
// in both directions, for each size; the best of --reps after one warm-up.
// The same binary runs natively and under `phos-fn run` (bench/hostcopy.py),
// so the two are compared on the same calls. Prints one JSON line per case:
//   {"kind":"registered","dir":"h2d","mib":64,"seconds":...,"gbs":...}
//
// usage: hostcopy [--mib N[,N...]] (default 64,1024) [--reps N] (default 5)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <string>
#include <vector>

#define CK(x)                                                                                           \
	do {                                                                                            \
		cudaError_t e_ = (x);                                                                   \
		if (e_ != cudaSuccess) {                                                                \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)

static double now(void)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double best_s(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int reps)
{
	double best = 1e30;

	CK(cudaMemcpy(dst, src, bytes, kind));
	for (int i = 0; i < reps; i++) {
		double t = now();

		CK(cudaMemcpy(dst, src, bytes, kind));
		t = now() - t;
		if (t < best)
			best = t;
	}
	return best;
}

int main(int argc, char **argv)
{
	std::vector<size_t> sizes = { 64, 1024 };
	int reps = 5;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
			sizes.clear();
			for (char *p = argv[++i], *end; *p; p = *end ? end + 1 : end) {
				sizes.push_back(strtoull(p, &end, 10));
				if (end == p || !sizes.back())
					return fprintf(stderr, "hostcopy: bad --mib\n"), 2;
			}
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: hostcopy [--mib N[,N...]] [--reps N]\n");
			return 2;
		}
	}
	for (size_t mib : sizes) {
		size_t bytes = mib << 20;
		void *dev, *pinned;
		char *pageable = (char *)malloc(bytes), *reg = (char *)malloc(bytes);

		if (!pageable || !reg)
			return fprintf(stderr, "hostcopy: out of host memory\n"), 1;
		memset(pageable, 1, bytes);
		memset(reg, 2, bytes);
		CK(cudaMalloc(&dev, bytes));
		CK(cudaMallocHost(&pinned, bytes));
		memset(pinned, 3, bytes);
		CK(cudaHostRegister(reg, bytes, cudaHostRegisterDefault));
		struct { const char *kind; void *host; } kinds[] = { { "pageable", pageable }, { "registered", reg },
								   { "pinned", pinned } };
		for (auto &k : kinds) {
			for (int d = 0; d < 2; d++) {
				double s = d ? best_s(k.host, dev, bytes, cudaMemcpyDeviceToHost, reps)
					     : best_s(dev, k.host, bytes, cudaMemcpyHostToDevice, reps);

				printf("{\"kind\":\"%s\",\"dir\":\"%s\",\"mib\":%zu,\"seconds\":%.6f,\"gbs\":%.3f}\n", k.kind,
				       d ? "d2h" : "h2d", mib, s, bytes / s / 1e9);
				fflush(stdout);
			}
		}
		CK(cudaHostUnregister(reg));
		CK(cudaFreeHost(pinned));
		CK(cudaFree(dev));
		free(pageable);
		free(reg);
	}
	return 0;
}
