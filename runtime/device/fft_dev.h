/* SPDX-License-Identifier: MIT */
/*
 * cuFFT behind the executor: the device interface's two backends.
 *
 *             ctxpool/calls/exec_fft.c  (plans by id, read/write sets)
 *                   │ struct phos_fft_ops
 *        ┌──────────┴──────────────────────┐
 *   device_cuda_fft.c                  device_sim_fft.c
 *   the real libcufft.so.12, dlopen'ed a reference DFT on the host, in
 *   at the first call (PHOS_CUFFT_LIB, double: radix 2 for powers of two,
 *   the loader path, pip's nvidia/     the direct sum otherwise, dimension
 *   cu13/lib, the toolkit); its plans  by dimension
 *   with cuFFT's own work area
 *
 * A plan is an opaque pointer of the backend, made from a checked
 * phos_fft_plan (phos_fft_side_of holds for both its sides). Every call
 * returns 0 or a negated cudaError_t, and puts the cufftResult in *st.
 */
#pragma once

#include <stdint.h>

#include "fft_abi.h"
#include "proto.h"

struct phos_device;

struct phos_fft_ops {
	int (*version)(struct phos_device *dev, struct phos_reply_fft_version *ret, int *st);
	/* A plan, and the bytes of the work area it uses (its own). */
	int (*plan_make)(struct phos_device *dev, const struct phos_fft_plan *p, void **ret, uint64_t *ret_work,
			 int *st);
	/* The work area a plan of p would take; nothing kept. */
	int (*plan_size)(struct phos_device *dev, const struct phos_fft_plan *p, uint64_t *ret_work, int *st);
	void (*plan_destroy)(struct phos_device *dev, void *plan);
	/* Runs the plan (made from p) on stream, in and out device addresses
	 * whose sides the executor checked lie in device memory. */
	int (*exec)(struct phos_device *dev, void *plan, const struct phos_fft_plan *p, void *stream, uint64_t in,
		    uint64_t out, int direction, int *st);
};

extern const struct phos_fft_ops phos_fft_sim;
extern const struct phos_fft_ops phos_fft_cuda;
