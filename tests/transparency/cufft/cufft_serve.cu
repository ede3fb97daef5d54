// SPDX-License-Identifier: MIT
// cuFFT as its users call it (issue 38): plans of every form made at init,
// before phos_fn_serve (so a snapshot restored in a new executor must make
// them again), and each request runs them all on fresh data, every answer
// checked against a direct DFT computed here in double:
//
//   c2c      cufftPlan1d C2C n 64 on a stream: forward, then inverse in
//            place (the round trip is 64 x)
//   r2c      cufftPlan1d R2C and C2R n 30: 16 values, then back (30 x)
//   c2c_2d   cufftPlan2d C2C 8 x 12 on the default stream
//   c2c_3d   cufftPlan3d C2C 4 x 5 x 6, in place
//   many     cufftPlanMany C2C n 12, batch 3, input stride 2 and dist 30,
//            output dist 16: the gaps between outputs are left alone
//   z2z      cufftCreate, cufftSetAutoAllocation(0), cufftMakePlan1d Z2Z
//            n 40, a work area of the size it said (as PyTorch does),
//            forward and inverse
//   d2z_2d   cufftPlan2d D2Z and Z2D 6 x 10 in place (rows padded to 12)
//   xt       cufftXtMakePlanMany R2C n 16, batch 2, basic layout, and C2R
//            with embeds given (PyTorch's torch.fft.rfft and irfft),
//            cufftXtExec
//
// argv[1] "pointers": the buffers' device addresses as JSON on stderr (the
// test holds the executor's read/write sets against them); "refused":
// instead of serving, calls what phos-fn does not forward (a stub, and a
// half-precision plan) and prints their statuses as JSON; "loop N": no
// serving, N requests' work in a row, a JSON line every 100 and a last one
// with the count of wrong answers (a checkpoint taken in the middle of its
// cuFFT calls must restore a copy whose every call still finds its plan).
// At start it says
// on stderr which file serves cufftCreate ("cufft: PATH"): the build gives
// the program an RPATH to a copy of NVIDIA's library in nvidia/cu13/lib
// beside it, as PyTorch's wheels are laid out.
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <vector>

#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>
#include <phos/fn.h>

#define CK(call)                                                                                          \
	do {                                                                                              \
		cudaError_t e_ = (call);                                                                  \
		if (e_ != cudaSuccess) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                          \
		}                                                                                         \
	} while (0)
