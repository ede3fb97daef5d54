/* SPDX-License-Identifier: MIT */
/*
 * Logging shared by every phos component.
 *
 * Library code (runtime/, preload/) logs only when asked: the level comes from
 * PHOS_LOG (error|warn|info|debug; default "error" for daemons, "off" inside a
 * function process, see phos_log_init). Messages go to stderr, one line each,
 * prefixed with the component name.
 */
#pragma once

#include <stdarg.h>

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

enum phos_log_level { PHOS_LOG_OFF = 0, PHOS_LOG_ERROR, PHOS_LOG_WARN, PHOS_LOG_INFO, PHOS_LOG_DEBUG };

/* Sets the component name and reads PHOS_LOG; dflt is used when PHOS_LOG is unset. */
void phos_log_init(const char *component, enum phos_log_level dflt);
enum phos_log_level phos_log_level(void);
void phos_log_at(enum phos_log_level lvl, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define phos_err(...)   phos_log_at(PHOS_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define phos_warn(...)  phos_log_at(PHOS_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define phos_info(...)  phos_log_at(PHOS_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define phos_debug(...) phos_log_at(PHOS_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* Formats a one-line reason into err (the err/errlen out-parameters of calls
 * that explain their failures); errlen may be 0. */
void phos_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same, then returns rc: return phos_errf_rc(err, errlen, -EINVAL, ...). */
int phos_errf_rc(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same from a va_list. */
void phos_verrf(char *err, size_t errlen, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

/* Seconds on CLOCK_MONOTONIC, for phase timings. */
double phos_now(void);

/* Evaluates expr (an int: 0 or negative errno); on failure logs file:line and returns it. */
#define PHOS_CHECK(expr)                                                                  \
	do {                                                                              \
		int phos_check_r_ = (expr);                                               \
		if (phos_check_r_ < 0) {                                                  \
			phos_err("%s: %s", #expr, strerror(-phos_check_r_));              \
			return phos_check_r_;                                             \
		}                                                                         \
	} while (0)
