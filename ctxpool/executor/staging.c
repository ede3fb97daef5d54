/* SPDX-License-Identifier: MIT */
/*
 * The staging pipeline (see staging.h).
 *
 * One thread drives the copy engine and io_uring; a pool of worker threads
 * hashes chunks so that no serial CPU pass over gigabytes sits on the path:
 *
 *   dump:  D2H + event ─▶ hash (worker) ─▶ io_uring write ─▶ slot free
 *
 * A dump writes gpu.data with O_DIRECT when the file system allows it: buffered
 * writes to one file are serialised by the inode lock and must be flushed by
 * the commit's fsync anyway, so going to the disk at once is faster and the
 * snapshot is durable when the last write completes.
 *
 * Where it does not, and in tmpfs (a checkpoint into memory), the file is mapped and
 * the workers copy each hashed chunk into the mapping themselves, in
 * parallel; the single io_uring writer moved about 2 GB/s into tmpfs on the
 * H100 machine (each write allocating and copying 4 MiB under the inode
 * lock) against 55 GB/s of D2H. Pages are populated with
 * MADV_POPULATE_WRITE first, so that a file system out of space is an error
 * (ENOMEM/ENOSPC), never a SIGBUS of the executor.
 */
#include "staging.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fdio.h"
#include "image.h"
#include "log.h"
#include "uring_io.h"

#define CHUNK ((uint64_t)PHOS_IMAGE_HASH_CHUNK)
#define MAX_WORKERS 16

enum slot_state { SLOT_FREE, SLOT_IO, SLOT_COPY, SLOT_WORK };

struct slot {
	uint8_t *buf;
	void *event;
	enum slot_state state;
	size_t item;          /* which item and chunk it holds */
	uint64_t chunk;
	uint64_t len;
	atomic_bool worked;   /* the worker is done with it */
};

/* The ring, kept by the executor from its first dump to its end
 * (stage_ring_free): slots stay pinned (docs/design.md's 64 MiB staging budget),
 * workers wait, so that a checkpoint copying buffer by buffer (cow, recopy)
 * does not set one up for each. */
struct stage {
	struct executor *ex;
	const struct stage_item *items;
	struct slot slot[STAGE_SLOTS_MAX];
	unsigned nslots;             /* STAGE_SLOTS, or PHOS_STAGE_SLOTS */
	void *stream;
	struct phos_uio *uio;
	uint64_t **chunk_hash;       /* per item, per chunk */
	size_t nitems;               /* the dump in progress: its items, their chunk hashes */
	uint8_t *map;                /* gpu.data mapped (no O_DIRECT): the workers write it */
	size_t map_len;
	atomic_int werr;             /* a worker's write failed: -errno */

	pthread_t worker[MAX_WORKERS];
	unsigned nworkers;
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct slot *queue[STAGE_SLOTS_MAX];
	unsigned q_head, q_n;
	bool stop;
};

static uint64_t nchunks(uint64_t len)
{
	return (len + CHUNK - 1) / CHUNK;
}

/* Per item, room for the hashes of its chunks; NULL when out of memory. */
static uint64_t **chunk_hashes_new(const struct stage_item *items, size_t n)
{
	uint64_t **h = calloc(n ? n : 1, sizeof(*h));

	for (size_t i = 0; h && i < n; i++) {
		h[i] = calloc(nchunks(items[i].len) ? nchunks(items[i].len) : 1, sizeof(uint64_t));
		if (!h[i]) {
			while (i--)
				free(h[i]);
			free(h);
			h = NULL;
		}
	}
	return h;
}

static void chunk_hashes_free(uint64_t **h, size_t n)
{
	for (size_t i = 0; h && i < n; i++)
		free(h[i]);
	free(h);
}

/* len bytes of src into a mapping of gpu.data at dst, its pages populated
 * first so that a file system out of space is an error (-ENOSPC), never a
 * SIGBUS. 0 or -errno. */
static int copy_into_map(uint8_t *dst, const void *src, size_t len)
{
	size_t whole = (len + 4095) & ~(size_t)4095;

	/* (EINVAL: a kernel without it; the space was reserved then) */
	if (madvise(dst, whole, MADV_POPULATE_WRITE) < 0 && errno != EINVAL)
		return errno == ENOMEM ? -ENOSPC : -errno;
	memcpy(dst, src, len);
	return 0;
}

