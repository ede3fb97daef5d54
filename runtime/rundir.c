/* SPDX-License-Identifier: MIT */
/* Our private runtime directory (rundir.h). */
#include "rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int phos_rundir(char *buf, size_t len)
{
	const char *env = getenv("PHOS_RUNTIME_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	int n;

	if (env && *env)
		n = snprintf(buf, len, "%s", env);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/phos-fn");
	else if (xdg && *xdg)
		n = snprintf(buf, len, "%s/phos-fn", xdg);
	else
		n = snprintf(buf, len, "/tmp/phos-fn-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(buf, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
		return -EPERM;
	return 0;
}
