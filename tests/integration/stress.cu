// Posts 1e6 asynchronous calls across several streams (kernel launches, with
// cross-stream event waits and async memsets mixed in) and checks the result.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define NSTREAMS 4
#define CALLS 1000000

__global__ void bump(int *counters, int slot, int by)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		counters[slot] += by;
}

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : CALLS;
	cudaStream_t s[NSTREAMS];
	cudaEvent_t ev[NSTREAMS];
	int *counters, host[NSTREAMS * 2];
	long expect[NSTREAMS * 2] = { 0 }, posted = 0;

	CK(cudaMalloc(&counters, sizeof(host)));
	CK(cudaMemset(counters, 0, sizeof(host)));
	for (int i = 0; i < NSTREAMS; i++) {
		CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
		CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	}
	for (long i = 0; posted < calls; i++) {
		int k = (int)(i % NSTREAMS);

		/* Each stream owns two counters, so that streams never race on a word. */
		bump<<<1, 1, 0, s[k]>>>(counters, 2 * k, 1);
		expect[2 * k] += 1;
		posted++;
		if (i % 1001 == 1000) {
			/* Stream k+1 waits for stream k here; a memset restarts counter 2k+1. */
			CK(cudaEventRecord(ev[k], s[k]));
			CK(cudaStreamWaitEvent(s[(k + 1) % NSTREAMS], ev[k], 0));
			CK(cudaMemsetAsync(counters + 2 * k + 1, 0, sizeof(int), s[k]));
			expect[2 * k + 1] = 0;
			posted += 3;
		} else {
			bump<<<1, 1, 0, s[k]>>>(counters, 2 * k + 1, 2);
			expect[2 * k + 1] += 2;
			posted++;
		}
	}
	CK(cudaGetLastError());
	for (int i = 0; i < NSTREAMS; i++)
		CK(cudaStreamSynchronize(s[i]));
	CK(cudaMemcpy(host, counters, sizeof(host), cudaMemcpyDeviceToHost));
	for (int i = 0; i < NSTREAMS * 2; i++) {
		if (host[i] != expect[i]) {
			fprintf(stderr, "counter %d: %d, expected %ld\n", i, host[i], expect[i]);
			return 1;
		}
	}
	for (int i = 0; i < NSTREAMS; i++) {
		CK(cudaEventDestroy(ev[i]));
		CK(cudaStreamDestroy(s[i]));
	}
	CK(cudaFree(counters));
	printf("{\"calls\":%ld,\"streams\":%d,\"ok\":true}\n", posted, NSTREAMS);
	return 0;
}
