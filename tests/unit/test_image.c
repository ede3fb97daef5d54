/* SPDX-License-Identifier: MIT */
/*
 * The snapshot image: manifest round trip, checksums, every refusal of a bad
 * image with its message, the atomic directory commit (with the
 * "snapshot_commit" fault) and the sweep of abandoned temporaries.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "image.h"
#include "log.h"

#define ARENA 0x600000000000ull
#define MiB (1ull << 20)

#include "check.h"

#define PHOS_STR_(x) #x
#define PHOS_STR(x) PHOS_STR_(x)

/* snprintf into an array, failing the test when it does not fit. */
#define PATHF(buf, ...)                                                        \
	do {                                                                   \
		if (snprintf(buf, sizeof(buf), __VA_ARGS__) >= (int)sizeof(buf)) { \
			fprintf(stderr, "path too long\n");                     \
			exit(1);                                               \
		}                                                              \
	} while (0)

static char base[PATH_MAX];
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((unsigned char *)p)[i] = (unsigned char)rnd();
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len, "write %s: %m", path);
	if (fd >= 0)
		close(fd);
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *s = NULL;
	size_t n = 0;

	if (f) {
		s = calloc(1, 1 << 24);
		n = fread(s, 1, (1 << 24) - 1, f);
		fclose(f);
	}
	CHECK(s && n > 0, "read %s", path);
	return s;
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* ---- a sample image ---- */

struct sample {
	struct phos_image *img;
	unsigned char *bufdata[5], *vardata[2], *mod[2];
	size_t modlen[2];
};

static const uint64_t buf_addr[5] = { ARENA + 8 * MiB + 256, ARENA, ARENA + 4 * MiB, ARENA + 2 * MiB,
				      ARENA + 6 * MiB };
static const uint64_t buf_size[5] = { 1, 3 * 4096 + 100, 5000, MiB, 2 * MiB };

static void sample_build(struct sample *s, const char *function)
{
	struct phos_image *img = phos_image_new();
	uint64_t off = 0;

	memset(s, 0, sizeof(*s));
	s->img = img;
	snprintf(img->function, sizeof(img->function), "%s", function);
	strcpy(img->device, "sim");
	strcpy(img->gpu_name, "NVIDIA H100 80GB HBM3");
	img->arena_base = ARENA;
	img->arena_size = 1ull << 30;
	img->created = (int64_t)time(NULL);
	for (int i = 0; i < 5; i++) { /* added out of address order, offsets in this order */
		struct phos_image_buf b = { .addr = buf_addr[i], .size = buf_size[i],
					    .id = (uint64_t)i + 1, .offset = off };

		s->bufdata[i] = malloc(b.size);
		fill(s->bufdata[i], b.size);
		b.hash = phos_image_hash(s->bufdata[i], b.size);
		CHECK(phos_image_add_buf(img, &b) == 0, "add_buf");
		img->gpu_bytes += b.size;
		off = phos_image_next_offset(off, b.size);
	}
	for (int i = 0; i < 2; i++) {
		struct phos_image_module m = { .id = 10u + (uint32_t)i };

		s->modlen[i] = i ? 3333 : 1000;
		s->mod[i] = malloc(s->modlen[i]);
		fill(s->mod[i], s->modlen[i]);
		m.size = s->modlen[i];
		phos_image_module_hash(s->mod[i], s->modlen[i], m.hash);
		CHECK(phos_image_add_module(img, &m) == 0, "add_module");
	}
	CHECK(phos_image_add_func(img, 1, 10, "_Z6vecaddPKfS0_Pfi") == 0, "add_func");
	CHECK(phos_image_add_func(img, 2, 11, "_Z4gelui") == 0, "add_func");
	CHECK(phos_image_add_func(img, 3, 11, "kernel_extern_c") == 0, "add_func");
	for (int i = 0; i < 2; i++) {
		struct phos_image_var v = { .id = 20u + (uint32_t)i, .module = 10u + (uint32_t)i,
					    .name = i ? "scale" : "lut", .addr = 0x7f0000001000ull + (uint64_t)i * 4096,
					    .size = i ? 8 : 256, .offset = off, .constant = i == 0 };

		s->vardata[i] = malloc(v.size);
		fill(s->vardata[i], v.size);
		v.hash = phos_image_hash(s->vardata[i], v.size);
		CHECK(phos_image_add_var(img, &v) == 0, "add_var");
		off = phos_image_next_offset(off, v.size);
	}
	/* a variable that never resolved: no contents */
	CHECK(phos_image_add_var(img, &(struct phos_image_var){ .id = 22, .module = 10, .name = "unresolved" }) == 0,
	      "add_var");
	img->data_bytes = off;
	img->devices = 2;   /* stream 2 and the cuBLAS handle on device 1 (1.4) */
	CHECK(phos_image_add_stream(img, &(struct phos_image_stream){ 1, 1, -1, 0 }) == 0, "stream");
	CHECK(phos_image_add_stream(img, &(struct phos_image_stream){ 2, 0, 0, 1 }) == 0, "stream");
	for (uint32_t i = 0; i < 3; i++)
		CHECK(phos_image_add_event(img, &(struct phos_image_event){ 30 + i, i, 0 }) == 0, "event");
	CHECK(phos_image_add_blas(img, &(struct phos_image_blas){ 40, 1, 3, ARENA + 10 * MiB, 4 * MiB, 1 }) == 0,
	      "blas");
	img->prefetch = malloc(3 * sizeof(uint64_t));
	img->prefetch[0] = 4;
	img->prefetch[1] = 1;
	img->prefetch[2] = 5;
	img->nprefetch = 3;
	strcpy(img->criu_dir, "cpu");
	img->fds[0] = (struct phos_image_fd){ 3, "socket:[123]" };
	img->fds[1] = (struct phos_image_fd){ 0, "pipe:[456]" };
	img->fds[2] = (struct phos_image_fd){ 1, "pipe:[789]" };
	img->nfds = 3;
}

static void sample_free(struct sample *s)
{
	for (int i = 0; i < 5; i++)
		free(s->bufdata[i]);
	for (int i = 0; i < 2; i++) {
		free(s->vardata[i]);
		free(s->mod[i]);
	}
	phos_image_free(s->img);
}

