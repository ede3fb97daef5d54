/* SPDX-License-Identifier: MIT */
/*
 * The channel between a function process and its executor.
 *
 *   memfd (mapped by both; the executor may register it as pinned memory)
 *   +-------------+----------------------------------+---------------------------+
 *   | struct      | call ring: records, 8-aligned,   | reply area: one reply at  |
 *   | phos_shm    | producer = function, consumer =  | a time (sync calls are    |
 *   | (counters)  | executor; wraps with a PAD rec   | serialised by the sender) |
 *   +-------------+----------------------------------+---------------------------+
 *   + a Unix stream socket: the memfd and later host-memory memfds travel on it
 *     (SCM_RIGHTS), and its hang-up tells either side that the other is gone.
 *
 * Waiting never busy-spins for long: a short bounded spin, then a futex wait on
 * a word in the shared header (FUTEX_WAIT on a MAP_SHARED mapping works across
 * processes), with a timeout so that the peer's death is noticed.
 *
 * One producer per channel: the preload serialises its threads with a mutex
 * around post/call. One consumer: the executor's dispatcher thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define PHOS_CHANNEL_MAGIC 0x50484f53434831ull /* "PHOSCH1" */
/* 4 MiB: a record carries at most PHOS_REC_MAX_PAYLOAD, and copies of 2 MiB
 * and more go through shared staging (preload/cudart/memory.c), so a few records in
 * flight keep the copy engine busy; replies are small too (PHOS_REPLY_MAX).
 * The executor pins the whole channel, so every byte of it is in each
 * checkpoint's CPU image and copied while CRIU holds the program frozen: 16
 * MiB of ring and 8 MiB of replies took 14-17 ms of a checkpoint's stall on
 * the H200, 6 MiB took 3.6 ms on the H100 (issue 11). */
#define PHOS_RING_DEFAULT (4u << 20)

struct phos_reply {
	uint64_t seq;        /* written last (release): the reply for record seq is ready */
	int32_t status;      /* cudaError_t */
	int32_t blas_status; /* cublasStatus_t, for cuBLAS ops */
	uint32_t len;        /* bytes of data */
	uint32_t _pad;
	/* data follows, up to PHOS_REPLY_MAX */
};

struct phos_channel;

/* Executor side: creates the memfd and mapping for a new channel on the
 * connected socket sock (ownership of sock passes to the channel, also on
 * failure) and sends the memfd to the peer. Returns 0 or -errno. */
int phos_channel_serve_new(int sock, size_t ring_bytes, struct phos_channel **ret_ch);

/* The same in two steps, so that a pooled executor makes (and pins) its next
 * channel while idle, off the cold-start path: phos_channel_make creates the
 * memfd and mapping of a channel not connected yet; phos_channel_attach sends
 * its memfd to the peer on sock (taken over, also on failure; -EINVAL when the
 * channel is attached already). Returns 0 or -errno. */
int phos_channel_make(size_t ring_bytes, struct phos_channel **ret_ch);
int phos_channel_attach(struct phos_channel *ch, int sock);

/* Function side: receives the memfd on sock (taken over) and maps it. */
int phos_channel_connect_new(int sock, struct phos_channel **ret_ch);

/* Unmaps and closes; accepts NULL. */
void phos_channel_free(struct phos_channel *ch);

/* --- adopting a restored channel (checkpoints of running programs, issue 11) ---
 *
 * A checkpoint stops the executor between two records, wherever the function
 * is (blocked in a call on the reply futex, waiting for ring space, or running
 * CPU code); CRIU then dumps the function with its mapping of the memfd, ring
 * and reply area included. To resume it the restoring executor must map that
 * same memory, not make a new channel:
 *
 *   function (preload)         keeps the memfd it received open (a descriptor
 *                              named "memfd:phos-channel"; the checkpoint's
 *                              manifest records its number N)
 *   CRIU restore               the memfd comes back, contents and fd N included
 *   restoring executor         opens /proc/PID/fd/N (the same inode: shared
 *                              futexes keep working) and phos_channel_adopt()s
 *                              it with the fresh socket handed in to CRIU
 *                              (--inherit-fd); the consumer resumes at the ring's
 *                              tail, where the old executor stopped
 *
 * The header's counters (head, tail, reply seq) travel in the memfd, the
 * producer's next seq in the function's memory: a call the old executor had
 * not taken is taken by the new one, a reply it had published is read there. */

