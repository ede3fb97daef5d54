/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs: graph objects, their nodes and the explicit-graph API
 * (cudaGraphCreate, cudaGraphAdd*Node, dependencies, node parameters).
 * The design is in graph_internal.h; instantiation and launch are in
 * graph_exec.c, stream capture in graph_capture.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* --- nodes --- */

void node_free_params(struct gnode *n)
{
	if (n->kind == GN_KERNEL) {
		free(n->k.params);
		free(n->k.args);
		free(n->k.attrs);
		n->k.params = NULL;
		n->k.args = NULL;
		n->k.attrs = NULL;
		n->k.attr_set = 0;
	} else if (n->kind == GN_CHILD) {
		graph_free(n->child);
		n->child = NULL;
	} else if (n->kind == GN_MEM_ALLOC || n->kind == GN_MEM_FREE) {
		if (gmem_ops.gone)
			gmem_ops.gone(n);
	} else if (n->kind == GN_COND) {
		for (unsigned b = 0; n->cond.bodies && b < n->cond.size; b++)
			graph_free(n->cond.bodies[b]);
		free(n->cond.bodies);
		n->cond.bodies = NULL;
	} else if (n->kind == GN_RECORD) {
		if (n->rec.ops && n->rec.ops->drop && n->rec.body)
			n->rec.ops->drop(n->rec.body);
		free(n->rec.body);
		n->rec.body = NULL;
	}
}

int node_copy_params(struct gnode *dst, const struct gnode *src)
{
	dst->kind = src->kind;
	dst->disabled = src->disabled;
	switch (src->kind) {
	case GN_MEMCPY:
		dst->c = src->c;
		return cudaSuccess;
	case GN_MEMSET:
		dst->s = src->s;
		return cudaSuccess;
	case GN_HOST:
		dst->h = src->h;
		return cudaSuccess;
	case GN_EVENT_RECORD:
	case GN_EVENT_WAIT:
		dst->event = src->event;
		return cudaSuccess;
	case GN_CHILD:
		dst->child = NULL;
		return graph_clone(src->child, &dst->child, NULL);
	case GN_EMPTY:
		return cudaSuccess;
	case GN_COND:
		dst->cond = src->cond;
		dst->cond.bodies = calloc(src->cond.size, sizeof(*dst->cond.bodies));
		if (!dst->cond.bodies)
			return cudaErrorMemoryAllocation;
		for (unsigned b = 0; b < src->cond.size; b++) {
			int r = graph_clone(src->cond.bodies[b], &dst->cond.bodies[b], NULL);

			if (r) {
				node_free_params(dst);
				return r;
			}
			dst->cond.bodies[b]->owner = dst;
		}
		return cudaSuccess;
	case GN_MEM_ALLOC:
	case GN_MEM_FREE:
		dst->mem = src->mem;
		if (gmem_ops.copied)
			gmem_ops.copied(dst);
		return cudaSuccess;
	case GN_RECORD:
		dst->rec = src->rec;
		dst->rec.body = malloc(src->rec.len ? src->rec.len : 1);
		if (!dst->rec.body)
			return cudaErrorMemoryAllocation;
		memcpy(dst->rec.body, src->rec.body, src->rec.len);
		if (dst->rec.ops && dst->rec.ops->hold)
			dst->rec.ops->hold(dst->rec.body);
		return cudaSuccess;
	case GN_KERNEL:
		break;
	}
	dst->k = src->k;
	dst->k.params = malloc(src->k.l.l.param_bytes ? src->k.l.l.param_bytes : 1);
	dst->k.args = calloc(src->k.nargs ? src->k.nargs : 1, sizeof(void *));
	dst->k.attrs = src->k.attrs ? malloc(GN_ATTR_MAX * sizeof(*dst->k.attrs)) : NULL;
	if (!dst->k.params || !dst->k.args || (src->k.attrs && !dst->k.attrs)) {
		free(dst->k.params);
		free(dst->k.args);
		free(dst->k.attrs);
		dst->k.params = NULL;
		dst->k.args = NULL;
		dst->k.attrs = NULL;
		return cudaErrorMemoryAllocation;
	}
	if (src->k.attrs)
		memcpy(dst->k.attrs, src->k.attrs, GN_ATTR_MAX * sizeof(*dst->k.attrs));
	memcpy(dst->k.params, src->k.params, src->k.l.l.param_bytes);
	for (uint32_t i = 0; i < src->k.nargs; i++)
		dst->k.args[i] = dst->k.params + ((uint8_t *)src->k.args[i] - src->k.params);
	return cudaSuccess;
}

int node_kernel_set(struct gnode *n, const void *func, const struct phos_launch_ex *l, const void *params,
		    const uint16_t *offsets, uint32_t nargs)
{
	uint8_t *p = malloc(l->l.param_bytes ? l->l.param_bytes : 1);
	void **a = calloc(nargs ? nargs : 1, sizeof(void *));

	if (!p || !a) {
		free(p);
		free(a);
		return cudaErrorMemoryAllocation;
	}
	memcpy(p, params, l->l.param_bytes);
	for (uint32_t i = 0; i < nargs; i++)
		a[i] = p + offsets[i];
	node_free_params(n);
	n->kind = GN_KERNEL;
	n->k.attrs = NULL;
	n->k.attr_set = 0;
	n->k.l = *l;
	n->k.func = func;
	n->k.params = p;
	n->k.args = a;
	n->k.nargs = nargs;
	return cudaSuccess;
}

