#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_lstm: a sequence model in PyTorch eager as a phos-fn function
(issue 16): cuDNN's RNN calls (nn.LSTM, two layers, bidirectional) where
torch_cnn takes its convolutions and torch_mlp cuBLAS.

Init builds an nn.LSTM(--input, --hidden, 2 layers, bidirectional) and a
Linear head in float32, eval mode, weights drawn on the GPU from --seed (no
downloads); warms up with one request; then phos_fn.serve(handler).

Each request {"batch": B (1..64), "steps": T (1..512), "seed": s, "check":
bool} draws a B x T x --input sequence from s and answers {"batch": B,
"steps": T, "checksum": sum of the head's outputs, "head": the first 4,
"ok": all finite, "run_ms"}; with "check" it also runs the model on a CPU
copy in float64 and adds {"max_abs_err": E, "tol": T}.

    torch_lstm.py [--input N (32)] [--hidden H (64)] [--seed S (1)]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--input", type=int, default=32)
ap.add_argument("--hidden", type=int, default=64)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
if not 1 <= a.input <= 4096 or not 1 <= a.hidden <= 4096:
    sys.exit("torch_lstm: --input and --hidden must be 1..4096")

import torch  # noqa: E402

dev = torch.device("cuda")
gen = torch.Generator(device=dev)
gen.manual_seed(a.seed)
lstm = torch.nn.LSTM(a.input, a.hidden, num_layers=2, bidirectional=True, batch_first=True, device=dev)
head = torch.nn.Linear(2 * a.hidden, 1, device=dev)
with torch.no_grad():
    for p in list(lstm.parameters()) + list(head.parameters()):
        p.uniform_(-a.hidden ** -0.5, a.hidden ** -0.5, generator=gen)
lstm.eval().requires_grad_(False)
head.eval().requires_grad_(False)
cpu_lstm = torch.nn.LSTM(a.input, a.hidden, num_layers=2, bidirectional=True, batch_first=True).double()
cpu_lstm.load_state_dict({k: v.double().cpu() for k, v in lstm.state_dict().items()})


def handle(req):
    t0 = time.perf_counter()
    body = req.json()
    batch, steps, seed = int(body.get("batch", 4)), int(body.get("steps", 16)), int(body.get("seed", 0))
    if not 1 <= batch <= 64 or not 1 <= steps <= 512:
        return 400, {"error": "batch must be 1..64 and steps 1..512"}
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    x = torch.randn(batch, steps, a.input, device=dev, generator=g)
    with torch.no_grad():
        y = head(lstm(x)[0])
    out = {"batch": batch, "steps": steps, "checksum": float(y.double().sum()),
           "head": [float(v) for v in y.flatten()[:4]], "ok": bool(torch.isfinite(y).all()),
           "device": torch.cuda.get_device_name(), "cudnn": torch.backends.cudnn.version()}
    out["run_ms"] = (time.perf_counter() - t0) * 1e3
    if body.get("check"):
        with torch.no_grad():
            ref = cpu_lstm(x.double().cpu())[0] @ head.weight.double().cpu().t() + head.bias.double().cpu()
        err = float((y.double().cpu() - ref).abs().max())
        tol = 1e-3   # float32 on the GPU against float64
        out.update({"max_abs_err": err, "tol": tol, "ok": out["ok"] and err <= tol})
    return out


handle(phos_fn.Request(b'{"batch": 8, "seed": 0}'))
torch.cuda.synchronize()
sys.exit(phos_fn.serve(handle))
