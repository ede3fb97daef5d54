/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs made on the device (PHOS_OP_GRAPH_*, proto.h): the preload
 * describes an instantiated graph node by node (GRAPH_BUILD), the executor
 * checks every node, resolves what it names (kernels, events, shared host
 * regions, the device's conditional handles over the preload's values) and has the device make
 * and instantiate the graph; a GRAPH_LAUNCH runs it on a stream as one
 * record.
 *
 * Read/write sets: a launch's set is the union of every node's, those of
 * every body of its conditional nodes included (a body may run no time or
 * many), each computed as for the call the node stands for (spec.c) at the
 * launch, from the buffers live then. So on-demand restore, checkpoints and
 * the trace see one record with a set that holds whatever the graph may
 * touch: a kernel that is opaque makes the whole launch opaque. Graph
 * launches are never run as validating twins (--validate-spec validates
 * launches made one by one).
 *
 * A graph lives in this executor only: snapshots and checkpoints do not
 * hold it. The preload describes it again to a restored executor before its
 * next launch (graph_exec.c).
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "log.h"

struct exec_graph {
	int device;                    /* of the executor's devices: where it was made */
	void *dev_graph;
	uint32_t nnodes;
	struct phos_graph_node *nodes;
	uint8_t *params;               /* every kernel node's, in node order */
	uint32_t *param_off;           /* per node: where its parameters start */
	void **held;                   /* per node: what the device graph holds of it: an event node's event,
	                                * a host copy's region mapping */
};

void exec_graph_free(struct executor *ex, struct exec_graph *g)
{
	if (!g)
		return;
	if (g->dev_graph) {
		int was = ex->dev_index;

		exec_use_device(ex, g->device);
		ex->dev_ops->graph_destroy(ex->dev, g->dev_graph);
		exec_use_device(ex, was);
	}
	free(g->nodes);
	free(g->params);
	free(g->param_off);
	free(g->held);
	free(g);
}

bool exec_graph_in_use(const struct executor *ex)
{
	for (uint32_t i = 0; i < ex->graphs.cap; i++)
		if (ex->graphs.slot[i])
			return true;
	return false;
}

/* What every node of g may read and write, into s. */
static int graph_set(struct executor *ex, const struct exec_graph *g, struct spec_set *s)
{
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const struct phos_graph_node *n = &g->nodes[i];

		switch (n->kind) {
		case PHOS_GNODE_KERNEL: {
			const struct exec_func *f = handle_get(&ex->funcs, n->k.func);

			if (!f)
				return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
			if (f->error)
				return f->error;
			TRY(spec_launch(ex, f, g->params + g->param_off[i], n->k.param_bytes, s));
			break;
		}
		case PHOS_GNODE_COPY:
			TRY(spec_range(ex, s, n->copy.src, n->copy.len, SPEC_READ));
			TRY(spec_range(ex, s, n->copy.dst, n->copy.len, SPEC_WRITE));
			break;
		case PHOS_GNODE_SET:
			if (n->set.height)
				TRY(spec_range(ex, s, n->set.dst,
					       (n->set.height - 1) * n->set.pitch + n->set.width * n->set.elem, SPEC_WRITE));
			break;
		case PHOS_GNODE_HOSTCOPY: {
			/* the graph holds the region's mapping: it must still be there */
			const struct exec_region *reg = exec_region_at(ex, n->hcopy.region, n->hcopy.offset,
								       n->hcopy.len);

			if (!reg || (g->held[i] && reg->ptr != g->held[i]))
				return -PHOS_CUDA_INVALID_VALUE;
			TRY(spec_range(ex, s, n->hcopy.dev, n->hcopy.len, n->hcopy.h2d ? SPEC_WRITE : SPEC_READ));
			break;
		}
		case PHOS_GNODE_EVENT_RECORD:
		case PHOS_GNODE_EVENT_WAIT: {
			/* the graph holds the device's event: it must still be the
			 * program's (not destroyed, its id not taken again) */
			const struct exec_event_obj *e = handle_get(&ex->events, n->ev.event);

			if (!e || (g->held[i] && e->dev != g->held[i]))
				return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
			break;
		}
		default:
			break;
		}
	}
	return 0;
}

/* Is the graph of node `at` (parent, body) the graph `owner` names, or a
 * body inside it? */
static bool graph_within(const struct phos_graph_node *nodes, uint32_t parent, uint32_t body, uint32_t owner_parent,
			 uint32_t owner_body)
{
	for (;;) {
		if (parent == owner_parent && body == owner_body)
			return true;
		if (parent == PHOS_GRAPH_ROOT)
			return false;
		body = nodes[parent].body;
		parent = nodes[parent].parent;
	}
}

