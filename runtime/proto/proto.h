/* SPDX-License-Identifier: MIT */
/*
 * Call records: what the preload library sends to its executor over the channel.
 *
 *   function process (preload)                     phos-executor
 *   ------------------------------                 ------------------------------
 *   phos_channel_post(rec)  ──▶ [ring: hdr|body|hdr|body|...] ──▶ dispatcher, in order
 *   phos_channel_call(rec)  ──▶ same ring, PHOS_REC_SYNC set   ──▶ executes, then writes
 *         waits on reply.seq ◀── [reply: seq,status,len,data] ◀──  the reply area
 *
 * Every record starts with struct phos_rec_hdr and is followed by its op's body
 * struct and, for ops that carry bytes (fatbins, names, kernel parameters, H2D
 * data), a trailing payload. Records are 8-byte aligned in the ring.
 *
 * Asynchronous ops (launches, async copies, memsets, event records, cuBLAS
 * kernels, stream/event creation with client-chosen ids) never wait. Any record
 * may be sent synchronously: the executor then replies after executing it, with
 * its own status or, when it succeeded, the first error left by earlier
 * asynchronous work (CUDA's "errors of asynchronous work surface at the next
 * synchronising call"), which is then cleared.
 *
 * Handles (streams, events, cuBLAS handles, modules, functions, variables) are
 * 32-bit ids chosen by the preload, so creating them needs no round trip. Id 0
 * of streams is the legacy default stream; id 1 is cudaStreamPerThread (mapped
 * to the default stream).
 *
 * All integers are little-endian host order; both ends run on one host.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cudnn_abi.h"
#include "fft_abi.h"
#include "sparse_abi.h"
#include "rand_abi.h"
#include "solver_abi.h"

#define PHOS_PROTO_VERSION 1u

/* Largest payload a single record may carry (bigger copies are split). */
#define PHOS_REC_MAX_PAYLOAD (1u << 20)
/* Size of the reply data area: the most bytes one synchronous reply returns
 * (bigger reads are split; pageable copies of 2 MiB and more are staged
 * instead: preload/cudart/memory.c). Small, as the ring is (channel.h). */
#define PHOS_REPLY_MAX (1u << 20)

enum phos_op {
	PHOS_OP_NOP = 0,
	PHOS_OP_HELLO,            /* sync: body hello; reply phos_reply_hello */

	/* memory */
	PHOS_OP_MALLOC,           /* sync: phos_malloc; reply u64 address */
	PHOS_OP_FREE,             /* sync: phos_free */
	PHOS_OP_MEMCPY_H2D,       /* phos_memcpy + payload of len bytes */
	PHOS_OP_MEMCPY_D2H,       /* sync: phos_memcpy (len <= PHOS_REPLY_MAX); reply data */
	PHOS_OP_MEMCPY_D2D,       /* phos_memcpy */
	PHOS_OP_MEMCPY_H2D_SHM,   /* phos_memcpy_shm: source in a shared host region */
	PHOS_OP_MEMCPY_D2H_SHM,   /* phos_memcpy_shm: destination in a shared host region */
	PHOS_OP_MEMSET,           /* phos_memset */
	PHOS_OP_MEM_GET_INFO,     /* sync; reply phos_reply_meminfo */
	PHOS_OP_HOSTMEM_ADD,      /* sync: phos_hostmem; the memfd travels on the socket first */
	PHOS_OP_HOSTMEM_REMOVE,   /* sync: phos_hostmem */

	/* device */
	PHOS_OP_DEVICE_INFO,      /* sync: phos_device_query; reply phos_reply_device */
	PHOS_OP_DEVICE_SYNC,      /* sync */
	PHOS_OP_DEVICE_RESET,     /* sync: frees everything the function allocated */

	/* streams and events */
	PHOS_OP_STREAM_CREATE,    /* phos_stream_create */
	PHOS_OP_STREAM_DESTROY,   /* phos_handle */
	PHOS_OP_STREAM_SYNC,      /* sync: phos_handle */
	PHOS_OP_STREAM_QUERY,     /* sync: phos_handle; status cudaErrorNotReady while busy */
	PHOS_OP_STREAM_WAIT_EVENT,/* phos_stream_wait */
	PHOS_OP_EVENT_CREATE,     /* phos_event_create */
	PHOS_OP_EVENT_DESTROY,    /* phos_handle */
	PHOS_OP_EVENT_RECORD,     /* phos_event_record */
	PHOS_OP_EVENT_SYNC,       /* sync: phos_handle */
	PHOS_OP_EVENT_QUERY,      /* sync: phos_handle */
	PHOS_OP_EVENT_ELAPSED,    /* sync: phos_event_elapsed; reply float ms */

	/* modules and kernels */
	PHOS_OP_MODULE_LOAD,      /* phos_module_load + fatbin payload */
	PHOS_OP_MODULE_UNLOAD,    /* phos_handle */
	PHOS_OP_FUNC_REGISTER,    /* phos_func_register + NUL-terminated mangled name */
	PHOS_OP_VAR_REGISTER,     /* phos_var_register + NUL-terminated name */
	PHOS_OP_FUNC_INFO,        /* sync: phos_handle; reply phos_reply_func_info */
	PHOS_OP_FUNC_SET_ATTR,    /* phos_func_attr */
	PHOS_OP_OCCUPANCY,        /* sync: phos_occupancy; reply i32 blocks per SM */
	PHOS_OP_VAR_INFO,         /* sync: phos_handle; reply phos_reply_var_info */
	PHOS_OP_LAUNCH,           /* phos_launch + packed parameter buffer */

	/* cuBLAS */
	PHOS_OP_BLAS_CREATE,      /* phos_handle */
	PHOS_OP_BLAS_DESTROY,     /* phos_handle */
	PHOS_OP_BLAS_SET_STREAM,  /* phos_blas_set */
	PHOS_OP_BLAS_SET_MATH,    /* phos_blas_set */
	PHOS_OP_BLAS_SET_WORKSPACE, /* phos_blas_workspace */
	PHOS_OP_BLAS_GEMM,        /* phos_blas_gemm (Sgemm, GemmEx, their strided batched forms) */
	PHOS_OP_BLAS_L1,          /* phos_blas_l1 (axpy, scal, dot, nrm2); sync when it returns a host scalar.
	                           * The preload sends PHOS_OP_BLAS_CALL instead since issue 12;
	                           * the executor still serves this one */
	PHOS_OP_BLAS_GEMV,        /* phos_blas_gemv (the same) */

	/* function lifecycle */
	PHOS_OP_SERVE,            /* the function reached phos_fn_serve (the snapshot point); it
	                           * then waits on the socket (channel.h, phos_channel_await) */
	PHOS_OP_GOODBYE,          /* the function process is exiting */

	/* appended (ops above keep their numbers) */
	PHOS_OP_MODULE_LOAD_SHM,  /* phos_module_load_shm: a fatbin too big for one record
	                           * (> PHOS_REC_MAX_PAYLOAD), in a shared host region */
	PHOS_OP_BLAS_SET_MATRIX,  /* phos_blas_matrix + payload: packed rows x cols elements
	                           * (cublasSet{Vector,Matrix}[Async]) */
	PHOS_OP_BLAS_GET_MATRIX,  /* sync: phos_blas_matrix; reply the packed elements */
	PHOS_OP_BLAS_CALL,        /* phos_blas_op: level 1-3 routines of every precision;
	                           * sync when it returns a host result */
	PHOS_OP_BLAS_LU,          /* phos_blas_lu: batched getrf/getri/getrs/matinv/geqrf/gels */

	/* stream-ordered allocation (ctxpool/calls/exec_pool.c); pool ids are chosen by
	 * the preload, PHOS_POOL_DEFAULT is the device's default pool */
	PHOS_OP_POOL_CREATE,      /* phos_pool_create */
	PHOS_OP_POOL_DESTROY,     /* phos_handle */
	PHOS_OP_POOL_MALLOC,      /* sync: phos_pool_malloc; reply u64 address */
	PHOS_OP_POOL_FREE,        /* phos_pool_free: stream-ordered */
	PHOS_OP_POOL_SET_ATTR,    /* sync: phos_pool_attr */
	PHOS_OP_POOL_GET_ATTR,    /* sync: phos_pool_attr; reply u64 */
	PHOS_OP_POOL_TRIM,        /* sync: phos_pool_attr (value: bytes to keep) */
	PHOS_OP_POOL_ADOPT,       /* sync: phos_pool_adopt: after a restore, a live block of a
	                           * pool (a snapshot buffer at its address) joins its pool again */

	/* host callbacks (cudaLaunchHostFunc, cudaStreamAddCallback) */
	PHOS_OP_HOST_FUNC,        /* phos_host_func: once the stream's earlier work is done, the
	                           * executor asks the function to run callback seq and waits
	                           * until it returned (channel.h, phos_channel_callback_run) */
	PHOS_OP_MEMCPY_2D,        /* phos_memcpy_2d; H2D: + payload of the packed host rows;
	                           * D2H: sync, reply the packed rows (<= PHOS_REPLY_MAX) */
	PHOS_OP_MEMSET_2D,        /* phos_memset_2d */
	PHOS_OP_STREAM_ATTR,      /* sync: phos_stream_attr; a get replies the 64-byte value */
	PHOS_OP_DEVICE_LIMIT,     /* sync: phos_device_limit; replies u64 (the value now) */
	PHOS_OP_LAUNCH_EX,        /* phos_launch_ex + packed parameter buffer: a launch with
	                           * attributes (cooperative, cluster dimensions) */
	PHOS_OP_OCCUPANCY_CLUSTER,/* sync: phos_occupancy_cluster; reply i32 */
	PHOS_OP_MODULE_STATUS,    /* sync: phos_handle; status: did the module load (the driver
	                           * API's cuModuleLoadData answers with the device's verdict) */
	PHOS_OP_ADDR_RANGE,       /* sync: phos_free (an address); reply phos_reply_range: the
	                           * buffer holding it (cuMemGetAddressRange); cudaErrorInvalidValue
	                           * when none does */

