/* SPDX-License-Identifier: MIT */
/*
 * The snapshotter: takes a snapshot of a function just before its entry point,
 * and starts instances from one. A library, so that phos-fn and the invoker
 * share it.
 *
 *   take:     phos-executor --snapshot-to TMP ◀─channel─▶ function (new pid ns)
 *             function reaches phos_fn_serve → executor dumps the GPU state
 *             (DUMPED, runtime/proto/control.h) → criu dump of the function → manifest gets the CPU
 *             facts → TMP renamed to DIR (image.h: all or nothing)
 *
 *   restore:  phos-executor --restore-from DIR (GPU state back, READY)
 *             → criu restore with a fresh channel socket and stdio
 *             (--inherit-fd) → the function wakes inside phos_fn_serve and
 *             adopts the new executor's channel
 *
 * Many restores of one snapshot may run at once: each has its own executor,
 * pid namespace, socket and CRIU work directory, and device addresses are the
 * same in every executor.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "control.h"

/* Where the pieces are and how to run them. */
struct phos_criu_user;

struct phos_runtime_paths {
	const char *executor;     /* phos-executor */
	const char *preload_dir;  /* holds libcudart.so.13 */
	const char *sim_twins;    /* PHOS_SIM_TWINS for sim, or NULL */
	const char *criu;         /* CRIU >= 4.1 */
	const char *device;       /* "cuda" or "sim" */
	char *const *fn_env;      /* NAME=VALUE the function gets besides ours (a
				   * later one of a name wins), or NULL */
	const struct phos_criu_user *run_as; /* the function's user (runtime/criu/criu.h), or NULL: ours */
	const char *gpus;         /* executors over several GPUs: phos-executor --gpus (a
				   * list: "0,1"), or NULL: one GPU (PHOS_GPU) */
};

struct phos_snapshot_stats {
	double init_s;       /* start until the function reached phos_fn_serve */
	double gpu_dump_s;   /* executor: device state into the image */
	double cpu_dump_s;   /* criu dump */
	double commit_s;     /* manifest, fsync, rename */
	double total_s;
	uint64_t gpu_bytes, data_bytes;
};

/* Runs argv until it calls phos_fn_serve and writes its snapshot to out_dir
 * (replacing an older one atomically). The function's output during init goes
 * to log_fd. init_timeout_s bounds the wait (0: 600 s). On failure nothing is
 * left behind, the old snapshot (if any) is untouched, and err says why:
 * -ENOEXEC/-EACCES/-ENOENT (argv cannot be run), -ECHILD (it ended before
 * phos_fn_serve), -ETIMEDOUT (it never got there), -ENOSPC (a full disk), or
 * another -errno (ours). */
int phos_snapshot_take(const struct phos_runtime_paths *paths, char *const argv[], const char *out_dir,
		       int log_fd, unsigned init_timeout_s, struct phos_snapshot_stats *ret_stats, char *err,
		       size_t errlen);

/* How a snapshot in progress is bounded, cancelled and watched (phos_snapshot_run). */
struct phos_snapshot_ctl {
	unsigned timeout_ms;   /* until the snapshot point is dumped (start, init, GPU dump; 0: 600 s) */
	int cancel_fd;         /* readable (an eventfd written, say): stop, -ECANCELED; -1: none */
	/* Called as the snapshot enters each phase: "starting", "init" (the
	 * program runs until phos_fn_serve), "dumping" (GPU dumped, CRIU dumps
	 * the process), "committing". NULL: not told. */
	void (*phase)(void *arg, const char *phase);
	void *arg;
};

/* As phos_snapshot_take, under ctl: -ETIMEDOUT when the program did not reach
 * phos_fn_serve (and its GPU state was not dumped) within ctl->timeout_ms,
 * -ECANCELED when ctl->cancel_fd turned readable before the commit. Either
 * way nothing is left behind (the processes are killed and reaped, the
 * temporary directory removed) and an older snapshot is untouched. */
int phos_snapshot_run(const struct phos_runtime_paths *paths, char *const argv[], const char *out_dir, int log_fd,
		      const struct phos_snapshot_ctl *ctl, struct phos_snapshot_stats *ret_stats, char *err,
		      size_t errlen);

struct phos_restore_stats {
	double gpu_restore_s;  /* executor start until the device state is back */
	double open_s;         /* ... of which: device context (and arena) */
	double load_s;         /* ... of which: the whole snapshot load */
	double data_s;         /* ... of which: buffer contents (bytes/data_s = load rate) */
	double cpu_restore_s;  /* criu restore, beside the GPU load */
	double ready_s;        /* total, until the function runs */
	uint64_t gpu_bytes;
	bool on_demand;        /* data_s covers only variables and workspaces; the
				* buffers come in while the function runs */
};