int node_kernel_fill(struct gnode *n, const struct cudaKernelNodeParams *p)
{
	struct phos_launch_ex l;
	struct phos_reply_func_info fi;
	void *params = NULL;
	int r;

	if (!p)
		return cudaErrorInvalidValue;
	if (p->extra)
		return cudaErrorNotSupported; /* CU_LAUNCH_PARAM_BUFFER_POINTER blocks */
	r = phos_launch_prepare(p->func, (const uint32_t[3]){ p->gridDim.x, p->gridDim.y, p->gridDim.z },
				(const uint32_t[3]){ p->blockDim.x, p->blockDim.y, p->blockDim.z }, p->sharedMemBytes,
				p->kernelParams, &l, &params, &fi);
	if (r)
		return r;
	if (n->kind == GN_KERNEL) {
		/* new parameters keep the attributes set on the node */
		cudaLaunchAttributeValue *attrs = n->k.attrs;
		uint32_t set = n->k.attr_set;

		l.flags = n->k.l.flags;
		memcpy(l.cluster, n->k.l.cluster, sizeof(l.cluster));
		n->k.attrs = NULL;
		r = node_kernel_set(n, p->func, &l, params, fi.offset, fi.nparams);
		if (r == cudaSuccess) {
			n->k.attrs = attrs;
			n->k.attr_set = set;
		} else {
			free(attrs);
		}
	} else {
		r = node_kernel_set(n, p->func, &l, params, fi.offset, fi.nparams);
	}
	free(params);
	return r;
}

int memcpy_node_set_symbol(struct gnode *n, const void *symbol, void *other, size_t count, size_t offset,
			   enum cudaMemcpyKind kind, bool to_symbol)
{
	uint64_t addr = 0, size = 0;
	int r;

	if (!n || n->kind != GN_MEMCPY || !other || (unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	r = phos_var_lookup(symbol, &addr, &size);
	if (r)
		return r;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	/* the node names the variable: a restored executor may place it elsewhere */
	n->c.form = to_symbol ? CP_TO_SYMBOL : CP_FROM_SYMBOL;
	n->c.symbol = symbol;
	n->c.offset = offset;
	n->c.count = count;
	n->c.kind = kind;
	n->c.src = to_symbol ? other : NULL;
	n->c.dst = to_symbol ? NULL : other;
	return cudaSuccess;
}

int memset_params_check(const struct cudaMemsetParams *p)
{
	size_t row;

	if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->height ||
	    __builtin_mul_overflow(p->width, (size_t)p->elementSize, &row) || (p->height > 1 && p->pitch < row))
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

/* --- graphs --- */

struct graph *graph_new(void)
{
	return calloc(1, sizeof(struct graph));
}


struct gmem_ops gmem_ops;

static void node_free(struct gnode *n)
{
	node_free_params(n);
	free(n->deps);
	free(n);
}

void graph_free(struct graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	free(g->conds);
	free(g);
}

bool graph_has_cond(const struct graph *g)
{
	for (size_t i = 0; g && i < g->n; i++) {
		const struct gnode *n = g->nodes[i];

		if (n->kind == GN_COND || (n->kind == GN_CHILD && graph_has_cond(n->child)))
			return true;
	}
	return false;
}

bool graph_has(const struct graph *g, const struct gnode *n)
{
	return g && n && n->graph == g && n->index < g->n && g->nodes[n->index] == n;
}

int graph_add(struct graph *g, struct gnode *node, struct gnode *const *deps, size_t ndeps,
	      struct gnode **ret_node)
{
	int r = cudaErrorInvalidValue;

	for (size_t i = 0; i < ndeps; i++) {
		if (!graph_has(g, deps[i]))
			goto fail;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				goto fail;
	}
	r = cudaErrorMemoryAllocation;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct gnode **nodes = realloc(g->nodes, cap * sizeof(*nodes));

		if (!nodes)
			goto fail;
		g->nodes = nodes;
		g->cap = cap;
	}
	node->deps = NULL;
	if (ndeps) {
		node->deps = malloc(ndeps * sizeof(*node->deps));
		if (!node->deps)
			goto fail;
		memcpy(node->deps, deps, ndeps * sizeof(*node->deps));
	}
	node->ndeps = ndeps;
	node->graph = g;
	node->index = g->n;
	g->nodes[g->n++] = node;
	if (ret_node)
		*ret_node = node;
	return cudaSuccess;
fail:
	node_free(node);
	return r;
}

int graph_clone(const struct graph *g, struct graph **ret_copy, struct gnode ***ret_map)
{
	struct graph *c = graph_new();
	struct gnode **deps = NULL;
	int r = c ? cudaSuccess : cudaErrorMemoryAllocation;

	if (c && g->nconds) {
		c->conds = malloc(g->nconds * sizeof(*c->conds));
		if (c->conds) {
			memcpy(c->conds, g->conds, g->nconds * sizeof(*c->conds));
			c->nconds = g->nconds;
		} else {
			r = cudaErrorMemoryAllocation;
		}
	}
	/* Nodes in creation order; a dependency may be a later node (edges
	 * added afterwards), so edges are copied by index once all exist. */
	for (size_t i = 0; r == cudaSuccess && i < g->n; i++) {
		struct gnode *n = calloc(1, sizeof(*n));

		if (!n) {
			r = cudaErrorMemoryAllocation;
			break;
		}
		r = node_copy_params(n, g->nodes[i]);
		if (r)
			free(n);
		else
			r = graph_add(c, n, NULL, 0, NULL);
	}
	for (size_t i = 0; r == cudaSuccess && i < g->n; i++) {
		const struct gnode *o = g->nodes[i];

		if (!o->ndeps)
			continue;
		deps = malloc(o->ndeps * sizeof(*deps));
		if (!deps) {
			r = cudaErrorMemoryAllocation;
			break;
		}
		for (size_t d = 0; d < o->ndeps; d++)
			deps[d] = c->nodes[o->deps[d]->index];
		c->nodes[i]->deps = deps;
		c->nodes[i]->ndeps = o->ndeps;
	}
	if (r == cudaSuccess && ret_map) {
		*ret_map = malloc((g->n ? g->n : 1) * sizeof(**ret_map));
		if (!*ret_map)
			r = cudaErrorMemoryAllocation;
		else
			memcpy(*ret_map, c->nodes, g->n * sizeof(**ret_map));
	}
	if (r) {
		graph_free(c);
		return r;
	}
	*ret_copy = c;
	return cudaSuccess;
}

int graph_order(const struct graph *g, size_t **ret_order)
{
	size_t *order = malloc((g->n ? g->n : 1) * sizeof(*order));
	bool *done = calloc(g->n ? g->n : 1, sizeof(*done));
	size_t k = 0;
	bool progress = true;

	if (!order || !done) {
		free(order);
		free(done);
		return cudaErrorMemoryAllocation;
	}
	/* Repeated passes in creation order: a node goes once all its
	 * dependencies went (creation order is usually topological already,
	 * and then one pass does it). */
	while (k < g->n && progress) {
		progress = false;
		for (size_t i = 0; i < g->n; i++) {
			const struct gnode *n = g->nodes[i];
			bool ready = !done[i];

			for (size_t d = 0; ready && d < n->ndeps; d++)
				ready = done[n->deps[d]->index];
			if (ready) {
				done[i] = true;
				order[k++] = i;
				progress = true;
			}
		}
	}
	free(done);
	if (k < g->n) {
		free(order);
		return cudaErrorInvalidValue; /* a cycle */
	}
	*ret_order = order;
	return cudaSuccess;
}

/* --- explicit graphs --- */

#define GRAPH(g) ((struct graph *)(g))
#define NODE(n) ((struct gnode *)(n))

PHOS_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	struct graph *g;

