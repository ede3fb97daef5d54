/* SPDX-License-Identifier: MIT */
/*
 * Instantiated graphs: cudaGraphInstantiate copies a graph and orders its
 * nodes; cudaGraphLaunch replays them on the launch stream, each through
 * the path of the call it stands for (graph_internal.h). The per-node
 * cudaGraphExec*SetParams calls and cudaGraphExecUpdate change the copy.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "graph_internal.h"

struct graph_exec {
	pthread_mutex_t lock;         /* launches and updates */
	struct graph *g;              /* the copy, in the original's creation order */
	struct gnode **orig;          /* orig[i]: the program's node that g->nodes[i] copies */
	size_t *order;                /* a topological order of g's indices */
	unsigned long long flags;
	bool device;                  /* made on the device (graph_device.c), not replayed */
	struct gdev *dev;             /* ... its state there */
};

#define GRAPH(g) ((struct graph *)(g))
#define NODE(n) ((struct gnode *)(n))
#define EXEC(x) ((struct graph_exec *)(x))

static void exec_free(struct graph_exec *x)
{
	if (!x)
		return;
	graph_device_free(x->dev);
	graph_free(x->g);
	free(x->orig);
	free(x->order);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

static int instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	struct graph *g = GRAPH(graph);
	struct graph_exec *x;
	struct gnode **map = NULL;
	int r;

	if (!pGraphExec || !g)
		return cudaErrorInvalidValue;
	/* AutoFreeOnLaunch frees memory nodes' allocations at each launch
	 * (graph_mem.c); uploads have nothing to do for replayed graphs;
	 * priorities are hints. Graphs launched from the device are not
	 * forwarded. */
	if (flags & cudaGraphInstantiateFlagDeviceLaunch)
		return cudaErrorNotSupported;
	if (flags & ~(unsigned long long)(cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
					  cudaGraphInstantiateFlagUseNodePriority))
		return cudaErrorInvalidValue;
	x = calloc(1, sizeof(*x));
	if (!x)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&x->lock, NULL);
	x->flags = flags;
	r = gmem_instantiate_check(g);
	if (r == cudaSuccess)
		r = graph_order(g, &x->order);
	if (r == cudaSuccess)
		r = graph_clone(g, &x->g, &map);
	if (r == cudaSuccess) {
		free(map);
		x->orig = malloc((g->n ? g->n : 1) * sizeof(*x->orig));
		if (!x->orig)
			r = cudaErrorMemoryAllocation;
		else
			memcpy(x->orig, g->nodes, g->n * sizeof(*x->orig));
	}
	if (r == cudaSuccess)
		r = graph_device_instantiate(&x->dev, x->g, &x->device);
	if (r) {
		exec_free(x);
		return r;
	}
	*pGraphExec = (cudaGraphExec_t)x;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	return phos_set_error(instantiate(pGraphExec, graph, flags));
}

PHOS_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						      unsigned long long flags)
{
	return phos_set_error(instantiate(pGraphExec, graph, flags));
}

PHOS_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						       cudaGraphInstantiateParams *p)
{
	int r;

	if (!p)
		return phos_set_error(cudaErrorInvalidValue);
	r = instantiate(pGraphExec, graph, p->flags);
	p->errNode_out = NULL;
	p->result_out = r == cudaSuccess ? cudaGraphInstantiateSuccess
			: r == cudaErrorInvalidValue ? cudaGraphInstantiateInvalidStructure
			: r == cudaErrorNotSupported ? cudaGraphInstantiateNodeOperationNotSupported
						      : cudaGraphInstantiateError;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags)
{
	if (!graphExec || !flags)
		return phos_set_error(cudaErrorInvalidValue);
	*flags = EXEC(graphExec)->flags;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	if (!graphExec)
		return phos_set_error(cudaErrorInvalidValue);
	exec_free(EXEC(graphExec));
	return cudaSuccess;
}

/* --- changing an instantiated graph --- */

/* The copy of the program's node in x, of kind `kind`, or NULL. */
static struct gnode *exec_node(struct graph_exec *x, const void *node, enum gnode_kind kind)
{
	if (!x || !node)
		return NULL;
	for (size_t i = 0; i < x->g->n; i++)
		if (x->orig[i] == node)
			return x->g->nodes[i]->kind == kind ? x->g->nodes[i] : NULL;
	return NULL;
}

