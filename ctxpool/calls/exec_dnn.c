/* SPDX-License-Identifier: MIT */
/*
 * cuDNN records (proto.h, PHOS_OP_DNN_*): handles and backend descriptors by
 * the preload's ids, the attributes that name other objects translated, and
 * the read/write set of every execution.
 *
 *   DNN_CREATE / DESC_CREATE   an object of the backend under the preload's id
 *   DNN_SET / DNN_GET          elements of type HANDLE and BACKEND_DESCRIPTOR
 *                              travel as ids and are objects here; the rest
 *                              are the function's bytes, passed unchanged
 *   DNN_EXECUTE                the plan on the handle, with a variant pack the
 *                              preload kept: its tensors' extents (computed
 *                              there from the tensor descriptors of the plan's
 *                              operation graph) are read and written, the
 *                              workspace (the plan's WORKSPACE_SIZE) written;
 *                              a pack the preload could not size is opaque
 *   DNN_BN, DNN_BN_SIZE        batch normalization of the legacy API, the
 *                              tensor descriptors by value
 *   DNN_RNN, DNN_RNN_ASK       RNN passes, dropout's states and the RNN size
 *                              and weight queries, every descriptor by value
 *   DNN_CTC, DNN_CTC_SIZE      CTC losses (the legacy call's host arrays in the
 *                              record) and their workspace's size
 *
 * Batch normalization sets:
 *
 *   inference   x, scale, bias, estimated mean, variance    read    y written
 *   training    x, scale, bias, running mean and variance   read    y, running
 *               (when given)                                        mean, variance,
 *                                                                   saved mean, inverse
 *                                                                   variance, workspace,
 *                                                                   reserve written
 *   backward    x, dy, scale, saved mean and inverse        read    dx, dscale, dbias,
 *               variance (when given), reserve                      workspace written
 *
 * RNN sets (x, y: the data descriptors' extents, h and c the state
 * tensors', the weight space, workspace and reserve the sizes given):
 *
 *   forward     x, hx, cx, weights, devSeqLengths   read    y, hy, cy, workspace,
 *               dropout's states (training)                 reserve (training),
 *                                                           dropout's states
 *                                                           (training) written
 *   backward    y, dy, hx, dhy, cx, dcy, weights,   read    dx, dhx, dcx,
 *   data        reserve                                     workspace, reserve written
 *   backward    x, hx, y, reserve (dweights when    read    dweights, workspace
 *   weights     added to)                                   written
 *   dropout     -                                           its states written
 *   states
 *   CTC loss    probs; label and input lengths and the  costs (batch values of
 *               labels' buffer (the _v8 call: device    the compute type),
 *               arrays)                                 gradients, workspace
 *                                                       written
 *
 * (y is also read when beta is not zero.) Every call is synchronous except
 * EXECUTE, BN, STF, RNN and CTC, which go in stream order; the
 * cudnnStatus_t comes back in the reply's library status.
 */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dnn_dev.h"
#include "executor.h"
#include "log.h"

/*
 * The plan cache. Finalizing a plan of a fused engine compiles its kernel
 * (50-65 ms for PyTorch's attention on the H200), and every restore makes
 * the function's plans again (the preload replays their attributes). So a
 * descriptor carries a key: a hash of its type, of every attribute set on
 * it in order (descriptors by their own keys, handles by the backend's
 * object) and of the query that filled it. At scrub a finalized plan goes to
 * ex->dnn_plan_cache and the handles to ex->dnn_spare_handles; a later
 * DNN_CREATE takes a spare handle of its device, and the finalize of a plan
 * whose key matches a cached one takes the cached plan (the same content on
 * the same handle) instead of compiling it again.
 *
 * Descriptors are counted: a descriptor set into another one (or that filled
 * it) lives while that one does, so a cached plan never outlives what it was
 * made of, whatever cuDNN keeps by reference.
 */
struct exec_dnn_obj {
	void *dev;      /* the backend's object */
	int32_t type;   /* cudnnBackendDescriptorType_t; -1: a handle */
	int32_t device; /* the device it was made on */
	bool planned;   /* an execution plan, finalized: */
	uint64_t workspace;   /* its WORKSPACE_SIZE, asked once */
	bool keyed;           /* key says what it is (not: an attribute could not be keyed) */
	XXH128_hash_t key;
	void *handle_dev;     /* the handle set on it or on what it was made of (a plan: its
			       * operation graph's), or NULL */
	uint64_t born;        /* a handle: when the function made it (the spares go out in that order) */
	int refs;             /* the function's id, and each descriptor that uses it */
	struct exec_dnn_obj **uses;   /* descriptors set into it, one reference each */
	uint32_t nuses, cap_uses;
};

static const struct phos_dnn_ops *dnn(const struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_dnn_cuda : &phos_dnn_sim;
}

/* A failed cuDNN status: the record fails too (a posted record's error then
 * reaches the function at its next synchronising call), and the status goes
 * back in the reply. */
static int fail(int *st, int status)
{
	*st = status;
	if (status)
		phos_debug("cudnn: status %d", status);
	return status == PHOS_DNN_SUCCESS ? 0
	       : status >= PHOS_DNN_NOT_SUPPORTED && status < PHOS_DNN_INTERNAL_ERROR ? -PHOS_CUDA_NOT_SUPPORTED
									       : -PHOS_CUDA_INVALID_VALUE;
}

/* A backend's result: its own error, else its status. */
static int result(int r, int *st)
{
	return r < 0 ? r : fail(st, *st);
}

/* The same, naming the attribute (PHOS_LOG=debug says which failed). */
static int attr_result(int r, int *st, const char *what, const struct phos_dnn_attr *a)
{
	if (r == 0 && *st)
		phos_debug("cudnn: %s of attribute %d (type %d, %lld elements) on descriptor %u: status %d", what, a->name,
			   a->type, (long long)a->count, a->desc, *st);
	return result(r, st);
}

static struct exec_dnn_obj *obj_get(struct executor *ex, bool handle, uint32_t id)
{
	struct exec_dnn_obj *o = handle_get(handle ? &ex->dnn_handles : &ex->dnn_descs, id);

	if (o && o->device != ex->cur)
		exec_use_device(ex, o->device);
	return o;
}

