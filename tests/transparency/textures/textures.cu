// SPDX-License-Identifier: MIT
// Texture and surface objects as programs use them. Textures on arrays: 2D
// float with point filtering and clamping; linear filtering with normalized
// coordinates and wrapping; uchar4 read as normalized floats; signed shorts
// read as they are; the border address mode; a 3D texture filtered
// trilinearly; a 2D layered one. Textures on linear memory (tex1Dfetch, float
// and normalized uchar) and on pitched 2D memory. The descriptors of a texture
// read back. Surfaces: a 2D one written and read by kernels, out of range
// accesses with cudaBoundaryModeZero included, and a 3D one; the arrays
// copied back. Every result is checked against a CPU reference: exactly where
// no filtering weight is involved, within 1e-2 where one is (the GPU keeps
// the weights in 9-bit fixed point). Coordinates are sums and products of
// powers of two, exact on both sides.
#include <cstring>
#include <vector>

#include "common.h"

// out[j nx + i] = tex2D<float>(t, x0 + i dx, y0 + j dy)
__global__ void tex_fetch2d(cudaTextureObject_t t, float *out, int nx, int ny, float x0, float y0, float dx,
			    float dy)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;

	if (i < nx && j < ny)
		out[j * nx + i] = tex2D<float>(t, x0 + i * dx, y0 + j * dy);
}

// out[j nx + i] = tex2D<float4>(t, i + 0.5, j + 0.5): each element's centre
__global__ void tex_fetch2d4(cudaTextureObject_t t, float4 *out, int nx, int ny)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;

	if (i < nx && j < ny)
		out[j * nx + i] = tex2D<float4>(t, i + 0.5f, j + 0.5f);
}

// out[j nx + i] = tex2D<short>(t, i + 0.5, j + 0.5)
__global__ void tex_fetch2d_short(cudaTextureObject_t t, short *out, int nx, int ny)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;

	if (i < nx && j < ny)
		out[j * nx + i] = tex2D<short>(t, i + 0.5f, j + 0.5f);
}

// out[(k ny + j) nx + i] = tex3D<float>(t, x0 + i d, x0 + j d, x0 + k d)
__global__ void tex_fetch3d(cudaTextureObject_t t, float *out, int nx, int ny, int nz, float x0, float d)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
	int k = blockIdx.z * blockDim.z + threadIdx.z;

	if (i < nx && j < ny && k < nz)
		out[(k * ny + j) * nx + i] = tex3D<float>(t, x0 + i * d, x0 + j * d, x0 + k * d);
}

// out[(k ny + j) nx + i] = tex2DLayered<float>(t, i + 0.5, j + 0.5, layer k)
__global__ void tex_fetch_layered(cudaTextureObject_t t, float *out, int nx, int ny, int layers)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
	int k = blockIdx.z * blockDim.z + threadIdx.z;

	if (i < nx && j < ny && k < layers)
		out[(k * ny + j) * nx + i] = tex2DLayered<float>(t, i + 0.5f, j + 0.5f, k);
}

// out[i] = tex1Dfetch<float>(t, i)
__global__ void tex_fetch1d(cudaTextureObject_t t, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = tex1Dfetch<float>(t, i);
}

// element (x, y) of s = k (1000 y + x), for x < nx, y < ny; those outside s dropped
__global__ void tex_surf_write2d(cudaSurfaceObject_t s, int nx, int ny, float k)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;

	if (x < nx && y < ny)
		surf2Dwrite(k * (float)(1000 * y + x), s, x * (int)sizeof(float), y, cudaBoundaryModeZero);
}

// out[y nx + x] = element (x, y) of s + 1, for x < nx, y < ny; those outside s read 0
__global__ void tex_surf_read2d(cudaSurfaceObject_t s, float *out, int nx, int ny)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;

	if (x < nx && y < ny)
		out[y * nx + x] = surf2Dread<float>(s, x * (int)sizeof(float), y, cudaBoundaryModeZero) + 1.0f;
}

// element (x, y, z) of s = (z h + y) w + x
__global__ void tex_surf_write3d(cudaSurfaceObject_t s, int w, int h, int d)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
	int z = blockIdx.z * blockDim.z + threadIdx.z;

	if (x < w && y < h && z < d)
		surf3Dwrite((float)((z * h + y) * w + x), s, x * (int)sizeof(float), y, z);
}