	/* NCCL (ctxpool/calls/exec_nccl.c). All synchronous; the ncclResult_t comes back
	 * in the reply's library status (phos_channel_reply's blas field), the
	 * record's own status stays a cudaError_t. Communicator ids are chosen by
	 * the preload, as stream ids are. */
	PHOS_OP_NCCL_VERSION,     /* sync; reply i32 NCCL version code */
	PHOS_OP_NCCL_UNIQUE_ID,   /* sync; reply PHOS_NCCL_ID_BYTES of ncclUniqueId */
	PHOS_OP_NCCL_INIT,        /* sync: phos_nccl_init (ncclCommInitRank[Config], InitAll of 1) */
	PHOS_OP_NCCL_SPLIT,       /* sync: phos_nccl_split */
	PHOS_OP_NCCL_END,         /* sync: phos_nccl_end (finalize, destroy, abort) */
	PHOS_OP_NCCL_QUERY,       /* sync: phos_handle; reply phos_reply_nccl_comm */
	PHOS_OP_NCCL_COLL,        /* sync: phos_nccl_coll (collectives, send, recv) */
	PHOS_OP_NCCL_GROUP,       /* sync: phos_nccl_group (ncclGroupStart / ncclGroupEnd) */

	/* CUDA arrays, texture and surface objects (issue 12) */
	PHOS_OP_ARRAY_CREATE,     /* sync: phos_array_create */
	PHOS_OP_ARRAY_DESTROY,    /* sync: phos_handle */
	PHOS_OP_ARRAY_COPY,       /* phos_array_copy; H2D (into an array): + payload of the packed
	                           * host rows; D2H (out of one): sync, reply the packed rows
	                           * (<= PHOS_REPLY_MAX); D2D: device memory or an array each side */
	PHOS_OP_TEX_CREATE,       /* sync: phos_tex_create; reply u64 handle */
	PHOS_OP_TEX_DESTROY,      /* sync: phos_tex_destroy */

	/* A function over several GPUs: the device the following records run on
	 * (cudaSetDevice of the calling thread). Sent by the preload only when
	 * the sending thread's device differs from the last one sent. */
	PHOS_OP_SET_DEVICE,       /* phos_device_query */

	/* cuBLASLt (ctxpool/calls/exec_blaslt.c): descriptors live in the preload and
	 * travel whole with each call; the executor keeps one cublasLtHandle_t
	 * per device, so nothing of cuBLASLt is executor state to snapshot. */
	PHOS_OP_BLASLT_MATMUL,    /* phos_blaslt_matmul: cublasLtMatmul, stream-ordered */
	PHOS_OP_BLASLT_HEURISTIC, /* sync: phos_blaslt_heuristic; reply phos_blaslt_result[returned]
	                           * (cublasLtMatmulAlgoGetHeuristic) */

	/* cuDNN (ctxpool/calls/exec_dnn.c). Handles and backend descriptors are
	 * executor objects under ids the preload chooses (one id space each);
	 * the cudnnStatus_t comes back in the reply's library status. Variant
	 * packs and legacy tensor descriptors stay in the preload and travel
	 * whole with each call. */
	PHOS_OP_DNN_VERSION,      /* sync; reply phos_reply_dnn_version */
	PHOS_OP_DNN_CREATE,       /* sync: phos_dnn_handle (cudnnCreate on its device) */
	PHOS_OP_DNN_DESTROY,      /* sync: phos_handle */
	PHOS_OP_DNN_DESC_CREATE,  /* sync: phos_dnn_desc */
	PHOS_OP_DNN_DESC_DESTROY, /* phos_handle */
	PHOS_OP_DNN_SET,          /* sync: phos_dnn_attr + count elements (handles and descriptors
	                           * as u64 ids, 0 for NULL) */
	PHOS_OP_DNN_GET,          /* sync: phos_dnn_attr (+ count u64 ids of the descriptors to
	                           * fill, for BACKEND_DESCRIPTOR); reply i64 count + elements */
	PHOS_OP_DNN_FINALIZE,     /* sync: phos_handle */
	PHOS_OP_DNN_EXECUTE,      /* phos_dnn_execute + n phos_dnn_vp_entry + by-value bytes,
	                           * stream-ordered */
	PHOS_OP_DNN_BN,           /* phos_dnn_bn: a batch normalization, stream-ordered */
	PHOS_OP_DNN_BN_SIZE,      /* sync: phos_dnn_bn; reply u64 bytes */
	PHOS_OP_DNN_STF,          /* phos_dnn_stf: a spatial transformer's grid or sampler, stream-ordered */
	PHOS_OP_DNN_RNN,          /* phos_dnn_rnn + x's and y's sequence lengths: an RNN pass or
	                           * dropout's states, stream-ordered */
	PHOS_OP_DNN_RNN_ASK,      /* sync: phos_dnn_rnn (+ x's sequence lengths): a size or weight
	                           * query; reply phos_reply_dnn_rnn */
	PHOS_OP_DNN_CTC,          /* phos_dnn_ctc (+ the host arrays of the legacy call): a CTC loss,
	                           * stream-ordered */
	PHOS_OP_DNN_CTC_SIZE,     /* sync: phos_dnn_ctc (+ the same arrays); reply u64 workspace bytes */

	/* The driver's virtual memory management (cuMemAddressReserve, cuMemMap,
	 * ...; PyTorch's expandable segments): reservations of the arena, and
	 * mappings into them, which are ordinary buffers from then on (ctxpool/
	 * exec_memory.c). Physical handles stay in the preload (preload/driver/libcuda_vmm.c). */
	PHOS_OP_VMM_RESERVE,      /* sync: phos_vmm (size, align; at: exactly addr, after a restore);
	                           * reply u64 address */
	PHOS_OP_VMM_FREE,         /* sync: phos_vmm (addr) */
	PHOS_OP_VMM_MAP,          /* sync: phos_vmm (addr, size) */
	PHOS_OP_VMM_UNMAP,        /* sync: phos_vmm (addr, size): waits for the device first */

	/* CUDA graphs made on the device (ctxpool/calls/exec_graph.c): an instantiated
	 * graph the preload could describe node by node (preload/graph/graph_device.c),
	 * launched as one record */
	PHOS_OP_GRAPH_BUILD,      /* sync: phos_graph_build + its lists (below) */
	PHOS_OP_GRAPH_LAUNCH,     /* phos_graph_launch: stream-ordered */
	PHOS_OP_GRAPH_DESTROY,    /* phos_handle */

	/* cuFFT (ctxpool/calls/exec_fft.c). Plans are executor objects under ids the
	 * preload chooses, made from parameters the preload keeps (and sends
	 * again after a restore); the cufftResult comes back in the reply's
	 * library status. */
	PHOS_OP_FFT_VERSION,      /* sync; reply phos_reply_fft_version */
	PHOS_OP_FFT_PLAN,         /* sync: phos_fft_plan (a plan of that id is replaced); reply u64
	                           * work area bytes */
	PHOS_OP_FFT_SIZE,         /* sync: phos_fft_plan (id unused): no plan kept; reply u64 work
	                           * area bytes (cufftGetSize*, cufftEstimate*) */
	PHOS_OP_FFT_DESTROY,      /* phos_handle */
	PHOS_OP_FFT_EXEC,         /* phos_fft_exec, stream-ordered */

	/* cuSPARSE's generic API (ctxpool/calls/exec_sparse.c). Handles and
	 * descriptors live in the preload; each call carries the whole
	 * description of its operands, so the executor keeps nothing of the
	 * function's and nothing is made again after a restore; the
	 * cusparseStatus_t comes back in the reply's library status. */
	PHOS_OP_SPARSE_VERSION,   /* sync; reply phos_reply_sparse_version */
	PHOS_OP_SPARSE_SIZE,      /* sync: phos_sparse_call; reply u64 external buffer bytes */
	PHOS_OP_SPARSE_EXEC,      /* phos_sparse_call, stream-ordered */
	/* cuRAND's host API (ctxpool/calls/exec_rand.c). Generators are executor
	 * objects under ids the preload chooses; the preload keeps every call
	 * that moved one (its settings and its generate calls) and, after a
	 * restore, makes it again by replaying them (RAND_REPLAY), so that the
	 * next numbers are those of an uninterrupted run. The curandStatus_t
	 * comes back in the reply's library status. */
	PHOS_OP_RAND_VERSION,     /* sync; reply phos_reply_rand_version */
	PHOS_OP_RAND_CREATE,      /* sync: phos_rand_create (a generator of that id is replaced) */
	PHOS_OP_RAND_SET,         /* sync: phos_rand_set */
	PHOS_OP_RAND_DESTROY,     /* phos_handle */
	PHOS_OP_RAND_GENERATE,    /* phos_rand_generate, stream-ordered: n elements written at out */
	PHOS_OP_RAND_REPLAY,      /* sync: phos_rand_replay + nsteps phos_rand_step: settings and calls
	                           * made again, the calls into the executor's scratch */
	/* cuSOLVER's dense API (ctxpool/calls/exec_solver.c). Handles live in the
	 * preload; each call carries its whole description (sizes, leading
	 * dimensions, device pointers, the workspace), so the executor keeps
	 * nothing of the function's: its own cusolverDn handle per device is
	 * made at its first call, again in a new executor after a restore. The
	 * cusolverStatus_t comes back in the reply's library status. */
	PHOS_OP_SOLVER_VERSION,   /* sync; reply phos_reply_solver_version */
	PHOS_OP_SOLVER_SIZE,      /* sync: phos_solver_call; reply phos_reply_solver_size */
	PHOS_OP_SOLVER_EXEC,      /* phos_solver_call, stream-ordered */

	PHOS_OP__COUNT
};

enum phos_rec_flags {
	PHOS_REC_SYNC = 1u << 0, /* the sender waits for a reply */
	PHOS_REC_FENCED = 1u << 1, /* posted in a fenced section (channel.h) */
};

struct phos_rec_hdr {
	uint32_t op;      /* enum phos_op */
	uint32_t flags;   /* enum phos_rec_flags */
	uint32_t len;     /* bytes of body + payload after this header (not padded) */
	uint32_t _pad;
	uint64_t seq;     /* 1, 2, 3, ... per channel; replies echo it */
};

struct phos_hello {
	uint32_t version;   /* PHOS_PROTO_VERSION */
	uint32_t pid;       /* of the function process */
};
struct phos_reply_hello {
	uint32_t version;
	uint32_t device_count;
	uint64_t arena_base, arena_size;
	uint32_t backend;   /* 0 sim, 1 cuda */
	uint32_t flags;     /* PHOS_HELLO_PEERS */
};
/* The devices (more than one) reach each other's memory: peer access. */
#define PHOS_HELLO_PEERS 1u

struct phos_malloc { uint64_t size; };
struct phos_free { uint64_t addr; };
struct phos_vmm { uint64_t addr, size, align; uint32_t at, _pad; };
struct phos_reply_range { uint64_t base, size; };

struct phos_memcpy {
	uint64_t dst, src;  /* device addresses; the host side is the payload or reply */
	uint64_t len;
	uint32_t stream;
	uint32_t _pad;
};