static XXH128_hash_t key_of(XXH128_hash_t prev, const void *what, size_t len, const void *more, size_t more_len)
{
	XXH3_state_t *h = XXH3_createState();
	XXH128_hash_t k = { 0, 0 };

	if (!h)
		return k;
	XXH3_128bits_reset(h);
	XXH3_128bits_update(h, &prev, sizeof(prev));
	XXH3_128bits_update(h, what, len);
	if (more_len)
		XXH3_128bits_update(h, more, more_len);
	k = XXH3_128bits_digest(h);
	XXH3_freeState(h);
	return k;
}

static int uses_add(struct exec_dnn_obj *o, struct exec_dnn_obj *u)
{
	if (o->nuses == o->cap_uses) {
		uint32_t cap = o->cap_uses ? 2 * o->cap_uses : 4;
		struct exec_dnn_obj **n = realloc(o->uses, cap * sizeof(*n));

		if (!n)
			return -1;
		o->uses = n;
		o->cap_uses = cap;
	}
	o->uses[o->nuses++] = u;
	u->refs++;
	return 0;
}

static void plans_forget(struct executor *ex, const void *dev);

static void unref(struct executor *ex, struct exec_dnn_obj *o)
{
	if (--o->refs > 0)
		return;
	if (o->device != ex->cur)
		exec_use_device(ex, o->device);
	if (o->type < 0) {
		/* No plan made on it is kept or taken again: another handle may
		 * come to the same address. */
		plans_forget(ex, o->dev);
		for (uint32_t id = 0; id < ex->dnn_descs.cap; id++) {
			struct exec_dnn_obj *p = handle_get(&ex->dnn_descs, id);

			if (p && p->handle_dev == o->dev)
				p->keyed = false;
		}
		dnn(ex)->handle_destroy(ex->dev, o->dev);
	} else
		dnn(ex)->desc_destroy(ex->dev, o->dev);
	for (uint32_t i = 0; i < o->nuses; i++)
		unref(ex, o->uses[i]);
	free(o->uses);
	free(o);
}

/* A spare handle of the current device, taken out of the spares, or NULL. */
static struct exec_dnn_obj *spare_handle(struct executor *ex)
{
	for (unsigned i = 0; i < ex->ndnn_spare_handles; i++) {
		struct exec_dnn_obj *o = ex->dnn_spare_handles[i];

		if (o->device != ex->cur)
			continue;
		memmove(&ex->dnn_spare_handles[i], &ex->dnn_spare_handles[i + 1],
			(--ex->ndnn_spare_handles - i) * sizeof(o));
		return o;
	}
	return NULL;
}

static int make(struct executor *ex, bool handle, uint32_t id, int type, int *st)
{
	struct handle_table *t = handle ? &ex->dnn_handles : &ex->dnn_descs;
	struct exec_dnn_obj *o;
	void *dev = NULL;
	int r;

	if (handle_get(t, id) || id == 0 || id >= EXEC_MAX_HANDLES)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (!handle && (type < 0 || type > PHOS_DNN_DESCRIPTOR_TYPE_LAST))
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (handle && (o = spare_handle(ex)) != NULL) {   /* an earlier function's (the plan cache's key) */
		o->born = ++ex->dnn_handle_births;
		if (ex->trace)
			fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"dnn_handle\",\"handle\":\"%p\",\"spare\":true}\n",
				(unsigned long long)ex->seq, o->dev);
		if (handle_put(t, id, o) == 0)
			return fail(st, PHOS_DNN_SUCCESS);
		unref(ex, o);
		return fail(st, PHOS_DNN_INTERNAL_ERROR);
	}
	r = result(handle ? dnn(ex)->handle_create(ex->dev, &dev, st) : dnn(ex)->desc_create(ex->dev, type, &dev, st),
		   st);
	if (r < 0)
		return r;
	o = calloc(1, sizeof(*o));
	if (!o || handle_put(t, id, o) < 0) {
		free(o);
		if (handle)
			dnn(ex)->handle_destroy(ex->dev, dev);
		else
			dnn(ex)->desc_destroy(ex->dev, dev);
		return fail(st, PHOS_DNN_INTERNAL_ERROR);
	}
	*o = (struct exec_dnn_obj){ .dev = dev, .type = handle ? -1 : type, .device = ex->cur, .refs = 1,
				    .keyed = true, .born = handle ? ++ex->dnn_handle_births : 0 };
	o->key = key_of(o->key, &o->type, sizeof(o->type), NULL, 0);
	return 0;
}

static bool object_type(int type)
{
	return type == PHOS_DNN_TYPE_HANDLE || type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR;
}

/* The object of an element id of a set or get, or NULL. */
static struct exec_dnn_obj *element(struct executor *ex, int type, uint64_t id)
{
	bool handle = type == PHOS_DNN_TYPE_HANDLE;

	return id && id < EXEC_MAX_HANDLES ? handle_get(handle ? &ex->dnn_handles : &ex->dnn_descs, (uint32_t)id)
					   : NULL;
}

/* The elements of a set or get: ids of objects become the backend's objects. */
static int translate(struct executor *ex, int type, int64_t count, const uint64_t *ids, void **out)
{
	for (int64_t i = 0; i < count; i++) {
		struct exec_dnn_obj *o = element(ex, type, ids[i]);

		if (ids[i] && !o)
			return -1;
		out[i] = o ? o->dev : NULL;
	}
	return 0;
}

/* After a set that succeeded: the key takes the attribute in, and o holds
 * on to the descriptors set into it. */
static void note_set(struct executor *ex, struct exec_dnn_obj *o, const struct phos_dnn_attr *a, const void *elems,
		     size_t len)
{
	struct { int32_t name, type; int64_t count; } hdr = { a->name, a->type, a->count };
	XXH128_hash_t *keys;

	if (!object_type(a->type)) {
		o->key = key_of(o->key, &hdr, sizeof(hdr), elems, len);
		return;
	}
	keys = calloc((size_t)a->count + 1, sizeof(*keys));
	if (!keys) {
		o->keyed = false;
		return;
	}
	for (int64_t i = 0; i < a->count; i++) {
		struct exec_dnn_obj *u = element(ex, a->type, ((const uint64_t *)elems)[i]);

		if (!u)
			continue;
		if (a->type == PHOS_DNN_TYPE_HANDLE) {   /* the very handle: a plan is bound to it */
			memcpy(&keys[i], &u->dev, sizeof(u->dev));
			o->handle_dev = u->dev;
			continue;
		}
		keys[i] = u->key;
		if (!o->handle_dev)   /* a plan is made on its operation graph's handle */
			o->handle_dev = u->handle_dev;
		if (!u->keyed)
			o->keyed = false;
		if (uses_add(o, u) < 0)
			o->keyed = false;   /* (not cached: what it uses might go first) */
	}
	o->key = key_of(o->key, &hdr, sizeof(hdr), keys, (size_t)a->count * sizeof(*keys));
	free(keys);
}

