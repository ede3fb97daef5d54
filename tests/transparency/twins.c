/* SPDX-License-Identifier: MIT */
/*
 * sim twins of the kernels of tests/transparency/guard, graphs (graph_cond's set
 * graphs' conditions: phos_sim_cond_bind), driver, textures,
 * managed and cub.
 * The texture and surface twins sample the sim device's objects through the
 * lookup it binds at load (phos_sim_twins_bind, sim_tex.h). CUB's kernels
 * are named inside CUB's versioned namespace (CUB_300001_SM_900: the CCCL of
 * CUDA 13.0, built for sm_90); a toolkit with another CCCL renames them, and
 * those programs then fail on sim with a missing twin, loudly.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim_tex.h"
#include "sim_twin.h"

#define EXPORT __attribute__((visibility("default")))

/* for each (block, thread) of a 1-D launch: i = blockIdx.x * blockDim.x + threadIdx.x */
#define FOR_EACH_THREAD_1D(l, i)                                                      \
	for (uint64_t i = 0; i < (uint64_t)(l)->grid[0] * (l)->block[0]; i++)

/* for each (block, thread) of a launch: x, y, z = blockIdx * blockDim + threadIdx */
#define FOR_EACH_THREAD_3D(l, x, y, z)                                                        \
	for (int64_t z = 0; z < (int64_t)(l)->grid[2] * (l)->block[2]; z++)                   \
		for (int64_t y = 0; y < (int64_t)(l)->grid[1] * (l)->block[1]; y++)           \
			for (int64_t x = 0; x < (int64_t)(l)->grid[0] * (l)->block[0]; x++)

/* guard/rpath_cudart.cu */
static void guard_add(const struct phos_sim_launch *l)
{
	const float *x = PHOS_SIM_ARG(l, 0, const float *);
	float *y = PHOS_SIM_ARG(l, 1, float *);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] += x[i];
}

/* graphs/common.h: y[i] = a x[i] + y[i] */
static void graphs_saxpy(const struct phos_sim_launch *l)
{
	float a = PHOS_SIM_ARG(l, 0, float);
	const float *x = PHOS_SIM_ARG(l, 1, const float *);
	float *y = PHOS_SIM_ARG(l, 2, float *);
	int n = PHOS_SIM_ARG(l, 3, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] = a * x[i] + y[i];
}

/* graphs/common.h: x[i] = x[i] s + i */
static void graphs_scale_add(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	float s = PHOS_SIM_ARG(l, 1, float);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			x[i] = x[i] * s + (float)i;
}

/* graphs/common.h: z[i] = x[i] + y[i] */
static void graphs_add(const struct phos_sim_launch *l)
{
	const float *x = PHOS_SIM_ARG(l, 0, const float *);
	const float *y = PHOS_SIM_ARG(l, 1, const float *);
	float *z = PHOS_SIM_ARG(l, 2, float *);
	int n = PHOS_SIM_ARG(l, 3, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			z[i] = x[i] + y[i];
}

/* graphs/launch_ex.cu: coop_sum(x, partial, out, n), a cooperative kernel:
 * grid-stride sums per block, a grid-wide sync, then the total. Run one block
 * after the other, the sync is the end of the first loop. */
static void coop_sum(const struct phos_sim_launch *l)
{
	const int *x = PHOS_SIM_ARG(l, 0, const int *);
	int *partial = PHOS_SIM_ARG(l, 1, int *);
	int *out = PHOS_SIM_ARG(l, 2, int *);
	int n = PHOS_SIM_ARG(l, 3, int);
	uint64_t stride = (uint64_t)l->grid[0] * l->block[0];
	int t = 0;

	for (uint64_t i = 0; i < (uint64_t)(n > 0 ? n : 0); i++)
		partial[(i % stride) / l->block[0]] += x[i];
	for (uint32_t b = 0; b < l->grid[0]; b++)
		t += partial[b];
	*out = t;
}

/* graphs/launch_ex.cu: y[i] = 2 i + k */
static void coop_iota(const struct phos_sim_launch *l)
{
	int *y = PHOS_SIM_ARG(l, 0, int *);
	int n = PHOS_SIM_ARG(l, 1, int);
	int k = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] = 2 * (int)i + k;
}