#define FK(call)                                                                                  \
	do {                                                                                      \
		cufftResult s_ = (call);                                                          \
		if (s_ != CUFFT_SUCCESS) {                                                        \
			fprintf(stderr, "%s:%d: %s: cufftResult %d\n", __FILE__, __LINE__, #call, (int)s_); \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

typedef std::complex<double> cd;

// The direct DFT of the packed array x (dims n[0..rank), slowest first),
// dimension by dimension, sign -1 forward, +1 inverse, unnormalized.
static std::vector<cd> dft(std::vector<cd> x, const std::vector<int> &n, int sign)
{
	int rank = (int)n.size();

	for (int k = 0; k < rank; k++) {
		long stride = 1, outer = 1, len = n[k];

		for (int i = k + 1; i < rank; i++)
			stride *= n[i];
		for (int i = 0; i < k; i++)
			outer *= n[i];
		std::vector<cd> line(len), out(len);
		for (long o = 0; o < outer; o++)
			for (long i = 0; i < stride; i++) {
				cd *base = &x[o * len * stride + i];

				for (long j = 0; j < len; j++)
					line[j] = base[j * stride];
				for (long j = 0; j < len; j++) {
					cd s = 0;

					for (long m = 0; m < len; m++)
						s += line[m] * std::polar(1.0, sign * 2 * M_PI * (double)(j * m % len) / len);
					out[j] = s;
				}
				for (long j = 0; j < len; j++)
					base[j * stride] = out[j];
			}
	}
	return x;
}

// Fresh data for request r: values in [-1, 1], different each request.
static double datum(int r, int i, int which)
{
	return std::sin(0.37 * i + 1.3 * r + 0.71 * which) * std::cos(0.11 * i * which + r);
}

static bool near(cd got, cd want, double tol, const char *what, int i, char *why, size_t len)
{
	if (std::abs(got - want) <= tol)
		return true;
	snprintf(why, len, "%s[%d]: got (%g, %g), want (%g, %g)", what, i, got.real(), got.imag(), want.real(),
		 want.imag());
	return false;
}

// float / double tolerances, scaled by the transform's size
static double ftol(int n) { return 2e-5 * n; }
static double dtol(int n) { return 1e-11 * n; }

struct state {
	cudaStream_t s;
	cufftHandle c2c, r2c, c2r, c2c_2d, c2c_3d, many, z2z, d2z, z2d, xt_r2c, xt_c2r;
	cufftComplex *a, *b, *c, *u, *v, *w, *mi, *mo, *go;
	cufftReal *r, *r2, *gi, *gr;
	cufftDoubleComplex *za, *zb, *zc;
	double *f;
	void *work;
	int requests, failures;
};

static void to_float(std::vector<cufftComplex> &h, const std::vector<cd> &x)
{
	for (size_t i = 0; i < x.size(); i++)
		h[i] = make_cuComplex((float)x[i].real(), (float)x[i].imag());
}

static cd of(cufftComplex c) { return cd(c.x, c.y); }
static cd of(cufftDoubleComplex c) { return cd(c.x, c.y); }

static bool run_c2c(struct state *st, int r, char *why, size_t len)
{
	const int n = 64;
	std::vector<cd> x(n);
	std::vector<cufftComplex> h(n);

	for (int i = 0; i < n; i++)
		x[i] = cd(datum(r, i, 1), datum(r, i, 2));
	to_float(h, x);
	CK(cudaMemcpyAsync(st->a, h.data(), n * sizeof(h[0]), cudaMemcpyHostToDevice, st->s));
	FK(cufftExecC2C(st->c2c, st->a, st->b, CUFFT_FORWARD));
	std::vector<cufftComplex> got(n), back(n);
	CK(cudaMemcpyAsync(got.data(), st->b, n * sizeof(h[0]), cudaMemcpyDeviceToHost, st->s));
	FK(cufftExecC2C(st->c2c, st->b, st->b, CUFFT_INVERSE));
	CK(cudaMemcpyAsync(back.data(), st->b, n * sizeof(h[0]), cudaMemcpyDeviceToHost, st->s));
	CK(cudaStreamSynchronize(st->s));
	std::vector<cd> want = dft(x, { n }, -1);
	for (int i = 0; i < n; i++)
		if (!near(of(got[i]), want[i], ftol(n), "c2c forward", i, why, len) ||
		    !near(of(back[i]), (double)n * x[i], ftol(n), "c2c round trip", i, why, len))
			return false;
	return true;
}

static bool run_r2c(struct state *st, int r, char *why, size_t len)
{
	const int n = 30, h = n / 2 + 1;
	std::vector<float> x(n), back(n);
	std::vector<cd> xc(n);
	std::vector<cufftComplex> got(h);

	for (int i = 0; i < n; i++) {
		x[i] = (float)datum(r, i, 3);
		xc[i] = x[i];
	}
	CK(cudaMemcpy(st->r, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
	FK(cufftExecR2C(st->r2c, st->r, st->c));
	CK(cudaMemcpy(got.data(), st->c, h * sizeof(got[0]), cudaMemcpyDeviceToHost));
	FK(cufftExecC2R(st->c2r, st->c, st->r2));
	CK(cudaMemcpy(back.data(), st->r2, n * sizeof(float), cudaMemcpyDeviceToHost));
	std::vector<cd> want = dft(xc, { n }, -1);
	for (int i = 0; i < h; i++)
		if (!near(of(got[i]), want[i], ftol(n), "r2c", i, why, len))
			return false;
	for (int i = 0; i < n; i++)
		if (!near(back[i], (double)n * x[i], ftol(n), "c2r", i, why, len))
			return false;
	return true;
}

static bool run_c2c_2d(struct state *st, int r, char *why, size_t len)
{
	const int n0 = 8, n1 = 12, n = n0 * n1;
	std::vector<cd> x(n);
	std::vector<cufftComplex> h(n), got(n);

	for (int i = 0; i < n; i++)
		x[i] = cd(datum(r, i, 4), datum(r, i, 5));
	to_float(h, x);
	CK(cudaMemcpy(st->u, h.data(), n * sizeof(h[0]), cudaMemcpyHostToDevice));
	FK(cufftExecC2C(st->c2c_2d, st->u, st->v, CUFFT_FORWARD));
	CK(cudaMemcpy(got.data(), st->v, n * sizeof(h[0]), cudaMemcpyDeviceToHost));
	std::vector<cd> want = dft(x, { n0, n1 }, -1);
	for (int i = 0; i < n; i++)
		if (!near(of(got[i]), want[i], ftol(n), "c2c 2d", i, why, len))
			return false;
	return true;
}

static bool run_c2c_3d(struct state *st, int r, char *why, size_t len)
{
	const int n0 = 4, n1 = 5, n2 = 6, n = n0 * n1 * n2;
	std::vector<cd> x(n);
	std::vector<cufftComplex> h(n), got(n);

	for (int i = 0; i < n; i++)
		x[i] = cd(datum(r, i, 12), datum(r, i, 13));
	to_float(h, x);
	CK(cudaMemcpy(st->w, h.data(), n * sizeof(h[0]), cudaMemcpyHostToDevice));
	FK(cufftExecC2C(st->c2c_3d, st->w, st->w, CUFFT_FORWARD));
	CK(cudaMemcpy(got.data(), st->w, n * sizeof(h[0]), cudaMemcpyDeviceToHost));
	std::vector<cd> want = dft(x, { n0, n1, n2 }, -1);
	for (int i = 0; i < n; i++)
		if (!near(of(got[i]), want[i], ftol(n), "c2c 3d", i, why, len))
			return false;
	return true;
}

// many: n 12, batch 3; input element j of transform b at b * 30 + 2 j,
// output at b * 16 + j; the other output elements keep a sentinel.
enum { M_N = 12, M_BATCH = 3, M_IDIST = 30, M_ISTRIDE = 2, M_ODIST = 16, M_IN = 100, M_OUT = 64 };

static bool run_many(struct state *st, int r, char *why, size_t len)
{
	std::vector<cufftComplex> in(M_IN), out(M_OUT, make_cuComplex(7.0f, -7.0f));

	for (int i = 0; i < M_IN; i++)
		in[i] = make_cuComplex((float)datum(r, i, 6), (float)datum(r, i, 7));
	CK(cudaMemcpy(st->mi, in.data(), M_IN * sizeof(in[0]), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(st->mo, out.data(), M_OUT * sizeof(out[0]), cudaMemcpyHostToDevice));
	FK(cufftExecC2C(st->many, st->mi, st->mo, CUFFT_FORWARD));
	CK(cudaMemcpy(out.data(), st->mo, M_OUT * sizeof(out[0]), cudaMemcpyDeviceToHost));
	for (int b = 0; b < M_BATCH; b++) {
		std::vector<cd> x(M_N);

		for (int j = 0; j < M_N; j++)
			x[j] = of(in[b * M_IDIST + j * M_ISTRIDE]);
		std::vector<cd> want = dft(x, { M_N }, -1);
		for (int j = 0; j < M_N; j++)
			if (!near(of(out[b * M_ODIST + j]), want[j], ftol(M_N), "many", b * M_ODIST + j, why, len))
				return false;
	}
	for (int i = 0; i < M_OUT; i++)
		if ((i % M_ODIST >= M_N || i >= M_BATCH * M_ODIST) &&
		    !near(of(out[i]), cd(7, -7), 0, "many: a gap between outputs", i, why, len))
			return false;
	return true;
}

static bool run_z2z(struct state *st, int r, char *why, size_t len)
{
	const int n = 40;
	std::vector<cufftDoubleComplex> h(n), got(n), back(n);
	std::vector<cd> x(n);

	for (int i = 0; i < n; i++) {
		x[i] = cd(datum(r, i, 8), datum(r, i, 9));
		h[i] = make_cuDoubleComplex(x[i].real(), x[i].imag());
	}
	CK(cudaMemcpy(st->za, h.data(), n * sizeof(h[0]), cudaMemcpyHostToDevice));
	FK(cufftExecZ2Z(st->z2z, st->za, st->zb, CUFFT_FORWARD));
	FK(cufftExecZ2Z(st->z2z, st->zb, st->zc, CUFFT_INVERSE));
	CK(cudaMemcpy(got.data(), st->zb, n * sizeof(h[0]), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(back.data(), st->zc, n * sizeof(h[0]), cudaMemcpyDeviceToHost));
	std::vector<cd> want = dft(x, { n }, -1);
	for (int i = 0; i < n; i++)
		if (!near(of(got[i]), want[i], dtol(n), "z2z forward", i, why, len) ||
		    !near(of(back[i]), (double)n * x[i], dtol(n), "z2z round trip", i, why, len))
			return false;
	return true;
}

// d2z_2d: 6 x 10 doubles in rows of 12 (cuFFT's in-place padding), 6 x 6
// complex values in the same bytes after the forward transform.
enum { D_N0 = 6, D_N1 = 10, D_H = D_N1 / 2 + 1, D_ROW = 2 * D_H };

static bool run_d2z(struct state *st, int r, char *why, size_t len)
{
	std::vector<double> h(D_N0 * D_ROW, 0.0), back(D_N0 * D_ROW);
	std::vector<cufftDoubleComplex> got(D_N0 * D_H);
	std::vector<cd> x(D_N0 * D_N1);

	for (int i = 0; i < D_N0; i++)
		for (int j = 0; j < D_N1; j++) {
			x[i * D_N1 + j] = datum(r, i * D_N1 + j, 10);
			h[i * D_ROW + j] = x[i * D_N1 + j].real();
		}
	CK(cudaMemcpy(st->f, h.data(), h.size() * sizeof(double), cudaMemcpyHostToDevice));
	FK(cufftExecD2Z(st->d2z, st->f, (cufftDoubleComplex *)st->f));
	CK(cudaMemcpy(got.data(), st->f, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost));
	FK(cufftExecZ2D(st->z2d, (cufftDoubleComplex *)st->f, st->f));
	CK(cudaMemcpy(back.data(), st->f, back.size() * sizeof(double), cudaMemcpyDeviceToHost));
	std::vector<cd> want = dft(x, { D_N0, D_N1 }, -1);
	for (int i = 0; i < D_N0; i++)
		for (int k = 0; k < D_H; k++)
			if (!near(of(got[i * D_H + k]), want[i * D_N1 + k], dtol(D_N0 * D_N1), "d2z 2d", i * D_H + k,
				  why, len))
				return false;
	for (int i = 0; i < D_N0; i++)
		for (int j = 0; j < D_N1; j++)
			if (!near(back[i * D_ROW + j], (double)(D_N0 * D_N1) * x[i * D_N1 + j], dtol(D_N0 * D_N1),
				  "z2d 2d", i * D_ROW + j, why, len))
				return false;
	return true;
}

// xt: 2 transforms of 16 reals, 9 complex values each, and back
enum { X_N = 16, X_H = X_N / 2 + 1, X_BATCH = 2 };

static bool run_xt(struct state *st, int r, char *why, size_t len)
{
	std::vector<float> x(X_N * X_BATCH), back(X_N * X_BATCH);
	std::vector<cufftComplex> got(X_H * X_BATCH);

	for (int i = 0; i < X_N * X_BATCH; i++)
		x[i] = (float)datum(r, i, 11);
	CK(cudaMemcpy(st->gi, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
	FK(cufftXtExec(st->xt_r2c, st->gi, st->go, CUFFT_FORWARD));
	CK(cudaMemcpy(got.data(), st->go, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost));
	FK(cufftXtExec(st->xt_c2r, st->go, st->gr, CUFFT_INVERSE));
	CK(cudaMemcpy(back.data(), st->gr, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
	for (int b = 0; b < X_BATCH; b++) {
		std::vector<cd> xb(X_N);

		for (int j = 0; j < X_N; j++)
			xb[j] = x[b * X_N + j];
		std::vector<cd> want = dft(xb, { X_N }, -1);
		for (int k = 0; k < X_H; k++)
			if (!near(of(got[b * X_H + k]), want[k], ftol(X_N), "xt r2c", b * X_H + k, why, len))
				return false;
		for (int j = 0; j < X_N; j++)
			if (!near(back[b * X_N + j], (double)X_N * xb[j], ftol(X_N), "xt c2r", b * X_N + j, why, len))
				return false;
	}
	return true;
}

static bool run_all(struct state *st, int r, char *why, size_t len)
{
	return run_c2c(st, r, why, len) && run_r2c(st, r, why, len) && run_c2c_2d(st, r, why, len) &&
	       run_c2c_3d(st, r, why, len) && run_many(st, r, why, len) && run_z2z(st, r, why, len) &&
	       run_d2z(st, r, why, len) && run_xt(st, r, why, len);
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char why[256] = "", out[512];
	bool ok;

	(void)req;
	st->requests++;
	ok = run_all(st, st->requests, why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "cufft_serve: %s\n", why);
		st->failures++;
	}
	snprintf(out, sizeof(out), "{\"ok\": %s, \"requests\": %d, \"why\": \"%s\"}", ok ? "true" : "false",
		 st->requests, why);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

template <typename T> static T *dev_alloc(size_t n)
{
	void *p;

	CK(cudaMalloc(&p, n * sizeof(T)));
	return (T *)p;
}

static void make_plans(struct state *st)
{
	size_t ws = 0, ws2 = 1, ws3 = 0;

	CK(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking));
	FK(cufftPlan1d(&st->c2c, 64, CUFFT_C2C, 1));
	FK(cufftSetStream(st->c2c, st->s));
	FK(cufftPlan1d(&st->r2c, 30, CUFFT_R2C, 1));
	FK(cufftPlan1d(&st->c2r, 30, CUFFT_C2R, 1));
	FK(cufftPlan2d(&st->c2c_2d, 8, 12, CUFFT_C2C));
	FK(cufftPlan3d(&st->c2c_3d, 4, 5, 6, CUFFT_C2C));
	int n[1] = { M_N }, inembed[1] = { M_N }, onembed[1] = { M_N };
	FK(cufftPlanMany(&st->many, 1, n, inembed, M_ISTRIDE, M_IDIST, onembed, 1, M_ODIST, CUFFT_C2C, M_BATCH));
	// as PyTorch: no automatic work area, one of the size the plan says
	FK(cufftCreate(&st->z2z));
	FK(cufftSetAutoAllocation(st->z2z, 0));
	FK(cufftGetSize1d(st->z2z, 40, CUFFT_Z2Z, 1, &ws3));   // (an estimate: any size)
	FK(cufftMakePlan1d(st->z2z, 40, CUFFT_Z2Z, 1, &ws));
	FK(cufftGetSize(st->z2z, &ws2));
	if (ws2 != ws) {
		fprintf(stderr, "cufftGetSize says %zu, cufftMakePlan1d said %zu\n", ws2, ws);
		exit(1);
	}
	CK(cudaMalloc(&st->work, ws ? ws : 256));
	FK(cufftSetWorkArea(st->z2z, st->work));
	FK(cufftPlan2d(&st->d2z, D_N0, D_N1, CUFFT_D2Z));
	FK(cufftPlan2d(&st->z2d, D_N0, D_N1, CUFFT_Z2D));
	long long xn[1] = { X_N }, cembed[1] = { X_H }, rembed[1] = { X_N };
	FK(cufftCreate(&st->xt_r2c));
	FK(cufftXtMakePlanMany(st->xt_r2c, 1, xn, nullptr, 1, 0, CUDA_R_32F, nullptr, 1, 0, CUDA_C_32F, X_BATCH, &ws,
			       CUDA_C_32F));
	FK(cufftCreate(&st->xt_c2r));
	FK(cufftXtMakePlanMany(st->xt_c2r, 1, xn, cembed, 1, X_H, CUDA_C_32F, rembed, 1, X_N, CUDA_R_32F, X_BATCH, &ws,
			       CUDA_C_32F));

	st->a = dev_alloc<cufftComplex>(64);
	st->b = dev_alloc<cufftComplex>(64);
	st->r = dev_alloc<cufftReal>(30);
	st->c = dev_alloc<cufftComplex>(16);
	st->r2 = dev_alloc<cufftReal>(30);
	st->u = dev_alloc<cufftComplex>(96);
	st->v = dev_alloc<cufftComplex>(96);
	st->w = dev_alloc<cufftComplex>(120);
	st->mi = dev_alloc<cufftComplex>(M_IN);
	st->mo = dev_alloc<cufftComplex>(M_OUT);
	st->za = dev_alloc<cufftDoubleComplex>(40);
	st->zb = dev_alloc<cufftDoubleComplex>(40);
	st->zc = dev_alloc<cufftDoubleComplex>(40);
	st->f = dev_alloc<double>(D_N0 * D_ROW);
	st->gi = dev_alloc<cufftReal>(X_N * X_BATCH);
	st->go = dev_alloc<cufftComplex>(X_H * X_BATCH);
	st->gr = dev_alloc<cufftReal>(X_N * X_BATCH);
}

static void destroy_plans(struct state *st)
{
	cufftHandle all[] = { st->c2c, st->r2c, st->c2r, st->c2c_2d, st->c2c_3d, st->many, st->z2z, st->d2z, st->z2d,
			      st->xt_r2c, st->xt_c2r };

	for (cufftHandle p : all)
		FK(cufftDestroy(p));
}

// What phos-fn does not forward answers CUFFT_NOT_SUPPORTED: a stub (twice:
// its log line comes once), and a plan of half-precision data.
static int refused(void)
{
	cufftHandle p;
	int gpus[1] = { 0 };
	long long n[1] = { 16 };
	size_t ws = 0;

	FK(cufftCreate(&p));
	cufftResult a = cufftXtSetGPUs(p, 1, gpus), b = cufftXtSetGPUs(p, 1, gpus);
	cufftResult h = cufftXtMakePlanMany(p, 1, n, nullptr, 1, 0, CUDA_C_16F, nullptr, 1, 0, CUDA_C_16F, 1, &ws,
					    CUDA_C_16F);
	printf("{\"setgpus\": %d, \"again\": %d, \"half\": %d}\n", (int)a, (int)b, (int)h);
	FK(cufftDestroy(p));
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	Dl_info info;
	int version = 0;

	if (dladdr((void *)cufftCreate, &info) && info.dli_fname)
		fprintf(stderr, "cufft: %s\n", info.dli_fname);
	if (argc > 1 && !strcmp(argv[1], "refused"))
		return refused();
	FK(cufftGetVersion(&version));
	if (version < 12000) {
		fprintf(stderr, "cuFFT 12 needed, got %d\n", version);
		return 1;
	}
	make_plans(&st);
	if (argc > 1 && !strcmp(argv[1], "pointers"))
		fprintf(stderr,
			"pointers {\"a\": %llu, \"b\": %llu, \"r\": %llu, \"c\": %llu, \"r2\": %llu, \"u\": %llu, "
			"\"v\": %llu, \"w\": %llu, \"mi\": %llu, \"mo\": %llu, \"za\": %llu, \"zb\": %llu, "
			"\"zc\": %llu, \"f\": %llu, \"gi\": %llu, \"go\": %llu, \"gr\": %llu}\n",
			(unsigned long long)(uintptr_t)st.a, (unsigned long long)(uintptr_t)st.b,
			(unsigned long long)(uintptr_t)st.r, (unsigned long long)(uintptr_t)st.c,
			(unsigned long long)(uintptr_t)st.r2, (unsigned long long)(uintptr_t)st.u,
			(unsigned long long)(uintptr_t)st.v, (unsigned long long)(uintptr_t)st.w,
			(unsigned long long)(uintptr_t)st.mi,
			(unsigned long long)(uintptr_t)st.mo, (unsigned long long)(uintptr_t)st.za,
			(unsigned long long)(uintptr_t)st.zb, (unsigned long long)(uintptr_t)st.zc,
			(unsigned long long)(uintptr_t)st.f, (unsigned long long)(uintptr_t)st.gi,
			(unsigned long long)(uintptr_t)st.go, (unsigned long long)(uintptr_t)st.gr);
	if (argc > 2 && !strcmp(argv[1], "loop")) {
		int n = atoi(argv[2]);

		for (int i = 1; i <= n; i++) {
			char why[256] = "";

			if (!run_all(&st, i, why, sizeof(why))) {
				fprintf(stderr, "cufft_serve: step %d: %s\n", i, why);
				st.failures++;
			}
			if (i % 100 == 0 || i == n) {
				printf("{\"step\": %d, \"failures\": %d, \"done\": %s}\n", i, st.failures,
				       i == n ? "true" : "false");
				fflush(stdout);
			}
		}
		destroy_plans(&st);
		return st.failures ? 1 : 0;
	}
	int r = phos_fn_serve(handle, &st);

	destroy_plans(&st);
	return r ? r : st.failures ? 1 : 0;   // (a wrong answer fails the run too)
}