static bool body_ok(const struct phos_graph_node *nodes, uint32_t i, uint32_t parent, uint32_t body)
{
	if (parent == PHOS_GRAPH_ROOT)
		return body == 0;
	return parent < i && nodes[parent].kind == PHOS_GNODE_COND && body < nodes[parent].cond.size;
}

/* Checks node i of b (its dependencies at deps, its parameters' bytes). */
static int node_check(struct executor *ex, const struct phos_graph_node *nodes, uint32_t i, const uint32_t *deps,
		      const struct phos_graph_cond *conds, uint32_t nconds)
{
	const struct phos_graph_node *n = &nodes[i];

	if (!body_ok(nodes, i, n->parent, n->body))
		return -PHOS_CUDA_INVALID_VALUE;
	for (uint32_t j = 0; j < n->ndeps; j++)
		if (deps[j] >= i || nodes[deps[j]].parent != n->parent || nodes[deps[j]].body != n->body)
			return -PHOS_CUDA_INVALID_VALUE;
	switch (n->kind) {
	case PHOS_GNODE_EMPTY:
		return 0;
	case PHOS_GNODE_KERNEL: {
		const struct exec_func *f = handle_get(&ex->funcs, n->k.func);

		if (!f)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		if (f->error)
			return f->error;
		return n->k.param_bytes == f->info.param_bytes ? 0 : -PHOS_CUDA_INVALID_VALUE;
	}
	case PHOS_GNODE_COPY:
	case PHOS_GNODE_HOSTCOPY:
		return 0;   /* its ranges (and region) are checked with the sets */
	case PHOS_GNODE_SET:
		if ((n->set.elem != 1 && n->set.elem != 2 && n->set.elem != 4) || !n->set.height ||
		    n->set.width > (UINT64_MAX >> 3) || (n->set.height > 1 && n->set.pitch < n->set.width * n->set.elem) ||
		    (n->set.height > 1 && n->set.pitch > (UINT64_MAX >> 1) / n->set.height))
			return -PHOS_CUDA_INVALID_VALUE;
		return 0;
	case PHOS_GNODE_EVENT_RECORD:
	case PHOS_GNODE_EVENT_WAIT: {
		const struct exec_event_obj *e = handle_get(&ex->events, n->ev.event);

		if (n->parent != PHOS_GRAPH_ROOT)
			return -PHOS_CUDA_INVALID_VALUE;   /* CUDA allows no events in bodies */
		if (!e)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		return e->device == ex->dev_index ? 0 : -PHOS_CUDA_INVALID_VALUE;
	}
	case PHOS_GNODE_COND: {
		const struct phos_graph_cond *c;

		if (n->cond.cond >= nconds || n->cond.type > PHOS_GCOND_SWITCH || !n->cond.size ||
		    (n->cond.type == PHOS_GCOND_IF && n->cond.size > 2) ||
		    (n->cond.type == PHOS_GCOND_WHILE && n->cond.size != 1) || n->cond.size > PHOS_GRAPH_MAX_BODIES)
			return -PHOS_CUDA_INVALID_VALUE;
		c = &conds[n->cond.cond];
		/* the handle was made on this node's graph or on one it is in */
		return graph_within(nodes, n->parent, n->body, c->parent, c->body) ? 0 : -PHOS_CUDA_INVALID_VALUE;
	}
	}
	return -PHOS_CUDA_INVALID_VALUE;
}

/* The parameter slots of kernel f's packed parameters p that hold one of
 * the graph's conditional handles: pairs (offset, index) into at (room for
 * 2 * min(nparams, PHOS_MAX_PARAMS)). A value with the preload's tag that
 * is not one of the graph's is refused: the kernel would set a condition of
 * no node here. */
static int cond_slots(const struct exec_func *f, const uint8_t *p, const struct phos_graph_cond *conds,
		      uint32_t nconds, uint32_t *at, uint32_t *ret_n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < f->info.nparams && i < PHOS_MAX_PARAMS; i++) {
		uint64_t v;
		uint32_t c;

		if (f->info.params[i].size != 8 || (uint64_t)f->info.params[i].offset + 8 > f->info.param_bytes)
			continue;
		memcpy(&v, p + f->info.params[i].offset, sizeof(v));
		if ((v & PHOS_GRAPH_COND_MASK) != PHOS_GRAPH_COND_TAG)
			continue;
		for (c = 0; c < nconds && conds[c].handle != v; c++)
			;
		if (c == nconds)
			return -PHOS_CUDA_INVALID_VALUE;
		at[2 * k] = f->info.params[i].offset;
		at[2 * k + 1] = c;
		k++;
	}
	*ret_n = k;
	return 0;
}