/* Helper threads beside a running function: half the cores (at most
 * MAX_WORKERS), each at a lower priority than the function's threads. */
static unsigned half_cores(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = cpus > 3 ? (unsigned)(cpus / 2) : 1;

	return n > MAX_WORKERS ? MAX_WORKERS : n;
}

static void lower_priority(void)
{
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) < 0)
		phos_debug("staging: setpriority: %s", strerror(errno));
}

/* --- workers --- */

static void *worker_main(void *arg)
{
	struct stage *st = arg;

	pthread_mutex_lock(&st->lock);
	for (;;) {
		struct slot *sl;

		while (!st->stop && st->q_n == 0)
			pthread_cond_wait(&st->work, &st->lock);
		if (st->q_n == 0)
			break;
		sl = st->queue[st->q_head];
		st->q_head = (st->q_head + 1) % st->nslots;
		st->q_n--;
		pthread_mutex_unlock(&st->lock);

		st->chunk_hash[sl->item][sl->chunk] = phos_image_chunk_hash(sl->buf, sl->len);
		if (st->map) {
			int r = copy_into_map(st->map + st->items[sl->item].off + sl->chunk * CHUNK, sl->buf, sl->len);

			if (r < 0)
				atomic_store(&st->werr, r);
		}

		pthread_mutex_lock(&st->lock);
		atomic_store(&sl->worked, true);
		pthread_cond_broadcast(&st->done);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static void work_push(struct stage *st, struct slot *sl)
{
	atomic_store(&sl->worked, false);
	pthread_mutex_lock(&st->lock);
	st->queue[(st->q_head + st->q_n++) % st->nslots] = sl;
	pthread_cond_signal(&st->work);
	pthread_mutex_unlock(&st->lock);
}

/* Waits until some worker finished a job (or a short while passed). */
static void work_wait(struct stage *st)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 2000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&st->lock);
	pthread_cond_timedwait(&st->done, &st->lock, &ts);
	pthread_mutex_unlock(&st->lock);
}

/* --- setup --- */

static void stage_exit(struct stage *st)
{
	const struct phos_device_ops *d = st->ex->dev_ops;

	pthread_mutex_lock(&st->lock);
	st->stop = true;
	pthread_cond_broadcast(&st->work);
	pthread_mutex_unlock(&st->lock);
	for (unsigned i = 0; i < st->nworkers; i++)
		pthread_join(st->worker[i], NULL);
	phos_uio_free(st->uio);
	if (st->stream)
		d->stream_sync(st->ex->dev, st->stream);
	for (unsigned i = 0; i < st->nslots; i++) {
		if (st->slot[i].event)
			d->event_destroy(st->ex->dev, st->slot[i].event);
		if (st->slot[i].buf) {
			d->host_unregister(st->ex->dev, st->slot[i].buf);
			free(st->slot[i].buf);
		}
	}
	if (st->stream)
		d->stream_destroy(st->ex->dev, st->stream);
	pthread_cond_destroy(&st->work);
	pthread_cond_destroy(&st->done);
	pthread_mutex_destroy(&st->lock);
}

static int stage_init(struct stage *st, struct executor *ex)
{
	const struct phos_device_ops *d = ex->dev_ops;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int r;

	const char *env = getenv("PHOS_STAGE_SLOTS");

	memset(st, 0, sizeof(*st));
	st->ex = ex;
	st->nslots = STAGE_SLOTS;
	if (env && atoi(env) >= 4 && atoi(env) <= STAGE_SLOTS_MAX)
		st->nslots = (unsigned)atoi(env);
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->work, NULL);
	pthread_cond_init(&st->done, NULL);
	r = phos_uio_new(st->nslots, &st->uio);
	if (r < 0)
		return r;
	if (d->stream_create(ex->dev, 1 /* non-blocking */, 0, &st->stream) < 0)
		return -EIO;
	for (unsigned i = 0; i < st->nslots; i++) {
		if (posix_memalign((void **)&st->slot[i].buf, 4096, CHUNK))
			return -ENOMEM;
		/* Unpinned staging still works, only slower. */
		if (d->host_register(ex->dev, st->slot[i].buf, CHUNK) < 0)
			phos_warn("staging slot %u could not be pinned", i);
		if (d->event_create(ex->dev, 2 /* disable timing */, &st->slot[i].event) < 0)
			return -EIO;
	}
	/* Leave a core to the thread that drives the pipeline. */
	st->nworkers = cpus > 2 ? (unsigned)(cpus - 1) : 1;
	if (st->nworkers > MAX_WORKERS)
		st->nworkers = MAX_WORKERS;
	for (unsigned i = 0; i < st->nworkers; i++) {
		if (pthread_create(&st->worker[i], NULL, worker_main, st) != 0) {
			st->nworkers = i;
			return -EAGAIN;
		}
	}
	return 0;
}