	if (!pGraph || flags)
		return phos_set_error(cudaErrorInvalidValue);
	g = graph_new();
	if (!g)
		return phos_set_error(cudaErrorMemoryAllocation);
	*pGraph = (cudaGraph_t)g;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	if (!graph)
		return phos_set_error(cudaErrorInvalidValue);
	graph_free(GRAPH(graph));
	return cudaSuccess;
}

static cudaError_t add_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *deps,
			    size_t ndeps, struct gnode *n)
{
	if (!pGraphNode || !graph || (ndeps && !deps)) {
		node_free_params(n);
		free(n);
		return phos_set_error(cudaErrorInvalidValue);
	}
	return phos_set_error(graph_add(GRAPH(graph), n, (struct gnode *const *)deps, ndeps,
					(struct gnode **)pGraphNode));
}

PHOS_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       const struct cudaKernelNodeParams *pNodeParams)
{
	struct gnode *n = calloc(1, sizeof(*n));
	int r;

	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	r = node_kernel_fill(n, pNodeParams);
	if (r) {
		free(n);
		return phos_set_error(r);
	}
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *pNodeParams)
{
	struct gnode *n = NODE(node);

	if (!n || !pNodeParams || n->kind != GN_KERNEL)
		return phos_set_error(cudaErrorInvalidValue);
	pNodeParams->func = (void *)n->k.func;
	pNodeParams->gridDim = (dim3){ n->k.l.l.grid[0], n->k.l.l.grid[1], n->k.l.l.grid[2] };
	pNodeParams->blockDim = (dim3){ n->k.l.l.block[0], n->k.l.l.block[1], n->k.l.l.block[2] };
	pNodeParams->sharedMemBytes = n->k.l.l.shared;
	pNodeParams->kernelParams = n->k.args;
	pNodeParams->extra = NULL;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams)
{
	struct gnode *n = NODE(node);

	if (!n || n->kind != GN_KERNEL)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(node_kernel_fill(n, pNodeParams));
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						 const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dst,
						 const void *src, size_t count, enum cudaMemcpyKind kind)
{
	struct gnode *n;

	if (!dst || !src || (unsigned)kind > cudaMemcpyDefault)
		return phos_set_error(cudaErrorInvalidValue);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_MEMCPY;
	n->c.form = CP_1D;
	n->c.dst = dst;
	n->c.src = src;
	n->c.count = count;
	n->c.kind = kind;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       const struct cudaMemcpy3DParms *pCopyParams)
{
	struct gnode *n;

	if (!pCopyParams)
		return phos_set_error(cudaErrorInvalidValue);
	if (pCopyParams->srcArray || pCopyParams->dstArray)
		return phos_set_error(cudaErrorNotSupported); /* CUDA arrays are not forwarded */
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_MEMCPY;
	n->c.form = CP_3D;
	n->c.p = *pCopyParams;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       const struct cudaMemsetParams *pMemsetParams)
{
	struct gnode *n;
	int r = memset_params_check(pMemsetParams);

	if (r)
		return phos_set_error(r);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_MEMSET;
	n->s = *pMemsetParams;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					     const cudaGraphNode_t *pDependencies, size_t numDependencies,
					     const struct cudaHostNodeParams *pNodeParams)
{
	struct gnode *n;

	if (!pNodeParams || !pNodeParams->fn)
		return phos_set_error(cudaErrorInvalidValue);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_HOST;
	n->h = *pNodeParams;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					      const cudaGraphNode_t *pDependencies, size_t numDependencies)
{
	struct gnode *n = calloc(1, sizeof(*n));

	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_EMPTY;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

/* --- conditional nodes (CUDA 12.4+): made on the device (graph_device.c) --- */

static _Atomic uint32_t cond_next;

/* Was handle h made on g or on a graph g is a body of? */
static bool cond_known(const struct graph *g, cudaGraphConditionalHandle h)
{
	for (; g; g = g->owner ? g->owner->graph : NULL)
		for (size_t i = 0; i < g->nconds; i++)
			if (g->conds[i].handle == h)
				return true;
	return false;
}

PHOS_EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
							 unsigned int defaultLaunchValue, unsigned int flags)
{
	struct graph *g = GRAPH(graph);
	struct gcond *grown;
	uint32_t n;

	if (!pHandle_out || !g || (flags & ~(unsigned)cudaGraphCondAssignDefault))
		return phos_set_error(cudaErrorInvalidValue);
	n = ++cond_next;
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);   /* 2^32 handles in one process */
	grown = realloc(g->conds, (g->nconds + 1) * sizeof(*grown));
	if (!grown)
		return phos_set_error(cudaErrorMemoryAllocation);
	g->conds = grown;
	g->conds[g->nconds++] = (struct gcond){ .handle = PHOS_GRAPH_COND_TAG | n, .deflt = defaultLaunchValue,
						.flags = flags };
	*pHandle_out = PHOS_GRAPH_COND_TAG | n;
	return cudaSuccess;
}

