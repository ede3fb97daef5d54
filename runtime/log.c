/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_component = "phos";
static enum phos_log_level log_level = PHOS_LOG_ERROR;

void phos_log_init(const char *component, enum phos_log_level dflt)
{
	const char *env = getenv("PHOS_LOG");

	log_component = component;
	log_level = dflt;
	if (!env || !*env)
		return;
	if (!strcasecmp(env, "off"))
		log_level = PHOS_LOG_OFF;
	else if (!strcasecmp(env, "error"))
		log_level = PHOS_LOG_ERROR;
	else if (!strcasecmp(env, "warn"))
		log_level = PHOS_LOG_WARN;
	else if (!strcasecmp(env, "info"))
		log_level = PHOS_LOG_INFO;
	else if (!strcasecmp(env, "debug"))
		log_level = PHOS_LOG_DEBUG;
}

enum phos_log_level phos_log_level(void)
{
	return log_level;
}

void phos_log_at(enum phos_log_level lvl, const char *file, int line, const char *fmt, ...)
{
	static const char *names[] = { "", "error", "warn", "info", "debug" };
	char buf[1024];
	int n;
	va_list ap;

	if (lvl > log_level || lvl == PHOS_LOG_OFF)
		return;
	n = snprintf(buf, sizeof(buf), "%s[%d] %s: ", log_component, (int)getpid(), names[lvl]);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (lvl >= PHOS_LOG_DEBUG && n < (int)sizeof(buf) - 1)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, " (%s:%d)", file, line);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write(2) per line so that lines of concurrent processes do not interleave. */
	(void)!write(STDERR_FILENO, buf, (size_t)n);
}

void phos_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
}

void phos_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	phos_verrf(err, errlen, fmt, ap);
	va_end(ap);
}

int phos_errf_rc(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	phos_verrf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

double phos_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
