/* SPDX-License-Identifier: MIT */
/*
 * Instantiated graphs made on the device: the executor builds the real CUDA
 * graph (ctxpool/calls/exec_graph.c) from a description sent here, and a launch is
 * one record. Every graph whose nodes can all be described is (on an H200 a
 * chain of 1000 small kernels launched in 1.05x native time, against 5.2x
 * replayed); graphs with conditional nodes must be (a kernel inside the
 * graph sets the condition with cudaGraphSetConditional, so the nodes cannot
 * be replayed one by one from the function). Others are replayed
 * (graph_exec.c), and so is every graph without conditional nodes when
 * PHOS_GRAPHS=replay.
 *
 * What can be described: kernel nodes (plain launches, driver-API ones
 * captured too), device-to-device
 * copies and copies between the device and pinned host memory (a region
 * shared with the executor), sets, empty nodes, child graphs (flattened: an empty node before
 * and after the child's nodes), event record and wait nodes (in the
 * instantiated graph itself, as CUDA allows) and conditional nodes with their
 * bodies. Host nodes, copies from or to pageable memory, memory nodes and
 * captured library calls cannot: a graph with conditional nodes holding one
 * is refused at cudaGraphInstantiate (cudaErrorNotSupported, one line on
 * stderr saying which).
 *
 * The executor's graph is not in snapshots or checkpoints: a graph is
 * described again before its first launch in another executor (after a
 * restore at phos_fn_serve: a restore hook; after a checkpoint's restore:
 * the channel's adoption count), and both the description and the launch go
 * inside a fenced section of the channel, so that a checkpoint never holds
 * a launch of a graph its restored executor lacks. Conditional handles are
 * the preload's values (proto.h), so kernels' parameters stay as the program
 * set them across executors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

struct gdev {
	uint32_t id;
	bool built, dirty;
	int64_t adopt;      /* the channel's adoption count at the build */
	uint64_t epoch;     /* restores at phos_fn_serve before the build */
};

static _Atomic uint64_t restore_epoch;
static _Atomic bool hooked;

static int on_restore(void)
{
	restore_epoch++;
	return 0;
}

/* --- the description --- */

struct desc {
	struct phos_graph_cond *conds;
	struct phos_graph_node *nodes;
	uint32_t *deps;
	uint8_t *params;
	size_t nconds, nnodes, ndeps, nparams;
	size_t cconds, cnodes, cdeps, cparams;
	const char *why;    /* what could not be described */
};

#define NO_NODE UINT32_MAX

