#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch beyond torch_mlp under phos-fn (issue 16), on the GPU machine:
each case is a small PyTorch program that prints one JSON line of results;
it runs natively and under `phos-fn run`, and passes when both exit 0 and
print the same numbers (to a relative 1e-5 where the case says so).

    python3 tests/gpu/torch_cases.py BUILD_DIR [--json OUT.json] [CASE ...]

Cases: conv (cuDNN convolution + batch norm + pooling), convtrain (convolutions
and batch norm trained: cuDNN's backward passes and training statistics), compile
(torch.compile: Triton kernels through the driver API stand-in), expandable
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments: the driver's VMM calls),
attention (scaled_dot_product_attention), cudnn_attention (the same through
cuDNN's fused attention: cuDNN's graph API with by-value scalars), train (a few SGD steps, autograd),
cudagraph (torch.cuda.graph: a forward captured from a stream and replayed
with new inputs), cudagraph_conv (the same with cuDNN convolutions and batch
norm), grid_sample (F.affine_grid and F.grid_sample with align_corners:
cuDNN's spatial transformer, forward and backward), reduce_overhead (torch.compile(mode="reduce-overhead"):
Triton kernels in CUDA graphs that PyTorch captures and replays itself), lstm
(nn.LSTM with dropout, bidirectional, two layers, then nn.GRU, trained; a packed
sequence and nn.RNN (ReLU) in eval: cuDNN's RNN calls, forward and backward),
ctc (F.ctc_loss with int32 targets on the CPU: cuDNN's CTC loss, and its
gradient), fft (torch.fft: rfft2, irfft2, fft and ifft over a batch, fftn in
double precision, and a spectral convolution with its gradient: cuFFT),
linalg (torch.linalg's solve, qr, svd, eigh, cholesky, lstsq and their batched
forms in float64 and float32, through cuSOLVER), sparse (CSR and COO tensors
times dense ones, addmm, to_dense and to_sparse_csr: cuSPARSE's generic API),
spgemm (a CSR tensor times a CSR tensor: cuSPARSE's SpGEMM), mvn
(torch.distributions.MultivariateNormal: sampling and log_prob factor the
covariance with cuSOLVER).
"""
import json
import os
import subprocess
import sys

CASES = {
    "linalg": """
import torch, json
torch.backends.cuda.preferred_linalg_library("cusolver")
torch.manual_seed(0)
out = {}
for dt in (torch.float64, torch.float32):
    n = 48
    a = torch.randn(n, n, device="cuda", dtype=dt)
    spd = a @ a.T + n * torch.eye(n, device="cuda", dtype=dt)
    b = torch.randn(n, 3, device="cuda", dtype=dt)
    x = torch.linalg.solve(a, b)
    q, r = torch.linalg.qr(a)
    u, sv, vh = torch.linalg.svd(a)
    w, v = torch.linalg.eigh(spd)
    chol = torch.linalg.cholesky(spd)
    ls = torch.linalg.lstsq(torch.randn(60, n, device="cuda", dtype=dt), torch.randn(60, 2, device="cuda", dtype=dt)).solution
    ab = torch.randn(6, 16, 16, device="cuda", dtype=dt)
    spdb = ab @ ab.transpose(1, 2) + 16 * torch.eye(16, device="cuda", dtype=dt)
    cb = torch.linalg.cholesky(spdb)
    xb = torch.linalg.solve(ab, torch.randn(6, 16, 2, device="cuda", dtype=dt))
    wb = torch.linalg.eigvalsh(spdb)
    sb = torch.linalg.svdvals(ab)
    k = str(dt).split(".")[1]
    out[k] = {"solve_res": float((a @ x - b).abs().max()) < (1e-9 if dt == torch.float64 else 1e-3),
              "x": float(x.double().abs().sum()), "r": float(r.double().abs().sum()),
              "qr_res": float((q @ r - a).abs().max()) < (1e-9 if dt == torch.float64 else 1e-3),
              "sv": float(sv.double().sum()), "svd_res": float((u @ torch.diag(sv) @ vh - a).abs().max()) < (1e-9 if dt == torch.float64 else 1e-3),
              "w": float(w.double().sum()), "eigh_res": float((spd @ v - v * w).abs().max()) < (1e-8 if dt == torch.float64 else 1e-2),
              "chol": float(chol.double().sum()), "lstsq": float(ls.double().abs().sum()),
              "cb": float(cb.double().sum()), "xb": float(xb.double().abs().sum()),
              "wb": float(wb.double().sum()), "sb": float(sb.double().sum())}
print(json.dumps(out))
""",
    "sparse": """
import torch, json
torch.manual_seed(0)
out = {}
for dt in (torch.float32, torch.float64):
    a = torch.randn(200, 300, device="cuda", dtype=dt)
    a[a.abs() < 1.2] = 0
    csr, coo = a.to_sparse_csr(), a.to_sparse()
    b = torch.randn(300, 40, device="cuda", dtype=dt)
    c = torch.randn(200, 40, device="cuda", dtype=dt)
    v = torch.randn(300, device="cuda", dtype=dt)
    y = csr @ b
    yv = csr @ v
    yc = torch.sparse.mm(coo, b)
    am = torch.addmm(c, csr, b, beta=0.5, alpha=2.0)
    back = csr.to_dense()
    k = str(dt).split(".")[1]
    out[k] = {"nnz": int(csr._nnz()), "spmm": float(y.double().sum()), "spmm_ok": bool(torch.allclose(y, a @ b, rtol=1e-4, atol=1e-4)),
              "spmv": float(yv.double().sum()), "coo": float(yc.double().sum()), "addmm": float(am.double().sum()),
              "dense_back": bool(torch.equal(back, a))}
print(json.dumps(out))
""",
    "spgemm": """
import torch, json
torch.manual_seed(0)
a = torch.randn(120, 90, device="cuda")
a[a.abs() < 1.5] = 0
b = torch.randn(90, 70, device="cuda")
b[b.abs() < 1.5] = 0
p = a.to_sparse_csr() @ b.to_sparse_csr()
print(json.dumps({"nnz": int(p._nnz()), "sum": float(p.to_dense().double().sum()),
                  "ok": bool(torch.allclose(p.to_dense(), a @ b, rtol=1e-4, atol=1e-4))}))
""",
    "mvn": """
import torch, json
torch.manual_seed(0)
a = torch.randn(8, 8, device="cuda")
cov = a @ a.T + 8 * torch.eye(8, device="cuda")
d = torch.distributions.MultivariateNormal(torch.arange(8.0, device="cuda"), covariance_matrix=cov)
s = d.sample((4096,))
lp = d.log_prob(s)
emp = torch.cov(s.T)
print(json.dumps({"sample": float(s.double().sum()), "log_prob": float(lp.double().sum()),
                  "cov_close": bool(((emp - cov).abs() / cov.abs().max()).max() < 0.1),
                  "mean_close": bool((s.mean(0) - torch.arange(8.0, device="cuda")).abs().max() < 0.3)}))
""",
    "fft": """
import torch, json
torch.manual_seed(0)
x = torch.randn(8, 64, 48, device="cuda")
r = torch.fft.rfft2(x)
back = torch.fft.irfft2(r, s=x.shape[-2:])
c = torch.randn(16, 100, device="cuda", dtype=torch.complex64)
f = torch.fft.fft(c)
d = torch.randn(6, 10, 12, device="cuda", dtype=torch.float64)
fn = torch.fft.fftn(d)
w = torch.randn(64, 48, device="cuda", requires_grad=True)
y = torch.fft.irfft2(torch.fft.rfft2(x) * torch.fft.rfft2(w), s=x.shape[-2:])
y.square().sum().backward()
print(json.dumps({"rfft2": float(r.abs().double().sum()), "roundtrip": float((back - x).abs().max()),
                  "fft": float(f.abs().double().sum()), "ifft": float((torch.fft.ifft(f) - c).abs().max()),
                  "fftn": float(fn.abs().sum()), "conv": float(y.double().sum()),
                  "grad": float(w.grad.double().abs().sum())}))
""",
    "ctc": """
import torch, json
torch.manual_seed(0)
logits = torch.randn(30, 4, 12, device="cuda", requires_grad=True)
lp = logits.log_softmax(2)
targets = torch.randint(1, 12, (4 * 8,), dtype=torch.int32)            # on the CPU: cuDNN's path
tl = torch.full((4,), 8, dtype=torch.int32)
il = torch.full((4,), 30, dtype=torch.int32)
use = torch._use_cudnn_ctc_loss(lp, targets, il.tolist(), tl.tolist(), 0)
loss = torch.nn.functional.ctc_loss(lp, targets, il, tl, reduction="sum")
loss.backward()
print(json.dumps({"loss": float(loss), "grad": float(logits.grad.double().abs().sum()), "cudnn": bool(use)}))
""",
    "lstm": """
import torch, json
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
lstm = torch.nn.LSTM(16, 32, num_layers=2, bidirectional=True, dropout=0.2, batch_first=True).cuda()
gru = torch.nn.GRU(64, 24).cuda()
head = torch.nn.Linear(24, 1).cuda()
opt = torch.optim.SGD(list(lstm.parameters()) + list(gru.parameters()) + list(head.parameters()), lr=0.05)
x = torch.randn(4, 10, 16, device="cuda")
t = torch.randn(10, 4, 1, device="cuda")
for _ in range(4):
    opt.zero_grad()
    y, (h, c) = lstm(x)
    z, hz = gru(y.transpose(0, 1))
    loss = ((head(z) - t) ** 2).mean()
    loss.backward(); opt.step()
lstm.eval(); gru.eval()
rnn = torch.nn.RNN(16, 8, nonlinearity="relu").cuda()
with torch.no_grad():
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([10, 7, 5, 2]), batch_first=True)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(lstm(packed)[0], batch_first=True)
    r, _ = rnn(x.transpose(0, 1))
print(json.dumps({"loss": float(loss), "h": float(h.double().sum()), "packed": float(out.double().sum()),
                  "relu": float(r.double().sum()), "cudnn": torch.backends.cudnn.enabled}))
""",
    "conv": """
import torch, json
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                        torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 8, 3)).cuda().eval()
x = torch.randn(4, 3, 32, 32, device="cuda")
with torch.no_grad():
    y = m(x)
print(json.dumps({"sum": float(y.double().sum()), "shape": list(y.shape), "cudnn": torch.backends.cudnn.version()}))
""",
    "convtrain": """
import torch, json
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                        torch.nn.Conv2d(8, 4, 3, stride=2), torch.nn.BatchNorm2d(4)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(8, 3, 16, 16, device="cuda")
for _ in range(5):
    opt.zero_grad(); loss = m(x).square().mean(); loss.backward(); opt.step()
m.eval()
with torch.no_grad():
    y = m(x)
print(json.dumps({"loss": float(loss), "eval": float(y.double().sum()),
                  "running_var": float(m[1].running_var.double().sum())}))
""",
    "compile": """
import torch, json
torch.manual_seed(0)
def f(x, y):
    return torch.nn.functional.gelu(x @ y + 1.0).sum(dim=1)
g = torch.compile(f)
x = torch.randn(64, 64, device="cuda"); y = torch.randn(64, 64, device="cuda")
print(json.dumps({"sum": float(g(x, y).double().sum())}))
""",
    "expandable": """
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import torch, json
xs = [torch.full((1 << 20,), float(i), device="cuda") for i in range(40)]
del xs[::2]
ys = [torch.ones(3 << 20, device="cuda") * i for i in range(8)]
print(json.dumps({"sum": float(sum(x.double().sum() for x in xs + ys))}))
""",
    "attention": """
import torch, json
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print(json.dumps({"sum": round(float(o.double().sum()), 2)}))
""",
    "cudnn_attention": """
import torch, json
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print(json.dumps({"sum": round(float(o.double().sum()), 2)}))
""",
    "cudagraph": """
import torch, json
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).cuda().eval()
static_x = torch.randn(32, 64, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):   # warm-up on a side stream, as PyTorch's docs do
        m(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g), torch.no_grad():
    static_y = m(static_x)
