/* SPDX-License-Identifier: MIT */
/*
 * phos-executor: owns the device context of its GPU (or of each of its GPUs,
 * --gpus: devs[] below) and serves one function process at a time over the
 * channel.
 *
 *   channel ring ──▶ exec_dispatch() ──┬─ exec_memory.c   malloc/free/copies/memset, host regions
 *   (in order)        one thread,      ├─ exec_stream.c   streams, events
 *                     records run in   ├─ exec_module.c   fatbins, kernels, variables, launches
 *                     ring order; the  ├─ exec_blas.c     cuBLAS
 *                     device keeps     ├─ exec_blaslt.c   cuBLASLt matmuls and heuristics
 *                     per-stream order ├─ exec_nccl.c     NCCL communicators and collectives
 *                                      ├─ exec_dnn.c      cuDNN handles, descriptors, executions
 *                                      ├─ exec_fft.c      cuFFT plans and executions
 *                                      ├─ exec_sparse.c   cuSPARSE calls and their sets
 *                                      ├─ exec_rand.c     cuRAND generators, generate calls, replays
 *                                      ├─ exec_solver.c   cuSOLVER dense calls and their sets
 *                                      └─ spec.c          read/write sets of every launch and
 *                                                         library call, and the trace
 *   (those in calls/; a snapshot's restore in restore/: exec_image.c, exec_hot.c and
 *   the restore engine, engine.c; checkpoints and a move's recopy in state/)
 *
 * Errors: a handler returns 0 or a negated cudaError_t. For a synchronous record
 * it becomes the reply status; for an asynchronous one it is kept as the
 * pending error and reported by the next synchronous reply (CUDA's semantics
 * for errors of asynchronous work).
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "bufmap.h"
#include "channel.h"
#include "control.h"
#include "device.h"
#include "kparam.h"

/* Returns a handler's error (a negated cudaError_t) to its caller without
 * logging: user errors are reported to the user, not to the executor's log. */
#define TRY(expr)                          \
	do {                               \
		int try_r_ = (expr);       \
		if (try_r_ < 0)            \
			return try_r_;     \
	} while (0)

/* Body of a record, checked to be at least the struct's size. */
#define BODY(type, name)                             \
	const type *name = body;                     \
	if (len < sizeof(type))                      \
		return -PHOS_CUDA_INVALID_VALUE

/* An id → object table for the handles the preload chooses (small integers). */
#define EXEC_MAX_HANDLES (1u << 20)

/* The devices a function sees: the GPUs its executor owns (--gpu N: one,
 * --gpus A,B,...: several), as devices 0, 1, ... A program that selects
 * another gets cudaErrorInvalidDevice instead of having its work land here
 * unasked. */
#define EXEC_MAX_DEVICES 8
struct handle_table {
	void **slot;
	uint32_t cap;
};
int handle_put(struct handle_table *t, uint32_t id, void *obj);
void *handle_get(const struct handle_table *t, uint32_t id);
void *handle_take(struct handle_table *t, uint32_t id);
/* Frees the table itself (its objects must be gone: exec_scrub). */
void handle_table_exit(struct handle_table *t);

/* Each object keeps what a snapshot needs to make it again. */
/* Modules kept loaded between functions, and their images' bytes at most. */
#define EXEC_MODCACHE 128
#define EXEC_MODCACHE_BYTES (4ull << 30)
/* cuDNN execution plans and handles kept across functions (exec_dnn.c) */
#define EXEC_DNN_PLAN_CACHE 64
#define EXEC_DNN_SPARE_HANDLES 8
/* parsed manifests of the snapshots a pooled executor restored last (exec_image.c) */
#define EXEC_IMAGE_CACHE 4

struct exec_module {
	void *dev_module;           /* NULL when the fatbin was refused */
	void *peer_module[EXEC_MAX_DEVICES];  /* on devices 1, 2, ... of the executor */
	struct phos_fatbin *fatbin;
	int error;                  /* negated cudaError_t when refused */
	void *image;                /* a copy of the fatbin */
	size_t image_len;
	char hash[33];              /* XXH3-128 of the image (runtime/image/image.h), the cache's key */
	/* validation twin (exec_validate.c), made at the first validated launch */
	void *twin_module;
	bool twin_error;            /* it cannot be made: kernels run unvalidated */
	uint64_t twin_tab, twin_arena, twin_miss, twin_last;   /* its variables */
};

struct exec_stream_obj {
	void *dev;
	uint32_t flags;
	int32_t priority;
	int device;                 /* of the executor's devices */
};

struct exec_event_obj {
	void *dev;
	uint32_t flags;
	int device;                 /* of the executor's devices */
};

struct exec_func {
	uint32_t module;
	char *name;
	void *dev_func;
	void *peer_func[EXEC_MAX_DEVICES];    /* on devices 1, 2, ... */
	struct phos_kernel_info info;
	int error;                  /* why it cannot launch, or 0 */
	void *twin_func;            /* in the module's twin; NULL until validated once */
	bool twin_error;
};

struct exec_var {
	uint32_t module;
	char *name;
	uint64_t addr, size;
	uint64_t peer_addr[EXEC_MAX_DEVICES];  /* its copies on devices 1, 2, ... */
	bool constant;
	bool given;   /* the program was given its address (PHOS_VAR_INFO_GIVEN; kept in images) */
	int error;
};

struct exec_region {
	void *ptr;
	uint64_t size;
	uint64_t fn_addr;   /* where the function maps it */
};

struct exec_array {
	void *dev;
	int device;                 /* of the executor's devices, made there */
	struct phos_array_create desc;
	uint32_t elem_bytes;
	uint64_t dims[3], bytes;    /* phos_array_extent */
};

struct exec_tex {
	struct phos_tex_create desc;
	int device;                 /* of the executor's devices, made there */
	uint64_t handle;
	bool live;                  /* made on the device (a stand-in of a restore: not kept) */
	bool dangling;              /* its array was freed: the handle stays taken */
};

struct exec_blas {
	void *dev_handle;
	int device;                 /* made while this device was current */
	uint32_t stream;
	int32_t math_mode;
	uint64_t workspace, workspace_size;
};

struct stage_host;
struct cow_mem;