static int attr_set(struct executor *ex, const struct phos_dnn_attr *a, const void *elems, uint32_t len, int *st)
{
	size_t esize = phos_dnn_attr_type_size(a->type);
	struct exec_dnn_obj *o = obj_get(ex, false, a->desc);
	void *objs[256], **buf = objs;
	int r;

	if (!o)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (!esize)
		return fail(st, PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE);
	if (a->count < 0 || a->count > PHOS_DNN_MAX_ELEMS || (uint64_t)a->count * esize != len)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (!object_type(a->type)) {
		r = attr_result(dnn(ex)->set(ex->dev, o->dev, a->name, a->type, a->count, elems, st), st, "set", a);
	} else if (a->count > 256 && !(buf = malloc((size_t)a->count * sizeof(void *)))) {
		return fail(st, PHOS_DNN_INTERNAL_ERROR);
	} else if (translate(ex, a->type, a->count, elems, buf) < 0) {
		r = fail(st, PHOS_DNN_BAD_PARAM);
	} else {
		r = attr_result(dnn(ex)->set(ex->dev, o->dev, a->name, a->type, a->count, buf, st), st, "set", a);
	}
	if (buf != objs)
		free(buf);
	if (r == 0)
		note_set(ex, o, a, elems, len);
	return r;
}

/* After a get that filled descriptors (heuristics' engine configurations):
 * each is what the source's query gave at its index, and holds the source. */
static void note_filled(struct executor *ex, struct exec_dnn_obj *src, const struct phos_dnn_attr *a,
			const uint64_t *ids)
{
	for (int64_t i = 0; i < a->count; i++) {
		struct { int32_t name; int64_t requested, index; XXH128_hash_t src; } q = { a->name, a->count, i, src->key };
		struct exec_dnn_obj *u = element(ex, a->type, ids[i]);

		if (!u)
			continue;
		u->key = key_of(u->key, &q, sizeof(q), NULL, 0);
		if (!u->handle_dev)
			u->handle_dev = src->handle_dev;
		if (!src->keyed || uses_add(u, src) < 0)
			u->keyed = false;
	}
}

/* Reply: i64 count, then the elements (none for descriptors: filled in place). */
static int attr_get(struct executor *ex, const struct phos_dnn_attr *a, const void *ids, uint32_t len, void *out,
		    uint32_t *out_len, int *st)
{
	size_t esize = phos_dnn_attr_type_size(a->type);
	struct exec_dnn_obj *o = obj_get(ex, false, a->desc);
	int64_t count = 0;
	int r;

	if (!o)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (!esize)
		return fail(st, PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE);
	if (a->type == PHOS_DNN_TYPE_HANDLE)   /* (no id to give back) */
		return fail(st, PHOS_DNN_NOT_SUPPORTED);
	if (a->count < 0 || a->count > PHOS_DNN_MAX_ELEMS ||
	    (uint64_t)a->count * esize > PHOS_REPLY_MAX - sizeof(int64_t))
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (a->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR) {
		void **objs;

		if ((uint64_t)a->count * sizeof(uint64_t) != len)
			return fail(st, PHOS_DNN_BAD_PARAM);
		objs = calloc((size_t)a->count + 1, sizeof(void *));
		if (!objs)
			return fail(st, PHOS_DNN_INTERNAL_ERROR);
		if (translate(ex, a->type, a->count, ids, objs) < 0)
			r = fail(st, PHOS_DNN_BAD_PARAM);
		else
			r = attr_result(dnn(ex)->get(ex->dev, o->dev, a->name, a->type, a->count, &count, objs, st), st,
					"get", a);
		free(objs);
		if (r == 0)
			note_filled(ex, o, a, ids);
	} else {
		r = attr_result(dnn(ex)->get(ex->dev, o->dev, a->name, a->type, a->count, &count,
					   (char *)out + sizeof(int64_t), st), st, "get", a);
	}
	if (r < 0)
		return r;
	if (count < 0 || (count > a->count && a->type != PHOS_DNN_TYPE_BACKEND_DESCRIPTOR && a->count))
		count = a->count;   /* (a count query: count alone) */
	memcpy(out, &count, sizeof(count));
	*out_len = sizeof(int64_t) +
		   (a->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR ? 0 : (uint32_t)((count < a->count ? count : a->count) * (int64_t)esize));
	return 0;
}

/* The plan's workspace size, asked of the backend. */
static int plan_workspace(struct executor *ex, void *plan, uint64_t *ret)
{
	int64_t ws = 0, count = 0;
	int st = 0, r = dnn(ex)->get(ex->dev, plan, PHOS_DNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, PHOS_DNN_TYPE_INT64,
				     1, &count, &ws, &st);

	if (r < 0 || st || count != 1 || ws < 0)
		return -1;
	*ret = (uint64_t)ws;
	return 0;
}

