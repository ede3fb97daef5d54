/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints of a running function (issue 11): stop-the-world, soft
 * copy-on-write and soft recopy.
 *
 *   control thread                     dispatcher (exec_serve)
 *   CHECKPOINT {mode, dir} ──ask──▶    asked? (checked before each record, and
 *                          kick        phos_channel_kick wakes it when idle)
 *                                      ├─ drain the device
 *   stw:                               ├─ exec_image_dump(dir): the serve-point
 *                                      │  snapshot writer, every live buffer,
 *                                      │  modules, variables, streams, events,
 *                                      │  cuBLAS handles, host regions
 *                                      ├─ CHECKPOINTED {bytes, stall, total}
 *                                      └─ hold: the ring is not read, so the
 *   RESUME (or the socket closed) ──▶     function blocks in its next call
 *                                         (or keeps running CPU code) while
 *                                         the controller CRIU-dumps it
 *   cow:                               ├─ exec_image_plan: objects and the list
 *                                      │  of buffers, nothing copied yet
 *                                      ├─ HELD, hold while the CPU is dumped
 *   RESUME                        ──▶  └─ records flow again at once; between
 *                                         records (and while the ring is idle)
 *                                         one more buffer is copied; a record
 *                                         whose write set (spec.c: exact sets;
 *                                         an opaque launch writes everything)
 *                                         holds a buffer not copied yet has it
 *                                         copied first; frees, resets and the
 *                                         function's end copy all the rest;
 *                                         then the manifest, CHECKPOINTED
 *   recopy:                            ├─ exec_recopy_begin: every buffer gets
 *                                      │  its place in gpu.data; records flow
 *                                      ├─ between records: copy a batch of
 *                                      │  dirty buffers (a record's write set
 *                                      │  dirties them again), in rounds while
 *                                      │  the dirty set shrinks (exec_recopy.c)
 *                                      ├─ the stop: drain, copy what is still
 *                                      │  dirty or new, the manifest,
 *                                      │  CHECKPOINTED {rounds, bytes}
 *   RESUME                        ──▶  └─ hold while the CPU is dumped, as stw
 *
 * The stop is at a record boundary: the record before it completed (its reply
 * published, its device work drained), the one after it untouched in the ring.
 * A cow copy reads a buffer no record dispatched since the stop has written,
 * so it reads the stop's contents even with the function's work in flight.
 * dir is the controller's temporary directory; the controller adds the CPU
 * side and commits it (image.h: all or nothing), so an executor killed here
 * leaves the previous checkpoint as it was.
 *
 * cow's reserve: a buffer a record is about to write before its background
 * copy is copied device-to-device into memory outside the arena
 * (scratch_alloc) while the reserve has room (PHOS_COW_RESERVE_BYTES, 2 GiB
 * by default), and its background copy then reads that copy; with the
 * reserve full, the record waits for the buffer's copy to gpu.data instead.
 *
 * Not yet: chunks smaller than a buffer.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "fault.h"
#include "image.h"
#include "log.h"
#include "engine.h"
#include "staging.h"

/* A cow checkpoint's device-to-device reserve (docs/design.md): a buffer a record
 * is about to write before its copy to host is copied into device memory
 * outside the arena, up to this many bytes, and the background copy reads
 * that copy; when it is full, the buffer is copied to host first instead. */
#define COW_RESERVE_DEFAULT (2ull << 30)

void exec_checkpoint_ask(struct executor *ex, enum phos_ckpt_mode mode, bool wait_stop, const char *dir)
{
	struct exec_ckpt *c = &ex->ckpt;
	bool busy;

	if ((unsigned)mode >= PHOS_CKPT_MODE_END || (wait_stop && mode != PHOS_CKPT_RECOPY)) {
		exec_control_error(ex, "unknown checkpoint mode %u%s", (unsigned)mode, wait_stop ? " (waiting for a stop)" : "");
		return;
	}
	if (ex->ndevs > 1 && !ex->peers) {
		/* its copies read every device through the one records run on */
		exec_control_error(ex, "the executor's %d GPUs do not reach each other's memory: a checkpoint cannot "
				   "read them all", ex->ndevs);
		return;
	}
	pthread_mutex_lock(&c->lock);
	/* c->cow and c->recopy are the dispatcher's, set and cleared under the lock */
	busy = atomic_load(&c->asked) || c->holding || c->cow || c->recopy || c->preparing || c->writing;
	if (!busy) {
		c->preparing = true;
		c->t_asked = phos_now();
	}
	pthread_mutex_unlock(&c->lock);
	if (busy) {
		exec_control_error(ex, "a checkpoint is already under way");
		return;
	}
	/* stw, cow: their host copy now, while the function runs (the live bytes read
	 * here may be off by what the dispatcher does meanwhile: a copy too small
	 * at the stop is dropped there for the ring) */
	if (mode == PHOS_CKPT_STW || mode == PHOS_CKPT_COW) {
		uint64_t live = phos_bufmap_live_bytes(ex->bufs);

		c->host = stage_host_new(ex, live + live / 32 + (64ull << 20));
	}
	pthread_mutex_lock(&c->lock);
	c->preparing = false;
	pthread_cond_broadcast(&c->cond);
	c->mode = mode;
	snprintf(c->dir, sizeof(c->dir), "%s", dir);
	c->resume = false;
	c->wait_stop = wait_stop;
	c->precopied = false;
	atomic_store(&c->stop_asked, false);
	atomic_store(&c->abandon, false);
	atomic_store(&c->asked, true);
	pthread_mutex_unlock(&c->lock);
	if (ex->ch)
		phos_channel_kick(ex->ch);
}

