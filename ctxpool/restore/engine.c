/* SPDX-License-Identifier: MIT */
/*
 * The restore engine (see restore/engine.h).
 *
 * One engine thread drives io_uring and the copy engine; worker threads hash
 * the chunks that reads brought in (cold source). Per item the engine counts
 * chunks issued, hashed and landed:
 *
 *   issued == n && hashed == n   → checksum compared, flag set on its device's
 *                                  restore stream (behind its copies)
 *   flagged && landed == n       → resident: gates skip it from now on
 *
 * The dispatcher (loader_gate) only reads item states and pushes promotions
 * under the lock; the engine owns everything else.
 */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "image.h"
#include "log.h"
#include "staging.h"
#include "uring_io.h"

#define CHUNK ((uint64_t)PHOS_IMAGE_HASH_CHUNK)
#define MAX_WORKERS 8
#define IDLE_SLEEP_US 20

enum item_state { ITEM_QUEUED, ITEM_LOADING, ITEM_RESIDENT };

struct litem {
	struct loader_item it;
	uint32_t pos;                /* place in the background order */
	uint64_t nchunks, issued, landed;
	atomic_uint_fast64_t hashed;
	uint64_t *chunk_hash;
	atomic_bool flagged;         /* its flag write is queued */
	int dev;                     /* the executor device its buffer is on */
	bool promoted;
	_Atomic int state;
	atomic_bool touched;
};

enum slot_state { SLOT_FREE, SLOT_IO, SLOT_COPY };

struct lslot {
	uint8_t *buf;                /* pinned staging (cold), NULL (hot) */
	void *event;
	/* the chunk goes in on its device's stream (loader.dstream), with that
	 * device's event: dev_event[0] is event, evdev the device of the last copy */
	void *dev_event[EXEC_MAX_DEVICES];
	int evdev;
	enum slot_state state;
	uint32_t item;
	uint64_t chunk, len;
	atomic_bool hashed;
};

struct loader {
	struct executor *ex;
	const struct phos_device_ops *d;
	struct loader_source src;
	struct litem *items;
	uint32_t *by_addr;           /* item indices sorted by device address */
	size_t n;
	/* device address of n readiness words on each device: item i's flag is
	 * word i on its own device, written on that device's stream behind its
	 * copies (the others' word i stays unused) */
	uint64_t flags[EXEC_MAX_DEVICES];
	void *stream;
	/* the devices, fixed at the start (the dispatcher moves ex->dev between
	 * records): home, the executor's device 0, with the restore stream
	 * (dstream[0]); over several devices each other one copies its own
	 * buffers on its stream (dstream[d]), so that every GPU's copy engine
	 * pulls from host memory at once */
	struct phos_device *home;
	struct phos_device *dev[EXEC_MAX_DEVICES];
	void *dstream[EXEC_MAX_DEVICES];
	int ndevs;
	size_t dcursor[EXEC_MAX_DEVICES];   /* pick: each device's background order */
	int rr;                             /* ... and the device whose turn is next */

	struct lslot slot[STAGE_SLOTS_MAX];
	unsigned nslots;
	struct phos_uio *uio;

	pthread_t engine;
	bool engine_started;
	pthread_t worker[MAX_WORKERS];
	unsigned nworkers;

	pthread_mutex_t lock;        /* urgent, touched, hash queue, done */
	pthread_cond_t work, done_cond;
	uint32_t *urgent;
	size_t nurgent;
	uint32_t *hashq;             /* slots waiting for a worker */
	size_t hq_head, hq_n;
	uint32_t *touched;
	size_t ntouched;

	atomic_bool stop;
	atomic_size_t placed;        /* items [0, placed) have their buffers mapped */
	atomic_size_t resident;
	int failed;                  /* negated errno, under lock */
	char err[512];