/* Everything an image directory holds, manifest last. */
static void sample_write(const struct sample *s, const char *dir)
{
	const struct phos_image *img = s->img;
	char path[PATH_MAX];
	int fd;

	PATHF(path, "%s/gpu.data", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "open gpu.data");
	for (int i = 0; i < 5; i++)
		CHECK(pwrite(fd, s->bufdata[i], buf_size[i], (off_t)img->bufs[i].offset) ==
			      (ssize_t)buf_size[i], "pwrite");
	for (int i = 0; i < 2; i++)
		CHECK(pwrite(fd, s->vardata[i], img->vars[i].size, (off_t)img->vars[i].offset) ==
			      (ssize_t)img->vars[i].size, "pwrite");
	CHECK(ftruncate(fd, (off_t)img->data_bytes) == 0, "ftruncate");
	close(fd);
	PATHF(path, "%s/modules", dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir modules");
	for (int i = 0; i < 2; i++) {
		PATHF(path, "%s/modules/%s.fatbin", dir, img->modules[i].hash);
		write_file(path, s->mod[i], s->modlen[i]);
	}
	PATHF(path, "%s/cpu", dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir cpu");
	PATHF(path, "%s/cpu/core-1.img", dir);
	write_file(path, "core", 4);
	PATHF(path, "%s/cpu/pages-1.img", dir);
	write_file(path, img->function, strlen(img->function));
	CHECK(phos_image_write_manifest(dir, img) == 0, "write_manifest %s", dir);
}

/* A committed snapshot of sample s at final. */
static void sample_commit(const struct sample *s, const char *final)
{
	char tmp[PATH_MAX];
	int r = phos_image_dir_begin(final, tmp, sizeof(tmp));

	CHECK(r == 0, "dir_begin %s: %d", final, r);
	sample_write(s, tmp);
	r = phos_image_dir_commit(tmp, final);
	CHECK(r == 0, "dir_commit: %d", r);
	CHECK(!exists(tmp), "%s left behind", tmp);
}

/* ---- tests ---- */

static void test_hash(void)
{
	static const size_t sizes[] = { 0, 1, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1, 9 * MiB };
	unsigned char *data = malloc(9 * MiB), le[8 * 256];
	uint64_t hs[256];
	char hex[33], want[33];

	fill(data, 9 * MiB);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len = sizes[k], n = 0;

		for (size_t off = 0; off < len; off += PHOS_IMAGE_HASH_CHUNK, n++) {
			size_t c = len - off < PHOS_IMAGE_HASH_CHUNK ? len - off : PHOS_IMAGE_HASH_CHUNK;

			hs[n] = XXH3_64bits(data + off, c);
			CHECK(phos_image_chunk_hash(data + off, c) == hs[n], "chunk hash");
		}
		for (size_t i = 0; i < n * 8; i++)
			le[i] = (unsigned char)(hs[i / 8] >> (8 * (i % 8)));
		CHECK(phos_image_hash(data, len) == XXH3_64bits(le, n * 8), "hash of %zu bytes", len);
		CHECK(phos_image_combine(hs, n) == XXH3_64bits(le, n * 8), "combine of %zu", n);
	}
	CHECK(phos_image_hash(NULL, 0) == XXH3_64bits(NULL, 0), "empty hash");
	for (size_t i = 0; i < 256; i++) /* past the combiner's internal batch */
		hs[i] = rnd();
	for (size_t i = 0; i < sizeof(le); i++)
		le[i] = (unsigned char)(hs[i / 8] >> (8 * (i % 8)));
	CHECK(phos_image_combine(hs, 256) == XXH3_64bits(le, sizeof(le)), "combine of 256");
	CHECK(phos_image_combine(hs, 65) == XXH3_64bits(le, 65 * 8), "combine of 65");
	phos_image_module_hash(data, 1000, hex);
	XXH128_hash_t h = XXH3_128bits(data, 1000);
	PATHF(want, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
	CHECK(strcmp(hex, want) == 0 && strlen(hex) == 32, "module hash %s", hex);
	free(data);
}

static void test_roundtrip(const char *final)
{
	struct sample s;
	struct phos_image *got = NULL, *img;
	char err[512], path[PATH_MAX];
	int r;

	sample_build(&s, "vecadd");
	img = s.img;
	sample_commit(&s, final);
	r = phos_image_read(final, &got, err, sizeof(err));
	CHECK(r == 0, "read: %d %s", r, err);
	if (r) {
		sample_free(&s);
		return;
	}
	CHECK(got->major == PHOS_IMAGE_MAJOR && got->minor == PHOS_IMAGE_MINOR, "version");
	CHECK(!strcmp(got->function, "vecadd") && !strcmp(got->device, "sim") &&
	      !strcmp(got->gpu_name, img->gpu_name), "strings");
	CHECK(got->arena_base == img->arena_base && got->arena_size == img->arena_size, "arena");
	CHECK(got->gpu_bytes == img->gpu_bytes && got->data_bytes == img->data_bytes &&
	      got->created == img->created, "sizes");
	CHECK(got->nbufs == 5, "nbufs %u", got->nbufs);
	for (uint32_t i = 0; i < got->nbufs && i < 5; i++) {
		const struct phos_image_buf *b = &got->bufs[i];
		int k = (int)b->id - 1;
		unsigned char *back = malloc(b->size);
		int fd;

		CHECK(i == 0 || b->addr > got->bufs[i - 1].addr, "bufs not sorted");
		CHECK(k >= 0 && k < 5 && !memcmp(b, &img->bufs[k], sizeof(*b)), "buf %u differs", i);
		PATHF(path, "%s/gpu.data", final);
		fd = open(path, O_RDONLY);
		CHECK(pread(fd, back, b->size, (off_t)b->offset) == (ssize_t)b->size, "pread");
		CHECK(phos_image_hash(back, b->size) == b->hash, "contents of buffer %u", i);
		close(fd);
		free(back);
	}
	CHECK(got->nmodules == 2, "nmodules");
	for (uint32_t i = 0; i < got->nmodules && i < 2; i++)
		CHECK(got->modules[i].id == img->modules[i].id && got->modules[i].size == img->modules[i].size &&
		      !strcmp(got->modules[i].hash, img->modules[i].hash), "module %u", i);
	CHECK(got->nfuncs == 3, "nfuncs");
	for (uint32_t i = 0; i < got->nfuncs && i < 3; i++)
		CHECK(got->funcs[i].id == img->funcs[i].id && got->funcs[i].module == img->funcs[i].module &&
		      !strcmp(got->funcs[i].name, img->funcs[i].name), "func %u", i);
	CHECK(got->nvars == 3, "nvars");
	for (uint32_t i = 0; i < got->nvars && i < 3; i++) {
		const struct phos_image_var *a = &got->vars[i], *b = &img->vars[i];

		CHECK(a->id == b->id && a->module == b->module && !strcmp(a->name, b->name) &&
		      a->addr == b->addr && a->size == b->size && a->offset == b->offset &&
		      a->hash == b->hash && a->constant == b->constant, "var %u", i);
	}
	CHECK(got->nstreams == 2 && !memcmp(got->streams, img->streams, 2 * sizeof(*img->streams)),
	      "streams");
	CHECK(got->devices == 2 && got->streams[1].device == 1 && got->blas[0].device == 1, "devices");
	CHECK(got->nevents == 3 && !memcmp(got->events, img->events, 3 * sizeof(*img->events)), "events");
	CHECK(got->nblas == 1 && got->blas[0].id == 40 && got->blas[0].stream == 1 &&
	      got->blas[0].math_mode == 3 && got->blas[0].workspace == ARENA + 10 * MiB &&
	      got->blas[0].workspace_size == 4 * MiB, "blas");
	CHECK(got->nprefetch == 3 && !memcmp(got->prefetch, img->prefetch, 3 * sizeof(uint64_t)),
	      "prefetch");
	CHECK(!strcmp(got->criu_dir, "cpu") && got->nfds == 3, "cpu");
	for (uint32_t i = 0; i < got->nfds && i < 3; i++)
		CHECK(got->fds[i].fd == img->fds[i].fd && !strcmp(got->fds[i].key, img->fds[i].key),
		      "fd %u", i);
	CHECK(!got->checkpoint.present && got->nregions == 0, "a snapshot is no checkpoint and has no host regions");
	/* A read image grows like a built one. */
	CHECK(phos_image_add_func(got, 4, 10, "late") == 0 && got->nfuncs == 4, "add to read image");
	phos_image_free(got);
	sample_free(&s);
}

/* 1.2: a checkpoint of a running program, with host regions, round trips;
 * an empty region is refused by name. */
static void test_checkpoint_fields(void)
{
	const struct phos_image_region g = { .id = 3, .size = 8192, .addr = 0x7f0000001000ull,
					     .exec_addr = 0x7f0000001000ull };
	struct phos_image *got = NULL;
	struct sample s;
	char dir[PATH_MAX], err[512];
	int r;

	PATHF(dir, "%s/ckpt", base);
	sample_build(&s, "train");
	s.img->checkpoint = (struct phos_image_checkpoint){ .present = true, .mode = "cow", .channel_fd = 4,
							    .seq = 1234, .stall_s = 0.25, .total_s = 1.5,
							    .early = 7 };
	CHECK(phos_image_add_region(s.img, &g) == 0, "add region");
	/* memory pools: one live, one destroyed with a block left */
	const struct phos_image_pool pools[2] = {
		{ .id = 1, .reuse = { true, false, true }, .max_size = 32 << 20, .threshold = 64 << 20 },
		{ .id = 0x80000000u, .gone = true, .reuse = { true, true, true } },
	};
	const uint64_t b0 = s.img->bufs[0].addr, b1 = s.img->bufs[1].addr;

	struct phos_image_stream_attr sattr = { .stream = 0, .attr = 3, .value = { 3, 0, 0, 0, 0xab } };
	const struct phos_image_limit lim = { .limit = 1, .device = 0, .value = 3 << 20 };

	const struct phos_image_resv resv = { .addr = ARENA + (64ull << 20), .size = 8ull << 20 };

	CHECK(phos_image_add_limit(s.img, &lim) == 0 && phos_image_add_stream_attr(s.img, &sattr) == 0 &&
	      phos_image_add_resv(s.img, &resv) == 0, "add a limit, a stream attribute and a reservation");
	CHECK(phos_image_add_pool(s.img, &pools[0]) == 0 && phos_image_add_pool(s.img, &pools[1]) == 0 &&
	      phos_image_add_pool_block(s.img, &(struct phos_image_pool_block){ 1, b0 }) == 0 &&
	      phos_image_add_pool_block(s.img, &(struct phos_image_pool_block){ 0x80000000u, b1 }) == 0,
	      "add pools");
	sample_commit(&s, dir);
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == 0, "read checkpoint: %s", err);
	if (r == 0) {
		const struct phos_image_checkpoint *c = &got->checkpoint;

		CHECK(c->present && !strcmp(c->mode, "cow") && c->channel_fd == 4 && c->seq == 1234 &&
		      c->stall_s == 0.25 && c->total_s == 1.5 && c->early == 7, "checkpoint fields");
		CHECK(got->nregions == 1 && got->regions[0].id == g.id && got->regions[0].size == g.size &&
		      got->regions[0].addr == g.addr && got->regions[0].exec_addr == g.exec_addr, "host region");
		CHECK(got->npools == 2 && !memcmp(&got->pools[0], &pools[0], sizeof(pools[0])) &&
		      !memcmp(&got->pools[1], &pools[1], sizeof(pools[1])) && got->npool_blocks == 2 &&
		      got->pool_blocks[0].pool == 1 && got->pool_blocks[0].addr == b0 &&
		      got->pool_blocks[1].pool == 0x80000000u && got->pool_blocks[1].addr == b1, "pools round trip");
		CHECK(got->nlimits == 1 && !memcmp(&got->limits[0], &lim, sizeof(lim)) && got->nstream_attrs == 1 &&
		      !memcmp(&got->stream_attrs[0], &sattr, sizeof(sattr)), "limits and stream attributes round trip");
		CHECK(got->nresvs == 1 && got->resvs[0].addr == resv.addr && got->resvs[0].size == resv.size,
		      "reservations round trip");
	}
	phos_image_free(got);
	sample_free(&s);

	/* a reservation outside the arena, or not of whole chunks: not written */
	for (int k = 0; k < 2; k++) {
		sample_build(&s, "train");
		CHECK(phos_image_add_resv(s.img, &(struct phos_image_resv){ k ? ARENA + 4096 : ARENA + (2ull << 30),
									   2ull << 20 }) == 0, "add");
		CHECK(phos_image_write_manifest(dir, s.img) == -EINVAL, "a bad reservation is not written (%d)", k);
		sample_free(&s);
	}

	/* a pool block that is no buffer's start, or of a pool not listed: not
	 * written, and refused when read */
	for (int k = 0; k < 2; k++) {
		char bad_dir[PATH_MAX], path[PATH_MAX + 32];
		json_t *root, *blk;

		sample_build(&s, "train");
		CHECK(phos_image_add_pool(s.img, &pools[0]) == 0 &&
		      phos_image_add_pool_block(s.img, &(struct phos_image_pool_block){
							       k ? 7 : 1, k ? b0 : b0 + 8 }) == 0,
		      "add");
		CHECK(phos_image_write_manifest(dir, s.img) == -EINVAL, "a bad pool block is not written (%d)", k);
		sample_free(&s);
		PATHF(path, "%s/ckpt/manifest.json", base);
		root = json_load_file(path, 0, NULL);
		blk = json_array_get(json_object_get(root, "pool_blocks"), 0);
		CHECK(blk && json_array_set_new(blk, k ? 0 : 1, json_integer(k ? 7 : (json_int_t)(b0 + 8))) == 0, "edit");
		PATHF(bad_dir, "%s/ckpt-pool-bad-%d", base, k);
		CHECK(mkdir(bad_dir, 0755) == 0, "mkdir");
		sample_build(&s, "train");
		sample_write(&s, bad_dir);
		CHECK(json_dump_file(root, strcat(strcpy(path, bad_dir), "/manifest.json"), 0) == 0, "dump");
		json_decref(root);
		got = NULL;
		r = phos_image_read(bad_dir, &got, err, sizeof(err));
		CHECK(r == -EINVAL && strstr(err, "pool_blocks"), "a bad pool block refused: %d %s", r, err);
		phos_image_free(got);
		sample_free(&s);
	}

	sample_build(&s, "train");
	CHECK(phos_image_add_region(s.img, &(struct phos_image_region){ .id = 1, .size = 0, .addr = 0x1000,
									.exec_addr = 0x2000 }) == 0, "add");
	PATHF(dir, "%s/ckpt-bad", base);
	sample_commit(&s, dir);
	got = NULL;
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == -EBADMSG && strstr(err, "host_regions"), "empty region refused: %d %s", r, err);
	phos_image_free(got);
	sample_free(&s);
}

