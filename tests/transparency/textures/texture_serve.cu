// SPDX-License-Identifier: MIT
// A function that makes its arrays, textures and surface during init, then
// serves. Init: a 2D float image array with a linearly filtered texture on
// it, a texture on linear memory, a second array written through a surface
// object by a kernel, and a texture made first and destroyed last, so that
// the live handles have a hole below them (texture and surface handles are
// small integers of one numbering, reused lowest first: a restore must give
// back the same ones, and keep the hole free). Each request checks that the
// surface array still holds what the last writer (init or the last request)
// put there, samples both textures, makes a point-filtered texture (which must
// take the hole's handle), samples and destroys it, writes the surface again
// and reads it back, and checks the image array unchanged; it answers
// {"ok":true,"requests":n} or {"ok":false,...,"mismatch":"..."}. Snapshotted
// at phos_fn_serve and restored, it must keep answering ok.
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "common.h"

static const int W = 32, H = 16;        // the image
static const int SW = 24, SH = 8;       // the surface's array
static const int N = 256;               // the linear memory, floats
static const int NX = 40, NY = 24;      // sample points from X0 in steps of D
static const float X0 = -1.25f, D = 0.875f;

// out[j nx + i] = tex2D<float>(t, x0 + i d, x0 + j d)
__global__ void tex_serve_sample(cudaTextureObject_t t, float *out, int nx, int ny, float x0, float d)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;

	if (i < nx && j < ny)
		out[j * nx + i] = tex2D<float>(t, x0 + i * d, x0 + j * d);
}

// out[i] = tex1Dfetch<float>(t, i)
__global__ void tex_serve_fetch1d(cudaTextureObject_t t, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = tex1Dfetch<float>(t, i);
}

// element (x, y) of s = 1000 gen + y w + x
__global__ void tex_serve_surf(cudaSurfaceObject_t s, int w, int h, int gen)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;

	if (x < w && y < h)
		surf2Dwrite((float)(1000 * gen + y * w + x), s, x * (int)sizeof(float), y);
}

static const dim3 BLOCK(16, 8);

struct state {
	cudaArray_t image, surf_array;
	cudaTextureObject_t image_tex, linear_tex;
	cudaSurfaceObject_t surf;
	cudaTextureObject_t hole;   // the handle destroyed during init, the lowest free one
	float *linear, *out;
	std::vector<float> image_host, linear_host;
	int requests;
};

static int clamp(int i, int n)
{
	return i < 0 ? 0 : i >= n ? n - 1 : i;
}

// what tex_serve_sample reads at point (i, j) of image (clamped), point or linear filtering
static float reference(const std::vector<float> &image, int i, int j, bool linear)
{
	float u = X0 + i * D, v = X0 + j * D;

	if (!linear)
		return image[clamp((int)floorf(v), H) * W + clamp((int)floorf(u), W)];
	u -= 0.5f;
	v -= 0.5f;
	int x = (int)floorf(u), y = (int)floorf(v);
	float a = u - x, b = v - y;
	int x0 = clamp(x, W), x1 = clamp(x + 1, W), y0 = clamp(y, H), y1 = clamp(y + 1, H);

	return (1 - a) * (1 - b) * image[y0 * W + x0] + a * (1 - b) * image[y0 * W + x1] +
	       (1 - a) * b * image[y1 * W + x0] + a * b * image[y1 * W + x1];
}

static cudaTextureObject_t image_texture(cudaArray_t a, cudaTextureFilterMode filter)
{
	cudaResourceDesc r;
	cudaTextureDesc d;
	cudaTextureObject_t t;

	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = a;
	memset(&d, 0, sizeof(d));
	d.addressMode[0] = d.addressMode[1] = cudaAddressModeClamp;
	d.filterMode = filter;
	d.readMode = cudaReadModeElementType;
	CK(cudaCreateTextureObject(&t, &r, &d, nullptr));
	return t;
}

// The first difference of the surface array from generation gen, into why; false if none.
static bool surface_differs(state *st, int gen, char *why, size_t len)
{
	std::vector<float> got(SW * SH);

	CK(cudaMemcpy2DFromArray(got.data(), SW * sizeof(float), st->surf_array, 0, 0, SW * sizeof(float), SH,
				 cudaMemcpyDeviceToHost));
	for (int i = 0; i < SW * SH; i++)
		if (got[i] != (float)(1000 * gen + i)) {
			snprintf(why, len, "surface [%d] = %g, want %d", i, got[i], 1000 * gen + i);
			return true;
		}
	return false;
}