struct phos_memcpy_shm {
	uint64_t dev;       /* device address */
	uint32_t region;    /* shared host region id (PHOS_OP_HOSTMEM_ADD) */
	uint32_t stream;
	uint64_t offset;    /* into the region */
	uint64_t len;
};

struct phos_memset {
	uint64_t dst, len;
	uint32_t value;     /* low byte is used */
	uint32_t stream;
};

/*
 * Pitched copies and sets (cudaMemcpy2D/3D, cudaMemset2D/3D): depth slices of
 * height rows of width bytes. Row y of slice z of a device side starts at
 *
 *     base + z * slice + y * pitch        (pitch >= width when height > 1, slices
 *                                          do not overlap: phos_pitched_extent)
 *
 * The host side of an H2D or D2H copy travels packed (rows back to back, no
 * pitch): the preload splits a copy whose packed bytes exceed one record into
 * several, each a whole number of rows (or one piece of a row wider than a
 * record).
 */
enum phos_copy_dir { PHOS_COPY_H2D = 1, PHOS_COPY_D2H = 2, PHOS_COPY_D2D = 3 };
struct phos_memcpy_2d {
	uint64_t dst, src;          /* device addresses of the first row (0 for the host side) */
	uint64_t dpitch, spitch;
	uint64_t dslice, sslice;
	uint64_t width, height, depth;
	uint32_t dir;               /* enum phos_copy_dir */
	uint32_t stream;
};
/* CUDA arrays (PHOS_OP_ARRAY_*): ids chosen by the preload (1, 2, ...), the
 * format and extent as cudaMalloc3DArray takes them (cudaMallocArray: depth 0,
 * a 1D one height 0). */
struct phos_array_create {
	uint32_t id;
	uint32_t flags;             /* cudaArrayLayered, cudaArraySurfaceLoadStore, ... */
	int32_t bits[4];            /* cudaChannelFormatDesc x, y, z, w */
	int32_t kind;               /* cudaChannelFormatKind */
	uint32_t _pad;
	uint64_t width, height, depth;
};
/* A copy with an array on at least one side: depth slices of height rows of
 * width bytes. An array side is its id and position (x in bytes, y, z); a
 * device side an address, pitch and slice stride; the host side (H2D into an
 * array, D2H out of one) is the payload or the reply, rows packed. */
struct phos_array_copy {
	uint64_t dst, src;          /* device sides: first row */
	uint64_t dpitch, spitch, dslice, sslice;
	uint64_t dpos[3], spos[3];  /* array sides */
	uint64_t width, height, depth;
	uint32_t darray, sarray;    /* array ids; 0: that side is not an array */
	uint32_t dir;               /* enum phos_copy_dir */
	uint32_t stream;
};
/* cudaCreateTextureObject / cudaCreateSurfaceObject: the resource, and for a
 * texture its descriptor, field by field as cudaResourceDesc and
 * cudaTextureDesc hold them. The reply is the device's handle: a small
 * integer, the same in every context for the same sequence of creations
 * and destructions (a restore relies on it, exec_array.c). */
enum phos_res_type { PHOS_RES_ARRAY = 0, PHOS_RES_LINEAR = 2, PHOS_RES_PITCH2D = 3 };
struct phos_tex_create {
	uint32_t surface;           /* 1: a surface object (array resources only) */
	uint32_t res_type;          /* enum phos_res_type (cudaResourceType) */
	uint32_t array;             /* PHOS_RES_ARRAY: its id */
	int32_t bits[4], kind;      /* LINEAR, PITCH2D: the element format */
	uint32_t _pad;
	uint64_t ptr, size;         /* LINEAR: device address, bytes; PITCH2D: address */
	uint64_t width, height, pitch;  /* PITCH2D */
	int32_t address[3], filter, read_mode, srgb, normalized_coords, max_anisotropy;
	int32_t mip_filter, no_trilinear_opt, seamless_cubemap, _pad2;
	float mip_bias, min_mip_clamp, max_mip_clamp;
	float border[4];
};
struct phos_tex_destroy { uint64_t handle; uint32_t surface; uint32_t _pad; };

struct phos_memset_2d {
	uint64_t dst, pitch, slice;
	uint64_t width, height, depth;
	uint32_t value;             /* low byte is used */
	uint32_t stream;
};

/* cudaStreamSetAttribute / cudaStreamGetAttribute. The value is
 * cudaStreamAttrValue as CUDA lays it out, which is CUstreamAttrValue
 * (cudaAccessPolicyWindow == CUaccessPolicyWindow, ...). */
#define PHOS_STREAM_ATTR_BYTES 64
struct phos_stream_attr {
	uint32_t stream;
	int32_t attr;       /* cudaStreamAttrID == CUstreamAttrID */
	uint32_t set;       /* 1: set value, 0: get */
	uint32_t _pad;
	uint8_t value[PHOS_STREAM_ATTR_BYTES];
};

/* cudaDeviceSetLimit / cudaDeviceGetLimit (cudaLimit == CUlimit). */
struct phos_device_limit {
	int32_t limit;
	uint32_t set;       /* 1: set value, 0: get */
	uint64_t value;
};

/* HOSTMEM_ADD replies the region's device address (u64): with unified
 * addressing the executor's mapping of it, which is addr when the executor
 * could map it at the function's own address (kernels can then dereference
 * the function's host pointers, as CUDA allows for pinned memory). */
struct phos_hostmem {
	uint32_t region;
	uint32_t _pad;
	uint64_t size;
	uint64_t addr;      /* where the function maps it: mapped there too if free; 0: anywhere */
};

struct phos_reply_meminfo { uint64_t free, total; };

struct phos_device_query { int32_t device; uint32_t _pad; };
/* Attributes are indexed by CUdevice_attribute (== cudaDeviceAttr). */
#define PHOS_DEVICE_ATTR_MAX 160
struct phos_reply_device {
	char name[256];
	uint8_t uuid[16];
	uint64_t total_mem;
	int32_t attr[PHOS_DEVICE_ATTR_MAX];
};

struct phos_handle { uint32_t id; uint32_t _pad; };
/* PHOS_OP_VAR_INFO's phos_handle._pad: the address goes to the program
 * (cudaGetSymbolAddress, cuModuleGetGlobal), which may keep it: a restore of
 * a checkpoint must then find the variable where it was. */
#define PHOS_VAR_INFO_GIVEN 1u

struct phos_stream_create { uint32_t id; uint32_t flags; int32_t priority; uint32_t _pad; };
struct phos_stream_wait { uint32_t stream, event; uint32_t flags, _pad; };
struct phos_event_create { uint32_t id; uint32_t flags; };
struct phos_event_record { uint32_t event, stream; };
struct phos_event_elapsed { uint32_t start, end; };

struct phos_module_load {
	uint32_t module;
	uint32_t _pad;
	/* payload: the fatbin blob (the data a __fatBinC_Wrapper_t points at) */
};
/* The preload sends HOSTMEM_ADD (sync) for a region holding the fatbin, then
 * this record, then HOSTMEM_REMOVE (sync): the executor must have copied or
 * loaded the image by the time it handles the remove. */
struct phos_module_load_shm {
	uint32_t module;
	uint32_t region;    /* PHOS_OP_HOSTMEM_ADD id */
	uint64_t offset;    /* of the fatbin in the region (0 today) */
	uint64_t len;       /* fatbin bytes */
};
struct phos_func_register {
	uint32_t module, func;
	/* payload: NUL-terminated device name (mangled) */
};
struct phos_var_register {
	uint32_t module, var;
	uint64_t size;
	uint32_t constant;
	uint32_t _pad;
	/* payload: NUL-terminated device name */
};

#define PHOS_MAX_PARAMS 64
struct phos_reply_func_info {
	uint32_t nparams;
	uint32_t param_bytes;          /* size of the packed parameter buffer */
	uint16_t offset[PHOS_MAX_PARAMS];
	uint16_t size[PHOS_MAX_PARAMS];
	/* cudaFuncAttributes, as the driver reports them */
	int32_t max_threads, num_regs, shared_bytes, const_bytes, local_bytes;
	int32_t ptx_version, binary_version, max_dynamic_shared;
	int32_t carveout;              /* preferred shared memory carveout, -1: none */
	int32_t cluster_must_be_set;
	int32_t cluster_dim[3];        /* required cluster width, height, depth; 0: any */
	int32_t cluster_non_portable;  /* non-portable cluster sizes allowed */
	int32_t cluster_policy;        /* cluster scheduling policy preference */
	int32_t _pad;
};
struct phos_func_attr { uint32_t func; int32_t attr; int32_t value; uint32_t _pad; };
struct phos_occupancy { uint32_t func; int32_t block; uint64_t dyn_shared; };
struct phos_reply_var_info { uint64_t addr, size; };
/* cudaOccupancyMaxActiveClusters (potential 0: clusters of cluster[] that can
 * be resident at once) and cudaOccupancyMaxPotentialClusterSize (potential
 * 1: the largest cluster size); cluster[] all 0: the kernel's own. */
struct phos_occupancy_cluster {
	uint32_t func;
	uint32_t potential;
	uint32_t grid[3], block[3], cluster[3];
	uint32_t shared;
};

struct phos_launch {
	uint32_t func;
	uint32_t stream;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared;
	uint32_t param_bytes;
	/* payload: param_bytes of packed parameters, at the offsets FUNC_INFO gave */
};

/* cudaLaunchKernelEx / cudaLaunchCooperativeKernel: a launch with the
 * attributes that change how the grid runs. Hints that do not (priority,
 * programmatic serialization, memory sync domains) are accepted by the
 * preload and not sent. */
enum phos_launch_flags {
	PHOS_LAUNCH_COOPERATIVE = 1u << 0, /* grid-wide sync: all blocks resident at once */
	PHOS_LAUNCH_CLUSTER = 1u << 1,     /* cluster[] holds the cluster dimensions */
};
struct phos_launch_ex {
	struct phos_launch l;
	uint32_t flags;           /* enum phos_launch_flags */
	uint32_t cluster[3];
	/* payload: l.param_bytes of packed parameters */
};

/* --- CUDA graphs made on the device (PHOS_OP_GRAPH_*) ---
 *
 * A graph is a list of nodes in an order where every node comes after its
 * dependencies. The body graphs of a conditional node follow it: a node names
 * the conditional node (parent) and the body it is in; a node of the
 * instantiated graph itself has parent PHOS_GRAPH_ROOT. Dependencies are
 * earlier nodes of the same body. Child graphs are flattened by the preload.
 *
 * Conditional handles: the preload hands the program values of its own
 * (PHOS_GRAPH_COND_TAG | n), which kernels get as 8-byte arguments; the
 * executor writes the device's handle over every 8-byte argument of a kernel
 * node that holds one of the graph's values, so the program never holds a
 * device handle, and a graph made again in another executor (a restore)
 * works with the values the program kept. */
