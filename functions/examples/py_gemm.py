#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""py_gemm: a Python function that computes on the GPU through cuBLAS, by
ctypes (issue 16's Python contract, without PyTorch): init uploads two N x N
matrices made from a seed and creates a cuBLAS handle; each request
{"scale": s} computes C = s A B with cublasSgemm, reads C back and answers
{"n": N, "scale": s, "checksum": sum of C, "max_abs_err": E, "tol": T,
"ok": E <= T}, E against a Python reference in double.

    py_gemm.py [--n N (32)] [--seed S (1)]

The phos_fn module is found beside the repository's preload/ (or on
PYTHONPATH).
"""
import argparse
import ctypes
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=32)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
if not 1 <= a.n <= 1024:
    sys.exit("py_gemm: --n must be 1..1024")
N = a.n

cudart = ctypes.CDLL("libcudart.so.13")
cublas = ctypes.CDLL("libcublas.so.13")
F = ctypes.c_float


def ck(what, r):
    if r != 0:
        raise RuntimeError(f"{what} failed with status {r}")


rng = random.Random(a.seed)
A = [rng.uniform(-1, 1) for _ in range(N * N)]   # column-major: A[i + k N]
B = [rng.uniform(-1, 1) for _ in range(N * N)]
host = (F * (N * N))()
dev = {}
for name, vals in (("A", A), ("B", B), ("C", None)):
    p = ctypes.c_void_p()
    ck("cudaMalloc", cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(N * N * 4)))
    dev[name] = p
    if vals is not None:
        host[:] = vals
        ck("cudaMemcpy", cudart.cudaMemcpy(p, host, ctypes.c_size_t(N * N * 4), 1))   # host to device
A = list((F * (N * N))(*A))   # the reference uses the float32 values the GPU holds
B = list((F * (N * N))(*B))
handle = ctypes.c_void_p()
ck("cublasCreate", cublas.cublasCreate_v2(ctypes.byref(handle)))


def handle_request(req):
    scale = float(req.json().get("scale", 1.0))
    alpha, beta = F(scale), F(0.0)
    ck("cublasSgemm", cublas.cublasSgemm_v2(handle, 0, 0, N, N, N, ctypes.byref(alpha), dev["A"], N, dev["B"], N,
                                             ctypes.byref(beta), dev["C"], N))
    out = (F * (N * N))()
    ck("cudaMemcpy", cudart.cudaMemcpy(out, dev["C"], ctypes.c_size_t(N * N * 4), 2))   # device to host
    err = 0.0
    for j in range(N):
        for i in range(N):
            ref = scale * sum(A[i + k * N] * B[k + j * N] for k in range(N))
            err = max(err, abs(out[i + j * N] - ref))
    tol = 1e-4 * N * max(1.0, abs(scale))
    return {"n": N, "scale": scale, "checksum": sum(out), "max_abs_err": err, "tol": tol, "ok": err <= tol}


sys.exit(phos_fn.serve(handle_request))