static cudaError_t add_cond_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *deps,
				 size_t ndeps, struct cudaConditionalNodeParams *c)
{
	struct gnode *n;
	int r;

	if (!graph || !cond_known(GRAPH(graph), c->handle) || c->size == 0 ||
	    (c->type == cudaGraphCondTypeIf && c->size > 2) || (c->type == cudaGraphCondTypeWhile && c->size != 1) ||
	    (c->type != cudaGraphCondTypeIf && c->type != cudaGraphCondTypeWhile &&
	     c->type != cudaGraphCondTypeSwitch) || c->size > PHOS_GRAPH_MAX_BODIES)
		return phos_set_error(cudaErrorInvalidValue);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_COND;
	n->cond.handle = c->handle;
	n->cond.type = c->type;
	n->cond.size = c->size;
	n->cond.bodies = calloc(c->size, sizeof(*n->cond.bodies));
	for (unsigned b = 0; n->cond.bodies && b < c->size; b++) {
		n->cond.bodies[b] = graph_new();
		if (!n->cond.bodies[b])
			break;
		n->cond.bodies[b]->owner = n;
	}
	if (!n->cond.bodies || !n->cond.bodies[c->size - 1]) {
		node_free_params(n);
		free(n);
		return phos_set_error(cudaErrorMemoryAllocation);
	}
	r = add_node(pGraphNode, graph, deps, ndeps, n);
	if (r == cudaSuccess)
		c->phGraph_out = (cudaGraph_t *)n->cond.bodies;
	return r;
}

/* cudaGraphAddNode (CUDA 12.3+): each node type through its own call above
 * (graph_mem.c for memory nodes). Edge data other than the default, a child
 * graph moved rather than cloned, conditional and external semaphore nodes:
 * cudaErrorNotSupported. */
PHOS_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					 const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
					 size_t numDependencies, struct cudaGraphNodeParams *p)
{
	const cudaGraphNode_t *deps = pDependencies;
	size_t nd = numDependencies;

	if (!node_params_ok(p))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; dependencyData && i < nd; i++)
		if (dependencyData[i].type != cudaGraphDependencyTypeDefault || dependencyData[i].from_port ||
		    dependencyData[i].to_port)
			return phos_set_error(cudaErrorNotSupported);
	switch (p->type) {
	case cudaGraphNodeTypeKernel: {
		struct cudaKernelNodeParams k = kernel_params_of(p);

		return cudaGraphAddKernelNode(pGraphNode, graph, deps, nd, &k);
	}
	case cudaGraphNodeTypeMemcpy:
		if (p->memcpy.flags)
			return phos_set_error(cudaErrorInvalidValue);
		return cudaGraphAddMemcpyNode(pGraphNode, graph, deps, nd, &p->memcpy.copyParams);
	case cudaGraphNodeTypeMemset: {
		struct cudaMemsetParams m = memset_params_of(p);

		return cudaGraphAddMemsetNode(pGraphNode, graph, deps, nd, &m);
	}
	case cudaGraphNodeTypeHost: {
		struct cudaHostNodeParams h = host_params_of(p);

		return cudaGraphAddHostNode(pGraphNode, graph, deps, nd, &h);
	}
	case cudaGraphNodeTypeGraph:
		if (p->graph.ownership != cudaGraphChildGraphOwnershipClone)
			return phos_set_error(cudaErrorNotSupported);
		return cudaGraphAddChildGraphNode(pGraphNode, graph, deps, nd, p->graph.graph);
	case cudaGraphNodeTypeEmpty:
		return cudaGraphAddEmptyNode(pGraphNode, graph, deps, nd);
	case cudaGraphNodeTypeWaitEvent:
		return cudaGraphAddEventWaitNode(pGraphNode, graph, deps, nd, p->eventWait.event);
	case cudaGraphNodeTypeEventRecord:
		return cudaGraphAddEventRecordNode(pGraphNode, graph, deps, nd, p->eventRecord.event);
	case cudaGraphNodeTypeMemAlloc: {
		struct cudaMemAllocNodeParams a = { .poolProps = p->alloc.poolProps, .accessDescs = p->alloc.accessDescs,
						    .accessDescCount = p->alloc.accessDescCount,
						    .bytesize = p->alloc.bytesize };
		cudaError_t r = gmem_ops.add_alloc ? gmem_ops.add_alloc(pGraphNode, graph, deps, nd, &a)
						   : (cudaError_t)phos_set_error(cudaErrorNotSupported);

		if (r == cudaSuccess)
			p->alloc.dptr = a.dptr;
		return r;
	}
	case cudaGraphNodeTypeMemFree:
		return gmem_ops.add_free ? gmem_ops.add_free(pGraphNode, graph, deps, nd, p->free.dptr)
					 : (cudaError_t)phos_set_error(cudaErrorNotSupported);
	case cudaGraphNodeTypeConditional:
		return add_cond_node(pGraphNode, graph, deps, nd, &p->conditional);
	default:   /* external semaphores */
		return phos_set_error(cudaErrorNotSupported);
	}
}

