/* SPDX-License-Identifier: MIT */
/*
 * Element-wise reductions of the sim device's NCCL (nccl_sim.c), for every
 * ncclDataType_t but the 8-bit floats: integers wrap as the GPU's do, fp16
 * and bf16 are computed in float and rounded to nearest even after each step.
 */
#pragma once

#include <stddef.h>

/* dst[i] = dst[i] op src[i] for n elements of type (ncclAvg sums). */
void phos_nccl_reduce_into(int type, int op, void *dst, const void *src, size_t n);
/* ncclAvg: dst[i] /= nranks; any other op: nothing. */
void phos_nccl_reduce_finish(int type, int op, void *dst, size_t n, int nranks);
