/* SPDX-License-Identifier: MIT */
/*
 * cuFFT on the sim device (runtime/device/sim/device_sim_fft.c) and the layout behind
 * the executor's read/write sets (runtime/libs/fft_layout.c, phos_fft_side_of):
 *
 * - spans of a few plans worked out by hand from cuFFT's layout rules, and
 *   plans phos_fft_side_of must refuse;
 * - random plans (ranks 1-3, sizes 1-9, every type, batches, the basic
 *   layout in and out of place, the advanced one with strides, embeds and
 *   dists): each side's span equals the one this test computes from its
 *   own element offsets; every output element equals a direct
 *   multidimensional DFT computed here (C2R of a true half spectrum: n x
 *   the real data), and nothing in the output buffer but the output's
 *   elements changed: the sim writes inside the set the executor declares.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "fft_dev.h"

#define BASE 0x520000000000ull   /* clear of ASan's allocator */
#define SIZE (1ull << 30)
#define MAPPED (16ull << 20)
#define IN BASE
#define OUT (BASE + (8ull << 20))

static const struct phos_device_ops *ops = &phos_device_sim;
static const struct phos_fft_ops *fft = &phos_fft_sim;
static struct phos_device *dev;
#include "check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int64_t pick(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
}

static double drand(void)
{
	return (double)(rng() % 20001) / 10000.0 - 1.0;
}

static uint64_t span(const struct phos_fft_plan *p, bool output, bool in_place)
{
	struct phos_fft_side s;
	uint64_t bytes = 0;

	return phos_fft_side_of(p, output, in_place, &s, &bytes) ? bytes : 0;
}

