// Probe: does pinning/unpinning a large host buffer hold another thread's CUDA
// calls? One thread launches an empty kernel and syncs in a loop (the
// "program"); the main thread registers and unregisters GIB GiB, whole and in
// pieces, and munmaps. Prints each phase's time and the longest gap the
// program saw during it.
#include <cuda_runtime.h>
#include <pthread.h>
#include <atomic>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__global__ void nop(int *p) { if (p) *p = 1; }
static std::atomic<int> stop_flag;
static std::atomic<double> gap_max, last;
static void *prog(void *arg)
{
	cudaStream_t s;
	cudaSetDevice(0);
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	last = now();
	while (!stop_flag) {
		nop<<<1, 1, 0, s>>>(NULL);
		cudaStreamSynchronize(s);
		double t = now(), g = t - last.load();
		if (g > gap_max) gap_max = g;
		last = t;
	}
	return NULL;
}
static void phase_begin(void) { last = now(); gap_max = 0; }
static void phase_end(const char *name, double t0) { printf("%-40s %8.3f s   longest program gap %8.4f s\n", name, now() - t0, gap_max.load()); fflush(stdout); }

int main(int argc, char **argv)
{
	size_t gib = argc > 1 ? atoi(argv[1]) : 16, len = gib << 30;
	size_t piece = (argc > 2 ? atoi(argv[2]) : 256) << 20;
	pthread_t th;
	cudaSetDevice(0);
	cudaFree(0);
	pthread_create(&th, NULL, prog, NULL);
	usleep(200000);
	double t0 = now();
	phase_begin(); usleep(300000); phase_end("idle 0.3 s", t0);
	uint8_t *p = (uint8_t *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	madvise(p, len, MADV_HUGEPAGE);
	t0 = now(); phase_begin(); madvise(p, len, 23 /* MADV_POPULATE_WRITE */); phase_end("populate", t0);
	t0 = now(); phase_begin(); cudaError_t e = cudaHostRegister(p, len, 0); phase_end("register whole", t0);
	if (e) printf("register: %s\n", cudaGetErrorString(e));
	t0 = now(); phase_begin(); cudaHostUnregister(p); phase_end("unregister whole", t0);
	t0 = now(); phase_begin();
	for (size_t o = 0; o < len; o += piece) cudaHostRegister(p + o, piece, 0);
	phase_end("register in pieces", t0);
	/* a copy spanning two pieces */
	{
		void *d; cudaMalloc(&d, 64 << 20);
		t0 = now(); phase_begin();
		cudaError_t ce = cudaSuccess;
		for (int i = 0; i < 10; i++) { cudaError_t x = cudaMemcpy(p + piece - (32 << 20), d, 64 << 20, cudaMemcpyDeviceToHost); if (x) ce = x; }
		phase_end("10 x 64 MiB D2H across two pieces", t0);
		printf("  its result: %s\n", cudaGetErrorString(ce)); cudaGetLastError();
		ce = cudaMemcpyAsync(p + piece - (32 << 20), d, 64 << 20, cudaMemcpyDeviceToHost, 0);
		printf("  async across two pieces: %s\n", cudaGetErrorString(ce)); cudaDeviceSynchronize(); cudaGetLastError();

		t0 = now();
		for (int i = 0; i < 10; i++) cudaMemcpy(p + 2 * piece, d, 64 << 20, cudaMemcpyDeviceToHost);
		phase_end("10 x 64 MiB D2H in one piece", t0);
		cudaFree(d);
	}
	t0 = now(); phase_begin();
	for (size_t o = 0; o < len; o += piece) cudaHostUnregister(p + o);
	phase_end("unregister in pieces", t0);
	t0 = now(); phase_begin(); munmap(p, len); phase_end("munmap", t0);
	stop_flag = 1;
	pthread_join(th, NULL);
	return 0;
}
