// CUDA graph launches as a program sees them (issue 12): wall-clock time per
// launch of
//   chain-K   a graph of K tiny kernels one after the other, captured from a
//             stream (the shape of an inference step captured by PyTorch)
//   while-K   a conditional while node whose body runs one tiny kernel and
//             a step kernel that sets the condition, K rounds a launch
// launched --reps times back to back, then synchronised, after one warm-up;
// each result is checked. The same binary runs natively and under `phos-fn
// run` (bench/graphs.py), with graphs made on the device (the default) or
// replayed node by node (PHOS_GRAPHS=replay; graphs with conditional nodes
// are made on the device always).
// Prints one JSON line per case:
//   {"case":"chain-100","kernels":100,"seconds_per_launch":...,"ok":true}
//
// usage: graphs [--sizes K[,K...]] (default 10,100,1000) [--reps N] (default 50)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                                           \
	do {                                                                                            \
		cudaError_t e_ = (x);                                                                   \
		if (e_ != cudaSuccess) {                                                                \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)

static const int N = 256;

__global__ void bump(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] += 1.0f;
}

__global__ void start_loop(cudaGraphConditionalHandle h, int *counter, int rounds)
{
	if (threadIdx.x == 0) {
		*counter = rounds;
		cudaGraphSetConditional(h, rounds > 0);
	}
}

__global__ void step_loop(cudaGraphConditionalHandle h, int *counter)
{
	if (threadIdx.x == 0) {
		int c = --*counter;
		cudaGraphSetConditional(h, c > 0);
	}
}

static double now(void)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool all_are(const float *d, float want)
{
	std::vector<float> h(N);

	CK(cudaMemcpy(h.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		if (h[i] != want)
			return false;
	return true;
}

// seconds per launch of x on s, reps launches after one warm-up
static double time_launches(cudaGraphExec_t x, cudaStream_t s, int reps)
{
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	double t = now();
	for (int r = 0; r < reps; r++)
		CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	return (now() - t) / reps;
}

static void chain(int k, int reps, cudaStream_t s, float *x)
{
	cudaGraph_t g;
	cudaGraphExec_t e;

	CK(cudaMemset(x, 0, N * sizeof(float)));
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < k; i++)
		bump<<<1, N, 0, s>>>(x, N);
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&e, g, 0));
	double spl = time_launches(e, s, reps);
	bool ok = all_are(x, (float)k * (reps + 1));
	printf("{\"case\":\"chain-%d\",\"kernels\":%d,\"seconds_per_launch\":%.9f,\"ok\":%s}\n", k, k, spl,
	       ok ? "true" : "false");
	CK(cudaGraphExecDestroy(e));
	CK(cudaGraphDestroy(g));
}

static void loop(int k, int reps, cudaStream_t s, float *x, int *counter)
{
	cudaGraph_t g, body;
	cudaGraphConditionalHandle h;
	cudaGraphNode_t init, cond, b;
	cudaGraphExec_t e;
	int n = N;

	CK(cudaMemset(x, 0, N * sizeof(float)));
	CK(cudaGraphCreate(&g, 0));
	CK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
	cudaKernelNodeParams kp = {};
	void *init_args[] = { &h, &counter, &k };
	kp.func = (void *)start_loop;
	kp.gridDim = dim3(1);
	kp.blockDim = dim3(1);
	kp.kernelParams = init_args;
	CK(cudaGraphAddKernelNode(&init, g, nullptr, 0, &kp));
	cudaGraphNodeParams cp = {};
	cp.type = cudaGraphNodeTypeConditional;
	cp.conditional.handle = h;
	cp.conditional.type = cudaGraphCondTypeWhile;
	cp.conditional.size = 1;
	CK(cudaGraphAddNode(&cond, g, &init, nullptr, 1, &cp));
	body = cp.conditional.phGraph_out[0];
	void *bump_args[] = { &x, &n };
	kp.func = (void *)bump;
	kp.blockDim = dim3(N);
	kp.kernelParams = bump_args;
	CK(cudaGraphAddKernelNode(&b, body, nullptr, 0, &kp));
	void *step_args[] = { &h, &counter };
	kp.func = (void *)step_loop;
	kp.blockDim = dim3(1);
	kp.kernelParams = step_args;
	CK(cudaGraphAddKernelNode(&b, body, &b, 1, &kp));
	CK(cudaGraphInstantiate(&e, g, 0));
	double spl = time_launches(e, s, reps);
	bool ok = all_are(x, (float)k * (reps + 1));
	printf("{\"case\":\"while-%d\",\"kernels\":%d,\"seconds_per_launch\":%.9f,\"ok\":%s}\n", k, 2 * k + 1, spl,
	       ok ? "true" : "false");
	CK(cudaGraphExecDestroy(e));
	CK(cudaGraphDestroy(g));
}

int main(int argc, char **argv)
{
	std::string sizes = "10,100,1000";
	int reps = 50;
	cudaStream_t s;
	float *x;
	int *counter;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--sizes"))
			sizes = argv[i + 1];
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
	}
	if (reps < 1) {
		fprintf(stderr, "graphs: --reps must be at least 1\n");
		return 2;
	}
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&x, N * sizeof(float)));
	CK(cudaMalloc(&counter, sizeof(int)));
	for (size_t p = 0; p < sizes.size();) {
		size_t q = sizes.find(',', p);
		int k = atoi(sizes.substr(p, q == std::string::npos ? std::string::npos : q - p).c_str());

		if (k < 1 || k > 100000) {
			fprintf(stderr, "graphs: sizes must be 1..100000\n");
			return 2;
		}
		chain(k, reps, s, x);
		loop(k, reps, s, x, counter);
		p = q == std::string::npos ? sizes.size() : q + 1;
	}
	return 0;
}