/* 1.3: arrays and texture/surface objects round trip, their gpu.data
 * ranges count among the items, and a bad one is refused by name. */
static struct sample *arrays_sample(struct sample *s, const struct phos_array_create *ad, uint64_t size,
				    const struct phos_image_tex *t, size_t nt)
{
	struct phos_image_array a = { .desc = *ad, .size = size, .hash = 0x1234 };

	sample_build(s, "textures");
	a.offset = s->img->data_bytes;
	s->img->data_bytes = phos_image_next_offset(a.offset, a.size);
	CHECK(phos_image_add_array(s->img, &a) == 0, "add array");
	for (size_t i = 0; i < nt; i++)
		CHECK(phos_image_add_tex(s->img, &t[i]) == 0, "add texture");
	return s;
}

static void test_arrays(void)
{
	const struct phos_array_create ad = { .id = 3, .flags = 0x02, .bits = { 8, 8, 8, 8 }, .kind = 1,
					      .width = 100, .height = 50 };
	struct phos_image_tex t[2] = {
		{ .handle = 1, .desc = { .res_type = PHOS_RES_ARRAY, .array = 3, .address = { 1, 3, 0 },
					 .filter = 1, .read_mode = 1, .normalized_coords = 1, .border = { 0.5f, 1, 0, 0.25f },
					 .max_mip_clamp = 2.5f } },
		{ .handle = 4, .desc = { .res_type = PHOS_RES_LINEAR, .bits = { 32 }, .kind = 2, .ptr = ARENA, .size = 4096 } },
	};
	struct phos_image_tex bad = { .handle = 5, .desc = { .res_type = PHOS_RES_ARRAY, .array = 9 } };
	struct phos_image *got = NULL;
	struct sample s;
	char dir[PATH_MAX], path[PATH_MAX], bad_dir[PATH_MAX], bad_path[PATH_MAX + 20], err[512];
	uint64_t off, len, hash;
	int r;

	PATHF(dir, "%s/arrays", base);
	sample_commit(arrays_sample(&s, &ad, 100 * 50 * 4, t, 2), dir);
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == 0, "read arrays: %s", err);
	if (r == 0) {
		const struct phos_image_array *a = &got->arrays[0];

		CHECK(got->narrays == 1 && !memcmp(&a->desc, &ad, sizeof(ad)) && a->size == 20000 && a->hash == 0x1234,
		      "array round trip");
		CHECK(got->ntexes == 2 && !memcmp(&got->texes[0], &t[0], sizeof(t[0])) &&
		      !memcmp(&got->texes[1], &t[1], sizeof(t[1])), "textures round trip");
		CHECK(phos_image_nitems(got) == got->nbufs + got->nvars + 1, "the array is an item");
		phos_image_item(got, phos_image_nitems(got) - 1, &off, &len, &hash);
		CHECK(off == a->offset && len == a->size && hash == a->hash, "the last item is the array");
	}
	phos_image_free(got);
	sample_free(&s);

	/* the writer refuses what the reader would: a size its format and extent
	 * do not make, an object on an array the snapshot does not have */
	arrays_sample(&s, &ad, 4096, t, 1);
	CHECK(phos_image_write_manifest(dir, s.img) == -EINVAL, "a wrong array size is not written");
	sample_free(&s);
	arrays_sample(&s, &ad, 20000, &bad, 1);
	CHECK(phos_image_write_manifest(dir, s.img) == -EINVAL, "a texture on no array is not written");
	sample_free(&s);
	/* ... and the reader refuses them by name */
	PATHF(path, "%s/manifest.json", dir);
	for (int k = 0; k < 2; k++) {
		json_t *root = json_load_file(path, 0, NULL);
		json_t *o = json_array_get(json_object_get(root, k ? "textures" : "arrays"), 0);

		CHECK(o && json_object_set_new(o, k ? "array" : "size", json_integer(k ? 9 : 4096)) == 0, "edit");
		PATHF(bad_dir, "%s/arrays-bad%d", base, k);
		CHECK(mkdir(bad_dir, 0755) == 0, "mkdir");
		sample_write(arrays_sample(&s, &ad, 20000, t, 1), bad_dir);
		CHECK(json_dump_file(root, strcat(strcpy(bad_path, bad_dir), "/manifest.json"), 0) == 0, "dump");
		json_decref(root);
		got = NULL;
		r = phos_image_read(bad_dir, &got, err, sizeof(err));
		CHECK(r == -EINVAL && strstr(err, k ? "texture 1" : "array 3"), "refused by name: %d %s", r, err);
		phos_image_free(got);
		sample_free(&s);
	}

	/* ... unless it was left dangling by the program: its handle stays taken */
	bad.dangling = true;
	PATHF(dir, "%s/arrays-dangling", base);
	sample_commit(arrays_sample(&s, &ad, 20000, &bad, 1), dir);
	got = NULL;
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == 0 && got->ntexes == 1 && got->texes[0].dangling, "a dangling texture kept: %d %s", r, err);
	phos_image_free(got);
	sample_free(&s);
}

