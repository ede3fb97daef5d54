/* SPDX-License-Identifier: MIT */
/*
 * Stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture): the
 * stream-ordered calls that graphs hold ask phos_graph_capturing first and,
 * on a capturing stream, add a node here instead of posting. Each capturing
 * stream keeps the nodes its next node depends on; an event recorded in a
 * capture keeps them too, and a stream that waits for it joins the capture
 * (fork), or takes them as dependencies (join). Design: graph_internal.h.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

struct capture {
	struct graph *graph;
	bool own_graph;               /* made by BeginCapture (not ...ToGraph) */
	unsigned long long id;
	enum cudaStreamCaptureMode mode;
	bool invalid;
	uint32_t origin;              /* stream id that began it */
	struct gnode **left;          /* the last nodes of forked streams destroyed */
	size_t nleft;                 /* during the capture: joined back by its end */
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
	free(cap->left);
	cap->left = NULL;
	cap->nleft = 0;
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

static uint32_t record_epoch;

void phos_graph_record_epoch_bump(void)
{
	__atomic_add_fetch(&record_epoch, 1, __ATOMIC_RELEASE);
}

PHOS_EXPORT uint32_t phos_graph_record_epoch(void)
{
	return __atomic_load_n(&record_epoch, __ATOMIC_ACQUIRE);
}

PHOS_EXPORT bool phos_preload_capturing(const void *stream)
{
	return phos_graph_capturing(stream);
}

static int capture_rec(const void *stream, uint32_t op, const void *body, size_t len, uint32_t stream_off,
		       const struct phos_graph_call_ops *ops)
{
	struct gnode *n = NULL;
	int r = cudaSuccess;

	if (!body || len > PHOS_REC_MAX_PAYLOAD ||
	    (stream_off != GN_NO_STREAM && (stream_off > len || len - stream_off < sizeof(uint32_t))))
		r = cudaErrorInvalidValue;
	else if (!(n = calloc(1, sizeof(*n))) || !(n->rec.body = malloc(len ? len : 1)))
		r = cudaErrorMemoryAllocation;
	if (r) {
		if (ops && ops->drop && body)
			ops->drop(body);   /* the caller's hold was the node's */
		free(n);
		return r;
	}
	n->kind = GN_RECORD;
	n->rec.op = op;
	n->rec.stream_off = stream_off;
	n->rec.len = (uint32_t)len;
	memcpy(n->rec.body, body, len);
	n->rec.ops = ops;   /* (set last: the caller's hold is this node's) */
	return graph_capture_node(stream, n);   /* (takes n: dropped on failure) */
}

PHOS_EXPORT int phos_graph_capture_record(const void *stream, uint32_t op, const void *body, size_t len,
					  uint32_t stream_off)
{
	return capture_rec(stream, op, body, len, stream_off, NULL);
}

PHOS_EXPORT int phos_graph_capture_call(const void *stream, const struct phos_graph_call_ops *ops, const void *body,
					size_t len)
{
	if (!ops || !ops->run)
		return cudaErrorInvalidValue;
	return capture_rec(stream, 0, body, len, GN_NO_STREAM, ops);
}

struct graph *graph_capture_graph(const void *stream)
{
	struct cstream *cs;
	struct graph *g = NULL;
	uint32_t sid;

	if (sid_of(stream, &sid))
		return NULL;
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (cs && !cs->cap->invalid)
		g = cs->cap->graph;
	pthread_mutex_unlock(&glock);
	return g;
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

PHOS_EXPORT int phos_preload_stream_id(const void *stream, uint32_t *ret_id)
{
	uint32_t id;
	int r = phos_stream_resolve(stream, &id);

	if (r == cudaSuccess)
		r = phos_graph_check_stream(id);
	if (r == cudaSuccess)
		*ret_id = id;
	return r;
}

int phos_graph_stream_gone(uint32_t sid)
{
	struct cstream *cs;
	int r = cudaSuccess;

	if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE))
		return cudaSuccess;
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (cs && cs->cap->origin == sid) {
		cs->cap->invalid = true;   /* the capture's own stream: refused, as CUDA does */
		r = cudaErrorStreamCaptureUnsupported;
	} else if (cs) {
		r = deps_merge(&cs->cap->left, &cs->cap->nleft, cs->deps, cs->ndeps);
		if (r == cudaSuccess) {
			free(cs->deps);
			*cs = cstreams[--ncstreams];
			__atomic_sub_fetch(&ncaptures, 1, __ATOMIC_RELEASE);
		} else {
			cs->cap->invalid = true;
		}
	}
	pthread_mutex_unlock(&glock);
	return r;
}

int graph_capture_frontier(const void *stream, struct gnode ***ret, size_t *ret_n)
{
	struct cstream *cs;
	uint32_t sid;
	int r = sid_of(stream, &sid);

	*ret = NULL;
	*ret_n = 0;
	if (r)
		return r;
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	r = !cs ? cudaErrorIllegalState : cs->cap->invalid ? cudaErrorStreamCaptureInvalidated
							    : deps_set(ret, ret_n, cs->deps, cs->ndeps);
	pthread_mutex_unlock(&glock);
	return r;
}

int graph_capture_node(const void *stream, struct gnode *node)
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
	r = node_kernel_set(n, func, l, params, offsets, nargs);
	if (r) {
		free(n);
		return r;
	}
	return graph_capture_node(stream, n);
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
	n->c.form = CP_1D;
	n->c.dst = dst;
	n->c.src = src;
	n->c.count = count;
	n->c.kind = (enum cudaMemcpyKind)kind;
	return graph_capture_node(stream, n);
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
	return graph_capture_node(stream, n);
}

