/* SPDX-License-Identifier: MIT */
/*
 * Atomic commit of a snapshot directory (see image.h).
 *
 *   begin:  DIR.tmp-<pid>-XXXXXX (mkdtemp, 0700: a snapshot holds the function's memory) beside DIR
 *   commit: fsync every file and directory under it
 *           ── fault point "snapshot_commit": -EIO, the temporary stays ──
 *           rename (RENAME_NOREPLACE) to DIR, or, when DIR exists,
 *           RENAME_EXCHANGE with it and remove the old one (now at the
 *           temporary name); fsync the parent
 *   sweep:  removes DIR.tmp-<pid>-* whose pid no longer exists
 *
 * The pid in the name lets a sweep tell an abandoned temporary from one being
 * written. Pids are those of the caller's pid namespace; a reused pid only
 * keeps a leftover longer.
 */
#include "image.h"
#include "fault.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_MARK ".tmp-"

/* Splits path (without trailing slashes) into parent and base name. */
static int split_path(const char *path, char *ret_parent, char *ret_base)
{
	const char *slash;
	size_t len;

	if (!path)
		return -EINVAL;
	len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (len == 0 || len >= PATH_MAX)
		return -EINVAL;
	slash = memrchr(path, '/', len);
	if (!slash) {
		strcpy(ret_parent, ".");
		memcpy(ret_base, path, len);
		ret_base[len] = '\0';
	} else {
		size_t plen = slash == path ? 1 : (size_t)(slash - path);

		memcpy(ret_parent, path, plen);
		ret_parent[plen] = '\0';
		memcpy(ret_base, slash + 1, len - (size_t)(slash - path) - 1);
		ret_base[len - (size_t)(slash - path) - 1] = '\0';
	}
	if (!ret_base[0] || !strcmp(ret_base, ".") || !strcmp(ret_base, ".."))
		return -EINVAL;
	return 0;
}

int phos_image_dir_begin(const char *final_dir, char *ret_tmp, size_t len)
{
	char parent[PATH_MAX], base[PATH_MAX], tmp[PATH_MAX];
	struct stat st;
	int n, r;

	if (!final_dir || !ret_tmp)
		return -EINVAL;
	r = split_path(final_dir, parent, base);
	if (r < 0)
		return r;
	if (stat(parent, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	n = snprintf(tmp, sizeof(tmp), "%s%s%s" TMP_MARK "%d-XXXXXX", parent,
		     strcmp(parent, "/") ? "/" : "", base, (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(tmp) || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (!mkdtemp(tmp))
		return -errno;
	if (chmod(tmp, 0700) < 0) {
		r = -errno;
		rmdir(tmp);
		return r;
	}
	memcpy(ret_tmp, tmp, (size_t)n + 1);
	return 0;
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | flags);
	int r = 0;

	if (fd < 0)
		return errno;
	if (fsync(fd) < 0)
		r = errno;
	close(fd);
	return r;
}

/* nftw callbacks return a positive errno to stop the walk (nftw's own
 * failures return -1). */
static int fsync_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F)
		return fsync_path(path, 0);
	if (type == FTW_DP)
		return fsync_path(path, O_DIRECTORY);
	if (type == FTW_DNR || type == FTW_NS)
		return EACCES;
	return 0; /* symbolic links: nothing of theirs to flush */
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_DP || type == FTW_DNR)
		rmdir(path);
	else
		unlink(path);
	return 0; /* best effort: remove what can be removed */
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static int fsync_parent(const char *path)
{
	char parent[PATH_MAX], base[PATH_MAX];
	int r = split_path(path, parent, base);

	if (r < 0)
		return r;
	return -fsync_path(parent, O_DIRECTORY);
}

int phos_image_dir_commit(const char *tmp_dir, const char *final_dir)
{
	int r;

	if (!tmp_dir || !final_dir)
		return -EINVAL;
	r = nftw(tmp_dir, fsync_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (r == -1)
		return -errno;
	if (r > 0)
		return -r;
	if (phos_fault("snapshot_commit"))
		return -EIO;
	if (renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, final_dir, RENAME_NOREPLACE) == 0)
		return fsync_parent(final_dir);
	if (errno == EINVAL && access(final_dir, F_OK) < 0 && errno == ENOENT) {
		/* A filesystem without RENAME_NOREPLACE. */
		if (rename(tmp_dir, final_dir) < 0)
			return -errno;
		return fsync_parent(final_dir);
	}
	if (errno != EEXIST && errno != EINVAL)
		return -errno;
	if (renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, final_dir, RENAME_EXCHANGE) < 0)
		return -errno;
	/* The old snapshot is now at tmp_dir: make the exchange durable, then drop it. */
	r = fsync_parent(final_dir);
	remove_tree(tmp_dir);
	return r;
}

void phos_image_dir_abort(const char *tmp_dir)
{
	char parent[PATH_MAX], base[PATH_MAX];

	if (!tmp_dir || split_path(tmp_dir, parent, base) < 0)
		return;
	/* Only ever remove what begin made: a slip here must not remove a snapshot. */
	if (!strstr(base, TMP_MARK)) {
		phos_err("refusing to remove %s: not a temporary snapshot directory", tmp_dir);
		return;
	}
	remove_tree(tmp_dir);
}

int phos_image_dir_remove(const char *final_dir)
{
	static atomic_uint seq;
	char parent[PATH_MAX], base[PATH_MAX], tmp[PATH_MAX];
	int n, r;

	if (!final_dir)
		return -EINVAL;
	r = split_path(final_dir, parent, base);
	if (r < 0)
		return r;
	n = snprintf(tmp, sizeof(tmp), "%s%s%s" TMP_MARK "%d-rm%u", parent, strcmp(parent, "/") ? "/" : "", base,
		     (int)getpid(), atomic_fetch_add(&seq, 1));
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -ENAMETOOLONG;
	/* Renamed away first: a crash halfway leaves a temporary that a sweep
	 * removes, never a half-removed snapshot under its name. */
	if (renameat2(AT_FDCWD, final_dir, AT_FDCWD, tmp, RENAME_NOREPLACE) < 0)
		return errno == ENOENT ? 0 : -errno;
	remove_tree(tmp);
	return 0;
}

/* The pid in "<base>.tmp-<pid>-XXXXXX", or 0 when name is not one of those. */
static pid_t tmp_owner(const char *name, const char *base, size_t base_len)
{
	const char *p;
	long pid = 0;

	if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, TMP_MARK, 5) != 0)
		return 0;
	p = name + base_len + 5;
	if (*p < '0' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		pid = pid * 10 + (*p - '0');
		if (pid > INT_MAX)
			return 0;
	}
	return *p == '-' ? (pid_t)pid : 0;
}

int phos_image_dir_sweep(const char *final_dir)
{
	char parent[PATH_MAX], base[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	int removed = 0, r;
	DIR *d;

	if (!final_dir)
		return -EINVAL;
	r = split_path(final_dir, parent, base);
	if (r < 0)
		return r;
	d = opendir(parent);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		pid_t pid = tmp_owner(de->d_name, base, strlen(base));

		if (pid <= 0 || !(kill(pid, 0) == -1 && errno == ESRCH))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", parent, de->d_name) >= (int)sizeof(path))
			continue;
		remove_tree(path);
		if (access(path, F_OK) < 0 && errno == ENOENT)
			removed++;
	}
	closedir(d);
	return removed;
}
