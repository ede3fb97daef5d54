/* SPDX-License-Identifier: MIT */
/*
 * Streams and events. Ids are chosen here, so creating and destroying post
 * asynchronous records; waiting and querying are synchronous calls. The
 * per-thread default stream is an ordinary stream per host thread (ptds.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

/* Attributes the function set on a stream (bit i of set: cudaStreamAttrID i),
 * handed to a restored executor by phos_stream_attrs_resend: a snapshot keeps
 * a stream's flags and priority, not its attributes. */
#define STREAM_ATTR_IDS 16
struct stream_attrs {
	uint32_t set;
	uint8_t value[STREAM_ATTR_IDS][PHOS_STREAM_ATTR_BYTES];
};

struct stream {
	unsigned flags;
	int priority;
	int device;                   /* the creating thread's (cudaSetDevice) */
	struct stream_attrs *attrs;   /* NULL until one is set */
};

static pthread_mutex_t attrs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream_attrs null_attrs;   /* the default stream's */

static void stream_free(void *obj)
{
	struct stream *s = obj;

	if (s)
		free(s->attrs);
	free(s);
}

/* Remembers that attribute attr of stream id (0: the default stream) was set
 * to value; a failure to remember is only logged (the attribute is set). */
static void attrs_remember(uint32_t id, cudaStreamAttrID attr, const void *value)
{
	struct stream_attrs *a = &null_attrs;

	if ((unsigned)attr >= STREAM_ATTR_IDS)
		return;
	pthread_mutex_lock(&attrs_lock);
	if (id) {
		struct stream *s = phos_ids_get(PHOS_H_STREAM, id);

		a = s ? s->attrs : NULL;
		if (s && !a)
			a = s->attrs = calloc(1, sizeof(*a));
	}
	if (a) {
		a->set |= 1u << attr;
		memcpy(a->value[attr], value, PHOS_STREAM_ATTR_BYTES);
	} else {
		phos_warn("stream %u: attribute %d is not kept for a restore (out of memory)", id, (int)attr);
	}
	pthread_mutex_unlock(&attrs_lock);
}

static int attrs_send(uint32_t id, const struct stream_attrs *a)
{
	for (unsigned i = 0; i < STREAM_ATTR_IDS; i++) {
		struct phos_stream_attr m = { .stream = id, .attr = (int32_t)i, .set = 1 };
		cudaStreamAttrValue v;
		int r;

		if (!(a->set & (1u << i)))
			continue;
		memcpy(m.value, a->value[i], sizeof(m.value));
		r = phos_preload_call(PHOS_OP_STREAM_ATTR, &m, sizeof(m), NULL, 0, &v, sizeof(v), NULL, NULL);
		if (r)
			return r;
	}
	return cudaSuccess;
}

struct resend_ctx {
	int r;
};

static void attrs_resend_one(uint32_t id, void *obj, void *arg)
{
	struct stream *s = obj;
	struct resend_ctx *c = arg;

	if (c->r == cudaSuccess && s->attrs)
		c->r = attrs_send(id, s->attrs);
}

int phos_stream_attrs_resend(void)
{
	struct resend_ctx c = { .r = cudaSuccess };

	pthread_mutex_lock(&attrs_lock);
	c.r = attrs_send(0, &null_attrs);
	phos_ids_each(PHOS_H_STREAM, attrs_resend_one, &c);
	pthread_mutex_unlock(&attrs_lock);
	return c.r;
}

struct event {
	unsigned flags;
};

static int event_id(cudaEvent_t e, uint32_t *ret_id)
{
	uint32_t id = phos_handle_unwrap(e, PHOS_H_EVENT);

	if (!id || !phos_ids_get(PHOS_H_EVENT, id))
		return cudaErrorInvalidResourceHandle;
	*ret_id = id;
	return cudaSuccess;
}