static int execute(struct executor *ex, const struct phos_dnn_execute *e, const uint8_t *payload, uint32_t plen,
		   int *st)
{
	const struct phos_dnn_vp_entry *ent = (const void *)payload;
	struct exec_dnn_obj *h = obj_get(ex, true, e->handle), *plan = handle_get(&ex->dnn_descs, e->plan);
	int64_t uids[PHOS_DNN_MAX_VP];
	void *ptrs[PHOS_DNN_MAX_VP];
	struct spec_set set;
	uint64_t ws = 0, values;
	void *stream;

	if (!h || !plan || plan->type != PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR || e->n > PHOS_DNN_MAX_VP ||
	    (uint64_t)e->n * sizeof(*ent) > plen)
		return fail(st, PHOS_DNN_BAD_PARAM);
	values = plen - (uint64_t)e->n * sizeof(*ent);
	spec_clear(&set);
	set.opaque = e->opaque != 0;
	for (uint32_t i = 0; i < e->n; i++) {
		uids[i] = ent[i].uid;
		if (ent[i].value_len) {   /* by value: the bytes came with the record */
			if ((uint64_t)ent[i].value_off + ent[i].value_len > values)
				return fail(st, PHOS_DNN_BAD_PARAM);
			ptrs[i] = (void *)(payload + (size_t)e->n * sizeof(*ent) + ent[i].value_off);
			continue;
		}
		ptrs[i] = (void *)(uintptr_t)ent[i].ptr;
		if (!set.opaque && spec_range(ex, &set, ent[i].ptr, ent[i].bytes, SPEC_READ | SPEC_WRITE) < 0) {
			phos_warn("cudnn: tensor %lld of an execution (%llu bytes at 0x%llx) is not in device memory",
				  (long long)ent[i].uid, (unsigned long long)ent[i].bytes, (unsigned long long)ent[i].ptr);
			return fail(st, PHOS_DNN_BAD_PARAM);
		}
	}
	if (!plan->planned)
		return fail(st, PHOS_DNN_BAD_PARAM_NOT_FINALIZED);
	ws = plan->workspace;
	if (ws && !e->workspace)
		return fail(st, PHOS_DNN_BAD_PARAM_NULL_POINTER);
	if (ws && spec_range(ex, &set, e->workspace, ws, SPEC_WRITE) < 0)
		return fail(st, PHOS_DNN_BAD_PARAM);
	TRY(exec_stream(ex, e->stream, &stream));
	TRY(spec_commit(ex, "dnn_execute", NULL, e->stream, &set));
	return result(dnn(ex)->execute(ex->dev, h->dev, stream, plan->dev, (int)e->n, uids, ptrs,
				       (void *)(uintptr_t)e->workspace, st), st);
}

static bool zero_scalar(const uint8_t *p)
{
	static const uint8_t z[8];

	return memcmp(p, z, 8) == 0;
}

static int bn_set(struct executor *ex, const struct phos_dnn_bn *b, struct spec_set *s)
{
	uint64_t xb, pb, yb = 0, db = 0;

	if (!phos_dnn_tensor_bytes(&b->x, &xb) || !phos_dnn_tensor_bytes(&b->bn, &pb))
		return -1;
	if (b->kind == PHOS_DNN_BN_BACKWARD ? !phos_dnn_tensor_bytes(&b->dy, &yb) || !phos_dnn_tensor_bytes(&b->dx, &db)
					    : !phos_dnn_tensor_bytes(&b->y, &yb))
		return -1;
#define R(a, n) do { if (spec_range(ex, s, (a), (n), SPEC_READ) < 0) return -1; } while (0)
#define W(a, n) do { if (spec_range(ex, s, (a), (n), SPEC_WRITE) < 0) return -1; } while (0)
#define RW(a, n) do { if (spec_range(ex, s, (a), (n), SPEC_READ | SPEC_WRITE) < 0) return -1; } while (0)
	R(b->px, xb);
	R(b->scale, pb);
	switch (b->kind) {
	case PHOS_DNN_BN_INFERENCE:
	case PHOS_DNN_BN_TRAINING:
		R(b->bias, pb);
		if (b->kind == PHOS_DNN_BN_INFERENCE) {
			R(b->mean, pb);
			R(b->var, pb);
		} else {
			if (b->mean)
				RW(b->mean, pb);
			if (b->var)
				RW(b->var, pb);
			if (b->save_mean)
				W(b->save_mean, pb);
			if (b->save_inv_var)
				W(b->save_inv_var, pb);
		}
		if (zero_scalar(b->beta))
			W(b->py, yb);
		else
			RW(b->py, yb);
		break;
	case PHOS_DNN_BN_BACKWARD:
		R(b->pdy, yb);
		if (b->save_mean)
			R(b->save_mean, pb);
		if (b->save_inv_var)
			R(b->save_inv_var, pb);
		if (zero_scalar(b->beta))
			W(b->pdx, db);
		else
			RW(b->pdx, db);
		if (zero_scalar(b->beta_param)) {
			W(b->dscale, pb);
			W(b->dbias, pb);
		} else {
			RW(b->dscale, pb);
			RW(b->dbias, pb);
		}
		if (b->reserve_bytes)
			R(b->reserve, b->reserve_bytes);
		break;
	default:
		return -1;
	}
	if (b->workspace_bytes)
		W(b->workspace, b->workspace_bytes);
	if (b->kind == PHOS_DNN_BN_TRAINING && b->reserve_bytes)
		W(b->reserve, b->reserve_bytes);
#undef R
#undef W
#undef RW
	return 0;
}

static int bn(struct executor *ex, const struct phos_dnn_bn *b, int *st)
{
	struct exec_dnn_obj *h = obj_get(ex, true, b->handle);
	struct spec_set set;
	void *stream;

	if (!h)
		return fail(st, PHOS_DNN_BAD_PARAM);
	spec_clear(&set);
	if (bn_set(ex, b, &set) < 0)
		return fail(st, PHOS_DNN_BAD_PARAM);
	TRY(exec_stream(ex, b->stream, &stream));
	TRY(spec_commit(ex, "dnn_bn", NULL, b->stream, &set));
	return result(dnn(ex)->bn(ex->dev, h->dev, stream, b, st), st);
}

/* A spatial transformer's sets: theta (N x 2 x 3) and the grid (N x H x W x 2)
 * of the descriptor's type, the tensors by their descriptors; a nonzero
 * beta reads what it scales. */
static int stf_set(struct executor *ex, const struct phos_dnn_stf *f, struct spec_set *s)
{
	uint64_t es = phos_dnn_data_type_size(f->type), n, h, w, theta, grid, xb, yb;

	if (f->nb != 4 || f->sampler != PHOS_DNN_SAMPLER_BILINEAR || !es || f->dims[0] < 1 || f->dims[2] < 1 ||
	    f->dims[3] < 1)
		return -1;
	n = (uint64_t)f->dims[0], h = (uint64_t)f->dims[2], w = (uint64_t)f->dims[3];
	theta = n * 6 * es;   /* (n < 2^31: no overflow) */
	if (__builtin_mul_overflow(n * h, w, &grid) || __builtin_mul_overflow(grid, 2 * es, &grid))
		return -1;
#define R(a, b) do { if (spec_range(ex, s, (a), (b), SPEC_READ) < 0) return -1; } while (0)
#define W(a, b) do { if (spec_range(ex, s, (a), (b), SPEC_WRITE) < 0) return -1; } while (0)
#define OUT(a, b, scale) do { if (zero_scalar(scale)) W(a, b); else { R(a, b); W(a, b); } } while (0)
	switch (f->kind) {
	case PHOS_DNN_STF_GRID:
		R(f->theta, theta);
		W(f->grid, grid);
		return 0;
	case PHOS_DNN_STF_GRID_BACKWARD:
		R(f->dgrid, grid);
		W(f->dtheta, theta);
		return 0;
	case PHOS_DNN_STF_SAMPLE:
		if (!phos_dnn_tensor_bytes(&f->x, &xb) || !phos_dnn_tensor_bytes(&f->y, &yb))
			return -1;
		R(f->px, xb);
		R(f->grid, grid);
		OUT(f->py, yb, f->beta);
		return 0;
	case PHOS_DNN_STF_SAMPLE_BACKWARD:
		if (!phos_dnn_tensor_bytes(&f->x, &xb) || !phos_dnn_tensor_bytes(&f->dy, &yb) ||
		    !phos_dnn_tensor_bytes(&f->dx, &n))
			return -1;
		R(f->px, xb);
		R(f->pdy, yb);
		R(f->grid, grid);
		OUT(f->pdx, n, f->beta);
		OUT(f->dgrid, grid, f->beta_dgrid);
		return 0;
	}
#undef R
#undef W
#undef OUT
	return -1;
}