static void test_spans(void)
{
	struct phos_fft_plan p = { .type = PHOS_FFT_R2C, .rank = 2, .batch = 3, .n = { 6, 10 } };
	struct phos_fft_side s;
	uint64_t b;

	/* R2C 6 x 10, batch 3, basic: 180 reals; 3 x 6 x 6 complex; in place rows of 12 reals */
	CHECK(span(&p, false, false) == 180 * 4, "R2C in %llu", (unsigned long long)span(&p, false, false));
	CHECK(span(&p, true, false) == 108 * 8, "R2C out %llu", (unsigned long long)span(&p, true, false));
	CHECK(span(&p, false, true) == (2 * 72 + 5 * 12 + 9 + 1) * 4, "R2C in place in %llu",
	      (unsigned long long)span(&p, false, true));
	CHECK(span(&p, true, true) == 108 * 8, "R2C in place out");
	/* Z2D: the complex side is the input */
	p.type = PHOS_FFT_Z2D;
	CHECK(span(&p, false, false) == 108 * 16 && span(&p, true, false) == 180 * 8, "Z2D spans");
	/* advanced C2C 3D: stride 2, embeds (-, 5, 7), dist 100, n 2 x 3 x 4, batch 2 */
	p = (struct phos_fft_plan){ .type = PHOS_FFT_C2C, .rank = 3, .batch = 2, .n = { 2, 3, 4 }, .advanced = 1,
				    .inembed = { 0, 5, 7 }, .istride = 2, .idist = 100,
				    .onembed = { 9, 3, 4 }, .ostride = 1, .odist = 24 };
	CHECK(span(&p, false, false) == (100 + (1 * 35 + 2 * 7 + 3) * 2 + 1) * 8, "advanced in %llu",
	      (unsigned long long)span(&p, false, false));
	CHECK(span(&p, true, false) == 48 * 8, "advanced out %llu", (unsigned long long)span(&p, true, false));
	CHECK(phos_fft_side_of(&p, false, false, &s, &b) && s.stride[0] == 70 && s.stride[1] == 14 &&
	      s.stride[2] == 2 && s.dist == 100 && s.is_complex && s.esize == 8, "advanced strides");
	/* refused */
	struct phos_fft_plan bad[] = {
		{ .type = 0x2b, .rank = 1, .batch = 1, .n = { 4 } },
		{ .type = PHOS_FFT_C2C, .rank = 0, .batch = 1, .n = { 4 } },
		{ .type = PHOS_FFT_C2C, .rank = 4, .batch = 1, .n = { 4, 4, 4 } },
		{ .type = PHOS_FFT_C2C, .rank = 1, .batch = 0, .n = { 4 } },
		{ .type = PHOS_FFT_C2C, .rank = 2, .batch = 1, .n = { 4, 0 } },
		{ .type = PHOS_FFT_C2C, .rank = 3, .batch = 1, .n = { 1ll << 20, 1ll << 20, 2 } },
		{ .type = PHOS_FFT_C2C, .rank = 1, .batch = 1, .n = { 4 }, .advanced = 1, .istride = 0, .ostride = 1 },
		{ .type = PHOS_FFT_C2C, .rank = 1, .batch = 2, .n = { 4 }, .advanced = 1, .istride = 1, .ostride = 1,
		  .idist = -1 },
		{ .type = PHOS_FFT_C2C, .rank = 2, .batch = 1, .n = { 4, 4 }, .advanced = 1, .istride = 1, .ostride = 1,
		  .inembed = { 4, 0 }, .onembed = { 4, 4 } },
		{ .type = PHOS_FFT_C2C, .rank = 1, .batch = 1ll << 40, .n = { 1 }, .advanced = 1, .istride = 1,
		  .ostride = 1, .idist = 1ll << 40, .odist = 1 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(!phos_fft_side_of(&bad[i], false, false, &s, &b), "bad plan %zu accepted", i);
}

/* One side as this test lays it out: element offsets of transform b. */
struct side {
	int rank;
	int64_t dims[3], stride[3], dist;
	bool real;
	size_t esize;
};

static struct side side_of(const struct phos_fft_plan *p, bool output, bool in_place)
{
	bool real = output ? phos_fft_real_out(p->type) : phos_fft_real_in(p->type);
	bool real_xform = phos_fft_real_in(p->type) || phos_fft_real_out(p->type);
	struct side s = { .rank = p->rank, .real = real };
	const int64_t *embed = output ? p->onembed : p->inembed;
	int64_t phys[3], st = 1;

	s.esize = (phos_fft_double(p->type) ? 8 : 4) * (real ? 1 : 2);
	for (int k = 0; k < p->rank; k++)
		s.dims[k] = phys[k] = p->n[k];
	if (real_xform && !real)
		s.dims[p->rank - 1] = phys[p->rank - 1] = p->n[p->rank - 1] / 2 + 1;
	if (real_xform && real && in_place)
		phys[p->rank - 1] = 2 * (p->n[p->rank - 1] / 2 + 1);
	if (p->advanced) {
		st = output ? p->ostride : p->istride;
		for (int k = p->rank - 1; k >= 0; k--) {
			s.stride[k] = st;
			st *= embed[k];
		}
		s.dist = output ? p->odist : p->idist;
	} else {
		for (int k = p->rank - 1; k >= 0; k--) {
			s.stride[k] = st;
			st *= phys[k];
		}
		s.dist = st;
	}
	return s;
}

/* Element offset of logical index x (row-major over s->dims) of transform b. */
static int64_t offset_of(const struct side *s, int64_t b, int64_t x)
{
	int64_t off = b * s->dist;

	for (int k = s->rank - 1; k >= 0; k--) {
		off += x % s->dims[k] * s->stride[k];
		x /= s->dims[k];
	}
	return off;
}

static int64_t count(const struct side *s)
{
	int64_t c = 1;

	for (int k = 0; k < s->rank; k++)
		c *= s->dims[k];
	return c;
}

static void put(uint8_t *base, const struct side *s, bool dbl, int64_t off, double complex z)
{
	if (dbl) {
		double v[2] = { creal(z), cimag(z) };

		memcpy(base + off * s->esize, v, s->esize);
	} else {
		float v[2] = { (float)creal(z), (float)cimag(z) };

		memcpy(base + off * s->esize, v, s->esize);
	}
}

static double complex get(const uint8_t *base, const struct side *s, bool dbl, int64_t off)
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

/* The direct multidimensional DFT of x (dims n[0..rank), packed): every
 * output from every input at once, not dimension by dimension. */
static void dft(const double complex *x, double complex *y, const int64_t *n, int rank, int sign)
{
	int64_t total = 1;

	for (int k = 0; k < rank; k++)
		total *= n[k];
	for (int64_t o = 0; o < total; o++) {
		double complex sum = 0;

		for (int64_t i = 0; i < total; i++) {
			double phase = 0;
			int64_t a = o, b = i;

			for (int k = rank - 1; k >= 0; k--) {
				phase += (double)(a % n[k] * (b % n[k]) % n[k]) / (double)n[k];
				a /= n[k];
				b /= n[k];
			}
			sum += x[i] * cexp(sign * 2 * M_PI * I * phase);
		}
		y[o] = sum;
	}
}

static void random_plan(struct phos_fft_plan *p, bool *in_place)
{
	static const int types[] = { PHOS_FFT_C2C, PHOS_FFT_R2C, PHOS_FFT_C2R,
				     PHOS_FFT_Z2Z, PHOS_FFT_D2Z, PHOS_FFT_Z2D };

	memset(p, 0, sizeof(*p));
	p->type = types[rng() % 6];
	p->rank = (int)pick(1, 3);
	p->batch = pick(1, 3);
	for (int k = 0; k < p->rank; k++)
		p->n[k] = rng() % 3 == 0 ? (int64_t)1 << pick(0, 3) : pick(1, 9);
	p->advanced = rng() % 2;
	*in_place = !p->advanced && rng() % 3 == 0;
	if (!p->advanced)
		return;
	for (int output = 0; output < 2; output++) {
		struct side s;
		int64_t *embed = output ? p->onembed : p->inembed, stride = pick(1, 3), last = 0;

		p->advanced = 0;
		s = side_of(p, output, false);   /* (the logical dims) */
		p->advanced = 1;
		embed[0] = pick(0, 5);   /* (unused) */
		for (int k = 1; k < p->rank; k++)
			embed[k] = s.dims[k] + pick(0, 2);
		if (output) {
			p->ostride = stride;
		} else {
			p->istride = stride;
		}
		s = side_of(p, output, false);
		for (int k = 0; k < p->rank; k++)
			last += (s.dims[k] - 1) * s.stride[k];
		if (output)
			p->odist = last + 1 + pick(0, 4);
		else
			p->idist = last + 1 + pick(0, 4);
	}
}

/* Own span in bytes of a side: its last element's offset + 1. */
static uint64_t own_span(const struct side *s, int64_t batch)
{
	int64_t last = (batch - 1) * s->dist;

	for (int k = 0; k < s->rank; k++)
		last += (s->dims[k] - 1) * s->stride[k];
	return (uint64_t)(last + 1) * s->esize;
}

/* Index in the packed array of dims n of side index i (row-major over s->dims). */
static int64_t packed_of(const struct side *s, const int64_t *n, int64_t i)
{
	int64_t idx[3], r = 0;

	for (int k = s->rank - 1; k >= 0; k--) {
		idx[k] = i % s->dims[k];
		i /= s->dims[k];
	}
	for (int k = 0; k < s->rank; k++)
		r = r * n[k] + idx[k];
	return r;
}

/* One random plan run on the sim: false when a check failed. */
static bool one_random(void)
{
	uint8_t *in = (uint8_t *)(uintptr_t)IN, *out = (uint8_t *)(uintptr_t)OUT, *ob;
	struct phos_fft_plan p;
	bool in_place, dbl;
	struct side is, os;
	uint64_t ispan, ospan, work = 1;
	int64_t total = 1, ocount;
	int direction = rng() % 2 ? PHOS_FFT_FORWARD : PHOS_FFT_INVERSE, st = -1, before = failures;
	double complex *x, *full, *want;
	void *plan = NULL;
	double tol;

	random_plan(&p, &in_place);
	dbl = phos_fft_double(p.type);
	is = side_of(&p, false, in_place);
	os = side_of(&p, true, in_place);
	ob = in_place ? in : out;
	ispan = own_span(&is, p.batch);
	ospan = own_span(&os, p.batch);
	for (int k = 0; k < p.rank; k++)
		total *= p.n[k];
	ocount = count(&os);
	tol = (dbl ? 1e-11 : 2e-5) * (double)total;
	CHECK(span(&p, false, in_place) == ispan && span(&p, true, in_place) == ospan,
	      "type %#x rank %d n %lld %lld %lld batch %lld%s%s: spans %llu %llu, want %llu %llu", p.type, p.rank,
	      (long long)p.n[0], (long long)p.n[1], (long long)p.n[2], (long long)p.batch,
	      p.advanced ? " advanced" : "", in_place ? " in place" : "", (unsigned long long)span(&p, false, in_place),
	      (unsigned long long)span(&p, true, in_place), (unsigned long long)ispan, (unsigned long long)ospan);
	memset(in, 0xa5, (ispan > ospan ? ispan : ospan) + 4096);
	if (!in_place)
		memset(out, 0x5a, ospan + 4096);
	x = calloc((size_t)(total * p.batch), sizeof(*x));
	full = calloc((size_t)total, sizeof(*full));
	want = calloc((size_t)(ocount * p.batch), sizeof(*want));
	if (!x || !full || !want)
		exit(1);
	for (int64_t b = 0; b < p.batch; b++) {
		double complex *xb = x + b * total;

		for (int64_t i = 0; i < total; i++)
			xb[i] = phos_fft_real_in(p.type) || phos_fft_real_out(p.type) ? drand() : drand() + drand() * I;
		if (phos_fft_real_out(p.type)) {   /* the input: a true half spectrum; the answer n x */
			dft(xb, full, p.n, p.rank, -1);
			for (int64_t i = 0; i < count(&is); i++)
				put(in, &is, dbl, offset_of(&is, b, i), full[packed_of(&is, p.n, i)]);
			for (int64_t i = 0; i < ocount; i++)
				want[b * ocount + i] = (double)total * xb[i];
			continue;
		}
		for (int64_t i = 0; i < total; i++)
			put(in, &is, dbl, offset_of(&is, b, i), xb[i]);
		dft(xb, full, p.n, p.rank, phos_fft_real_in(p.type) ? -1 : direction);
		for (int64_t i = 0; i < ocount; i++)
			want[b * ocount + i] = full[packed_of(&os, p.n, i)];
	}
	/* (the inputs went through the device's precision: the reference's too) */
	for (int64_t b = 0; b < p.batch && !dbl && !phos_fft_real_out(p.type); b++) {
		for (int64_t i = 0; i < total; i++)
			x[b * total + i] = get(in, &is, dbl, offset_of(&is, b, i));
		dft(x + b * total, full, p.n, p.rank, phos_fft_real_in(p.type) ? -1 : direction);
		for (int64_t i = 0; i < ocount; i++)
			want[b * ocount + i] = full[packed_of(&os, p.n, i)];
	}
	CHECK(fft->plan_make(dev, &p, &plan, &work, &st) == 0 && st == 0 && plan && work == 0, "plan_make: st %d", st);
	if (plan) {
		CHECK(fft->exec(dev, plan, &p, NULL, IN, in_place ? IN : OUT, direction, &st) == 0 && st == 0,
		      "exec: st %d", st);
		fft->plan_destroy(dev, plan);
	}
	for (int64_t b = 0; b < p.batch; b++)
		for (int64_t i = 0; i < ocount && failures == before; i++) {
			double complex got = get(ob, &os, dbl, offset_of(&os, b, i));

			CHECK(cabs(got - want[b * ocount + i]) <= tol,
			      "type %#x rank %d n %lld %lld %lld batch %lld%s%s: element %lld of transform %lld: got "
			      "(%g, %g), want (%g, %g)", p.type, p.rank, (long long)p.n[0], (long long)p.n[1],
			      (long long)p.n[2], (long long)p.batch, p.advanced ? " advanced" : "",
			      in_place ? " in place" : "", (long long)i, (long long)b, creal(got), cimag(got),
			      creal(want[b * ocount + i]), cimag(want[b * ocount + i]));
		}
	/* nothing written but the output's elements: its gaps and what follows keep their bytes */
	if (!in_place) {
		uint8_t *mark = calloc(ospan + 4096, 1);

		if (!mark)
			exit(1);
		for (int64_t b = 0; b < p.batch; b++)
			for (int64_t i = 0; i < ocount; i++)
				memset(mark + offset_of(&os, b, i) * os.esize, 1, os.esize);
		for (uint64_t k = 0; k < ospan + 4096 && failures == before; k++)
			CHECK(mark[k] || out[k] == 0x5a, "type %#x%s: byte %llu of the output buffer written, outside "
			      "the output (span %llu)", p.type, p.advanced ? " advanced" : "", (unsigned long long)k,
			      (unsigned long long)ospan);
		free(mark);
	} else {
		uint64_t end = ispan > ospan ? ispan : ospan;

		for (uint64_t k = end; k < end + 4096 && failures == before; k++)
			CHECK(in[k] == 0xa5, "in place: byte %llu past the sides written", (unsigned long long)k);
	}
	free(x);
	free(full);
	free(want);
	return failures == before;
}

static void test_random(int rounds)
{
	int bad = 0;

	for (int round = 0; round < rounds && bad < 5; round++)
		bad += !one_random();
}

/* What the sim refuses: a plan over its scratch limit, memory it does not
 * have, an unknown stream, a C2C direction that is neither. */
static void test_refusals(void)
{
	struct phos_fft_plan big = { .type = PHOS_FFT_C2C, .rank = 3, .batch = 1, .n = { 1024, 1024, 1024 } };
	struct phos_fft_plan p = { .type = PHOS_FFT_C2C, .rank = 1, .batch = 1, .n = { 8 } };
	uint64_t work = 1;
	void *plan = NULL;
	int st = -1;

	CHECK(fft->plan_size(dev, &big, &work, &st) == 0 && st == PHOS_FFT_INVALID_SIZE, "big plan: st %d", st);
	CHECK(fft->plan_make(dev, &big, &plan, &work, &st) == 0 && st == PHOS_FFT_INVALID_SIZE && !plan,
	      "big plan made: st %d", st);
	CHECK(fft->plan_make(dev, &p, &plan, &work, &st) == 0 && st == 0 && plan, "plan: st %d", st);
	if (!plan)
		return;
	CHECK(fft->exec(dev, plan, &p, NULL, BASE + MAPPED - 32, OUT, PHOS_FFT_FORWARD, &st) == 0 &&
	      st == PHOS_FFT_EXEC_FAILED, "input past the mapped memory: st %d", st);
	CHECK(fft->exec(dev, plan, &p, (void *)&st, IN, OUT, PHOS_FFT_FORWARD, &st) ==
	      -PHOS_CUDA_INVALID_RESOURCE_HANDLE, "unknown stream");
	CHECK(fft->exec(dev, plan, &p, NULL, IN, OUT, 0, &st) == 0 && st == PHOS_FFT_INVALID_VALUE, "direction 0: %d",
	      st);
	fft->plan_destroy(dev, plan);
	fft->plan_destroy(dev, NULL);
}

int main(void)
{
	struct phos_reply_fft_version v;
	int st = -1;

	if (ops->open(0, BASE, SIZE, false, &dev) < 0 || ops->map(dev, BASE, MAPPED) < 0) {
		fprintf(stderr, "FAIL: open and map the sim device at %#llx\n", BASE);
		return 1;
	}
	CHECK(fft->version(dev, &v, &st) == 0 && st == 0 && v.version == 12000 && v.major == 12, "version %d",
	      v.version);
	test_spans();
	test_refusals();
	test_random(400);
	ops->close(dev);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
