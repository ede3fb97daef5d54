/* SPDX-License-Identifier: MIT */
/*
 * The control protocol: how the snapshotter and the invoker drive an executor
 * (ctxpool/phos-executor) on its control socket (fd 4, a Unix stream socket).
 * The call channel (channel.h, proto.h) carries the function's CUDA calls; this
 * one carries jobs, status and questions about the instance.
 *
 *   controller (snapshotter/, invoker/)             phos-executor
 *   ------------------------------------            ------------------------------
 *                                      ◀── HELLO {pid}            first, always
 *   --pool:                            ◀── IDLE                   ready for a job
 *   SERVE + fd (a function's channel)  ──▶
 *   RESTORE {on_demand, dir} + fd      ──▶ ... ◀── READY {times} | ERROR {reason}
 *   RESTORE {on_demand, adopt, dir}    ──▶ ... ◀── READY | ERROR: a checkpoint
 *       + fd: the function (adopt.pid, already CRIU-restored and stopped)
 *       keeps its channel, whose memfd is its descriptor adopt.fd
 *   HOT {dirs}                         ──▶ ... ◀── HOT_DONE {n, bytes} | ERROR
 *   PREPARE {dir}                      ──▶ ... ◀── PREPARED {bytes, free} | ERROR: map
 *       and pin dir/gpu.data for the next RESTORE of a checkpoint whose
 *       gpu.data is that very file (a live move's pre-copy: the controller
 *       rewrites what changed in place and verifies it all before RESTORE)
 *   UNPREPARE                          ──▶   drop it unused
 *   while serving a restored function:
 *   ASK_TOUCHED                        ──▶     ◀── TOUCHED {ids}
 *   ASK_FALLBACKS                      ──▶     ◀── FALLBACKS {counts}
 *   ASK_COPIED                         ──▶     ◀── COPIED {ids}: the shared
 *       buffers this instance copied on write so far, in order
 *   CHECKPOINT {mode, dir}             ──▶     ◀── CHECKPOINTED {mode, seq,
 *       the executor stops taking records        bytes, stall, total} | ERROR
 *       at a record boundary, drains the device, (device state in dir, not
 *       writes the device state into dir         committed: the controller
 *       (a temporary directory the controller    dumps the CPU side, then
 *       owns) and holds the channel until...     commits, issue 11)
 *   RESUME                             ──▶   the executor takes records again
 *       (also when the control socket closes: a dead controller never leaves
 *       the program stopped)
 *   recopy: CHECKPOINT {recopy, dir}   ──▶   records flow on while every buffer
 *       is copied into dir, then again those written since their copy, in
 *       rounds while that set shrinks; then the stop, as stw's, copies what
 *                                          ◀── is still dirty: CHECKPOINTED
 *       {rounds, precopy and stop bytes}; RESUME after the CPU dump
 *   cow: CHECKPOINT {cow, dir}         ──▶     ◀── HELD {mode, seq, copy_s}: stopped
 *       and drained, the device state is fixed; the controller dumps the CPU side
 *   RESUME                             ──▶   records flow at once while the
 *       buffers are copied (first those a record is about to write)
 *                                          ◀── CHECKPOINTED | ERROR
 *   stw whose state fits a pinned host copy (staging.h): HELD once every
 *       buffer is in host memory, then as cow: RESUME, and CHECKPOINTED once
 *       that copy is in gpu.data
 *                                          ◀── ERROR {reason}   (unasked: the
 *                                              instance ends; phos_instance_failed)
 *   function gone, executor scrubbed   ◀── IDLE
 *   --restore-from DIR: HELLO, then READY or ERROR; --snapshot-to DIR: HELLO,
 *   then DUMPED {times} or ERROR, and the executor waits for the socket to close.
 *
 * Every message is one frame, written with one sendmsg:
 *
 *   +-------------+-------------+----------+------------+--------------------+
 *   | magic u32   | version u16 | type u16 | length u32 | reserved u32 (0)   |  payload
 *   | "PHCT"      |             |          | of payload |                    |  (length bytes)
 *   +-------------+-------------+----------+------------+--------------------+
 *
 * The magic and the version stay the first 8 bytes in every version, so that
 * a peer of another version is refused by name (the executor's HELLO is the
 * first message each side reads). Payloads are packed little-endian structs
 * (both ends run on one host); lists are binary (a u32 count, then the items);
 * strings are NUL-terminated inside the payload. A descriptor travels with
 * SERVE and RESTORE (SCM_RIGHTS, attached to the frame's first byte).
 *
 * Every received frame is validated before anyone reads it: magic, version,
 * known type, the payload length bounded (PHOS_CTL_MAX_PAYLOAD) and exactly
 * what the type needs, counts within their limits, each string NUL-terminated
 * within its bounds and, for reasons (text shown to people), valid UTF-8.
 * Paths are byte strings (Linux allows any byte but NUL in a file name).
 * A malformed frame is an error with a reason, never a crash; the stream is
 * then out of step, and the caller drops the peer.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PHOS_CTL_MAGIC 0x54434850u       /* "PHCT" read as little-endian bytes */