/*
 * Checkpoints of a running function (issue 11; checkpoint.c has the picture).
 * The caller runs the function (as the init of its own pid namespace, as
 * phos_criu_spawn makes it) and holds the control socket of its executor,
 * which serves it. out_dir is replaced atomically: on any failure (the
 * executor or CRIU failing, a full disk) nothing is committed and an earlier
 * checkpoint there is untouched. The program goes on either way.
 */
struct phos_checkpoint_target {
	pid_t fn_pid;            /* host pid of the function */
	int channel_fd;          /* its channel socket's number in it (3) */
	int control_fd;          /* the executor's control socket (ours) */
	pid_t executor_pid;      /* our child, to tell its death from its program's end; 0: unknown */
	const char *criu;
	const char *function;    /* name, for the manifest */
	/* Three descriptors of ours on the files the function was given as its
	 * stdin, stdout and stderr (for a pipe, either end): a restore hands in
	 * fresh stdio for those files wherever the function keeps them now (a
	 * serving function answers on a copy of its stdout, fd 1 pointed at
	 * stderr). NULL: its own fds 0-2 at the checkpoint. */
	const int *stdio_fds;
	/* recopy only, NULL otherwise: a pre-copy (live migration). Once the
	 * executor's rounds converged (its PRECOPIED in m), precopied(arg, tmp,
	 * m) is called while the program runs on and the executor keeps the
	 * copies in tmp/gpu.data current; it returns 0 to stop now (the caller
	 * made the program quiet: nothing in its stdio pipes), or < 0 to call
	 * the checkpoint off (nothing committed; -ECANCELED returned). */
	int (*precopied)(void *arg, const char *tmp_dir, const struct phos_ctl_msg *m);
	void *precopied_arg;
};

struct phos_checkpoint_stats {
	enum phos_ckpt_mode mode;
	uint64_t seq;            /* the last record taken before the stop */
	uint64_t gpu_bytes, data_bytes;
	double stall_s;          /* the program's records held: GPU write + CPU dump */
	double gpu_s, cpu_s;     /* device state written; CRIU dump */
	double copy_s;           /* stw: the device copy at the stop (into host
				  * memory, or written through the ring) */
	bool host_copy;          /* stw, cow: through a pinned host copy */
	uint64_t early;          /* cow: buffers copied ahead of a write */
	uint32_t rounds;         /* recopy: copy rounds while the program ran */
	uint64_t precopy_bytes;  /* recopy: GPU bytes copied while it ran */
	uint64_t stop_bytes;     /* GPU bytes copied while its records were held */
	uint64_t reserve_copies; /* cow: early copies into the device reserve */
	double total_s;          /* until committed */
};

/* Returns 0; -EIO (the executor failed or died, CRIU failed: err says which),
 * -ENOSPC, -EAGAIN (the program has not connected to its executor yet),
 * -ESRCH (no such program or channel), or another -errno. */
int phos_checkpoint_take(const struct phos_checkpoint_target *t, enum phos_ckpt_mode mode, const char *out_dir,
			 struct phos_checkpoint_stats *ret_stats, char *err, size_t errlen);

struct phos_pool;

/* A restored function instance. */
struct phos_instance {
	pid_t fn_pid;          /* host pid of the restored function */
	pid_t executor_pid;
	int control_fd;        /* to the executor; closed by phos_instance_wait */
	struct phos_pool *pool; /* the pool the executor goes back to, or NULL */
	unsigned slot;
	/* Pooled: gives the executor back to its pool once the function is gone
	 * (set by the pool, which lies above the instance: no call back up) */
	void (*give_back)(struct phos_instance *inst);
	int executor_status;   /* its wait status, once phos_instance_wait reaped it (not pooled) */
};

/* Whether inst's executor ended it with an error report (an on-demand restore
 * that met a read error or a checksum mismatch, after which the function's
 * own calls fail): 1 and the report in why, else 0. Waits up to wait_ms for
 * one (0: only looks); consumes nothing from the control socket. */
int phos_instance_failed(const struct phos_instance *inst, unsigned wait_ms, char *why, size_t len);

/* How long a restore may take, and how it is called off (every phos_restore_*
 * and phos_park take one; NULL: no bound but CRIU's own PHOS_CRIU_TIMEOUT).
 * CRIU is killed, with what it had restored, when either comes, and so is the
 * wait for the executor's READY: a CRIU that hangs on this machine, or an
 * executor that never answers, costs a cold start its call's time, not 300 s. */
