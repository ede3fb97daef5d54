/* SPDX-License-Identifier: MIT */
/* Streams and events (ids chosen by the preload, objects made by the device),
 * stream attributes and the context's limits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "log.h"

static int event_get(struct executor *ex, uint32_t id, void **ret_event)
{
	struct exec_event_obj *e = handle_get(&ex->events, id);

	if (!e)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	/* The event's device, unless a stream named after it says otherwise
	 * (exec_stream: a stream may wait for another device's event). */
	if (e->device != ex->dev_index)
		exec_use_device(ex, e->device);
	*ret_event = e->dev;
	return 0;
}

int exec_stream_make(struct executor *ex, uint32_t id, uint32_t flags, int32_t priority)
{
	struct exec_stream_obj *s;
	int r;

	if (id == 0 || handle_get(&ex->streams, id))
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	s->flags = flags;
	s->priority = priority;
	s->device = ex->dev_index;
	r = ex->dev_ops->stream_create(ex->dev, flags, priority, &s->dev);
	if (r == 0 && (r = handle_put(&ex->streams, id, s)) < 0)
		ex->dev_ops->stream_destroy(ex->dev, s->dev);
	if (r < 0)
		free(s);
	return r;
}

int exec_event_make(struct executor *ex, uint32_t id, uint32_t flags)
{
	struct exec_event_obj *e;
	int r;

	if (id == 0 || handle_get(&ex->events, id))
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	e->flags = flags;
	e->device = ex->dev_index;
	r = ex->dev_ops->event_create(ex->dev, flags, &e->dev);
	if (r == 0 && (r = handle_put(&ex->events, id, e)) < 0)
		ex->dev_ops->event_destroy(ex->dev, e->dev);
	if (r < 0)
		free(e);
	return r;
}

void exec_stream_free(struct executor *ex, struct exec_stream_obj *s)
{
	if (!s)
		return;
	ex->dev_ops->stream_destroy(ex->devs[s->device], s->dev);
	free(s);
}

void exec_event_free(struct executor *ex, struct exec_event_obj *e)
{
	if (!e)
		return;
	ex->dev_ops->event_destroy(ex->devs[e->device], e->dev);
	free(e);
}

/* A host callback runs in the function process, once the stream's earlier
 * work is done, and the stream's later work waits for it (channel.h). Where
 * the device has a thread of its own for that (cuda: cuStreamAddCallback;
 * sim: a thread per callback), the callback is asked from there and the
 * dispatcher goes on with other streams' records: a callback that waits for
 * the program's work on another stream does not hold it (as natively). Else
 * the dispatcher syncs the stream and asks itself: nothing later on the
 * ring runs before the callback returned. The callback is told the stream's error, or the
 * first error of earlier asynchronous work. One is asked at a time (the
 * channel has one callback slot). */
static pthread_mutex_t host_call_lock = PTHREAD_MUTEX_INITIALIZER;

struct host_call {
	struct executor *ex;
	struct phos_channel *ch;
	uint32_t seq;
	int status;   /* negated cudaError_t known at the post */
};

static void host_call_run(void *arg, int status)
{
	struct host_call *hc = arg;
	struct executor *ex = hc->ex;

	pthread_mutex_lock(&host_call_lock);
	phos_channel_callback_run(hc->ch, hc->seq, -(hc->status ? hc->status : status));   /* (-EPIPE: gone) */
	pthread_mutex_unlock(&host_call_lock);
	free(hc);
	atomic_fetch_sub(&ex->host_calls, 1);
}

void exec_host_calls_wait(struct executor *ex)
{
	/* each returns within the channel's peer check once the function is gone */
	while (atomic_load(&ex->host_calls))
		usleep(1000);
}