/* driver/kernels.cu, loaded through the driver API */
static void driver_saxpy(const struct phos_sim_launch *l)
{
	float a = PHOS_SIM_ARG(l, 0, float);
	const float *x = PHOS_SIM_ARG(l, 1, const float *);
	float *y = PHOS_SIM_ARG(l, 2, float *);
	int n = PHOS_SIM_ARG(l, 3, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] = a * x[i] + y[i];
}

/* driver/link_kernel.cu linked with link_device.cu: y[i] = 3 y[i] + 1 */
static void driver_linked(const struct phos_sim_launch *l)
{
	float *y = PHOS_SIM_ARG(l, 0, float *);
	int n = PHOS_SIM_ARG(l, 1, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] = 3.0f * y[i] + 1.0f;
}

static void driver_fill(const struct phos_sim_launch *l)
{
	unsigned *out = PHOS_SIM_ARG(l, 0, unsigned *);
	unsigned v = PHOS_SIM_ARG(l, 1, unsigned);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			out[i] = v + (unsigned)i;
}

/* driver/entry_point.cu */
static void driver_ep_scale(const struct phos_sim_launch *l)
{
	int *p = PHOS_SIM_ARG(l, 0, int *);
	int k = PHOS_SIM_ARG(l, 1, int);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			p[i] *= k;
}

/* graphs/graph_cond.cu: kernels that set a graph's condition, through the
 * setter the sim device binds (sim_twin.h) */
static phos_sim_cond_set_fn cond_set;

EXPORT void phos_sim_cond_bind(phos_sim_cond_set_fn set);
EXPORT void phos_sim_cond_bind(phos_sim_cond_set_fn set)
{
	cond_set = set;
}

static void set_condition(uint64_t handle, unsigned value)
{
	if (cond_set)
		cond_set(handle, value);
}

static void cond_init(const struct phos_sim_launch *l)
{
	int *counter = PHOS_SIM_ARG(l, 1, int *);
	int start = PHOS_SIM_ARG(l, 2, int);

	*counter = start;
	set_condition(PHOS_SIM_ARG(l, 0, uint64_t), start > 0);
}

static void cond_add(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	float v = PHOS_SIM_ARG(l, 1, float);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			x[i] += v;
}

static void cond_step(const struct phos_sim_launch *l)
{
	int *counter = PHOS_SIM_ARG(l, 1, int *);
	int c = --*counter;

	set_condition(PHOS_SIM_ARG(l, 0, uint64_t), c > 0);
}

static void cond_pick(const struct phos_sim_launch *l)
{
	const int *sel = PHOS_SIM_ARG(l, 1, const int *);

	set_condition(PHOS_SIM_ARG(l, 0, uint64_t), (unsigned)*sel);
}

static void cond_mark(const struct phos_sim_launch *l)
{
	*PHOS_SIM_ARG(l, 0, int *) = PHOS_SIM_ARG(l, 1, int);
}

static phos_sim_tex_lookup_fn tex_lookup;

/* Called by the sim device at load with its lookup of texture and surface handles. */
EXPORT void phos_sim_twins_bind(phos_sim_tex_lookup_fn lookup);
EXPORT void phos_sim_twins_bind(phos_sim_tex_lookup_fn lookup)
{
	tex_lookup = lookup;
}

/* The object of the handle that is parameter i of launch l, or NULL. */
static const struct phos_sim_tex *tex_arg(const struct phos_sim_launch *l, int i)
{
	return tex_lookup ? tex_lookup(PHOS_SIM_ARG(l, i, uint64_t)) : NULL;
}