/* Executor side: maps the channel memfd (closed afterwards, also on failure)
 * of a restored function for the connected socket sock (taken over, also on
 * failure). Nothing is sent on sock. Returns 0, -EBADMSG (not a channel of
 * this version), or -errno. */
int phos_channel_adopt(int memfd, int sock, struct phos_channel **ret_ch);

/* How many executors adopted this channel so far (each adoption bumps a
 * counter in the header): the function's runtime compares it with what it
 * saw before to learn that it was restored from a checkpoint, whose new
 * executor may have put the module variables elsewhere. */
uint32_t phos_channel_adoptions(const struct phos_channel *ch);

/* --- fenced sections (checkpoints of programs holding objects a restore
 * cannot make mid-call) ---
 *
 * Some calls name executor objects that only the function can make again in
 * a new executor (cuDNN's handles and descriptors: preload/cudnn/cudnn.c remakes
 * them at their first use after it sees an adoption). Such a call must never
 * be half-done in a checkpoint: neither queued in the ring of the image (the
 * restoring executor would take a record naming objects it lacks) nor begun
 * by a thread before the adoption check that would have remade them. So the
 * function makes such calls inside a fenced section, and a checkpoint closes
 * the fence before it stops:
 *
 *   function thread                       executor (record boundaries)
 *   section_enter: sections++; fence      fence_close: fence = 1
 *     closed? sections--, wait, again       fence_settled? no section open and
 *   adoption check, posts (FENCED)            no FENCED record left in the
 *   section_leave: sections--                 ring: else take records, ask again
 *                                           ... the stop, the CPU dump ...
 *   (waiting threads go on) ◀───────────  fence_open (RESUME; and every
 *                                           adoption: the restored copy's)
 *
 * Sections nest per thread (the outermost counts). */

/* Function side: enters a fenced section, waiting while the fence is
 * closed. Returns 0, or -EPIPE when the executor went away meanwhile. */
int phos_channel_section_enter(struct phos_channel *ch);

/* Function side: leaves it (records posted after this are plain). */
void phos_channel_section_leave(struct phos_channel *ch);

/* Executor side: closes the fence (new sections wait). */
void phos_channel_fence_close(struct phos_channel *ch);

/* Executor side, at a record boundary: true when the fence is closed, no
 * section is open and no record posted in one is left in the ring. */
bool phos_channel_fence_settled(struct phos_channel *ch);

/* Executor side: opens the fence and wakes the threads waiting at it. */
void phos_channel_fence_open(struct phos_channel *ch);

/* Executor side, from another thread of the consumer: makes a
 * phos_channel_next that is waiting (or the next one) return 0 at once. */
void phos_channel_kick(struct phos_channel *ch);

/* --- producer (function process) --- */

/* Appends one record (hdr is filled in: op, flags, len, seq) made of body and an
 * optional payload, waiting for ring space if needed. Returns the record's seq,
 * or 0 when the peer is gone. len(body)+len(payload) <= PHOS_REC_MAX_PAYLOAD + 4096. */
uint64_t phos_channel_post(struct phos_channel *ch, uint32_t op, uint32_t flags,
			   const void *body, size_t body_len,
			   const void *payload, size_t payload_len);

/* Posts a synchronous record and waits for its reply. On return *ret_reply points
 * at the reply in shared memory, valid until the next call. Returns 0, or -EPIPE
 * when the executor is gone. */
