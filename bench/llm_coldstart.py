# SPDX-License-Identifier: MIT
"""Cold start of a language model server to its first token (issue 39):
functions/examples/llm.py (a Llama-shaped decoder in PyTorch, bfloat16,
greedy decoding with a KV cache), phos-fn side by side with the baselines in
one run on one GPU. The machinery is bench/coldstart.py's, with llm in place
of mlp and a request of a 16-token prompt and 32 new tokens:

  native           a fresh python3: start, import torch, CUDA init, the
                   weights read from a torch.save'd file in the page cache
                   (memory-mapped), a warm-up request, then the request
  driver-api+criu  `criu restore` of that process checkpointed with the
                   NVIDIA driver checkpoint API, restore + unlock, the request
  phos-stw         phos-invoker restoring its snapshot taken at phos_fn.serve
                   stop-the-world (pooled executor, standby CPU side)
  phos-ondemand    the same on demand: buffers stream in in the order the
                   first request touched them (embedding, then layer by
                   layer) while the function already computes
  limit            weight bytes / pinned H2D, measured in the same run

Each cold start is one HTTP request; the function says when each token
reached the host (token_ms, from the request's start inside the function),
so that the time to the first token is the request's latency less the
function's own time plus the first token's time, and likewise the 32nd.
Every answer's tokens are checked against the native process's.

Records (bench/results/llm_coldstart.json, with .checks.json and .png):
first_token_s and token32_s per system and size (median of --reps), and
first_token_over_limit, speedup_vs_driver_api. Targets at 16 GiB, page cache:
first token <= 1.2x the limit, >= 20x faster than the driver API + CRIU.

usage: python3 bench/llm_coldstart.py BUILD_DIR [--sizes 1,4,16] [--systems baseline,phos]
         [--caches pagecache[,dropped]] [--reps N] [--workdir DIR] [--name llm_coldstart]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import coldstart as C  # noqa: E402

LLM = os.path.join(os.path.dirname(HERE), "functions", "examples", "llm.py")
NEW_TOKENS = 32


def llm_argv(size):
    # the interpreter that runs this script is the one with torch (the GPU image's)
    return [sys.executable, LLM, "--gib", str(size * C.A.unit_mib / 1024), "--max-seq", "512"]


def token_times(body, dt):
    """The time to the first and to the 32nd token of a cold request that took dt."""
    try:
        ans = json.loads(body)
        before = dt - float(ans["run_ms"]) / 1e3   # start or restore, HTTP, until the function ran
        ms = ans["token_ms"]
        return {"first_token_s": before + ms[0] / 1e3, "token32_s": before + ms[NEW_TOKENS - 1] / 1e3,
                "prefill_s": float(ans["prefill_ms"]) / 1e3}
    except (ValueError, KeyError, TypeError, IndexError):
        return {}


def targets(size):
    """Ratios against the weights over pinned H2D and the driver API; the issue's targets."""
    get = {(r["case"], r["system"], r["metric"]): r["value"] for r in C.records}
    weights = C.LAST_WEIGHT_BYTES.get(size)
    for cache in C.A.caches:
        case = f"{C.FN}-{size}GiB-{cache}"
        lim = weights / (C.BW["h2d_pinned_gbs"] * 1e9) if weights and C.BW.get("h2d_pinned_gbs") else None
        if lim:
            C.record(case, "limit", "weights_over_h2d_s", lim, "s")
        base = get.get((case, "driver-api+criu", "first_token_s"))
        for system in ("native", "phos-stw", "phos-ondemand"):
            v = get.get((case, system, "first_token_s"))
            if v and lim:
                C.record(case, system, "first_token_over_limit", v / lim, "x")
            if v and base:
                C.record(case, system, "first_token_speedup_vs_driver_api", base / v, "x")
        v = get.get((case, "phos-ondemand", "first_token_s"))
        if v and lim and cache == "pagecache" and size == C.TARGET_GIB:
            C.check(f"{case}: on-demand first token {v:.3f} s <= 1.2 x weights/H2D = {1.2 * lim:.3f} s",
                    v <= 1.2 * lim)
        if v and base and cache == "pagecache" and size == C.TARGET_GIB:
            C.check(f"{case}: on-demand first token >= 20x faster than driver-api+criu ({base / v:.1f}x)",
                    base / v >= 20)


_run_size = C.run_size


def run_size(size, front):
    _run_size(size, front)
    targets(size)


C.LAST_WEIGHT_BYTES = {}   # size -> the weight bytes the function reported
C.CURRENT_SIZE = None
_answer = C.S.answer


def answer(body):
    """The tokens and the model's shape; notes the weight bytes of the size on the way."""
    got = _answer(body)
    try:
        ans = json.loads(body)
        C.LAST_WEIGHT_BYTES[C.CURRENT_SIZE] = int(ans["weight_bytes"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return got


def run_size_noting(size, front):
    C.CURRENT_SIZE = size
    run_size(size, front)


C.BENCH = "llm_coldstart"
C.FN = "llm"
C.fn_argv = llm_argv
C.DEFAULT_SIZES = "1,4,16"
C.TARGET_GIB = 16
C.NATIVE_SPEEDUP = None
C.RESPONSE_TARGETS = False
C.CHART_METRIC = "first_token_s"
C.CHART_YLABEL = "HTTP request to the first token (s)"
C.CHART_LIMITS = (("weights_over_h2d_s", "k_", "weight bytes / pinned H2D"),)
C.WARM_RATIO = 1.05
C.REQUEST = {"prompt_tokens": list(range(100, 116)), "max_new_tokens": NEW_TOKENS}
C.cold_metrics = token_times
C.run_size = run_size_noting
C.S.answer = answer
C.S.ANSWER_KEYS = ("ok", "tokens", "params", "layers", "hidden", "dtype")
for flag, value in (("--warm-calls", "3"), ("--caches", "pagecache"),
                    ("--workdir", os.environ.get("PHOS_BENCH_DIR", "/var/tmp/phos-bench-llm"))):
    if flag not in sys.argv:
        sys.argv += [flag, value]

if __name__ == "__main__":
    sys.exit(C.main())
