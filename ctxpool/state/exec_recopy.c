/* SPDX-License-Identifier: MIT */
/*
 * Soft recopy (issue 11): the device side of a checkpoint copied while the
 * function runs, so that the stop copies only what it wrote since.
 *
 *   begin      every buffer and variable (dev, len) gets its place in the
 *              checkpoint's gpu.data, all dirty
 *   rounds     at record boundaries (exec_checkpoint_poll): drain the device,
 *              copy a batch of dirty items (or a piece of a big one) into
 *              their places (hashes kept),
 *              clean; a record whose write set (spec.c; opaque: everything)
 *              holds an item dirties it again. A round ends when the scan
 *              reaches the last item; the rounds go on while the dirty bytes
 *              at a round's end shrink, up to RECOPY_MAX_ROUNDS
 *   stop       (the records held, the device drained) exec_image_plan_over:
 *              the state now, each item that is still where begin put it
 *              (same dev, same len) keeps its place, and only the dirty ones
 *              and those allocated since are copied; places of buffers freed
 *              since become holes of the file (punched: no disk kept)
 *
 *   gpu.data  [ item @off ][ hole: freed ][ item ]...[ new since begin ]
 *
 *   precopy.layout  beside it from the pre-copy's convergence (PRECOPIED,
 *              a recopy that waits for STOP) to the stop: "PHOSLAY2", the
 *              item count, then each item's (offset, length, hash, clean),
 *              little-endian u64s, a clean item's hash that of its copy.
 *              Nobody reads it before PRECOPIED, so it is written then. A
 *              migration's target takes the items it holds
 *              already (same hash in its own snapshot) from there instead of
 *              the network, and hashes the rest while the function still
 *              runs (invoker/peer/migrate.c), so that the stop compares hashes
 *              instead of reading the whole copy again
 *
 * Pacing: while the function makes calls, a step may take at most half of
 * the dispatcher's time (PHOS_RECOPY_SHARE): after a step of t seconds, the
 * next waits t (1 - share) / share while records flow; when the function
 * makes no call for a whole wait, steps run back to back.
 *
 * A copy is taken with the device drained and no record running (the
 * dispatcher does it between records), so it is exactly the buffer as of the
 * records before it; a record after it that writes the buffer marks it dirty
 * before it runs. The dirty marks trust the same write sets as cow.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "fault.h"
#include "fdio.h"
#include "image.h"
#include "log.h"
#include "staging.h"

#define RECOPY_MAX_ROUNDS 8
/* One step copies dirty items up to this many bytes (at least one item) or
 * items, between two records, or one piece of that many bytes (whole 4 MiB
 * chunks) of an item bigger than that: the program waits for that much.
 * PHOS_RECOPY_STEP_BYTES (1 to 1 GiB) sets the bytes; tests take 1 (one
 * item a step) so that records run between the copies of a small program. */
#define RECOPY_STEP_BYTES (64ull << 20)
#define RECOPY_STEP_ITEMS 256
/* While the function makes calls, the steps take at most this share of the
 * dispatcher's time (each drains the device and holds the dispatcher for its
 * copy: back to back, between every two records, they starved a training
 * loop for the whole pre-copy, 6.3 s at 16 GiB on the H200); with the ring
 * idle they run back to back. */
#define RECOPY_SHARE 0.5

static uint64_t step_bytes(void)
{
	const char *env = getenv("PHOS_RECOPY_STEP_BYTES");
	char *end;
	unsigned long long v;

	if (!env || !*env)
		return RECOPY_STEP_BYTES;
	v = strtoull(env, &end, 0);
	return *end || v < 1 || v > (1ull << 30) ? RECOPY_STEP_BYTES : v;
}

/* The share of the dispatcher's time the steps may take while the function
 * makes calls: PHOS_RECOPY_SHARE (0.01 to 1), else RECOPY_SHARE. */
static double share(void)
{
	const char *env = getenv("PHOS_RECOPY_SHARE");
	char *end;
	double v;

	if (!env || !*env)
		return RECOPY_SHARE;
	v = strtod(env, &end);
	return *end || !(v >= 0.01 && v <= 1.0) ? RECOPY_SHARE : v;
}

static int by_dev(const void *a, const void *b)
{
	const struct stage_item *x = a, *y = b;

	return x->dev < y->dev ? -1 : x->dev > y->dev;
}

