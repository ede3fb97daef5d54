// SPDX-License-Identifier: MIT
// Managed memory as CUDA's tutorials write it: cudaMallocManaged, kernels
// writing it, the host reading it after a synchronize with no copy; prefetch
// and advice hints; cudaMemset, every copy kind to and from managed memory;
// cudaPointerGetAttributes; cudaStreamAttachMemAsync; a kernel that runs
// many times on one managed counter, the host checking it in between.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define OK(call) CHECK((call) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))

__global__ void mg_add(int n, const float *x, float *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = x[i] + y[i];
}

__global__ void mg_bump(int *counter, int *trace, int step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		trace[step] = *counter;
		*counter += step;
	}
}

int main()
{
	const int n = 1 << 20;
	float *x = nullptr, *y = nullptr, *d = nullptr;
	int *counter = nullptr, *trace = nullptr, attr = 0;
	cudaStream_t s;
	cudaPointerAttributes pa;
	cudaMemLocation dev = { cudaMemLocationTypeDevice, 0 }, host = { cudaMemLocationTypeHost, 0 };

	CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrManagedMemory, 0) == cudaSuccess && attr == 1, "managed memory");
	// what the samples read (concurrentManagedAccess: the host may touch
	// managed memory while kernels run) agrees with the attributes
	cudaDeviceProp prop;
	int concurrent = 0;
	OK(cudaGetDeviceProperties(&prop, 0));
	OK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
	CHECK(prop.managedMemory == 1 && prop.concurrentManagedAccess == concurrent && concurrent == 1,
	      "properties: managedMemory %d, concurrentManagedAccess %d (attribute %d)", prop.managedMemory,
	      prop.concurrentManagedAccess, concurrent);
	OK(cudaMallocManaged(&x, n * sizeof(float)));
	OK(cudaMallocManaged(&y, n * sizeof(float), cudaMemAttachGlobal));
	for (int i = 0; i < n; i++) {
		x[i] = 1.0f;
		y[i] = (float)(i % 97);
	}
	OK(cudaMemPrefetchAsync(x, n * sizeof(float), dev, 0, 0));
	OK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, dev));
	mg_add<<<(n + 255) / 256, 256>>>(n, x, y);
	OK(cudaDeviceSynchronize());
	int bad = -1;
	for (int i = 0; i < n && bad < 0; i++)
		if (y[i] != 1.0f + (float)(i % 97))
			bad = i;
	CHECK(bad < 0, "y[%d] = %g after the kernel", bad, bad < 0 ? 0.0 : y[bad]);
	OK(cudaMemPrefetchAsync(y, n * sizeof(float), host, 0, 0));

	// concurrent access: the host writes one managed buffer while a kernel
	// writes another, with no synchronize in between
	float *w = nullptr;
	OK(cudaMallocManaged(&w, n * sizeof(float)));
	mg_add<<<(n + 255) / 256, 256>>>(n, x, y);   // y = 1 + 1 + i % 97
	for (int i = 0; i < n; i++)
		w[i] = 3.0f;
	OK(cudaDeviceSynchronize());
	bad = -1;
	for (int i = 0; i < n && bad < 0; i++)
		if (y[i] != 2.0f + (float)(i % 97) || w[i] != 3.0f)
			bad = i;
	CHECK(bad < 0, "concurrent: y[%d] = %g, w = %g", bad, bad < 0 ? 0.0 : y[bad], bad < 0 ? 0.0 : w[bad]);
	OK(cudaFree(w));

	// the pointer's attributes
	OK(cudaPointerGetAttributes(&pa, y));
	CHECK(pa.type == cudaMemoryTypeManaged && pa.devicePointer == y && pa.hostPointer == y, "attributes: type %d",
	      (int)pa.type);

	// cudaMemset, and copies of every kind between managed and device memory
	OK(cudaMemset(y, 0, n * sizeof(float)));
	CHECK(y[0] == 0.0f && y[n - 1] == 0.0f, "memset: %g %g", y[0], y[n - 1]);
	OK(cudaMalloc(&d, n * sizeof(float)));
	OK(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
	OK(cudaMemcpy(y, d, n * sizeof(float), cudaMemcpyDeviceToDevice));
	CHECK(y[12345] == 1.0f, "device to managed (DeviceToDevice): %g", y[12345]);
	OK(cudaMemset(y, 0, n * sizeof(float)));
	OK(cudaMemcpy(y, d, n * sizeof(float), cudaMemcpyDefault));
	CHECK(y[54321] == 1.0f, "device to managed (Default): %g", y[54321]);
	mg_add<<<(n + 255) / 256, 256>>>(n, x, y);   // y = 2
	OK(cudaMemcpy(d, y, n * sizeof(float), cudaMemcpyDeviceToDevice));
	OK(cudaMemcpy(x, d, n * sizeof(float), cudaMemcpyDeviceToHost));
	CHECK(x[777] == 2.0f, "managed to device and back: %g", x[777]);
	// a copy between managed buffers waits for the kernel writing the source
	mg_add<<<(n + 255) / 256, 256>>>(n, x, y);   // y = 4
	OK(cudaMemcpy(x, y, n * sizeof(float), cudaMemcpyDefault));
	CHECK(x[n - 1] == 4.0f, "managed to managed after a kernel: %g", x[n - 1]);

	// one counter, many launches on a stream it is attached to
	OK(cudaMallocManaged(&counter, sizeof(int)));
	OK(cudaMallocManaged(&trace, 64 * sizeof(int)));
	OK(cudaStreamCreate(&s));
	OK(cudaStreamAttachMemAsync(s, counter, 0, cudaMemAttachSingle));
	*counter = 0;
	int want = 0;
	for (int step = 1; step < 64; step++) {
		mg_bump<<<1, 32, 0, s>>>(counter, trace, step);
		if (step % 8 == 0) {
			OK(cudaStreamSynchronize(s));
			CHECK(*counter == want + step, "counter after step %d: %d, want %d", step, *counter, want + step);
			*counter += 1000;   // the host writes between launches
			want += 1000;
		}
		want += step;
	}
	OK(cudaStreamSynchronize(s));
	CHECK(*counter == want, "counter %d, want %d", *counter, want);
	CHECK(trace[9] == 1000 + 36, "trace[9] = %d", trace[9]);

	// size 0 is NULL (as an H200 answers); refusals
	float *z = x;
	OK(cudaMallocManaged(&z, 0));
	CHECK(z == nullptr, "size 0: %p", (void *)z);
	CHECK(cudaMallocManaged(&z, 16, 4) == cudaErrorInvalidValue, "bad flags");
	CHECK(cudaStreamAttachMemAsync(0, counter, 0, cudaMemAttachSingle) == cudaErrorInvalidValue,
	      "attach single to the legacy stream");
	int on_stack[4];
	cudaMemLocation host_loc = { cudaMemLocationTypeHost, 0 };
	CHECK(cudaMemPrefetchAsync(on_stack, sizeof(on_stack), host_loc, 0, 0) == cudaErrorInvalidValue,
	      "prefetch of memory that is not managed");
	cudaGetLastError();

	OK(cudaStreamDestroy(s));
	OK(cudaFree(counter));
	OK(cudaFree(trace));
	OK(cudaFree(x));
	OK(cudaFree(y));
	OK(cudaFree(d));
	if (failures)
		return 1;
	printf("managed: ok\n");
	return 0;
}
