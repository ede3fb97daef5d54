// Every forwarded NCCL call, from one rank of several processes (test_nccl.py).
//
//   nccl_calls MODE RANK NRANKS IDFILE
//
// Rank 0 writes the unique id to IDFILE (atomically), the others wait for it.
// Each check prints {"rank":R,"check":NAME,"ok":BOOL,...}; the last line is
// {"rank":R,"done":true,"failed":N}. No kernels: buffers are filled and read
// with copies, so it runs on the sim device without twins.
//
// MODE
//   calls    every collective and query (sums, max, min, prod, avg, broadcast,
//            bcast, reduce, all-gather, reduce-scatter, send/recv ring, groups,
//            split, finalize/destroy, mem alloc, versions, error strings)
//   bad      bad arguments: ncclInvalidArgument, and refused APIs: ncclInvalidUsage
//   abort    rank 0 aborts its communicator while the others wait in an
//            all-reduce: they get an error, not a hang
//   die      the last rank exits (SIGKILL) before an all-reduce: the others get
//            an error, not a hang
//   serve    a communicator made before phos_fn_serve by rank 0 (the others
//            destroy theirs and exit); each request all-reduces and answers the
//            result and the sum (used after a restore)
//   serveall the same, every rank serving (snapshots of all ranks)
//   threads  the calls of "calls" from NRANKS threads of this one process, a
//            GPU each (rank r on device r; NCCL's "one device per thread"),
//            ncclCommInitRankConfig outside any group; no split (RANK and
//            IDFILE unused)
//   threadsplit  the same threads, each splitting its communicator (natively
//            a communicator of the even and of the odd ranks); prints
//            {"rank":R,"check":"split_result","result":N,...}: what the
//            split returned (phos-fn refuses it: test_multi_gpu.py)
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nccl.h>
#include <signal.h>
#include <cuda_runtime.h>
#include <phos/fn.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "nccl_id.h"

static thread_local int rank_, dev_;   // dev_: the rank's device (threads), else 0
static int nranks_;
static bool threads_;
static std::atomic<int> failed_{0};

static bool check(const char *name, bool ok, const char *fmt = "", ...)
{
	char extra[512] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	printf("{\"rank\":%d,\"check\":\"%s\",\"ok\":%s%s%s}\n", rank_, name, ok ? "true" : "false",
	       extra[0] ? "," : "", extra);
	fflush(stdout);
	if (!ok)
		failed_++;
	return ok;
}

#define NC(x) check(#x, (x) == ncclSuccess)

template <typename T> static T *dev_of(const std::vector<T> &h)
{
	T *d = nullptr;
	if (cudaMalloc(&d, h.size() * sizeof(T) + 1) != cudaSuccess)
		exit(3);
	cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
	return d;
}

template <typename T> static std::vector<T> host_of(const T *d, size_t n)
{
	std::vector<T> h(n);
	cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
	return h;
}

// The value rank r holds at element i of its send buffer.
static float val(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 997)); }