#define PHOS_GRAPH_ROOT UINT32_MAX
#define PHOS_GRAPH_COND_TAG 0x70686f7300000000ull   /* "phos" in the high half */
#define PHOS_GRAPH_COND_MASK 0xffffffff00000000ull
#define PHOS_GRAPH_MAX_NODES 65536u
#define PHOS_GRAPH_MAX_BODIES 256u      /* of one switch node */

enum phos_gnode_kind {
	PHOS_GNODE_EMPTY = 0,
	PHOS_GNODE_KERNEL,        /* a plain launch */
	PHOS_GNODE_COPY,          /* device to device, 1D */
	PHOS_GNODE_SET,           /* cudaMemsetParams */
	PHOS_GNODE_EVENT_RECORD,  /* the instantiated graph only */
	PHOS_GNODE_EVENT_WAIT,
	PHOS_GNODE_COND,          /* cudaConditionalNodeParams: type, size bodies */
	PHOS_GNODE_HOSTCOPY,      /* 1D, between the device and a shared host region */
};

enum phos_gcond_type { PHOS_GCOND_IF = 0, PHOS_GCOND_WHILE = 1, PHOS_GCOND_SWITCH = 2 };

struct phos_graph_node {
	uint32_t kind;            /* enum phos_gnode_kind */
	uint32_t parent;          /* the conditional node whose body holds it, or PHOS_GRAPH_ROOT */
	uint32_t body;            /* which of parent's bodies (0 for the root) */
	uint32_t ndeps;           /* its entries of the dependency list, in node order */
	union {
		struct {
			uint32_t func;
			uint32_t grid[3];
			uint32_t block[3];
			uint32_t shared;
			uint32_t param_bytes;   /* its parameters, next in the parameter bytes */
		} k;
		struct { uint64_t dst, src, len; } copy;
		struct { uint64_t dev, offset, len; uint32_t region, h2d; } hcopy;
		struct { uint64_t dst, pitch, width, height; uint32_t value, elem; } set;
		struct { uint32_t event; } ev;
		struct { uint32_t cond, type, size; } cond;   /* cond: index in the handle list */
	};
};

struct phos_graph_cond {
	uint64_t handle;          /* the preload's value */
	uint32_t parent, body;    /* the graph it was made on, as a node's */
	uint32_t deflt, flags;    /* cudaGraphConditionalHandleCreate's */
};

struct phos_graph_build {
	uint32_t graph;           /* the preload's id (1, 2, ...) */
	uint32_t nconds, nnodes, ndeps;
	uint32_t param_bytes;     /* of every kernel node, in node order */
	uint32_t _pad;
	/* payload: phos_graph_cond[nconds], phos_graph_node[nnodes],
	 * uint32_t deps[ndeps] (padded to 8 bytes), param_bytes bytes */
};

struct phos_graph_launch {
	uint32_t graph;
	uint32_t stream;
};

#define PHOS_POOL_DEFAULT 1u   /* the default pool of device 0 */
/* cudaMemPoolAttr values */
enum phos_pool_attr_kind {
	PHOS_POOL_REUSE_FOLLOW_EVENTS = 1,
	PHOS_POOL_REUSE_OPPORTUNISTIC = 2,
	PHOS_POOL_REUSE_INTERNAL_DEPS = 3,
	PHOS_POOL_RELEASE_THRESHOLD = 4,
	PHOS_POOL_RESERVED_CURRENT = 5,
	PHOS_POOL_RESERVED_HIGH = 6,
	PHOS_POOL_USED_CURRENT = 7,
	PHOS_POOL_USED_HIGH = 8,
};
struct phos_pool_create { uint32_t pool; uint32_t _pad; uint64_t max_size; /* 0: no limit */ };
struct phos_pool_malloc { uint32_t pool, stream; uint64_t size; };
struct phos_pool_free { uint64_t addr; uint32_t stream; uint32_t _pad; };
struct phos_pool_attr { uint32_t pool; int32_t attr; uint64_t value; };
struct phos_pool_adopt { uint32_t pool; uint32_t _pad; uint64_t addr; };

struct phos_host_func { uint32_t stream; uint32_t seq; };

struct phos_blas_set { uint32_t handle; int32_t value; /* stream id or math mode */ };
struct phos_blas_workspace { uint32_t handle; uint32_t _pad; uint64_t addr, size; };

/* One GEMM form covers Sgemm, GemmEx, their strided batched variants and the
 * pointer-array batched ones (SgemmBatched, GemmBatchedEx: arrays set, a/b/c
 * are device arrays of batch pointers, strides unused). */
struct phos_blas_gemm {
	uint32_t handle;
	int32_t transa, transb;
	int32_t m, n, k;
	int32_t atype, btype, ctype;   /* cudaDataType; CUDA_R_32F for Sgemm */
	int32_t compute;               /* cublasComputeType_t; CUBLAS_COMPUTE_32F for Sgemm */
	int32_t algo;
	int32_t lda, ldb, ldc;
	int32_t batch;                 /* 1 when not batched */
	uint32_t arrays;               /* 1: a, b, c are device arrays of pointers */
	uint32_t _pad;
	int64_t stride_a, stride_b, stride_c; /* in elements */
	uint64_t a, b, c;
	double alpha, beta;            /* host-pointer mode scalars, widened (real parts) */
	/* appended: complex scalars and device pointer mode */
	double alpha_im, beta_im;      /* imaginary parts, complex types only */
	uint64_t alpha_addr, beta_addr;/* device pointer mode: the scalars are read there */
	uint32_t dev_scalars;          /* 1: alpha_addr/beta_addr hold the scalars */
	uint32_t _pad2;
};

enum phos_blas_l1_kind { PHOS_BLAS_SAXPY, PHOS_BLAS_SSCAL, PHOS_BLAS_SDOT, PHOS_BLAS_SNRM2 };
struct phos_blas_l1 {
	uint32_t handle;
	int32_t kind;                  /* enum phos_blas_l1_kind */
	int32_t n, incx, incy;
	uint32_t _pad;
	uint64_t x, y;
	double alpha;
	/* SDOT/SNRM2 are sent synchronously and reply one float */
};

struct phos_blas_gemv {
	uint32_t handle;
	int32_t trans, m, n, lda, incx, incy;
	uint32_t _pad;
	uint64_t a, x, y;
	double alpha, beta;
};

/* cublasSet/GetVector/Matrix[Async]: one block of rows x cols elements of
 * elem bytes at dev, columns ld elements apart in device memory (a vector is
 * rows = 1, ld = its increment). The host side travels packed (column after
 * column) in the payload or reply; the preload splits big transfers into
 * blocks that fit one record. */
struct phos_blas_matrix {
	uint64_t dev;
	int32_t rows, cols, elem, ld;
	uint32_t stream;
	uint32_t _pad;
};

/* Level 1-3 routines, one record for every precision: type says which
 * (CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F). */
enum phos_blas_fn {
	PHOS_BLAS_AXPY,   /* y += alpha x */
	PHOS_BLAS_SCAL,   /* x *= alpha (alpha of scal_type: real for Csscal/Zdscal) */
	PHOS_BLAS_DOT,    /* result = x . y (dotu for complex) */
	PHOS_BLAS_DOTC,   /* result = conj(x) . y */
	PHOS_BLAS_NRM2,   /* result (real) = ||x||_2 */
	PHOS_BLAS_ASUM,   /* result (real) = sum |re| + |im| */
	PHOS_BLAS_AMAX,   /* result (int, 1-based) = first index of max |re| + |im| */
	PHOS_BLAS_AMIN,
	PHOS_BLAS_COPY,   /* y = x */
	PHOS_BLAS_SWAP,   /* x <-> y */
	PHOS_BLAS_GEMV,   /* y = alpha op(A) x + beta y, A m x n */
	PHOS_BLAS_GER,    /* A += alpha x y^T (geru for complex), A m x n */
	PHOS_BLAS_GERC,   /* A += alpha x y^H */
	PHOS_BLAS_TRSM,   /* op(A) X = alpha B (left) or X op(A) = alpha B (right); B m x n */
	PHOS_BLAS_SYMV,   /* y = alpha A x + beta y, A n x n symmetric (uplo: the half stored) */
	PHOS_BLAS_HEMV,   /* the same, A Hermitian (C, Z) */
	PHOS_BLAS_SYRK,   /* C = alpha op(A) op(A)^T + beta C; C n x n (b, ldb), op(A) n x k (k in m) */
	PHOS_BLAS_HERK,   /* C = alpha op(A) op(A)^H + beta C, alpha and beta real (C, Z) */
	PHOS_BLAS_ROT,    /* (x, y) = (c x + s y, c y - conj(s) x); c = alpha[0], s = beta (real
	                   * for srot, drot, csrot, zdrot: scal_type real; complex for crot, zrot) */
	PHOS_BLAS_SYMM,   /* C = alpha A B + beta C (side left) or alpha B A + beta C (right), A
	                   * symmetric (uplo), B and C m x n */
	PHOS_BLAS_HEMM,   /* the same, A Hermitian (C, Z) */
	PHOS_BLAS_SYR2K,  /* C = alpha (op(A) op(B)^T + op(B) op(A)^T) + beta C; C n x n, op(A),
	                   * op(B) n x k */
	PHOS_BLAS_HER2K,  /* C = alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C, beta real */
	PHOS_BLAS_TRMM,   /* C = alpha op(A) B (left) or alpha B op(A) (right), A triangular (uplo,
	                   * diag), B and C m x n (C may be B) */
	PHOS_BLAS_SYR,    /* A += alpha x x^T on A's uplo triangle, A n x n */
	PHOS_BLAS_HER,    /* A += alpha x x^H, alpha real (C, Z) */
	PHOS_BLAS_SYR2,   /* A += alpha (x y^T + y x^T) */
	PHOS_BLAS_HER2,   /* A += alpha x y^H + conj(alpha) y x^H (C, Z) */
	PHOS_BLAS_TRMV,   /* x = op(A) x, A n x n triangular (uplo, diag) */
	PHOS_BLAS_TRSV,   /* x = op(A)^-1 x */
	PHOS_BLAS_TRSM_BATCHED, /* TRSM on each of batch pairs: a and b are device arrays of batch
	                         * pointers to the A and B matrices */
	PHOS_BLAS_FN__COUNT
};
struct phos_blas_op {
	uint32_t handle;
	int32_t fn;                    /* enum phos_blas_fn */
	int32_t type;                  /* cudaDataType of the vectors and matrices */
	int32_t scal_type;             /* cudaDataType of alpha/beta (== type but for Csscal, Zdscal) */
	int32_t m, n;
	int32_t incx, incy;
	int32_t lda, ldb;
	int32_t trans, side, uplo, diag; /* cuBLAS enum values */
	uint32_t dev_scalars;          /* 1: alpha/beta are read from alpha_addr/beta_addr */
	uint32_t dev_result;           /* 1: the result goes to device memory at result */
	uint64_t x, y, a, b;           /* device addresses (TRSM: a and b) */
	uint64_t result;
	uint64_t alpha_addr, beta_addr;
	double alpha[2], beta[2];      /* host pointer mode: real and imaginary parts */
	uint64_t c;                    /* SYMM, HEMM, SYR2K, HER2K, TRMM: C, ldc; SYR2K, HER2K: k */
	int32_t ldc, k;
	int32_t batch;                 /* TRSM_BATCHED: the pointers in a and in b */
	uint32_t _pad;
	/* DOT/DOTC/NRM2/ASUM/AMAX/AMIN without dev_result are sent synchronously and
	 * reply their result: one element of type (DOT, DOTC), of its real type
	 * (NRM2, ASUM) or an int32 (AMAX, AMIN) */
};

