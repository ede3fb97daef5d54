/* SPDX-License-Identifier: MIT */
/*
 * Graph memory nodes: cudaGraphAddMemAllocNode / cudaGraphAddMemFreeNode,
 * and cudaMallocAsync / cudaFreeAsync captured from a stream.
 *
 * CUDA gives an allocation node's address when the node is made, and keeps
 * it for every launch of the graph. Graphs here are replayed node by node
 * (graph_internal.h), so an allocation is an ordinary device buffer made
 * with the node (cudaMalloc, in the deterministic arena: its address is
 * fixed, read/write sets, snapshots and on-demand restores treat it as any
 * buffer), and the nodes only move its state:
 *
 *   alloc node made ──▶ backing buffer (reserved; CUDA reserves too)
 *   launch: alloc node ──▶ live          free node, cudaFreeAsync, cudaFree,
 *                                        AutoFreeOnLaunch ──▶ not live
 *   a launch whose allocation is still live fails (cudaErrorInvalidValue),
 *   as CUDA's does; the buffer goes back to the executor once no node names
 *   it and it is not live.
 *
 * An allocation node made after the free node of an earlier allocation of
 * the same graph, size and device (that free node among its ancestors, and
 * every allocation of it freed) takes that allocation's address, as CUDA's
 * do: the two nodes name one buffer, live between each one's allocation and
 * its free in turn.
 *
 * CUDA's rules for graphs with memory nodes hold: at most one instantiation
 * at a time, no clone, no child graph, no node or edge removed; a free node
 * only for an address an allocation node returned, once, in the owning
 * graph or one other; an allocation freed in its owning graph is not freed
 * outside it. Contents are undefined at each allocation, as in CUDA: the
 * buffer keeps what the last launch left.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

struct gmem {
	struct gmem *next;
	void *dptr;
	size_t size;
	int device;
	struct cudaMemPoolProps props;
	struct cudaMemAccessDesc access[PHOS_MAX_DEVICES];
	size_t naccess;
	unsigned alloc_nodes, free_nodes;   /* nodes naming it (graphs' and instantiated copies) */
	const struct graph *owner;          /* the graph its allocation node was made in */
	const struct graph *free_graph;     /* the graph of its free node (not a copy's), or NULL */
	unsigned allocs_made, frees_made;   /* its allocation and free nodes made in graphs (not copies) */
	const struct gnode *last_free;      /* the newest of those free nodes (in free_graph), or NULL */
	bool live;                          /* allocated by a launch, not freed since */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gmem *all;
/* per device: bytes of live allocations and of buffers, and their highs */
static uint64_t used[PHOS_MAX_DEVICES], used_high[PHOS_MAX_DEVICES];
static uint64_t reserved[PHOS_MAX_DEVICES], reserved_high[PHOS_MAX_DEVICES];

static void set_live(struct gmem *m, bool live)
{
	if (m->live == live)
		return;
	m->live = live;
	if (live) {
		used[m->device] += m->size;
		if (used[m->device] > used_high[m->device])
			used_high[m->device] = used[m->device];
	} else {
		used[m->device] -= m->size;
	}
}

/* Once nothing names m and it is not live, it is unlinked: returned for
 * drop() after the lock is let go (cudaFree asks phos_graph_mem_release,
 * which takes it). Else NULL. Lock held. */
static struct gmem *unused(struct gmem *m)
{
	if (m->alloc_nodes || m->free_nodes || m->live)
		return NULL;
	for (struct gmem **p = &all; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			break;
		}
	if (m->dptr)   /* (a device reset already took it off) */
		reserved[m->device] -= m->size;
	return m;
}

/* Gives an unlinked allocation's buffer back (NULL is fine). */
static void drop(struct gmem *m)
{
	if (!m)
		return;
	if (m->dptr) {
		int cur = phos_current_device();

		if (cur != m->device)
			phos_current_device_set(m->device);
		phos_error_quiet_begin();
		cudaFree(m->dptr);   /* (unlinked: a plain free) */
		phos_error_quiet_end();
		if (cur != m->device)
			phos_current_device_set(cur);
	}
	free(m);
}