static const dim3 BLOCK(16, 8);

static dim3 grid_for(int nx, int ny, int nz = 1)
{
	return dim3((nx + BLOCK.x - 1) / BLOCK.x, (ny + BLOCK.y - 1) / BLOCK.y, nz);
}

static int clamp(int i, int n)
{
	return i < 0 ? 0 : i >= n ? n - 1 : i;
}

static int wrap(int i, int n)
{
	return (i % n + n) % n;
}

// a texture object on array a
static cudaTextureObject_t texture_on(cudaArray_t a, cudaTextureAddressMode address, cudaTextureFilterMode filter,
				      cudaTextureReadMode read, bool normalized)
{
	cudaResourceDesc r;
	cudaTextureDesc d;
	cudaTextureObject_t t;

	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = a;
	memset(&d, 0, sizeof(d));
	d.addressMode[0] = d.addressMode[1] = d.addressMode[2] = address;
	d.filterMode = filter;
	d.readMode = read;
	d.normalizedCoords = normalized;
	CK(cudaCreateTextureObject(&t, &r, &d, nullptr));
	return t;
}

// a 2D float array of w x h holding host[y w + x]
static cudaArray_t array_2d(const float *host, int w, int h, unsigned flags = 0)
{
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a;

	CK(cudaMallocArray(&a, &fd, w, h, flags));
	CK(cudaMemcpy2DToArray(a, 0, 0, host, w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
	return a;
}

// a 3D float array (layered or not) of w x h x d holding host[(z h + y) w + x]
static cudaArray_t array_3d(const float *host, int w, int h, int d, unsigned flags)
{
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a;
	cudaMemcpy3DParms p;

	CK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(w, h, d), flags));
	memset(&p, 0, sizeof(p));
	p.srcPtr = make_cudaPitchedPtr((void *)host, w * sizeof(float), w, h);
	p.dstArray = a;
	p.extent = make_cudaExtent(w, h, d);
	p.kind = cudaMemcpyHostToDevice;
	CK(cudaMemcpy3D(&p));
	return a;
}

