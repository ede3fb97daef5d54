/* SPDX-License-Identifier: MIT */
/*
 * The device interface: the executor's only way to touch a device.
 *
 *              phos-executor
 *                   │ struct phos_device_ops
 *        ┌──────────┴───────────┐
 *   device_cuda.c            device_sim.c
 *   driver API + cuBLAS,     host memory at the same arena addresses,
 *   both dlopen'ed at open   copies/memsets for real, cuBLAS by a host
 *   (no link-time libcuda)   reference, kernels by host twins looked up
 *                            by mangled name (PHOS_SIM_TWINS=lib.so,...)
 *
 * Errors: every call returns 0 or a negated cudaError_t value (-cudaErrorInvalidValue,
 * -cudaErrorMemoryAllocation, -cudaErrorNotSupported, ...); the cuda backend
 * converts CUresult / cublasStatus_t at this boundary. cuBLAS ops put their
 * cublasStatus_t in *ret_blas_status as well.
 *
 * Streams, events, modules, functions and cuBLAS handles are opaque pointers of
 * the backend. A NULL stream is the legacy default stream.
 *
 * sim is a test device: it never stands in for a measurement.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kparam.h"
#include "proto.h"

/* cudaError_t values used across phos without including CUDA headers. */
enum {
	PHOS_CUDA_SUCCESS = 0,
	PHOS_CUDA_INVALID_VALUE = 1,
	PHOS_CUDA_MEMORY_ALLOCATION = 2,
	PHOS_CUDA_INITIALIZATION = 3,
	PHOS_CUDA_INVALID_CONFIGURATION = 9,
	PHOS_CUDA_INVALID_DEVICE_POINTER = 17,
	PHOS_CUDA_UNSUPPORTED_LIMIT = 215,
	PHOS_CUDA_INVALID_DEVICE = 101,
	PHOS_CUDA_NO_DEVICE = 100,
	PHOS_CUDA_INVALID_KERNEL_IMAGE = 200,
	PHOS_CUDA_INVALID_SOURCE = 300,
	PHOS_CUDA_SYMBOL_NOT_FOUND = 500,
	PHOS_CUDA_INVALID_RESOURCE_HANDLE = 400,
	PHOS_CUDA_NOT_READY = 600,
	PHOS_CUDA_ILLEGAL_ADDRESS = 700,
	PHOS_CUDA_LAUNCH_FAILURE = 719,
	PHOS_CUDA_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
	PHOS_CUDA_HOST_MEMORY_ALREADY_REGISTERED = 712,
	PHOS_CUDA_HOST_MEMORY_NOT_REGISTERED = 713,
	PHOS_CUDA_NOT_SUPPORTED = 801,
	PHOS_CUDA_DEVICES_UNAVAILABLE = 46,
	PHOS_CUDA_INVALID_DEVICE_FUNCTION = 98,
	PHOS_CUDA_UNKNOWN = 999,
};

struct phos_device;

/* A pitched copy for memcpy_2d: height rows of width bytes, row i at dst + i *
 * dpitch and src + i * spitch. A host side is given by dst_host or src_host
 * (executor memory; then its address field is unused) and follows the rules of
 * memcpy_h2d / memcpy_d2h: its bytes are read or written when the call returns. */
struct phos_copy_2d {
	uint64_t dst, src;
	void *dst_host;
	const void *src_host;
	uint64_t dpitch, spitch, width, height;
};

/* One side of array_copy: an array at a position (x in bytes), device memory
 * (addr, pitch, slice) or executor host memory (host, pitch, slice). */
struct phos_copy_side {
	void *array;
	uint64_t x, y, z;
	uint64_t addr;
	void *host;
	uint64_t pitch, slice;
};

/* A graph for graph_make: the nodes of proto.h's phos_graph_node, in the
 * same order, with what they name resolved. */