static int stf(struct executor *ex, const struct phos_dnn_stf *f, int *st)
{
	struct exec_dnn_obj *h = obj_get(ex, true, f->handle);
	struct spec_set set;
	void *stream;

	if (!h)
		return fail(st, PHOS_DNN_BAD_PARAM);
	spec_clear(&set);
	if (stf_set(ex, f, &set) < 0)
		return fail(st, PHOS_DNN_BAD_PARAM);
	TRY(exec_stream(ex, f->stream, &stream));
	TRY(spec_commit(ex, "dnn_stf", NULL, f->stream, &set));
	return result(dnn(ex)->stf(ex->dev, h->dev, stream, f, st), st);
}

/* Bytes of one RNN data tensor (its layout, batch lengths seq): unpacked
 * layouts span max_seq x batch vectors, the packed one the sum of the
 * lengths. False on a bad descriptor or an overflow. */
static bool rnn_data_bytes(const struct phos_dnn_rnn_data *d, const int32_t *seq, uint64_t *ret)
{
	uint64_t es = phos_dnn_data_type_size(d->type), n = 0;

	if (!es || d->layout < 0 || d->layout > 2 || d->batch < 1 || d->batch > PHOS_DNN_RNN_BATCH_MAX ||
	    d->max_seq < 1 || d->vector < 1 || d->vector > PHOS_DNN_RNN_SIZE_MAX)
		return false;
	for (int32_t b = 0; b < d->batch; b++) {
		if (seq[b] < 0 || seq[b] > d->max_seq)
			return false;
		n += (uint64_t)seq[b];
	}
	if (d->layout != 1)   /* SEQ_MAJOR_UNPACKED, BATCH_MAJOR_UNPACKED */
		n = (uint64_t)d->max_seq * (uint64_t)d->batch;
	return !__builtin_mul_overflow(n, (uint64_t)d->vector * es, ret);
}

/* The descriptor's own bounds (the library checks the rest). */
static bool rnn_desc_ok(const struct phos_dnn_rnn_desc *r)
{
	return r->cell >= 0 && r->cell <= 3 && r->dir >= 0 && r->dir <= 1 && r->bias >= 0 && r->bias <= 3 &&
	       r->input_mode >= 0 && r->input_mode <= 1 && r->algo >= 0 && r->algo <= 3 &&
	       phos_dnn_data_type_size(r->data_type) && r->layers >= 1 && r->layers <= 1024 && r->input_size >= 1 &&
	       r->input_size <= PHOS_DNN_RNN_SIZE_MAX && r->hidden_size >= 1 && r->hidden_size <= PHOS_DNN_RNN_SIZE_MAX &&
	       r->proj_size >= 1 && r->proj_size <= r->hidden_size && r->dropout >= 0 && r->dropout < 1 &&
	       !r->states == !r->states_bytes;
}

static bool rnn_has_data(int kind)
{
	return kind == PHOS_DNN_RNN_FORWARD || kind == PHOS_DNN_RNN_BACKWARD_DATA ||
	       kind == PHOS_DNN_RNN_BACKWARD_WEIGHTS;
}

/* The record's sequence lengths (len bytes after it): x's, then y's for the
 * passes (equal), x's alone for TEMP_SPACE; NULL when they do not fit. */
static const int32_t *rnn_seqs(const struct phos_dnn_rnn *r, const void *more, uint32_t len)
{
	const int32_t *seq = more;
	uint64_t want;

	if (rnn_has_data(r->kind)) {
		if (r->x.batch < 1 || r->x.batch > PHOS_DNN_RNN_BATCH_MAX || r->y.batch != r->x.batch ||
		    r->y.max_seq != r->x.max_seq || r->y.layout != r->x.layout)
			return NULL;
		want = 2 * (uint64_t)r->x.batch * sizeof(int32_t);
		if (len != want || memcmp(seq, seq + r->x.batch, (size_t)r->x.batch * sizeof(int32_t)))
			return NULL;
		return seq;
	}
	if (r->kind == PHOS_DNN_RNN_TEMP_SPACE) {
		if (r->x.batch < 1 || r->x.batch > PHOS_DNN_RNN_BATCH_MAX ||
		    len != (uint64_t)r->x.batch * sizeof(int32_t))
			return NULL;
		return seq;
	}
	return len == 0 ? seq : NULL;
}

