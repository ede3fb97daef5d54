/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <unistd.h>

#include "fdio.h"

int phos_write_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len) {
		ssize_t n = write(fd, c, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		c += n;
		len -= (size_t)n;
	}
	return 0;
}