static int free_slot(struct stage *st)
{
	for (unsigned i = 0; i < st->nslots; i++)
		if (st->slot[i].state == SLOT_FREE)
			return (int)i;
	return -1;
}

/* Assigns the next chunk to slot sl; false when there is none left. */
static bool next_chunk(struct stage *st, size_t n, size_t *item, uint64_t *chunk, struct slot *sl)
{
	while (*item < n && *chunk >= nchunks(st->items[*item].len)) {
		(*item)++;
		*chunk = 0;
	}
	if (*item >= n)
		return false;
	sl->item = *item;
	sl->chunk = *chunk;
	sl->len = st->items[*item].len - *chunk * CHUNK < CHUNK ? st->items[*item].len - *chunk * CHUNK : CHUNK;
	(*chunk)++;
	return true;
}

/* --- dump --- */

/* Nothing moved in a dump round: block on whatever finishes next, without
 * sleeping past a copy or a write that is about to land. */
static int wait_dump(struct stage *st, char *err, size_t errlen, uint64_t *left)
{
	void *tag;
	int r, res;

	for (unsigned i = 0; i < st->nslots; i++) {
		if (st->slot[i].state == SLOT_COPY) {
			r = st->ex->dev_ops->event_sync(st->ex->dev, st->slot[i].event);
			if (r < 0) {
				phos_errf(err, errlen, "device-to-host copy failed (cuda error %d)", -r);
				return -EIO;
			}
			return 0;
		}
	}
	for (unsigned i = 0; i < st->nslots; i++) {
		if (st->slot[i].state == SLOT_WORK) {
			work_wait(st);
			return 0;
		}
	}
	if (phos_uio_inflight(st->uio) == 0)
		return 0;
	r = phos_uio_complete(st->uio, true, &tag, &res);
	if (r == 1 && res < 0) {
		phos_errf(err, errlen, "writing gpu.data: %s", strerror(-res));
		return res;
	}
	if (r == 1) {
		((struct slot *)tag)->state = SLOT_FREE;
		(*left)--;
	}
	return r < 0 ? r : 0;
}

/* gpu.data mapped for the workers when it is not written with O_DIRECT, or
 * lives in tmpfs (which takes O_DIRECT since Linux 6.6, but still copies
 * into its page cache under the inode lock), and was opened for reading and
 * writing, as mmap needs; NULL otherwise. */
static uint8_t *map_target(int fd, size_t *ret_len)
{
	int fl = fcntl(fd, F_GETFL);
	struct statfs fs;
	struct stat sb;
	void *p;

	if (fl < 0 || (fl & O_ACCMODE) != O_RDWR || fstat(fd, &sb) < 0 || sb.st_size <= 0)
		return NULL;
	if ((fl & O_DIRECT) && !(fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC))
		return NULL;
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return NULL;
	*ret_len = (size_t)sb.st_size;
	return p;
}

/* map_target, for items that all end inside the file; NULL otherwise (past
 * the end: written with write()). */
static uint8_t *map_items(int fd, const struct stage_item *items, size_t n, size_t *ret_len)
{
	uint8_t *map = map_target(fd, ret_len);

	for (size_t i = 0; map && i < n; i++)
		if (items[i].off + items[i].len > *ret_len)
			map = (munmap(map, *ret_len), NULL);
	return map;
}

void stage_ring_free(struct executor *ex)
{
	if (!ex->stage)
		return;
	stage_exit(ex->stage);
	free(ex->stage);
	ex->stage = NULL;
}