/* A checkpoint of the running function (exec_checkpoint.c): asked for by the
 * control thread, carried out by the dispatcher between two records. */
struct exec_ckpt {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic bool asked;            /* the dispatcher looks at this between records */
	bool holding;                  /* the dispatcher stopped and waits for RESUME */
	bool resume;                   /* RESUME came (or the controller went away) */
	enum phos_ckpt_mode mode;
	char dir[PHOS_CTL_PATH_MAX];
	double t_asked;
	/* cow, while the function runs (dispatcher only): the dump in progress,
	 * which items are in gpu.data, the next one for the background */
	struct exec_dump *cow;
	bool *copied;
	uint64_t *shadow;              /* per item: its copy in the reserve (device), or 0 */
	uint64_t reserve_left, reserved;  /* the reserve's free bytes; items copied into it */
	size_t left, next;
	uint64_t seq, early;
	double stall_s;
	/* recopy, while the function runs (set and cleared under lock by the
	 * dispatcher, which alone uses it) */
	struct exec_recopy *recopy;
	/* a recopy that waits for STOP (live migration's pre-copy): after its
	 * rounds converge it says PRECOPIED once and keeps copying what records
	 * dirty; STOP makes it stop, RESUME before that drops it */
	bool wait_stop, precopied;
	_Atomic bool stop_asked, abandon;
	/* the function made no call in the dispatcher's last wait (exec_serve):
	 * a recopy steps without pacing then */
	bool ring_idle;
	/* stw into memory (staging.h): the host copy made at the ask (by the
	 * control thread, while preparing: the function runs meanwhile), taken
	 * at the stop; after RESUME a thread writes it out (writing, under lock;
	 * exec_checkpoint_drain waits for it) */
	struct stage_host *host;
	bool preparing, writing;
	/* cow through that host copy: its copies in flight (exec_checkpoint.c),
	 * beside cow (the dump) until they all landed */
	struct cow_mem *cow_mem;
	/* the stop waits for the channel's fence to settle (a program holding
	 * cuDNN objects) and for the program's host callbacks to return
	 * (dispatcher only, exec_checkpoint.c: stop_ready) */
	bool fencing;
};

#define EXEC_SAVED_LIMITS 16
#define EXEC_SAVED_ATTRS 16
#define EXEC_KEPT_ATTRS 64

struct stage;

struct spec_set;
struct executor {
	/* What spec_commit calls before each call, in order, with its read/write
	 * set (0, or a negated cudaError_t that fails the call): the instance's
	 * own copies of shared buffers it writes (exec_share_before_write), then
	 * a cow checkpoint's copies (exec_checkpoint_before_write). main sets
	 * them: the calls do not reach up into the state they keep. */
	int (*before_write[2])(struct executor *ex, const struct spec_set *s);
	struct stage *stage;           /* the staging ring of dumps (staging.c), once made */
	bool window;                   /* the host window is reserved here (proto.h) */
	/* A restore's host regions outside the window, reserved before the
	 * device opened (exec_regions_hold); an entry goes once mapped. */
	struct { uint64_t addr, size; } *held;
	uint32_t nheld;
	const struct phos_device_ops *dev_ops;
	/* The device records run on: the one the function selected (cudaSetDevice,
	 * PHOS_OP_SET_DEVICE), or for one record the device of the stream it
	 * names (exec_stream). With one device it is always devs[0]. */
	struct phos_device *dev;
	int dev_index;              /* dev == devs[dev_index] */
	/* The GPUs this executor owns (host ordinals), devs[0] the home device.
	 * Device d's part of the arena: [arena_base + d * dev_stride, + dev_span)
	 * (the whole arena with one device). Snapshots and checkpoints take
	 * executors of one device only. */
	struct phos_device *devs[EXEC_MAX_DEVICES];
	int ordinals[EXEC_MAX_DEVICES];
	int ndevs, cur;             /* cur: the function's selected device */
	uint64_t dev_stride, dev_span;
	bool peers;                 /* every device reaches every other's memory */
	struct phos_bufmap *bufs;
	struct phos_channel *ch;
	struct phos_channel *next_ch;  /* made and pinned ahead for the next function (main.c) */
	bool next_ch_pinned, ch_pinned;
	uint64_t arena_base, arena_size;

	struct handle_table streams, events, modules, funcs, vars, regions, blas;
	/* Modules of earlier functions, still loaded (exec_module.c): a restore
	 * of a snapshot with the same fatbin takes one instead of loading it
	 * again. Oldest first. */
	struct exec_module *modcache[EXEC_MODCACHE];
	unsigned nmodcache;
	uint64_t modcache_bytes;
	struct handle_table pools;      /* struct exec_pool (exec_pool.c) */
	struct handle_table nccl;       /* NCCL communicators (exec_nccl.c) */
	struct handle_table dnn_handles;   /* cuDNN handles by the preload's id (exec_dnn.c) */
	struct handle_table dnn_descs;     /* cuDNN backend descriptors by the preload's id */
	/* Finalized cuDNN plans of earlier functions, by the content of every
	 * attribute that made them, and the handles they were made on: a
	 * restore's plan made again the same way is taken instead of finalized
	 * again (tens of ms each for a fused attention). Oldest first. */
	struct exec_dnn_obj *dnn_plan_cache[EXEC_DNN_PLAN_CACHE];
	unsigned ndnn_plan_cache;
	struct exec_dnn_obj *dnn_spare_handles[EXEC_DNN_SPARE_HANDLES];
	unsigned ndnn_spare_handles;
	uint64_t dnn_handle_births;
	uint64_t dnn_plans_reused;
	struct handle_table fft_plans;     /* cuFFT plans by the preload's id (exec_fft.c) */
	struct handle_table rand_gens;     /* cuRAND generators by the preload's id (exec_rand.c) */
	struct handle_table arrays;     /* struct exec_array by the preload's id (exec_array.c) */
	struct handle_table texes;      /* struct exec_tex by the device's handle */
	struct handle_table graphs;     /* struct exec_graph by the preload's id (exec_graph.c) */
	int nccl_group_depth;           /* ncclGroupStart calls not yet ended */
	/* A warm communicator over every device (rank d on device d), made by a
	 * pooled executor of several GPUs while idle (exec_nccl_warm), and the
	 * function's inits held back in its group until they prove to be that
	 * set (exec_nccl.c) */
	void *nccl_warm[EXEC_MAX_DEVICES];
	bool nccl_warm_ready;
	struct phos_nccl_init nccl_pending[EXEC_MAX_DEVICES];
	int nccl_npending;
	struct exec_pool *pools_gone;   /* destroyed with live blocks left */