/* Records cudaErrorNotReady without making it the thread's last error, as CUDA does. */
static cudaError_t query_result(int r)
{
	return r == cudaErrorNotReady ? cudaErrorNotReady : phos_set_error(r);
}

/* --- streams --- */

static int stream_create(cudaStream_t *pStream, unsigned flags, int priority)
{
	struct phos_stream_create c = { .flags = flags };
	struct stream *s;
	int r;

	if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking))
		return cudaErrorInvalidValue;
	r = phos_preload_connect();
	if (r)
		return r;
	/* Clamp to the range cudaDeviceGetStreamPriorityRange reports, as CUDA does. */
	c.priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
	s = malloc(sizeof(*s));
	if (!s)
		return cudaErrorMemoryAllocation;
	s->flags = flags;
	s->priority = c.priority;
	s->device = phos_current_device();
	s->attrs = NULL;
	r = phos_ids_add(PHOS_H_STREAM, s, &c.id);
	if (r) {
		free(s);
		return r;
	}
	r = phos_preload_post(PHOS_OP_STREAM_CREATE, &c, sizeof(c), NULL, 0);
	if (r) {
		free(phos_ids_take(PHOS_H_STREAM, c.id));
		return r;
	}
	*pStream = phos_handle_wrap(PHOS_H_STREAM, c.id);
	return cudaSuccess;
}

/* --- the per-thread default stream --- */

static pthread_key_t pt_key;
static pthread_once_t pt_once = PTHREAD_ONCE_INIT;
static __thread uint32_t pt_id;           /* this thread's stream, 0: none yet */
static __thread unsigned pt_generation;   /* stream_generation when it was made */
static unsigned stream_generation = 1;    /* bumped when a reset forgets every stream */

/* The thread ends: its default stream goes, after the work queued on it. */
static void pt_destroy(void *v)
{
	struct phos_handle h = { .id = (uint32_t)(uintptr_t)v };

	if (h.id && pt_generation == __atomic_load_n(&stream_generation, __ATOMIC_ACQUIRE) &&
	    phos_ids_get(PHOS_H_STREAM, h.id)) {
		phos_preload_post(PHOS_OP_STREAM_DESTROY, &h, sizeof(h), NULL, 0);
		pthread_mutex_lock(&attrs_lock);
		stream_free(phos_ids_take(PHOS_H_STREAM, h.id));
		pthread_mutex_unlock(&attrs_lock);
	}
	pt_id = 0;
}

static void pt_key_make(void)
{
	pthread_key_create(&pt_key, pt_destroy);
}

int phos_stream_per_thread(uint32_t *ret_id)
{
	cudaStream_t s;
	int r;

	if (pt_id && pt_generation == __atomic_load_n(&stream_generation, __ATOMIC_ACQUIRE)) {
		*ret_id = pt_id;
		return cudaSuccess;
	}
	pthread_once(&pt_once, pt_key_make);
	/* a blocking stream: CUDA's per-thread stream synchronizes with the legacy one */
	r = stream_create(&s, cudaStreamDefault, 0);
	if (r)
		return r;
	pt_id = phos_handle_unwrap(s, PHOS_H_STREAM);
	pt_generation = __atomic_load_n(&stream_generation, __ATOMIC_ACQUIRE);
	pthread_setspecific(pt_key, (void *)(uintptr_t)pt_id);
	*ret_id = pt_id;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return phos_set_error(stream_create(pStream, cudaStreamDefault, 0));
}

PHOS_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return phos_set_error(stream_create(pStream, flags, 0));
}

PHOS_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	return phos_set_error(stream_create(pStream, flags, priority));
}