/* cudaGraphNodeSetParams (CUDA 12.2+): each node type through its own call
 * above, which checks that node is of that type. A child graph, memory
 * nodes (CUDA forbids it for these), conditional and external semaphore
 * nodes: cudaErrorNotSupported. */
PHOS_EXPORT cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *p)
{
	enum cudaGraphNodeType t;

	if (!node_params_ok(p) || !node)
		return phos_set_error(cudaErrorInvalidValue);
	switch (p->type) {
	case cudaGraphNodeTypeKernel: {
		struct cudaKernelNodeParams k = kernel_params_of(p);

		return cudaGraphKernelNodeSetParams(node, &k);
	}
	case cudaGraphNodeTypeMemcpy:
		if (p->memcpy.flags)
			return phos_set_error(cudaErrorInvalidValue);
		return cudaGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
	case cudaGraphNodeTypeMemset: {
		struct cudaMemsetParams m = memset_params_of(p);

		return cudaGraphMemsetNodeSetParams(node, &m);
	}
	case cudaGraphNodeTypeHost: {
		struct cudaHostNodeParams h = host_params_of(p);

		return cudaGraphHostNodeSetParams(node, &h);
	}
	case cudaGraphNodeTypeWaitEvent:
		return cudaGraphEventWaitNodeSetEvent(node, p->eventWait.event);
	case cudaGraphNodeTypeEventRecord:
		return cudaGraphEventRecordNodeSetEvent(node, p->eventRecord.event);
	case cudaGraphNodeTypeEmpty:   /* nothing to set; the type must still match */
		if (cudaGraphNodeGetType(node, &t) != cudaSuccess || t != cudaGraphNodeTypeEmpty)
			return phos_set_error(cudaErrorInvalidValue);
		return cudaSuccess;
	default:
		return phos_set_error(cudaErrorNotSupported);
	}
}

PHOS_EXPORT cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
						 const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
						 size_t numDependencies)
{
	struct graph *g = GRAPH(graph);

	if (!g || (numDependencies && (!from || !to)))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; i < numDependencies; i++) {
		if (!graph_has(g, NODE(from[i])) || !graph_has(g, NODE(to[i])) || from[i] == to[i])
			return phos_set_error(cudaErrorInvalidValue);
		if (edgeData && (edgeData[i].type != cudaGraphDependencyTypeDefault || edgeData[i].from_port ||
				 edgeData[i].to_port))
			return phos_set_error(cudaErrorNotSupported);
		for (size_t d = 0; d < NODE(to[i])->ndeps; d++)
			if (NODE(to[i])->deps[d] == NODE(from[i]))
				return phos_set_error(cudaErrorInvalidValue); /* the edge exists */
	}
	for (size_t i = 0; i < numDependencies; i++) {
		struct gnode *t = NODE(to[i]), **d = realloc(t->deps, (t->ndeps + 1) * sizeof(*d));

		if (!d)
			return phos_set_error(cudaErrorMemoryAllocation);
		t->deps = d;
		t->deps[t->ndeps++] = NODE(from[i]);
	}
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
	struct graph *g = GRAPH(graph);

	if (!g || !numNodes)
		return phos_set_error(cudaErrorInvalidValue);
	if (nodes) {
		for (size_t i = 0; i < *numNodes; i++)
			nodes[i] = i < g->n ? (cudaGraphNode_t)g->nodes[i] : NULL;
		if (*numNodes > g->n)
			*numNodes = g->n;
	} else {
		*numNodes = g->n;
	}
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes, size_t *pNumRootNodes)
{
	struct graph *g = GRAPH(graph);
	size_t k = 0;

	if (!g || !pNumRootNodes)
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; i < g->n; i++) {
		if (g->nodes[i]->ndeps)
			continue;
		if (pRootNodes && k < *pNumRootNodes)
			pRootNodes[k] = (cudaGraphNode_t)g->nodes[i];
		k++;
	}
	if (pRootNodes)
		for (size_t i = k; i < *pNumRootNodes; i++)
			pRootNodes[i] = NULL;
	if (!pRootNodes || k < *pNumRootNodes)
		*pNumRootNodes = k;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType)
{
	if (!node || !pType)
		return phos_set_error(cudaErrorInvalidValue);
	/* a captured library call: CUDA's graph would hold its kernels */
	*pType = NODE(node)->kind == GN_RECORD ? cudaGraphNodeTypeKernel : (enum cudaGraphNodeType)NODE(node)->kind;
	return cudaSuccess;
}


PHOS_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						   const cudaGraphNode_t *pDependencies, size_t numDependencies,
						   cudaGraph_t childGraph)
{
	struct gnode *n;
	int r;

	if (!childGraph || childGraph == graph)
		return phos_set_error(cudaErrorInvalidValue);
	if (graph_has_mem_nodes(GRAPH(childGraph)))
		return phos_set_error(cudaErrorNotSupported);   /* (CUDA: only with its ownership moved) */
	if (graph_has_cond(GRAPH(childGraph)))
		return phos_set_error(cudaErrorInvalidValue);   /* CUDA: such a graph is never a child */
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_CHILD;
	/* CUDA embeds a copy: later changes to childGraph do not reach the node */
	r = graph_clone(GRAPH(childGraph), &n->child, NULL);
	if (r) {
		free(n);
		return phos_set_error(r);
	}
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph)
{
	if (!node || !pGraph || NODE(node)->kind != GN_CHILD)
		return phos_set_error(cudaErrorInvalidValue);
	*pGraph = (cudaGraph_t)NODE(node)->child;
	return cudaSuccess;
}