	int pending_error;          /* first error of asynchronous work, negated */
	_Atomic unsigned host_calls; /* host callbacks queued on a device's own thread (exec_stream.c) */
	struct stage_host *_Atomic host_unpin;   /* pinned host copies to give back (staging.h) */
	struct stage_host *host_reaping;         /* ... taken by the dispatcher, a piece at a time */
	double host_reap_at;                     /* ... its next piece not before (phos_now) */
	bool goodbye;               /* the function said it is exiting */
	bool exit_on_fatal;         /* PHOS_EXIT_ON_FATAL=1: a lost context ends us (exec_fatal_check) */
	uint64_t seq;               /* record being executed */
	bool sync;                  /* ... and whether its sender waits for the reply */
	FILE *trace;                /* read/write sets, one JSON line per call; NULL: off */
	uint64_t calls;             /* records executed */

	struct loader *loader;      /* restore engine still moving the snapshot in, or NULL */
	struct exec_hot *hot;       /* hot snapshots, pinned (exec_hot.c) */
	struct exec_image_ent {     /* a snapshot read before: its manifest as it was then */
		char *dir;
		dev_t st_dev;
		ino_t st_ino;
		off_t st_size;
		struct timespec st_mtim;
		struct phos_image *img;
	} imgcache[EXEC_IMAGE_CACHE];   /* oldest first */
	unsigned nimgcache;
	struct phos_image *img_uncached;   /* the last one that could not be kept there */
	size_t nhot;
	uint64_t hot_bytes;
	struct exec_hot *prep;      /* a move's pre-copy, pinned for the next restore (PREPARE), or NULL */

	const char *snapshot_dir;   /* --snapshot-to: dump GPU state there at SERVE */
	const char *restore_dir;    /* the snapshot this function was restored from, or NULL */
	/* Speculation fallbacks since the function started, by reason (enum
	 * spec_fallback): reported on the control socket (FALLBACKS) by the
	 * control thread, hence atomic. */
	_Atomic uint64_t spec_fallbacks[3];
	/* Buffers shared with the other instances of the snapshot on this GPU
	 * (exec_share.c, issue 42): the SHAREs received for the next RESTORE,
	 * what that RESTORE asked, and the shared mappings of the function */
	struct exec_share_in {
		uint64_t id, addr, size, hash;
		int fd;
		bool use;               /* matches the snapshot's buffer: mapped from fd */
	} *share_pending;
	size_t nshare_pending;
	enum { EXEC_SHARE_NONE, EXEC_SHARE_USE, EXEC_SHARE_FILL } share_mode;
	struct exec_shared { uint64_t addr, len, id; } *shared;   /* sorted by addr; len in whole chunks */
	size_t nshared;
	_Atomic uint64_t shared_bytes, cow_bytes;   /* (read by the control thread: FALLBACKS) */
	/* the ids of the shared buffers copied on write, in order: written by
	 * the dispatcher before ncopied grows, read by the control thread
	 * (COPIED) up to ncopied */
	uint64_t *copied;
	_Atomic uint32_t ncopied;
	double image_read_s;        /* a pooled restore: seconds its manifest took to read and check */
	double load_data_s;         /* --restore-from: seconds the buffer contents took */
	int control_fd;             /* control socket (runtime/proto/control.h); -1 when none */
	struct exec_ckpt ckpt;
	pid_t adopt_pid;            /* --adopt-channel PID:FD: a restored checkpoint's */
	int adopt_fd;               /* ... channel memfd, fd FD of process PID; pid 0: none */

	/* What the function changed on the context itself, put back by exec_scrub
	 * so that the next function on this executor starts from the defaults:
	 * limits (bit i of limits_changed: cudaLimit i) and attributes of the
	 * default stream (bit a of null_attrs_changed: attribute a). A saved
	 * value the device will not take back (the driver reads a never-set
	 * sync policy of the default stream as -1 and refuses -1) is replaced
	 * by the attribute's default, and reads answer the saved value while
	 * no function changed it (bit a of null_attrs_stand_in). */
	uint32_t limits_changed, null_attrs_changed, null_attrs_stand_in;
	bool attrs_set;             /* the function set a stream attribute (any stream) */
	/* For checkpoints, which carry the values the function set: the device of
	 * each changed limit, and which stream attributes it set (stream id,
	 * attribute; an entry goes with its stream). A limit past the saved ones
	 * or more attributes than kept: lost, and a checkpoint is refused. */
	uint8_t limits_dev[EXEC_SAVED_LIMITS];
	struct { uint32_t stream; int32_t attr; } attrs_kept[EXEC_KEPT_ATTRS];
	unsigned nattrs_kept;
	bool attrs_lost, limits_lost;
	uint64_t limits_saved[EXEC_SAVED_LIMITS];
	uint8_t null_attrs_saved[EXEC_SAVED_ATTRS][PHOS_STREAM_ATTR_BYTES];
};

/* Runs records until the function says goodbye or goes away. Returns 0 or -errno. */
int exec_serve(struct executor *ex);
/* A byte count from the environment (tests' and operators' knobs): the
 * variable name as a decimal number of at most max bytes, a multiple of
 * multiple (1: any), or dflt when it is unset, empty or not such a number
 * (said as a warning). */
uint64_t exec_env_bytes(const char *name, uint64_t dflt, uint64_t max, uint64_t multiple);

/* --- several devices (executor.c) --- */

/* Makes device d (< ndevs) the one records run on until the record ends
 * (exec_serve puts the selected one back after each). */
void exec_use_device(struct executor *ex, int d);
/* Waits for every device's work (the device records run on stays): 0, or
 * the first failure (a negated cudaError_t). */
int exec_drain_all(struct executor *ex);
/* The device whose part of the arena holds addr (the selected one for an
 * address outside the arena). */