PHOS_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							 const struct cudaKernelNodeParams *pNodeParams)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_KERNEL), tmp = { .kind = GN_EMPTY };
	int r;

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	r = node_kernel_fill(&tmp, pNodeParams);   /* checked and packed before anything changes */
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&x->lock);
	node_free_params(n);
	n->k = tmp.k;
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							 const struct cudaMemcpy3DParms *pNodeParams)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_MEMCPY);
	int r;

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	r = memcpy_node_set_3d(n, pNodeParams);
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void *dst,
							   const void *src, size_t count, enum cudaMemcpyKind kind)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_MEMCPY);
	int r;

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	/* CUDA keeps an instantiated copy's memory types (an H200 refuses a
	 * device-to-device copy changed into host memory: invalid argument) */
	if (n->c.form == CP_1D && (phos_mem_is_device(n->c.dst, n->c.count) != phos_mem_is_device(dst, count) ||
				   phos_mem_is_device(n->c.src, n->c.count) != phos_mem_is_device(src, count)))
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	r = memcpy_node_set_1d(n, dst, src, count, kind);
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							 const struct cudaMemsetParams *pNodeParams)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_MEMSET);
	int r = memset_params_check(pNodeParams);

	if (!r && !n)
		r = cudaErrorInvalidValue;
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&x->lock);
	n->s = *pNodeParams;
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						       const struct cudaHostNodeParams *pNodeParams)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_HOST);

	if (!n || !pNodeParams || !pNodeParams->fn)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	n->h = *pNodeParams;
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
								 const void *symbol, const void *src, size_t count,
								 size_t offset, enum cudaMemcpyKind kind)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_MEMCPY);
	int r;

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	r = memcpy_node_set_symbol(n, symbol, (void *)(uintptr_t)src, count, offset, kind, true);
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
								   void *dst, const void *symbol, size_t count,
								   size_t offset, enum cudaMemcpyKind kind)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_MEMCPY);
	int r;

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	r = memcpy_node_set_symbol(n, symbol, dst, count, offset, kind, false);
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return phos_set_error(r);
}

/* The copy of the program's node in x, of any kind, or NULL. */
static struct gnode *exec_node_any(struct graph_exec *x, const void *node)
{
	for (size_t i = 0; x && node && i < x->g->n; i++)
		if (x->orig[i] == node)
			return x->g->nodes[i];
	return NULL;
}

PHOS_EXPORT cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
						unsigned int isEnabled)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node_any(x, hNode);

	/* CUDA allows it for kernel, memcpy and memset nodes */
	if (!n || (n->kind != GN_KERNEL && n->kind != GN_MEMCPY && n->kind != GN_MEMSET))
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&x->lock);
	n->disabled = !isEnabled;
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
						unsigned int *isEnabled)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node_any(x, hNode);

	if (!n || !isEnabled || (n->kind != GN_KERNEL && n->kind != GN_MEMCPY && n->kind != GN_MEMSET))
		return phos_set_error(cudaErrorInvalidValue);
	*isEnabled = !n->disabled;
	return cudaSuccess;
}

static cudaError_t exec_event_set(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, cudaEvent_t event,
				  enum gnode_kind kind)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, kind);

	if (!n)
		return phos_set_error(cudaErrorInvalidValue);
	if (!phos_event_known(event))
		return phos_set_error(cudaErrorInvalidResourceHandle);
	pthread_mutex_lock(&x->lock);
	n->event = event;
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
							     cudaEvent_t event)
{
	return exec_event_set(hGraphExec, hNode, event, GN_EVENT_RECORD);
}

PHOS_EXPORT cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
							   cudaEvent_t event)
{
	return exec_event_set(hGraphExec, hNode, event, GN_EVENT_WAIT);
}

/* Do a and b have the same shape: as many nodes, of the same kinds, with the
 * same edges (by creation index), child graphs alike? */
