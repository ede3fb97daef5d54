/* SPDX-License-Identifier: MIT */
/*
 * phos-invoker: the daemon (docs/design.md, "Processes"). Internal header.
 *
 *   client ──HTTP──▶ http.c (MHD, one thread per connection: routing, auth,
 *                    │        body limits, JSON errors)
 *                    ├──▶ registry.c   functions: STATE/functions/<name>.json
 *                    │                 (tmp + fsync + rename), snapshots in
 *                    │                 STATE/snapshots/<name>/ (phos_snapshot_take)
 *                    ├──▶ instances.c  per function: restored instances
 *                    │        ┌──────────────────────────────────────────────┐
 *                    │        │ call: idle instance? take it (warm)           │
 *                    │        │       else < max_instances? restore (cold)    │
 *                    │        │       else wait ≤ timeout_ms in a queue of    │
 *                    │        │       max_instances*max_inflight, else 429    │
 *                    │        │ run:  PHOS-FRAME on its stdin, answer on its  │
 *                    │        │       stdout, ≤ timeout_ms (else kill: 504),  │
 *                    │        │       EOF = crash (502), executor's pidfd     │
 *                    │        │       readable (502), drain limit (503);      │
 *                    │        │       each replaces it                        │
 *                    │        │ reaper: idle > idle_ms → close stdin, wait;   │
 *                    │        │       dead idle instance/standby → drop       │
 *                    │        └──────────────────────────────────────────────┘
 *                    ├──▶ calls.c      call records, the async queue and its workers
 *                    └──▶ metrics.c    Prometheus text
 *
 * Locking: inv_registry_lock guards the list of functions; each function has
 * its own mutex guarding its instances and counters. No lock is held while
 * talking to a function process, restoring, snapshotting or stopping one.
 * Functions are reference counted (inv_function_unref); a removed function
 * stays alive until its last call is done.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "snapshotter.h"

#define INV_NAME_MAX 63
#define INV_MAX_ARGS 256
#define INV_MAX_ARG_LEN 4096
#define INV_MAX_ENV 256
#define INV_MAX_RESPONSE (64u << 20)   /* a function's answer, bytes */
#define INV_LOG_RING (64u << 10)       /* stderr kept per instance */
#define INV_MAX_BODY_LIMIT (256u << 20) /* what max_body_bytes may be set to (the preload's frame limit) */

#define INV_DEPLOY_TIMEOUT_MS 60000   /* deploy_timeout_ms when none is given */
/* A pull's when none is given: it moves the whole snapshot (16 GiB at 1 Gb/s
 * is over two minutes), where a deploy waits for a program's init. */
#define INV_PULL_TIMEOUT_MS 600000

struct inv_limits {
	unsigned max_instances;   /* 1..64, default 4 */
	unsigned max_inflight;    /* waiting calls per instance, 0..1024, default 8 */
	unsigned timeout_ms;      /* per call (queue wait, and run), 10..3600000, default 30000 */
	unsigned idle_ms;         /* idle instance stopped after, 10..86400000, default 300000 */
	size_t max_body_bytes;    /* request body, 1..INV_MAX_BODY_LIMIT, default: the daemon's */
	unsigned deploy_timeout_ms; /* a snapshot (deploy, re-snapshot) until the program's snapshot
				     * point is dumped, 100..3600000, default
				     * INV_DEPLOY_TIMEOUT_MS; a whole pull's too
				     * (default INV_PULL_TIMEOUT_MS there) */
	unsigned checkpoint_ms;   /* 0 (default: off) or 100..86400000: a call running this long is
				   * checkpointed (cow), and again every checkpoint_ms; an instance
				   * lost during the call resumes from the latest (checkpoints.c) */
};

enum inv_inst_state { INV_INST_STARTING, INV_INST_IDLE, INV_INST_BUSY, INV_INST_STOPPING };

struct inv_ckpt_req;