static struct gmem *find(const void *dptr)
{
	for (struct gmem *m = all; dptr && m; m = m->next)
		if (m->dptr == dptr)
			return m;
	return NULL;
}

/* A new allocation of p (checked as CUDA checks it) for an allocation node
 * of graph owner: its buffer made on its device. */
static int gmem_make(const struct cudaMemAllocNodeParams *p, const struct graph *owner, struct gmem **ret)
{
	int count = 0, device, cur = phos_current_device(), r;
	struct gmem *m;
	void *d = NULL;

	if (!p || !p->bytesize || p->poolProps.allocType != cudaMemAllocationTypePinned ||
	    p->poolProps.location.type != cudaMemLocationTypeDevice || p->poolProps.handleTypes != cudaMemHandleTypeNone ||
	    (p->accessDescCount && !p->accessDescs))
		return cudaErrorInvalidValue;
	device = p->poolProps.location.id;
	r = phos_device_count(&count);
	if (r)
		return r;
	if (device < 0 || device >= count || device >= PHOS_MAX_DEVICES || p->accessDescCount > (size_t)count)
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < p->accessDescCount; i++)
		if (p->accessDescs[i].location.type != cudaMemLocationTypeDevice || p->accessDescs[i].location.id < 0 ||
		    p->accessDescs[i].location.id >= count)
			return cudaErrorInvalidValue;
	m = calloc(1, sizeof(*m));
	if (!m)
		return cudaErrorMemoryAllocation;
	if (cur != device)
		phos_current_device_set(device);
	r = cudaMalloc(&d, p->bytesize);
	if (cur != device)
		phos_current_device_set(cur);
	if (r) {
		free(m);
		return r;
	}
	m->dptr = d;
	m->size = p->bytesize;
	m->device = device;
	m->props = p->poolProps;
	m->naccess = p->accessDescCount;
	if (m->naccess)
		memcpy(m->access, p->accessDescs, m->naccess * sizeof(*m->access));
	m->owner = owner;
	m->alloc_nodes = 1;
	m->allocs_made = 1;
	pthread_mutex_lock(&lock);
	m->next = all;
	all = m;
	reserved[device] += m->size;
	if (reserved[device] > reserved_high[device])
		reserved_high[device] = reserved[device];
	pthread_mutex_unlock(&lock);
	*ret = m;
	return cudaSuccess;
}

/* --- what graph.c and graph_exec.c ask --- */

void gmem_node_copied(const struct gnode *n)
{
	pthread_mutex_lock(&lock);
	if (n->kind == GN_MEM_ALLOC)
		n->mem->alloc_nodes++;
	else
		n->mem->free_nodes++;
	pthread_mutex_unlock(&lock);
}

void gmem_node_gone(struct gnode *n)
{
	struct gmem *m = n->mem;

	if (!m)
		return;
	pthread_mutex_lock(&lock);
	if (n->kind == GN_MEM_ALLOC) {
		m->alloc_nodes--;
		if (m->owner == n->graph)
			m->owner = NULL;
	} else {
		m->free_nodes--;
		if (m->free_graph == n->graph && m->frees_made)
			m->frees_made--;   /* one made in a graph, not an instantiated copy */
		if (!m->frees_made || !m->free_nodes)
			m->free_graph = NULL;
		if (m->last_free == n)
			m->last_free = NULL;
	}
	m = unused(m);
	pthread_mutex_unlock(&lock);
	drop(m);
	n->mem = NULL;
}

int gmem_instantiate_check(const struct graph *g)
{
	int r = cudaSuccess;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; r == cudaSuccess && g && i < g->n; i++) {
		const struct gmem *m = g->nodes[i]->kind == GN_MEM_ALLOC ? g->nodes[i]->mem : NULL;
		unsigned here = 0;   /* g's nodes naming m (several when it took a freed address) */

		for (size_t j = 0; m && j < g->n; j++)
			here += g->nodes[j]->kind == GN_MEM_ALLOC && g->nodes[j]->mem == m;
		if (m && m->alloc_nodes > here)
			r = cudaErrorNotSupported;   /* one instantiation at a time */
	}
	pthread_mutex_unlock(&lock);
	return r;
}