static bool same_shape(const struct graph *a, const struct graph *b, enum cudaGraphExecUpdateResult *ret_why,
		       const struct gnode **ret_bad)
{
	if (a->n != b->n) {
		*ret_why = cudaGraphExecUpdateErrorTopologyChanged;
		return false;
	}
	for (size_t i = 0; i < a->n; i++) {
		const struct gnode *x = a->nodes[i], *y = b->nodes[i];
		bool same = x->ndeps == y->ndeps;

		*ret_bad = x;
		if (x->kind != y->kind) {
			*ret_why = cudaGraphExecUpdateErrorNodeTypeChanged;
			return false;
		}
		for (size_t d = 0; same && d < x->ndeps; d++)
			same = x->deps[d]->index == y->deps[d]->index;
		if ((x->kind == GN_MEM_ALLOC || x->kind == GN_MEM_FREE) && x->mem != y->mem) {
			*ret_why = cudaGraphExecUpdateErrorParametersChanged;   /* memory nodes stay */
			return false;
		}
		if (x->kind == GN_COND && (x->cond.handle != y->cond.handle || x->cond.type != y->cond.type ||
					   x->cond.size != y->cond.size)) {
			*ret_why = cudaGraphExecUpdateErrorParametersChanged;
			return false;
		}
		for (unsigned k = 0; same && x->kind == GN_COND && k < x->cond.size; k++)
			if (!same_shape(x->cond.bodies[k], y->cond.bodies[k], ret_why, ret_bad))
				return false;
		if (!same || (x->kind == GN_CHILD && !same_shape(x->child, y->child, ret_why, ret_bad))) {
			*ret_why = cudaGraphExecUpdateErrorTopologyChanged;
			return false;
		}
	}
	return true;
}

PHOS_EXPORT cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							     cudaGraph_t childGraph)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct gnode *n = exec_node(x, node, GN_CHILD);
	enum cudaGraphExecUpdateResult why;
	const struct gnode *bad;
	struct graph *c;
	int r;

	if (!n || !childGraph || !same_shape(n->child, GRAPH(childGraph), &why, &bad))
		return phos_set_error(cudaErrorInvalidValue); /* CUDA: the topology may not change */
	r = graph_clone(GRAPH(childGraph), &c, NULL);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&x->lock);
	graph_free(n->child);
	n->child = c;
	graph_device_dirty(x->dev);
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

/* Same topology: as many nodes, of the same kinds, with the same edges (by
 * creation index). Anything else is refused, as CUDA refuses a changed one,
 * and the instantiated graph stays as it was. */
PHOS_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
					    cudaGraphExecUpdateResultInfo *resultInfo)
{
	struct graph_exec *x = EXEC(hGraphExec);
	struct graph *g = GRAPH(hGraph), *copy = NULL;
	enum cudaGraphExecUpdateResult res = cudaGraphExecUpdateSuccess;
	const struct gnode *bad = NULL;
	int r = cudaSuccess;

	if (!x || !g)
		return phos_set_error(cudaErrorInvalidValue);
	if (!same_shape(g, x->g, &res, &bad))
		r = cudaErrorGraphExecUpdateFailure;
	else if ((r = graph_clone(g, &copy, NULL)))
		res = cudaGraphExecUpdateError;
	if (r == cudaSuccess) {
		pthread_mutex_lock(&x->lock);
		for (size_t i = 0; i < copy->n; i++)   /* enabled or not stays as it was */
			copy->nodes[i]->disabled = x->g->nodes[i]->disabled;
		graph_free(x->g);
		x->g = copy;   /* same shape: x->order and x->orig still hold */
		graph_device_dirty(x->dev);
		pthread_mutex_unlock(&x->lock);
	}
	if (resultInfo) {
		resultInfo->result = res;
		resultInfo->errorNode = (cudaGraphNode_t)bad;
		resultInfo->errorFromNode = NULL;
	}
	return phos_set_error(r);
}

/* --- launch --- */

/* A memset node of 2- or 4-byte elements whose bytes differ: written as a
 * pitched host-to-device copy of the pattern (the bytes travel in the record). */
