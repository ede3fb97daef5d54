/* SPDX-License-Identifier: MIT */
/* The staging pipeline (see staging.h). */
#include "staging.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "log.h"
#include "uring_io.h"

#define CHUNK ((uint64_t)PHOS_IMAGE_HASH_CHUNK)

enum slot_state { SLOT_FREE, SLOT_IO, SLOT_COPY };

struct slot {
	uint8_t *buf;
	void *event;
	enum slot_state state;
	size_t item;          /* which item and chunk it holds */
	uint64_t chunk;
	uint64_t len;
};

struct stage {
	struct executor *ex;
	struct slot slot[STAGE_SLOTS];
	void *stream;
	struct phos_uio *uio;
	size_t copy_q[STAGE_SLOTS];  /* slots in SLOT_COPY, oldest first */
	unsigned copy_head, copy_n;
	uint64_t **chunk_hash;       /* per item, per chunk */
};

static void fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static uint64_t nchunks(uint64_t len)
{
	return (len + CHUNK - 1) / CHUNK;
}

static void stage_exit(struct stage *st, size_t nitems)
{
	const struct phos_device_ops *d = st->ex->dev_ops;

	phos_uio_free(st->uio);
	if (st->stream)
		d->stream_sync(st->ex->dev, st->stream);
	for (unsigned i = 0; i < STAGE_SLOTS; i++) {
		if (st->slot[i].event)
			d->event_destroy(st->ex->dev, st->slot[i].event);
		if (st->slot[i].buf) {
			d->host_unregister(st->ex->dev, st->slot[i].buf);
			free(st->slot[i].buf);
		}
	}
	if (st->stream)
		d->stream_destroy(st->ex->dev, st->stream);
	if (st->chunk_hash) {
		for (size_t i = 0; i < nitems; i++)
			free(st->chunk_hash[i]);
		free(st->chunk_hash);
	}
}

static int stage_init(struct stage *st, struct executor *ex, const struct stage_item *items, size_t n)
{
	const struct phos_device_ops *d = ex->dev_ops;
	int r;

	memset(st, 0, sizeof(*st));
	st->ex = ex;
	st->chunk_hash = calloc(n ? n : 1, sizeof(*st->chunk_hash));
	if (!st->chunk_hash)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		st->chunk_hash[i] = calloc(nchunks(items[i].len) ? nchunks(items[i].len) : 1, sizeof(uint64_t));
		if (!st->chunk_hash[i])
			return -ENOMEM;
	}
	r = phos_uio_new(STAGE_SLOTS, &st->uio);
	if (r < 0)
		return r;
	r = d->stream_create(ex->dev, 1 /* non-blocking */, 0, &st->stream);
	if (r < 0)
		return -EIO;
	for (unsigned i = 0; i < STAGE_SLOTS; i++) {
		if (posix_memalign((void **)&st->slot[i].buf, 4096, CHUNK))
			return -ENOMEM;
		/* Unpinned staging still works, only slower. */
		if (d->host_register(ex->dev, st->slot[i].buf, CHUNK) < 0)
			phos_warn("staging slot %u could not be pinned", i);
		if (d->event_create(ex->dev, 2 /* disable timing */, &st->slot[i].event) < 0)
			return -EIO;
	}
	return 0;
}

static int free_slot(struct stage *st)
{
	for (unsigned i = 0; i < STAGE_SLOTS; i++)
		if (st->slot[i].state == SLOT_FREE)
			return (int)i;
	return -1;
}

static void copy_push(struct stage *st, size_t s)
{
	st->copy_q[(st->copy_head + st->copy_n++) % STAGE_SLOTS] = s;
}

static size_t copy_pop(struct stage *st)
{
	size_t s = st->copy_q[st->copy_head];

	st->copy_head = (st->copy_head + 1) % STAGE_SLOTS;
	st->copy_n--;
	return s;
}

int stage_dump(struct executor *ex, int fd, struct stage_item *items, size_t n, char *err, size_t errlen)
{
	const struct phos_device_ops *d = ex->dev_ops;
	struct stage st;
	size_t item = 0;
	uint64_t chunk = 0, left = 0;
	int r;

	for (size_t i = 0; i < n; i++)
		left += nchunks(items[i].len);
	r = stage_init(&st, ex, items, n);
	if (r < 0) {
		fail(err, errlen, "cannot set up the staging ring: %s", strerror(-r));
		goto out;
	}
	while (left > 0) {
		int s;

		/* Start device-to-host copies into every free slot. */
		while (item < n && (s = free_slot(&st)) >= 0) {
			struct slot *sl = &st.slot[s];

			if (chunk >= nchunks(items[item].len)) {
				item++;
				chunk = 0;
				continue;
			}
			sl->item = item;
			sl->chunk = chunk;
			sl->len = items[item].len - chunk * CHUNK < CHUNK ? items[item].len - chunk * CHUNK : CHUNK;
			r = d->memcpy_d2h_async(ex->dev, sl->buf, items[item].dev + chunk * CHUNK, sl->len, st.stream);
			if (r == 0)
				r = d->event_record(ex->dev, sl->event, st.stream);
			if (r < 0) {
				fail(err, errlen, "device-to-host copy of %#llx failed (cuda error %d)",
				     (unsigned long long)items[item].dev, -r);
				r = -EIO;
				goto out;
			}
			sl->state = SLOT_COPY;
			copy_push(&st, (size_t)s);
			chunk++;
		}
		/* The oldest copy: hash it and write it out. */
		if (st.copy_n > 0) {
			struct slot *sl = &st.slot[copy_pop(&st)];

			r = d->event_sync(ex->dev, sl->event);
			if (r < 0) {
				fail(err, errlen, "device-to-host copy failed (cuda error %d)", -r);
				r = -EIO;
				goto out;
			}
			st.chunk_hash[sl->item][sl->chunk] = phos_image_chunk_hash(sl->buf, sl->len);
			/* Whole 4 KiB blocks keep O_DIRECT possible; the tail is padding. */
			r = phos_uio_write(st.uio, fd, sl->buf, (sl->len + 4095) & ~4095ull,
					   items[sl->item].off + sl->chunk * CHUNK, sl, 0);
			if (r < 0) {
				fail(err, errlen, "writing gpu.data: %s", strerror(-r));
				goto out;
			}
			sl->state = SLOT_IO;
		}
		/* Writes that finished free their slots; wait when nothing else can move. */
		for (;;) {
			bool stuck = free_slot(&st) < 0 && st.copy_n == 0;
			void *tag;
			int res;

			r = phos_uio_complete(st.uio, stuck || (item >= n && st.copy_n == 0), &tag, &res);
			if (r < 0 || (r == 1 && res < 0)) {
				fail(err, errlen, "writing gpu.data: %s", strerror(r < 0 ? -r : -res));
				r = r < 0 ? r : res;
				goto out;
			}
			if (r == 0)
				break;
			((struct slot *)tag)->state = SLOT_FREE;
			left--;
		}
	}
	for (size_t i = 0; i < n; i++)
		items[i].hash = phos_image_combine(st.chunk_hash[i], nchunks(items[i].len));
	r = 0;
out:
	stage_exit(&st, n);
	return r;
}

