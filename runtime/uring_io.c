/* SPDX-License-Identifier: MIT */
/*
 * io_uring I/O with a bounded number of operations in flight (see uring_io.h).
 *
 *   ops[depth]   one record per queued or in-flight operation (fd, buf, len,
 *                off, done, tag); an SQE's user_data is the record's index.
 *                Short transfers, -EAGAIN and -EINTR resubmit the rest from the
 *                same record; a read that reaches EOF early ends with -ENODATA.
 *   finished     completions not yet handed out by phos_uio_complete: a ring
 *                that grows when the caller queues more than it collects.
 *
 * SQEs are submitted lazily: when the SQ is full, before waiting, and in
 * phos_uio_complete. The ring has depth entries (rounded up to a power of two),
 * so the SQ never holds more than the operations in flight.
 */
#include "uring_io.h"
#include "fault.h"

#include <errno.h>
#include <liburing.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define UIO_MAX_DEPTH 4096u
#define UIO_MAX_SUBMIT (1u << 30) /* bytes per SQE; larger ranges go in pieces */

struct uio_op {
	int fd;
	uint8_t *buf;
	size_t len, done;
	uint64_t off;
	void *tag;
	bool is_write;
	unsigned flags;
};

struct uio_done {
	void *tag;
	int result;
};

struct phos_uio {
	struct io_uring ring;
	unsigned depth;
	struct uio_op *ops;
	unsigned *free_ops, nfree;        /* stack of unused record indices */
	struct uio_done *fin;             /* ring of finished ops, power-of-two capacity */
	size_t fin_cap, fin_head, fin_len;
};

static unsigned round_pow2(unsigned v)
{
	unsigned p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

int phos_uio_new(unsigned depth, struct phos_uio **ret_uio)
{
	struct phos_uio *u;
	int r;

	if (!ret_uio || depth == 0 || depth > UIO_MAX_DEPTH)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->depth = depth;
	u->fin_cap = round_pow2(depth);
	u->ops = calloc(depth, sizeof(*u->ops));
	u->free_ops = calloc(depth, sizeof(*u->free_ops));
	u->fin = calloc(u->fin_cap, sizeof(*u->fin));
	if (!u->ops || !u->free_ops || !u->fin) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < depth; i++)
		u->free_ops[u->nfree++] = depth - 1 - i;
	r = io_uring_queue_init(round_pow2(depth), &u->ring, 0);
	if (r < 0)
		goto fail;
	*ret_uio = u;
	return 0;
fail:
	free(u->ops);
	free(u->free_ops);
	free(u->fin);
	free(u);
	return r;
}

unsigned phos_uio_inflight(const struct phos_uio *uio)
{
	return uio ? uio->depth - uio->nfree : 0;
}

/* Room for one more finished entry. */
static int fin_reserve(struct phos_uio *u)
{
	struct uio_done *n;

	if (u->fin_len < u->fin_cap)
		return 0;
	n = malloc(2 * u->fin_cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < u->fin_len; i++)
		n[i] = u->fin[(u->fin_head + i) & (u->fin_cap - 1)];
	free(u->fin);
	u->fin = n;
	u->fin_cap *= 2;
	u->fin_head = 0;
	return 0;
}

/* Needs fin_reserve first. */
static void fin_push(struct phos_uio *u, void *tag, int result)
{
	u->fin[(u->fin_head + u->fin_len) & (u->fin_cap - 1)] = (struct uio_done){ tag, result };
	u->fin_len++;
}

/* Submits what is queued; -EAGAIN/-EBUSY/-EINTR leave it queued for later. */
static int uio_submit(struct phos_uio *u)
{
	int r;

	if (io_uring_sq_ready(&u->ring) == 0)
		return 0;
	r = io_uring_submit(&u->ring);
	if (r == -EAGAIN || r == -EBUSY || r == -EINTR)
		return 0;
	return r < 0 ? r : 0;
}

