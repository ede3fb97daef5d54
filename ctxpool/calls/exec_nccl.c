/* SPDX-License-Identifier: MIT */
/*
 * NCCL records (proto.h, PHOS_OP_NCCL_*): communicators by the preload's ids,
 * the read/write set of every collective, and the backend that runs them
 * (runtime/device/nccl_dev.h: the real NCCL on cuda, shared-memory collectives on sim).
 *
 * Every NCCL record is synchronous and its ncclResult_t goes back in the
 * reply's library status; the handler's own return stays a cudaError_t (0 here
 * unless the record itself is malformed).
 *
 * Read/write sets, in bytes of count x type size:
 *
 *   AllReduce       send  count           read    recv  count            written
 *   Broadcast       send  count (root)    read    recv  count            written
 *   Reduce          send  count           read    recv  count (root)     written
 *   AllGather       send  count           read    recv  nranks x count   written
 *   ReduceScatter   send  nranks x count  read    recv  count            written
 *   Send / Recv     send  count           read    recv  count            written
 *
 * A buffer outside every live allocation is refused with ncclInvalidArgument,
 * as NCCL refuses a pointer that is not device memory.
 *
 * Warm communicators (a pooled executor of several GPUs, exec_nccl_warm):
 *
 *   idle:      warm = one communicator over every device, rank d on device d
 *   function:  ncclGroupStart, INIT rank r on device r (no config) ...  held back
 *              ncclGroupEnd: every rank of one id held back ──▶ the warm set
 *                            under the function's ids; else made as asked
 *   scrub:     the function's communicators aborted; idle again: a new warm set
 *
 * Any other NCCL record while inits are held back makes them first, as asked.
 *
 * Ranks that are threads of one function (a thread per GPU, each calling
 * ncclCommInitRank) meet in this one dispatcher, which must never block
 * waiting for a peer whose record is still to come. So in an executor of
 * several GPUs (where such ranks can be) a communicator of several ranks
 * whose peers are not made with it in one group (PHOS_NCCL_INIT_APART), or
 * that threads use (PHOS_NCCL_INIT_THREADS), is made nonblocking: the init,
 * its collectives and the group ends that involve it answer ncclInProgress
 * when they are not done, and the function's stand-in polls QUERY (the
 * communicator's async error) until they are, between other threads' records
 * (preload/nccl/nccl.c). Elsewhere communicators block, as the function made them:
 * NCCL's nonblocking collectives go through its own thread, several times
 * slower below 16 MiB (measured on two H200s). A split of a communicator
 * another rank of which was made in this executor is refused (it would wait
 * for that rank here, or for one already gone).
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "image.h"
#include "log.h"
#include "nccl_dev.h"

struct exec_nccl_comm {
	void *dev;
	int32_t nranks, rank, device;
	uint64_t clique;            /* hash of its unique id (a split's: of the parent's, split and color) */
	uint32_t splits;
	bool local;                 /* another of its ranks was made in this executor (stays so) */
};


static const struct phos_nccl_ops *backend(struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_nccl_cuda : &phos_nccl_sim;
}

static struct exec_nccl_comm *comm_put(struct executor *ex, uint32_t id, void *dev, int nranks, int rank, int device,
				       uint64_t clique, int *ret_nccl)
{
	struct exec_nccl_comm *c = calloc(1, sizeof(*c));

	if (!c || handle_put(&ex->nccl, id, c) < 0) {
		*ret_nccl = c ? PHOS_NCCL_INVALID_USAGE : PHOS_NCCL_SYSTEM_ERROR;
		free(c);
		backend(ex)->abort(dev);
		return NULL;
	}
	c->dev = dev;
	c->nranks = nranks;
	c->rank = rank;
	c->device = device;
	c->clique = clique;
	for (uint32_t k = 0; k < ex->nccl.cap; k++) {
		struct exec_nccl_comm *o = ex->nccl.slot[k];

		if (o && o != c && o->clique == clique && o->nranks == nranks)
			o->local = c->local = true;
	}
	return c;
}

/* Whether a held-back init may join the warm set: rank r on device r of as
 * many ranks as devices, no config, the id of the others held back, a rank
 * not held back yet. */
