/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs: stream capture, explicit graphs, instantiation and launch.
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
 *   cudaStreamBeginCapture(s)          cudaGraphAdd*Node(g, deps)
 *        │ launch / memcpy / memset /        │
 *        │ host func / event record+wait     │
 *        ▼                                   ▼
 *     struct graph: nodes (creation order) + each node's dependencies
 *        │ cudaGraphInstantiate: copy of the nodes + a topological order
 *        ▼
 *     struct graph_exec ── cudaGraphLaunch(exec, stream): replay in order
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
 * addresses, host functions) stays valid in a restored executor, so a graph
 * instantiated before phos_fn_serve launches after a restore.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"

enum gnode_kind {
	GN_KERNEL = cudaGraphNodeTypeKernel,
	GN_MEMCPY = cudaGraphNodeTypeMemcpy,
	GN_MEMSET = cudaGraphNodeTypeMemset,
	GN_HOST = cudaGraphNodeTypeHost,
	GN_EMPTY = cudaGraphNodeTypeEmpty,
};

struct gnode {
	struct graph *graph;
	size_t index;                 /* in graph->nodes */
	enum gnode_kind kind;
	struct gnode **deps;
	size_t ndeps;
	union {
		struct {
			struct phos_launch_ex l;  /* stream unused */
			const void *func;         /* as the program named it */
			uint8_t *params;          /* l.l.param_bytes packed */
			void **args;              /* args[i] points into params (GetParams) */
			uint32_t nargs;
		} k;
		struct {
			bool is3d;
			void *dst;
			const void *src;
			size_t count;
			enum cudaMemcpyKind kind;
			struct cudaMemcpy3DParms p;
		} c;
		struct cudaMemsetParams s;
		struct cudaHostNodeParams h;
	};
};

struct graph {
	struct gnode **nodes;
	size_t n, cap;
};

struct graph_exec {
	pthread_mutex_t lock;
	size_t n;
	struct gnode *nodes;          /* copies, in the graph's creation order */
	struct gnode **orig;          /* the graph's node each copy came from */
	size_t *order;                /* topological order of indices */
};

/* --- nodes --- */

static void node_free_params(struct gnode *n)
{
	if (n->kind == GN_KERNEL) {
		free(n->k.params);
		free(n->k.args);
		n->k.params = NULL;
		n->k.args = NULL;
	}
}

/* Deep-copies the kind-specific part of src into dst (dependencies not copied). */
static int node_copy_params(struct gnode *dst, const struct gnode *src)
{
	dst->kind = src->kind;
	if (src->kind != GN_KERNEL) {
		if (src->kind == GN_MEMCPY)
			dst->c = src->c;
		else if (src->kind == GN_MEMSET)
			dst->s = src->s;
		else if (src->kind == GN_HOST)
			dst->h = src->h;
		return cudaSuccess;
	}
	dst->k = src->k;
	dst->k.params = malloc(src->k.l.l.param_bytes ? src->k.l.l.param_bytes : 1);
	dst->k.args = calloc(src->k.nargs ? src->k.nargs : 1, sizeof(void *));
	if (!dst->k.params || !dst->k.args) {
		free(dst->k.params);
		free(dst->k.args);
		dst->k.params = NULL;
		dst->k.args = NULL;
		return cudaErrorMemoryAllocation;
	}
	memcpy(dst->k.params, src->k.params, src->k.l.l.param_bytes);
	for (uint32_t i = 0; i < src->k.nargs; i++)
		dst->k.args[i] = dst->k.params + ((uint8_t *)src->k.args[i] - src->k.params);
	return cudaSuccess;
}

/* A kernel node's parameters from a launch that launch.c checked and packed
 * (params: l->l.param_bytes bytes, offsets of its nargs arguments). */