/* ---- refusals ---- */

static char good[PATH_MAX];
static char *good_text;

static void expect(int line, int want_rc, const char *want_text)
{
	struct phos_image *img = NULL;
	char err[512] = "";
	int r = phos_image_read(good, &img, err, sizeof(err));

	if (getenv("TEST_IMAGE_VERBOSE"))
		fprintf(stderr, "line %d: %d %s\n", line, r, err);
	if (r != want_rc || !strstr(err, want_text))
		fprintf(stderr, "FAIL %s:%d: got %d \"%s\", want %d \"%s\"\n", __FILE__, line, r, err,
			want_rc, want_text), failures++;
	if (img && want_rc) {
		fprintf(stderr, "FAIL %s:%d: an image came back on failure\n", __FILE__, line);
		failures++;
	}
	phos_image_free(img);
}

static void put_manifest(const char *text, size_t len)
{
	char path[PATH_MAX];

	PATHF(path, "%s/manifest.json", good);
	write_file(path, text, len);
}

/* Sets (or, with val NULL, deletes) key of section[idx] of the good manifest,
 * then expects phos_image_read to refuse with want_rc and a message with want. */
static void refuse_set(int line, const char *section, int idx, const char *key, json_t *val,
		       int want_rc, const char *want)
{
	json_t *root = json_loads(good_text, 0, NULL), *t = root;
	char *text;

	if (section)
		t = json_object_get(t, section);
	if (idx >= 0 && key)
		t = json_array_get(t, (size_t)idx);
	if (idx >= 0 && !key)
		json_array_set_new(t, (size_t)idx, val);
	else if (val)
		json_object_set_new(t, key, val);
	else
		json_object_del(t, key);
	text = json_dumps(root, JSON_COMPACT);
	put_manifest(text, strlen(text));
	expect(line, want_rc, want);
	free(text);
	json_decref(root);
	put_manifest(good_text, strlen(good_text));
}