/* Batched LU and QR routines (S, D) on device arrays of matrix pointers, as
 * the pointer-array GEMMs: the executor reads the arrays to know the matrices. */
enum phos_blas_lu_fn {
	PHOS_BLAS_GETRF,  /* a[i] (n x n) = P L U in place; pivots, info written */
	PHOS_BLAS_GETRI,  /* c[i] = inverse from getrf's a[i] and pivots; info written */
	PHOS_BLAS_GETRS,  /* b[i] (n x nrhs) = op(A)^-1 b[i] from getrf's a[i] and pivots */
	PHOS_BLAS_MATINV, /* c[i] = a[i]^-1 (n <= 32); a[i] is not changed; info written */
	PHOS_BLAS_GEQRF,  /* a[i] (m x n) = Q R in place, LAPACK geqrf's form; c[i]: its tau,
	                   * min(m, n) elements written; no pivots, no device info */
	PHOS_BLAS_GELS,   /* least squares, trans N, m >= n: a[i] (m x n) = Q R in place, c[i]
	                   * (m x nrhs, ldc) = its first n rows the solution; info: optional */
};
struct phos_blas_lu {
	uint32_t handle;
	int32_t fn;                    /* enum phos_blas_lu_fn */
	int32_t type;                  /* CUDA_R_32F or CUDA_R_64F */
	int32_t n, nrhs, trans;
	int32_t lda, ldc;              /* ldc: of c[i] (GETRI, MATINV) or b[i] (GETRS) */
	int32_t batch;
	int32_t m;                     /* GEQRF, GELS: the rows of a[i] (the others: n) */
	uint64_t a, c;                 /* device arrays of batch pointers (c: the b array of GETRS,
	                                * the tau array of GEQRF, the c array of GELS) */
	uint64_t pivots;               /* n * batch int32 in device memory, 0: no pivoting */
	uint64_t info;                 /* batch int32 in device memory (not GETRS, GEQRF; GELS: 0
	                                * when the caller passed no devInfoArray) */
};
/* --- cuBLASLt records ---
 * A matrix layout (cublasLtMatrixLayout_t's attributes). */
struct phos_blaslt_layout {
	int32_t type;                  /* cudaDataType */
	int32_t order;                 /* cublasLtOrder_t: COL (0) and ROW (1) are forwarded */
	int32_t batch;                 /* BATCH_COUNT, >= 1 */
	int32_t _pad;
	uint64_t rows, cols;
	int64_t ld;                    /* elements between columns (COL) or rows (ROW) */
	int64_t stride;                /* STRIDED_BATCH_OFFSET, elements between batch members */
};
/* A matmul descriptor (cublasLtMatmulDesc_t's attributes), every field as the
 * user set it; pointers are device addresses, 0 when unset. */
struct phos_blaslt_desc {
	int32_t compute;               /* cublasComputeType_t */
	int32_t scale_type;            /* cudaDataType of alpha, beta */
	int32_t pointer_mode;          /* cublasLtPointerMode_t */
	int32_t transa, transb;        /* cublasOperation_t */
	int32_t epilogue;              /* cublasLtEpilogue_t */
	int32_t bias_type;             /* BIAS_DATA_TYPE, -1: unset (cuBLASLt's default) */
	int32_t aux_type;              /* EPILOGUE_AUX_DATA_TYPE, -1: unset */
	int32_t sm_count;              /* SM_COUNT_TARGET, 0: unset */
	int32_t fast_accum;            /* FAST_ACCUM (FP8) */
	int32_t unsupported;           /* 1 + the first attribute set to a value phos does not
	                                * forward (TRANSC, FILL_MODE, block scales, ...), 0: none */
	int32_t _pad;
	int64_t bias_stride;           /* BIAS_BATCH_STRIDE, elements */
	int64_t aux_ld, aux_stride;    /* EPILOGUE_AUX_LD, EPILOGUE_AUX_BATCH_STRIDE, elements */
	int64_t alpha_stride;          /* ALPHA_VECTOR_BATCH_STRIDE, elements */
	uint64_t bias, aux;            /* BIAS_POINTER, EPILOGUE_AUX_POINTER */
	uint64_t scale[4];             /* A, B, C, D_SCALE_POINTER: one scale_type-sized float each */
	uint64_t amax_d;               /* AMAX_D_POINTER: one float, written */
};
/* cublasLtMatmul: D = epilogue(alpha op(A) op(B) + beta C). */
struct phos_blaslt_matmul {
	uint32_t stream;
	uint32_t has_algo;             /* 0: cuBLASLt chooses (algo NULL) */
	struct phos_blaslt_desc desc;
	struct phos_blaslt_layout la, lb, lc, ld;
	uint64_t a, b, c, d;
	uint64_t workspace, workspace_size;
	uint64_t alpha_addr, beta_addr;/* device pointer modes: where the scalars are */
	uint8_t alpha[16], beta[16];   /* host pointer mode: the scalars' bytes (scale_type) */
	uint64_t algo[8];              /* cublasLtMatmulAlgo_t, as a heuristic gave it */
};
#define PHOS_BLASLT_MAX_RESULTS 64
/* cublasLtMatmulAlgoGetHeuristic: the problem and the preference. */
struct phos_blaslt_heuristic {
	struct phos_blaslt_desc desc;
	struct phos_blaslt_layout la, lb, lc, ld;
	uint64_t max_workspace;        /* MATMUL_PREF_MAX_WORKSPACE_BYTES */
	uint64_t impl_mask;            /* MATMUL_PREF_IMPL_MASK, 0: unset */
	uint32_t align[4];             /* MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, 0: unset */
	int32_t search_mode;           /* MATMUL_PREF_SEARCH_MODE */
	int32_t requested;             /* 1..PHOS_BLASLT_MAX_RESULTS */
	float max_waves;               /* MATMUL_PREF_MAX_WAVES_COUNT, 0: unset */
	uint32_t _pad;
};

/* --- cuDNN (PHOS_OP_DNN_*, runtime/libs/cudnn_abi.h) --- */
struct phos_reply_dnn_version {
	uint64_t version;              /* cudnnGetVersion */
	uint64_t max_device_version;   /* cudnnGetMaxDeviceVersion */
};
struct phos_dnn_handle { uint32_t id; int32_t device; };
struct phos_dnn_desc { uint32_t id; int32_t type; };   /* cudnnBackendDescriptorType_t */
/* cudnnBackendSetAttribute / GetAttribute: count elements of type (set), or
 * up to count wanted (get). */
struct phos_dnn_attr {
	uint32_t desc;
	int32_t name;                  /* cudnnBackendAttributeName_t */
	int32_t type;                  /* cudnnBackendAttributeType_t */
	uint32_t _pad;
	int64_t count;
};
#define PHOS_DNN_MAX_ELEMS 65536
/* cudnnBackendExecute: the plan, and the variant pack the preload kept. */
struct phos_dnn_execute {
	uint32_t handle, plan, stream, n;   /* n entries follow (<= PHOS_DNN_MAX_VP) */
	uint64_t workspace;
	uint32_t opaque;                    /* 1: no exact set (a tensor of the pack not found) */
	uint32_t _pad;
};
#define PHOS_DNN_MAX_VP 256
struct phos_dnn_vp_entry {
	int64_t uid;
	uint64_t ptr;                  /* device address (value_len 0) */
	uint64_t bytes;                /* what the tensor spans from ptr (read and written) */
	uint32_t value_off, value_len; /* by value: its bytes in the payload after the entries */
};
/* A legacy cudnnTensorDescriptor_t, by value. */
struct phos_dnn_tensor {
	int32_t type, nb;              /* cudnnDataType_t, dimensions (0: unset) */
	int32_t dims[8], strides[8];
};
/* The bytes a legacy descriptor spans (phos_dnn_span, strides of at least 1). */
static inline bool phos_dnn_tensor_bytes(const struct phos_dnn_tensor *t, uint64_t *ret)
{
	int64_t dims[8], strides[8];

	if (t->nb < 1 || t->nb > 8)
		return false;
	for (int i = 0; i < t->nb; i++) {
		dims[i] = t->dims[i];
		strides[i] = t->strides[i];
	}
	return phos_dnn_span(t->nb, dims, strides, 1, phos_dnn_data_type_size(t->type), ret, NULL);
}
enum phos_dnn_bn_kind {
	PHOS_DNN_BN_INFERENCE,         /* cudnnBatchNormalizationForwardInference */
	PHOS_DNN_BN_TRAINING,          /* ...ForwardTrainingEx;  size: its workspace */
	PHOS_DNN_BN_BACKWARD,          /* ...BackwardEx;         size: its workspace */
	PHOS_DNN_BN_RESERVE,           /* size only: cudnnGetBatchNormalizationTrainingExReserveSpaceSize */
};
/* A batch normalization (bnOps BN, no z, no activation). Scalars are the
 * host's bytes: double for double data, float otherwise. */
