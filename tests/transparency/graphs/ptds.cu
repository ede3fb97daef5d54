// SPDX-License-Identifier: MIT
// Built with --default-stream per-thread: the null stream of each host
// thread is its own stream (the _ptsz / _ptds entry points). Four threads
// each allocate, copy, launch and copy back on their default stream, with
// only their own stream synchronized; one of them also captures a graph on
// cudaStreamPerThread and launches it there; all share one cuBLAS handle
// set to cudaStreamPerThread, which runs each thread's call on that thread's
// stream. Every result is checked against a CPU reference.
#include <pthread.h>
#include <vector>

#include <cublas_v2.h>

#include "common.h"

static const int N = 1 << 16;
static const int B = 256;
static const int G = (N + B - 1) / B;
static const int THREADS = 4;

static pthread_barrier_t all_done;
static cublasHandle_t blas;              // shared, on cudaStreamPerThread
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

struct job {
	int id;
	int failures;
};

static void *work(void *arg)
{
	job *j = (job *)arg;
	std::vector<float> hx(N), hy(N), want(N);
	float *dx, *dy;
	float a = (float)(j->id + 2);

	for (int i = 0; i < N; i++) {
		hx[i] = (float)((i + j->id) % 50);
		hy[i] = (float)(j->id);
	}
	CK(cudaMalloc(&dx, N * sizeof(float)));
	CK(cudaMalloc(&dy, N * sizeof(float)));
	for (int round = 0; round < 3; round++) {
		CK(cudaMemcpyAsync(dx, hx.data(), N * sizeof(float), cudaMemcpyHostToDevice, 0));
		CK(cudaMemcpyAsync(dy, hy.data(), N * sizeof(float), cudaMemcpyHostToDevice, 0));
		graphs_saxpy<<<G, B>>>(a, dx, dy, N);   // the null stream: this thread's
		CK(cudaGetLastError());
		graphs_scale_add<<<G, B, 0, cudaStreamPerThread>>>(dy, 2.0f, N);
		// y += x, on this thread's stream, after the kernels above
		float one = 1.0f;
		pthread_mutex_lock(&blas_lock);
		cublasStatus_t bs = cublasSaxpy(blas, N, &one, dx, 1, dy, 1);
		pthread_mutex_unlock(&blas_lock);
		if (bs != CUBLAS_STATUS_SUCCESS) {
			fprintf(stderr, "thread %d: cublasSaxpy: %d\n", j->id, (int)bs);
			j->failures++;
		}
		CK(cudaMemcpyAsync(hy.data(), dy, N * sizeof(float), cudaMemcpyDeviceToHost, 0));
		CK(cudaStreamSynchronize(0));
		for (int i = 0; i < N; i++)
			want[i] = (a * hx[i] + (float)j->id) * 2.0f + (float)i + hx[i];
		for (int i = 0; i < N; i++)
			if (hy[i] != want[i]) {
				fprintf(stderr, "thread %d round %d: y[%d] = %g, want %g\n", j->id, round, i, hy[i],
					want[i]);
				j->failures++;
				break;
			}
		for (int i = 0; i < N; i++)
			hy[i] = (float)j->id;
	}

	if (j->id == 0) {
		// a graph captured on the per-thread stream
		cudaGraph_t g;
		cudaGraphExec_t x;
		cudaStreamCaptureStatus st;

		CK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
		CK(cudaStreamIsCapturing(0, &st));   // the null stream is the per-thread one here
		if (st != cudaStreamCaptureStatusActive) {
			fprintf(stderr, "null stream not capturing with cudaStreamPerThread: %d\n", (int)st);
			j->failures++;
		}
		graphs_scale_add<<<G, B>>>(dx, 3.0f, N);
		CK(cudaStreamEndCapture(cudaStreamPerThread, &g));
		CK(cudaGraphInstantiate(&x, g, 0));
		CK(cudaMemcpy(dx, hx.data(), N * sizeof(float), cudaMemcpyHostToDevice));
		CK(cudaGraphLaunch(x, 0));
		CK(cudaGraphLaunch(x, 0));
		CK(cudaMemcpyAsync(hy.data(), dx, N * sizeof(float), cudaMemcpyDeviceToHost, cudaStreamPerThread));
		CK(cudaStreamSynchronize(cudaStreamPerThread));
		for (int i = 0; i < N; i++) {
			float w = (hx[i] * 3.0f + (float)i) * 3.0f + (float)i;

			if (hy[i] != w) {
				fprintf(stderr, "per-thread graph: x[%d] = %g, want %g\n", i, hy[i], w);
				j->failures++;
				break;
			}
		}
		CK(cudaGraphExecDestroy(x));
		CK(cudaGraphDestroy(g));
	}
	CK(cudaFree(dx));
	CK(cudaFree(dy));
	// every thread keeps its stream until all are done, so that the four
	// streams are four at once
	pthread_barrier_wait(&all_done);
	return nullptr;
}

int main()
{
	pthread_t t[THREADS];
	job jobs[THREADS];
	int bad = 0;

	CK(cudaFree(0));
	if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, cudaStreamPerThread) != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "cublasCreate / cublasSetStream failed\n");
		return 1;
	}
	pthread_barrier_init(&all_done, nullptr, THREADS);
	for (int i = 0; i < THREADS; i++) {
		jobs[i] = { i, 0 };
		if (pthread_create(&t[i], nullptr, work, &jobs[i])) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], nullptr);
		bad += jobs[i].failures;
	}
	CK(cudaDeviceSynchronize());
	cublasDestroy(blas);
	if (bad) {
		fprintf(stderr, "ptds: %d failures\n", bad);
		return 1;
	}
	printf("ptds: ok\n");
	return 0;
}
