/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints of running instances (invoker.h, "checkpoints.c"): the
 * endpoint, the checkpoint of an instance its caller holds, and the requests
 * handed to the thread that holds a busy one.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "image.h"
#include "invoker.h"
#include "log.h"

/* A checkpoint asked of a busy instance; lives on the asker's stack until done. */
struct inv_ckpt_req {
	enum phos_ckpt_mode mode;
	bool done;
	int r;
	char err[512];
	struct phos_checkpoint_stats st;
};

/* How long an asker waits for a busy instance's thread beyond the call's limit. */
#define ASK_SLACK_S 600.0

/* The checkpoints that calls of an earlier invoker may resume from (renamed resume-ID). */
struct kept {
	char (*names)[48];
	size_t n, cap;
};

static void keep_one(const char *id, const char *checkpoint, void *arg)
{
	struct kept *k = arg;
	char from[PATH_MAX], to[PATH_MAX];
	struct stat st;

	snprintf(from, sizeof(from), "%s/checkpoints/%s", inv_cfg.state_dir, checkpoint);
	snprintf(to, sizeof(to), "%s/checkpoints/resume-%s", inv_cfg.state_dir, id);
	if (strcmp(from, to) && (lstat(from, &st) < 0 || !S_ISDIR(st.st_mode) || rename(from, to) < 0))
		return;   /* gone (or not a checkpoint): the call ends as failed */
	if (k->n == k->cap) {
		char(*n)[48] = realloc(k->names, (k->cap * 2 + 8) * sizeof(*n));

		if (!n)
			return;
		k->names = n;
		k->cap = k->cap * 2 + 8;
	}
	snprintf(k->names[k->n++], 48, "resume-%s", id);
}

static bool kept_has(const struct kept *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->names[i], name))
			return true;
	return false;
}