static int kernel_params_set(struct gnode *n, const void *func, const struct phos_launch_ex *l, const void *params,
			     const uint16_t *offsets, uint32_t nargs)
{
	struct gnode tmp = { .kind = GN_KERNEL };
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
	tmp.k.l = *l;
	tmp.k.func = func;
	tmp.k.params = p;
	tmp.k.args = a;
	tmp.k.nargs = nargs;
	node_free_params(n);
	n->kind = GN_KERNEL;
	n->k = tmp.k;
	return cudaSuccess;
}

/* --- graphs --- */

static struct graph *graph_new(void)
{
	return calloc(1, sizeof(struct graph));
}

static void graph_free(struct graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++) {
		node_free_params(g->nodes[i]);
		free(g->nodes[i]->deps);
		free(g->nodes[i]);
	}
	free(g->nodes);
	free(g);
}

static bool node_in(const struct graph *g, const struct gnode *n)
{
	return n && n->graph == g && n->index < g->n && g->nodes[n->index] == n;
}

/* Adds node (already filled but for graph, index and deps) to g after deps.
 * Takes node (freed on failure). */
static int graph_add(struct graph *g, struct gnode *node, struct gnode *const *deps, size_t ndeps,
		     struct gnode **ret_node)
{
	for (size_t i = 0; i < ndeps; i++) {
		if (!node_in(g, deps[i]))
			goto invalid;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				goto invalid;
	}
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct gnode **nodes = realloc(g->nodes, cap * sizeof(*nodes));

		if (!nodes)
			goto nomem;
		g->nodes = nodes;
		g->cap = cap;
	}
	if (ndeps) {
		node->deps = malloc(ndeps * sizeof(*node->deps));
		if (!node->deps)
			goto nomem;
		memcpy(node->deps, deps, ndeps * sizeof(*node->deps));
	}
	node->ndeps = ndeps;
	node->graph = g;
	node->index = g->n;
	g->nodes[g->n++] = node;
	if (ret_node)
		*ret_node = node;
	return cudaSuccess;
invalid:
	node_free_params(node);
	free(node);
	return cudaErrorInvalidValue;
nomem:
	node_free_params(node);
	free(node);
	return cudaErrorMemoryAllocation;
}

/* A topological order of g's node indices in *ret_order (malloc'd).
 * Returns cudaErrorInvalidValue for a cycle. */
static int graph_order(const struct graph *g, size_t **ret_order)
{
	size_t *order = malloc((g->n ? g->n : 1) * sizeof(*order));
	size_t *waiting = calloc(g->n ? g->n : 1, sizeof(*waiting));
	bool *done = calloc(g->n ? g->n : 1, sizeof(*done));
	size_t k = 0;
	bool progress = true;

	if (!order || !waiting || !done) {
		free(order);
		free(waiting);
		free(done);
		return cudaErrorMemoryAllocation;
	}
	/* Repeated passes in creation order: a node goes once all its
	 * dependencies went (graphs are small; creation order is usually
	 * already topological, then one pass does it). */
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
	free(waiting);
	free(done);
	if (k < g->n) {
		free(order);
		return cudaErrorInvalidValue;
	}
	*ret_order = order;
	return cudaSuccess;
}

/* --- stream capture state --- */

struct capture {
	struct graph *graph;
	bool own_graph;               /* made by BeginCapture (not ...ToGraph) */
	unsigned long long id;
	enum cudaStreamCaptureMode mode;
	bool invalid;
	uint32_t origin;              /* stream id that began it */
};

/* A stream taking part in a capture, with the nodes its next node depends on. */
struct cstream {
	uint32_t sid;
	struct capture *cap;
	struct gnode **deps;
	size_t ndeps;
};

/* An event recorded in a capture: a later wait joins its nodes. */
struct cevent {
	uint32_t eid;
	struct capture *cap;
	struct gnode **deps;
	size_t ndeps;
};

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static struct cstream *cstreams;
static size_t ncstreams;
static struct cevent *cevents;
static size_t ncevents;
static int ncaptures;              /* streams capturing; read without the lock */
static unsigned long long next_capture_id = 1;
static __thread enum cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

