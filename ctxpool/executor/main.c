/* SPDX-License-Identifier: MIT */
/*
 * phos-executor: opens a device context, reserves the fixed arena, and serves
 * one function process on the channel socket it is given.
 *
 *   phos-executor --fd N [--device auto|cuda|sim] [--gpu N | --gpus A,B,...] [--trace FILE]
 *                 [--arena-base ADDR] [--arena-size BYTES] [--no-warm]
 *                 [--control-fd N] [--snapshot-to DIR | --restore-from DIR]
 *
 * The control descriptor speaks runtime/proto/control.h; HELLO goes out first.
 * --snapshot-to: when the function reaches phos_fn_serve, dump the device state
 * into DIR and report DUMPED on the control descriptor (exec_image.c).
 * --restore-from: rebuild the device state of the snapshot in DIR before
 * serving (its arena is used), then report READY; ERROR otherwise.
 * --on-demand: report READY once the device objects are made, and bring the
 * buffers in while the function runs (restore/engine.h).
 * --pool: stay warm and serve one function after another (pool_loop below).
 * --adopt-channel PID:FD (with --restore-from a checkpoint): the restored
 * function keeps its channel; map its memfd (fd FD of process PID) and go on
 * from the ring's tail instead of making a new channel (channel.h, "adopting").
 * While a function is served (but for --snapshot-to) the control thread takes
 * CHECKPOINT and RESUME (exec_checkpoint.c).
 *
 * --gpu N: the host GPU (CUDA ordinal, all GPUs visible) that this executor
 * owns; the function sees it as its device 0 and sees no other, as a container
 * given one GPU does. Every GPU stays visible to the executor itself, so that
 * NCCL between executors of different GPUs uses peer access (CUDA IPC), which
 * hiding GPUs with CUDA_VISIBLE_DEVICES would disable.
 *
 * --gpus A,B,...: several host GPUs, seen by the function as its devices 0,
 * 1, ... (a function that drives several GPUs from one process). The arena
 * is split in equal parts, one per device (devices_open); each device may
 * reach the others' memory where P2P allows. Such an executor runs functions
 * and is snapshotted and restored (a whole restore, not on demand), but takes
 * no checkpoint of a running function yet.
 *
 * PHOS_GPU, PHOS_GPUS, PHOS_TRACE and PHOS_ARENA_BASE give defaults for --gpu, --trace ("%p" in it: the
 * executor's pid, one trace per executor of a pool) and --arena-base
 * (sanitizer builds move the arena: ASan's heap sits at 0x600000000000).
 *
 * PHOS_EXECUTOR_PARENT=PID (set by phos_executor_spawn): the executor ends
 * when that process does (parent_watch below), so that a SIGKILLed invoker
 * leaves no executor behind. Not PR_SET_PDEATHSIG: that fires when the
 * parent's *thread* that forked ends, and invokers spawn executors from
 * connection threads that end long before the executor should.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "fault.h"
#include "staging.h"
#include "image.h"
#include "engine.h"
#include "log.h"

/* Arena memory belongs to the device whose part of the arena it is in. */
static int map_chunks(void *ctx, uint64_t addr, uint64_t len)
{
	struct executor *ex = ctx;
	int r;

	/* a restore's buffer shared with the snapshot's other instances (exec_share.c) */
	if (ex->nshare_pending && (r = exec_share_map(ex, addr, len)) != 0)
		return r < 0 ? r : 0;
	return ex->dev_ops->map(ex->devs[exec_device_at(ex, addr)], addr, len);
}

static void unmap_chunks(void *ctx, uint64_t addr, uint64_t len)
{
	struct executor *ex = ctx;

	exec_share_unmapped(ex, addr, len);
	ex->dev_ops->unmap(ex->devs[exec_device_at(ex, addr)], addr, len);
}

/* Makes the channel for the next function and pins it, unless there is one.
 * A pooled executor does this while idle: pinning takes milliseconds and holds
 * the driver's lock, which would stall the restore engine's copies if it
 * happened once the cold start is under way (measured on the H100: the first
 * buffers of an on-demand restore landed 8-20 ms late). Failing is not fatal:
 * serve_one makes an unpinned channel then. */
static void channel_prepare(struct executor *ex)
{
	size_t len;
	void *shm;

	if (ex->next_ch || phos_channel_make(PHOS_RING_DEFAULT, &ex->next_ch) < 0)
		return;
	shm = phos_channel_shm(ex->next_ch, &len);
	ex->next_ch_pinned = ex->dev_ops->host_register(ex->dev, shm, len) == 0;
	if (!ex->next_ch_pinned)
		phos_warn("could not pin the channel (records are then copied, not read by DMA)");
}

/* Unpins (when pinned) and frees a channel; accepts NULL. */
static void channel_drop(struct executor *ex, struct phos_channel *ch, bool pinned)
{
	if (ch && pinned)
		ex->dev_ops->host_unregister(ex->dev, phos_channel_shm(ch, NULL));
	phos_channel_free(ch);
}