static int host_func(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_host_func, hf);
	void *s = NULL;
	int bad = exec_stream(ex, hf->stream, &s), r = bad;
	struct host_call *hc;

	/* The preload checked the stream; a callback is still answered (with the
	 * error) so that its thread never waits for one that will not come. */
	if (r == 0 && ex->dev_ops->stream_host_func && (hc = malloc(sizeof(*hc)))) {
		*hc = (struct host_call){ .ex = ex, .ch = ex->ch, .seq = hf->seq, .status = ex->pending_error };
		atomic_fetch_add(&ex->host_calls, 1);
		r = ex->dev_ops->stream_host_func(ex->dev, s, host_call_run, hc);
		if (r == 0)
			return 0;
		atomic_fetch_sub(&ex->host_calls, 1);
		free(hc);
	}
	if (r == 0)
		r = ex->dev_ops->stream_sync(ex->dev, s);
	if (r == 0)
		r = ex->pending_error;
	pthread_mutex_lock(&host_call_lock);
	r = phos_channel_callback_run(ex->ch, hf->seq, -r);
	pthread_mutex_unlock(&host_call_lock);
	if (r < 0)
		return -PHOS_CUDA_UNKNOWN;   /* the function is gone; the dispatcher notices next */
	return bad;
}

/* Remembers that the function set attribute attr of stream (for checkpoints). */
static void attr_keep(struct executor *ex, uint32_t stream, int32_t attr)
{
	for (unsigned i = 0; i < ex->nattrs_kept; i++)
		if (ex->attrs_kept[i].stream == stream && ex->attrs_kept[i].attr == attr)
			return;
	if (ex->nattrs_kept == EXEC_KEPT_ATTRS) {
		ex->attrs_lost = true;
		return;
	}
	ex->attrs_kept[ex->nattrs_kept].stream = stream;
	ex->attrs_kept[ex->nattrs_kept++].attr = attr;
}

/* Stream id is destroyed: what was set on it went with it. */
static void attrs_stream_gone(struct executor *ex, uint32_t stream)
{
	unsigned k = 0;

	for (unsigned i = 0; i < ex->nattrs_kept; i++)
		if (ex->attrs_kept[i].stream != stream)
			ex->attrs_kept[k++] = ex->attrs_kept[i];
	ex->nattrs_kept = k;
}

/* cudaStreamSetAttribute / GetAttribute, answered by the device. A set on the
 * default stream saves the value it replaces first (exec_context_restore). */
static int stream_attr(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_stream_attr, a);
	bool saved_attr = a->stream == 0 && a->attr >= 0 && a->attr < EXEC_SAVED_ATTRS;
	uint32_t bit = saved_attr ? 1u << a->attr : 0;
	void *s;

	TRY(exec_stream(ex, a->stream, &s));
	if (!a->set) {
		/* the device holds a stand-in for the value a function found */
		if (ex->null_attrs_stand_in & bit)
			memcpy(out, ex->null_attrs_saved[a->attr], PHOS_STREAM_ATTR_BYTES);
		else
			TRY(ex->dev_ops->stream_get_attr(ex->dev, s, a->attr, out));
		*out_len = PHOS_STREAM_ATTR_BYTES;
		return 0;
	}
	ex->attrs_set = true;
	attr_keep(ex, a->stream, a->attr);   /* a checkpoint carries its value */
	if (saved_attr && !(ex->null_attrs_changed & bit)) {
		if (!(ex->null_attrs_stand_in & bit))
			TRY(ex->dev_ops->stream_get_attr(ex->dev, NULL, a->attr, ex->null_attrs_saved[a->attr]));
		TRY(ex->dev_ops->stream_set_attr(ex->dev, NULL, a->attr, a->value));
		ex->null_attrs_changed |= bit;
		ex->null_attrs_stand_in &= ~bit;
		return 0;
	}
	return ex->dev_ops->stream_set_attr(ex->dev, s, a->attr, a->value);
}

/* Puts attribute attr of the default stream back to the value saved before
 * the function changed it. When the device refuses that value (an H100's
 * driver reads a never-set sync policy as -1 and refuses to set -1), it gets
 * the attribute's default instead (CU_SYNC_POLICY_AUTO for the sync policy,
 * zeros for the rest) and reads answer the saved value until a function sets
 * it again. */
static void null_attr_restore(struct executor *ex, int attr)
{
	uint8_t dflt[PHOS_STREAM_ATTR_BYTES] = { 0 };
	int32_t policy;

	memcpy(&policy, ex->null_attrs_saved[attr], sizeof(policy));
	/* a policy the device would refuse is not tried (the backend would log it) */
	if (!(attr == 3 && (policy < 1 || policy > 4)) &&
	    ex->dev_ops->stream_set_attr(ex->dev, NULL, attr, ex->null_attrs_saved[attr]) == 0)
		return;
	if (attr == 3) {                     /* CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY */
		int32_t auto_policy = 1;     /* CU_SYNC_POLICY_AUTO */

		memcpy(dflt, &auto_policy, sizeof(auto_policy));
	}
	if (ex->dev_ops->stream_set_attr(ex->dev, NULL, attr, dflt) == 0)
		ex->null_attrs_stand_in |= 1u << attr;
	else
		phos_warn("could not put attribute %d of the default stream back", attr);
}

