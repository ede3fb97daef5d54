/* SPDX-License-Identifier: MIT */
/* The dispatcher: records in ring order, each to the calls that serve it
 * (ctxpool/calls/), replies, pending asynchronous errors, and a context that
 * failed for good. */
#include "executor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "staging.h"

/* SET_DEVICE: the device the function selected, and the part of the arena
 * its allocations go to. */
static int set_device(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_device_query, q);

	if (q->device < 0 || q->device >= ex->ndevs)
		return -PHOS_CUDA_INVALID_DEVICE;
	if (ex->ndevs > 1 &&
	    phos_bufmap_set_window(ex->bufs, ex->arena_base + (uint64_t)q->device * ex->dev_stride, ex->dev_span) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	ex->cur = q->device;
	exec_use_device(ex, q->device);
	return 0;
}

static int hello(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	const struct phos_hello *h = body;
	struct phos_reply_hello *r = out;

	if (len < sizeof(*h))
		return -PHOS_CUDA_INVALID_VALUE;
	if (h->version != PHOS_PROTO_VERSION) {
		phos_err("function speaks protocol %u, executor %u", h->version, PHOS_PROTO_VERSION);
		return -PHOS_CUDA_INITIALIZATION;
	}
	memset(r, 0, sizeof(*r));
	r->version = PHOS_PROTO_VERSION;
	r->device_count = (uint32_t)ex->ndevs;
	r->arena_base = ex->arena_base;
	r->arena_size = ex->arena_size;
	r->backend = strcmp(ex->dev_ops->name, "cuda") == 0;
	r->flags = ex->ndevs > 1 && ex->peers ? PHOS_HELLO_PEERS : 0;
	*out_len = sizeof(*r);
	phos_info("function pid %u connected (%s device)", h->pid, ex->dev_ops->name);
	return 0;
}