struct phos_restore_bound {
	double deadline;   /* phos_now() time; 0: none. Past it: -ETIMEDOUT */
	int cancel_fd;     /* readable (an eventfd written): -ECANCELED at once; -1: none */
};

/* Restores dir: the function gets stdin_fd/stdout_fd/stderr_fd as its stdio.
 * on_demand: the function runs as soon as the device objects exist and its
 * buffers stream in behind it (ctxpool/restore/engine.h); else every byte is on the
 * device first (stop-the-world). The
 * caller must be a child subreaper (prctl PR_SET_CHILD_SUBREAPER) to wait for
 * the function; phos_restore_start sets it. On failure everything taken is
 * released and err says why (a refused snapshot, too little GPU memory, a CRIU
 * image that will not restore, ...). */
int phos_restore_start(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd,
		       int stderr_fd, bool on_demand, const struct phos_restore_bound *bound,
		       struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err, size_t errlen);

/* The snapshot buffers (ids) the restored function has touched so far, in
 * first-touch order, from its executor (on-demand restores only; others report
 * none). Call it between requests, while the instance is alive. */
int phos_instance_touched(struct phos_instance *inst, uint64_t *ret_ids, size_t max, size_t *ret_n);

/* Calls of the restored function that took speculation's safe path, by
 * reason (ctxpool/executor/executor.h, enum spec_fallback), counted since it started;
 * restoring: an on-demand restore is still moving buffers in. */
struct phos_spec_fallbacks {
	uint64_t opaque;          /* launches of opaque kernels during the restore */
	uint64_t overflow;        /* sets too large to name, during the restore */
	uint64_t validate_miss;   /* kernels validation caught outside their sets */
	bool restoring;
	uint64_t shared_bytes;    /* GPU memory mapped shared now (phos_pool_share) */
	uint64_t cow_bytes;       /* copied out of shared buffers before writes, so far */
};
int phos_instance_fallbacks(struct phos_instance *inst, struct phos_spec_fallbacks *ret);
/* The shared buffers (ids) the instance copied on write so far, in order,
 * from its executor (issue 42): up to max into ret_ids. Between requests. */
int phos_instance_copied(struct phos_instance *inst, uint64_t *ret_ids, size_t max, size_t *ret_n);

/* Waits for the function to exit, then for its executor (a pooled one is
 * scrubbed and given back; another's wait status goes to
 * inst->executor_status). Returns the function's exit code (128+N for
 * signal N). */
int phos_instance_wait(struct phos_instance *inst);

/*
 * The warm executor pool (docs/design.md, "Processes"): n executors started ahead,
 * each with its context, warm cuBLAS handles and the fixed arena, so that a cold
 * start creates no CUDA context on its critical path. An executor serves one
 * instance, is scrubbed, and comes back; one that dies is replaced.
 */
int phos_pool_new(const struct phos_runtime_paths *paths, unsigned n, struct phos_pool **ret_pool);
/* Stops every executor (instances must be gone); accepts NULL. */
void phos_pool_free(struct phos_pool *pool);
/* Executors warm and idle now. */
unsigned phos_pool_idle(struct phos_pool *pool);
/* Executors by state: idle, serving an instance, starting (or being replaced). */
void phos_pool_counts(struct phos_pool *pool, unsigned *ret_idle, unsigned *ret_busy, unsigned *ret_starting);

/* As phos_restore_start, with an executor from pool (waiting up to timeout_ms
 * for one to be free: -EBUSY after that). phos_instance_wait gives it back.
 * A checkpoint of a running program is restored there too: CRIU first, then
 * the executor adopts the program's channel (no context created on the way). */
int phos_restore_pooled(struct phos_pool *pool, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
			unsigned timeout_ms, bool on_demand, const struct phos_restore_bound *bound,
			struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err, size_t errlen);

/*
 * A pooled executor set aside for one restore to come: a live move's target
 * (invoker/peer/migrate.c). phos_pool_prepare takes an idle executor (waiting up
 * to timeout_ms: -EBUSY), has it map and pin dir/gpu.data (PREPARE: control.h)
 * and holds it in *ret_slot, *ret_bytes pinned, *ret_free the device memory
 * free for the restore to come (over all its GPUs). The caller may go on
 * rewriting that file in place; before phos_restore_prepared it must have
 * verified every byte the checkpoint's manifest names, for the executor reads
 * the pinned pages as they are. phos_restore_prepared restores a checkpoint
 * committed with that very file (same inode) on that executor, as
 * phos_restore_pooled does; phos_pool_unprepare gives the executor back unused.
 * Either consumes the slot (a failed restore gives it back too).
 */
