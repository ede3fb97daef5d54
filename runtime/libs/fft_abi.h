/* SPDX-License-Identifier: MIT */
/*
 * cuFFT 12's binary interface as phos-fn sees it (the values of CUDA 13's
 * cufft.h), so that the executor and its backends need no cuFFT header:
 *
 *   cufftResult      int: 0 success, 1 invalid plan, ... 16 not supported
 *   cufftHandle      int: a plan, the preload's id (preload/mathlibs/cufft.c)
 *   cufftType        int: C2C 0x29, R2C 0x2a, C2R 0x2c and their double
 *                    forms Z2Z 0x69, D2Z 0x6a, Z2D 0x6c: bit 0x40 says
 *                    double, the low nibble which side is real
 *   direction        CUFFT_FORWARD -1 (e^-2πi jk/n), CUFFT_INVERSE +1; both
 *                    unnormalized
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* cufftResult values phos answers itself */
enum {
	PHOS_FFT_SUCCESS = 0,
	PHOS_FFT_INVALID_PLAN = 1,
	PHOS_FFT_ALLOC_FAILED = 2,
	PHOS_FFT_INVALID_TYPE = 3,
	PHOS_FFT_INVALID_VALUE = 4,
	PHOS_FFT_INTERNAL_ERROR = 5,
	PHOS_FFT_EXEC_FAILED = 6,
	PHOS_FFT_SETUP_FAILED = 7,
	PHOS_FFT_INVALID_SIZE = 8,
	PHOS_FFT_INVALID_DEVICE = 11,
	PHOS_FFT_NOT_SUPPORTED = 16,
};

/* cufftType */
enum {
	PHOS_FFT_C2C = 0x29,
	PHOS_FFT_R2C = 0x2a,
	PHOS_FFT_C2R = 0x2c,
	PHOS_FFT_Z2Z = 0x69,
	PHOS_FFT_D2Z = 0x6a,
	PHOS_FFT_Z2D = 0x6c,
};

#define PHOS_FFT_FORWARD (-1)
#define PHOS_FFT_INVERSE 1
#define PHOS_FFT_RANK_MAX 3   /* cufftPlanMany takes ranks 1 to 3 */

static inline bool phos_fft_type_ok(int type)
{
	switch (type) {
	case PHOS_FFT_C2C: case PHOS_FFT_R2C: case PHOS_FFT_C2R:
	case PHOS_FFT_Z2Z: case PHOS_FFT_D2Z: case PHOS_FFT_Z2D:
		return true;
	default:
		return false;
	}
}

static inline bool phos_fft_double(int type)
{
	return (type & 0x40) != 0;
}

/* Real input (R2C, D2Z), real output (C2R, Z2D). */
static inline bool phos_fft_real_in(int type)
{
	return (type & 0xf) == 0xa;
}

static inline bool phos_fft_real_out(int type)
{
	return (type & 0xf) == 0xc;
}
