/* SPDX-License-Identifier: MIT */
/*
 * Hot snapshots: the gpu.data of snapshots that the invoker marked hot, mapped
 * read-only and pinned (cuMemHostRegister) by a pooled executor while it is
 * idle, their checksums verified once then. A restore of a hot snapshot copies
 * straight from the page cache at the copy engine's rate: no staging copy, no
 * hashing, no pinning on the cold-start path (docs/design.md, "Restore", step 4).
 *
 * A hot entry is matched by the device, inode and change time of gpu.data.
 * Snapshot files are never written in place (a new snapshot replaces the
 * directory), the mapping keeps the inode alive, and a write in place would
 * change the ctime: a match means the bytes that were verified. Anything else
 * is read the cold way, which verifies as it goes.
 *
 * The snapshot's fatbins are loaded into the module cache then too
 * (exec_module.c), so that the first restore loads no module either.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "fdio.h"
#include "log.h"

#define CHUNK ((uint64_t)PHOS_IMAGE_HASH_CHUNK)
#define HASH_THREADS 8

struct exec_hot {
	char *dir;
	dev_t dev;
	ino_t ino;
	struct timespec ctime;   /* a write in place changes it: then not hot */
	uint8_t *map;
	uint64_t size;
	struct exec_zero_run *zeros;   /* its buffers' all-zero chunks, by offset */
	size_t nzeros;
};

static bool same_file(const struct exec_hot *h, const struct stat *sb)
{
	return h->dev == sb->st_dev && h->ino == sb->st_ino && h->ctime.tv_sec == sb->st_ctim.tv_sec &&
	       h->ctime.tv_nsec == sb->st_ctim.tv_nsec;
}

/* --- verifying a mapping: chunks hashed by several threads --- */

struct verify {
	const uint8_t *map;
	const struct phos_image *img;
	uint64_t nitems;             /* buffers, then variables with contents */
	uint64_t **chunk_hash;
	struct { uint32_t item, chunk; } *chunks;
	uint8_t *zero;               /* per chunk: a buffer's chunk of zero bytes only */
	uint64_t nchunks;
	atomic_uint_fast64_t next;
};

/* Whether len bytes at p are all zero; most chunks end at their first bytes. */
static bool all_zero(const uint8_t *p, uint64_t len)
{
	return len && !p[0] && !memcmp(p, p + 1, len - 1);
}

static void item_of(const struct phos_image *img, uint64_t k, uint64_t *off, uint64_t *len, uint64_t *hash)
{
	if (k < img->nbufs) {
		*off = img->bufs[k].offset;
		*len = img->bufs[k].size;
		*hash = img->bufs[k].hash;
		return;
	}
	for (uint32_t i = 0; i < img->nvars; i++) {
		if (!img->vars[i].size)
			continue;
		if (k-- == img->nbufs) {
			*off = img->vars[i].offset;
			*len = img->vars[i].size;
			*hash = img->vars[i].hash;
			return;
		}
	}
}

static void *verify_main(void *arg)
{
	struct verify *v = arg;

	for (;;) {
		uint64_t k = atomic_fetch_add(&v->next, 1), off, len, hash;

		if (k >= v->nchunks)
			break;
		item_of(v->img, v->chunks[k].item, &off, &len, &hash);
		off += (uint64_t)v->chunks[k].chunk * CHUNK;
		len -= (uint64_t)v->chunks[k].chunk * CHUNK;
		len = len < CHUNK ? len : CHUNK;
		v->chunk_hash[v->chunks[k].item][v->chunks[k].chunk] = phos_image_chunk_hash(v->map + off, len);
		/* (a restore sets these on the device instead of copying them:
		 * the bytes it would copy are these, verified with the rest) */
		v->zero[k] = v->chunks[k].item < v->img->nbufs && all_zero(v->map + off, len);
	}
	return NULL;
}

static int run_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct exec_zero_run *)a)->off, y = ((const struct exec_zero_run *)b)->off;

	return x < y ? -1 : x > y;
}