int phos_pool_prepare(struct phos_pool *pool, const char *dir, unsigned timeout_ms, int *ret_slot,
		      uint64_t *ret_bytes, uint64_t *ret_free, char *err, size_t errlen);
void phos_pool_unprepare(struct phos_pool *pool, int slot);
int phos_restore_prepared(struct phos_pool *pool, int slot, const char *dir, int stdin_fd, int stdout_fd,
			  int stderr_fd, bool on_demand, const struct phos_restore_bound *bound,
			  struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err,
			  size_t errlen);

/*
 * Parked processes: the CPU side of a restore done ahead of use (docs/design.md,
 * "Restore", step 3, off the critical path, as the pool takes context creation
 * off it). phos_park CRIU-restores dir with the given stdio; the function
 * wakes inside phos_fn_serve and waits on its channel socket, costing host
 * memory only, until phos_restore_parked gives the other end of that socket
 * to a pooled executor with the snapshot's GPU side. phos_parked_drop kills
 * one that is no longer wanted (a new snapshot, shutdown).
 */
struct phos_parked {
	pid_t fn_pid;
	int channel;      /* the executor's end of the function's channel socket */
	double criu_s;    /* what the CRIU restore took */
};
/* phos_park's CRIU runs at most PHOS_PARK_BOUND_S plus a second per
 * PHOS_PARK_BOUND_MIB of the CPU image, within bound as well. */
#define PHOS_PARK_BOUND_S   5
#define PHOS_PARK_BOUND_MIB 100
int phos_park(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
	      const struct phos_restore_bound *bound, struct phos_parked *ret_parked, char *err, size_t errlen);
void phos_parked_drop(struct phos_parked *parked);
/* As phos_restore_pooled, for a parked process (taken over on success; dropped
 * on failure, except -EBUSY: no executor free, it stays parked). */
int phos_restore_parked(struct phos_pool *pool, const char *dir, struct phos_parked *parked, unsigned timeout_ms,
			bool on_demand, const struct phos_restore_bound *bound, struct phos_instance *ret_inst,
			struct phos_restore_stats *ret_stats, char *err, size_t errlen);

/* One restore of dir, wherever it can run: phos_restore tries, in this
 * order, a parked process of dir (taken over on success), the executor
 * prepared for it (the slot consumed either way), a warm executor of pool
 * (when one is free), an executor of its own; it goes on to the next after
 * -EBUSY or a failure there, and stops at -EBADMSG (a corrupt image),
 * -ECANCELED and -ETIMEDOUT (bound). A place left NULL (slot -1) is not
 * tried. The stdio fds are for every place but the parked process, which
 * has its own (the caller's to keep or close, whichever served). */
enum phos_restore_where { PHOS_ON_PARKED, PHOS_ON_PREPARED, PHOS_ON_POOLED, PHOS_ON_OWN };
struct phos_restore_req {
	const char *dir;
	bool on_demand;
	struct phos_restore_bound bound;
	int stdin_fd, stdout_fd, stderr_fd;
	struct phos_parked *parked;               /* NULL: none */
	struct phos_pool *prepared_pool;          /* with *prepared_slot */
	int *prepared_slot;                       /* NULL or -1: none */
	struct phos_pool *pool;                   /* NULL: none */
	const struct phos_runtime_paths *paths;   /* an executor of its own; NULL: none */
};
int phos_restore(const struct phos_restore_req *req, enum phos_restore_where *ret_where, struct phos_instance *ret_inst,
		 struct phos_restore_stats *ret_stats, char *err, size_t errlen);

/* Shared buffers (issue 42; ctxpool/state/exec_share.c): with sharing on for
 * dir, the pool's first snapshot restore of it maps every big buffer into
 * shareable GPU memory, read-only, and the pool keeps a descriptor of each;
 * every later restore of dir on the pool maps those instead of new memory
 * and copies nothing for them. An instance that writes a shared buffer gets
 * its own copy first. Off drops the pool's descriptors (the memory goes once
 * no instance maps it). -ENOSPC past 64 snapshots; the pool holds at most
 * 4096 buffers shared in all (more are not shared). phos_pool_shared_bytes:
 * the GPU memory the pool holds shared for dir. */