// tex_fetch2d of t over nx x ny points, into host
static std::vector<float> fetch2d(cudaTextureObject_t t, int nx, int ny, float x0, float y0, float dx, float dy)
{
	std::vector<float> host(nx * ny);
	float *out;

	CK(cudaMalloc(&out, nx * ny * sizeof(float)));
	tex_fetch2d<<<grid_for(nx, ny), BLOCK>>>(t, out, nx, ny, x0, y0, dx, dy);
	CK(cudaGetLastError());
	CK(cudaMemcpy(host.data(), out, nx * ny * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaFree(out));
	return host;
}

// 2D float, point filtering, clamp, coordinates in elements, some outside
// the array; then the border address mode on the same array
static void point_clamp_border(void)
{
	const int W = 16, H = 12, NX = 24, NY = 20;
	const float X0 = -3.75f, D = 0.75f, BORDER = -1.5f;
	std::vector<float> img(W * H);

	for (int i = 0; i < W * H; i++)
		img[i] = (float)i;
	cudaArray_t a = array_2d(img.data(), W, H);
	cudaTextureObject_t t = texture_on(a, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, false);
	std::vector<float> got = fetch2d(t, NX, NY, X0, X0, D, D);
	for (int j = 0; j < NY; j++)
		for (int i = 0; i < NX; i++) {
			int x = clamp((int)floorf(X0 + i * D), W), y = clamp((int)floorf(X0 + j * D), H);

			EXPECT(got[j * NX + i] == img[y * W + x], "point clamp (%d, %d) = %g, want %g", i, j,
			       got[j * NX + i], img[y * W + x]);
		}
	CK(cudaDestroyTextureObject(t));

	cudaResourceDesc r;
	cudaTextureDesc d;
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = a;
	memset(&d, 0, sizeof(d));
	d.addressMode[0] = d.addressMode[1] = cudaAddressModeBorder;
	d.borderColor[0] = BORDER;
	d.filterMode = cudaFilterModePoint;
	d.readMode = cudaReadModeElementType;
	CK(cudaCreateTextureObject(&t, &r, &d, nullptr));
	got = fetch2d(t, NX, NY, X0, X0, D, D);
	for (int j = 0; j < NY; j++)
		for (int i = 0; i < NX; i++) {
			int x = (int)floorf(X0 + i * D), y = (int)floorf(X0 + j * D);
			float want = x >= 0 && x < W && y >= 0 && y < H ? img[y * W + x] : BORDER;

			EXPECT(got[j * NX + i] == want, "border (%d, %d) = %g, want %g", i, j, got[j * NX + i], want);
		}
	CK(cudaDestroyTextureObject(t));
	CK(cudaFreeArray(a));
}

// 2D float, linear filtering, normalized coordinates wrapping around; the
// texture's descriptors read back
static void linear_wrap(void)
{
	const int W = 32, H = 16, NX = 48, NY = 40;
	const float X0 = -0.3125f, Y0 = -0.25f, DX = 0.03125f, DY = 0.046875f;
	std::vector<float> img(W * H);

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			img[y * W + x] = (float)((x * 7 + y * 13) % 17) / 16.0f;
	cudaArray_t a = array_2d(img.data(), W, H);
	cudaTextureObject_t t = texture_on(a, cudaAddressModeWrap, cudaFilterModeLinear, cudaReadModeElementType, true);
	std::vector<float> got = fetch2d(t, NX, NY, X0, Y0, DX, DY);
	for (int j = 0; j < NY; j++)
		for (int i = 0; i < NX; i++) {
			float u = X0 + i * DX, v = Y0 + j * DY;
			float xb = (u - floorf(u)) * W - 0.5f, yb = (v - floorf(v)) * H - 0.5f;
			int x = (int)floorf(xb), y = (int)floorf(yb);
			float a0 = xb - x, b0 = yb - y;
			int x1 = wrap(x + 1, W), y1 = wrap(y + 1, H);
			x = wrap(x, W);
			y = wrap(y, H);
			float want = (1 - a0) * (1 - b0) * img[y * W + x] + a0 * (1 - b0) * img[y * W + x1] +
				     (1 - a0) * b0 * img[y1 * W + x] + a0 * b0 * img[y1 * W + x1];

			EXPECT(fabsf(got[j * NX + i] - want) <= 1e-2f, "linear wrap (%d, %d) = %g, want %g", i, j,
			       got[j * NX + i], want);
		}

	cudaResourceDesc r;
	cudaTextureDesc d;
	memset(&r, 0, sizeof(r));
	memset(&d, 0, sizeof(d));
	CK(cudaGetTextureObjectResourceDesc(&r, t));
	EXPECT(r.resType == cudaResourceTypeArray && r.res.array.array == a, "resource desc: type %d, array %p",
	       (int)r.resType, (void *)r.res.array.array);
	CK(cudaGetTextureObjectTextureDesc(&d, t));
	EXPECT(d.addressMode[0] == cudaAddressModeWrap && d.addressMode[1] == cudaAddressModeWrap &&
		       d.filterMode == cudaFilterModeLinear && d.readMode == cudaReadModeElementType &&
		       d.normalizedCoords == 1,
	       "texture desc: address %d %d, filter %d, read %d, normalized %d", (int)d.addressMode[0],
	       (int)d.addressMode[1], (int)d.filterMode, (int)d.readMode, d.normalizedCoords);
	CK(cudaDestroyTextureObject(t));
	CK(cudaFreeArray(a));
}

// 2D uchar4 read as normalized floats, point filtering at element centres
static void uchar4_normalized(void)
{
	const int W = 20, H = 10;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<uchar4>();
	std::vector<uchar4> img(W * H);
	std::vector<float4> got(W * H);
	cudaArray_t a;
	float4 *out;

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			img[y * W + x] = make_uchar4((x * 13 + y * 7) & 255, (x * 13 + y * 7 + 50) & 255,
						     (x * 13 + y * 7 + 100) & 255, x == 0 ? 255 : y);
	CK(cudaMallocArray(&a, &fd, W, H));
	CK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(uchar4), W * sizeof(uchar4), H,
			       cudaMemcpyHostToDevice));
	cudaTextureObject_t t = texture_on(a, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeNormalizedFloat,
					   false);
	CK(cudaMalloc(&out, W * H * sizeof(float4)));
	tex_fetch2d4<<<grid_for(W, H), BLOCK>>>(t, out, W, H);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, W * H * sizeof(float4), cudaMemcpyDeviceToHost));
	for (int i = 0; i < W * H; i++) {
		const unsigned char want[4] = { img[i].x, img[i].y, img[i].z, img[i].w };
		const float g[4] = { got[i].x, got[i].y, got[i].z, got[i].w };

		for (int c = 0; c < 4; c++)
			EXPECT(g[c] >= 0.0f && g[c] <= 1.0f && fabsf(g[c] - want[c] / 255.0f) <= 1e-6f,
			       "uchar4 [%d].%d = %g, want %g", i, c, g[c], want[c] / 255.0f);
	}
	CK(cudaDestroyTextureObject(t));
	CK(cudaFree(out));
	CK(cudaFreeArray(a));
}