/* The end of the mapping of process pid that starts at addr; 0 and *ret_end,
 * or -ENOENT. */
static int mapping_end(pid_t pid, uint64_t addr, uint64_t *ret_end)
{
	char path[64], line[512];
	unsigned long long start, end;
	FILE *f;
	int r = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx", &start, &end) == 2 && start == addr) {
			*ret_end = end;
			r = 0;
			break;
		}
	}
	fclose(f);
	return r;
}

/* Tests (fault driver_takes_regions): the driver's own mappings land where
 * the checkpoint's host regions were, as they did on an H200. Only what is
 * still free is taken: the window and exec_regions_hold keep their ranges. */
static void driver_takes_regions(const struct phos_image *img)
{
	for (uint32_t i = 0; i < img->nregions; i++) {
		const struct phos_image_region *g = &img->regions[i];
		bool took = mmap((void *)(uintptr_t)g->exec_addr, g->size, PROT_NONE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0) != MAP_FAILED;

		phos_warn("injected fault: host region %u's address %#llx %s", g->id, (unsigned long long)g->exec_addr,
			  took ? "taken" : "kept (reserved before the device opened)");
	}
}

/* Maps again the host-memory regions of a restored checkpoint (image.h,
 * struct phos_image_region) from the restored function, where the function
 * and the old executor had them: the function holds device addresses of
 * them (cudaHostGetDevicePointer, copies by region). The restored memfd is
 * reached through the function's mapping (/proc/PID/map_files, as root, as
 * CRIU runs). 0, or -errno with err. */
static int adopt_regions(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < img->nregions; i++) {
		const struct phos_image_region *g = &img->regions[i];
		struct exec_region *reg;
		char path[96];
		uint64_t end = 0;
		int fd, r;

		r = mapping_end(ex->adopt_pid, g->addr, &end);
		if (r == 0 && end - g->addr < g->size)
			r = -ERANGE;
		if (r < 0) {
			phos_errf(err, errlen, "host region %u is not mapped at %#llx in the restored program", g->id,
				  (unsigned long long)g->addr);
			return r;
		}
		snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", (int)ex->adopt_pid,
			 (unsigned long long)g->addr, (unsigned long long)end);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			phos_errf(err, errlen, "host region %u: %s: %s", g->id, path, strerror(errno));
			return r;
		}
		r = exec_region_map(ex, g->id, fd, g->size, g->exec_addr, &reg);
		if (r == 0 && (uint64_t)(uintptr_t)reg->ptr != g->exec_addr) {
			phos_errf(err, errlen, "host region %u cannot be mapped at %#llx, its device address", g->id,
				  (unsigned long long)g->exec_addr);
			return -EADDRINUSE;   /* the region stays in the table: scrubbed */
		}
		if (r < 0) {
			phos_errf(err, errlen, "host region %u cannot be mapped (cuda error %d)", g->id, -r);
			return -ENOMEM;
		}
		reg->fn_addr = g->addr;
	}
	return 0;
}

/* Maps the channel of a function restored from a checkpoint (--adopt-channel)
 * for the socket fd (taken over), pinned when the device allows, and its
 * host-memory regions. 0, or -errno with err. */
static int adopt_channel(struct executor *ex, int fd, const struct phos_image *img, char *err, size_t errlen)
{
	char path[64];
	size_t len;
	void *shm;
	int memfd, r;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)ex->adopt_pid, ex->adopt_fd);
	memfd = open(path, O_RDWR | O_CLOEXEC);
	if (memfd < 0) {
		r = -errno;
		phos_errf(err, errlen, "the restored program's channel (%s): %s", path, strerror(errno));
		close(fd);
		return r;
	}
	r = phos_channel_adopt(memfd, fd, &ex->ch);
	if (r < 0) {
		phos_errf(err, errlen, "the restored program's channel (%s): %s", path, strerror(-r));
		return r;
	}
	shm = phos_channel_shm(ex->ch, &len);
	ex->ch_pinned = ex->dev_ops->host_register(ex->dev, shm, len) == 0;
	if (!img)
		return 0;
	/* The device may place the module variables elsewhere this time (the
	 * driver chooses: another address in every process). The restored
	 * program's runtime asks again for what it had learned of them (it sees
	 * the adoption, channel.h); but an address the program itself was given
	 * (cudaGetSymbolAddress, cuModuleGetGlobal: "given" in the image) may
	 * sit anywhere in its memory and would be used at its old place:
	 * refused. */
	for (uint32_t i = 0; i < img->nvars; i++) {
		const struct exec_var *v = handle_get(&ex->vars, img->vars[i].id);
		uint32_t d = img->vars[i].device;   /* the copy of that device (several GPUs) */
		uint64_t here;

		if (!v || !img->vars[i].size)
			continue;
		here = d == 0 ? v->addr : d < EXEC_MAX_DEVICES ? v->peer_addr[d] : 0;
		if (here != img->vars[i].addr && img->vars[i].given) {
			phos_errf(err, errlen, "variable %s (device %u) is at %#llx here, not at %#llx as in the checkpoint, "
				  "and the program was given its address (cudaGetSymbolAddress or cuModuleGetGlobal); "
				  "restoring a checkpoint of such a program needs the variable at its old place",
				  img->vars[i].name, d, (unsigned long long)here, (unsigned long long)img->vars[i].addr);
			return -EADDRNOTAVAIL;
		}
		if (here != img->vars[i].addr)
			phos_debug("variable %s (device %u) moved from %#llx to %#llx; the program asks again",
				   img->vars[i].name, d, (unsigned long long)img->vars[i].addr, (unsigned long long)here);
	}
	return adopt_regions(ex, img, err, errlen);
}