/* The runs of zero chunks that verify found, sorted and merged into h. */
static int zero_runs(struct exec_hot *h, const struct verify *v)
{
	size_t n = 0, m = 0;

	for (uint64_t k = 0; k < v->nchunks; k++)
		n += v->zero[k];
	if (!n)
		return 0;
	h->zeros = calloc(n, sizeof(*h->zeros));
	if (!h->zeros)
		return -ENOMEM;
	for (uint64_t k = 0; k < v->nchunks; k++) {
		const struct phos_image_buf *b = &v->img->bufs[v->chunks[k].item];
		uint64_t off = (uint64_t)v->chunks[k].chunk * CHUNK;

		if (v->zero[k])
			h->zeros[m++] = (struct exec_zero_run){ b->offset + off,
								b->size - off < CHUNK ? b->size - off : CHUNK };
	}
	qsort(h->zeros, n, sizeof(*h->zeros), run_cmp);
	m = 0;
	for (size_t i = 1; i < n; i++) {
		if (h->zeros[m].off + h->zeros[m].len == h->zeros[i].off)
			h->zeros[m].len += h->zeros[i].len;
		else
			h->zeros[++m] = h->zeros[i];
	}
	h->nzeros = m + 1;
	return 0;
}

/* Compares every buffer's and variable's checksum against the mapping; notes
 * the buffers' chunks of zero bytes in h (zero_runs). */
static int verify(struct exec_hot *h, const struct phos_image *img, char *err, size_t errlen)
{
	const uint8_t *map = h->map;
	struct verify v = { .map = map, .img = img, .nitems = img->nbufs };
	pthread_t th[HASH_THREADS];
	unsigned nth = 0;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t total = 0;
	int r = 0;

	for (uint32_t i = 0; i < img->nvars; i++)
		v.nitems += img->vars[i].size != 0;
	v.chunk_hash = calloc(v.nitems ? v.nitems : 1, sizeof(*v.chunk_hash));
	if (!v.chunk_hash)
		return -ENOMEM;
	for (uint64_t k = 0; k < v.nitems; k++) {
		uint64_t off, len, hash, nc;

		item_of(img, k, &off, &len, &hash);
		nc = (len + CHUNK - 1) / CHUNK;
		v.chunk_hash[k] = calloc(nc ? nc : 1, sizeof(uint64_t));
		if (!v.chunk_hash[k]) {
			r = -ENOMEM;
			goto out;
		}
		total += nc;
	}
	v.chunks = calloc(total ? total : 1, sizeof(*v.chunks));
	v.zero = calloc(total ? total : 1, 1);
	if (!v.chunks || !v.zero) {
		r = -ENOMEM;
		goto out;
	}
	for (uint64_t k = 0; k < v.nitems; k++) {
		uint64_t off, len, hash;

		item_of(img, k, &off, &len, &hash);
		for (uint64_t c = 0; c * CHUNK < len; c++) {
			v.chunks[v.nchunks].item = (uint32_t)k;
			v.chunks[v.nchunks++].chunk = (uint32_t)c;
		}
	}
	for (long i = 0; i < (cpus > 1 ? cpus - 1 : 1) && i < HASH_THREADS; i++)
		if (pthread_create(&th[nth], NULL, verify_main, &v) == 0)
			nth++;
	verify_main(&v);
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	for (uint64_t k = 0; k < v.nitems && r == 0; k++) {
		uint64_t off, len, hash;

		item_of(img, k, &off, &len, &hash);
		if (phos_image_combine(v.chunk_hash[k], (len + CHUNK - 1) / CHUNK) != hash) {
			phos_errf(err, errlen, "checksum mismatch in gpu.data at offset %llu (%llu bytes)",
				  (unsigned long long)off, (unsigned long long)len);
			r = -EBADMSG;
		}
	}
	if (r == 0)
		r = zero_runs(h, &v);
out:
	for (uint64_t k = 0; k < v.nitems; k++)
		free(v.chunk_hash[k]);
	free(v.chunk_hash);
	free(v.chunks);
	free(v.zero);
	if (r == -ENOMEM)
		phos_errf(err, errlen, "out of memory");
	return r;
}