// The first difference of a sampling of t from the reference, into why; false if none.
static bool sample_differs(state *st, cudaTextureObject_t t, bool linear, char *why, size_t len)
{
	std::vector<float> got(NX * NY);

	tex_serve_sample<<<dim3((NX + BLOCK.x - 1) / BLOCK.x, (NY + BLOCK.y - 1) / BLOCK.y), BLOCK>>>(t, st->out, NX,
												 NY, X0, D);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), st->out, NX * NY * sizeof(float), cudaMemcpyDeviceToHost));
	for (int j = 0; j < NY; j++)
		for (int i = 0; i < NX; i++) {
			float want = reference(st->image_host, i, j, linear), g = got[j * NX + i];

			if (linear ? fabsf(g - want) > 1e-2f : g != want) {
				snprintf(why, len, "%s sample (%d, %d) = %g, want %g", linear ? "linear" : "point", i, j, g,
					 want);
				return true;
			}
		}
	return false;
}

static bool request_differs(state *st, int n, char *why, size_t len)
{
	std::vector<float> got(N > W * H ? N : W * H);
	cudaTextureObject_t point;

	if (surface_differs(st, n - 1, why, len) || sample_differs(st, st->image_tex, true, why, len))
		return true;
	point = image_texture(st->image, cudaFilterModePoint);
	if (point != st->hole) {
		snprintf(why, len, "a new texture took handle %llu, not the free %llu", point, st->hole);
		CK(cudaDestroyTextureObject(point));
		return true;
	}
	bool differs = sample_differs(st, point, false, why, len);
	CK(cudaDestroyTextureObject(point));
	if (differs)
		return true;

	tex_serve_fetch1d<<<(N + 127) / 128, 128>>>(st->linear_tex, st->out, N);
	CK(cudaGetLastError());
	CK(cudaMemcpy(got.data(), st->out, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		if (got[i] != st->linear_host[i]) {
			snprintf(why, len, "tex1Dfetch [%d] = %g, want %g", i, got[i], st->linear_host[i]);
			return true;
		}

	tex_serve_surf<<<dim3((SW + BLOCK.x - 1) / BLOCK.x, (SH + BLOCK.y - 1) / BLOCK.y), BLOCK>>>(st->surf, SW, SH, n);
	CK(cudaGetLastError());
	if (surface_differs(st, n, why, len))
		return true;

	CK(cudaMemcpy2DFromArray(got.data(), W * sizeof(float), st->image, 0, 0, W * sizeof(float), H,
				 cudaMemcpyDeviceToHost));
	for (int i = 0; i < W * H; i++)
		if (got[i] != st->image_host[i]) {
			snprintf(why, len, "image [%d] = %g, want %g", i, got[i], st->image_host[i]);
			return true;
		}
	return false;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	char why[200] = "", out[320];

	(void)req;
	st->requests++;
	if (request_differs(st, st->requests, why, sizeof(why)))
		snprintf(out, sizeof(out), "{\"ok\":false,\"requests\":%d,\"mismatch\":\"%s\"}", st->requests, why);
	else
		snprintf(out, sizeof(out), "{\"ok\":true,\"requests\":%d}", st->requests);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static state st;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaResourceDesc r;
	cudaTextureDesc d;
	cudaTextureObject_t extra;

	st.image_host.resize(W * H);
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			st.image_host[y * W + x] = (float)((x * 5 + y * 3) % 13) / 8.0f;
	st.linear_host.resize(N);
	for (int i = 0; i < N; i++)
		st.linear_host[i] = (float)(i * i % 1009) - 300.0f;

	CK(cudaMallocArray(&st.image, &fd, W, H));
	CK(cudaMemcpy2DToArray(st.image, 0, 0, st.image_host.data(), W * sizeof(float), W * sizeof(float), H,
			       cudaMemcpyHostToDevice));
	CK(cudaMallocArray(&st.surf_array, &fd, SW, SH, cudaArraySurfaceLoadStore));
	CK(cudaMalloc(&st.linear, N * sizeof(float)));
	CK(cudaMemcpy(st.linear, st.linear_host.data(), N * sizeof(float), cudaMemcpyHostToDevice));
	CK(cudaMalloc(&st.out, NX * NY * sizeof(float)));

	extra = image_texture(st.image, cudaFilterModePoint);   // made first, destroyed below: a hole
	st.image_tex = image_texture(st.image, cudaFilterModeLinear);
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeLinear;
	r.res.linear.devPtr = st.linear;
	r.res.linear.desc = fd;
	r.res.linear.sizeInBytes = N * sizeof(float);
	memset(&d, 0, sizeof(d));
	d.readMode = cudaReadModeElementType;
	CK(cudaCreateTextureObject(&st.linear_tex, &r, &d, nullptr));
	memset(&r, 0, sizeof(r));
	r.resType = cudaResourceTypeArray;
	r.res.array.array = st.surf_array;
	CK(cudaCreateSurfaceObject(&st.surf, &r));   // surfaces share the textures' numbers
	CK(cudaDestroyTextureObject(extra));
	st.hole = extra;
	tex_serve_surf<<<dim3((SW + BLOCK.x - 1) / BLOCK.x, (SH + BLOCK.y - 1) / BLOCK.y), BLOCK>>>(st.surf, SW, SH, 0);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	return phos_fn_serve(handle, &st);
}
