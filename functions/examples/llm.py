#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""llm: a Llama-shaped language model server as a phos-fn function (issue 39).

A decoder-only transformer in plain PyTorch: token embedding, L blocks of
RMSNorm, attention with rotary embeddings and grouped-query heads (through
F.scaled_dot_product_attention), RMSNorm and a SwiGLU MLP, then a final
RMSNorm and an untied output head. Nothing is downloaded: the weights are
drawn on the GPU from --seed, or read from a file this program wrote before
(--save-weights F: torch.save of the state dict, atomically; --weights-file
F: loaded memory-mapped, as a server loads a checkpoint).

--gib G sizes the model to about G GiB of weights (G from 0.25 to 64) with
the shapes of the Llama family (head size 128, four query heads per key/value
head, MLP width 3.5x rounded to 256); --gib 16 is Llama-3-8B's shape without
its large vocabulary (hidden 4096, MLP 14336, 32 heads, 8 key/value heads).
--layers and --hidden name the shape instead.

Init builds the model and a KV cache of --max-seq positions (bfloat16 unless
--dtype says). As model servers do, shapes are few and fixed, so that a
request meets nothing that the warm-up did not: a prompt is padded to the
next of the prefill buckets (16, 64, 256 tokens: causal attention keeps the
padding out of the real tokens' way), and a decode step attends over the
whole cache with a mask of the positions written so far. The warm-up runs a
prefill of every bucket and decode steps (every kernel and cuBLAS heuristic
a request needs is loaded) and empties the cache again, then
phos_fn.serve(handler): the snapshot point.

A request {"prompt_tokens": [t, ...] (1..the largest bucket that fits in half
the cache, tokens in 0..vocab-1),
"max_new_tokens": N (1..256, prompt + N <= max_seq)} is answered, by greedy
decoding (argmax), with {"tokens": [N generated tokens], "token_ms": [the
time from the request's start to each token on the host], "prefill_ms",
"run_ms", "ok", "params", "weight_bytes", "layers", "hidden", "dtype",
"device"}. Greedy decoding is deterministic: natively, under phos-fn run and
restored, the same prompt gives the same tokens.

    llm.py [--gib G | --layers L --hidden D] [--vocab V (32000)] [--max-seq S (1024)]
           [--seed S (1)] [--dtype bfloat16|float16|float32] [--save-weights F | --weights-file F]
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preload", "python"))
import phos_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--gib", type=float, default=0)
ap.add_argument("--layers", type=int, default=0)
ap.add_argument("--hidden", type=int, default=0)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--max-seq", type=int, default=1024)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
ap.add_argument("--save-weights")
ap.add_argument("--weights-file")
a = ap.parse_args()
if a.save_weights and a.weights_file:
    sys.exit("llm: --save-weights and --weights-file exclude each other")
if a.gib and (a.layers or a.hidden):
    sys.exit("llm: --gib and --layers/--hidden exclude each other")
if a.gib and not 0.25 <= a.gib <= 64:
    sys.exit("llm: --gib must be 0.25..64")
if not 256 <= a.vocab <= 262144:
    sys.exit("llm: --vocab must be 256..262144")
if not 16 <= a.max_seq <= 32768:
    sys.exit("llm: --max-seq must be 16..32768")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPE = getattr(torch, a.dtype)
ESIZE = torch.tensor([], dtype=DTYPE).element_size()
HEAD = 128


def mlp_width(d):
    return (int(3.5 * d) + 255) // 256 * 256


def per_layer(d):
    kv = d // 4   # grouped-query: a quarter of the query heads
    return 2 * d * d + 2 * d * kv + 3 * d * mlp_width(d) + 2 * d


def shape():
    """(layers, hidden) from --gib or --layers/--hidden."""
    if not a.gib:
        layers, hidden = a.layers or 4, a.hidden or 512
    else:
        hidden = 2048 if a.gib <= 2 else 3072 if a.gib <= 6 else 4096 if a.gib <= 24 else 8192
        if a.gib == 16:
            hidden = 4096
        budget = a.gib * (1 << 30) / ESIZE - 2 * a.vocab * hidden - hidden
        layers = max(1, int(budget // per_layer(hidden)))
    if hidden % HEAD or hidden // HEAD % 4:
        sys.exit(f"llm: the hidden size {hidden} must be a multiple of {4 * HEAD}")
    if not 1 <= layers <= 256:
        sys.exit(f"llm: {layers} layers out of 1..256")
    return layers, hidden


LAYERS, D = shape()
HEADS = D // HEAD
KV_HEADS = HEADS // 4
FFN = mlp_width(D)
EPS = 1e-5
dev = torch.device("cuda")


def build():
    """The weights, in one dict (the state dict), drawn from --seed unless a file gives them."""
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)

    def w(*size, std):
        t = torch.empty(*size, device=dev, dtype=DTYPE)
        if not a.weights_file:
            t.normal_(0.0, std, generator=gen)
        return t

    def ones(n):
        return torch.ones(n, device=dev, dtype=DTYPE)

    p = {"embed": w(a.vocab, D, std=1.0), "norm": ones(D), "head": w(a.vocab, D, std=D ** -0.5)}
    for i in range(LAYERS):
        p[f"{i}.attn_norm"] = ones(D)
        p[f"{i}.wq"] = w(D, D, std=D ** -0.5)
        p[f"{i}.wk"] = w(KV_HEADS * HEAD, D, std=D ** -0.5)
        p[f"{i}.wv"] = w(KV_HEADS * HEAD, D, std=D ** -0.5)
        p[f"{i}.wo"] = w(D, D, std=D ** -0.5 / math.sqrt(2 * LAYERS))
        p[f"{i}.mlp_norm"] = ones(D)
        p[f"{i}.w_gate"] = w(FFN, D, std=D ** -0.5)
        p[f"{i}.w_up"] = w(FFN, D, std=D ** -0.5)
        p[f"{i}.w_down"] = w(D, FFN, std=FFN ** -0.5 / math.sqrt(2 * LAYERS))
    if a.weights_file:
        saved = torch.load(a.weights_file, mmap=True, weights_only=True, map_location="cpu")
        if set(saved) != set(p) or any(saved[k].shape != p[k].shape or saved[k].dtype != DTYPE for k in p):
            sys.exit(f"llm: {a.weights_file} does not hold this model's weights")
        for k in p:
            p[k].copy_(saved[k])
    return p


P = build()
PARAMS = sum(t.numel() for t in P.values())
if a.save_weights:
    tmp = f"{a.save_weights}.tmp-{os.getpid()}"
    torch.save(P, tmp)
    os.replace(tmp, a.save_weights)

# rotary embeddings (Llama's rotate-half form), for every position of the cache
inv_freq = 1.0 / (500000.0 ** (torch.arange(0, HEAD, 2, device=dev, dtype=torch.float32) / HEAD))
angles = torch.outer(torch.arange(a.max_seq, device=dev, dtype=torch.float32), inv_freq)
COS = torch.cat([angles.cos(), angles.cos()], dim=-1).to(DTYPE)   # [max_seq, HEAD]
SIN = torch.cat([angles.sin(), angles.sin()], dim=-1).to(DTYPE)


def rotate(x, pos, n):
    """x [1, heads, n, HEAD] at positions pos..pos+n-1."""
    cos, sin = COS[pos:pos + n], SIN[pos:pos + n]
    half = torch.cat([-x[..., HEAD // 2:], x[..., :HEAD // 2]], dim=-1)
    return x * cos + half * sin


def new_cache():
    """Keys and values of every layer: [LAYERS, 2, 1, KV_HEADS, max_seq, HEAD], zero
    (a decode step reads every position, the masked ones too)."""
    return torch.zeros(LAYERS, 2, 1, KV_HEADS, a.max_seq, HEAD, device=dev, dtype=DTYPE)


BUCKETS = [b for b in (16, 64, 256) if b <= a.max_seq // 2] or [a.max_seq // 2]
POSITIONS = torch.arange(a.max_seq, device=dev)


def block(i, x, pos, n, cache, mask):
    """Layer i on x [1, n, D] at positions pos..pos+n-1: their keys and values go
    into the cache; attention is causal over the n (mask None: a prefill at 0) or
    over the whole cache under mask (a decode step)."""
    h = F.rms_norm(x, (D,), P[f"{i}.attn_norm"], EPS)
    q = (h @ P[f"{i}.wq"].t()).view(1, n, HEADS, HEAD).transpose(1, 2)
    k = (h @ P[f"{i}.wk"].t()).view(1, n, KV_HEADS, HEAD).transpose(1, 2)
    v = (h @ P[f"{i}.wv"].t()).view(1, n, KV_HEADS, HEAD).transpose(1, 2)
    q, k = rotate(q, pos, n), rotate(k, pos, n)
    cache[i, 0, :, :, pos:pos + n] = k
    cache[i, 1, :, :, pos:pos + n] = v
    if mask is None:
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        att = F.scaled_dot_product_attention(q, cache[i, 0], cache[i, 1], attn_mask=mask, enable_gqa=True)
    x = x + att.transpose(1, 2).reshape(1, n, D) @ P[f"{i}.wo"].t()
    h = F.rms_norm(x, (D,), P[f"{i}.mlp_norm"], EPS)
    return x + (F.silu(h @ P[f"{i}.w_gate"].t()) * (h @ P[f"{i}.w_up"].t())) @ P[f"{i}.w_down"].t()


def logits(x):
    return F.rms_norm(x, (D,), P["norm"], EPS) @ P["head"].t()   # [1, vocab]


def prefill(prompt, cache):
    """The next token's logits after prompt, padded to its bucket (positions past
    the prompt get the padding's keys; decode steps overwrite or mask them)."""
    n = next(b for b in BUCKETS if b >= len(prompt))
    toks = torch.zeros(n, device=dev, dtype=torch.long)
    toks[:len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    x = P["embed"][toks].unsqueeze(0)
    for i in range(LAYERS):
        x = block(i, x, 0, n, cache, None)
    return logits(x[:, len(prompt) - 1])


def decode(tok, pos, cache):
    """The next token's logits after token tok (a [1] tensor) at position pos."""
    mask = (POSITIONS <= pos).view(1, 1, 1, a.max_seq)
    x = P["embed"][tok].unsqueeze(0)
    for i in range(LAYERS):
        x = block(i, x, pos, 1, cache, mask)
    return logits(x[:, 0])


CACHE = new_cache()


@torch.no_grad()
def generate(prompt, max_new, cache):
    t0 = time.perf_counter()
    out = prefill(prompt, cache)
    tokens, times = [], []
    nxt = out.argmax(-1)
    tokens.append(int(nxt))
    prefill_ms = (time.perf_counter() - t0) * 1e3
    times.append(prefill_ms)
    for pos in range(len(prompt), len(prompt) + max_new - 1):
        out = decode(nxt, pos, cache)
        nxt = out.argmax(-1)
        tokens.append(int(nxt))   # on the host, as a streaming server sends it
        times.append((time.perf_counter() - t0) * 1e3)
    return tokens, times, prefill_ms, bool(torch.isfinite(out).all())


def handle(req):
    t0 = time.perf_counter()
    try:
        body = req.json()
        prompt = body["prompt_tokens"]
        max_new = body.get("max_new_tokens", 16)
    except (ValueError, KeyError, TypeError, AttributeError):
        return 400, {"error": 'want {"prompt_tokens": [...], "max_new_tokens": N}'}
    if not (isinstance(prompt, list) and 1 <= len(prompt) <= BUCKETS[-1]
            and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < a.vocab for t in prompt)):
        return 400, {"error": f"prompt_tokens: 1..{BUCKETS[-1]} integers in 0..{a.vocab - 1}"}
    if not (isinstance(max_new, int) and not isinstance(max_new, bool) and 1 <= max_new <= 256
            and len(prompt) + max_new <= a.max_seq):
        return 400, {"error": f"max_new_tokens: 1..256, with the prompt at most {a.max_seq} positions"}
    tokens, times, prefill_ms, finite = generate(prompt, max_new, CACHE)
    return {"tokens": tokens, "token_ms": [round(t, 3) for t in times], "prefill_ms": round(prefill_ms, 3),
            "run_ms": (time.perf_counter() - t0) * 1e3, "ok": finite and len(tokens) == max_new,
            "params": PARAMS, "weight_bytes": PARAMS * ESIZE, "layers": LAYERS, "hidden": D,
            "dtype": a.dtype, "device": torch.cuda.get_device_name()}


# Warm-up, as a model server does: a prefill of every bucket, and decode steps.
for b in BUCKETS:
    generate(list(range(1, b + 1)), 3, CACHE)
# An empty cache to serve from (every request writes the positions it reads,
# under its mask): a restore sets its zeros on the device instead of copying it.
CACHE.zero_()
torch.cuda.synchronize()
sys.exit(phos_fn.serve(handle))