static cudaError_t add_event_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *deps,
				  size_t ndeps, cudaEvent_t event, enum gnode_kind kind)
{
	struct gnode *n;

	if (!phos_event_known(event))
		return phos_set_error(cudaErrorInvalidResourceHandle);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = kind;
	n->event = event;
	return add_node(pGraphNode, graph, deps, ndeps, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						    const cudaGraphNode_t *pDependencies, size_t numDependencies,
						    cudaEvent_t event)
{
	return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event, GN_EVENT_RECORD);
}

PHOS_EXPORT cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						  const cudaGraphNode_t *pDependencies, size_t numDependencies,
						  cudaEvent_t event)
{
	return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event, GN_EVENT_WAIT);
}

static cudaError_t event_node_get(cudaGraphNode_t node, cudaEvent_t *event_out, enum gnode_kind kind)
{
	if (!node || !event_out || NODE(node)->kind != kind)
		return phos_set_error(cudaErrorInvalidValue);
	*event_out = NODE(node)->event;
	return cudaSuccess;
}

static cudaError_t event_node_set(cudaGraphNode_t node, cudaEvent_t event, enum gnode_kind kind)
{
	if (!node || NODE(node)->kind != kind)
		return phos_set_error(cudaErrorInvalidValue);
	if (!phos_event_known(event))
		return phos_set_error(cudaErrorInvalidResourceHandle);
	NODE(node)->event = event;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
	return event_node_get(node, event_out, GN_EVENT_RECORD);
}

PHOS_EXPORT cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
	return event_node_set(node, event, GN_EVENT_RECORD);
}

PHOS_EXPORT cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
	return event_node_get(node, event_out, GN_EVENT_WAIT);
}

PHOS_EXPORT cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
	return event_node_set(node, event, GN_EVENT_WAIT);
}

/* --- node parameters --- */

/* A 1D or symbol copy as cudaMemcpy3DParms (what CUDA answers for any copy node). */
static int copy_as_3d(const struct gnode *n, struct cudaMemcpy3DParms *p)
{
	void *dst = n->c.dst;
	const void *src = n->c.src;

	if (n->c.form == CP_3D) {
		*p = n->c.p;
		return cudaSuccess;
	}
	if (n->c.form != CP_1D) {
		uint64_t addr = 0, size = 0;
		int r = phos_var_lookup(n->c.symbol, &addr, &size);

		if (r)
			return r;
		if (n->c.form == CP_TO_SYMBOL)
			dst = (void *)(uintptr_t)(addr + n->c.offset);
		else
			src = (const void *)(uintptr_t)(addr + n->c.offset);
	}
	memset(p, 0, sizeof(*p));
	p->srcPtr = pitched_ptr((void *)src, n->c.count, n->c.count, 1);
	p->dstPtr = pitched_ptr(dst, n->c.count, n->c.count, 1);
	p->extent = extent_of(n->c.count, 1, 1);
	p->kind = n->c.kind;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *pNodeParams)
{
	if (!node || !pNodeParams || NODE(node)->kind != GN_MEMCPY)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(copy_as_3d(NODE(node), pNodeParams));
}

int memcpy_node_set_3d(struct gnode *n, const struct cudaMemcpy3DParms *p)
{
	if (!n || !p || n->kind != GN_MEMCPY)
		return cudaErrorInvalidValue;
	if (p->srcArray || p->dstArray)
		return cudaErrorNotSupported;
	n->c.form = CP_3D;
	n->c.p = *p;
	return cudaSuccess;
}

int memcpy_node_set_1d(struct gnode *n, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	if (!n || n->kind != GN_MEMCPY || !dst || !src || (unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	n->c.form = CP_1D;
	n->c.dst = dst;
	n->c.src = src;
	n->c.count = count;
	n->c.kind = kind;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *pNodeParams)
{
	return phos_set_error(memcpy_node_set_3d(NODE(node), pNodeParams));
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count,
						       enum cudaMemcpyKind kind)
{
	return phos_set_error(memcpy_node_set_1d(NODE(node), dst, src, count, kind));
}

PHOS_EXPORT cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *pNodeParams)
{
	if (!node || !pNodeParams || NODE(node)->kind != GN_MEMSET)
		return phos_set_error(cudaErrorInvalidValue);
	*pNodeParams = NODE(node)->s;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *pNodeParams)
{
	int r = memset_params_check(pNodeParams);

	if (!r && (!node || NODE(node)->kind != GN_MEMSET))
		r = cudaErrorInvalidValue;
	if (!r)
		NODE(node)->s = *pNodeParams;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *pNodeParams)
{
	if (!node || !pNodeParams || NODE(node)->kind != GN_HOST)
		return phos_set_error(cudaErrorInvalidValue);
	*pNodeParams = NODE(node)->h;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *pNodeParams)
{
	if (!node || !pNodeParams || !pNodeParams->fn || NODE(node)->kind != GN_HOST)
		return phos_set_error(cudaErrorInvalidValue);
	NODE(node)->h = *pNodeParams;
	return cudaSuccess;
}

/* --- structure --- */

PHOS_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
	struct graph *c;
	int r;

	if (!pGraphClone || !originalGraph)
		return phos_set_error(cudaErrorInvalidValue);
	if (graph_has_mem_nodes(GRAPH(originalGraph)) || graph_has_cond(GRAPH(originalGraph)))
		return phos_set_error(cudaErrorNotSupported);   /* CUDA: no clone of such graphs */
	r = graph_clone(GRAPH(originalGraph), &c, NULL);
	if (r == cudaSuccess)
		*pGraphClone = (cudaGraph_t)c;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode,
						 cudaGraph_t clonedGraph)
{
	struct graph *c = GRAPH(clonedGraph);
	const struct gnode *o = NODE(originalNode);

	/* a clone keeps creation order, so a node's copy has its index */
	if (!pNode || !o || !c || o->index >= c->n || c->nodes[o->index]->kind != o->kind)
		return phos_set_error(cudaErrorInvalidValue);
	*pNode = (cudaGraphNode_t)c->nodes[o->index];
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
	struct gnode *n = NODE(node);
	struct graph *g;

	if (!n || !graph_has(n->graph, n))
		return phos_set_error(cudaErrorInvalidValue);
	g = n->graph;
	if (graph_has_mem_nodes(g))
		return phos_set_error(cudaErrorNotSupported);   /* CUDA: no node of such graphs is removed */
	/* its edges go with it: drop it from every dependency list */
	for (size_t i = 0; i < g->n; i++) {
		struct gnode *o = g->nodes[i];

		for (size_t d = 0; d < o->ndeps;)
			if (o->deps[d] == n)
				o->deps[d] = o->deps[--o->ndeps];
			else
				d++;
	}
	memmove(&g->nodes[n->index], &g->nodes[n->index + 1], (g->n - n->index - 1) * sizeof(*g->nodes));
	g->n--;
	for (size_t i = n->index; i < g->n; i++)
		g->nodes[i]->index = i;
	node_free_params(n);
	free(n->deps);
	free(n);
	return cudaSuccess;
}