/* An RNN pass's set (the table above). */
static int rnn_set(struct executor *ex, const struct phos_dnn_rnn *r, const int32_t *seq, struct spec_set *s)
{
	uint64_t xb, yb, hb = 0, cb = 0;
	bool training = r->kind != PHOS_DNN_RNN_FORWARD || r->fwd_mode == 1;
	bool hs = r->hx || r->hy || r->dhx || r->dhy, cs = r->cx || r->cy || r->dcx || r->dcy;

	if (r->kind == PHOS_DNN_DROPOUT_INIT)
		return spec_range(ex, s, r->r.states, r->r.states_bytes, SPEC_WRITE);
	if (!rnn_data_bytes(&r->x, seq, &xb) || !rnn_data_bytes(&r->y, seq, &yb) ||
	    (hs && !phos_dnn_tensor_bytes(&r->h, &hb)) || (cs && !phos_dnn_tensor_bytes(&r->c, &cb)))
		return -1;
#define R(a, n) do { if ((a) && spec_range(ex, s, (a), (n), SPEC_READ) < 0) return -1; } while (0)
#define W(a, n) do { if ((a) && spec_range(ex, s, (a), (n), SPEC_WRITE) < 0) return -1; } while (0)
#define RW(a, n) do { if ((a) && spec_range(ex, s, (a), (n), SPEC_READ | SPEC_WRITE) < 0) return -1; } while (0)
	R(r->dev_seq, (uint64_t)r->x.batch * sizeof(int32_t));
	W(r->work, r->work_bytes);
	switch (r->kind) {
	case PHOS_DNN_RNN_FORWARD:
		if (!r->px || !r->py || !r->weights)
			return -1;
		R(r->px, xb);
		W(r->py, yb);
		R(r->hx, hb);
		W(r->hy, hb);
		R(r->cx, cb);
		W(r->cy, cb);
		R(r->weights, r->weights_bytes);
		if (training) {
			W(r->reserve, r->reserve_bytes);
			if (r->r.dropout > 0)
				RW(r->r.states, r->r.states_bytes);
		}
		return 0;
	case PHOS_DNN_RNN_BACKWARD_DATA:
		if (!r->py || !r->pdy || !r->pdx || !r->weights || !r->reserve)
			return -1;
		R(r->py, yb);
		R(r->pdy, yb);
		W(r->pdx, xb);
		R(r->hx, hb);
		R(r->dhy, hb);
		W(r->dhx, hb);
		R(r->cx, cb);
		R(r->dcy, cb);
		W(r->dcx, cb);
		R(r->weights, r->weights_bytes);
		RW(r->reserve, r->reserve_bytes);
		return 0;
	case PHOS_DNN_RNN_BACKWARD_WEIGHTS:
		if (!r->px || !r->py || !r->dweights || !r->reserve || r->wgrad_mode < 0 || r->wgrad_mode > 1)
			return -1;
		R(r->px, xb);
		R(r->hx, hb);
		R(r->py, yb);
		if (r->wgrad_mode == 0)   /* CUDNN_WGRAD_MODE_ADD */
			RW(r->dweights, r->weights_bytes);
		else
			W(r->dweights, r->weights_bytes);
		R(r->reserve, r->reserve_bytes);
		return 0;
	}
#undef R
#undef W
#undef RW
	return -1;
}

static int rnn(struct executor *ex, const struct phos_dnn_rnn *r, const void *more, uint32_t len,
	       struct phos_reply_dnn_rnn *out, uint32_t *out_len, int *st)
{
	struct exec_dnn_obj *h = obj_get(ex, true, r->handle);
	const int32_t *seq = rnn_seqs(r, more, len);
	bool ask = r->kind >= PHOS_DNN_RNN_WEIGHT_SPACE;
	struct spec_set set;
	void *stream = NULL;

	if (!h || !seq || r->kind < 0 || r->kind > PHOS_DNN_DROPOUT_STATES_SIZE)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (r->kind == PHOS_DNN_DROPOUT_INIT ? !(r->r.dropout >= 0 && r->r.dropout < 1 && r->r.states && r->r.states_bytes)
					     : r->kind != PHOS_DNN_DROPOUT_STATES_SIZE && !rnn_desc_ok(&r->r))
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (ask) {
		struct phos_reply_dnn_rnn ret = { .m_off = -1, .b_off = -1 };
		uint64_t xb;

		if (r->kind == PHOS_DNN_RNN_TEMP_SPACE && !rnn_data_bytes(&r->x, seq, &xb))
			return fail(st, PHOS_DNN_BAD_PARAM);
		if (r->kind == PHOS_DNN_RNN_WEIGHT_PARAMS && (r->layer < 0 || r->lin < 0 || r->lin > 8))
			return fail(st, PHOS_DNN_BAD_PARAM);
		TRY(result(dnn(ex)->rnn(ex->dev, h->dev, NULL, r, r->kind == PHOS_DNN_RNN_TEMP_SPACE ? seq : NULL, &ret,
					st), st));
		memcpy(out, &ret, sizeof(ret));
		*out_len = sizeof(ret);
		return 0;
	}
	spec_clear(&set);
	if (rnn_set(ex, r, seq, &set) < 0)
		return fail(st, PHOS_DNN_BAD_PARAM);
	TRY(exec_stream(ex, r->stream, &stream));
	TRY(spec_commit(ex, "dnn_rnn", NULL, r->stream, &set));
	return result(dnn(ex)->rnn(ex->dev, h->dev, stream, r, r->kind == PHOS_DNN_DROPOUT_INIT ? NULL : seq, NULL, st),
		      st);
}

/* A CTC loss's record (its host arrays after it, len bytes, for api 7):
 * probs and gradients T x B x A of the compute type, lengths within them,
 * labels within the alphabet (0 is the blank). NULL arrays (api 8) or the
 * arrays; *bad set when the record does not hold. */
static const int32_t *ctc_check(const struct phos_dnn_ctc *c, const void *more, uint32_t len, bool *bad)
{
	const int32_t *a = more;
	int64_t T, B, A, sum = 0;

	*bad = true;
	if ((c->api != 7 && c->api != 8) || c->algo < 0 || c->algo > 1 || c->probs.nb != 3 ||
	    c->probs.type != c->comp_type || !phos_dnn_data_type_size(c->comp_type) || c->norm_mode < 0 ||
	    c->norm_mode > 1 || (c->grads.nb && (c->grads.nb != 3 || memcmp(c->grads.dims, c->probs.dims, 3 * sizeof(int32_t)))))
		return NULL;
	T = c->probs.dims[0], B = c->probs.dims[1], A = c->probs.dims[2];
	if (T < 1 || B < 1 || A < 2 || B > PHOS_DNN_RNN_BATCH_MAX)
		return NULL;
	if (c->api == 8) {
		*bad = len != 0;
		return NULL;
	}
	if (c->nlabels < 0 || c->nlabels > PHOS_DNN_CTC_LABELS_MAX ||
	    len != ((uint64_t)c->nlabels + 2 * (uint64_t)B) * sizeof(int32_t))
		return NULL;
	for (int64_t i = 0; i < c->nlabels; i++)
		if (a[i] < 1 || a[i] >= A)
			return NULL;
	for (int64_t b = 0; b < B; b++) {
		int32_t l = a[c->nlabels + b], t = a[c->nlabels + B + b];

		if (l < 0 || l > 255 || t < 0 || t > T)
			return NULL;
		sum += l;
	}
	*bad = sum != c->nlabels;
	return a;
}