int gmem_launch_begin(const struct graph *g, bool auto_free)
{
	int r = cudaSuccess;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; r == cudaSuccess && i < g->n; i++) {
		struct gmem *m = g->nodes[i]->kind == GN_MEM_ALLOC ? g->nodes[i]->mem : NULL;

		if (m && m->live) {
			if (auto_free)
				set_live(m, false);
			else
				r = cudaErrorInvalidValue;   /* its last allocation was not freed */
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

int gmem_node_run(const struct gnode *n)
{
	int r = cudaSuccess;

	pthread_mutex_lock(&lock);
	if (!n->mem->dptr)
		r = cudaErrorInvalidValue;   /* gone with a device reset */
	else if (n->kind == GN_MEM_ALLOC)
		set_live(n->mem, true);
	else if (!n->mem->live)
		r = cudaErrorInvalidValue;   /* freed already, or never allocated */
	else
		set_live(n->mem, false);
	pthread_mutex_unlock(&lock);
	return r;
}

bool phos_graph_mem_release(const void *dptr, int *ret_err)
{
	struct gmem *m, *gone = NULL;

	if (!dptr || !__atomic_load_n(&all, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&lock);
	m = find(dptr);
	if (m) {
		/* freed in its own graph: never outside it */
		if (!m->live || (m->free_graph && m->free_graph == m->owner)) {
			*ret_err = cudaErrorInvalidValue;
		} else {
			*ret_err = cudaSuccess;
			set_live(m, false);
			gone = unused(m);
		}
	}
	pthread_mutex_unlock(&lock);
	drop(gone);
	return m != NULL;
}

void phos_graph_mem_reset(void)
{
	/* the executor dropped every buffer: the nodes' allocations are gone */
	pthread_mutex_lock(&lock);
	for (struct gmem *m = all; m; m = m->next) {
		m->dptr = NULL;
		set_live(m, false);
	}
	memset(reserved, 0, sizeof(reserved));
	pthread_mutex_unlock(&lock);
}

/* --- the nodes --- */

static struct gnode *mem_node(enum gnode_kind kind, struct gmem *m)
{
	struct gnode *n = calloc(1, sizeof(*n));

	if (n) {
		n->kind = kind;
		n->mem = m;
	}
	return n;
}

/* Whether node a is one of nodes (n of them) or an ancestor of one. */
static bool behind(const struct gnode *a, struct gnode *const *nodes, size_t n)
{
	const struct graph *g = a->graph;
	struct gnode **todo;
	bool *seen, found = false;
	size_t top = 0;

	if (!n || !g)
		return false;
	todo = malloc(g->n * sizeof(*todo));
	seen = calloc(g->n, sizeof(*seen));
	for (size_t i = 0; todo && seen && i < n; i++)
		if (nodes[i]->graph == g && nodes[i]->index < g->n && !seen[nodes[i]->index]) {
			seen[nodes[i]->index] = true;
			todo[top++] = nodes[i];
		}
	while (todo && seen && top && !found) {
		const struct gnode *x = todo[--top];

		found = x == a;
		for (size_t i = 0; !found && i < x->ndeps; i++)
			if (x->deps[i]->graph == g && x->deps[i]->index < g->n && !seen[x->deps[i]->index]) {
				seen[x->deps[i]->index] = true;
				todo[top++] = x->deps[i];
			}
	}
	free(todo);
	free(seen);
	return found;
}

/* An allocation of graph g whose address an allocation node for p after
 * deps may take (see the top), its nodes counted; or NULL. */
static struct gmem *reusable(const struct graph *g, const struct cudaMemAllocNodeParams *p, struct gnode *const *deps,
			     size_t ndeps)
{
	struct gmem *found = NULL;

	if (!p || !ndeps || p->poolProps.location.type != cudaMemLocationTypeDevice || p->accessDescCount)
		return NULL;
	pthread_mutex_lock(&lock);
	for (struct gmem *m = all; m && !found; m = m->next)
		if (m->owner == g && m->dptr && m->size == p->bytesize && m->device == p->poolProps.location.id &&
		    !m->naccess && m->allocs_made == m->frees_made && m->last_free && m->free_graph == g &&
		    behind(m->last_free, deps, ndeps))
			found = m;
	if (found) {
		found->alloc_nodes++;
		found->allocs_made++;
	}
	pthread_mutex_unlock(&lock);
	return found;
}

/* An allocation node of graph g for p (p->dptr set), to be added after deps
 * by add(node): graph_add or the capture's. */
static int alloc_node(struct graph *g, struct cudaMemAllocNodeParams *p, struct gnode *const *deps, size_t ndeps,
		      struct gnode **ret)
{
	struct gmem *m = reusable(g, p, deps, ndeps);
	struct gnode *n;
	int r = m ? cudaSuccess : gmem_make(p, g, &m);

	if (r)
		return r;
	n = mem_node(GN_MEM_ALLOC, m);
	if (!n) {
		pthread_mutex_lock(&lock);
		m->alloc_nodes--;
		m->allocs_made--;
		m = unused(m);
		pthread_mutex_unlock(&lock);
		drop(m);
		return cudaErrorMemoryAllocation;
	}
	p->dptr = m->dptr;
	*ret = n;
	return cudaSuccess;
}

/* A free node of graph g for dptr, or an error as CUDA's. */
static int free_node(const struct graph *g, const void *dptr, struct gnode **ret)
{
	struct gnode *n;
	struct gmem *m;
	int r = cudaSuccess;

	pthread_mutex_lock(&lock);
	m = find(dptr);
	/* an address of an allocation node, freed once, in its graph or one
	 * other (each allocation node of an address taken again: once more, in
	 * the same graph) */
	if (!m || !m->dptr || m->frees_made >= m->allocs_made || (m->free_graph && m->free_graph != g))
		r = cudaErrorInvalidValue;
	if (r == cudaSuccess && !(n = mem_node(GN_MEM_FREE, m)))
		r = cudaErrorMemoryAllocation;
	if (r == cudaSuccess) {
		m->free_nodes++;
		m->frees_made++;
		m->free_graph = g;
		m->last_free = n;
		*ret = n;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

PHOS_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						 const cudaGraphNode_t *pDependencies, size_t numDependencies,
						 struct cudaMemAllocNodeParams *nodeParams)
{
	struct gnode *n = NULL;
	int r;

	if (!pGraphNode || !graph || (numDependencies && !pDependencies))
		return phos_set_error(cudaErrorInvalidValue);
	r = alloc_node((struct graph *)graph, nodeParams, (struct gnode *const *)pDependencies, numDependencies, &n);
	if (r == cudaSuccess)
		r = graph_add((struct graph *)graph, n, (struct gnode *const *)pDependencies, numDependencies,
			      (struct gnode **)pGraphNode);   /* (takes n: freed on failure) */
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams *params_out)
{
	const struct gnode *n = (const struct gnode *)node;

	if (!n || !params_out || n->kind != GN_MEM_ALLOC)
		return phos_set_error(cudaErrorInvalidValue);
	params_out->poolProps = n->mem->props;
	params_out->accessDescs = n->mem->naccess ? n->mem->access : NULL;
	params_out->accessDescCount = n->mem->naccess;
	params_out->bytesize = n->mem->size;
	params_out->dptr = n->mem->dptr;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dptr)
{
	struct gnode *n = NULL;
	int r;

	if (!pGraphNode || !graph || (numDependencies && !pDependencies))
		return phos_set_error(cudaErrorInvalidValue);
	r = free_node((struct graph *)graph, dptr, &n);
	if (r == cudaSuccess)
		r = graph_add((struct graph *)graph, n, (struct gnode *const *)pDependencies, numDependencies,
			      (struct gnode **)pGraphNode);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
	const struct gnode *n = (const struct gnode *)node;

	if (!n || !dptr_out || n->kind != GN_MEM_FREE)
		return phos_set_error(cudaErrorInvalidValue);
	*(void **)dptr_out = n->mem->dptr;
	return cudaSuccess;
}

/* --- captured from a stream --- */

int phos_graph_capture_mem_alloc(const void *stream, void **ret_ptr, size_t size, int device)
{
	struct cudaMemAllocNodeParams p = { .bytesize = size };
	struct graph *g = graph_capture_graph(stream);
	struct gnode *n = NULL, **deps = NULL;
	size_t ndeps = 0;
	int r;

	if (!ret_ptr)
		return cudaErrorInvalidValue;
	if (!g)
		return cudaErrorStreamCaptureInvalidated;
	p.poolProps.allocType = cudaMemAllocationTypePinned;
	p.poolProps.location.type = cudaMemLocationTypeDevice;
	p.poolProps.location.id = device;
	r = graph_capture_frontier(stream, &deps, &ndeps);
	if (r == cudaSuccess)
		r = alloc_node(g, &p, deps, ndeps, &n);
	free(deps);
	if (r == cudaSuccess)
		r = graph_capture_node(stream, n);   /* (takes n) */
	if (r == cudaSuccess)
		*ret_ptr = p.dptr;
	return r;
}

int phos_graph_capture_mem_free(const void *stream, const void *ptr)
{
	struct graph *g = graph_capture_graph(stream);
	struct gnode *n = NULL;
	int r;

	if (!g)
		return cudaErrorStreamCaptureInvalidated;
	r = free_node(g, ptr, &n);
	return r ? r : graph_capture_node(stream, n);
}

/* --- the device's graph memory --- */

static int device_check(int device)
{
	int count = 0, r = phos_device_count(&count);

	if (r)
		return r;
	return device < 0 || device >= count || device >= PHOS_MAX_DEVICES ? cudaErrorInvalidDevice : cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device)
{
	/* every buffer backs a node that may launch again: nothing to give back */
	return phos_set_error(device_check(device));
}

PHOS_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	int r = device_check(device);
	uint64_t v = 0;

	if (r)
		return phos_set_error(r);
	if (!value)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&lock);
	switch (attr) {
	case cudaGraphMemAttrUsedMemCurrent:
		v = used[device];
		break;
	case cudaGraphMemAttrUsedMemHigh:
		v = used_high[device];
		break;
	case cudaGraphMemAttrReservedMemCurrent:
		v = reserved[device];
		break;
	case cudaGraphMemAttrReservedMemHigh:
		v = reserved_high[device];
		break;
	default:
		r = cudaErrorInvalidValue;
	}
	pthread_mutex_unlock(&lock);
	if (r == cudaSuccess)
		memcpy(value, &v, sizeof(v));
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	int r = device_check(device);
	uint64_t v;

	if (r)
		return phos_set_error(r);
	if (!value)
		return phos_set_error(cudaErrorInvalidValue);
	memcpy(&v, value, sizeof(v));
	/* only the highs, and only to zero */
	if (v || (attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh))
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&lock);
	if (attr == cudaGraphMemAttrUsedMemHigh)
		used_high[device] = used[device];
	else
		reserved_high[device] = reserved[device];
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

/* What graph.c and memory.c ask of the memory nodes (graph_internal.h,
 * internal.h): graph.c and memory.c stay below this file. */
__attribute__((constructor)) static void gmem_ops_init(void)
{
	gmem_ops = (struct gmem_ops){ .copied = gmem_node_copied, .gone = gmem_node_gone,
				      .add_alloc = cudaGraphAddMemAllocNode, .add_free = cudaGraphAddMemFreeNode };
	phos_free_graph_hook = phos_graph_mem_release;
}
