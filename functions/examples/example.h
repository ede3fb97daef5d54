/* SPDX-License-Identifier: MIT */
/*
 * What the example functions share: error checks, bounded JSON request fields,
 * JSON replies, a seeded input generator, and argv parsing. Host code only
 * (included by the .cu files; nothing here runs on the device).
 *
 * Errors. Init and request code run in functions that return 0 or -1 and
 * leave a one-line message in a struct ex_err; CUDA_TRY / CUBLAS_TRY record
 * "file:line: call: reason" and jump to the function's `fail` label:
 *
 *     static int setup(struct state *s, struct ex_err *err)
 *     {
 *         CUDA_TRY(err, cudaMalloc(&s->a, bytes));
 *         return 0;
 *     fail:
 *         return -1;
 *     }
 *
 * main() prints the message to stderr and exits 1 when init fails; a handler
 * answers 500 {"error": message} when the request path fails, and 400 for a
 * bad request (ex_reply_error).
 *
 * Every response carries "max_abs_err" (a number; DBL_MAX stands for a
 * non-finite GPU result), "tol" and "ok", so that any run can be checked.
 */
#ifndef PHOS_EXAMPLE_H
#define PHOS_EXAMPLE_H

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <phos/fn.h>

struct ex_err {
	char msg[512];
};