outs = []
for i in range(5):
    static_x.copy_(torch.randn(32, 64, device="cuda"))
    g.replay()
    outs.append(float(static_y.double().sum()))
with torch.no_grad():
    eager = float(m(static_x).double().sum())
print(json.dumps({"replays": outs, "eager_last": eager}))
""",
    "cudagraph_conv": """
import torch, json
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                        torch.nn.Conv2d(16, 8, 3, stride=2), torch.nn.AdaptiveAvgPool2d(1),
                        torch.nn.Flatten()).cuda().eval()
static_x = torch.randn(4, 3, 32, 32, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        m(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g), torch.no_grad():
    static_y = m(static_x)
outs = []
for i in range(4):
    static_x.copy_(torch.randn(4, 3, 32, 32, device="cuda"))
    g.replay()
    outs.append(float(static_y.double().sum()))
print(json.dumps({"replays": outs}))
""",
    "grid_sample": """
import torch, json
torch.manual_seed(0)
theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 0.8, -0.05]]] * 2, device="cuda", requires_grad=True)
x = torch.randn(2, 3, 16, 16, device="cuda", requires_grad=True)
grid = torch.nn.functional.affine_grid(theta, (2, 3, 12, 12), align_corners=True)
y = torch.nn.functional.grid_sample(x, grid, align_corners=True)   # cuDNN's spatial transformer
(y * y).sum().backward()
print(json.dumps({"y": float(y.double().sum()), "dx": float(x.grad.double().sum()),
                  "dtheta": float(theta.grad.double().sum())}))
