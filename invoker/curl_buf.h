/* SPDX-License-Identifier: MIT */
/*
 * An HTTP answer collected in memory by libcurl, bounded: the CLI's, etcd's
 * and another invoker's answers alike.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct inv_curl_buf {
	char *buf;        /* NUL-terminated once anything came; malloc'ed, the caller frees it */
	size_t len, cap;
	size_t max;       /* the most bytes taken: more makes the transfer fail with over set */
	bool over;
};

/* CURLOPT_WRITEFUNCTION, with CURLOPT_WRITEDATA a struct inv_curl_buf. */
size_t inv_curl_buf_write(char *data, size_t size, size_t nmemb, void *arg);