	double t0;
	double throttle;             /* bytes per second, 0: none */
	uint64_t bytes_issued;
	uint64_t bytes_zeroed;       /* of those, set on the device (hot zero runs) */
};

static uint64_t chunk_len(const struct litem *it, uint64_t c)
{
	uint64_t left = it->it.len - c * CHUNK;

	return left < CHUNK ? left : CHUNK;
}

static void trace_line(struct loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace_line(struct loader *l, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!l->ex->trace)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		fputs(line, l->ex->trace);  /* one call: lines of two threads never mix */
}

/* --- hashing workers (cold source) --- */

static void *worker_main(void *arg)
{
	struct loader *l = arg;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		struct lslot *sl;
		struct litem *it;

		while (!atomic_load(&l->stop) && l->hq_n == 0)
			pthread_cond_wait(&l->work, &l->lock);
		if (l->hq_n == 0)
			break;
		sl = &l->slot[l->hashq[l->hq_head]];
		l->hq_head = (l->hq_head + 1) % l->nslots;
		l->hq_n--;
		pthread_mutex_unlock(&l->lock);

		it = &l->items[sl->item];
		it->chunk_hash[sl->chunk] = phos_image_chunk_hash(sl->buf, sl->len);
		atomic_fetch_add(&it->hashed, 1);
		atomic_store(&sl->hashed, true);

		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

static void hash_push(struct loader *l, struct lslot *sl)
{
	atomic_store(&sl->hashed, false);
	pthread_mutex_lock(&l->lock);
	l->hashq[(l->hq_head + l->hq_n++) % l->nslots] = (uint32_t)(sl - l->slot);
	pthread_cond_signal(&l->work);
	pthread_mutex_unlock(&l->lock);
}

/* --- the engine --- */

static void fail(struct loader *l, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(struct loader *l, int r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (l->src.background) {
		/* The function's gated work waits for flags that will never be set:
		 * ending the process is what keeps it from running on wrong data. */
		phos_err("on-demand restore failed: %s; ending this instance", msg);
		exec_control_error(l->ex, "on-demand restore failed: %s", msg);
		if (l->ex->trace)
			fflush(l->ex->trace);
		_exit(70);
	}
	pthread_mutex_lock(&l->lock);
	if (!l->failed) {
		l->failed = r;
		snprintf(l->err, sizeof(l->err), "%s", msg);
	}
	pthread_cond_broadcast(&l->done_cond);
	pthread_mutex_unlock(&l->lock);
}

/* The first promoted item of device d with chunks left to issue and its
 * buffer mapped, dropping those issued whole; under l->lock. */
static bool urgent_of(struct loader *l, int d, size_t placed, uint32_t *ret_item)
{
	size_t k = 0;

	while (k < l->nurgent) {
		const struct litem *it = &l->items[l->urgent[k]];

		if (it->issued >= it->nchunks) {
			memmove(l->urgent + k, l->urgent + k + 1, (--l->nurgent - k) * sizeof(*l->urgent));
			continue;
		}
		if (it->dev == d && l->urgent[k] < placed) {
			*ret_item = l->urgent[k];
			return true;
		}
		k++;
	}
	return false;
}

/* The next chunk to move: each device's promoted items, else its background
 * order, taking the devices in turn, so that every GPU's copy engine has
 * chunks in flight (in plain order, one device's buffers would all go first;
 * promoted first across devices, a request's first kernel on one device
 * would leave the others' copy engines idle while its buffers come in). */
static bool pick(struct loader *l, uint32_t *ret_item, uint64_t *ret_chunk)
{
	size_t placed = atomic_load(&l->placed);

	for (int k = 0; k < l->ndevs; k++) {
		int d = (l->rr + k) % l->ndevs;
		size_t *c = &l->dcursor[d];
		uint32_t i;
		bool urgent;

		pthread_mutex_lock(&l->lock);
		urgent = urgent_of(l, d, placed, &i);
		pthread_mutex_unlock(&l->lock);
		if (urgent) {
			*ret_item = i;
			*ret_chunk = l->items[i].issued++;
			l->rr = d + 1;
			return true;
		}
		while (*c < placed && (l->items[*c].issued >= l->items[*c].nchunks || l->items[*c].dev != d))
			(*c)++;
		if (*c < placed) {
			*ret_item = (uint32_t)*c;
			*ret_chunk = l->items[*c].issued++;
			l->rr = d + 1;
			return true;
		}
	}
	return false;
}

static bool throttled(struct loader *l)
{
	return l->throttle > 0 && (double)l->bytes_issued > (phos_now() - l->t0) * l->throttle;
}

/* Whether the len bytes at gpu.data offset off lie in one of the hot
 * mapping's zero runs. */
static bool zero_run_holds(const struct loader *l, uint64_t off, uint64_t len)
{
	size_t lo = 0, hi = l->src.nzeros;

	while (lo < hi) {   /* the first run that ends after off */
		size_t mid = (lo + hi) / 2;

		if (l->src.zeros[mid].off + l->src.zeros[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < l->src.nzeros && l->src.zeros[lo].off <= off &&
	       off + len <= l->src.zeros[lo].off + l->src.zeros[lo].len;
}

/* Queues the chunk in sl onto its device: a copy from host, or (host NULL) a
 * memset of zeros; then its event. */
static int copy_chunk(struct loader *l, struct lslot *sl, const void *host)
{
	uint64_t dev = l->items[sl->item].it.dev + sl->chunk * CHUNK;
	int d = l->items[sl->item].dev;
	int r = host ? l->d->memcpy_h2d_async(l->dev[d], dev, host, sl->len, l->dstream[d])
		     : l->d->memset(l->dev[d], dev, 0, sl->len, l->dstream[d]);

	sl->evdev = d;
	if (r == 0)
		r = l->d->event_record(l->dev[d], sl->dev_event[d], l->dstream[d]);
	if (r < 0) {
		fail(l, -EIO, "%s to %#llx failed (cuda error %d)", host ? "host-to-device copy" : "zero fill",
		     (unsigned long long)dev, -r);
		return -EIO;
	}
	sl->state = SLOT_COPY;
	return 0;
}

/* Starts chunk (item, chunk) in the free slot sl. */
static int issue(struct loader *l, struct lslot *sl, uint32_t item, uint64_t chunk)
{
	struct litem *it = &l->items[item];
	uint64_t off = it->it.off + chunk * CHUNK;
	int r;

	sl->item = item;
	sl->chunk = chunk;
	sl->len = chunk_len(it, chunk);
	l->bytes_issued += sl->len;
	if (atomic_load(&it->state) == ITEM_QUEUED)
		atomic_store(&it->state, ITEM_LOADING);
	if (l->src.map) {
		bool zero = zero_run_holds(l, off, sl->len);

		l->bytes_zeroed += zero ? sl->len : 0;
		return copy_chunk(l, sl, zero ? NULL : l->src.map + off);
	}
	r = phos_uio_read(l->uio, l->src.fd, sl->buf, (sl->len + 4095) & ~4095ull, off, sl,
			  l->src.direct ? 0 : PHOS_UIO_ASYNC);
	if (r < 0) {
		fail(l, r, "reading gpu.data at %llu: %s", (unsigned long long)off, strerror(-r));
		return r;
	}
	sl->state = SLOT_IO;
	return 0;
}

/* All of an item's chunks are queued (and hashed): compare its checksum and set
 * its flag behind its copies. */
static int flag_item(struct loader *l, uint32_t i)
{
	struct litem *it = &l->items[i];
	int r;

	if (!l->src.map) {
		uint64_t h = phos_image_combine(it->chunk_hash, it->nchunks);

		if (h != it->it.hash) {
			fail(l, -EBADMSG, "checksum mismatch in gpu.data at offset %llu (%llu bytes for buffer %llu at %#llx)",
			     (unsigned long long)it->it.off, (unsigned long long)it->it.len,
			     (unsigned long long)it->it.id, (unsigned long long)it->it.dev);
			return -EBADMSG;
		}
	}
	r = l->d->flag_write(l->dev[it->dev], l->dstream[it->dev], l->flags[it->dev] + 4ull * i, 1);
	if (r < 0) {
		fail(l, -EIO, "setting the readiness flag of buffer %llu failed (cuda error %d)",
		     (unsigned long long)it->it.id, -r);
		return -EIO;
	}
	atomic_store(&it->flagged, true);
	return 0;
}

static void item_progress(struct loader *l, uint32_t i)
{
	struct litem *it = &l->items[i];
	size_t k;

	if (!atomic_load(&it->flagged) && it->issued == it->nchunks &&
	    (l->src.map || atomic_load(&it->hashed) == it->nchunks) && flag_item(l, i) < 0)
		return;
	if (!atomic_load(&it->flagged) || it->landed < it->nchunks || atomic_load(&it->state) == ITEM_RESIDENT)
		return;
	atomic_store(&it->state, ITEM_RESIDENT);
	k = atomic_fetch_add(&l->resident, 1);
	trace_line(l, "{\"op\":\"restore_resident\",\"buf\":%llu,\"position\":%u,\"rank\":%zu,\"promoted\":%s,\"ms\":%.3f}\n",
		   (unsigned long long)it->it.id, it->pos, k, it->promoted ? "true" : "false",
		   (phos_now() - l->t0) * 1e3);
	if (k + 1 == l->n) {
		phos_info("restore engine: %zu buffers resident after %.1f ms, %.1f MiB in, %.1f MiB of it zeros set on "
			  "the device", l->n, (phos_now() - l->t0) * 1e3, (double)l->bytes_issued / (1 << 20),
			  (double)l->bytes_zeroed / (1 << 20));
		pthread_mutex_lock(&l->lock);
		pthread_cond_broadcast(&l->done_cond);
		pthread_mutex_unlock(&l->lock);
	}
}

/* One pass over the pipeline; true when something moved. */
static bool engine_step(struct loader *l)
{
	bool progress = false;
	void *tag;
	int r, res;

	for (unsigned s = 0; s < l->nslots && !throttled(l); s++) {
		uint32_t item;
		uint64_t chunk;

		if (l->slot[s].state != SLOT_FREE)
			continue;
		if (!pick(l, &item, &chunk))
			break;
		if (issue(l, &l->slot[s], item, chunk) < 0)
			return false;
		item_progress(l, item);   /* hot: its last chunk may be queued now */
		progress = true;
	}
	while (l->uio && (r = phos_uio_complete(l->uio, false, &tag, &res)) == 1) {
		struct lslot *sl = tag;

		if (res < 0) {
			fail(l, res, "reading gpu.data: %s", strerror(-res));
			return false;
		}
		hash_push(l, sl);
		if (copy_chunk(l, sl, sl->buf) < 0)
			return false;
		progress = true;
	}
	for (unsigned s = 0; s < l->nslots; s++) {
		struct lslot *sl = &l->slot[s];
		struct litem *it;

		if (sl->state != SLOT_COPY || (!l->src.map && !atomic_load(&sl->hashed)))
			continue;
		r = l->d->event_query(l->dev[sl->evdev], sl->dev_event[sl->evdev]);
		if (r == -PHOS_CUDA_NOT_READY)
			continue;
		if (r < 0) {
			fail(l, -EIO, "host-to-device copy failed (cuda error %d)", -r);
			return false;
		}
		sl->state = SLOT_FREE;
		it = &l->items[sl->item];
		it->landed++;
		item_progress(l, sl->item);
		progress = true;
	}
	return progress;
}

static void *engine_main(void *arg)
{
	struct loader *l = arg;

	for (uint32_t i = 0; i < l->n; i++)   /* empty items have no chunk to wait for */
		if (!l->items[i].nchunks)
			item_progress(l, i);
	while (!atomic_load(&l->stop) && atomic_load(&l->resident) < l->n) {
		pthread_mutex_lock(&l->lock);
		bool failed = l->failed != 0;
		pthread_mutex_unlock(&l->lock);

		if (failed)
			break;
		if (!engine_step(l))
			usleep(IDLE_SLEEP_US);
	}
	return NULL;
}

/* --- setup --- */

static int by_addr_cmp(const void *a, const void *b, void *ctx)
{
	const struct litem *items = ctx;
	uint64_t x = items[*(const uint32_t *)a].it.dev, y = items[*(const uint32_t *)b].it.dev;

	return x < y ? -1 : x > y;
}

static int setup(struct loader *l, const struct loader_item *items, size_t n)
{
	const struct phos_device_ops *d = l->d;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	const char *env = getenv("PHOS_STAGE_SLOTS");
	uint64_t chunks = 0;
	int r;

	l->nslots = STAGE_SLOTS;
	if (env && atoi(env) >= 4 && atoi(env) <= STAGE_SLOTS_MAX)
		l->nslots = (unsigned)atoi(env);
	env = getenv("PHOS_RESTORE_THROTTLE_MIBPS");
	if (env && atof(env) > 0)
		l->throttle = atof(env) * (1 << 20);
	l->items = calloc(n ? n : 1, sizeof(*l->items));
	l->by_addr = calloc(n ? n : 1, sizeof(*l->by_addr));
	l->urgent = calloc(n ? n : 1, sizeof(*l->urgent));
	l->touched = calloc(n ? n : 1, sizeof(*l->touched));
	if (!l->items || !l->by_addr || !l->urgent || !l->touched)
		return -ENOMEM;
	l->n = n;
	for (size_t i = 0; i < n; i++) {
		struct litem *it = &l->items[i];

		it->it = items[i];
		it->pos = (uint32_t)i;
		it->nchunks = (items[i].len + CHUNK - 1) / CHUNK;
		chunks += it->nchunks;
		it->dev = items[i].device;
		if (it->dev < 0 || it->dev >= l->ndevs)
			return -EINVAL;
		if (!l->src.map) {
			it->chunk_hash = calloc(it->nchunks ? it->nchunks : 1, sizeof(uint64_t));
			if (!it->chunk_hash)
				return -ENOMEM;
		}
		l->by_addr[i] = (uint32_t)i;
	}
	/* no more slots than chunks to move: each cold slot is 4 MiB pinned
	 * (cuMemHostRegister, milliseconds each), which a restore of one small
	 * buffer beside shared ones paid for all 16 */
	if (chunks < l->nslots)
		l->nslots = chunks ? (unsigned)chunks : 1;
	l->hashq = calloc(l->nslots, sizeof(*l->hashq));
	if (!l->hashq)
		return -ENOMEM;
	qsort_r(l->by_addr, n, sizeof(*l->by_addr), by_addr_cmp, l->items);
	for (int k = 0; k < l->ndevs && n; k++) {
		if (d->flags_alloc(l->dev[k], (uint32_t)n, &l->flags[k]) < 0)
			return -EIO;
	}
	if (d->stream_create(l->home, 1 /* non-blocking */, 0, &l->stream) < 0)
		return -EIO;
	l->dstream[0] = l->stream;
	for (int k = 1; k < l->ndevs; k++) {
		if (d->stream_create(l->dev[k], 1, 0, &l->dstream[k]) < 0)
			return -EIO;
	}
	for (unsigned i = 0; i < l->nslots; i++) {
		if (d->event_create(l->home, 2 /* disable timing */, &l->slot[i].event) < 0)
			return -EIO;
		l->slot[i].dev_event[0] = l->slot[i].event;
		for (int k = 1; k < l->ndevs; k++) {
			if (d->event_create(l->dev[k], 2, &l->slot[i].dev_event[k]) < 0)
				return -EIO;
		}
		if (l->src.map)
			continue;
		if (posix_memalign((void **)&l->slot[i].buf, 4096, CHUNK))
			return -ENOMEM;
		/* Unpinned staging still works, only slower. */
		if (d->host_register(l->home, l->slot[i].buf, CHUNK) < 0)
			phos_warn("staging slot %u could not be pinned", i);
	}
	if (l->src.map)
		return 0;
	r = phos_uio_new(l->nslots, &l->uio);
	if (r < 0)
		return r;
	/* Leave a core to the engine. */
	l->nworkers = cpus > 2 ? (unsigned)(cpus - 1) : 1;
	if (l->nworkers > MAX_WORKERS)
		l->nworkers = MAX_WORKERS;
	for (unsigned i = 0; i < l->nworkers; i++) {
		if (pthread_create(&l->worker[i], NULL, worker_main, l) != 0) {
			l->nworkers = i;
			return -EAGAIN;
		}
	}
	return 0;
}

int loader_start(struct executor *ex, const struct loader_item *items, size_t n, const struct loader_source *src,
		 struct loader **ret_loader, char *err, size_t errlen)
{
	struct loader *l = calloc(1, sizeof(*l));
	int r;

	if (!l) {
		if (src->fd >= 0)
			close(src->fd);
		phos_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	l->ex = ex;
	l->d = ex->dev_ops;
	l->home = ex->devs[0];
	l->ndevs = ex->ndevs;
	for (int k = 0; k < ex->ndevs; k++)
		l->dev[k] = ex->devs[k];
	l->src = *src;
	atomic_store(&l->placed, src->unplaced ? 0 : n);
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->work, NULL);
	pthread_cond_init(&l->done_cond, NULL);
	r = setup(l, items, n);
	if (r < 0) {
		phos_errf(err, errlen, "cannot set up the restore engine: %s", strerror(-r));
		loader_free(l);
		return r;
	}
	l->t0 = phos_now();
	trace_line(l, "{\"op\":\"restore_start\",\"items\":%zu,\"source\":\"%s\",\"t_ms\":%.3f}\n", n,
		   src->map ? "hot" : src->direct ? "direct" : "buffered", l->t0 * 1e3);
	if (pthread_create(&l->engine, NULL, engine_main, l) != 0) {
		phos_errf(err, errlen, "cannot start the restore engine");
		loader_free(l);
		return -EAGAIN;
	}
	l->engine_started = true;
	*ret_loader = l;
	return 0;
}

void loader_placed(struct loader *l, size_t k)
{
	if (l && k <= l->n && k > atomic_load(&l->placed))
		atomic_store(&l->placed, k);
}

bool loader_done(const struct loader *l)
{
	return !l || atomic_load(&l->resident) == l->n;
}

int loader_wait(struct loader *l, char *err, size_t errlen)
{
	int r;

	pthread_mutex_lock(&l->lock);
	while (!l->failed && atomic_load(&l->resident) < l->n)
		pthread_cond_wait(&l->done_cond, &l->lock);
	r = l->failed;
	if (r)
		phos_errf(err, errlen, "%s", l->err);
	pthread_mutex_unlock(&l->lock);
	return r;
}

/* Calls fn for every item overlapping [addr, addr+len). */
static int for_overlaps(struct loader *l, uint64_t addr, uint64_t len, int (*fn)(struct loader *, uint32_t, void *),
			void *ctx)
{
	size_t lo = 0, hi = l->n;

	/* First item whose end is past addr (items do not overlap). */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct litem *it = &l->items[l->by_addr[mid]];

		if (it->it.dev + it->it.len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < l->n; lo++) {
		uint32_t i = l->by_addr[lo];

		if (l->items[i].it.dev >= addr + len)
			break;
		TRY(fn(l, i, ctx));
	}
	return 0;
}

static void touch(struct loader *l, uint32_t i)
{
	if (atomic_load(&l->items[i].touched) || atomic_exchange(&l->items[i].touched, true))
		return;
	pthread_mutex_lock(&l->lock);
	l->touched[l->ntouched++] = i;
	pthread_mutex_unlock(&l->lock);
}

static void promote(struct loader *l, uint32_t i)
{
	struct litem *it = &l->items[i];
	bool first = false;

	pthread_mutex_lock(&l->lock);
	if (!it->promoted) {
		it->promoted = first = true;
		l->urgent[l->nurgent++] = i;
	}
	pthread_mutex_unlock(&l->lock);
	if (first)
		trace_line(l, "{\"seq\":%llu,\"op\":\"restore_promote\",\"buf\":%llu,\"addr\":%llu,\"bytes\":%llu,"
			   "\"position\":%u,\"of\":%zu,\"ms\":%.3f}\n",
			   (unsigned long long)l->ex->seq, (unsigned long long)it->it.id,
			   (unsigned long long)it->it.dev, (unsigned long long)it->it.len, it->pos, l->n,
			   (phos_now() - l->t0) * 1e3);
}

/* Waits on the CPU until item i is resident, or (queued) until its flag write
 * is queued on the restore stream. */
static int cpu_wait(struct loader *l, uint32_t i, bool queued)
{
	while (atomic_load(&l->items[i].state) != ITEM_RESIDENT && !(queued && atomic_load(&l->items[i].flagged))) {
		pthread_mutex_lock(&l->lock);
		int failed = l->failed;
		pthread_mutex_unlock(&l->lock);

		if (failed)
			return -PHOS_CUDA_UNKNOWN;
		usleep(IDLE_SLEEP_US);
	}
	return 0;
}

static int gate_one(struct loader *l, uint32_t i, int sdev, void *stream, bool urgent)
{
	int r;

	if (urgent)
		touch(l, i);
	if (atomic_load(&l->items[i].state) == ITEM_RESIDENT)
		return 0;
	if (urgent)
		promote(l, i);
	/* A stream never waits for work that is not queued yet: with CUDA's lazy
	 * module loading, the first launch of a kernel (cuBLAS picks new ones by
	 * shape) may synchronize the context, and would then wait for that stream
	 * while the engine waits for the context (a deadlock seen on the H100). So
	 * the dispatcher waits until the item's copies and flag write are queued
	 * (read and verified), and the stream waits for them to land. */
	TRY(cpu_wait(l, i, true));
	if (atomic_load(&l->items[i].state) == ITEM_RESIDENT)
		return 0;
	/* A stream of another device (a kernel reaching a peer's buffer) is not
	 * made to wait for a word in that peer's memory: the call is held back on
	 * the CPU until the buffer is resident. */
	if (sdev != l->items[i].dev)
		return cpu_wait(l, i, false);
	r = l->d->flag_wait(l->dev[sdev], stream, l->flags[sdev] + 4ull * i, 1);
	if (r < 0) {
		/* No stream memory operations here: hold the call back on the CPU. */
		phos_debug("flag wait failed (cuda error %d); waiting on the CPU", -r);
		return cpu_wait(l, i, false);
	}
	return 0;
}

struct gate_ctx {
	int sdev;
	void *stream;
};

static int gate_cb(struct loader *l, uint32_t i, void *ctx)
{
	const struct gate_ctx *g = ctx;

	return gate_one(l, i, g->sdev, g->stream, true);
}

int loader_gate(struct loader *l, int sdev, void *stream, uint64_t addr, uint64_t len)
{
	struct gate_ctx g = { sdev, stream };

	if (!len)
		return 0;
	if (sdev < 0 || sdev >= l->ndevs)
		return -PHOS_CUDA_INVALID_DEVICE;
	return for_overlaps(l, addr, len, gate_cb, &g);
}

int loader_gate_all(struct loader *l, int sdev, void *stream)
{
	if (sdev < 0 || sdev >= l->ndevs)
		return -PHOS_CUDA_INVALID_DEVICE;
	for (uint32_t i = 0; i < l->n; i++)
		if (atomic_load(&l->items[i].state) != ITEM_RESIDENT)
			TRY(gate_one(l, i, sdev, stream, false));   /* in background order */
	return 0;
}

static int settle_cb(struct loader *l, uint32_t i, void *ctx)
{
	(void)ctx;
	if (atomic_load(&l->items[i].state) == ITEM_RESIDENT)
		return 0;
	promote(l, i);
	return cpu_wait(l, i, false);
}

int loader_settle(struct loader *l, uint64_t addr, uint64_t len)
{
	return for_overlaps(l, addr, len ? len : 1, settle_cb, NULL);
}

size_t loader_touched(struct loader *l, uint64_t *ret_ids, size_t max)
{
	size_t n;

	pthread_mutex_lock(&l->lock);
	n = l->ntouched < max ? l->ntouched : max;
	for (size_t k = 0; k < n; k++)
		ret_ids[k] = l->items[l->touched[k]].it.id;
	pthread_mutex_unlock(&l->lock);
	return n;
}

void loader_free(struct loader *l)
{
	const struct phos_device_ops *d;

	if (!l)
		return;
	d = l->d;
	atomic_store(&l->stop, true);
	pthread_mutex_lock(&l->lock);
	pthread_cond_broadcast(&l->work);
	pthread_mutex_unlock(&l->lock);
	if (l->engine_started)
		pthread_join(l->engine, NULL);
	for (unsigned i = 0; i < l->nworkers; i++)
		pthread_join(l->worker[i], NULL);
	phos_uio_free(l->uio);
	/* Streams of the (gone) function may still wait for flags that the
	 * engine never set: set them so that the devices drain. */
	for (size_t i = 0; i < l->n; i++) {
		int k = l->items[i].dev;

		if (l->flags[k] && l->dstream[k] && !atomic_load(&l->items[i].flagged))
			d->flag_write(l->dev[k], l->dstream[k], l->flags[k] + 4ull * i, 1);
	}
	if (l->stream)
		d->stream_sync(l->home, l->stream);
	for (int k = 1; k < l->ndevs; k++) {
		if (l->dstream[k]) {
			d->stream_sync(l->dev[k], l->dstream[k]);
			d->stream_destroy(l->dev[k], l->dstream[k]);
		}
	}
	for (unsigned i = 0; i < l->nslots; i++) {
		for (int k = 1; k < l->ndevs; k++) {
			if (l->slot[i].dev_event[k])
				d->event_destroy(l->dev[k], l->slot[i].dev_event[k]);
		}
		if (l->slot[i].event)
			d->event_destroy(l->home, l->slot[i].event);
		if (l->slot[i].buf) {
			d->host_unregister(l->home, l->slot[i].buf);
			free(l->slot[i].buf);
		}
	}
	if (l->stream)
		d->stream_destroy(l->home, l->stream);
	for (int k = 0; k < l->ndevs; k++) {
		if (l->flags[k]) {
			/* Nothing may still wait for a flag once it is freed. */
			d->synchronize(l->dev[k]);
			d->flags_free(l->dev[k], l->flags[k]);
		}
	}
	if (l->items)
		for (size_t i = 0; i < l->n; i++)
			free(l->items[i].chunk_hash);
	if (l->src.fd >= 0)
		close(l->src.fd);
	free(l->items);
	free(l->by_addr);
	free(l->urgent);
	free(l->touched);
	free(l->hashq);
	pthread_cond_destroy(&l->work);
	pthread_cond_destroy(&l->done_cond);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