static int execute(struct executor *ex, const struct phos_rec_hdr *h, void *out, uint32_t *out_len,
		   int *blas_status)
{
	const void *body = h + 1;

	switch (h->op) {
	case PHOS_OP_NOP:
		return 0;
	case PHOS_OP_HELLO:
		return hello(ex, body, h->len, out, out_len);
	case PHOS_OP_SERVE:
		phos_info("function reached phos_fn_serve after %llu calls", (unsigned long long)ex->calls);
		return exec_serve_point(ex);
	case PHOS_OP_GOODBYE:
		ex->goodbye = true;
		return 0;
	case PHOS_OP_DEVICE_RESET:   /* (everything the function made goes) */
		exec_scrub(ex);
		return 0;
	case PHOS_OP_MALLOC ... PHOS_OP_HOSTMEM_REMOVE:
	case PHOS_OP_DEVICE_INFO ... PHOS_OP_DEVICE_SYNC:
	case PHOS_OP_MEMCPY_2D:
	case PHOS_OP_MEMSET_2D:
	case PHOS_OP_ADDR_RANGE:
	case PHOS_OP_VMM_RESERVE ... PHOS_OP_VMM_UNMAP:
		return exec_memory_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_STREAM_CREATE ... PHOS_OP_EVENT_ELAPSED:
	case PHOS_OP_STREAM_ATTR:
	case PHOS_OP_DEVICE_LIMIT:
		return exec_stream_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_MODULE_LOAD ... PHOS_OP_LAUNCH:
	case PHOS_OP_MODULE_LOAD_SHM:
	case PHOS_OP_LAUNCH_EX:
	case PHOS_OP_OCCUPANCY_CLUSTER:
	case PHOS_OP_MODULE_STATUS:
		return exec_module_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_POOL_CREATE ... PHOS_OP_POOL_ADOPT:
		return exec_pool_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_HOST_FUNC:
		return exec_stream_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_BLAS_CREATE ... PHOS_OP_BLAS_GEMV:
	case PHOS_OP_BLAS_SET_MATRIX ... PHOS_OP_BLAS_LU:
		return exec_blas_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_BLASLT_MATMUL ... PHOS_OP_BLASLT_HEURISTIC:
		return exec_blaslt_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_NCCL_VERSION ... PHOS_OP_NCCL_GROUP:
		return exec_nccl_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_DNN_VERSION ... PHOS_OP_DNN_CTC_SIZE:
		return exec_dnn_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_FFT_VERSION ... PHOS_OP_FFT_EXEC:
		return exec_fft_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_SPARSE_VERSION ... PHOS_OP_SPARSE_EXEC:
		return exec_sparse_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_RAND_VERSION ... PHOS_OP_RAND_REPLAY:
		return exec_rand_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_SOLVER_VERSION ... PHOS_OP_SOLVER_EXEC:
		return exec_solver_handle(ex, h->op, body, h->len, out, out_len, blas_status);
	case PHOS_OP_ARRAY_CREATE ... PHOS_OP_TEX_DESTROY:
		return exec_array_handle(ex, h->op, body, h->len, out, out_len);
	case PHOS_OP_SET_DEVICE:
		return set_device(ex, body, h->len);
	case PHOS_OP_GRAPH_BUILD ... PHOS_OP_GRAPH_DESTROY:
		return exec_graph_handle(ex, h->op, body, h->len);
	default:
		phos_warn("unknown op %u", h->op);
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

/* CUDA's sticky errors: after one, every call of the context fails alike. */
static bool sticky(int code)
{
	switch (code) {
	case 214:   /* ECC uncorrectable */
	case 220:   /* NVLink uncorrectable */
	case PHOS_CUDA_ILLEGAL_ADDRESS:
	case 702:   /* launch timeout */
	case 710:   /* device-side assert */
	case 714: case 715: case 716: case 717: case 718:   /* stack, instruction, alignment, space, pc */
	case PHOS_CUDA_LAUNCH_FAILURE:
		return true;
	default:
		return false;
	}
}

void exec_fatal_check(struct executor *ex, int r)
{
	int s;

	if (!ex->exit_on_fatal || !sticky(-r))
		return;
	s = ex->dev_ops->synchronize(ex->dev);
	if (s == 0)
		return;   /* one operation refused (an argument the checks caught): the device is fine */
	phos_err("the GPU context failed for good (cuda error %d, then %d on synchronize): exiting, so that "
		 "the function is restored from its latest checkpoint or snapshot", -r, -s);
	fflush(NULL);
	_exit(EXEC_EXIT_GPU_FATAL);
}

int exec_serve(struct executor *ex)
{
	void *out = phos_channel_reply_data(ex->ch);
	int end = 0;

	while (!ex->goodbye) {
		const struct phos_rec_hdr *h;
		uint32_t out_len = 0;
		int blas_status = 0, r;

		stage_host_reap(ex, false);   /* a record boundary: nothing queued meanwhile */
		exec_checkpoint_poll(ex);
		/* copying between records: look again at once, or when a recopy's
		 * next paced step is due; copies on the device (a cow's through host
		 * memory): soon */
		{
			int wait_ms = exec_checkpoint_wait_ms(ex);

			if (wait_ms > 1 && (ex->host_reaping || atomic_load(&ex->host_unpin)))
				wait_ms = 1;   /* host copies to unpin, a paced piece at a time */

			r = phos_channel_next(ex->ch, wait_ms, &h);
			exec_checkpoint_waited(ex, r == 1, wait_ms);
		}
		if (r == 0)
			continue;
		if (r < 0) {
			end = r == -EPIPE ? 0 : r;
			break;
		}
		exec_checkpoint_before_op(ex, h->op);
		ex->seq = h->seq;
		ex->sync = (h->flags & PHOS_REC_SYNC) != 0;
		if (ex->trace) {   /* the timeline: every call that held the dispatcher 0.2 ms or more */
			double t0 = phos_now(), dt;

			r = execute(ex, h, out, &out_len, &blas_status);
			if ((dt = phos_now() - t0) >= 2e-4)
				fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"call\",\"name\":\"%s\",\"t_ms\":%.3f,"
					"\"ms\":%.3f}\n", (unsigned long long)h->seq, phos_op_name(h->op), t0 * 1e3,
					dt * 1e3);
		} else {
			r = execute(ex, h, out, &out_len, &blas_status);
		}
		exec_use_device(ex, ex->cur);   /* a stream's device was for its record only */
		ex->calls++;
		if (r < 0)
			exec_fatal_check(ex, r);
		if (h->flags & PHOS_REC_SYNC) {
			uint64_t seq = h->seq;

			if (r == 0 && ex->pending_error) {
				r = ex->pending_error;
				ex->pending_error = 0;
				out_len = 0;
			}
			phos_channel_consume(ex->ch, h);
			phos_channel_reply(ex->ch, seq, -r, blas_status, r ? 0 : out_len);
			if (ex->trace)   /* when a synchronous call answered: the timeline */
				fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"reply\",\"t_ms\":%.3f,\"status\":%d}\n",
					(unsigned long long)seq, phos_now() * 1e3, -r);
		} else {
			if (r < 0) {
				phos_debug("async %s failed: %d", phos_op_name(h->op), -r);
				if (!ex->pending_error)
					ex->pending_error = r;
			}
			phos_channel_consume(ex->ch, h);
		}
	}
	/* The device state is still there: a cow checkpoint in progress ends. */
	exec_checkpoint_drain(ex);
	exec_host_calls_wait(ex);   /* they name the channel, which goes next */
	stage_host_reap(ex, true);
	return end;
}
