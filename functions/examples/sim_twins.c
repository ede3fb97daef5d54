/* SPDX-License-Identifier: MIT */
/*
 * Host twins of every kernel of the example functions, for the sim device
 * (runtime/device/sim/sim_twin.h). Built as libphos-twins-examples.so; name it in
 * PHOS_SIM_TWINS.
 *
 *   kernel (mangled name)          example   twin
 *   _Z7vec_addPKfS0_Pfi            vecadd    per thread, grid-stride
 *   _Z4axpy9axpy_args              vecadd    per thread, struct read by value
 *   scale_inplace (extern "C")     vecadd    per thread, grid-stride
 *   _Z12init_weightsPfmjjf         mlp       per thread, mlp_weights.h
 *   _Z8bias_actPfPKfiii            mlp,      per thread, grid-stride
 *                                  tp_mlp
 *   _Z12softmax_rowsPKfPfii        mlp       per row (the kernel reduces with
 *                                            shuffles and shared memory)
 *   _Z10fill_tablePjyj             tables    whole table
 *   _Z9sum_tablePKPjiyPy           tables    whole table, through the pointer
 *                                            table in device memory
 *   _Z10sum_directPKjyPy           tables    whole table
 *   _Z12session_fillPjy            session   whole state
 *   _Z12session_bumpPjyyyPyi       session   the call's window in a block, the counter
 *   _Z8mse_gradPKfS0_PfS1_iif      train     per column, rows in order
 *   _Z7row_sumPKfPfii              train     per row, columns in order
 *   _Z9relu_gradPfPKfm             train     per element
 *   _Z3sgdPfPKfmf                  train     per element, fmaf as the kernel
 *   (train also launches init_weights and bias_act, mlp's twins, and
 *   sum_direct, tables' twin, over its frozen state)
 *
 * train's kernels are grid-stride loops in which every element (or row, or
 * column) belongs to one thread and is computed alone, so their twins walk
 * the elements in order whatever the launch geometry.
 *
 * Per-thread twins run the kernel's body once for every (blockIdx, threadIdx)
 * of the launch, in order, which is exact for kernels whose threads touch
 * disjoint elements. They repeat the kernel's float operations one for one
 * (the library is built with -ffp-contract=off, and the kernels use explicit
 * fmaf where they fuse), so vecadd and the weights match the GPU bit for bit;
 * softmax sums in a different order (rounding-level differences).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mlp_weights.h"
#include "sim_twin.h"

/* ---- thread emulation ----------------------------------------------------- */

struct twin_idx {
	uint32_t block[3];                  /* blockIdx */
	uint32_t thread[3];                 /* threadIdx */
};

typedef void (*twin_thread_fn)(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx);

/* Calls fn for every thread of the launch: blocks in order, threads in order. */
static void twin_for_each_thread(const struct phos_sim_launch *l, twin_thread_fn fn, void *ctx)
{
	struct twin_idx t;

	for (t.block[2] = 0; t.block[2] < l->grid[2]; t.block[2]++)
		for (t.block[1] = 0; t.block[1] < l->grid[1]; t.block[1]++)
			for (t.block[0] = 0; t.block[0] < l->grid[0]; t.block[0]++)
				for (t.thread[2] = 0; t.thread[2] < l->block[2]; t.thread[2]++)
					for (t.thread[1] = 0; t.thread[1] < l->block[1]; t.thread[1]++)
						for (t.thread[0] = 0; t.thread[0] < l->block[0]; t.thread[0]++)
							fn(l, &t, ctx);
}

/* blockIdx.x * blockDim.x + threadIdx.x, and gridDim.x * blockDim.x, without overflow. */
static uint64_t twin_global_x(const struct phos_sim_launch *l, const struct twin_idx *t)
{
	return (uint64_t)t->block[0] * l->block[0] + t->thread[0];
}

static uint64_t twin_stride_x(const struct phos_sim_launch *l)
{
	return (uint64_t)l->grid[0] * l->block[0];
}

/* The launch carries at least n parameters (a twin never reads past the buffer). */
static int twin_has_params(const struct phos_sim_launch *l, uint32_t n)
{
	return l->ki && l->params && l->ki->nparams >= n;
}

/* ---- vecadd --------------------------------------------------------------- */

struct vec_add_params {
	const float *a, *b;
	float *c;
	int n;
};

static void vec_add_thread(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx)
{
	const struct vec_add_params *p = ctx;

	for (uint64_t i = twin_global_x(l, t); i < (uint64_t)p->n; i += twin_stride_x(l))
		p->c[i] = p->a[i] + p->b[i];
}

