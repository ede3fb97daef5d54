// SPDX-License-Identifier: MIT
// CUDA arrays as programs use them: 1D, 2D, 3D and 2D layered arrays, with
// and without surface load/store; their format and shape read back
// (cudaArrayGetInfo, cudaGetChannelDesc); copies between arrays and host
// memory, pitched device memory and other arrays, whole and by parts, on the
// null stream and on a stream; the deprecated cudaMemcpyToArray and
// cudaMemcpyFromArray, within a row and across rows; cudaMemcpy3D with offset
// boxes; a copy past an array's width refused as CUDA refuses it; with
// --free-twice, a second cudaFreeArray refused (where CUDA crashes). Every
// result is checked against a CPU copy of what the array should hold.
#include <cstring>
#include <vector>

#include "common.h"

// cudaMemcpyToArray and cudaMemcpyFromArray are deprecated, and still used
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static const int W = 37, H = 19;   // the 2D arrays, in floats

// value of element (x, y, z) of a reference: small integers, exact in float
static float value(int x, int y, int z)
{
	return (float)(z * 10000 + y * 100 + x);
}

// a's format, shape and flags are what it was made with
static void check_info(cudaArray_t a, cudaChannelFormatDesc want, size_t w, size_t h, size_t d, unsigned flag,
		       const char *what)
{
	cudaChannelFormatDesc f;
	cudaExtent e;
	unsigned flags = 0;

	CK(cudaArrayGetInfo(&f, &e, &flags, a));
	EXPECT(f.x == want.x && f.y == want.y && f.z == want.z && f.w == want.w && f.f == want.f,
	       "%s: format (%d %d %d %d kind %d)", what, f.x, f.y, f.z, f.w, (int)f.f);
	EXPECT(e.width == w && e.height == h && e.depth == d, "%s: extent %zu x %zu x %zu, want %zu x %zu x %zu", what,
	       e.width, e.height, e.depth, w, h, d);
	EXPECT((flags & flag) == flag, "%s: flags %#x lack %#x", what, flags, flag);
	memset(&f, 0, sizeof(f));
	CK(cudaGetChannelDesc(&f, a));
	EXPECT(f.x == want.x && f.y == want.y && f.z == want.z && f.w == want.w && f.f == want.f,
	       "%s: cudaGetChannelDesc (%d %d %d %d kind %d)", what, f.x, f.y, f.z, f.w, (int)f.f);
}

// the whole of 2D float array a equals ref (W x H), read with cudaMemcpy2DFromArray into a padded buffer
static void check_2d(cudaArray_t a, const std::vector<float> &ref, const char *what)
{
	const int P = W + 3;
	std::vector<float> got(P * H, -1.0f);

	CK(cudaMemcpy2DFromArray(got.data(), P * sizeof(float), a, 0, 0, W * sizeof(float), H,
				 cudaMemcpyDeviceToHost));
	for (int y = 0; y < H; y++)
		for (int x = 0; x < P; x++) {
			float want = x < W ? ref[y * W + x] : -1.0f;   // the padding untouched

			EXPECT(got[y * P + x] == want, "%s: (%d, %d) = %g, want %g", what, x, y, got[y * P + x], want);
		}
}