void exec_checkpoint_resume(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	bool drop;

	pthread_mutex_lock(&c->lock);
	c->resume = true;
	/* before the stop of a recopy that waits for one: it is called off */
	drop = c->wait_stop && !c->holding && (c->recopy || atomic_load(&c->asked));
	if (drop)
		atomic_store(&c->abandon, true);
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	if (drop && ex->ch)
		phos_channel_kick(ex->ch);
}

void exec_checkpoint_stop(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = c->wait_stop && !c->holding && (c->recopy || atomic_load(&c->asked));
	if (ok)
		atomic_store(&c->stop_asked, true);
	pthread_mutex_unlock(&c->lock);
	if (!ok) {
		exec_control_error(ex, "stop: no checkpoint waits for one");
		return;
	}
	if (ex->ch)
		phos_channel_kick(ex->ch);
}

/* What must hold before the device state is taken: 0, or -errno with err. */
static int checkpoint_prepare(struct executor *ex, char *err, size_t errlen)
{
	int r;

	/* Host-memory regions are in the image (exec_image_dump) and the
	 * restoring executor maps them again from the restored function
	 * (main.c, adopting). Memory pools, limits, stream attributes and the
	 * driver's reserved ranges too: the restoring executor makes them again
	 * (exec_image.c), the pools after their cached blocks were given back
	 * (below, with the device idle). cuDNN's handles and descriptors the
	 * preload makes again itself, at their first use after it sees the
	 * adoption, and so it does with graphs made on the device
	 * (graph_device.c); the stop came after the channel's fence settled
	 * (fence_settled), so no call naming them is half-done. */
	/* NCCL communicators: made again by the preload after a restore at
	 * phos_fn_serve, with their peers; a program restored mid-call would
	 * call communicators its new executor never made. */
	if (exec_nccl_in_use(ex)) {
		phos_errf(err, errlen, "the program holds NCCL communicators; checkpoints of such programs are not "
			  "supported yet (snapshots at phos_fn_serve are)");
		return -ENOTSUP;
	}
	/* Limits and stream attributes the function set are in the image with
	 * their values (exec_context_to_image), unless more were set than kept. */
	if (ex->limits_lost || ex->attrs_lost) {
		phos_errf(err, errlen, "the program set %s than a checkpoint keeps (%d stream attributes, limits below "
			  "%d); checkpoints of such programs are not supported", ex->attrs_lost ? "more stream attributes"
			  : "other device limits", EXEC_KEPT_ATTRS, EXEC_SAVED_LIMITS);
		return -ENOTSUP;
	}
	if (ex->loader && !loader_done(ex->loader)) {
		phos_errf(err, errlen, "an on-demand restore is still moving buffers in; try again later");
		return -EBUSY;
	}
	r = exec_drain_all(ex);   /* every device: the copies read them all */
	if (r < 0) {
		phos_errf(err, errlen, "the device failed while draining (cuda error %d)", -r);
		return -EIO;
	}
	exec_pool_release_all(ex);   /* cached blocks are not state: live ones are */
	if (ex->pending_error) {
		/* Kept for the function's next synchronous call, as without a checkpoint. */
		phos_errf(err, errlen, "the program has an unreported error of asynchronous work (cuda error %d)",
			  -ex->pending_error);
		return -EIO;
	}
	return 0;
}

/* Fault point checkpoint_kill: the executor dies halfway through writing. */
static void fault_kill(const char *dir)
{
	char path[PHOS_CTL_PATH_MAX + 16];
	FILE *f;

	if (!phos_fault("checkpoint_kill"))
		return;
	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	f = fopen(path, "we");
	if (f) {
		fputs("half", f);
		fclose(f);
	}
	raise(SIGKILL);
}

/* A program holding cuDNN objects, cuFFT plans, cuRAND generators or graphs
 * made on the device is stopped only where no call naming them is half-done
 * (channel.h, fenced sections): the fence is closed and records are taken
 * until it settles. True when it has. */
static bool fence_settled(struct executor *ex)
{
	if (!ex->ch || (!exec_dnn_in_use(ex) && !exec_fft_in_use(ex) && !exec_rand_in_use(ex) &&
			!exec_graph_in_use(ex)))
		return true;
	phos_channel_fence_close(ex->ch);
	return phos_channel_fence_settled(ex->ch);
}

/* The stop comes only where nothing of the program is half-done: the fence
 * has settled, and no host callback of the program is out (exec_stream.c).
 * A callback may wait for the program's next call, which a stop would hold
 * while it drains the device, and the drain waits for the callback: the
 * program and the checkpoint would wait for each other for ever. Until then
 * records flow. True when the stop may come; else the dispatcher looks
 * again soon (exec_checkpoint_wait_ms). */
static bool stop_ready(struct executor *ex)
{
	bool ready = fence_settled(ex) && !atomic_load(&ex->host_calls);

	ex->ckpt.fencing = !ready;
	return ready;
}

/* The sections that waited at the fence go on. */
static void fence_open(struct executor *ex)
{
	ex->ckpt.fencing = false;
	if (ex->ch)
		phos_channel_fence_open(ex->ch);
}

static void hold(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	double t = phos_now();

	pthread_mutex_lock(&c->lock);
	while (!c->resume)
		pthread_cond_wait(&c->cond, &c->lock);
	c->holding = false;
	c->resume = false;
	pthread_mutex_unlock(&c->lock);
	fence_open(ex);
	phos_info("checkpoint: records flow again after record %llu (held %.3f s for the CPU dump)",
		  (unsigned long long)ex->seq, phos_now() - t);
}

/* The host copy made at the ask (NULL: none), now the stop's. */
static struct stage_host *host_take(struct exec_ckpt *c)
{
	struct stage_host *h;

	pthread_mutex_lock(&c->lock);
	h = c->host;
	c->host = NULL;
	pthread_mutex_unlock(&c->lock);
	return h;
}