struct inv_instance {
	struct inv_instance *next;
	struct phos_instance proc;
	unsigned id;
	unsigned generation;          /* snapshot generation it was restored from */
	enum inv_inst_state state;
	int in_fd, out_fd;            /* its stdin (we write), its stdout (we read) */
	int fn_pidfd, exe_pidfd;      /* readable once the function / its executor died (-1: none) */
	int exe_statfd;               /* /proc/EXE/task/EXE/stat: its main thread exited (-1: none) */
	double idle_since;
	/* speculation fallbacks: the executor's counts seen so far; watched after
	 * each call until its restore is done (always with --validate-spec always) */
	struct phos_spec_fallbacks fb_seen;
	bool fb_done;
	/* stderr, read by log_thread into a ring */
	int err_fd;
	pthread_t log_thread;
	bool log_started;
	pthread_mutex_t log_lock;
	char *ring;
	size_t ring_head, ring_len;
	/* checkpoints (checkpoints.c) */
	int ckpt_evfd;                /* eventfd: a checkpoint was asked of this busy instance */
	struct inv_ckpt_req *ckpt_req; /* that request, under f->lock */
	char *ckpt_dir;               /* STATE/checkpoints/NAME-ID once one was taken */
	unsigned checkpoints;         /* taken, under f->lock */
	double ckpt_at;               /* when the latest was committed (unix time) */
	char ckpt_mode[8];            /* and its mode */
	bool ckpt_of_call;            /* the latest was taken during the running call */
	double ckpt_next;             /* checkpoint_ms: the running call's next one */
	unsigned resumes;             /* times the running call resumed from a checkpoint */
	/* being moved to another invoker (migrate.c), under f->lock */
	char migration[33];           /* the migration's id; "" when none */
	bool hold_wanted;             /* inv_instance_hold waits for it: calls leave it */
	char *mig_dir;                /* where its files are served from: the pre-copy's
				       * temporary dir, then the committed checkpoint */
	uint64_t mig_data_end;        /* the pre-copy's gpu.data size (no manifest yet) */
	/* The executor's control socket is one conversation at a time: a live
	 * move's checkpoint (from another thread than the call's) holds
	 * ctl_lock throughout; the fallbacks query and checkpoints only try it.
	 * borrowed: threads using the instance's processes without holding it;
	 * stopping it waits for none (f->cond). */
	pthread_mutex_t ctl_lock;
	unsigned borrowed;
	struct phos_image *mig_img;   /* its checkpoint's manifest, for the file route */
};

/* A parked process of a function's current snapshot (snapshotter.h,
 * phos_park) with its stdio pipes: the next cold start skips CRIU. */
struct inv_standby {
	struct phos_parked parked;
	int in_fd, out_fd, err_fd;    /* our ends of its stdin, stdout, stderr */
	unsigned generation;
	bool valid;
};

#define INV_CODES 16
#define INV_BUCKETS 13

#define INV_MAX_GPUS 8   /* the executor's EXEC_MAX_DEVICES */

/* A rank of a function whose ranks run on several invokers (rendezvous.c). */
struct inv_ranks {
	bool on;
	unsigned rank, nranks;
	char *leader, *leader_token;   /* rank > 0: rank 0's invoker */
};

struct inv_function {
	/* fixed at deploy */
	char name[INV_NAME_MAX + 1];
	char *program;
	char **args;            /* args after the program, NULL-terminated */
	unsigned nargs;
	json_t *env;            /* object of strings */
	char device[8];         /* "cuda" or "sim" */
	unsigned gpus;          /* 1; more: one executor over host GPUs 0..gpus-1 (inv_gpu_list) */
	bool share;             /* "share": instances map the snapshot's buffers from one copy per
				 * GPU (issue 42; phos_pool_share) */
	struct inv_limits limits;
	char *snapshot_dir;
	double created;         /* unix time */
	struct inv_ranks ranks; /* "ranks" of the deploy (rendezvous.c) */