/* Fills out[0..*count) (when out is given) with up to *count nodes, the
 * rest NULL, and sets *count to how many there are (CUDA's convention). */
static void list_out(struct gnode *const *list, size_t n, cudaGraphNode_t *out, cudaGraphEdgeData *edges,
		     size_t *count)
{
	if (out) {
		for (size_t i = 0; i < *count; i++) {
			out[i] = i < n ? (cudaGraphNode_t)list[i] : NULL;
			if (edges)
				memset(&edges[i], 0, sizeof(edges[i]));
		}
		if (*count > n)
			*count = n;
	} else {
		*count = n;
	}
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
						     cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
	struct gnode *n = NODE(node);

	if (!n || !pNumDependencies)
		return phos_set_error(cudaErrorInvalidValue);
	list_out(n->deps, n->ndeps, pDependencies, edgeData, pNumDependencies);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
						       cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes)
{
	struct gnode *n = NODE(node), **list;
	struct graph *g;
	size_t k = 0;

	if (!n || !pNumDependentNodes || !graph_has(n->graph, n))
		return phos_set_error(cudaErrorInvalidValue);
	g = n->graph;
	list = malloc((g->n ? g->n : 1) * sizeof(*list));
	if (!list)
		return phos_set_error(cudaErrorMemoryAllocation);
	for (size_t i = 0; i < g->n; i++)
		for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
			if (g->nodes[i]->deps[d] == n)
				list[k++] = g->nodes[i];
	list_out(list, k, pDependentNodes, edgeData, pNumDependentNodes);
	free(list);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
					  cudaGraphEdgeData *edgeData, size_t *numEdges)
{
	struct graph *g = GRAPH(graph);
	size_t k = 0;

	if (!g || !numEdges || (!from != !to))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; i < g->n; i++)
		for (size_t d = 0; d < g->nodes[i]->ndeps; d++, k++)
			if (from && k < *numEdges) {
				from[k] = (cudaGraphNode_t)g->nodes[i]->deps[d];
				to[k] = (cudaGraphNode_t)g->nodes[i];
				if (edgeData)
					memset(&edgeData[k], 0, sizeof(edgeData[k]));
			}
	if (from)
		for (size_t i = k; i < *numEdges; i++)
			from[i] = to[i] = NULL;
	if (!from || k < *numEdges)
		*numEdges = k;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
						    const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
						    size_t numDependencies)
{
	struct graph *g = GRAPH(graph);

	(void)edgeData;
	if (!g || (numDependencies && (!from || !to)))
		return phos_set_error(cudaErrorInvalidValue);
	if (graph_has_mem_nodes(g))
		return phos_set_error(cudaErrorNotSupported);   /* CUDA: no edge of such graphs is removed */
	/* every edge must exist before any goes */
	for (size_t i = 0; i < numDependencies; i++) {
		bool found = false;

		if (!graph_has(g, NODE(from[i])) || !graph_has(g, NODE(to[i])))
			return phos_set_error(cudaErrorInvalidValue);
		for (size_t d = 0; !found && d < NODE(to[i])->ndeps; d++)
			found = NODE(to[i])->deps[d] == NODE(from[i]);
		if (!found)
			return phos_set_error(cudaErrorInvalidValue);
	}
	for (size_t i = 0; i < numDependencies; i++) {
		struct gnode *t = NODE(to[i]);

		for (size_t d = 0; d < t->ndeps; d++)
			if (t->deps[d] == NODE(from[i])) {
				memmove(&t->deps[d], &t->deps[d + 1], (t->ndeps - d - 1) * sizeof(*t->deps));
				t->ndeps--;
				break;
			}
	}
	return cudaSuccess;
}