PHOS_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	struct phos_handle h = { 0 };
	int r = phos_stream_resolve(stream, &h.id);

	if (r == cudaSuccess && (h.id == 0 || stream == cudaStreamPerThread || !stream))
		r = cudaErrorInvalidResourceHandle;
	if (r == cudaSuccess)
		r = phos_graph_stream_gone(h.id);
	if (r)
		return phos_set_error(r);
	/* The record goes first, so that the id is never reused before it. */
	r = phos_preload_post(PHOS_OP_STREAM_DESTROY, &h, sizeof(h), NULL, 0);
	pthread_mutex_lock(&attrs_lock);
	stream_free(phos_ids_take(PHOS_H_STREAM, h.id));
	pthread_mutex_unlock(&attrs_lock);
	return phos_set_error(r);
}

/* --- waits that poll (NCCL ranks as threads: internal.h) --- */

static atomic_bool nccl_threads;

PHOS_EXPORT void phos_preload_nccl_threads(void)
{
	if (!atomic_exchange(&nccl_threads, true))
		phos_debug("NCCL ranks are threads of this process: waits for the device poll from now on");
}

/* Polls op (STREAM_QUERY or EVENT_QUERY) of id until it is not NotReady. */
static int poll_query(uint32_t op, uint32_t id)
{
	struct phos_handle h = { .id = id };
	unsigned us = 5;
	int r;

	while ((r = phos_preload_call(op, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL)) == cudaErrorNotReady) {
		usleep(us);
		if (us < 200)
			us *= 2;
	}
	return r;
}

struct dev_streams {
	int device;
	uint32_t ids[256];
	size_t n;
};

static void dev_streams_cb(uint32_t id, void *obj, void *arg)
{
	const struct stream *s = obj;
	struct dev_streams *d = arg;

	if (s->device == d->device && d->n < sizeof(d->ids) / sizeof(d->ids[0]))
		d->ids[d->n++] = id;
}

/* Every stream of the current device (the first 256), then its null stream. */
static int drain_current_device(void)
{
	struct dev_streams d = { .device = 0, .n = 0 };
	int r;

	d.device = phos_current_device();
	phos_ids_each(PHOS_H_STREAM, dev_streams_cb, &d);
	for (size_t i = 0; i < d.n; i++) {
		if ((r = poll_query(PHOS_OP_STREAM_QUERY, d.ids[i])) != cudaSuccess)
			return r;
	}
	return poll_query(PHOS_OP_STREAM_QUERY, 0);
}

PHOS_EXPORT int phos_preload_drain(uint32_t stream)
{
	if (!atomic_load(&nccl_threads))
		return cudaSuccess;
	/* the legacy stream waits for every blocking stream of its device */
	return stream == 0 ? drain_current_device() : poll_query(PHOS_OP_STREAM_QUERY, stream);
}

int phos_preload_drain_event(const void *event)
{
	uint32_t id = 0;

	if (!atomic_load(&nccl_threads) || event_id((cudaEvent_t)(uintptr_t)event, &id))
		return cudaSuccess;   /* a bad event: the wait itself says so */
	return poll_query(PHOS_OP_EVENT_QUERY, id);
}

int phos_preload_drain_device(void)
{
	return atomic_load(&nccl_threads) ? drain_current_device() : cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	struct phos_handle h = { 0 };
	int r = phos_preload_stream_id(stream, &h.id);

	if (r == cudaSuccess)
		r = phos_preload_drain(h.id);
	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_STREAM_SYNC, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	struct phos_handle h = { 0 };
	int r = phos_preload_stream_id(stream, &h.id);

	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_STREAM_QUERY, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
	return query_result(r);
}

PHOS_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	struct phos_stream_wait w = { .flags = flags };
	bool captured = false;
	int r = event_id(event, &w.event);

	/* in a capture, an external wait is an event wait node */
	if (r == cudaSuccess && (flags & cudaEventWaitExternal) && phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_event_node(stream, event, true));

	if (r == cudaSuccess)
		r = phos_graph_wait_event(stream, w.event, &captured);
	if (r || captured)
		return phos_set_error(r);
	r = phos_preload_stream_id(stream, &w.stream);
	if (r == cudaSuccess)
		r = phos_preload_post(PHOS_OP_STREAM_WAIT_EVENT, &w, sizeof(w), NULL, 0);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
	uint32_t id;
	int r;

	if (!flags)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_stream_id(hStream, &id);
	if (r == cudaSuccess)
		*flags = id ? ((struct stream *)phos_ids_get(PHOS_H_STREAM, id))->flags : cudaStreamDefault;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
	uint32_t id;
	int r;

	if (!priority)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_stream_id(hStream, &id);
	if (r == cudaSuccess)
		*priority = id ? ((struct stream *)phos_ids_get(PHOS_H_STREAM, id))->priority : 0;
	return phos_set_error(r);
}