	pthread_mutex_t lock;   /* everything below */
	pthread_cond_t cond;    /* an instance went idle or away */
	pthread_rwlock_t snap_lock; /* restores read the snapshot, re-snapshot replaces it */
	unsigned refs;
	bool ready;             /* snapshot done */
	bool deploy_done;       /* the deploy ended: ready, failed or cancelled */
	int snap_cancel_fd;     /* eventfd of the snapshot being taken, written to cancel it; -1: none */
	const char *snap_phase; /* its phase (phos_snapshot_ctl), a static string; NULL: none */
	double snap_started;
	unsigned snap_timeout_ms; /* the phase's deadline when not limits.deploy_timeout_ms (a pull's); 0 */
	bool entry_pending;     /* a pull before its peer's export came: its name is all it has (pull.c) */
	bool prefetch_pending;  /* the snapshot has no first-touch order yet */
	bool hot;               /* its gpu.data is in a pool's hot set (under the registry lock, not this one) */
	bool removed;
	unsigned generation;
	struct inv_standby standby;
	double standby_retry;   /* after a failed park, not before this time */
	struct inv_instance *instances;
	unsigned n_instances;   /* in the list, any state */
	/* its one instance (max_instances 1: a session) was moved to another
	 * invoker: calls are forwarded there (migrate.c) until an instance
	 * comes back or the function is removed */
	char *moved_to, *moved_token;
	unsigned waiting;
	unsigned async_running;  /* async calls being run (calls.c, under its lock) */
	unsigned next_inst_id;
	double snapshot_s;
	char *last_log;         /* stderr of the last instance that exited */
	unsigned last_id;
	int last_exit;
	/* metrics */
	struct { int code; uint64_t n; } codes[INV_CODES];
	uint64_t buckets[INV_BUCKETS], count, cold_starts;
	uint64_t fallbacks[3];  /* phos_spec_fallbacks_total by reason (INV_FB_*) */
	uint64_t cow_bytes;     /* phos_shared_cow_bytes_total: shared buffers copied before writes */
	uint64_t shared_mapped; /* phos_shared_mapped_bytes: shared memory its live instances map, summed */
	double sum_s;
};

struct inv_config {
	const char *state_dir;
	const char *device;          /* default for functions: "cuda" or "sim" */
	size_t max_body_bytes;       /* default limit */
	char *token;                 /* the admin token (always set once serving) */
	char *peer_token;            /* what we give peers (token.h; always set once serving) */
	bool protect_invoke;
#define INV_MAX_ALLOW_HOSTS 16
	const char *allow_hosts[INV_MAX_ALLOW_HOSTS]; /* --allow-host: further Host names */
	unsigned n_allow_hosts;
	unsigned conn_timeout_s;     /* --conn-timeout: idle */
	unsigned header_timeout_s;   /* --header-timeout: a request's headers, whole */
	unsigned min_body_rate;      /* --min-body-rate: bytes/s of a body being sent */
	unsigned max_connections, max_connections_per_ip;
	unsigned http_threads;       /* --http-threads: polling threads */
	unsigned http_workers;       /* --http-workers: threads running calls */
	uint64_t body_memory;        /* --body-memory: request bodies held in memory at once */
	uint64_t body_spill;         /* --body-spill: invocation bodies over it go to a file (0: never) */
	uint64_t body_disk;          /* --body-disk: spilled request bodies at once */
	struct phos_runtime_paths paths; /* device is per function */
	struct phos_pool *pool;   /* warm executors of the default device, or NULL (--pool 0) */
	/* warm executors over GPUs 0..n-1 (n >= 2) for functions of "gpus": n,
	 * one each, made with the first such function (inv_pool_for) */
	struct phos_pool *gpu_pool[INV_MAX_GPUS + 1];
	bool stop_the_world;      /* --restore stop-the-world; default on-demand */
	bool standby;             /* --standby 1 (default): a parked process per function */
	uint64_t hot_bytes;       /* --hot-bytes: pinned page cache for hot snapshots */
	unsigned max_instances;   /* --max-instances: instances of all functions together */
	unsigned async_queue;     /* --async-queue: accepted async calls not finished yet */
	double async_retention_s; /* --async-retention: finished async results kept */
	const char *validate_spec; /* --validate-spec: off, restore or always (PHOS_VALIDATE_SPEC) */
};

/* Reasons of phos_spec_fallbacks_total (snapshotter.h, struct phos_spec_fallbacks). */
enum { INV_FB_OPAQUE, INV_FB_OVERFLOW, INV_FB_VALIDATE };

extern struct inv_config inv_cfg;
extern volatile int inv_draining;
/* An eventfd made readable when --drain-timeout runs out: running calls end
 * with 503 (instances.c polls it beside the function's pipes); -1 before start. */
extern int inv_drain_abort_fd;

/* bodies.c: a request body being received, under the daemon's budgets (the
 * picture is in bodies.c). Lifecycle: _init, _admit (by Content-Length),
 * _add for each piece, _finish, then bytes/len; _exit always. */
struct inv_body {
	const char *bytes;      /* the whole body, NUL-terminated, after inv_body_finish */
	size_t len, limit;
	bool spillable;
	/* private */
	char *data;             /* in memory */
	size_t cap;
	int fd;                 /* spilled: an unlinked file in STATE/bodies, else -1 */
	void *map;
	uint64_t mem_reserved, disk_reserved;
	bool counted;           /* in inv_bodies_admitted */
};