int exec_device_at(const struct executor *ex, uint64_t addr);
/* The kernel, module or variable address on the device records run on. */
void *exec_func_here(const struct executor *ex, const struct exec_func *f);
uint64_t exec_var_here(const struct executor *ex, const struct exec_var *v);

/* SERVE: the function finished its init. Normally it is let go on at once; with
 * --snapshot-to the GPU state is dumped first and the function stays where it is
 * for the CPU dump (exec_image.c). */
int exec_serve_point(struct executor *ex);

/* --- the control socket (exec_control.c) --- */

/* Sends m on the control socket, serialised with every other thread's
 * messages; nothing when there is no control socket. A peer that is gone is
 * not an error (the executor ends when its function does); other failures are
 * logged. */
void exec_control_send(struct executor *ex, const struct phos_ctl_msg *m);

/* Sends HELLO, the executor's first message (fault point ctl_version: with
 * the next protocol version, for tests). */
void exec_control_hello(struct executor *ex);

/* Sends ERROR with the formatted reason (made one UTF-8 line, truncated to
 * PHOS_CTL_REASON_MAX). */
void exec_control_error(struct executor *ex, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thread that answers ASK_TOUCHED and ASK_FALLBACKS while a restored
 * function is served (exec_control_start, nothing without a control socket)
 * until exec_control_stop, which joins it and accepts one never started. */
struct exec_control_thread {
	struct executor *ex;
	int stop_fd, stop_wr;
	pthread_t th;
	bool running;
};
void exec_control_start(struct executor *ex, struct exec_control_thread *ct);
void exec_control_stop(struct exec_control_thread *ct);

/* Maps the host-memory region memfd fd (closed afterwards, also on failure)
 * of size bytes as region id, at want when that is free here (0: anywhere),
 * and pins it. Returns 0 with *ret_reg, or a negated cudaError_t. */
int exec_region_map(struct executor *ex, uint32_t id, int fd, uint64_t size, uint64_t want,
		    struct exec_region **ret_reg);

/* --- checkpoints of the running function (exec_checkpoint.c) --- */

/* Control thread: asks the dispatcher to checkpoint into dir (an existing,
 * empty directory) at the next record boundary; the dispatcher answers
 * CHECKPOINTED or ERROR on the control socket itself. A second request while
 * one is under way is answered ERROR at once. */
void exec_checkpoint_ask(struct executor *ex, enum phos_ckpt_mode mode, bool wait_stop, const char *dir);
/* Control thread: STOP: a recopy that waits for it stops (else an ERROR). */
void exec_checkpoint_stop(struct executor *ex);

/* Control thread: RESUME (also called when the controller is gone): a
 * dispatcher held by a checkpoint takes records again. */
void exec_checkpoint_resume(struct executor *ex);

/* Dispatcher, between records: carries out an asked checkpoint (drain the
 * device, write the device state, report) and holds until resumed; during a
 * cow checkpoint, copies one more buffer. */
void exec_checkpoint_poll(struct executor *ex);

struct spec_set;

/* Whether a cow checkpoint is copying (the dispatcher then polls the ring
 * without waiting, to copy while the function is idle). */
bool exec_checkpoint_copying(const struct executor *ex);
/* How long the dispatcher may wait for the next record (ms): 1000 with no
 * copy under way, 0 or 1 while copies go on, until a recopy's next paced
 * step otherwise. */
int exec_checkpoint_wait_ms(const struct executor *ex);
/* The dispatcher waited wait_ms and got a record (got) or not. */
void exec_checkpoint_waited(struct executor *ex, bool got, int wait_ms);

/* Before a call writes what s says (spec_commit): a cow checkpoint copies
 * first the buffers in its write set not copied yet (all of them for an
 * opaque or overflowing set). Returns 0 or a negated cudaError_t. */
int exec_checkpoint_before_write(struct executor *ex, const struct spec_set *s);

/* Before record op runs: a cow checkpoint copies everything not copied yet
 * ahead of ops that free or reset device memory, and of the function's end. */
void exec_checkpoint_before_op(struct executor *ex, uint32_t op);

/* The function is gone: a cow checkpoint copies the rest and reports. */
void exec_checkpoint_drain(struct executor *ex);

/* --- buffers shared between the instances of a snapshot (exec_share.c) --- */

struct phos_image;

/* Most SHAREs a RESTORE takes (each holds a descriptor until the restore). */
#define EXEC_SHARE_MAX 4096u

/* Pooled, between jobs: keeps a SHARE (its descriptor is taken, closed on
 * failure) for the next RESTORE. -E2BIG past EXEC_SHARE_MAX. */
int exec_share_pending_add(struct executor *ex, const struct phos_ctl_msg *m);
/* Closes the SHAREs kept, used or not, and forgets them. */
void exec_share_pending_clear(struct executor *ex);
/* Restore (exec_image_load): marks the SHAREs that are img's buffers exactly
 * (id, address, size and hash; a snapshot of one GPU) to be mapped from
 * their memory; the rest are closed. Returns the bytes they cover. */
uint64_t exec_share_match(struct executor *ex, const struct phos_image *img);
/* The bufmap's map of [addr, addr+len): a marked SHARE of exactly that range
 * is mapped read-only (1); 0 when there is none; or a negated cudaError_t. */
int exec_share_map(struct executor *ex, uint64_t addr, uint64_t len);
/* Whether [addr, addr+len) (a buffer of the snapshot) is mapped shared. */
bool exec_share_is_shared(const struct executor *ex, uint64_t addr, uint64_t len);
/* A fill restore, once every buffer is in: each big buffer of img moves into
 * shareable memory, mapped read-only, and is reported (SHARED with its
 * descriptor) on the control socket. A buffer the device cannot share stays
 * private. Returns how many were shared. */
size_t exec_share_publish(struct executor *ex, const struct phos_image *img);
/* Before a call writes what s says (spec_commit): every shared buffer it may
 * write (all of them for an opaque or overflowing set) becomes the
 * instance's own copy first, the device drained. 0 or a negated cudaError_t
 * (the instance cannot go on). */
int exec_share_before_write(struct executor *ex, const struct spec_set *s);
/* The ids of the shared buffers this instance copied on write, in the order
 * it copied them: up to max into ret_ids, their count returned. The control
 * thread's (COPIED), while the dispatcher may copy more. */
uint32_t exec_share_copied(struct executor *ex, uint64_t *ret_ids, uint32_t max);
/* The bufmap unmapped [addr, addr+len): shared mappings there are gone. */
void exec_share_unmapped(struct executor *ex, uint64_t addr, uint64_t len);
/* The function is gone (exec_scrub): no shared mappings, counters at 0. */
void exec_share_forget(struct executor *ex);

/* --- soft recopy (exec_recopy.c) --- */

/* A recopy in progress: every buffer and variable as of its begin, sorted by
 * dev, with its place in gpu.data (off), its hash once copied, and whether a
 * record wrote it since its last copy. */
struct exec_recopy {
	int fd;                     /* the checkpoint's gpu.data */
	struct stage_item *items;
	bool *dirty;
	size_t n, next;             /* next: the scan of the current round */
	uint64_t end;               /* gpu.data's size */
	unsigned round;             /* 1-based, the one in progress */
	uint64_t dirty_bytes;       /* of the dirty items, now */
	uint64_t prev_dirty;        /* ... at the end of the round before */
	uint64_t precopy_bytes;     /* copied while the function ran */
	uint64_t step_bytes;        /* copied at most per step (items bigger than
				     * that go in pieces, whole 4 MiB chunks) */
	/* an item copied in pieces: how far (0: none under way), the hashes of
	 * its chunks so far; a write to it starts it again */
	size_t part_item;
	uint64_t part_done;
	uint64_t *part_hashes;
	bool halfway;               /* the first round got halfway (fault point checkpoint_kill) */
	/* pacing: while the function makes calls, a step (which drains the
	 * device and holds the dispatcher for its copy) takes at most share of
	 * the dispatcher's time: the next one waits until next_at */
	double share, next_at;
};

/* Starts another pass over the items (a recopy that waits for STOP keeps
 * its copies current). */
void exec_recopy_rearm(struct exec_recopy *rc);
/* dir/precopy.layout (exec_recopy.c, the top): the items' places, and the
 * hashes of the clean ones; at PRECOPIED. Best effort: a target without it
 * fetches and reads its whole copy. */
void exec_recopy_write_layout(const struct exec_recopy *rc, const char *dir);
/* Places every buffer and variable in dir/gpu.data (created), all dirty.
 * 0 and *ret, or -errno with err. */
int exec_recopy_begin(struct executor *ex, const char *dir, struct exec_recopy **ret, char *err, size_t errlen);
/* A record is about to write what s says (opaque: everything): dirty again. */
void exec_recopy_mark(struct exec_recopy *rc, const struct spec_set *s);
void exec_recopy_mark_all(struct exec_recopy *rc);
/* Between two records: drains the device and copies the next dirty items of
 * the round. *ret_stop once the rounds are over (nothing dirty, the dirty set
 * did not shrink over a round, or the last round). 0 or -errno with err. */
int exec_recopy_step(struct executor *ex, struct exec_recopy *rc, bool *ret_stop, char *err, size_t errlen);
/* With the records held and the device drained: the image of the state now in
 * dir (modules and manifest too), copying only what is dirty or new since
 * begin. *ret_bytes: gpu.data's bytes; *ret_stop_bytes: those copied now. */
int exec_recopy_stop(struct executor *ex, struct exec_recopy *rc, const char *dir, uint64_t *ret_bytes,
		     uint64_t *ret_stop_bytes, char *err, size_t errlen);
void exec_recopy_free(struct exec_recopy *rc);   /* accepts NULL */

/* --- images (exec_image.c) --- */

/* Dumps every buffer, variable and device object into the (existing, empty)
 * snapshot directory dir: gpu.data, modules/, manifest.json. The device must be
 * idle. Fills *ret_bytes with the bytes of GPU data written. */
int exec_image_dump(struct executor *ex, const char *dir, uint64_t *ret_bytes, char *err, size_t errlen);

/* The same in steps, for a checkpoint that copies while the function runs
 * (exec_checkpoint.c): plan collects the objects and the list of items to
 * copy (buffers, then variables; gpu.data allocated), copy moves items
 * [first, first+n) into gpu.data with their hashes, finish writes the
 * manifest (every item copied). 0 or -errno with err. */
struct exec_dump {
	char dir[4096];
	struct phos_image *img;
	struct stage_item *items;
	size_t n;
	int fd;
	/* device scratch holding each array's contents as the dump saw them
	 * (exec_array.c), copied into gpu.data like a buffer, freed with d */
	struct executor *ex;
	uint64_t *scratch;
	size_t nscratch;
};
int exec_image_plan(struct executor *ex, const char *dir, struct exec_dump **ret, char *err, size_t errlen);
/* The same over a gpu.data in dir that already holds copies (a recopy's,
 * exec_recopy.c): prior (sorted by dev) says where; an item of the same dev
 * and len keeps its prior offset, the others go from prior_end on, and the
 * file is kept and grown, not truncated. nprior 0: exec_image_plan. */
struct stage_item;
int exec_image_plan_over(struct executor *ex, const char *dir, const struct stage_item *prior, size_t nprior,
			 uint64_t prior_end, struct exec_dump **ret, char *err, size_t errlen);
/* Opens (creating; truncate: emptied) dir/gpu.data for a dump: O_DIRECT where
 * the file system takes it. The fd, or -errno with err. */
int exec_image_open_data(const char *dir, bool truncate, char *err, size_t errlen);
/* Takes gpu.data's space [from, end) up front, so that a full disk is one
 * clear error (fault point gpu_data_alloc): posix_fallocate, or on tmpfs the
 * size and a check of the free space. 0 or -errno with err. */
int exec_image_reserve(int fd, uint64_t from, uint64_t end, char *err, size_t errlen);
int exec_image_copy(struct executor *ex, struct exec_dump *d, size_t first, size_t n, char *err, size_t errlen);
int exec_image_finish(struct exec_dump *d, uint64_t *ret_bytes, char *err, size_t errlen);
void exec_image_dump_free(struct exec_dump *d);
/* Frees the device scratch holding the arrays' contents, once every item was
 * copied out of the device (a stw copy in host memory): the rest of d is then
 * free of device calls. */
void exec_image_drop_scratch(struct exec_dump *d);

/* Rebuilds the device state of img (read from dir) in this fresh executor:
 * modules, kernels, variables, streams, events, cuBLAS handles, and every buffer
 * at its address with its contents, checksums verified. With on_demand it
 * returns once variables and cuBLAS workspaces are in, and the restore engine
 * (ex->loader, restore/engine.h) brings the buffers in while the function runs: the
 * snapshot's prefetch order first, then address order. On failure err says
 * why, and what was made stays until the caller's exec_scrub. */
struct phos_image;
int exec_image_load(struct executor *ex, const char *dir, const struct phos_image *img, bool on_demand,
		    char *err, size_t errlen);

/* --- hot snapshots (exec_hot.c) --- */

#define PHOS_HOT_MAX 64   /* hot snapshots per executor */

/* Makes exactly dirs hot: pins and verifies those not hot yet, releases those
 * no longer listed or replaced on disk. Returns the first failure (the others
 * are still tried; a failed one stays cold). */
int exec_hot_set(struct executor *ex, char *const dirs[], size_t n, char *err, size_t errlen);
/* A run of gpu.data's bytes that are all zero: a buffer's whole 4 MiB chunks
 * (its last one may be short), found when a hot mapping was verified. */
struct exec_zero_run {
	uint64_t off, len;
};
/* The pinned mapping of the gpu.data open at fd (at least size bytes): a hot
 * snapshot's (verified when pinned), or the prepared pre-copy's (the same file,
 * which the controller verified after its last write); NULL for neither.
 * ret_zeros, ret_nzeros: the hot mapping's zero runs, sorted by offset and
 * apart (NULL/0 for the pre-copy or none); they live as long as the mapping. */
const uint8_t *exec_hot_find(struct executor *ex, int fd, uint64_t size, const struct exec_zero_run **ret_zeros,
			     size_t *ret_nzeros);
void exec_hot_clear(struct executor *ex);
/* A pooled restore's snapshot: phos_image_read of dir, or the image read
 * before when its manifest.json is still the same file (device, inode, size
 * and time: a snapshot is written once and renamed into place, and a new
 * prefetch order replaces the manifest). The image stays the executor's:
 * valid until the next exec_image_cached or exec_image_cache_clear, never
 * freed by the caller. Saves 30-45 ms of a 16 GiB LLM's restore on the H200. */
int exec_image_cached(struct executor *ex, const char *dir, const struct phos_image **ret_img, char *err,
		      size_t errlen);
void exec_image_cache_clear(struct executor *ex);
/* PREPARE: maps and pins dir/gpu.data (a live move's pre-copy, still being
 * brought up to date in place by the controller) for the next restore of a
 * checkpoint whose gpu.data is that file, replacing any prepared before.
 * 0 and *ret_bytes pinned, or -errno with err. exec_prep_clear drops it
 * (UNPREPARE, and once the function restored from it is gone). */
int exec_prep_set(struct executor *ex, const char *dir, uint64_t *ret_bytes, char *err, size_t errlen);
void exec_prep_clear(struct executor *ex);

/* Waits for the function's own work (cudaDeviceSynchronize): every stream of
 * the function, but not a restore still running in the background. */
int exec_sync_function(struct executor *ex);

/* Handlers: each takes the record body (len bytes after the header), may write
 * reply data into out (up to PHOS_REPLY_MAX) and set *out_len. */

int exec_memory_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_stream_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_module_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len);
int exec_blas_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *blas_status);