struct phos_dev_gnode {
	uint32_t kind, parent, body;     /* enum phos_gnode_kind; as proto.h's */
	const uint32_t *deps;            /* ndeps indices of earlier nodes of the same body */
	uint32_t ndeps;
	/* PHOS_GNODE_KERNEL */
	void *func;
	const struct phos_kernel_info *ki;
	uint32_t grid[3], block[3], shared;
	const uint8_t *params;
	uint32_t param_bytes;
	const uint32_t *cond_at;         /* ncond_at pairs (parameter offset, handle index) */
	uint32_t ncond_at;
	/* PHOS_GNODE_COPY: dst, src, len; PHOS_GNODE_SET: dst, pitch, width, height, value, elem;
	 * PHOS_GNODE_HOSTCOPY: dst (h2d) or src (device to host), len, host (pinned, the executor's) */
	uint64_t dst, src, len, pitch, width, height;
	uint32_t value, elem;
	void *host;
	bool h2d;
	/* PHOS_GNODE_EVENT_* */
	void *event;
	/* PHOS_GNODE_COND: handle index, enum phos_gcond_type, number of bodies */
	uint32_t cond, type, size;
};

struct phos_dev_gcond {
	uint32_t parent, body;           /* the graph it belongs to, as a node's */
	uint32_t deflt, flags;
};

struct phos_dev_graph {
	const struct phos_dev_gnode *nodes;
	uint32_t nnodes;
	const struct phos_dev_gcond *conds;
	uint32_t nconds;
};

struct phos_device_ops {
	const char *name;   /* "cuda" or "sim" */

	/* Opens device ordinal and reserves the arena [base, base+size) at exactly that
	 * address (fails rather than accept another). For cuda also creates the
	 * context and, when warm is set, pre-warms cuBLAS (handles + a first GEMM). */
	int (*open)(int ordinal, uint64_t arena_base, uint64_t arena_size, bool warm,
		    struct phos_device **ret_dev);
	void (*close)(struct phos_device *dev);   /* accepts NULL */

	/* What open's warm flag does (cuBLAS handles and a first GEMM), for a device
	 * opened without it: a restore runs it beside loading the snapshot. Safe to
	 * call from another thread while other calls are in flight, but not together
	 * with blas_create. sim: nothing to do. */
	int (*warm)(struct phos_device *dev);

	/* Several devices in one executor (a function over several GPUs): enter
	 * makes dev's context the calling thread's current one (for libraries
	 * that take the current device, NCCL); peer_add lets the device of peer
	 * reach dev's arena memory that dev maps from then on (NVLink or PCIe
	 * P2P), called before any map. -PHOS_CUDA_NOT_SUPPORTED when the two
	 * devices cannot reach each other. sim: nothing to do. */
	int (*enter)(struct phos_device *dev);
	int (*peer_add)(struct phos_device *dev, struct phos_device *peer);

	int (*device_count)(struct phos_device *dev, int *ret_count);
	int (*info)(struct phos_device *dev, struct phos_reply_device *ret_info);
	int (*mem_info)(struct phos_device *dev, uint64_t *ret_free, uint64_t *ret_total);
	int (*synchronize)(struct phos_device *dev);

	/* Physical memory behind [addr, addr+len) of the arena (2 MiB aligned). */
	int (*map)(struct phos_device *dev, uint64_t addr, uint64_t len);
	void (*unmap)(struct phos_device *dev, uint64_t addr, uint64_t len);

	/* Memory shared by the executors of one GPU (issue 42: the buffers of a
	 * snapshot that its instances only read). [addr, addr+len) is 2 MiB
	 * aligned; NULL where a backend cannot share.
	 *   share_out  the range, which one earlier map call mapped whole, moves
	 *              into memory that another process may map (the same
	 *              contents), mapped here read-only; *ret_fd names that
	 *              memory (the caller's to close)
	 *   share_in   maps fd's memory (share_out's, of exactly len bytes)
	 *              read-only at the range, which nothing maps; unmap drops it
	 *              as any other mapping
	 *   share_own  the shared mapping at the range becomes private memory
	 *              with the same contents, read/write (copy on write); the
	 *              caller drained the device first
	 * A write into a shared mapping faults (a clear failure of the instance,
	 * never a wrong answer elsewhere). */
	int (*share_out)(struct phos_device *dev, uint64_t addr, uint64_t len, int *ret_fd);
	int (*share_in)(struct phos_device *dev, uint64_t addr, uint64_t len, int fd);
	int (*share_own)(struct phos_device *dev, uint64_t addr, uint64_t len);