/* __global__ void vec_add(const float *a, const float *b, float *c, int n) */
static void vec_add_twin(const struct phos_sim_launch *l)
{
	struct vec_add_params p;

	if (!twin_has_params(l, 4))
		return;
	p.a = PHOS_SIM_ARG(l, 0, const float *);
	p.b = PHOS_SIM_ARG(l, 1, const float *);
	p.c = PHOS_SIM_ARG(l, 2, float *);
	p.n = PHOS_SIM_ARG(l, 3, int);
	if (p.n > 0)
		twin_for_each_thread(l, vec_add_thread, &p);
}

/* The kernel's by-value argument, laid out as nvcc lays it out (x86-64 = device). */
struct axpy_args {
	const float *x;
	float *y;
	float a;
	int n;
};

static void axpy_thread(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx)
{
	const struct axpy_args *p = ctx;

	for (uint64_t i = twin_global_x(l, t); i < (uint64_t)p->n; i += twin_stride_x(l))
		p->y[i] = fmaf(p->a, p->x[i], p->y[i]);
}

/* __global__ void axpy(struct axpy_args args) */
static void axpy_twin(const struct phos_sim_launch *l)
{
	struct axpy_args args;

	if (!twin_has_params(l, 1) || l->ki->params[0].size != sizeof(args))
		return;
	args = PHOS_SIM_ARG(l, 0, struct axpy_args);
	if (args.n > 0)
		twin_for_each_thread(l, axpy_thread, &args);
}

struct scale_params {
	float *x;
	int n;
	float s, b;
};

static void scale_inplace_thread(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx)
{
	const struct scale_params *p = ctx;

	for (uint64_t i = twin_global_x(l, t); i < (uint64_t)p->n; i += twin_stride_x(l))
		p->x[i] = fmaf(p->x[i], p->s, p->b);
}

/* extern "C" __global__ void scale_inplace(float *x, int n, float s, float b) */
static void scale_inplace_twin(const struct phos_sim_launch *l)
{
	struct scale_params p;

	if (!twin_has_params(l, 4))
		return;
	p.x = PHOS_SIM_ARG(l, 0, float *);
	p.n = PHOS_SIM_ARG(l, 1, int);
	p.s = PHOS_SIM_ARG(l, 2, float);
	p.b = PHOS_SIM_ARG(l, 3, float);
	if (p.n > 0)
		twin_for_each_thread(l, scale_inplace_thread, &p);
}

/* ---- mlp ------------------------------------------------------------------ */

struct init_weights_params {
	float *w;
	uint64_t count;
	uint64_t stream;
	float unit;
};

static void init_weights_thread(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx)
{
	const struct init_weights_params *p = ctx;

	for (uint64_t i = twin_global_x(l, t); i < p->count; i += twin_stride_x(l))
		p->w[i] = mlpw_at(p->stream, i, p->unit);
}

/* __global__ void init_weights(float *w, size_t count, uint32_t seed, uint32_t tensor, float scale) */
static void init_weights_twin(const struct phos_sim_launch *l)
{
	struct init_weights_params p;

	if (!twin_has_params(l, 5))
		return;
	p.w = PHOS_SIM_ARG(l, 0, float *);
	p.count = PHOS_SIM_ARG(l, 1, uint64_t);
	p.stream = mlpw_stream(PHOS_SIM_ARG(l, 2, uint32_t), PHOS_SIM_ARG(l, 3, uint32_t));
	p.unit = mlpw_unit(PHOS_SIM_ARG(l, 4, float));
	twin_for_each_thread(l, init_weights_thread, &p);
}

struct bias_act_params {
	float *y;
	const float *bias;
	int rows, cols, relu;
};

static void bias_act_thread(const struct phos_sim_launch *l, const struct twin_idx *t, void *ctx)
{
	const struct bias_act_params *p = ctx;
	uint64_t total = (uint64_t)p->rows * (uint64_t)p->cols;

	for (uint64_t i = twin_global_x(l, t); i < total; i += twin_stride_x(l)) {
		float v = p->y[i] + p->bias[i % (uint64_t)p->rows];

		p->y[i] = p->relu ? fmaxf(v, 0.0f) : v;
	}
}

/* __global__ void bias_act(float *y, const float *bias, int rows, int cols, int relu) */
static void bias_act_twin(const struct phos_sim_launch *l)
{
	struct bias_act_params p;

	if (!twin_has_params(l, 5))
		return;
	p.y = PHOS_SIM_ARG(l, 0, float *);
	p.bias = PHOS_SIM_ARG(l, 1, const float *);
	p.rows = PHOS_SIM_ARG(l, 2, int);
	p.cols = PHOS_SIM_ARG(l, 3, int);
	p.relu = PHOS_SIM_ARG(l, 4, int);
	if (p.rows > 0 && p.cols > 0)
		twin_for_each_thread(l, bias_act_thread, &p);
}

