// A function that misbehaves on request, for the invoker's tests:
//   {"sleep_ms": N}   sleeps N ms (at most 60000) before answering
//   {"crash": true}   abort()s
//   {"status": N}     returns N (an HTTP-like error code) with an error body
// Anything else is echoed back with a request counter (CPU state) and a value
// read back from the GPU buffer made at init (GPU state). Each request writes
// one line to stderr (the instance's log).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <phos/fn.h>
#include <unistd.h>

struct state {
	int *dev;
	long calls;
};

static long field(const char *body, const char *key)
{
	const char *p = strstr(body, key);

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	int v = 0;
	long ms = field(req->body, "\"sleep_ms\":"), status = field(req->body, "\"status\":");

	st->calls++;
	fprintf(stderr, "misbehave: request %ld (%zu bytes)\n", st->calls, req->len);
	if (strstr(req->body, "\"crash\":true") || strstr(req->body, "\"crash\": true"))
		abort();
	if (ms > 0)
		usleep((useconds_t)(ms > 60000 ? 60000 : ms) * 1000);
	if (cudaMemcpy(&v, st->dev, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
		return 500;
	if (asprintf(&resp->body, "{\"calls\":%ld,\"gpu\":%d,\"len\":%zu%s}", st->calls, v, req->len,
		     status >= 400 && status <= 599 ? ",\"error\":\"asked to fail\"" : "") < 0)
		return 500;
	resp->len = strlen(resp->body);
	return status >= 400 && status <= 599 ? (int)status : 0;
}

int main(void)
{
	static struct state st;
	int v = 1234;

	if (cudaMalloc(&st.dev, sizeof(int)) != cudaSuccess ||
	    cudaMemcpy(st.dev, &v, sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess)
		return 1;
	return phos_fn_serve(handle, &st);
}
