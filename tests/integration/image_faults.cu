// A function for test_image_faults.py (issue 10, items 11 and 13):
//   init: a 4 MiB device buffer of a known pattern (word i = i * 2654435761);
//         $IF_INIT=abort abort()s and $IF_INIT=exit exits with 3 before phos_fn_serve
//   {"sum": true}       answers {"sum": S} over the buffer, read back from the device
//   {"print": N}        prints N lines to stdout, then answers {"printed": N}
//   {"big": N}          answers N bytes of 'x' (N up to 80 MiB)
//   {"ctype": "T"}      answers "plain text" with content type T
//   {"abort": true}     abort()s
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <phos/fn.h>

#define WORDS (1u << 20)

struct state {
	unsigned *dev;
	unsigned *host;
	char ctype[64];
};

static long field(const char *body, const char *key)
{
	const char *p = strstr(body, key);

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static int answer(struct phos_fn_response *resp, const char *fmt, unsigned long long v)
{
	if (asprintf(&resp->body, fmt, v) < 0)
		return 500;
	resp->len = strlen(resp->body);
	return 0;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	const char *ct = strstr(req->body, "\"ctype\":\"");
	long n;

	if (strstr(req->body, "\"abort\":true"))
		abort();
	if (strstr(req->body, "\"sum\":true")) {
		unsigned long long sum = 0;

		if (cudaMemcpy(st->host, st->dev, WORDS * sizeof(unsigned), cudaMemcpyDeviceToHost) != cudaSuccess)
			return 500;
		for (unsigned i = 0; i < WORDS; i++)
			sum += st->host[i];
		return answer(resp, "{\"sum\":%llu}", sum);
	}
	if ((n = field(req->body, "\"print\":")) >= 0) {
		for (long i = 0; i < n && i < 100000; i++)
			printf("a line the handler printed to stdout: %ld\n", i);
		return answer(resp, "{\"printed\":%llu}", (unsigned long long)n);
	}
	if ((n = field(req->body, "\"big\":")) >= 0) {
		if (n > (80l << 20) || !(resp->body = (char *)malloc((size_t)n + 1)))
			return 500;
		memset(resp->body, 'x', (size_t)n);
		resp->len = (size_t)n;
		return 0;
	}
	if (ct) {
		ct += 9;
		snprintf(st->ctype, sizeof(st->ctype), "%.*s", (int)strcspn(ct, "\""), ct);
		resp->content_type = st->ctype;
		return answer(resp, "plain text %llu", 1);
	}
	return answer(resp, "{\"ok\":%llu}", 1);
}

int main(void)
{
	static struct state st;
	const char *init = getenv("IF_INIT");

	if (init && !strcmp(init, "abort"))
		abort();
	if (init && !strcmp(init, "exit"))
		exit(3);
	st.host = (unsigned *)malloc(WORDS * sizeof(unsigned));
	if (!st.host || cudaMalloc(&st.dev, WORDS * sizeof(unsigned)) != cudaSuccess)
		return 1;
	for (unsigned i = 0; i < WORDS; i++)
		st.host[i] = i * 2654435761u;
	if (cudaMemcpy(st.dev, st.host, WORDS * sizeof(unsigned), cudaMemcpyHostToDevice) != cudaSuccess)
		return 1;
	return phos_fn_serve(handle, &st);
}