/* textures/textures.cu: out[j nx + i] = tex2D<float>(t, x0 + i dx, y0 + j dy) */
static void tex_fetch2d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int);
	float x0 = PHOS_SIM_ARG(l, 4, float), y0 = PHOS_SIM_ARG(l, 5, float);
	float dx = PHOS_SIM_ARG(l, 6, float), dy = PHOS_SIM_ARG(l, 7, float);
	float v[4];

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny) {
				phos_sim_tex_fetch(t, x0 + (float)i * dx, y0 + (float)j * dy, 0, v);
				out[j * nx + i] = v[0];
			}
}

/* textures/textures.cu: out[j nx + i] = tex2D<float4>(t, i + 0.5, j + 0.5) */
static void tex_fetch2d4(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);   /* float4 */
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int);

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny)
				phos_sim_tex_fetch(t, (float)i + 0.5f, (float)j + 0.5f, 0, out + 4 * (j * nx + i));
}

/* textures/textures.cu: out[j nx + i] = tex2D<short>(t, i + 0.5, j + 0.5) */
static void tex_fetch2d_short(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	short *out = PHOS_SIM_ARG(l, 1, short *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int);
	float v[4];

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny) {
				phos_sim_tex_fetch(t, (float)i + 0.5f, (float)j + 0.5f, 0, v);
				out[j * nx + i] = (short)v[0];
			}
}

/* textures/textures.cu: out[(k ny + j) nx + i] = tex3D<float>(t, x0 + i d, x0 + j d, x0 + k d) */
static void tex_fetch3d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int), nz = PHOS_SIM_ARG(l, 4, int);
	float x0 = PHOS_SIM_ARG(l, 5, float), d = PHOS_SIM_ARG(l, 6, float);
	float v[4];

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny && k < nz) {
				phos_sim_tex_fetch(t, x0 + (float)i * d, x0 + (float)j * d, x0 + (float)k * d, v);
				out[(k * ny + j) * nx + i] = v[0];
			}
}

/* textures/textures.cu: out[(k ny + j) nx + i] = tex2DLayered<float>(t, i + 0.5, j + 0.5, k) */
static void tex_fetch_layered(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int), layers = PHOS_SIM_ARG(l, 4, int);
	float v[4];

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny && k < layers) {
				phos_sim_tex_fetch(t, (float)i + 0.5f, (float)j + 0.5f, (float)k, v);
				out[(k * ny + j) * nx + i] = v[0];
			}
}

/* textures/textures.cu tex_fetch1d, texture_serve.cu tex_serve_fetch1d:
 * out[i] = tex1Dfetch<float>(t, i) */
static void tex_fetch1d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int n = PHOS_SIM_ARG(l, 2, int);
	float v[4];

	if (t)
		FOR_EACH_THREAD_1D(l, i)
			if (i < (uint64_t)n) {
				phos_sim_tex1dfetch(t, (int64_t)i, v);
				out[i] = v[0];
			}
}

/* Writes v to element (x, y, z) of surface t, dropped outside (cudaBoundaryModeZero). */
static void surf_write_float(const struct phos_sim_tex *t, int64_t x, int64_t y, int64_t z, float v)
{
	void *p = phos_sim_surf_ptr(t, x * (int64_t)sizeof(float), y, z);

	if (p)
		memcpy(p, &v, sizeof(v));
}

/* textures/textures.cu: element (x, y) of s = k (1000 y + x), for x < nx, y < ny */
static void tex_surf_write2d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *s = tex_arg(l, 0);
	int nx = PHOS_SIM_ARG(l, 1, int), ny = PHOS_SIM_ARG(l, 2, int);
	float k = PHOS_SIM_ARG(l, 3, float);

	if (s)
		FOR_EACH_THREAD_3D(l, x, y, z)
			if (x < nx && y < ny)
				surf_write_float(s, x, y, 0, k * (float)(1000 * y + x));
}

/* textures/textures.cu: out[y nx + x] = element (x, y) of s + 1 (0 + 1 outside) */
static void tex_surf_read2d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *s = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int);

	if (s)
		FOR_EACH_THREAD_3D(l, x, y, z)
			if (x < nx && y < ny) {
				const void *p = phos_sim_surf_ptr(s, x * (int64_t)sizeof(float), y, 0);
				float v = 0.0f;

				if (p)
					memcpy(&v, p, sizeof(v));
				out[y * nx + x] = v + 1.0f;
			}
}

