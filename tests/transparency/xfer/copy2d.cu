// SPDX-License-Identifier: MIT
// Pitched copies and sets as a CUDA program uses them: cudaMallocPitch,
// cudaMalloc3D, cudaMemcpy2D/3D (sync and async, every direction, Default),
// cudaMemset2D/3D, and CUDA's errors for bad arguments. Checks every byte,
// padding included; exits 1 on the first wrong answer.
//   copy2d [phos]   phos: also the checks only phos-fn can promise (a copy past
//                   the end of its buffer is refused, not undefined)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

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
#define OK(call)                                                                                  \
	do {                                                                                      \
		cudaError_t e_ = (call);                                                          \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorName(e_));                                             \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)
#define ERR(call, want)                                                                            \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		CHECK(e_ == (want), "%s = %s, want %s", #call, cudaGetErrorName(e_), cudaGetErrorName(want)); \
		cudaGetLastError();                                                                \
	} while (0)

static unsigned char pattern(size_t i, unsigned seed)
{
	return (unsigned char)((i * 2654435761u + seed) >> 7);
}

static std::vector<unsigned char> filled(size_t n, unsigned seed)
{
	std::vector<unsigned char> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = pattern(i, seed);
	return v;
}

/* A 2D round trip through a pitched buffer: H2D, D2D into a second one, D2H;
 * the padding of the host destination keeps its bytes. */
static void round_trip_2d(size_t width, size_t height, bool async, unsigned seed)
{
	size_t hp = width + 13, dp = 0, dp2 = 0;
	std::vector<unsigned char> src = filled(hp * height, seed), out(hp * height, 0xEE);
	void *a, *b;
	cudaStream_t s = 0;

	OK(cudaMallocPitch(&a, &dp, width, height));
	OK(cudaMallocPitch(&b, &dp2, width, height));
	CHECK(dp >= width && dp2 >= width, "pitch %zu < width %zu", dp, width);
	if (async)
		OK(cudaStreamCreate(&s));
	if (async) {
		OK(cudaMemcpy2DAsync(a, dp, src.data(), hp, width, height, cudaMemcpyHostToDevice, s));
		OK(cudaMemcpy2DAsync(b, dp2, a, dp, width, height, cudaMemcpyDeviceToDevice, s));
		OK(cudaMemcpy2DAsync(out.data(), hp, b, dp2, width, height, cudaMemcpyDeviceToHost, s));
		OK(cudaStreamSynchronize(s));
		OK(cudaStreamDestroy(s));
	} else {
		OK(cudaMemcpy2D(a, dp, src.data(), hp, width, height, cudaMemcpyHostToDevice));
		OK(cudaMemcpy2D(b, dp2, a, dp, width, height, cudaMemcpyDefault));
		OK(cudaMemcpy2D(out.data(), hp, b, dp2, width, height, cudaMemcpyDeviceToHost));
	}
	for (size_t y = 0; y < height; y++)
		for (size_t x = 0; x < hp; x++) {
			unsigned char want = x < width ? src[y * hp + x] : 0xEE;
			if (out[y * hp + x] != want) {
				CHECK(false, "2D %zux%zu%s: byte (%zu,%zu) = %u, want %u", width, height,
				      async ? " async" : "", x, y, out[y * hp + x], want);
				y = height;
				break;
			}
		}
	OK(cudaFree(a));
	OK(cudaFree(b));
}

static void sets_2d(void)
{
	size_t w = 100, h = 7, p = 0;
	void *d;

	OK(cudaMallocPitch(&d, &p, w, h));
	std::vector<unsigned char> host(p * h), want(p * h, 0x11);
	OK(cudaMemset(d, 0x11, p * h));
	OK(cudaMemset2D((char *)d + 3, p, 0xAB, 50, 5));
	for (size_t y = 0; y < 5; y++)
		memset(&want[y * p + 3], 0xAB, 50);
	OK(cudaMemcpy(host.data(), d, p * h, cudaMemcpyDeviceToHost));
	CHECK(host == want, "cudaMemset2D touched other bytes or missed some");

	cudaStream_t s;
	OK(cudaStreamCreate(&s));
	OK(cudaMemset2DAsync(d, p, 0x5A, w, h, s));
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy2D(host.data(), w, d, p, w, h, cudaMemcpyDeviceToHost));
	bool all = true;
	for (size_t i = 0; i < w * h; i++)
		all &= host[i] == 0x5A;
	CHECK(all, "cudaMemset2DAsync");
	OK(cudaStreamDestroy(s));
	OK(cudaFree(d));
}