static int push(struct exec_recopy *rc, size_t *cap, uint64_t dev, uint64_t len)
{
	if (rc->n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		struct stage_item *it = realloc(rc->items, ncap * sizeof(*it));

		if (!it)
			return -ENOMEM;
		rc->items = it;
		*cap = ncap;
	}
	rc->items[rc->n++] = (struct stage_item){ .dev = dev, .len = len };
	return 0;
}

struct collect {
	struct exec_recopy *rc;
	size_t cap;
};

static int collect_buf(const struct phos_buf *b, void *ctx)
{
	struct collect *c = ctx;

	return b->is_extern ? 0 : push(c->rc, &c->cap, b->addr, b->size);
}

void exec_recopy_free(struct exec_recopy *rc)
{
	if (!rc)
		return;
	if (rc->fd >= 0)
		close(rc->fd);
	free(rc->items);
	free(rc->dirty);
	free(rc->part_hashes);
	free(rc);
}

void exec_recopy_write_layout(const struct exec_recopy *rc, const char *dir)
{
	char path[PHOS_CTL_PATH_MAX + 32], tmp[PHOS_CTL_PATH_MAX + 40];
	uint64_t *v = malloc((2 + 4 * rc->n) * sizeof(*v));
	int fd;

	if (!v)
		return;
	memcpy(v, "PHOSLAY2", 8);
	v[1] = rc->n;
	for (size_t i = 0; i < rc->n; i++) {
		v[2 + 4 * i] = rc->items[i].off;
		v[3 + 4 * i] = rc->items[i].len;
		v[4 + 4 * i] = rc->dirty[i] ? 0 : rc->items[i].hash;
		v[5 + 4 * i] = !rc->dirty[i];
	}
	snprintf(path, sizeof(path), "%s/precopy.layout", dir);
	snprintf(tmp, sizeof(tmp), "%s/precopy.layout.new", dir);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0) {
		int r = phos_write_all(fd, v, (2 + 4 * rc->n) * sizeof(*v));

		close(fd);
		if (r < 0 || rename(tmp, path) < 0)
			unlink(tmp);
	}
	free(v);
}

int exec_recopy_begin(struct executor *ex, const char *dir, struct exec_recopy **ret, char *err, size_t errlen)
{
	struct exec_recopy *rc = calloc(1, sizeof(*rc));
	struct collect c = { .rc = rc };
	int r;

	if (!rc)
		return -ENOMEM;
	rc->fd = -1;
	r = phos_bufmap_foreach(ex->bufs, collect_buf, &c);
	for (uint32_t id = 0; r == 0 && id < ex->vars.cap; id++) {
		const struct exec_var *v = ex->vars.slot[id];

		if (v && !v->error && v->size)
			r = push(rc, &c.cap, v->addr, v->size);
	}
	if (r == 0 && !(rc->dirty = calloc(rc->n + 1, sizeof(*rc->dirty))))
		r = -ENOMEM;
	if (r < 0) {
		phos_errf(err, errlen, "collecting the buffers: %s", strerror(-r));
		goto fail;
	}
	if (rc->n)   /* a program without buffers has none (and no array to sort) */
		qsort(rc->items, rc->n, sizeof(*rc->items), by_dev);
	for (size_t i = 0; i < rc->n; i++) {
		rc->items[i].off = rc->end;
		rc->end = phos_image_next_offset(rc->end, rc->items[i].len);
		rc->dirty[i] = true;
		rc->dirty_bytes += rc->items[i].len;
	}
	rc->prev_dirty = rc->dirty_bytes;
	rc->fd = r = exec_image_open_data(dir, true, err, errlen);
	if (r < 0)
		goto fail;
	r = exec_image_reserve(rc->fd, 0, rc->end, err, errlen);
	if (r < 0)
		goto fail;
	rc->round = 1;
	rc->step_bytes = step_bytes();
	rc->share = share();
	*ret = rc;
	return 0;

fail:
	exec_recopy_free(rc);
	return r;
}