static void arrays_2d(void)
{
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a, b;
	std::vector<float> ref(W * H), ref_b(W * H);
	cudaStream_t s;

	CK(cudaMallocArray(&a, &fd, W, H));
	CK(cudaMallocArray(&b, &fd, W, H, cudaArraySurfaceLoadStore));
	check_info(a, fd, W, H, 0, 0, "2D");
	check_info(b, fd, W, H, 0, cudaArraySurfaceLoadStore, "2D surface");

	// host to array, whole, tight rows
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			ref[y * W + x] = value(x, y, 0);
	CK(cudaMemcpy2DToArray(a, 0, 0, ref.data(), W * sizeof(float), W * sizeof(float), H,
			       cudaMemcpyHostToDevice));
	check_2d(a, ref, "H2A whole");

	// host to array, an 8 x 4 patch at (5, 3) from rows of 11
	std::vector<float> patch(11 * 4);
	for (int y = 0; y < 4; y++)
		for (int x = 0; x < 11; x++)
			patch[y * 11 + x] = -value(x, y, 1);
	CK(cudaMemcpy2DToArray(a, 5 * sizeof(float), 3, patch.data(), 11 * sizeof(float), 8 * sizeof(float), 4,
			       cudaMemcpyHostToDevice));
	for (int y = 0; y < 4; y++)
		for (int x = 0; x < 8; x++)
			ref[(3 + y) * W + 5 + x] = patch[y * 11 + x];
	check_2d(a, ref, "H2A patch");

	// array to host, a 6 x 5 part at (2, 1)
	std::vector<float> part(6 * 5);
	CK(cudaMemcpy2DFromArray(part.data(), 6 * sizeof(float), a, 2 * sizeof(float), 1, 6 * sizeof(float), 5,
				 cudaMemcpyDeviceToHost));
	for (int y = 0; y < 5; y++)
		for (int x = 0; x < 6; x++)
			EXPECT(part[y * 6 + x] == ref[(1 + y) * W + 2 + x], "A2H part (%d, %d) = %g", x, y, part[y * 6 + x]);

	// pitched device memory to array and back
	float *dp, *dq;
	size_t pitch, qpitch;
	CK(cudaMallocPitch(&dp, &pitch, W * sizeof(float), H));
	CK(cudaMallocPitch(&dq, &qpitch, W * sizeof(float), H));
	for (int i = 0; i < W * H; i++)
		ref_b[i] = value(i % W, i / W, 2);
	CK(cudaMemcpy2D(dp, pitch, ref_b.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
	CK(cudaMemcpy2DToArray(b, 0, 0, dp, pitch, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
	check_2d(b, ref_b, "D2A");
	CK(cudaMemcpy2DFromArray(dq, qpitch, b, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
	std::vector<float> back(W * H);
	CK(cudaMemcpy2D(back.data(), W * sizeof(float), dq, qpitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
	for (int i = 0; i < W * H; i++)
		EXPECT(back[i] == ref_b[i], "A2D [%d] = %g, want %g", i, back[i], ref_b[i]);

	// on a stream, from and to pinned memory
	float *pin, *pout;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMallocHost(&pin, W * H * sizeof(float)));
	CK(cudaMallocHost(&pout, W * H * sizeof(float)));
	for (int i = 0; i < W * H; i++) {
		pin[i] = value(i % W, i / W, 3);
		pout[i] = 0;
	}
	CK(cudaMemcpy2DToArrayAsync(a, 0, 0, pin, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice,
				    s));
	CK(cudaMemcpy2DFromArrayAsync(pout, W * sizeof(float), a, 0, 0, W * sizeof(float), H,
				      cudaMemcpyDeviceToHost, s));
	CK(cudaStreamSynchronize(s));
	for (int i = 0; i < W * H; i++) {
		EXPECT(pout[i] == pin[i], "async [%d] = %g, want %g", i, pout[i], pin[i]);
		ref[i] = pin[i];
	}

	// the deprecated forms, linear copies from a byte offset in a row: 10 floats at (4, 2)
	float row[10], row_back[10];
	for (int x = 0; x < 10; x++)
		row[x] = 0.5f + (float)x;
	CK(cudaMemcpyToArray(a, 4 * sizeof(float), 2, row, sizeof(row), cudaMemcpyHostToDevice));
	for (int x = 0; x < 10; x++)
		ref[2 * W + 4 + x] = row[x];
	CK(cudaMemcpyFromArray(row_back, a, 4 * sizeof(float), 2, sizeof(row_back), cudaMemcpyDeviceToHost));
	for (int x = 0; x < 10; x++)
		EXPECT(row_back[x] == row[x], "cudaMemcpyFromArray [%d] = %g, want %g", x, row_back[x], row[x]);
	check_2d(a, ref, "cudaMemcpyToArray");
	// and across rows: from (W - 3, 5), the copy goes on at the start of row 6
	CK(cudaMemcpyToArray(a, (W - 3) * sizeof(float), 5, row, sizeof(row), cudaMemcpyHostToDevice));
	for (int x = 0; x < 10; x++)
		ref[5 * W + W - 3 + x] = row[x];
	CK(cudaMemcpyFromArray(row_back, a, (W - 3) * sizeof(float), 5, sizeof(row_back), cudaMemcpyDeviceToHost));
	for (int x = 0; x < 10; x++)
		EXPECT(row_back[x] == row[x], "cudaMemcpyFromArray across rows [%d] = %g, want %g", x, row_back[x],
		       row[x]);
	check_2d(a, ref, "cudaMemcpyToArray across rows");

	// array to array: 20 x 10 of a at (3, 4) to b at (1, 2)
	CK(cudaMemcpy2DArrayToArray(b, 1 * sizeof(float), 2, a, 3 * sizeof(float), 4, 20 * sizeof(float), 10,
				    cudaMemcpyDeviceToDevice));
	for (int y = 0; y < 10; y++)
		for (int x = 0; x < 20; x++)
			ref_b[(2 + y) * W + 1 + x] = ref[(4 + y) * W + 3 + x];
	check_2d(b, ref_b, "A2A");

	// a copy past the width is refused, and changes nothing
	cudaError_t e = cudaMemcpy2DToArray(a, sizeof(float), 0, ref_b.data(), W * sizeof(float), W * sizeof(float),
					    1, cudaMemcpyHostToDevice);
	EXPECT(e == cudaErrorInvalidValue, "copy past the width: %s", cudaGetErrorName(e));
	(void)cudaGetLastError();
	check_2d(a, ref, "after the refused copy");

	CK(cudaFreeHost(pin));
	CK(cudaFreeHost(pout));
	CK(cudaStreamDestroy(s));
	CK(cudaFree(dp));
	CK(cudaFree(dq));
	CK(cudaFreeArray(a));
	CK(cudaFreeArray(b));
}

static void arrays_1d(void)
{
	const int N = 100;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<uchar4>();
	cudaArray_t a;
	std::vector<uchar4> in(N), part(20), out(N);

	CK(cudaMallocArray(&a, &fd, N));
	check_info(a, fd, N, 0, 0, 0, "1D uchar4");
	for (int i = 0; i < N; i++)
		in[i] = make_uchar4(i, 255 - i, i * 3, 7);
	CK(cudaMemcpyToArray(a, 0, 0, in.data(), N * sizeof(uchar4), cudaMemcpyHostToDevice));
	for (int i = 0; i < 20; i++) {
		part[i] = make_uchar4(200, i, 0, 1);
		in[30 + i] = part[i];
	}
	CK(cudaMemcpy2DToArray(a, 30 * sizeof(uchar4), 0, part.data(), 20 * sizeof(uchar4), 20 * sizeof(uchar4), 1,
			       cudaMemcpyHostToDevice));
	CK(cudaMemcpyFromArray(out.data(), a, 0, 0, N * sizeof(uchar4), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		EXPECT(memcmp(&out[i], &in[i], sizeof(uchar4)) == 0, "1D [%d] = (%d %d %d %d)", i, out[i].x, out[i].y,
		       out[i].z, out[i].w);
	CK(cudaFreeArray(a));
}

// a 3D (or layered) float array of w x h x d: whole copies through padded
// host buffers, then a box; error if anything differs
static void arrays_3d(int w, int h, int d, unsigned flags, const char *what)
{
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a;
	// host buffers with padded rows (pitch) and slices (ysize rows)
	const int PW = w + 5, PH = h + 2;
	std::vector<float> in(PW * PH * d), out(PW * PH * d), ref(w * h * d);
	cudaMemcpy3DParms p;

	CK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(w, h, d), flags));
	check_info(a, fd, w, h, d, flags, what);
	for (int z = 0; z < d; z++)
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++) {
				ref[(z * h + y) * w + x] = value(x, y, z);
				in[(z * PH + y) * PW + x] = value(x, y, z);
			}
	memset(&p, 0, sizeof(p));
	p.srcPtr = make_cudaPitchedPtr(in.data(), PW * sizeof(float), w, PH);
	p.dstArray = a;
	p.extent = make_cudaExtent(w, h, d);   // elements: an array is involved
	p.kind = cudaMemcpyHostToDevice;
	CK(cudaMemcpy3D(&p));

	// a 5 x 3 x 2 box: from the host at (1, 2, 1) to the array at (4, 1, d - 2). With an
	// array in the copy, CUDA counts the host side's x in the array's elements too
	// (its documentation says bytes; seen on an H200, CUDA 13)
	for (int i = 0; i < PW * PH * d; i++)
		in[i] = -in[i] - 1.0f;
	memset(&p, 0, sizeof(p));
	p.srcPtr = make_cudaPitchedPtr(in.data(), PW * sizeof(float), w, PH);
	p.srcPos = make_cudaPos(1, 2, 1);
	p.dstArray = a;
	p.dstPos = make_cudaPos(4, 1, d - 2);
	p.extent = make_cudaExtent(5, 3, 2);
	p.kind = cudaMemcpyHostToDevice;
	CK(cudaMemcpy3D(&p));
	for (int z = 0; z < 2; z++)
		for (int y = 0; y < 3; y++)
			for (int x = 0; x < 5; x++)
				ref[((d - 2 + z) * h + 1 + y) * w + 4 + x] = in[((1 + z) * PH + 2 + y) * PW + 1 + x];

	// back whole
	memset(&p, 0, sizeof(p));
	p.srcArray = a;
	p.dstPtr = make_cudaPitchedPtr(out.data(), PW * sizeof(float), w, PH);
	p.extent = make_cudaExtent(w, h, d);
	p.kind = cudaMemcpyDeviceToHost;
	CK(cudaMemcpy3D(&p));
	for (int z = 0; z < d; z++)
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++)
				EXPECT(out[(z * PH + y) * PW + x] == ref[(z * h + y) * w + x], "%s: (%d, %d, %d) = %g, want %g",
				       what, x, y, z, out[(z * PH + y) * PW + x], ref[(z * h + y) * w + x]);

	// back a 3 x 2 x 2 box from (2, 1, 0) into a host buffer of 5 x 3 x 2 at (2, 1, 0)
	const int BW = 5, BH = 3;
	std::vector<float> box(BW * BH * 2, 0.25f);
	memset(&p, 0, sizeof(p));
	p.srcArray = a;
	p.srcPos = make_cudaPos(2, 1, 0);
	p.dstPtr = make_cudaPitchedPtr(box.data(), BW * sizeof(float), BW, BH);
	p.dstPos = make_cudaPos(2, 1, 0);
	p.extent = make_cudaExtent(3, 2, 2);
	p.kind = cudaMemcpyDeviceToHost;
	CK(cudaMemcpy3D(&p));
	for (int z = 0; z < 2; z++)
		for (int y = 0; y < BH; y++)
			for (int x = 0; x < BW; x++) {
				bool in_box = x >= 2 && y >= 1;
				float want = in_box ? ref[(z * h + y) * w + x] : 0.25f;

				EXPECT(box[(z * BH + y) * BW + x] == want, "%s: box (%d, %d, %d) = %g, want %g", what, x, y,
				       z, box[(z * BH + y) * BW + x], want);
			}
	CK(cudaFreeArray(a));
}

// freeing an array twice is an error the second time. CUDA itself crashes on
// it (a segfault in libcuda, seen on an H200 with CUDA 13), so only when asked:
// `arrays --free-twice`, as tests/integration runs it under phos-fn
static void free_twice(void)
{
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a;

	CK(cudaMallocArray(&a, &fd, 16, 16));
	CK(cudaFreeArray(a));
	cudaError_t e = cudaFreeArray(a);
	EXPECT(e != cudaSuccess, "a second cudaFreeArray succeeded");
	(void)cudaGetLastError();
}

int main(int argc, char **argv)
{
	arrays_2d();
	arrays_1d();
	arrays_3d(13, 7, 5, 0, "3D");
	arrays_3d(9, 6, 4, cudaArrayLayered, "2D layered");
	if (argc > 1 && strcmp(argv[1], "--free-twice") == 0)
		free_twice();
	CK(cudaDeviceSynchronize());
	printf("arrays: ok\n");
	return 0;
}
