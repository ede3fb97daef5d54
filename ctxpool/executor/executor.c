/* SPDX-License-Identifier: MIT */
/* The dispatcher: records in ring order, replies, pending asynchronous errors. */
#include "executor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "staging.h"

int handle_put(struct handle_table *t, uint32_t id, void *obj)
{
	if (id == 0 || id >= EXEC_MAX_HANDLES)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (id >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		void **s;

		while (cap <= id)
			cap *= 2;
		s = realloc(t->slot, cap * sizeof(*s));
		if (!s)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		memset(s + t->cap, 0, (cap - t->cap) * sizeof(*s));
		t->slot = s;
		t->cap = cap;
	}
	if (t->slot[id])
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE; /* id reused while alive */
	t->slot[id] = obj;
	return 0;
}

void *handle_get(const struct handle_table *t, uint32_t id)
{
	return id < t->cap ? t->slot[id] : NULL;
}

void *handle_take(struct handle_table *t, uint32_t id)
{
	void *obj = handle_get(t, id);

	if (obj)
		t->slot[id] = NULL;
	return obj;
}

void handle_table_exit(struct handle_table *t)
{
	free(t->slot);
	t->slot = NULL;
	t->cap = 0;
}

int exec_stream(struct executor *ex, uint32_t id, void **ret_stream)
{
	struct exec_stream_obj *s;

	if (id == 0) {
		*ret_stream = NULL;
		return 0;
	}
	s = handle_get(&ex->streams, id);
	if (!s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	/* Work on a stream runs on the stream's device, whichever is selected. */
	if (s->device != ex->dev_index)
		exec_use_device(ex, s->device);
	*ret_stream = s->dev;
	return 0;
}

void exec_use_device(struct executor *ex, int d)
{
	if (d < 0 || d >= ex->ndevs)
		return;
	ex->dev = ex->devs[d];
	ex->dev_index = d;
}

int exec_drain_all(struct executor *ex)
{
	int d = ex->dev_index, r = 0;

	for (int k = 0; k < ex->ndevs && r == 0; k++) {
		exec_use_device(ex, k);
		r = ex->dev_ops->synchronize(ex->dev);
	}
	exec_use_device(ex, d);
	return r;
}

int exec_device_at(const struct executor *ex, uint64_t addr)
{
	uint64_t d;

	if (ex->ndevs <= 1 || addr < ex->arena_base || !ex->dev_stride)
		return ex->ndevs <= 1 ? 0 : ex->cur;
	d = (addr - ex->arena_base) / ex->dev_stride;
	return d < (uint64_t)ex->ndevs ? (int)d : ex->cur;
}

void *exec_func_here(const struct executor *ex, const struct exec_func *f)
{
	return ex->dev_index == 0 ? f->dev_func : f->peer_func[ex->dev_index];
}

uint64_t exec_var_here(const struct executor *ex, const struct exec_var *v)
{
	return ex->dev_index == 0 ? v->addr : v->peer_addr[ex->dev_index];
}

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
	case PHOS_OP_MALLOC ... PHOS_OP_HOSTMEM_REMOVE:
	case PHOS_OP_DEVICE_INFO ... PHOS_OP_DEVICE_RESET:
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

uint64_t exec_env_bytes(const char *name, uint64_t dflt, uint64_t max, uint64_t multiple)
{
	const char *env = getenv(name);
	unsigned long long v;
	char *end;

	if (!env || !*env)
		return dflt;
	errno = 0;
	v = strtoull(env, &end, 10);
	if (*end || errno || env[0] == '-' || v > max || (multiple > 1 && v % multiple)) {
		phos_warn("%s=%s is not a number of bytes (at most %llu, a multiple of %llu); using the default", name,
			  env, (unsigned long long)max, (unsigned long long)multiple);
		return dflt;
	}
	return v;
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