/* The executor's ring, set up at its first use. */
static struct stage *ring_get(struct executor *ex, int *ret_err)
{
	struct stage *st = ex->stage;
	int r;

	if (st)
		return st;
	st = calloc(1, sizeof(*st));
	if (!st) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	r = stage_init(st, ex);
	if (r < 0) {
		stage_exit(st);
		free(st);
		*ret_err = r;
		return NULL;
	}
	return ex->stage = st;
}

/* What one dump sets in the ring, and takes back. */
static int dump_begin(struct stage *st, int fd, const struct stage_item *items, size_t n)
{
	st->items = items;
	st->nitems = n;
	atomic_store(&st->werr, 0);
	st->chunk_hash = chunk_hashes_new(items, n);
	if (!st->chunk_hash)
		return -ENOMEM;
	st->map = map_items(fd, items, n, &st->map_len);
	return 0;
}

static void dump_end(struct stage *st)
{
	chunk_hashes_free(st->chunk_hash, st->nitems);
	st->chunk_hash = NULL;
	if (st->map)
		munmap(st->map, st->map_len);
	st->map = NULL;
	st->items = NULL;
	st->nitems = 0;
}

/* Starts device-to-host copies of the next chunks into every free slot:
 * 0 (*progress when one started) or -EIO with err. */
static int dump_issue(struct executor *ex, struct stage *st, const struct stage_item *items, size_t n, size_t *item,
		      uint64_t *chunk, bool *progress, char *err, size_t errlen)
{
	const struct phos_device_ops *d = ex->dev_ops;
	int s;

	while ((s = free_slot(st)) >= 0 && next_chunk(st, n, item, chunk, &st->slot[s])) {
		struct slot *sl = &st->slot[s];
		int r = d->memcpy_d2h_async(ex->dev, sl->buf, items[sl->item].dev + sl->chunk * CHUNK, sl->len,
					    st->stream);

		if (r == 0)
			r = d->event_record(ex->dev, sl->event, st->stream);
		if (r < 0)
			return phos_errf_rc(err, errlen, -EIO, "device-to-host copy of %#llx failed (cuda error %d)",
					    (unsigned long long)items[sl->item].dev, -r);
		sl->state = SLOT_COPY;
		*progress = true;
	}
	return 0;
}

/* Moves each slot on: a landed copy to the workers, a hashed chunk to the
 * disk (or, written into the mapping by its worker, free again: *left
 * counts it). 0 or -errno with err. */
static int dump_slots(struct executor *ex, struct stage *st, int fd, const struct stage_item *items, uint64_t *left,
		      bool *progress, char *err, size_t errlen)
{
	int r;

	for (unsigned i = 0; i < st->nslots; i++) {
		struct slot *sl = &st->slot[i];
		uint64_t whole = (sl->len + 4095) & ~4095ull;

		if (sl->state == SLOT_COPY) {
			r = ex->dev_ops->event_query(ex->dev, sl->event);
			if (r == -PHOS_CUDA_NOT_READY)
				continue;
			if (r < 0)
				return phos_errf_rc(err, errlen, -EIO, "device-to-host copy failed (cuda error %d)", -r);
			sl->state = SLOT_WORK;
			work_push(st, sl);
			*progress = true;
		} else if (sl->state == SLOT_WORK && atomic_load(&sl->worked) && st->map) {
			r = atomic_load(&st->werr);
			if (r < 0)
				return phos_errf_rc(err, errlen, r, "writing gpu.data: %s", strerror(-r));
			sl->state = SLOT_FREE;   /* the worker copied it into the mapping */
			(*left)--;
			*progress = true;
		} else if (sl->state == SLOT_WORK && atomic_load(&sl->worked)) {
			/* Whole 4 KiB blocks for O_DIRECT; the tail is zero padding. */
			memset(sl->buf + sl->len, 0, whole - sl->len);
			r = phos_uio_write(st->uio, fd, sl->buf, whole, items[sl->item].off + sl->chunk * CHUNK, sl, 0);
			if (r < 0)
				return phos_errf_rc(err, errlen, r, "writing gpu.data: %s", strerror(-r));
			sl->state = SLOT_IO;
			*progress = true;
		}
	}
	return 0;
}

