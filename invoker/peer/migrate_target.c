/* SPDX-License-Identifier: MIT */
/*
 * The target of a move (issue 13; the source is migrate.c, whose comment
 * draws both sides): POST /system/functions/NAME/instances from a peer, in
 * one phase (stw, cow) or two (recopy: the pre-copy, then the final phase).
 * The pre-copy's gpu.data is fetched ahead, item by item where this host's
 * own snapshot already holds an item, hashed on several threads, and kept
 * with a warm executor set aside until the final phase or until the source
 * goes quiet.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "control.h"
#include "fault.h"
#include "image.h"
#include "invoker.h"
#include "log.h"
#include "forward.h"
#include "pull.h"
#include "transfer.h"

#include "migrate.h"

/* The source's facts (host_facts) against this host's: 0, or 422 with a body. */
static int host_check(json_t *facts, json_t **ret_body)
{
	const char *standin = mig_str_of(facts, "standin"), *driver = mig_str_of(facts, "driver"), *gpus = mig_str_of(facts, "gpus");
	char models[2048], here[64];

	if (!json_is_object(facts) || !standin || !driver || !gpus || json_object_size(facts) != 3) {
		*ret_body = inv_err_json("host must be {\"standin\", \"driver\", \"gpus\"}, the source's");
		return 400;
	}
	if (strcmp(standin, inv_standin_build())) {
		*ret_body = inv_err_json("the source's CUDA stand-ins are another build (%.32s, here %s): CRIU would not "
					 "restore its instance here; install the same phos-fn build on both hosts",
					 standin, inv_standin_build());
		return 422;
	}
	inv_driver_version(here, sizeof(here));
	if (strcmp(driver, here)) {
		*ret_body = inv_err_json("the source runs NVIDIA driver %.32s, this host %s: move instances only between "
					 "hosts of the same driver", driver[0] ? driver : "(none)", here[0] ? here : "(none)");
		return 422;
	}
	inv_gpu_models(models, sizeof(models));
	for (const char *m = gpus; *m;) {   /* one of the source's models here, at least */
		size_t k = strcspn(m, "\n");
		char one[256];

		snprintf(one, sizeof(one), "%.*s", (int)(k < sizeof(one) - 1 ? k : sizeof(one) - 1), m);
		if (inv_gpu_model_here(one, models))
			return 0;
		m += k + (m[k] == '\n');
	}
	if (!gpus[0] && !models[0])
		return 0;
	*ret_body = inv_err_json("the source's GPUs (%.256s) are not of a model this host has (%.256s)",
				 gpus[0] ? gpus : "none", models[0] ? models : "none");
	return 422;
}

/* Fetches the files of p->img into tmp: modules and cpu/ files verified, and
 * (gpu) gpu.data whole. */
static int fetch_files(struct pull *p, const char *tmp, bool gpu, char *err, size_t errlen)
{
	int r = pull_image_files(p, tmp, err, errlen);

	return r == 0 && gpu ? pull_gpu_data_whole(p, tmp, err, errlen) : r;
}

/* Item places and hashes of a pre-copy, by offset: {off, len, hash}. */
struct prehash {
	uint64_t off, len, hash;
};

/* Hashing items of a copy of gpu.data on several threads (16 GiB took 5.3 s
 * on one thread of an H200 host). Each item i is (off, len) from `place`;
 * out[i] its chunked XXH3, or ~0 with bad[i] set when the copy does not hold
 * it whole. */
struct hasher {
	const uint8_t *map;
	uint64_t have;
	void (*place)(const void *ctx, uint32_t i, uint64_t *off, uint64_t *len, uint64_t *want);
	const void *ctx;
	const struct prehash *pre;   /* (sorted by off) hashes taken before: used where they fit */
	size_t npre;
	uint64_t *out;
	bool *stale;                 /* when set: out[i] compared with want */
	uint32_t n;
	atomic_uint next;
	atomic_uint from_pre;        /* items whose hash came from pre */
};

static int by_off(const void *a, const void *b)
{
	const struct prehash *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static void *hash_worker(void *arg)
{
	struct hasher *h = arg;
	uint32_t i;

	while ((i = atomic_fetch_add(&h->next, 1)) < h->n) {
		uint64_t off, len, want = 0, got;
		struct prehash key, *pre;

		h->place(h->ctx, i, &off, &len, &want);
		key.off = off;
		pre = h->npre ? bsearch(&key, h->pre, h->npre, sizeof(*h->pre), by_off) : NULL;
		if (pre && pre->len == len) {
			got = pre->hash;   /* hashed while the function still ran: not read again */
			atomic_fetch_add(&h->from_pre, 1);
		}
		else if (len && off + len <= h->have)
			got = phos_image_hash(h->map + off, len);
		else
			got = ~0ull;
		if (h->out)
			h->out[i] = got;
		if (h->stale)
			h->stale[i] = len && (got == ~0ull || got != want);
	}
	return NULL;
}

static void hash_items(struct hasher *h)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nt = cpus > 16 ? 16 : cpus > 1 ? (unsigned)cpus : 1, started = 0;
	pthread_t th[16];

	while (started < nt - 1 && pthread_create(&th[started], NULL, hash_worker, h) == 0)
		started++;
	hash_worker(h);
	for (unsigned k = 0; k < started; k++)
		pthread_join(th[k], NULL);
}

static void manifest_place(const void *ctx, uint32_t i, uint64_t *off, uint64_t *len, uint64_t *want)
{
	phos_image_item(ctx, i, off, len, want);
}

/* A pre-copy's items (ctxpool/state/exec_recopy.c, precopy.layout): place, the
 * hash of the source's copy and whether that copy was clean. */
struct layout {
	uint64_t *v;   /* "PHOSLAY2", n, then n x {off, len, hash, clean} */
	uint32_t n;
};

#define LAYOUT_OFF(L, i) ((L)->v[2 + 4 * (size_t)(i)])
#define LAYOUT_LEN(L, i) ((L)->v[3 + 4 * (size_t)(i)])
#define LAYOUT_HASH(L, i) ((L)->v[4 + 4 * (size_t)(i)])
#define LAYOUT_CLEAN(L, i) ((L)->v[5 + 4 * (size_t)(i)])

