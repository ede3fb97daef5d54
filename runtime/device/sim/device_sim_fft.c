/* SPDX-License-Identifier: MIT */
/*
 * cuFFT for the sim device (fft_dev.h): a reference DFT on the host, in
 * double whatever the plan's precision, with cuFFT's conventions:
 *
 *   forward  X[k] = sum_j x[j] e^(-2πi jk/n)     inverse  sign +1; neither
 *                                                scaled (a round trip is n x)
 *   R2C      the complex transform of the real input, n/2 + 1 values kept
 *            on the last dimension
 *   C2R      the n/2 + 1 values of each row extended to the whole row by
 *            Hermitian symmetry (X[n-k] = conj X[k]), transformed back, the
 *            real part kept
 *
 * Each transform of the batch is gathered from its side's layout
 * (phos_fft_side_of) into a packed array of the plan's logical sizes,
 * transformed dimension by dimension (radix 2 for a power-of-two length,
 * the direct O(n^2) sum otherwise) and scattered into the output's layout.
 * Plans need no work area. A transform of more than SIM_FFT_ELEMS elements
 * is CUFFT_INVALID_SIZE here (the scratch array's limit), not on a GPU.
 */
#include "device_sim.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fft_dev.h"

#define SIM_FFT_MAGIC 0x73666674u   /* "sfft" */
#define SIM_FFT_ELEMS (1ll << 24)   /* complex doubles of one transform: 256 MiB of scratch */

struct sim_fft_plan {
	uint32_t magic;
};

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static bool pow2(int64_t n)
{
	return (n & (n - 1)) == 0;
}

/* e^(sign 2πi m/n), m in [0, n) */
static double complex twiddle(int64_t m, int64_t n, int sign)
{
	double a = 2.0 * M_PI * (double)m / (double)n;

	return cos(a) + sign * sin(a) * I;
}

/* In place, n a power of two: iterative radix 2 (bit reversal, then butterflies). */
static void radix2(double complex *v, int64_t n, int sign)
{
	for (int64_t i = 1, j = 0; i < n; i++) {
		int64_t bit = n >> 1;

		for (; j & bit; bit >>= 1)
			j ^= bit;
		j ^= bit;
		if (i < j) {
			double complex t = v[i];

			v[i] = v[j];
			v[j] = t;
		}
	}
	for (int64_t len = 2; len <= n; len <<= 1)
		for (int64_t k = 0; k < len / 2; k++) {
			double complex w = twiddle(k, len, sign);

			for (int64_t i = 0; i < n; i += len) {
				double complex u = v[i + k], t = w * v[i + k + len / 2];

				v[i + k] = u + t;
				v[i + k + len / 2] = u - t;
			}
		}
}

/* out[j] = sum_k in[k] w[jk mod n], w the n twiddles of the sign. */
static void direct(const double complex *in, double complex *out, int64_t n, const double complex *w)
{
	for (int64_t j = 0; j < n; j++) {
		double complex s = 0;

		for (int64_t k = 0; k < n; k++)
			s += in[k] * w[j * k % n];
		out[j] = s;
	}
}

/* Transforms every line of dimension k of the packed array a (dims d[0..rank)). */
static int transform_dim(double complex *a, const int64_t *d, int rank, int k, int sign)
{
	int64_t len = d[k], stride = 1, outer = 1;
	double complex *line, *tmp = NULL, *w = NULL;

	for (int i = k + 1; i < rank; i++)
		stride *= d[i];
	for (int i = 0; i < k; i++)
		outer *= d[i];
	line = malloc((size_t)len * sizeof(*line));
	if (!pow2(len)) {
		tmp = malloc((size_t)len * sizeof(*tmp));
		w = malloc((size_t)len * sizeof(*w));
	}
	if (!line || (!pow2(len) && (!tmp || !w))) {
		free(line);
		free(tmp);
		free(w);
		return -1;
	}
	for (int64_t m = 0; w && m < len; m++)
		w[m] = twiddle(m, len, sign);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < stride; i++) {
			double complex *base = a + o * len * stride + i;

			for (int64_t j = 0; j < len; j++)
				line[j] = base[j * stride];
			if (w) {
				direct(line, tmp, len, w);
				memcpy(line, tmp, (size_t)len * sizeof(*line));
			} else {
				radix2(line, len, sign);
			}
			for (int64_t j = 0; j < len; j++)
				base[j * stride] = line[j];
		}
	free(line);
	free(tmp);
	free(w);
	return 0;
}