/* Makes g on the device from the checked description. */
static int graph_make(struct executor *ex, struct exec_graph *g, const struct phos_graph_cond *conds,
		      uint32_t nconds, const uint32_t *deps)
{
	struct phos_dev_gnode *dn = calloc(g->nnodes, sizeof(*dn));
	struct phos_dev_gcond *dc = calloc(nconds ? nconds : 1, sizeof(*dc));
	uint32_t *slots = NULL, nslots = 0, used = 0;
	uint64_t dp = 0;
	int r = 0;

	for (uint32_t i = 0; i < g->nnodes; i++) {
		const struct exec_func *f;

		if (g->nodes[i].kind != PHOS_GNODE_KERNEL)
			continue;
		f = handle_get(&ex->funcs, g->nodes[i].k.func);   /* checked by node_check */
		nslots += 2 * (f->info.nparams < PHOS_MAX_PARAMS ? f->info.nparams : PHOS_MAX_PARAMS);
	}
	slots = calloc(nslots ? nslots : 1, sizeof(*slots));
	if (!dn || !dc || !slots) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	for (uint32_t c = 0; c < nconds; c++)
		dc[c] = (struct phos_dev_gcond){ .parent = conds[c].parent, .body = conds[c].body,
						 .deflt = conds[c].deflt, .flags = conds[c].flags };
	for (uint32_t i = 0; i < g->nnodes && r == 0; i++) {
		const struct phos_graph_node *n = &g->nodes[i];
		struct phos_dev_gnode *d = &dn[i];

		d->kind = n->kind;
		d->parent = n->parent;
		d->body = n->body;
		d->deps = deps + dp;
		d->ndeps = n->ndeps;
		dp += n->ndeps;
		switch (n->kind) {
		case PHOS_GNODE_KERNEL: {
			const struct exec_func *f = handle_get(&ex->funcs, n->k.func);

			d->func = exec_func_here(ex, f);
			d->ki = &f->info;
			memcpy(d->grid, n->k.grid, sizeof(d->grid));
			memcpy(d->block, n->k.block, sizeof(d->block));
			d->shared = n->k.shared;
			d->params = g->params + g->param_off[i];
			d->param_bytes = n->k.param_bytes;
			d->cond_at = slots + used;
			r = cond_slots(f, d->params, conds, nconds, slots + used, &d->ncond_at);
			used += 2 * d->ncond_at;
			break;
		}
		case PHOS_GNODE_COPY:
			d->dst = n->copy.dst;
			d->src = n->copy.src;
			d->len = n->copy.len;
			break;
		case PHOS_GNODE_HOSTCOPY: {
			/* checked by graph_set */
			const struct exec_region *reg = exec_region_at(ex, n->hcopy.region, n->hcopy.offset,
								       n->hcopy.len);

			d->h2d = n->hcopy.h2d != 0;
			d->dst = d->h2d ? n->hcopy.dev : 0;
			d->src = d->h2d ? 0 : n->hcopy.dev;
			d->len = n->hcopy.len;
			d->host = (uint8_t *)reg->ptr + n->hcopy.offset;
			g->held[i] = reg->ptr;
			break;
		}
		case PHOS_GNODE_SET:
			d->dst = n->set.dst;
			d->pitch = n->set.pitch;
			d->width = n->set.width;
			d->height = n->set.height;
			d->value = n->set.value;
			d->elem = n->set.elem;
			break;
		case PHOS_GNODE_EVENT_RECORD:
		case PHOS_GNODE_EVENT_WAIT:
			d->event = ((const struct exec_event_obj *)handle_get(&ex->events, n->ev.event))->dev;
			g->held[i] = d->event;
			break;
		case PHOS_GNODE_COND:
			d->cond = n->cond.cond;
			d->type = n->cond.type;
			d->size = n->cond.size;
			break;
		}
	}
	if (r == 0) {
		struct phos_dev_graph desc = { .nodes = dn, .nnodes = g->nnodes, .conds = dc, .nconds = nconds };

		r = ex->dev_ops->graph_make(ex->dev, &desc, &g->dev_graph);
	}
out:
	free(dn);
	free(dc);
	free(slots);
	return r;
}