/* Reads and checks dir/precopy.layout against a gpu.data of data_bytes: 0, or -errno. */
static int layout_read(const char *dir, uint64_t data_bytes, struct layout *L)
{
	char path[PATH_MAX + 32];
	struct stat st;
	int fd, r = -EINVAL;

	L->v = NULL;
	L->n = 0;
	snprintf(path, sizeof(path), "%s/precopy.layout", dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_size < 16 || (uint64_t)st.st_size > LAYOUT_MAX || (st.st_size - 16) % 32)
		goto out;
	L->v = malloc((size_t)st.st_size);
	if (!L->v || pread(fd, L->v, (size_t)st.st_size, 0) != st.st_size || memcmp(L->v, "PHOSLAY2", 8) ||
	    L->v[1] != (uint64_t)(st.st_size - 16) / 32)
		goto out;
	L->n = (uint32_t)L->v[1];
	for (uint32_t i = 0; i < L->n; i++)
		if (LAYOUT_OFF(L, i) > data_bytes || LAYOUT_LEN(L, i) > data_bytes - LAYOUT_OFF(L, i) ||
		    LAYOUT_CLEAN(L, i) > 1 || (i && LAYOUT_OFF(L, i) < LAYOUT_OFF(L, i - 1)))
			goto out;   /* not places of this copy (they ascend) */
	r = 0;
out:
	if (r < 0) {
		free(L->v);
		L->v = NULL;
		L->n = 0;
	}
	close(fd);
	return r;
}

static void layout_place(const void *ctx, uint32_t i, uint64_t *off, uint64_t *len, uint64_t *want)
{
	const struct layout *L = ctx;

	*off = LAYOUT_OFF(L, i);
	*len = LAYOUT_LEN(L, i);
	*want = 0;
}

/* The pre-copy's items hashed into dir/precopy.hashes (from the copy itself,
 * wherever its bytes came from), while the instance still runs at the
 * source: the stop then reads again only what does not hash alike. Best
 * effort: without it the stop hashes the whole copy. */
static void prehash_precopy(const char *dir, int data_fd, uint64_t data_bytes, const struct layout *L)
{
	uint64_t *out = NULL;
	uint8_t *map = NULL;
	struct prehash *ph = NULL;

	if (!L->n)
		return;
	if (data_bytes && (map = mmap(NULL, data_bytes, PROT_READ, MAP_SHARED, data_fd, 0)) == MAP_FAILED)
		return;
	out = malloc(((size_t)L->n + 1) * sizeof(*out));
	ph = malloc(((size_t)L->n + 1) * sizeof(*ph));
	if (out && ph) {
		struct hasher h = { .map = map, .have = data_bytes, .place = layout_place, .ctx = L, .out = out,
				    .n = L->n };
		char werr[256];

		hash_items(&h);
		for (uint32_t i = 0; i < L->n; i++)
			ph[i] = (struct prehash){ LAYOUT_OFF(L, i), LAYOUT_LEN(L, i), out[i] };
		(void)pull_write_new(dir, "precopy.hashes", (const char *)ph, L->n * sizeof(*ph), werr, sizeof(werr));
	}
	if (map)
		munmap(map, data_bytes);
	free(out);
	free(ph);
}

/* A local item by hash: where f's snapshot holds it. */
struct local_item {
	uint64_t hash, off, len;
};