/* Frees the slots whose writes completed (*left counts them). 0 or -errno with err. */
static int dump_reap(struct stage *st, uint64_t *left, bool *progress, char *err, size_t errlen)
{
	void *tag;
	int r, res;

	while ((r = phos_uio_complete(st->uio, false, &tag, &res)) == 1) {
		if (res < 0)
			return phos_errf_rc(err, errlen, res, "writing gpu.data: %s", strerror(-res));
		((struct slot *)tag)->state = SLOT_FREE;
		(*left)--;
		*progress = true;
	}
	return r < 0 ? phos_errf_rc(err, errlen, r, "writing gpu.data: %s", strerror(-r)) : 0;
}

int stage_dump(struct executor *ex, int fd, struct stage_item *items, size_t n, char *err, size_t errlen)
{
	struct stage *st;
	size_t item = 0;
	uint64_t chunk = 0, left = 0;
	int r = 0;

	for (size_t i = 0; i < n; i++)
		left += nchunks(items[i].len);
	if (!left) {   /* empty items only: their hashes, no ring needed */
		uint64_t none = 0;

		for (size_t i = 0; i < n; i++)
			items[i].hash = phos_image_combine(&none, 0);
		return 0;
	}
	st = ring_get(ex, &r);
	if (!st) {
		phos_errf(err, errlen, "cannot set up the staging ring: %s", strerror(-r));
		return r;
	}
	r = dump_begin(st, fd, items, n);
	if (r < 0)
		phos_errf(err, errlen, "cannot set up the staging ring: %s", strerror(-r));
	while (r == 0 && left > 0) {
		bool progress = false;

		r = dump_issue(ex, st, items, n, &item, &chunk, &progress, err, errlen);
		if (r == 0)
			r = dump_slots(ex, st, fd, items, &left, &progress, err, errlen);
		if (r == 0)
			r = dump_reap(st, &left, &progress, err, errlen);
		if (r == 0 && !progress)
			r = wait_dump(st, err, errlen, &left);
	}
	if (r < 0) {
		/* Slots may still be copying, hashing or writing (into the mapping
		 * too): the ring is taken down first, its workers joined, and made
		 * again by the next dump. */
		stage_exit(st);
		dump_end(st);
		free(st);
		ex->stage = NULL;
		return r;
	}
	for (size_t i = 0; i < n; i++) {
		items[i].hash = phos_image_combine(st->chunk_hash[i], nchunks(items[i].len));
		if (items[i].chunk_hashes)
			memcpy(items[i].chunk_hashes, st->chunk_hash[i], nchunks(items[i].len) * sizeof(uint64_t));
	}
	dump_end(st);
	return 0;
}

/* --- stw into memory (staging.h) --- */

#define HOST_PIECE (256ull << 20)   /* one D2H copy: big enough for the engine's full rate */
/* Pinned (and unpinned) a piece at a time. While the driver pins or unpins a
 * range it holds its lock on host memory, which every copy to or from host
 * memory takes: the program's own copies waited for the whole range (on the
 * H100, 1.0-1.3 s for 16 GiB, a pause longer than stw's whole stall). A
 * piece holds them for a few milliseconds. A copy never crosses a piece: the
 * driver takes each piece for a registration of its own. */
#define HOST_PIN_PIECE (128ull << 20)   /* PHOS_HOST_PIN_PIECE (bytes, 2 MiB multiples): tests */
#define HOST_REAP_SHARE 3            /* unpinning takes at most 1/3 of the dispatcher's time */

/* PHOS_HOST_COPY_MAX, or half of MemAvailable. */
static uint64_t host_cap(void)
{
	unsigned long long kib = 0;
	char line[256];
	FILE *f;

	if (getenv("PHOS_HOST_COPY_MAX") && *getenv("PHOS_HOST_COPY_MAX")) {
		uint64_t v = exec_env_bytes("PHOS_HOST_COPY_MAX", UINT64_MAX, UINT64_MAX - 1, 1);

		if (v != UINT64_MAX)
			return v;
	}
	f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib * 1024 / 2;
}