static void run_calls(ncclComm_t comm, cudaStream_t st)
{
	const int R = nranks_, me = rank_;
	const size_t N = 100000;   // > one sim step: several chunks
	std::vector<float> mine(N);
	for (size_t i = 0; i < N; i++)
		mine[i] = val(me, i);
	float *send = dev_of(mine), *recv = nullptr;
	cudaMalloc(&recv, N * R * sizeof(float));

	int n = 0, r = -1, d = -1;
	bool ok_n = ncclCommCount(comm, &n) == ncclSuccess, ok_r = ncclCommUserRank(comm, &r) == ncclSuccess;
	bool ok_d = ncclCommCuDevice(comm, &d) == ncclSuccess;
	check("count", ok_n && n == R, "\"got\":%d", n);
	check("user_rank", ok_r && r == me, "\"got\":%d", r);
	check("cu_device", ok_d && d == dev_, "\"got\":%d", d);
	ncclResult_t ae = ncclInternalError;
	check("async_error", ncclCommGetAsyncError(comm, &ae) == ncclSuccess && ae == ncclSuccess);

	// sum, in place and out of place
	NC(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, st));
	cudaStreamSynchronize(st);
	{
		auto h = host_of(recv, N);
		bool ok = true;
		for (size_t i = 0; i < N && ok; i++) {
			float want = 0;
			for (int k = 0; k < R; k++)
				want += val(k, i);
			ok = h[i] == want;
		}
		check("allreduce_sum", ok);
	}
	// max / min / prod / avg on int32 and double
	{
		std::vector<int32_t> a(1000);
		for (int i = 0; i < 1000; i++)
			a[i] = (me + 1) * (i % 5 == 0 ? -1 : 1) * (i + 1);
		int32_t *da = dev_of(a), *db;
		cudaMalloc(&db, 1000 * sizeof(int32_t));
		bool ok = true;
		const ncclRedOp_t ops[] = { ncclMax, ncclMin, ncclProd, ncclAvg };
		const char *names[] = { "allreduce_max_i32", "allreduce_min_i32", "allreduce_prod_i32", "allreduce_avg_i32" };
		for (int o = 0; o < 4; o++) {
			NC(ncclAllReduce(da, db, 1000, ncclInt32, ops[o], comm, st));
			auto h = host_of(db, 1000);
			ok = true;
			for (int i = 0; i < 1000 && ok; i++) {
				int64_t acc = o == 2 ? 1 : (o == 3 ? 0 : a[i] / (me + 1) * 1);
				for (int k = 0; k < R; k++) {
					int64_t v = (int64_t)(k + 1) * (i % 5 == 0 ? -1 : 1) * (i + 1);
					if (o == 0) acc = k == 0 ? v : (v > acc ? v : acc);
					if (o == 1) acc = k == 0 ? v : (v < acc ? v : acc);
					if (o == 2) acc = (int32_t)(acc * v);
					if (o == 3) acc += v;
				}
				if (o == 3) acc = (int32_t)acc / R;
				ok = h[i] == (int32_t)acc;
			}
			check(names[o], ok);
		}
		// in place, double
		std::vector<double> x(5000, 0.5 * (me + 1));
		double *dx = dev_of(x);
		NC(ncclAllReduce(dx, dx, 5000, ncclDouble, ncclSum, comm, st));
		auto hx = host_of(dx, 5000);
		check("allreduce_inplace_f64", hx[0] == 0.25 * R * (R + 1) && hx[4999] == hx[0], "\"got\":%g", hx[0]);
		cudaFree(da); cudaFree(db); cudaFree(dx);
	}
	// half precision sum (1.0 + 2.0 + 3.0 ... exact in fp16)
	{
		std::vector<uint16_t> hv(300, 0x3c00);   // 1.0
		uint16_t *dh = dev_of(hv);
		NC(ncclAllReduce(dh, dh, 300, ncclHalf, ncclSum, comm, st));
		auto h = host_of(dh, 300);
		const uint16_t want[] = { 0, 0x3c00, 0x4000, 0x4200, 0x4400 };
		check("allreduce_sum_f16", h[0] == want[R] && h[299] == want[R], "\"got\":%u", h[0]);
		cudaFree(dh);
	}
	// broadcast from the last rank, bcast in place from rank 0
	{
		int root = R - 1;
		NC(ncclBroadcast(send, recv, N, ncclFloat, root, comm, st));
		auto h = host_of(recv, N);
		check("broadcast", h[0] == val(root, 0) && h[N - 1] == val(root, N - 1));
		float *b;
		cudaMalloc(&b, 64 * sizeof(float));
		std::vector<float> hb(64, (float)(me + 7));
		cudaMemcpy(b, hb.data(), 64 * sizeof(float), cudaMemcpyHostToDevice);
		NC(ncclBcast(b, 64, ncclFloat, 0, comm, st));
		auto g = host_of(b, 64);
		check("bcast", g[0] == 7.0f && g[63] == 7.0f);
		cudaFree(b);
	}
	// reduce to rank 0: others' recv untouched
	{
		cudaMemset(recv, 0, N * sizeof(float));
		NC(ncclReduce(send, recv, N, ncclFloat, ncclMax, 0, comm, st));
		auto h = host_of(recv, N);
		check("reduce_max", me == 0 ? h[5] == val(R - 1, 5) : h[5] == 0.0f, "\"got\":%g", h[5]);
	}
	// all-gather
	{
		const size_t C = 70000;
		NC(ncclAllGather(send, recv, C, ncclFloat, comm, st));
		auto h = host_of(recv, C * R);
		bool ok = true;
		for (int k = 0; k < R && ok; k++)
			ok = h[k * C] == val(k, 0) && h[k * C + C - 1] == val(k, C - 1);
		check("allgather", ok);
	}
	// reduce-scatter: send has R blocks of C
	{
		const size_t C = 30000;
		std::vector<float> s(C * R);
		for (size_t i = 0; i < C * R; i++)
			s[i] = val(me, i);
		float *ds = dev_of(s);
		NC(ncclReduceScatter(ds, recv, C, ncclFloat, ncclSum, comm, st));
		auto h = host_of(recv, C);
		bool ok = true;
		for (size_t i = 0; i < C && ok; i += 997) {
			float want = 0;
			for (int k = 0; k < R; k++)
				want += val(k, me * C + i);
			ok = h[i] == want;
		}
		check("reduce_scatter", ok);
		cudaFree(ds);
	}
	// send/recv ring in a group (every rank sends to next, receives from previous),
	// bigger than one pipe
	{
		const size_t C = 50000;
		int next = (me + 1) % R, prev = (me + R - 1) % R;
		NC(ncclGroupStart());
		NC(ncclSend(send, C, ncclFloat, next, comm, st));
		NC(ncclRecv(recv, C, ncclFloat, prev, comm, st));
		NC(ncclGroupEnd());
		auto h = host_of(recv, C);
		check("sendrecv_ring", h[0] == val(prev, 0) && h[C - 1] == val(prev, C - 1));
	}
	// a group of two collectives, nested groups
	{
		float *a, *b;
		cudaMalloc(&a, 16 * sizeof(float));
		cudaMalloc(&b, 16 * sizeof(float));
		std::vector<float> one(16, 1.0f);
		cudaMemcpy(a, one.data(), sizeof(float) * 16, cudaMemcpyHostToDevice);
		cudaMemcpy(b, one.data(), sizeof(float) * 16, cudaMemcpyHostToDevice);
		NC(ncclGroupStart());
		NC(ncclGroupStart());
		NC(ncclAllReduce(a, a, 16, ncclFloat, ncclSum, comm, st));
		NC(ncclGroupEnd());
		NC(ncclAllReduce(b, b, 16, ncclFloat, ncclSum, comm, st));
		NC(ncclGroupEnd());
		auto ha = host_of(a, 16), hb = host_of(b, 16);
		check("group_two_allreduce", ha[3] == (float)R && hb[3] == (float)R);
		cudaFree(a); cudaFree(b);
	}
	// split: even and odd ranks (not for ranks that are threads: phos-fn
	// refuses that split, test_multi_gpu.py)
	if (!threads_) {
		ncclComm_t sub = nullptr;
		NC(ncclCommSplit(comm, me % 2, -me, &sub, nullptr));
		int sn = 0, sr = -1;
		int want_n = (R + 1 - me % 2) / 2;
		bool ok_sn = sub && ncclCommCount(sub, &sn) == ncclSuccess;
		check("split_count", ok_sn && sn == want_n, "\"got\":%d", sn);
		// keys are -rank: ranks in reverse order
		ncclCommUserRank(sub, &sr);
		check("split_rank", sr == want_n - 1 - me / 2, "\"got\":%d", sr);
		float *x;
		cudaMalloc(&x, sizeof(float));
		float one = 1.0f;
		cudaMemcpy(x, &one, sizeof(float), cudaMemcpyHostToDevice);
		NC(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, sub, st));
		float got = 0;
		cudaMemcpy(&got, x, sizeof(float), cudaMemcpyDeviceToHost);
		check("split_allreduce", got == (float)want_n, "\"got\":%g", got);
		NC(ncclCommFinalize(sub));
		NC(ncclCommDestroy(sub));
		ncclComm_t none = (ncclComm_t)0x1;
		NC(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr));
		check("split_nocolor", none == nullptr);
		cudaFree(x);
	}
	// ncclMemAlloc / ncclMemFree: arena memory usable by collectives
	{
		void *m = nullptr;
		NC(ncclMemAlloc(&m, 1 << 20));
		cudaPointerAttributes pa;
		check("memalloc_device", m && cudaPointerGetAttributes(&pa, m) == cudaSuccess && pa.type == cudaMemoryTypeDevice);
		NC(ncclAllReduce(send, m, 1000, ncclFloat, ncclSum, comm, st));
		NC(ncclMemFree(m));
	}
	int v = 0;
	bool ok_v = ncclGetVersion(&v) == ncclSuccess;
	check("version", ok_v && v >= 22000, "\"got\":%d", v);
	check("error_string", strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument") != nullptr);
	cudaFree(send);
	cudaFree(recv);
}