static void volume_3d(void)
{
	const size_t W = 40, H = 6, D = 5;           /* bytes, rows, slices */
	cudaExtent ext = make_cudaExtent(W, H, D);
	cudaPitchedPtr dev, dev2;
	std::vector<unsigned char> host = filled(W * H * D, 7), back(W * H * D, 0);

	OK(cudaMalloc3D(&dev, ext));
	OK(cudaMalloc3D(&dev2, ext));
	CHECK(dev.pitch >= W && dev.xsize == W && dev.ysize == H, "cudaMalloc3D: pitch %zu xsize %zu ysize %zu",
	      dev.pitch, dev.xsize, dev.ysize);
	OK(cudaMemset3D(dev, 0, ext));
	OK(cudaMemset3D(dev2, 0x77, ext));

	/* whole volume up */
	cudaMemcpy3DParms p = {};
	p.srcPtr = make_cudaPitchedPtr(host.data(), W, W, H);
	p.dstPtr = dev;
	p.extent = ext;
	p.kind = cudaMemcpyHostToDevice;
	OK(cudaMemcpy3D(&p));

	/* a sub-box (x 4..20, y 1..4, z 2..4) from dev into dev2 at another position */
	cudaMemcpy3DParms q = {};
	q.srcPtr = dev;
	q.srcPos = make_cudaPos(4, 1, 2);
	q.dstPtr = dev2;
	q.dstPos = make_cudaPos(10, 2, 1);
	q.extent = make_cudaExtent(16, 3, 3);
	q.kind = cudaMemcpyDefault;
	cudaStream_t s;
	OK(cudaStreamCreate(&s));
	OK(cudaMemcpy3DAsync(&q, s));
	OK(cudaStreamSynchronize(s));
	OK(cudaStreamDestroy(s));

	/* dev2 back, whole */
	cudaMemcpy3DParms r = {};
	r.srcPtr = dev2;
	r.dstPtr = make_cudaPitchedPtr(back.data(), W, W, H);
	r.extent = ext;
	r.kind = cudaMemcpyDeviceToHost;
	OK(cudaMemcpy3D(&r));
	int bad = 0;
	for (size_t z = 0; z < D; z++)
		for (size_t y = 0; y < H; y++)
			for (size_t x = 0; x < W; x++) {
				unsigned char want = 0x77;
				if (x >= 10 && x < 26 && y >= 2 && y < 5 && z >= 1 && z < 4)
					want = host[(z + 1) * W * H + (y - 1) * W + (x - 6)];
				if (back[z * W * H + y * W + x] != want && bad++ < 3)
					CHECK(false, "3D byte (%zu,%zu,%zu) = %u, want %u", x, y, z,
					      back[z * W * H + y * W + x], want);
			}
	/* a 3D set of a sub-box: the slice stride comes from ysize */
	cudaPitchedPtr sub = dev2;
	sub.ptr = (char *)dev2.ptr + 1 * dev2.pitch * dev2.ysize + 1 * dev2.pitch + 2;
	OK(cudaMemset3D(sub, 0x33, make_cudaExtent(5, 2, 2)));
	OK(cudaMemcpy3D(&r));
	for (size_t z = 1; z < 3; z++)
		for (size_t y = 1; y < 3; y++)
			for (size_t x = 2; x < 7; x++)
				CHECK(back[z * W * H + y * W + x] == 0x33, "cudaMemset3D byte (%zu,%zu,%zu)", x, y, z);
	CHECK(back[1 * W * H + 1 * W + 7] != 0x33 && back[0 * W * H + 1 * W + 2] != 0x33, "cudaMemset3D beyond its box");
	OK(cudaFree(dev.ptr));
	OK(cudaFree(dev2.ptr));
}