static uint64_t pin_piece(void)
{
	uint64_t v = exec_env_bytes("PHOS_HOST_PIN_PIECE", HOST_PIN_PIECE, 1ull << 40, 2ull << 20);

	return v ? v : HOST_PIN_PIECE;
}

struct populate_job {
	uint8_t *p;
	uint64_t len;
	int err;
};

/* MADV_POPULATE_WRITE holds the executor's mmap lock (read) for the whole
 * range it is given. A thread that wants it for writing (mmap, munmap, brk,
 * a thread's stack) waits for that range, and every page fault of the other
 * threads, the dispatcher's included, waits behind that writer: on the H200
 * host, slices of 2 GiB held the program 0.9 s at a 16 GiB cow checkpoint's
 * ask (the populating threads' own creation was such a writer). Calls of
 * this many bytes bound any such wait to a few milliseconds. */
#define POPULATE_CHUNK (32ull << 20)

static void *populate_main(void *arg)
{
	struct populate_job *j = arg;

	lower_priority();
	for (uint64_t o = 0; o < j->len; o += POPULATE_CHUNK) {
		uint64_t n = j->len - o < POPULATE_CHUNK ? j->len - o : POPULATE_CHUNK;

		if (madvise(j->p + o, n, MADV_POPULATE_WRITE) == 0)
			continue;
		if (errno != EINVAL) {
			j->err = -errno;
			break;
		}
		for (uint64_t k = 0; k < n; k += 4096)   /* a kernel without it: touch every page */
			((volatile uint8_t *)j->p)[o + k] = 0;
	}
	return NULL;
}

/* Faults every page in, on half the cores (the first touch zeroes pages at
 * a few GB/s per core; the function runs beside); 0 or -ENOMEM. */
static int populate(uint8_t *p, uint64_t len)
{
	struct populate_job job[MAX_WORKERS];
	pthread_t th[MAX_WORKERS];
	unsigned n = half_cores(), started = 0;
	uint64_t slice;
	int r = 0;

	slice = ((len + n - 1) / n + (2u << 20) - 1) & ~((2ull << 20) - 1);
	for (unsigned i = 0; i < n && (uint64_t)i * slice < len; i++) {
		job[i] = (struct populate_job){ p + (uint64_t)i * slice,
						len - (uint64_t)i * slice < slice ? len - (uint64_t)i * slice : slice, 0 };
		if (pthread_create(&th[i], NULL, populate_main, &job[i]) != 0) {
			populate_main(&job[i]);
			th[i] = 0;
		}
		started = i + 1;
	}
	for (unsigned i = 0; i < started; i++) {
		if (th[i])
			pthread_join(th[i], NULL);
		if (job[i].err && !r)
			r = job[i].err == -EAGAIN ? -ENOMEM : job[i].err;
	}
	return r;
}

struct stage_host *stage_host_new(struct executor *ex, uint64_t bytes)
{
	uint64_t cap = host_cap(), len = (bytes + (2ull << 20) - 1) & ~((2ull << 20) - 1);
	struct stage_host *h;
	double t0 = phos_now();
	void *p;
	int r;

	if (!len || len > cap) {
		phos_info("checkpoint: %llu MiB of state over the host copy's cap of %llu MiB: copied without one",
			  (unsigned long long)(len >> 20), (unsigned long long)(cap >> 20));
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		phos_warn("checkpoint: no host copy of %llu MiB: %s", (unsigned long long)(len >> 20), strerror(errno));
		free(h);
		return NULL;
	}
	h->buf = p;
	h->len = len;
	h->piece = pin_piece();
	madvise(p, len, MADV_HUGEPAGE);   /* fewer faults and pins; only a hint */
	r = populate(h->buf, len);
	if (r < 0) {
		phos_warn("checkpoint: no host copy of %llu MiB: %s", (unsigned long long)(len >> 20), strerror(-r));
		stage_host_free(ex, h);
		return NULL;
	}
	/* Unpinned, D2H would go through the driver's own staging at a fraction
	 * of the rate: not worth holding the memory for. A piece at a time, each
	 * followed by as long a pause, so that the program's copies get through
	 * between them (HOST_PIN_PIECE). */
	for (uint64_t o = 0; o < len; o += h->piece) {
		uint64_t n = len - o < h->piece ? len - o : h->piece;
		double tp = phos_now(), took;

		r = ex->dev_ops->host_register(ex->dev, h->buf + o, n);
		if (r < 0) {
			phos_warn("checkpoint: the host copy of %llu MiB could not be pinned (cuda error %d)",
				  (unsigned long long)(len >> 20), -r);
			stage_host_free(ex, h);
			return NULL;
		}
		h->pinned_len = o + n;
		took = phos_now() - tp;
		if (o + n < len)
			usleep((useconds_t)(took < 0.01 ? took * 1e6 : 10000));
	}
	phos_info("checkpoint: host copy of %llu MiB ready in %.3f s", (unsigned long long)(len >> 20),
		  phos_now() - t0);
	return h;
}

