/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER's dense API behind the executor: the device interface's two
 * backends.
 *
 *             ctxpool/calls/exec_solver.c  (read/write sets, checks)
 *                   │ struct phos_solver_ops
 *        ┌──────────┴──────────────────────┐
 *   device_cuda_solver.c               device_sim_solver.c
 *   the real libcusolver.so.12,        a plain reference on the host, in
 *   dlopen'ed at the first call; one   double: LU with partial pivoting,
 *   cusolverDn handle per device,      Cholesky, Householder QR (LAPACK's
 *   made at its first call (again in   reflectors and tau), cyclic Jacobi
 *   a new executor after a restore)    for the symmetric eigenproblem,
 *                                      one-sided Jacobi for the SVD
 *
 * Every call takes a phos_solver_call that phos_solver_ranges_of accepts
 * (the executor checked each range lies in device memory), returns 0 or a
 * negated cudaError_t, and puts the cusolverStatus_t in *st. The info a
 * call writes (LAPACK's: 0, or i > 0 for a zero pivot, a minor not
 * positive definite, an eigenproblem that did not converge) is written at
 * c->info on the device.
 */
#pragma once

#include <stdint.h>

#include "proto.h"
#include "solver_abi.h"

struct phos_device;

struct phos_solver_ops {
	int (*version)(struct phos_device *dev, struct phos_reply_solver_version *ret, int *st);
	/* The workspace c takes (its _bufferSize; none for getrs, potrs): ret->work
	 * elements (x64: bytes) on the device, ret->host bytes on the host (x64). */
	int (*buffer_size)(struct phos_device *dev, const struct phos_solver_call *c, struct phos_reply_solver_size *ret,
			   int *st);
	/* Runs c on stream with its workspace of c->lwork elements or bytes
	 * (buffer_size's for getrf) and, x64, a host workspace of its own of
	 * c->host_bytes (the call is waited for when there is one). */
	int (*exec)(struct phos_device *dev, const struct phos_solver_call *c, void *stream, int *st);
};

extern const struct phos_solver_ops phos_solver_sim;
extern const struct phos_solver_ops phos_solver_cuda;

/* The sim's workspace of every call that takes one: elements (x64: that
 * many of the type, in bytes) it asks for and never touches, so that the
 * sets hold a workspace on sim too; no host workspace. */
#define PHOS_SOLVER_SIM_LWORK 64