/* One function: its snapshot loaded first when img is given (on_demand: the
 * buffers stream in while it runs), then its calls until it says goodbye or
 * goes away; the executor is scrubbed afterwards. The channel socket fd is
 * taken over. */
static int serve_one(struct executor *ex, int fd, const char *dir, const struct phos_image *img, bool on_demand,
		     double t_open, double t0)
{
	struct exec_control_thread ct = { .stop_fd = -1, .stop_wr = -1 };
	char err[512] = "";
	int r = 0;

	/* Before the restore engine starts (pinning would stall its copies). */
	channel_prepare(ex);
	if (img) {
		r = exec_image_load(ex, dir, img, on_demand, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "phos-executor: restoring %s: %s\n", dir, err);
			exec_control_error(ex, "%s", err);
			exec_scrub(ex);
			close(fd);
			return r;
		}
	}
	if (ex->adopt_pid) {
		r = adopt_channel(ex, fd, img, err, sizeof(err));
		if (r < 0) {
			channel_drop(ex, ex->ch, ex->ch_pinned);
			ex->ch = NULL;
			exec_control_error(ex, "%s", err);
			exec_scrub(ex);
			return r;
		}
	} else {
		ex->ch = ex->next_ch;
		ex->ch_pinned = ex->next_ch_pinned;
		ex->next_ch = NULL;
		ex->next_ch_pinned = false;
		if (phos_fault("channel_late"))
			sleep(1);
		r = ex->ch ? phos_channel_attach(ex->ch, fd) : (close(fd), -ENOMEM);
	}
	if (r == -EPIPE || r == -ECONNRESET) {
		/* The function ended before it took its channel: a program that
		 * made no CUDA call (modules go out at first use) while the device
		 * opened. Its exit is its own, not a failure of ours. */
		phos_info("the function ended before it took its channel");
		channel_drop(ex, ex->ch, ex->ch_pinned);
		ex->ch = NULL;
		exec_scrub(ex);
		return 0;
	}
	if (r < 0) {
		channel_drop(ex, ex->ch, ex->ch_pinned);
		ex->ch = NULL;
		exec_control_error(ex, "cannot set up the channel: %s", strerror(-r));
		exec_scrub(ex);
		return r;
	}
	if (img) {
		struct phos_ctl_msg m = { .type = PHOS_CTL_READY, .fd = -1 };

		m.ready.open_s = t_open;
		m.ready.load_s = phos_now() - t0 - t_open;
		m.ready.data_s = ex->load_data_s;
		m.ready.data_bytes = img->gpu_bytes;
		/* (a fill loads every buffer first: exec_image_load) */
		m.ready.on_demand = on_demand && ex->share_mode != EXEC_SHARE_FILL;
		/* a fill: the buffers the snapshot's next instances map (SHARED each) */
		if (ex->share_mode == EXEC_SHARE_FILL) {
			double ts = phos_now();
			size_t n = exec_share_publish(ex, img);

			phos_info("shared %zu buffers of %s in %.1f ms", n, dir, (phos_now() - ts) * 1e3);
		}
		exec_control_send(ex, &m);
	}
	if (!ex->snapshot_dir)
		exec_control_start(ex, &ct);
	/* The channel is pinned (channel_prepare): H2D copies read records by DMA. */
	r = exec_serve(ex);
	if (r < 0)
		phos_err("serving failed: %s", strerror(-r));
	exec_control_stop(&ct);
	exec_scrub(ex);
	channel_drop(ex, ex->ch, ex->ch_pinned);
	ex->ch = NULL;
	ex->ch_pinned = false;
	ex->goodbye = false;
	return r;
}