static int memset_pattern(const struct cudaMemsetParams *s, cudaStream_t stream)
{
	size_t row = s->width * s->elementSize, total;
	uint8_t *buf;
	int r;

	if (__builtin_mul_overflow(row, s->height, &total) || total > (64u << 20))
		return cudaErrorNotSupported;
	buf = malloc(total ? total : 1);
	if (!buf)
		return cudaErrorMemoryAllocation;
	for (size_t i = 0; i < total; i += s->elementSize)
		memcpy(buf + i, &s->value, s->elementSize);
	r = cudaMemcpy2DAsync(s->dst, s->height > 1 ? s->pitch : row, buf, row, row, s->height,
			      cudaMemcpyHostToDevice, stream);
	free(buf);
	return r;
}

static int memset_run(const struct cudaMemsetParams *s, cudaStream_t stream)
{
	uint32_t v = s->value;
	bool uniform = s->elementSize == 1 || (s->elementSize == 2 && (v & 0xff) == ((v >> 8) & 0xff)) ||
		       (s->elementSize == 4 && v == (v & 0xff) * 0x01010101u);

	if (uniform)
		return cudaMemset2DAsync(s->dst, s->height > 1 ? s->pitch : s->width * s->elementSize, (int)(v & 0xff),
					 s->width * s->elementSize, s->height, stream);
	return memset_pattern(s, stream);
}

static int graph_run(const struct graph *g, const size_t *order, cudaStream_t stream)
{
	int r = cudaSuccess;

	for (size_t i = 0; r == cudaSuccess && i < g->n; i++)
		r = graph_node_run(g->nodes[order[i]], stream);
	return r;
}

/* A copy of n joins the capture of stream (a graph launched into a capture). */
static int capture_copy(cudaStream_t stream, const struct gnode *n)
{
	struct gnode *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return cudaErrorMemoryAllocation;
	r = node_copy_params(c, n);
	if (r) {
		free(c);
		return r;
	}
	return graph_capture_node(stream, c);
}

/* The record of a library call, posted again with the launch stream's id
 * (graph_capture.c, phos_graph_capture_record). */
static int record_run(const struct gnode *n, cudaStream_t stream)
{
	uint8_t *body;
	uint32_t sid;
	int r = phos_stream_resolve(stream, &sid);

	if (r)
		return r;
	phos_graph_record_epoch_bump();   /* the library binds its handles' streams again */
	if (n->rec.ops)
		return n->rec.ops->run(n->rec.body, n->rec.len, sid);
	body = malloc(n->rec.len ? n->rec.len : 1);
	if (!body)
		return cudaErrorMemoryAllocation;
	memcpy(body, n->rec.body, n->rec.len);
	if (n->rec.stream_off != GN_NO_STREAM)
		memcpy(body + n->rec.stream_off, &sid, sizeof(sid));
	r = phos_preload_post(n->rec.op, body, n->rec.len, NULL, 0);
	free(body);
	return r;
}

int graph_node_run(const struct gnode *n, cudaStream_t stream)
{
	if (n->disabled)
		return cudaSuccess;
	if (phos_graph_capturing(stream))
		return capture_copy(stream, n);
	switch (n->kind) {
	case GN_KERNEL:
		return phos_launch_post(&n->k.l, stream, n->k.params);
	case GN_MEMCPY:
		switch (n->c.form) {
		case CP_3D:
			return cudaMemcpy3DAsync(&n->c.p, stream);
		case CP_TO_SYMBOL:
			return cudaMemcpyToSymbolAsync(n->c.symbol, n->c.src, n->c.count, n->c.offset, n->c.kind,
						       stream);
		case CP_FROM_SYMBOL:
			return cudaMemcpyFromSymbolAsync(n->c.dst, n->c.symbol, n->c.count, n->c.offset, n->c.kind,
							 stream);
		case CP_1D:
			break;
		}
		return cudaMemcpyAsync(n->c.dst, n->c.src, n->c.count, n->c.kind, stream);
	case GN_MEMSET:
		return memset_run(&n->s, stream);
	case GN_HOST:
		return cudaLaunchHostFunc(stream, n->h.fn, n->h.userData);
	case GN_EVENT_RECORD:
		return cudaEventRecord(n->event, stream);
	case GN_EVENT_WAIT:
		return cudaStreamWaitEvent(stream, n->event, 0);
	case GN_CHILD: {
		size_t *order;
		int r = graph_order(n->child, &order);

		if (r)
			return r;
		r = graph_run(n->child, order, stream);
		free(order);
		return r;
	}
	case GN_EMPTY:
		return cudaSuccess;
	case GN_MEM_ALLOC:
	case GN_MEM_FREE:
		return gmem_node_run(n);
	case GN_RECORD:
		return record_run(n, stream);
	case GN_COND:   /* never replayed: such graphs are made on the device */
		return cudaErrorNotSupported;
	}
	return cudaErrorNotSupported;
}