struct cow_mem;
static void cow_mem_free(struct executor *ex, struct cow_mem *m);
static int cow_mem_poll(struct executor *ex, struct cow_mem *m);
static int cow_mem_protect(struct executor *ex, size_t i);
static void cow_mem_finish(struct executor *ex);

static void cow_drop(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;

	cow_mem_free(ex, c->cow_mem);
	pthread_mutex_lock(&c->lock);
	c->cow_mem = NULL;
	for (size_t i = 0; c->shadow && c->cow && i < c->cow->n; i++)
		ex->dev_ops->scratch_free(ex->dev, c->shadow[i]);
	exec_image_dump_free(c->cow);
	free(c->copied);
	free(c->shadow);
	c->cow = NULL;
	c->copied = NULL;
	c->shadow = NULL;
	pthread_mutex_unlock(&c->lock);
}

/* The cow reserve's size: PHOS_COW_RESERVE_BYTES (0 for none, at most 1 TiB),
 * else COW_RESERVE_DEFAULT. */
static uint64_t reserve_budget(void)
{
	return exec_env_bytes("PHOS_COW_RESERVE_BYTES", COW_RESERVE_DEFAULT, 1ull << 40, 1);
}

/* Every item is in gpu.data: the manifest, the report. */
static void cow_finish(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };
	char err[512] = "";
	uint64_t bytes = 0;

	if (exec_image_finish(c->cow, &bytes, err, sizeof(err)) < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
		cow_drop(ex);
		return;
	}
	m.checkpointed.mode = PHOS_CKPT_COW;
	m.checkpointed.seq = c->seq;
	m.checkpointed.data_bytes = bytes;
	m.checkpointed.stall_s = c->stall_s;
	m.checkpointed.total_s = phos_now() - c->t_asked;
	m.checkpointed.early = c->early;
	m.checkpointed.reserve_copies = c->reserved;
	exec_control_send(ex, &m);
	phos_info("checkpoint (cow) after record %llu: %llu bytes, %llu buffers copied early (%llu into the "
		  "reserve), %.3f s", (unsigned long long)c->seq, (unsigned long long)bytes,
		  (unsigned long long)c->early, (unsigned long long)c->reserved, m.checkpointed.total_s);
	cow_drop(ex);
}

/* Copies item i of the cow dump (when not copied yet), and finishes after
 * the last. Returns 0, or -1 once the checkpoint failed (it was reported
 * and dropped). */
static int cow_copy(struct executor *ex, size_t i, bool early)
{
	struct exec_ckpt *c = &ex->ckpt;
	char err[512] = "";

	if (c->copied[i])
		return 0;
	if (c->left == (c->cow->n + 1) / 2)
		fault_kill(c->dir);   /* halfway, once per checkpoint */
	if (c->shadow[i]) {
		/* its reserve copy holds the buffer as at the stop */
		struct stage_item it = c->cow->items[i];

		it.dev = c->shadow[i];
		if (stage_dump(ex, c->cow->fd, &it, 1, err, sizeof(err)) < 0) {
			exec_control_error(ex, "checkpoint: %s", err);
			cow_drop(ex);
			return -1;
		}
		c->cow->items[i].hash = it.hash;
		ex->dev_ops->scratch_free(ex->dev, c->shadow[i]);
		c->shadow[i] = 0;
		c->reserve_left += it.len;
	} else if (exec_image_copy(ex, c->cow, i, 1, err, sizeof(err)) < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
		cow_drop(ex);
		return -1;
	}
	c->copied[i] = true;
	c->left--;
	c->early += early;
	if (!c->left)
		cow_finish(ex);
	return 0;
}

static void cow_copy_all(struct executor *ex, bool early)
{
	struct exec_ckpt *c = &ex->ckpt;

	if (c->cow_mem) {
		if (cow_mem_protect(ex, SIZE_MAX) == 0)
			cow_mem_finish(ex);
		return;
	}
	for (size_t i = 0; c->cow && i < c->cow->n; i++)
		if (cow_copy(ex, i, early) < 0)
			return;
}

/* Before a record writes item i (not copied yet): into the reserve when it
 * has room, else to gpu.data now. Returns 0, or -1 once the checkpoint
 * failed. */
static int cow_protect(struct executor *ex, size_t i)
{
	struct exec_ckpt *c = &ex->ckpt;
	const struct stage_item *it = &c->cow->items[i];
	uint64_t addr = 0;

	if (c->cow_mem)
		return cow_mem_protect(ex, i);
	if (c->copied[i] || c->shadow[i])
		return 0;
	if (it->len <= c->reserve_left && ex->dev_ops->scratch_alloc(ex->dev, it->len, &addr) == 0) {
		/* drained after: the record that writes it runs on any stream */
		if (ex->dev_ops->memcpy_d2d(ex->dev, addr, it->dev, it->len, NULL) == 0 &&
		    ex->dev_ops->synchronize(ex->dev) == 0) {
			c->shadow[i] = addr;
			c->reserve_left -= it->len;
			c->reserved++;
			c->early++;
			return 0;
		}
		ex->dev_ops->scratch_free(ex->dev, addr);   /* to host, then */
	}
	return cow_copy(ex, i, true);
}

static void cow_protect_all(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;

	if (c->cow_mem) {
		cow_mem_protect(ex, SIZE_MAX);
		return;
	}
	for (size_t i = 0; c->cow && i < c->cow->n; i++)
		if (cow_protect(ex, i) < 0)
			return;
}

int exec_checkpoint_wait_ms(const struct executor *ex)
{
	const struct exec_ckpt *c = &ex->ckpt;
	double left;

	if (c->fencing)
		return 1;   /* a section's end wakes the ring's waiter, but not a
			     * wait that began just after it, and a callback's
			     * return wakes nothing: look again soon */
	if (!exec_checkpoint_copying(ex))
		return 1000;
	if (c->cow_mem)
		return 1;
	if (!c->recopy || c->ring_idle || atomic_load(&c->stop_asked) || atomic_load(&c->abandon))
		return 0;
	left = c->recopy->next_at - phos_now();
	return left <= 0 ? 0 : left >= 1.0 ? 1000 : (int)(left * 1000) + 1;
}