/* __global__ void softmax_rows(const float *logits, float *probs, int cols, int rows)
 * Each row: max, sum of expf(x - max), expf(x - max) / sum, as the kernel does
 * (rows are split over blocks; every row is done once whatever the grid). */
static void softmax_rows_twin(const struct phos_sim_launch *l)
{
	const float *logits;
	float *probs;
	int cols, rows;

	if (!twin_has_params(l, 4) || l->grid[0] == 0 || l->block[0] == 0)
		return;
	logits = PHOS_SIM_ARG(l, 0, const float *);
	probs = PHOS_SIM_ARG(l, 1, float *);
	cols = PHOS_SIM_ARG(l, 2, int);
	rows = PHOS_SIM_ARG(l, 3, int);
	for (int r = 0; r < rows; r++) {
		const float *x = logits + (size_t)r * cols;
		float *p = probs + (size_t)r * cols;
		float m = -INFINITY, s = 0.0f;

		for (int j = 0; j < cols; j++)
			m = fmaxf(m, x[j]);
		for (int j = 0; j < cols; j++)
			s += expf(x[j] - m);
		for (int j = 0; j < cols; j++)
			p[j] = expf(x[j] - m) / s;
	}
}

/* ---- tables ---------------------------------------------------------------- */

/* tables.cu's table_value */
static unsigned table_value(unsigned k, unsigned long long i)
{
	return (unsigned)((k + 1) * 2654435761u) ^ (unsigned)(i * 40503u) ^ (unsigned)(i >> 7);
}

/* __global__ void fill_table(unsigned *t, unsigned long long n, unsigned k) */
static void fill_table_twin(const struct phos_sim_launch *l)
{
	unsigned *t;
	unsigned long long n;
	unsigned k;

	if (!twin_has_params(l, 3))
		return;
	t = PHOS_SIM_ARG(l, 0, unsigned *);
	n = PHOS_SIM_ARG(l, 1, unsigned long long);
	k = PHOS_SIM_ARG(l, 2, unsigned);
	for (unsigned long long i = 0; i < n; i++)
		t[i] = table_value(k, i);
}

/* __global__ void sum_table(unsigned *const *tabs, int k, unsigned long long n,
 *                           unsigned long long *sum): the table's pointer is read
 * from device memory, as the kernel does. */
static void sum_table_twin(const struct phos_sim_launch *l)
{
	unsigned *const *tabs;
	const unsigned *t;
	unsigned long long n, s = 0, *sum;
	int k;

	if (!twin_has_params(l, 4))
		return;
	tabs = PHOS_SIM_ARG(l, 0, unsigned *const *);
	k = PHOS_SIM_ARG(l, 1, int);
	n = PHOS_SIM_ARG(l, 2, unsigned long long);
	sum = PHOS_SIM_ARG(l, 3, unsigned long long *);
	t = tabs[k];
	for (unsigned long long i = 0; i < n; i++)
		s += t[i];
	*sum += s;
}

/* __global__ void sum_direct(const unsigned *t, unsigned long long n, unsigned long long *sum) */
static void sum_direct_twin(const struct phos_sim_launch *l)
{
	const unsigned *t;
	unsigned long long n, s = 0, *sum;

	if (!twin_has_params(l, 3))
		return;
	t = PHOS_SIM_ARG(l, 0, const unsigned *);
	n = PHOS_SIM_ARG(l, 1, unsigned long long);
	sum = PHOS_SIM_ARG(l, 2, unsigned long long *);
	for (unsigned long long i = 0; i < n; i++)
		s += t[i];
	*sum += s;
}

/* ---- session -------------------------------------------------------------- */

/* __global__ void session_fill(unsigned *s, unsigned long long n) */
static void session_fill_twin(const struct phos_sim_launch *l)
{
	unsigned *s;
	unsigned long long n;

	if (!twin_has_params(l, 2))
		return;
	s = PHOS_SIM_ARG(l, 0, unsigned *);
	n = PHOS_SIM_ARG(l, 1, unsigned long long);
	for (unsigned long long i = 0; i < n; i++)
		s[i] = (unsigned)(i % 65536);
}

/* __global__ void session_bump(unsigned *s, unsigned long long n, unsigned long long start,
 *                              unsigned long long len, unsigned long long *counter, int count) */
static void session_bump_twin(const struct phos_sim_launch *l)
{
	unsigned *s;
	unsigned long long start, len, *counter;
	int count;

	if (!twin_has_params(l, 6))
		return;
	s = PHOS_SIM_ARG(l, 0, unsigned *);
	start = PHOS_SIM_ARG(l, 2, unsigned long long);
	len = PHOS_SIM_ARG(l, 3, unsigned long long);
	counter = PHOS_SIM_ARG(l, 4, unsigned long long *);
	count = PHOS_SIM_ARG(l, 5, int);
	for (unsigned long long i = 0; i < len; i++)
		s[start + i] += 1;
	*counter += (unsigned long long)count;
}