#define REFUSE(section, idx, key, val, rc, want) refuse_set(__LINE__, section, idx, key, val, rc, want)

static void test_refusals(void)
{
	char path[PATH_MAX], path2[PATH_MAX];
	json_t *many;
	int fd;

	struct phos_image *img = NULL;
	char module_hash[33] = "", err[256];
	uint64_t data_bytes = 0;

	good_text = read_text(strcat(strcpy(path, good), "/manifest.json"));
	CHECK(phos_image_read(good, &img, err, sizeof(err)) == 0, "read: %s", err);
	if (img) {
		data_bytes = img->data_bytes;
		strcpy(module_hash, img->modules[1].hash);
	}
	phos_image_free(img);
	REFUSE(NULL, -1, "magic", json_string("phos-fn-snapshoT"), -EBADMSG, "not a phos-fn snapshot");
	REFUSE(NULL, -1, "magic", NULL, -EBADMSG, "not a phos-fn snapshot");
	REFUSE("version", -1, "major", json_integer(2), -EPROTONOSUPPORT,
	       "manifest.json: format 2.4 is newer than this phos-fn (1.x)");   /* 2.PHOS_IMAGE_MINOR */
	REFUSE("version", -1, "major", json_integer(0), -EPROTONOSUPPORT, "format 0.4 is older");
	REFUSE("cpu", -1, "files", json_string("x"), -EBADMSG, "cpu.files: expected an array");
	REFUSE("version", -1, "minor", json_integer(7), 0, ""); /* newer minor: fine */
	REFUSE(NULL, -1, "gpu_bytes", NULL, -EBADMSG, "gpu_bytes: missing");
	REFUSE("buffers", 1, "hash", NULL, -EBADMSG, "buffers[1].hash: missing");
	REFUSE("cpu", -1, "dir", NULL, -EBADMSG, "cpu.dir: missing");
	REFUSE(NULL, -1, "data_bytes", json_string("12"), -EBADMSG, "data_bytes: expected an integer");
	REFUSE(NULL, -1, "buffers", json_object(), -EBADMSG, "buffers: expected an array");
	REFUSE("buffers", 0, "size", json_integer(-1), -EINVAL, "buffers[0].size: -1 out of range");
	REFUSE("buffers", 2, NULL, json_integer(5), -EBADMSG, "buffers[2]: expected an object");
	REFUSE("buffers", 0, "hash", json_string("0123456789ABCDEF"), -EINVAL, "lowercase hex");
	REFUSE("variables", 0, "constant", json_integer(1), -EBADMSG, "expected true or false");
	REFUSE("streams", 0, "priority", json_integer(1ll << 40), -EINVAL, "out of range");
	REFUSE(NULL, -1, "devices", json_integer(9), -EINVAL, "devices: 9 out of range");
	REFUSE(NULL, -1, "devices", json_integer(0), -EINVAL, "devices: 0 out of range");
	REFUSE("streams", 1, "device", json_integer(2), -EINVAL, "streams[1].device: 2 out of range");
	REFUSE("variables", 0, "device", json_string("1"), -EBADMSG, "expected an integer");
	/* sorted by address: 0 is ARENA (3 pages + 100 bytes), 1 is ARENA + 2 MiB */
	REFUSE("buffers", 1, "addr", json_integer((json_int_t)(ARENA + 8192)), -EINVAL, "overlaps buffer");
	REFUSE("buffers", 0, "addr", json_integer((json_int_t)(ARENA - 4096)), -EINVAL, "outside the arena");
	REFUSE("buffers", 0, "offset", json_integer(4097), -EINVAL, "not 4096-aligned");
	REFUSE("buffers", 4, "offset", json_integer(64 * MiB), -EINVAL, "lies beyond gpu.data");
	REFUSE("buffers", 1, "offset", json_integer(0), -EINVAL, "in gpu.data");
	REFUSE(NULL, -1, "gpu_bytes", json_integer(12345), -EINVAL, "gpu_bytes is 12345");
	REFUSE("buffers", 2, "id", json_integer(1), -EINVAL, "buffer id 1 appears twice");
	REFUSE("prefetch", 1, NULL, json_integer(99), -EINVAL, "prefetch[1]: no buffer 99");
	REFUSE("modules", 0, "hash", json_string("00112233445566778899AABBCCDDEEFF"), -EINVAL,
	       "32 lowercase hex");
	REFUSE("kernels", 1, "module", json_integer(99), -EINVAL, "kernel 2: no module 99");
	REFUSE(NULL, -1, "function", json_stringn("vec\0add", 7), -EINVAL, "function: string contains a NUL");
	REFUSE("kernels", 0, "name", json_stringn("a\0b", 3), -EINVAL, "kernels[0].name: string contains a NUL");
	REFUSE(NULL, -1, "device", json_string("0123456789012345678901234567890123456789012345678901234567890123"),
	       -EINVAL, "device: string longer than 63 bytes");
	REFUSE("cpu", -1, "dir", json_string("../elsewhere"), -EINVAL, "cpu.dir must name one directory");
	many = json_array();
	for (unsigned i = 0; i <= PHOS_IMAGE_MAX_OBJECTS; i++)
		json_array_append_new(many, json_pack("{s:i,s:i,s:i}", "id", i, "flags", 0, "priority", 0));
	REFUSE(NULL, -1, "streams", many, -E2BIG, "streams: 65537 entries, more than the limit of 65536");
	many = json_array();
	for (int i = 0; i < 9; i++)
		json_array_append_new(many, json_pack("{s:i,s:s}", "fd", i, "key", "pipe:[1]"));
	REFUSE("cpu", -1, "fds", many, -E2BIG, "cpu.fds: 9 entries, more than the limit of 8");

	put_manifest("this is not json", 16);
	expect(__LINE__, -EBADMSG, "invalid JSON at line 1");
	put_manifest(good_text, strlen(good_text) / 2);
	expect(__LINE__, -EBADMSG, "invalid JSON");
	put_manifest("[1,2]", 5);
	expect(__LINE__, -EBADMSG, "not a JSON object");
	put_manifest("{\"magic\":\"a\",\"magic\":\"b\"}", 25);
	expect(__LINE__, -EBADMSG, "duplicate");
	PATHF(path, "%s/manifest.json", good);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)PHOS_IMAGE_MAX_MANIFEST + 1) == 0, "sparse manifest");
	close(fd);
	expect(__LINE__, -E2BIG, "manifest.json is 268435457 bytes, more than the limit");
	CHECK(unlink(path) == 0, "unlink manifest");
	expect(__LINE__, -ENOENT, "no manifest.json");
	put_manifest(good_text, strlen(good_text));

	/* the files */
	PATHF(path, "%s/gpu.data", good);
	CHECK(truncate(path, 2 * MiB) == 0, "truncate gpu.data");
	expect(__LINE__, -EBADMSG, "gpu.data is truncated: 2097152 bytes, buffer 5 needs");
	/* every item is there, only the padding after the last is cut */
	CHECK(truncate(path, (off_t)data_bytes - 1) == 0, "truncate gpu.data");
	expect(__LINE__, -EBADMSG, "gpu.data is truncated: ");
	expect(__LINE__, -EBADMSG, " bytes, manifest needs ");
	CHECK(rename(path, strcat(strcpy(path2, path), ".x")) == 0, "hide gpu.data");
	expect(__LINE__, -ENOENT, "gpu.data: No such file");
	CHECK(rename(path2, path) == 0 && truncate(path, (off_t)data_bytes + 1) == 0, "restore gpu.data");
	expect(__LINE__, 0, "");

	PATHF(path, "%s/modules/%s.fatbin", good, module_hash);
	CHECK(rename(path, strcat(strcpy(path2, path), ".x")) == 0, "hide module");
	expect(__LINE__, -ENOENT, "module 11 missing: modules/");
	CHECK(rename(path2, path) == 0, "restore module");
	fd = open(path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1, "grow module");
	close(fd);
	expect(__LINE__, -EBADMSG, ".fatbin has 3334 bytes, manifest says 3333");
	CHECK(truncate(path, 3333) == 0, "restore module");
	PATHF(path, "%s/cpu", good);
	CHECK(rename(path, strcat(strcpy(path2, path), ".x")) == 0, "hide cpu");
	expect(__LINE__, -ENOENT, "cpu image missing: ");
	CHECK(rename(path2, path) == 0, "restore cpu");
	expect(__LINE__, 0, "");
}