void exec_checkpoint_waited(struct executor *ex, bool got, int wait_ms)
{
	struct exec_ckpt *c = &ex->ckpt;

	/* idle: a whole wait without a call, or no call since */
	c->ring_idle = !got && (wait_ms > 0 || c->ring_idle);
}

bool exec_checkpoint_copying(const struct executor *ex)
{
	const struct exec_ckpt *c = &ex->ckpt;

	/* (a pre-copy with nothing dirty waits for records, or for its STOP's kick) */
	return c->cow != NULL || (c->recopy && !(c->wait_stop && c->precopied && c->recopy->dirty_bytes == 0 &&
						 !atomic_load(&c->stop_asked) && !atomic_load(&c->abandon)));
}

int exec_checkpoint_before_write(struct executor *ex, const struct spec_set *s)
{
	struct exec_ckpt *c = &ex->ckpt;

	if (c->recopy)
		exec_recopy_mark(c->recopy, s);
	if (!c->cow)
		return 0;
	if (s->opaque || s->overflow) {
		cow_protect_all(ex);
		return 0;
	}
	for (uint32_t k = 0; c->cow && k < s->n; k++) {
		const struct spec_range *w = &s->r[k];

		if (!(w->access & SPEC_WRITE))
			continue;
		for (size_t i = 0; c->cow && i < c->cow->n; i++) {
			const struct stage_item *it = &c->cow->items[i];

			if (it->dev < w->addr + w->len && w->addr < it->dev + it->len && cow_protect(ex, i) < 0)
				return 0;   /* the checkpoint failed, not the call */
		}
	}
	return 0;
}

void exec_checkpoint_before_op(struct executor *ex, uint32_t op)
{
	/* recopy: a reset or an unloaded module changes memory no write set
	 * names; a free needs nothing (the stop keeps only what is still there) */
	if (ex->ckpt.recopy && (op == PHOS_OP_DEVICE_RESET || op == PHOS_OP_MODULE_UNLOAD))
		exec_recopy_mark_all(ex->ckpt.recopy);
	if (!ex->ckpt.cow)
		return;
	switch (op) {
	case PHOS_OP_FREE:
	case PHOS_OP_DEVICE_RESET:
	case PHOS_OP_MODULE_UNLOAD:
	case PHOS_OP_GOODBYE:
	case PHOS_OP_POOL_CREATE ... PHOS_OP_POOL_ADOPT:
		cow_protect_all(ex);
		break;
	default:
		break;
	}
}

static void recopy_drop(struct exec_ckpt *c)
{
	pthread_mutex_lock(&c->lock);
	exec_recopy_free(c->recopy);
	c->recopy = NULL;
	pthread_mutex_unlock(&c->lock);
}

void exec_checkpoint_drain(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;

	cow_copy_all(ex, false);
	pthread_mutex_lock(&c->lock);
	while (c->writing || c->preparing)   /* a host copy still going into gpu.data, or being made */
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	stage_host_free(ex, host_take(c));   /* made for a stop that never came */
	if (ex->ckpt.recopy) {
		recopy_drop(&ex->ckpt);
		exec_control_error(ex, "checkpoint: the program ended before the recopy's stop");
	}
}

/* stw or cow through a host copy, once every item is in it: the host copy
 * into gpu.data, the manifest, CHECKPOINTED (staging.h), on a thread of its
 * own while the function runs. */
struct mem_write {
	struct executor *ex;
	struct exec_dump *d;
	struct stage_host *h;
	enum phos_ckpt_mode mode;
	uint64_t seq, early;
	double stall_s;         /* stw: the copy while held; cow: the stop */
};

static void *mem_writer(void *arg)
{
	struct mem_write *w = arg;
	struct executor *ex = w->ex;
	struct exec_ckpt *c = &ex->ckpt;
	char err[512] = "";
	uint64_t bytes = 0;
	double t;
	int r;

	if (w->mode == PHOS_CKPT_COW)
		fault_kill(c->dir);   /* (stw's is before its copy) */
	t = phos_now();
	r = stage_host_write(w->h, w->d->fd, w->d->items, w->d->n, err, sizeof(err));
	phos_info("checkpoint: host copy hashed and written in %.3f s", phos_now() - t);
	stage_host_free(ex, w->h);
	if (r == 0)
		r = exec_image_finish(w->d, &bytes, err, sizeof(err));
	exec_image_dump_free(w->d);
	if (r < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
	} else {
		struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };

		m.checkpointed.mode = w->mode;
		m.checkpointed.seq = w->seq;
		m.checkpointed.data_bytes = bytes;
		m.checkpointed.stop_bytes = w->mode == PHOS_CKPT_STW ? bytes : 0;
		m.checkpointed.stall_s = w->stall_s;
		m.checkpointed.total_s = phos_now() - c->t_asked;
		m.checkpointed.early = w->early;
		m.checkpointed.host_copy = true;
		exec_control_send(ex, &m);
		phos_info("checkpoint (%s) after record %llu: %llu bytes through host memory, %.3f s held, "
			  "%llu record(s) waited for a copy, %.3f s in all", phos_ckpt_mode_name(w->mode),
			  (unsigned long long)w->seq, (unsigned long long)bytes, w->stall_s,
			  (unsigned long long)w->early, m.checkpointed.total_s);
	}
	free(w);
	pthread_mutex_lock(&c->lock);
	c->writing = false;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Hands d and h to a new mem_writer (w's other fields set by the caller). */
static void mem_write_start(struct executor *ex, struct mem_write *w)
{
	struct exec_ckpt *c = &ex->ckpt;
	pthread_attr_t attr;
	pthread_t th;

	exec_image_drop_scratch(w->d);   /* the arrays' bytes are in h now */
	pthread_mutex_lock(&c->lock);
	c->writing = true;
	pthread_mutex_unlock(&c->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, mem_writer, w) != 0)
		mem_writer(w);   /* no thread: written here, the function waits */
	pthread_attr_destroy(&attr);
}