/* Unpins and unmaps h's next piece (the whole of it when nothing is pinned
 * any more); true once h is gone. */
static bool host_release_piece(struct executor *ex, struct stage_host *h)
{
	uint64_t o = h->released, n;

	if (o >= h->pinned_len) {   /* the rest was never pinned */
		if (h->buf && o < h->len)
			munmap(h->buf + o, h->len - o);
		phos_info("checkpoint: host copy of %llu MiB given back", (unsigned long long)(h->len >> 20));
		free(h);
		return true;
	}
	n = h->pinned_len - o < h->piece ? h->pinned_len - o : h->piece;
	ex->dev_ops->host_unregister(ex->dev, h->buf + o);
	munmap(h->buf + o, n);
	h->released = o + n;
	return false;
}

void stage_host_free(struct executor *ex, struct stage_host *h)
{
	if (!h)
		return;
	if (!h->pinned_len) {
		while (!host_release_piece(ex, h))
			;
		return;
	}
	h->next = atomic_load(&ex->host_unpin);
	while (!atomic_compare_exchange_weak(&ex->host_unpin, &h->next, h))
		;
}

void stage_host_reap(struct executor *ex, bool all)
{
	double t;

	if (!ex->host_reaping && !atomic_load(&ex->host_unpin))
		return;
	if (!all && (atomic_load(&ex->host_calls) || phos_now() < ex->host_reap_at))
		return;
	if (!ex->host_reaping)
		ex->host_reaping = atomic_exchange(&ex->host_unpin, NULL);
	t = phos_now();
	do {
		struct stage_host *h = ex->host_reaping, *next = h->next;

		if (host_release_piece(ex, h))
			ex->host_reaping = next;
		if (!ex->host_reaping)
			ex->host_reaping = atomic_exchange(&ex->host_unpin, NULL);
	} while (all && ex->host_reaping);
	/* paced: the program's records run between the pieces */
	ex->host_reap_at = phos_now() + (HOST_REAP_SHARE - 1) * (phos_now() - t);
}

bool stage_host_holds(const struct stage_host *h, const struct stage_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (items[i].off > h->len || items[i].len > h->len - items[i].off)
			return false;
	return true;
}

int stage_host_enqueue(struct executor *ex, struct stage_host *h, const struct stage_item *it, void *stream, char *err,
		       size_t errlen)
{
	int r = 0;

	if (!stage_host_holds(h, it, 1)) {
		phos_errf(err, errlen, "the buffer at %#llx does not fit the host copy", (unsigned long long)it->dev);
		return -ENOSPC;
	}
	for (uint64_t o = 0, len; o < it->len && r == 0; o += len) {
		uint64_t at = it->off + o, piece_end = (at / h->piece + 1) * h->piece;

		/* up to HOST_PIECE, never across a pinned piece */
		len = it->len - o < HOST_PIECE ? it->len - o : HOST_PIECE;
		if (len > piece_end - at)
			len = piece_end - at;
		r = ex->dev_ops->memcpy_d2h_async(ex->dev, h->buf + at, it->dev + o, len, stream);
	}
	if (r < 0) {
		phos_errf(err, errlen, "device-to-host copy of %#llx failed (cuda error %d)", (unsigned long long)it->dev,
			  -r);
		return -EIO;
	}
	return 0;
}

