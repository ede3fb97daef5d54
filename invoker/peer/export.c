/* SPDX-License-Identifier: MIT */
/*
 * The peer side of a snapshot pull (transfer.h): the export document of a
 * function, and ranges of the files of its snapshot, served from descriptors
 * opened under the snapshot's read lock.
 */
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

#include "fault.h"
#include "invoker.h"
#include "log.h"
#include "transfer.h"

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

		for (size_t k = 0; k < inv_extent_nchunks(si->ext[i].size); k++)
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
		return *ret_body = inv_err_json("bad function name"), 400;
	f = inv_function_get(name);
	if (!f)
		return *ret_body = inv_err_json("no function %s", name), 404;
	pthread_mutex_lock(&f->lock);
	ready = f->ready && !f->removed;
	pthread_mutex_unlock(&f->lock);
	if (!ready) {
		inv_function_unref(f);
		return *ret_body = inv_err_json("function %s is being deployed or removed", name), 409;
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
	r = inv_snapinfo_get(f, true, &si, err, sizeof(err));
	if (r < 0) {
		json_decref(entry);
		phos_err("export of %s: %s", name, err);
		*ret_body = r == -EBADMSG ? inv_err_json("the snapshot of %s is corrupt here: %s", name, err)
					  : inv_err_json("cannot export %s: %s", name, err);
		inv_function_unref(f);
		return 500;
	}
	if (si->img->major != PHOS_IMAGE_MAJOR || si->img->ncpu_files == 0) {
		json_decref(entry);
		*ret_body = inv_err_json("the snapshot of %s (format %u.%u) has no CPU image checksums: re-snapshot it "
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

int64_t inv_image_file_size(const struct phos_image *img, const char *path)
{
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

int inv_open_below(const char *dir, const char *path)
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

int inv_range_args(const char *path, const char *offset, const char *length, uint64_t *off, uint64_t *len,
		   json_t **ret_body)
{
	if (!path || strlen(path) > 200 || strstr(path, "..") || path[0] == '/')
		return *ret_body = inv_err_json("path= (a file of the list) is needed"), 400;
	if (parse_u64(offset, off) < 0 || parse_u64(length, len) < 0 || *len == 0 || *len > INV_EXPORT_RANGE_MAX)
		return *ret_body = inv_err_json("offset= and length= must be numbers, length 1..%u", INV_EXPORT_RANGE_MAX),
		       400;
	return 0;
}

int inv_range_open(const char *dir, const char *path, int64_t size, uint64_t off, uint64_t len, int *ret_fd,
		   json_t **ret_body)
{
	struct stat sb;
	int fd;

	if (off > (uint64_t)size || len > (uint64_t)size - off)
		return *ret_body = inv_err_json("[%" PRIu64 ", +%" PRIu64 ") lies beyond %s (%" PRId64 " bytes)", off, len,
						path, size), 416;
	fd = inv_open_below(dir, path);
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < off + len) {
		*ret_body = inv_err_json("%s cannot be read: %s", path, fd < 0 ? strerror(-fd) : "too short");
		if (fd >= 0)
			close(fd);
		return 500;
	}
	*ret_fd = fd;
	return 200;
}

int inv_range_response(int fd, uint64_t off, uint64_t len, struct MHD_Response **ret_resp, json_t **ret_body)
{
	struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, off);

	if (!resp) {
		close(fd);
		return *ret_body = inv_err_json("out of memory"), 500;
	}
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	*ret_resp = resp;
	return 200;
}

int inv_export_file(const char *name, const char *snapshot, const char *path, const char *offset,
		    const char *length, struct MHD_Response **ret_resp, json_t **ret_body)
{
	struct inv_function *f;
	struct inv_snapinfo *si = NULL;
	uint64_t off, len;
	char err[512], cur[33];
	int64_t size;
	int fd = -1, r, code;

	if (!snapshot)
		return *ret_body = inv_err_json("snapshot= and path= (a file of the export's list) are needed"), 400;
	if ((code = inv_range_args(path, offset, length, &off, &len, ret_body)))
		return code;
	if ((code = export_function(name, &f, ret_body)))
		return code;
	r = inv_snapinfo_get(f, false, &si, err, sizeof(err));
	pthread_rwlock_rdlock(&f->snap_lock);
	if (r < 0) {
		code = 500;
		*ret_body = inv_err_json("cannot export %s: %s", name, err);
	} else if (strcmp(si->id, snapshot) || inv_snapshot_id(f->snapshot_dir, cur) < 0 || strcmp(cur, snapshot)) {
		code = 409;
		*ret_body = inv_err_json("the snapshot of %s changed (re-snapshot) since the export: pull again", name);
	} else if ((size = inv_image_file_size(si->img, path)) < 0) {
		code = 404;
		*ret_body = inv_err_json("%s is not a file of the snapshot of %s", path, name);
	} else {
		code = inv_range_open(f->snapshot_dir, path, size, off, len, &fd, ret_body);
	}
	/* The fd is of an immutable file: it stays valid after the lock. */
	pthread_rwlock_unlock(&f->snap_lock);
	inv_snapinfo_unref(si);
	inv_function_unref(f);
	if (code != 200)
		return code;
	return inv_range_response(fd, off, len, ret_resp, ret_body);
}