struct phos_dnn_bn {
	uint32_t handle, stream;
	int32_t kind, mode;            /* phos_dnn_bn_kind, cudnnBatchNormMode_t */
	struct phos_dnn_tensor x, y, bn, dy, dx;   /* bn: scale, bias, means and variances */
	uint64_t px, py, pdy, pdx;
	uint64_t scale, bias, mean, var;           /* inference: estimated; training: running (0: none) */
	uint64_t save_mean, save_inv_var;          /* training: written; backward: read (0: none) */
	uint64_t dscale, dbias;
	uint64_t workspace, workspace_bytes, reserve, reserve_bytes;
	double factor, epsilon;
	uint8_t alpha[8], beta[8], alpha_param[8], beta_param[8];
};

enum phos_dnn_stf_kind {
	PHOS_DNN_STF_GRID,             /* cudnnSpatialTfGridGeneratorForward: theta -> grid */
	PHOS_DNN_STF_GRID_BACKWARD,    /* ...GridGeneratorBackward: dgrid -> dtheta */
	PHOS_DNN_STF_SAMPLE,           /* cudnnSpatialTfSamplerForward: x, grid -> y */
	PHOS_DNN_STF_SAMPLE_BACKWARD,  /* ...SamplerBackward: x, dy, grid -> dx, dgrid */
};
/* A spatial transformer call (the legacy API's grid_sample and
 * affine_grid). The descriptor by value: bilinear sampling of 4-D data,
 * its output's N, C, H, W. theta: N x 2 x 3, grid and dgrid: N x H x W x 2
 * elements of its data type. Scalars as for batch normalization. */
struct phos_dnn_stf {
	uint32_t handle, stream;
	int32_t kind, sampler;         /* phos_dnn_stf_kind, cudnnSamplerType_t */
	int32_t type, nb;              /* the descriptor's data type; nb 4 */
	int32_t dims[4];
	struct phos_dnn_tensor x, y, dx, dy;   /* (those of its kind) */
	uint64_t theta, grid, px, py, pdx, pdy, dgrid, dtheta;
	uint8_t alpha[8], beta[8], alpha_dgrid[8], beta_dgrid[8];
};

/* cuDNN's RNN API (cuDNN 9: the v8 calls that PyTorch's nn.LSTM/GRU/RNN
 * make), every descriptor by value. */
enum phos_dnn_rnn_kind {
	PHOS_DNN_RNN_FORWARD,          /* cudnnRNNForward (fwd_mode) */
	PHOS_DNN_RNN_BACKWARD_DATA,    /* cudnnRNNBackwardData_v8 */
	PHOS_DNN_RNN_BACKWARD_WEIGHTS, /* cudnnRNNBackwardWeights_v8 (wgrad_mode) */
	PHOS_DNN_DROPOUT_INIT,         /* cudnnSetDropoutDescriptor with states: writes them */
	/* queries (PHOS_OP_DNN_RNN_ASK) */
	PHOS_DNN_RNN_WEIGHT_SPACE,     /* cudnnGetRNNWeightSpaceSize: size[0] */
	PHOS_DNN_RNN_TEMP_SPACE,       /* cudnnGetRNNTempSpaceSizes (fwd_mode, x): work, reserve */
	PHOS_DNN_RNN_WEIGHT_PARAMS,    /* cudnnGetRNNWeightParams (layer, lin, weights_bytes) */
	PHOS_DNN_DROPOUT_STATES_SIZE,  /* cudnnDropoutGetStatesSize: size[0] */
};
/* cudnnSetRNNDescriptor_v8's arguments, and its dropout descriptor's. */
struct phos_dnn_rnn_desc {
	int32_t algo, cell, bias, dir, input_mode;    /* cudnnRNNAlgo_t, ...Mode_t, ...BiasMode_t, ... */
	int32_t data_type, math_prec, math_type;      /* cudnnDataType_t x 2, cudnnMathType_t */
	int32_t input_size, hidden_size, proj_size, layers;
	uint32_t aux_flags;                           /* CUDNN_RNN_PADDED_IO_ENABLED (1) */
	float dropout;
	uint64_t states, states_bytes, seed;          /* states 0: none */
};
/* cudnnSetRNNDataDescriptor's; its batch sequence lengths travel after the record. */
struct phos_dnn_rnn_data {
	int32_t type, layout;          /* cudnnDataType_t, cudnnRNNDataLayout_t */
	int32_t max_seq, batch, vector;
	int32_t has_fill;              /* paddingFill given: fill holds its value */
	uint8_t fill[8];
};
struct phos_dnn_rnn {
	uint32_t handle, stream;
	int32_t kind;                  /* phos_dnn_rnn_kind */
	int32_t fwd_mode, wgrad_mode;  /* cudnnForwardMode_t, cudnnWgradMode_t */
	int32_t layer, lin;            /* WEIGHT_PARAMS: pseudoLayer, linLayerID */
	uint32_t _pad;
	struct phos_dnn_rnn_desc r;
	struct phos_dnn_rnn_data x, y; /* (the kinds that take them; batch lengths follow: x's, then y's) */
	struct phos_dnn_tensor h, c;   /* hx/hy/dhx/dhy, cx/...: nb 0 when not given */
	uint64_t dev_seq;              /* devSeqLengths (0: none): batch int32s */
	uint64_t px, py, pdx, pdy, hx, hy, dhx, dhy, cx, cy, dcx, dcy;
	uint64_t weights, weights_bytes, dweights;
	uint64_t work, work_bytes, reserve, reserve_bytes;
};
#define PHOS_DNN_RNN_BATCH_MAX 65536   /* sequences of a data descriptor */
#define PHOS_DNN_RNN_SIZE_MAX (1 << 24) /* input, hidden and projection sizes; layers <= 1024 */
struct phos_reply_dnn_rnn {
	uint64_t size[2];              /* WEIGHT_SPACE, TEMP_SPACE, DROPOUT_STATES_SIZE */
	int64_t m_off, b_off;          /* WEIGHT_PARAMS: from weightSpace; -1: NULL */
	struct phos_dnn_tensor m, b;   /* WEIGHT_PARAMS: the descriptors cuDNN filled */
};

/* cuDNN's CTC loss (cudnnCTCLoss with host arrays, cudnnCTCLoss_v8 with
 * device ones), its descriptor by value. api 7: after the record come the
 * labels (nlabels int32s, concatenated), the label lengths and the input
 * lengths (batch each, the batch being probs' second dimension). */
struct phos_dnn_ctc {
	uint32_t handle, stream;
	int32_t api;                   /* 7: cudnnCTCLoss, 8: cudnnCTCLoss_v8 */
	int32_t algo;                  /* cudnnCTCLossAlgo_t */
	int32_t set;                   /* the Set call that made the descriptor: 0 (plain), 1 (Ex), 8 or 9 */
	int32_t comp_type, norm_mode;  /* cudnnDataType_t, cudnnLossNormalizationMode_t */
	int32_t grad_mode;             /* cudnnNanPropagation_t (Ex, _v8), cudnnCTCGradMode_t (_v9) */
	int32_t max_label;             /* _v8, _v9 */
	int32_t nlabels;               /* api 7 */
	struct phos_dnn_tensor probs, grads;   /* T x B x A; grads nb 0: none */
	uint64_t pprobs, costs, pgrads, work, work_bytes;
	uint64_t labels, label_lengths, input_lengths;   /* api 8: device int32 arrays */
};
#define PHOS_DNN_CTC_LABELS_MAX (1 << 20)   /* labels of a legacy call */

/* One cublasLtMatmulHeuristicResult_t. */
struct phos_blaslt_result {
	uint64_t algo[8];
	uint64_t workspace_size;
	int32_t state;                 /* cublasStatus_t */
	float waves;
};

/* --- cuFFT (PHOS_OP_FFT_*, runtime/libs/fft_abi.h) ---
 * A plan as cufftXtMakePlanMany takes it, every form (cufftPlan1d ...
 * cufftMakePlanMany64) brought to this one. In the advanced layout the
 * element of index (x0, .., x[rank-1]) of transform b of a side starts at
 *
 *     b * dist + ((x0 * embed[1] + x1) * embed[2] + x2) * stride   (rank 3)
 *
 * elements from the side's pointer (embed[0] unused, as in cuFFT); the
 * basic layout packs each side, a real side of an in-place transform in
 * rows of 2 (n/2 + 1) elements (phos_fft_side_of). */
#define PHOS_FFT_ELEMS_MAX (1ll << 40)   /* of one transform, and batch */
struct phos_fft_plan {
	uint32_t id;                   /* the preload's plan id (FFT_SIZE: unused) */
	int32_t device;                /* the caller's device (cudaGetDevice) */
	int32_t type;                  /* cufftType */
	int32_t rank;                  /* 1 .. PHOS_FFT_RANK_MAX */
	uint32_t advanced;             /* 1: the advanced layout; 0: the basic one (inembed or onembed NULL) */
	uint32_t _pad;
	int64_t batch;
	int64_t n[PHOS_FFT_RANK_MAX];  /* slowest dimension first; 0 past rank */
	int64_t inembed[PHOS_FFT_RANK_MAX], onembed[PHOS_FFT_RANK_MAX];
	int64_t istride, idist, ostride, odist;
};
struct phos_fft_exec {
	uint32_t plan, stream;
	uint64_t in, out;              /* device addresses; equal: in place */
	int32_t direction;             /* C2C, Z2Z: PHOS_FFT_FORWARD or _INVERSE; the others: their own */
	uint32_t _pad;
};
struct phos_reply_fft_version { int32_t version, major, minor, patch; };

/* One side of a transform (its input or its output) in elements of esize
 * bytes: batch transforms dist apart, each of dims[0 .. rank) elements,
 * stride[k] apart along dimension k (slowest first). */
struct phos_fft_side {
	int32_t rank;
	uint32_t esize;                /* 4 (real float), 8 (complex float, real double), 16 (complex double) */
	bool is_complex;
	int64_t batch, dist;
	int64_t dims[PHOS_FFT_RANK_MAX], stride[PHOS_FFT_RANK_MAX];
};
/* The input side (output false) or the output side of plan p executed in
 * place or not, and in *ret_bytes the bytes it spans from its first
 * element. A complex side of a real transform holds n/2 + 1 elements on its
 * last dimension. False when p is no valid plan (type, rank, sizes over
 * PHOS_FFT_ELEMS_MAX, an embed or stride under 1, a dist under 0) or the
 * span overflows 64 bits. runtime/libs/fft_layout.c. */
bool phos_fft_side_of(const struct phos_fft_plan *p, bool output, bool in_place, struct phos_fft_side *ret,
		      uint64_t *ret_bytes);

