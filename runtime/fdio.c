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

ssize_t phos_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int phos_read_file(const char *path, uint64_t size, void **ret_data)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *data;
	ssize_t n;

	if (fd < 0)
		return -errno;
	data = malloc(size ? size : 1);
	if (!data) {
		close(fd);
		return -ENOMEM;
	}
	n = phos_read_full(fd, data, size);
	close(fd);
	if (n < 0 || (uint64_t)n < size) {
		free(data);
		return n < 0 ? (int)n : -ENODATA;
	}
	*ret_data = data;
	return 0;
}