/* Creates STATE/bodies (0700) and removes what a crash left there. 0 or -errno. */
int inv_bodies_init(void);
void inv_body_init(struct inv_body *b, size_t limit, bool spillable);
/* 0, -EFBIG (over b's limit), -E2BIG (over a whole budget), -EAGAIN (over
 * what the budget has left now) or another -errno. */
int inv_body_admit(struct inv_body *b, uint64_t length);
/* As inv_body_admit, and -ENOSPC when the disk is full. */
int inv_body_add(struct inv_body *b, const char *p, size_t n);
/* Sets bytes (a spilled body is mapped). 0 or -errno. */
int inv_body_finish(struct inv_body *b);
void inv_body_exit(struct inv_body *b);
/* Bodies holding budget now, and the most at once since the start (/metrics). */
void inv_bodies_admitted(uint64_t *ret_now, uint64_t *ret_most);

/* registry.c */
/* Creates STATE and takes STATE/invoker.lock for the life of the process
 * (-EBUSY: another invoker has it); before anything else touches STATE. */
int inv_registry_lock(void);
int inv_registry_init(void);                  /* creates STATE dirs, loads functions */

/* orphans.c: SIGKILLs whatever an earlier invoker of state_dir left running
 * (with the lock held), then marks what we start as ours. 0 or -errno. */
int inv_orphans_sweep(const char *state_dir);
/* Sweeps again, sparing what is under a live invoker, at 1, 3, 10, 30 and 60 s after
 * the start (the reaper calls it with the time since then; see orphans.c). */
void inv_orphans_late_sweep(double since_start_s);
/* Looks a function up; a ref the caller drops with inv_function_unref, or NULL. */
struct inv_function *inv_function_get(const char *name);
void inv_function_unref(struct inv_function *f);
bool inv_name_valid(const char *name);
/* The host GPUs of a function over several ("0,1,..." into buf, for
 * phos_runtime_paths.gpus), or NULL for a function of one GPU. */
const char *inv_gpu_list(const struct inv_function *f, char *buf, size_t len);
/* The warm pool whose executors can take f (its device, its GPU count),
 * made now for a GPU count that had none; NULL: none (--pool 0, another
 * device). */
struct phos_pool *inv_pool_for(const struct inv_function *f);
/* The ranks of a function on several invokers (rendezvous.c says what they
 * are). ranks.c: inv_ranks_parse checks a deploy's "ranks" (0, or -errno
 * with err); inv_ranks_json describes them (the token only for the registry
 * file); inv_rendezvous_path is f's folder. rendezvous.c:
 * inv_rendezvous_prepare makes f's empty folder (at every deploy); _drop
 * removes it; _start runs a rank's mirror of its leader's folder while f is
 * deployed; _describe answers GET /system/functions/NAME/rendezvous. */
int inv_ranks_parse(json_t *j, struct inv_ranks *ret, char *err, size_t errlen);
void inv_ranks_free(struct inv_ranks *r);
json_t *inv_ranks_json(const struct inv_ranks *r, bool with_token);
void inv_rendezvous_path(const struct inv_function *f, char *buf, size_t len);
int inv_rendezvous_prepare(struct inv_function *f, char *err, size_t errlen);
void inv_rendezvous_drop(struct inv_function *f);
int inv_rendezvous_start(struct inv_function *f);
int inv_rendezvous_describe(const char *name, json_t **ret_body);

/* deploy.c: a function's life. Deploys from a request (one without "from":
 * a peer's snapshot is inv_pull_deploy's): 201/4xx/5xx; *ret_body is the
 * JSON to send. */
int inv_function_deploy(json_t *req, json_t **ret_body);
int inv_function_resnapshot(const char *name, json_t **ret_body);
/* Removes a function; one being deployed has its snapshot cancelled (nothing left behind). */
int inv_function_remove(const char *name, json_t **ret_body);
/* Cancels f's snapshot in progress, if any (f->lock held). */
void inv_function_cancel_snapshot(struct inv_function *f);
json_t *inv_function_describe(struct inv_function *f);
json_t *inv_function_list(void);
/* After inv_registry_init, before the first request: each loaded function's
 * moved session recalled, a rank's rendezvous started. */