// 2D signed short read as it is, negative values included
static void shorts(void)
{
	const int W = 9, H = 5;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<short>();
	std::vector<short> img(W * H), got(W * H);
	cudaArray_t a;
	short *out;

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			img[y * W + x] = (short)((x - 4) * 1000 + y);
	CK(cudaMallocArray(&a, &fd, W, H));
	CK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(short), W * sizeof(short), H, cudaMemcpyHostToDevice));
	cudaTextureObject_t t = texture_on(a, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, false);
	CK(cudaMalloc(&out, W * H * sizeof(short)));
	tex_fetch2d_short<<<grid_for(W, H), BLOCK>>>(t, out, W, H);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, W * H * sizeof(short), cudaMemcpyDeviceToHost));
	for (int i = 0; i < W * H; i++)
		EXPECT(got[i] == img[i], "short [%d] = %d, want %d", i, got[i], img[i]);
	CK(cudaDestroyTextureObject(t));
	CK(cudaFree(out));
	CK(cudaFreeArray(a));
}

// 3D float, trilinear filtering, clamp, coordinates in elements
static void three_d(void)
{
	const int W = 8, H = 6, D = 5, N = 26;   // N^3 points from X0 in steps of S
	const float X0 = -0.5f, S = 0.375f;
	std::vector<float> vol(W * H * D), got(N * N * N);
	float *out;

	for (int z = 0; z < D; z++)
		for (int y = 0; y < H; y++)
			for (int x = 0; x < W; x++)
				vol[(z * H + y) * W + x] = (float)((x * 3 + y * 5 + z * 7) % 11) / 10.0f;
	cudaArray_t a = array_3d(vol.data(), W, H, D, 0);
	cudaTextureObject_t t = texture_on(a, cudaAddressModeClamp, cudaFilterModeLinear, cudaReadModeElementType, false);
	CK(cudaMalloc(&out, N * N * N * sizeof(float)));
	tex_fetch3d<<<grid_for(N, N, N), BLOCK>>>(t, out, N, N, N, X0, S);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, N * N * N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int k = 0; k < N; k++)
		for (int j = 0; j < N; j++)
			for (int i = 0; i < N; i++) {
				const int n[3] = { W, H, D }, at[3] = { i, j, k };
				int lo[3], hi[3];
				float f[3], want = 0;

				for (int d = 0; d < 3; d++) {
					float b = X0 + at[d] * S - 0.5f;

					lo[d] = (int)floorf(b);
					f[d] = b - lo[d];
					hi[d] = clamp(lo[d] + 1, n[d]);
					lo[d] = clamp(lo[d], n[d]);
				}
				for (int c = 0; c < 8; c++) {
					int x = c & 1 ? hi[0] : lo[0], y = c & 2 ? hi[1] : lo[1], z = c & 4 ? hi[2] : lo[2];
					float w = (c & 1 ? f[0] : 1 - f[0]) * (c & 2 ? f[1] : 1 - f[1]) *
						  (c & 4 ? f[2] : 1 - f[2]);

					want += w * vol[(z * H + y) * W + x];
				}
				float g = got[(k * N + j) * N + i];
				EXPECT(fabsf(g - want) <= 1e-2f, "3D (%d, %d, %d) = %g, want %g", i, j, k, g, want);
			}
	CK(cudaDestroyTextureObject(t));
	CK(cudaFree(out));
	CK(cudaFreeArray(a));
}

