// SPDX-License-Identifier: MIT
//
// Pitched copies and 2D sets through the driver API, as a driver API program
// (a JIT's host side, an image library) writes them: it links libcuda only.
// cuMemcpy2D and cuMemcpy3D (and their Async forms) between host and device
// memory and device to device, with offsets on both sides and pitches wider
// than the rows; cuMemsetD2D8/16/32 (and Async) with values whose bytes
// differ. Every byte is checked on the host, the padding between rows
// included (it must stay untouched).
//
//   driver_2d [phos]   "phos": also checks what only phos-fn promises: a 3D
//                      copy of several slices without the rows per slice
//                      (srcHeight 0, which CUDA documents as needed) is
//                      refused; the driver (580) took it, to no known effect
//
// Prints "driver_2d: ok" and exits 0 when every check passed.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "driver_2d: %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
			failures++;                                           \
		}                                                             \
	} while (0)

#define CU(call)                                                                     \
	do {                                                                         \
		CUresult r_ = (call);                                                \
		if (r_ != CUDA_SUCCESS) {                                            \
			const char *n_ = NULL;                                       \
			cuGetErrorName(r_, &n_);                                     \
			fprintf(stderr, "driver_2d: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				n_ ? n_ : "?");                                      \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 131 + 7);
}

// A device buffer of rows x pitch bytes, every byte `fill`, read back whole.
static void device_fill(CUdeviceptr d, size_t bytes, uint8_t fill)
{
	CU(cuMemsetD8(d, fill, bytes));
}

static void read_all(CUdeviceptr d, uint8_t *h, size_t bytes)
{
	CU(cuMemcpyDtoH(h, d, bytes));
}

int main(int argc, char **argv)
{
	bool phos_mode = argc > 1 && !strcmp(argv[1], "phos");
	CUdevice dev;
	CUcontext ctx;
	CUstream st;

	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));

	// --- 2D: host (pitch 160) -> device (pitch 256) at offsets, back to host ---
	const size_t W = 100, H = 37, HP = 160, DP = 256, DROWS = 48;
	uint8_t *src = (uint8_t *)malloc(HP * H), *back = (uint8_t *)malloc(DP * DROWS), *dst = (uint8_t *)malloc(HP * H);
	CUdeviceptr d1, d2;

	for (size_t i = 0; i < HP * H; i++)
		src[i] = pat(i);
	CU(cuMemAlloc(&d1, DP * DROWS));
	CU(cuMemAlloc(&d2, DP * DROWS));
	device_fill(d1, DP * DROWS, 0xee);
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.srcPitch = HP;
	c.srcXInBytes = 3;
	c.srcY = 2;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d1;
	c.dstPitch = DP;
	c.dstXInBytes = 20;
	c.dstY = 5;
	c.WidthInBytes = W;
	c.Height = H - 2;
	CU(cuMemcpy2D(&c));
	read_all(d1, back, DP * DROWS);
	size_t bad = 0;
	for (size_t y = 0; y < DROWS; y++)
		for (size_t x = 0; x < DP; x++) {
			bool in = y >= 5 && y < 5 + H - 2 && x >= 20 && x < 20 + W;
			uint8_t want = in ? src[(y - 5 + 2) * HP + (x - 20 + 3)] : 0xee;
			bad += back[y * DP + x] != want;
		}
	CHECK(bad == 0, "cuMemcpy2D host to device: %zu bytes wrong (padding included)", bad);

	// device -> device (on a stream), then device -> host with other offsets
	device_fill(d2, DP * DROWS, 0x11);
	CUDA_MEMCPY2D dd;
	memset(&dd, 0, sizeof(dd));
	dd.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	dd.srcDevice = d1;
	dd.srcPitch = DP;
	dd.srcXInBytes = 20;
	dd.srcY = 5;
	dd.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	dd.dstDevice = d2;
	dd.dstPitch = DP;
	dd.dstXInBytes = 0;
	dd.dstY = 1;
	dd.WidthInBytes = W;
	dd.Height = H - 2;
	CU(cuMemcpy2DAsync(&dd, st));
	CU(cuStreamSynchronize(st));
	memset(dst, 0x5a, HP * H);
	CUDA_MEMCPY2D dh;
	memset(&dh, 0, sizeof(dh));
	dh.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	dh.srcDevice = d2;
	dh.srcPitch = DP;
	dh.srcY = 1;
	dh.dstMemoryType = CU_MEMORYTYPE_HOST;
	dh.dstHost = dst;
	dh.dstPitch = HP;
	dh.dstXInBytes = 3;
	dh.dstY = 2;
	dh.WidthInBytes = W;
	dh.Height = H - 2;
	CU(cuMemcpy2D(&dh));
	bad = 0;
	for (size_t y = 0; y < H; y++)
		for (size_t x = 0; x < HP; x++) {
			bool in = y >= 2 && x >= 3 && x < 3 + W;
			bad += dst[y * HP + x] != (in ? src[y * HP + x] : 0x5a);
		}
	CHECK(bad == 0, "cuMemcpy2D device to device to host: %zu bytes wrong", bad);

	// --- 3D: 3 slices of 9 rows of 40 bytes, host (pitch 64, 10 rows a slice)
	// to device (pitch 128, 12 rows a slice) at z 1, and back ---
	const size_t W3 = 40, H3 = 9, D3 = 3, SP = 64, SR = 10, DP3 = 128, DR = 12, DZ = 5;
	uint8_t *s3 = (uint8_t *)malloc(SP * SR * D3), *b3 = (uint8_t *)malloc(DP3 * DR * DZ);
	CUdeviceptr d3;

	for (size_t i = 0; i < SP * SR * D3; i++)
		s3[i] = pat(i * 7 + 1);
	CU(cuMemAlloc(&d3, DP3 * DR * DZ));
	device_fill(d3, DP3 * DR * DZ, 0x33);
	CUDA_MEMCPY3D t;
	memset(&t, 0, sizeof(t));
	t.srcMemoryType = CU_MEMORYTYPE_HOST;
	t.srcHost = s3;
	t.srcPitch = SP;
	t.srcHeight = SR;
	t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	t.dstDevice = d3;
	t.dstPitch = DP3;
	t.dstHeight = DR;
	t.dstXInBytes = 8;
	t.dstY = 2;
	t.dstZ = 1;
	t.WidthInBytes = W3;
	t.Height = H3;
	t.Depth = D3;
	CU(cuMemcpy3DAsync(&t, st));
	CU(cuStreamSynchronize(st));
	read_all(d3, b3, DP3 * DR * DZ);
	bad = 0;
	for (size_t z = 0; z < DZ; z++)
		for (size_t y = 0; y < DR; y++)
			for (size_t x = 0; x < DP3; x++) {
				bool in = z >= 1 && z < 1 + D3 && y >= 2 && y < 2 + H3 && x >= 8 && x < 8 + W3;
				uint8_t want = in ? s3[(z - 1) * SP * SR + (y - 2) * SP + (x - 8)] : 0x33;
				bad += b3[(z * DR + y) * DP3 + x] != want;
			}
	CHECK(bad == 0, "cuMemcpy3D host to device: %zu bytes wrong", bad);
	memset(b3, 0, SP * SR * D3);
	CUDA_MEMCPY3D u;
	memset(&u, 0, sizeof(u));
	u.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	u.srcDevice = d3;
	u.srcPitch = DP3;
	u.srcHeight = DR;
	u.srcXInBytes = 8;
	u.srcY = 2;
	u.srcZ = 1;
	u.dstMemoryType = CU_MEMORYTYPE_HOST;
	u.dstHost = b3;
	u.dstPitch = SP;
	u.dstHeight = SR;
	u.WidthInBytes = W3;
	u.Height = H3;
	u.Depth = D3;
	CU(cuMemcpy3D(&u));
	bad = 0;
	for (size_t z = 0; z < D3; z++)
		for (size_t y = 0; y < H3; y++)
			for (size_t x = 0; x < W3; x++)
				bad += b3[(z * SR + y) * SP + x] != s3[(z * SR + y) * SP + x];
	CHECK(bad == 0, "cuMemcpy3D device to host: %zu bytes wrong", bad);
	// a 3D copy of several slices needs the rows per slice of each side
	if (phos_mode) {
		u.srcHeight = 0;
		CUresult r = cuMemcpy3D(&u);
		CHECK(r == CUDA_ERROR_INVALID_VALUE, "cuMemcpy3D without srcHeight: %d, want CUDA_ERROR_INVALID_VALUE",
		      (int)r);
	}

	// --- 2D sets: 8, 16 and 32 bits, rows narrower than the pitch ---
	const size_t SETR = 20;
	struct {
		unsigned elem;
		uint32_t value;
		bool async;
	} sets[] = { { 1, 0xa7, false }, { 2, 0x1234, false }, { 4, 0xdeadbeef, false },
		     { 2, 0x5678, true }, { 4, 0x01020304, true }, { 4, 0x42424242, false } };
	for (auto &s : sets) {
		size_t width = 88 / s.elem;   // elements a row: 88 bytes of the 256 of the pitch

		device_fill(d1, DP * DROWS, 0x99);
		CUdeviceptr at = d1 + DP;   // from the second row
		if (s.elem == 1)
			CU(s.async ? cuMemsetD2D8Async(at, DP, (unsigned char)s.value, width, SETR, st)
				   : cuMemsetD2D8(at, DP, (unsigned char)s.value, width, SETR));
		else if (s.elem == 2)
			CU(s.async ? cuMemsetD2D16Async(at, DP, (unsigned short)s.value, width, SETR, st)
				   : cuMemsetD2D16(at, DP, (unsigned short)s.value, width, SETR));
		else
			CU(s.async ? cuMemsetD2D32Async(at, DP, s.value, width, SETR, st)
				   : cuMemsetD2D32(at, DP, s.value, width, SETR));
		CU(cuCtxSynchronize());
		read_all(d1, back, DP * DROWS);
		bad = 0;
		for (size_t y = 0; y < DROWS; y++)
			for (size_t x = 0; x < DP; x++) {
				bool in = y >= 1 && y < 1 + SETR && x < width * s.elem;
				uint8_t want = in ? (uint8_t)(s.value >> (8 * (x % s.elem))) : 0x99;
				bad += back[y * DP + x] != want;
			}
		CHECK(bad == 0, "cuMemsetD2D%u%s of %#x: %zu bytes wrong", s.elem * 8, s.async ? "Async" : "",
		      (unsigned)s.value, bad);
	}

	CU(cuMemFree(d1));
	CU(cuMemFree(d2));
	CU(cuMemFree(d3));
	CU(cuStreamDestroy(st));
	CU(cuDevicePrimaryCtxRelease(dev));
	free(src);
	free(back);
	free(dst);
	free(s3);
	free(b3);
	if (failures) {
		printf("driver_2d: %d check(s) failed\n", failures);
		return 1;
	}
	printf("driver_2d: ok\n");
	return 0;
}