/*
 * cow through a host copy (staging.h): while the CPU side is dumped and then
 * while the function runs, every item is copied to host memory on a stream
 * of its own, smallest first (what a step writes comes before a frozen
 * bulk), with an event after each group of at most COW_GROUP_BYTES. Only a
 * little is queued at a time (COW_AHEAD groups; COW_HOLD_GROUPS while the
 * program is held for the CPU dump), topped up at every record boundary:
 * the program's own copies share the copy engine and would otherwise wait
 * behind the whole state (on the H100, 0.3 s for 16 GiB, as long as stw's
 * stall). A record about to write an item not copied yet has it queued at
 * once and waits (the dispatcher only) for its event: at worst what was
 * queued ahead of it. Once every event passed, the writer takes it from there
 * as for stw.
 */
#define COW_GROUP_BYTES (64ull << 20)
#define COW_AHEAD 2                        /* groups queued and not landed, while it runs */
#define COW_HOLD_GROUPS 8                  /* queued at the stop: the CPU dump takes >= 10 ms */

struct cow_mem {
	struct stage_host *h;
	const struct exec_dump *d;
	void *stream;
	size_t *order;           /* items, smallest first */
	size_t next;             /* order[next] is the next to queue (queued ones skipped) */
	bool *queued;
	uint32_t *group;         /* per queued item: the event behind its copy */
	void **events;
	size_t nevents, landed;  /* events [0, landed) have passed */
	size_t nqueued;
	uint64_t group_bytes;
	unsigned hold_groups, ahead;
};

/* The queue's shape: COW_* or, for tests, PHOS_COW_QUEUE=GROUP_BYTES:HOLD:AHEAD
 * ("1:1:1": an item at a time, so that records write items not queued yet). */
static void cow_queue_shape(struct cow_mem *m)
{
	const char *env = getenv("PHOS_COW_QUEUE");
	unsigned long long g;
	unsigned hold, ahead;
	int end = 0;

	m->group_bytes = COW_GROUP_BYTES;
	m->hold_groups = COW_HOLD_GROUPS;
	m->ahead = COW_AHEAD;
	if (env && *env) {
		if (sscanf(env, "%llu:%u:%u%n", &g, &hold, &ahead, &end) == 3 && !env[end] && g && hold && ahead) {
			m->group_bytes = g;
			m->hold_groups = hold;
			m->ahead = ahead;
		} else {
			phos_warn("PHOS_COW_QUEUE=%s is not GROUP_BYTES:HOLD:AHEAD (each at least 1); using the default",
				  env);
		}
	}
}

static void cow_mem_free(struct executor *ex, struct cow_mem *m)
{
	if (!m)
		return;
	if (m->stream) {
		ex->dev_ops->stream_sync(ex->dev, m->stream);
		ex->dev_ops->stream_destroy(ex->dev, m->stream);
	}
	for (size_t i = 0; i < m->nevents; i++)
		ex->dev_ops->event_destroy(ex->dev, m->events[i]);
	free(m->events);
	free(m->group);
	free(m->queued);
	free(m->order);
	stage_host_free(ex, m->h);
	free(m);
}

struct by_len {
	uint64_t len;
	size_t i;
};

static int by_len_cmp(const void *a, const void *b)
{
	const struct by_len *x = a, *y = b;

	return x->len < y->len ? -1 : x->len > y->len ? 1 : x->i < y->i ? -1 : x->i > y->i;
}

/* Queues item i's copy (in the open group). 0 or -errno with err. */
static int cow_mem_queue(struct executor *ex, struct cow_mem *m, size_t i, char *err, size_t errlen)
{
	int r = stage_host_enqueue(ex, m->h, &m->d->items[i], m->stream, err, errlen);

	if (r < 0)
		return r;
	m->queued[i] = true;
	m->group[i] = (uint32_t)m->nevents;   /* the event that closes the open group */
	m->nqueued++;
	return 0;
}

/* Closes the open group with its event. 0 or -EIO with err. */
static int cow_mem_close(struct executor *ex, struct cow_mem *m, char *err, size_t errlen)
{
	if (ex->dev_ops->event_create(ex->dev, 2 /* disable timing */, &m->events[m->nevents]) < 0) {
		phos_errf(err, errlen, "cannot make an event for the copy");
		return -EIO;
	}
	m->nevents++;
	if (ex->dev_ops->event_record(ex->dev, m->events[m->nevents - 1], m->stream) < 0) {
		phos_errf(err, errlen, "cannot record an event of the copy");
		return -EIO;
	}
	return 0;
}

/* Queues items in order until ahead groups are out (or, ahead 0, until at
 * least bytes more are queued). 0 or -errno with err. */
static int cow_mem_top_up(struct executor *ex, struct cow_mem *m, size_t ahead, uint64_t bytes, char *err,
			  size_t errlen)
{
	uint64_t since = 0, added = 0;
	bool open = false;
	int r = 0;

	while (r == 0 && m->next < m->d->n && (ahead ? m->nevents - m->landed < ahead : added < bytes)) {
		size_t i = m->order[m->next++];

		if (m->queued[i])
			continue;   /* queued early, for a record that writes it */
		r = cow_mem_queue(ex, m, i, err, errlen);
		open = r == 0;
		since += m->d->items[i].len;
		added += m->d->items[i].len;
		if (r == 0 && since >= m->group_bytes) {
			r = cow_mem_close(ex, m, err, errlen);
			open = false;
			since = 0;
		}
	}
	if (r == 0 && open)
		r = cow_mem_close(ex, m, err, errlen);
	return r;
}