/* Bytes per element of a cudaDataType cuBLAS takes, 0 for others (exec_blas.c). */
uint64_t exec_blas_elem_size(int type);

/* cuBLASLt records (exec_blaslt.c): *blas_status gets the cublasStatus_t. */
int exec_blaslt_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *blas_status);

/* cuDNN records (exec_dnn.c): *ret_status gets the cudnnStatus_t for the reply. */
int exec_dnn_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		    uint32_t *out_len, int *ret_status);
/* Ends the function's cuDNN descriptors and handles (exec_scrub): its
 * finalized plans and its handles are kept for the next function (above),
 * the rest destroyed. */
void exec_dnn_clear(struct executor *ex);
/* Frees the plans and handles kept across functions (the executor exits). */
void exec_dnn_cache_clear(struct executor *ex);
/* Whether the function holds any cuDNN handle or descriptor. */
bool exec_dnn_in_use(const struct executor *ex);

/* cuFFT records (exec_fft.c): *ret_status gets the cufftResult for the reply. */
int exec_fft_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		    uint32_t *out_len, int *ret_status);
/* Destroys the function's cuFFT plans (exec_scrub). */
void exec_fft_clear(struct executor *ex);
/* Whether the function holds any cuFFT plan. */
bool exec_fft_in_use(const struct executor *ex);