	/* Page-locks host memory (shared regions, the channel) for fast copies; sim: no-op. */
	int (*host_register)(struct phos_device *dev, void *ptr, size_t len);
	void (*host_unregister)(struct phos_device *dev, void *ptr);

	int (*stream_create)(struct phos_device *dev, uint32_t flags, int priority, void **ret_stream);
	int (*stream_destroy)(struct phos_device *dev, void *stream);
	int (*stream_sync)(struct phos_device *dev, void *stream);
	int (*stream_query)(struct phos_device *dev, void *stream);  /* 0 or -NOT_READY */
	int (*stream_wait_event)(struct phos_device *dev, void *stream, void *event);
	/* Runs fn(arg, status) on a thread of the device's own once the
	 * stream's earlier work is done, and holds the stream's later work
	 * until it returned (status: 0, or the negated cudaError_t of the
	 * stream's failure). NULL where the device has no such thread: the
	 * caller syncs the stream and calls fn itself. */
	int (*stream_host_func)(struct phos_device *dev, void *stream, void (*fn)(void *arg, int status), void *arg);
	/* Stream attributes (CUstreamAttrID; value is a PHOS_STREAM_ATTR_BYTES
	 * CUstreamAttrValue). Ids the device does not take: -INVALID_VALUE. */
	int (*stream_set_attr)(struct phos_device *dev, void *stream, int attr, const void *value);
	int (*stream_get_attr)(struct phos_device *dev, void *stream, int attr, void *ret_value);

	/* Context limits (CUlimit == cudaLimit): cuCtxSetLimit / cuCtxGetLimit.
	 * An id CUDA does not know: -PHOS_CUDA_INVALID_VALUE (cudaDeviceGetLimit
	 * of 0x40 on an H100); a known limit the device does not have:
	 * -PHOS_CUDA_UNSUPPORTED_LIMIT. */
	int (*limit_set)(struct phos_device *dev, int limit, uint64_t value);
	int (*limit_get)(struct phos_device *dev, int limit, uint64_t *ret_value);

	/* Readiness flags (the on-demand restore's gates): n zeroed 32-bit words in
	 * device memory at *ret_addr. flag_write sets one after the work queued
	 * before it on stream (that work's writes visible first); flag_wait makes
	 * the stream's later work wait until the word is >= value. Unlike an event,
	 * a flag may be waited for before anything was queued to set it. sim:
	 * host words; flag_wait blocks the caller, as sim work completes at
	 * submission. */
	int (*flags_alloc)(struct phos_device *dev, uint32_t n, uint64_t *ret_addr);
	void (*flags_free)(struct phos_device *dev, uint64_t addr);   /* accepts 0 */

	/* Device memory outside the arena for the executor's own use (a cow
	 * checkpoint's reserve): len bytes at *ret_addr, at any address, which
	 * memcpy_d2d and memcpy_d2h(_async) take like arena memory; never seen
	 * by the function. -PHOS_CUDA_MEMORY_ALLOCATION when there is no room. */
	int (*scratch_alloc)(struct phos_device *dev, uint64_t len, uint64_t *ret_addr);
	void (*scratch_free)(struct phos_device *dev, uint64_t addr);   /* accepts 0 */
	int (*flag_write)(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value);
	int (*flag_wait)(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value);

	int (*event_create)(struct phos_device *dev, uint32_t flags, void **ret_event);
	int (*event_destroy)(struct phos_device *dev, void *event);
	int (*event_record)(struct phos_device *dev, void *event, void *stream);
	int (*event_sync)(struct phos_device *dev, void *event);
	int (*event_query)(struct phos_device *dev, void *event);
	int (*event_elapsed)(struct phos_device *dev, void *start, void *end, float *ret_ms);

