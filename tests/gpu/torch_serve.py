#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A PyTorch function (functions/examples/torch_*.py) on the GPU machine
(issue 16): its answers to the same requests natively, under `phos-fn run`,
and restored from a snapshot at phos_fn.serve (stop-the-world and on
demand) must be the same numbers, and each must pass its own check.

    python3 tests/gpu/torch_serve.py BUILD_DIR SCRIPT [--json OUT] [--requests JSONL --same KEYS]
                                     [-- SCRIPT_ARGS...]

Requests: {"batch": 8, "seed": 0} (the warm-up's shapes: after a restore its
cached cuDNN plans are made again) and {"batch": 3, "seed": 5, "check": true}
(new shapes: new plans in the restored process); answers compared on their
checksum and head. --requests gives other requests (one JSON object a line)
and --same the comma-separated keys compared (llm.py: prompts of other
lengths than its warm-up's, compared on their tokens).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

REQS = '{"batch": 8, "seed": 0}\n{"batch": 3, "seed": 5, "check": true}\n'


def answers(out):
    res = []
    for line in out.splitlines():
        try:
            res.append(json.loads(line))
        except ValueError:
            pass
    return res


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        del argv[i:i + 2]
    reqs, same = REQS, ("checksum", "head")
    if "--requests" in argv:
        i = argv.index("--requests")
        reqs = argv[i + 1].strip() + "\n"
        del argv[i:i + 2]
    if "--same" in argv:
        i = argv.index("--same")
        same = tuple(argv[i + 1].split(","))
        del argv[i:i + 2]
    nreq = len(reqs.splitlines())
    build, script = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    phos_fn = os.path.join(build, "invoker", "phos-fn")
    prog = [sys.executable, script, *extra]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    runs, tmp = {}, tempfile.mkdtemp(prefix="phos-torch-serve-")
    try:
        def go(name, cmd):
            p = subprocess.run(cmd, input=reqs, capture_output=True, text=True, timeout=600, env=env)
            runs[name] = {"rc": p.returncode, "answers": answers(p.stdout),
                          "stderr": "" if p.returncode == 0 else p.stderr[-3000:]}
            print(f"{name}: rc {p.returncode}, {[[a.get(k) for k in same + ('ok',)] for a in runs[name]['answers']]}",
                  flush=True)
            if p.returncode:
                print("  " + "\n  ".join(p.stderr.splitlines()[-20:]))

        go("native", prog)
        go("phos", [phos_fn, "run", "--device", "cuda", "--", *prog])
        snap = os.path.join(tmp, "snap")
        p = subprocess.run([phos_fn, "snapshot", "--device", "cuda", "-o", snap, "--", *prog], capture_output=True,
                           text=True, timeout=600, env=env)
        print(f"snapshot: rc {p.returncode} {p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else ''}")
        if p.returncode == 0:
            go("restore", [phos_fn, "restore", "--device", "cuda", snap])
            go("restore-on-demand", [phos_fn, "restore", "--device", "cuda", "--on-demand", snap])
        else:
            runs["snapshot"] = {"rc": p.returncode, "answers": [], "stderr": p.stderr[-3000:]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = runs["native"]["answers"]
    ok = len(ref) == nreq and all(a.get("ok") for a in ref)
    for name, r in runs.items():
        alike = r["rc"] == 0 and len(r["answers"]) == nreq and all(
            a.get("ok") and all(a.get(k) == b.get(k) for k in same) for a, b in zip(r["answers"], ref))
        r["same_as_native"] = alike
        ok = ok and alike
    if out_json:
        with open(out_json, "w") as f:
            json.dump(runs, f, indent=1)
    print(f"torch_serve {os.path.basename(script)}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