#define PHOS_CTL_VERSION 8u             /* 2: CHECKPOINT, CHECKPOINTED, RESUME; 3: recopy's
                                         * rounds and bytes, cow's reserve copies in
                                         * CHECKPOINTED; 4: a recopy CHECKPOINT that
                                         * waits for STOP, PRECOPIED; 5: stw may
                                         * answer HELD (its copy in host memory),
                                         * HELD's copy_s, CHECKPOINTED's host_copy;
                                         * 6: RESTORE's adopt (checkpoints restored
                                         * by pooled executors); PREPARE, PREPARED,
                                         * UNPREPARE; 7: SHARE, SHARED, RESTORE's
                                         * share, FALLBACKS' shared and cow bytes
                                         * (issue 42); 8: ASK_COPIED, COPIED */
#define PHOS_CTL_HDR_SIZE 16u
#define PHOS_CTL_MAX_PAYLOAD (1u << 20)  /* any one frame */
#define PHOS_CTL_REASON_MAX 1024u        /* an ERROR's reason, with its NUL */
#define PHOS_CTL_PATH_MAX 4001u          /* a snapshot path, with its NUL */
#define PHOS_CTL_HOT_MAX 64u             /* snapshots in one HOT list */
#define PHOS_CTL_TOUCHED_MAX 65536u      /* ids in one TOUCHED answer */
/* Once a frame has started, the rest must follow within this (ms), whatever the
 * caller's timeout for the frame's start. */
#define PHOS_CTL_REST_MS 5000

enum phos_ctl_type {
	/* executor → controller */
	PHOS_CTL_HELLO = 1,     /* hello: the executor started */
	PHOS_CTL_IDLE,          /* (empty) a pooled executor waits for a job */
	PHOS_CTL_READY,         /* ready: a restored snapshot's device state is in */
	PHOS_CTL_DUMPED,        /* dumped: the device state is in the snapshot */
	PHOS_CTL_ERROR,         /* error: a job failed, or the instance ends */
	PHOS_CTL_HOT_DONE,      /* hot_done: the answer to HOT */
	PHOS_CTL_TOUCHED,       /* touched: the answer to ASK_TOUCHED */
	PHOS_CTL_FALLBACKS,     /* fallbacks: the answer to ASK_FALLBACKS */
	PHOS_CTL_CHECKPOINTED,  /* checkpointed: the answer to CHECKPOINT */
	PHOS_CTL_HELD,          /* held: a cow CHECKPOINT stopped the function */
	/* controller → executor */
	PHOS_CTL_SERVE,         /* (empty) + fd: serve the function on this channel socket */
	PHOS_CTL_RESTORE,       /* restore + fd: restore a snapshot, then serve */
	PHOS_CTL_HOT,           /* hot: make exactly these snapshots hot */
	PHOS_CTL_ASK_TOUCHED,   /* (empty) */
	PHOS_CTL_ASK_FALLBACKS, /* (empty) */
	PHOS_CTL_CHECKPOINT,    /* checkpoint: device state of a running function into dir */
	PHOS_CTL_RESUME,        /* (empty) the function's records flow again */
	/* v4: live migration's pre-copy */
	PHOS_CTL_PRECOPIED,     /* precopied: (executor) a wait_stop recopy's rounds converged */
	PHOS_CTL_STOP,          /* (empty, controller) that recopy stops now */
	/* v6: a pooled executor prepared for a move's restore */
	PHOS_CTL_PREPARE,       /* prepare: (controller) map and pin dir/gpu.data */
	PHOS_CTL_PREPARED,      /* prepared: (executor) the answer to PREPARE */
	PHOS_CTL_UNPREPARE,     /* (empty, controller) drop the prepared file */
	/* v7: buffers shared by the instances of a snapshot on one GPU */
	PHOS_CTL_SHARE,         /* share + fd: (controller) map this shared buffer in the next RESTORE */
	PHOS_CTL_SHARED,        /* share + fd: (executor) a buffer a share RESTORE made shareable */
	/* v8: what the instances of a shared snapshot copy on write */
	PHOS_CTL_ASK_COPIED,    /* (empty, controller) */
	PHOS_CTL_COPIED,        /* touched: (executor) the answer to ASK_COPIED, ids copied on write */
	PHOS_CTL_TYPE_END
};

