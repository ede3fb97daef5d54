/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints of a running function (issue 11), stop-the-world so far.
 *
 *   control thread                     dispatcher (exec_serve)
 *   CHECKPOINT {mode, dir} ──ask──▶    asked? (checked before each record, and
 *                          kick        phos_channel_kick wakes it when idle)
 *                                      ├─ drain the device
 *                                      ├─ exec_image_dump(dir): the serve-point
 *                                      │  snapshot writer, every live buffer,
 *                                      │  modules, variables, streams, events,
 *                                      │  cuBLAS handles
 *                                      ├─ CHECKPOINTED {bytes, stall, total}
 *                                      └─ hold: the ring is not read, so the
 *   RESUME (or the socket closed) ──▶     function blocks in its next call
 *                                         (or keeps running CPU code) while
 *                                         the controller CRIU-dumps it
 *
 * The stop is at a record boundary: the record before it completed (its reply
 * published, its device work drained), the one after it untouched in the ring.
 * dir is the controller's temporary directory; the controller adds the CPU
 * side and commits it (image.h: all or nothing), so an executor killed here
 * leaves the previous checkpoint as it was.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "executor.h"
#include "fault.h"
#include "image.h"
#include "log.h"
#include "loader.h"

static unsigned live(const struct handle_table *t)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < t->cap; i++)
		n += t->slot[i] != NULL;
	return n;
}

void exec_checkpoint_ask(struct executor *ex, enum phos_ckpt_mode mode, const char *dir)
{
	struct exec_ckpt *c = &ex->ckpt;
	bool busy;

	if (mode != PHOS_CKPT_STW) {
		exec_control_error(ex, "checkpoint mode %s is not implemented yet (stw is)", phos_ckpt_mode_name(mode));
		return;
	}
	pthread_mutex_lock(&c->lock);
	busy = atomic_load(&c->asked) || c->holding;
	if (!busy) {
		c->mode = mode;
		snprintf(c->dir, sizeof(c->dir), "%s", dir);
		c->t_asked = phos_now();
		c->resume = false;
		atomic_store(&c->asked, true);
	}
	pthread_mutex_unlock(&c->lock);
	if (busy) {
		exec_control_error(ex, "a checkpoint is already under way");
		return;
	}
	if (ex->ch)
		phos_channel_kick(ex->ch);
}

void exec_checkpoint_resume(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;

	pthread_mutex_lock(&c->lock);
	c->resume = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* Drains and writes the device state; 0 and *ret_bytes, or -errno with err. */
static int checkpoint_write(struct executor *ex, const char *dir, uint64_t *ret_bytes, char *err, size_t errlen)
{
	unsigned pools = live(&ex->pools);
	int r;

	/* Host-memory regions are in the image (exec_image_dump) and the
	 * restoring executor maps them again from the restored function
	 * (main.c, adopting). Memory pools are not in the image: a function
	 * restored at phos_fn_serve makes them again (phos_pool_resend), one
	 * restored mid-call could not. Refused rather than restored without. */
	if (pools) {
		phos_errf(err, errlen, "the program holds %u memory pool(s) (cudaMallocAsync, cudaMemPoolCreate); "
			  "checkpoints of such programs are not supported yet", pools);
		return -ENOTSUP;
	}
	if (ex->loader && !loader_done(ex->loader)) {
		phos_errf(err, errlen, "an on-demand restore is still moving buffers in; try again later");
		return -EBUSY;
	}
	r = ex->dev_ops->synchronize(ex->dev);
	if (r < 0) {
		phos_errf(err, errlen, "the device failed while draining (cuda error %d)", -r);
		return -EIO;
	}
	if (ex->pending_error) {
		/* Kept for the function's next synchronous call, as without a checkpoint. */
		phos_errf(err, errlen, "the program has an unreported error of asynchronous work (cuda error %d)",
			  -ex->pending_error);
		return -EIO;
	}
	/* Fault point checkpoint_kill: the executor dies halfway through writing. */
	if (phos_fault("checkpoint_kill")) {
		char path[PHOS_CTL_PATH_MAX + 16];
		FILE *f;

		snprintf(path, sizeof(path), "%s/gpu.data", dir);
		f = fopen(path, "we");
		if (f) {
			fputs("half", f);
			fclose(f);
		}
		raise(SIGKILL);
	}
	return exec_image_dump(ex, dir, ret_bytes, err, errlen);
}

void exec_checkpoint_poll(struct executor *ex)
{
	struct exec_ckpt *c = &ex->ckpt;
	char err[512] = "";
	uint64_t bytes = 0;
	double t_stop;
	int r;

	if (!atomic_load_explicit(&c->asked, memory_order_acquire))
		return;
	t_stop = phos_now();
	pthread_mutex_lock(&c->lock);
	c->holding = true;
	atomic_store(&c->asked, false);
	pthread_mutex_unlock(&c->lock);

	r = checkpoint_write(ex, c->dir, &bytes, err, sizeof(err));
	if (r < 0) {
		exec_control_error(ex, "checkpoint: %s", err);
	} else {
		struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };

		m.checkpointed.mode = c->mode;
		m.checkpointed.seq = ex->seq;
		m.checkpointed.data_bytes = bytes;
		m.checkpointed.stall_s = phos_now() - t_stop;
		m.checkpointed.total_s = phos_now() - c->t_asked;
		exec_control_send(ex, &m);
		phos_info("checkpoint (%s) after record %llu: %llu bytes, %.3f s", phos_ckpt_mode_name(c->mode),
			  (unsigned long long)ex->seq, (unsigned long long)bytes, m.checkpointed.total_s);
	}
	/* Held either way until the controller says so: after a failure it
	 * removes its directory and resumes. */
	pthread_mutex_lock(&c->lock);
	while (!c->resume)
		pthread_cond_wait(&c->cond, &c->lock);
	c->holding = false;
	c->resume = false;
	pthread_mutex_unlock(&c->lock);
}
