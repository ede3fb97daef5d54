/* SPDX-License-Identifier: MIT */
/* Streams and events: ids chosen by the preload, objects made by the device. */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "log.h"

static int event_get(struct executor *ex, uint32_t id, void **ret_event)
{
	struct exec_event_obj *e = handle_get(&ex->events, id);

	if (!e)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
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
	ex->dev_ops->stream_destroy(ex->dev, s->dev);
	free(s);
}

void exec_event_free(struct executor *ex, struct exec_event_obj *e)
{
	if (!e)
		return;
	ex->dev_ops->event_destroy(ex->dev, e->dev);
	free(e);
}

/* A host callback: the stream's earlier work first, then the callback in the
 * function process; nothing later on the ring runs before it returned
 * (channel.h). The callback is told the first error of earlier asynchronous
 * work, as CUDA tells it the stream's error. */
static int host_func(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_host_func, hf);
	void *s = NULL;
	int bad = exec_stream(ex, hf->stream, &s), r = bad;

	/* The preload checked the stream; a callback is still answered (with the
	 * error) so that its thread never waits for one that will not come. */
	if (r == 0)
		r = ex->dev_ops->stream_sync(ex->dev, s);
	if (r == 0)
		r = ex->pending_error;
	if (phos_channel_callback_run(ex->ch, hf->seq, -r) < 0)
		return -PHOS_CUDA_UNKNOWN;   /* the function is gone; the dispatcher notices next */
	return bad;
}

int exec_stream_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	const struct phos_handle *h = body;
	void *s, *e, *e2;

	if (len < sizeof(struct phos_handle))
		return -PHOS_CUDA_INVALID_VALUE;
	switch (op) {
	case PHOS_OP_STREAM_CREATE: {
		BODY(struct phos_stream_create, c);

		return exec_stream_make(ex, c->id, c->flags, c->priority);
	}
	case PHOS_OP_STREAM_DESTROY: {
		struct exec_stream_obj *so = h->id ? handle_take(&ex->streams, h->id) : NULL;

		if (!so)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		exec_pool_stream_gone(ex, h->id);
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

		TRY(exec_stream(ex, w->stream, &s));
		TRY(event_get(ex, w->event, &e));
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