int stage_host_copy(struct executor *ex, struct stage_host *h, const struct stage_item *items, size_t n, char *err,
		    size_t errlen)
{
	const struct phos_device_ops *d = ex->dev_ops;
	void *stream = NULL;
	int r = 0;

	if (d->stream_create(ex->dev, 1 /* non-blocking */, 0, &stream) < 0) {
		phos_errf(err, errlen, "cannot make a stream for the copy");
		return -EIO;
	}
	for (size_t i = 0; i < n && r == 0; i++)
		r = stage_host_enqueue(ex, h, &items[i], stream, err, errlen);
	{
		int s = d->stream_sync(ex->dev, stream);

		if (s < 0 && r == 0) {
			phos_errf(err, errlen, "device-to-host copy failed (cuda error %d)", -s);
			r = -EIO;
		}
	}
	d->stream_destroy(ex->dev, stream);
	return r;
}

/* The writers share one list of chunks: (item, chunk) in order. */
struct host_write {
	const struct stage_host *h;
	int fd;
	uint8_t *map;
	size_t map_len;
	struct stage_item *items;
	size_t n;
	uint64_t **chunk_hash;
	uint64_t *first;            /* per item: the index of its first chunk */
	uint64_t total;
	atomic_uint_fast64_t next;
	atomic_int err;
};

static int write_chunk(struct host_write *w, size_t item, uint64_t chunk)
{
	const struct stage_item *it = &w->items[item];
	uint64_t off = it->off + chunk * CHUNK;
	uint64_t len = it->len - chunk * CHUNK < CHUNK ? it->len - chunk * CHUNK : CHUNK;
	uint64_t whole = (len + 4095) & ~4095ull;
	const uint8_t *src = w->h->buf + off;

	w->chunk_hash[item][chunk] = phos_image_chunk_hash(src, len);
	if (w->map)
		return copy_into_map(w->map + off, src, len);
	/* Whole 4 KiB blocks for O_DIRECT: the host copy's bytes between items
	 * are zero, as a fresh mapping's. */
	if (off + whole > w->h->len)
		whole = len;
	return phos_pwrite_all(w->fd, src, whole, off);
}

static void *writer_main(void *arg)
{
	struct host_write *w = arg;

	lower_priority();
	for (;;) {
		uint64_t k = atomic_fetch_add(&w->next, 1);
		size_t lo = 0, hi = w->n;
		int r;

		if (k >= w->total || atomic_load(&w->err))
			break;
		while (hi - lo > 1) {   /* the item whose chunks hold k */
			size_t mid = (lo + hi) / 2;

			if (w->first[mid] <= k)
				lo = mid;
			else
				hi = mid;
		}
		r = write_chunk(w, lo, k - w->first[lo]);
		if (r < 0) {
			int none = 0;

			atomic_compare_exchange_strong(&w->err, &none, r);
		}
	}
	return NULL;
}

int stage_host_write(const struct stage_host *h, int fd, struct stage_item *items, size_t n, char *err,
		     size_t errlen)
{
	struct host_write w = { .h = h, .fd = fd, .items = items, .n = n };
	pthread_t th[MAX_WORKERS];
	/* half the cores: the function runs meanwhile, and hashing and copying
	 * into memory are bound by memory bandwidth before cores */
	unsigned nth = half_cores(), started = 0;
	int r = -ENOMEM;

	w.chunk_hash = chunk_hashes_new(items, n);
	w.first = calloc(n ? n : 1, sizeof(*w.first));
	if (!w.chunk_hash || !w.first)
		goto out;
	for (size_t i = 0; i < n; i++) {
		w.first[i] = w.total;
		w.total += nchunks(items[i].len);
	}
	w.map = map_items(fd, items, n, &w.map_len);
	for (unsigned i = 0; i < nth; i++) {
		if (pthread_create(&th[i], NULL, writer_main, &w) != 0)
			break;
		started++;
	}
	if (!started)
		writer_main(&w);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	r = atomic_load(&w.err);
	if (r == 0)
		for (size_t i = 0; i < n; i++)
			items[i].hash = phos_image_combine(w.chunk_hash[i], nchunks(items[i].len));
	if (w.map)
		munmap(w.map, w.map_len);
out:
	if (r < 0)
		phos_errf(err, errlen, "writing gpu.data: %s", strerror(-r));
	chunk_hashes_free(w.chunk_hash, n);
	free(w.first);
	return r;
}