/* cudaDeviceSetLimit / GetLimit on the executor's context; replies the value
 * the context has after the call (the driver may round or cap it). */
static int device_limit(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_device_limit, l);
	uint64_t v = 0;

	if (l->set) {
		if (l->limit >= 0 && l->limit < EXEC_SAVED_LIMITS)
			ex->limits_dev[l->limit] = (uint8_t)ex->dev_index;
		else
			ex->limits_lost = true;   /* not put back at the scrub, nor carried by a checkpoint */
		if (l->limit >= 0 && l->limit < EXEC_SAVED_LIMITS && !(ex->limits_changed & (1u << l->limit))) {
			TRY(ex->dev_ops->limit_get(ex->dev, l->limit, &ex->limits_saved[l->limit]));
			TRY(ex->dev_ops->limit_set(ex->dev, l->limit, l->value));
			ex->limits_changed |= 1u << l->limit;
		} else {
			TRY(ex->dev_ops->limit_set(ex->dev, l->limit, l->value));
		}
	}
	TRY(ex->dev_ops->limit_get(ex->dev, l->limit, &v));
	memcpy(out, &v, sizeof(v));
	*out_len = sizeof(v);
	return 0;
}

void exec_context_restore(struct executor *ex)
{
	if (!ex->dev)
		return;
	for (int i = 0; i < EXEC_SAVED_LIMITS; i++)
		if (ex->limits_changed & (1u << i) && ex->dev_ops->limit_set(ex->dev, i, ex->limits_saved[i]) < 0)
			phos_warn("could not put limit %d back to %llu", i, (unsigned long long)ex->limits_saved[i]);
	for (int i = 0; i < EXEC_SAVED_ATTRS; i++)
		if (ex->null_attrs_changed & (1u << i))
			null_attr_restore(ex, i);
	ex->limits_changed = ex->null_attrs_changed = 0;
}

int exec_context_to_image(struct executor *ex, struct phos_image *img)
{
	int cur = ex->dev_index, r = 0;

	for (int i = 0; i < EXEC_SAVED_LIMITS && r == 0; i++) {
		struct phos_image_limit l = { .limit = i, .device = ex->limits_dev[i] };

		if (!(ex->limits_changed & (1u << i)))
			continue;
		exec_use_device(ex, l.device);
		r = ex->dev_ops->limit_get(ex->dev, i, &l.value);
		if (r == 0)
			r = phos_image_add_limit(img, &l);
	}
	exec_use_device(ex, cur);
	for (unsigned i = 0; i < ex->nattrs_kept && r == 0; i++) {
		struct phos_image_stream_attr a = { .stream = ex->attrs_kept[i].stream, .attr = ex->attrs_kept[i].attr };
		void *s;

		r = exec_stream(ex, a.stream, &s);
		if (r == 0)
			r = ex->dev_ops->stream_get_attr(ex->dev, s, a.attr, a.value);
		exec_use_device(ex, cur);
		if (r == 0)
			r = phos_image_add_stream_attr(img, &a);
	}
	return r;
}

int exec_context_from_image(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	int cur = ex->dev_index, r = 0;
	uint8_t out[PHOS_STREAM_ATTR_BYTES];
	uint32_t out_len;

	for (uint32_t i = 0; i < img->nlimits && r == 0; i++) {
		struct phos_device_limit l = { .limit = img->limits[i].limit, .set = 1, .value = img->limits[i].value };

		exec_use_device(ex, (int)img->limits[i].device);
		r = device_limit(ex, &l, sizeof(l), out, &out_len);
		if (r < 0)
			phos_errf(err, errlen, "limit %d could not be set again (cuda error %d)", l.limit, -r);
	}
	exec_use_device(ex, cur);
	for (uint32_t i = 0; i < img->nstream_attrs && r == 0; i++) {
		struct phos_stream_attr a = { .stream = img->stream_attrs[i].stream, .attr = img->stream_attrs[i].attr,
					      .set = 1 };

		memcpy(a.value, img->stream_attrs[i].value, sizeof(a.value));
		r = stream_attr(ex, &a, sizeof(a), out, &out_len);
		exec_use_device(ex, cur);
		if (r < 0)
			phos_errf(err, errlen, "attribute %d of stream %u could not be set again (cuda error %d)", a.attr,
				  a.stream, -r);
	}
	return r < 0 ? -EIO : 0;
}

