# SPDX-License-Identifier: MIT
"""Cold start of a PyTorch function over HTTP (issue 16): functions/examples/
torch_mlp.py (an MLP in PyTorch eager, float32, its weights a torch.save'd
state dict on disk), phos-fn side by side with the baselines in one run on
the GPU machine. The machinery is bench/coldstart.py's, with torch_mlp in
place of mlp:

  native           a fresh python3: start, import torch, CUDA init, the state
                   dict read from disk (memory-mapped) into the model, a
                   warm-up pass, then the request
  driver-api+criu  `criu restore` of that process checkpointed with the
                   NVIDIA driver checkpoint API, then restore + unlock
  phos-stw, phos-ondemand   phos-invoker restoring its snapshot taken at
                   phos_fn.serve (pooled executor, standby CPU side)
  limit            touched bytes / pinned H2D, measured in the same run

for 1 and 8 GiB of weights. Targets at 8 GiB: phos on demand >= 20x the
driver API and >= 10x the native cold start; a warm request within 1.05x
of the native one, in the function's own time for it (run_ms: the forward
pass and the read-back, forwarded or not; over HTTP the two sides have
different fronts, and that ratio is recorded too).

usage: python3 bench/torch_coldstart.py BUILD_DIR [--sizes 1,8] [--systems baseline,phos]
         [--reps N] [--workdir DIR] [--name torch_coldstart]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import coldstart as C  # noqa: E402

TORCH_MLP = os.path.join(os.path.dirname(HERE), "functions", "examples", "torch_mlp.py")


def torch_argv(size):
    # the interpreter that runs this script is the one with torch (the GPU image's)
    return [sys.executable, TORCH_MLP, "--layers", "4", "--mib", str(size * C.A.unit_mib)]


C.BENCH = "torch_coldstart"
C.FN = "torch_mlp"
C.fn_argv = torch_argv
C.DEFAULT_SIZES = "1,8"
C.TARGET_GIB = 8
C.NATIVE_SPEEDUP = 10
C.WARM_RATIO = 1.05
if "--warm-calls" not in sys.argv:
    sys.argv += ["--warm-calls", "20"]
C.S.ANSWER_KEYS = ("ok", "batch", "checksum", "head", "params", "hidden", "dtype")
if "--workdir" not in sys.argv:
    sys.argv += ["--workdir", os.environ.get("PHOS_BENCH_DIR", "/var/tmp/phos-bench-torch")]

if __name__ == "__main__":
    sys.exit(C.main())