static int graph_build(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_graph_build, b);
	const uint8_t *p = (const uint8_t *)(b + 1);
	const struct phos_graph_cond *conds;
	const uint32_t *deps;
	uint64_t cond_bytes, node_bytes, dep_bytes, dp = 0, pp = 0;
	struct exec_graph *g;
	struct spec_set set;
	int r = 0;

	if (!b->graph || b->graph >= EXEC_MAX_HANDLES || !b->nnodes || b->nnodes > PHOS_GRAPH_MAX_NODES ||
	    b->nconds > b->nnodes || b->ndeps > (uint64_t)b->nnodes * b->nnodes)
		return -PHOS_CUDA_INVALID_VALUE;
	cond_bytes = (uint64_t)b->nconds * sizeof(struct phos_graph_cond);
	node_bytes = (uint64_t)b->nnodes * sizeof(struct phos_graph_node);
	dep_bytes = ((uint64_t)b->ndeps * sizeof(uint32_t) + 7) & ~7ull;
	if (cond_bytes + node_bytes + dep_bytes + b->param_bytes != len - sizeof(*b))
		return -PHOS_CUDA_INVALID_VALUE;
	conds = (const struct phos_graph_cond *)p;
	deps = (const uint32_t *)(p + cond_bytes + node_bytes);
	g = calloc(1, sizeof(*g));
	if (!g)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	g->device = ex->dev_index;
	g->nnodes = b->nnodes;
	g->nodes = malloc(node_bytes);
	g->params = malloc(b->param_bytes ? b->param_bytes : 1);
	g->param_off = calloc(b->nnodes, sizeof(*g->param_off));
	g->held = calloc(b->nnodes, sizeof(*g->held));
	if (!g->nodes || !g->params || !g->param_off || !g->held) {
		exec_graph_free(ex, g);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	memcpy(g->nodes, p + cond_bytes, node_bytes);
	memcpy(g->params, p + cond_bytes + node_bytes + dep_bytes, b->param_bytes);
	for (uint32_t c = 0; c < b->nconds && r == 0; c++) {
		const struct phos_graph_cond *k = &conds[c];

		if ((k->handle & PHOS_GRAPH_COND_MASK) != PHOS_GRAPH_COND_TAG || k->flags > 1u ||
		    !(k->parent == PHOS_GRAPH_ROOT ? k->body == 0
						   : k->parent < b->nnodes && g->nodes[k->parent].kind == PHOS_GNODE_COND &&
							     k->body < g->nodes[k->parent].cond.size))
			r = -PHOS_CUDA_INVALID_VALUE;
		for (uint32_t o = 0; o < c && r == 0; o++)
			if (conds[o].handle == k->handle)
				r = -PHOS_CUDA_INVALID_VALUE;
	}
	for (uint32_t i = 0; i < b->nnodes && r == 0; i++) {
		const struct phos_graph_node *n = &g->nodes[i];

		if (dp + n->ndeps > b->ndeps) {
			r = -PHOS_CUDA_INVALID_VALUE;
			break;
		}
		r = node_check(ex, g->nodes, i, deps + dp, conds, b->nconds);
		dp += n->ndeps;
		if (n->kind == PHOS_GNODE_KERNEL) {
			if (pp + n->k.param_bytes > b->param_bytes)
				r = -PHOS_CUDA_INVALID_VALUE;
			g->param_off[i] = (uint32_t)pp;
			pp += n->k.param_bytes;
		}
	}
	if (r == 0 && (dp != b->ndeps || pp != b->param_bytes))
		r = -PHOS_CUDA_INVALID_VALUE;
	/* every pointer and range must name live memory now, as at a launch */
	spec_clear(&set);
	if (r == 0)
		r = graph_set(ex, g, &set);
	if (r == 0)
		r = graph_make(ex, g, conds, b->nconds, deps);
	if (r == 0)
		r = handle_put(&ex->graphs, b->graph, g);
	if (r < 0) {
		exec_graph_free(ex, g);
		return r;
	}
	return 0;
}

static int graph_launch(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_graph_launch, l);
	struct exec_graph *g = handle_get(&ex->graphs, l->graph);
	struct spec_set set;
	void *stream;

	if (!g)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	TRY(exec_stream(ex, l->stream, &stream));
	if (ex->dev_index != g->device)
		return -PHOS_CUDA_INVALID_VALUE;   /* made on another device */
	spec_clear(&set);
	TRY(graph_set(ex, g, &set));
	TRY(spec_commit(ex, "graph", NULL, l->stream, &set));
	return ex->dev_ops->graph_launch(ex->dev, g->dev_graph, stream);
}

int exec_graph_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len)
{
	const struct phos_handle *h = body;

	switch (op) {
	case PHOS_OP_GRAPH_BUILD:
		return graph_build(ex, body, len);
	case PHOS_OP_GRAPH_LAUNCH:
		return graph_launch(ex, body, len);
	case PHOS_OP_GRAPH_DESTROY:
		if (len < sizeof(*h))
			return -PHOS_CUDA_INVALID_VALUE;
		/* an id this executor never made is fine: the graph was made in
		 * the one before a restore */
		exec_graph_free(ex, handle_take(&ex->graphs, h->id));
		return 0;
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
