// SPDX-License-Identifier: MIT
// cuRAND's host API as its users call it (MC_EstimatePiP, MonteCarloMultiGPU,
// randomFog, HeCBench's programs): device generators of every pseudorandom
// type made at init, before phos_fn_serve, two of them already used there
// (so a snapshot restored in a new executor must make them again at the
// same position), and each request draws from all of them, every kind of
// call, every buffer checked here against the distribution it must follow:
//
//   bits        curandGenerate: the mean of x / 2^32 near 1/2, not constant
//   uniform     float and double: all in (0, 1] (0 excluded, 1 included),
//               mean 1/2, variance 1/12
//   normal      float (mean 2, stddev 3) and double (-1, 0.5): their moments
//   log-normal  float and double (0, 0.5): all > 0, the moments of the logs
//   Poisson     lambda 4 (and 3000 on the Philox generator): mean and
//               variance lambda
//
// The answer of each request carries an FNV-1a hash of every buffer it
// generated, so that runs can be held byte for byte against each other:
// natively and forwarded on a GPU, and a restored snapshot or checkpoint
// against an uninterrupted run.
//
// At init it also checks what cuRAND documents: a generator of the same
// type and seed makes the same bytes, another seed others; the offset is
// absolute (set again, the same numbers again); Poisson's lambda 0 OUT_OF_RANGE,
// curandGenerateLongLong and curandSetQuasiRandomGeneratorDimensions on a
// pseudorandom generator TYPE_ERROR. And it says on stderr, for each type,
// whether an offset of k and a call of k both move the position by exactly
// k words ("offset-contiguous ..."): information for the docs, asserted
// nowhere (cuRAND does not document it; phos-fn replays instead); and the
// status of an odd n of two Box-Muller calls on Philox ("odd-n ...": the docs
// say LENGTH_NOT_MULTIPLE, CUDA 13 takes it).
//
// argv[1] "pointers": each generate call's buffer, n and kind as JSON on
// stderr ("call {...}"), for the test to hold the executor's write sets
// against; "refused": what phos-fn refuses, statuses as JSON; "loop N": no
// serving, N steps of smaller calls, a JSON line every 20 with a running
// hash, and a last one (a checkpoint in the middle of the calls must restore
// a copy whose last hash is an uninterrupted run's).
// At start it says on stderr which file serves curandCreateGenerator
// ("curand: PATH").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <curand.h>
#include <phos/fn.h>

#define CK(call)                                                                                          \
	do {                                                                                              \
		cudaError_t e_ = (call);                                                                  \
		if (e_ != cudaSuccess) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                          \
		}                                                                                         \
	} while (0)