/* Queues an SQE for the rest of record i. */
static int uio_prep(struct phos_uio *u, unsigned i, unsigned extra_flags)
{
	struct uio_op *op = &u->ops[i];
	size_t n = op->len - op->done;
	struct io_uring_sqe *sqe;
	int r;

	if (n > UIO_MAX_SUBMIT)
		n = UIO_MAX_SUBMIT;
	sqe = io_uring_get_sqe(&u->ring);
	if (!sqe) {
		r = io_uring_submit(&u->ring);
		if (r < 0)
			return r;
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	if (op->is_write)
		io_uring_prep_write(sqe, op->fd, op->buf + op->done, (unsigned)n, op->off + op->done);
	else
		io_uring_prep_read(sqe, op->fd, op->buf + op->done, (unsigned)n, op->off + op->done);
	io_uring_sqe_set_data64(sqe, i);
	if ((op->flags & PHOS_UIO_ASYNC) || extra_flags)
		io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	return 0;
}

static void uio_release(struct phos_uio *u, unsigned i)
{
	u->free_ops[u->nfree++] = i;
}

/* Handles one CQE: resubmits the rest or moves the op to finished (space
 * reserved by the caller). */
static void uio_handle(struct phos_uio *u, unsigned i, int res)
{
	struct uio_op *op = &u->ops[i];
	int result = 0, r;

	if (res == -EAGAIN || res == -EINTR) {
		/* Retry from a worker, which may block. */
		r = uio_prep(u, i, IOSQE_ASYNC);
		if (r == 0)
			return;
		result = r;
	} else if (res < 0) {
		result = res;
	} else if (res == 0) {
		result = op->is_write ? -EIO : -ENODATA;
	} else {
		op->done += (size_t)res;
		if (op->done < op->len) {
			r = uio_prep(u, i, 0);
			if (r == 0)
				return;
			result = r;
		}
	}
	fin_push(u, op->tag, result);
	uio_release(u, i);
}

/* Reaps one CQE into finished, submitting what is queued first (with the wait
 * in the same system call when waiting). Returns 1 when one was handled, 0
 * when none was there and wait is false. */
static int uio_reap(struct phos_uio *u, bool wait)
{
	struct io_uring_cqe *cqe;
	unsigned i;
	int r, res;

	r = fin_reserve(u);
	if (r < 0)
		return r;
	for (;;) {
		r = io_uring_peek_cqe(&u->ring, &cqe);
		if (r == 0)
			break;
		if (r != -EAGAIN)
			return r;
		if (io_uring_sq_ready(&u->ring)) {
			r = wait ? io_uring_submit_and_wait(&u->ring, 1) : io_uring_submit(&u->ring);
			if (r == -EAGAIN || r == -EBUSY || r == -EINTR) {
				/* The kernel is short of memory, or a signal: try again. */
				if (!wait)
					return 0;
				sched_yield();
				continue;
			}
			if (r < 0)
				return r;
			continue;
		}
		if (!wait)
			return 0;
		r = io_uring_wait_cqe(&u->ring, &cqe);
		if (r == 0)
			break;
		if (r != -EINTR)
			return r;
	}
	i = (unsigned)io_uring_cqe_get_data64(cqe);
	res = cqe->res;
	io_uring_cqe_seen(&u->ring, cqe);
	if (i >= u->depth)
		return -EIO; /* not ours: cannot happen */
	uio_handle(u, i, res);
	return 1;
}

static int uio_queue(struct phos_uio *u, int fd, void *buf, size_t len, uint64_t off, void *tag,
		     unsigned flags, bool is_write)
{
	unsigned i;
	int r;

	if (!u || fd < 0 || (!buf && len) || (flags & ~(unsigned)PHOS_UIO_ASYNC))
		return -EINVAL;
	if (phos_fault(is_write ? "uio_write" : "uio_read") || len == 0) {
		r = fin_reserve(u);
		if (r < 0)
			return r;
		fin_push(u, tag, len == 0 ? 0 : (is_write ? -ENOSPC : -EIO));
		return 0;
	}
	while (u->nfree == 0) {
		r = uio_reap(u, true);
		if (r < 0)
			return r;
	}
	i = u->free_ops[--u->nfree];
	u->ops[i] = (struct uio_op){ .fd = fd, .buf = buf, .len = len, .off = off, .tag = tag,
				     .is_write = is_write, .flags = flags };
	r = uio_prep(u, i, 0);
	if (r < 0) {
		uio_release(u, i);
		return r;
	}
	/* The op is queued now: a failed submit here surfaces in phos_uio_complete,
	 * which submits again. */
	if (io_uring_sq_space_left(&u->ring) == 0)
		uio_submit(u);
	return 0;
}

int phos_uio_read(struct phos_uio *uio, int fd, void *buf, size_t len, uint64_t off, void *tag,
		  unsigned flags)
{
	return uio_queue(uio, fd, buf, len, off, tag, flags, false);
}

int phos_uio_write(struct phos_uio *uio, int fd, const void *buf, size_t len, uint64_t off,
		   void *tag, unsigned flags)
{
	/* The buffer is only read from; the record keeps one pointer type for both. */
	return uio_queue(uio, fd, (void *)(uintptr_t)buf, len, off, tag, flags, true);
}

int phos_uio_complete(struct phos_uio *uio, bool wait, void **ret_tag, int *ret_result)
{
	struct uio_done d;
	int r;

	if (!uio)
		return -EINVAL;
	while (uio->fin_len == 0) {
		if (phos_uio_inflight(uio) == 0)
			return uio_submit(uio);
		r = uio_reap(uio, wait);
		if (r < 0)
			return r;
		if (r == 0)
			return 0;
	}
	d = uio->fin[uio->fin_head];
	uio->fin_head = (uio->fin_head + 1) & (uio->fin_cap - 1);
	uio->fin_len--;
	if (ret_tag)
		*ret_tag = d.tag;
	if (ret_result)
		*ret_result = d.result;
	return 1;
}

void phos_uio_free(struct phos_uio *uio)
{
	struct io_uring_cqe *cqe;

	if (!uio)
		return;
	/* The kernel may still write into callers' buffers: wait for every op,
	 * without resubmitting remainders. */
	if (phos_uio_inflight(uio) && io_uring_sq_ready(&uio->ring))
		io_uring_submit(&uio->ring);
	while (phos_uio_inflight(uio)) {
		int r = io_uring_wait_cqe(&uio->ring, &cqe);

		if (r == -EINTR)
			continue;
		if (r < 0)
			break;
		if (io_uring_cqe_get_data64(cqe) < uio->depth)
			uio_release(uio, (unsigned)io_uring_cqe_get_data64(cqe));
		io_uring_cqe_seen(&uio->ring, cqe);
	}
	io_uring_queue_exit(&uio->ring);
	free(uio->ops);
	free(uio->free_ops);
	free(uio->fin);
	free(uio);
}
