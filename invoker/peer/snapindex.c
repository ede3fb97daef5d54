/* SPDX-License-Identifier: MIT */
/*
 * What a snapshot holds, indexed for pulls (transfer.h): the manifest, its
 * extents in gpu.data and the hash of each 4 MiB chunk of each, built once
 * per snapshot id under the function's snapshot read lock and kept in a
 * small cache (SNAPINDEX_SLOTS snapshots, least recently used out); the
 * peer publishes the chunk hashes, the puller finds in them the chunks it
 * already holds. And the build id of the CUDA stand-ins.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "invoker.h"
#include "log.h"
#include "transfer.h"

#define SNAPINDEX_SLOTS 64

static pthread_mutex_t index_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char *dir;
	struct inv_snapinfo *si;
	uint64_t used;
} slots[SNAPINDEX_SLOTS];
static uint64_t use_clock;

static void snapinfo_free(struct inv_snapinfo *si)
{
	if (!si)
		return;
	for (size_t i = 0; si->ext && i < si->next; i++)
		free(si->ext[i].chunks);
	free(si->ext);
	free(si->manifest);
	phos_image_free(si->img);
	free(si);
}

void inv_snapinfo_unref(struct inv_snapinfo *si)
{
	bool last;

	if (!si)
		return;
	pthread_mutex_lock(&index_lock);
	last = --si->refs == 0;
	pthread_mutex_unlock(&index_lock);
	if (last)
		snapinfo_free(si);
}

/* A snapshot's identity: its directory and gpu.data inodes (a re-snapshot
 * commits a new directory with new files; committed files are never written
 * in place). -errno when the snapshot is not there. */