/* Stream ids are unique among live streams; the legacy stream is 0 (CUDA
 * gives the special streams ids of their own too). */
PHOS_EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
	uint32_t id;
	int r;

	if (!streamId)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_stream_resolve(hStream, &id);
	if (r == cudaSuccess)
		*streamId = id;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
	uint32_t id;
	int r;

	if (!device)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_stream_resolve(hStream, &id);
	if (r == cudaSuccess) {
		struct stream *s = id > 1 ? phos_ids_get(PHOS_H_STREAM, id) : NULL;

		/* a stream is its creator's device's; the default streams the caller's */
		*device = s ? s->device : phos_current_device();
	}
	return phos_set_error(r);
}

/* --- stream attributes --- */

/* An access policy window CUDA would refuse: more bytes than the device's
 * window, a hit ratio outside [0, 1], an unknown property. */
static int check_window(const struct cudaAccessPolicyWindow *w)
{
	int max = 0, r = phos_device_attr(cudaDevAttrMaxAccessPolicyWindowSize, &max);

	if (r)
		return r;
	if (w->num_bytes > (size_t)(max > 0 ? max : 0) || !(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f) ||
	    (unsigned)w->hitProp > cudaAccessPropertyPersisting || (unsigned)w->missProp > cudaAccessPropertyPersisting)
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

static int stream_attr(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue *in,
		       cudaStreamAttrValue *out)
{
	struct phos_stream_attr a = { .attr = (int32_t)attr, .set = in != NULL };
	cudaStreamAttrValue v;
	size_t len = 0;
	int r;

	_Static_assert(sizeof(cudaStreamAttrValue) == PHOS_STREAM_ATTR_BYTES, "cudaStreamAttrValue is not 64 bytes");
	if (!in && !out)
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &a.stream);
	if (r)
		return r;
	if (in && attr == cudaStreamAttributeAccessPolicyWindow && (r = check_window(&in->accessPolicyWindow)))
		return r;
	if (in)
		memcpy(a.value, in, sizeof(a.value));
	r = phos_preload_call(PHOS_OP_STREAM_ATTR, &a, sizeof(a), NULL, 0, &v, sizeof(v), &len, NULL);
	if (r)
		return r;
	if (in)
		attrs_remember(a.stream, attr, a.value);
	if (in && attr == cudaStreamAttributePriority && a.stream) {
		/* cudaStreamGetPriority answers here: keep the value the device took */
		a.set = 0;
		r = phos_preload_call(PHOS_OP_STREAM_ATTR, &a, sizeof(a), NULL, 0, &v, sizeof(v), &len, NULL);
		if (r == cudaSuccess && len == sizeof(v))
			((struct stream *)phos_ids_get(PHOS_H_STREAM, a.stream))->priority = v.priority;
		return r;
	}
	if (out) {
		if (len != sizeof(v))
			return cudaErrorUnknown;
		*out = v;
	}
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
					       const cudaStreamAttrValue *value)
{
	if (!value)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(stream_attr(hStream, attr, value, NULL));
}

PHOS_EXPORT cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
					       cudaStreamAttrValue *value_out)
{
	if (!value_out)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(stream_attr(hStream, attr, NULL, value_out));
}

/* --- events --- */

