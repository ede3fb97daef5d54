// SPDX-License-Identifier: MIT
// Host callbacks (cudaLaunchHostFunc, cudaStreamAddCallback), as a CUDA
// program uses them: a callback runs after the work queued before it on its
// stream, work queued after it waits until it returned, callbacks of one
// stream run in order, on a thread that is not the caller's. Exits 0 when
// every check holds, 1 otherwise.
//
//   callbacks [strict] [apart] [loop N]
//
// strict (under phos-fn) also checks the errors of bad calls whose native
// behaviour is undefined or unspecified (a destroyed stream, reserved flags,
// a CUDA call made from inside a callback). apart: a callback that waits for
// the program's work on another stream (copied and synchronized while the
// callback blocks its own stream) does not hold that work (natively, and
// under phos-fn, where the device's callback thread asks for it). loop N: apart's
// case N times, after a first line, for checkpoints taken while such a
// callback waits (a checkpoint that stopped the program then would wait for
// the callback, and the callback for the program: it gives up after 5 s).
#include <atomic>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <unistd.h>
#include <vector>

#include "common.h"

struct stage {
	const int *seen;        // pinned: what the device copied out before the callback
	int *feed;              // pinned: what the callback writes for the copy after it
	int n;
	bool saw_ok;
	pthread_t thread;
};

static void stage_cb(void *arg)
{
	stage *st = (stage *)arg;

	st->thread = pthread_self();
	st->saw_ok = is_iota(st->seen, st->n, 40, "seen by the callback");
	usleep(20000);          // later work must still wait for us
	for (int i = 0; i < st->n; i++)
		st->feed[i] = 900 + i;
}

struct order_log {
	std::mutex lock;
	std::vector<int> per_stream[2];
};

struct order_item {
	order_log *log;
	int stream, index;
};

static void order_cb(void *arg)
{
	order_item *it = (order_item *)arg;
	std::lock_guard<std::mutex> g(it->log->lock);

	it->log->per_stream[it->stream].push_back(it->index);
}

struct legacy_seen {
	cudaStream_t stream;
	cudaError_t status;
	int calls;
};

static void CUDART_CB legacy_cb(cudaStream_t stream, cudaError_t status, void *arg)
{
	legacy_seen *s = (legacy_seen *)arg;

	s->stream = stream;
	s->status = status;
	s->calls++;
}

static std::atomic<int> never_runs;
static void never_cb(void *) { never_runs++; }

static cudaError_t from_inside;
static void calls_cuda_cb(void *arg)
{
	from_inside = cudaMemsetAsync(arg, 0, 4, 0);
}

static std::atomic<int> default_stream_calls;
static void default_cb(void *) { default_stream_calls++; }

static std::atomic<bool> released, release_seen;
static void waits_cb(void *)
{
	for (int i = 0; i < 5000 && !released; i++)   // up to 5 s
		usleep(1000);
	release_seen = released.load();
}

