/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs in the function process (graph.c, graph_exec.c, graph_capture.c).
 *
 * A graph lives in the function process only. Its nodes hold what the
 * forwarded call would have sent, already checked (a kernel's packed
 * parameters, a copy's pointers and direction, ...); launching an
 * instantiated graph replays its nodes, one after the other in a topological
 * order, on the launch stream, through the same paths as the calls they stand
 * for. So every node is an ordinary record for the executor, with its own
 * exact (or opaque) read/write set: the set of a graph launch is the union of
 * its nodes', and on-demand restore and validation need nothing new.
 *
 *   cudaStreamBeginCapture(s)            cudaGraphAdd*Node(g, deps)
 *        │ launches, copies, sets,             │        (graph.c)
 *        │ host functions, events              │
 *        ▼ (graph_capture.c)                   ▼
 *     struct graph: nodes in creation order, each with its dependencies
 *        │ cudaGraphInstantiate: a copy of the nodes + a topological order
 *        ▼ (graph_exec.c)
 *     struct graph_exec ── cudaGraphLaunch(exec, stream): replay in that order
 *
 * Running the nodes one after the other is one valid schedule of the graph
 * (nodes without a path between them may run in any order, or at once): it
 * gives up the concurrency inside a graph, never correctness. An operation
 * that cannot be captured, issued on a capturing stream, is refused
 * (cudaErrorStreamCaptureUnsupported) and invalidates the capture, as CUDA
 * does for unsafe calls: it never runs eagerly behind the program's back.
 *
 * Snapshots: graphs and instantiated graphs are plain memory of the function
 * process (CRIU keeps them); what their nodes name (kernel ids, device
 * addresses, host functions, events) stays valid in a restored executor, and
 * copies to or from a module variable name the variable, not its address
 * (a restored executor may place variables anew), so a graph instantiated
 * before phos_fn_serve launches after a restore.
 *
 * Graphs, nodes and instantiated graphs are handed to the program as
 * pointers to these structs. Like CUDA, a graph may not be changed by two
 * threads at once; instantiated graphs have a lock of their own.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "internal.h"

enum gnode_kind {
	GN_KERNEL = cudaGraphNodeTypeKernel,
	GN_MEMCPY = cudaGraphNodeTypeMemcpy,
	GN_MEMSET = cudaGraphNodeTypeMemset,
	GN_HOST = cudaGraphNodeTypeHost,
	GN_CHILD = cudaGraphNodeTypeGraph,
	GN_EMPTY = cudaGraphNodeTypeEmpty,
	GN_EVENT_WAIT = cudaGraphNodeTypeWaitEvent,
	GN_EVENT_RECORD = cudaGraphNodeTypeEventRecord,
	GN_MEM_ALLOC = cudaGraphNodeTypeMemAlloc,
	GN_MEM_FREE = cudaGraphNodeTypeMemFree,
	GN_COND = cudaGraphNodeTypeConditional,   /* graphs with one are made on the device (graph_device.c) */
	/* a stream-ordered record of another stand-in (cuBLAS, cuBLASLt)
	 * captured from a stream; to the program it is a kernel node */
	GN_RECORD = 0x1000,
};

/* How a memcpy node copies. */
enum gcopy_form {
	CP_1D,          /* cudaMemcpyAsync(dst, src, count, kind) */
	CP_3D,          /* cudaMemcpy3DAsync(&p) (2D copies too) */
	CP_TO_SYMBOL,   /* cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind) */
	CP_FROM_SYMBOL, /* cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind) */
};

#define GN_ATTR_MAX 32
#define GN_NO_STREAM UINT32_MAX

struct gnode {
	struct graph *graph;
	size_t index;                 /* in graph->nodes */
	enum gnode_kind kind;
	bool disabled;                /* cudaGraphNodeSetEnabled(exec, node, 0): runs as an empty node */
	struct gnode **deps;
	size_t ndeps;
	union {
		struct {
			struct phos_launch_ex l;  /* stream unused */
			const void *func;         /* as the program named it */
			uint8_t *params;          /* l.l.param_bytes packed */
			void **args;              /* args[i] points into params (GetParams) */
			uint32_t nargs;
			/* values of the launch attributes set on the node (bit i of
			 * attr_set: attrs[i] holds attribute id i), for GetAttribute */
			uint32_t attr_set;
			cudaLaunchAttributeValue *attrs;  /* GN_ATTR_MAX, malloc'd when one is set */
		} k;
		struct {
			enum gcopy_form form;
			void *dst;
			const void *src;
			size_t count, offset;
			enum cudaMemcpyKind kind;
			const void *symbol;
			struct cudaMemcpy3DParms p;
		} c;
		struct cudaMemsetParams s;
		struct cudaHostNodeParams h;
		struct graph *child;          /* owned: a clone of the graph the program gave */
		cudaEvent_t event;
		struct gmem *mem;             /* the allocation (graph_mem.c), counted */
		struct {
			cudaGraphConditionalHandle handle;
			enum cudaGraphConditionalNodeType type;
			unsigned size;
			struct graph **bodies;    /* owned, size of them (phGraph_out) */
		} cond;
		struct {
			uint32_t op;
			uint32_t stream_off;      /* where the stream id goes in body, or GN_NO_STREAM */
			uint32_t len;
			uint8_t *body;            /* owned */
			const struct phos_graph_call_ops *ops;   /* NULL: body is a record to post */
		} rec;
	};
};

/* A conditional handle made on a graph (cudaGraphConditionalHandleCreate):
 * its value is the preload's (proto.h: PHOS_GRAPH_COND_TAG | n). */
struct gcond {
	cudaGraphConditionalHandle handle;
	unsigned deflt, flags;
};

struct graph {
	struct gnode **nodes;
	size_t n, cap;
	struct gnode *owner;          /* the conditional node whose body this is, or NULL */
	struct gcond *conds;          /* handles made on this graph */
	size_t nconds;
};

/* make_cudaPitchedPtr / make_cudaExtent (driver_functions.h is C++ only here) */
static inline struct cudaPitchedPtr pitched_ptr(void *ptr, size_t pitch, size_t xsize, size_t ysize)
{
	return (struct cudaPitchedPtr){ .ptr = ptr, .pitch = pitch, .xsize = xsize, .ysize = ysize };
}

static inline struct cudaExtent extent_of(size_t width, size_t height, size_t depth)
{
	return (struct cudaExtent){ .width = width, .height = height, .depth = depth };
}

/* cudaGraphNodeParams (CUDA 12.2+, cudaGraphAddNode and the generic
 * SetParams calls): reserved fields must be zero. */
static inline bool node_params_ok(const struct cudaGraphNodeParams *p)
{
	return p && !p->reserved0[0] && !p->reserved0[1] && !p->reserved0[2] && !p->reserved2;
}

/* The generic parameters of a kernel, memset or host node as the structure
 * of that node type's own calls. */
static inline struct cudaKernelNodeParams kernel_params_of(const struct cudaGraphNodeParams *p)
{
	return (struct cudaKernelNodeParams){ .func = p->kernel.func, .gridDim = p->kernel.gridDim,
					      .blockDim = p->kernel.blockDim,
					      .sharedMemBytes = p->kernel.sharedMemBytes,
					      .kernelParams = p->kernel.kernelParams, .extra = p->kernel.extra };
}

static inline struct cudaMemsetParams memset_params_of(const struct cudaGraphNodeParams *p)
{
	return (struct cudaMemsetParams){ .dst = p->memset.dst, .pitch = p->memset.pitch, .value = p->memset.value,
					  .elementSize = p->memset.elementSize, .width = p->memset.width,
					  .height = p->memset.height };
}

static inline struct cudaHostNodeParams host_params_of(const struct cudaGraphNodeParams *p)
{
	return (struct cudaHostNodeParams){ .fn = p->host.fn, .userData = p->host.userData };
}

/* --- graph.c --- */

struct graph *graph_new(void);
/* Frees g and its nodes (NULL is fine). */
void graph_free(struct graph *g);
/* A deep copy of g in *ret_copy; *ret_map (may be NULL) gets, for each node
 * index of g, the copy's node (malloc'd array). Returns a cudaError_t. */
int graph_clone(const struct graph *g, struct graph **ret_copy, struct gnode ***ret_map);
bool graph_has(const struct graph *g, const struct gnode *n);
/* Adds node (filled but for graph, index and deps) to g after deps. Takes
 * node: freed on failure. Returns a cudaError_t. */
int graph_add(struct graph *g, struct gnode *node, struct gnode *const *deps, size_t ndeps,
	      struct gnode **ret_node);
/* A topological order of g's node indices in *ret_order (malloc'd).
 * cudaErrorInvalidValue for a cycle. */
int graph_order(const struct graph *g, size_t **ret_order);
/* Frees what the kind-specific part of n owns (not n itself). */
void node_free_params(struct gnode *n);
/* Deep-copies the kind-specific part of src into dst (not its dependencies). */
int node_copy_params(struct gnode *dst, const struct gnode *src);
/* Makes n a kernel node of a launch that kernels.c checked and packed
 * (params: l->l.param_bytes bytes; offsets: of its nargs arguments). */
int node_kernel_set(struct gnode *n, const void *func, const struct phos_launch_ex *l, const void *params,
		    const uint16_t *offsets, uint32_t nargs);
/* Makes n a kernel node from cudaKernelNodeParams. */
int node_kernel_fill(struct gnode *n, const struct cudaKernelNodeParams *p);
/* Checks a memset node's parameters. */
int memset_params_check(const struct cudaMemsetParams *p);
/* New parameters for memcpy node n (3D form, or 1D). */
int memcpy_node_set_3d(struct gnode *n, const struct cudaMemcpy3DParms *p);
int memcpy_node_set_1d(struct gnode *n, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
/* ... or a copy to (to_symbol) or from a module variable; other: the host or
 * device side. */
int memcpy_node_set_symbol(struct gnode *n, const void *symbol, void *other, size_t count, size_t offset,
			   enum cudaMemcpyKind kind, bool to_symbol);

/* Does g, or a graph inside it, have a conditional node? */
bool graph_has_cond(const struct graph *g);

/* --- graph_device.c (graphs made on the device) --- */

struct gdev;
/* cudaGraphInstantiate: makes the instantiated graph g on the device
 * (*ret_device, its state in *state) when every node can be described,
 * unless PHOS_GRAPHS=replay; graphs with conditional nodes always. A graph
 * without them that cannot be made there is replayed (*ret_device false,
 * cudaSuccess); one with them gets the error (cudaErrorNotSupported, and
 * one line on stderr naming the node, for a node the device cannot be
 * given). */
int graph_device_instantiate(struct gdev **state, const struct graph *g, bool *ret_device);
/* Describes g to the executor again when its executor changed or the graph
 * did, and launches it on stream there. *ret_unbuilt: the error came from
 * describing or making the graph, and nothing was launched. */
int graph_device_launch(struct gdev **state, const struct graph *g, cudaStream_t stream, bool *ret_unbuilt);
/* The graph changed (its nodes' parameters): made again at its next launch. */
void graph_device_dirty(struct gdev *state);
/* Forgets the executor's graph (cudaGraphExecDestroy); accepts NULL. */
void graph_device_free(struct gdev *state);

/* --- graph_capture.c --- */

/* Adds node to the capture of stream (it depends on the stream's last
 * captured work and becomes it). Takes node. Returns a cudaError_t. */
int graph_capture_node(const void *stream, struct gnode *node);

/* The graph a capture of stream builds, or NULL when stream does not
 * capture (or its capture was invalidated). */
struct graph *graph_capture_graph(const void *stream);
/* The nodes the capturing stream's next node will depend on: a copy in *ret
 * (the caller frees it), or an error (cudaErrorIllegalState: not capturing). */
int graph_capture_frontier(const void *stream, struct gnode ***ret, size_t *ret_n);

/* --- graph_mem.c (memory nodes) --- */

struct gmem;
/* A memory node was copied (its allocation is named once more) or is gone. */
void gmem_node_copied(const struct gnode *n);
void gmem_node_gone(struct gnode *n);
/* What graph.c asks of this file, set from its constructor (graph.c stays
 * below it): a memory node copied or gone (above), and cudaGraphAddNode's
 * allocation and free nodes. */
struct gmem_ops {
	void (*copied)(const struct gnode *n);
	void (*gone)(struct gnode *n);
	cudaError_t (*add_alloc)(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
				 struct cudaMemAllocNodeParams *params);
	cudaError_t (*add_free)(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
				void *dptr);
};
extern struct gmem_ops gmem_ops;   /* (graph.c) */
/* graph.c: does g have allocation or free nodes (no clone, no child, no removal)? */
bool graph_has_mem_nodes(const struct graph *g);
/* cudaErrorNotSupported when g's allocations have an instantiation already. */
int gmem_instantiate_check(const struct graph *g);
/* Before a launch of g: an allocation still live from the last one fails it
 * (cudaErrorInvalidValue) unless auto_free frees it first. */
int gmem_launch_begin(const struct graph *g, bool auto_free);
/* A memory node runs: its allocation becomes live, or not live. */
int gmem_node_run(const struct gnode *n);

/* --- graph_exec.c --- */

/* Runs node n on stream now (or adds a copy to stream's capture). */
int graph_node_run(const struct gnode *n, cudaStream_t stream);
