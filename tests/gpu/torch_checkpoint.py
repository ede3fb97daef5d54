#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpoints of a running PyTorch training loop (issues 11 and 16), on the
GPU machine: a small CNN (cuDNN convolutions and batch norm, their backward
passes, SGD with momentum, inputs drawn on the GPU from a seeded generator)
trained for STEPS steps, deterministic. It runs uninterrupted under
`phos-fn run --checkpointable` (and natively, for comparison); then, for
each mode, it is checkpointed at a random moment of its loop (`phos-fn
checkpoint`), killed, and restored (`phos-fn restore`): the restored copy
must go on from where it was stopped and end with the uninterrupted run's
loss lines for the steps it ran and its final weights' checksum, bit for
bit.

    python3 tests/gpu/torch_checkpoint.py BUILD_DIR [--json OUT] [--steps N] [--rounds R]
"""
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time

PROGRAM = """
import json, sys, torch
steps = int(sys.argv[1])
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.manual_seed(0)
nn = torch.nn
m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                  nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9)
g = torch.Generator(device="cuda")
g.manual_seed(1234)
for step in range(1, steps + 1):
    x = torch.randn(16, 3, 24, 24, device="cuda", generator=g)
    t = torch.randint(0, 10, (16,), device="cuda", generator=g)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(m(x), t)
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(json.dumps({"step": step, "loss": loss.item()}), flush=True)
with torch.no_grad():
    s = sum(float(p.double().abs().sum()) for p in m.parameters())
    rv = float(m[1].running_var.double().sum())
print(json.dumps({"done": steps, "weights": s, "running_var": rv}), flush=True)
"""


def lines(text):
    out = []
    for ln in text.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


def main():
    argv = sys.argv[1:]
    opts = {"--json": None, "--steps": "1500", "--rounds": "1"}
    for k in list(opts):
        if k in argv:
            i = argv.index(k)
            opts[k] = argv[i + 1]
            del argv[i:i + 2]
    build = os.path.abspath(argv[0])
    steps, rounds = int(opts["--steps"]), int(opts["--rounds"])
    phos_fn = os.path.join(build, "invoker", "phos-fn")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    tmp = tempfile.mkdtemp(prefix="phos-torch-ckpt-")
    env["PHOS_RUN_DIR"] = os.path.join(tmp, "run")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    prog = [sys.executable, script, str(steps)]
    res, ok = {"steps": steps, "runs": []}, True
    rng = random.Random(7)
    try:
        t0 = time.time()
        n = subprocess.run(prog, capture_output=True, text=True, timeout=600, env=env)
        res["native"] = {"rc": n.returncode, "s": round(time.time() - t0, 2), "last": lines(n.stdout)[-1:]}
        t0 = time.time()
        u = subprocess.run([phos_fn, "run", "--checkpointable", "--device", "cuda", "--", *prog],
                           capture_output=True, text=True, timeout=600, env=env)
        ref = lines(u.stdout)
        res["uninterrupted"] = {"rc": u.returncode, "s": round(time.time() - t0, 2), "last": ref[-1:]}
        print(f"native: {res['native']}\nuninterrupted under phos-fn: {res['uninterrupted']}", flush=True)
        if u.returncode or not ref or "done" not in ref[-1]:
            print(u.stderr[-3000:])
            ok = False
        # (native may pick other cuDNN kernels than the executor's process: told, not required)
        res["native_same"] = n.returncode == 0 and lines(n.stdout)[-1:] == ref[-1:]
        by_step = {a["step"]: a for a in ref if "step" in a}
        for rnd in range(rounds):
            for mode in ("stw", "cow", "recopy"):
                out = os.path.join(tmp, f"ck-{mode}-{rnd}")
                p = subprocess.Popen([phos_fn, "run", "--checkpointable", "--device", "cuda", "--", *prog],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                run = {"mode": mode, "round": rnd}
                try:
                    first = p.stdout.readline() if select.select([p.stdout], [], [], 300)[0] else ""
                    time.sleep(rng.uniform(0.0, 1.0))
                    c = subprocess.run([phos_fn, "checkpoint", "--mode", mode, "-o", out, str(p.pid)],
                                       capture_output=True, text=True, timeout=300, env=env)
                    run["checkpoint"] = {"rc": c.returncode, "said": c.stderr.strip().splitlines()[-1:]}
                finally:
                    p.kill()
                    before = lines(first + p.communicate()[0])
                if c.returncode:
                    print(f"{mode}: checkpoint failed: {c.stderr[-2000:]}")
                    ok = False
                    res["runs"].append(run)
                    continue
                t0 = time.time()
                r = subprocess.run([phos_fn, "restore", "--device", "cuda", out], capture_output=True, text=True,
                                   timeout=600, env=env)
                got = lines(r.stdout)
                steps_seen = [a for a in got if "step" in a]
                same_steps = all(by_step.get(a["step"]) == a for a in steps_seen)
                run.update({"restore_rc": r.returncode, "restore_s": round(time.time() - t0, 2),
                            "original_at": before[-1].get("step") if before else None,
                            "restored_from": steps_seen[0]["step"] if steps_seen else None,
                            "last": got[-1:], "same_losses": same_steps,
                            "same_end": bool(got) and got[-1:] == ref[-1:]})
                good = (r.returncode == 0 and run["same_end"] and same_steps and
                        (not before or not steps_seen or steps_seen[0]["step"] <= before[-1]["step"] + 50))
                print(f"{mode} (round {rnd}): {'ok' if good else 'FAIL'} {run}", flush=True)
                if not good:
                    print(r.stderr[-3000:])
                ok = ok and good
                res["runs"].append(run)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["ok"] = ok
    if opts["--json"]:
        with open(opts["--json"], "w") as f:
            json.dump(res, f, indent=1)
    print(f"torch_checkpoint: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