/* Checkpoint modes (issue 11). */
enum phos_ckpt_mode {
	PHOS_CKPT_STW = 0,      /* drain, copy every buffer, then go on */
	PHOS_CKPT_COW,          /* go on at once, copy in the background */
	PHOS_CKPT_RECOPY,       /* copy while running, stop to copy what changed */
	PHOS_CKPT_MODE_END
};

/* "stw", "cow", "recopy", or "unknown". */
const char *phos_ckpt_mode_name(unsigned mode);
/* The mode named s: 0 and *ret, or -EINVAL. */
int phos_ckpt_mode_parse(const char *s, enum phos_ckpt_mode *ret);

/* One message, decoded. Received messages own their lists and descriptor
 * (phos_ctl_msg_exit); messages to send only borrow them. */
struct phos_ctl_msg {
	enum phos_ctl_type type;
	int fd;   /* travels with SERVE, RESTORE, SHARE and SHARED (required there); -1 otherwise */
	union {
		struct { uint32_t pid; } hello;
		struct {
			double open_s, load_s, data_s; /* device open, object load, buffer contents */
			uint64_t data_bytes;
			bool on_demand;
		} ready;
		struct { double gpu_dump_s; uint64_t data_bytes; } dumped;
		struct { char reason[PHOS_CTL_REASON_MAX]; } error;
		struct { uint64_t n, bytes; } hot_done;  /* snapshots hot, bytes pinned */
		struct { uint64_t *ids; size_t n; } touched;  /* first-touch order (COPIED: ids copied) */
		struct {
			uint64_t opaque, overflow, validate_miss; /* enum spec_fallback's counts */
			bool restoring;  /* an on-demand restore is still moving buffers in */
			uint64_t shared_bytes;   /* mapped shared now (shared.c) */
			uint64_t cow_bytes;      /* copied out of shared buffers so far */
		} fallbacks;
		struct {
			bool on_demand;
			/* share (a snapshot's, one GPU): the buffers the SHAREs
			 * before it named are mapped from them; with none, the
			 * big buffers are restored into shareable memory and
			 * each is reported (SHARED) before READY */
			bool share;
			/* a checkpoint's: the restored function's pid and the
			 * descriptor number of its channel memfd there (both 0:
			 * a snapshot, served on a new channel) */
			struct { uint32_t pid; int32_t fd; } adopt;
			char dir[PHOS_CTL_PATH_MAX];
		} restore;
		struct { char **dirs; size_t n; } hot;
		/* a snapshot's buffer (its id, address, size and content hash as
		 * the manifest has them): SHARE and SHARED */
		struct { uint64_t id, addr, size, hash; } share;
		struct { char dir[PHOS_CTL_PATH_MAX]; } prepare;
		struct { uint64_t bytes, free; } prepared;   /* pinned; device memory free */
		struct {
			enum phos_ckpt_mode mode;
			/* recopy: after its rounds converge, say PRECOPIED and keep
			 * the copies current (copying what records dirty) until STOP,
			 * instead of stopping at once */
			bool wait_stop;
			char dir[PHOS_CTL_PATH_MAX];
		} checkpoint;
		struct {
			uint32_t rounds;         /* rounds so far */
			uint64_t precopy_bytes;  /* copied while running, so far */
			uint64_t dirty_bytes;    /* written since their copy, now */
			uint64_t data_end;       /* gpu.data's size so far (its places) */
		} precopied;
		struct {
			enum phos_ckpt_mode mode;
			uint64_t seq;          /* the last record taken before the stop */
			uint64_t data_bytes;   /* gpu.data written */
			double stall_s;        /* the function's records held (so far:
						* until the device state was written) */
			double total_s;        /* the device side of the checkpoint */
			uint64_t early;        /* cow: buffers copied ahead of a record
						* that was about to write them */
			uint32_t rounds;       /* recopy: copy rounds while running */
			uint64_t precopy_bytes; /* recopy: bytes copied while running */
			uint64_t stop_bytes;   /* bytes copied while the records were held
						* (stw: all; cow: none; recopy: the
						* dirty rest) */
			uint64_t reserve_copies; /* cow: of the early ones, those copied
						  * into the device reserve */
			bool host_copy;        /* stw, cow: through a pinned host copy
						* (staging.h) */
		} checkpointed;
		struct {
			enum phos_ckpt_mode mode;
			uint64_t seq;
			double copy_s;         /* the stop so far: drain, plan and (stw)
						* the copy into host memory */
		} held;
	};
};