/* The items overlapping [addr, addr + len), from the first whose end is past addr. */
static void mark_range(struct exec_recopy *rc, uint64_t addr, uint64_t len)
{
	size_t lo = 0, hi = rc->n;

	while (lo < hi) {   /* the first item with dev + len > addr */
		size_t mid = lo + (hi - lo) / 2;

		if (rc->items[mid].dev + rc->items[mid].len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < rc->n && rc->items[i].dev < addr + len; i++) {
		if (rc->part_done && i == rc->part_item)
			rc->part_done = 0;   /* its pieces so far are stale: again from its start */
		if (!rc->dirty[i]) {
			rc->dirty[i] = true;
			rc->dirty_bytes += rc->items[i].len;
		}
	}
}

void exec_recopy_mark_all(struct exec_recopy *rc)
{
	mark_range(rc, 0, UINT64_MAX);
}

void exec_recopy_mark(struct exec_recopy *rc, const struct spec_set *s)
{
	if (s->opaque || s->overflow) {
		exec_recopy_mark_all(rc);
		return;
	}
	for (uint32_t k = 0; k < s->n; k++)
		if (s->r[k].access & SPEC_WRITE)
			mark_range(rc, s->r[k].addr, s->r[k].len);
}

/* Copies items[idx[k]] for k < n into their places in fd, their hashes
 * back into items. */
static int dump_some(struct executor *ex, int fd, struct stage_item *items, const size_t *idx, size_t n,
		     char *err, size_t errlen)
{
	struct stage_item *batch;
	int r;

	if (n == 0)
		return 0;
	batch = malloc(n * sizeof(*batch));
	if (!batch)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++)
		batch[k] = items[idx[k]];
	r = stage_dump(ex, fd, batch, n, err, errlen);
	for (size_t k = 0; r == 0 && k < n; k++)
		items[idx[k]].hash = batch[k].hash;
	free(batch);
	return r;
}

/* Every record taken so far has finished, so that a copy holds their
 * results. 0 or -EIO with err. */
static int drain(struct executor *ex, char *err, size_t errlen)
{
	int r = exec_drain_all(ex);

	if (r < 0) {
		phos_errf(err, errlen, "the device failed while draining (cuda error %d)", -r);
		return -EIO;
	}
	return 0;
}

/* The pieces of an item bigger than a step: whole chunks, so that their
 * chunk hashes make the item's. */
static uint64_t piece_bytes(const struct exec_recopy *rc)
{
	uint64_t chunk = PHOS_IMAGE_HASH_CHUNK, p = rc->step_bytes / chunk * chunk;

	return p ? p : chunk;
}

/* One piece of the dirty item rc->next (bigger than a piece); the item is
 * clean and the scan moves on after its last. 0 or -errno with err. */
static int copy_piece(struct executor *ex, struct exec_recopy *rc, char *err, size_t errlen)
{
	size_t i = rc->next;
	const struct stage_item *it = &rc->items[i];
	uint64_t chunk = PHOS_IMAGE_HASH_CHUNK, nch = (it->len + chunk - 1) / chunk;
	struct stage_item piece;
	int r;

	if (!rc->part_done || rc->part_item != i) {
		uint64_t *h = realloc(rc->part_hashes, nch * sizeof(*h));

		if (!h)
			return -ENOMEM;
		rc->part_hashes = h;
		rc->part_item = i;
		rc->part_done = 0;
	}
	piece = (struct stage_item){ .dev = it->dev + rc->part_done, .off = it->off + rc->part_done,
				     .len = it->len - rc->part_done < piece_bytes(rc) ? it->len - rc->part_done
										      : piece_bytes(rc),
				     .chunk_hashes = rc->part_hashes + rc->part_done / chunk };
	r = drain(ex, err, errlen);
	if (r == 0)
		r = stage_dump(ex, rc->fd, &piece, 1, err, errlen);
	if (r < 0)
		return r;
	rc->part_done += piece.len;
	rc->precopy_bytes += piece.len;
	if (rc->part_done < it->len)
		return 0;
	rc->items[i].hash = phos_image_combine(rc->part_hashes, nch);
	rc->dirty[i] = false;
	rc->dirty_bytes -= it->len;
	rc->part_done = 0;
	rc->next++;
	return 0;
}