static bool warm_fits(const struct executor *ex, const struct phos_nccl_init *in)
{
	if (!ex->nccl_warm_ready || ex->nccl_group_depth == 0 ||
	    (in->flags & (PHOS_NCCL_INIT_THREADS | PHOS_NCCL_INIT_APART)) || in->nranks != ex->ndevs ||
	    in->rank != in->device ||
	    in->blocking != -1 || in->cga_cluster_size != PHOS_NCCL_CONFIG_UNDEF_INT ||
	    in->min_ctas != PHOS_NCCL_CONFIG_UNDEF_INT || in->max_ctas != PHOS_NCCL_CONFIG_UNDEF_INT ||
	    ex->nccl_npending == ex->ndevs)
		return false;
	for (int i = 0; i < ex->nccl_npending; i++) {
		if (ex->nccl_pending[i].rank == in->rank || ex->nccl_pending[i].comm == in->comm ||
		    memcmp(ex->nccl_pending[i].id, in->id, sizeof(in->id)))
			return false;
	}
	return true;
}

static int nccl_init_now(struct executor *ex, const struct phos_nccl_init *in, int *ret_nccl);

/* The held-back inits: the warm set when they are all its ranks, else each
 * made as it was asked. The first failure is in *ret_nccl. */
static void pending_flush(struct executor *ex, int *ret_nccl)
{
	int n = ex->nccl_npending, r;

	ex->nccl_npending = 0;
	if (n == 0)
		return;
	if (n == ex->ndevs && ex->nccl_warm_ready) {
		for (int i = 0; i < n; i++) {
			const struct phos_nccl_init *in = &ex->nccl_pending[i];

			r = 0;
			comm_put(ex, in->comm, ex->nccl_warm[in->rank], in->nranks, in->rank, in->device,
				 phos_image_hash(in->id, sizeof(in->id)), &r);
			ex->nccl_warm[in->rank] = NULL;
			if (r && !*ret_nccl)
				*ret_nccl = r;
		}
		ex->nccl_warm_ready = false;
		phos_info("nccl: the function took the warm communicator over %d GPUs", n);
		return;
	}
	for (int i = 0; i < n; i++) {
		r = 0;
		nccl_init_now(ex, &ex->nccl_pending[i], &r);
		if (r && !*ret_nccl)
			*ret_nccl = r;
	}
}

static int nccl_init(struct executor *ex, const struct phos_nccl_init *in, int *ret_nccl)
{
	if (in->nranks < 1 || in->rank < 0 || in->rank >= in->nranks || in->device < 0 || in->device >= ex->ndevs ||
	    handle_get(&ex->nccl, in->comm))
		return nccl_init_now(ex, in, ret_nccl);   /* refused there, with the reason */
	if (warm_fits(ex, in)) {
		ex->nccl_pending[ex->nccl_npending++] = *in;
		return 0;
	}
	pending_flush(ex, ret_nccl);
	if (*ret_nccl)
		return 0;
	return nccl_init_now(ex, in, ret_nccl);
}