void inv_functions_start(void);
/* At the end: every instance of every function stopped, the registry empty. */
void inv_functions_stop(void);
/* Gives the pool the snapshots to keep hot: ready functions of the pool's
 * device, in deploy order, while their gpu.data fits in --hot-bytes. */
void inv_hot_update(void);
/* A prefetch order taken from an instance, to be stored (inv_prefetch_store). */
struct inv_prefetch {
	uint64_t *ids;   /* malloc'ed; NULL: none */
	size_t n;
	unsigned generation;   /* of the snapshot it is for */
};
/* After the first call of an instance cold-started from f's current snapshot
 * (once: f->prefetch_pending): the buffers it touched, in order, from its
 * executor. Quick (one control round trip); *ret is empty when there is
 * nothing to record. */
void inv_prefetch_take(struct inv_function *f, struct inv_instance *in, struct inv_prefetch *ret);
/* Stores p as f's snapshot's prefetch order (when it is still the snapshot
 * p came from), and frees it. Writes the manifest: after the answer. */
void inv_prefetch_store(struct inv_function *f, struct inv_prefetch *p);
/* After the first call of an instance of a shared function (issue 42): the
 * shared buffers that call copied on write (activations, which every call
 * writes), in *ret (empty: none). inv_share_learn then has the pool share
 * them no more, so that later instances restore them privately instead of
 * mapping them and copying them at their first call; and frees *c. */
void inv_share_copied_take(struct inv_function *f, struct inv_instance *in, struct inv_prefetch *ret);
void inv_share_learn(struct inv_function *f, struct inv_prefetch *c);

/* Calls fn for every function (registry lock held: fn must not block). */
void inv_function_foreach(void (*fn)(struct inv_function *f, void *arg), void *arg);

/* instances.c */
/* What a call that was answered leaves to do once its answer is on its
 * way (inv_invoke_done): the prefetch order a first cold call records (its
 * file written), a checkpoint asked of the instance while it ran and the
 * instance back to idle (BUSY until then: no other call takes it). */