int phos_graph_capture_memcpy3d(const void *stream, const void *params)
{
	const struct cudaMemcpy3DParms *p = params;
	struct gnode *n;

	if (!p)
		return cudaErrorInvalidValue;
	if (p->srcArray || p->dstArray)
		return cudaErrorNotSupported;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cudaErrorMemoryAllocation;
	n->kind = GN_MEMCPY;
	n->c.form = CP_3D;
	n->c.p = *p;
	return graph_capture_node(stream, n);
}

int phos_graph_capture_memcpy2d(const void *stream, void *dst, size_t dpitch, const void *src, size_t spitch,
				size_t width, size_t height, int kind)
{
	struct cudaMemcpy3DParms p = { 0 };

	if (!dst || !src || (unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	p.srcPtr = pitched_ptr((void *)src, spitch, width, height);
	p.dstPtr = pitched_ptr(dst, dpitch, width, height);
	p.extent = extent_of(width, height, 1);
	p.kind = (enum cudaMemcpyKind)kind;
	return phos_graph_capture_memcpy3d(stream, &p);
}

int phos_graph_capture_memset2d(const void *stream, void *dst, size_t pitch, int value, size_t width, size_t height)
{
	struct cudaMemsetParams m = { .dst = dst, .pitch = pitch, .value = (unsigned)value & 0xff, .elementSize = 1,
				      .width = width, .height = height };
	struct gnode *n;
	int r = memset_params_check(&m);

	if (r)
		return r;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cudaErrorMemoryAllocation;
	n->kind = GN_MEMSET;
	n->s = m;
	return graph_capture_node(stream, n);
}

int phos_graph_capture_symbol(const void *stream, const void *symbol, void *host, size_t count, size_t offset,
			      int kind, bool to_symbol)
{
	uint64_t addr = 0, size = 0;
	struct gnode *n;
	int r = phos_var_lookup(symbol, &addr, &size);

	if (r)
		return r;
	if (!host || offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cudaErrorMemoryAllocation;
	/* the node names the variable: a restored executor may place it elsewhere */
	n->kind = GN_MEMCPY;
	n->c.form = to_symbol ? CP_TO_SYMBOL : CP_FROM_SYMBOL;
	n->c.symbol = symbol;
	n->c.offset = offset;
	n->c.count = count;
	n->c.kind = (enum cudaMemcpyKind)kind;
	if (to_symbol)
		n->c.src = host;
	else
		n->c.dst = host;
	return graph_capture_node(stream, n);
}

int phos_graph_capture_event_node(const void *stream, const void *event, bool wait)
{
	struct gnode *n = calloc(1, sizeof(*n));

	if (!n)
		return cudaErrorMemoryAllocation;
	n->kind = wait ? GN_EVENT_WAIT : GN_EVENT_RECORD;
	n->event = (cudaEvent_t)event;
	return graph_capture_node(stream, n);
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
	return graph_capture_node(stream, n);
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

/* Whether each of nodes (n) is behind the origin stream's last nodes. */
static bool joined(struct gnode *const *nodes, size_t n, const struct cstream *origin)
{
	for (size_t d = 0; d < n; d++) {
		bool behind = false;

		for (size_t e = 0; !behind && e < origin->ndeps; e++)
			behind = reaches(nodes[d], origin->deps[e], 0);
		if (!behind)
			return false;
	}
	return true;
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
		if (!graph_has(graph, deps[i]))
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
		/* every stream forked into the capture must have joined back,
		 * destroyed ones too: its last work is behind the origin stream's */
		for (size_t i = 0; r == cudaSuccess && i < ncstreams; i++) {
			const struct cstream *o = &cstreams[i];

			if (o->cap == cap && o != cs && !joined(o->deps, o->ndeps, cs))
				r = cudaErrorStreamCaptureUnjoined;
		}
		if (r == cudaSuccess && !joined(cap->left, cap->nleft, cs))
			r = cudaErrorStreamCaptureUnjoined;
		capture_end(cap);
	}
	pthread_mutex_unlock(&glock);
	if (!cap)
		return phos_set_error(r);
	/* a capture into the program's graph (...ToGraph) may give no pGraph */
	if (r == cudaSuccess && !pGraph && cap->own_graph)
		r = cudaErrorInvalidValue;
	if (r) {
		if (cap->own_graph)
			graph_free(cap->graph);
		if (pGraph)
			*pGraph = NULL;
	} else if (pGraph) {
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


PHOS_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
							    const cudaGraphEdgeData *dependencyData,
							    size_t numDependencies, unsigned int flags)
{
	struct cstream *cs;
	uint32_t sid;
	int r;

	if ((numDependencies && !dependencies) || flags > cudaStreamSetCaptureDependencies)
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; dependencyData && i < numDependencies; i++)
		if (dependencyData[i].type != cudaGraphDependencyTypeDefault || dependencyData[i].from_port ||
		    dependencyData[i].to_port)
			return phos_set_error(cudaErrorNotSupported);
	r = sid_of(stream, &sid);
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&glock);
	cs = cstream_find(sid);
	if (!cs)
		r = cudaErrorIllegalState;
	for (size_t i = 0; r == cudaSuccess && i < numDependencies; i++)
		if (!graph_has(cs->cap->graph, (struct gnode *)dependencies[i]))
			r = cudaErrorInvalidValue;
	if (r == cudaSuccess && flags == cudaStreamSetCaptureDependencies)
		r = deps_set(&cs->deps, &cs->ndeps, (struct gnode *const *)dependencies, numDependencies);
	else if (r == cudaSuccess)
		r = deps_merge(&cs->deps, &cs->ndeps, (struct gnode *const *)dependencies, numDependencies);
	pthread_mutex_unlock(&glock);
	return phos_set_error(r);
}