static inline void ex_err_set(struct ex_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void ex_err_set(struct ex_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
}

#define CUDA_TRY(err, call)                                                                   \
	do {                                                                                  \
		cudaError_t ex_rc_ = (call);                                                  \
		if (ex_rc_ != cudaSuccess) {                                                  \
			ex_err_set((err), "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,    \
				   cudaGetErrorString(ex_rc_), cudaGetErrorName(ex_rc_));    \
			goto fail;                                                            \
		}                                                                             \
	} while (0)

/* A launch, checked with cudaGetLastError right after the <<<>>> (variadic: the
 * launch configuration holds commas). */
#define LAUNCH_TRY(err, ...)                                                                  \
	do {                                                                                  \
		cudaError_t ex_rc_;                                                           \
		__VA_ARGS__;                                                                  \
		ex_rc_ = cudaGetLastError();                                                  \
		if (ex_rc_ != cudaSuccess) {                                                  \
			ex_err_set((err), "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #__VA_ARGS__, \
				   cudaGetErrorString(ex_rc_), cudaGetErrorName(ex_rc_));    \
			goto fail;                                                            \
		}                                                                             \
	} while (0)

#define CUBLAS_TRY(err, call)                                                                 \
	do {                                                                                  \
		cublasStatus_t ex_st_ = (call);                                               \
		if (ex_st_ != CUBLAS_STATUS_SUCCESS) {                                        \
			ex_err_set((err), "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
				   cublasGetStatusString(ex_st_));                            \
			goto fail;                                                            \
		}                                                                             \
	} while (0)

/* ---- seeded inputs -------------------------------------------------------- */

/* splitmix64's finaliser: a bijection on 64-bit words. */
static inline uint64_t ex_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* Element i of the stream (seed, stream) as a float in [-1, 1), exact multiples of 2^-23. */
static inline float ex_uniform(uint32_t seed, uint32_t stream, uint64_t i)
{
	uint64_t base = ex_mix64(((uint64_t)seed << 32) | stream);
	uint64_t h = ex_mix64(base + (i + 1) * 0x9e3779b97f4a7c15ULL);
	int32_t k = (int32_t)(h >> 40) - (1 << 23);

	return (float)k * 0x1p-23f;
}

/* ---- requests ------------------------------------------------------------- */

/* Parses the request body as one JSON object; NULL with err set otherwise. */
static inline json_t *ex_request_parse(const struct phos_fn_request *req, struct ex_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(req->body, req->len, JSON_REJECT_DUPLICATES, &jerr);

	if (!root) {
		ex_err_set(err, "bad JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(root)) {
		ex_err_set(err, "the request must be a JSON object");
		json_decref(root);
		return NULL;
	}
	return root;
}

/* Refuses fields not in the NULL-terminated list `known` (catches typos such as "seeds"). */
static inline int ex_request_known(json_t *root, const char *const *known, struct ex_err *err)
{
	for (void *it = json_object_iter(root); it; it = json_object_iter_next(root, it)) {
		const char *key = json_object_iter_key(it);
		const char *const *k;

		for (k = known; *k; k++)
			if (strcmp(*k, key) == 0)
				break;
		if (!*k) {
			ex_err_set(err, "unknown field \"%s\"", key);
			return -1;
		}
	}
	return 0;
}

/* Integer field in [min, max]; def when absent. *ret_present tells whether it was given. */
static inline int ex_request_int(json_t *root, const char *key, long long def, long long min,
				 long long max, long long *ret, bool *ret_present, struct ex_err *err)
{
	json_t *v = json_object_get(root, key);

	if (ret_present)
		*ret_present = v != NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
		ex_err_set(err, "\"%s\" must be an integer in [%lld, %lld]", key, min, max);
		return -1;
	}
	*ret = json_integer_value(v);
	return 0;
}

/* Number field (integer or real) in [min, max]; def when absent. */
static inline int ex_request_real(json_t *root, const char *key, double def, double min, double max,
				  double *ret, bool *ret_present, struct ex_err *err)
{
	json_t *v = json_object_get(root, key);

	if (ret_present)
		*ret_present = v != NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (!json_is_number(v) || !(json_number_value(v) >= min && json_number_value(v) <= max)) {
		ex_err_set(err, "\"%s\" must be a number in [%g, %g]", key, min, max);
		return -1;
	}
	*ret = json_number_value(v);
	return 0;
}

static inline int ex_request_bool(json_t *root, const char *key, bool def, bool *ret, struct ex_err *err)
{
	json_t *v = json_object_get(root, key);

	if (!v) {
		*ret = def;
		return 0;
	}
	if (!json_is_boolean(v)) {
		ex_err_set(err, "\"%s\" must be true or false", key);
		return -1;
	}
	*ret = json_is_true(v);
	return 0;
}

/* ---- responses ------------------------------------------------------------ */

/* Sends obj (consumed) as the response body; returns status. */
static inline int ex_reply(struct phos_fn_response *resp, json_t *obj, int status)
{
	char *body = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;

	json_decref(obj);
	if (!body) {
		static const char oom[] = "{\"error\":\"out of memory building the response\"}";

		body = strdup(oom);
		status = 500;
	}
	resp->body = body;
	resp->len = body ? strlen(body) : 0;
	resp->content_type = "application/json";
	return status;
}

/* {"error": msg} with status (400 for a bad request, 500 for a failure on the GPU). */
static inline int ex_reply_error(struct phos_fn_response *resp, int status, const char *msg)
{
	return ex_reply(resp, json_pack("{s:s}", "error", msg), status);
}

/* The JSON value of an error: DBL_MAX stands for NaN/inf (JSON has neither). */
static inline json_t *ex_json_err(double max_abs_err)
{
	return json_real(isfinite(max_abs_err) ? max_abs_err : DBL_MAX);
}

/* |got - want| with NaN/inf in got counted as an infinite error. */
static inline double ex_abs_err(double got, double want)
{
	double d = fabs(got - want);

	return d == d ? d : INFINITY;
}

/* ---- argv ----------------------------------------------------------------- */

/* Parses argv[*i + 1] as the value of option argv[*i], an integer in [min, max]. */
static inline int ex_arg_u64(int argc, char **argv, int *i, unsigned long long min,
			     unsigned long long max, unsigned long long *ret, struct ex_err *err)
{
	const char *opt = argv[*i];
	char *end;
	unsigned long long v;

	if (*i + 1 >= argc) {
		ex_err_set(err, "%s needs a value", opt);
		return -1;
	}
	errno = 0;
	v = strtoull(argv[*i + 1], &end, 0);
	if (errno || end == argv[*i + 1] || *end || argv[*i + 1][0] == '-' || v < min || v > max) {
		ex_err_set(err, "%s must be an integer in [%llu, %llu], not \"%s\"", opt, min, max,
			   argv[*i + 1]);
		return -1;
	}
	*ret = v;
	(*i)++;
	return 0;
}

#endif /* PHOS_EXAMPLE_H */