static void run_bad(ncclComm_t comm, cudaStream_t st)
{
	float *buf;
	cudaMalloc(&buf, 4096);
	float host[16];
	check("bad_null_comm", ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, nullptr, st) == ncclInvalidArgument);
	check("bad_type", ncclAllReduce(buf, buf, 16, (ncclDataType_t)99, ncclSum, comm, st) == ncclInvalidArgument);
	check("bad_op", ncclAllReduce(buf, buf, 16, ncclFloat, (ncclRedOp_t)77, comm, st) == ncclInvalidArgument);
	check("bad_root", ncclBroadcast(buf, buf, 16, ncclFloat, nranks_, comm, st) == ncclInvalidArgument);
	check("bad_peer", ncclSend(buf, 16, ncclFloat, -1, comm, st) == ncclInvalidArgument);
	check("bad_null_buf", ncclAllReduce(nullptr, buf, 16, ncclFloat, ncclSum, comm, st) == ncclInvalidArgument);
	check("bad_overflow", ncclAllGather(buf, buf, SIZE_MAX / 2, ncclFloat, comm, st) == ncclInvalidArgument);
	check("bad_host_buf", ncclAllReduce(host, buf, 16, ncclFloat, ncclSum, comm, st) == ncclInvalidArgument);
	check("bad_too_big", ncclAllReduce(buf, buf, 100000, ncclFloat, ncclSum, comm, st) == ncclInvalidArgument);
	int cnt = 0;
	check("bad_stale_comm", ncclCommCount((ncclComm_t)0x1234, &cnt) == ncclInvalidArgument);
	ncclComm_t c2;
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	check("bad_rank", ncclCommInitRank(&c2, 2, id, 2) == ncclInvalidArgument);
	check("bad_nranks", ncclCommInitRank(&c2, 0, id, 0) == ncclInvalidArgument);
	check("bad_initall_2", ncclCommInitAll(&c2, 2, nullptr) == ncclInvalidArgument);
	check("bad_null_version", ncclGetVersion(nullptr) == ncclInvalidArgument);
	check("bad_group_end", ncclGroupEnd() == ncclInvalidUsage);
	check("refused_register", ncclCommRegister(comm, buf, 4096, (void **)&c2) == ncclInvalidUsage);
	check("last_error", strlen(ncclGetLastError(comm)) > 0, "\"msg\":\"%s\"", ncclGetLastError(comm));
	// the communicator still works after all that
	NC(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, st));
	// ncclCommInitAll of one device
	ncclComm_t all[1];
	int dev0 = 0;
	check("initall_1", ncclCommInitAll(all, 1, &dev0) == ncclSuccess);
	NC(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, all[0], st));
	NC(ncclCommDestroy(all[0]));
	cudaFree(buf);
}