// 2D layered float, point filtering, every layer
static void layered(void)
{
	const int W = 10, H = 7, L = 3;
	std::vector<float> img(W * H * L), got(W * H * L);
	float *out;

	for (int i = 0; i < W * H * L; i++)
		img[i] = (float)(i * 3);
	cudaArray_t a = array_3d(img.data(), W, H, L, cudaArrayLayered);
	cudaTextureObject_t t = texture_on(a, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, false);
	CK(cudaMalloc(&out, W * H * L * sizeof(float)));
	tex_fetch_layered<<<grid_for(W, H, L), BLOCK>>>(t, out, W, H, L);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, W * H * L * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < W * H * L; i++)
		EXPECT(got[i] == img[i], "layered [%d] = %g, want %g", i, got[i], img[i]);
	CK(cudaDestroyTextureObject(t));
	CK(cudaFree(out));
	CK(cudaFreeArray(a));
}

// textures on linear memory: floats as they are, bytes as normalized floats
static void linear_memory(void)
{
	const int N = 300;
	std::vector<float> host(N), got(N);
	std::vector<unsigned char> bytes(N);
	float *buf, *out;
	unsigned char *bbuf;
	cudaResourceDesc r;
	cudaTextureDesc d;
	cudaTextureObject_t t, tb;

	for (int i = 0; i < N; i++) {
		host[i] = 0.25f * (float)i - 7.0f;
		bytes[i] = (unsigned char)(i * 7);
	}
	CK(cudaMalloc(&buf, N * sizeof(float)));
	CK(cudaMalloc(&bbuf, N));
	CK(cudaMalloc(&out, N * sizeof(float)));
	CK(cudaMemcpy(buf, host.data(), N * sizeof(float), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(bbuf, bytes.data(), N, cudaMemcpyHostToDevice));
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeLinear;
	r.res.linear.devPtr = buf;
	r.res.linear.desc = cudaCreateChannelDesc<float>();
	r.res.linear.sizeInBytes = N * sizeof(float);
	memset(&d, 0, sizeof(d));
	d.readMode = cudaReadModeElementType;
	CK(cudaCreateTextureObject(&t, &r, &d, nullptr));
	r.res.linear.devPtr = bbuf;
	r.res.linear.desc = cudaCreateChannelDesc<unsigned char>();
	r.res.linear.sizeInBytes = N;
	d.readMode = cudaReadModeNormalizedFloat;
	CK(cudaCreateTextureObject(&tb, &r, &d, nullptr));

	tex_fetch1d<<<(N + 127) / 128, 128>>>(t, out, N);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		EXPECT(got[i] == host[i], "linear [%d] = %g, want %g", i, got[i], host[i]);
	tex_fetch1d<<<(N + 127) / 128, 128>>>(tb, out, N);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		EXPECT(fabsf(got[i] - bytes[i] / 255.0f) <= 1e-6f, "linear bytes [%d] = %g, want %g", i, got[i],
		       bytes[i] / 255.0f);

	CK(cudaGetTextureObjectResourceDesc(&r, tb));
	EXPECT(r.resType == cudaResourceTypeLinear && r.res.linear.devPtr == bbuf && r.res.linear.sizeInBytes == N &&
		       r.res.linear.desc.x == 8 && r.res.linear.desc.f == cudaChannelFormatKindUnsigned,
	       "linear resource desc: type %d, ptr %p, size %zu, format %d/%d", (int)r.resType, r.res.linear.devPtr,
	       r.res.linear.sizeInBytes, r.res.linear.desc.x, (int)r.res.linear.desc.f);
	CK(cudaDestroyTextureObject(t));
	CK(cudaDestroyTextureObject(tb));
	CK(cudaFree(buf));
	CK(cudaFree(bbuf));
	CK(cudaFree(out));
}

// a texture on pitched 2D memory, point filtering, clamp
static void pitch2d(void)
{
	const int W = 21, H = 13, NX = W + 3, NY = H + 3;
	std::vector<float> img(W * H);
	cudaResourceDesc r;
	cudaTextureDesc d;
	cudaTextureObject_t t;
	float *p;
	size_t pitch;

	for (int i = 0; i < W * H; i++)
		img[i] = (float)(i % 97) - 40.0f;
	CK(cudaMallocPitch(&p, &pitch, W * sizeof(float), H));
	CK(cudaMemcpy2D(p, pitch, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypePitch2D;
	r.res.pitch2D.devPtr = p;
	r.res.pitch2D.desc = cudaCreateChannelDesc<float>();
	r.res.pitch2D.width = W;
	r.res.pitch2D.height = H;
	r.res.pitch2D.pitchInBytes = pitch;
	memset(&d, 0, sizeof(d));
	d.addressMode[0] = d.addressMode[1] = cudaAddressModeClamp;
	d.filterMode = cudaFilterModePoint;
	d.readMode = cudaReadModeElementType;
	CK(cudaCreateTextureObject(&t, &r, &d, nullptr));
	std::vector<float> got = fetch2d(t, NX, NY, -1.5f, -1.5f, 1.0f, 1.0f);
	for (int j = 0; j < NY; j++)
		for (int i = 0; i < NX; i++) {
			int x = clamp((int)floorf(-1.5f + i), W), y = clamp((int)floorf(-1.5f + j), H);

			EXPECT(got[j * NX + i] == img[y * W + x], "pitch2D (%d, %d) = %g, want %g", i, j, got[j * NX + i],
			       img[y * W + x]);
		}
	CK(cudaDestroyTextureObject(t));
	CK(cudaFree(p));
}

// a 2D surface written by one kernel and read by another (both past the
// array's edges, with cudaBoundaryModeZero), the array copied back
static void surface_2d(void)
{
	const int W = 24, H = 10, NX = W + 8, NY = H + 6;
	const float K = 0.5f;
	std::vector<float> zero(W * H, 0.0f), back(W * H), got(NX * NY);
	cudaResourceDesc r;
	cudaSurfaceObject_t s;
	float *out;

	cudaArray_t a = array_2d(zero.data(), W, H, cudaArraySurfaceLoadStore);
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = a;
	CK(cudaCreateSurfaceObject(&s, &r));
	CK(cudaMalloc(&out, NX * NY * sizeof(float)));
	tex_surf_write2d<<<grid_for(NX, NY), BLOCK>>>(s, NX, NY, K);
	CK(cudaGetLastError());
	tex_surf_read2d<<<grid_for(NX, NY), BLOCK>>>(s, out, NX, NY);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), out, NX * NY * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H,
				 cudaMemcpyDeviceToHost));
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++) {
			float want = K * (float)(1000 * y + x);

			EXPECT(back[y * W + x] == want, "surface (%d, %d) = %g, want %g", x, y, back[y * W + x], want);
		}
	for (int y = 0; y < NY; y++)
		for (int x = 0; x < NX; x++) {
			float want = (x < W && y < H ? K * (float)(1000 * y + x) : 0.0f) + 1.0f;

			EXPECT(got[y * NX + x] == want, "surf2Dread (%d, %d) = %g, want %g", x, y, got[y * NX + x], want);
		}
	CK(cudaDestroySurfaceObject(s));
	CK(cudaFree(out));
	CK(cudaFreeArray(a));
}