/* A side's dimensions, strides and the packed array's dimensions, padded
 * to three (leading dimensions of one element). */
struct walk {
	int64_t sd[3], ss[3], dd[3];
};

static void walk_of(const struct phos_fft_side *s, const int64_t *n, struct walk *w)
{
	int lead = 3 - s->rank;

	for (int k = 0; k < 3; k++) {
		w->sd[k] = k < lead ? 1 : s->dims[k - lead];
		w->ss[k] = k < lead ? 0 : s->stride[k - lead];
		w->dd[k] = k < lead ? 1 : n[k - lead];
	}
}

static double complex load(const uint8_t *base, const struct phos_fft_side *s, bool dbl, int64_t off)
{
	if (dbl) {
		double v[2] = { 0, 0 };

		memcpy(v, base + off * s->esize, s->esize);
		return v[0] + v[1] * I;
	} else {
		float v[2] = { 0, 0 };

		memcpy(v, base + off * s->esize, s->esize);
		return v[0] + v[1] * I;
	}
}

static void store(uint8_t *base, const struct phos_fft_side *s, bool dbl, int64_t off, double complex z)
{
	if (dbl) {
		double v[2] = { creal(z), cimag(z) };

		memcpy(base + off * s->esize, v, s->esize);
	} else {
		float v[2] = { (float)creal(z), (float)cimag(z) };

		memcpy(base + off * s->esize, v, s->esize);
	}
}

/* Copies transform b of side s (at base) into the packed array a, or a
 * into it (out). */
static void move(uint8_t *base, const struct phos_fft_side *s, const int64_t *n, bool dbl, int64_t b,
		 double complex *a, bool out)
{
	struct walk w;

	walk_of(s, n, &w);
	for (int64_t x0 = 0; x0 < w.sd[0]; x0++)
		for (int64_t x1 = 0; x1 < w.sd[1]; x1++)
			for (int64_t x2 = 0; x2 < w.sd[2]; x2++) {
				int64_t off = b * s->dist + x0 * w.ss[0] + x1 * w.ss[1] + x2 * w.ss[2];
				int64_t i = (x0 * w.dd[1] + x1) * w.dd[2] + x2;

				if (out)
					store(base, s, dbl, off, s->is_complex ? a[i] : creal(a[i]));
				else
					a[i] = load(base, s, dbl, off);
			}
}

/* One packed transform in place: C2R's rows made whole by Hermitian
 * symmetry once the other dimensions are transformed. */
static int transform(double complex *a, const struct phos_fft_plan *p, int sign)
{
	int r = p->rank;
	int64_t n = p->n[r - 1], rows = 1;

	if (!phos_fft_real_out(p->type)) {
		for (int k = 0; k < r; k++)
			if (transform_dim(a, p->n, r, k, sign) < 0)
				return -1;
		return 0;
	}
	for (int k = 0; k < r - 1; k++)
		if (transform_dim(a, p->n, r, k, sign) < 0)
			return -1;
	for (int k = 0; k < r - 1; k++)
		rows *= p->n[k];
	for (int64_t row = 0; row < rows; row++)
		for (int64_t k = n / 2 + 1; k < n; k++)
			a[row * n + k] = conj(a[row * n + n - k]);
	return transform_dim(a, p->n, r, r - 1, sign);
}