/* ---- train ---------------------------------------------------------------- */

/* __global__ void mse_grad(const float *z, const float *y, float *dz, float *err, int rows, int cols, float scale) */
static void mse_grad_twin(const struct phos_sim_launch *l)
{
	const float *z, *y;
	float *dz, *err, scale;
	int rows, cols;

	if (!twin_has_params(l, 7))
		return;
	z = PHOS_SIM_ARG(l, 0, const float *);
	y = PHOS_SIM_ARG(l, 1, const float *);
	dz = PHOS_SIM_ARG(l, 2, float *);
	err = PHOS_SIM_ARG(l, 3, float *);
	rows = PHOS_SIM_ARG(l, 4, int);
	cols = PHOS_SIM_ARG(l, 5, int);
	scale = PHOS_SIM_ARG(l, 6, float);
	for (int j = 0; j < cols; j++) {
		float e = 0.0f;

		for (int i = 0; i < rows; i++) {
			size_t k = (size_t)j * (size_t)rows + (size_t)i;
			float d = z[k] - y[k];

			dz[k] = d * scale;
			e = fmaf(d, d, e);
		}
		err[j] = e;
	}
}

/* __global__ void row_sum(const float *g, float *out, int rows, int cols) */
static void row_sum_twin(const struct phos_sim_launch *l)
{
	const float *g;
	float *out;
	int rows, cols;

	if (!twin_has_params(l, 4))
		return;
	g = PHOS_SIM_ARG(l, 0, const float *);
	out = PHOS_SIM_ARG(l, 1, float *);
	rows = PHOS_SIM_ARG(l, 2, int);
	cols = PHOS_SIM_ARG(l, 3, int);
	for (int i = 0; i < rows; i++) {
		float s = 0.0f;

		for (int j = 0; j < cols; j++)
			s = s + g[(size_t)j * (size_t)rows + (size_t)i];
		out[i] = s;
	}
}

/* __global__ void relu_grad(float *d, const float *a, size_t n) */
static void relu_grad_twin(const struct phos_sim_launch *l)
{
	float *d;
	const float *a;
	uint64_t n;

	if (!twin_has_params(l, 3))
		return;
	d = PHOS_SIM_ARG(l, 0, float *);
	a = PHOS_SIM_ARG(l, 1, const float *);
	n = PHOS_SIM_ARG(l, 2, uint64_t);
	for (uint64_t i = 0; i < n; i++)
		d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

/* __global__ void sgd(float *w, const float *g, size_t n, float lr) */
static void sgd_twin(const struct phos_sim_launch *l)
{
	float *w, lr;
	const float *g;
	uint64_t n;

	if (!twin_has_params(l, 4))
		return;
	w = PHOS_SIM_ARG(l, 0, float *);
	g = PHOS_SIM_ARG(l, 1, const float *);
	n = PHOS_SIM_ARG(l, 2, uint64_t);
	lr = PHOS_SIM_ARG(l, 3, float);
	for (uint64_t i = 0; i < n; i++)
		w[i] = fmaf(-lr, g[i], w[i]);
}

/* ---- the table ------------------------------------------------------------ */

static const struct phos_sim_twin example_twins[] = {
	{"_Z7vec_addPKfS0_Pfi", vec_add_twin},
	{"_Z4axpy9axpy_args", axpy_twin},
	{"scale_inplace", scale_inplace_twin},
	{"_Z12init_weightsPfmjjf", init_weights_twin},
	{"_Z8bias_actPfPKfiii", bias_act_twin},
	{"_Z12softmax_rowsPKfPfii", softmax_rows_twin},
	{"_Z10fill_tablePjyj", fill_table_twin},
	{"_Z9sum_tablePKPjiyPy", sum_table_twin},
	{"_Z10sum_directPKjyPy", sum_direct_twin},
	{"_Z12session_fillPjy", session_fill_twin},
	{"_Z12session_bumpPjyyyPyi", session_bump_twin},
	{"_Z8mse_gradPKfS0_PfS1_iif", mse_grad_twin},
	{"_Z7row_sumPKfPfii", row_sum_twin},
	{"_Z9relu_gradPfPKfm", relu_grad_twin},
	{"_Z3sgdPfPKfmf", sgd_twin},
};

__attribute__((visibility("default"))) const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count);

__attribute__((visibility("default"))) const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count)
{
	*ret_count = sizeof(example_twins) / sizeof(example_twins[0]);
	return example_twins;
}