/* textures/textures.cu: element (x, y, z) of s = (z h + y) w + x */
static void tex_surf_write3d(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *s = tex_arg(l, 0);
	int w = PHOS_SIM_ARG(l, 1, int), h = PHOS_SIM_ARG(l, 2, int), d = PHOS_SIM_ARG(l, 3, int);

	if (s)
		FOR_EACH_THREAD_3D(l, x, y, z)
			if (x < w && y < h && z < d)
				surf_write_float(s, x, y, z, (float)((z * h + y) * w + x));
}

/* textures/texture_serve.cu: out[j nx + i] = tex2D<float>(t, x0 + i d, x0 + j d) */
static void tex_serve_sample(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *t = tex_arg(l, 0);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int nx = PHOS_SIM_ARG(l, 2, int), ny = PHOS_SIM_ARG(l, 3, int);
	float x0 = PHOS_SIM_ARG(l, 4, float), d = PHOS_SIM_ARG(l, 5, float);
	float v[4];

	if (t)
		FOR_EACH_THREAD_3D(l, i, j, k)
			if (i < nx && j < ny) {
				phos_sim_tex_fetch(t, x0 + (float)i * d, x0 + (float)j * d, 0, v);
				out[j * nx + i] = v[0];
			}
}

/* textures/texture_serve.cu: element (x, y) of s = 1000 gen + y w + x */
static void tex_serve_surf(const struct phos_sim_launch *l)
{
	const struct phos_sim_tex *s = tex_arg(l, 0);
	int w = PHOS_SIM_ARG(l, 1, int), h = PHOS_SIM_ARG(l, 2, int), gen = PHOS_SIM_ARG(l, 3, int);

	if (s)
		FOR_EACH_THREAD_3D(l, x, y, z)
			if (x < w && y < h)
				surf_write_float(s, x, y, 0, (float)(1000 * gen + y * w + x));
}

#define CUB_NS "N3cub17CUB_300001_SM_900"

/* cub/example_block_reduce.cu: BlockReduceKernel<THREADS, ITEMS, ALGORITHM>(d_in, d_out, d_elapsed),
 * one block reducing THREADS * ITEMS ints; ITEMS is read from the name. */
static void cub_block_reduce(const struct phos_sim_launch *l)
{
	const int *in = PHOS_SIM_ARG(l, 0, const int *);
	int *out = PHOS_SIM_ARG(l, 1, int *);
	long *elapsed = PHOS_SIM_ARG(l, 2, long *);
	int threads = 0, items = 0, sum = 0;

	if (sscanf(l->ki->name, "_Z17BlockReduceKernelILi%dELi%dE", &threads, &items) != 2)
		return;
	for (int i = 0; i < threads * items; i++)
		sum += in[i];
	*out = sum;
	*elapsed = 1;
}

/* cub/example_device_reduce.cu: DeviceReduceSingleTileKernel(d_in, d_out, num_items, plus, init, identity) */
static void cub_reduce_single_tile(const struct phos_sim_launch *l)
{
	const int *in = PHOS_SIM_ARG(l, 0, const int *);
	int *out = PHOS_SIM_ARG(l, 1, int *);
	unsigned n = PHOS_SIM_ARG(l, 2, unsigned);
	int acc = PHOS_SIM_ARG(l, 4, int);

	for (unsigned i = 0; i < n; i++)
		acc += in[i];
	*out = acc;
}

/* cub/example_device_scan.cu: the tile states' initialisation (the twin of the
 * scan kernel does a whole scan, so they are not needed) */
static void cub_scan_init(const struct phos_sim_launch *l)
{
	(void)l;
}