int exec_stream_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	const struct phos_handle *h = body;
	void *s, *e, *e2;

	if (len < sizeof(struct phos_handle))
		return -PHOS_CUDA_INVALID_VALUE;
	switch (op) {
	case PHOS_OP_STREAM_ATTR:
		return stream_attr(ex, body, len, out, out_len);
	case PHOS_OP_DEVICE_LIMIT:
		return device_limit(ex, body, len, out, out_len);
	case PHOS_OP_STREAM_CREATE: {
		BODY(struct phos_stream_create, c);

		return exec_stream_make(ex, c->id, c->flags, c->priority);
	}
	case PHOS_OP_STREAM_DESTROY: {
		struct exec_stream_obj *so = h->id ? handle_take(&ex->streams, h->id) : NULL;

		if (!so)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		exec_pool_stream_gone(ex, h->id);
		attrs_stream_gone(ex, h->id);
		exec_stream_free(ex, so);
		return 0;
	}
	case PHOS_OP_STREAM_SYNC:
		TRY(exec_stream(ex, h->id, &s));
		TRY(ex->dev_ops->stream_sync(ex->dev, s));
		exec_pool_after_sync(ex);
		return 0;
	case PHOS_OP_STREAM_QUERY:
		TRY(exec_stream(ex, h->id, &s));
		return ex->dev_ops->stream_query(ex->dev, s);
	case PHOS_OP_STREAM_WAIT_EVENT: {
		BODY(struct phos_stream_wait, w);
		int event_dev;

		TRY(event_get(ex, w->event, &e));
		event_dev = ex->dev_index;
		exec_use_device(ex, ex->cur);   /* the default stream is the selected device's */
		TRY(exec_stream(ex, w->stream, &s));
		/* Another device's event: waited for here, so that the stream's
		 * later work follows it (stronger than CUDA's order, never weaker). */
		if (event_dev != ex->dev_index)
			return ex->dev_ops->event_sync(ex->devs[event_dev], e);
		return ex->dev_ops->stream_wait_event(ex->dev, s, e);
	}
	case PHOS_OP_EVENT_CREATE: {
		BODY(struct phos_event_create, c);

		return exec_event_make(ex, c->id, c->flags);
	}
	case PHOS_OP_EVENT_DESTROY: {
		struct exec_event_obj *eo = handle_take(&ex->events, h->id);

		if (!eo)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		exec_event_free(ex, eo);
		return 0;
	}
	case PHOS_OP_EVENT_RECORD: {
		BODY(struct phos_event_record, rec);

		TRY(event_get(ex, rec->event, &e));
		TRY(exec_stream(ex, rec->stream, &s));
		return ex->dev_ops->event_record(ex->dev, e, s);
	}
	case PHOS_OP_EVENT_SYNC:
		TRY(event_get(ex, h->id, &e));
		TRY(ex->dev_ops->event_sync(ex->dev, e));
		exec_pool_after_sync(ex);
		return 0;
	case PHOS_OP_EVENT_QUERY:
		TRY(event_get(ex, h->id, &e));
		return ex->dev_ops->event_query(ex->dev, e);
	case PHOS_OP_EVENT_ELAPSED: {
		BODY(struct phos_event_elapsed, el);
		float ms = 0;

		TRY(event_get(ex, el->start, &e));
		TRY(event_get(ex, el->end, &e2));
		TRY(ex->dev_ops->event_elapsed(ex->dev, e, e2, &ms));
		memcpy(out, &ms, sizeof(ms));
		*out_len = sizeof(ms);
		return 0;
	}
	case PHOS_OP_HOST_FUNC:
		return host_func(ex, body, len);
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