static void errors(bool phos)
{
	size_t p = 0;
	void *d;
	std::vector<unsigned char> h(4096, 0x42), before;

	OK(cudaMallocPitch(&d, &p, 64, 8));
	OK(cudaMemset(d, 0x24, p * 8));
	ERR(cudaMemcpy2D(d, 32, h.data(), 64, 64, 8, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
	ERR(cudaMemcpy2D(d, p, h.data(), 32, 64, 8, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
	ERR(cudaMemcpy2D(h.data(), 32, d, p, 64, 8, cudaMemcpyDeviceToHost), cudaErrorInvalidPitchValue);
	/* a single row: its pitch is unused, yet refused, as an invalid value (H100) */
	ERR(cudaMemcpy2D(d, 32, h.data(), 64, 64, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	ERR(cudaMemcpy2D(nullptr, p, h.data(), 64, 64, 8, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	ERR(cudaMemcpy2D(d, p, h.data(), 64, 64, 8, (cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
	ERR(cudaMemset2D(d, 32, 0, 64, 8), cudaErrorInvalidValue);
	/* nothing above wrote a byte */
	std::vector<unsigned char> now(p * 8);
	OK(cudaMemcpy(now.data(), d, p * 8, cudaMemcpyDeviceToHost));
	bool same = true;
	for (unsigned char c : now)
		same &= c == 0x24;
	CHECK(same, "a refused copy or set changed device memory");
	/* empty copies and sets succeed and do nothing */
	OK(cudaMemcpy2D(d, p, h.data(), 64, 0, 8, cudaMemcpyHostToDevice));
	OK(cudaMemcpy2D(d, p, h.data(), 64, 64, 0, cudaMemcpyHostToDevice));
	OK(cudaMemset2D(d, p, 0, 0, 8));
	cudaMemcpy3DParms e = {};
	e.srcPtr = make_cudaPitchedPtr(h.data(), 64, 64, 8);
	e.dstPtr = make_cudaPitchedPtr(d, p, 64, 8);
	e.extent = make_cudaExtent(64, 8, 0);
	e.kind = cudaMemcpyHostToDevice;
	OK(cudaMemcpy3D(&e));
	if (phos) {
		/* past the end of the allocation: refused whole, before any row lands */
		ERR(cudaMemcpy2D(d, p, h.data(), 64, 64, 9, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
		/* a set is asynchronous: its error may come at the next synchronising call */
		cudaError_t e1 = cudaMemset2D(d, p, 0, 64, 9), e2 = cudaDeviceSynchronize();
		CHECK(e1 == cudaErrorInvalidValue || e2 == cudaErrorInvalidValue, "cudaMemset2D past the end: %s, then %s",
		      cudaGetErrorName(e1), cudaGetErrorName(e2));
		cudaGetLastError();
		OK(cudaMemcpy(now.data(), d, p * 8, cudaMemcpyDeviceToHost));
		for (unsigned char c : now)
			same &= c == 0x24;
		CHECK(same, "a copy past the end changed device memory");
		/* a CUDA array that is not one (tests/transparency/textures uses real ones) */
		cudaMemcpy3DParms a = e;
		a.extent = make_cudaExtent(64, 8, 1);
		a.dstArray = (cudaArray_t)0x1000;
		ERR(cudaMemcpy3D(&a), cudaErrorInvalidValue);
	}
	OK(cudaFree(d));
}

int main(int argc, char **argv)
{
	bool phos = argc > 1 && !strcmp(argv[1], "phos");

	round_trip_2d(100, 9, false, 1);
	round_trip_2d(100, 9, true, 2);
	round_trip_2d(3000, 1000, false, 3);          /* 3 MB: several records each way */
	round_trip_2d(3 << 20, 3, false, 4);          /* rows wider than one record */
	round_trip_2d(9 << 20, 2, true, 5);           /* rows wider than one reply */
	sets_2d();
	volume_3d();
	errors(phos);
	OK(cudaDeviceSynchronize());
	if (failures) {
		printf("copy2d: %d failure(s)\n", failures);
		return 1;
	}
	printf("copy2d: ok\n");
	return 0;
}