/*
 * --pool: a warm executor that serves one function after another. It reports
 * IDLE on the control socket and waits for a job (runtime/proto/control.h):
 *   SERVE + fd               the descriptor is a function's channel socket
 *   RESTORE {dir} + fd       ... restore dir (stop-the-world, or on demand:
 *                            restore/engine.h), then serve it; a checkpoint's
 *                            with its adoption: as --adopt-channel
 *   HOT {dirs}               make exactly these snapshots hot (exec_hot.c);
 *                            answers HOT_DONE or ERROR
 *   PREPARE {dir}            pin a move's pre-copy for the next RESTORE
 *                            (exec_hot.c); answers PREPARED or ERROR
 *   UNPREPARE                drop it unused
 * After the function is gone it is scrubbed (arena mappings released, module
 * cache... kept by the driver; hot snapshots kept) and reports IDLE again.
 * The control socket closing ends it, and so does a frame it cannot read (the
 * stream is out of step then: its pool replaces it).
 */
static void hot_job(struct executor *ex, const struct phos_ctl_msg *job)
{
	char err[512] = "";

	/* The codec bounds the list at PHOS_CTL_HOT_MAX. */
	_Static_assert(PHOS_CTL_HOT_MAX <= PHOS_HOT_MAX, "a hot list fits the executor");
	if (exec_hot_set(ex, job->hot.dirs, job->hot.n, err, sizeof(err)) < 0)
		exec_control_error(ex, "hot: %s", err);
	else
		exec_control_send(ex, &(struct phos_ctl_msg){ .type = PHOS_CTL_HOT_DONE, .fd = -1,
							      .hot_done = { .n = ex->nhot, .bytes = ex->hot_bytes } });
}

/* RESTORE's image, read (or taken from the cache) and checked against this
 * executor: its arena, its GPU count, and a channel to adopt exactly when it
 * is a checkpoint's. 0 and *ret_img, or the error in err. */
static int restore_job_image(struct executor *ex, const struct phos_ctl_msg *job, const struct phos_image **ret_img,
			     char *err, size_t errlen)
{
	const struct phos_image *img;
	int r = exec_image_cached(ex, job->restore.dir, &img, err, errlen);

	if (r < 0)
		return r;
	*ret_img = img;
	if (img->arena_base != ex->arena_base || img->arena_size != ex->arena_size) {
		snprintf(err, errlen, "the snapshot's arena differs from this pool's");
		return -EINVAL;
	}
	if (img->devices != (uint32_t)ex->ndevs) {
		snprintf(err, errlen, "the snapshot was taken over %u GPU(s), this pool's executors own %d", img->devices,
			 ex->ndevs);
		return -EINVAL;
	}
	if (img->checkpoint.present != (job->restore.adopt.pid != 0)) {
		/* a checkpoint's program keeps its channel; a snapshot's gets a new one */
		snprintf(err, errlen, img->checkpoint.present ? "a checkpoint is restored only with the restored "
			 "program's channel to adopt" : "a snapshot's program has no channel to adopt");
		return -EINVAL;
	}
	if (job->restore.adopt.pid && phos_fault("pool_adopt_refused")) {
		snprintf(err, errlen, "injected fault: pool_adopt_refused");
		return -EINVAL;
	}
	return 0;
}