static struct cstream *cstream_find(uint32_t sid)
{
	for (size_t i = 0; i < ncstreams; i++)
		if (cstreams[i].sid == sid)
			return &cstreams[i];
	return NULL;
}

static struct cevent *cevent_find(uint32_t eid)
{
	for (size_t i = 0; i < ncevents; i++)
		if (cevents[i].eid == eid)
			return &cevents[i];
	return NULL;
}

static int deps_set(struct gnode ***deps, size_t *ndeps, struct gnode *const *src, size_t n)
{
	struct gnode **d = NULL;

	if (n) {
		d = malloc(n * sizeof(*d));
		if (!d)
			return cudaErrorMemoryAllocation;
		memcpy(d, src, n * sizeof(*d));
	}
	free(*deps);
	*deps = d;
	*ndeps = n;
	return cudaSuccess;
}

/* Adds the nodes of src not yet in *deps. */
static int deps_merge(struct gnode ***deps, size_t *ndeps, struct gnode *const *src, size_t n)
{
	struct gnode **d = realloc(*deps, (*ndeps + n + 1) * sizeof(*d));

	if (!d)
		return cudaErrorMemoryAllocation;
	*deps = d;
	for (size_t i = 0; i < n; i++) {
		bool have = false;

		for (size_t j = 0; j < *ndeps && !have; j++)
			have = d[j] == src[i];
		if (!have)
			d[(*ndeps)++] = src[i];
	}
	return cudaSuccess;
}

static int cstream_add(uint32_t sid, struct capture *cap, struct gnode *const *deps, size_t ndeps)
{
	struct cstream *t = realloc(cstreams, (ncstreams + 1) * sizeof(*t));
	int r;

	if (!t)
		return cudaErrorMemoryAllocation;
	cstreams = t;
	t = &cstreams[ncstreams];
	memset(t, 0, sizeof(*t));
	t->sid = sid;
	t->cap = cap;
	r = deps_set(&t->deps, &t->ndeps, deps, ndeps);
	if (r)
		return r;
	ncstreams++;
	__atomic_add_fetch(&ncaptures, 1, __ATOMIC_RELEASE);
	return cudaSuccess;
}

/* Ends cap: every stream and event of it leaves. Called with glock held. */
static void capture_end(struct capture *cap)
{
	for (size_t i = 0; i < ncstreams;) {
		if (cstreams[i].cap == cap) {
			free(cstreams[i].deps);
			cstreams[i] = cstreams[--ncstreams];
			__atomic_sub_fetch(&ncaptures, 1, __ATOMIC_RELEASE);
		} else {
			i++;
		}
	}
	for (size_t i = 0; i < ncevents;) {
		if (cevents[i].cap == cap) {
			free(cevents[i].deps);
			cevents[i] = cevents[--ncevents];
		} else {
			i++;
		}
	}
}

/* The stream id of a handle without the capture check of phos_preload_stream_id. */
static int sid_of(const void *stream, uint32_t *ret_sid)
{
	return phos_stream_resolve(stream, ret_sid);
}

bool phos_graph_capturing(const void *stream)
{
	uint32_t sid;
	bool yes;

	if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE) || sid_of(stream, &sid))
		return false;
	pthread_mutex_lock(&glock);
	yes = cstream_find(sid) != NULL;
	pthread_mutex_unlock(&glock);
	return yes;
}

int phos_graph_check_stream(uint32_t sid)
{
	struct cstream *cs;

	if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE))
		return cudaSuccess;
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (cs)
		cs->cap->invalid = true;
	pthread_mutex_unlock(&glock);
	return cs ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Adds node to the capture of stream: it depends on what the stream's last
 * captured work was, and becomes that. Takes node. */
