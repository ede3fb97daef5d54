/* SPDX-License-Identifier: MIT */
/* The admin and peer tokens and the default state directory (token.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "token.h"
#include "log.h"

int inv_state_dir_default(char *buf, size_t len, bool create)
{
	const char *env = getenv("PHOS_STATE_DIR"), *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

	if (env && *env == '/')
		return snprintf(buf, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	if (access("/var/lib/phos-fn", W_OK) == 0 ||
	    (create && access("/var/lib", W_OK) == 0 && mkdir("/var/lib/phos-fn", 0700) == 0)) {
		snprintf(buf, len, "/var/lib/phos-fn");
		return 0;
	}
	if (xdg && *xdg == '/')
		return snprintf(buf, len, "%s/phos-fn", xdg) < (int)len ? 0 : -ENAMETOOLONG;
	if (home && *home == '/')
		return snprintf(buf, len, "%s/.local/state/phos-fn", home) < (int)len ? 0 : -ENAMETOOLONG;
	return -ENOENT;
}

int inv_token_read(const char *path, char **ret_token, char *err, size_t errlen)
{
	char buf[1024];
	struct stat st;
	ssize_t n;
	size_t len;
	char *start, *t;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);

	if (fd < 0) {
		phos_errf(err, errlen, "cannot open the token file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		phos_errf(err, errlen, "the token file %s is not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		close(fd);
		phos_errf(err, errlen, "the token file %s is accessible to others (mode %03o): chmod 600 it", path,
			 (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		phos_errf(err, errlen, "cannot read the token file %s: %s", path, strerror(errno));
		return -EIO;
	}
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	for (start = buf; *start == ' ' || *start == '\t'; start++)
		;
	len = strlen(start);
	while (len && (start[len - 1] == ' ' || start[len - 1] == '\t'))
		start[--len] = '\0';
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)start[i] <= ' ' || (unsigned char)start[i] >= 127) {
			phos_errf(err, errlen, "the token in %s has a blank or non-printable character", path);
			return -EINVAL;
		}
	if (len < INV_TOKEN_MIN) {
		phos_errf(err, errlen, "the token in %s must be %d characters or more", path, INV_TOKEN_MIN);
		return -EINVAL;
	}
	if (!(t = strdup(start)))
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	*ret_token = t;
	return 0;
}

/* Writes a fresh random token to path with O_EXCL: -EEXIST when another
 * process made one first. */
static int token_create(const char *path, char *err, size_t errlen)
{
	unsigned char rnd[32];
	char hex[2 * sizeof(rnd) + 2], tmp[PATH_MAX];
	int fd, r = 0;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return phos_errf_rc(err, errlen, -EIO, "getrandom: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
	strcat(hex, "\n");
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%02x%02x%02x%02x", path, rnd[0] ^ rnd[31], rnd[1] ^ rnd[30],
			     rnd[2] ^ rnd[29], (unsigned)getpid() & 0xff) >= sizeof(tmp))
		return phos_errf_rc(err, errlen, -ENAMETOOLONG, "state directory path too long");
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return phos_errf_rc(err, errlen, -errno, "cannot create %s: %s", tmp, strerror(errno));
	if (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) < 0)
		r = -EIO;
	close(fd);
	/* link, not rename: never replaces a token another invoker just made */
	if (!r && link(tmp, path) < 0)
		r = -errno;
	unlink(tmp);
	if (r && r != -EEXIST)
		phos_errf(err, errlen, "cannot write %s: %s", path, strerror(-r));
	return r;
}

int inv_token_ensure(const char *state_dir, const char *file, char **ret_token, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int r;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir, file) >= sizeof(path))
		return phos_errf_rc(err, errlen, -ENAMETOOLONG, "state directory path too long");
	if (access(path, F_OK) < 0 && errno == ENOENT && (r = token_create(path, err, errlen)) < 0 && r != -EEXIST)
		return r;
	return inv_token_read(path, ret_token, err, errlen);
}

bool inv_token_equal(const char *given, const char *want)
{
	size_t gl, wl;
	unsigned char diff;

	if (!want || !given)
		return false;
	gl = strlen(given);
	wl = strlen(want);
	diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? given[i] : 0));
	return diff == 0;
}
