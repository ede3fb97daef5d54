#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_cnn: a small convolutional network in PyTorch eager as a phos-fn
function (issue 16): the cuDNN path (convolutions through cuDNN's backend
API, batch normalization) where torch_mlp takes cuBLAS(Lt).

Init builds --blocks blocks of [Conv2d 3x3, BatchNorm2d, ReLU, MaxPool2d]
(channels doubling from --channels) and a Linear head, in float32, eval
mode, weights and batch-norm statistics drawn on the GPU from --seed (no
downloads); warms up with one whole request, so that cuDNN's execution
plans for the request's shapes are built before the snapshot (PyTorch
keeps them in its plan cache, phos-fn makes them again after a restore);
then phos_fn.serve(handler).

Each request {"batch": B (1..64), "seed": s, "check": bool} draws B images
of 3 x --size x --size from s and answers {"batch": B, "checksum": sum of
the logits, "head": the first 4, "ok": all finite, "run_ms": the request's
own time}; with "check" it also runs the model on a CPU copy in float64
and adds {"max_abs_err": E, "tol": T} (TF32 convolutions round, hence T).

    torch_cnn.py [--channels C (16)] [--blocks N (3)] [--size S (32)] [--seed S (1)]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--channels", type=int, default=16)
ap.add_argument("--blocks", type=int, default=3)
ap.add_argument("--size", type=int, default=32)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
if not 1 <= a.channels <= 256 or not 1 <= a.blocks <= 6:
    sys.exit("torch_cnn: --channels must be 1..256 and --blocks 1..6")
if not 2 ** a.blocks <= a.size <= 512:
    sys.exit(f"torch_cnn: --size must be {2 ** a.blocks}..512 with {a.blocks} blocks")

import torch  # noqa: E402

dev = torch.device("cuda")
gen = torch.Generator(device=dev)
gen.manual_seed(a.seed)
layers, cin, side = [], 3, a.size
for i in range(a.blocks):
    cout = a.channels << i
    layers += [torch.nn.Conv2d(cin, cout, 3, padding=1, device=dev), torch.nn.BatchNorm2d(cout, device=dev),
               torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
    cin, side = cout, side // 2
layers += [torch.nn.Flatten(), torch.nn.Linear(cin * side * side, 10, device=dev)]
model = torch.nn.Sequential(*layers).eval().requires_grad_(False)
with torch.no_grad():
    for m in model:
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.weight.normal_(0.0, (m.weight[0].numel()) ** -0.5, generator=gen)
            m.bias.uniform_(-0.1, 0.1, generator=gen)
        elif isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2, generator=gen)
            m.running_var.uniform_(0.5, 1.5, generator=gen)
            m.weight.uniform_(0.5, 1.5, generator=gen)
            m.bias.uniform_(-0.1, 0.1, generator=gen)


def reference(x):
    """The model on the CPU in float64, layer by layer."""
    ref = x.double().cpu()
    F = torch.nn.functional
    for m in model:
        if isinstance(m, torch.nn.Conv2d):
            ref = F.conv2d(ref, m.weight.double().cpu(), m.bias.double().cpu(), padding=1)
        elif isinstance(m, torch.nn.BatchNorm2d):
            ref = F.batch_norm(ref, m.running_mean.double().cpu(), m.running_var.double().cpu(),
                               m.weight.double().cpu(), m.bias.double().cpu(), False, 0.0, m.eps)
        elif isinstance(m, torch.nn.Linear):
            ref = ref @ m.weight.double().cpu().t() + m.bias.double().cpu()
        else:
            ref = m(ref)
    return ref


def handle(req):
    t0 = time.perf_counter()
    body = req.json()
    batch = int(body.get("batch", 4))
    seed = int(body.get("seed", 0))
    if not 1 <= batch <= 64:
        return 400, {"error": "batch must be 1..64"}
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    x = torch.randn(batch, 3, a.size, a.size, device=dev, generator=g)
    with torch.no_grad():
        y = model(x)
    out = {"batch": batch, "checksum": float(y.double().sum()), "head": [float(v) for v in y.flatten()[:4]],
           "ok": bool(torch.isfinite(y).all()), "device": torch.cuda.get_device_name(),
           "cudnn": torch.backends.cudnn.version()}
    out["run_ms"] = (time.perf_counter() - t0) * 1e3
    if body.get("check"):
        err = float((y.double().cpu() - reference(x)).abs().max())
        tol = 5e-2   # TF32 convolutions (PyTorch's default for cuDNN) keep 10 bits of mantissa
        out.update({"max_abs_err": err, "tol": tol, "ok": out["ok"] and err <= tol})
    return out


handle(phos_fn.Request(b'{"batch": 8, "seed": 0}'))
torch.cuda.synchronize()
sys.exit(phos_fn.serve(handle))