static int event_create(cudaEvent_t *event, unsigned flags)
{
	struct phos_event_create c = { .flags = flags };
	struct event *e;
	int r;

	if (!event || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)))
		return cudaErrorInvalidValue;
	if (flags & cudaEventInterprocess)
		return cudaErrorNotSupported;
	r = phos_preload_connect();
	if (r)
		return r;
	e = malloc(sizeof(*e));
	if (!e)
		return cudaErrorMemoryAllocation;
	e->flags = flags;
	r = phos_ids_add(PHOS_H_EVENT, e, &c.id);
	if (r) {
		free(e);
		return r;
	}
	r = phos_preload_post(PHOS_OP_EVENT_CREATE, &c, sizeof(c), NULL, 0);
	if (r) {
		free(phos_ids_take(PHOS_H_EVENT, c.id));
		return r;
	}
	*event = phos_handle_wrap(PHOS_H_EVENT, c.id);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return phos_set_error(event_create(event, cudaEventDefault));
}

PHOS_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	return phos_set_error(event_create(event, flags));
}

PHOS_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	struct phos_handle h = { 0 };
	int r = event_id(event, &h.id);

	if (r)
		return phos_set_error(r);
	r = phos_preload_post(PHOS_OP_EVENT_DESTROY, &h, sizeof(h), NULL, 0);
	free(phos_ids_take(PHOS_H_EVENT, h.id));
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	struct phos_event_record rec;
	int r = event_id(event, &rec.event);

	if (r == cudaSuccess && phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_event_record(stream, rec.event));
	if (r == cudaSuccess)
		phos_graph_event_forget(rec.event);
	if (r == cudaSuccess)
		r = phos_preload_stream_id(stream, &rec.stream);
	if (r == cudaSuccess)
		r = phos_preload_post(PHOS_OP_EVENT_RECORD, &rec, sizeof(rec), NULL, 0);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	if (flags & ~(unsigned)cudaEventRecordExternal)
		return phos_set_error(cudaErrorInvalidValue);
	/* in a capture, an external record is an event record node */
	if ((flags & cudaEventRecordExternal) && phos_graph_capturing(stream))
		return phos_set_error(phos_event_known(event) ? phos_graph_capture_event_node(stream, event, false)
							      : cudaErrorInvalidResourceHandle);
	return cudaEventRecord(event, stream);
}

PHOS_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	struct phos_handle h = { 0 };
	int r = event_id(event, &h.id);

	if (r == cudaSuccess)
		r = phos_preload_drain_event(event);
	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_EVENT_SYNC, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
	struct phos_handle h = { 0 };
	int r = event_id(event, &h.id);

	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_EVENT_QUERY, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
	return query_result(r);
}

PHOS_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	struct phos_event_elapsed el;
	float v = 0;
	size_t len = 0;
	int r;

	if (!ms)
		return phos_set_error(cudaErrorInvalidValue);
	r = event_id(start, &el.start);
	if (r == cudaSuccess)
		r = event_id(end, &el.end);
	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_EVENT_ELAPSED, &el, sizeof(el), NULL, 0, &v, sizeof(v), &len, NULL);
	if (r == cudaSuccess && len != sizeof(v))
		r = cudaErrorUnknown;
	if (r == cudaSuccess)
		*ms = v;
	return r == cudaErrorNotReady ? cudaErrorNotReady : phos_set_error(r);
}

void phos_stream_reset(void)
{
	__atomic_add_fetch(&stream_generation, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&attrs_lock);
	phos_ids_clear(PHOS_H_STREAM, stream_free);
	memset(&null_attrs, 0, sizeof(null_attrs));
	pthread_mutex_unlock(&attrs_lock);
	phos_ids_clear(PHOS_H_EVENT, free);
}

/* What the connection asks of the streams (conn.c): the stream attributes
 * set again after a restore, and the calling thread's own stream. */
__attribute__((constructor)) static void stream_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_ATTRS] = phos_stream_attrs_resend;
	phos_per_thread_stream = phos_stream_per_thread;
}