static int capture_add(const void *stream, struct gnode *node)
{
	struct cstream *cs;
	uint32_t sid;
	int r = sid_of(stream, &sid);

	if (r) {
		node_free_params(node);
		free(node);
		return r;
	}
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (!cs) {
		r = cudaErrorIllegalState;
	} else if (cs->cap->invalid) {
		r = cudaErrorStreamCaptureInvalidated;
	} else {
		r = graph_add(cs->cap->graph, node, cs->deps, cs->ndeps, NULL);
		node = NULL;
		if (r == cudaSuccess) {
			struct gnode *last = cs->cap->graph->nodes[cs->cap->graph->n - 1];

			r = deps_set(&cs->deps, &cs->ndeps, &last, 1);
		}
		if (r)
			cs->cap->invalid = true;
	}
	pthread_mutex_unlock(&glock);
	if (node) {
		node_free_params(node);
		free(node);
	}
	return r;
}

int phos_graph_capture_kernel(const void *stream, const void *func, const struct phos_launch_ex *l,
			      const void *params, const uint16_t *offsets, uint32_t nargs)
{
	struct gnode *n = calloc(1, sizeof(*n));
	int r;

	if (!n)
		return cudaErrorMemoryAllocation;
	r = kernel_params_set(n, func, l, params, offsets, nargs);
	if (r) {
		free(n);
		return r;
	}
	return capture_add(stream, n);
}

int phos_graph_capture_memcpy(const void *stream, void *dst, const void *src, size_t count, int kind)
{
	struct gnode *n = calloc(1, sizeof(*n));

	if (!n)
		return cudaErrorMemoryAllocation;
	if (!dst || !src || (unsigned)kind > cudaMemcpyDefault) {
		free(n);
		return cudaErrorInvalidValue;
	}
	n->kind = GN_MEMCPY;
	n->c.dst = dst;
	n->c.src = src;
	n->c.count = count;
	n->c.kind = (enum cudaMemcpyKind)kind;
	return capture_add(stream, n);
}

int phos_graph_capture_memset(const void *stream, void *dst, int value, size_t count)
{
	struct gnode *n;

	if (count && (!dst || !phos_mem_is_device(dst, count)))
		return cudaErrorInvalidValue;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cudaErrorMemoryAllocation;
	n->kind = GN_MEMSET;
	n->s.dst = dst;
	n->s.value = (unsigned)value & 0xff;
	n->s.elementSize = 1;
	n->s.width = count;
	n->s.height = 1;
	n->s.pitch = count;
	return capture_add(stream, n);
}

int phos_graph_capture_host(const void *stream, void (*fn)(void *), void *data)
{
	struct gnode *n;

	if (!fn)
		return cudaErrorInvalidValue;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cudaErrorMemoryAllocation;
	n->kind = GN_HOST;
	n->h.fn = fn;
	n->h.userData = data;
	return capture_add(stream, n);
}

int phos_graph_capture_event_record(const void *stream, uint32_t eid)
{
	struct cstream *cs;
	struct cevent *ce;
	uint32_t sid;
	int r = sid_of(stream, &sid);

	if (r)
		return r;
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	ce = cevent_find(eid);
	if (!cs) {
		r = cudaErrorIllegalState;
	} else if (!ce) {
		struct cevent *t = realloc(cevents, (ncevents + 1) * sizeof(*t));

		if (!t) {
			r = cudaErrorMemoryAllocation;
		} else {
			cevents = t;
			ce = &cevents[ncevents++];
			memset(ce, 0, sizeof(*ce));
			ce->eid = eid;
		}
	}
	if (ce && cs) {
		ce->cap = cs->cap;
		r = deps_set(&ce->deps, &ce->ndeps, cs->deps, cs->ndeps);
	}
	pthread_mutex_unlock(&glock);
	return r;
}

void phos_graph_event_forget(uint32_t eid)
{
	struct cevent *ce;

	if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&glock);
	ce = cevent_find(eid);
	if (ce) {
		free(ce->deps);
		*ce = cevents[--ncevents];
	}
	pthread_mutex_unlock(&glock);
}

