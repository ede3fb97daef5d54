// SPDX-License-Identifier: MIT
//
// CUDA arrays through the driver API, as an image or volume library's host
// side uses them (it links libcuda only): cuArrayCreate (2D, 1D),
// cuArray3DCreate (layered), their descriptors read back, cuMemcpy2D and
// cuMemcpy3D with array sides (offsets in bytes, as the driver counts),
// the 1D forms (cuMemcpyHtoA, AtoH, AtoA, DtoA, AtoD), cuArrayDestroy; and
// texture and surface objects over arrays, pitched and linear memory, their
// descriptions read back.
// Every element is checked on the host, those outside the copied boxes too.
//
// Prints "driver_array: ok" and exits 0 when every check passed.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "driver_array: %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                            \
			fprintf(stderr, "\n");                                   \
			failures++;                                              \
		}                                                                \
	} while (0)

#define CU(call)                                                                     \
	do {                                                                         \
		CUresult r_ = (call);                                                \
		if (r_ != CUDA_SUCCESS) {                                            \
			const char *n_ = NULL;                                       \
			cuGetErrorName(r_, &n_);                                     \
			fprintf(stderr, "driver_array: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				n_ ? n_ : "?");                                      \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUstream st;

	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));

	// --- a 2D float array: filled whole, a box written, read back whole ---
	const size_t W = 33, H = 17;
	CUDA_ARRAY_DESCRIPTOR ad = { W, H, CU_AD_FORMAT_FLOAT, 1 }, got;
	CUarray a2;
	CU(cuArrayCreate(&a2, &ad));
	CU(cuArrayGetDescriptor(&got, a2));
	CHECK(got.Width == W && got.Height == H && got.Format == CU_AD_FORMAT_FLOAT && got.NumChannels == 1,
	      "2D descriptor read back: %zu x %zu format %d x %u", got.Width, got.Height, (int)got.Format,
	      got.NumChannels);
	float *full = (float *)malloc(W * H * 4), *box = (float *)malloc(64 * 12 * 4), *back = (float *)malloc(W * H * 4);
	for (size_t i = 0; i < W * H; i++)
		full[i] = -1.0f - (float)i;
	for (size_t i = 0; i < 64 * 12; i++)
		box[i] = (float)i * 0.5f;
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = full;
	c.srcPitch = W * 4;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
	c.dstArray = a2;
	c.WidthInBytes = W * 4;
	c.Height = H;
	CU(cuMemcpy2D(&c));
	// the box: 20 x 10 floats of a host matrix 64 floats wide, from its (1, 1),
	// into the array at element (2, 3)
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = box;
	c.srcPitch = 64 * 4;
	c.srcXInBytes = 4;
	c.srcY = 1;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
	c.dstArray = a2;
	c.dstXInBytes = 2 * 4;
	c.dstY = 3;
	c.WidthInBytes = 20 * 4;
	c.Height = 10;
	CU(cuMemcpy2DAsync(&c, st));
	CU(cuStreamSynchronize(st));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
	c.srcArray = a2;
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = back;
	c.dstPitch = W * 4;
	c.WidthInBytes = W * 4;
	c.Height = H;
	CU(cuMemcpy2D(&c));
	size_t bad = 0;
	for (size_t y = 0; y < H; y++)
		for (size_t x = 0; x < W; x++) {
			bool in = x >= 2 && x < 22 && y >= 3 && y < 13;
			float want = in ? box[(y - 3 + 1) * 64 + (x - 2 + 1)] : full[y * W + x];
			bad += back[y * W + x] != want;
		}
	CHECK(bad == 0, "2D array: %zu elements wrong after a box was written", bad);

	// --- a layered 3D array of ushort2 through device memory ---
	const size_t W3 = 8, H3 = 5, L = 3, E = 4;   // E: bytes an element
	CUDA_ARRAY3D_DESCRIPTOR a3d = { W3, H3, L, CU_AD_FORMAT_UNSIGNED_INT16, 2, CUDA_ARRAY3D_LAYERED }, g3;
	CUarray a3;
	CU(cuArray3DCreate(&a3, &a3d));
	CU(cuArray3DGetDescriptor(&g3, a3));
	CHECK(g3.Width == W3 && g3.Height == H3 && g3.Depth == L && g3.Format == CU_AD_FORMAT_UNSIGNED_INT16 &&
	      g3.NumChannels == 2 && (g3.Flags & CUDA_ARRAY3D_LAYERED), "3D descriptor read back: %zu %zu %zu %d %u %#x",
	      g3.Width, g3.Height, g3.Depth, (int)g3.Format, g3.NumChannels, g3.Flags);
	uint16_t *v = (uint16_t *)malloc(W3 * H3 * L * E), *vb = (uint16_t *)malloc(W3 * H3 * L * E);
	for (size_t i = 0; i < W3 * H3 * L * 2; i++)
		v[i] = (uint16_t)(i * 37 + 5);
	CUDA_MEMCPY3D t;
	memset(&t, 0, sizeof(t));
	t.srcMemoryType = CU_MEMORYTYPE_HOST;
	t.srcHost = v;
	t.srcPitch = W3 * E;
	t.srcHeight = H3;
	t.dstMemoryType = CU_MEMORYTYPE_ARRAY;
	t.dstArray = a3;
	t.WidthInBytes = W3 * E;
	t.Height = H3;
	t.Depth = L;
	CU(cuMemcpy3D(&t));
	CUdeviceptr dv;
	const size_t DP = 64;   // a device pitch wider than a row (32 bytes)
	CU(cuMemAlloc(&dv, DP * H3 * L));
	CU(cuMemsetD8(dv, 0, DP * H3 * L));
	memset(&t, 0, sizeof(t));
	t.srcMemoryType = CU_MEMORYTYPE_ARRAY;
	t.srcArray = a3;
	t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	t.dstDevice = dv;
	t.dstPitch = DP;
	t.dstHeight = H3;
	t.WidthInBytes = W3 * E;
	t.Height = H3;
	t.Depth = L;
	CU(cuMemcpy3DAsync(&t, st));
	CU(cuStreamSynchronize(st));
	memset(&t, 0, sizeof(t));
	t.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	t.srcDevice = dv;
	t.srcPitch = DP;
	t.srcHeight = H3;
	t.dstMemoryType = CU_MEMORYTYPE_HOST;
	t.dstHost = vb;
	t.dstPitch = W3 * E;
	t.dstHeight = H3;
	t.WidthInBytes = W3 * E;
	t.Height = H3;
	t.Depth = L;
	CU(cuMemcpy3D(&t));
	CHECK(!memcmp(v, vb, W3 * H3 * L * E), "layered array: host -> array -> device -> host differs");

	// --- 1D arrays of uchar4: HtoA at an offset, AtoA, DtoA / AtoD, AtoH ---
	const size_t N = 64;   // elements of 4 bytes
	CUDA_ARRAY_DESCRIPTOR a1d = { N, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4 };
	CUarray a1, b1;
	CU(cuArrayCreate(&a1, &a1d));
	CU(cuArrayCreate(&b1, &a1d));
	uint8_t in[N * 4], out[N * 4], zero[N * 4] = { 0 };
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 11 + 3);
	CU(cuMemcpyHtoA(a1, 0, zero, sizeof(zero)));
	CU(cuMemcpyHtoA(a1, 16, in, 40));   // 10 elements at element 4
	CU(cuMemcpyAtoA(b1, 0, a1, 0, sizeof(in)));
	CUdeviceptr d1;
	CU(cuMemAlloc(&d1, sizeof(in)));
	CU(cuMemcpyAtoD(d1, b1, 0, sizeof(in)));
	CU(cuMemcpyDtoA(a1, 0, d1, sizeof(in)));
	CU(cuMemcpyAtoHAsync(out, a1, 0, sizeof(out), st));
	CU(cuStreamSynchronize(st));
	bad = 0;
	for (size_t i = 0; i < sizeof(out); i++)
		bad += out[i] != (i >= 16 && i < 56 ? in[i - 16] : 0);
	CHECK(bad == 0, "1D arrays: %zu bytes wrong after HtoA, AtoA, AtoD, DtoA, AtoH", bad);

	// --- texture and surface objects over them: made, described back, destroyed ---
	{
		CUDA_RESOURCE_DESC rd, rg;
		CUDA_TEXTURE_DESC td, tg;
		CUtexObject tex, tex2, tex3;

		memset(&rd, 0, sizeof(rd));
		rd.resType = CU_RESOURCE_TYPE_ARRAY;
		rd.res.array.hArray = a2;
		memset(&td, 0, sizeof(td));
		td.addressMode[0] = CU_TR_ADDRESS_MODE_CLAMP;
		td.addressMode[1] = CU_TR_ADDRESS_MODE_BORDER;
		td.filterMode = CU_TR_FILTER_MODE_LINEAR;
		td.flags = CU_TRSF_NORMALIZED_COORDINATES;
		td.borderColor[0] = 0.25f;
		CU(cuTexObjectCreate(&tex, &rd, &td, NULL));
		CU(cuTexObjectGetResourceDesc(&rg, tex));
		CU(cuTexObjectGetTextureDesc(&tg, tex));
		CHECK(rg.resType == CU_RESOURCE_TYPE_ARRAY && rg.res.array.hArray == a2, "texture's resource read back");
		// (not the border colour: driver 580 gave back another value than
		// the one set, natively on an H200, 2026-11-27)
		CHECK(tg.addressMode[0] == CU_TR_ADDRESS_MODE_CLAMP && tg.addressMode[1] == CU_TR_ADDRESS_MODE_BORDER &&
		      tg.filterMode == CU_TR_FILTER_MODE_LINEAR && (tg.flags & CU_TRSF_NORMALIZED_COORDINATES) &&
		      !(tg.flags & CU_TRSF_SRGB),
		      "texture's description read back: modes %d %d filter %d flags %#x", (int)tg.addressMode[0],
		      (int)tg.addressMode[1], (int)tg.filterMode, tg.flags);
		// pitched uchar4 memory, read as integers; and linear memory of floats
		memset(&rd, 0, sizeof(rd));
		rd.resType = CU_RESOURCE_TYPE_PITCH2D;
		rd.res.pitch2D.devPtr = dv;
		rd.res.pitch2D.format = CU_AD_FORMAT_UNSIGNED_INT8;
		rd.res.pitch2D.numChannels = 4;
		rd.res.pitch2D.width = 8;
		rd.res.pitch2D.height = 4;
		rd.res.pitch2D.pitchInBytes = DP;
		memset(&td, 0, sizeof(td));
		td.flags = CU_TRSF_READ_AS_INTEGER;
		CU(cuTexObjectCreate(&tex2, &rd, &td, NULL));
		CU(cuTexObjectGetResourceDesc(&rg, tex2));
		CU(cuTexObjectGetTextureDesc(&tg, tex2));
		CHECK(rg.resType == CU_RESOURCE_TYPE_PITCH2D && rg.res.pitch2D.devPtr == dv &&
		      rg.res.pitch2D.format == CU_AD_FORMAT_UNSIGNED_INT8 && rg.res.pitch2D.numChannels == 4 &&
		      rg.res.pitch2D.width == 8 && rg.res.pitch2D.height == 4 && rg.res.pitch2D.pitchInBytes == DP &&
		      (tg.flags & CU_TRSF_READ_AS_INTEGER), "pitched texture read back: format %d x %u, flags %#x",
		      (int)rg.res.pitch2D.format, rg.res.pitch2D.numChannels, tg.flags);
		memset(&rd, 0, sizeof(rd));
		rd.resType = CU_RESOURCE_TYPE_LINEAR;
		rd.res.linear.devPtr = dv;
		rd.res.linear.format = CU_AD_FORMAT_FLOAT;
		rd.res.linear.numChannels = 1;
		rd.res.linear.sizeInBytes = DP * H3 * L;   // the whole allocation
		memset(&td, 0, sizeof(td));
		CU(cuTexObjectCreate(&tex3, &rd, &td, NULL));
		CU(cuTexObjectGetResourceDesc(&rg, tex3));
		CHECK(rg.resType == CU_RESOURCE_TYPE_LINEAR && rg.res.linear.devPtr == dv &&
		      rg.res.linear.format == CU_AD_FORMAT_FLOAT && rg.res.linear.sizeInBytes == DP * H3 * L,
		      "linear texture read back");
		CU(cuTexObjectDestroy(tex));
		CU(cuTexObjectDestroy(tex2));
		CU(cuTexObjectDestroy(tex3));
		// a surface over an array made for surface loads and stores
		CUDA_ARRAY3D_DESCRIPTOR sd = { 16, 16, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST };
		CUarray sa;
		CUsurfObject surf;
		CU(cuArray3DCreate(&sa, &sd));
		memset(&rd, 0, sizeof(rd));
		rd.resType = CU_RESOURCE_TYPE_ARRAY;
		rd.res.array.hArray = sa;
		CU(cuSurfObjectCreate(&surf, &rd));
		CU(cuSurfObjectGetResourceDesc(&rg, surf));
		CHECK(rg.resType == CU_RESOURCE_TYPE_ARRAY && rg.res.array.hArray == sa, "surface's resource read back");
		CU(cuSurfObjectDestroy(surf));
		CU(cuArrayDestroy(sa));
	}

	CU(cuArrayDestroy(a2));
	CU(cuArrayDestroy(a3));
	CU(cuArrayDestroy(a1));
	CU(cuArrayDestroy(b1));
	CU(cuMemFree(dv));
	CU(cuMemFree(d1));
	CU(cuStreamDestroy(st));
	CU(cuDevicePrimaryCtxRelease(dev));
	free(full);
	free(box);
	free(back);
	free(v);
	free(vb);
	if (failures) {
		printf("driver_array: %d check(s) failed\n", failures);
		return 1;
	}
	printf("driver_array: ok\n");
	return 0;
}