/* cub/example_device_scan.cu: DeviceScanKernel(d_in, d_out, tile_state, start_tile, plus,
 * InputValue<int> init, num_items): the whole exclusive scan, by the launch
 * of the first tiles. InputValue is { bool is_future; union { future, int } }
 * with the union at 8. */
static void cub_scan(const struct phos_sim_launch *l)
{
	const int *in = PHOS_SIM_ARG(l, 0, const int *);
	int *out = PHOS_SIM_ARG(l, 1, int *);
	int start_tile = PHOS_SIM_ARG(l, 3, int);
	unsigned n = PHOS_SIM_ARG(l, 6, unsigned);
	const char *init = (const char *)l->params + l->ki->params[5].offset;
	int acc;

	if (start_tile != 0 || init[0])   /* a future init value: not what the example does */
		return;
	memcpy(&acc, init + 8, sizeof(acc));
	for (unsigned i = 0; i < n; i++) {
		int x = in[i];

		out[i] = acc;
		acc += x;
	}
}

/* The order of CUB's radix sort for floats: by bits, the sign bit flipped for
 * positives and every bit for negatives (-0.0 before +0.0). */
static uint32_t radix_float(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return (b & 0x80000000u) ? ~b : b ^ 0x80000000u;
}

/* cub/example_device_radix_sort.cu: DeviceRadixSortSingleTileKernel(keys_in, keys_out,
 * values_in, values_out, num_items, begin_bit, end_bit, decomposer): a stable
 * ascending sort of (float key, int value) pairs, insertion sort (one tile). */
static void cub_radix_sort_single_tile(const struct phos_sim_launch *l)
{
	const float *kin = PHOS_SIM_ARG(l, 0, const float *);
	float *kout = PHOS_SIM_ARG(l, 1, float *);
	const int *vin = PHOS_SIM_ARG(l, 2, const int *);
	int *vout = PHOS_SIM_ARG(l, 3, int *);
	int n = PHOS_SIM_ARG(l, 4, int);

	for (int i = 0; i < n; i++) {
		float k = kin[i];
		int v = vin[i], j = i;

		for (; j > 0 && radix_float(kout[j - 1]) > radix_float(k); j--) {
			kout[j] = kout[j - 1];
			vout[j] = vout[j - 1];
		}
		kout[j] = k;
		vout[j] = v;
	}
}

#define BLOCK_REDUCE(threads, items, algo)                                                      \
	{ "_Z17BlockReduceKernelILi" #threads "ELi" #items "EL" CUB_NS "20BlockReduceAlgorithmE" #algo \
	  "EEvPiS3_Pl", cub_block_reduce }
#define BLOCK_REDUCE_ALGOS(threads, items) BLOCK_REDUCE(threads, items, 1), BLOCK_REDUCE(threads, items, 2)

/* managed/managed.cu: y[i] = x[i] + y[i] */
static void managed_add(const struct phos_sim_launch *l)
{
	int n = PHOS_SIM_ARG(l, 0, int);
	const float *x = PHOS_SIM_ARG(l, 1, const float *);
	float *y = PHOS_SIM_ARG(l, 2, float *);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] = x[i] + y[i];
}

/* managed/managed.cu: thread 0 of block 0 logs the counter, then bumps it */
static void managed_bump(const struct phos_sim_launch *l)
{
	int *counter = PHOS_SIM_ARG(l, 0, int *);
	int *trace = PHOS_SIM_ARG(l, 1, int *);
	int step = PHOS_SIM_ARG(l, 2, int);

	trace[step] = *counter;
	*counter += step;
}

/* managed/managed_serve.cu: t[i] += *calls */
static void managed_serve_step(const struct phos_sim_launch *l)
{
	float *t = PHOS_SIM_ARG(l, 0, float *);
	int n = PHOS_SIM_ARG(l, 1, int);
	const int *calls = PHOS_SIM_ARG(l, 2, const int *);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			t[i] += (float)*calls;
}