int exec_recopy_step(struct executor *ex, struct exec_recopy *rc, bool *ret_stop, char *err, size_t errlen)
{
	size_t idx[RECOPY_STEP_ITEMS], n = 0;
	uint64_t bytes = 0;
	int r;

	*ret_stop = false;
	/* a big item, in pieces, one a step: the program waits for one piece */
	while (rc->next < rc->n && !rc->dirty[rc->next])
		rc->next++;
	if (rc->next < rc->n && rc->items[rc->next].len > piece_bytes(rc)) {
		r = copy_piece(ex, rc, err, errlen);
		if (r < 0 || rc->next < rc->n)
			return r;
	}
	/* then small ones, a batch up to a step's bytes, up to the next big one */
	while (rc->next < rc->n && n < RECOPY_STEP_ITEMS && (n == 0 || bytes < rc->step_bytes) &&
	       !(rc->dirty[rc->next] && rc->items[rc->next].len > piece_bytes(rc))) {
		if (rc->dirty[rc->next]) {
			idx[n++] = rc->next;
			bytes += rc->items[rc->next].len;
		}
		rc->next++;
	}
	if (n) {
		r = drain(ex, err, errlen);
		if (r == 0)
			r = dump_some(ex, rc->fd, rc->items, idx, n, err, errlen);
		if (r < 0)
			return r;
		for (size_t k = 0; k < n; k++)
			rc->dirty[idx[k]] = false;
		rc->dirty_bytes -= bytes;
		rc->precopy_bytes += bytes;
	}
	if (rc->next < rc->n)
		return 0;
	/* A round ended: go on while what is dirty again shrinks. */
	phos_debug("recopy: round %u ended, %llu bytes dirty (%llu before)", rc->round,
		   (unsigned long long)rc->dirty_bytes, (unsigned long long)rc->prev_dirty);
	if (rc->dirty_bytes == 0 || rc->dirty_bytes >= rc->prev_dirty || rc->round >= RECOPY_MAX_ROUNDS) {
		*ret_stop = true;
		return 0;
	}
	rc->prev_dirty = rc->dirty_bytes;
	rc->round++;
	rc->next = 0;
	return 0;
}

void exec_recopy_rearm(struct exec_recopy *rc)
{
	if (rc->dirty_bytes)   /* (a pass with nothing to copy is no round) */
		rc->round++;
	rc->prev_dirty = rc->dirty_bytes;
	rc->next = 0;
}

int exec_recopy_stop(struct executor *ex, struct exec_recopy *rc, const char *dir, uint64_t *ret_bytes,
		     uint64_t *ret_stop_bytes, char *err, size_t errlen)
{
	struct exec_dump *d = NULL;
	size_t *idx = NULL, n = 0;
	bool *kept = calloc(rc->n + 1, sizeof(*kept));
	uint64_t stop_bytes = 0;
	int r;

	if (!kept)
		return -ENOMEM;
	{   /* not a file of the checkpoint */
		char path[PHOS_CTL_PATH_MAX + 32];

		snprintf(path, sizeof(path), "%s/precopy.layout", dir);
		unlink(path);
	}
	r = exec_image_plan_over(ex, dir, rc->items, rc->n, rc->end, &d, err, errlen);
	if (r == 0 && !(idx = malloc((d->n ? d->n : 1) * sizeof(*idx))))
		r = -ENOMEM;
	if (r < 0)
		goto out;
	/* Items still where begin put them and clean: their hashes; the others copied now. */
	for (size_t i = 0; i < d->n; i++) {
		struct stage_item *it = &d->items[i];
		const struct stage_item *p = rc->n ? bsearch(it, rc->items, rc->n, sizeof(*p), by_dev) : NULL;

		if (p && p->len == it->len) {
			size_t k = (size_t)(p - rc->items);

			kept[k] = true;
			if (!rc->dirty[k]) {
				it->hash = p->hash;
				continue;
			}
		}
		idx[n++] = i;
		stop_bytes += it->len;
	}
	r = dump_some(ex, d->fd, d->items, idx, n, err, errlen);
	if (r < 0)
		goto out;
	/* The places of buffers freed since begin hold nothing any more. */
	for (size_t k = 0; k < rc->n; k++)
		if (!kept[k] && fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)rc->items[k].off,
					  (off_t)phos_image_next_offset(0, rc->items[k].len)) < 0)
			phos_debug("recopy: cannot punch the hole of a freed buffer: %s", strerror(errno));
	r = exec_image_finish(d, ret_bytes, err, errlen);
	if (r == 0)
		*ret_stop_bytes = stop_bytes;
out:
	if (r < 0 && !*err)
		phos_errf(err, errlen, "%s", strerror(-r));
	exec_image_dump_free(d);
	free(idx);
	free(kept);
	return r;
}