/* cuSPARSE records (exec_sparse.c): *ret_status gets the cusparseStatus_t
 * for the reply. The executor keeps no cuSPARSE object of the function's. */
int exec_sparse_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *ret_status);
/* Pointer arrays of a batched call (cuBLAS's, cuSOLVER's; exec_blas.c; they
 * are in device memory, so the device is synchronized first and, during an
 * on-demand restore, the arrays are waited for): each of the n arrays arr[i]
 * of batch pointers joins the set as read, and every matrix it names with
 * span[i] bytes and access[i] (span 0: not touched). A pointer to no live
 * buffer refuses the call: 0 or a negated cudaError_t. */
#define EXEC_MAX_BATCH_ARRAY (1 << 16)   /* pointers per array */
int exec_arrays_set(struct executor *ex, int n, const uint64_t *arr, const uint64_t *span, const uint8_t *access,
		    int32_t batch, struct spec_set *set);

/* cuSOLVER dense records (exec_solver.c): *ret_status gets the
 * cusolverStatus_t for the reply. The executor keeps no cuSOLVER object of
 * the function's. */
int exec_solver_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *ret_status);
/* cuRAND records (exec_rand.c): *ret_status gets the curandStatus_t for the reply. */
int exec_rand_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *ret_status);
/* Destroys the function's cuRAND generators (exec_scrub). */
void exec_rand_clear(struct executor *ex);
/* Whether the function holds any cuRAND generator. */
bool exec_rand_in_use(const struct executor *ex);