int phos_graph_wait_event(const void *stream, uint32_t eid, bool *ret_handled)
{
	struct cstream *cs;
	struct cevent *ce;
	uint32_t sid;
	int r = cudaSuccess;

	*ret_handled = false;
	if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE))
		return cudaSuccess;
	r = sid_of(stream, &sid);
	if (r)
		return r;
	pthread_mutex_lock(&glock);
	ce = cevent_find(eid);
	cs = cstream_find(sid);
	if (!ce)
		goto out;  /* an event of no capture: an ordinary wait (refused on a capturing stream) */
	*ret_handled = true;
	if (cs && cs->cap != ce->cap)
		r = cudaErrorStreamCaptureIsolation;
	else if (cs)
		r = deps_merge(&cs->deps, &cs->ndeps, ce->deps, ce->ndeps);
	else if (sid == 0)
		r = cudaErrorStreamCaptureImplicit; /* the legacy stream cannot join a capture */
	else
		r = cstream_add(sid, ce->cap, ce->deps, ce->ndeps); /* fork: the stream joins */
out:
	pthread_mutex_unlock(&glock);
	return r;
}

/* Is a an ancestor of b, or b itself? */
static bool reaches(const struct gnode *a, const struct gnode *b, unsigned depth)
{
	if (a == b)
		return true;
	if (depth > 100000)
		return true; /* too deep to tell: do not refuse */
	for (size_t i = 0; i < b->ndeps; i++)
		if (reaches(a, b->deps[i], depth + 1))
			return true;
	return false;
}

static int begin_capture(const void *stream, struct graph *graph, struct gnode *const *deps, size_t ndeps,
			 int mode)
{
	struct capture *cap;
	uint32_t sid;
	int r;

	if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
		return cudaErrorInvalidValue;
	r = phos_preload_connect();
	if (r)
		return r;
	r = sid_of(stream, &sid);
	if (r)
		return r;
	if (sid == 0)
		return cudaErrorStreamCaptureUnsupported; /* the legacy stream cannot capture */
	for (size_t i = 0; graph && i < ndeps; i++)
		if (!node_in(graph, deps[i]))
			return cudaErrorInvalidValue;
	cap = calloc(1, sizeof(*cap));
	if (!cap)
		return cudaErrorMemoryAllocation;
	cap->graph = graph ? graph : graph_new();
	cap->own_graph = !graph;
	cap->mode = (enum cudaStreamCaptureMode)mode;
	cap->origin = sid;
	if (!cap->graph) {
		free(cap);
		return cudaErrorMemoryAllocation;
	}
	pthread_mutex_lock(&glock);
	if (cstream_find(sid)) {
		r = cudaErrorIllegalState;
	} else {
		cap->id = next_capture_id++;
		r = cstream_add(sid, cap, deps, ndeps);
	}
	pthread_mutex_unlock(&glock);
	if (r) {
		if (cap->own_graph)
			graph_free(cap->graph);
		free(cap);
	}
	return r;
}

PHOS_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return phos_set_error(begin_capture(stream, NULL, NULL, 0, mode));
}

PHOS_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
						      const cudaGraphNode_t *dependencies,
						      const cudaGraphEdgeData *dependencyData, size_t numDependencies,
						      enum cudaStreamCaptureMode mode)
{
	if (!graph || (numDependencies && !dependencies))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; dependencyData && i < numDependencies; i++)
		if (dependencyData[i].type != cudaGraphDependencyTypeDefault || dependencyData[i].from_port ||
		    dependencyData[i].to_port)
			return phos_set_error(cudaErrorNotSupported);
	return phos_set_error(begin_capture(stream, (struct graph *)graph, (struct gnode *const *)dependencies,
					    numDependencies, mode));
}

