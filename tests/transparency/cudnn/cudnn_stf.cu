// SPDX-License-Identifier: MIT
// cuDNN's spatial transformer as PyTorch uses it (F.affine_grid and
// F.grid_sample with align_corners=True on cuDNN): a grid from theta
// (cudnnSpatialTfGridGeneratorForward), then bilinear sampling of a float
// input on it (cudnnSpatialTfSamplerForward), then the backward passes
// (the sampler's dx and dgrid, the grid generator's dtheta), each checked
// against a CPU reference (the derivatives of bilinear sampling with zeros
// outside). Prints one JSON line (checksums) and exits 0 when every check
// passed.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cudnn_decls.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define DK(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
	fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static const int N = 2, C = 3, IH = 7, IW = 9, OH = 5, OW = 6;

static double sum(const std::vector<float> &v)
{
	double s = 0;
	for (float x : v)
		s += x;
	return s;
}

int main()
{
	cudnnHandle_t h;
	cudnnSpatialTransformerDescriptor_t st;
	cudnnTensorDescriptor_t xd, yd;
	cudaStream_t s;
	int out_dims[4] = { N, C, OH, OW };
	int xdims[4] = { N, C, IH, IW }, xstr[4] = { C * IH * IW, IH * IW, IW, 1 };
	int ydims[4] = { N, C, OH, OW }, ystr[4] = { C * OH * OW, OH * OW, OW, 1 };
	std::vector<float> theta = { 0.9f, -0.2f, 0.1f, 0.3f, 0.8f, -0.05f,     // n = 0
				     1.1f, 0.0f, -0.2f, 0.0f, 1.2f, 0.15f };    // n = 1
	std::vector<float> x(N * C * IH * IW), grid(N * OH * OW * 2), y(N * C * OH * OW), want_grid(grid.size()),
		want_y(y.size()), dy(y.size()), dx(x.size()), dgrid(grid.size()), dtheta(theta.size());
	float *d_theta, *d_grid, *d_x, *d_y, *d_dy, *d_dx, *d_dgrid, *d_dtheta;
	const float one = 1.0f, zero = 0.0f;
	int failures = 0;

	for (size_t i = 0; i < x.size(); i++)
		x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
	for (size_t i = 0; i < dy.size(); i++)
		dy[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
	CK(cudaStreamCreate(&s));
	DK(cudnnCreate(&h));
	DK(cudnnSetStream(h, s));
	DK(cudnnCreateSpatialTransformerDescriptor(&st));
	DK(cudnnSetSpatialTransformerNdDescriptor(st, CUDNN_SAMPLER_BILINEAR, CUDNN_DATA_FLOAT, 4, out_dims));
	DK(cudnnCreateTensorDescriptor(&xd));
	DK(cudnnCreateTensorDescriptor(&yd));
	DK(cudnnSetTensorNdDescriptor(xd, CUDNN_DATA_FLOAT, 4, xdims, xstr));
	DK(cudnnSetTensorNdDescriptor(yd, CUDNN_DATA_FLOAT, 4, ydims, ystr));
	CK(cudaMalloc((void **)&d_theta, theta.size() * 4));
	CK(cudaMalloc((void **)&d_grid, grid.size() * 4));
	CK(cudaMalloc((void **)&d_x, x.size() * 4));
	CK(cudaMalloc((void **)&d_y, y.size() * 4));
	CK(cudaMalloc((void **)&d_dy, dy.size() * 4));
	CK(cudaMalloc((void **)&d_dx, dx.size() * 4));
	CK(cudaMalloc((void **)&d_dgrid, dgrid.size() * 4));
	CK(cudaMalloc((void **)&d_dtheta, dtheta.size() * 4));
	CK(cudaMemcpy(d_theta, theta.data(), theta.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d_dy, dy.data(), dy.size() * 4, cudaMemcpyHostToDevice));

	// forward: the grid, then the sampling
	DK(cudnnSpatialTfGridGeneratorForward(h, st, d_theta, d_grid));
	DK(cudnnSpatialTfSamplerForward(h, st, &one, xd, d_x, d_grid, &zero, yd, d_y));
	CK(cudaMemcpyAsync(grid.data(), d_grid, grid.size() * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaMemcpyAsync(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaStreamSynchronize(s));
	for (int b = 0; b < N; b++)
		for (int i = 0; i < OH; i++)
			for (int j = 0; j < OW; j++) {
				double xt = -1.0 + 2.0 * j / (OW - 1), yt = -1.0 + 2.0 * i / (OH - 1);
				int g = ((b * OH + i) * OW + j) * 2;

				for (int k = 0; k < 2; k++)
					want_grid[g + k] = (float)(theta[b * 6 + k * 3] * xt + theta[b * 6 + k * 3 + 1] * yt +
								   theta[b * 6 + k * 3 + 2]);
				double sx = (want_grid[g] + 1) * (IW - 1) / 2, sy = (want_grid[g + 1] + 1) * (IH - 1) / 2;
				int x0 = (int)floor(sx), y0 = (int)floor(sy);
				double wx = sx - x0, wy = sy - y0;

				for (int c = 0; c < C; c++) {
					double v = 0;

					for (int dyy = 0; dyy < 2; dyy++)
						for (int dxx = 0; dxx < 2; dxx++) {
							int yy = y0 + dyy, xx = x0 + dxx;

							if (yy >= 0 && yy < IH && xx >= 0 && xx < IW)
								v += (dyy ? wy : 1 - wy) * (dxx ? wx : 1 - wx) *
								     x[((b * C + c) * IH + yy) * IW + xx];
						}
					want_y[((b * C + c) * OH + i) * OW + j] = (float)v;
				}
			}
	for (size_t i = 0; i < grid.size(); i++)
		if (fabs(grid[i] - want_grid[i]) > 1e-5) {
			fprintf(stderr, "grid[%zu] = %g, want %g\n", i, grid[i], want_grid[i]);
			failures++;
			break;
		}
	for (size_t i = 0; i < y.size(); i++)
		if (fabs(y[i] - want_y[i]) > 1e-4) {
			fprintf(stderr, "y[%zu] = %g, want %g\n", i, y[i], want_y[i]);
			failures++;
			break;
		}

	// backward: the sampler's (dx, dgrid), then the grid generator's (dtheta)
	DK(cudnnSpatialTfSamplerBackward(h, st, &one, xd, d_x, &zero, xd, d_dx, &one, yd, d_dy, d_grid, &zero,
					 d_dgrid));
	DK(cudnnSpatialTfGridGeneratorBackward(h, st, d_dgrid, d_dtheta));
	CK(cudaMemcpyAsync(dx.data(), d_dx, dx.size() * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaMemcpyAsync(dgrid.data(), d_dgrid, dgrid.size() * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaMemcpyAsync(dtheta.data(), d_dtheta, dtheta.size() * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaStreamSynchronize(s));
	{
		std::vector<double> rdx(dx.size(), 0), rdg(dgrid.size(), 0), rdt(dtheta.size(), 0);

		for (int b = 0; b < N; b++)
			for (int i = 0; i < OH; i++)
				for (int j = 0; j < OW; j++) {
					int g = ((b * OH + i) * OW + j) * 2;
					double sx = (grid[g] + 1.0) * (IW - 1) / 2, sy = (grid[g + 1] + 1.0) * (IH - 1) / 2;
					int x0 = (int)floor(sx), y0 = (int)floor(sy);
					double wx = sx - x0, wy = sy - y0, gx = 0, gy = 0;

					for (int c = 0; c < C; c++) {
						double d = dy[((b * C + c) * OH + i) * OW + j];

						for (int a = 0; a < 2; a++)
							for (int e = 0; e < 2; e++) {
								int yy = y0 + a, xx = x0 + e;

								if (yy < 0 || yy >= IH || xx < 0 || xx >= IW)
									continue;
								double v = x[((b * C + c) * IH + yy) * IW + xx];

								rdx[((b * C + c) * IH + yy) * IW + xx] +=
									d * (a ? wy : 1 - wy) * (e ? wx : 1 - wx);
								gx += d * v * (a ? wy : 1 - wy) * (e ? 1 : -1);
								gy += d * v * (e ? wx : 1 - wx) * (a ? 1 : -1);
							}
					}
					rdg[g] = gx * (IW - 1) / 2;
					rdg[g + 1] = gy * (IH - 1) / 2;
					double xt = -1.0 + 2.0 * j / (OW - 1), yt = -1.0 + 2.0 * i / (OH - 1);

					for (int k = 0; k < 2; k++) {
						rdt[b * 6 + k * 3] += dgrid[g + k] * xt;
						rdt[b * 6 + k * 3 + 1] += dgrid[g + k] * yt;
						rdt[b * 6 + k * 3 + 2] += dgrid[g + k];
					}
				}
		struct { const char *name; const std::vector<float> &got; const std::vector<double> &want; } all[] = {
			{ "dx", dx, rdx }, { "dgrid", dgrid, rdg }, { "dtheta", dtheta, rdt } };
		for (auto &a : all)
			for (size_t i = 0; i < a.want.size(); i++)
				if (fabs(a.got[i] - a.want[i]) > 1e-3 * (1 + fabs(a.want[i]))) {
					fprintf(stderr, "%s[%zu] = %g, want %g\n", a.name, i, a.got[i], a.want[i]);
					failures++;
					break;
				}
	}
	printf("{\"ok\": %s, \"grid\": %.6f, \"y\": %.6f, \"dx\": %.6f, \"dgrid\": %.6f, \"dtheta\": %.6f}\n",
	       failures ? "false" : "true", sum(grid), sum(y), sum(dx), sum(dgrid), sum(dtheta));
	cudnnDestroySpatialTransformerDescriptor(st);
	cudnnDestroyTensorDescriptor(xd);
	cudnnDestroyTensorDescriptor(yd);
	cudnnDestroy(h);
	return failures ? 1 : 0;
}