/* --- cuSPARSE (PHOS_OP_SPARSE_*, runtime/libs/sparse_abi.h) ---
 * One call of the generic API with the whole description of its operands
 * (the preload's descriptors, copied). Element (i, j) of a dense matrix of
 * batch b lies b * batch_stride + (order COL ? i + j * ld : i * ld + j)
 * elements from values; a dense vector is a size x 1 column (ld = size).
 * A CSR matrix's batch b has its row offsets at offsets + b *
 * offsets_stride and its columns and values at b * values_stride (COO: its
 * row indices in offsets, one stride for all three). */
#define PHOS_SPARSE_ELEMS_MAX (1ll << 40)   /* rows, cols, nnz, ld, strides */
#define PHOS_SPARSE_BATCH_MAX (1 << 20)
enum phos_sparse_kind {
	PHOS_SPARSE_SPMV = 1,      /* y = alpha op(A) x + beta y: sp A, d[0] x, d[1] y */
	PHOS_SPARSE_SPMM,          /* C = alpha op(A) op(B) + beta C: sp A, d[0] B, d[1] C */
	PHOS_SPARSE_SDDMM,         /* C = alpha (op(A) op(B)) o spy(C) + beta C: d[0] A, d[1] B, sp C */
	PHOS_SPARSE_TO_DENSE,      /* B = A: sp A, d[0] B */
	PHOS_SPARSE_COO2CSR,       /* row offsets of sorted COO row indices: sp (32-bit, rows, nnz,
	                            * offsets = the COO rows, columns = the CSR offsets written) */
	PHOS_SPARSE_CSRSORT,       /* each row's columns sorted, P with them: sp (32-bit, rows, cols,
	                            * nnz, base, offsets, columns, values = P or 0) */
	PHOS_SPARSE_COOSORT,       /* sorted by row (stable), columns and P with them: sp (offsets =
	                            * the rows, columns, values = P or 0) */
	PHOS_SPARSE_IDENTITY,      /* P[i] = i: sp (nnz = n, values = P) */
	PHOS_SPARSE_SPGEMM_NNZ,    /* SpGEMM's structure: the nnz of C = alpha A B (CSR, op N, beta 0): sp A,
	                            * sp2[0] B, sp2[1] C (its size; arrays unused). PHOS_OP_SPARSE_SIZE's
	                            * answer, read on the call's stream: nothing is written */
	PHOS_SPARSE_SPGEMM,        /* C = alpha A B into C's arrays (offsets rows + 1, columns and values
	                            * of C's nnz, which must be SPGEMM_NNZ's): sp A, sp2[0] B, sp2[1] C. The
	                            * backend's own buffers; none of the program's */
	PHOS_SPARSE__KINDS
};
struct phos_sparse_spmat {
	int32_t format;                /* PHOS_SPARSE_FORMAT_CSR or _COO */
	int32_t offsets_type;          /* CSR row offsets' (COO row indices') index type */
	int32_t index_type;            /* column indices' */
	int32_t base;                  /* 0 or 1 */
	int32_t value_type;            /* cudaDataType */
	int32_t batch;                 /* >= 1 */
	int64_t rows, cols, nnz;
	uint64_t offsets, columns, values;   /* device addresses */
	int64_t offsets_stride, values_stride;   /* between batches, in elements */
};
struct phos_sparse_dnmat {
	int64_t rows, cols, ld;
	uint64_t values;
	int32_t value_type, order;     /* cudaDataType, PHOS_SPARSE_ORDER_* */
	int32_t batch, _pad;
	int64_t batch_stride;          /* in elements */
};
struct phos_sparse_call {
	uint32_t kind;                 /* enum phos_sparse_kind */
	uint32_t stream;
	int32_t device;                /* the caller's device (cudaGetDevice) */
	uint32_t preprocess;           /* SPMM, SDDMM: the _preprocess call, not the product */
	int32_t op_a, op_b;
	int32_t compute_type, alg;
	int32_t pointer_mode;          /* PHOS_SPARSE_POINTER_*: alpha, beta below or at the addresses */
	uint32_t _pad;
	double alpha, beta;            /* host mode: the values (a float's exactly) */
	uint64_t alpha_ptr, beta_ptr;  /* device mode: device addresses of compute_type values */
	uint64_t buffer;               /* the external buffer (0: none) */
	struct phos_sparse_spmat sp;
	struct phos_sparse_dnmat d[2];
	struct phos_sparse_spmat sp2[2];   /* SpGEMM: B and C */
};
struct phos_reply_sparse_version { int32_t version, major, minor, patch; };

/* The byte ranges a call reads and writes (at most PHOS_SPARSE_RANGES):
 * each operand's arrays at their exact extents (CSR offsets rows + 1
 * entries, columns and values nnz, a dense matrix from its first element
 * to its last, per batch), alpha and beta in device mode, and the external
 * buffer of buffer_bytes (read and written). y, C are written, and read
 * when beta may be non-zero. */
#define PHOS_SPARSE_RANGES 12
struct phos_sparse_range { uint64_t addr, len; bool read, write; };
/* 0 and the ranges in ret[0 .. *ret_n), or a cusparseStatus_t: INVALID_VALUE
 * for sizes that do not agree, a bad enum, an overflow;
 * NOT_SUPPORTED for a form not forwarded. runtime/libs/sparse_layout.c. */
int phos_sparse_ranges_of(const struct phos_sparse_call *c, uint64_t buffer_bytes, struct phos_sparse_range *ret,
			  uint32_t *ret_n);
/* Whether a call of kind takes an external buffer of the program's (all but
 * coo2csr, the identity permutation and SpGEMM's, which use the backend's). */
static inline bool phos_sparse_has_buffer(uint32_t kind)
{
	return kind != PHOS_SPARSE_COO2CSR && kind != PHOS_SPARSE_IDENTITY && kind != PHOS_SPARSE_SPGEMM_NNZ &&
	       kind != PHOS_SPARSE_SPGEMM;
}
/* The bytes a dense matrix spans (all its batches): false on a bad layout. */
bool phos_sparse_dnmat_bytes(const struct phos_sparse_dnmat *d, uint64_t *ret);
/* The dimensions of op(X) for a rows x cols X. */
static inline void phos_sparse_op_dims(int32_t op, int64_t rows, int64_t cols, int64_t *ret_r, int64_t *ret_c)
{
	*ret_r = op == PHOS_SPARSE_OP_N ? rows : cols;
	*ret_c = op == PHOS_SPARSE_OP_N ? cols : rows;
}
/* --- cuSOLVER dense (PHOS_OP_SOLVER_*, runtime/libs/solver_abi.h) ---
 * One call of the dense LAPACK-like API with its whole description. Every
 * matrix is column-major: element (i, j) lies i + j * ld elements from its
 * address, and spans from its first element to its last ((cols - 1) ld +
 * rows elements; none when it is empty). The legacy API's sizes are ints;
 * the 64-bit generic API's (cusolverDnX*, x64) are 64-bit, its pivots
 * int64_t, its workspaces in bytes, on the device and on the host. */
#define PHOS_SOLVER_ELEMS_MAX 0x7fffffffll   /* m, n, k, nrhs, ld, lwork */
#define PHOS_SOLVER_X64_MAX (1ll << 40)      /* the same, of the 64-bit API */
enum phos_solver_kind {
	PHOS_SOLVER_GETRF = 1, /* A = P L U: a (m x n, read, written), ipiv (min(m, n) ints, written;
	                        * 0: no pivoting), work */
	PHOS_SOLVER_GETRS,     /* op(A) X = B with getrf's factors: a (n x n, read), ipiv (n, read),
	                        * b (n x nrhs, read, written) */
	PHOS_SOLVER_POTRF,     /* A = L L^T (uplo lower) or U^T U: a (n x n, read, written), work */
	PHOS_SOLVER_POTRS,     /* A X = B with potrf's factor: a (n x n, read), b (n x nrhs, read, written) */
	PHOS_SOLVER_GEQRF,     /* A = Q R: a (m x n, read, written), tau (min(m, n), written), work */
	PHOS_SOLVER_ORGQR,     /* Q's first n columns from k reflectors: a (m x n, read, written),
	                        * tau (k, read), work */
	PHOS_SOLVER_ORMQR,     /* C = op(Q) C (side left) or C op(Q): a (nq x k, nq = m or n, read and
	                        * written: LAPACK may change it and put it back), tau (k, read),
	                        * b = C (m x n, read, written), work */
	PHOS_SOLVER_SYEVD,     /* A = V diag(w) V^T, w ascending: a (n x n, read, written: V or
	                        * destroyed), w (n, written), work; batched (x64 only: XsyevBatched,
	                        * batch >= 1): batch matrices lda n elements apart, w n apart, info
	                        * batch ints */
	PHOS_SOLVER_SYEVJ,     /* syevd by Jacobi, with its info's tol, max_sweeps, sort; batched
	                        * (batch >= 1, n <= 32): batch matrices lda n elements apart, w n
	                        * apart, info batch ints */
	PHOS_SOLVER_GESVDJ,    /* A = U diag(s) V^T by Jacobi: a (m x n, read, written: destroyed),
	                        * w = s (min(m, n), written), with jobz VECTOR u (m x m, econ m x
	                        * min(m, n); written) and v (n x n or n x min(m, n); written), work;
	                        * batched (m, n <= 32, no econ): each operand batch times, a lda n,
	                        * s min(m, n), u ldu m and v ldv n elements apart, info batch ints */
	PHOS_SOLVER_POTRF_BATCHED, /* potrf of each matrix a device array names: a (batch pointers, each
	                            * to an n x n, read, written), info batch ints; no workspace */
	PHOS_SOLVER_POTRS_BATCHED, /* potrs of each: a (the factors' pointers, read), b (batch pointers,
	                            * each to an n x nrhs, nrhs 1, read, written), info one int */
	PHOS_SOLVER__KINDS
};
struct phos_solver_call {
	uint32_t kind;                 /* enum phos_solver_kind */
	uint32_t stream;
	int32_t device;                /* the caller's device (cudaGetDevice at cusolverDnCreate) */
	int32_t type;                  /* PHOS_SOLVER_R_32F or _R_64F: every matrix's and vector's */
	int32_t uplo, trans, side, jobz;
	uint32_t query;                /* a _bufferSize's: pointers may be 0 (none is touched) */
	uint32_t x64;                  /* the 64-bit API: ipiv int64_t, lwork in bytes, host_bytes */
	int64_t m, n, k, nrhs;
	int64_t lda, ldb;              /* ldb: B's (getrs, potrs) or C's (ormqr) */
	int64_t lwork;                 /* workspace elements (x64: bytes) the program gave; -1 where the
	                                * call takes none as a parameter (getrf: its _bufferSize's) */
	int64_t host_bytes;            /* x64: the host workspace the program gave (the executor uses
	                                * its own of the size its library asks) */
	int64_t batch;                 /* SYEVJ, GESVDJ, SYEVD (x64): 0 for the plain call, the batch of a
	                                * Batched one */
	int64_t ldu, ldv;              /* GESVDJ: U's and V's leading dimensions */
	uint64_t u, v;                 /* GESVDJ: U and V (w is S) */
	double tol;                    /* SYEVJ, GESVDJ: the info's tolerance (0: the library's default) */
	int32_t max_sweeps, sort;      /* ... its sweeps (0: the default, 100) and sort (1: sorted) */
	int32_t econ, _pad2;           /* GESVDJ: economy-size U and V */
	uint64_t a, b, ipiv, tau, w, info, work;   /* device addresses (0: none) */
};
struct phos_reply_solver_version { int32_t version, major, minor, patch; };
struct phos_reply_solver_size { int64_t work, host; };   /* work: elements (x64: bytes); host: bytes */