static int by_hash(const void *a, const void *b)
{
	const struct local_item *x = a, *y = b;

	return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* The pre-copy item by item (the layout): a clean item whose hash f's own
 * snapshot holds is copied from there (content-addressed: a function's
 * weights, unchanged since its snapshot, do not cross the network again),
 * the others fetched from the source in runs of adjacent items. 0 or a
 * failure recorded in p; *ret_reused: bytes taken from here. */
static int precopy_by_item(struct inv_function *f, struct pull *p, int fd, const struct layout *L,
			   uint64_t *ret_reused, char *err, size_t errlen)
{
	struct local_item *loc = NULL;
	struct phos_image *img = NULL;
	bool *done = calloc((size_t)L->n + 1, sizeof(bool));
	size_t nloc = 0;
	int sfd = -1, r = 0;

	*ret_reused = 0;
	if (!done)
		return pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	pthread_rwlock_rdlock(&f->snap_lock);
	{
		char path[PATH_MAX + 16], ierr[256];

		snprintf(path, sizeof(path), "%s/gpu.data", f->snapshot_dir);
		if (phos_image_read(f->snapshot_dir, &img, ierr, sizeof(ierr)) == 0 &&
		    (sfd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
		    (loc = malloc(((size_t)phos_image_nitems(img) + 1) * sizeof(*loc)))) {
			for (uint32_t i = 0; i < phos_image_nitems(img); i++) {
				phos_image_item(img, i, &loc[nloc].off, &loc[nloc].len, &loc[nloc].hash);
				nloc += loc[nloc].len > 0;
			}
			qsort(loc, nloc, sizeof(*loc), by_hash);
		}
	}
	for (uint32_t i = 0; sfd >= 0 && nloc && i < L->n; i++) {
		struct local_item key = { .hash = LAYOUT_HASH(L, i) }, *hit;
		loff_t in, out;
		uint64_t left;

		if (!LAYOUT_CLEAN(L, i) || !LAYOUT_LEN(L, i))
			continue;
		hit = bsearch(&key, loc, nloc, sizeof(*loc), by_hash);
		if (!hit || hit->len != LAYOUT_LEN(L, i))
			continue;
		in = (loff_t)hit->off;
		out = (loff_t)LAYOUT_OFF(L, i);
		for (left = hit->len; left;) {
			ssize_t n = copy_file_range(sfd, &in, fd, &out, left, 0);

			if (n <= 0)
				break;
			left -= (uint64_t)n;
		}
		if (!left) {   /* (a short local copy: fetched below, whole) */
			done[i] = true;
			*ret_reused += hit->len;
		}
	}
	pthread_rwlock_unlock(&f->snap_lock);
	if (sfd >= 0)
		close(sfd);
	phos_image_free(img);
	free(loc);
	/* the rest, in runs of items adjacent in the file */
	for (uint32_t i = 0; r == 0 && i < L->n;) {
		uint64_t off, end;

		if (done[i] || !LAYOUT_LEN(L, i)) {
			i++;
			continue;
		}
		off = LAYOUT_OFF(L, i);
		end = off + LAYOUT_LEN(L, i);
		for (i++; i < L->n && !done[i] && LAYOUT_LEN(L, i) && LAYOUT_OFF(L, i) >= end &&
			  LAYOUT_OFF(L, i) <= phos_image_next_offset(end, 0); i++)
			end = LAYOUT_OFF(L, i) + LAYOUT_LEN(L, i);
		r = pull_file_range(p, fd, "gpu.data", off, end - off, err, errlen);
	}
	free(done);
	return r;
}

/* precopy.hashes of the pre-copy at dir, sorted by offset (none: NULL, 0). */
static struct prehash *prehash_load(const char *dir, size_t *ret_n)
{
	char path[PATH_MAX + 32];
	struct prehash *ph = NULL;
	struct stat st;
	int fd;

	*ret_n = 0;
	snprintf(path, sizeof(path), "%s/precopy.hashes", dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= LAYOUT_MAX * 2 &&
	    st.st_size % sizeof(*ph) == 0 && (ph = malloc((size_t)st.st_size)) &&
	    pread(fd, ph, (size_t)st.st_size, 0) == st.st_size) {
		*ret_n = (size_t)st.st_size / sizeof(*ph);
		qsort(ph, *ret_n, sizeof(*ph), by_off);
	} else {
		free(ph);
		ph = NULL;
	}
	close(fd);
	return ph;
}

/* gpu.data of a pre-copy (at tmp, as fetched while the instance ran on) made
 * that of the final checkpoint p->img: each buffer, variable and array whose range
 * does not hash to the manifest's checksum (written since, or new) is
 * fetched again. pre: the pre-copy's hashes by place, taken before the stop
 * (prehash_precopy): an item at one of those places is not read again. */
static int refresh_gpu_data(struct pull *p, const char *tmp, const struct prehash *pre, size_t npre,
			    uint64_t *ret_refetched, unsigned *ret_prehashed, char *err, size_t errlen)
{
	char path[PATH_MAX + 200];
	struct stat sb;
	uint8_t *map = NULL;
	uint64_t have;
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/gpu.data", tmp);
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		r = pull_fail(p, 500, -errno, err, errlen, "the pre-copied gpu.data: %s", strerror(errno));
		goto out;
	}
	have = (uint64_t)sb.st_size;
	if (have && (map = mmap(NULL, have, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		map = NULL;
		r = pull_fail(p, 500, -errno, err, errlen, "mapping the pre-copied gpu.data: %s", strerror(errno));
		goto out;
	}
	if (ftruncate(fd, (off_t)p->img->data_bytes) < 0) {
		r = pull_fail(p, errno == ENOSPC ? 507 : 500, -errno, err, errlen, "gpu.data: %s", strerror(errno));
		goto out;
	}
	{
		uint32_t n = phos_image_nitems(p->img);
		struct hasher v = { .map = map, .have = have, .place = manifest_place, .ctx = p->img, .pre = pre,
				    .npre = npre, .stale = calloc(n + 1, sizeof(bool)), .n = n };

		if (!v.stale) {
			r = pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
			goto out;
		}
		hash_items(&v);
		*ret_prehashed = atomic_load(&v.from_pre);
		for (uint32_t i = 0; r == 0 && i < n; i++) {
			uint64_t off, len, hash;

			if (!v.stale[i])
				continue;
			phos_image_item(p->img, i, &off, &len, &hash);
			r = pull_file_range(p, fd, "gpu.data", off, len, err, errlen);
			*ret_refetched += len;
		}
		free(v.stale);
	}
out:
	if (map)
		munmap(map, have);
	if (fd >= 0)
		close(fd);
	return r;
}

/* ---- executors prepared for the moves coming here ----
 *
 * Once its pre-copy is in, a move's target sets a warm executor aside with
 * the pre-copy pinned (phos_pool_prepare), so that at the stop the moved
 * instance restores with no context to make and its buffers come from the
 * pinned page cache at the copy engine's rate, as a hot snapshot's do. The
 * final phase rewrites what changed in place (the same inode) and verifies
 * every item against the manifest before the restore. One executor per move,
 * given back when the move ends any other way, or after PREPARED_TTL_S.
 */
#define PREPARED_MAX 8
#define PREPARED_TTL_S 900.0

static struct {
	char mid[33];
	struct inv_prepared p;
	double at;
} prepared[PREPARED_MAX];
static pthread_mutex_t prepared_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t prepared_total;   /* executors ever set aside (/metrics) */

void inv_migrate_prepared(unsigned *ret_held, uint64_t *ret_total)
{
	unsigned held = 0;

	pthread_mutex_lock(&prepared_lock);
	for (int i = 0; i < PREPARED_MAX; i++)
		held += prepared[i].mid[0] != '\0';
	*ret_total = prepared_total;
	pthread_mutex_unlock(&prepared_lock);
	*ret_held = held;
}

/* The executor prepared for move mid, taken out of the table (slot -1: none). */
static struct inv_prepared prepared_take(const char *mid)
{
	struct inv_prepared p = { .slot = -1 };

	pthread_mutex_lock(&prepared_lock);
	for (int i = 0; i < PREPARED_MAX; i++) {
		if (prepared[i].mid[0] && !strcmp(prepared[i].mid, mid)) {
			p = prepared[i].p;
			prepared[i].mid[0] = '\0';
			prepared[i].p = (struct inv_prepared){ 0 };
		}
	}
	pthread_mutex_unlock(&prepared_lock);
	return p;
}

static void prepared_drop(struct inv_prepared *p)
{
	if (p->pool && p->slot >= 0)
		phos_pool_unprepare(p->pool, p->slot);
	p->slot = -1;
}

/* Sets an executor aside for move mid of f, its pre-copy (data_bytes) at
 * dir/gpu.data; best effort: without one the restore reads from disk. 0, or
 * -ENOSPC with err when that executor's GPU has too little memory free for
 * the instance (then nothing is held). */
static int prepare_target(struct inv_function *f, const char *mid, const char *dir, uint64_t data_bytes, char *err,
			  size_t errlen)
{
	struct phos_pool *pool = inv_pool_for(f);
	uint64_t pinned = 0, free_b = 0;
	double t0 = phos_now();
	int slot, k = -1;

	if (!pool || !data_bytes || data_bytes > inv_cfg.hot_bytes)
		return 0;   /* (--hot-bytes bounds any one pinned gpu.data) */
	if (phos_pool_prepare(pool, dir, 0, &slot, &pinned, &free_b, err, errlen) < 0) {
		phos_info("%s: migration %s: no executor prepared (%s): the moved instance will read its buffers from "
			  "disk", f->name, mid, err);
		err[0] = '\0';
		return 0;
	}
	if (free_b < data_bytes) {   /* the instance would not fit: refused before the stop */
		phos_pool_unprepare(pool, slot);
		phos_errf(err, errlen, "not enough GPU memory here for the instance (%.1f MiB free, it needs %.1f MiB)",
			 (double)free_b / (1 << 20), (double)data_bytes / (1 << 20));
		return -ENOSPC;
	}
	pthread_mutex_lock(&prepared_lock);
	for (int i = 0; i < PREPARED_MAX && k < 0; i++)
		if (!prepared[i].mid[0])
			k = i;
	if (k >= 0) {
		snprintf(prepared[k].mid, sizeof(prepared[k].mid), "%s", mid);
		prepared[k].p = (struct inv_prepared){ .pool = pool, .slot = slot };
		prepared[k].at = phos_now();
		prepared_total++;
	}
	pthread_mutex_unlock(&prepared_lock);
	if (k < 0) {   /* PREPARED_MAX moves coming in already */
		phos_pool_unprepare(pool, slot);
		return 0;
	}
	if (access(dir, F_OK) != 0) {   /* aborted while it pinned */
		struct inv_prepared p = prepared_take(mid);

		prepared_drop(&p);
		return 0;
	}
	phos_info("%s: migration %s: an executor holds the pre-copy pinned (%.1f MiB in %.1f ms; %.1f MiB of GPU "
		  "memory free)", f->name, mid, (double)pinned / (1 << 20), (phos_now() - t0) * 1e3,
		  (double)free_b / (1 << 20));
	return 0;
}

void inv_migrate_expire(void)
{
	double now = phos_now();

	for (int i = 0; i < PREPARED_MAX; i++) {
		struct inv_prepared p = { .slot = -1 };

		pthread_mutex_lock(&prepared_lock);
		if (prepared[i].mid[0] && now - prepared[i].at > PREPARED_TTL_S) {
			phos_warn("migration %s: no final phase came within %.0f s; its prepared executor goes back",
				  prepared[i].mid, PREPARED_TTL_S);
			p = prepared[i].p;
			prepared[i].mid[0] = '\0';
			prepared[i].p = (struct inv_prepared){ 0 };
		}
		pthread_mutex_unlock(&prepared_lock);
		prepared_drop(&p);
	}
}

/* The function name here (a reference), or, when it is not deployed here,
 * pulled from the move's source first (as POST /system/functions {"from"}
 * would: verified, committed atomically, the program not run) and then taken;
 * NULL with *ret_body and *ret_code when neither works. The pulled function
 * stays deployed whatever the move then does: it is not the instance's state. */
static struct inv_function *function_here(const char *name, const char *from, const char *token, json_t **ret_body,
					  int *ret_code)
{
	struct inv_function *f = inv_function_get(name);
	json_t *req, *ans = NULL;
	int code;

	if (f)
		return f;
	/* (the source waits MIGRATE_TIMEOUT_S for us, this pull included) */
	req = json_pack("{s:s,s:s,s:s,s:I}", "name", name, "from", from, "from_token", token, "deploy_timeout_ms",
			(json_int_t)MIGRATE_TIMEOUT_S * 1000);
	code = req ? inv_pull_deploy(req, &ans) : 500;
	json_decref(req);
	if (code != 201 && code != 409) {   /* (409: deployed meanwhile, or being deployed) */
		*ret_body = inv_err_json("no function %s here, and pulling it from the source failed (%d: %s)", name,
					 code, ans ? json_string_value(json_object_get(ans, "error")) : "out of memory");
		json_decref(ans);
		*ret_code = code == 507 ? 507 : 404;
		return NULL;
	}
	json_decref(ans);
	phos_info("%s: not deployed here: pulled from %s for a move", name, from);
	f = inv_function_get(name);
	if (!f) {
		*ret_body = inv_err_json("no function %s here (pulled from the source, then removed)", name);
		*ret_code = 404;
	}
	return f;
}

/* STATE/checkpoints/pre-MID.tmp-precopy: where a pre-copy waits for its final phase. */
static void pre_dir(char *buf, size_t len, const char *mid)
{
	snprintf(buf, len, "%s/checkpoints/pre-%s.tmp-precopy", inv_cfg.state_dir, mid);   /* (removable: .tmp-) */
}

/* ---- pre-copies waiting for their final phase ----
 *
 * A pre-copy (pre_dir) and the executor prepared for it wait here for their
 * source's final phase, which a source that dies never sends. So a thread per
 * pre-copy asks the source for the move's record (GET /system/migrations/MID
 * with the source's peer token, every orphan_s() / 6 seconds, 0.2..5 s):
 * while it answers that the move runs (starting, precopy, stopping,
 * transferring), the source is alive and its move goes on, however slowly.
 * No such answer for orphan_s() (30 s; PHOS_MIGRATE_ORPHAN_S) since the last
 * one, or since the pre-copy was taken: the source died, was restarted (its
 * records are gone) or lost its move without its abort reaching us. The
 * pre-copy is then reclaimed: its directory removed, its executor given back,
 * and the move marked, so that a late final phase gets 410 rather than a
 * restore from a copy half gone.
 *
 *   precopy taken ─▶ WAITING ──final phase──▶ claimed (out of the table)
 *                       │  └───abort phase──▶ dropped
 *                       └──source quiet orphan_s()──▶ RECLAIMED ──final──▶ 410
 *                                                     (marked INCOMING_KEEP_S)
 */
#define INCOMING_MAX 64             /* pre-copies waiting here at once */
#define INCOMING_KEEP_S 3600.0      /* a reclaimed move's mark (MIGRATE_TIMEOUT_S) */
#define ORPHAN_S_DEFAULT 30.0

enum incoming_state { INCOMING_FREE, INCOMING_WAITING, INCOMING_RECLAIMED };

static struct {
	enum incoming_state state;
	char mid[33];
	double last_word;   /* WAITING: when the source last said the move runs (phos_now) */
	double at;          /* RECLAIMED: when */
} incoming[INCOMING_MAX];
static pthread_mutex_t incoming_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t incoming_reclaimed;   /* pre-copies ever reclaimed (/metrics) */

static double orphan_after = ORPHAN_S_DEFAULT;
static pthread_once_t orphan_once = PTHREAD_ONCE_INIT;

static void orphan_read(void)
{
	const char *e = getenv("PHOS_MIGRATE_ORPHAN_S");
	char *end;
	double v;

	if (!e || !*e)
		return;
	v = strtod(e, &end);
	if (*end || !(v >= 1 && v <= 3600))
		phos_warn("PHOS_MIGRATE_ORPHAN_S=%.32s is not 1..3600 (seconds): %.0f s it is", e, ORPHAN_S_DEFAULT);
	else
		orphan_after = v;
}

/* Seconds without word from a move's source after which its pre-copy goes. */
static double orphan_s(void)
{
	pthread_once(&orphan_once, orphan_read);
	return orphan_after;
}

/* mid's slot, or -1 (incoming_lock held). */
static int incoming_find(const char *mid)
{
	for (int i = 0; i < INCOMING_MAX; i++)
		if (incoming[i].state != INCOMING_FREE && !strcmp(incoming[i].mid, mid))
			return i;
	return -1;
}

/* A slot for move mid's pre-copy, WAITING from now: 0, or -EEXIST (mid has
 * one, or was reclaimed), -EBUSY (INCOMING_MAX pre-copies wait already). */
static int incoming_add(const char *mid)
{
	double now = phos_now();
	int k = -1, r = 0;

	pthread_mutex_lock(&incoming_lock);
	for (int i = 0; i < INCOMING_MAX; i++)   /* old marks go first */
		if (incoming[i].state == INCOMING_RECLAIMED && now - incoming[i].at > INCOMING_KEEP_S)
			incoming[i].state = INCOMING_FREE;
	if (incoming_find(mid) >= 0)
		r = -EEXIST;
	for (int i = 0; !r && i < INCOMING_MAX && k < 0; i++)
		if (incoming[i].state == INCOMING_FREE)
			k = i;
	for (int i = 0; !r && k < 0 && i < INCOMING_MAX; i++)   /* else the oldest mark */
		if (incoming[i].state == INCOMING_RECLAIMED && (k < 0 || incoming[i].at < incoming[k].at))
			k = i;
	if (!r && k < 0)
		r = -EBUSY;
	if (!r) {
		incoming[k].state = INCOMING_WAITING;
		snprintf(incoming[k].mid, sizeof(incoming[k].mid), "%s", mid);
		incoming[k].last_word = now;
	}
	pthread_mutex_unlock(&incoming_lock);
	return r;
}

/* What the final phase of mid finds: 1, its pre-copy, now out of the table
 * (nothing reclaims it any more); 0, none (stw, cow, or a restart here since);
 * -ESTALE, reclaimed. */
static int incoming_claim(const char *mid)
{
	int i, r = 0;

	pthread_mutex_lock(&incoming_lock);
	i = incoming_find(mid);
	if (i >= 0 && incoming[i].state == INCOMING_RECLAIMED)
		r = -ESTALE;
	else if (i >= 0) {
		incoming[i].state = INCOMING_FREE;
		r = 1;
	}
	pthread_mutex_unlock(&incoming_lock);
	return r;
}

/* mid's pre-copy went another way (aborted, failed): its slot is free. */
static void incoming_drop(const char *mid)
{
	int i;

	pthread_mutex_lock(&incoming_lock);
	i = incoming_find(mid);
	if (i >= 0 && incoming[i].state == INCOMING_WAITING)
		incoming[i].state = INCOMING_FREE;
	pthread_mutex_unlock(&incoming_lock);
}

/* Whether mid's pre-copy still waits, and since when its source is quiet;
 * heard: the source said just now that the move runs. */
static bool incoming_waiting(const char *mid, bool heard, double *ret_last_word)
{
	bool waiting;
	int i;

	pthread_mutex_lock(&incoming_lock);
	i = incoming_find(mid);
	waiting = i >= 0 && incoming[i].state == INCOMING_WAITING;
	if (waiting && heard)
		incoming[i].last_word = phos_now();
	if (waiting)
		*ret_last_word = incoming[i].last_word;
	pthread_mutex_unlock(&incoming_lock);
	return waiting;
}

/* Marks mid RECLAIMED when it still waits with its source quiet for quiet_s:
 * true then (the caller removes the pre-copy). */
static bool incoming_reclaim(const char *mid, double quiet_s)
{
	double now = phos_now();
	bool r = false;
	int i;

	pthread_mutex_lock(&incoming_lock);
	i = incoming_find(mid);
	if (i >= 0 && incoming[i].state == INCOMING_WAITING && now - incoming[i].last_word > quiet_s) {
		incoming[i].state = INCOMING_RECLAIMED;
		incoming[i].at = now;
		incoming_reclaimed++;
		r = true;
	}
	pthread_mutex_unlock(&incoming_lock);
	return r;
}

void inv_migrate_incoming(unsigned *ret_waiting, uint64_t *ret_reclaimed)
{
	unsigned n = 0;

	pthread_mutex_lock(&incoming_lock);
	for (int i = 0; i < INCOMING_MAX; i++)
		n += incoming[i].state == INCOMING_WAITING;
	*ret_reclaimed = incoming_reclaimed;
	pthread_mutex_unlock(&incoming_lock);
	*ret_waiting = n;
}

/* Removes move mid's pre-copy here: its directory and its prepared executor. */
static void precopy_discard(const char *mid)
{
	struct inv_prepared p = prepared_take(mid);
	char dir[PATH_MAX];

	prepared_drop(&p);
	pre_dir(dir, sizeof(dir), mid);
	phos_image_dir_abort(dir);
}

struct watch {
	char name[INV_NAME_MAX + 1];
	char mid[33];
	char url[PULL_URL_MAX + 64];       /* the source's record of the move */
	char auth[PULL_TOKEN_MAX + 32];    /* with its peer token */
};

/* Whether the source says that move w runs (its record, within timeout_ms). */
static bool source_says_running(const struct watch *w, long timeout_ms)
{
	static const char *const running[] = { "starting", "precopy", "stopping", "transferring" };
	struct mig_answer a = { 0 };
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();
	long status = 0;
	bool yes = false;

	if (!c)
		return false;
	h = curl_slist_append(h, w->auth);
	curl_easy_setopt(c, CURLOPT_URL, w->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	pull_curl_keepalive(c);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mig_on_answer);   /* (at most MIGRATE_ANSWER_MAX kept) */
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	if (h && curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200 && a.buf) {
		json_t *j = json_loadb(a.buf, a.len, 0, NULL);
		const char *st = mig_str_of(j, "state"), *id = mig_str_of(j, "migration");

		for (unsigned i = 0; st && id && !strcmp(id, w->mid) && i < sizeof(running) / sizeof(running[0]); i++)
			yes |= !strcmp(st, running[i]);
		json_decref(j);
	}
	free(a.buf);
	for (struct curl_slist *x = h; x; x = x->next)
		explicit_bzero(x->data, strlen(x->data));
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return yes;
}

static void *watch_main(void *arg)
{
	struct watch *w = arg;
	double quiet = orphan_s(), every = quiet / 6 < 0.2 ? 0.2 : quiet / 6 > 5 ? 5 : quiet / 6;
	double next = phos_now() + every, last;

	while (incoming_waiting(w->mid, false, &last)) {
		double now = phos_now();
		long ms;

		if (now - last > quiet) {
			if (incoming_reclaim(w->mid, quiet)) {
				precopy_discard(w->mid);
				phos_warn("%s: migration %s: no word from its source for %.0f s: its pre-copy and prepared "
					  "executor are reclaimed here (a late final phase gets 410)", w->name, w->mid, quiet);
			}
			continue;
		}
		if (now < next) {
			usleep(100 * 1000);
			continue;
		}
		/* (a source that answers answers at once: a slow answer counts as none) */
		ms = (long)((last + quiet - now) * 1e3);
		ms = ms < 500 ? 500 : ms > 10000 ? 10000 : ms;
		incoming_waiting(w->mid, source_says_running(w, ms), &last);
		next = phos_now() + every;
	}
	explicit_bzero(w->auth, sizeof(w->auth));
	free(w);
	return NULL;
}

/* Starts watching the source at from (its peer token: token) for move mid of
 * name, whose pre-copy waits here (incoming_add). 0 or -errno. */
static int watch_start(const char *name, const char *mid, const char *from, const char *token)
{
	struct watch *w = calloc(1, sizeof(*w));
	size_t n = strlen(from);
	pthread_attr_t a;
	pthread_t t;
	int r;

	if (!w)
		return -ENOMEM;
	snprintf(w->name, sizeof(w->name), "%s", name);
	snprintf(w->mid, sizeof(w->mid), "%s", mid);
	snprintf(w->url, sizeof(w->url), "%.*s/system/migrations/%s", (int)(n - (n && from[n - 1] == '/')), from, mid);
	snprintf(w->auth, sizeof(w->auth), "Authorization: Bearer %s", token);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	r = -pthread_create(&t, &a, watch_main, w);
	pthread_attr_destroy(&a);
	if (r < 0) {
		explicit_bzero(w->auth, sizeof(w->auth));
		free(w);
	}
	return r;
}

/* The pre-copy phase: gpu.data as the source has it now into .pre-MID. */
static int receive_precopy(struct inv_function *f, struct pull *p, uint64_t data_bytes, uint64_t layout_bytes,
			   json_t **ret_body)
{
	char dir[PATH_MAX], file[PATH_MAX + 16], err[1024];
	struct layout L = { 0 };
	uint64_t reused = 0;
	struct statvfs vfs;
	bool room;
	int fd = -1, r;

	pthread_mutex_lock(&f->lock);
	room = f->n_instances < f->limits.max_instances && f->ready && !f->removed;
	pthread_mutex_unlock(&f->lock);
	if (!room)
		return *ret_body = inv_err_json("no room for another instance of %s (max_instances %u) or it is not ready",
					    f->name, f->limits.max_instances), 409;
	pre_dir(dir, sizeof(dir), p->snapshot_id);
	if (statvfs(inv_cfg.state_dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < 2 * data_bytes + MIGRATE_DISK_MARGIN)
		return *ret_body = inv_err_json("not enough disk here for the checkpoint (%" PRIu64 " MiB needed)",
					    (uint64_t)((2 * data_bytes + MIGRATE_DISK_MARGIN) >> 20)), 507;
	if (mkdir(dir, 0700) < 0)
		return *ret_body = inv_err_json("migration %s: %s", p->snapshot_id, errno == EEXIST ? "pre-copied already"
										: strerror(errno)), errno == EEXIST ? 409 : 500;
	snprintf(file, sizeof(file), "%s/gpu.data", dir);
	fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	r = fd < 0 ? -errno : ftruncate(fd, (off_t)data_bytes) < 0 ? -errno : 0;
	if (r < 0)
		pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, sizeof(err), "gpu.data: %s", strerror(-r));
	if (r == 0 && phos_fault("migrate_stall"))
		sleep(10);   /* tests: killed here, mid-transfer */
	if (r == 0 && layout_bytes) {   /* the items' places and hashes (best effort) */
		char lpath[PATH_MAX + 32], lerr[256] = "";
		int lfd;

		snprintf(lpath, sizeof(lpath), "%s/precopy.layout", dir);
		lfd = open(lpath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (lfd >= 0) {
			if (pull_file_range(p, lfd, "precopy.layout", 0, layout_bytes, lerr, sizeof(lerr)) < 0 ||
			    layout_read(dir, data_bytes, &L) < 0)
				phos_warn("%s: migration %s: no item places from the source (%s): the whole pre-copy "
					  "comes over the network and the stop hashes it", f->name, p->snapshot_id,
					  lerr[0] ? lerr : "a bad layout");
			close(lfd);
			p->code = 0;
		}
	}
	if (r == 0)
		r = L.n ? precopy_by_item(f, p, fd, &L, &reused, err, sizeof(err))
			: pull_file_range(p, fd, "gpu.data", 0, data_bytes, err, sizeof(err));
	if (r == 0 && data_bytes >= 4096 && phos_fault("migrate_precopy_stale")) {
		/* tests: the first buffer as if written after its pre-copy */
		static const uint8_t junk[4096] = { [0 ... 4095] = 0xa5 };

		(void)!pwrite(fd, junk, sizeof(junk), 0);
	}
	if (r == 0 && L.n) {   /* hashed now, while the source still serves */
		double th = phos_now();

		prehash_precopy(dir, fd, data_bytes, &L);
		phos_info("%s: migration %s: pre-copy of %u items (%.1f MiB from our snapshot) hashed in %.1f ms",
			  f->name, p->snapshot_id, L.n, (double)reused / (1 << 20), (phos_now() - th) * 1e3);
	}
	free(L.v);
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		phos_image_dir_abort(dir);
		return *ret_body = inv_err_json("pre-copying from the source: %s", err), p->code ? p->code : 502;
	}
	mig_writeback_start(file);   /* on disk before the final phase's commit needs it */
	if (prepare_target(f, p->snapshot_id, dir, data_bytes, err, sizeof(err)) < 0) {
		phos_image_dir_abort(dir);
		return *ret_body = inv_err_json("%s", err), 507;
	}
	*ret_body = json_pack("{s:I,s:f,s:I}", "bytes", (json_int_t)p->fetched, "fetch_s", phos_now() - p->started,
			      "reused_bytes", (json_int_t)reused);
	return 200;
}

static bool hex32(const char *s)
{
	return s && strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

/* The state of a function's session is here again: no forwarding away. */
static void moved_here(struct inv_function *f, const char *name)
{
	inv_move_forget(name);
	pthread_mutex_lock(&f->lock);
	free(f->moved_to);
	f->moved_to = NULL;
	if (f->moved_token)
		explicit_bzero(f->moved_token, strlen(f->moved_token));
	free(f->moved_token);
	f->moved_token = NULL;
	pthread_mutex_unlock(&f->lock);
}

/* A field of a move's request (inv_migrate_receive). */
static bool receive_field(const char *key)
{
	static const char *const known[] = { "from", "from_token", "instance", "migration", "manifest", "phase",
					     "data_bytes", "layout_bytes", "host" };

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(key, known[i]))
			return true;
	return false;
}

/* The pre-copy phase of a move: gpu.data fetched ahead while the instance
 * still runs at the source (receive_precopy), the source watched from then
 * on. *ret_f: the function, for the caller to let go. Returns the status. */
static int precopy_phase(const char *name, json_t *req, struct pull *p, unsigned src_id, struct inv_function **ret_f,
			 json_t **ret_body)
{
	const char *from = mig_str_of(req, "from"), *token = mig_str_of(req, "from_token"), *mid = mig_str_of(req, "migration");
	json_int_t bytes = json_integer_value(json_object_get(req, "data_bytes"));
	json_int_t layout = json_integer_value(json_object_get(req, "layout_bytes"));
	struct inv_function *f;
	int code = 500, r;

	f = *ret_f = function_here(name, from, token, ret_body, &code);
	if (!f)
		return code;
	if (bytes < 0 || (uint64_t)bytes > PULL_BYTES_MAX) {
		*ret_body = inv_err_json("data_bytes must be 0..%llu", (unsigned long long)PULL_BYTES_MAX);
		return 400;
	}
	if (layout < 0 || (uint64_t)layout > LAYOUT_MAX) {
		*ret_body = inv_err_json("layout_bytes must be 0..%llu", (unsigned long long)LAYOUT_MAX);
		return 400;
	}
	p->snapshot_id = mid;
	snprintf(p->file_route, sizeof(p->file_route), "/system/functions/%s/instances/%u/checkpoint/file", name,
		 src_id);
	if (pull_curl_open(p, token) < 0) {
		*ret_body = inv_err_json("out of memory");
		return 500;
	}
	r = incoming_add(mid);
	if (r < 0) {
		*ret_body = r == -EEXIST ? inv_err_json("migration %s: pre-copied already", mid)
					 : inv_err_json("%d moves are coming here already; try again later", INCOMING_MAX);
		return r == -EEXIST ? 409 : 503;
	}
	code = receive_precopy(f, p, (uint64_t)bytes, (uint64_t)layout, ret_body);
	if (code == 200 && (r = watch_start(name, mid, from, token)) < 0) {
		precopy_discard(mid);
		json_decref(*ret_body);
		*ret_body = inv_err_json("cannot watch the source for the move: %s", strerror(-r));
		code = 500;
	}
	if (code != 200)
		incoming_drop(mid);
	return code;
}

/* A checkpoint's manifest that this host can take: the function's device,
 * a GPU of the model it ran on, and the disk for its files. 0, or the status
 * (and *ret_body) of a refusal. */
static int fits_here(const char *name, const struct phos_image *img, const struct inv_function *f, json_t **ret_body)
{
	char dir[PATH_MAX], models[2048];
	struct statvfs vfs;
	uint64_t need;

	if (strcmp(img->device, f->device)) {
		*ret_body = inv_err_json("the instance ran on the %s device; %s runs on %s here", img->device, name,
					 f->device);
		return 409;
	}
	inv_gpu_models(models, sizeof(models));
	if (!strcmp(img->device, "cuda") && !inv_gpu_model_here(img->gpu_name, models)) {
		*ret_body = inv_err_json("the instance ran on a %.128s; this host has none (%.256s)", img->gpu_name,
					 models);
		return 422;
	}
	need = img->data_bytes + MIGRATE_DISK_MARGIN;
	for (uint32_t i = 0; i < img->ncpu_files; i++)
		need += img->cpu_files[i].size;
	for (uint32_t i = 0; i < img->nmodules; i++)
		need += img->modules[i].size;
	snprintf(dir, sizeof(dir), "%s/checkpoints", inv_cfg.state_dir);
	if (statvfs(dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
		*ret_body = inv_err_json("not enough disk here for the checkpoint (%" PRIu64 " MiB needed)", need >> 20);
		return 507;
	}
	return 0;
}

/* What the final phase of a move found of its pre-copy. */
struct final_stats {
	uint64_t refetched;   /* bytes of the pre-copy fetched again */
	unsigned prehashed;   /* items of the pre-copy not read again at the stop */
	double verify_s;
};

/* The final phase's files into tmp: the pre-copy's gpu.data brought up to
 * date when there is one (its prepared executor into *prep), else all of it
 * fetched; the manifest last; then read back into *ret_check and made to
 * run as our functions run, whatever the source ran it as. 0, or -errno
 * with err (p->code the status where it is known). */
static int fetch_final(struct pull *p, const char *mid, bool final_phase, const char *tmp, const char *manifest,
		       struct inv_prepared *prep, struct phos_image **ret_check, struct final_stats *fs, char *err,
		       size_t errlen)
{
	char dir[PATH_MAX], prefile[PATH_MAX + 16];
	bool pre, reowned = false;
	int r = 0;

	pre_dir(dir, sizeof(dir), mid);
	snprintf(prefile, sizeof(prefile), "%s/gpu.data", dir);
	pre = final_phase && access(prefile, F_OK) == 0;
	if (pre)
		*prep = prepared_take(mid);
	if (!pre && phos_fault("migrate_stall"))
		sleep(10);   /* tests: killed here, mid-transfer */
	if (pre) {   /* what the pre-copy fetched, brought up to date */
		char dst[PATH_MAX + 200];
		double tv = phos_now();
		size_t npre;
		struct prehash *ph = prehash_load(dir, &npre);

		snprintf(dst, sizeof(dst), "%s/gpu.data", tmp);
		r = rename(prefile, dst) < 0 ? -errno : 0;
		phos_image_dir_abort(dir);
		if (r < 0)
			pull_fail(p, 500, r, err, errlen, "the pre-copied gpu.data: %s", strerror(-r));
		else
			r = refresh_gpu_data(p, tmp, ph, npre, &fs->refetched, &fs->prehashed, err, errlen);
		free(ph);
		fs->verify_s = phos_now() - tv;
	}
	if (r == 0)
		r = fetch_files(p, tmp, !pre, err, errlen);
	if (r == 0)   /* the manifest last */
		r = pull_write_new(tmp, "manifest.json", manifest, strlen(manifest), err, errlen);
	if (r == 0 && (r = phos_image_read(tmp, ret_check, err, errlen)) < 0)
		p->code = 502;
	if (r == 0 && (r = inv_image_run_as(tmp, *ret_check, &reowned, err, errlen)) < 0)
		p->code = r == -EPERM ? 422 : 502;
	return r;
}

/* What a move's phase asks before anything else: a known phase; an abort
 * drops its pre-copy (200); a final phase claims its pre-copy
 * (*ret_claimed), unless the pre-copy was reclaimed here meanwhile (410).
 * 0 to go on, else the status of the answer in *ret_body. */
static int phase_first(json_t *req, const char *phase, const char *mid, bool *ret_claimed, json_t **ret_body)
{
	if (json_object_get(req, "phase") && (!phase || (strcmp(phase, "precopy") && strcmp(phase, "final") &&
							 strcmp(phase, "abort")))) {
		*ret_body = inv_err_json("phase must be precopy, final or abort");
		return 400;
	}
	if (phase && !strcmp(phase, "abort")) {   /* a pre-copy whose move failed */
		if (!hex32(mid)) {
			*ret_body = inv_err_json("migration (32 hex digits) is needed");
			return 400;
		}
		incoming_drop(mid);
		precopy_discard(mid);
		*ret_body = json_pack("{s:s}", "migration", mid);
		return 200;
	}
	if (phase && !strcmp(phase, "final") && hex32(mid)) {   /* its pre-copy is ours from here */
		int c = incoming_claim(mid);

		if (c == -ESTALE) {
			*ret_body = inv_err_json("migration %s: its pre-copy was reclaimed here after %.0f s without word "
						 "from the source; start the move again", mid, orphan_s());
			return 410;
		}
		*ret_claimed = c > 0;
	}
	return 0;
}

/* What a receive request says (inv_migrate_receive). */
struct recv_args {
	const char *from, *token, *mid, *manifest, *phase;
	unsigned src_id;
	bool precopy;
};

/* The request's fields checked (unknown ones refused), the phase's first
 * word (phase_first: *claimed), the host's fit, the source's URL into p:
 * 0, or an HTTP status with *ret_body. */
static int receive_args(json_t *req, struct pull *p, struct recv_args *a, bool *claimed, json_t **ret_body)
{
	const char *key;
	json_t *val;
	json_int_t src_id;
	char err[1024] = "";
	int r;

	json_object_foreach(req, key, val)
		if (!receive_field(key)) {
			*ret_body = inv_err_json("unknown field '%.64s'", key);
			return 400;
		}
	a->phase = mig_str_of(req, "phase");
	a->mid = mig_str_of(req, "migration");
	if ((r = phase_first(req, a->phase, a->mid, claimed, ret_body)) != 0)
		return r;
	a->from = mig_str_of(req, "from");
	a->token = mig_str_of(req, "from_token");
	a->manifest = mig_str_of(req, "manifest");
	src_id = json_integer_value(json_object_get(req, "instance"));
	a->precopy = a->phase && !strcmp(a->phase, "precopy");
	if ((r = host_check(json_object_get(req, "host"), ret_body)) != 0)
		return r;   /* (before anything is fetched or held) */
	if (!a->from || pull_url_check(p, a->from, err, sizeof(err)) < 0 || !a->token || !pull_token_valid(a->token) ||
	    !hex32(a->mid) || (!a->manifest && !a->precopy) || src_id < 1 || src_id > 999999999) {
		*ret_body = inv_err_json("from (the source's URL), from_token, instance (1..999999999), migration (32 hex "
				     "digits) and manifest are needed%s%s", a->from && err[0] ? ": " : "",
				     a->from && err[0] ? err : "");
		return 400;
	}
	a->src_id = (unsigned)src_id;
	return 0;
}

/* The final phase (or a one-phase move): the checkpoint fetched from the
 * source into STATE/checkpoints/NAME-ID (what a pre-copy brought reused),
 * committed, and restored as a new instance of f that serves from now on.
 * 201 with *ret_body, or the failure's status; nothing is left behind. */
static int receive_final(const char *name, const struct recv_args *a, struct pull *p, json_t **ret_body)
{
	char dir[PATH_MAX], err[1024], final[PATH_MAX + 96], tmp[PATH_MAX + 160] = "";
	struct final_stats fs = { 0 };
	struct inv_prepared prep = { .slot = -1 };
	struct inv_instance *in = NULL;
	struct inv_function *f = NULL;
	struct phos_image *check = NULL;
	double t_fetch, t_commit, restore_s = 0;
	int code = 500, r;

	r = phos_image_parse(a->manifest, strlen(a->manifest), &p->img, err, sizeof(err));
	if (r < 0 || !p->img->checkpoint.present) {
		*ret_body = inv_err_json("the manifest is %s%s", r < 0 ? "bad: " : "not a checkpoint's", r < 0 ? err : "");
		return 400;
	}
	f = function_here(name, a->from, a->token, ret_body, &code);
	if (!f)
		return code;
	if ((r = fits_here(name, p->img, f, ret_body)) != 0) {
		code = r;
		goto out;
	}
	snprintf(dir, sizeof(dir), "%s/checkpoints", inv_cfg.state_dir);
	r = inv_instance_reserve(f, &in, err, sizeof(err));
	if (r < 0) {
		*ret_body = inv_err_json("%s", err);
		code = r == -EBUSY ? 409 : 503;
		goto out;
	}
	snprintf(final, sizeof(final), "%s/%s-%u", dir, name, in->id);
	r = phos_image_dir_begin(final, tmp, sizeof(tmp));
	if (r < 0) {
		tmp[0] = '\0';
		*ret_body = inv_err_json("cannot make the checkpoint directory: %s", strerror(-r));
		code = r == -ENOSPC ? 507 : 500;
		goto out;
	}
	p->snapshot_id = a->mid;
	snprintf(p->file_route, sizeof(p->file_route), "/system/functions/%s/instances/%u/checkpoint/file", name,
		 a->src_id);
	if (pull_curl_open(p, a->token) < 0) {
		*ret_body = inv_err_json("out of memory");
		goto out;
	}
	r = fetch_final(p, a->mid, a->phase && !strcmp(a->phase, "final"), tmp, a->manifest, &prep, &check, &fs, err,
			sizeof(err));
	if (r < 0) {
		*ret_body = inv_err_json("fetching the checkpoint from %s: %s", a->from, err);
		code = p->code ? p->code : r == -ENOSPC ? 507 : 502;
		goto out;
	}
	t_fetch = phos_now() - p->started;
	t_commit = phos_now();
	r = phos_image_dir_commit(tmp, final);
	t_commit = phos_now() - t_commit;
	if (r < 0) {
		*ret_body = inv_err_json("committing the checkpoint: %s", strerror(-r));
		code = r == -ENOSPC ? 507 : 500;
		goto out;
	}
	tmp[0] = '\0';
	in->ckpt_dir = strdup(final);   /* removed with the instance, whatever comes */
	r = in->ckpt_dir ? inv_instance_adopt(f, in, final, &prep, &restore_s, err, sizeof(err)) : -ENOMEM;
	if (r < 0) {
		*ret_body = inv_err_json("restoring the moved instance: %s", in->ckpt_dir ? err : "out of memory");
		code = r == -EBADMSG ? 502 : 500;
		goto out;
	}
	moved_here(f, name);
	phos_info("%s: instance %u came from %s (its instance %u): %" PRIu64 " bytes fetched in %.1f ms, restored "
		  "in %.1f ms (the final phase from %.6f to %.6f)", name, in->id, a->from, a->src_id, p->fetched,
		  t_fetch * 1e3, restore_s * 1e3, p->started, phos_now());
	*ret_body = json_pack("{s:s,s:i,s:I,s:f,s:f,s:f,s:f,s:I,s:i,s:s}", "function", name, "instance", (int)in->id,
			      "bytes", (json_int_t)p->fetched, "fetch_s", t_fetch, "restore_s", restore_s, "verify_s",
			      fs.verify_s, "commit_s", t_commit, "refetched_bytes", (json_int_t)fs.refetched,
			      "prehashed_items", (int)fs.prehashed, "executor", prep.used ? "prepared" : in->proc.pool ? "pooled" : "own");
	in = NULL;   /* serving */
	code = 201;
out:
	prepared_drop(&prep);   /* not used: the move failed before its restore */
	if (tmp[0])
		phos_image_dir_abort(tmp);
	if (in)
		inv_instance_unreserve(f, in);
	phos_image_free(check);
	inv_function_unref(f);
	return code;
}

int inv_migrate_receive(const char *name, const char *body, size_t len, json_t **ret_body)
{
	struct pull p = { .name = name, .cancel_fd = -1, .started = phos_now() };
	struct recv_args a = { 0 };
	struct inv_function *f = NULL;
	bool claimed = false;
	json_t *req;
	int code;

	req = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(req)) {
		json_decref(req);
		return *ret_body = inv_err_json("the body must be a JSON object"), 400;
	}
	code = receive_args(req, &p, &a, &claimed, ret_body);
	if (code == 0 && a.precopy) {
		code = precopy_phase(name, req, &p, a.src_id, &f, ret_body);
		inv_function_unref(f);
	} else if (code == 0) {
		code = receive_final(name, &a, &p, ret_body);
	}
	if (claimed && code != 201)
		precopy_discard(a.mid);   /* the move failed: the source's abort finds nothing to drop */
	pull_free(&p);
	json_decref(req);
	return code;
}
