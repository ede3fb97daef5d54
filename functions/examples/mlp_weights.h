/* SPDX-License-Identifier: MIT */
/*
 * The mlp example's weights, as a function of (seed, tensor, index).
 *
 * One definition serves the init_weights kernel (mlp.cu, on the GPU), the CPU
 * reference (mlp.cu, on the host: it regenerates any weight instead of holding
 * them) and the sim twin (sim_twins.c, plain C), so all three must produce the
 * same bits:
 *
 *   h    = mix64(mix64(seed << 32 | tensor) + (i + 1) * golden)   integers only
 *   k    = (h >> 40) - 2^23                                        in [-2^23, 2^23)
 *   w[i] = (float)k * (scale * 2^-23)                              one rounding
 *
 * (float)k is exact (|k| <= 2^23) and scale * 2^-23 is exact (a power-of-two
 * scaling), so the only rounding is the last multiply, done with __fmul_rn on
 * the device (never fused) and as a plain float multiply on the host (x86-64
 * SSE, no excess precision; nothing to contract into an fma).
 *
 * Tensors: layer l's weights are tensor 2l, its biases 2l+1; the classifier
 * head and the request input have fixed ids.
 */
#ifndef PHOS_MLP_WEIGHTS_H
#define PHOS_MLP_WEIGHTS_H

#include <stdint.h>

#ifdef __CUDACC__
#define MLPW_HD __host__ __device__
#else
#define MLPW_HD
#endif

#define MLPW_TENSOR_HEAD 0xfffffffdu
#define MLPW_TENSOR_HEAD_BIAS 0xfffffffeu
#define MLPW_TENSOR_INPUT 0xffffffffu

static inline MLPW_HD uint32_t mlpw_tensor_weight(uint32_t layer)
{
	return 2 * layer;
}

static inline MLPW_HD uint32_t mlpw_tensor_bias(uint32_t layer)
{
	return 2 * layer + 1;
}

/* splitmix64's finaliser: a bijection on 64-bit words. */
static inline MLPW_HD uint64_t mlpw_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* The stream of one tensor; hoisted out of per-element loops. */
static inline MLPW_HD uint64_t mlpw_stream(uint32_t seed, uint32_t tensor)
{
	return mlpw_mix64(((uint64_t)seed << 32) | tensor);
}

/* scale * 2^-23: exact for any normal scale >= 2^-100. */
static inline MLPW_HD float mlpw_unit(float scale)
{
	return scale * 0x1p-23f;
}

/* Element i of a stream, uniform in [-scale, scale) with unit = mlpw_unit(scale). */
static inline MLPW_HD float mlpw_at(uint64_t stream, uint64_t i, float unit)
{
	uint64_t h = mlpw_mix64(stream + (i + 1) * 0x9e3779b97f4a7c15ULL);
	int32_t k = (int32_t)(h >> 40) - (1 << 23);

#ifdef __CUDA_ARCH__
	return __fmul_rn((float)k, unit);
#else
	return (float)k * unit;
#endif
}

static inline MLPW_HD float mlpw_value(uint32_t seed, uint32_t tensor, uint64_t i, float scale)
{
	return mlpw_at(mlpw_stream(seed, tensor), i, mlpw_unit(scale));
}

#ifdef __CUDACC__
/* w[i] = element i of (seed, tensor)'s stream, for i < count: the weights of
 * mlp, train and tp_mlp (one sim twin serves them all: _Z12init_weightsPfmjjf). */
__global__ void init_weights(float *w, size_t count, uint32_t seed, uint32_t tensor, float scale)
{
	uint64_t stream = mlpw_stream(seed, tensor);
	float unit = mlpw_unit(scale);

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		w[i] = mlpw_at(stream, i, unit);
}
#endif

#endif /* PHOS_MLP_WEIGHTS_H */