/* --- the set --- */

static void hot_release(struct executor *ex, struct exec_hot *h)
{
	if (h->map) {
		ex->dev_ops->host_unregister(ex->dev, h->map);
		munmap(h->map, h->size);
	}
	free(h->dir);
	free(h->zeros);
}

/* The snapshot's fatbins, loaded into the module cache while the executor is
 * idle, so that even its first restore of the snapshot loads none. A file
 * that cannot be read or does not match its hash is left to the restore,
 * which refuses it there. */
static void warm_modules(struct executor *ex, const char *dir, const struct phos_image *img)
{
	char path[4200], hash[33];

	for (uint32_t i = 0; i < img->nmodules; i++) {
		const struct phos_image_module *m = &img->modules[i];
		void *data = NULL;

		snprintf(path, sizeof(path), "%s/modules/%s.fatbin", dir, m->hash);
		if (phos_read_file(path, m->size, &data) < 0)
			continue;
		phos_image_module_hash(data, m->size, hash);
		if (!strcmp(hash, m->hash))
			exec_module_warm(ex, data, m->size, m->hash);
		free(data);
	}
}

/* Maps fd (h->size bytes) read-only and pins it: h->map, 0; or -errno with
 * err, nothing held. */
static int hot_pin(struct executor *ex, int fd, const char *path, struct exec_hot *h, char *err, size_t errlen)
{
	int r;

	h->map = mmap(NULL, h->size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (h->map == MAP_FAILED) {
		r = -errno;
		h->map = NULL;
		phos_errf(err, errlen, "mapping %s: %s", path, strerror(-r));
		return r;
	}
	r = ex->dev_ops->host_register(ex->dev, h->map, h->size);
	if (r < 0) {
		phos_errf(err, errlen, "pinning %s failed (cuda error %d)", path, -r);
		munmap(h->map, h->size);
		h->map = NULL;
		return -EIO;
	}
	return 0;
}

static int hot_add(struct executor *ex, const char *dir, char *err, size_t errlen)
{
	struct phos_image *img = NULL;
	struct exec_hot h = { 0 }, *grown;
	char path[4200];
	struct stat sb;
	int fd = -1, r;

	r = phos_image_read(dir, &img, err, errlen);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		r = -errno;
		phos_errf(err, errlen, "opening %s: %s", path, strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < ex->nhot; i++) {
		if (same_file(&ex->hot[i], &sb)) {
			r = 0;   /* already hot */
			goto out;
		}
	}
	h.dev = sb.st_dev;
	h.ino = sb.st_ino;
	h.ctime = sb.st_ctim;
	h.size = (uint64_t)sb.st_size;
	h.dir = strdup(dir);
	if (!h.dir || !h.size) {
		r = h.dir ? 0 : -ENOMEM;   /* nothing to pin in an empty image */
		goto out;
	}
	r = hot_pin(ex, fd, path, &h, err, errlen);
	if (r == 0)
		r = verify(&h, img, err, errlen);
	if (r < 0)
		goto out;
	warm_modules(ex, dir, img);
	grown = realloc(ex->hot, (ex->nhot + 1) * sizeof(*grown));
	if (!grown) {
		r = -ENOMEM;
		phos_errf(err, errlen, "out of memory");
		goto out;
	}
	ex->hot = grown;
	ex->hot[ex->nhot++] = h;
	ex->hot_bytes += h.size;
	h = (struct exec_hot){ 0 };
out:
	hot_release(ex, &h);
	if (fd >= 0)
		close(fd);
	phos_image_free(img);
	return r;
}

static void hot_remove(struct executor *ex, size_t i)
{
	ex->hot_bytes -= ex->hot[i].size;
	hot_release(ex, &ex->hot[i]);
	ex->hot[i] = ex->hot[--ex->nhot];
}

int exec_hot_set(struct executor *ex, char *const dirs[], size_t n, char *err, size_t errlen)
{
	int first = 0;

	/* Drop what is no longer listed, or whose file was replaced since. */
	for (size_t i = ex->nhot; i-- > 0;) {
		struct stat sb;
		char path[4200];
		bool keep = false;

		for (size_t k = 0; k < n && !keep; k++)
			keep = !strcmp(ex->hot[i].dir, dirs[k]);
		snprintf(path, sizeof(path), "%s/gpu.data", ex->hot[i].dir);
		if (!keep || stat(path, &sb) < 0 || !same_file(&ex->hot[i], &sb))
			hot_remove(ex, i);
	}
	for (size_t k = 0; k < n; k++) {
		char why[512] = "";
		int r = hot_add(ex, dirs[k], why, sizeof(why));

		if (r < 0) {
			phos_warn("snapshot %s stays cold: %s", dirs[k], why);
			if (!first) {
				first = r;
				phos_errf(err, errlen, "%s: %s", dirs[k], why);
			}
		}
	}
	return first;
}

const uint8_t *exec_hot_find(struct executor *ex, int fd, uint64_t size, const struct exec_zero_run **ret_zeros,
			     size_t *ret_nzeros)
{
	struct stat sb;

	*ret_zeros = NULL;
	*ret_nzeros = 0;
	if (fstat(fd, &sb) < 0)
		return NULL;
	for (size_t i = 0; i < ex->nhot; i++) {
		if (same_file(&ex->hot[i], &sb) && ex->hot[i].size >= size) {
			*ret_zeros = ex->hot[i].zeros;
			*ret_nzeros = ex->hot[i].nzeros;
			return ex->hot[i].map;
		}
	}
	/* the prepared pre-copy: by inode only (rewritten in place since) */
	if (ex->prep && ex->prep->dev == sb.st_dev && ex->prep->ino == sb.st_ino && ex->prep->size >= size)
		return ex->prep->map;
	return NULL;
}

/* --- a live move's pre-copy (PREPARE) ---
 *
 * The target of a move pre-copies gpu.data while the instance still serves
 * at the source, then at the stop rewrites in place the items written since,
 * verifies every item against the checkpoint's manifest and renames the file
 * into the checkpoint (the same inode). A pooled executor set aside for that
 * restore pins the pre-copy beforehand, off the move's stop, so that the moved
 * instance's buffers come from the pinned page cache at the copy engine's
 * rate, as a hot snapshot's do. It is not verified here: the file is not final
 * yet when it is pinned, and the controller verifies it after its last write.
 */

int exec_prep_set(struct executor *ex, const char *dir, uint64_t *ret_bytes, char *err, size_t errlen)
{
	struct exec_hot *h = calloc(1, sizeof(*h));
	char path[4200];
	struct stat sb;
	int fd = -1, r = 0;

	exec_prep_clear(ex);
	if (!h) {
		phos_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		r = -errno;
		phos_errf(err, errlen, "opening %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_size <= 0) {
		r = -EINVAL;
		phos_errf(err, errlen, "%s is not a regular file with data", path);
		goto out;
	}
	h->dev = sb.st_dev;
	h->ino = sb.st_ino;
	h->size = (uint64_t)sb.st_size;
	h->dir = strdup(dir);
	if (!h->dir) {
		r = -ENOMEM;
		phos_errf(err, errlen, "out of memory");
		goto out;
	}
	r = hot_pin(ex, fd, path, h, err, errlen);
	if (r < 0)
		goto out;
	ex->prep = h;
	*ret_bytes = h->size;
	h = NULL;
out:
	if (fd >= 0)
		close(fd);
	if (h) {
		hot_release(ex, h);
		free(h);
	}
	return r;
}

void exec_prep_clear(struct executor *ex)
{
	if (!ex->prep)
		return;
	hot_release(ex, ex->prep);
	free(ex->prep);
	ex->prep = NULL;
}

void exec_hot_clear(struct executor *ex)
{
	while (ex->nhot)
		hot_remove(ex, ex->nhot - 1);
	free(ex->hot);
	ex->hot = NULL;
}