static int pool_loop(struct executor *ex)
{
	char err[512];

	for (;;) {
		const struct phos_image *img = NULL;
		struct phos_ctl_msg job;
		const char *dir = NULL;
		bool on_demand = false;
		double t0;
		int r;

		channel_prepare(ex);   /* while idle, off the next cold start's path */
		exec_nccl_warm(ex);    /* the same: NCCL's initialisation over several GPUs */
		exec_control_send(ex, &(struct phos_ctl_msg){ .type = PHOS_CTL_IDLE, .fd = -1 });
		r = phos_ctl_recv(ex->control_fd, -1, &job, err, sizeof(err));
		/* SHAREs come right before their RESTORE, without an IDLE between */
		while (r == 0 && job.type == PHOS_CTL_SHARE) {
			if (exec_share_pending_add(ex, &job) < 0)
				phos_warn("share: more than %u shared buffers; the rest are restored privately",
					  EXEC_SHARE_MAX);
			r = phos_ctl_recv(ex->control_fd, -1, &job, err, sizeof(err));
		}
		if (r == -EPIPE)
			return 0;
		if (r < 0) {
			phos_err("control: %s", err[0] ? err : strerror(-r));
			return r;
		}
		ex->share_mode = job.type != PHOS_CTL_RESTORE || !job.restore.share ? EXEC_SHARE_NONE
				 : ex->nshare_pending ? EXEC_SHARE_USE : EXEC_SHARE_FILL;
		if (ex->share_mode == EXEC_SHARE_NONE)
			exec_share_pending_clear(ex);
		t0 = phos_now();
		switch (job.type) {
		case PHOS_CTL_HOT:
			hot_job(ex, &job);
			phos_ctl_msg_exit(&job);
			continue;
		case PHOS_CTL_PREPARE: {
			uint64_t bytes = 0, free_all = 0;

			/* free device memory: the controller's check before a move */
			for (int d = 0; d < ex->ndevs; d++) {
				uint64_t fr = 0, total;

				if (ex->dev_ops->mem_info(ex->devs[d], &fr, &total) == 0)
					free_all += fr;
			}
			if (phos_fault("prepare_gpu_full"))
				free_all = 0;
			if (exec_prep_set(ex, job.prepare.dir, &bytes, err, sizeof(err)) < 0)
				exec_control_error(ex, "prepare: %s", err);
			else
				exec_control_send(ex, &(struct phos_ctl_msg){ .type = PHOS_CTL_PREPARED, .fd = -1,
									      .prepared = { bytes, free_all } });
			phos_ctl_msg_exit(&job);
			continue;
		}
		case PHOS_CTL_UNPREPARE:
			exec_prep_clear(ex);
			phos_ctl_msg_exit(&job);
			continue;
		case PHOS_CTL_RESTORE:
			dir = job.restore.dir;
			on_demand = job.restore.on_demand;
			r = restore_job_image(ex, &job, &img, err, sizeof(err));
			ex->image_read_s = phos_now() - t0;
			if (r < 0) {
				exec_control_error(ex, "%s: %s", dir, err);
				exec_prep_clear(ex);   /* (a prepared pre-copy serves one restore) */
				phos_ctl_msg_exit(&job);
				continue;
			}
			break;
		case PHOS_CTL_SERVE:
			break;
		default:
			exec_control_error(ex, "unknown job '%s'", phos_ctl_type_name(job.type));
			phos_ctl_msg_exit(&job);
			continue;
		}
		/* serve_one takes the channel socket over. */
		if (job.type == PHOS_CTL_RESTORE) {
			ex->adopt_pid = (pid_t)job.restore.adopt.pid;
			ex->adopt_fd = job.restore.adopt.fd;
		}
		serve_one(ex, job.fd, dir, img, on_demand, 0, t0);
		ex->adopt_pid = 0;
		ex->adopt_fd = 0;
		job.fd = -1;
		phos_ctl_msg_exit(&job);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-executor --fd N [--device auto|cuda|sim] [--gpu N | --gpus A,B,...] [--trace FILE]\n"
		   "                     [--arena-base ADDR] [--arena-size BYTES] [--no-warm]\n"
		   "                     [--control-fd N] [--snapshot-to DIR | --restore-from DIR [--on-demand]\n"
		   "                     [--adopt-channel PID:FD] | --pool]\n");
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* The host GPU of --gpu / PHOS_GPU (unset or empty: 0), checked against the
 * devices the backend sees; a message in err otherwise. */
static int gpu_ordinal(const struct phos_device_ops *ops, const char *gpu, const char *what, int *ret_ordinal,
		       char *err, size_t errlen)
{
	uint64_t v;
	int count = 0;

	if (!gpu || !*gpu) {
		*ret_ordinal = 0;
		return 0;
	}
	if (parse_u64(gpu, &v) < 0 || v > 1023) {
		snprintf(err, errlen, "bad GPU '%s' (%s): a device ordinal, 0 or more", gpu, what);
		return -EINVAL;
	}
	if (ops->device_count(NULL, &count) < 0 || (uint64_t)count <= v) {
		snprintf(err, errlen, "GPU %llu (%s) is not there: the %s device has %d", (unsigned long long)v, what,
			 ops->name, count);
		return -ENODEV;
	}
	*ret_ordinal = (int)v;
	return 0;
}

/* --gpus / PHOS_GPUS: a comma-separated list of distinct host GPUs (at most
 * EXEC_MAX_DEVICES), each checked as gpu_ordinal checks one. */
static int gpu_list(const struct phos_device_ops *ops, const char *list, int *ordinals, int *ret_n, char *err,
		    size_t errlen)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	/* strtok_r skips empty fields: those are refused here */
	if (strlen(list) >= sizeof(buf) || !*list || list[0] == ',' || list[strlen(list) - 1] == ',' ||
	    strstr(list, ",,")) {
		snprintf(err, errlen, "bad GPU list '%.64s' (--gpus or PHOS_GPUS): ordinals separated by commas", list);
		return -EINVAL;
	}
	strcpy(buf, list);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int o, r;

		if (n == EXEC_MAX_DEVICES) {
			snprintf(err, errlen, "too many GPUs in '%s' (--gpus or PHOS_GPUS): at most %d", list,
				 EXEC_MAX_DEVICES);
			return -EINVAL;
		}
		r = gpu_ordinal(ops, tok, "--gpus or PHOS_GPUS", &o, err, errlen);
		if (r < 0)
			return r;
		for (int i = 0; i < n; i++) {
			if (ordinals[i] == o) {
				snprintf(err, errlen, "GPU %d is named twice in '%s' (--gpus or PHOS_GPUS)", o, list);
				return -EINVAL;
			}
		}
		ordinals[n++] = o;
	}
	*ret_n = n;
	return 0;
}

struct dev_open {
	struct executor *ex;
	int d, r;
	bool warm;
	pthread_t th;
};