/* Makes the communicator in asks for: nonblocking of several ranks (above). */
static int nccl_init_now(struct executor *ex, const struct phos_nccl_init *in, int *ret_nccl)
{
	bool async = in->nranks > 1 && ex->ndevs > 1 && (in->flags & (PHOS_NCCL_INIT_APART | PHOS_NCCL_INIT_THREADS));
	struct phos_nccl_params p = { in->nranks, in->rank, in->device, async ? 0 : -1, in->cga_cluster_size,
				      in->min_ctas, in->max_ctas };
	void *dev = NULL;

	if (in->nranks < 1 || in->rank < 0 || in->rank >= in->nranks) {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	if (in->device < 0 || in->device >= ex->ndevs) {
		phos_warn("nccl: device %d asked for: this executor owns %d", in->device, ex->ndevs);
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	/* The rank's device is current while NCCL makes it (NCCL takes the
	 * current device), as cudaSetDevice made it in the function. */
	exec_use_device(ex, in->device);
	if (ex->dev_ops->enter(ex->dev) < 0) {
		*ret_nccl = PHOS_NCCL_UNHANDLED_CUDA_ERROR;
		return 0;
	}
	if (handle_get(&ex->nccl, in->comm)) {
		*ret_nccl = PHOS_NCCL_INVALID_USAGE;
		return 0;
	}
	*ret_nccl = backend(ex)->init(in->id, &p, &dev);
	if (*ret_nccl && *ret_nccl != PHOS_NCCL_IN_PROGRESS)
		return 0;
	phos_debug("nccl: communicator %u: rank %d of %d%s", in->comm, in->rank, in->nranks,
		   async ? " (nonblocking)" : "");
	comm_put(ex, in->comm, dev, in->nranks, in->rank, in->device, phos_image_hash(in->id, sizeof(in->id)), ret_nccl);
	return 0;
}

static int nccl_split(struct executor *ex, const struct phos_nccl_split *s, int *ret_nccl)
{
	struct exec_nccl_comm *c = handle_get(&ex->nccl, s->comm);
	void *dev = NULL;
	int nranks = 0, rank = 0;
	struct { uint64_t parent; uint32_t splits; int32_t color; } child;

	if (!c) {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	if (handle_get(&ex->nccl, s->newcomm)) {
		*ret_nccl = PHOS_NCCL_INVALID_USAGE;
		return 0;
	}
	if (c->local) {
		static bool told;

		if (!told)
			phos_warn("nccl: ncclCommSplit of a communicator whose other ranks are in this process is not "
				  "supported by phos-fn: ncclInvalidUsage");
		told = true;
		*ret_nccl = PHOS_NCCL_INVALID_USAGE;
		return 0;
	}
	exec_use_device(ex, c->device);
	if (ex->dev_ops->enter(ex->dev) < 0) {
		*ret_nccl = PHOS_NCCL_UNHANDLED_CUDA_ERROR;
		return 0;
	}
	*ret_nccl = backend(ex)->split(c->dev, s->color, s->key, &dev, &nranks, &rank);
	if (*ret_nccl == 0)
		c->splits++;
	if (*ret_nccl || !dev)
		return 0;
	memset(&child, 0, sizeof(child));
	child.parent = c->clique;
	child.splits = c->splits;
	child.color = s->color;
	comm_put(ex, s->newcomm, dev, nranks, rank, c->device, phos_image_hash(&child, sizeof(child)), ret_nccl);
	return 0;
}

static int nccl_end(struct executor *ex, const struct phos_nccl_end *e, int *ret_nccl)
{
	struct exec_nccl_comm *c = handle_get(&ex->nccl, e->comm);
	const struct phos_nccl_ops *b = backend(ex);

	if (!c) {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	switch (e->how) {
	case PHOS_NCCL_FINALIZE:
		*ret_nccl = b->finalize(c->dev);
		return 0;
	case PHOS_NCCL_DESTROY:
	case PHOS_NCCL_ABORT:
		handle_take(&ex->nccl, e->comm);
		*ret_nccl = e->how == PHOS_NCCL_DESTROY ? b->destroy(c->dev) : b->abort(c->dev);
		free(c);
		return 0;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
}

static int nccl_query(struct executor *ex, const struct phos_handle *h, void *out, uint32_t *out_len,
		      int *ret_nccl)
{
	struct exec_nccl_comm *c = handle_get(&ex->nccl, h->id);
	struct phos_reply_nccl_comm *q = out;
	int err = 0;

	if (!c) {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	*ret_nccl = backend(ex)->async_error(c->dev, &err);
	q->nranks = c->nranks;
	q->rank = c->rank;
	q->device = c->device;
	q->async_error = err;
	*out_len = sizeof(*q);
	return 0;
}

/* The set of one collective (table above). 0, or ncclInvalidArgument when a
 * buffer is not inside a live allocation or a size overflows. */
static int coll_set(struct executor *ex, const struct exec_nccl_comm *c, const struct phos_nccl_coll *k,
		    struct spec_set *set)
{
	uint64_t ts = phos_nccl_type_size(k->type), n = (uint64_t)c->nranks;
	uint64_t send_elems = k->count, recv_elems = k->count;
	bool send = true, recv = true;

	if (ts == 0 || k->count > UINT64_MAX / ts / n)
		return PHOS_NCCL_INVALID_ARGUMENT;
	switch (k->kind) {
	case PHOS_NCCL_ALL_REDUCE:
		break;
	case PHOS_NCCL_BROADCAST:
		send = c->rank == k->peer;
		break;
	case PHOS_NCCL_REDUCE:
		recv = c->rank == k->peer;
		break;
	case PHOS_NCCL_ALL_GATHER:
		recv_elems = k->count * n;
		break;
	case PHOS_NCCL_REDUCE_SCATTER:
		send_elems = k->count * n;
		break;
	case PHOS_NCCL_SEND:
		recv = false;
		break;
	case PHOS_NCCL_RECV:
		send = false;
		break;
	default:
		return PHOS_NCCL_INVALID_ARGUMENT;
	}
	if ((k->kind == PHOS_NCCL_BROADCAST || k->kind == PHOS_NCCL_REDUCE || k->kind == PHOS_NCCL_SEND ||
	     k->kind == PHOS_NCCL_RECV) && (k->peer < 0 || k->peer >= c->nranks))
		return PHOS_NCCL_INVALID_ARGUMENT;
	if (k->count == 0)
		return 0;
	if (send && spec_range(ex, set, k->send, send_elems * ts, SPEC_READ) < 0)
		return PHOS_NCCL_INVALID_ARGUMENT;
	if (recv && spec_range(ex, set, k->recv, recv_elems * ts, SPEC_WRITE) < 0)
		return PHOS_NCCL_INVALID_ARGUMENT;
	return 0;
}

static const char *const coll_names[] = {
	[PHOS_NCCL_ALL_REDUCE] = "nccl_all_reduce", [PHOS_NCCL_BROADCAST] = "nccl_broadcast",
	[PHOS_NCCL_REDUCE] = "nccl_reduce", [PHOS_NCCL_ALL_GATHER] = "nccl_all_gather",
	[PHOS_NCCL_REDUCE_SCATTER] = "nccl_reduce_scatter", [PHOS_NCCL_SEND] = "nccl_send",
	[PHOS_NCCL_RECV] = "nccl_recv",
};

static int nccl_coll(struct executor *ex, const struct phos_nccl_coll *k, int *ret_nccl)
{
	struct exec_nccl_comm *c = handle_get(&ex->nccl, k->comm);
	struct spec_set set;
	void *stream;

	if (!c || k->kind < PHOS_NCCL_ALL_REDUCE || k->kind > PHOS_NCCL_RECV)  {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	/* on the communicator's device, and on a stream of that device */
	exec_use_device(ex, c->device);
	if (exec_stream(ex, k->stream, &stream) < 0 || ex->dev_index != c->device) {
		*ret_nccl = PHOS_NCCL_INVALID_ARGUMENT;
		return 0;
	}
	if (ex->dev_ops->enter(ex->dev) < 0) {
		*ret_nccl = PHOS_NCCL_UNHANDLED_CUDA_ERROR;
		return 0;
	}
	spec_clear(&set);
	*ret_nccl = coll_set(ex, c, k, &set);
	if (*ret_nccl)
		return 0;
	/* The stream waits for any buffer of the set an on-demand restore has
	 * not brought in yet; then the collective is queued behind it. */
	TRY(spec_commit(ex, coll_names[k->kind], NULL, k->stream, &set));
	*ret_nccl = backend(ex)->coll(c->dev, k, stream);
	return 0;
}

int exec_nccl_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *ret_nccl)
{
	const struct phos_nccl_ops *b = backend(ex);

	*ret_nccl = 0;
	/* inits held back for the warm set are made before anything may use them */
	if (ex->nccl_npending && op != PHOS_OP_NCCL_INIT && op != PHOS_OP_NCCL_GROUP) {
		pending_flush(ex, ret_nccl);
		if (*ret_nccl)
			return 0;
	}
	switch (op) {
	case PHOS_OP_NCCL_VERSION: {
		int v = 0;

		*ret_nccl = b->version(&v);
		memcpy(out, &v, sizeof(int32_t));
		*out_len = sizeof(int32_t);
		return 0;
	}
	case PHOS_OP_NCCL_UNIQUE_ID:
		*ret_nccl = b->unique_id(out);
		*out_len = PHOS_NCCL_ID_BYTES;
		return 0;
	case PHOS_OP_NCCL_INIT: {
		BODY(struct phos_nccl_init, in);
		return nccl_init(ex, in, ret_nccl);
	}
	case PHOS_OP_NCCL_SPLIT: {
		BODY(struct phos_nccl_split, s);
		return nccl_split(ex, s, ret_nccl);
	}
	case PHOS_OP_NCCL_END: {
		BODY(struct phos_nccl_end, e);
		return nccl_end(ex, e, ret_nccl);
	}
	case PHOS_OP_NCCL_QUERY: {
		BODY(struct phos_handle, h);
		return nccl_query(ex, h, out, out_len, ret_nccl);
	}
	case PHOS_OP_NCCL_COLL: {
		BODY(struct phos_nccl_coll, k);
		return nccl_coll(ex, k, ret_nccl);
	}
	case PHOS_OP_NCCL_GROUP: {
		BODY(struct phos_nccl_group, g);
		if (g->start) {
			ex->nccl_group_depth++;
			*ret_nccl = b->group_start();
		} else if (ex->nccl_group_depth == 0) {
			*ret_nccl = PHOS_NCCL_INVALID_USAGE;   /* ncclGroupEnd without a start */
		} else {
			int flushed = 0;

			if (--ex->nccl_group_depth == 0)
				pending_flush(ex, &flushed);
			*ret_nccl = b->group_end();
			if (flushed)
				*ret_nccl = flushed;
		}
		return 0;
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

bool exec_nccl_in_use(const struct executor *ex)
{
	for (uint32_t id = 0; id < ex->nccl.cap; id++)
		if (ex->nccl.slot[id])
			return true;
	return false;
}

void exec_nccl_clear(struct executor *ex)
{
	const struct phos_nccl_ops *b = backend(ex);

	/* A group the function left open is closed first (its queued work runs
	 * or fails), so that the next function starts outside any group; inits
	 * held back in it are dropped (never made). */
	ex->nccl_npending = 0;
	while (ex->nccl_group_depth > 0) {
		ex->nccl_group_depth--;
		b->group_end();
	}
	for (uint32_t id = 0; id < ex->nccl.cap; id++) {
		struct exec_nccl_comm *c = handle_take(&ex->nccl, id);

		if (!c)
			continue;
		/* Abort, not destroy: a destroy may wait for peers that are gone. */
		b->abort(c->dev);
		free(c);
	}
}

void exec_nccl_warm(struct executor *ex)
{
	const struct phos_nccl_ops *b = backend(ex);
	static bool told;
	uint8_t id[PHOS_NCCL_ID_BYTES];
	double t0 = phos_now();
	int r;

	if (ex->ndevs < 2 || ex->nccl_warm_ready || getenv("PHOS_NCCL_NO_WARM"))
		return;
	r = b->unique_id(id);
	if (r == 0)
		r = b->group_start();
	for (int d = 0; r == 0 && d < ex->ndevs; d++) {
		struct phos_nccl_params p = { ex->ndevs, d, d, -1, PHOS_NCCL_CONFIG_UNDEF_INT, PHOS_NCCL_CONFIG_UNDEF_INT,
					      PHOS_NCCL_CONFIG_UNDEF_INT };

		exec_use_device(ex, d);
		r = ex->dev_ops->enter(ex->dev) < 0 ? PHOS_NCCL_UNHANDLED_CUDA_ERROR : b->init(id, &p, &ex->nccl_warm[d]);
	}
	if (r == 0)
		r = b->group_end();
	else
		b->group_end();   /* the group is closed whatever failed in it */
	exec_use_device(ex, ex->cur);
	if (r) {
		exec_nccl_warm_drop(ex);
		if (!told)
			phos_warn("nccl: no warm communicator over the %d GPUs (ncclResult_t %d): functions make their own",
				  ex->ndevs, r);
		told = true;
		return;
	}
	ex->nccl_warm_ready = true;
	phos_info("nccl: a warm communicator over %d GPUs is ready (%.1f ms)", ex->ndevs, (phos_now() - t0) * 1e3);
}

void exec_nccl_warm_drop(struct executor *ex)
{
	for (int d = 0; d < EXEC_MAX_DEVICES; d++) {
		if (ex->nccl_warm[d])
			backend(ex)->abort(ex->nccl_warm[d]);
		ex->nccl_warm[d] = NULL;
	}
	ex->nccl_warm_ready = false;
}