/* Whether the function holds any NCCL communicator (exec_nccl.c). */
bool exec_nccl_in_use(const struct executor *ex);
/* NCCL records (exec_nccl.c): *ret_nccl gets the ncclResult_t for the reply. */
int exec_nccl_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *ret_nccl);
/* Aborts every communicator and closes an open group (scrub); a warm set
 * that no function took stays. */
void exec_nccl_clear(struct executor *ex);
/* Pooled executor of several GPUs, while idle: makes the warm communicator
 * over its devices unless it has one, so that a function making the same set
 * (ncclCommInitAll, or InitRank per device in a group: rank r on device r,
 * no config) takes it instead of NCCL's initialisation on its cold path.
 * Nothing when NCCL cannot be had (logged once). */
void exec_nccl_warm(struct executor *ex);
/* Aborts the warm set (exit). */
void exec_nccl_warm_drop(struct executor *ex);

/* The device stream for a preload stream id (NULL for the default stream);
 * -PHOS_CUDA_INVALID_RESOURCE_HANDLE for an unknown id. */
int exec_stream(struct executor *ex, uint32_t id, void **ret_stream);
/* Returns once no host callback queued on a device's thread is left
 * (exec_stream.c): each ends soon after the function is gone. */
void exec_host_calls_wait(struct executor *ex);

/* Makers shared by the handlers and a restore (same ids, same settings). */
int exec_stream_make(struct executor *ex, uint32_t id, uint32_t flags, int32_t priority);
int exec_event_make(struct executor *ex, uint32_t id, uint32_t flags);
int exec_module_make(struct executor *ex, uint32_t id, const void *image, size_t len);
int exec_func_make(struct executor *ex, uint32_t id, uint32_t module, const char *name);
int exec_var_make(struct executor *ex, uint32_t id, uint32_t module, const char *name, uint64_t size,
		  bool constant);
int exec_blas_make(struct executor *ex, uint32_t id);

/* Destructors of the executor's objects; all accept NULL. */
void exec_stream_free(struct executor *ex, struct exec_stream_obj *s);
void exec_event_free(struct executor *ex, struct exec_event_obj *e);
void exec_var_free(struct exec_var *v);
void exec_module_free(struct executor *ex, struct exec_module *m);
/* A module the function no longer has (scrub): kept loaded in ex->modcache
 * when it loaded fine, else freed. Accepts NULL. */
void exec_module_release(struct executor *ex, struct exec_module *m);
/* Module id of a restore, from its snapshot's fatbin and hash: a cached
 * module with that image is taken (every variable of it is then written
 * from the snapshot, as for a module loaded afresh), else it is loaded.
 * hash: the image's XXH3-128, which the caller checked. image NULL: from the
 * cache only (the snapshot's manifest names hash and size; a cached module's
 * bytes had that hash when they were read), -ENOENT when it is not there. */
int exec_module_make_restored(struct executor *ex, uint32_t id, const void *image, size_t image_len,
			      const char *hash);
/* Loads a snapshot's fatbin into ex->modcache ahead of its restores (a hot
 * snapshot, exec_hot.c), unless it is there already; hash as above. */
void exec_module_warm(struct executor *ex, const void *image, size_t image_len, const char *hash);
/* Frees every cached module (the executor exits). */
void exec_modcache_clear(struct executor *ex);
void exec_func_free(struct exec_func *f);
void exec_blas_free(struct executor *ex, struct exec_blas *b);

/* Unpins and unmaps a shared host region; accepts NULL. */
void exec_region_free(struct executor *ex, struct exec_region *reg);
/* Shared host region id when [off, off + len) lies in it, else NULL (exec_memory.c). */
const struct exec_region *exec_region_at(struct executor *ex, uint32_t id, uint64_t off, uint64_t len);

/* Frees everything the function created (streams, events, handles, modules,
 * buffers, host regions): the executor is clean for the next function. */
void exec_scrub(struct executor *ex);

/* Reserves the host window (proto.h) before the device opens; -EEXIST (and
 * a warning) when something is there already: managed memory then fails
 * to map. exec_memory.c. */
int exec_window_reserve(struct executor *ex);

/* Reserves, before the device opens, the address of each host region of the
 * checkpoint img that lies outside the host window (registered memory, or
 * pinned memory of an older image): the function's kernels hold it as a
 * device address, and the driver's own mappings must not take it before
 * adopt_regions maps the region there again (on an H200 they did). An
 * address already taken here is left: its adoption is then refused.
 * exec_memory.c. */
void exec_regions_hold(struct executor *ex, const struct phos_image *img);

/* --- CUDA graphs made on the device (exec_graph.c) --- */

struct exec_graph;
int exec_graph_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len);
void exec_graph_free(struct executor *ex, struct exec_graph *g);   /* accepts NULL */
/* Does the function hold a graph made on the device? */
bool exec_graph_in_use(const struct executor *ex);

/* --- CUDA arrays, texture and surface objects (exec_array.c) --- */

int exec_array_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		      uint32_t *out_len);
/* Makes an array as d says under d->id (a new id): 0 or a negated cudaError_t. */
int exec_array_make(struct executor *ex, const struct phos_array_create *d, struct exec_array **ret);
/* Makes a texture or surface object under the handle the device gives. */
int exec_tex_make(struct executor *ex, const struct phos_tex_create *d, struct exec_tex **ret);
void exec_array_free(struct executor *ex, struct exec_array *a);   /* accept NULL */
void exec_tex_free(struct executor *ex, struct exec_tex *t);

/* --- memory pools (exec_pool.c) --- */

int exec_pool_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len);
/* Pools in use: every pool but the default one as a fresh executor has it
 * (no blocks, default attributes). */
unsigned exec_pool_in_use(struct executor *ex);
/* The pools in use, their attributes and live blocks, into img (cached
 * blocks given back first: exec_pool_release_all). 0 or -ENOMEM / -E2BIG. */
