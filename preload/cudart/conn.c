/* SPDX-License-Identifier: MIT */
/*
 * The process's one connection to its executor, handle ids and CUDA's
 * thread-local last error.
 *
 * The connection is made lazily by the first CUDA call (often
 * __cudaRegisterFatBinary, from a constructor before main): PHOS_CHANNEL_FD
 * names an inherited, connected Unix stream socket; the executor sends the
 * channel's memfd on it, we map it and say HELLO. The channel has one producer,
 * so a mutex serialises posts and calls; a synchronous call holds it until its
 * reply has been copied out of the shared reply area.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

enum conn_state { CONN_NONE, CONN_UP, CONN_GONE };

static struct {
	pthread_once_t once;
	pthread_mutex_t lock;
	struct phos_channel *ch;
	enum conn_state state;
	int error;                       /* what calls return while not CONN_UP */
	bool goodbye;
	struct phos_reply_hello hello;
	int sent_device;                 /* the device the executor runs records on */
} conn = {
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.error = cudaErrorInitializationError,
};

static __thread int last_error;
static __thread unsigned quiet_depth;   /* > 0 inside a driver API call (libcuda) */

/* --- last error --- */

int phos_set_error(int err)
{
	if (err != cudaSuccess && !quiet_depth)
		last_error = err;
	return err;
}

PHOS_EXPORT void phos_error_quiet_begin(void)
{
	quiet_depth++;
}

PHOS_EXPORT void phos_error_quiet_end(void)
{
	quiet_depth--;
}

int phos_take_error(void)
{
	int e = last_error;

	last_error = cudaSuccess;
	return e;
}

int phos_peek_error(void)
{
	return last_error;
}

/* --- handle ids --- */

struct idtab {
	pthread_mutex_t lock;
	void **slot;
	uint32_t cap;
	uint32_t low;   /* no free id below this */
	uint32_t first;
};

#define IDTAB_INIT(f) { .lock = PTHREAD_MUTEX_INITIALIZER, .first = (f), .low = (f) }
static struct idtab idtabs[PHOS_H__COUNT] = {
	[0] = IDTAB_INIT(1),
	[PHOS_H_STREAM] = IDTAB_INIT(2),
	[PHOS_H_EVENT] = IDTAB_INIT(1),
	[PHOS_H_FUNC] = IDTAB_INIT(1),
	[PHOS_H_BLAS] = IDTAB_INIT(1),
	[PHOS_H_MODULE] = IDTAB_INIT(1),
	[PHOS_H_VAR] = IDTAB_INIT(1),
	[PHOS_H_REGION] = IDTAB_INIT(1),
	[PHOS_H_POOL] = IDTAB_INIT(2),   /* 1 is the default pool (PHOS_POOL_DEFAULT) */
	[PHOS_H_NCCL] = IDTAB_INIT(1),
	[PHOS_H_ARRAY] = IDTAB_INIT(1),
	[PHOS_H_DNN] = IDTAB_INIT(1),
	[PHOS_H_DNN_DESC] = IDTAB_INIT(1),
	[PHOS_H_GRAPH] = IDTAB_INIT(1),
	[PHOS_H_FFT] = IDTAB_INIT(1),
	[PHOS_H_RAND] = IDTAB_INIT(1),
};

/* phos_preload_on_restore: run in order after a restore. */
static int (*restore_hooks[PHOS_RESTORE_HOOKS])(void);

static struct idtab *idtab_of(enum phos_hkind kind)
{
	return kind > 0 && kind < PHOS_H__COUNT ? &idtabs[kind] : NULL;
}

PHOS_EXPORT int phos_ids_add(enum phos_hkind kind, void *obj, uint32_t *ret_id)
{
	struct idtab *t = idtab_of(kind);
	uint32_t id;

	if (!t || !obj)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&t->lock);
	for (id = t->low; id < t->cap && t->slot[id]; id++)
		;
	if (id >= PHOS_MAX_IDS) {
		pthread_mutex_unlock(&t->lock);
		return cudaErrorMemoryAllocation;
	}
	if (id >= t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 64;
		void **s;

		while (cap <= id)
			cap *= 2;
		s = realloc(t->slot, cap * sizeof(*s));
		if (!s) {
			pthread_mutex_unlock(&t->lock);
			return cudaErrorMemoryAllocation;
		}
		memset(s + t->cap, 0, (cap - t->cap) * sizeof(*s));
		t->slot = s;
		t->cap = cap;
	}
	t->slot[id] = obj;
	t->low = id + 1;
	pthread_mutex_unlock(&t->lock);
	*ret_id = id;
	return cudaSuccess;
}

