/*
 * nccl_bench: all-reduce bus bandwidth of one rank, one process per rank (as
 * nccl-tests' all_reduce_perf -g 1 under MPI): sum of float32, out of place,
 * sizes from --min to --max bytes doubling, each timed over a number of
 * back-to-back all-reduces on one stream.
 *
 *   nccl_bench RANK NRANKS IDFILE [--min BYTES] [--max BYTES] [--iters N]
 *
 * The time is the host's: from the first all-reduce posted to the stream's
 * synchronisation after the last one, so that under phos-fn it includes the
 * forwarding of every call (a device event would hide it). Rank r uses device
 * r modulo the devices it sees (natively GPU r; under phos-fn its executor's
 * GPU, PHOS_GPU). Each size prints one line:
 *
 *   {"rank":R,"nranks":N,"bytes":B,"iters":I,"us":T,"algbw_GBps":A,"busbw_GBps":W,"ok":BOOL}
 *
 * busbw = algbw x 2 (N - 1) / N (nccl-tests' definition for all-reduce); ok
 * says that the result's first and last elements are the expected sum. Exits 1
 * on any CUDA or NCCL error or a wrong sum.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl_id.h"

#define CK(x)                                                                                   \
	do {                                                                                    \
		cudaError_t e_ = (x);                                                           \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "nccl_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,  \
				cudaGetErrorString(e_));                                        \
			exit(1);                                                                \
		}                                                                               \
	} while (0)
#define NK(x)                                                                                   \
	do {                                                                                    \
		ncclResult_t n_ = (x);                                                          \
		if (n_ != ncclSuccess) {                                                        \
			fprintf(stderr, "nccl_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,  \
				ncclGetErrorString(n_));                                        \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

__global__ void fill(float *p, size_t n, float v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	if (end == s || *end || v < 4 || v > (8ull << 30)) {
		fprintf(stderr, "nccl_bench: bad size '%s' (4 bytes to 8 GiB)\n", s);
		exit(2);
	}
	return (size_t)v;
}

int main(int argc, char **argv)
{
	size_t min = 1 << 20, max = 1 << 30;
	int rank = -1, nranks = 0, iters_max = 100, pos = 0, ndev = 0;
	const char *idfile = NULL;
	ncclUniqueId id;
	ncclComm_t comm;
	cudaStream_t stream;
	float *send, *recv;
	bool all_ok = true;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--min") && i + 1 < argc)
			min = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "--max") && i + 1 < argc)
			max = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters_max = atoi(argv[++i]);
		else if (pos == 0 && ++pos)
			rank = atoi(argv[i]);
		else if (pos == 1 && ++pos)
			nranks = atoi(argv[i]);
		else if (pos == 2 && ++pos)
			idfile = argv[i];
		else
			pos = 99;
	}
	if (pos != 3 || nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks || min > max || iters_max < 1 ||
	    iters_max > 100000) {
		fprintf(stderr, "usage: nccl_bench RANK NRANKS IDFILE [--min BYTES] [--max BYTES] [--iters N]\n");
		return 2;
	}
	if (nccl_id_exchange(idfile, rank, 60000, "nccl_bench", &id) < 0)
		return 1;
	CK(cudaGetDeviceCount(&ndev));
	CK(cudaSetDevice(rank % ndev));
	CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	NK(ncclCommInitRank(&comm, nranks, id, rank));
	CK(cudaMalloc(&send, max));
	CK(cudaMalloc(&recv, max));
	fill<<<256, 256, 0, stream>>>(send, max / sizeof(float), (float)(rank + 1));
	CK(cudaGetLastError());
	CK(cudaStreamSynchronize(stream));

	for (size_t bytes = min; bytes <= max; bytes *= 2) {
		size_t count = bytes / sizeof(float);
		/* About 2 GiB moved per size, between 5 and --iters all-reduces. */
		int iters = (int)((2ull << 30) / bytes);
		float ends[2];
		double t0, t, algbw;
		bool ok;

		iters = iters < 5 ? 5 : iters > iters_max ? iters_max : iters;
		for (int i = 0; i < 3; i++)   /* warm-up: the first call of a size sets up its channels */
			NK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
		CK(cudaStreamSynchronize(stream));
		t0 = now_s();
		for (int i = 0; i < iters; i++)
			NK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
		CK(cudaStreamSynchronize(stream));
		t = (now_s() - t0) / iters;
		CK(cudaMemcpy(&ends[0], recv, sizeof(float), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&ends[1], recv + count - 1, sizeof(float), cudaMemcpyDeviceToHost));
		ok = ends[0] == nranks * (nranks + 1) / 2.0f && ends[1] == ends[0];
		all_ok = all_ok && ok;
		algbw = bytes / t / 1e9;
		printf("{\"rank\":%d,\"nranks\":%d,\"bytes\":%zu,\"iters\":%d,\"us\":%.2f,\"algbw_GBps\":%.3f,"
		       "\"busbw_GBps\":%.3f,\"ok\":%s}\n",
		       rank, nranks, bytes, iters, t * 1e6, algbw, algbw * 2.0 * (nranks - 1) / nranks,
		       ok ? "true" : "false");
		fflush(stdout);
		if (bytes > max / 2)
			break;
	}
	NK(ncclCommDestroy(comm));
	CK(cudaFree(send));
	CK(cudaFree(recv));
	return all_ok ? 0 : 1;
}