/* Starts the copy of every item into h. 0 with *ret, or -errno with err (h freed). */
static int cow_mem_start(struct executor *ex, struct exec_dump *d, struct stage_host *h, struct cow_mem **ret,
			 char *err, size_t errlen)
{
	struct cow_mem *m = calloc(1, sizeof(*m));
	struct by_len *ord = calloc(d->n + 1, sizeof(*ord));
	int r = 0;

	if (!m || !ord || !(m->group = calloc(d->n + 1, sizeof(*m->group))) ||
	    !(m->events = calloc(d->n + 1, sizeof(*m->events))) || !(m->queued = calloc(d->n + 1, sizeof(bool))) ||
	    !(m->order = calloc(d->n + 1, sizeof(*m->order)))) {
		phos_errf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (m) {
		m->h = h;
		m->d = d;
		cow_queue_shape(m);
	}
	if (r == 0 && ex->dev_ops->stream_create(ex->dev, 1 /* non-blocking */, 0, &m->stream) < 0) {
		phos_errf(err, errlen, "cannot make a stream for the copy");
		r = -EIO;
	}
	for (size_t i = 0; r == 0 && i < d->n; i++)
		ord[i] = (struct by_len){ d->items[i].len, i };
	if (r == 0) {
		qsort(ord, d->n, sizeof(*ord), by_len_cmp);
		for (size_t k = 0; k < d->n; k++)
			m->order[k] = ord[k].i;
		r = cow_mem_top_up(ex, m, 0, m->hold_groups * m->group_bytes, err, errlen);
	}
	free(ord);
	if (r < 0) {
		if (m)
			cow_mem_free(ex, m);
		else
			stage_host_free(ex, h);
		return r;
	}
	*ret = m;
	return 0;
}

/* Events that passed, without waiting, then the next groups queued: 1 once
 * every item's copy has landed (cow_mem_finish's turn), 0 while not, -1 when
 * queueing failed (reported, and the checkpoint dropped). */
static int cow_mem_poll(struct executor *ex, struct cow_mem *m)
{
	char err[256];

	while (m->landed < m->nevents && ex->dev_ops->event_query(ex->dev, m->events[m->landed]) == 0)
		m->landed++;
	if (m->next < m->d->n && cow_mem_top_up(ex, m, m->ahead, 0, err, sizeof(err)) < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
		cow_drop(ex);
		return -1;
	}
	return m->nqueued == m->d->n && m->landed == m->nevents;
}

/* Waits until event e (every event for e = nevents - 1) has passed. 0 or a
 * negated cudaError_t. */
static int cow_mem_wait(struct executor *ex, struct cow_mem *m, size_t e)
{
	for (; m->landed <= e && m->landed < m->nevents; m->landed++) {
		int r = ex->dev_ops->event_sync(ex->dev, m->events[m->landed]);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Every copy landed: the writer's turn. */
static void cow_mem_finish(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct cow_mem *m = c->cow_mem;
	struct mem_write *w = calloc(1, sizeof(*w));

	if (!w) {
		exec_control_error(ex, "checkpoint: out of memory");
		cow_drop(ex);
		return;
	}
	*w = (struct mem_write){ .ex = ex, .d = c->cow, .h = m->h, .mode = PHOS_CKPT_COW, .seq = c->seq,
				 .early = c->early, .stall_s = c->stall_s };
	m->h = NULL;   /* the writer's now */
	pthread_mutex_lock(&c->lock);
	c->cow = NULL;
	c->cow_mem = NULL;
	pthread_mutex_unlock(&c->lock);
	cow_mem_free(ex, m);
	free(c->copied);
	free(c->shadow);
	c->copied = NULL;
	c->shadow = NULL;
	mem_write_start(ex, w);
}

/* Before a record writes item i (every item: i = SIZE_MAX): queues its copy
 * now if it waits its turn still, and waits for it. 0, or -1 once the
 * checkpoint failed (reported and dropped). */
static int cow_mem_protect(struct executor *ex, size_t i)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct cow_mem *m = c->cow_mem;
	bool ahead = i != SIZE_MAX && !m->queued[i];   /* queued for this record */
	char err[256];
	size_t e;
	int r = 0;

	if (i == SIZE_MAX && m->nqueued < m->d->n)
		r = cow_mem_top_up(ex, m, 0, UINT64_MAX, err, sizeof(err));
	else if (ahead && (r = cow_mem_queue(ex, m, i, err, sizeof(err))) == 0)
		r = cow_mem_close(ex, m, err, sizeof(err));
	if (r < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
		cow_drop(ex);
		return -1;
	}
	c->early += ahead;
	e = i == SIZE_MAX ? m->nevents - 1 : m->group[i];
	if (m->nevents == 0 || e < m->landed)
		return 0;
	while (m->landed < m->nevents && ex->dev_ops->event_query(ex->dev, m->events[m->landed]) == 0)
		m->landed++;
	if (e < m->landed)
		return 0;
	c->early += !ahead;   /* (a record waited for a copy: early either way) */
	r = cow_mem_wait(ex, m, e);
	if (r < 0) {
		exec_control_error(ex, "checkpoint: device-to-host copy failed (cuda error %d)", -r);
		cow_drop(ex);
		return -1;
	}
	return 0;
}

/* stw with a host copy that holds the whole state: the device into it, HELD,
 * hold while the CPU side is dumped, then the writer. 0; 1 when the state
 * outgrew h since the ask (nothing done: the ring's turn); or -errno with
 * err. h is freed either way. */
static int stw_through_memory(struct executor *ex, struct stage_host *h, double t_stop, char *err, size_t errlen)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct exec_dump *d = NULL;
	struct mem_write *w = NULL;
	struct phos_ctl_msg m = { .type = PHOS_CTL_HELD, .fd = -1 };
	int r;

	r = exec_image_plan(ex, c->dir, &d, err, errlen);
	if (r == 0 && !stage_host_holds(h, d->items, d->n)) {
		phos_info("stw: the state outgrew its host copy (%llu MiB) since the ask: written while held",
			  (unsigned long long)(h->len >> 20));
		exec_image_dump_free(d);
		stage_host_free(ex, h);
		return 1;
	}
	if (r == 0)
		r = stage_host_copy(ex, h, d->items, d->n, err, errlen);
	if (r == 0 && !(w = calloc(1, sizeof(*w))))
		r = -ENOMEM;
	if (r < 0) {
		exec_image_dump_free(d);
		stage_host_free(ex, h);
		return r;
	}
	*w = (struct mem_write){ .ex = ex, .d = d, .h = h, .mode = PHOS_CKPT_STW, .seq = ex->seq,
				 .stall_s = phos_now() - t_stop };
	m.held.mode = PHOS_CKPT_STW;
	m.held.seq = ex->seq;
	m.held.copy_s = w->stall_s;
	exec_control_send(ex, &m);
	hold(ex);
	mem_write_start(ex, w);
	return 0;
}

/* stw: everything now, then hold while the CPU side is dumped; through a
 * host copy when one was made at the ask and the state fits it, else
 * through the ring, held until gpu.data is written. */
static void checkpoint_stw(struct executor *ex, double t_stop)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct stage_host *h;
	char err[512] = "";
	uint64_t bytes = 0;
	int r;

	h = host_take(c);
	r = checkpoint_prepare(ex, err, sizeof(err));
	if (r == 0) {
		fault_kill(c->dir);
		if (h) {
			r = stw_through_memory(ex, h, t_stop, err, sizeof(err));
			if (r == 0)
				return;
			h = NULL;   /* freed */
			if (r == 1)
				r = 0;
		}
	}
	stage_host_free(ex, h);
	if (r == 0)
		r = exec_image_dump(ex, c->dir, &bytes, err, sizeof(err));
	if (r < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
	} else {
		struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };

		m.checkpointed.mode = PHOS_CKPT_STW;
		m.checkpointed.seq = ex->seq;
		m.checkpointed.data_bytes = bytes;
		m.checkpointed.stop_bytes = bytes;
		m.checkpointed.stall_s = phos_now() - t_stop;
		m.checkpointed.total_s = phos_now() - c->t_asked;
		exec_control_send(ex, &m);
		phos_info("checkpoint (stw) after record %llu: %llu bytes, %.3f s", (unsigned long long)ex->seq,
			  (unsigned long long)bytes, m.checkpointed.total_s);
	}
	/* Held either way until the controller says so: after a failure it
	 * removes its directory and resumes. */
	hold(ex);
}

