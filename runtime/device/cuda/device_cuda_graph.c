/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs on the cuda device (device.h: graph_make, graph_launch,
 * graph_destroy): the executor's description made into a real CUgraph with
 * cuGraphAddNode, node after node (a body graph exists once its conditional
 * node was added), its conditional handles made with
 * cuGraphConditionalHandleCreate on the graph each belongs to and written
 * into the kernel parameters the description names, then instantiated.
 */
#include "device_cuda_syms.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

struct cuda_graph {
	CUgraph graph;
	CUgraphExec exec;
};

/* Makes the handles of every condition that belongs to (parent, body), on g. */
static int make_handles(const struct phos_dev_graph *d, struct cuda_dev *cd, uint32_t parent, uint32_t body,
			CUgraph g, CUgraphConditionalHandle *handles, bool *made)
{
	for (uint32_t c = 0; c < d->nconds; c++) {
		if (d->conds[c].parent != parent || d->conds[c].body != body)
			continue;
		CU_CHECK(cuda_drv.GraphConditionalHandleCreate(&handles[c], g, cd->ctx, d->conds[c].deflt,
							       d->conds[c].flags));
		made[c] = true;
	}
	return 0;
}

/* Fills p for node n (kernel parameters into *ret_buf, malloc'd, handles
 * written in). */
static int node_params(struct cuda_dev *cd, const struct phos_dev_gnode *n, const CUgraphConditionalHandle *handles,
		       const bool *made, uint32_t nconds, CUgraphNodeParams *p, uint8_t **ret_buf, void **extra,
		       size_t *size)
{
	memset(p, 0, sizeof(*p));
	switch (n->kind) {
	case PHOS_GNODE_EMPTY:
		p->type = CU_GRAPH_NODE_TYPE_EMPTY;
		return 0;
	case PHOS_GNODE_KERNEL: {
		uint8_t *buf = malloc(n->param_bytes ? n->param_bytes : 1);

		if (!buf)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		memcpy(buf, n->params, n->param_bytes);
		for (uint32_t c = 0; c < n->ncond_at; c++) {
			uint32_t off = n->cond_at[2 * c], which = n->cond_at[2 * c + 1];

			if (which >= nconds || !made[which] || (uint64_t)off + 8 > n->param_bytes) {
				free(buf);
				return -PHOS_CUDA_INVALID_VALUE;
			}
			memcpy(buf + off, &handles[which], sizeof(handles[which]));
		}
		*size = n->param_bytes;
		extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
		extra[1] = buf;
		extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
		extra[3] = size;
		extra[4] = CU_LAUNCH_PARAM_END;
		p->type = CU_GRAPH_NODE_TYPE_KERNEL;
		p->kernel.func = (CUfunction)n->func;
		p->kernel.gridDimX = n->grid[0];
		p->kernel.gridDimY = n->grid[1];
		p->kernel.gridDimZ = n->grid[2];
		p->kernel.blockDimX = n->block[0];
		p->kernel.blockDimY = n->block[1];
		p->kernel.blockDimZ = n->block[2];
		p->kernel.sharedMemBytes = n->shared;
		p->kernel.extra = n->param_bytes ? extra : NULL;
		*ret_buf = buf;
		return 0;
	}
	case PHOS_GNODE_COPY:
	case PHOS_GNODE_HOSTCOPY: {
		CUDA_MEMCPY3D *c = &p->memcpy.copyParams;
		bool host_src = n->kind == PHOS_GNODE_HOSTCOPY && n->h2d;
		bool host_dst = n->kind == PHOS_GNODE_HOSTCOPY && !n->h2d;

		p->type = CU_GRAPH_NODE_TYPE_MEMCPY;
		p->memcpy.copyCtx = cd->ctx;
		c->srcMemoryType = host_src ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		if (host_src)
			c->srcHost = n->host;
		else
			c->srcDevice = n->src;
		c->dstMemoryType = host_dst ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		if (host_dst)
			c->dstHost = n->host;
		else
			c->dstDevice = n->dst;
		c->WidthInBytes = n->len;
		c->Height = 1;
		c->Depth = 1;
		return 0;
	}
	case PHOS_GNODE_SET:
		p->type = CU_GRAPH_NODE_TYPE_MEMSET;
		p->memset.dst = n->dst;
		p->memset.pitch = n->pitch;
		p->memset.value = n->value;
		p->memset.elementSize = n->elem;
		p->memset.width = n->width;
		p->memset.height = n->height;
		p->memset.ctx = cd->ctx;
		return 0;
	case PHOS_GNODE_EVENT_RECORD:
		p->type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
		p->eventRecord.event = (CUevent)n->event;
		return 0;
	case PHOS_GNODE_EVENT_WAIT:
		p->type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
		p->eventWait.event = (CUevent)n->event;
		return 0;
	case PHOS_GNODE_COND:
		if (n->cond >= nconds || !made[n->cond])
			return -PHOS_CUDA_INVALID_VALUE;
		p->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
		p->conditional.handle = handles[n->cond];
		p->conditional.type = (CUgraphConditionalNodeType)n->type;
		p->conditional.size = n->size;
		p->conditional.ctx = cd->ctx;
		return 0;
	}
	return -PHOS_CUDA_NOT_SUPPORTED;
}