static int graph_launch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	struct graph_exec *x = EXEC(graphExec);
	uint32_t sid;
	int r;

	if (!x)
		return cudaErrorInvalidValue;
	r = phos_preload_connect();
	if (r)
		return r;
	r = phos_stream_resolve(stream, &sid);
	if (r)
		return r;
	/* CUDA refuses an instantiated graph launched into a capture (an H100,
	 * CUDA 13: cudaErrorStreamCaptureUnsupported) and invalidates it */
	r = phos_graph_check_stream(sid);
	if (r)
		return r;
	pthread_mutex_lock(&x->lock);
	if (x->device) {
		bool unbuilt;

		r = graph_device_launch(&x->dev, x->g, stream, &unbuilt);
		/* a graph without conditional nodes that changed into one the
		 * device cannot be given (a copy node set to host memory) is
		 * replayed from now on */
		if (!(r && unbuilt && !graph_has_cond(x->g))) {
			pthread_mutex_unlock(&x->lock);
			return r;
		}
		graph_device_free(x->dev);
		x->dev = NULL;
		x->device = false;
	}
	r = gmem_launch_begin(x->g, x->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch);
	if (r == cudaSuccess)
		r = graph_run(x->g, x->order, stream);
	pthread_mutex_unlock(&x->lock);
	return r;
}

PHOS_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return phos_set_error(graph_launch(graphExec, stream));
}

PHOS_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	uint32_t sid;

	if (!graphExec)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(phos_stream_resolve(stream, &sid)); /* nothing to upload: nodes are replayed */
}

/* cudaGraphExecNodeSetParams (CUDA 12.2+): each node type through its own
 * cudaGraphExec*SetParams call above, which checks that node is of that
 * type in hGraphExec's graph. Memory nodes (CUDA forbids it for these),
 * conditional and external semaphore nodes: cudaErrorNotSupported. */
PHOS_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						   struct cudaGraphNodeParams *p)
{
	struct graph_exec *x = EXEC(hGraphExec);

	if (!node_params_ok(p) || !x)
		return phos_set_error(cudaErrorInvalidValue);
	switch (p->type) {
	case cudaGraphNodeTypeKernel: {
		struct cudaKernelNodeParams k = kernel_params_of(p);

		return cudaGraphExecKernelNodeSetParams(hGraphExec, node, &k);
	}
	case cudaGraphNodeTypeMemcpy:
		if (p->memcpy.flags)
			return phos_set_error(cudaErrorInvalidValue);
		return cudaGraphExecMemcpyNodeSetParams(hGraphExec, node, &p->memcpy.copyParams);
	case cudaGraphNodeTypeMemset: {
		struct cudaMemsetParams m = memset_params_of(p);

		return cudaGraphExecMemsetNodeSetParams(hGraphExec, node, &m);
	}
	case cudaGraphNodeTypeHost: {
		struct cudaHostNodeParams h = host_params_of(p);

		return cudaGraphExecHostNodeSetParams(hGraphExec, node, &h);
	}
	case cudaGraphNodeTypeGraph:
		return cudaGraphExecChildGraphNodeSetParams(hGraphExec, node, p->graph.graph);
	case cudaGraphNodeTypeWaitEvent:
		return cudaGraphExecEventWaitNodeSetEvent(hGraphExec, node, p->eventWait.event);
	case cudaGraphNodeTypeEventRecord:
		return cudaGraphExecEventRecordNodeSetEvent(hGraphExec, node, p->eventRecord.event);
	case cudaGraphNodeTypeEmpty:   /* nothing to set; the node must still be an empty one of x */
		return exec_node(x, node, GN_EMPTY) ? cudaSuccess : phos_set_error(cudaErrorInvalidValue);
	default:
		return phos_set_error(cudaErrorNotSupported);
	}
}
