/* SPDX-License-Identifier: MIT */
/*
 * The peer side of a snapshot pull (transfer.h): the export document of a
 * function and ranges of its snapshot's files, and the per-snapshot index of
 * chunk hashes that both sides use (the peer to publish them, the puller to
 * find chunks it already holds).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>
#include <xxhash.h>

#include "fault.h"
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

static json_t *err_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *err_json(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return json_pack("{s:s}", "error", buf);
}

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
static int snapshot_id(const char *dir, char ret_id[33])
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

/* Reads dir/manifest.json whole (bounded). */
static int manifest_slurp(const char *dir, char **ret, size_t *ret_len)
{
	char path[PATH_MAX];
	struct stat st;
	size_t len = 0;
	char *buf;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/manifest.json", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > PHOS_IMAGE_MAX_MANIFEST) {
		close(fd);
		return -EBADMSG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* The extents of img: its buffers, then its variables with contents. */
static int extents_of(const struct phos_image *img, struct inv_extent **ret, size_t *ret_n)
{
	size_t n = img->nbufs, k = 0;
	struct inv_extent *e;

	for (uint32_t i = 0; i < img->nvars; i++)
		n += img->vars[i].size > 0;
	e = calloc(n + 1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < img->nbufs; i++)
		e[k++] = (struct inv_extent){ img->bufs[i].offset, img->bufs[i].size, img->bufs[i].hash, NULL };
	for (uint32_t i = 0; i < img->nvars; i++)
		if (img->vars[i].size)
			e[k++] = (struct inv_extent){ img->vars[i].offset, img->vars[i].size, img->vars[i].hash, NULL };
	*ret = e;
	*ret_n = k;
	return 0;
}

static size_t nchunks(uint64_t size)
{
	return (size_t)((size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);
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

/* Hashes every chunk of every extent of dir/gpu.data and checks each extent
 * against its manifest checksum. */
static int extents_hash(const char *dir, struct inv_extent *e, size_t n, char *err, size_t errlen)
{
	char path[PATH_MAX];
	void *buf = NULL;
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return r = -errno, snprintf(err, errlen, "gpu.data: %s", strerror(-r)), r;
	buf = malloc(PHOS_IMAGE_HASH_CHUNK);
	if (!buf) {
		close(fd);
		return snprintf(err, errlen, "out of memory"), -ENOMEM;
	}
	for (size_t i = 0; i < n && r == 0; i++) {
		size_t nc = nchunks(e[i].size);

		e[i].chunks = calloc(nc, sizeof(uint64_t));
		if (!e[i].chunks) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			break;
		}
		for (size_t c = 0; c < nc && r == 0; c++) {
			uint64_t off = (uint64_t)c * PHOS_IMAGE_HASH_CHUNK;
			size_t len = e[i].size - off < PHOS_IMAGE_HASH_CHUNK ? (size_t)(e[i].size - off)
									     : PHOS_IMAGE_HASH_CHUNK;

			r = pread_full(fd, buf, len, e[i].offset + off);
			if (r < 0)
				snprintf(err, errlen, "gpu.data at %" PRIu64 ": %s", e[i].offset + off,
					 r == -EBADMSG ? "truncated" : strerror(-r));
			else
				e[i].chunks[c] = phos_image_chunk_hash(buf, len);
		}
		if (r == 0 && phos_image_combine(e[i].chunks, nc) != e[i].hash) {
			r = -EBADMSG;
			snprintf(err, errlen, "checksum mismatch in gpu.data at [%" PRIu64 ", +%" PRIu64 ")",
				 e[i].offset, e[i].size);
		}
	}
	free(buf);
	close(fd);
	return r;
}

/* Builds the info of dir (id already known): manifest, extents, and the chunk
 * hashes when asked. */
static int snapinfo_build(const char *dir, const char *id, bool chunks, struct inv_snapinfo **ret, char *err,
			  size_t errlen)
{
	struct inv_snapinfo *si = calloc(1, sizeof(*si));
	int r;

	if (!si)
		return snprintf(err, errlen, "out of memory"), -ENOMEM;
	memcpy(si->id, id, sizeof(si->id));
	si->refs = 1;
	r = manifest_slurp(dir, &si->manifest, &si->manifest_len);
	if (r < 0) {
		snprintf(err, errlen, "manifest.json: %s", strerror(-r));
		goto fail;
	}
	r = phos_image_parse(si->manifest, si->manifest_len, &si->img, err, errlen);
	if (r < 0)
		goto fail;
	r = extents_of(si->img, &si->ext, &si->next);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (chunks && (r = extents_hash(dir, si->ext, si->next, err, errlen)) < 0)
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
	char id[33];
	int r = snapshot_id(f->snapshot_dir, id);

	if (r < 0)
		return snprintf(err, errlen, "the snapshot of %s is not there: %s", f->name, strerror(-r)), r;
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
	if (si) {
		*ret = si;
		return 0;
	}
	r = snapinfo_build(f->snapshot_dir, id, chunks, &si, err, errlen);
	if (r < 0)
		return r;
	index_put(f->snapshot_dir, si);
	*ret = si;
	return 0;
}

void inv_snapinfo_seed(struct inv_function *f, const char *manifest, size_t len, const struct inv_extent *ext,
		       size_t next)
{
	struct inv_snapinfo *si = calloc(1, sizeof(*si));
	char err[256];
	bool ok = si && snapshot_id(f->snapshot_dir, si->id) == 0 && (si->manifest = malloc(len + 1)) &&
		  (si->ext = calloc(next + 1, sizeof(*si->ext)));

	if (ok) {
		memcpy(si->manifest, manifest, len);
		si->manifest[len] = '\0';
		si->manifest_len = len;
		ok = phos_image_parse(si->manifest, len, &si->img, err, sizeof(err)) == 0;
	}
	for (size_t i = 0; ok && i < next; i++) {
		size_t nc = nchunks(ext[i].size);

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

/* ---- the routes ---- */

static json_t *hex64(uint64_t v)
{
	char s[17];

	snprintf(s, sizeof(s), "%016llx", (unsigned long long)v);
	return json_string(s);
}

static json_t *export_json(struct inv_function *f, const struct inv_snapinfo *si, json_t *entry)
{
	const struct phos_image *img = si->img;
	json_t *files = json_array(), *ext = json_array();
	char path[128];

	json_array_append_new(files, json_pack("{s:s,s:I}", "path", "gpu.data", "size", (json_int_t)img->data_bytes));
	for (uint32_t i = 0; i < img->nmodules; i++) {
		snprintf(path, sizeof(path), "modules/%s.fatbin", img->modules[i].hash);
		json_array_append_new(files, json_pack("{s:s,s:I,s:s}", "path", path, "size",
						       (json_int_t)img->modules[i].size, "xxh3_128", img->modules[i].hash));
	}
	for (uint32_t i = 0; i < img->ncpu_files; i++) {
		snprintf(path, sizeof(path), "%s/%s", img->criu_dir, img->cpu_files[i].name);
		json_array_append_new(files, json_pack("{s:s,s:I,s:o}", "path", path, "size",
						       (json_int_t)img->cpu_files[i].size, "hash",
						       hex64(img->cpu_files[i].hash)));
	}
	for (size_t i = 0; i < si->next; i++) {
		json_t *c = json_array();

		for (size_t k = 0; k < nchunks(si->ext[i].size); k++)
			json_array_append_new(c, hex64(si->ext[i].chunks[k]));
		json_array_append_new(ext, json_pack("{s:I,s:I,s:o,s:o}", "offset", (json_int_t)si->ext[i].offset, "size",
						     (json_int_t)si->ext[i].size, "hash", hex64(si->ext[i].hash),
						     "chunks", c));
	}
	return json_pack("{s:i,s:s,s:s,s:o,s:{s:i,s:i},s:s,s:s,s:s,s:I,s:s%,s:o,s:o}", "export_version",
			 INV_EXPORT_VERSION, "name", f->name, "snapshot", si->id, "function", entry, "format", "major",
			 img->major, "minor", img->minor, "device", img->device, "gpu_name", img->gpu_name, "standin",
			 inv_standin_build(), "chunk_size", (json_int_t)PHOS_IMAGE_HASH_CHUNK, "manifest", si->manifest,
			 si->manifest_len, "files", files, "extents", ext);
}

/* f, ready, or an error status. */
static int export_function(const char *name, struct inv_function **ret, json_t **ret_body)
{
	struct inv_function *f;
	bool ready;

	if (!inv_name_valid(name))
		return *ret_body = err_json("bad function name"), 400;
	f = inv_function_get(name);
	if (!f)
		return *ret_body = err_json("no function %s", name), 404;
	pthread_mutex_lock(&f->lock);
	ready = f->ready && !f->removed;
	pthread_mutex_unlock(&f->lock);
	if (!ready) {
		inv_function_unref(f);
		return *ret_body = err_json("function %s is being deployed or removed", name), 409;
	}
	*ret = f;
	return 0;
}

int inv_export_describe(const char *name, json_t **ret_body)
{
	struct inv_function *f;
	struct inv_snapinfo *si = NULL;
	char err[1024];
	json_t *entry;
	int r, code;

	if ((code = export_function(name, &f, ret_body)))
		return code;
	entry = inv_function_entry(f);
	pthread_rwlock_rdlock(&f->snap_lock);
	r = inv_snapinfo_get(f, true, &si, err, sizeof(err));
	pthread_rwlock_unlock(&f->snap_lock);
	if (r < 0) {
		json_decref(entry);
		phos_err("export of %s: %s", name, err);
		*ret_body = r == -EBADMSG ? err_json("the snapshot of %s is corrupt here: %s", name, err)
					  : err_json("cannot export %s: %s", name, err);
		inv_function_unref(f);
		return 500;
	}
	if (si->img->major != PHOS_IMAGE_MAJOR || si->img->ncpu_files == 0) {
		json_decref(entry);
		*ret_body = err_json("the snapshot of %s (format %u.%u) has no CPU image checksums: re-snapshot it "
				     "before it can be pulled", name, si->img->major, si->img->minor);
		inv_snapinfo_unref(si);
		inv_function_unref(f);
		return 409;
	}
	*ret_body = export_json(f, si, entry);
	if (*ret_body && phos_fault("export_newer"))   /* a peer of a later phos-fn, for tests */
		json_object_set_new(*ret_body, "export_version", json_integer(INV_EXPORT_VERSION + 1));
	inv_snapinfo_unref(si);
	inv_function_unref(f);
	return *ret_body ? 200 : 500;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+' || strlen(s) > 20)
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* The size of path when it is one of si's files, else -ENOENT. */
static int64_t file_size(const struct inv_snapinfo *si, const char *path)
{
	const struct phos_image *img = si->img;
	size_t cl = strlen(img->criu_dir);

	if (!strcmp(path, "gpu.data"))
		return (int64_t)img->data_bytes;
	if (!strncmp(path, "modules/", 8)) {
		for (uint32_t i = 0; i < img->nmodules; i++)
			if (!strncmp(path + 8, img->modules[i].hash, 32) && !strcmp(path + 40, ".fatbin"))
				return (int64_t)img->modules[i].size;
		return -ENOENT;
	}
	if (!strncmp(path, img->criu_dir, cl) && path[cl] == '/')
		for (uint32_t i = 0; i < img->ncpu_files; i++)
			if (!strcmp(path + cl + 1, img->cpu_files[i].name))
				return (int64_t)img->cpu_files[i].size;
	return -ENOENT;
}

/* Opens path below dir without following a link anywhere (its components
 * come from the manifest, checked to be single names). */
static int open_below(const char *dir, const char *path)
{
	char sub[PATH_MAX];
	const char *slash = strchr(path, '/');
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), fd, r;

	if (dfd < 0)
		return -errno;
	if (slash) {
		int sfd;

		snprintf(sub, sizeof(sub), "%.*s", (int)(slash - path), path);
		sfd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		r = -errno;
		close(dfd);
		if (sfd < 0)
			return r;
		dfd = sfd;
		path = slash + 1;
	}
	fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	r = fd < 0 ? -errno : fd;
	close(dfd);
	return r;
}

int inv_export_file(const char *name, const char *snapshot, const char *path, const char *offset,
		    const char *length, struct MHD_Response **ret_resp, json_t **ret_body)
{
	struct inv_function *f;
	struct inv_snapinfo *si = NULL;
	struct MHD_Response *resp;
	uint64_t off, len;
	char err[512];
	int64_t size;
	struct stat sb;
	int fd = -1, r, code;

	if (!snapshot || !path || strlen(path) > 200 || strstr(path, "..") || path[0] == '/')
		return *ret_body = err_json("snapshot= and path= (a file of the export's list) are needed"), 400;
	if (parse_u64(offset, &off) < 0 || parse_u64(length, &len) < 0 || len == 0 || len > INV_EXPORT_RANGE_MAX)
		return *ret_body = err_json("offset= and length= must be numbers, length 1..%u", INV_EXPORT_RANGE_MAX),
		       400;
	if ((code = export_function(name, &f, ret_body)))
		return code;
	pthread_rwlock_rdlock(&f->snap_lock);
	r = inv_snapinfo_get(f, false, &si, err, sizeof(err));
	if (r < 0) {
		code = 500;
		*ret_body = err_json("cannot export %s: %s", name, err);
	} else if (strcmp(si->id, snapshot)) {
		code = 409;
		*ret_body = err_json("the snapshot of %s changed (re-snapshot) since the export: pull again", name);
	} else if ((size = file_size(si, path)) < 0) {
		code = 404;
		*ret_body = err_json("%s is not a file of the snapshot of %s", path, name);
	} else if (off > (uint64_t)size || len > (uint64_t)size - off) {
		code = 416;
		*ret_body = err_json("[%" PRIu64 ", +%" PRIu64 ") lies beyond %s (%" PRId64 " bytes)", off, len, path, size);
	} else if ((fd = open_below(f->snapshot_dir, path)) < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
		   (uint64_t)sb.st_size < off + len) {
		code = 500;
		*ret_body = err_json("%s of %s cannot be read: %s", path, name, fd < 0 ? strerror(-fd) : "too short");
	} else {
		code = 200;
	}
	/* The fd is of an immutable file: it stays valid after the lock. */
	pthread_rwlock_unlock(&f->snap_lock);
	inv_snapinfo_unref(si);
	inv_function_unref(f);
	if (code != 200) {
		if (fd >= 0)
			close(fd);
		return code;
	}
	resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
	if (!resp) {
		close(fd);
		return *ret_body = err_json("out of memory"), 500;
	}
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	*ret_resp = resp;
	return 200;
}