static int build(struct cuda_dev *cd, const struct phos_dev_graph *d, CUgraph root, CUgraphNode *made_nodes,
		 CUgraph **bodies, CUgraphConditionalHandle *handles, bool *made)
{
	CUgraphNode deps[64], *many = NULL;
	int r = make_handles(d, cd, PHOS_GRAPH_ROOT, 0, root, handles, made);

	for (uint32_t i = 0; r == 0 && i < d->nnodes; i++) {
		const struct phos_dev_gnode *n = &d->nodes[i];
		CUgraph g = n->parent == PHOS_GRAPH_ROOT ? root : bodies[n->parent] ? bodies[n->parent][n->body] : NULL;
		CUgraphNode *dep = deps;
		CUgraphNodeParams p;
		uint8_t *buf = NULL;
		void *extra[5];
		size_t size;
		CUresult cr;

		if (!g)
			return -PHOS_CUDA_INVALID_VALUE;
		if (n->ndeps > 64) {
			free(many);
			many = malloc(n->ndeps * sizeof(*many));
			if (!many)
				return -PHOS_CUDA_MEMORY_ALLOCATION;
			dep = many;
		}
		for (uint32_t j = 0; j < n->ndeps; j++)
			dep[j] = made_nodes[n->deps[j]];
		r = node_params(cd, n, handles, made, d->nconds, &p, &buf, extra, &size);
		if (r < 0)
			break;
		cr = cuda_drv.GraphAddNode(&made_nodes[i], g, dep, NULL, n->ndeps, &p);
		free(buf);
		if (cr != CUDA_SUCCESS) {
			r = cu_fail(cr, "cuGraphAddNode", __FILE__, __LINE__);
			break;
		}
		if (n->kind != PHOS_GNODE_COND)
			continue;
		bodies[i] = p.conditional.phGraph_out;   /* the driver's, alive with the node */
		for (uint32_t b = 0; r == 0 && b < n->size; b++)
			r = make_handles(d, cd, i, b, bodies[i][b], handles, made);
	}
	free(many);
	return r;
}

int cuda_graph_make(struct phos_device *dev, const struct phos_dev_graph *d, void **ret_graph)
{
	struct cuda_dev *cd = cuda_dev(dev);
	struct cuda_graph *g;
	CUgraphNode *made_nodes;
	CUgraph **bodies;
	CUgraphConditionalHandle *handles;
	bool *made;
	CUresult cr;
	int r;

	if (!cd || !d || !ret_graph)
		return -PHOS_CUDA_INVALID_VALUE;
	r = cuda_current(cd);
	if (r < 0)
		return r;
	g = calloc(1, sizeof(*g));
	made_nodes = calloc(d->nnodes ? d->nnodes : 1, sizeof(*made_nodes));
	bodies = calloc(d->nnodes ? d->nnodes : 1, sizeof(*bodies));
	handles = calloc(d->nconds ? d->nconds : 1, sizeof(*handles));
	made = calloc(d->nconds ? d->nconds : 1, sizeof(*made));
	if (!g || !made_nodes || !bodies || !handles || !made) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	cr = cuda_drv.GraphCreate(&g->graph, 0);
	if (cr != CUDA_SUCCESS) {
		r = cu_fail(cr, "cuGraphCreate", __FILE__, __LINE__);
		goto out;
	}
	r = build(cd, d, g->graph, made_nodes, bodies, handles, made);
	if (r == 0) {
		cr = cuda_drv.GraphInstantiateWithFlags(&g->exec, g->graph, 0);
		if (cr != CUDA_SUCCESS)
			r = cu_fail(cr, "cuGraphInstantiateWithFlags", __FILE__, __LINE__);
	}
out:
	free(made_nodes);
	free(bodies);
	free(handles);
	free(made);
	if (r < 0) {
		cuda_graph_destroy(dev, g);
		return r;
	}
	*ret_graph = g;
	return 0;
}

int cuda_graph_launch(struct phos_device *dev, void *graph, void *stream)
{
	struct cuda_graph *g = graph;
	struct cuda_dev *cd = cuda_dev(dev);
	int r = cd ? cuda_current(cd) : -PHOS_CUDA_INVALID_VALUE;

	if (r < 0)
		return r;
	if (!g || !g->exec)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.GraphLaunch(g->exec, stream ? (CUstream)stream : CU_STREAM_LEGACY));
	return 0;
}

void cuda_graph_destroy(struct phos_device *dev, void *graph)
{
	struct cuda_graph *g = graph;
	struct cuda_dev *cd = cuda_dev(dev);

	if (!g)
		return;
	if (cd && cuda_current(cd) == 0) {
		if (g->exec)
			cuda_drv.GraphExecDestroy(g->exec);
		if (g->graph)
			cuda_drv.GraphDestroy(g->graph);
	}
	free(g);
}