static bool grow(void **p, size_t *cap, size_t want, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (want <= *cap)
		return true;
	while (c < want)
		c *= 2;
	q = realloc(*p, c * elem);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

/* Appends a node with deps (n of them) in (parent, body); its index in *ret. */
static int push_node(struct desc *d, const struct phos_graph_node *node, const uint32_t *deps, size_t ndeps,
		     uint32_t *ret)
{
	if (d->nnodes >= PHOS_GRAPH_MAX_NODES)
		return d->why = "more nodes than phos-fn describes", cudaErrorNotSupported;
	if (!grow((void **)&d->nodes, &d->cnodes, d->nnodes + 1, sizeof(*d->nodes)) ||
	    !grow((void **)&d->deps, &d->cdeps, d->ndeps + ndeps, sizeof(*d->deps)))
		return cudaErrorMemoryAllocation;
	d->nodes[d->nnodes] = *node;
	d->nodes[d->nnodes].ndeps = (uint32_t)ndeps;
	if (ndeps)
		memcpy(d->deps + d->ndeps, deps, ndeps * sizeof(*deps));
	d->ndeps += ndeps;
	*ret = (uint32_t)d->nnodes++;
	return cudaSuccess;
}

static int push_empty(struct desc *d, uint32_t parent, uint32_t body, const uint32_t *deps, size_t ndeps,
		      uint32_t *ret)
{
	struct phos_graph_node e = { .kind = PHOS_GNODE_EMPTY, .parent = parent, .body = body };

	return push_node(d, &e, deps, ndeps, ret);
}

static int emit(struct desc *d, const struct graph *g, uint32_t parent, uint32_t body, uint32_t first,
		uint32_t *ret_last);

/* A kernel node (e: its place) launching l with its packed parameters. */
static int push_kernel(struct desc *d, struct phos_graph_node *e, const struct phos_launch *l, const void *params,
		       const uint32_t *deps, size_t ndeps, uint32_t *ret)
{
	e->kind = PHOS_GNODE_KERNEL;
	e->k.func = l->func;
	memcpy(e->k.grid, l->grid, sizeof(e->k.grid));
	memcpy(e->k.block, l->block, sizeof(e->k.block));
	e->k.shared = l->shared;
	e->k.param_bytes = l->param_bytes;
	if (!grow((void **)&d->params, &d->cparams, d->nparams + e->k.param_bytes, 1))
		return cudaErrorMemoryAllocation;
	if (e->k.param_bytes)
		memcpy(d->params + d->nparams, params, e->k.param_bytes);
	d->nparams += e->k.param_bytes;
	return push_node(d, e, deps, ndeps, ret);
}

/* A copy node: one device-to-device range, or one with a side in pinned host
 * memory shared with the executor (cudaMallocHost, cudaHostRegister), which
 * it DMAs from or into. Anything else is not supported. */
static int push_copy(struct desc *d, struct phos_graph_node *e, const struct gnode *n, const uint32_t *deps,
		     size_t ndeps, uint32_t *ret)
{
	bool dst_dev = phos_mem_is_device(n->c.dst, n->c.count), src_dev = phos_mem_is_device(n->c.src, n->c.count);

	if (n->c.form == CP_1D && dst_dev && src_dev &&
	    (n->c.kind == cudaMemcpyDeviceToDevice || n->c.kind == cudaMemcpyDefault)) {
		e->kind = PHOS_GNODE_COPY;
		e->copy.dst = (uint64_t)(uintptr_t)n->c.dst;
		e->copy.src = (uint64_t)(uintptr_t)n->c.src;
		e->copy.len = n->c.count;
		return push_node(d, e, deps, ndeps, ret);
	}
	if (n->c.form == CP_1D && dst_dev != src_dev &&
	    phos_mem_region_at(dst_dev ? n->c.src : n->c.dst, n->c.count, &e->hcopy.region, &e->hcopy.offset) &&
	    (n->c.kind == cudaMemcpyDefault || n->c.kind == (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost))) {
		e->kind = PHOS_GNODE_HOSTCOPY;
		e->hcopy.dev = (uint64_t)(uintptr_t)(dst_dev ? n->c.dst : n->c.src);
		e->hcopy.len = n->c.count;
		e->hcopy.h2d = dst_dev;
		return push_node(d, e, deps, ndeps, ret);
	}
	return d->why = "a copy node that is not one device-to-device range nor one with pinned host memory",
	       cudaErrorNotSupported;
}

/* A conditional node, then its bodies' nodes inside it; *ret: the node. */
static int emit_cond(struct desc *d, struct phos_graph_node *e, const struct gnode *n, const uint32_t *deps,
		     size_t ndeps, uint32_t *ret)
{
	uint32_t self;
	int r;

	e->kind = PHOS_GNODE_COND;
	for (e->cond.cond = 0; e->cond.cond < d->nconds && d->conds[e->cond.cond].handle != n->cond.handle;
	     e->cond.cond++)
		;
	if (e->cond.cond == d->nconds)
		return cudaErrorInvalidValue;   /* a handle of no graph around the node */
	e->cond.type = (uint32_t)n->cond.type;
	e->cond.size = n->cond.size;
	r = push_node(d, e, deps, ndeps, &self);
	for (unsigned b = 0; r == cudaSuccess && b < n->cond.size; b++)
		r = emit(d, n->cond.bodies[b], self, b, NO_NODE, NULL);
	*ret = self;
	return r;
}

/* Node n of a graph in (parent, body), after deps: at its emitted index (for
 * a child graph, the empty node after it) in *ret. */
static int emit_node(struct desc *d, const struct gnode *n, uint32_t parent, uint32_t body, const uint32_t *deps,
		     size_t ndeps, uint32_t *ret)
{
	struct phos_graph_node e = { .parent = parent, .body = body };
	uint32_t entry;
	int r;

	if (n->disabled)
		return push_empty(d, parent, body, deps, ndeps, ret);
	switch (n->kind) {
	case GN_EMPTY:
		return push_empty(d, parent, body, deps, ndeps, ret);
	case GN_KERNEL:
		if (n->k.l.flags)
			return d->why = "a cooperative or clustered kernel node", cudaErrorNotSupported;
		return push_kernel(d, &e, &n->k.l.l, n->k.params, deps, ndeps, ret);
	case GN_MEMCPY:
		return push_copy(d, &e, n, deps, ndeps, ret);
	case GN_MEMSET:
		e.kind = PHOS_GNODE_SET;
		e.set.dst = (uint64_t)(uintptr_t)n->s.dst;
		e.set.pitch = n->s.height > 1 ? n->s.pitch : n->s.width * n->s.elementSize;
		e.set.width = n->s.width;
		e.set.height = n->s.height;
		e.set.value = n->s.value;
		e.set.elem = n->s.elementSize;
		return push_node(d, &e, deps, ndeps, ret);
	case GN_EVENT_RECORD:
	case GN_EVENT_WAIT:
		if (parent != PHOS_GRAPH_ROOT)
			return d->why = "an event node in a conditional body", cudaErrorNotSupported;
		e.kind = n->kind == GN_EVENT_RECORD ? PHOS_GNODE_EVENT_RECORD : PHOS_GNODE_EVENT_WAIT;
		e.ev.event = phos_handle_unwrap(n->event, PHOS_H_EVENT);
		if (!e.ev.event)
			return cudaErrorInvalidResourceHandle;
		return push_node(d, &e, deps, ndeps, ret);
	case GN_CHILD:
		r = push_empty(d, parent, body, deps, ndeps, &entry);
		return r ? r : emit(d, n->child, parent, body, entry, ret);
	case GN_COND:
		return emit_cond(d, &e, n, deps, ndeps, ret);
	case GN_HOST:
		return d->why = "a host node", cudaErrorNotSupported;
	case GN_MEM_ALLOC:
	case GN_MEM_FREE:
		return d->why = "a memory node", cudaErrorNotSupported;
	case GN_RECORD: {
		/* a driver-API launch (Triton's kernels) is a plain launch record */
		struct phos_launch l;

		if (n->rec.ops || n->rec.op != PHOS_OP_LAUNCH || n->rec.len < sizeof(l))
			return d->why = "a captured library call (cuBLAS, cuBLASLt, cuDNN) or an extended launch",
			       cudaErrorNotSupported;
		memcpy(&l, n->rec.body, sizeof(l));
		if (l.param_bytes != n->rec.len - sizeof(l))
			return cudaErrorInvalidValue;
		return push_kernel(d, &e, &l, n->rec.body + sizeof(l), deps, ndeps, ret);
	}
	}
	return d->why = "a node of an unknown kind", cudaErrorNotSupported;
}

/* g's handles and nodes into (parent, body). Nodes of g without
 * dependencies depend on `first` (NO_NODE: none); with ret_last, an empty
 * node after all of them is added, its index in *ret_last. */
static int emit(struct desc *d, const struct graph *g, uint32_t parent, uint32_t body, uint32_t first,
		uint32_t *ret_last)
{
	uint32_t *at = calloc(g->n ? g->n : 1, sizeof(*at)), *deps = NULL;
	size_t *order = NULL;
	int r = at ? graph_order(g, &order) : cudaErrorMemoryAllocation;

	if (r == cudaSuccess && !grow((void **)&d->conds, &d->cconds, d->nconds + g->nconds, sizeof(*d->conds)))
		r = cudaErrorMemoryAllocation;
	for (size_t c = 0; r == cudaSuccess && c < g->nconds; c++)
		d->conds[d->nconds++] = (struct phos_graph_cond){ .handle = g->conds[c].handle, .parent = parent,
								  .body = body, .deflt = g->conds[c].deflt,
								  .flags = g->conds[c].flags };
	for (size_t k = 0; r == cudaSuccess && k < g->n; k++) {
		const struct gnode *n = g->nodes[order[k]];
		size_t nd = n->ndeps;

		free(deps);
		deps = malloc((nd ? nd : 1) * sizeof(*deps));
		if (!deps) {
			r = cudaErrorMemoryAllocation;
			break;
		}
		for (size_t j = 0; j < nd; j++)
			deps[j] = at[n->deps[j]->index];
		if (!nd && first != NO_NODE)
			deps[nd++] = first;
		r = emit_node(d, n, parent, body, deps, nd, &at[order[k]]);
	}
	if (r == cudaSuccess && ret_last) {
		if (g->n)
			r = push_empty(d, parent, body, at, g->n, ret_last);
		else
			r = push_empty(d, parent, body, &first, first != NO_NODE, ret_last);
	}
	free(deps);
	free(order);
	free(at);
	return r;
}

static void desc_free(struct desc *d)
{
	free(d->conds);
	free(d->nodes);
	free(d->deps);
	free(d->params);
}

/* The description of g as one record's payload, in *ret (malloc'd). */
static int describe(const struct graph *g, struct phos_graph_build *b, uint8_t **ret, size_t *ret_len,
		    const char **ret_why)
{
	struct desc d = { 0 };
	size_t cb, nb, db, len;
	uint8_t *p;
	int r = emit(&d, g, PHOS_GRAPH_ROOT, 0, NO_NODE, NULL);

	*ret_why = d.why;
	if (r == cudaSuccess && !d.nnodes)
		r = push_empty(&d, PHOS_GRAPH_ROOT, 0, NULL, 0, &(uint32_t){ 0 });
	cb = d.nconds * sizeof(*d.conds);
	nb = d.nnodes * sizeof(*d.nodes);
	db = (d.ndeps * sizeof(*d.deps) + 7) & ~(size_t)7;
	len = cb + nb + db + d.nparams;
	if (r == cudaSuccess && len > PHOS_REC_MAX_PAYLOAD) {
		*ret_why = "a description larger than one record";
		r = cudaErrorNotSupported;
	}
	if (r == cudaSuccess && !(p = calloc(1, len ? len : 1)))
		r = cudaErrorMemoryAllocation;
	if (r) {
		desc_free(&d);
		return r;
	}
	/* (an empty list may have no array at all) */
	if (cb)
		memcpy(p, d.conds, cb);
	memcpy(p + cb, d.nodes, nb);
	if (d.ndeps)
		memcpy(p + cb + nb, d.deps, d.ndeps * sizeof(*d.deps));
	if (d.nparams)
		memcpy(p + cb + nb + db, d.params, d.nparams);
	b->nconds = (uint32_t)d.nconds;
	b->nnodes = (uint32_t)d.nnodes;
	b->ndeps = (uint32_t)d.ndeps;
	b->param_bytes = (uint32_t)d.nparams;
	desc_free(&d);
	*ret = p;
	*ret_len = len;
	return cudaSuccess;
}

/* --- instantiated graphs --- */

/* Makes the described graph (p, len bytes after b) on the executor under
 * gd's id (sync), dropping the one it made before when it is still there. */
static int build_described(struct gdev *gd, struct phos_graph_build *b, const uint8_t *p, size_t len, int64_t adopt)
{
	int r;

	if (gd->built && gd->adopt == adopt && gd->epoch == restore_epoch) {
		struct phos_handle h = { .id = gd->id };

		r = phos_preload_post(PHOS_OP_GRAPH_DESTROY, &h, sizeof(h), NULL, 0);
		if (r)
			return r;
	}
	gd->built = false;
	b->graph = gd->id;
	r = phos_preload_call(PHOS_OP_GRAPH_BUILD, b, sizeof(*b), p, len, NULL, 0, NULL, NULL);
	if (r)
		return r;
	gd->built = true;
	gd->dirty = false;
	gd->adopt = adopt;
	gd->epoch = restore_epoch;
	return cudaSuccess;
}

/* Describes g as it is now, then makes it on the executor. */
static int build(struct gdev *gd, const struct graph *g, int64_t adopt)
{
	struct phos_graph_build b = { 0 };
	const char *why;
	uint8_t *p;
	size_t len;
	int r = describe(g, &b, &p, &len, &why);

	if (r)
		return r;
	r = build_described(gd, &b, p, len, adopt);
	free(p);
	return r;
}

static int gdev_new(struct gdev **state)
{
	struct gdev *gd;

	if (*state)
		return cudaSuccess;
	if (!hooked) {
		if (phos_preload_on_restore(on_restore) < 0)
			return cudaErrorMemoryAllocation;
		hooked = true;
	}
	gd = calloc(1, sizeof(*gd));
	if (!gd || phos_ids_add(PHOS_H_GRAPH, gd, &gd->id) < 0) {
		free(gd);
		return cudaErrorMemoryAllocation;
	}
	*state = gd;
	return cudaSuccess;
}

int graph_device_launch(struct gdev **state, const struct graph *g, cudaStream_t stream, bool *ret_unbuilt)
{
	struct phos_graph_launch l;
	struct gdev *gd;
	int64_t adopt;
	int r = gdev_new(state);

	*ret_unbuilt = r != cudaSuccess;
	if (r)
		return r;
	gd = *state;
	r = phos_stream_resolve(stream, &l.stream);
	if (r)
		return r;
	l.graph = gd->id;
	adopt = phos_preload_section_enter();
	if (adopt < 0) {
		phos_preload_section_leave();
		r = phos_preload_connect();
		return r ? r : cudaErrorDevicesUnavailable;
	}
	if (!gd->built || gd->dirty || gd->adopt != adopt || gd->epoch != restore_epoch) {
		r = build(gd, g, adopt);
		*ret_unbuilt = r != cudaSuccess;
	}
	if (r == cudaSuccess)
		r = phos_preload_post(PHOS_OP_GRAPH_LAUNCH, &l, sizeof(l), NULL, 0);
	phos_preload_section_leave();
	return r;
}

int graph_device_instantiate(struct gdev **state, const struct graph *g, bool *ret_device)
{
	const char *mode = getenv("PHOS_GRAPHS"), *why = NULL;
	struct phos_graph_build b = { 0 };
	bool must = graph_has_cond(g);
	uint8_t *p = NULL;
	int64_t adopt;
	size_t len;
	int r;

	*ret_device = false;
	if (!must && mode && !strcmp(mode, "replay"))
		return cudaSuccess;
	r = describe(g, &b, &p, &len, &why);
	if (r == cudaSuccess)
		r = phos_preload_connect();
	if (r == cudaSuccess)
		r = gdev_new(state);
	if (r == cudaSuccess) {
		/* made now, so that the executor's errors come at the instantiation, as CUDA's do */
		adopt = phos_preload_section_enter();
		r = adopt < 0 ? cudaErrorDevicesUnavailable : build_described(*state, &b, p, len, adopt);
		phos_preload_section_leave();
	}
	free(p);
	if (r == cudaSuccess) {
		*ret_device = true;
		phos_debug("a graph of %zu nodes is made on the device", g->n);
	} else if (!must) {   /* replayed, as before: its launch says what is wrong, if anything */
		phos_debug("a graph is replayed, not made on the device: it holds %s", why ? why : "a node");
		graph_device_free(*state);
		*state = NULL;
		r = cudaSuccess;
	} else if (r == cudaErrorNotSupported && why) {
		fprintf(stderr, "phos-fn: a CUDA graph with conditional nodes holds %s, which phos-fn cannot make on "
			"the device: cudaGraphInstantiate returns cudaErrorNotSupported\n", why);
	}
	return r;
}

void graph_device_dirty(struct gdev *gd)
{
	if (gd)
		gd->dirty = true;
}

void graph_device_free(struct gdev *gd)
{
	struct phos_handle h;

	if (!gd)
		return;
	h.id = gd->id;
	h._pad = 0;
	if (gd->built && gd->epoch == restore_epoch)
		phos_preload_post(PHOS_OP_GRAPH_DESTROY, &h, sizeof(h), NULL, 0);   /* gone with its executor else */
	phos_ids_take(PHOS_H_GRAPH, gd->id);
	free(gd);
}
