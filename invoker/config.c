/* SPDX-License-Identifier: MIT */
/*
 * What every part of the daemon reads and main.c sets: the settings
 * (inv_cfg), the drain's flags, and the URL peers reach us at. Defined here,
 * below every file that reads them, so that reading them calls nothing up
 * (tools/circles).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "invoker.h"

struct inv_config inv_cfg;
volatile int inv_draining;
int inv_drain_abort_fd = -1;

static char self_url[300];   /* set once, before the first request */

void inv_self_url_set(const char *host, const char *port, bool wildcard)
{
	bool v6 = strchr(host, ':') != NULL;

	snprintf(self_url, sizeof(self_url), "http://%s%s%s:%s", v6 && !wildcard ? "[" : "",
		 wildcard ? "127.0.0.1" : host, v6 && !wildcard ? "]" : "", port);
}

const char *inv_http_self_url(char *buf, size_t len)
{
	snprintf(buf, len, "%s", self_url);
	return buf;
}