int exec_pool_to_image(struct executor *ex, struct phos_image *img);
/* A checkpoint's restore: its pools made again with their live blocks (the
 * image's buffers, placed already). 0, or -errno with err. */
int exec_pool_from_image(struct executor *ex, const struct phos_image *img, char *err, size_t errlen);
/* Whether addr is a live block of a pool (cudaFree of it frees it to its pool). */
bool exec_pool_owns(struct executor *ex, uint64_t addr);
/* A stream id is destroyed (and may be reused): blocks freed on it are no
 * longer "same stream" for anyone, only reusable once their free completed. */
void exec_pool_stream_gone(struct executor *ex, uint32_t stream);
/* After a synchronising call: pools above their release threshold give back
 * cached blocks whose free completed. */
void exec_pool_after_sync(struct executor *ex);
/* Gives back every cached block (the device must be idle): before a dump. */
void exec_pool_release_all(struct executor *ex);
/* Frees every pool (scrub, reset); their buffers go with the bufmap. */
void exec_pool_clear(struct executor *ex);
/* Puts back the limits and default-stream attributes the function changed
 * (exec_stream.c; part of exec_scrub). */
void exec_context_restore(struct executor *ex);
/* The limits and stream attributes the function set, with their values now,
 * into img ("limits", "stream_attrs"). 0 or -errno. */
int exec_context_to_image(struct executor *ex, struct phos_image *img);
/* A checkpoint's restore: sets them again, as the function had (and as if it
 * had set them here: exec_context_restore puts them back at the scrub). 0, or
 * -errno with err. */
int exec_context_from_image(struct executor *ex, const struct phos_image *img, char *err, size_t errlen);

/* --- speculation (spec.c) --- */

enum spec_access { SPEC_READ = 1, SPEC_WRITE = 2 };

/* Read/write set of one call, built by the handlers and written to the trace. */
#define SPEC_MAX_RANGES 256
struct spec_set {
	uint32_t n;
	bool overflow;
	bool opaque;    /* a launch of an opaque kernel: it may touch any buffer */
	bool validated; /* ... of an exact one, run as its validation twin */
	struct spec_range { uint64_t addr, len; uint8_t access; } r[SPEC_MAX_RANGES];
};

/* Why a call took the safe path instead of its proven set:
 *   OPAQUE    a launch of an opaque kernel while an on-demand restore was
 *             moving buffers in (it waited for all of them)
 *   OVERFLOW  a set with more ranges than SPEC_MAX_RANGES, in the same window
 *   VALIDATE  validation caught a kernel outside its set (opaque from then on) */
enum spec_fallback { SPEC_FB_OPAQUE, SPEC_FB_OVERFLOW, SPEC_FB_VALIDATE };

/* Empties s: no ranges and every flag false (the ranges array is left as it
 * is, 6 KiB that nothing reads past n). Every set starts here: a flag left
 * uninitialized once made copies wait for the whole on-demand restore. */
static inline void spec_clear(struct spec_set *s)
{
	s->n = 0;
	s->overflow = s->opaque = s->validated = false;
}

/* Adds [addr, addr+len) with the given access, merging duplicates. */
void spec_add(struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access);

/* Checks that [addr, addr+len) lies inside one live buffer and adds it to the set;
 * -PHOS_CUDA_INVALID_VALUE if not. len 0 is accepted and adds nothing. */
int spec_range(struct executor *ex, struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access);

/* Builds the set of a launch (docs/design.md rules). An EXACT kernel (ptx_access.h)
 * gets the buffers its read and write parameter words point into, and the
 * variables of its module when it touches module variables; an OPAQUE one is
 * marked s->opaque (it may touch anything) and still gets the buffers its
 * parameters name, for the trace. A declared pointer that points into the arena
 * but at no live buffer (freed, never allocated) gives -PHOS_CUDA_ILLEGAL_ADDRESS
 * and the launch is refused. */
int spec_launch(struct executor *ex, const struct exec_func *f, const uint8_t *params,
		uint32_t param_bytes, struct spec_set *s);

/* The set is final and the call goes to the device next: writes its trace line
 * (when tracing is on) and, for an instance restored on demand, records first
 * touches and makes the call's stream wait for the buffers in the set that are
 * not resident yet (loader_gate), or for every buffer when the set is opaque or
 * overflowed (loader_gate_all). Returns 0 or a negated cudaError_t. */
int spec_commit(struct executor *ex, const char *what, const char *name, uint32_t stream,
		const struct spec_set *s);

/* --- validation of speculation (exec_validate.c) --- */

/* Whether this launch of f runs as its validation twin: PHOS_VALIDATE_SPEC says
 * when (always, or while an on-demand restore runs), f is exact, its module's
 * twin exists (made here the first time) and the set fits the twin's table. */
bool exec_validate_wanted(struct executor *ex, struct exec_func *f, const struct spec_set *s);

/* Runs f's twin instead of f with s as the allowed set and checks it. On a miss
 * f is opaque from then on (logged, traced, counted, added to the snapshot's
 * spec-opaque list); during an on-demand restore the process ends instead of
 * answering. Returns 0 or a negated cudaError_t. */
int exec_validate_launch(struct executor *ex, struct exec_func *f, const struct spec_set *s, const uint32_t grid[3],
			 const uint32_t block[3], uint32_t shared, void *stream, const void *params,
			 uint32_t param_bytes);

/* Marks opaque the kernels listed in DIR/spec-opaque (earlier misses). */
void exec_validate_load_opaque(struct executor *ex, const char *dir);
/* The exit status of an executor whose GPU context failed for good (a
 * sticky error: illegal address, launch failure, ECC, ...): with
 * exit_on_fatal, a supervisor (phos-fn run --restart-on-failure, the
 * invoker) then restores the function from its latest checkpoint or
 * snapshot instead of leaving it on a device that answers every call with
 * the error. */
#define EXEC_EXIT_GPU_FATAL 76
/* After an operation failed with r: when r is a sticky CUDA error and the
 * device still fails (its synchronize too: the context is lost, not one bad
 * argument refused), and exit_on_fatal is set, ends the executor with
 * EXEC_EXIT_GPU_FATAL. Returns otherwise. */
void exec_fatal_check(struct executor *ex, int r);