PHOS_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	struct capture *cap = NULL;
	struct cstream *cs;
	uint32_t sid;
	int r;

	if (!pGraph)
		return phos_set_error(cudaErrorInvalidValue);
	r = sid_of(stream, &sid);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (!cs) {
		r = cudaErrorIllegalState;
	} else if (cs->cap->origin != sid) {
		r = cudaErrorStreamCaptureUnmatched;
	} else {
		cap = cs->cap;
		if (cap->invalid)
			r = cudaErrorStreamCaptureInvalidated;
		/* every stream forked into the capture must have joined back:
		 * its last work is behind the origin stream's */
		for (size_t i = 0; r == cudaSuccess && i < ncstreams; i++) {
			const struct cstream *o = &cstreams[i];

			if (o->cap != cap || o == cs)
				continue;
			for (size_t d = 0; r == cudaSuccess && d < o->ndeps; d++) {
				bool joined = false;

				for (size_t e = 0; !joined && e < cs->ndeps; e++)
					joined = reaches(o->deps[d], cs->deps[e], 0);
				if (!joined)
					r = cudaErrorStreamCaptureUnjoined;
			}
		}
		capture_end(cap);
	}
	pthread_mutex_unlock(&glock);
	if (!cap)
		return phos_set_error(r);
	if (r) {
		if (cap->own_graph)
			graph_free(cap->graph);
		*pGraph = NULL;
	} else {
		*pGraph = (cudaGraph_t)cap->graph;
	}
	free(cap);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	struct cstream *cs;
	uint32_t sid;
	int r;

	if (!pCaptureStatus)
		return phos_set_error(cudaErrorInvalidValue);
	r = sid_of(stream, &sid);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	*pCaptureStatus = !cs ? cudaStreamCaptureStatusNone
			      : cs->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
	pthread_mutex_unlock(&glock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
						 unsigned long long *id_out, cudaGraph_t *graph_out,
						 const cudaGraphNode_t **dependencies_out,
						 const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	struct cstream *cs;
	uint32_t sid;
	int r;

	if (!captureStatus_out)
		return phos_set_error(cudaErrorInvalidValue);
	r = sid_of(stream, &sid);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (!cs) {
		*captureStatus_out = cudaStreamCaptureStatusNone;
	} else {
		*captureStatus_out = cs->cap->invalid ? cudaStreamCaptureStatusInvalidated
						      : cudaStreamCaptureStatusActive;
		if (id_out)
			*id_out = cs->cap->id;
		if (graph_out)
			*graph_out = (cudaGraph_t)cs->cap->graph;
		/* valid until the next call on this stream, as CUDA says */
		if (dependencies_out)
			*dependencies_out = (const cudaGraphNode_t *)cs->deps;
		if (edgeData_out)
			*edgeData_out = NULL; /* every edge is a default one */
		if (numDependencies_out)
			*numDependencies_out = cs->ndeps;
	}
	pthread_mutex_unlock(&glock);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	enum cudaStreamCaptureMode old;

	if (!mode || (unsigned)*mode > cudaStreamCaptureModeRelaxed)
		return phos_set_error(cudaErrorInvalidValue);
	old = thread_mode;
	thread_mode = *mode;
	*mode = old;
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

static int kernel_node_fill(struct gnode *n, const struct cudaKernelNodeParams *p)
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
	r = kernel_params_set(n, p->func, &l, params, fi.offset, fi.nparams);
	free(params);
	return r;
}

PHOS_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       const struct cudaKernelNodeParams *pNodeParams)
{
	struct gnode *n = calloc(1, sizeof(*n));
	int r;

	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	r = kernel_node_fill(n, pNodeParams);
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
	return phos_set_error(kernel_node_fill(n, pNodeParams));
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
	n->c.is3d = true;
	n->c.p = *pCopyParams;
	return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

PHOS_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       const struct cudaMemsetParams *pMemsetParams)
{
	const struct cudaMemsetParams *p = pMemsetParams;
	struct gnode *n;
	size_t row;

	if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->height ||
	    __builtin_mul_overflow(p->width, (size_t)p->elementSize, &row) || (p->height > 1 && p->pitch < row))
		return phos_set_error(cudaErrorInvalidValue);
	n = calloc(1, sizeof(*n));
	if (!n)
		return phos_set_error(cudaErrorMemoryAllocation);
	n->kind = GN_MEMSET;
	n->s = *p;
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