int phos_pool_share(struct phos_pool *pool, const char *dir, bool on);
uint64_t phos_pool_shared_bytes(struct phos_pool *pool, const char *dir);
/* The buffers ids (n) of dir's shared snapshot are shared no more: the pool
 * drops their descriptors, and later restores of dir restore them privately
 * (the invoker's, for the buffers an instance's first call copied on write:
 * activations, written by every call). Instances that map them keep their
 * mappings. Returns how many were dropped. */
int phos_pool_share_private(struct phos_pool *pool, const char *dir, const uint64_t *ids, size_t n);
#define PHOS_POOL_SHARE_IDS_MAX 4096u   /* ids one instance reports copied (its shared buffers, at most) */

/* Hot snapshots (ctxpool/restore/exec_hot.c): every executor of the pool maps and pins
 * the gpu.data of exactly these snapshot directories, checksums verified, while
 * it is idle (a keeper thread hands the list out, off any restore's path), so
 * that their restores copy straight from the page cache. Pinned memory is the
 * caller's budget to keep. phos_pool_hot_pending: how many running executors
 * do not have the newest list yet (busy ones get it when they come back). */
#define PHOS_POOL_HOT_MAX 64
int phos_pool_hot(struct phos_pool *pool, const char *const dirs[], size_t n);
unsigned phos_pool_hot_pending(struct phos_pool *pool);

/* Lending a warm executor to a program started elsewhere (phos-fn run):
 * phos_pool_lend takes an idle executor (waiting up to timeout_ms: -EBUSY),
 * has it serve one end of a new channel socket pair, and gives the other
 * end in *ret_channel (the program's PHOS_CHANNEL_FD; the caller owns it).
 * phos_pool_lend_end, once that program is gone, waits for the executor to
 * scrub itself and come back (a fresh one replaces it if it does not). */
struct phos_lease {
	struct phos_pool *pool;   /* NULL once ended */
	unsigned slot;
	pid_t executor_pid;
};
int phos_pool_lend(struct phos_pool *pool, unsigned timeout_ms, int *ret_channel, struct phos_lease *ret_lease);
void phos_pool_lend_end(struct phos_lease *lease);

/*
 * The lending socket (lend.c): a unix stream socket where phos-fn run asks a
 * pool daemon (phos-fn pool) or an invoker for a warm executor.
 *
 *   client                                   server (a thread per client)
 *   "LEND 1 <device> <gpu>\n"          ──▶   phos_pool_lend
 *                                      ◀──   "OK <executor pid>\n" + the channel fd
 *                                            (SCM_RIGHTS), or "ERR <why>\n"
 *   ... the program runs ...
 *   close                              ──▶   phos_pool_lend_end
 *
 * The socket is made 0600 (the executor runs as the server's user, and a
 * program that gets one drives its GPU context): only that user may ask.
 */
struct phos_lender;
/* Listens on path (replacing a stale socket there) for a pool of device
 * ("cuda" or "sim") on host GPU gpu. 0 or -errno; err says why. */
int phos_lender_start(struct phos_pool *pool, const char *path, const char *device, int gpu,
		      struct phos_lender **ret, char *err, size_t errlen);
/* Stops listening, removes the socket, ends every lease (waits for their
 * clients to close); accepts NULL. */
void phos_lender_stop(struct phos_lender *l);
/* Client side: a connected lease for device/gpu from the server at path, and
 * the program's channel fd. 0, or -errno when there is no server (-ENOENT,
 * -ECONNREFUSED) or it refused (-EBUSY: none free; -ENODEV: another device
 * or GPU), with why in err. *ret_conn must stay open while the program runs. */
int phos_lender_borrow(const char *path, const char *device, int gpu, unsigned timeout_ms, int *ret_conn,
		       int *ret_channel, pid_t *ret_executor_pid, char *err, size_t errlen);

/* Starts phos-executor with the channel socket at fd 3 and, when control >= 0,
 * the control socket at fd 4, plus extra arguments (NULL-terminated). The
 * executor ends when the calling process does (PHOS_EXECUTOR_PARENT). */
int phos_executor_spawn(const struct phos_runtime_paths *paths, int channel, int control,
			const char *const extra[], pid_t *ret_pid);

/* Marks every process an invoker starts as its state dir's (invoker/orphans.c);
 * phos_function_env keeps the caller's value over a function's own "env". */
#define PHOS_OWNER_ENV "PHOS_INVOKER_STATE"

/* The environment of a function process: the caller's, plus PHOS_CHANNEL_FD=3,
 * the preload directory first in LD_LIBRARY_PATH and the forwarding guard in
 * LD_AUDIT (runtime/guard/guard.h). Free with phos_env_free. */
char **phos_function_env(const struct phos_runtime_paths *paths);
void phos_env_free(char **env);