int inv_snapshot_id(const char *dir, char ret_id[33])
{
	char path[PATH_MAX];
	struct stat d, g;
	struct { uint64_t dev, dino, gino, gsize; } key;
	XXH128_hash_t h;

	if (stat(dir, &d) < 0)
		return -errno;
	if ((size_t)snprintf(path, sizeof(path), "%s/gpu.data", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	if (stat(path, &g) < 0)
		return -errno;
	memset(&key, 0, sizeof(key));
	key.dev = (uint64_t)d.st_dev;
	key.dino = (uint64_t)d.st_ino;
	key.gino = (uint64_t)g.st_ino;
	key.gsize = (uint64_t)g.st_size;
	h = XXH3_128bits(&key, sizeof(key));
	snprintf(ret_id, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
	return 0;
}

/* Reads a manifest whole (bounded) from fd. */
static int manifest_slurp(int fd, char **ret, size_t *ret_len)
{
	struct stat st;
	size_t len = 0;
	char *buf;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > PHOS_IMAGE_MAX_MANIFEST)
		return -EBADMSG;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (len < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + len, (size_t)st.st_size - len, (off_t)len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* The extents of img with contents: buffers, variables, arrays. */
static int extents_of(const struct phos_image *img, struct inv_extent **ret, size_t *ret_n)
{
	uint32_t n = phos_image_nitems(img);
	struct inv_extent *e = calloc((size_t)n + 1, sizeof(*e));
	size_t k = 0;

	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct inv_extent x = { 0 };

		phos_image_item(img, i, &x.offset, &x.size, &x.hash);
		if (x.size)
			e[k++] = x;
	}
	*ret = e;
	*ret_n = k;
	return 0;
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EBADMSG;  /* truncated */
		got += (size_t)n;
	}
	return 0;
}

/* Hashes every chunk of every extent of gpu.data (fd) and checks each extent
 * against its manifest checksum. */
static int extents_hash(int fd, struct inv_extent *e, size_t n, char *err, size_t errlen)
{
	void *buf = NULL;
	int r = 0;

	buf = malloc(PHOS_IMAGE_HASH_CHUNK);
	if (!buf)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && r == 0; i++) {
		size_t nc = inv_extent_nchunks(e[i].size);

		e[i].chunks = calloc(nc, sizeof(uint64_t));
		if (!e[i].chunks) {
			r = -ENOMEM;
			phos_errf(err, errlen, "out of memory");
			break;
		}
		for (size_t c = 0; c < nc && r == 0; c++) {
			uint64_t off = (uint64_t)c * PHOS_IMAGE_HASH_CHUNK;
			size_t len = e[i].size - off < PHOS_IMAGE_HASH_CHUNK ? (size_t)(e[i].size - off)
									     : PHOS_IMAGE_HASH_CHUNK;

			r = pread_full(fd, buf, len, e[i].offset + off);
			if (r < 0)
				phos_errf(err, errlen, "gpu.data at %" PRIu64 ": %s", e[i].offset + off,
					 r == -EBADMSG ? "truncated" : strerror(-r));
			else
				e[i].chunks[c] = phos_image_chunk_hash(buf, len);
		}
		if (r == 0 && phos_image_combine(e[i].chunks, nc) != e[i].hash) {
			r = -EBADMSG;
			phos_errf(err, errlen, "checksum mismatch in gpu.data at [%" PRIu64 ", +%" PRIu64 ")",
				 e[i].offset, e[i].size);
		}
	}
	free(buf);
	return r;
}

/* Builds the info of a snapshot (id already known) from its manifest (mfd)
 * and gpu.data (gfd): manifest, extents, and the chunk hashes when asked. */
static int snapinfo_build(int mfd, int gfd, const char *id, bool chunks, struct inv_snapinfo **ret, char *err,
			  size_t errlen)
{
	struct inv_snapinfo *si = calloc(1, sizeof(*si));
	int r;

	if (!si)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	memcpy(si->id, id, sizeof(si->id));
	si->refs = 1;
	r = manifest_slurp(mfd, &si->manifest, &si->manifest_len);
	if (r < 0) {
		phos_errf(err, errlen, "manifest.json: %s", strerror(-r));
		goto fail;
	}
	r = phos_image_parse(si->manifest, si->manifest_len, &si->img, err, errlen);
	if (r < 0)
		goto fail;
	r = extents_of(si->img, &si->ext, &si->next);
	if (r < 0) {
		phos_errf(err, errlen, "out of memory");
		goto fail;
	}
	if (chunks && (r = extents_hash(gfd, si->ext, si->next, err, errlen)) < 0)
		goto fail;
	si->hashed = chunks;
	*ret = si;
	return 0;
fail:
	snapinfo_free(si);
	return r;
}

/* Puts si in dir's slot (replacing what was there); takes a ref for the cache. */
static void index_put(const char *dir, struct inv_snapinfo *si)
{
	struct inv_snapinfo *old = NULL;
	int hit = -1, empty = -1, lru = -1, victim;
	char *d = strdup(dir);

	if (!d)
		return;
	pthread_mutex_lock(&index_lock);
	for (int i = 0; i < SNAPINDEX_SLOTS && hit < 0; i++) {
		if (slots[i].dir && !strcmp(slots[i].dir, dir))
			hit = i;
		else if (!slots[i].dir && empty < 0)
			empty = i;
		else if (slots[i].dir && (lru < 0 || slots[i].used < slots[lru].used))
			lru = i;
	}
	victim = hit >= 0 ? hit : empty >= 0 ? empty : lru;
	free(slots[victim].dir);
	old = slots[victim].si;
	slots[victim].dir = d;
	slots[victim].si = si;
	slots[victim].used = ++use_clock;
	si->refs++;
	if (old && --old->refs > 0)
		old = NULL;
	pthread_mutex_unlock(&index_lock);
	snapinfo_free(old);
}

int inv_snapinfo_get(struct inv_function *f, bool chunks, struct inv_snapinfo **ret, char *err, size_t errlen)
{
	struct inv_snapinfo *si = NULL;
	char id[33], path[PATH_MAX];
	int r, mfd = -1, gfd = -1;

	/* Under the read lock only while the snapshot is identified and its
	 * files opened: the hashing reads the descriptors of files that never
	 * change, and must not hold back a re-snapshot (and, behind it, every
	 * cold start of the function) for seconds. */
	pthread_rwlock_rdlock(&f->snap_lock);
	r = inv_snapshot_id(f->snapshot_dir, id);
	if (r == 0) {
		pthread_mutex_lock(&index_lock);
		for (unsigned i = 0; i < SNAPINDEX_SLOTS; i++)
			if (slots[i].dir && !strcmp(slots[i].dir, f->snapshot_dir) && !strcmp(slots[i].si->id, id) &&
			    (!chunks || slots[i].si->hashed)) {
				si = slots[i].si;
				si->refs++;
				slots[i].used = ++use_clock;
				break;
			}
		pthread_mutex_unlock(&index_lock);
	}
	if (r == 0 && !si) {
		snprintf(path, sizeof(path), "%s/manifest.json", f->snapshot_dir);
		mfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		snprintf(path, sizeof(path), "%s/gpu.data", f->snapshot_dir);
		gfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		r = mfd < 0 || gfd < 0 ? -errno : 0;
	}
	pthread_rwlock_unlock(&f->snap_lock);
	if (r < 0) {
		phos_errf(err, errlen, "the snapshot of %s is not there: %s", f->name, strerror(-r));
		goto out;
	}
	if (!si) {
		r = snapinfo_build(mfd, gfd, id, chunks, &si, err, errlen);
		if (r < 0)
			goto out;
		index_put(f->snapshot_dir, si);
	}
	*ret = si;
out:
	if (mfd >= 0)
		close(mfd);
	if (gfd >= 0)
		close(gfd);
	return r;
}

void inv_snapinfo_seed(struct inv_function *f, const char *manifest, size_t len, const struct inv_extent *ext,
		       size_t next)
{
	struct inv_snapinfo *si = calloc(1, sizeof(*si));
	char err[256];
	bool ok = si && inv_snapshot_id(f->snapshot_dir, si->id) == 0 && (si->manifest = malloc(len + 1)) &&
		  (si->ext = calloc(next + 1, sizeof(*si->ext)));

	if (ok) {
		memcpy(si->manifest, manifest, len);
		si->manifest[len] = '\0';
		si->manifest_len = len;
		ok = phos_image_parse(si->manifest, len, &si->img, err, sizeof(err)) == 0;
	}
	for (size_t i = 0; ok && i < next; i++) {
		size_t nc = inv_extent_nchunks(ext[i].size);

		si->ext[i] = ext[i];
		si->ext[i].chunks = malloc(nc * sizeof(uint64_t));
		si->next = i + 1;
		if (!si->ext[i].chunks) {
			ok = false;
			si->next = i;
			break;
		}
		memcpy(si->ext[i].chunks, ext[i].chunks, nc * sizeof(uint64_t));
	}
	if (!ok) {
		snapinfo_free(si);
		return;
	}
	si->refs = 1;
	si->hashed = true;
	index_put(f->snapshot_dir, si);
	inv_snapinfo_unref(si);
}

/* ---- the stand-in build ---- */

static pthread_once_t standin_once = PTHREAD_ONCE_INIT;
static char standin_id[17] = "unknown";

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* XXH3-64 over the names and contents of the preload directory's regular files, in name order. */
static void standin_compute(void)
{
	const char *dir = inv_cfg.paths.preload_dir;
	char *names[256];
	size_t n = 0;
	XXH3_state_t *st = XXH3_createState();
	struct dirent *de;
	char *buf = malloc(1 << 20);
	DIR *d = dir ? opendir(dir) : NULL;

	if (!d || !st || !buf)
		goto out;
	while ((de = readdir(d)) && n < sizeof(names) / sizeof(names[0]))
		if (de->d_name[0] != '.' && strstr(de->d_name, ".so"))
			names[n++] = strdup(de->d_name);
	qsort(names, n, sizeof(names[0]), name_cmp);
	XXH3_64bits_reset(st);
	for (size_t i = 0; i < n; i++) {
		int fd = names[i] ? openat(dirfd(d), names[i], O_RDONLY | O_CLOEXEC) : -1;
		struct stat sb;
		ssize_t got;

		if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		XXH3_64bits_update(st, names[i], strlen(names[i]) + 1);
		while ((got = read(fd, buf, 1 << 20)) > 0)
			XXH3_64bits_update(st, buf, (size_t)got);
		close(fd);
	}
	snprintf(standin_id, sizeof(standin_id), "%016llx", (unsigned long long)XXH3_64bits_digest(st));
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	if (d)
		closedir(d);
	XXH3_freeState(st);
	free(buf);
}

const char *inv_standin_build(void)
{
	pthread_once(&standin_once, standin_compute);
	return standin_id;
}