PHOS_EXPORT cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
						 const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
						 size_t numDependencies)
{
	struct graph *g = GRAPH(graph);

	if (!g || (numDependencies && (!from || !to)))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; i < numDependencies; i++) {
		if (!node_in(g, NODE(from[i])) || !node_in(g, NODE(to[i])) || from[i] == to[i])
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
	*pType = (enum cudaGraphNodeType)NODE(node)->kind;
	return cudaSuccess;
}

/* --- instantiated graphs --- */

static void exec_free(struct graph_exec *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n; i++)
		node_free_params(&x->nodes[i]);
	free(x->nodes);
	free(x->orig);
	free(x->order);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* Fills x's node copies from g (same count). */
static int exec_fill(struct graph_exec *x, const struct graph *g)
{
	for (size_t i = 0; i < g->n; i++) {
		struct gnode copy = { 0 };
		int r = node_copy_params(&copy, g->nodes[i]);

		if (r)
			return r;
		node_free_params(&x->nodes[i]);
		x->nodes[i] = copy;
	}
	return cudaSuccess;
}

static int instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	struct graph *g = GRAPH(graph);
	struct graph_exec *x;
	int r;

	if (!pGraphExec || !g)
		return cudaErrorInvalidValue;
	/* AutoFreeOnLaunch, Upload, DeviceLaunch, UseNodePriority: the first two
	 * concern memory nodes and uploads we do not have; device launch is refused */
	if (flags & ~(unsigned long long)(cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
					  cudaGraphInstantiateFlagUseNodePriority))
		return (flags & cudaGraphInstantiateFlagDeviceLaunch) ? cudaErrorNotSupported : cudaErrorInvalidValue;
	x = calloc(1, sizeof(*x));
	if (!x)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&x->lock, NULL);
	x->nodes = calloc(g->n ? g->n : 1, sizeof(*x->nodes));
	x->orig = calloc(g->n ? g->n : 1, sizeof(*x->orig));
	if (!x->nodes || !x->orig) {
		r = cudaErrorMemoryAllocation;
		goto fail;
	}
	x->n = g->n;
	r = graph_order(g, &x->order);
	if (r)
		goto fail;
	r = exec_fill(x, g);
	if (r)
		goto fail;
	for (size_t i = 0; i < g->n; i++)
		x->orig[i] = g->nodes[i];
	*pGraphExec = (cudaGraphExec_t)x;
	return cudaSuccess;
fail:
	exec_free(x);
	return r;
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

PHOS_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	if (!graphExec)
		return phos_set_error(cudaErrorInvalidValue);
	exec_free((struct graph_exec *)graphExec);
	return cudaSuccess;
}

static ssize_t exec_index(const struct graph_exec *x, const void *node)
{
	for (size_t i = 0; i < x->n; i++)
		if (x->orig[i] == node)
			return (ssize_t)i;
	return -1;
}

PHOS_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							 const struct cudaKernelNodeParams *pNodeParams)
{
	struct graph_exec *x = (struct graph_exec *)hGraphExec;
	struct gnode n = { 0 };
	ssize_t i;
	int r;

	if (!x || !node)
		return phos_set_error(cudaErrorInvalidValue);
	i = exec_index(x, node);
	if (i < 0 || x->nodes[i].kind != GN_KERNEL)
		return phos_set_error(cudaErrorInvalidValue);
	r = kernel_node_fill(&n, pNodeParams);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&x->lock);
	node_free_params(&x->nodes[i]);
	x->nodes[i] = n;
	pthread_mutex_unlock(&x->lock);
	return cudaSuccess;
}

