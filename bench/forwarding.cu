// Forwarding micro-benchmarks, run natively and under phos-fn in one session:
//   sync_rtt_us      mean time of a synchronous call that does no device work
//                    (cudaStreamQuery on an idle stream)
//   launches_per_s   empty-kernel launches posted and completed per second
// Prints one JSON line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty_kernel(int x)
{
	(void)x;
}

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess && e_ != cudaErrorNotReady) {                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static double now_s()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
	long sync_iters = argc > 1 ? atol(argv[1]) : 100000;
	long launches = argc > 2 ? atol(argv[2]) : 1000000;
	cudaStream_t s;

	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	empty_kernel<<<1, 1, 0, s>>>(0);
	CK(cudaStreamSynchronize(s));
	for (long i = 0; i < 1000; i++)
		CK(cudaStreamQuery(s));
	double t0 = now_s();
	for (long i = 0; i < sync_iters; i++)
		CK(cudaStreamQuery(s));
	double rtt = (now_s() - t0) / (double)sync_iters * 1e6;

	for (long i = 0; i < 10000; i++)
		empty_kernel<<<1, 32, 0, s>>>((int)i);
	CK(cudaStreamSynchronize(s));
	t0 = now_s();
	for (long i = 0; i < launches; i++)
		empty_kernel<<<1, 32, 0, s>>>((int)i);
	double posted = now_s() - t0;
	CK(cudaStreamSynchronize(s));
	double total = now_s() - t0;
	CK(cudaGetLastError());
	printf("{\"sync_rtt_us\":%.3f,\"launches_per_s\":%.0f,\"post_per_s\":%.0f}\n", rtt,
	       (double)launches / total, (double)launches / posted);
	return 0;
}
