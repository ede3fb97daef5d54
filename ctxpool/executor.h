/* SPDX-License-Identifier: MIT */
/*
 * phos-executor: owns one device context and serves one function process at a
 * time over the channel.
 *
 *   channel ring ──▶ exec_dispatch() ──┬─ exec_memory.c   malloc/free/copies/memset, host regions
 *   (in order)        one thread,      ├─ exec_stream.c   streams, events
 *                     records run in   ├─ exec_module.c   fatbins, kernels, variables, launches
 *                     ring order; the  ├─ exec_blas.c     cuBLAS
 *                     device keeps     └─ spec.c          read/write sets of every launch and
 *                     per-stream order                    library call, and the trace
 *
 * Errors: a handler returns 0 or a negated cudaError_t. For a synchronous record
 * it becomes the reply status; for an asynchronous one it is kept as the
 * pending error and reported by the next synchronous reply (CUDA's semantics
 * for errors of asynchronous work).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bufmap.h"
#include "channel.h"
#include "device.h"
#include "kparam.h"

/* Returns a handler's error (a negated cudaError_t) to its caller without
 * logging: user errors are reported to the user, not to the executor's log. */
#define TRY(expr)                          \
	do {                               \
		int try_r_ = (expr);       \
		if (try_r_ < 0)            \
			return try_r_;     \
	} while (0)

/* Body of a record, checked to be at least the struct's size. */
#define BODY(type, name)                             \
	const type *name = body;                     \
	if (len < sizeof(type))                      \
		return -PHOS_CUDA_INVALID_VALUE

/* An id → object table for the handles the preload chooses (small integers). */
#define EXEC_MAX_HANDLES (1u << 20)
struct handle_table {
	void **slot;
	uint32_t cap;
};
int handle_put(struct handle_table *t, uint32_t id, void *obj);
void *handle_get(const struct handle_table *t, uint32_t id);
void *handle_take(struct handle_table *t, uint32_t id);
/* Frees the table itself (its objects must be gone: exec_scrub). */
void handle_table_exit(struct handle_table *t);

struct exec_module {
	void *dev_module;           /* NULL when the fatbin was refused */
	struct phos_fatbin *fatbin;
	int error;                  /* negated cudaError_t when refused */
};

struct exec_func {
	uint32_t module;
	char *name;
	void *dev_func;
	struct phos_kernel_info info;
	int error;                  /* why it cannot launch, or 0 */
};

struct exec_var {
	uint32_t module;
	uint64_t addr, size;
	int error;
};

struct exec_region {
	void *ptr;
	uint64_t size;
};

struct exec_blas {
	void *dev_handle;
	uint32_t stream;
};

struct executor {
	const struct phos_device_ops *dev_ops;
	struct phos_device *dev;
	struct phos_bufmap *bufs;
	struct phos_channel *ch;
	uint64_t arena_base, arena_size;

	struct handle_table streams, events, modules, funcs, vars, regions, blas;

	int pending_error;          /* first error of asynchronous work, negated */
	bool goodbye;               /* the function said it is exiting */
	uint64_t seq;               /* record being executed */
	bool sync;                  /* ... and whether its sender waits for the reply */
	FILE *trace;                /* read/write sets, one JSON line per call; NULL: off */
	uint64_t calls;             /* records executed */
};

/* Runs records until the function says goodbye or goes away. Returns 0 or -errno. */
int exec_serve(struct executor *ex);

/* Handlers: each takes the record body (len bytes after the header), may write
 * reply data into out (up to PHOS_REPLY_MAX) and set *out_len. */

int exec_memory_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_stream_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_module_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_blas_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *blas_status);

/* The device stream for a preload stream id (NULL for the default stream);
 * -PHOS_CUDA_INVALID_RESOURCE_HANDLE for an unknown id. */
int exec_stream(struct executor *ex, uint32_t id, void **ret_stream);

/* Destructors of the executor's objects; all accept NULL. */
void exec_module_free(struct executor *ex, struct exec_module *m);
void exec_func_free(struct exec_func *f);
void exec_blas_free(struct executor *ex, struct exec_blas *b);

/* Unpins and unmaps a shared host region; accepts NULL. */
void exec_region_free(struct executor *ex, struct exec_region *reg);

/* Frees everything the function created (streams, events, handles, modules,
 * buffers, host regions): the executor is clean for the next function. */
void exec_scrub(struct executor *ex);

/* --- speculation (spec.c) --- */

enum spec_access { SPEC_READ = 1, SPEC_WRITE = 2 };

/* Read/write set of one call, built by the handlers and written to the trace. */
#define SPEC_MAX_RANGES 256
struct spec_set {
	uint32_t n;
	bool overflow;
	struct spec_range { uint64_t addr, len; uint8_t access; } r[SPEC_MAX_RANGES];
};

/* Adds [addr, addr+len) with the given access, merging duplicates. */
void spec_add(struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access);

/* Checks that [addr, addr+len) lies inside one live buffer and adds it to the set;
 * -PHOS_CUDA_INVALID_VALUE if not. len 0 is accepted and adds nothing. */
int spec_range(struct executor *ex, struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access);

/* Builds the set of a launch from its parameters (DESIGN.md rules). A declared
 * pointer that points into the arena but at no live buffer (freed, never
 * allocated) gives -PHOS_CUDA_ILLEGAL_ADDRESS and the launch is refused. */
int spec_launch(struct executor *ex, const struct phos_kernel_info *ki, const uint8_t *params,
		uint32_t param_bytes, struct spec_set *s);

/* Writes one trace line for the current record, when tracing is on. */
void spec_trace(struct executor *ex, const char *what, const char *name, uint32_t stream,
		const struct spec_set *s);