PHOS_EXPORT void *phos_ids_get(enum phos_hkind kind, uint32_t id)
{
	struct idtab *t = idtab_of(kind);
	void *obj = NULL;

	if (!t)
		return NULL;
	pthread_mutex_lock(&t->lock);
	if (id < t->cap)
		obj = t->slot[id];
	pthread_mutex_unlock(&t->lock);
	return obj;
}

PHOS_EXPORT void *phos_ids_take(enum phos_hkind kind, uint32_t id)
{
	struct idtab *t = idtab_of(kind);
	void *obj = NULL;

	if (!t)
		return NULL;
	pthread_mutex_lock(&t->lock);
	if (id < t->cap && (obj = t->slot[id])) {
		t->slot[id] = NULL;
		if (id < t->low)
			t->low = id;
	}
	pthread_mutex_unlock(&t->lock);
	return obj;
}

PHOS_EXPORT void phos_ids_each(enum phos_hkind kind, void (*fn)(uint32_t id, void *obj, void *arg), void *arg)
{
	struct idtab *t = idtab_of(kind);

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < t->cap; i++)
		if (t->slot[i])
			fn(i, t->slot[i], arg);
	pthread_mutex_unlock(&t->lock);
}

PHOS_EXPORT void phos_ids_clear(enum phos_hkind kind, void (*fn)(void *obj))
{
	struct idtab *t = idtab_of(kind);

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < t->cap; i++) {
		if (t->slot[i] && fn)
			fn(t->slot[i]);
		t->slot[i] = NULL;
	}
	t->low = t->first;
	pthread_mutex_unlock(&t->lock);
}

/* --- the calling thread, as the records it sends need it --- */

__thread bool phos_in_host_callback;
__thread bool phos_ptds_null;
static __thread int current_device;
int (*phos_per_thread_stream)(uint32_t *ret_id);
int (*phos_restore_steps[PHOS_RESTORE_STEPS])(void);

PHOS_EXPORT int phos_current_device(void)
{
	return current_device;
}

void phos_current_device_set(int device)
{
	current_device = device;
}

bool phos_event_known(const void *e)
{
	uint32_t id = phos_handle_unwrap(e, PHOS_H_EVENT);

	return id && phos_ids_get(PHOS_H_EVENT, id);
}

int phos_stream_resolve(const void *stream, uint32_t *ret_id)
{
	uint32_t id;

	if (stream == cudaStreamPerThread || (stream == NULL && phos_ptds_null))
		return phos_per_thread_stream ? phos_per_thread_stream(ret_id) : cudaErrorInitializationError;
	if (stream == NULL || stream == cudaStreamLegacy) {
		*ret_id = 0;
		return cudaSuccess;
	}
	id = phos_handle_unwrap(stream, PHOS_H_STREAM);
	if (!id || !phos_ids_get(PHOS_H_STREAM, id))
		return cudaErrorInvalidResourceHandle;
	*ret_id = id;
	return cudaSuccess;
}

/* --- the connection --- */

/* A forked child shares the parent's channel: it must never touch it. */
static void atfork_child(void)
{
	conn.state = CONN_NONE;
	conn.error = cudaErrorInitializationError;
	conn.ch = NULL;
	pthread_mutex_init(&conn.lock, NULL);
}

static void connect_once(void)
{
	const char *env = getenv("PHOS_CHANNEL_FD");
	struct phos_hello hello = { .version = PHOS_PROTO_VERSION, .pid = (uint32_t)getpid() };
	const struct phos_reply *rep;
	char *end;
	long fd;
	int r, flags;

	pthread_atfork(NULL, NULL, atfork_child);
	if (!env || !*env) {
		phos_info("PHOS_CHANNEL_FD is not set: every CUDA call fails with cudaErrorInitializationError");
		return;
	}
	errno = 0;
	fd = strtol(env, &end, 10);
	if (errno || *end || fd < 0 || fd > INT_MAX || (flags = fcntl((int)fd, F_GETFD)) < 0) {
		phos_err("PHOS_CHANNEL_FD=%s is not an open descriptor", env);
		return;
	}
	fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC);
	r = phos_channel_connect_new((int)fd, &conn.ch);
	if (r < 0) {
		phos_err("cannot connect the channel on fd %ld: %s", fd, strerror(-r));
		return;
	}
	r = phos_channel_call(conn.ch, PHOS_OP_HELLO, &hello, sizeof(hello), NULL, 0, &rep);
	if (r < 0 || rep->status != 0 || rep->len < sizeof(conn.hello)) {
		phos_err("executor refused HELLO (%d, status %d)", r, r < 0 ? 0 : rep->status);
		phos_channel_free(conn.ch);
		conn.ch = NULL;
		return;
	}
	memcpy(&conn.hello, rep + 1, sizeof(conn.hello));
	conn.state = CONN_UP;
	conn.error = cudaSuccess;
	phos_debug("connected: %u device(s), arena %#llx+%#llx, backend %u", conn.hello.device_count,
		   (unsigned long long)conn.hello.arena_base, (unsigned long long)conn.hello.arena_size,
		   conn.hello.backend);
}