static const struct phos_sim_twin twins[] = {
	{ "_Z6mg_addiPKfPf", managed_add },
	{ "_Z7mg_bumpPiS_i", managed_bump },
	{ "_Z13mg_serve_stepPfiPKi", managed_serve_step },
	{ "_Z9guard_addPKfPfi", guard_add },
	{ "_Z9drv_saxpyfPKfPfi", driver_saxpy },
	{ "drv_fill", driver_fill },
	{ "_Z10drv_linkedPfi", driver_linked },
	{ "_Z8ep_scalePiii", driver_ep_scale },
	{ "_Z12graphs_saxpyfPKfPfi", graphs_saxpy },
	{ "_Z16graphs_scale_addPffi", graphs_scale_add },
	{ "_Z10graphs_addPKfS0_Pfi", graphs_add },
	{ "_Z9cond_inityPii", cond_init },
	{ "_Z8cond_addPffi", cond_add },
	{ "_Z9cond_stepyPi", cond_step },
	{ "_Z9cond_pickyPKi", cond_pick },
	{ "_Z9cond_markPii", cond_mark },
	{ "_Z8coop_sumPKiPiS1_i", coop_sum },
	{ "_Z9coop_iotaPiii", coop_iota },
	{ "_Z11tex_fetch2dyPfiiffff", tex_fetch2d },
	{ "_Z12tex_fetch2d4yP6float4ii", tex_fetch2d4 },
	{ "_Z17tex_fetch2d_shortyPsii", tex_fetch2d_short },
	{ "_Z11tex_fetch3dyPfiiiff", tex_fetch3d },
	{ "_Z17tex_fetch_layeredyPfiii", tex_fetch_layered },
	{ "_Z11tex_fetch1dyPfi", tex_fetch1d },
	{ "_Z16tex_surf_write2dyiif", tex_surf_write2d },
	{ "_Z15tex_surf_read2dyPfii", tex_surf_read2d },
	{ "_Z16tex_surf_write3dyiii", tex_surf_write3d },
	{ "_Z16tex_serve_sampleyPfiiff", tex_serve_sample },
	{ "_Z17tex_serve_fetch1dyPfi", tex_fetch1d },
	{ "_Z14tex_serve_surfyiii", tex_serve_surf },
	BLOCK_REDUCE_ALGOS(1024, 1),
	BLOCK_REDUCE_ALGOS(512, 2),
	BLOCK_REDUCE_ALGOS(256, 4),
	BLOCK_REDUCE_ALGOS(128, 8),
	BLOCK_REDUCE_ALGOS(64, 16),
	BLOCK_REDUCE_ALGOS(32, 32),
	BLOCK_REDUCE_ALGOS(16, 64),
	{ "_ZN3cub17CUB_300001_SM_9006detail6reduce28DeviceReduceSingleTileKernelINS2_10policy_hubIijN4cuda3std3__"
	  "44plusIvEEE10Policy1000EPiSC_jS9_iiNS7_10__identityEEEvT0_T1_T2_T3_T4_T6_", cub_reduce_single_tile },
	{ "_ZN3cub17CUB_300001_SM_9006detail4scan20DeviceScanInitKernelINS0_13ScanTileStateIiLb1EEEEEvT_i",
	  cub_scan_init },
	{ "_ZN3cub17CUB_300001_SM_9006detail4scan16DeviceScanKernelINS2_10policy_hubIiiijN4cuda3std3__44plusIvEEE1"
	  "0Policy1000EPiSC_NS0_13ScanTileStateIiLb1EEES9_NS1_10InputValueIiSC_EEjiLb0EiEEvT0_T1_T2_iT3_T4_T5_",
	  cub_scan },
	{ "_ZN3cub17CUB_300001_SM_9006detail10radix_sort31DeviceRadixSortSingleTileKernelINS1_5radix10policy_hub"
	  "IfijE10Policy1000ELNS0_9SortOrderE0EfijNS1_21identity_decomposer_tEEEvPKT1_PSA_PKT2_PSE_T3_iiT4_",
	  cub_radix_sort_single_tile },
};

EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count);
EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count)
{
	*ret_count = sizeof(twins) / sizeof(twins[0]);
	return twins;
}