// a 3D surface written by a kernel, the array copied back
static void surface_3d(void)
{
	const int W = 7, H = 5, D = 4;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	std::vector<float> back(W * H * D, -1.0f);
	cudaResourceDesc r;
	cudaSurfaceObject_t s;
	cudaMemcpy3DParms p;
	cudaArray_t a;

	CK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(W, H, D), cudaArraySurfaceLoadStore));
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = a;
	CK(cudaCreateSurfaceObject(&s, &r));
	tex_surf_write3d<<<grid_for(W, H, D), BLOCK>>>(s, W, H, D);
	CK(cudaGetLastError());
	memset(&p, 0, sizeof(p));
	p.srcArray = a;
	p.dstPtr = make_cudaPitchedPtr(back.data(), W * sizeof(float), W, H);
	p.extent = make_cudaExtent(W, H, D);
	p.kind = cudaMemcpyDeviceToHost;
	CK(cudaMemcpy3D(&p));
	for (int i = 0; i < W * H * D; i++)
		EXPECT(back[i] == (float)i, "3D surface [%d] = %g", i, back[i]);
	CK(cudaDestroySurfaceObject(s));
	CK(cudaFreeArray(a));
}

int main()
{
	point_clamp_border();
	linear_wrap();
	uchar4_normalized();
	shorts();
	three_d();
	layered();
	linear_memory();
	pitch2d();
	surface_2d();
	surface_3d();
	CK(cudaDeviceSynchronize());
	printf("textures: ok\n");
	return 0;
}
