/* SPDX-License-Identifier: MIT */
/* sim twins of the kernels of the integration test programs. */
#include <stdint.h>

#include "sim_twin.h"

#define EXPORT __attribute__((visibility("default")))

static void k_const_mix(const struct phos_sim_launch *l)
{
	const float *in = PHOS_SIM_ARG(l, 0, const float *);
	float *out = PHOS_SIM_ARG(l, 1, float *);
	int n = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < n; i++)
		out[i] = in[i] * 2.0f;
}

struct pair_args {
	const float *src;
	float *dst;
	int n;
};

static void k_struct(const struct phos_sim_launch *l)
{
	struct pair_args p = PHOS_SIM_ARG(l, 0, struct pair_args);

	for (int i = 0; i < p.n; i++)
		p.dst[i] = p.src[i] + 1.0f;
}

static void k_extern(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	const float *y = PHOS_SIM_ARG(l, 1, const float *);
	int n = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < n; i++)
		x[i] += y[i];
}

static void touch(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	int n = PHOS_SIM_ARG(l, 1, int);

	for (int i = 0; i < n; i++)
		x[i] = 1.0f;
}

static void mg_fill(const struct phos_sim_launch *l)
{
	int *p = PHOS_SIM_ARG(l, 0, int *);
	int v = PHOS_SIM_ARG(l, 1, int);
	int n = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < n; i++)
		p[i] = v + i;
}

static void mg_count(const struct phos_sim_launch *l)
{
	PHOS_SIM_ARG(l, 0, int *)[0]++;
}

static void mg_peek(const struct phos_sim_launch *l)
{
	const int *a = PHOS_SIM_ARG(l, 0, const int *);
	int ia = PHOS_SIM_ARG(l, 1, int);
	const int *b = PHOS_SIM_ARG(l, 2, const int *);
	int ib = PHOS_SIM_ARG(l, 3, int);
	int *out = PHOS_SIM_ARG(l, 4, int *);

	out[0] = a[ia];
	out[1] = b[ib];
}

static void bump(const struct phos_sim_launch *l)
{
	int *counters = PHOS_SIM_ARG(l, 0, int *);
	int slot = PHOS_SIM_ARG(l, 1, int);
	int by = PHOS_SIM_ARG(l, 2, int);

	counters[slot] += by;
}

static void mark(const struct phos_sim_launch *l)
{
	int *out = PHOS_SIM_ARG(l, 0, int *);

	out[0] = 42;
}

static void fill(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	int n = PHOS_SIM_ARG(l, 1, int);
	unsigned seed = PHOS_SIM_ARG(l, 2, unsigned);

	for (int i = 0; i < n; i++)
		x[i] = (float)(((unsigned)i * 2654435761u + seed) % 1000u) * 0.001f;
}

static void bump_all(const struct phos_sim_launch *l)
{
	float *x = PHOS_SIM_ARG(l, 0, float *);
	int n = PHOS_SIM_ARG(l, 1, int);
	float by = PHOS_SIM_ARG(l, 2, float);

	for (int i = 0; i < n; i++)
		x[i] += by;
}

/* share_probe.cu: the buffer k of the table in device memory */
static void bump_via_table(const struct phos_sim_launch *l)
{
	float **table = PHOS_SIM_ARG(l, 0, float **);
	int k = PHOS_SIM_ARG(l, 1, int);
	int n = PHOS_SIM_ARG(l, 2, int);
	float by = PHOS_SIM_ARG(l, 3, float);
	float *x = table[k];

	for (int i = 0; i < n; i++)
		x[i] += by;
}

/* tests/transparency/pools/common.h */
static void pools_iota(const struct phos_sim_launch *l)
{
	int *x = PHOS_SIM_ARG(l, 0, int *);
	int n = PHOS_SIM_ARG(l, 1, int);
	int base = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < n; i++)
		x[i] = base + i;
}

/* tests/transparency/xfer/bigparams.cu: parameter blocks of 4 KiB to 32,760
 * bytes, read through the offsets the fatbin gave (a wrong offset or size
 * reads the wrong words). */
static void xfer_p4k(const struct phos_sim_launch *l)
{
	int *out = PHOS_SIM_ARG(l, 0, int *);
	const int *v = (const int *)((const char *)l->params + l->ki->params[1].offset);
	int k = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < 1030; i++)
		out[i] = v[i] * k;
}

static void xfer_p20k(const struct phos_sim_launch *l)
{
	const int *base = PHOS_SIM_ARG(l, 0, const int *);
	const int *v = (const int *)((const char *)l->params + l->ki->params[1].offset);
	double scale = PHOS_SIM_ARG(l, 2, double);
	int *out = PHOS_SIM_ARG(l, 3, int *);

	for (int i = 0; i < 5000; i++)
		out[i] = base[i] + (int)(v[i] * scale);
}

static void xfer_p32k(const struct phos_sim_launch *l)
{
	const int *v = (const int *)((const char *)l->params + l->ki->params[0].offset);
	int *out = PHOS_SIM_ARG(l, 1, int *);

	for (int i = 0; i < 8188; i++)
		out[i] = v[i] ^ 0x5a5a;
}

/* tests/transparency/hostmem/mapped.cu: writes host memory mapped into the
 * device (the executor maps the region at the same address when it can). */
static void hm_fill(const struct phos_sim_launch *l)
{
	int *p = PHOS_SIM_ARG(l, 0, int *);
	int n = PHOS_SIM_ARG(l, 1, int);
	int v = PHOS_SIM_ARG(l, 2, int);

	for (int i = 0; i < n; i++)
		p[i] = v + i;
}

/* long_call.cu: one step of its recurrence. */
static void lc_step(const struct phos_sim_launch *l)
{
	unsigned *x = PHOS_SIM_ARG(l, 0, unsigned *);
	int n = PHOS_SIM_ARG(l, 1, int);
	unsigned step = PHOS_SIM_ARG(l, 2, unsigned);

	for (int i = 0; i < n; i++)
		x[i] = x[i] * 1103515245u + 12345u + step;
}

/* lazy_modules.cu */
static void lz_fill(const struct phos_sim_launch *l)
{
	int *x = PHOS_SIM_ARG(l, 0, int *);
	int n = PHOS_SIM_ARG(l, 1, int);

	for (int i = 0; i < n; i++)
		x[i] = 3 * i + 1;
}

static const struct phos_sim_twin twins[] = {
	{ "_Z7lz_fillPii", lz_fill },
	{ "_Z7lc_stepPjij", lc_step },
	{ "_Z7hm_fillPiii", hm_fill },
	{ "_Z8xfer_p4kPi3p4ki", xfer_p4k },
	{ "_Z9xfer_p20kPKi4p20kdPi", xfer_p20k },
	{ "_Z9xfer_p32k4p32kPi", xfer_p32k },
	{ "_Z4fillPfij", fill },
	{ "_Z8bump_allPfif", bump_all },
	{ "_Z14bump_via_tablePPfiif", bump_via_table },
	{ "_Z4markPi", mark },
	{ "_Z11k_const_mixPKfPfi", k_const_mix },
	{ "_Z8k_struct9pair_args", k_struct },
	{ "k_extern", k_extern },
	{ "_Z5touchPfi", touch },
	{ "_Z7mg_fillPiii", mg_fill },
	{ "_Z7mg_peekPKiiS0_iPi", mg_peek },
	{ "_Z8mg_countPi", mg_count },
	{ "_Z4bumpPiii", bump },
	{ "_Z10pools_iotaPiii", pools_iota },
};

EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count);
EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count)
{
	*ret_count = sizeof(twins) / sizeof(twins[0]);
	return twins;
}