/* Random damage to a good manifest: refused with a reason, or read whole;
 * never a crash (ASan/valgrind runs watch the memory side). */
/* phos_image_parse: the manifest text alone (a pulled snapshot's, before its files). */
static void test_parse(void)
{
	struct phos_image *img = NULL, *ref = NULL;
	char err[512] = "", *newer;
	int r;

	if (!good_text)
		return;
	r = phos_image_parse(good_text, strlen(good_text), &img, err, sizeof(err));
	CHECK(r == 0 && img, "parse: %d %s", r, err);
	CHECK(phos_image_read(good, &ref, err, sizeof(err)) == 0, "read: %s", err);
	if (img && ref) {
		CHECK(img->nbufs == ref->nbufs && img->nmodules == ref->nmodules && img->ncpu_files == ref->ncpu_files &&
		      img->data_bytes == ref->data_bytes, "parse and read agree on the counts");
		for (uint32_t i = 0; i < img->nbufs && i < ref->nbufs; i++)
			CHECK(!memcmp(&img->bufs[i], &ref->bufs[i], sizeof(img->bufs[i])), "buffer %u agrees", i);
	}
	phos_image_free(img);
	phos_image_free(ref);
	img = NULL;
	r = phos_image_parse(good_text, strlen(good_text) / 2, &img, err, sizeof(err));
	CHECK(r == -EBADMSG && !img, "a cut manifest: %d %s", r, err);
	r = phos_image_parse(good_text, (size_t)PHOS_IMAGE_MAX_MANIFEST + 1, &img, err, sizeof(err));
	CHECK(r == -E2BIG && !img && strstr(err, "limit"), "an oversized manifest: %d %s", r, err);
	newer = strdup(good_text);
	{
		char *m = newer ? strstr(newer, "\"major\":") : NULL;

		if (m)
			m += strspn(m + 8, " ") + 8;
		CHECK(m && *m == '1', "the manifest names its major");
		if (m && *m == '1') {
			*m = '2';
			r = phos_image_parse(newer, strlen(newer), &img, err, sizeof(err));
			CHECK(r == -EPROTONOSUPPORT && !img && strstr(err, "newer"), "a newer major: %d %s", r, err);
		}
	}
	free(newer);
}