int inv_checkpoints_init(void)
{
	char dir[PATH_MAX];
	struct kept kept = { 0 };
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/checkpoints", inv_cfg.state_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (chmod(dir, 0700) < 0)
		return -errno;
	/* the calls store is open: checkpoints of async calls that were running stay */
	inv_calls_store_resumable(keep_one, &kept);
	d = opendir(dir);
	if (!d) {
		free(kept.names);
		return -errno;
	}
	while ((de = readdir(d))) {
		char path[PATH_MAX + 300];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || kept_has(&kept, de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		/* (a name with .tmp- in it is a checkpoint being written when we stopped) */
		if (phos_image_dir_remove(path) == 0)
			phos_info("removed %s: a checkpoint of an instance of an earlier invoker", path);
		else
			phos_warn("cannot remove %s, a checkpoint of an earlier invoker's instance", path);
	}
	closedir(d);
	if (kept.n)
		phos_warn("kept %zu checkpoints of calls that were running when the last invoker stopped: they "
			  "resume from them", kept.n);
	free(kept.names);
	return 0;
}

/* Bytes waiting in a pipe (either end), or -1. */
static int pipe_pending(int fd)
{
	int n = 0;

	return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

int inv_checkpoint_take(struct inv_function *f, struct inv_instance *in, enum phos_ckpt_mode mode,
			struct phos_checkpoint_stats *st, char *err, size_t errlen)
{
	const int stdio[3] = { in->in_fd, in->out_fd, in->err_fd };
	struct phos_checkpoint_target t = {
		.fn_pid = in->proc.fn_pid, .channel_fd = 3, .control_fd = in->proc.control_fd,
		.executor_pid = in->proc.executor_pid, .criu = inv_cfg.paths.criu, .function = f->name,
		.stdio_fds = stdio,
	};
	int r;

	/* The restored copy gets fresh pipes: what is in the old ones now would
	 * be lost (a request not read yet, an answer not taken yet). */
	if (pipe_pending(in->in_fd) != 0 || pipe_pending(in->out_fd) != 0) {
		phos_errf(err, errlen, "instance %u is between a request and its answer; try again", in->id);
		return -EAGAIN;
	}
	if (pthread_mutex_trylock(&in->ctl_lock) != 0) {
		phos_errf(err, errlen, "instance %u is being moved; try again", in->id);
		return -EAGAIN;
	}
	/* (ckpt_dir is set under ctl_lock: a move sets it from another thread) */
	if (!in->ckpt_dir && asprintf(&in->ckpt_dir, "%s/checkpoints/%s-%u", inv_cfg.state_dir, f->name, in->id) < 0) {
		in->ckpt_dir = NULL;
		pthread_mutex_unlock(&in->ctl_lock);
		phos_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = phos_checkpoint_take(&t, mode, in->ckpt_dir, st, err, errlen);
	pthread_mutex_unlock(&in->ctl_lock);
	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	in->checkpoints++;
	in->ckpt_at = (double)time(NULL);
	snprintf(in->ckpt_mode, sizeof(in->ckpt_mode), "%s", phos_ckpt_mode_name(mode));
	pthread_mutex_unlock(&f->lock);
	phos_info("%s: instance %u checkpointed (%s): stall %.1f ms, total %.1f ms, %.1f MiB of GPU data", f->name,
		  in->id, phos_ckpt_mode_name(mode), st->stall_s * 1e3, st->total_s * 1e3,
		  (double)st->gpu_bytes / (1 << 20));
	return 0;
}

void inv_checkpoint_serve(struct inv_function *f, struct inv_instance *in)
{
	struct inv_ckpt_req *q;
	uint64_t v;

	if (in->ckpt_evfd >= 0)
		(void)!read(in->ckpt_evfd, &v, sizeof(v));   /* (non-blocking) */
	pthread_mutex_lock(&f->lock);
	q = in->ckpt_req;
	pthread_mutex_unlock(&f->lock);
	if (!q)
		return;
	q->r = inv_checkpoint_take(f, in, q->mode, &q->st, q->err, sizeof(q->err));
	pthread_mutex_lock(&f->lock);
	q->done = true;
	in->ckpt_req = NULL;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

void inv_checkpoint_abandon(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	if (in->ckpt_req) {
		in->ckpt_req->r = -ESRCH;
		snprintf(in->ckpt_req->err, sizeof(in->ckpt_req->err), "instance %u ended before its checkpoint",
			 in->id);
		in->ckpt_req->done = true;
		in->ckpt_req = NULL;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
}

static struct inv_instance *find(struct inv_function *f, unsigned id)
{
	for (struct inv_instance *in = f->instances; in; in = in->next)
		if (in->id == id)
			return in;
	return NULL;
}

/* The mode of the request's body ({} or {"mode": "stw|cow|recopy"}), default stw. */
static int parse_body(const char *body, size_t len, enum phos_ckpt_mode *mode, char *err, size_t errlen)
{
	const char *key;
	json_error_t je;
	json_t *j, *v;

	*mode = PHOS_CKPT_STW;
	if (!len)
		return 0;
	j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		phos_errf(err, errlen, "the body must be a JSON object: {\"mode\": \"stw\" | \"cow\" | \"recopy\"}");
		json_decref(j);
		return -EINVAL;
	}
	json_object_foreach(j, key, v) {
		if (strcmp(key, "mode")) {
			phos_errf(err, errlen, "unknown field '%.64s'", key);
			json_decref(j);
			return -EINVAL;
		}
		if (!json_is_string(v) || phos_ckpt_mode_parse(json_string_value(v), mode) < 0) {
			phos_errf(err, errlen, "mode must be \"stw\", \"cow\" or \"recopy\"");
			json_decref(j);
			return -EINVAL;
		}
	}
	json_decref(j);
	return 0;
}

static int status_of(int r)
{
	switch (r) {
	case -EAGAIN: case -ESRCH: return 409;
	case -ENOSPC: return 507;
	default: return 500;
	}
}

int inv_checkpoint_request(const char *name, unsigned id, const char *body, size_t len, json_t **ret_body)
{
	struct inv_ckpt_req q = { 0 };
	struct inv_function *f;
	struct inv_instance *in;
	bool idle;
	int code = 200;

#define FAIL(c, ...)                                                            \
	do {                                                                     \
		char m_[600];                                                    \
		snprintf(m_, sizeof(m_), __VA_ARGS__);                            \
		*ret_body = json_pack("{s:s}", "error", m_);                      \
		code = (c);                                                      \
		goto out;                                                        \
	} while (0)

	if (parse_body(body, len, &q.mode, q.err, sizeof(q.err)) < 0) {
		*ret_body = json_pack("{s:s}", "error", q.err);
		return 400;
	}
	f = inv_function_get(name);
	if (!f) {
		*ret_body = json_pack("{s:s}", "error", "no such function");
		return 404;
	}
	pthread_mutex_lock(&f->lock);
	in = find(f, id);
	if (!in) {
		pthread_mutex_unlock(&f->lock);
		FAIL(404, "function %s has no instance %u", name, id);
	}
	if (inv_draining || f->removed) {
		pthread_mutex_unlock(&f->lock);
		FAIL(503, "%s", inv_draining ? "shutting down" : "the function was removed");
	}
	if (in->ckpt_req || (in->state != INV_INST_IDLE && in->state != INV_INST_BUSY)) {
		pthread_mutex_unlock(&f->lock);
		FAIL(409, "instance %u is %s", id, in->ckpt_req ? "being checkpointed already" :
		     in->state == INV_INST_STARTING ? "still starting" : "stopping");
	}
	idle = in->state == INV_INST_IDLE;
	if (idle) {
		/* taken as a call takes it: nobody else uses it meanwhile */
		pthread_mutex_unlock(&f->lock);
		if (inv_instance_hold(f, id, 0, &in, q.err, sizeof(q.err)) < 0)
			FAIL(409, "%s", q.err);
		q.r = inv_checkpoint_take(f, in, q.mode, &q.st, q.err, sizeof(q.err));
		inv_instance_release(f, in);
		pthread_mutex_lock(&f->lock);
	} else {
		/* the thread running its call takes it */
		struct timespec abs;
		uint64_t one = 1;

		in->ckpt_req = &q;
		if (in->ckpt_evfd < 0 || write(in->ckpt_evfd, &one, sizeof(one)) != sizeof(one))
			phos_warn("%s: instance %u: cannot signal its checkpoint request", f->name, id);
		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec += (time_t)(f->limits.timeout_ms / 1000 + ASK_SLACK_S);
		while (!q.done && pthread_cond_timedwait(&f->cond, &f->lock, &abs) != ETIMEDOUT)
			;
		if (!q.done) {
			/* in may be gone: found again by its id */
			struct inv_instance *again = find(f, id);

			if (again && again->ckpt_req == &q)
				again->ckpt_req = NULL;
			q.r = -ETIMEDOUT;
			snprintf(q.err, sizeof(q.err), "instance %u did not get to its checkpoint in time", id);
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (q.r < 0) {
		phos_warn("%s: checkpoint of instance %u failed: %s", name, id, q.err);
		inv_redact_paths(q.err);
		FAIL(q.r == -ETIMEDOUT ? 504 : status_of(q.r), "checkpoint of instance %u failed: %s", id, q.err);
	}
	*ret_body = json_pack("{s:s,s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:i,s:I,s:I}", "function", name, "instance", id,
			      "mode", phos_ckpt_mode_name(q.mode), "stall_s", q.st.stall_s, "total_s", q.st.total_s,
			      "gpu_s", q.st.gpu_s, "copy_s", q.st.copy_s, "cpu_s", q.st.cpu_s, "gpu_bytes",
			      (json_int_t)q.st.gpu_bytes,
			      "data_bytes", (json_int_t)q.st.data_bytes, "rounds", (int)q.st.rounds, "precopy_bytes",
			      (json_int_t)q.st.precopy_bytes, "stop_bytes", (json_int_t)q.st.stop_bytes);
out:
	inv_function_unref(f);
	return code;
#undef FAIL
}

void inv_checkpoint_periodic(struct inv_function *f, struct inv_instance *in)
{
	unsigned every = f->limits.checkpoint_ms;
	struct phos_checkpoint_stats st;
	char err[512];
	int c = inv_checkpoint_take(f, in, PHOS_CKPT_COW, &st, err, sizeof(err));

	if (c == 0) {
		in->ckpt_of_call = true;
		if (inv_async_ctx.id) {   /* resumable after our death too */
			const char *base = strrchr(in->ckpt_dir, '/');

			inv_calls_store_ckpt(inv_async_ctx.id, f->name, base ? base + 1 : in->ckpt_dir,
					     inv_async_ctx.resumes);
		}
	} else if (c != -EAGAIN) {
		phos_warn("%s: periodic checkpoint of instance %u failed: %s", f->name, in->id, err);
	}
	/* (-EAGAIN: the request is still being read; soon again) */
	in->ckpt_next = phos_now() + (c == -EAGAIN ? every / 4000.0 : every / 1000.0);
}