/* cow: the plan now, hold while the CPU side is dumped, copy afterwards. */
static void checkpoint_cow(struct executor *ex, double t_stop)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct exec_dump *d = NULL;
	struct cow_mem *m = NULL;
	struct stage_host *h;
	char err[512] = "";
	int r;

	h = host_take(c);
	r = checkpoint_prepare(ex, err, sizeof(err));
	if (r == 0)
		r = exec_image_plan(ex, c->dir, &d, err, sizeof(err));
	if (r == 0 && h && !stage_host_holds(h, d->items, d->n)) {
		phos_info("cow: the state outgrew its host copy (%llu MiB) since the ask: copied buffer by buffer",
			  (unsigned long long)(h->len >> 20));
		stage_host_free(ex, h);
		h = NULL;
	}
	/* the device state is fixed: its copies into host memory may start at
	 * once, beside the CPU dump */
	if (r == 0 && h) {
		r = cow_mem_start(ex, d, h, &m, err, sizeof(err));
		h = NULL;
	}
	stage_host_free(ex, h);
	if (r == 0 && (!(c->copied = calloc(d->n + 1, sizeof(*c->copied))) ||
		       !(c->shadow = calloc(d->n + 1, sizeof(*c->shadow))))) {
		phos_errf(err, sizeof(err), "out of memory");
		r = -ENOMEM;
	}
	if (r < 0) {
		free(c->copied);
		free(c->shadow);
		c->copied = NULL;
		c->shadow = NULL;
		cow_mem_free(ex, m);
		exec_image_dump_free(d);
		exec_control_error(ex, "checkpoint: %s", err);
		hold(ex);
		return;
	}
	c->seq = ex->seq;
	c->left = d->n;
	c->next = 0;
	c->early = 0;
	c->reserved = 0;
	c->reserve_left = reserve_budget();
	exec_control_send(ex, &(struct phos_ctl_msg){ .type = PHOS_CTL_HELD, .fd = -1,
						      .held = { .mode = PHOS_CKPT_COW, .seq = ex->seq,
								.copy_s = phos_now() - t_stop } });
	hold(ex);
	c->stall_s = phos_now() - t_stop;
	pthread_mutex_lock(&c->lock);
	c->cow = d;
	c->cow_mem = m;
	pthread_mutex_unlock(&c->lock);
	if (m && cow_mem_poll(ex, m) == 1)
		cow_mem_finish(ex);   /* copied during the CPU dump */
	else if (!m && !c->left)
		cow_finish(ex);   /* nothing to copy */
}