int main(int argc, char **argv)
{
	bool strict = false, apart = false;
	int loops = 0;

	for (int i = 1; i < argc; i++) {
		strict = strict || strcmp(argv[i], "strict") == 0;
		apart = apart || strcmp(argv[i], "apart") == 0;
		if (strcmp(argv[i], "loop") == 0 && i + 1 < argc)
			loops = atoi(argv[++i]);
	}
	const int n = 1 << 16;
	const size_t bytes = n * sizeof(int);
	cudaStream_t s, t;
	int *d, *seen, *feed, *back;

	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&d, bytes));
	CK(cudaMallocHost((void **)&seen, bytes));
	CK(cudaMallocHost((void **)&feed, bytes));
	CK(cudaMallocHost((void **)&back, bytes));
	memset(seen, 0, bytes);
	memset(feed, 0, bytes);
	memset(back, 0, bytes);

	// kernel → copy out → callback (checks the copy, fills feed) → copy feed in → copy back
	stage st = { seen, feed, n, false, pthread_self() };
	iota(d, n, 40, s);
	CK(cudaMemcpyAsync(seen, d, bytes, cudaMemcpyDeviceToHost, s));
	CK(cudaLaunchHostFunc(s, stage_cb, &st));
	CK(cudaMemcpyAsync(d, feed, bytes, cudaMemcpyHostToDevice, s));
	CK(cudaMemcpyAsync(back, d, bytes, cudaMemcpyDeviceToHost, s));
	CK(cudaStreamSynchronize(s));
	EXPECT(st.saw_ok, "the callback ran after the copy queued before it");
	EXPECT(is_iota(back, n, 900, "after the callback"), "work queued after the callback saw its writes");
	EXPECT(!pthread_equal(st.thread, pthread_self()), "the callback ran on another thread");

	// Callbacks of one stream run in their order; all of them run.
	order_log log;
	std::vector<order_item> items(64);
	for (int i = 0; i < 64; i++) {
		items[i] = { &log, i % 2, i / 2 };
		CK(cudaLaunchHostFunc(i % 2 ? t : s, order_cb, &items[i]));
	}
	CK(cudaDeviceSynchronize());
	for (int k = 0; k < 2; k++) {
		bool ordered = log.per_stream[k].size() == 32;

		for (int i = 0; ordered && i < 32; i++)
			ordered = log.per_stream[k][i] == i;
		EXPECT(ordered, "stream %d: %zu callbacks, in order", k, log.per_stream[k].size());
	}

	// cudaStreamAddCallback: told its stream and the stream's status.
	legacy_seen ls = { nullptr, cudaErrorUnknown, 0 };
	CK(cudaStreamAddCallback(t, legacy_cb, &ls, 0));
	CK(cudaStreamSynchronize(t));
	EXPECT(ls.calls == 1 && ls.stream == t && ls.status == cudaSuccess,
	       "legacy callback: %d call(s), stream %s, status %d", ls.calls, ls.stream == t ? "right" : "wrong",
	       (int)ls.status);

	// The default stream.
	CK(cudaLaunchHostFunc(0, default_cb, nullptr));
	CK(cudaDeviceSynchronize());
	EXPECT(default_stream_calls == 1, "a callback on the default stream ran (%d)", default_stream_calls.load());

	if (loops) {
		printf("{\"loop\": %d}\n", loops);
		fflush(stdout);
	}
	for (int round = 0; round < (loops ? loops : apart ? 1 : 0); round++) {
		// s: a callback that waits for the program; t: the program's work meanwhile
		released = false;
		release_seen = false;
		iota(d, n, 7, s);
		CK(cudaLaunchHostFunc(s, waits_cb, nullptr));
		memset(feed, 0, bytes);
		if (round == 0)   // (the callback holds its stream: not done, and no wait to say so)
			EXPECT(cudaStreamQuery(s) == cudaErrorNotReady, "a stream whose callback waits is not ready");
		if (loops)
			usleep(2000);   // the callback waits; the program's next call comes later
		CK(cudaMemcpyAsync(feed, d + 0, bytes, cudaMemcpyDeviceToHost, t));   // (d: written before the callback)
		CK(cudaStreamSynchronize(t));
		released = true;
		CK(cudaStreamSynchronize(s));
		EXPECT(release_seen, "a callback waiting for another stream's work held that work (round %d)", round);
	}

	if (strict) {
		cudaStream_t dead;

		CK(cudaStreamCreate(&dead));
		CK(cudaStreamDestroy(dead));
		EXPECT(cudaLaunchHostFunc(dead, never_cb, nullptr) == cudaErrorInvalidResourceHandle,
		       "cudaLaunchHostFunc on a destroyed stream");
		EXPECT(cudaStreamAddCallback(dead, legacy_cb, &ls, 0) == cudaErrorInvalidResourceHandle,
		       "cudaStreamAddCallback on a destroyed stream");
		EXPECT(cudaStreamAddCallback(s, legacy_cb, &ls, 1) == cudaErrorInvalidValue,
		       "cudaStreamAddCallback with reserved flags");
		EXPECT(cudaLaunchHostFunc(s, nullptr, nullptr) == cudaErrorInvalidValue, "a NULL callback");
		cudaGetLastError();
		CK(cudaLaunchHostFunc(s, calls_cuda_cb, d));
		CK(cudaStreamSynchronize(s));
		EXPECT(from_inside == cudaErrorNotPermitted, "a CUDA call inside a callback: %d", (int)from_inside);
		CK(cudaDeviceSynchronize());
		EXPECT(never_runs == 0 && ls.calls == 1, "refused callbacks never ran");
	}

	CK(cudaFreeHost(seen));
	CK(cudaFreeHost(feed));
	CK(cudaFreeHost(back));
	CK(cudaFree(d));
	CK(cudaStreamDestroy(s));
	CK(cudaStreamDestroy(t));
	if (failures) {
		fprintf(stderr, "callbacks: %d check(s) failed\n", failures);
		return 1;
	}
	printf("callbacks: ok\n");
	return 0;
}