/* The name of a type ("ready", ...), or "unknown". */
const char *phos_ctl_type_name(unsigned type);

/* Encodes m into one frame (header + payload) in a new buffer (*ret_buf, the
 * caller frees it; *ret_len its size). m->fd is not part of the bytes.
 * Returns 0, -EINVAL when m breaks a limit (unknown type, too many ids or
 * dirs, a string without its NUL within bounds, an empty or NUL-holding path),
 * or -ENOMEM. Reasons are sent as given: use phos_ctl_error_set to make one. */
int phos_ctl_encode(const struct phos_ctl_msg *m, void **ret_buf, size_t *ret_len);

/* Checks a frame header (PHOS_CTL_HDR_SIZE bytes at hdr) and returns its type
 * and payload length. Returns 0, -EPROTO (bad magic, unknown type, oversized
 * payload, reserved bits set) or -EPROTONOSUPPORT (another version); err says
 * which. */
int phos_ctl_header_check(const void *hdr, unsigned *ret_type, uint32_t *ret_len, char *err, size_t errlen);

/* Decodes the payload (len bytes) of a frame of the given type into *ret
 * (fd set to -1). Returns 0 or -EPROTO with err saying what is wrong (short,
 * long, a count over its limit, a string without NUL, a reason that is not
 * UTF-8), or -ENOMEM. *ret is untouched on failure. */
int phos_ctl_decode(unsigned type, const void *payload, size_t len, struct phos_ctl_msg *ret, char *err,
		    size_t errlen);

/* Sends m on sock as one frame, with m->fd attached when m is SERVE or
 * RESTORE (the fd stays the caller's). Not thread-safe per socket: writers
 * of one socket serialise. Returns 0, -EINVAL (see phos_ctl_encode),
 * -EPIPE when the peer is gone, or -errno. */
int phos_ctl_send(int sock, const struct phos_ctl_msg *m);

/* Receives one frame from sock and decodes it into *ret (the caller calls
 * phos_ctl_msg_exit). timeout_ms bounds the wait for the frame to start (<0:
 * forever, 0: only if one is there); its rest must follow within
 * PHOS_CTL_REST_MS or timeout_ms, the longer. Returns 0; -ETIMEDOUT (nothing
 * came); -EPIPE (the peer closed before a frame started); -EPROTO (a
 * malformed frame, one cut short by a hang-up, a descriptor missing or where
 * none belongs) or -EPROTONOSUPPORT (another version), err saying why; or
 * -errno. On failure *ret is untouched and any descriptor received is
 * closed. */
int phos_ctl_recv(int sock, int timeout_ms, struct phos_ctl_msg *ret, char *err, size_t errlen);

/* Like phos_ctl_recv with timeout 0, without taking the frame off the socket
 * (MSG_PEEK); no descriptor is received. Returns 0 when a whole frame of at
 * most PHOS_CTL_HDR_SIZE + PHOS_CTL_REASON_MAX + 64 bytes is at the front,
 * -EAGAIN when none is (yet), -EMSGSIZE for a bigger one, -EPIPE when the peer
 * closed with nothing left, -EPROTO / -EPROTONOSUPPORT for a malformed one. */
int phos_ctl_peek(int sock, struct phos_ctl_msg *ret, char *err, size_t errlen);

/* Reads and discards anything on sock until the peer closes it (or an error
 * other than EINTR): for an executor that waits to be let go. */
void phos_ctl_wait_close(int sock);

/* Makes m an ERROR with the formatted reason, truncated to fit and made valid
 * UTF-8 (bytes that are not become '?'), newlines turned into spaces. */
void phos_ctl_error_set(struct phos_ctl_msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees what a received message owns (lists, descriptor); accepts a message
 * that owns nothing, and NULL. The message is left empty (fd -1). */
void phos_ctl_msg_exit(struct phos_ctl_msg *m);
