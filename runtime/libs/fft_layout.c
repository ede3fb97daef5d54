/* SPDX-License-Identifier: MIT */
/*
 * Where a cuFFT plan's data lies (proto.h, phos_fft_side_of): what the
 * executor's read/write sets of an execution are made of, and how the sim
 * device walks the data. cuFFT's rules (its "Data Layout" and "Advanced
 * Data Layout"):
 *
 *   logical dims     n[0..rank); a complex side of a real transform (R2C's
 *                    output, C2R's input) n/2 + 1 on the last dimension
 *   basic layout     packed; a real side of an in-place transform has rows
 *                    of 2 (n/2 + 1) elements, the complex side's bytes
 *   advanced layout  stride on the last dimension, stride x embed[k+1] x ...
 *                    on dimension k, transforms dist apart
 */
#include "proto.h"

static bool mul(int64_t a, int64_t b, int64_t *ret)
{
	return !__builtin_mul_overflow(a, b, ret) && *ret <= PHOS_FFT_ELEMS_MAX;
}

/* Strides of a packed side of physical dims phys: its dist in *ret_dist. */
static bool packed(struct phos_fft_side *s, const int64_t *phys, int64_t *ret_dist)
{
	int64_t st = 1;

	for (int k = s->rank - 1; k >= 0; k--) {
		s->stride[k] = st;
		if (!mul(st, phys[k], &st))
			return false;
	}
	*ret_dist = st;
	return true;
}

/* Strides of an advanced side: stride on the last dimension, then the embeds. */
static bool embedded(struct phos_fft_side *s, const int64_t *embed, int64_t stride)
{
	int64_t st = stride;

	if (stride < 1 || stride > PHOS_FFT_ELEMS_MAX)
		return false;
	for (int k = s->rank - 1; k >= 0; k--) {
		s->stride[k] = st;
		if (k > 0 && (embed[k] < 1 || !mul(st, embed[k], &st)))
			return false;
	}
	return true;
}

bool phos_fft_side_of(const struct phos_fft_plan *p, bool output, bool in_place, struct phos_fft_side *ret,
		      uint64_t *ret_bytes)
{
	bool real = output ? phos_fft_real_out(p->type) : phos_fft_real_in(p->type);
	bool real_xform = phos_fft_real_in(p->type) || phos_fft_real_out(p->type);
	struct phos_fft_side s = { .rank = p->rank, .is_complex = !real, .batch = p->batch };
	int64_t phys[PHOS_FFT_RANK_MAX], elems = 1, last = 0, e;

	if (!phos_fft_type_ok(p->type) || p->rank < 1 || p->rank > PHOS_FFT_RANK_MAX || p->batch < 1 ||
	    p->batch > PHOS_FFT_ELEMS_MAX)
		return false;
	s.esize = (phos_fft_double(p->type) ? 8u : 4u) * (real ? 1u : 2u);
	for (int k = 0; k < p->rank; k++) {
		if (p->n[k] < 1 || !mul(elems, p->n[k], &elems))
			return false;
		s.dims[k] = p->n[k];
		phys[k] = p->n[k];
	}
	if (real_xform) {
		int64_t half = p->n[p->rank - 1] / 2 + 1;

		if (!real)
			s.dims[p->rank - 1] = half;
		phys[p->rank - 1] = real && !in_place ? p->n[p->rank - 1] : real ? 2 * half : half;
	}
	if (!p->advanced) {
		if (!packed(&s, phys, &s.dist))
			return false;
	} else {
		if (!embedded(&s, output ? p->onembed : p->inembed, output ? p->ostride : p->istride))
			return false;
		s.dist = output ? p->odist : p->idist;
		if (s.dist < 0 || s.dist > PHOS_FFT_ELEMS_MAX)
			return false;
	}
	/* the last element's offset: (batch - 1) dist + sum (dims[k] - 1) stride[k] */
	if (__builtin_mul_overflow(s.batch - 1, s.dist, &last))
		return false;
	for (int k = 0; k < s.rank; k++)
		if (__builtin_mul_overflow(s.dims[k] - 1, s.stride[k], &e) || __builtin_add_overflow(last, e, &last))
			return false;
	if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow((uint64_t)last, s.esize, ret_bytes))
		return false;
	*ret = s;
	return true;
}