int stage_load(struct executor *ex, int fd, const struct stage_item *items, size_t n, char *err,
	       size_t errlen)
{
	const struct phos_device_ops *d = ex->dev_ops;
	struct stage st;
	size_t item = 0;
	uint64_t chunk = 0, left = 0;
	unsigned reading = 0;
	int r;

	for (size_t i = 0; i < n; i++)
		left += nchunks(items[i].len);
	r = stage_init(&st, ex, items, n);
	if (r < 0) {
		fail(err, errlen, "cannot set up the staging ring: %s", strerror(-r));
		goto out;
	}
	while (left > 0) {
		int s;
		void *tag;
		int res;

		/* Read into every free slot. */
		while (item < n && (s = free_slot(&st)) >= 0) {
			struct slot *sl = &st.slot[s];

			if (chunk >= nchunks(items[item].len)) {
				item++;
				chunk = 0;
				continue;
			}
			sl->item = item;
			sl->chunk = chunk;
			sl->len = items[item].len - chunk * CHUNK < CHUNK ? items[item].len - chunk * CHUNK : CHUNK;
			r = phos_uio_read(st.uio, fd, sl->buf, (sl->len + 4095) & ~4095ull,
					  items[item].off + chunk * CHUNK, sl, PHOS_UIO_ASYNC);
			if (r < 0) {
				fail(err, errlen, "reading gpu.data: %s", strerror(-r));
				goto out;
			}
			sl->state = SLOT_IO;
			reading++;
			chunk++;
		}
		/* A finished read: hash it and copy it to the device. Wait for one only
		 * when no copy can retire instead. */
		r = phos_uio_complete(st.uio, reading > 0 && st.copy_n == 0, &tag, &res);
		if (r < 0 || (r == 1 && res < 0)) {
			fail(err, errlen, "reading gpu.data: %s", strerror(r < 0 ? -r : -res));
			r = -EIO;
			goto out;
		}
		if (r == 1) {
			struct slot *sl = tag;

			reading--;
			st.chunk_hash[sl->item][sl->chunk] = phos_image_chunk_hash(sl->buf, sl->len);
			r = d->memcpy_h2d_async(ex->dev, items[sl->item].dev + sl->chunk * CHUNK, sl->buf, sl->len,
						st.stream);
			if (r == 0)
				r = d->event_record(ex->dev, sl->event, st.stream);
			if (r < 0) {
				fail(err, errlen, "host-to-device copy to %#llx failed (cuda error %d)",
				     (unsigned long long)items[sl->item].dev, -r);
				r = -EIO;
				goto out;
			}
			sl->state = SLOT_COPY;
			copy_push(&st, (size_t)(sl - st.slot));
		}
		/* Retire finished copies (the oldest first); block on one when every
		 * slot is busy copying. */
		while (st.copy_n > 0) {
			struct slot *sl = &st.slot[st.copy_q[st.copy_head]];
			bool must = reading == 0 && free_slot(&st) < 0;

			r = must ? d->event_sync(ex->dev, sl->event) : d->event_query(ex->dev, sl->event);
			if (r == -PHOS_CUDA_NOT_READY)
				break;
			if (r < 0) {
				fail(err, errlen, "host-to-device copy failed (cuda error %d)", -r);
				r = -EIO;
				goto out;
			}
			copy_pop(&st);
			sl->state = SLOT_FREE;
			left--;
		}
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t h = phos_image_combine(st.chunk_hash[i], nchunks(items[i].len));

		if (h != items[i].hash) {
			fail(err, errlen, "checksum mismatch in gpu.data at offset %llu (%llu bytes for %#llx)",
			     (unsigned long long)items[i].off, (unsigned long long)items[i].len,
			     (unsigned long long)items[i].dev);
			r = -EBADMSG;
			goto out;
		}
	}
	r = d->stream_sync(ex->dev, st.stream) < 0 ? -EIO : 0;
	if (r < 0)
		fail(err, errlen, "host-to-device copies failed");
out:
	stage_exit(&st, n);
	return r;
}
