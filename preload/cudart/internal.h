/* SPDX-License-Identifier: MIT */
/*
 * preload/: the stand-in libcudart.so.13, libcublas.so.13 and libcuda.so.1 that run inside the
 * user's function process and forward every CUDA call to its executor.
 *
 *   user program ──▶ libcudart.so.13 (ours) ─┬─ conn.c    channel, handle ids, last error,
 *                    │                        │            the thread's device and stream
 *                    │                        ├─ devinfo.c the devices' count and DEVICE_INFO
 *                    │                        ├─ kernels.c fatbins, kernels, variables (registry)
 *                    │                        ├─ memory.c  malloc/free, copies, host regions
 *                    │                        ├─ memory_2d.c  pitched copies and sets (2D, 3D)
 *                    │                        ├─ device.c  device queries, limits, reset
 *                    │                        ├─ stream.c  streams and events
 *                    │                        ├─ launch.c  launches, kernel attributes, occupancy
 *                    │                        ├─ errors.c  error names and strings
 *                    │                        ├─ serve.c   phos_fn_serve_impl (the snapshot point)
 *                    │                        └─ stubs.c   (generated) every other export: 801
 *                    ├─ libcublas.so.13 (ours) ─ cublas.c + stubs: reaches the one channel of
 *                    │                           the process through libcudart's PHOS_PRIVATE node
 *                    └─ libcuda.so.1 (ours) ──── libcuda.c, libcuda_module.c + stubs: the driver
 *                                                API, through libcudart's entry points and
 *                                                PHOS_PRIVATE internals (libcuda_internal.h)
 *
 * Exports: functions defined with PHOS_EXPORT (or PHOS_ALIAS) are what we
 * implement; gen_stubs.py scans for those two markers, stubs every other name
 * of cudart.syms / cublas.syms and writes the version script (CUDA's version
 * node for CUDA's names, PHOS_1 for phos_fn_*, PHOS_PRIVATE for phos_*).
 * Everything else, including the runtime static library, stays hidden.
 *
 * Handles given to the user (streams, events, kernels, cuBLAS handles) are
 * 32-bit ids chosen here, wrapped so that they can never be mistaken for a
 * pointer or a special stream value:
 *
 *   63        48 47    40 39    32 31                       0
 *   +-----------+--------+--------+--------------------------+
 *   |  0x5068   |   0    |  kind  |           id             |   (non-canonical:
 *   +-----------+--------+--------+--------------------------+    never a real pointer)
 *
 * Errors inside the preload are cudaError_t values (int, 0 = success), not
 * negative errnos: they are what the API returns, converted once at the channel.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channel.h"
#include "log.h"
#include "proto.h"

#define PHOS_EXPORT __attribute__((visibility("default")))
/* Lists names that macros define with PHOS_EXPORT, for gen_stubs.py (expands to nothing). */
#define PHOS_EXPORT_NAMES(...)
/* Exports `name` as another name of `target` (same translation unit). */
#define PHOS_ALIAS(name, target) \
	extern __typeof(target) name __attribute__((alias(#target), visibility("default")))

/* cudaError_t values used before the CUDA headers are in scope (stubs.c). */
#define PHOS_ERR_NOT_SUPPORTED 801
#define PHOS_ERR_INIT 3
#define PHOS_ERR_GONE 46 /* cudaErrorDevicesUnavailable: the executor went away */
#define PHOS_BLAS_NOT_SUPPORTED 15

/* --- handle ids (conn.c) --- */

enum phos_hkind {
	PHOS_H_STREAM = 1,
	PHOS_H_EVENT,
	PHOS_H_FUNC,
	PHOS_H_BLAS,
	PHOS_H_MODULE,
	PHOS_H_VAR,
	PHOS_H_REGION,
	PHOS_H_POOL,
	PHOS_H_CONTEXT,   /* the primary context of the driver API (libcuda.c): never in a table */
	PHOS_H_NCCL,   /* NCCL communicators (nccl.c, the libnccl stand-in) */
	PHOS_H_ARRAY,  /* CUDA arrays (array.c) */
	PHOS_H_DNN,    /* cuDNN handles (cudnn.c, the libcudnn stand-in) */
	PHOS_H_DNN_DESC, /* cuDNN backend descriptors (cudnn.c) */
	PHOS_H_GRAPH,  /* instantiated graphs made on the device (graph_device.c) */
	PHOS_H_FFT,    /* cuFFT plans (cufft.c, the libcufft stand-in): the id is the cufftHandle */
	PHOS_H_RAND,   /* cuRAND generators (curand.c, the libcurand stand-in): the id is the handle */
	PHOS_H__COUNT
};

#define PHOS_HANDLE_TAG 0x5068000000000000ull
#define PHOS_MAX_IDS (1u << 20) /* the executor's EXEC_MAX_HANDLES */
#define PHOS_MAX_DEVICES 8      /* the executor's EXEC_MAX_DEVICES */

static inline void *phos_handle_wrap(enum phos_hkind kind, uint32_t id)
{
	return (void *)(uintptr_t)(PHOS_HANDLE_TAG | ((uint64_t)kind << 32) | id);
}

/* The id inside a wrapped handle of this kind, or 0 if h is not one. */
static inline uint32_t phos_handle_unwrap(const void *h, enum phos_hkind kind)
{
	uint64_t v = (uint64_t)(uintptr_t)h;

	if ((v & 0xffffff0000000000ull) != PHOS_HANDLE_TAG || ((v >> 32) & 0xff) != (uint64_t)kind)
		return 0;
	return (uint32_t)v;
}

/* id -> object tables, one per kind, each with its own lock. Ids start at
 * `first` (streams start at 2: proto.h reserves 1 for cudaStreamPerThread),
 * freed ids are reused lowest first, at most PHOS_MAX_IDS. */
PHOS_EXPORT int phos_ids_add(enum phos_hkind kind, void *obj, uint32_t *ret_id);
PHOS_EXPORT void *phos_ids_get(enum phos_hkind kind, uint32_t id);
PHOS_EXPORT void *phos_ids_take(enum phos_hkind kind, uint32_t id);
/* Calls fn(id, obj, arg) on every live object of a kind, in id order, with
 * the table locked (fn must not add or take ids of that kind). */
PHOS_EXPORT void phos_ids_each(enum phos_hkind kind, void (*fn)(uint32_t id, void *obj, void *arg), void *arg);
/* Calls fn on every live object of a kind and empties the table (reset). */
PHOS_EXPORT void phos_ids_clear(enum phos_hkind kind, void (*fn)(void *obj));

/* --- the connection (conn.c) --- */

/* Connects once per process (PHOS_CHANNEL_FD, HELLO). Returns 0 or the error
 * every call gets while unconnected (cudaErrorInitializationError, or
 * cudaErrorDevicesUnavailable once the executor is gone). */
PHOS_EXPORT int phos_preload_connect(void);

/* Makes every later CUDA call of the process fail with err (a program that
 * needs what phos-fn cannot forward, found where no call can return an
 * error: a __managed__ variable registered at load). */
PHOS_EXPORT void phos_preload_refuse(int err);

/* The executor's HELLO reply (zeroed when not connected). */
PHOS_EXPORT const struct phos_reply_hello *phos_preload_hello(void);

/* Posts an asynchronous record. Returns 0 or a cudaError_t (not connected, gone). */
PHOS_EXPORT int phos_preload_post(uint32_t op, const void *body, size_t body_len, const void *payload,
				  size_t payload_len);

/* Sends a synchronous record and copies up to out_cap bytes of the reply data to
 * out. Returns the reply's status (the call's own error, or the first pending
 * asynchronous error), or a connection error. *ret_len (may be NULL) gets the
 * reply's length, *ret_blas (may be NULL) its cuBLAS status; both are set only
 * when the executor replied. If send_fd >= 0 it is first passed on the socket
 * (HOSTMEM_ADD), under the same lock. */
PHOS_EXPORT int phos_preload_call(uint32_t op, const void *body, size_t body_len, const void *payload,
				  size_t payload_len, void *out, size_t out_cap, size_t *ret_len,
				  int *ret_blas);
PHOS_EXPORT int phos_preload_call_fd(int send_fd, uint32_t op, const void *body, size_t body_len,
				     void *out, size_t out_cap);

/* The snapshot point (phos_fn_serve): posts SERVE and waits for the executor to
 * let the function go on; after a restore that is a new executor with a new
 * channel, which this adopts (HELLO again, host regions handed over again).
 * Returns 0 or a cudaError_t. */
PHOS_EXPORT int phos_preload_serve_point(void);

/* Registers fn to run after a restore, once host regions and pools are
 * back (the stand-ins built on this library: libnccl re-creates its
 * communicators). At most PHOS_RESTORE_HOOKS; returns 0 or -ENOSPC. A hook
 * returns 0 or a cudaError_t, which phos_fn_serve then reports. */
#define PHOS_RESTORE_HOOKS 8
PHOS_EXPORT int phos_preload_on_restore(int (*fn)(void));

/* A fenced section of the current channel (channel.h): the stand-ins whose
 * objects only they can make again in a new executor (cudnn.c) make every
 * call that names them inside one, so that a checkpoint never stops the
 * program halfway through it. Enter waits while a checkpoint's fence is
 * closed; it returns the channel's adoption count then (a restore of a
 * checkpoint changed it: the objects are made again at their first use), or
 * -1 when not connected (no section is held: leave is still to be called).
 * Sections nest in a thread. */
PHOS_EXPORT int64_t phos_preload_section_enter(void);
PHOS_EXPORT void phos_preload_section_leave(void);

/* Posts GOODBYE once (later calls then fail as "gone", quietly). */
PHOS_EXPORT void phos_preload_goodbye(void);

/* Stream handle -> stream id for an operation that is not captured: NULL and
 * cudaStreamLegacy are 0, cudaStreamPerThread (and NULL inside a _ptsz/_ptds
 * call) the calling thread's own stream. Returns 0, cudaErrorInvalidResourceHandle,
 * or cudaErrorStreamCaptureUnsupported for a stream that is capturing (whose
 * capture is then invalidated: the operation cannot be put in a graph). */
PHOS_EXPORT int phos_preload_stream_id(const void *stream, uint32_t *ret_id);
/* (graph_capture.c, with the capture checks.) The same without the capture
 * check (conn.c; graph.c). */
int phos_stream_resolve(const void *stream, uint32_t *ret_id);
/* conn.c: what a restored connection does first, in this order, before the
 * hooks of phos_preload_on_restore; each file sets its step from a
 * constructor (the connection stays below the files that keep this state):
 * variables' addresses forgotten (kernels.c), host regions, pools, limits,
 * stream attributes sent again (memory.c, pool.c, device.c, stream.c). A
 * step returns 0 or a cudaError_t, which ends the restore. */
enum { PHOS_STEP_VARS, PHOS_STEP_REGIONS, PHOS_STEP_POOLS, PHOS_STEP_LIMITS, PHOS_STEP_ATTRS, PHOS_RESTORE_STEPS };
extern int (*phos_restore_steps[PHOS_RESTORE_STEPS])(void);
/* conn.c: the calling thread's default stream (cudaStreamPerThread), set by
 * stream.c's constructor to phos_stream_per_thread. */
extern int (*phos_per_thread_stream)(uint32_t *ret_id);

/* --- last error (conn.c): thread-local, CUDA's semantics --- */

/* Records err (if not 0) as the thread's last error and returns it. */
int phos_set_error(int err);
int phos_take_error(void);
int phos_peek_error(void);
/* The driver API stand-in (libcuda.c) runs runtime entry points between these:
 * errors they return are not recorded as the thread's last runtime error (a
 * cuMemAlloc that fails leaves cudaGetLastError alone, as in CUDA). Nests. */
PHOS_EXPORT void phos_error_quiet_begin(void);
PHOS_EXPORT void phos_error_quiet_end(void);

/* Logs `name` once, at warn level, the first time an unimplemented API is hit. */
static inline void phos_log_once(const char *what, const char *name, int *flag)
{
	if (phos_log_level() >= PHOS_LOG_WARN && __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0)
		phos_warn("%s %s is not supported by phos-fn", what, name);
}

/* One line on stderr, "phos-fn: <what>: <reason> is not supported under
 * phos-fn<tail>", the first time that reason is refused in the process
 * (whatever PHOS_LOG says: a refusal the program may not report must still
 * be seen). The stand-ins built on libcudart (cuDNN, the driver's virtual
 * memory) refuse this way. */
PHOS_EXPORT void phos_refuse_once(const char *what, const char *reason, const char *tail);

/* --- shared between the cudart files --- */

/* kernels.c: does [addr, addr+len) lie in device memory we know of (arena, variables)? */
bool phos_mem_is_device(const void *addr, size_t len);
/* memory.c: the shared host region (not managed memory) holding [p, p+len):
 * its id and p's offset in it; false when there is none. */
bool phos_mem_region_at(const void *p, size_t len, uint32_t *ret_id, uint64_t *ret_offset);
/* memory.c: does [p, p+len) lie in cudaMallocManaged memory? */
bool phos_mem_is_managed(const void *p, size_t len);
/* memory.c: hand every host region to a new executor (after a restore). */
int phos_mem_regions_resend(void);
/* memory.c: the buffer (allocation or module variable) holding device address
 * addr, asked of the executor (cuMemGetAddressRange). cudaErrorInvalidValue
 * when none does. */
PHOS_EXPORT int phos_mem_range(uint64_t addr, uint64_t *ret_base, uint64_t *ret_size);
/* memory.c: forget all host regions (the executor dropped them at reset). */
void phos_mem_reset(void);
/* stream.c: forget streams and events (reset). */
void phos_stream_reset(void);
/* kernels.c, for the driver API (libcuda.c): modules loaded from an image
 * (a fatbin, a cubin or PTX text: kparam.h), their kernels and variables by
 * name, launches of a kernel handle. Return a cudaError_t. */
PHOS_EXPORT int phos_module_load(const void *image, uint32_t *ret_id);
PHOS_EXPORT int phos_module_unload(uint32_t id);
/* *ret_func: a kernel handle (cudaFunction_t / CUfunction) for launches and attributes. */
PHOS_EXPORT int phos_module_function(uint32_t module, const char *name, void **ret_func);
PHOS_EXPORT int phos_module_global(uint32_t module, const char *name, uint64_t *ret_addr, uint64_t *ret_size);
/* args: CUDA's array of pointers to each argument (kernelParams) */
PHOS_EXPORT int phos_launch_args(const void *func, const uint32_t grid[3], const uint32_t block[3], void **args,
				 size_t shmem, const void *stream);
/* params: the packed argument buffer (CU_LAUNCH_PARAM_BUFFER_POINTER), len bytes */
PHOS_EXPORT int phos_launch_packed(const void *func, const uint32_t grid[3], const uint32_t block[3],
				   const void *params, size_t len, size_t shmem, const void *stream);
/* The mangled name of a kernel handle or host stub, NULL when unknown. */
PHOS_EXPORT const char *phos_func_name(const void *func);
/* kernels.c: re-send every module, kernel and variable after a device reset. */
void phos_launch_reset(void);
/* kernels.c: device address and size of a registered variable (by host shadow). */
int phos_var_lookup(const void *symbol, uint64_t *ret_addr, uint64_t *ret_size);
/* The same for an address the program gets (cudaGetSymbolAddress): the
 * executor learns that it was given (a checkpoint's restore must then find
 * the variable at that address). */
int phos_var_address(const void *symbol, uint64_t *ret_addr);
/* kernels.c: forget where variables are (a restored executor placed them anew). */
void phos_var_forget(void);
/* kernels.c: is [addr, addr+len) inside a known variable? (no round trip) */
bool phos_var_contains(uint64_t addr, uint64_t len);
/* pool.c: a cudaFree'd address is no longer a pool block. */
void phos_pool_forget(uint64_t addr);
/* memory.c: what cudaFree asks first of the files above it that own some
 * pointers, set from their constructors: graph_mem.c's
 * phos_graph_mem_release (true: ptr was a graph allocation, *ret_err the
 * free's result), then, for memory that is not managed, pool.c's
 * phos_pool_forget. */
extern bool (*phos_free_graph_hook)(const void *ptr, int *ret_err);
extern void (*phos_free_pool_hook)(uint64_t addr);
/* pool.c: tell a restored executor the pools, their settings and live blocks. */
int phos_pool_resend(void);
/* parcopy.c: memcpy of large blocks split over a few threads of ours. */
void phos_par_memcpy(void *dst, const void *src, size_t n);
/* device.c: set again the limits the function set (after a restore). */
int phos_device_limits_resend(void);
/* stream.c: set again the stream attributes the function set (after a restore). */
int phos_stream_attrs_resend(void);
/* array.c: cudaMemcpy3D(Async) with an array side (memory_2d.c hands it
 * over); params: a struct cudaMemcpy3DParms. */
int phos_array_memcpy_3d(const void *params, const void *stream, bool sync);
/* array.c: forget every array and texture or surface object (device reset). */
void phos_array_reset(void);
/* pool.c: forget every pool and block (device reset). */
void phos_pool_reset(void);
/* (conn.c) set on the thread that runs host callbacks while one runs: CUDA
 * calls from a callback are refused (cudaErrorNotPermitted), they would wait
 * for an executor that waits for the callback. */
extern __thread bool phos_in_host_callback;
/* conn.c: the current channel, or NULL when not connected (callback.c: a
 * restore replaces it only after every callback posted on it ran). */
struct phos_channel *phos_preload_channel(void);
/* conn.c: is e an event of ours that is not destroyed? */
bool phos_event_known(const void *e);
/* stream.c: the calling thread's default stream (cudaStreamPerThread): made
 * at first use, destroyed when the thread ends. */
int phos_stream_per_thread(uint32_t *ret_id);
/* (conn.c) set while a _ptsz/_ptds form runs (ptds.c): the null stream is the thread's. */
extern __thread bool phos_ptds_null;

/* stream.c: NCCL ranks that are threads of this process (preload/nccl/nccl.c).
 * From the first call of phos_preload_nccl_threads on, a wait for the device
 * polls instead of holding the executor's one dispatcher, which a peer
 * thread's launch must still get through (cudaFree, which the executor
 * makes wait for the device, polls first too): phos_preload_drain(stream id)
 * returns once the stream's work so far is done (0, the legacy stream: every
 * stream of the current device), phos_preload_drain_event once the event
 * completed,
 * phos_preload_drain_device once every stream of the current device is idle.
 * They return 0 at once before that, else 0 or the error a query met (which
 * the caller returns). */
PHOS_EXPORT void phos_preload_nccl_threads(void);
PHOS_EXPORT int phos_preload_drain(uint32_t stream);
int phos_preload_drain_event(const void *event);
int phos_preload_drain_device(void);

/* kernels.c: checks a launch and packs its parameters (grid, block: x, y, z):
 * *ret_l (stream unset, no flags), *ret_params (malloc'd, the caller frees
 * it), the kernel's parameter layout in *ret_fi. Returns a cudaError_t. */
int phos_launch_prepare(const void *func, const uint32_t grid[3], const uint32_t block[3], size_t shmem, void **args,
			struct phos_launch_ex *ret_l, void **ret_params, struct phos_reply_func_info *ret_fi);
/* kernels.c: applies launch attribute `id` (value: a cudaLaunchAttributeValue)
 * to a launch's flags and cluster dimensions. Attributes that leave the
 * results alone (priority, programmatic serialization, sync domains, ...) are
 * accepted and change nothing; events triggered from kernels are
 * cudaErrorNotSupported; unknown ids cudaErrorInvalidValue. */
int phos_launch_attr_apply(int id, const void *value, uint32_t *flags, uint32_t cluster[3]);
/* launch.c: posts a prepared launch on stream. */
int phos_launch_post(const struct phos_launch_ex *l, const void *stream, const void *params);

/* graph.c: stream capture. The stream-ordered calls that graphs hold
 * (launches, cudaMemcpyAsync, cudaMemsetAsync, host functions, event record
 * and wait) ask phos_graph_capturing first and, when it says yes, add a node
 * instead of posting; every other call on a capturing stream is refused by
 * phos_preload_stream_id. */
bool phos_graph_capturing(const void *stream);
/* cudaErrorStreamCaptureUnsupported (and the capture invalidated) when stream
 * id sid is capturing, else 0. */
int phos_graph_check_stream(uint32_t sid);
/* cudaStreamDestroy of stream id sid (graph_capture.c): a stream forked into
 * a capture leaves it, its last nodes still to be joined back by the
 * capture's end (as CUDA lets programs destroy such streams); the
 * capture's origin stream is refused (cudaErrorStreamCaptureUnsupported,
 * the capture invalidated). 0 for a stream that is not capturing. */
int phos_graph_stream_gone(uint32_t sid);
/* A checked, packed launch (offsets: of the nargs arguments in params). */
int phos_graph_capture_kernel(const void *stream, const void *func, const struct phos_launch_ex *l,
			      const void *params, const uint16_t *offsets, uint32_t nargs);
int phos_graph_capture_memcpy(const void *stream, void *dst, const void *src, size_t count, int kind);
int phos_graph_capture_memset(const void *stream, void *dst, int value, size_t count);
int phos_graph_capture_host(const void *stream, void (*fn)(void *), void *data);
/* params: a struct cudaMemcpy3DParms */
int phos_graph_capture_memcpy3d(const void *stream, const void *params);
int phos_graph_capture_memcpy2d(const void *stream, void *dst, size_t dpitch, const void *src, size_t spitch,
				size_t width, size_t height, int kind);
int phos_graph_capture_memset2d(const void *stream, void *dst, size_t pitch, int value, size_t width, size_t height);
/* cudaMemcpyToSymbolAsync (to_symbol; host is the source) / FromSymbolAsync */
int phos_graph_capture_symbol(const void *stream, const void *symbol, void *host, size_t count, size_t offset,
			      int kind, bool to_symbol);
/* An event record node (cudaEventRecordExternal) or wait node (cudaEventWaitExternal). */
int phos_graph_capture_event_node(const void *stream, const void *event, bool wait);
int phos_graph_capture_event_record(const void *stream, uint32_t event);
/* An event recorded outside any capture is no longer a captured one. */
void phos_graph_event_forget(uint32_t event);
/* cudaStreamWaitEvent on an event recorded in a capture: the stream joins
 * that capture (*ret_handled set); other events are ordinary waits. */
int phos_graph_wait_event(const void *stream, uint32_t event, bool *ret_handled);

/* graph_capture.c, for the other stand-ins (cuBLAS, cuBLASLt): is stream
 * capturing (without invalidating it, unlike phos_preload_stream_id)? */
PHOS_EXPORT bool phos_preload_capturing(const void *stream);
/* ... then their stream-ordered record (op, body of len bytes) joins the
 * capture as a node instead of being posted; each launch of the graph posts
 * it again, with the launch stream's id written at byte stream_off of body
 * (UINT32_MAX: none). Returns a cudaError_t. */
PHOS_EXPORT int phos_graph_capture_record(const void *stream, uint32_t op, const void *body, size_t len,
					  uint32_t stream_off);
/* ... or, for a library whose call must be made ready at each launch (cuDNN:
 * its objects made again after a restore, inside a fenced section), a node
 * whose launch calls ops->run(body, len, the launch stream's id), which
 * posts the call itself; hold and drop (may be NULL) are told when a copy of
 * the node is made and when one goes (an instantiated graph holds copies).
 * What the caller holds for body passes to the node, also on failure.
 * Returns a cudaError_t. */
struct phos_graph_call_ops {
	int (*run)(const void *body, size_t len, uint32_t stream_id);
	void (*hold)(const void *body);
	void (*drop)(const void *body);
};
PHOS_EXPORT int phos_graph_capture_call(const void *stream, const struct phos_graph_call_ops *ops, const void *body,
					size_t len);
/* Bumped by every launch of such a node: a library that caches which stream
 * its handle is bound to in the executor binds it again. */
PHOS_EXPORT uint32_t phos_graph_record_epoch(void);
void phos_graph_record_epoch_bump(void);

/* graph_mem.c: cudaMallocAsync / cudaFreeAsync on a capturing stream: an
 * allocation node (its address in *ret_ptr, a buffer on device made now) or
 * a free node. */
int phos_graph_capture_mem_alloc(const void *stream, void **ret_ptr, size_t size, int device);
int phos_graph_capture_mem_free(const void *stream, const void *ptr);
/* graph_mem.c: cudaFree / cudaFreeAsync of ptr outside a graph: true when
 * ptr is a graph allocation, freed (its buffer kept while a node names it;
 * *ret_err 0) or not freeable (*ret_err cudaErrorInvalidValue). */
bool phos_graph_mem_release(const void *ptr, int *ret_err);
/* graph_mem.c: every graph allocation is gone (device reset). */
void phos_graph_mem_reset(void);

/* devinfo.c: the devices the executor serves (cudaErrorNoDevice when none);
 * whether device is one of them (cudaErrorInvalidDevice); its DEVICE_INFO
 * (asked once, cached); attribute `attr` of the calling thread's device. */
int phos_device_count(int *ret_count);
int phos_device_check(int device);
struct phos_reply_device;
int phos_device_info(int device, const struct phos_reply_device **ret_info);
int phos_device_attr(int attr, int *ret_value);
/* conn.c: the calling thread's device (cudaSetDevice), 0 until it selects
 * one; set by cudaSetDevice, which checks it. */
int phos_current_device(void);
void phos_current_device_set(int device);