static cudaError_t add_symbol_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *deps,
				   size_t ndeps, const void *symbol, void *other, size_t count, size_t offset,
				   enum cudaMemcpyKind kind, bool to_symbol)
{
	struct gnode *n = calloc(1, sizeof(*n));
	int r;

	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_MEMCPY;
	r = memcpy_node_set_symbol(n, symbol, other, count, offset, kind, to_symbol);
	if (r) {
		free(n);
		return phos_set_error(r);
	}
	return add_node(pGraphNode, graph, deps, ndeps, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						       const cudaGraphNode_t *pDependencies, size_t numDependencies,
						       const void *symbol, const void *src, size_t count, size_t offset,
						       enum cudaMemcpyKind kind)
{
	return add_symbol_node(pGraphNode, graph, pDependencies, numDependencies, symbol, (void *)(uintptr_t)src,
			       count, offset, kind, true);
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
							 const cudaGraphNode_t *pDependencies, size_t numDependencies,
							 void *dst, const void *symbol, size_t count, size_t offset,
							 enum cudaMemcpyKind kind)
{
	return add_symbol_node(pGraphNode, graph, pDependencies, numDependencies, symbol, dst, count, offset, kind,
			       false);
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void *symbol, const void *src,
							     size_t count, size_t offset, enum cudaMemcpyKind kind)
{
	return phos_set_error(memcpy_node_set_symbol(NODE(node), symbol, (void *)(uintptr_t)src, count, offset, kind,
						     true));
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void *dst, const void *symbol,
							       size_t count, size_t offset, enum cudaMemcpyKind kind)
{
	return phos_set_error(memcpy_node_set_symbol(NODE(node), symbol, dst, count, offset, kind, false));
}

/* --- kernel node attributes (cudaKernelNodeAttrID == cudaLaunchAttributeID) --- */

PHOS_EXPORT cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode, cudaLaunchAttributeID attr,
							const cudaLaunchAttributeValue *value)
{
	struct gnode *n = NODE(hNode);
	uint32_t flags, cluster[3];
	int r;

	if (!n || !value || n->kind != GN_KERNEL || (unsigned)attr >= GN_ATTR_MAX)
		return phos_set_error(cudaErrorInvalidValue);
	flags = n->k.l.flags;
	memcpy(cluster, n->k.l.cluster, sizeof(cluster));
	r = phos_launch_attr_apply(attr, value, &flags, cluster);
	if (r)
		return phos_set_error(r);
	if (!n->k.attrs) {
		n->k.attrs = calloc(GN_ATTR_MAX, sizeof(*n->k.attrs));
		if (!n->k.attrs)
			return phos_set_error(cudaErrorMemoryAllocation);
	}
	n->k.l.flags = flags;
	memcpy(n->k.l.cluster, cluster, sizeof(cluster));
	n->k.attrs[attr] = *value;
	n->k.attr_set |= 1u << attr;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t hNode, cudaLaunchAttributeID attr,
							cudaLaunchAttributeValue *value_out)
{
	struct gnode *n = NODE(hNode);

	if (!n || !value_out || n->kind != GN_KERNEL || (unsigned)attr >= GN_ATTR_MAX)
		return phos_set_error(cudaErrorInvalidValue);
	/* what was set, else the default (zeroes: not cooperative, no cluster, priority 0) */
	if (n->k.attr_set & (1u << attr))
		*value_out = n->k.attrs[attr];
	else
		memset(value_out, 0, sizeof(*value_out));
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t hDst, cudaGraphNode_t hSrc)
{
	struct gnode *d = NODE(hDst), *s = NODE(hSrc);

	if (!d || !s || d->kind != GN_KERNEL || s->kind != GN_KERNEL)
		return phos_set_error(cudaErrorInvalidValue);
	if (s->k.attrs && !d->k.attrs) {
		d->k.attrs = malloc(GN_ATTR_MAX * sizeof(*d->k.attrs));
		if (!d->k.attrs)
			return phos_set_error(cudaErrorMemoryAllocation);
	}
	if (s->k.attrs)
		memcpy(d->k.attrs, s->k.attrs, GN_ATTR_MAX * sizeof(*d->k.attrs));
	d->k.attr_set = s->k.attr_set;
	d->k.l.flags = s->k.l.flags;
	memcpy(d->k.l.cluster, s->k.l.cluster, sizeof(d->k.l.cluster));
	return cudaSuccess;
}

/* --- a picture --- */

static const char *kind_name(enum gnode_kind k)
{
	switch (k) {
	case GN_KERNEL: return "kernel";
	case GN_MEMCPY: return "memcpy";
	case GN_MEMSET: return "memset";
	case GN_HOST: return "host";
	case GN_CHILD: return "graph";
	case GN_EMPTY: return "empty";
	case GN_EVENT_WAIT: return "event_wait";
	case GN_EVENT_RECORD: return "event_record";
	case GN_MEM_ALLOC: return "mem_alloc";
	case GN_MEM_FREE: return "mem_free";
	case GN_RECORD: return "library call";
	case GN_COND: return "conditional";
	}
	return "?";
}

PHOS_EXPORT cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
	struct graph *g = GRAPH(graph);
	FILE *f;

	(void)flags;
	if (!g || !path)
		return phos_set_error(cudaErrorInvalidValue);
	f = fopen(path, "w");
	if (!f)
		return phos_set_error(cudaErrorOperatingSystem);
	fprintf(f, "digraph phos_graph {\n");
	for (size_t i = 0; i < g->n; i++)
		fprintf(f, "  n%zu [label=\"%zu %s\"];\n", i, i, kind_name(g->nodes[i]->kind));
	for (size_t i = 0; i < g->n; i++)
		for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
			fprintf(f, "  n%zu -> n%zu;\n", g->nodes[i]->deps[d]->index, i);
	fprintf(f, "}\n");
	return phos_set_error(fclose(f) ? cudaErrorOperatingSystem : cudaSuccess);
}

bool graph_has_mem_nodes(const struct graph *g)
{
	for (size_t i = 0; g && i < g->n; i++)
		if (g->nodes[i]->kind == GN_MEM_ALLOC || g->nodes[i]->kind == GN_MEM_FREE)
			return true;
	return false;
}