static void test_fuzz(void)
{
	size_t len = strlen(good_text);
	char *text = malloc(len + 1);
	int refused = 0;

	for (int iter = 0; iter < 1000; iter++) {
		struct phos_image *img = NULL;
		size_t n = len;
		char err[512] = "";
		int r;

		memcpy(text, good_text, len + 1);
		for (int k = 0, flips = 1 + (int)(rnd() % 4); k < flips; k++) {
			size_t at = rnd() % len;

			text[at] = "0123456789{}[]\",:-xe \\"[rnd() % 22];
		}
		if (rnd() % 4 == 0)
			n = rnd() % len;
		put_manifest(text, n);
		r = phos_image_read(good, &img, err, sizeof(err));
		CHECK(r == 0 ? img != NULL : (!img && err[0] && !strchr(err, '\n')),
		      "iteration %d: %d \"%s\"", iter, r, err);
		refused += r < 0;
		phos_image_free(img);
	}
	CHECK(refused > 500, "only %d of 1000 damaged manifests refused", refused);
	put_manifest(good_text, len);
	free(text);
}

static void test_limits_and_writer(void)
{
	struct phos_image *img = phos_image_new();
	struct phos_image_buf b = { .addr = ARENA, .size = 8192, .id = 1 };
	char dir[PATH_MAX], path[PATH_MAX], err[256];
	int r = 0;

	for (unsigned i = 0; i < PHOS_IMAGE_MAX_OBJECTS && r == 0; i++)
		r = phos_image_add_event(img, &(struct phos_image_event){ i, 0, 0 });
	CHECK(r == 0 && img->nevents == PHOS_IMAGE_MAX_OBJECTS, "events up to the limit");
	CHECK(phos_image_add_event(img, &(struct phos_image_event){ 0, 0, 0 }) == -E2BIG, "past the limit");
	CHECK(phos_image_add_func(img, 1, 1, NULL) == -EINVAL, "NULL name");
	phos_image_free(img);
	phos_image_free(NULL);

	/* The writer refuses what a reader would refuse. */
	img = phos_image_new();
	img->arena_base = ARENA;
	img->arena_size = 1ull << 30;
	img->data_bytes = 16384;
	img->gpu_bytes = 16384;
	strcpy(img->criu_dir, "cpu");
	phos_image_add_buf(img, &b);
	b.addr = ARENA + 4096;
	b.id = 2;
	b.offset = 8192;
	phos_image_add_buf(img, &b);
	PATHF(dir, "%s/writer", base);
	CHECK(mkdir(dir, 0755) == 0, "mkdir");
	CHECK(phos_image_write_manifest(dir, img) == -EINVAL, "overlapping buffers written");
	img->bufs[1].addr = ARENA + 8192;
	CHECK(phos_image_write_manifest(dir, img) == 0, "valid image refused");
	img->created = -5;
	img->bufs[0].hash = ~0ull; /* full 64 bits survive */
	CHECK(phos_image_write_manifest(dir, img) == 0, "rewrite");
	phos_image_free(img);
	img = NULL;
	PATHF(path, "%s/cpu", dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir cpu");
	PATHF(path, "%s/gpu.data", dir);
	write_file(path, "", 0);
	CHECK(truncate(path, 16384) == 0, "gpu.data");
	CHECK(phos_image_read(dir, &img, err, sizeof(err)) == 0, "read: %s", err);
	CHECK(img && img->created == -5 && img->bufs[0].hash == ~0ull, "64-bit values");
	phos_image_free(img);
	phos_image_dir_abort(dir); /* not a temporary: left alone */
	CHECK(exists(dir), "abort removed a non-temporary directory");
}

/* Runs first, in a child, so that PHOS_FAULT is parsed there before any
 * phos_fault call of this process. */
static void test_commit_fault(void)
{
	char final[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
	struct sample s;
	int status, r;
	pid_t pid;

	PATHF(final, "%s/faulty", base);
	pid = fork();
	if (pid == 0) {
		setenv("PHOS_FAULT", "snapshot_commit", 1);
		CHECK(mkdir(final, 0755) == 0, "mkdir");
		PATHF(path, "%s/old", final);
		write_file(path, "old", 3);
		sample_build(&s, "faulty");
		CHECK(phos_image_dir_begin(final, tmp, sizeof(tmp)) == 0, "begin");
		sample_write(&s, tmp);
		r = phos_image_dir_commit(tmp, final);
		CHECK(r == -EIO, "commit under fault: %d", r);
		CHECK(exists(path) && exists(tmp), "old snapshot or temporary gone");
		phos_image_dir_abort(tmp);
		CHECK(!exists(tmp), "abort left %s", tmp);
		phos_image_dir_abort(tmp); /* gone already: fine */
		sample_commit(&s, final); /* the point fails once */
		CHECK(!exists(path), "old snapshot still there after a commit");
		sample_free(&s);
		_exit(failures ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0, "fault child failed");
}

static int count_tmps(const char *parent, const char *prefix)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	char want[PATH_MAX];
	int n = 0;

	PATHF(want, "%s.tmp-", prefix);
	while (d && (de = readdir(d)))
		n += strncmp(de->d_name, want, strlen(want)) == 0;
	if (d)
		closedir(d);
	return d ? n : -1;
}

static void test_commit(void)
{
	char final[PATH_MAX], tmp[PATH_MAX], path[PATH_MAX], dead_tmp[PATH_MAX], *text;
	struct phos_image *img = NULL;
	struct sample s;
	char err[256];
	pid_t pid;
	int r;

	/* replacing an existing snapshot */
	PATHF(final, "%s/snap", base);
	sample_build(&s, "second");
	sample_commit(&s, final);
	sample_free(&s);
	r = phos_image_read(final, &img, err, sizeof(err));
	CHECK(r == 0 && !strcmp(img->function, "second"), "replaced snapshot: %d %s", r, err);
	phos_image_free(img);
	PATHF(path, "%s/cpu/pages-1.img", final);
	text = read_text(path);
	CHECK(!strcmp(text, "second"), "cpu image not replaced: %s", text);
	free(text);
	CHECK(count_tmps(base, "snap") == 0, "temporaries left beside %s", final);

	CHECK(phos_image_read("/nonexistent/dir", &img, err, sizeof(err)) == -ENOENT &&
	      strstr(err, "no manifest.json"), "missing directory: %s", err);
	CHECK(phos_image_dir_begin("/nonexistent/dir/snap", tmp, sizeof(tmp)) == -ENOENT, "no parent");
	CHECK(phos_image_dir_begin(final, tmp, 8) == -ENAMETOOLONG, "short buffer");
	CHECK(phos_image_dir_begin(final, tmp, sizeof(tmp)) == 0, "begin");
	CHECK(strncmp(tmp, final, strlen(final)) == 0 && strstr(tmp, ".tmp-"), "tmp name %s", tmp);

	/* sweep: a temporary of a dead process goes, a live one stays */
	pid = fork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	PATHF(dead_tmp, "%s.tmp-%d-abcdef", final, (int)pid);
	CHECK(mkdir(dead_tmp, 0700) == 0, "mkdir dead");
	PATHF(path, "%s/sub", dead_tmp);
	CHECK(mkdir(path, 0700) == 0, "mkdir sub");
	PATHF(path, "%s/sub/file", dead_tmp);
	write_file(path, "x", 1);
	PATHF(path, "%s.tmpfoo", final);
	CHECK(mkdir(path, 0700) == 0, "mkdir other");
	r = phos_image_dir_sweep(final);
	CHECK(r == 1, "sweep removed %d", r);
	CHECK(!exists(dead_tmp) && exists(tmp) && exists(path) && exists(final), "sweep removed the wrong ones");
	rmdir(path);
	phos_image_dir_abort(tmp);
	CHECK(!exists(tmp), "abort");
}

/* Flips one byte of path at off. */
static void flip_byte(const char *path, off_t off)
{
	unsigned char b;
	int fd = open(path, O_RDWR);

	CHECK(fd >= 0 && pread(fd, &b, 1, off) == 1, "read %s", path);
	b ^= 0x01;
	CHECK(pwrite(fd, &b, 1, off) == 1, "write %s", path);
	close(fd);
}

/* Format 1.1: the CRIU image's files are checksummed in the manifest and
 * verified; a 1.0 manifest (no list) still reads and passes. */
static void test_cpu_checksums(void)
{
	struct phos_image *got = NULL, *again = NULL;
	char dir[PATH_MAX], path[PATH_MAX], err[512], *text, *p;
	struct sample s;
	int r;

	PATHF(dir, "%s/cpusum", base);
	CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
	sample_build(&s, "cpusum");
	sample_write(&s, dir);
	PATHF(path, "%s/cpu/dump.log", dir);
	write_file(path, "a log", 5);

	/* as a 1.0 reader wrote it: no cpu.files */
	PATHF(path, "%s/manifest.json", dir);
	text = read_text(path);
	p = text ? strstr(text, "\"minor\":" PHOS_STR(PHOS_IMAGE_MINOR)) : NULL;
	CHECK(p, "minor %d in %s", PHOS_IMAGE_MINOR, path);
	if (p) {
		p[8] = '0';
		write_file(path, text, strlen(text));
	}
	free(text);
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == 0 && got && got->minor == 0 && got->ncpu_files == 0, "1.0 manifest: %d %s", r, err);
	if (r)
		goto out;
	CHECK(phos_image_cpu_verify(dir, got, err, sizeof(err)) == 0, "a 1.0 image passes: %s", err);

	r = phos_image_cpu_hash(dir, got, err, sizeof(err));
	CHECK(r == 0 && got->ncpu_files == 2, "cpu_hash: %d %u %s", r, got->ncpu_files, err);
	CHECK(got->ncpu_files == 2 && !strcmp(got->cpu_files[0].name, "core-1.img") &&
	      got->cpu_files[0].size == 4 && got->cpu_files[0].hash == phos_image_hash("core", 4) &&
	      !strcmp(got->cpu_files[1].name, "pages-1.img") && got->cpu_files[1].size == strlen("cpusum"),
	      "files, sizes and hashes (logs left out)");
	CHECK(phos_image_write_manifest(dir, got) == 0, "rewrite the manifest");
	r = phos_image_read(dir, &again, err, sizeof(err));
	CHECK(r == 0 && again->minor == PHOS_IMAGE_MINOR && again->ncpu_files == 2 &&
	      again->cpu_files[1].hash == got->cpu_files[1].hash, "1.1 round trip: %d %s", r, err);
	if (r)
		goto out;
	CHECK(phos_image_cpu_verify(dir, again, err, sizeof(err)) == 0, "intact: %s", err);

	PATHF(path, "%s/cpu/pages-1.img", dir);
	flip_byte(path, 3);
	r = phos_image_cpu_verify(dir, again, err, sizeof(err));
	CHECK(r == -EBADMSG && strstr(err, "checksum mismatch in cpu/pages-1.img"), "flipped: %d %s", r, err);
	flip_byte(path, 3);
	CHECK(phos_image_cpu_verify(dir, again, err, sizeof(err)) == 0, "flipped back: %s", err);

	PATHF(path, "%s/cpu/core-1.img", dir);
	write_file(path, "cor", 3);
	r = phos_image_cpu_verify(dir, again, err, sizeof(err));
	CHECK(r == -EBADMSG && strstr(err, "cpu/core-1.img is 3 bytes"), "truncated: %d %s", r, err);
	unlink(path);
	r = phos_image_cpu_verify(dir, again, err, sizeof(err));
	CHECK(r == -EBADMSG && strstr(err, "cpu/core-1.img: missing"), "missing: %d %s", r, err);
	write_file(path, "core", 4);

	PATHF(path, "%s/cpu/extra.img", dir);
	write_file(path, "x", 1);
	r = phos_image_cpu_verify(dir, again, err, sizeof(err));
	CHECK(r == -EBADMSG && strstr(err, "cpu/extra.img is not in the manifest"), "extra: %d %s", r, err);
	unlink(path);
	CHECK(phos_image_cpu_verify(dir, again, err, sizeof(err)) == 0, "intact again: %s", err);

	/* a name that leaves cpu/ is refused by the reader */
	snprintf(again->cpu_files[0].name, sizeof(again->cpu_files[0].name), "../gpu.data");
	CHECK(phos_image_write_manifest(dir, again) == 0, "write a bad name");
	phos_image_free(got);
	got = NULL;
	r = phos_image_read(dir, &got, err, sizeof(err));
	CHECK(r == -EINVAL && strstr(err, "cpu.files[0]"), "bad name refused: %d %s", r, err);
out:
	phos_image_free(got);
	phos_image_free(again);
	sample_free(&s);
}

static void cleanup(void)
{
	char cmd[PATH_MAX + 16];

	PATHF(cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
}

int main(void)
{
	const char *t = getenv("TMPDIR");

	phos_log_init("test_image", PHOS_LOG_OFF); /* the refusals below are expected */
	PATHF(base, "%s/phos-image-test-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	test_commit_fault();
	test_hash();
	PATHF(good, "%s/snap", base);
	test_roundtrip(good);
	test_checkpoint_fields();
	test_arrays();
	test_refusals();
	test_parse();
	test_fuzz();
	free(good_text);
	test_limits_and_writer();
	test_commit();
	test_cpu_checksums();
	cleanup();
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