	/* Copies. host is an executor-side pointer; async copies from/to it are only
	 * issued asynchronously when it is registered (else they complete before return). */
	int (*memcpy_h2d)(struct phos_device *dev, uint64_t dst, const void *host, size_t len, void *stream);
	int (*memcpy_d2h)(struct phos_device *dev, void *host, uint64_t src, size_t len, void *stream);
	/* Copies between device memory and host memory that the caller keeps valid
	 * and unchanged until the stream has passed the copy (pinned shared regions):
	 * they never wait. sim runs them at once. */
	int (*memcpy_h2d_async)(struct phos_device *dev, uint64_t dst, const void *host, size_t len,
				void *stream);
	int (*memcpy_d2h_async)(struct phos_device *dev, void *host, uint64_t src, size_t len, void *stream);
	int (*memcpy_d2d)(struct phos_device *dev, uint64_t dst, uint64_t src, size_t len, void *stream);
	int (*memset)(struct phos_device *dev, uint64_t dst, uint8_t value, size_t len, void *stream);
	/* Pitched forms (cudaMemcpy2D/3D, cudaMemset2D/3D; a 3D one is a 2D one per
	 * slice). Device-to-device copies and sets are asynchronous on stream. */
	int (*memcpy_2d)(struct phos_device *dev, const struct phos_copy_2d *c, void *stream);
	int (*memset_2d)(struct phos_device *dev, uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width,
			 uint64_t height, void *stream);

	/* CUDA arrays, texture and surface objects (issue 12, ctxpool/calls/exec_array.c).
	 * array_create takes the format and extent of d (its id is the
	 * executor's); a format or flag the device does not take is
	 * -PHOS_CUDA_INVALID_VALUE or -PHOS_CUDA_NOT_SUPPORTED. */
	int (*array_create)(struct phos_device *dev, const struct phos_array_create *d, void **ret_array);
	int (*array_destroy)(struct phos_device *dev, void *array);
	/* depth slices of height rows of width bytes between two sides, at least
	 * one of them an array (struct phos_copy_side). A host side follows
	 * memcpy_2d's rule: its bytes are read or written when the call returns. */
	int (*array_copy)(struct phos_device *dev, const struct phos_copy_side *dst, const struct phos_copy_side *src,
			  uint64_t width, uint64_t height, uint64_t depth, void *stream);
	/* A texture (or, d->surface, surface) object on array (an array of
	 * array_create, for PHOS_RES_ARRAY) or device memory: its handle, the
	 * lowest free small integer of the context, as on a GPU. */
	int (*tex_create)(struct phos_device *dev, const struct phos_tex_create *d, void *array, uint64_t *ret_handle);
	int (*tex_destroy)(struct phos_device *dev, uint64_t handle, bool surface);

	/* Modules: image is a fatbin; the backend keeps its own copy if it needs one. */
	int (*module_load)(struct phos_device *dev, const void *image, size_t len, void **ret_module);
	int (*module_unload)(struct phos_device *dev, void *module);
	int (*module_function)(struct phos_device *dev, void *module, const char *name, void **ret_func);
	/* A __device__ variable: its device address and size. *ret_size is in/out: in, the
	 * size hint from __cudaRegisterVar (sim uses it to allocate the variable on the
	 * first call, as it reads no sizes from the ELF; 0 = only look up); out, the size. */
	int (*module_global)(struct phos_device *dev, void *module, const char *name, uint64_t *ret_addr,
			     uint64_t *ret_size);

	/* Fills the attribute fields of *info (max_threads ... cluster_policy). */
	int (*func_attrs)(struct phos_device *dev, void *func, struct phos_reply_func_info *info);
	int (*func_set_attr)(struct phos_device *dev, void *func, int attr, int value);
	int (*occupancy)(struct phos_device *dev, void *func, int block, size_t dyn_shared, int *ret_blocks);
	/* Clusters of `cluster` (all 0: the kernel's own) resident at once, or
	 * (potential) the largest cluster size, for that launch geometry. */
	int (*occupancy_cluster)(struct phos_device *dev, void *func, const uint32_t grid[3], const uint32_t block[3],
				 uint32_t shared, const uint32_t cluster[3], bool potential, int *ret);