static int64_t elems_of(const struct phos_fft_plan *p)
{
	int64_t e = 1;

	for (int k = 0; k < p->rank; k++)
		e *= p->n[k];
	return e;
}

static int sim_fft_version(struct phos_device *dev, struct phos_reply_fft_version *ret, int *st)
{
	(void)dev;
	/* what cuFFT of CUDA 13 answers (cufft.h: CUFFT_VERSION 12000) */
	*ret = (struct phos_reply_fft_version){ .version = 12000, .major = 12, .minor = 0, .patch = 0 };
	return ok(st, PHOS_FFT_SUCCESS);
}

static int sim_fft_plan_size(struct phos_device *dev, const struct phos_fft_plan *p, uint64_t *ret_work, int *st)
{
	(void)dev;
	*ret_work = 0;
	return ok(st, elems_of(p) > SIM_FFT_ELEMS ? PHOS_FFT_INVALID_SIZE : PHOS_FFT_SUCCESS);
}

static int sim_fft_plan_make(struct phos_device *dev, const struct phos_fft_plan *p, void **ret, uint64_t *ret_work,
			     int *st)
{
	struct sim_fft_plan *pl;

	sim_fft_plan_size(dev, p, ret_work, st);
	if (*st)
		return 0;
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return ok(st, PHOS_FFT_ALLOC_FAILED);
	pl->magic = SIM_FFT_MAGIC;
	*ret = pl;
	return 0;
}

static void sim_fft_plan_destroy(struct phos_device *dev, void *plan)
{
	struct sim_fft_plan *pl = plan;

	(void)dev;
	if (pl)
		pl->magic = 0;
	free(pl);
}

static int sim_fft_exec(struct phos_device *dev, void *plan, const struct phos_fft_plan *p, void *stream, uint64_t in,
			uint64_t out, int direction, int *st)
{
	const struct sim_fft_plan *pl = plan;
	bool in_place = in == out, dbl = phos_fft_double(p->type);
	int sign = phos_fft_real_in(p->type) ? -1 : phos_fft_real_out(p->type) ? 1 : direction;
	struct phos_fft_side is, os;
	uint64_t ib, ob;
	double complex *a;
	int64_t elems = elems_of(p);

	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!pl || pl->magic != SIM_FFT_MAGIC)
		return ok(st, PHOS_FFT_INVALID_PLAN);
	if (sign != PHOS_FFT_FORWARD && sign != PHOS_FFT_INVERSE)
		return ok(st, PHOS_FFT_INVALID_VALUE);
	if (!phos_fft_side_of(p, false, in_place, &is, &ib) || !phos_fft_side_of(p, true, in_place, &os, &ob))
		return ok(st, PHOS_FFT_INVALID_VALUE);
	if (!phos_sim_range_ok(dev, in, ib) || !phos_sim_range_ok(dev, out, ob))
		return ok(st, PHOS_FFT_EXEC_FAILED);
	a = malloc((size_t)elems * sizeof(*a));
	if (!a)
		return ok(st, PHOS_FFT_ALLOC_FAILED);
	for (int64_t b = 0; b < p->batch; b++) {
		for (int64_t i = 0; i < elems; i++)
			a[i] = 0;
		move((uint8_t *)(uintptr_t)in, &is, p->n, dbl, b, a, false);
		if (transform(a, p, sign) < 0) {
			free(a);
			return ok(st, PHOS_FFT_ALLOC_FAILED);
		}
		move((uint8_t *)(uintptr_t)out, &os, p->n, dbl, b, a, true);
	}
	free(a);
	return ok(st, PHOS_FFT_SUCCESS);
}

const struct phos_fft_ops phos_fft_sim = {
	.version = sim_fft_version,
	.plan_make = sim_fft_plan_make,
	.plan_size = sim_fft_plan_size,
	.plan_destroy = sim_fft_plan_destroy,
	.exec = sim_fft_exec,
};