/* A CTC loss's set (the table above). */
static int ctc_set(struct executor *ex, const struct phos_dnn_ctc *c, struct spec_set *s)
{
	uint64_t pb, gb = 0, B = (uint64_t)c->probs.dims[1];

	if (!c->pprobs || !c->costs || !phos_dnn_tensor_bytes(&c->probs, &pb) || (c->pgrads && !c->grads.nb) ||
	    (c->grads.nb && !phos_dnn_tensor_bytes(&c->grads, &gb)))
		return -1;
	TRY(spec_range(ex, s, c->pprobs, pb, SPEC_READ));
	TRY(spec_range(ex, s, c->costs, B * phos_dnn_data_type_size(c->comp_type), SPEC_WRITE));
	if (c->pgrads)
		TRY(spec_range(ex, s, c->pgrads, gb, SPEC_WRITE));
	if (c->work_bytes)
		TRY(spec_range(ex, s, c->work, c->work_bytes, SPEC_WRITE));
	if (c->api == 8) {
		const struct phos_buf *lb = phos_bufmap_find(ex->bufs, c->labels);

		/* the labels' extent is the sum of lengths held in device memory: their whole buffer */
		if (!lb || !c->label_lengths || !c->input_lengths)
			return -1;
		TRY(spec_range(ex, s, lb->addr, lb->size, SPEC_READ));
		TRY(spec_range(ex, s, c->label_lengths, B * sizeof(int32_t), SPEC_READ));
		TRY(spec_range(ex, s, c->input_lengths, B * sizeof(int32_t), SPEC_READ));
	}
	return 0;
}

static int ctc(struct executor *ex, uint32_t op, const struct phos_dnn_ctc *c, const void *more, uint32_t len,
	       void *out, uint32_t *out_len, int *st)
{
	struct exec_dnn_obj *h = obj_get(ex, true, c->handle);
	bool bad;
	const int32_t *arrays = ctc_check(c, more, len, &bad);
	struct spec_set set;
	void *stream;

	if (!h || bad)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (op == PHOS_OP_DNN_CTC_SIZE) {
		uint64_t n = 0;

		TRY(result(dnn(ex)->ctc(ex->dev, h->dev, NULL, c, arrays, &n, st), st));
		memcpy(out, &n, sizeof(n));
		*out_len = sizeof(n);
		return 0;
	}
	spec_clear(&set);
	if (ctc_set(ex, c, &set) < 0)
		return fail(st, PHOS_DNN_BAD_PARAM);
	TRY(exec_stream(ex, c->stream, &stream));
	TRY(spec_commit(ex, "dnn_ctc", NULL, c->stream, &set));
	return result(dnn(ex)->ctc(ex->dev, h->dev, stream, c, arrays, NULL, st), st);
}

/* A plan about to be finalized that a cached plan matches: o takes the
 * cached plan's backend object (finalized, its workspace known) and what it
 * uses; the cache entry goes with o's unfinalized object. */
static bool cached_plan(struct executor *ex, struct exec_dnn_obj *o)
{
	if (ex->trace)   /* what the cache saw: a plan whose key never matches shows here */
		fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"dnn_finalize\",\"type\":%d,\"keyed\":%s,"
			"\"handle\":\"%p\",\"key\":\"%016llx%016llx\",\"cached\":%u}\n",
			(unsigned long long)ex->seq, o->type, o->keyed ? "true" : "false", o->handle_dev,
			(unsigned long long)o->key.high64, (unsigned long long)o->key.low64, ex->ndnn_plan_cache);
	if (o->type != PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR || o->planned || !o->keyed || !o->handle_dev)
		return false;
	for (unsigned i = 0; i < ex->ndnn_plan_cache; i++) {
		struct exec_dnn_obj *c = ex->dnn_plan_cache[i], t;

		if (c->device != o->device || c->handle_dev != o->handle_dev || !XXH128_isEqual(c->key, o->key))
			continue;
		memmove(&ex->dnn_plan_cache[i], &ex->dnn_plan_cache[i + 1], (--ex->ndnn_plan_cache - i) * sizeof(c));
		t = *o;
		o->dev = c->dev;
		o->uses = c->uses;
		o->nuses = c->nuses;
		o->cap_uses = c->cap_uses;
		o->planned = true;
		o->workspace = c->workspace;
		c->dev = t.dev;
		c->uses = t.uses;
		c->nuses = t.nuses;
		c->cap_uses = t.cap_uses;
		c->refs = 1;
		unref(ex, c);
		ex->dnn_plans_reused++;
		phos_debug("cudnn: plan finalized before (an earlier function's), taken from the cache");
		if (ex->trace)
			fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"dnn_plan_cached\",\"reused\":%llu}\n",
				(unsigned long long)ex->seq, (unsigned long long)ex->dnn_plans_reused);
		return true;
	}
	return false;
}

/* cudnnCreate on the device the call names (made current). */
static int handle_create(struct executor *ex, const struct phos_dnn_handle *c, int *st)
{
	if (c->device != ex->cur) {
		if (c->device < 0 || c->device >= ex->ndevs)
			return fail(st, PHOS_DNN_BAD_PARAM);
		exec_use_device(ex, c->device);
	}
	return make(ex, true, c->id, -1, st);
}

/* cudnnDestroy (handle) or a descriptor's destroy: the table's reference. */
static int destroy(struct executor *ex, bool handle, uint32_t id, int *st)
{
	struct exec_dnn_obj *o = handle_take(handle ? &ex->dnn_handles : &ex->dnn_descs, id);

	if (!o)
		return fail(st, PHOS_DNN_BAD_PARAM);
	unref(ex, o);
	return 0;
}

/* cudnnBackendFinalize; a plan's workspace is known from then on (asked
 * once, not at each execution), and a plan cached for the same graph is
 * taken as it is. */
static int finalize(struct executor *ex, uint32_t id, int *st)
{
	struct exec_dnn_obj *o = obj_get(ex, false, id);
	int r;

	if (!o)
		return fail(st, PHOS_DNN_BAD_PARAM);
	if (cached_plan(ex, o))
		return fail(st, PHOS_DNN_SUCCESS);
	r = result(dnn(ex)->finalize(ex->dev, o->dev, st), st);
	if (r == 0 && o->type == PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR)
		o->planned = plan_workspace(ex, o->dev, &o->workspace) == 0;
	return r;
}