	/* Launches func. params is the packed parameter buffer laid out as ki describes. */
	int (*launch)(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
		      const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
		      const void *params, uint32_t param_bytes);
	/* Launches func with attributes (flags: enum phos_launch_flags of proto.h;
	 * cluster: the cluster dimensions when PHOS_LAUNCH_CLUSTER is set). */
	int (*launch_ex)(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
			 const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
			 const void *params, uint32_t param_bytes, uint32_t flags, const uint32_t cluster[3]);

	/* CUDA graphs made on the device (proto.h, PHOS_OP_GRAPH_*): graph_make
	 * makes and instantiates the graph that d describes, every reference in
	 * it resolved and checked by the executor (ctxpool/calls/exec_graph.c), and
	 * writes the device's conditional handle over each parameter slot that
	 * d names; graph_launch runs it on stream; graph_destroy frees it
	 * (accepts NULL). */
	int (*graph_make)(struct phos_device *dev, const struct phos_dev_graph *d, void **ret_graph);
	int (*graph_launch)(struct phos_device *dev, void *graph, void *stream);
	void (*graph_destroy)(struct phos_device *dev, void *graph);

	/* cuBLAS. Handles are created by the backend (the cuda backend hands out
	 * pre-warmed ones first). */
	int (*blas_create)(struct phos_device *dev, void **ret_handle);
	int (*blas_destroy)(struct phos_device *dev, void *handle);
	int (*blas_set_stream)(struct phos_device *dev, void *handle, void *stream);
	int (*blas_set_math)(struct phos_device *dev, void *handle, int mode);
	int (*blas_set_workspace)(struct phos_device *dev, void *handle, uint64_t addr, uint64_t size);
	int (*blas_gemm)(struct phos_device *dev, void *handle, const struct phos_blas_gemm *g,
			 int *ret_blas_status);
	/* For SDOT/SNRM2 *ret_result receives the scalar (the call is synchronous). */
	int (*blas_l1)(struct phos_device *dev, void *handle, const struct phos_blas_l1 *op,
		       float *ret_result, int *ret_blas_status);
	int (*blas_gemv)(struct phos_device *dev, void *handle, const struct phos_blas_gemv *op,
			 int *ret_blas_status);
	/* A level 1-3 routine of any precision (proto.h, phos_blas_op). Scalars
	 * are always the host values in op->alpha/beta (the executor has read
	 * device-mode ones); a result (DOT ... AMIN) goes to ret_result (16 bytes
	 * at most) on the host, and the call then completes before it returns. */
	int (*blas_call)(struct phos_device *dev, void *handle, const struct phos_blas_op *op,
			 void *ret_result, int *ret_blas_status);
	/* Batched getrf/getri/getrs/matinv/geqrf/gels (proto.h, phos_blas_lu). */
	int (*blas_lu)(struct phos_device *dev, void *handle, const struct phos_blas_lu *op,
		       int *ret_blas_status);

	/* cuBLASLt (proto.h, phos_blaslt_*), on the device's own cuBLASLt handle:
	 * one matmul on stream, its descriptor and layouts as the function set
	 * them (the executor has checked every operand's extent); and a heuristic
	 * query, up to h->requested results in ret (*ret_count of them). sim
	 * computes the plain epilogues (none, bias, ReLU, GELU) of real types and
	 * answers NOT_SUPPORTED for the rest. */
	int (*blaslt_matmul)(struct phos_device *dev, void *stream, const struct phos_blaslt_matmul *m,
			     int *ret_blas_status);
	int (*blaslt_heuristic)(struct phos_device *dev, const struct phos_blaslt_heuristic *h,
				struct phos_blaslt_result *ret, int *ret_count, int *ret_blas_status);
};

extern const struct phos_device_ops phos_device_sim;
extern const struct phos_device_ops phos_device_cuda;

/* "sim", "cuda", or "auto" (cuda when libcuda.so.1 loads and reports a device,
 * else sim). Returns NULL for an unknown name. */
const struct phos_device_ops *phos_device_pick(const char *name);

/* Whether a usable CUDA driver and at least one GPU are present (no context made). */
bool phos_device_cuda_available(void);