/* The byte ranges a call reads and writes (at most PHOS_SOLVER_RANGES):
 * each operand at its exact extent (above), info's one int written, and
 * the workspace of work elements (x64: bytes) read and written (none for
 * 0). The host workspace of the 64-bit API is the executor's own. */
#define PHOS_SOLVER_RANGES 7
#define PHOS_SOLVER_BATCH_MAX (1 << 24)       /* of a Batched call */
#define PHOS_SOLVER_BATCHED_DIM 32            /* the most rows and columns of a Batched Jacobi call */
#define PHOS_SOLVER_ARRAY_MAX (1 << 16)       /* pointers of an array of a batched Cholesky */
struct phos_solver_range { uint64_t addr, len; bool read, write; };
/* 0 and the ranges in ret[0 .. *ret_n), or a cusolverStatus_t:
 * INVALID_VALUE for sizes or leading dimensions LAPACK's rules refuse, a
 * bad enum, a missing pointer (but in a query), a workspace given as 0;
 * NOT_SUPPORTED for a type not forwarded. runtime/libs/solver_layout.c. */
int phos_solver_ranges_of(const struct phos_solver_call *c, int64_t work, struct phos_solver_range *ret,
			  uint32_t *ret_n);
/* Whether a call of kind takes a workspace (all but the solves and the batched Cholesky). */
static inline bool phos_solver_has_work(uint32_t kind)
{
	return kind != PHOS_SOLVER_GETRS && kind != PHOS_SOLVER_POTRS && kind != PHOS_SOLVER_POTRF_BATCHED &&
	       kind != PHOS_SOLVER_POTRS_BATCHED;
}
/* A batched Cholesky names its matrices through arrays of device pointers:
 * phos_solver_ranges_of gives the arrays (read) and info; the bytes of each
 * matrix they name (a's, then b's: 0 for none) are these. False on a bad
 * call. */
bool phos_solver_array_spans(const struct phos_solver_call *c, uint64_t *ret_a, uint64_t *ret_b);
/* --- cuRAND (PHOS_OP_RAND_*, runtime/libs/rand_abi.h) --- */
#define PHOS_RAND_ELEMS_MAX (1ull << 40)   /* of one generate call */
struct phos_rand_create {
	uint32_t id;                   /* the preload's generator id */
	int32_t device;                /* the caller's device (cudaGetDevice) */
	int32_t type;                  /* curandRngType_t, a pseudorandom one */
	uint32_t _pad;
};
enum phos_rand_setting {
	PHOS_RAND_SET_SEED = 1,        /* curandSetPseudoRandomGeneratorSeed */
	PHOS_RAND_SET_OFFSET,          /* curandSetGeneratorOffset */
	PHOS_RAND_SET_ORDERING,        /* curandSetGeneratorOrdering */
};
struct phos_rand_set {
	uint32_t id, what;             /* phos_rand_setting */
	uint64_t value;
};
struct phos_rand_generate {
	uint32_t id, stream;
	uint32_t gen;                  /* enum phos_rand_gen */
	uint32_t _pad;
	uint64_t out;                  /* device address */
	uint64_t n;                    /* elements, 1 .. PHOS_RAND_ELEMS_MAX */
	double a, b;                   /* normal: mean, stddev; Poisson: lambda in a */
};
/* A generator's history, as the preload keeps it and replays it: settings,
 * calls, and repeats of the steps just before (a loop of calls is one block
 * and a count). A repeat's block is the last `what` settings and calls
 * replayed before it, at most PHOS_RAND_REPEAT_MAX of them; it is made
 * `value` more times. */
#define PHOS_RAND_REPEAT_MAX 16
#define PHOS_RAND_REPLAY_STEPS 1024    /* steps of one RAND_REPLAY record */
enum phos_rand_step_kind {
	PHOS_RAND_STEP_SET = 1,        /* what: phos_rand_setting, value: its value */
	PHOS_RAND_STEP_GEN,            /* what: phos_rand_gen, value: n, a and b */
	PHOS_RAND_STEP_REPEAT,         /* what: the block's steps, value: how many more times */
};
struct phos_rand_step {
	uint32_t kind, what;
	uint64_t value;
	double a, b;
};
struct phos_rand_replay {
	uint32_t id, nsteps;           /* + nsteps phos_rand_step, 1 .. PHOS_RAND_REPLAY_STEPS */
};
struct phos_reply_rand_version { int32_t version, major, minor, patch; };

/* --- NCCL records (values of ncclDataType_t, ncclRedOp_t: runtime/libs/nccl_abi.h) --- */
#define PHOS_NCCL_ID_BYTES 128
struct phos_nccl_init {
	uint32_t comm;      /* id chosen by the preload */
	int32_t nranks, rank;
	int32_t device;     /* the cudaGetDevice of the caller (0: executors own one device) */
	int32_t blocking;   /* from ncclConfig_t, or -1: no config given */
	int32_t cga_cluster_size, min_ctas, max_ctas; /* ncclConfig_t, INT_MIN: unset */
	uint32_t flags;     /* PHOS_NCCL_INIT_* */
	uint8_t id[PHOS_NCCL_ID_BYTES];
};
/* Its other ranks are not made with it, in one group of one thread: they
 * come from other threads or processes. */
#define PHOS_NCCL_INIT_APART 1u
/* Made again after a restore together with its peers, which are other threads
 * of the function: never from the executor's warm set. */
#define PHOS_NCCL_INIT_THREADS 2u
struct phos_nccl_split { uint32_t comm, newcomm; int32_t color, key; };
enum phos_nccl_end_how { PHOS_NCCL_FINALIZE = 1, PHOS_NCCL_DESTROY = 2, PHOS_NCCL_ABORT = 3 };
struct phos_nccl_end { uint32_t comm; uint32_t how; /* enum phos_nccl_end_how */ };
struct phos_reply_nccl_comm { int32_t nranks, rank, device, async_error; };
enum phos_nccl_coll_kind {
	PHOS_NCCL_ALL_REDUCE = 1, /* count elements in send, count in recv */
	PHOS_NCCL_BROADCAST,      /* count at root's send, count in every recv */
	PHOS_NCCL_REDUCE,         /* count in send, count in root's recv */
	PHOS_NCCL_ALL_GATHER,     /* count in send, nranks * count in recv */
	PHOS_NCCL_REDUCE_SCATTER, /* nranks * count in send, count in recv */
	PHOS_NCCL_SEND,           /* count from send to rank peer */
	PHOS_NCCL_RECV,           /* count into recv from rank peer */
};
struct phos_nccl_coll {
	uint32_t comm;
	uint32_t stream;
	int32_t kind;       /* enum phos_nccl_coll_kind */
	int32_t type;       /* ncclDataType_t */
	int32_t op;         /* ncclRedOp_t (reductions) */
	int32_t peer;       /* root (BROADCAST, REDUCE) or peer (SEND, RECV) */
	uint64_t count;
	uint64_t send, recv;/* device addresses (0 where the kind has none) */
};
struct phos_nccl_group { uint32_t start; uint32_t _pad; /* 1 start, 0 end */ };

/* Bytes from the first byte of a pitched side's first row to the end of its
 * last row, in *ret_extent (0 when width, height or depth is 0). Returns false
 * when the geometry is impossible (pitch < width with more than one row,
 * slices that overlap) or overflows 64 bits. Both the preload and the executor
 * check a pitched copy or set with it. */
bool phos_pitched_extent(uint64_t pitch, uint64_t slice, uint64_t width, uint64_t height, uint64_t depth,
			 uint64_t *ret_extent);

/* The element of a channel format (cudaChannelFormatDesc bits x, y, z, w and
 * kind): 1-4 channels of equal width, 8, 16 or 32 bits, signed, unsigned or
 * float (16 or 32 bits). Returns 0 with the channel count and bytes per
 * channel, or -1 for any other format (cudaChannelFormatKindNone, unequal or
 * odd widths, a gap between channels, the packed and compressed kinds). */
int phos_channel_format(const int32_t bits[4], int32_t kind, uint32_t *ret_channels, uint32_t *ret_channel_bytes);

/* An array's extent in elements, each dimension at least 1 (cudaMallocArray
 * takes height 0 for a 1D array, cudaMalloc3DArray depth 0 for a 2D one), and
 * its bytes when packed; false when a dimension is 0 or over 2^20 (no GPU
 * takes more), or the array would be over 1 TiB. */
bool phos_array_extent(const struct phos_array_create *a, uint32_t elem_bytes, uint64_t ret_dims[3],
		       uint64_t *ret_bytes);

/* The host window: managed memory (cudaMallocManaged) and pinned memory
 * (cudaMallocHost, cudaHostAlloc) live at the same addresses in the function
 * and in its executor, inside [arena_base +
 * arena_size + PHOS_HOST_WINDOW_GAP, + PHOS_HOST_WINDOW_SIZE) (the gap keeps
 * the sim device's variable region, 1-2 GiB past the arena, out), which every executor
 * reserves before it opens the device (so the driver keeps out of it) and
 * the preload reserves in the function at its first managed or pinned
 * allocation:
 * like the arena, the same range in every executor, so a restored function's
 * managed and pinned pointers are free in any new executor too. */
#define PHOS_HOST_WINDOW_SIZE (256ull << 30)
#define PHOS_HOST_WINDOW_GAP (4ull << 30)
static inline uint64_t phos_host_window_base(uint64_t arena_base, uint64_t arena_size)
{
	return arena_base + arena_size + PHOS_HOST_WINDOW_GAP;
}

/* Name of an op, for logs and traces ("launch", "memcpy_h2d", ...). */
const char *phos_op_name(uint32_t op);