/* A batch normalization's workspace or reserve size. */
static int bn_size(struct executor *ex, const struct phos_dnn_bn *b, void *out, uint32_t *out_len, int *st)
{
	struct exec_dnn_obj *h = obj_get(ex, true, b->handle);

	if (!h)
		return fail(st, PHOS_DNN_BAD_PARAM);
	*out_len = sizeof(uint64_t);
	return result(dnn(ex)->bn_size(ex->dev, h->dev, b, out, st), st);
}

int exec_dnn_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out, uint32_t *out_len,
		    int *st)
{
	switch (op) {
	case PHOS_OP_DNN_VERSION:
		*out_len = sizeof(struct phos_reply_dnn_version);
		return result(dnn(ex)->version(ex->dev, out, st), st);
	case PHOS_OP_DNN_CREATE: {
		BODY(struct phos_dnn_handle, c);

		return handle_create(ex, c, st);
	}
	case PHOS_OP_DNN_DESC_CREATE: {
		BODY(struct phos_dnn_desc, c);

		return make(ex, false, c->id, c->type, st);
	}
	case PHOS_OP_DNN_DESTROY:
	case PHOS_OP_DNN_DESC_DESTROY: {
		BODY(struct phos_handle, c);

		return destroy(ex, op == PHOS_OP_DNN_DESTROY, c->id, st);
	}
	case PHOS_OP_DNN_SET: {
		BODY(struct phos_dnn_attr, a);

		return attr_set(ex, a, a + 1, len - (uint32_t)sizeof(*a), st);
	}
	case PHOS_OP_DNN_GET: {
		BODY(struct phos_dnn_attr, a);

		return attr_get(ex, a, a + 1, len - (uint32_t)sizeof(*a), out, out_len, st);
	}
	case PHOS_OP_DNN_FINALIZE: {
		BODY(struct phos_handle, c);

		return finalize(ex, c->id, st);
	}
	case PHOS_OP_DNN_EXECUTE: {
		BODY(struct phos_dnn_execute, e);

		return execute(ex, e, (const uint8_t *)(e + 1), len - (uint32_t)sizeof(*e), st);
	}
	case PHOS_OP_DNN_BN: {
		BODY(struct phos_dnn_bn, b);

		return bn(ex, b, st);
	}
	case PHOS_OP_DNN_STF: {
		BODY(struct phos_dnn_stf, f);

		return stf(ex, f, st);
	}
	case PHOS_OP_DNN_RNN:
	case PHOS_OP_DNN_RNN_ASK: {
		BODY(struct phos_dnn_rnn, r);

		if ((op == PHOS_OP_DNN_RNN_ASK) != (r->kind >= PHOS_DNN_RNN_WEIGHT_SPACE))
			return fail(st, PHOS_DNN_BAD_PARAM);
		return rnn(ex, r, r + 1, len - (uint32_t)sizeof(*r), out, out_len, st);
	}
	case PHOS_OP_DNN_CTC:
	case PHOS_OP_DNN_CTC_SIZE: {
		BODY(struct phos_dnn_ctc, c);

		return ctc(ex, op, c, c + 1, len - (uint32_t)sizeof(*c), out, out_len, st);
	}
	case PHOS_OP_DNN_BN_SIZE: {
		BODY(struct phos_dnn_bn, b);

		return bn_size(ex, b, out, out_len, st);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

bool exec_dnn_in_use(const struct executor *ex)
{
	for (uint32_t id = 0; id < ex->dnn_descs.cap || id < ex->dnn_handles.cap; id++)
		if (handle_get(&ex->dnn_descs, id) || handle_get(&ex->dnn_handles, id))
			return true;
	return false;
}

/* Drops the cached plans made on handle dev (NULL: all of them). */
static void plans_forget(struct executor *ex, const void *dev)
{
	unsigned k = 0;

	for (unsigned i = 0; i < ex->ndnn_plan_cache; i++) {
		struct exec_dnn_obj *p = ex->dnn_plan_cache[i];

		if (!dev || p->handle_dev == dev)
			unref(ex, p);
		else
			ex->dnn_plan_cache[k++] = p;
	}
	ex->ndnn_plan_cache = k;
}

void exec_dnn_clear(struct executor *ex)
{
	unsigned kept = 0, plans = 0;

	/* descriptors first: a plan holds on to its handle */
	for (uint32_t id = 0; id < ex->dnn_descs.cap; id++) {
		struct exec_dnn_obj *o = handle_take(&ex->dnn_descs, id);

		if (!o)
			continue;
		plans += o->type == PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR && o->planned;
		if (o->type == PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR && o->planned && o->keyed && o->handle_dev) {
			kept++;
			if (ex->ndnn_plan_cache == EXEC_DNN_PLAN_CACHE) {
				unref(ex, ex->dnn_plan_cache[0]);
				memmove(&ex->dnn_plan_cache[0], &ex->dnn_plan_cache[1],
					--ex->ndnn_plan_cache * sizeof(o));
			}
			ex->dnn_plan_cache[ex->ndnn_plan_cache++] = o;   /* the function's reference, now the cache's */
			continue;
		}
		unref(ex, o);
	}
	for (uint32_t id = 0; id < ex->dnn_handles.cap; id++) {
		struct exec_dnn_obj *o = handle_take(&ex->dnn_handles, id);

		if (!o)
			continue;
		if (ex->ndnn_spare_handles < EXEC_DNN_SPARE_HANDLES && o->refs == 1) {
			/* in the order the function made them: a restore that makes
			 * its handles again in the same order gets the same ones,
			 * and its plans then match the cached ones */
			unsigned k = ex->ndnn_spare_handles++;

			while (k && ex->dnn_spare_handles[k - 1]->born > o->born) {
				ex->dnn_spare_handles[k] = ex->dnn_spare_handles[k - 1];
				k--;
			}
			ex->dnn_spare_handles[k] = o;
			continue;
		}
		unref(ex, o);   /* (forgets the cached plans made on it) */
	}
	if (plans)
		phos_info("cudnn: %u of the function's %u finalized plans kept for the next function (%llu reused "
			  "so far)", kept, plans, (unsigned long long)ex->dnn_plans_reused);
}

void exec_dnn_cache_clear(struct executor *ex)
{
	plans_forget(ex, NULL);
	while (ex->ndnn_spare_handles)
		unref(ex, ex->dnn_spare_handles[--ex->ndnn_spare_handles]);
}
