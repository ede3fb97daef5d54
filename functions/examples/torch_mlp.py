#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_mlp: a PyTorch eager model as a phos-fn function (issue 16).

Init imports torch, builds an MLP of --layers Linear layers of width
--hidden with GELU between them, its weights drawn on the GPU from --seed
(no downloads), in --dtype (float32, float16 or bfloat16), and warms it up
with one forward pass; then phos_fn.serve(handler): the snapshot point.
--mib M sizes the width so that the weights take about M MiB instead.
As a real model would, it can read its weights from disk: --save-weights F
writes them (torch.save of the state dict, atomically) after init;
--weights-file F loads them from F (memory-mapped) into the model instead
of drawing them.

Each request {"batch": B (1..256), "seed": s, "check": bool} draws an input
of B rows from s, runs the model and answers
{"batch": B, "checksum": sum of the output, "head": its first 4 values,
"params": number of weights, "device": ..., "dtype": ..., "ok": every
output finite, "run_ms": the request's own time}; with "check" it also runs the same model on a CPU copy in
float64, adds {"max_abs_err": E, "tol": T} and "ok" also says E <= T (small
models only: at most 64 Mi weights).

--cuda-graph: as inference servers do, init also captures the forward pass
into CUDA graphs (torch.cuda.graph) for batches of 8, 64 and 256 rows; a
request's input is copied into the smallest that holds it (the rest zero)
and its graph replayed. Snapshotted at phos_fn.serve, the graphs are
replayed by the restored process.

    torch_mlp.py [--hidden H (512)] [--layers L (4)] [--mib M] [--seed S (1)]
                 [--dtype float32|float16|bfloat16] [--save-weights F | --weights-file F]
                 [--cuda-graph]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--mib", type=int, default=0)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
ap.add_argument("--save-weights")
ap.add_argument("--weights-file")
ap.add_argument("--cuda-graph", action="store_true")
a = ap.parse_args()
if a.save_weights and a.weights_file:
    sys.exit("torch_mlp: --save-weights and --weights-file exclude each other")
if not 1 <= a.layers <= 64:
    sys.exit("torch_mlp: --layers must be 1..64")
if a.mib < 0 or a.mib > 65536:
    sys.exit("torch_mlp: --mib must be 0..65536")

import torch  # noqa: E402

DTYPE = getattr(torch, a.dtype)
ESIZE = torch.tensor([], dtype=DTYPE).element_size()
if a.mib:
    # layers * hidden^2 * esize ~= mib MiB, hidden a multiple of 64
    hidden = int(((a.mib << 20) / (a.layers * ESIZE)) ** 0.5) // 64 * 64
else:
    hidden = a.hidden
if not 8 <= hidden <= 65536:
    sys.exit(f"torch_mlp: width {hidden} out of 8..65536")

dev = torch.device("cuda")
gen = torch.Generator(device=dev)
gen.manual_seed(a.seed)
layers = []
for _ in range(a.layers):
    lin = torch.nn.Linear(hidden, hidden, device=dev, dtype=DTYPE)
    if not a.weights_file:
        with torch.no_grad():
            lin.weight.normal_(0.0, hidden ** -0.5, generator=gen)
            lin.bias.uniform_(-0.1, 0.1, generator=gen)
    layers += [lin, torch.nn.GELU(approximate="tanh")]
model = torch.nn.Sequential(*layers[:-1]).eval().requires_grad_(False)
params = sum(p.numel() for p in model.parameters())
if a.weights_file:
    model.load_state_dict(torch.load(a.weights_file, mmap=True, weights_only=True))
if a.save_weights:
    tmp = f"{a.save_weights}.tmp-{os.getpid()}"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, a.save_weights)


GRAPH_BATCHES = (8, 64, 256)
graphs = {}   # batch -> (static input, static output, torch.cuda.CUDAGraph)
if a.cuda_graph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for bs in GRAPH_BATCHES:
        sx = torch.zeros(bs, hidden, device=dev, dtype=DTYPE)
        with torch.cuda.stream(side), torch.no_grad():
            model(sx)   # warm-up on a side stream, as PyTorch's docs do
        torch.cuda.current_stream().wait_stream(side)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg), torch.no_grad():
            sy = model(sx)
        graphs[bs] = (sx, sy, cg)


def forward(batch, seed):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    x = torch.randn(batch, hidden, device=dev, dtype=DTYPE, generator=g)
    if graphs:
        sx, sy, cg = graphs[next(bs for bs in GRAPH_BATCHES if bs >= batch)]
        sx[:batch].copy_(x)
        sx[batch:].zero_()
        cg.replay()
        return x, sy[:batch]
    with torch.no_grad():
        return x, model(x)


def handle(req):
    t0 = time.perf_counter()
    body = req.json()
    batch = int(body.get("batch", 4))
    seed = int(body.get("seed", 0))
    if not 1 <= batch <= 256:
        return 400, {"error": "batch must be 1..256"}
    x, y = forward(batch, seed)
    out = {"batch": batch, "checksum": float(y.double().sum()), "head": [float(v) for v in y.flatten()[:4]],
           "params": params, "hidden": hidden, "device": torch.cuda.get_device_name(), "dtype": a.dtype,
           "ok": bool(torch.isfinite(y).all())}
    out["run_ms"] = (time.perf_counter() - t0) * 1e3   # forward and read-back, as the caller waits for them
    if body.get("check"):
        if params > (64 << 20):
            return 400, {"error": "check: the model is too big for the CPU reference"}
        ref = x.double().cpu()
        for m in model:
            if isinstance(m, torch.nn.Linear):
                ref = ref @ m.weight.double().cpu().t() + m.bias.double().cpu()
            else:
                ref = torch.nn.functional.gelu(ref, approximate="tanh")
        err = float((y.double().cpu() - ref).abs().max())
        tol = {"float32": 1e-3, "float16": 5e-2, "bfloat16": 2e-1}[a.dtype]
        out.update({"max_abs_err": err, "tol": tol, "ok": out["ok"] and err <= tol})
    return out


# Warm-up, as a model server does: one whole request, so that cuBLAS(Lt)
# handles and every kernel a request uses are loaded before the snapshot.
handle(phos_fn.Request(b'{"batch": 8, "seed": 0}'))
torch.cuda.synchronize()
sys.exit(phos_fn.serve(handle))
