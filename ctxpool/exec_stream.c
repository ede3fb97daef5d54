/* SPDX-License-Identifier: MIT */
/* Streams and events: ids chosen by the preload, objects made by the device. */
#include <string.h>

#include "executor.h"
#include "log.h"


static int event_get(struct executor *ex, uint32_t id, void **ret_event)
{
	void *e = handle_get(&ex->events, id);

	if (!e)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	*ret_event = e;
	return 0;
}

static int stream_create(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_stream_create, c);
	void *s;
	int r;

	if (c->id == 0 || handle_get(&ex->streams, c->id))
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	TRY(ex->dev_ops->stream_create(ex->dev, c->flags, c->priority, &s));
	r = handle_put(&ex->streams, c->id, s);
	if (r < 0)
		ex->dev_ops->stream_destroy(ex->dev, s);
	return r;
}

static int event_create(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_event_create, c);
	void *e;
	int r;

	if (c->id == 0 || handle_get(&ex->events, c->id))
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	TRY(ex->dev_ops->event_create(ex->dev, c->flags, &e));
	r = handle_put(&ex->events, c->id, e);
	if (r < 0)
		ex->dev_ops->event_destroy(ex->dev, e);
	return r;
}

int exec_stream_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	const struct phos_handle *h = body;
	void *s, *e, *e2;

	if (len < sizeof(struct phos_handle))
		return -PHOS_CUDA_INVALID_VALUE;
	switch (op) {
	case PHOS_OP_STREAM_CREATE:
		return stream_create(ex, body, len);
	case PHOS_OP_STREAM_DESTROY:
		if (h->id == 0)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		s = handle_take(&ex->streams, h->id);
		if (!s)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		return ex->dev_ops->stream_destroy(ex->dev, s);
	case PHOS_OP_STREAM_SYNC:
		TRY(exec_stream(ex, h->id, &s));
		return ex->dev_ops->stream_sync(ex->dev, s);
	case PHOS_OP_STREAM_QUERY:
		TRY(exec_stream(ex, h->id, &s));
		return ex->dev_ops->stream_query(ex->dev, s);
	case PHOS_OP_STREAM_WAIT_EVENT: {
		BODY(struct phos_stream_wait, w);

		TRY(exec_stream(ex, w->stream, &s));
		TRY(event_get(ex, w->event, &e));
		return ex->dev_ops->stream_wait_event(ex->dev, s, e);
	}
	case PHOS_OP_EVENT_CREATE:
		return event_create(ex, body, len);
	case PHOS_OP_EVENT_DESTROY:
		e = handle_take(&ex->events, h->id);
		if (!e)
			return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
		return ex->dev_ops->event_destroy(ex->dev, e);
	case PHOS_OP_EVENT_RECORD: {
		BODY(struct phos_event_record, rec);

		TRY(event_get(ex, rec->event, &e));
		TRY(exec_stream(ex, rec->stream, &s));
		return ex->dev_ops->event_record(ex->dev, e, s);
	}
	case PHOS_OP_EVENT_SYNC:
		TRY(event_get(ex, h->id, &e));
		return ex->dev_ops->event_sync(ex->dev, e);
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
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