// Wait in an all-reduce that cannot complete; report what it returned.
static void wait_fail(ncclComm_t comm, cudaStream_t st, const char *name)
{
	float *buf;
	cudaMalloc(&buf, 64);
	ncclResult_t r = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, st);
	ncclResult_t ae = ncclSuccess;
	ncclCommGetAsyncError(comm, &ae);
	check(name, r == ncclRemoteError || r == ncclSystemError, "\"result\":%d,\"async\":%d", (int)r, (int)ae);
	// after a failure the communicator stays failed
	check("still_failed", ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, st) != ncclSuccess);
	NC(ncclCommAbort(comm));
}

struct serve_state {
	ncclComm_t comm, child;   // child: a split of comm (every rank, keys reversed)
	float *buf;
	int calls;
};

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	serve_state *s = (serve_state *)arg;
	(void)req;
	float x[4] = { 1, 2, 3, (float)++s->calls };
	cudaMemcpy(s->buf, x, sizeof(x), cudaMemcpyHostToDevice);
	cudaMemset(s->buf + 4, 0, 8 * sizeof(float));
	ncclResult_t r = ncclAllReduce(s->buf, s->buf + 4, 4, ncclFloat, ncclSum, s->comm, 0);
	ncclResult_t r2 = ncclAllReduce(s->buf, s->buf + 8, 3, ncclFloat, ncclSum, s->child, 0);
	float y[8] = { 0 };
	cudaMemcpy(y, s->buf + 4, sizeof(y), cudaMemcpyDeviceToHost);
	int n = 0;
	ncclCommCount(s->comm, &n);
	if (asprintf(&resp->body, "{\"result\":%d,\"sum\":%g,\"calls\":%g,\"count\":%d,\"child_result\":%d,"
				  "\"child_sum\":%g}",
		     (int)r, y[0] + y[1] + y[2], y[3], n, (int)r2, y[4] + y[5] + y[6]) < 0)
		return 500;
	resp->len = strlen(resp->body);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s calls|bad|abort|die|serve|serveall|threads RANK NRANKS IDFILE\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	rank_ = atoi(argv[2]);
	nranks_ = atoi(argv[3]);
	ncclUniqueId id;
	if (!strcmp(mode, "threads") || !strcmp(mode, "threadsplit")) {
		const bool split = !strcmp(mode, "threadsplit");
		std::vector<std::thread> th;

		threads_ = true;
		rank_ = 0;
		if (nranks_ < 1 || nranks_ > 8 || ncclGetUniqueId(&id) != ncclSuccess)
			return 2;
		for (int k = 0; k < nranks_; k++)
			th.emplace_back([k, &id, split] {
				ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
				ncclComm_t c;
				cudaStream_t s;

				rank_ = dev_ = k;
				cfg.blocking = 1;
				if (cudaSetDevice(k) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
					check("device", false, "\"device\":%d", k);
					return;
				}
				if (!check("init", ncclCommInitRankConfig(&c, nranks_, id, k, &cfg) == ncclSuccess))
					return;
				if (split) {
					ncclComm_t sub = nullptr;
					ncclResult_t r = ncclCommSplit(c, k % 2, k, &sub, nullptr);

					printf("{\"rank\":%d,\"check\":\"split_result\",\"ok\":true,\"result\":%d}\n", k,
					       (int)r);
					fflush(stdout);
					if (r == ncclSuccess)
						ncclCommDestroy(sub);
				} else {
					run_calls(c, s);
					NC(ncclCommFinalize(c));
				}
				NC(ncclCommDestroy(c));
			});
		for (auto &t : th)
			t.join();
		printf("{\"rank\":0,\"done\":true,\"failed\":%d}\n", failed_.load());
		return failed_ ? 1 : 0;
	}
	if (nccl_id_exchange(argv[4], rank_, 30000, "nccl_calls", &id) < 0)
		exit(2);
	ncclComm_t comm;
	cudaStream_t st;
	cudaStreamCreate(&st);
	if (!strcmp(mode, "serve") || !strcmp(mode, "serveall")) {
		static serve_state s;
		if (ncclCommInitRank(&s.comm, nranks_, id, rank_) != ncclSuccess || cudaMalloc(&s.buf, 12 * sizeof(float)) ||
		    ncclCommSplit(s.comm, 0, -rank_, &s.child, nullptr) != ncclSuccess)
			return 1;
		if (rank_ != 0 && !strcmp(mode, "serve"))   // only rank 0 is snapshotted
			return ncclCommDestroy(s.child) == ncclSuccess && ncclCommDestroy(s.comm) == ncclSuccess ? 0 : 1;
		return phos_fn_serve(handle, &s);
	}
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 1;
	if (!check("init", ncclCommInitRankConfig(&comm, nranks_, id, rank_, &cfg) == ncclSuccess))
		return 1;
	if (!strcmp(mode, "calls")) {
		run_calls(comm, st);
		NC(ncclCommFinalize(comm));
		NC(ncclCommDestroy(comm));
	} else if (!strcmp(mode, "bad")) {
		run_bad(comm, st);
		NC(ncclCommDestroy(comm));
	} else if (!strcmp(mode, "abort")) {
		if (rank_ == 0) {
			usleep(300000);   // the others are waiting in their all-reduce by now
			NC(ncclCommAbort(comm));
			int cnt = 0;
			check("after_abort", ncclCommCount(comm, &cnt) == ncclInvalidArgument);
		} else {
			wait_fail(comm, st, "peer_aborted");
		}
	} else if (!strcmp(mode, "die")) {
		if (rank_ == nranks_ - 1) {
			usleep(200000);
			kill(getpid(), SIGKILL);
		}
		wait_fail(comm, st, "peer_died");
	}
	printf("{\"rank\":%d,\"done\":true,\"failed\":%d}\n", rank_, failed_.load());
	return failed_ ? 1 : 0;
}
