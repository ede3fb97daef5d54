// A function for snapshot pulls (test_pull.py): its init appends a line to
// the file named by $PULL_INIT_LOG (so a test sees every run of the
// initialisation, on any invoker) and fills two device buffers: "weights"
// (argv[3] MiB from argv[1], shared between functions given the same seed)
// and "private" (1 MiB from argv[2]). Each call copies both back and answers
// their sums, how many inits the log held when init ran, and a call counter.
// With $PULL_KEEP_OPEN, init opens that file for reading and keeps it open;
// each call answers its first bytes as "kept" (what a restore handed it).
// With $PULL_SHOW_UID, each call answers the uid it runs as and its
// effective capabilities (from /proc/self/status) as "uid" and "capeff".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <phos/fn.h>

struct state {
	uint32_t *weights, *priv, *host;
	size_t n_weights, n_priv;
	long inits, calls;
	int kept_fd;
	bool show_uid;
};

/* "uid":N,"capeff":"HEX" of this process, from /proc/self/status. */
static void who(char *out, size_t len)
{
	char line[256], cap[32] = "?";
	unsigned uid = ~0u;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "Uid:", 4))
			sscanf(line + 4, "%*u %u", &uid);   /* the effective one */
		else if (!strncmp(line, "CapEff:", 7))
			sscanf(line + 7, "%31s", cap);
	}
	if (f)
		fclose(f);
	snprintf(out, len, ",\"uid\":%u,\"capeff\":\"%s\"", uid, cap);
}

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static uint64_t sum_of(const uint32_t *d, size_t n, uint32_t *host)
{
	uint64_t s = 0;

	CK(cudaMemcpy(host, d, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++)
		s += host[i];
	return s;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char *out;

	char kept[33] = "";

	(void)req;
	st->calls++;
	if (st->kept_fd >= 0) {
		ssize_t n = pread(st->kept_fd, kept, sizeof(kept) - 1, 0);

		kept[n > 0 ? n : 0] = '\0';
		for (char *c = kept; *c; c++)   /* a JSON string without escapes */
			if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
				*c = '_';
	}
	char whom[96] = "";

	if (st->show_uid)
		who(whom, sizeof(whom));
	if (asprintf(&out, "{\"weights\":%llu,\"private\":%llu,\"inits\":%ld,\"calls\":%ld%s%s%s%s}",
		     (unsigned long long)sum_of(st->weights, st->n_weights, st->host),
		     (unsigned long long)sum_of(st->priv, st->n_priv, st->host), st->inits, st->calls,
		     st->kept_fd >= 0 ? ",\"kept\":\"" : "", kept, st->kept_fd >= 0 ? "\"" : "", whom) < 0)
		return 500;
	resp->body = out;
	resp->len = strlen(out);
	return 0;
}

/* The number of lines in path after appending one. */
static long log_init(const char *path)
{
	char buf[4096];
	long lines = 0;
	ssize_t n;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);

	if (fd < 0 || write(fd, "init\n", 5) != 5) {
		perror(path);
		exit(1);
	}
	close(fd);
	fd = open(path, O_RDONLY);
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
	if (fd >= 0)
		close(fd);
	return lines;
}

static void fill(uint32_t *d, size_t n, uint32_t seed, uint32_t *host)
{
	for (size_t i = 0; i < n; i++)
		host[i] = (uint32_t)i * 2654435761u + seed;
	CK(cudaMemcpy(d, host, n * sizeof(uint32_t), cudaMemcpyHostToDevice));
}

int main(int argc, char **argv)
{
	static struct state st;
	uint32_t wseed = argc > 1 ? (uint32_t)atoi(argv[1]) : 1, pseed = argc > 2 ? (uint32_t)atoi(argv[2]) : 2;
	size_t mib = argc > 3 ? (size_t)atoi(argv[3]) : 12;

	if (getenv("PULL_INIT_LOG"))
		st.inits = log_init(getenv("PULL_INIT_LOG"));
	st.kept_fd = -1;
	st.show_uid = getenv("PULL_SHOW_UID") != NULL;
	if (getenv("PULL_KEEP_OPEN") && (st.kept_fd = open(getenv("PULL_KEEP_OPEN"), O_RDONLY)) < 0) {
		perror(getenv("PULL_KEEP_OPEN"));
		return 1;
	}
	st.n_weights = (mib << 20) / 4;
	st.n_priv = (1u << 20) / 4;
	st.host = (uint32_t *)malloc(st.n_weights * sizeof(uint32_t));
	CK(cudaMalloc(&st.weights, st.n_weights * sizeof(uint32_t)));
	CK(cudaMalloc(&st.priv, st.n_priv * sizeof(uint32_t)));
	fill(st.weights, st.n_weights, wseed, st.host);
	fill(st.priv, st.n_priv, pseed, st.host);
	return phos_fn_serve(handle, &st);
}