int phos_channel_call(struct phos_channel *ch, uint32_t op,
		      const void *body, size_t body_len,
		      const void *payload, size_t payload_len,
		      const struct phos_reply **ret_reply);

/* --- consumer (executor) --- */

/* Waits up to timeout_ms for the next record; returns 1 with *ret_hdr pointing at
 * it (body follows the header), 0 on timeout, -EPIPE when the function is gone. */
int phos_channel_next(struct phos_channel *ch, int timeout_ms, const struct phos_rec_hdr **ret_hdr);

/* Releases the record returned by phos_channel_next (frees its ring space). */
void phos_channel_consume(struct phos_channel *ch, const struct phos_rec_hdr *hdr);

/* The reply area, to be filled before phos_channel_reply publishes it. */
void *phos_channel_reply_data(struct phos_channel *ch);

/* Publishes the reply for record seq. */
void phos_channel_reply(struct phos_channel *ch, uint64_t seq, int32_t status, int32_t blas_status,
			uint32_t len);

/* --- the snapshot point (phos_fn_serve) ---
 *
 * The function posts PHOS_OP_SERVE and then blocks in recvmsg on the socket,
 * not on the ring: a CRIU dump taken there restarts that call on restore,
 * where it reads from the fresh socket handed in with --inherit-fd.
 *   executor that ran init:   phos_channel_resume() sends 'R'  → await returns 0
 *   executor of a restore:    phos_channel_serve_new() sends a new memfd
 *                             → await returns 1 and the new channel */

/* Function side. Returns 0 (go on, same channel), 1 with *ret_ch (a new channel
 * on the same socket; ch is freed, its socket kept), or -EPIPE / -EBADMSG. */
int phos_channel_await(struct phos_channel *ch, struct phos_channel **ret_ch);

/* Executor side: lets a function waiting in phos_channel_await go on. */
int phos_channel_resume(struct phos_channel *ch);

/* --- host callbacks (cudaLaunchHostFunc) ---
 *
 *   preload: cudaLaunchHostFunc(s, fn) ── post HOST_FUNC{s, seq} ──▶ executor: once stream s's
 *            queue (seq, fn)                                         earlier work is done (cuda:
 *   callback thread: callback_next ◀──── cb_due = seq ────────────── on the driver's callback
 *                    → seq, fn(data)                                 thread; sim: the dispatcher
 *                    callback_done(seq) ── cb_done = seq ──────────▶ syncs s), callback_run(seq)
 *                                                                    waits; s's later work waits
 * Callbacks run one at a time (one slot), each stream's in its order; a
 * callback that waits for the program's work on another stream holds only
 * its own stream on cuda (as natively), the whole ring on sim. */

/* Executor side: asks for callback seq (status: the cudaError_t it is told)
 * and waits until it returned. Returns 0, or -EPIPE when the function is gone.
 * Callers take turns (one slot). */
int phos_channel_callback_run(struct phos_channel *ch, uint32_t seq, int32_t status);

/* Function side: waits up to timeout_ms until the executor asks for a
 * callback (not necessarily in the order they were posted: each stream's
 * callbacks come in its order, streams' in the device's). Returns 1 with
 * *ret_seq and *ret_status when it did, 0 on timeout, -EPIPE when the
 * executor is gone. */
int phos_channel_callback_next(struct phos_channel *ch, int timeout_ms, uint32_t *ret_seq, int32_t *ret_status);

/* Function side: callback seq returned. */
void phos_channel_callback_done(struct phos_channel *ch, uint32_t seq);

/* --- both --- */

/* The socket, for passing further descriptors. */
int phos_channel_socket(struct phos_channel *ch);

/* The whole shared mapping (for registering it as pinned memory). */
void *phos_channel_shm(struct phos_channel *ch, size_t *ret_len);

/* fd passing on a Unix socket: one byte of data plus one descriptor. */
int phos_send_fd(int sock, int fd);
int phos_recv_fd(int sock, int *ret_fd);