#define RK(call)                                                                                  \
	do {                                                                                      \
		curandStatus_t s_ = (call);                                                       \
		if (s_ != CURAND_STATUS_SUCCESS) {                                                \
			fprintf(stderr, "%s:%d: %s: curandStatus_t %d\n", __FILE__, __LINE__, #call, (int)s_); \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

enum kind { BITS, UNIFORM, UNIFORM_D, NORMAL, NORMAL_D, LOGNORMAL, LOGNORMAL_D, POISSON, KINDS };
static const char *const kind_names[KINDS] = { "bits", "uniform", "uniform_double", "normal", "normal_double",
					       "log_normal", "log_normal_double", "poisson" };
static const size_t kind_size[KINDS] = { 4, 4, 8, 4, 8, 4, 8, 4 };

struct gen_def {
	const char *name;
	curandRngType_t type;
	unsigned long long seed;   // 0: left at its default
	unsigned long long offset;
	int ordering;              // 0: left at its default
	bool on_stream;
	double big_lambda;         // 0: Poisson of lambda 4 only
};
static const gen_def defs[] = {
	{ "xorwow", CURAND_RNG_PSEUDO_XORWOW, 1234, 0, CURAND_ORDERING_PSEUDO_LEGACY, false, 0 },
	{ "philox", CURAND_RNG_PSEUDO_PHILOX4_32_10, 42, 1000, 0, true, 3000 },
	{ "mrg32k3a", CURAND_RNG_PSEUDO_MRG32K3A, 7, 0, 0, false, 0 },
	{ "mtgp32", CURAND_RNG_PSEUDO_MTGP32, 99, 0, 0, true, 0 },
	{ "mt19937", CURAND_RNG_PSEUDO_MT19937, 5, 0, 0, false, 0 },
	{ "default", CURAND_RNG_PSEUDO_DEFAULT, 0, 0, 0, false, 0 },
};
enum { NGENS = sizeof(defs) / sizeof(defs[0]), N = 1 << 16, LOOP_N = 1 << 12 };

struct state {
	cudaStream_t s;
	curandGenerator_t g[NGENS];
	void *buf[NGENS][KINDS];
	int requests, failures;
	bool pointers;
	uint64_t running;   // loop: the hash of every buffer so far
};

static uint64_t fnv(const void *p, size_t len, uint64_t h = 0xcbf29ce484222325ull)
{
	const unsigned char *b = (const unsigned char *)p;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

// One generate call of kind k on generator i into its buffer, n elements.
static curandStatus_t draw(struct state *st, int i, int k, size_t n, double lambda)
{
	curandGenerator_t g = st->g[i];
	void *p = st->buf[i][k];

	if (st->pointers)
		fprintf(stderr, "call {\"ptr\": %llu, \"n\": %zu, \"kind\": \"%s\"}\n",
			(unsigned long long)(uintptr_t)p, n, kind_names[k]);
	switch (k) {
	case BITS: return curandGenerate(g, (unsigned int *)p, n);
	case UNIFORM: return curandGenerateUniform(g, (float *)p, n);
	case UNIFORM_D: return curandGenerateUniformDouble(g, (double *)p, n);
	case NORMAL: return curandGenerateNormal(g, (float *)p, n, 2.0f, 3.0f);
	case NORMAL_D: return curandGenerateNormalDouble(g, (double *)p, n, -1.0, 0.5);
	case LOGNORMAL: return curandGenerateLogNormal(g, (float *)p, n, 0.0f, 0.5f);
	case LOGNORMAL_D: return curandGenerateLogNormalDouble(g, (double *)p, n, 0.0, 0.5);
	default: return curandGeneratePoisson(g, (unsigned int *)p, n, lambda);
	}
}

// The elements of a buffer as doubles (logs for the log-normal kinds).
static std::vector<double> values(int k, const std::vector<unsigned char> &h, size_t n, char *why, size_t len)
{
	std::vector<double> v(n);

	for (size_t j = 0; j < n; j++) {
		double x;

		if (kind_size[k] == 8) {
			memcpy(&x, &h[j * 8], 8);
		} else if (k == BITS || k == POISSON) {
			unsigned int u;

			memcpy(&u, &h[j * 4], 4);
			x = k == BITS ? u / 4294967296.0 : u;
		} else {
			float f;

			memcpy(&f, &h[j * 4], 4);
			x = f;
		}
		if ((k == UNIFORM || k == UNIFORM_D) && !(x > 0 && x <= 1)) {
			snprintf(why, len, "%s[%zu] = %.17g is outside (0, 1]", kind_names[k], j, x);
			return {};
		}
		if (k == LOGNORMAL || k == LOGNORMAL_D) {
			if (!(x > 0)) {
				snprintf(why, len, "%s[%zu] = %g is not positive", kind_names[k], j, x);
				return {};
			}
			x = std::log(x);
		}
		v[j] = x;
	}
	return v;
}

// The buffer's moments against the distribution's (tolerances of many
// standard errors for n = 2^16, 2^12 in the loop: a right generator never
// fails them, a wrong transform always does).
static bool moments_ok(int k, const std::vector<double> &v, double lambda, const char *gen, char *why, size_t len)
{
	double n = (double)v.size(), m = 0, var = 0, want_m, want_sd;
	bool all_same = true;

	for (double x : v) {
		m += x;
		all_same = all_same && x == v[0];
	}
	m /= n;
	for (double x : v)
		var += (x - m) * (x - m);
	var /= n - 1;
	switch (k) {
	case BITS: case UNIFORM: case UNIFORM_D: want_m = 0.5; want_sd = std::sqrt(1.0 / 12); break;
	case NORMAL: want_m = 2; want_sd = 3; break;
	case NORMAL_D: want_m = -1; want_sd = 0.5; break;
	case LOGNORMAL: case LOGNORMAL_D: want_m = 0; want_sd = 0.5; break;
	default: want_m = lambda; want_sd = std::sqrt(lambda); break;
	}
	double se = want_sd / std::sqrt(n);
	if (all_same || std::fabs(m - want_m) > 8 * se || std::fabs(std::sqrt(var) / want_sd - 1) > 8 * std::sqrt(2 / n) + 0.01) {
		snprintf(why, len, "%s %s: mean %g (want %g), stddev %g (want %g)%s", gen, kind_names[k], m, want_m,
			 std::sqrt(var), want_sd, all_same ? ", all equal" : "");
		return false;
	}
	return true;
}

// Every generator, every kind, n elements each; hashes appended to *hashes.
static bool run_all(struct state *st, size_t n, std::vector<uint64_t> *hashes, char *why, size_t len)
{
	std::vector<unsigned char> h(n * 8);

	for (int i = 0; i < NGENS; i++)
		for (int k = 0; k < KINDS; k++) {
			double lambda = k == POISSON && defs[i].big_lambda && st->requests % 2 == 0 ? defs[i].big_lambda : 4;
			curandStatus_t s = draw(st, i, k, n, lambda);

			if (s != CURAND_STATUS_SUCCESS) {
				snprintf(why, len, "%s %s: curandStatus_t %d", defs[i].name, kind_names[k], (int)s);
				return false;
			}
			// a generator on the non-blocking stream: cudaMemcpy (the
			// legacy stream) does not wait for its kernel
			if (defs[i].on_stream)
				CK(cudaStreamSynchronize(st->s));
			CK(cudaMemcpy(h.data(), st->buf[i][k], n * kind_size[k], cudaMemcpyDeviceToHost));
			hashes->push_back(fnv(h.data(), n * kind_size[k]));
			std::vector<double> v = values(k, h, n, why, len);
			if (v.empty() || !moments_ok(k, v, lambda, defs[i].name, why, len))
				return false;
		}
	return true;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char why[256] = "";
	std::vector<uint64_t> hashes;
	bool ok;

	(void)req;
	st->requests++;
	ok = run_all(st, N, &hashes, why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "curand_serve: %s\n", why);
		st->failures++;
	}
	std::string out = "{\"ok\": " + std::string(ok ? "true" : "false") + ", \"requests\": " +
			  std::to_string(st->requests) + ", \"why\": \"" + why + "\", \"hashes\": [";
	for (size_t i = 0; i < hashes.size(); i++) {
		char x[24];

		snprintf(x, sizeof(x), "%s\"%016llx\"", i ? ", " : "", (unsigned long long)hashes[i]);
		out += x;
	}
	out += "]}";
	resp->body = strdup(out.c_str());
	resp->len = out.size();
	return 0;
}

static curandGenerator_t make(const gen_def &d, cudaStream_t s)
{
	curandGenerator_t g;

	RK(curandCreateGenerator(&g, d.type));
	if (d.seed)
		RK(curandSetPseudoRandomGeneratorSeed(g, d.seed));
	if (d.offset)
		RK(curandSetGeneratorOffset(g, d.offset));
	if (d.ordering)
		RK(curandSetGeneratorOrdering(g, (curandOrdering_t)d.ordering));
	if (d.on_stream)
		RK(curandSetStream(g, s));
	return g;
}

// The 32-bit words of a fresh generator of type t and seed 77 at offset off
// (0: none set), made in calls of the sizes in parts; *st the first failed
// status (the words then empty).
static std::vector<unsigned int> words(curandRngType_t t, unsigned long long off, std::vector<size_t> parts,
				       unsigned int *d, curandStatus_t *st)
{
	curandGenerator_t g;
	size_t total = 0;

	*st = curandCreateGenerator(&g, t);
	if (*st)
		return {};
	*st = curandSetPseudoRandomGeneratorSeed(g, 77);
	if (!*st && off)
		*st = curandSetGeneratorOffset(g, off);
	for (size_t p : parts) {
		if (!*st)
			*st = curandGenerate(g, d + total, p);
		total += p;
	}
	std::vector<unsigned int> h(*st ? 0 : total);
	CK(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
	RK(curandDestroyGenerator(g));
	return h;
}

// What cuRAND documents, checked at init (natively too): false and why.
static bool documented(char *why, size_t len)
{
	unsigned int *d;
	float *f;
	curandGenerator_t g;
	const size_t K = 4096, M = 8192;

	CK(cudaMalloc(&d, 4 * (K + M) * sizeof(unsigned int)));
	f = (float *)d;
	// same type and seed: the same bytes; another seed: others
	curandStatus_t s1, s2;
	std::vector<unsigned int> a = words(CURAND_RNG_PSEUDO_PHILOX4_32_10, 0, { M }, d, &s1);
	std::vector<unsigned int> b = words(CURAND_RNG_PSEUDO_PHILOX4_32_10, 0, { M }, d, &s2);
	if (s1 || s2 || a != b) {
		snprintf(why, len, "two Philox generators of seed 77 differ");
		return false;
	}
	RK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
	RK(curandSetPseudoRandomGeneratorSeed(g, 78));
	RK(curandGenerate(g, d, M));
	std::vector<unsigned int> c(M), c2(M);
	CK(cudaMemcpy(c.data(), d, M * 4, cudaMemcpyDeviceToHost));
	if (c == a) {
		snprintf(why, len, "seeds 77 and 78 give the same numbers");
		return false;
	}
	// the offset is absolute: set again, the same numbers again
	RK(curandSetGeneratorOffset(g, 100));
	RK(curandGenerate(g, d, M));
	CK(cudaMemcpy(c.data(), d, M * 4, cudaMemcpyDeviceToHost));
	RK(curandGenerate(g, d, M));
	RK(curandSetGeneratorOffset(g, 100));
	RK(curandGenerate(g, d, M));
	CK(cudaMemcpy(c2.data(), d, M * 4, cudaMemcpyDeviceToHost));
	if (c != c2) {
		snprintf(why, len, "offset 100 set twice gives other numbers");
		return false;
	}
	// An odd n of a Box-Muller call: documented as LENGTH_NOT_MULTIPLE, but
	// CUDA 13's Philox takes it (H200, 2026-12-04): said on stderr, for the
	// test to hold forwarded against native (and the sim against the docs)
	fprintf(stderr, "odd-n philox normal=%d log_normal_double=%d\n", (int)curandGenerateNormal(g, f, 7, 0, 1),
		(int)curandGenerateLogNormalDouble(g, (double *)d, 3, 0, 1));
	// documented refusals
	struct { const char *what; curandStatus_t got, want; } errs[] = {
		{ "Poisson of lambda 0", curandGeneratePoisson(g, d, 16, 0.0), CURAND_STATUS_OUT_OF_RANGE },
		{ "curandGenerateLongLong on a pseudorandom generator",
		  curandGenerateLongLong(g, (unsigned long long *)d, 16), CURAND_STATUS_TYPE_ERROR },
		{ "curandSetQuasiRandomGeneratorDimensions on a pseudorandom generator",
		  curandSetQuasiRandomGeneratorDimensions(g, 2), CURAND_STATUS_TYPE_ERROR },
	};
	for (auto &e : errs)
		if (e.got != e.want) {
			snprintf(why, len, "%s: curandStatus_t %d, want %d", e.what, (int)e.got, (int)e.want);
			return false;
		}
	RK(curandDestroyGenerator(g));
	// information only: does an offset of K, or a call of K, move the
	// position by exactly K words (the words after equal one call's)?
	std::string line = "offset-contiguous";
	for (const gen_def &def : defs) {
		curandStatus_t sw, so, ss;
		std::vector<unsigned int> whole = words(def.type, 0, { K + M }, d, &sw);
		std::vector<unsigned int> off = words(def.type, K, { M }, d, &so);
		std::vector<unsigned int> split = words(def.type, 0, { K, M }, d, &ss);
		auto said = [&](curandStatus_t s, const std::vector<unsigned int> &v, size_t from) {
			if (sw || s)
				return "status " + std::to_string(sw ? (int)sw : (int)s);
			return std::string(std::equal(v.begin() + from, v.end(), whole.begin() + K) ? "yes" : "no");
		};

		line += std::string(" ") + def.name + "=offset:" + said(so, off, 0) + ",call:" + said(ss, split, K);
	}
	fprintf(stderr, "%s\n", line.c_str());
	CK(cudaFree(d));
	return true;
}

static void make_generators(struct state *st)
{
	CK(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking));
	for (int i = 0; i < NGENS; i++) {
		st->g[i] = make(defs[i], st->s);
		for (int k = 0; k < KINDS; k++)
			CK(cudaMalloc(&st->buf[i][k], (size_t)N * kind_size[k]));
	}
	// two generators already used before phos_fn_serve: a snapshot must
	// bring them back where they were
	RK(draw(st, 0, BITS, 1000, 0));
	RK(draw(st, 0, BITS, 1000, 0));
	RK(draw(st, 1, NORMAL, 4096, 0));
	CK(cudaDeviceSynchronize());
}

// The generators, and the buffers too when free_buffers (not once
// phos_fn_serve returned: the executor may be gone then).
static void destroy_generators(struct state *st, bool free_buffers)
{
	for (int i = 0; i < NGENS; i++) {
		RK(curandDestroyGenerator(st->g[i]));
		for (int k = 0; k < KINDS && free_buffers; k++)
			CK(cudaFree(st->buf[i][k]));
	}
}

// What phos-fn does not forward answers CURAND_STATUS_TYPE_ERROR: a host
// generator, a quasirandom one, a stub (twice: its log line comes once).
static int refused(void)
{
	curandGenerator_t g;
	unsigned int *dv = nullptr;
	curandStatus_t host = curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
	curandStatus_t sobol = curandCreateGenerator(&g, CURAND_RNG_QUASI_SOBOL32);
	curandStatus_t a = curandGetScrambleConstants32(&dv), b = curandGetScrambleConstants32(&dv);

	printf("{\"host\": %d, \"sobol\": %d, \"stub\": %d, \"again\": %d}\n", (int)host, (int)sobol, (int)a, (int)b);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	Dl_info info;
	int version = 0;
	char why[256] = "";

	if (dladdr((void *)curandCreateGenerator, &info) && info.dli_fname)
		fprintf(stderr, "curand: %s\n", info.dli_fname);
	if (argc > 1 && !strcmp(argv[1], "refused"))
		return refused();
	RK(curandGetVersion(&version));
	if (version < 10000) {
		fprintf(stderr, "cuRAND 10 needed, got %d\n", version);
		return 1;
	}
	if (!documented(why, sizeof(why))) {
		fprintf(stderr, "curand_serve: %s\n", why);
		return 1;
	}
	st.pointers = argc > 1 && !strcmp(argv[1], "pointers");
	make_generators(&st);
	if (argc > 2 && !strcmp(argv[1], "loop")) {
		int n = atoi(argv[2]);

		for (int i = 1; i <= n; i++) {
			std::vector<uint64_t> hashes;

			// Philox draws Poisson of lambda 3000 and 4 in turn (its buffer
			// is read after its stream is synchronized: read before, a step
			// could see the previous step's draws, which looked like a
			// lambda change gone wrong)
			st.requests = i;
			if (!run_all(&st, LOOP_N, &hashes, why, sizeof(why))) {
				fprintf(stderr, "curand_serve: step %d: %s\n", i, why);
				st.failures++;
			}
			st.running = fnv(hashes.data(), hashes.size() * sizeof(hashes[0]), st.running);
			if (i % 20 == 0 || i == n) {
				printf("{\"step\": %d, \"failures\": %d, \"hash\": \"%016llx\", \"done\": %s}\n", i,
				       st.failures, (unsigned long long)st.running, i == n ? "true" : "false");
				fflush(stdout);
			}
		}
		destroy_generators(&st, true);
		return st.failures ? 1 : 0;
	}
	int r = phos_fn_serve(handle, &st);

	destroy_generators(&st, false);
	return r ? r : st.failures ? 1 : 0;   // (a wrong answer fails the run too)
}
