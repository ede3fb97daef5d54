/* SPDX-License-Identifier: MIT */
/*
 * Checksums of the CRIU image in a snapshot's cpu/ (format 1.1; image.h).
 * Files are hashed like buffers (chunked XXH3), read in PHOS_IMAGE_HASH_CHUNK
 * pieces. CRIU's logs are not part of the image and are left out.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "log.h"

#define CPU_READ_MAX (64ull << 30)   /* a CRIU image file past this is refused, not read */

static bool is_log(const char *name)
{
	size_t n = strlen(name);

	return n >= 4 && !strcmp(name + n - 4, ".log");
}

/* Size and chunked XXH3 of the regular file name in dfd (not followed if a link). */
static int file_hash(int dfd, const char *name, uint64_t *ret_size, uint64_t *ret_hash)
{
	size_t cap = PHOS_IMAGE_HASH_CHUNK, nchunks = 0, cchunks = 0;
	uint64_t *chunks = NULL, size = 0;
	struct stat st;
	char *buf;
	int fd, r = 0;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > CPU_READ_MAX) {
		close(fd);
		return -EBADMSG;
	}
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		size_t got = 0;

		while (got < cap) {
			ssize_t n = read(fd, buf + got, cap - got);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				r = -errno;
				goto out;
			}
			if (n == 0)
				break;
			got += (size_t)n;
		}
		if (got == 0 && size > 0)
			break;
		if (nchunks == cchunks) {
			uint64_t *c = realloc(chunks, (cchunks * 2 + 8) * sizeof(*c));

			if (!c) {
				r = -ENOMEM;
				goto out;
			}
			chunks = c;
			cchunks = cchunks * 2 + 8;
		}
		chunks[nchunks++] = phos_image_chunk_hash(buf, got);
		size += got;
		if (got < cap || size > CPU_READ_MAX)
			break;
	}
	*ret_size = size;
	*ret_hash = phos_image_combine(chunks, nchunks);
out:
	free(chunks);
	free(buf);
	close(fd);
	return r;
}

static int open_cpu_dir(const char *dir, const struct phos_image *img, DIR **ret, char *err, size_t errlen)
{
	char path[PATH_MAX];
	DIR *d;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, img->criu_dir[0] ? img->criu_dir : "cpu") >=
	    sizeof(path))
		return phos_errf_rc(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
	d = opendir(path);
	if (!d)
		return phos_errf_rc(err, errlen, -errno, "%s: %s", path, strerror(errno));
	*ret = d;
	return 0;
}

static int file_cmp(const void *a, const void *b)
{
	return strcmp(((const struct phos_image_file *)a)->name, ((const struct phos_image_file *)b)->name);
}

int phos_image_cpu_hash(const char *dir, struct phos_image *img, char *err, size_t errlen)
{
	struct phos_image_file *files = NULL;
	uint32_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r;

	r = open_cpu_dir(dir, img, &d, err, errlen);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		struct phos_image_file *f;

		if (de->d_name[0] == '.' || is_log(de->d_name))
			continue;
		if (strlen(de->d_name) >= sizeof(files->name)) {
			r = phos_errf_rc(err, errlen, -ENAMETOOLONG, "cpu/%.64s...: name too long", de->d_name);
			goto out;
		}
		if (n == cap) {
			if (cap >= PHOS_IMAGE_MAX_CPU_FILES) {
				r = phos_errf_rc(err, errlen, -E2BIG, "cpu/: more than %u files", PHOS_IMAGE_MAX_CPU_FILES);
				goto out;
			}
			f = realloc(files, (cap * 2 + 16) * sizeof(*f));
			if (!f) {
				r = phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
				goto out;
			}
			files = f;
			cap = cap * 2 + 16;
		}
		f = &files[n];
		memset(f, 0, sizeof(*f));
		memcpy(f->name, de->d_name, strlen(de->d_name) + 1);
		r = file_hash(dirfd(d), f->name, &f->size, &f->hash);
		if (r < 0) {
			phos_errf_rc(err, errlen, r, "cpu/%s: %s", f->name, r == -EBADMSG ? "not a regular file" : strerror(-r));
			goto out;
		}
		n++;
	}
	qsort(files, n, sizeof(*files), file_cmp);
	free(img->cpu_files);
	img->cpu_files = files;
	img->ncpu_files = n;
	files = NULL;
	r = 0;
out:
	free(files);
	closedir(d);
	return r;
}

int phos_image_cpu_verify(const char *dir, const struct phos_image *img, char *err, size_t errlen)
{
	struct dirent *de;
	DIR *d;
	int r;

	if (!img->ncpu_files)
		return 0;   /* older than 1.1: nothing to check against */
	r = open_cpu_dir(dir, img, &d, err, errlen);
	if (r < 0)
		return r;
	/* nothing CRIU would read that the manifest does not vouch for */
	while ((de = readdir(d))) {
		struct phos_image_file key;

		if (de->d_name[0] == '.' || is_log(de->d_name))
			continue;
		if (strlen(de->d_name) >= sizeof(key.name)) {
			r = phos_errf_rc(err, errlen, -EBADMSG, "cpu/%.64s... is not in the manifest", de->d_name);
			goto out;
		}
		memcpy(key.name, de->d_name, strlen(de->d_name) + 1);
		if (!bsearch(&key, img->cpu_files, img->ncpu_files, sizeof(key), file_cmp)) {
			r = phos_errf_rc(err, errlen, -EBADMSG, "cpu/%.64s is not in the manifest", de->d_name);
			goto out;
		}
	}
	for (uint32_t i = 0; i < img->ncpu_files; i++) {
		const struct phos_image_file *f = &img->cpu_files[i];
		uint64_t size, hash;

		r = file_hash(dirfd(d), f->name, &size, &hash);
		if (r < 0) {
			r = phos_errf_rc(err, errlen, r == -ENOENT ? -EBADMSG : r, "cpu/%s: %s", f->name,
				 r == -ENOENT ? "missing" : r == -EBADMSG ? "not a regular file" : strerror(-r));
			goto out;
		}
		if (size != f->size) {
			r = phos_errf_rc(err, errlen, -EBADMSG, "cpu/%s is %llu bytes, the manifest says %llu", f->name,
				 (unsigned long long)size, (unsigned long long)f->size);
			goto out;
		}
		if (hash != f->hash) {
			r = phos_errf_rc(err, errlen, -EBADMSG, "checksum mismatch in cpu/%s (%llu bytes)", f->name,
				 (unsigned long long)size);
			goto out;
		}
	}
	r = 0;
out:
	closedir(d);
	return r;
}