/* recopy, at its start: the places, then the records flow on (no hold). */
static void recopy_begin(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct exec_recopy *rc = NULL;
	char err[512] = "";
	int r;

	r = checkpoint_prepare(ex, err, sizeof(err));
	if (r == 0)
		r = exec_recopy_begin(ex, c->dir, &rc, err, sizeof(err));
	pthread_mutex_lock(&c->lock);
	c->holding = false;
	c->recopy = rc;
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		exec_control_error(ex, "checkpoint: %s", err);
	else
		c->early = 0;
}

/* recopy, at a record boundary: one step of the rounds, then the stop. */
static void recopy_poll(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	struct exec_recopy *rc = c->recopy;
	struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };
	uint64_t bytes = 0, stop_bytes = 0;
	char err[512] = "";
	bool stop = false;
	double t_stop;
	int r;

	if (atomic_load(&c->abandon)) {   /* RESUME before the STOP it waited for */
		recopy_drop(c);
		fence_open(ex);
		phos_info("checkpoint (recopy): called off before its stop");
		return;
	}
	if (c->fencing) {   /* the stop came, and waits to be ready */
		if (!stop_ready(ex))
			return;
		r = 0;
		goto stopping;
	}
	/* paced while the function makes calls (executor.h, exec_recopy); none
	 * while a host callback is out, as a step drains the device (stop_ready) */
	if (!atomic_load(&ex->host_calls) && (atomic_load(&c->stop_asked) || c->ring_idle || phos_now() >= rc->next_at)) {
		double t0 = phos_now(), t1;

		r = exec_recopy_step(ex, rc, &stop, err, sizeof(err));
		t1 = phos_now();
		rc->next_at = t1 + (t1 - t0) * (1.0 - rc->share) / rc->share;
	} else {
		r = 0;
	}
	if (!rc->halfway && (stop || rc->next >= rc->n / 2)) {
		rc->halfway = true;
		fault_kill(c->dir);   /* halfway through the first round (or before the stop), once */
	}
	if (r == 0 && c->wait_stop && !atomic_load(&c->stop_asked)) {
		/* a pre-copy: converged once, it says so and keeps its copies current */
		if (stop) {
			if (!c->precopied) {
				struct phos_ctl_msg pm = { .type = PHOS_CTL_PRECOPIED, .fd = -1 };

				pm.precopied.rounds = rc->round;
				pm.precopied.precopy_bytes = rc->precopy_bytes;
				pm.precopied.dirty_bytes = rc->dirty_bytes;
				pm.precopied.data_end = rc->end;
				c->precopied = true;
				exec_recopy_write_layout(rc, c->dir);   /* with the clean items' hashes */
				exec_control_send(ex, &pm);
			}
			exec_recopy_rearm(rc);
		}
		return;
	}
	if (r == 0 && !stop && !(c->wait_stop && atomic_load(&c->stop_asked)))
		return;
	if (r == 0 && !stop_ready(ex))
		return;   /* records flow (and are tracked) until it may come */
stopping:
	t_stop = phos_now();
	pthread_mutex_lock(&c->lock);
	c->holding = true;
	pthread_mutex_unlock(&c->lock);
	if (r == 0)
		r = checkpoint_prepare(ex, err, sizeof(err));
	if (r == 0)
		r = exec_recopy_stop(ex, rc, c->dir, &bytes, &stop_bytes, err, sizeof(err));
	if (r < 0) {
		recopy_drop(c);
		pthread_mutex_lock(&c->lock);
		c->holding = false;
		pthread_mutex_unlock(&c->lock);
		fence_open(ex);
		exec_control_error(ex, "checkpoint: %s", err);
		return;
	}
	m.checkpointed.mode = PHOS_CKPT_RECOPY;
	m.checkpointed.seq = ex->seq;
	m.checkpointed.data_bytes = bytes;
	m.checkpointed.stall_s = phos_now() - t_stop;
	m.checkpointed.total_s = phos_now() - c->t_asked;
	m.checkpointed.rounds = rc->round;
	m.checkpointed.precopy_bytes = rc->precopy_bytes;
	m.checkpointed.stop_bytes = stop_bytes;
	recopy_drop(c);
	exec_control_send(ex, &m);
	phos_info("checkpoint (recopy) after record %llu: %llu bytes, %u round(s) copying %llu while running, "
		  "%llu at the stop, %.3f s", (unsigned long long)ex->seq, (unsigned long long)bytes,
		  m.checkpointed.rounds, (unsigned long long)m.checkpointed.precopy_bytes,
		  (unsigned long long)stop_bytes, m.checkpointed.total_s);
	hold(ex);
}

void exec_checkpoint_poll(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	double t_stop;

	if (c->recopy) {
		recopy_poll(ex);
		return;
	}
	if (c->cow_mem) {
		/* the copies run on their stream: done? */
		if (cow_mem_poll(ex, c->cow_mem) == 1)
			cow_mem_finish(ex);
		return;
	}
	if (c->cow) {
		/* the background: one more buffer per record boundary */
		while (c->next < c->cow->n && c->copied[c->next])
			c->next++;
		if (c->next < c->cow->n)
			cow_copy(ex, c->next, false);
		return;
	}
	if (!atomic_load_explicit(&c->asked, memory_order_acquire))
		return;
	/* records flow until it may come; a recopy's rounds begin at once,
	 * but not while a host callback is out (its start drains the device) */
	if (c->mode == PHOS_CKPT_RECOPY ? atomic_load(&ex->host_calls) != 0 : !stop_ready(ex))
		return;
	t_stop = phos_now();
	pthread_mutex_lock(&c->lock);
	c->holding = true;
	atomic_store(&c->asked, false);
	pthread_mutex_unlock(&c->lock);
	if (c->mode == PHOS_CKPT_COW)
		checkpoint_cow(ex, t_stop);
	else if (c->mode == PHOS_CKPT_RECOPY)
		recopy_begin(ex);
	else
		checkpoint_stw(ex, t_stop);
}
