/* SPDX-License-Identifier: MIT */
/* Element-wise reductions of the sim device's NCCL (nccl_sim_reduce.h). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "nccl_abi.h"
#include "nccl_sim_reduce.h"


static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0)
		return (sign ? -1.0f : 1.0f) * ldexpf((float)man, -24);
	if (exp == 31)
		bits = sign | 0x7f800000u | (man << 13);
	else
		bits = sign | ((exp + 112) << 23) | (man << 13);
	memcpy(&f, &bits, 4);
	return f;
}

static uint16_t float_to_half(float f)
{
	uint32_t x;
	uint16_t sign;
	int exp;
	uint32_t man;

	memcpy(&x, &f, 4);
	sign = (uint16_t)((x >> 16) & 0x8000);
	if (isnan(f))
		return sign | 0x7e00;
	f = fabsf(f);
	if (f >= 65520.0f)
		return sign | 0x7c00;
	if (f < 6.103515625e-05f)   /* subnormal: multiples of 2^-24, nearest even */
		return sign | (uint16_t)nearbyintf(f * 16777216.0f);
	memcpy(&x, &f, 4);
	exp = (int)(x >> 23) - 112;
	man = x & 0x7fffff;
	{
		uint32_t v = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;

		if (rest > 0x1000 || (rest == 0x1000 && (v & 1)))
			v++;
		return sign | (uint16_t)v;
	}
}

static float bf16_to_float(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if (isnan(f))
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

#define COMBINE(a, b, op) ((op) == PHOS_NCCL_PROD ? (a) * (b) : (op) == PHOS_NCCL_MAX ? ((a) > (b) ? (a) : (b)) \
			   : (op) == PHOS_NCCL_MIN ? ((a) < (b) ? (a) : (b)) : (a) + (b))

/* Sums and products of signed integers wrap as the GPU's do: computed in
 * the unsigned type U (signed overflow is undefined in C). */
#define REDUCE_INT(T, U)                                                    \
	do {                                                                \
		T *d = dst;                                                 \
		const T *s = src;                                           \
		for (size_t i = 0; i < n; i++)                              \
			d[i] = op == PHOS_NCCL_MAX || op == PHOS_NCCL_MIN   \
				       ? (T)COMBINE(d[i], s[i], op)         \
				       : (T)(U)COMBINE((U)d[i], (U)s[i], op); \
	} while (0)
#define REDUCE_FLOAT(T)                                                     \
	do {                                                                \
		T *d = dst;                                                 \
		const T *s = src;                                           \
		for (size_t i = 0; i < n; i++)                              \
			d[i] = COMBINE(d[i], s[i], op);                     \
	} while (0)
#define FINISH_INT(T)                                                       \
	do {                                                                \
		T *d = dst;                                                 \
		for (size_t i = 0; i < n; i++)                              \
			d[i] = (T)(d[i] / (T)nranks);                       \
	} while (0)

/* dst[i] = dst[i] op src[i] (avg sums). */
void phos_nccl_reduce_into(int type, int op, void *dst, const void *src, size_t n)
{
	switch (type) {
	case PHOS_NCCL_INT8: REDUCE_INT(int8_t, uint8_t); break;
	case PHOS_NCCL_UINT8: REDUCE_INT(uint8_t, uint32_t); break;
	case PHOS_NCCL_INT32: REDUCE_INT(int32_t, uint32_t); break;
	case PHOS_NCCL_UINT32: REDUCE_INT(uint32_t, uint32_t); break;
	case PHOS_NCCL_INT64: REDUCE_INT(int64_t, uint64_t); break;
	case PHOS_NCCL_UINT64: REDUCE_INT(uint64_t, uint64_t); break;
	case PHOS_NCCL_FLOAT32: REDUCE_FLOAT(float); break;
	case PHOS_NCCL_FLOAT64: REDUCE_FLOAT(double); break;
	case PHOS_NCCL_FLOAT16:
	case PHOS_NCCL_BFLOAT16: {
		uint16_t *d = dst;
		const uint16_t *s = src;
		bool h = type == PHOS_NCCL_FLOAT16;

		for (size_t i = 0; i < n; i++) {
			float a = h ? half_to_float(d[i]) : bf16_to_float(d[i]);
			float b = h ? half_to_float(s[i]) : bf16_to_float(s[i]);
			float v = COMBINE(a, b, op);

			d[i] = h ? float_to_half(v) : float_to_bf16(v);
		}
		break;
	}
	default:
		break;
	}
}

/* Avg: the sum divided by the number of ranks. */
void phos_nccl_reduce_finish(int type, int op, void *dst, size_t n, int nranks)
{
	if (op != PHOS_NCCL_AVG)
		return;
	switch (type) {
	case PHOS_NCCL_INT8: FINISH_INT(int8_t); break;
	case PHOS_NCCL_UINT8: FINISH_INT(uint8_t); break;
	case PHOS_NCCL_INT32: FINISH_INT(int32_t); break;
	case PHOS_NCCL_UINT32: FINISH_INT(uint32_t); break;
	case PHOS_NCCL_INT64: FINISH_INT(int64_t); break;
	case PHOS_NCCL_UINT64: FINISH_INT(uint64_t); break;
	case PHOS_NCCL_FLOAT32: FINISH_INT(float); break;
	case PHOS_NCCL_FLOAT64: FINISH_INT(double); break;
	case PHOS_NCCL_FLOAT16:
	case PHOS_NCCL_BFLOAT16: {
		uint16_t *d = dst;
		bool h = type == PHOS_NCCL_FLOAT16;

		for (size_t i = 0; i < n; i++) {
			float v = (h ? half_to_float(d[i]) : bf16_to_float(d[i])) / (float)nranks;

			d[i] = h ? float_to_half(v) : float_to_bf16(v);
		}
		break;
	}
	default:
		break;
	}
}

