/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints of a running function (see snapshotter.h, phos_checkpoint_take).
 *
 *   controller (phos-fn run)                  executor            function
 *   DIR.tmp-XXXXXX (image.h: all or nothing)
 *   criu dump made ready (criu.h, phos_criu_dump_ahead): its start-up done,
 *   it waits at its gate; the program runs on (a recopy that waits for its
 *   caller's moment makes it ready after the pre-copy, before STOP)
 *   CHECKPOINT {mode, tmp}            ──▶     (recopy: copies buffers into tmp
 *                                             while the records flow, in rounds)
 *                                             stops between two records, drains,
 *                                             writes gpu.data, modules, manifest
 *                                     ◀──     CHECKPOINTED
 *   the gate opens: criu dump --leave-running of the function (blocked in its
 *   next call or running CPU code) into tmp/cpu; without a gate program
 *   (phos_criu_gate_find), CRIU starts only now, its start-up in the stall
 *   RESUME (at CRIU's post-dump, the   ──▶     takes records again
 *   image whole, the program about to
 *   be let go; without the gate, once
 *   CRIU ended)
 *   manifest: CPU facts, stdio and channel keys, the channel memfd's number,
 *   the checkpoint's mode and times; fsync; rename over DIR
 *
 * RESUME goes out on every path once CHECKPOINT was sent, so that a failed
 * checkpoint never leaves the program stopped. The executor dying at any
 * point means no commit: the previous checkpoint in DIR stays as it was.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control.h"
#include "criu.h"
#include "fault.h"
#include "image.h"
#include "log.h"
#include "snapshotter.h"

#define CHANNEL_MEMFD_NAME "/memfd:phos-channel"

/* The number of the channel memfd the preload keeps open in pid (channel.h,
 * "adopting"): 0 and *ret_fd, or -ENOENT. */
static int find_channel_memfd(pid_t pid, int *ret_fd)
{
	char path[64], target[256];
	struct dirent *d;
	DIR *dir;
	int found = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((d = readdir(dir))) {
		int fd = atoi(d->d_name);

		if (d->d_name[0] == '.' || phos_criu_fd_key(pid, fd, target, sizeof(target)) < 0)
			continue;
		if (!strncmp(target, CHANNEL_MEMFD_NAME, strlen(CHANNEL_MEMFD_NAME))) {
			if (found >= 0) {   /* two channels: which one is ours is unclear */
				closedir(dir);
				return -EEXIST;
			}
			found = fd;
		}
	}
	closedir(dir);
	if (found < 0)
		return -ENOENT;
	*ret_fd = found;
	return 0;
}

/* Why the executor (a child of ours, pid exe; 0: unknown) closed its control
 * socket: 1 when it was killed by a signal, 0 when it exited (it does when its
 * program ends), -1 unknown. Waits up to 2 s for it to end; reaps nothing. */
static int executor_killed(pid_t exe)
{
	for (int i = 0; exe > 0 && i < 200; i++) {
		siginfo_t si = { 0 };

		if (waitid(P_PID, (id_t)exe, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
			return -1;
		if (si.si_pid == exe)
			return si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED;
		usleep(10000);
	}
	return -1;
}

static bool disk_full(const char *why)
{
	return strstr(why, strerror(ENOSPC)) || strstr(why, strerror(EDQUOT));
}

/* Receives the executor's answer, which must be of type want (else ERROR):
 * 0 with *m, or -EIO / -ENOSPC with err (*executor_gone set when its
 * control socket closed). */
static int await_answer(const struct phos_checkpoint_target *t, enum phos_ctl_type want, enum phos_ctl_type also,
			struct phos_ctl_msg *m, bool *executor_gone, char *err, size_t errlen)
{
	char line[512] = "";
	int r = phos_ctl_recv(t->control_fd, -1, m, line, sizeof(line));

	if (r < 0) {
		*executor_gone = r == -EPIPE;
		if (r == -EPIPE && executor_killed(t->executor_pid) == 0)   /* it ends with its program */
			phos_errf(err, errlen, "the program ended before it could be checkpointed; nothing was committed");
		else
			phos_errf(err, errlen, "the executor %s during the checkpoint; nothing was committed",
				  r == -EPIPE ? "died" : line[0] ? line : strerror(-r));
		return -EIO;
	}
	if (m->type != want && (!also || m->type != also)) {
		bool error = m->type == PHOS_CTL_ERROR;

		phos_errf(err, errlen, "%s", error ? m->error.reason : phos_ctl_type_name(m->type));
		r = error && disk_full(m->error.reason) ? -ENOSPC : -EIO;
		phos_ctl_msg_exit(m);
		return r;
	}
	return 0;
}

/* Makes the CRIU dump of t's program into cpu ready (*ret), when there is a
 * gate program (else *ret stays NULL, and the dump runs whole at its moment):
 * 0, or -errno with err. */
static int cpu_dump_ahead(const struct phos_checkpoint_target *t, const char *cpu, const uint64_t *ino,
			  struct phos_criu_ahead **ret, char *err, size_t errlen)
{
	char gate[4096], line[1024];
	int r;

	*ret = NULL;
	if (phos_criu_gate_find(gate, sizeof(gate)) < 0)
		return 0;
	r = phos_criu_dump_ahead(t->criu, gate, t->fn_pid, cpu, ino, 1, PHOS_CRIU_LEAVE_RUNNING, ret, line,
				 sizeof(line));
	if (r < 0)
		phos_errf(err, errlen, "CRIU could not get ready to dump the program: %s", line);
	return r;
}

/* RESUME as soon as CRIU has written the CPU image, before it lets the
 * program run (phos_criu_dump_go_then): the executor is taking records again
 * when the program's first one comes, not CRIU's exit later. Without the
 * gate's word, it is sent once CRIU ended. */
struct early_resume {
	const struct phos_checkpoint_target *t;
	double t_stop;
	double stall_s;   /* from the stop to this RESUME */
	int r;            /* the send's */
	bool done;
};

static void resume_at_dumped(void *arg)
{
	struct early_resume *e = arg;

	if (phos_fault("checkpoint_controller_kill"))
		raise(SIGKILL);
	e->r = phos_ctl_send(e->t->control_fd, &(struct phos_ctl_msg){ .type = PHOS_CTL_RESUME, .fd = -1 });
	e->stall_s = phos_now() - e->t_stop;
	e->done = true;
}

/* When the executor stopped the program: held_s ago by its own account, but
 * not before t_asked (a figure out of range is not believed). */
static double stopped_at(double t_asked, double held_s)
{
	double now = phos_now();

	return held_s >= 0 && held_s < now - t_asked ? now - held_s : t_asked;
}

/* What CRIU needs to know of the program's channel, while the process is
 * surely there: its socket's inode and its memfd's descriptor number. */
static int channel_of(const struct phos_checkpoint_target *t, uint64_t *ret_ino, int *ret_memfd, char *err,
		      size_t errlen)
{
	char chan[64];
	struct stat sb;
	int r;

	snprintf(chan, sizeof(chan), "/proc/%d/fd/%d", (int)t->fn_pid, t->channel_fd);
	if (stat(chan, &sb) < 0 || !S_ISSOCK(sb.st_mode)) {
		phos_errf(err, errlen, "the program (pid %d) has no channel socket at fd %d", (int)t->fn_pid,
			  t->channel_fd);
		return -ESRCH;
	}
	*ret_ino = (uint64_t)sb.st_ino;
	r = find_channel_memfd(t->fn_pid, ret_memfd);
	if (r < 0) {
		phos_errf(err, errlen, "the program (pid %d) holds %s channel memfd (has it made a CUDA call yet?)",
			  (int)t->fn_pid, r == -EEXIST ? "more than one" : "no");
		return r == -ENOENT ? -EAGAIN : -ESRCH;
	}
	return 0;
}

/* The descriptors a restore hands in fresh: stdio and the channel socket,
 * keyed as CRIU sees them in the program (read now: the program may end as
 * soon as it is let go), into fds[4]. */
static int fds_of(const struct phos_checkpoint_target *t, struct phos_image_fd *fds, uint32_t *ret_n, char *err,
		  size_t errlen)
{
	uint32_t nfds = 0;

	for (int fd = 0; fd < 4; fd++) {
		struct phos_image_fd *f = &fds[nfds];
		bool ours = fd < 3 && t->stdio_fds;
		int want = fd == 3 ? t->channel_fd : ours ? t->stdio_fds[fd] : fd;
		pid_t of = ours ? 0 : t->fn_pid;   /* 0: ours */

		f->fd = fd;
		if (phos_criu_fd_key(of, want, f->key, sizeof(f->key)) < 0) {
			phos_errf(err, errlen, "the program's fd %d cannot be named for a restore", want);
			return -EBADF;
		}
		/* CRIU names a regular file (stdout sent to a file, /dev/null) by
		 * its path without the leading '/': so must its --inherit-fd key
		 * be, or CRIU reopens the file and refuses one that has grown. */
		if (f->key[0] == '/')
			memmove(f->key, f->key + 1, strlen(f->key));
		nfds++;
	}
	*ret_n = nfds;
	return 0;
}

/* What a checkpoint's manifest says of it (its total_s aside). */
static void checkpoint_record(struct phos_image *img, enum phos_ckpt_mode mode, const struct phos_checkpoint_stats *st,
			      int memfd_no)
{
	img->checkpoint.present = true;
	snprintf(img->checkpoint.mode, sizeof(img->checkpoint.mode), "%s", phos_ckpt_mode_name(mode));
	img->checkpoint.channel_fd = memfd_no;
	img->checkpoint.seq = st->seq;
	img->checkpoint.stall_s = st->stall_s;
	img->checkpoint.early = st->early;
	img->checkpoint.rounds = st->rounds;
	img->checkpoint.precopy_bytes = st->precopy_bytes;
	img->checkpoint.stop_bytes = st->stop_bytes;
	img->checkpoint.gpu_s = st->gpu_s;
	img->checkpoint.copy_s = st->copy_s;
	img->checkpoint.host_copy = st->host_copy;
	img->checkpoint.reserve_copies = st->reserve_copies;
	img->checkpoint.cpu_s = st->cpu_s;
}

/* The executor's first answer to a checkpoint into *st: HELD (the device
 * state held, written later) or CHECKPOINTED. Returns when the program was
 * stopped (t_stop: when it was asked to). */
static double stop_answer(const struct phos_ctl_msg *m, enum phos_ckpt_mode mode, double t_stop,
			  struct phos_checkpoint_stats *st)
{
	if (m->type == PHOS_CTL_HELD) {
		/* held since the executor's stop (copy_s ago), not since the ask:
		 * a stw's host copy is made before the stop, while the program runs */
		st->seq = m->held.seq;
		st->copy_s = m->held.copy_s;
		return stopped_at(t_stop, m->held.copy_s);
	}
	st->gpu_s = m->checkpointed.total_s;
	st->data_bytes = m->checkpointed.data_bytes;
	st->seq = m->checkpointed.seq;
	st->rounds = m->checkpointed.rounds;
	st->precopy_bytes = m->checkpointed.precopy_bytes;
	st->stop_bytes = m->checkpointed.stop_bytes;
	if (mode == PHOS_CKPT_STW)
		st->copy_s = m->checkpointed.stall_s;
	/* stw, recopy: held from the executor's stop on (stall_s there) until
	 * RESUME; recopy's program ran during the rounds. */
	return stopped_at(t_stop, m->checkpointed.stall_s);
}

/* One checkpoint being taken (phos_checkpoint_take's steps share it). */
struct ckpt_run {
	const struct phos_checkpoint_target *t;
	enum phos_ckpt_mode mode;
	struct phos_ctl_msg m;
	char tmp[4096], cpu[4200], line[1024];
	struct phos_criu_ahead *ahead;
	struct early_resume early;
	bool sent, executor_gone, held;
	struct phos_image_fd fds[4];
	uint32_t nfds;
	uint64_t ino;
	int memfd_no;
};

/* The temporary directory, what the CRIU image must name (the channel, the
 * stdio), the CHECKPOINT message, and CRIU started ahead (stopped at its
 * gate) unless the pre-copy comes first. 0 or -errno with err. */
static int ckpt_prepare(struct ckpt_run *c, const char *out_dir, char *err, size_t errlen)
{
	const struct phos_checkpoint_target *t = c->t;
	int r;

	phos_image_dir_sweep(out_dir);
	r = phos_image_dir_begin(out_dir, c->tmp, sizeof(c->tmp));
	if (r < 0) {
		c->tmp[0] = '\0';
		return phos_errf_rc(err, errlen, r, "cannot create a checkpoint beside %s: %s", out_dir, strerror(-r));
	}
	snprintf(c->cpu, sizeof(c->cpu), "%s/cpu", c->tmp);
	if (mkdir(c->cpu, 0700) < 0)
		return phos_errf_rc(err, errlen, -errno, "mkdir %s: %s", c->cpu, strerror(errno));
	r = channel_of(t, &c->ino, &c->memfd_no, err, errlen);
	if (r == 0)
		r = fds_of(t, c->fds, &c->nfds, err, errlen);
	if (r < 0)
		return r;
	/* The GPU side, at a record boundary. */
	c->m.checkpoint.mode = c->mode;
	c->m.checkpoint.wait_stop = c->mode == PHOS_CKPT_RECOPY && t->precopied;
	if (strlen(c->tmp) >= sizeof(c->m.checkpoint.dir))
		return phos_errf_rc(err, errlen, -ENAMETOOLONG, "%s: the path is too long", out_dir);
	memcpy(c->m.checkpoint.dir, c->tmp, strlen(c->tmp) + 1);
	if (!c->m.checkpoint.wait_stop)
		return cpu_dump_ahead(t, c->cpu, &c->ino, &c->ahead, err, errlen);
	return 0;
}

/* Sends msg on the control socket: 0, or -EIO with err (the executor is gone). */
static int ckpt_send(struct ckpt_run *c, const struct phos_ctl_msg *msg, char *err, size_t errlen)
{
	int r = phos_ctl_send(c->t->control_fd, msg);

	if (r < 0) {
		c->executor_gone = true;
		return phos_errf_rc(err, errlen, -EIO, "the executor is gone (%s)", strerror(-r));
	}
	return 0;
}

/* CHECKPOINT sent (a recopy's pre-copy run to its stop first), and the
 * executor's answer once the program is stopped: c->held when the device
 * state is still to be written (after RESUME). 0 with *ret_t_stop, or
 * -errno with err. */
static int ckpt_stop(struct ckpt_run *c, struct phos_checkpoint_stats *st, double *ret_t_stop, char *err,
		     size_t errlen)
{
	const struct phos_checkpoint_target *t = c->t;
	double t_stop;
	int r = ckpt_send(c, &c->m, err, errlen);

	if (r < 0)
		return r;
	c->sent = true;
	if (c->m.checkpoint.wait_stop) {
		/* the pre-copy: converged, then the caller's moment to stop */
		r = await_answer(t, PHOS_CTL_PRECOPIED, 0, &c->m, &c->executor_gone, err, errlen);
		if (r == 0 && (r = t->precopied(t->precopied_arg, c->tmp, &c->m)) < 0) {
			if (!*err)
				phos_errf(err, errlen, "called off before its stop");
			r = -ECANCELED;
		}
		if (r == 0)
			r = cpu_dump_ahead(t, c->cpu, &c->ino, &c->ahead, err, errlen);
		if (r == 0)
			r = ckpt_send(c, &(struct phos_ctl_msg){ .type = PHOS_CTL_STOP, .fd = -1 }, err, errlen);
		if (r < 0)
			return r;   /* RESUME: a pre-copy not stopped is dropped */
	}
	t_stop = phos_now();
	/* stw: CHECKPOINTED, the device state written, or HELD, the device
	 * state in host memory (written after RESUME); cow: HELD, stopped with
	 * the device state fixed, copied after RESUME. recopy: CHECKPOINTED. */
	r = await_answer(t, c->mode == PHOS_CKPT_COW ? PHOS_CTL_HELD : PHOS_CTL_CHECKPOINTED,
			 c->mode == PHOS_CKPT_STW ? PHOS_CTL_HELD : 0, &c->m, &c->executor_gone, err, errlen);
	if (r < 0)
		return r;
	c->held = c->m.type == PHOS_CTL_HELD;
	*ret_t_stop = stop_answer(&c->m, c->mode, t_stop, st);
	return 0;
}

/* The CPU side, while the executor holds the channel: CRIU dumps the
 * program and leaves it running, RESUME goes out as soon as CRIU is done
 * with it; then, when held, the device state's end. 0 or -errno with err. */
static int ckpt_cpu(struct ckpt_run *c, double t_stop, struct phos_checkpoint_stats *st, char *err, size_t errlen)
{
	const struct phos_checkpoint_target *t = c->t;
	double t_cpu = phos_now();
	int r;

	c->early.t = t;
	c->early.t_stop = t_stop;
	if (c->ahead) {
		r = phos_criu_dump_go_then(c->ahead, resume_at_dumped, &c->early, c->line, sizeof(c->line));
		c->ahead = NULL;
	} else {
		r = phos_criu_dump_flags(t->criu, t->fn_pid, c->cpu, &c->ino, 1, PHOS_CRIU_LEAVE_RUNNING, -1, c->line,
					 sizeof(c->line));
	}
	st->cpu_s = phos_now() - t_cpu;
	if (r == 0 && !c->early.done)   /* no word from the gate (or no gate): now, CRIU ended */
		resume_at_dumped(&c->early);
	if (c->early.done) {   /* RESUME went out: not again at the end */
		c->sent = false;
		c->executor_gone = c->early.r < 0;
	}
	if (r < 0) {
		phos_errf(err, errlen, "CRIU could not dump the program: %s", c->line);
		return disk_full(c->line) ? -ENOSPC : r;
	}
	st->stall_s = c->early.stall_s;
	if (c->early.r < 0) {
		/* The executor died after it wrote its side: the program was cut
		 * off from it, so whatever came after is not worth keeping, but this
		 * image is whole. Still, a checkpoint of a program whose executor is
		 * gone is not what was asked: refused. */
		c->executor_gone = true;
		return phos_errf_rc(err, errlen, -EIO, "the executor died during the checkpoint; nothing was committed");
	}
	if (c->held) {
		/* The program runs; its buffers are being copied (cow) or written
		 * from host memory (stw). */
		r = await_answer(t, PHOS_CTL_CHECKPOINTED, 0, &c->m, &c->executor_gone, err, errlen);
		if (r < 0)
			return r;
		st->gpu_s = c->m.checkpointed.total_s;
		st->data_bytes = c->m.checkpointed.data_bytes;
		st->early = c->m.checkpointed.early;
		st->reserve_copies = c->m.checkpointed.reserve_copies;
		st->host_copy = c->m.checkpointed.host_copy;
	}
	return 0;
}

/* The new checkpoint read back, its CPU image checksummed, its manifest
 * written (with what it is: mode, timings, the channel's memfd), and the
 * directory committed as out_dir. 0 or -errno with err. */
static int ckpt_commit(struct ckpt_run *c, const char *out_dir, double t0, struct phos_checkpoint_stats *st,
		       char *err, size_t errlen)
{
	struct phos_image *img = NULL;
	int r;

	r = phos_image_read(c->tmp, &img, c->line, sizeof(c->line));
	if (r < 0)
		return phos_errf_rc(err, errlen, r, "the new checkpoint does not read back: %s", c->line);
	snprintf(img->function, sizeof(img->function), "%s", c->t->function ? c->t->function : "");
	r = phos_image_cpu_hash(c->tmp, img, c->line, sizeof(c->line));
	if (r < 0) {
		phos_errf(err, errlen, "checksumming the CRIU image: %s", c->line);
		goto out;
	}
	img->nfds = c->nfds;
	memcpy(img->fds, c->fds, sizeof(c->fds));
	checkpoint_record(img, c->mode, st, c->memfd_no);
	img->checkpoint.total_s = phos_now() - t0;
	r = phos_image_write_manifest(c->tmp, img);
	if (r < 0) {
		phos_errf(err, errlen, "writing the manifest: %s", strerror(-r));
		goto out;
	}
	r = phos_image_dir_commit(c->tmp, out_dir);
	if (r < 0) {
		phos_errf(err, errlen, "committing %s: %s", out_dir, strerror(-r));
		goto out;
	}
	st->gpu_bytes = img->gpu_bytes;
out:
	phos_image_free(img);
	return r;
}

int phos_checkpoint_take(const struct phos_checkpoint_target *t, enum phos_ckpt_mode mode, const char *out_dir,
			 struct phos_checkpoint_stats *ret_stats, char *err, size_t errlen)
{
	struct ckpt_run c = { .t = t, .mode = mode, .m = { .type = PHOS_CTL_CHECKPOINT, .fd = -1 }, .memfd_no = -1 };
	struct phos_checkpoint_stats st = { .mode = mode };
	double t0 = phos_now(), t_stop = 0;
	int r;

	*err = '\0';
	if (t->fn_pid <= 0 || t->control_fd < 0 || !t->criu)
		return -EINVAL;
	r = ckpt_prepare(&c, out_dir, err, errlen);
	if (r == 0)
		r = ckpt_stop(&c, &st, &t_stop, err, errlen);
	if (r == 0)
		r = ckpt_cpu(&c, t_stop, &st, err, errlen);
	if (r == 0)
		r = ckpt_commit(&c, out_dir, t0, &st, err, errlen);
	if (r == 0) {
		st.total_s = phos_now() - t0;
		if (ret_stats)
			*ret_stats = st;
	}
	phos_criu_dump_drop(c.ahead);   /* CRIU ends at its gate, the program untouched */
	if (c.sent && !c.executor_gone)
		phos_ctl_send(t->control_fd, &(struct phos_ctl_msg){ .type = PHOS_CTL_RESUME, .fd = -1 });
	if (r < 0 && c.tmp[0])
		phos_image_dir_abort(c.tmp);
	return r;
}