/* phos_preload_refuse's error: every CUDA call fails with it (0: none). */
static int refused;

PHOS_EXPORT void phos_preload_refuse(int err)
{
	__atomic_store_n(&refused, err, __ATOMIC_RELAXED);
}

PHOS_EXPORT int phos_preload_connect(void)
{
	int r = __atomic_load_n(&refused, __ATOMIC_RELAXED);

	if (r)
		return r;
	pthread_once(&conn.once, connect_once);
	return conn.state == CONN_UP ? cudaSuccess : conn.error;
}

PHOS_EXPORT const struct phos_reply_hello *phos_preload_hello(void)
{
	phos_preload_connect();
	return &conn.hello;
}

/* Called with the lock held, before a record goes out: an executor of several
 * devices is told when the sending thread selected another device than the
 * last sender (records of one thread after its cudaSetDevice run there). */
static bool device_sync_locked(void)
{
	struct phos_device_query q = { .device = phos_current_device() };

	if (conn.hello.device_count <= 1 || q.device == conn.sent_device)
		return true;
	if (!phos_channel_post(conn.ch, PHOS_OP_SET_DEVICE, 0, &q, sizeof(q), NULL, 0))
		return false;
	conn.sent_device = q.device;
	return true;
}

/* Called with the lock held when the channel failed. */
static int mark_gone(void)
{
	if (conn.state == CONN_UP)
		phos_err("the executor is gone: CUDA calls fail from now on");
	conn.state = CONN_GONE;
	conn.error = cudaErrorDevicesUnavailable;
	return conn.error;
}

/* Calls from a host callback are refused; else connects. */
static int phos_host_callback_check(void)
{
	return phos_in_host_callback ? cudaErrorNotPermitted : phos_preload_connect();
}

struct phos_channel *phos_preload_channel(void)
{
	struct phos_channel *ch;

	pthread_mutex_lock(&conn.lock);
	ch = conn.state == CONN_UP ? conn.ch : NULL;
	pthread_mutex_unlock(&conn.lock);
	return ch;
}

/* The channel each thread's outermost section is on (a restore at
 * phos_fn_serve replaces conn.ch, never inside a section). */
static __thread struct phos_channel *section_ch;
static __thread unsigned section_depth;

PHOS_EXPORT int64_t phos_preload_section_enter(void)
{
	if (!section_depth++) {
		section_ch = phos_preload_channel();
		if (section_ch && phos_channel_section_enter(section_ch) < 0)
			section_ch = NULL;   /* the executor is gone: what is posted fails */
	}
	return section_ch ? (int64_t)phos_channel_adoptions(section_ch) : -1;
}

PHOS_EXPORT void phos_preload_section_leave(void)
{
	if (!section_depth || --section_depth)
		return;
	if (section_ch)
		phos_channel_section_leave(section_ch);
	section_ch = NULL;
}

PHOS_EXPORT int phos_preload_post(uint32_t op, const void *body, size_t body_len, const void *payload,
				  size_t payload_len)
{
	int r = phos_host_callback_check();

	if (r)
		return r;
	pthread_mutex_lock(&conn.lock);
	if (conn.state != CONN_UP)
		r = conn.error;
	else if (!device_sync_locked() || !phos_channel_post(conn.ch, op, 0, body, body_len, payload, payload_len))
		r = mark_gone();
	pthread_mutex_unlock(&conn.lock);
	return r;
}

static int call_locked(uint32_t op, const void *body, size_t body_len, const void *payload,
		       size_t payload_len, void *out, size_t out_cap, size_t *ret_len, int *ret_blas)
{
	const struct phos_reply *rep;
	int r;

	if (conn.state != CONN_UP)
		return conn.error;
	if (!device_sync_locked())
		return mark_gone();
	r = phos_channel_call(conn.ch, op, body, body_len, payload, payload_len, &rep);
	if (r < 0)
		return mark_gone();
	if (out && out_cap && rep->len)
		memcpy(out, rep + 1, rep->len < out_cap ? rep->len : out_cap);
	if (ret_len)
		*ret_len = rep->len;
	if (ret_blas)
		*ret_blas = rep->blas_status;
	return rep->status;
}