static void *dev_open_main(void *arg)
{
	struct dev_open *o = arg;
	struct executor *ex = o->ex;

	o->r = ex->dev_ops->open(ex->ordinals[o->d], ex->arena_base + (uint64_t)o->d * ex->dev_stride, ex->dev_span,
				 o->warm, &ex->devs[o->d]);
	return NULL;
}

/* Opens every device of ex (ordinals, ndevs set), each on its part of the
 * arena and at once (a context and cuBLAS's warm-up each take a few hundred
 * ms), and lets each reach the others' memory where the hardware can. */
static int devices_open(struct executor *ex, bool warm)
{
	struct dev_open o[EXEC_MAX_DEVICES];
	int r = 0;

	if (!phos_arena_parts(ex->arena_size, ex->ndevs, &ex->dev_stride, &ex->dev_span)) {
		phos_err("the arena (%llu GiB) is too small for %d GPUs", (unsigned long long)(ex->arena_size >> 30),
			 ex->ndevs);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	for (int d = 0; d < ex->ndevs; d++) {
		o[d] = (struct dev_open){ .ex = ex, .d = d, .warm = warm };
		if (d == 0 || pthread_create(&o[d].th, NULL, dev_open_main, &o[d]) != 0)
			o[d].d = -d - 1;   /* opened on this thread below */
	}
	for (int d = 0; d < ex->ndevs; d++) {
		if (o[d].d < 0) {
			o[d].d = d;
			dev_open_main(&o[d]);
		}
	}
	for (int d = 1; d < ex->ndevs; d++) {
		if (o[d].th)
			pthread_join(o[d].th, NULL);
	}
	for (int d = 0; d < ex->ndevs && r == 0; d++)
		r = o[d].r;
	if (r < 0)
		return r;   /* the caller closes those that opened */
	ex->peers = true;
	for (int a = 0; a < ex->ndevs; a++) {
		for (int b = 0; b < ex->ndevs; b++) {
			if (a != b && ex->dev_ops->peer_add(ex->devs[a], ex->devs[b]) < 0) {
				phos_warn("GPU %d cannot reach GPU %d's memory", ex->ordinals[b], ex->ordinals[a]);
				ex->peers = false;
			}
		}
	}
	ex->cur = 0;
	exec_use_device(ex, 0);
	return 0;
}

static void *parent_watch_main(void *arg)
{
	struct pollfd p = { .fd = (int)(intptr_t)arg, .events = POLLIN };

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	/* Nobody is left to serve: not a clean exit (no scrub, no goodbye). */
	_exit(70);
	return NULL;
}

/* Ends this process when PHOS_EXECUTOR_PARENT does (see the top). The pidfd
 * is opened first and checked against getppid() after, so that it is our
 * parent's and not a process that reused its pid; a parent already gone
 * ends us at once. 0, or -errno when the watch cannot be set up. */
static int parent_watch(void)
{
	const char *env = getenv("PHOS_EXECUTOR_PARENT");
	pthread_t th;
	char *end;
	long pid;
	int fd;

	if (!env)
		return 0;
	pid = strtol(env, &end, 10);
	unsetenv("PHOS_EXECUTOR_PARENT");   /* not for anything we start */
	if (*end || pid <= 1)
		return -EINVAL;
	fd = pidfd_open((pid_t)pid, 0);
	if ((fd < 0 && errno == ESRCH) || getppid() != (pid_t)pid)
		_exit(70);   /* the parent is gone already */
	if (fd < 0)
		return -errno;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || pthread_create(&th, NULL, parent_watch_main, (void *)(intptr_t)fd)) {
		close(fd);
		return -EAGAIN;
	}
	pthread_detach(th);
	return 0;
}

/* A RESTORE may come after up to EXEC_SHARE_MAX SHAREs, each with its
 * descriptor: the soft limit of open files goes up to make room, within
 * the hard one. */
