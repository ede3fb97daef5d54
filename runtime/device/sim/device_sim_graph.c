/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs on the sim device (device.h: graph_make, graph_launch,
 * graph_destroy). A graph is kept as the executor described it (a deep copy)
 * and runs when it is launched, as sim runs all work: node after node in
 * their order (every node after its dependencies), through sim's own launch,
 * copy, set and event members (the ops table device_sim.c passes to the
 * launch: this file does not name phos_device_sim, which names this file).
 * A conditional node looks at its handle's value when it is reached: an if
 * runs its first body when the value is not 0 (else its second, when it has
 * two), a while runs its body for as long as the value is not 0 (looked at
 * before each round), a switch the body the value names (none past the last).
 * Twins set values through the function the sim device binds into their
 * plugin (sim_twin.h), which finds the graph being run on this thread.
 *
 * Handles: the device's handle of condition i of graph g is
 * SIM_COND_TAG | g's serial << 16 | i: never the value the program holds
 * (proto.h's tag), so a parameter the executor failed to rewrite reaches the
 * twin as a handle sim does not know, and the launch fails.
 */
#include <stdlib.h>
#include <string.h>

#include "device_sim.h"
#include "log.h"
#include "sim_twin.h"

#define SIM_COND_TAG 0x53494d0000000000ull   /* "SIM" */
#define SIM_WHILE_MAX (1u << 24)              /* rounds of one while node: a loop that never ends fails */

struct sim_graph {
	struct phos_dev_gnode *nodes;
	uint32_t nnodes;
	struct phos_dev_gcond *conds;
	uint32_t nconds;
	uint32_t *deps;               /* every node's, in node order (the nodes point into it) */
	uint8_t *params;              /* every kernel node's, handles written in */
	uint64_t serial;
	uint32_t *value;              /* each condition's value during a launch */
	bool bad;                     /* a twin set an unknown handle */
};

static _Atomic uint64_t graph_serial;
static __thread struct sim_graph *running;

static uint64_t cond_handle(const struct sim_graph *g, uint32_t i)
{
	return SIM_COND_TAG | (g->serial & 0xffffff) << 16 | i;
}

/* cudaGraphSetConditional, from a twin (bound by device_sim.c). */
void phos_sim_cond_set(uint64_t handle, unsigned value)
{
	struct sim_graph *g = running;

	if (!g) {
		phos_warn("sim: cudaGraphSetConditional outside a graph launch");
		return;
	}
	for (uint32_t i = 0; i < g->nconds; i++) {
		if (cond_handle(g, i) == handle) {
			g->value[i] = value;
			return;
		}
	}
	phos_warn("sim: cudaGraphSetConditional with handle %#llx, not one of this graph's",
		  (unsigned long long)handle);
	g->bad = true;
}

void phos_sim_graph_destroy(struct phos_device *dev, void *graph)
{
	struct sim_graph *g = graph;

	(void)dev;
	if (!g)
		return;
	free(g->nodes);
	free(g->conds);
	free(g->deps);
	free(g->params);
	free(g->value);
	free(g);
}

int phos_sim_graph_make(struct phos_device *dev, const struct phos_dev_graph *d, void **ret_graph)
{
	struct sim_graph *g = calloc(1, sizeof(*g));
	uint64_t ndeps = 0, nparams = 0, pk = 0, pd = 0;

	(void)dev;
	if (!g)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	for (uint32_t i = 0; i < d->nnodes; i++) {
		ndeps += d->nodes[i].ndeps;
		if (d->nodes[i].kind == PHOS_GNODE_KERNEL)
			nparams += d->nodes[i].param_bytes;
	}
	g->nodes = calloc(d->nnodes ? d->nnodes : 1, sizeof(*g->nodes));
	g->conds = calloc(d->nconds ? d->nconds : 1, sizeof(*g->conds));
	g->value = calloc(d->nconds ? d->nconds : 1, sizeof(*g->value));
	g->deps = calloc(ndeps ? ndeps : 1, sizeof(*g->deps));
	g->params = malloc(nparams ? nparams : 1);
	if (!g->nodes || !g->conds || !g->value || !g->deps || !g->params) {
		phos_sim_graph_destroy(dev, g);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	g->serial = ++graph_serial;
	g->nnodes = d->nnodes;
	g->nconds = d->nconds;
	if (d->nconds)
		memcpy(g->conds, d->conds, d->nconds * sizeof(*g->conds));
	for (uint32_t i = 0; i < d->nconds; i++)
		g->value[i] = d->conds[i].deflt;
	for (uint32_t i = 0; i < d->nnodes; i++) {
		struct phos_dev_gnode *n = &g->nodes[i];

		*n = d->nodes[i];
		if (n->ndeps)
			memcpy(g->deps + pd, d->nodes[i].deps, n->ndeps * sizeof(*g->deps));
		n->deps = g->deps + pd;
		pd += n->ndeps;
		n->cond_at = NULL;
		n->ncond_at = 0;
		if (n->kind != PHOS_GNODE_KERNEL)
			continue;
		if (n->param_bytes)
			memcpy(g->params + pk, d->nodes[i].params, n->param_bytes);
		for (uint32_t c = 0; c < d->nodes[i].ncond_at; c++) {
			uint32_t off = d->nodes[i].cond_at[2 * c], which = d->nodes[i].cond_at[2 * c + 1];
			uint64_t h;

			if (which >= d->nconds || (uint64_t)off + 8 > n->param_bytes) {
				phos_sim_graph_destroy(dev, g);
				return -PHOS_CUDA_INVALID_VALUE;
			}
			h = cond_handle(g, which);
			memcpy(g->params + pk + off, &h, sizeof(h));
		}
		n->params = g->params + pk;
		pk += n->param_bytes;
	}
	*ret_graph = g;
	return 0;
}

static int run_body(const struct phos_device_ops *ops, struct phos_device *dev, struct sim_graph *g, uint32_t parent,
		    uint32_t body, void *stream);

static int run_node(const struct phos_device_ops *ops, struct phos_device *dev, struct sim_graph *g, uint32_t i,
		    void *stream)
{
	const struct phos_dev_gnode *n = &g->nodes[i];
	int r = 0;

	switch (n->kind) {
	case PHOS_GNODE_EMPTY:
		return 0;
	case PHOS_GNODE_KERNEL:
		r = ops->launch(dev, n->func, n->ki, n->grid, n->block, n->shared, stream, n->params, n->param_bytes);
		return r ? r : g->bad ? -PHOS_CUDA_LAUNCH_FAILURE : 0;
	case PHOS_GNODE_COPY:
		return ops->memcpy_d2d(dev, n->dst, n->src, n->len, stream);
	case PHOS_GNODE_HOSTCOPY:
		return n->h2d ? ops->memcpy_h2d_async(dev, n->dst, n->host, n->len, stream)
			      : ops->memcpy_d2h_async(dev, n->host, n->src, n->len, stream);
	case PHOS_GNODE_SET:
		/* sim's memset_2d writes bytes: a wider element is written row by row */
		if (n->elem == 1)
			return ops->memset_2d(dev, n->dst, n->pitch, (uint8_t)n->value, n->width, n->height, stream);
		for (uint64_t y = 0; y < n->height; y++) {
			uint64_t row = n->dst + y * n->pitch, bytes = n->width * n->elem;

			if (!phos_sim_range_ok(dev, row, bytes))
				return -PHOS_CUDA_INVALID_VALUE;
			for (uint64_t x = 0; x < n->width; x++)
				memcpy((uint8_t *)(uintptr_t)row + x * n->elem, &n->value, n->elem);
		}
		return 0;
	case PHOS_GNODE_EVENT_RECORD:
		return ops->event_record(dev, n->event, stream);
	case PHOS_GNODE_EVENT_WAIT:
		return ops->stream_wait_event(dev, stream, n->event);
	case PHOS_GNODE_COND: {
		uint32_t *v = &g->value[n->cond];

		switch (n->type) {
		case PHOS_GCOND_IF:
			if (*v)
				return run_body(ops, dev, g, i, 0, stream);
			return n->size == 2 ? run_body(ops, dev, g, i, 1, stream) : 0;
		case PHOS_GCOND_WHILE:
			for (uint32_t round = 0; *v && r == 0; round++) {
				if (round == SIM_WHILE_MAX) {
					phos_warn("sim: a while node ran %u rounds: given up", SIM_WHILE_MAX);
					return -PHOS_CUDA_LAUNCH_FAILURE;
				}
				r = run_body(ops, dev, g, i, 0, stream);
			}
			return r;
		case PHOS_GCOND_SWITCH:
			return *v < n->size ? run_body(ops, dev, g, i, *v, stream) : 0;
		}
		return -PHOS_CUDA_INVALID_VALUE;
	}
	}
	return -PHOS_CUDA_NOT_SUPPORTED;
}

/* The nodes of one body (parent PHOS_GRAPH_ROOT: the graph itself), in order. */
static int run_body(const struct phos_device_ops *ops, struct phos_device *dev, struct sim_graph *g, uint32_t parent,
		    uint32_t body, void *stream)
{
	int r = 0;

	for (uint32_t i = parent == PHOS_GRAPH_ROOT ? 0 : parent + 1; i < g->nnodes && r == 0; i++)
		if (g->nodes[i].parent == parent && g->nodes[i].body == body)
			r = run_node(ops, dev, g, i, stream);
	return r;
}

int phos_sim_graph_launch(const struct phos_device_ops *ops, struct phos_device *dev, void *graph, void *stream)
{
	struct sim_graph *g = graph, *outer = running;
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (!g)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	for (uint32_t i = 0; i < g->nconds; i++)
		if (g->conds[i].flags & 1u)   /* cudaGraphCondAssignDefault */
			g->value[i] = g->conds[i].deflt;
	g->bad = false;
	running = g;
	r = run_body(ops, dev, g, PHOS_GRAPH_ROOT, 0, stream);
	running = outer;
	return r;
}