PHOS_EXPORT int phos_preload_call(uint32_t op, const void *body, size_t body_len, const void *payload,
				  size_t payload_len, void *out, size_t out_cap, size_t *ret_len,
				  int *ret_blas)
{
	int r = phos_host_callback_check();

	if (r)
		return r;
	pthread_mutex_lock(&conn.lock);
	r = call_locked(op, body, body_len, payload, payload_len, out, out_cap, ret_len, ret_blas);
	pthread_mutex_unlock(&conn.lock);
	return r;
}

PHOS_EXPORT int phos_preload_call_fd(int send_fd, uint32_t op, const void *body, size_t body_len,
				     void *out, size_t out_cap)
{
	int r = phos_preload_connect();

	if (r)
		return r;
	pthread_mutex_lock(&conn.lock);
	if (conn.state != CONN_UP)
		r = conn.error;
	else if (phos_send_fd(phos_channel_socket(conn.ch), send_fd) < 0)
		r = mark_gone();
	else
		r = call_locked(op, body, body_len, NULL, 0, out, out_cap, NULL, NULL);
	pthread_mutex_unlock(&conn.lock);
	return r;
}

PHOS_EXPORT int phos_preload_serve_point(void)
{
	struct phos_hello hello = { .version = PHOS_PROTO_VERSION, .pid = (uint32_t)getpid() };
	struct phos_reply_hello h;
	struct phos_channel *fresh;
	bool restored = false;
	size_t len = 0;
	int r = phos_preload_connect();

	if (r)
		return r;
	pthread_mutex_lock(&conn.lock);
	if (conn.state != CONN_UP) {
		r = conn.error;
		goto out;
	}
	if (!phos_channel_post(conn.ch, PHOS_OP_SERVE, 0, NULL, 0, NULL, 0)) {
		r = mark_gone();
		goto out;
	}
	/* A snapshot is taken while we wait here. */
	r = phos_channel_await(conn.ch, &fresh);
	if (r < 0) {
		r = mark_gone();
		goto out;
	}
	if (r == 1) {
		/* Restored: the old channel is gone with its executor. */
		conn.ch = fresh;
		r = call_locked(PHOS_OP_HELLO, &hello, sizeof(hello), NULL, 0, &h, sizeof(h), &len, NULL);
		if (r || len < sizeof(h) || h.arena_base != conn.hello.arena_base ||
		    h.device_count != conn.hello.device_count) {
			phos_err("the restoring executor refused HELLO (%d) or owns %u GPUs, not %u", r, h.device_count,
				 conn.hello.device_count);
			r = mark_gone();
			goto out;
		}
		conn.hello = h;
		conn.sent_device = 0;   /* a new executor starts on device 0 */
		restored = true;
	}
	r = 0;
out:
	pthread_mutex_unlock(&conn.lock);
	if (restored) {
		r = 0;
		for (int i = 0; r == 0 && i < PHOS_RESTORE_STEPS; i++)
			if (phos_restore_steps[i])
				r = phos_restore_steps[i]();
		for (int i = 0; r == 0 && i < PHOS_RESTORE_HOOKS; i++) {
			int (*fn)(void) = __atomic_load_n(&restore_hooks[i], __ATOMIC_ACQUIRE);

			if (fn)
				r = fn();
		}
	}
	return r;
}

PHOS_EXPORT int phos_preload_on_restore(int (*fn)(void))
{
	for (int i = 0; i < PHOS_RESTORE_HOOKS; i++) {
		int (*none)(void) = NULL;

		if (__atomic_compare_exchange_n(&restore_hooks[i], &none, fn, false, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			return 0;
	}
	return -ENOSPC;
}

PHOS_EXPORT void phos_preload_goodbye(void)
{
	pthread_mutex_lock(&conn.lock);
	if (conn.state == CONN_UP && !conn.goodbye) {
		conn.goodbye = true;
		phos_channel_post(conn.ch, PHOS_OP_GOODBYE, 0, NULL, 0, NULL, 0);
		/* Later calls (atexit handlers unregistering fatbins) fail quietly. */
		conn.state = CONN_GONE;
		conn.error = cudaErrorDevicesUnavailable;
	}
	pthread_mutex_unlock(&conn.lock);
}

__attribute__((constructor)) static void preload_init(void)
{
	phos_log_init("phos-preload", PHOS_LOG_OFF);
}

/* Runs from _dl_fini, after the program's atexit handlers (registered later). */
__attribute__((destructor)) static void preload_fini(void)
{
	phos_preload_goodbye();
}
