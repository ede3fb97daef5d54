/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
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

int phos_pwrite_all(int fd, const void *p, size_t len, uint64_t off)
{
	const char *c = p;

	while (len) {
		ssize_t n = pwrite(fd, c, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		c += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int phos_read_file(const char *path, uint64_t size, void **ret_data)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *data;
	uint64_t got = 0;
	int r = 0;

	if (fd < 0)
		return -errno;
	data = malloc(size ? size : 1);
	if (!data) {
		close(fd);
		return -ENOMEM;
	}
	while (got < size) {
		ssize_t n = read(fd, data + got, size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -ENODATA;
			break;
		}
		got += (uint64_t)n;
	}
	close(fd);
	if (r < 0) {
		free(data);
		return r;
	}
	*ret_data = data;
	return 0;
}
