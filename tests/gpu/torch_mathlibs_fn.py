#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A PyTorch function that reaches NVIDIA's math libraries (issue 38), for
tests/gpu/torch_serve.py: natively, under phos-fn run and restored from a
snapshot both ways, its answers must be the same numbers.

Init runs every operation once (cuSOLVER, cuSPARSE and cuFFT handles and
plans exist at the snapshot point, and must be made again after a restore),
then phos_fn.serve. A request {"batch": B (1..16), "seed": s} draws B
matrices from s and answers {"checksum", "head", "ok"} over torch.linalg
(solve, qr, svd, eigh, cholesky), a sparse CSR product, torch.fft and
MultivariateNormal sampling; "ok" says each residual is small.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402
import torch  # noqa: E402

torch.backends.cuda.preferred_linalg_library("cusolver")
dev = torch.device("cuda")


def run(batch, seed):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    n = 24
    a = torch.randn(batch, n, n, device=dev, dtype=torch.float64, generator=g)
    spd = a @ a.transpose(1, 2) + n * torch.eye(n, device=dev, dtype=torch.float64)
    b = torch.randn(batch, n, 2, device=dev, dtype=torch.float64, generator=g)
    x = torch.linalg.solve(a, b)
    q, r = torch.linalg.qr(a)
    sv = torch.linalg.svdvals(a)
    w, v = torch.linalg.eigh(spd)
    chol = torch.linalg.cholesky(spd)
    dense = torch.randn(64, 48, device=dev, generator=g)
    dense[dense.abs() < 1.0] = 0
    m = torch.randn(48, 8, device=dev, generator=g)
    y = dense.to_sparse_csr() @ m
    f = torch.fft.rfft(torch.randn(batch, 64, device=dev, generator=g))
    mvn = torch.distributions.MultivariateNormal(torch.zeros(n, device=dev, dtype=torch.float64), spd[0])
    torch.manual_seed(seed)
    s = mvn.sample((256,))
    parts = [x, r, sv, w, chol, y, f.abs(), s]
    flat = torch.cat([t.double().flatten() for t in parts])
    ok = bool((a @ x - b).abs().max() < 1e-9 and (q @ r - a).abs().max() < 1e-9
              and (spd @ v - v * w.unsqueeze(1)).abs().max() < 1e-8
              and (chol @ chol.transpose(1, 2) - spd).abs().max() < 1e-9
              and torch.allclose(y, dense @ m, rtol=1e-4, atol=1e-4))
    return {"checksum": float(flat.sum()), "head": [float(t) for t in flat[:4]], "ok": ok, "batch": batch}


def handle(req):
    body = req.json()
    batch, seed = int(body.get("batch", 4)), int(body.get("seed", 0))
    if not 1 <= batch <= 16:
        return 400, {"error": "batch must be 1..16"}
    return run(batch, seed)


run(8, 0)   # every library's handles and plans exist at the snapshot point
torch.cuda.synchronize()
sys.exit(phos_fn.serve(handle))