""",
    "reduce_overhead": """
import torch, json
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
f = torch.compile(m, mode="reduce-overhead")
res = []
with torch.no_grad():
    for i in range(6):
        x = torch.randn(16, 64, device="cuda")
        res.append(float(f(x).double().sum()))
print(json.dumps({"sums": res}))
""",
    "train": """
import torch, json
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.05)
x = torch.randn(256, 32, device="cuda"); t = x[:, :1] * 0.5
for _ in range(20):
    opt.zero_grad(); loss = ((m(x) - t) ** 2).mean(); loss.backward(); opt.step()
print(json.dumps({"loss": float(loss)}))
""",
}


def close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def last_json(out):
    for line in reversed(out.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def main():
    build = os.path.abspath(sys.argv[1])
    args = sys.argv[2:]
    out_json = None
    if "--json" in args:
        i = args.index("--json")
        out_json = args[i + 1]
        del args[i:i + 2]
    names = args or list(CASES)
    phos_fn = os.path.join(build, "invoker", "phos-fn")
    results, bad = [], 0
    for name in names:
        code = CASES[name]
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        nat = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        phos = subprocess.run([phos_fn, "run", "--device", "cuda", "--", sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=300)
        a, b = last_json(nat.stdout), last_json(phos.stdout)
        ok = nat.returncode == 0 and phos.returncode == 0 and a is not None and close(a, b)
        bad += not ok
        results.append({"case": name, "ok": ok, "native": a, "phos": b, "native_rc": nat.returncode,
                        "phos_rc": phos.returncode, "phos_stderr": phos.stderr[-3000:],
                        "native_stderr": nat.stderr[-1500:] if nat.returncode else ""})
        print(f"{'ok  ' if ok else 'FAIL'} {name}: native {a} (rc {nat.returncode}), phos {b} (rc {phos.returncode})")
        if not ok:
            print("  phos stderr: " + "\n  ".join(l for l in phos.stderr.splitlines()[-25:] if "NVML" not in l))
            if nat.returncode:
                print("  native stderr: " + "\n  ".join(nat.stderr.splitlines()[-10:]))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"torch_cases: {len(names) - bad} of {len(names)} passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
