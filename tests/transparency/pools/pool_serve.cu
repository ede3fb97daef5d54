// SPDX-License-Identifier: MIT
// A function whose state at phos_fn_serve holds stream-ordered allocations:
// one from the default pool, two from a created pool with a release threshold
// (and one freed block cached in it). Each request checks the live blocks'
// contents, frees and re-allocates one of them on its stream, runs a host
// callback (one ran during init, so the process is dumped with its callback
// thread), and answers with the blocks' addresses and the pool's settings,
// so that a restored process can be compared with the original.
#include <cinttypes>
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "common.h"

struct state {
	cudaStream_t s;
	cudaMemPool_t pool;
	int n;
	int *a, *b, *c;           // a: default pool; b, c: pool
	int *orphan;              // from a pool destroyed before phos_fn_serve; freed by the first request
	int gen;                  // c holds iota(base 3000 + gen)
	std::vector<int> host;
	int callbacks;
};

static void count_cb(void *arg)
{
	((state *)arg)->callbacks++;
}

static bool check(state *st, int *p, int n, int base, const char *what)
{
	CK(cudaMemcpyAsync(st->host.data(), p, n * sizeof(int), cudaMemcpyDeviceToHost, st->s));
	CK(cudaStreamSynchronize(st->s));
	return is_iota(st->host.data(), n, base, what);
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	bool ok = check(st, st->a, st->n, 1000, "a") && check(st, st->b, 2 * st->n, 2000, "b") &&
		  check(st, st->c, st->n, 3000 + st->gen, "c");
	uint64_t threshold = 0, used = 0;
	int *old = st->c;
	char *out;

	(void)req;
	const char *orphan = "none";
	if (st->orphan) {
		ok = ok && check(st, st->orphan, st->n / 2, 4000, "orphan");
		CK(cudaFreeAsync(st->orphan, st->s));
		st->orphan = nullptr;
		orphan = "freed";
	}
	// A block that came from the snapshot goes back to its pool, stream-ordered,
	// and the next allocation on that stream takes it again.
	CK(cudaFreeAsync(st->c, st->s));
	CK(cudaMallocFromPoolAsync((void **)&st->c, st->n * sizeof(int), st->pool, st->s));
	st->gen++;
	iota(st->c, st->n, 3000 + st->gen, st->s);
	CK(cudaLaunchHostFunc(st->s, count_cb, st));
	ok = ok && check(st, st->c, st->n, 3000 + st->gen, "c again");
	CK(cudaMemPoolGetAttribute(st->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	CK(cudaMemPoolGetAttribute(st->pool, cudaMemPoolAttrUsedMemCurrent, &used));
	if (asprintf(&out,
		     "{\"ok\":%s,\"a\":\"%p\",\"b\":\"%p\",\"c\":\"%p\",\"reused\":%s,\"threshold\":%" PRIu64
		     ",\"used\":%" PRIu64 ",\"callbacks\":%d,\"orphan\":\"%s\"}",
		     ok ? "true" : "false", (void *)st->a, (void *)st->b, (void *)st->c, st->c == old ? "true" : "false",
		     threshold, used, st->callbacks, orphan) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static state st;
	cudaMemPool_t def, gone;
	cudaMemPoolProps props;
	uint64_t threshold = 64u << 20;
	int *cached;

	st.n = 1 << 18;
	st.host.resize(2 * st.n);
	CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	CK(cudaMemPoolCreate(&st.pool, &props));
	CK(cudaMemPoolSetAttribute(st.pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	CK(cudaDeviceGetDefaultMemPool(&def, 0));
	CK(cudaMallocAsync((void **)&st.a, st.n * sizeof(int), st.s));
	CK(cudaMallocFromPoolAsync((void **)&st.b, 2 * st.n * sizeof(int), st.pool, st.s));
	CK(cudaMallocFromPoolAsync((void **)&cached, 4 * st.n * sizeof(int), st.pool, st.s));
	CK(cudaMallocFromPoolAsync((void **)&st.c, st.n * sizeof(int), st.pool, st.s));
	iota(st.a, st.n, 1000, st.s);
	iota(st.b, 2 * st.n, 2000, st.s);
	iota(st.c, st.n, 3000, st.s);
	CK(cudaMemPoolCreate(&gone, &props));
	CK(cudaMallocFromPoolAsync((void **)&st.orphan, st.n / 2 * sizeof(int), gone, st.s));
	iota(st.orphan, st.n / 2, 4000, st.s);
	CK(cudaStreamSynchronize(st.s));
	CK(cudaMemPoolDestroy(gone));      // its block stays allocated
	CK(cudaFreeAsync(cached, st.s));   // kept by the pool (under its threshold), not by the snapshot
	CK(cudaLaunchHostFunc(st.s, count_cb, &st));   // the callback thread exists at the snapshot
	CK(cudaStreamSynchronize(st.s));
	return phos_fn_serve(handle, &st);
}