static void nofile_room(void)
{
	struct rlimit rl;
	const rlim_t want = EXEC_SHARE_MAX + 1024;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* What the command line asks (usage()). */
struct exec_args {
	const char *device, *trace, *gpu, *gpus, *restore_from;
	uint64_t fd;
	bool pool, on_demand, warm;
};

/* Parses the command line into *a and ex (arena, control socket, snapshot
 * and adoption): -1 to go on, else the exit status (0 for --help). */
static int parse_args(int argc, char **argv, struct executor *ex, struct exec_args *a)
{
	static const struct option opts[] = {
		{ "fd", required_argument, NULL, 'f' },
		{ "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "gpus", required_argument, NULL, 'G' },
		{ "trace", required_argument, NULL, 't' },
		{ "arena-base", required_argument, NULL, 'b' },
		{ "arena-size", required_argument, NULL, 's' },
		{ "no-warm", no_argument, NULL, 'n' },
		{ "control-fd", required_argument, NULL, 'c' },
		{ "snapshot-to", required_argument, NULL, 'S' },
		{ "restore-from", required_argument, NULL, 'R' },
		{ "pool", no_argument, NULL, 'P' },
		{ "on-demand", no_argument, NULL, 'O' },
		{ "adopt-channel", required_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t cfd;
	int c;

	*a = (struct exec_args){ .device = "auto", .trace = getenv("PHOS_TRACE"), .gpu = getenv("PHOS_GPU"),
				 .gpus = getenv("PHOS_GPUS"), .fd = UINT64_MAX, .warm = true };
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			if (parse_u64(optarg, &a->fd) < 0 || a->fd > 65535) {
				fprintf(stderr, "phos-executor: bad --fd '%s'\n", optarg);
				return 2;
			}
			break;
		case 'd': a->device = optarg; break;
		case 'g': a->gpu = optarg; a->gpus = NULL; break;
		case 'G': a->gpus = optarg; a->gpu = NULL; break;
		case 't': a->trace = optarg; break;
		case 'b':
		case 's':
			if (parse_u64(optarg, c == 'b' ? &ex->arena_base : &ex->arena_size) < 0) {
				fprintf(stderr, "phos-executor: bad --%s '%s'\n",
					c == 'b' ? "arena-base" : "arena-size", optarg);
				return 2;
			}
			break;
		case 'n': a->warm = false; break;
		case 'c':
			if (parse_u64(optarg, &cfd) < 0 || cfd > 65535) {
				fprintf(stderr, "phos-executor: bad --control-fd '%s'\n", optarg);
				return 2;
			}
			ex->control_fd = (int)cfd;
			break;
		case 'S': ex->snapshot_dir = optarg; break;
		case 'R': a->restore_from = optarg; break;
		case 'P': a->pool = true; break;
		case 'O': a->on_demand = true; break;
		case 'A': {
			int pid, afd, end = 0;

			if (sscanf(optarg, "%d:%d%n", &pid, &afd, &end) != 2 || optarg[end] || pid <= 0 || afd < 0) {
				fprintf(stderr, "phos-executor: bad --adopt-channel '%s' (PID:FD)\n", optarg);
				return 2;
			}
			ex->adopt_pid = pid;
			ex->adopt_fd = afd;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (a->pool && (ex->control_fd < 0 || a->restore_from || ex->snapshot_dir)) {
		fprintf(stderr, "phos-executor: --pool needs --control-fd and takes its jobs there\n");
		return 2;
	}
	if ((a->fd == UINT64_MAX && !a->pool) || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (ex->adopt_pid && !a->restore_from) {
		fprintf(stderr, "phos-executor: --adopt-channel needs --restore-from (a checkpoint)\n");
		return 2;
	}
	if (ex->snapshot_dir && a->restore_from) {
		fprintf(stderr, "phos-executor: --snapshot-to and --restore-from exclude each other\n");
		return 2;
	}
	if (ex->snapshot_dir && ex->control_fd < 0) {
		fprintf(stderr, "phos-executor: --snapshot-to needs --control-fd\n");
		return 2;
	}
	return -1;
}

/* --trace FILE ("%p" in it: this executor's pid), line-buffered: an executor
 * usually ends by a signal, and a trace is read to see where time went.
 * 0, or -errno (said on stderr). */
static int trace_open(struct executor *ex, const char *trace)
{
	char path[4096];
	const char *pid_at = strstr(trace, "%p");

	/* "%p" in the path: one trace per executor (a pool runs several). */
	if (pid_at && snprintf(path, sizeof(path), "%.*s%d%s", (int)(pid_at - trace), trace, (int)getpid(),
			       pid_at + 2) < (int)sizeof(path))
		trace = path;
	ex->trace = fopen(trace, "we");
	if (!ex->trace) {
		fprintf(stderr, "phos-executor: cannot open trace %s: %s\n", trace, strerror(errno));
		return -errno;
	}
	setvbuf(ex->trace, NULL, _IOLBF, 1 << 16);
	return 0;
}

/* Everything main made, released at its end. */
static void teardown(struct executor *ex, struct phos_image *img)
{
	struct handle_table *tables[] = { &ex->streams, &ex->events, &ex->modules, &ex->funcs,
					  &ex->vars, &ex->regions, &ex->blas, &ex->pools, &ex->nccl,
					  &ex->texes, &ex->arrays, &ex->dnn_handles, &ex->dnn_descs, &ex->graphs,
					  &ex->fft_plans, &ex->rand_gens };

	exec_dnn_cache_clear(ex);
	exec_image_cache_clear(ex);
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		handle_table_exit(tables[i]);
	channel_drop(ex, ex->ch, ex->ch_pinned);
	channel_drop(ex, ex->next_ch, ex->next_ch_pinned);
	exec_hot_clear(ex);
	exec_prep_clear(ex);
	exec_modcache_clear(ex);
	exec_share_pending_clear(ex);
	phos_bufmap_free(ex->bufs);
	free(ex->held);
	stage_host_reap(ex, true);
	stage_ring_free(ex);
	exec_nccl_warm_drop(ex);
	for (int d = ex->ndevs - 1; d >= 0; d--)
		ex->dev_ops->close(ex->devs[d]);
	if (ex->trace)
		fclose(ex->trace);
	phos_image_free(img);
}

int main(int argc, char **argv)
{
	struct executor ex = { .arena_base = PHOS_ARENA_BASE_DEFAULT, .arena_size = PHOS_ARENA_SIZE_DEFAULT,
			       .control_fd = -1,
			       .before_write = { exec_share_before_write, exec_checkpoint_before_write } };
	struct phos_image *img = NULL;
	char err[512] = "";
	struct exec_args a;
	struct phos_bufmap_ops ops = { .map = map_chunks, .unmap = unmap_chunks, .ctx = &ex };
	double t0 = 0, t_open = 0;
	int r;

	phos_log_init("phos-executor", PHOS_LOG_WARN);
	pthread_mutex_init(&ex.ckpt.lock, NULL);
	pthread_cond_init(&ex.ckpt.cond, NULL);
	r = parent_watch();
	if (r < 0) {
		fprintf(stderr, "phos-executor: cannot watch PHOS_EXECUTOR_PARENT: %s\n", strerror(-r));
		return 2;
	}
	/* set by supervisors that restore a function whose GPU context is lost */
	ex.exit_on_fatal = getenv("PHOS_EXIT_ON_FATAL") && !strcmp(getenv("PHOS_EXIT_ON_FATAL"), "1");
	if (getenv("PHOS_ARENA_BASE") && parse_u64(getenv("PHOS_ARENA_BASE"), &ex.arena_base) < 0) {
		fprintf(stderr, "phos-executor: bad PHOS_ARENA_BASE\n");
		return 2;
	}
	nofile_room();
	r = parse_args(argc, argv, &ex, &a);
	if (r >= 0)
		return r;
	/* First, so that a controller of another protocol version refuses this
	 * executor by name before giving it anything. */
	exec_control_hello(&ex);
	if (a.restore_from) {
		double t_read = phos_now();

		r = phos_image_read(a.restore_from, &img, err, sizeof(err));
		ex.image_read_s = phos_now() - t_read;
		if (r < 0) {
			fprintf(stderr, "phos-executor: %s: %s\n", a.restore_from, err);
			exec_control_error(&ex, "%s", err);
			return 1;
		}
		ex.arena_base = img->arena_base;
		ex.arena_size = img->arena_size;
	}
	if (ex.arena_base % PHOS_CHUNK || ex.arena_size % PHOS_CHUNK || !ex.arena_size) {
		fprintf(stderr, "phos-executor: the arena base and size must be multiples of 2 MiB\n");
		return 2;
	}
	ex.dev_ops = phos_device_pick(a.device);
	if (!ex.dev_ops) {
		fprintf(stderr, "phos-executor: unknown device '%s' (auto, cuda or sim)\n", a.device);
		return 2;
	}
	ex.ndevs = 1;
	r = a.gpus && *a.gpus ? gpu_list(ex.dev_ops, a.gpus, ex.ordinals, &ex.ndevs, err, sizeof(err))
			  : gpu_ordinal(ex.dev_ops, a.gpu, "--gpu or PHOS_GPU", &ex.ordinals[0], err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "phos-executor: %s\n", err);
		exec_control_error(&ex, "%s", err);
		phos_image_free(img);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (a.trace && *a.trace && trace_open(&ex, a.trace) < 0)
		return 1;
	exec_window_reserve(&ex);   /* before the driver takes address space */
	if (img)
		exec_regions_hold(&ex, img);
	t0 = phos_now();
	/* A restore warms cuBLAS up beside loading the snapshot (exec_image_load). */
	r = devices_open(&ex, a.warm && !img);
	t_open = phos_now() - t0;
	if (r == 0 && img && phos_fault("driver_takes_regions"))
		driver_takes_regions(img);
	if (r < 0) {
		fprintf(stderr, "phos-executor: cannot open the %s device (cuda error %d)\n", ex.dev_ops->name, -r);
		exec_control_error(&ex, "cannot open the %s device (cuda error %d)", ex.dev_ops->name, -r);
		for (int d = 0; d < ex.ndevs; d++)
			ex.dev_ops->close(ex.devs[d]);
		phos_image_free(img);
		free(ex.held);
		return 1;
	}
	r = phos_bufmap_new(ex.arena_base, ex.arena_size, &ops, &ex.bufs);
	if (r == 0)
		r = phos_bufmap_set_parts(ex.bufs, ex.dev_stride, ex.dev_span);
	if (r == 0)
		r = phos_bufmap_set_window(ex.bufs, ex.arena_base, ex.dev_span);
	if (r == 0 && a.pool)
		r = pool_loop(&ex);
	else if (r == 0)
		r = serve_one(&ex, (int)a.fd, a.restore_from, img, a.on_demand, t_open, t0);
	teardown(&ex, img);
	return r < 0 ? 1 : 0;
}