/* Same topology: as many nodes, of the same kinds, with the same edges (by
 * creation index). Anything else is refused as CUDA refuses a changed one. */
PHOS_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
					    cudaGraphExecUpdateResultInfo *resultInfo)
{
	struct graph_exec *x = (struct graph_exec *)hGraphExec;
	struct graph *g = GRAPH(hGraph);
	enum cudaGraphExecUpdateResult res = cudaGraphExecUpdateSuccess;
	cudaGraphNode_t bad = NULL;
	int r = cudaSuccess;

	if (!x || !g)
		return phos_set_error(cudaErrorInvalidValue);
	if (g->n != x->n)
		res = cudaGraphExecUpdateErrorTopologyChanged;
	for (size_t i = 0; res == cudaGraphExecUpdateSuccess && i < g->n; i++) {
		const struct gnode *a = g->nodes[i], *b = x->orig[i];

		if (a->kind != x->nodes[i].kind) {
			res = cudaGraphExecUpdateErrorNodeTypeChanged;
		} else if (a->ndeps != b->ndeps) {
			res = cudaGraphExecUpdateErrorTopologyChanged;
		} else {
			for (size_t d = 0; d < a->ndeps; d++)
				if (a->deps[d]->index != b->deps[d]->index)
					res = cudaGraphExecUpdateErrorTopologyChanged;
		}
		if (res != cudaGraphExecUpdateSuccess)
			bad = (cudaGraphNode_t)a;
	}
	if (res == cudaGraphExecUpdateSuccess) {
		pthread_mutex_lock(&x->lock);
		r = exec_fill(x, g);
		pthread_mutex_unlock(&x->lock);
		if (r)
			res = cudaGraphExecUpdateError;
	} else {
		r = cudaErrorGraphExecUpdateFailure;
	}
	if (resultInfo) {
		resultInfo->result = res;
		resultInfo->errorNode = bad;
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

/* A copy of n joins the capture of stream (a graph launched into a capture). */
static int capture_clone(cudaStream_t stream, const struct gnode *n)
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
	return capture_add(stream, c);
}

static int node_run(const struct gnode *n, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return capture_clone(stream, n);
	switch (n->kind) {
	case GN_KERNEL:
		return phos_launch_post(&n->k.l, stream, n->k.params);
	case GN_MEMCPY:
		if (n->c.is3d)
			return cudaMemcpy3DAsync(&n->c.p, stream);
		return cudaMemcpyAsync(n->c.dst, n->c.src, n->c.count, n->c.kind, stream);
	case GN_MEMSET: {
		const struct cudaMemsetParams *s = &n->s;
		uint32_t v = s->value;
		bool uniform = s->elementSize == 1 ||
			       (s->elementSize == 2 && (v & 0xff) == ((v >> 8) & 0xff)) ||
			       (s->elementSize == 4 && v == (v & 0xff) * 0x01010101u);

		if (uniform)
			return cudaMemset2DAsync(s->dst, s->height > 1 ? s->pitch : s->width * s->elementSize,
						 (int)(v & 0xff), s->width * s->elementSize, s->height, stream);
		return memset_pattern(s, stream);
	}
	case GN_HOST:
		return cudaLaunchHostFunc(stream, n->h.fn, n->h.userData);
	case GN_EMPTY:
		return cudaSuccess;
	}
	return cudaErrorNotSupported;
}

static int graph_launch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	struct graph_exec *x = (struct graph_exec *)graphExec;
	uint32_t sid;
	int r;

	if (!x)
		return cudaErrorInvalidValue;
	r = phos_preload_connect();
	if (r)
		return r;
	r = sid_of(stream, &sid);
	if (r)
		return r;
	pthread_mutex_lock(&x->lock);
	for (size_t i = 0; r == cudaSuccess && i < x->n; i++)
		r = node_run(&x->nodes[x->order[i]], stream);
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
	return phos_set_error(sid_of(stream, &sid)); /* nothing to upload: nodes are replayed */
}
