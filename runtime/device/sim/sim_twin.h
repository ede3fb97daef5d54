/* SPDX-License-Identifier: MIT */
/*
 * Host twins of device kernels for the sim backend.
 *
 * The sim device runs an opaque kernel by calling a host function registered
 * under the kernel's mangled name. Twins live in plugins (shared libraries named
 * in PHOS_SIM_TWINS, colon-separated) that export
 *
 *     const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count);
 *
 * A twin receives the launch geometry and the packed parameter buffer, and
 * loops over blocks and threads itself. Device pointers in sim are executor
 * addresses (the arena is mapped at the same addresses), so a twin dereferences
 * them directly. A kernel without a twin fails to launch with
 * cudaErrorNotSupported (sim only).
 */
#pragma once

#include <stdint.h>
#include <string.h>

#include "kparam.h"

struct phos_sim_launch {
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared;
	const void *params;                 /* packed, laid out as ki says */
	const struct phos_kernel_info *ki;
};

typedef void (*phos_sim_kernel_fn)(const struct phos_sim_launch *l);

struct phos_sim_twin {
	const char *name;                   /* mangled kernel name */
	phos_sim_kernel_fn fn;
};

typedef const struct phos_sim_twin *(*phos_sim_twins_fn)(unsigned *ret_count);

/* Reads parameter i of type T from a launch (memcpy: the buffer may be unaligned). */
#define PHOS_SIM_ARG(l, i, T)                                                                \
	({                                                                                   \
		T phos_arg_v_;                                                               \
		memcpy(&phos_arg_v_, (const char *)(l)->params + (l)->ki->params[i].offset,  \
		       sizeof(T));                                                           \
		phos_arg_v_;                                                                 \
	})

/* Conditional nodes of CUDA graphs (cudaGraphSetConditional in device code):
 * a plugin that exports
 *
 *     void phos_sim_cond_bind(phos_sim_cond_set_fn set);
 *
 * is given, at load, the function its twins call where the kernel calls
 * cudaGraphSetConditional(handle, value). It sets the condition of the graph
 * launch that runs the twin; outside one, or with a handle of no conditional
 * node of that graph, the launch fails (cudaErrorLaunchFailure), as a GPU
 * would misbehave. */
typedef void (*phos_sim_cond_set_fn)(uint64_t handle, unsigned value);
typedef void (*phos_sim_cond_bind_fn)(phos_sim_cond_set_fn set);
#define PHOS_SIM_COND_BIND "phos_sim_cond_bind"