struct inv_after {
	struct inv_function *f;     /* a ref; NULL: nothing left */
	struct inv_instance *in;    /* a checkpoint to serve, then idle; NULL: idle already */
	struct inv_prefetch prefetch;
	struct inv_prefetch copied; /* shared buffers the first call copied: shared no more */
};
struct inv_result {
	int http;            /* 200, 4xx, 5xx */
	char *body;          /* malloc'ed */
	size_t len;
	char content_type[128];
	bool cold;
	bool at_capacity;    /* refused at once, never run: the queue full (429) or --max-instances (503) */
	double restore_s, run_s;
	struct inv_after after;
};
/* res as an error: status http, {"error": message} (absolute paths kept out). */
void inv_result_error(struct inv_result *res, int http, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Runs one call of f with body; fills res (res->body always set). The
 * caller sends the answer, then calls inv_invoke_done(&res->after). */
void inv_invoke(struct inv_function *f, const char *body, size_t len, const char *ctype, struct inv_result *res);
/* The work a call left for after its answer (struct inv_after); a no-op
 * when it left none. Once per call, on any thread. */
void inv_invoke_done(struct inv_after *after);
/* Resumes a call of f that an earlier invoker was running, from its
 * checkpoint at dir (STATE/checkpoints/resume-ID): a new instance restored
 * from it (dir is then that instance's, removed with it; removed at once
 * when the restore fails), whose answer fills res; inv_invoke_done after. */
void inv_invoke_resume(struct inv_function *f, const char *dir, struct inv_result *res);
/* Restores of one call from its checkpoints, at most: within one invoker's
 * life, and across invokers' deaths. */
#define INV_MAX_RESUMES 3
/* The async call this thread runs (calls.c sets it around inv_invoke): its
 * checkpoints are noted in STATE/calls, so that it resumes after our death. */
struct inv_async_ctx {
	const char *id;      /* NULL: a synchronous call */
	unsigned resumes;    /* after invokers' deaths, so far */
};
extern __thread struct inv_async_ctx inv_async_ctx;
/* What the instances call in the layers above them, set once at start
 * (main.c), before the first call: each may be NULL.
 *   stopping  in is going away (inv_checkpoint_abandon)
 *   idle      in's holder lets it go, or its checkpoint event fired during
 *             a call: a checkpoint asked of it is taken now (inv_checkpoint_serve)
 *   periodic  a call has run limits.checkpoint_ms since the last one
 *             (inv_checkpoint_periodic: it sets in->ckpt_next)
 *   forward   a call of a function whose session moved away (inv_migrate_forward)
 *   tick      the reaper's turn, every 50 ms (inv_migrate_expire) */
struct inv_instance_hooks {
	void (*stopping)(struct inv_function *f, struct inv_instance *in);
	void (*idle)(struct inv_function *f, struct inv_instance *in);
	void (*periodic)(struct inv_function *f, struct inv_instance *in);
	void (*forward)(struct inv_function *f, const char *body, size_t len, const char *ctype,
			struct inv_result *res);
	void (*tick)(void);
};
extern struct inv_instance_hooks inv_instance_hooks;
void inv_instances_stop_idle(struct inv_function *f, bool all);
/* Stops every instance (for remove and shutdown): waits for busy ones to finish. */
void inv_instances_stop_all(struct inv_function *f);
int inv_reaper_start(void);
void inv_reaper_stop(void);
json_t *inv_instances_logs(struct inv_function *f, unsigned tail);
void inv_instances_count(struct inv_function *f, unsigned counts[4]);

/* checkpoints.c: checkpoints of running instances (issue 11; snapshotter.h,
 * phos_checkpoint_take), each into STATE/checkpoints/NAME-ID, replaced by
 * the next one and removed with the instance.
 *
 *   POST /system/functions/NAME/instances/ID/checkpoint {"mode": M}
 *     idle instance: taken like a call, checkpointed, given back
 *     busy instance: asked through ckpt_evfd; the thread running its call
 *                    checkpoints it while waiting for the answer (or when
 *                    the call ends), never two threads on one instance
 *   limits.checkpoint_ms: the call's thread checkpoints it every
 *     checkpoint_ms; a call whose instance died after such a checkpoint
 *     resumes on a restored copy of it (instances.c) */
/* Checkpoints in, which the caller holds (busy: its call's thread, or taken
 * idle). -EAGAIN while a request or an answer is in its pipes (the restored
 * copy could not see them), else phos_checkpoint_take's result. */
int inv_checkpoint_take(struct inv_function *f, struct inv_instance *in, enum phos_ckpt_mode mode,
			struct phos_checkpoint_stats *st, char *err, size_t errlen);
/* Takes the checkpoint asked of in, if one was (the holder of in calls it). */
void inv_checkpoint_serve(struct inv_function *f, struct inv_instance *in);
/* in is going away: a checkpoint asked of it fails. */
void inv_checkpoint_abandon(struct inv_function *f, struct inv_instance *in);
/* A periodic checkpoint (cow) of in, busy with a call that has run
 * limits.checkpoint_ms since the last one; noted for an async call's resume;
 * in->ckpt_next set to the next one's time. */
void inv_checkpoint_periodic(struct inv_function *f, struct inv_instance *in);
/* The endpoint: HTTP status and body. */
int inv_checkpoint_request(const char *name, unsigned id, const char *body, size_t len, json_t **ret_body);
/* Start-up: STATE/checkpoints made and emptied (instances do not outlive us),
 * but for the checkpoints of async calls that were running
 * (inv_calls_store_resumable), kept as resume-ID; the calls store must be open. */
int inv_checkpoints_init(void);

/* migrate.c (the source; its picture is there) and migrate_target.c (the
 * target): moving an idle instance with its state to another invoker. HTTP
 * statuses and bodies of:
 *   POST /system/functions/NAME/instances/ID/migrate {"to","to_token","mode","advertise"}
 *   GET  /system/functions/NAME/instances/ID/checkpoint/file?snapshot=M&path&offset&length
 *        (200 with a response streaming the range)
 *   POST /system/functions/NAME/instances {"from","from_token","instance","migration","manifest"}
 * to_token and from_token are the other invoker's peer token (token.h): we
 * send ours, inv_cfg.peer_token, never the admin token. */
struct MHD_Response;
int inv_migrate_request(const char *name, unsigned id, const char *body, size_t len, json_t **ret_body);
int inv_migrate_file(const char *name, unsigned id, const char *mid, const char *path, const char *offset,
		     const char *length, struct MHD_Response **ret_resp, json_t **ret_body);
int inv_migrate_receive(const char *name, const char *body, size_t len, json_t **ret_body);
/*   GET /system/migrations/ID: a move's state (starting, precopy, stopping,
 *        transferring, done, failed, aborted) and, once ended, its answer;
 *   DELETE: abort it (202; 409 once ended). */
int inv_migration_get(const char *id, bool abort, json_t **ret_body);
/* A call of f, whose instance moved away, forwarded to where it went (no lock held). */
struct inv_result;
/* Gives back the executors prepared for moves whose final phase never came
 * (migrate_target.c); the reaper's, every round. */
void inv_migrate_expire(void);
/* Executors set aside for moves coming here: held now, and ever (/metrics). */
void inv_migrate_prepared(unsigned *ret_held, uint64_t *ret_total);
/* Pre-copies here waiting for their final phase now, and those ever reclaimed
 * because their source went quiet (migrate_target.c; /metrics). */
void inv_migrate_incoming(unsigned *ret_waiting, uint64_t *ret_reclaimed);
void inv_migrate_forward(struct inv_function *f, const char *body, size_t len, const char *ctype,
			 struct inv_result *res);
/* moves.c: where a session went is kept in STATE/moves/NAME.json (0600: it holds the
 * target's token) from its move on: inv_move_recall sets f->moved_to and
 * f->moved_token from it at our start (a bad note is dropped), so that a
 * restarted invoker forwards the session's calls instead of starting a
 * second copy of it; inv_move_forget drops it (the session came back, the
 * function is removed). */
void inv_move_recall(struct inv_function *f);
void inv_move_forget(const char *name);
/* Writes down that name's session went to `to` (whose token is token), so
 * that a restarted invoker forwards its calls there too instead of starting
 * the session again from its snapshot (a second copy of it). */
void inv_move_note(const char *name, const char *to, const char *token);
/* config.c: how a peer reaches us, from --listen (a wildcard address as
 * 127.0.0.1): "http://HOST:PORT" into buf; set by the HTTP server's start. */
const char *inv_http_self_url(char *buf, size_t len);
void inv_self_url_set(const char *host, const char *port, bool wildcard);

/* instances.c, for checkpoints.c and migrate.c */
/* Takes f's idle instance id as a call would (BUSY, ours), waiting up to
 * wait_ms for a busy one to finish its call (no new call takes it then): 0,
 * or -ENOENT, -EBUSY (not idle in time), -ESRCH (dead), -ESHUTDOWN
 * (removed, draining) with err. */
int inv_instance_hold(struct inv_function *f, unsigned id, unsigned wait_ms, struct inv_instance **ret, char *err,
		      size_t errlen);
/* Uses instance id's processes without holding it (calls go on): stopping it
 * waits for inv_instance_unborrow. NULL when it is not serving, with err. */
struct inv_instance *inv_instance_borrow(struct inv_function *f, unsigned id, char *err, size_t errlen);
void inv_instance_unborrow(struct inv_function *f, struct inv_instance *in);
/* Gives a held instance back (idle; stopped when its function went meanwhile). */
void inv_instance_release(struct inv_function *f, struct inv_instance *in);
/* Stops a held instance for good (killed, reaped, its checkpoints removed). */
void inv_instance_retire(struct inv_function *f, struct inv_instance *in);
/* A new instance of f, STARTING (no call takes it), within its limits: 0, or
 * -EBUSY (no room), -ESHUTDOWN, -ENOMEM with err; then either adopt (restore
 * it from the checkpoint at dir: idle on success) or unreserve it. */
int inv_instance_reserve(struct inv_function *f, struct inv_instance **ret, char *err, size_t errlen);
/* A pooled executor that holds a move's pre-copy pinned (phos_pool_prepare),
 * for the restore of the checkpoint committed with it; slot -1: none. used:
 * that restore ran on it (the slot is consumed either way). */
struct inv_prepared {
	struct phos_pool *pool;
	int slot;
	bool used;
};
int inv_instance_adopt(struct inv_function *f, struct inv_instance *in, const char *dir, struct inv_prepared *prep,
		       double *ret_s, char *err, size_t errlen);
void inv_instance_unreserve(struct inv_function *f, struct inv_instance *in);

/* calls.c */
/* A new call id (32 hex digits) into id (33 bytes); the record starts queued. */
void inv_call_new(const char *function, char id[33]);
void inv_call_set_running(const char *id);
void inv_call_finish(const char *id, const struct inv_result *res);
json_t *inv_call_get(const char *id);   /* NULL when unknown */
/* Queues an async call: 0, or -EAGAIN when the queue is full (429). */
int inv_call_async(struct inv_function *f, const char *body, size_t len, const char *ctype, char id[33]);
/* Async calls being run now (queued ones wait on disk through a stop). */
unsigned inv_calls_inflight(void);
/* Loads the async calls of the last run (after the registry), starts the
 * workers: 0 or -errno. */
int inv_calls_start(void);
/* Stops the workers (after the drain); queued calls stay on disk. */
void inv_calls_stop(void);

/* calls_store.c: async calls on disk, STATE/calls/ (see there) */
double inv_wall_now(void);                 /* CLOCK_REALTIME seconds: times that outlive the process */
int inv_calls_store_init(void);            /* 0 or -errno */
void inv_calls_store_exit(void);
/* ID.req: an accepted call. 0 or -errno (the call must then be refused). */
int inv_calls_store_accept(const char *id, const char *function, const char *ctype, double accepted,
			   const char *body, size_t len);
/* ID.req -> ID.run when running, back when not (it never reached the function). */
void inv_calls_store_mark(const char *id, bool running);
/* ID.res with the (kept part of the) answer; ID.req/ID.run removed. */
void inv_calls_store_finish(const char *id, const char *function, bool ok, int code, bool truncated, double finished,
			    const char *body, size_t len);
void inv_calls_store_drop(const char *id);    /* ID.res removed (evicted) */
/* ID.ckpt: the running call's latest checkpoint is STATE/checkpoints/CHECKPOINT;
 * it was resumed after an invoker's death `resumes` times already. */
void inv_calls_store_ckpt(const char *id, const char *function, const char *checkpoint, unsigned resumes);
/* Start-up, before anything is loaded: fn(id, checkpoint) for every call that
 * was running with a checkpoint noted (inv_checkpoints_init keeps those). */
int inv_calls_store_resumable(void (*fn)(const char *id, const char *checkpoint, void *arg), void *arg);
struct inv_calls_store_visitor {
	void (*queued)(const char *id, const char *function, const char *ctype, double accepted, const char *body,
		       size_t len);
	/* a call that was running, to resume from STATE/checkpoints/resume-ID
	 * (this is its resumes-th resume) */
	void (*running)(const char *id, const char *function, const char *ctype, double accepted, const char *body,
			size_t len, unsigned resumes);
	void (*finished)(const char *id, const char *function, bool ok, int code, bool truncated, double finished,
			 const char *body, size_t len);
};
/* Visits every stored call (start-up, one thread): .req as queued, .run with
 * a checkpoint as running, .res and other .run (now failed, 503) as
 * finished; removes what is not a call. */
int inv_calls_store_load(const struct inv_calls_store_visitor *v);

/* stats.c: the counters, recorded as calls and restores happen */
extern const double inv_metrics_bucket_le[INV_BUCKETS];   /* the duration histogram's bounds, seconds */
void inv_metrics_record(struct inv_function *f, int http, double seconds, bool cold);
void inv_metrics_restore(uint64_t bytes, double seconds, bool standby);
void inv_metrics_restore_totals(uint64_t *ret_bytes, double *ret_seconds, uint64_t *ret_standby);
/* After a call: adds the instance's new speculation fallbacks to its function's
 * counters (asks its executor while its restore runs, or always when every
 * launch is validated). */
void inv_metrics_fallbacks(struct inv_function *f, struct inv_instance *in);
/* An instance ended by its executor: a validation miss during the restore counts. */
void inv_metrics_instance_failed(struct inv_function *f, const char *why);
/* http/metrics.c: the Prometheus text of every counter, malloc'ed. */
char *inv_metrics_render(void);

/* http.c */
struct MHD_Daemon;
/* Requests of token holders that may block run on at most this many threads. */
#define INV_ADMIN_WORKERS 64
struct MHD_Daemon *inv_http_start(const char *listen, char *err, size_t errlen);
/* Stops listening; lets the open connections finish the request they are in
 * for at most wait_s (closing those between requests), then stops the
 * daemon: true. False when requests still run on workers: the daemon is left
 * as it is, and the process is to end without tearing down what they use. */
bool inv_http_stop(struct MHD_Daemon *d, double wait_s);
bool inv_listen_is_loopback(const char *listen);
/* redact.c: shortens every absolute path in msg to its last component, in
 * place: error bodies of invocations reach callers without a token. */
void inv_redact_paths(char *msg);

/* Writes data to path atomically (tmp + fsync + rename + fsync dir). */
int inv_write_atomic(const char *path, const char *data, size_t len);
