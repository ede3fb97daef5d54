# SPDX-License-Identifier: MIT
"""Snapshots just before the entry point, and restoring them (sim device):

- a restored function answers exactly as the original process would have (GPU
  buffers, a device variable, pinned host memory, CPU variables, value by value);
- three concurrent restores of one snapshot all answer correctly;
- a corrupted byte in gpu.data, a truncated gpu.data, a manifest of a newer major
  version and a missing CRIU image are refused with a clear error;
- fault injection (disk full while writing, CRIU failing, the snapshotter killed
  mid-way) never leaves a snapshot that looks complete, and keeps an older one.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading

from harness import DEVICE, PHOS_FN, check, done, fn_env as env, program

STATEFUL = program("tests", "integration", "stateful")
REQS = "".join('{"op":"state"}\n' for _ in range(4))


def phos(*args, stdin="", extra_env=None, timeout=300):
    return subprocess.run([PHOS_FN, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=env(extra_env))


def answers(p):
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def snapshot(out, *extra, seed=5, extra_env=None):
    return phos("snapshot", "--device", DEVICE, *extra, "-o", out, "--", STATEFUL, str(seed), extra_env=extra_env)


def restore(snap):
    return phos("restore", "--device", DEVICE, snap, stdin=REQS)


def executors():
    """pids of executors still working on this test's snapshots (other tests
    may run executors of their own at the same time)."""
    out = subprocess.run(["pgrep", "-f", "phos-executor.*" + tmp], capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


def looks_complete(d):
    return os.path.exists(os.path.join(d, "manifest.json"))


tmp = tempfile.mkdtemp(prefix="phos-snap-test-")
try:
    # The original process, run without a snapshot: what every restore must say.
    ref = answers(phos("run", "--device", DEVICE, "--", STATEFUL, "5", stdin=REQS))
    check(len(ref) == 4, f"reference run answered {len(ref)} of 4")
    check(ref and ref[0]["counter"] == 100 and ref[1]["counter"] == 101, f"reference state {ref[:2]}")

    snap = os.path.join(tmp, "snap")
    p = snapshot(snap)
    check(p.returncode == 0, f"snapshot failed: {p.stderr[-3000:]}")
    check(looks_complete(snap), "snapshot has a manifest")
    m = json.load(open(os.path.join(snap, "manifest.json")))
    check(m["magic"] == "phos-fn-snapshot" and m["version"]["major"] == 1, f"manifest header {m.get('magic')}")
    check(len(m["buffers"]) == 3 and m["gpu_bytes"] == (1 << 16) * 4 + (5 << 20) + 64,
          f"three buffers of the function's sizes: {m['gpu_bytes']}")
    check(any(v["name"] == "dev_scale" for v in m["variables"]), "the device variable is in the image")
    check(len(m["streams"]) == 1 and m["streams"][0]["priority"] == -1, f"stream with its priority: {m['streams']}")
    check(len(m["cublas"]) == 1, "the cuBLAS handle is in the image")
    check(not [d for d in os.listdir(tmp) if ".tmp-" in d], "no temporary directory left")

    # Restore: the same answers, value by value.
    p = restore(snap)
    got = answers(p)
    check(p.returncode == 0, f"restore exited {p.returncode}: {p.stderr[-3000:]}")
    check(got == ref, f"restored answers differ:\n  {got}\n  {ref}")

    # Three restores at once, each in its own executor and pid namespace.
    results = [None] * 3

    def one(i):
        results[i] = restore(snap)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in enumerate(results):
        check(r.returncode == 0 and answers(r) == ref,
              f"concurrent restore {i}: rc {r.returncode} {answers(r)[:1]} {r.stderr[-2000:]}")

    # The warm pool: five restores, one after another, on two executors that are
    # scrubbed and reused; every instance answers like the original.
    p = subprocess.run([program("tests", "integration", "pool_check"), snap, "5"], input=REQS,
                       capture_output=True, text=True, timeout=300, env=env())
    runs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    check(p.returncode == 0 and len(runs) == 5, f"pool_check: rc {p.returncode} {p.stderr[-2000:]}")
    check(all(r["answers"] == ref and r["exit"] == 0 for r in runs), f"pooled answers: {runs[:2]}")
    check(len({r["executor"] for r in runs}) <= 2, f"executors reused: {[r['executor'] for r in runs]}")
    check(all(r["open_s"] == 0 for r in runs), "a pooled restore creates no context")

    # Refusals, each on a copy of the good snapshot.
    def refused(name, mutate, needle):
        d = os.path.join(tmp, name)
        shutil.copytree(snap, d, symlinks=True)
        mutate(d)
        r = restore(d)
        check(r.returncode != 0 and not answers(r), f"{name}: restore should be refused, rc {r.returncode}")
        check(needle in r.stderr, f"{name}: error should mention '{needle}': {r.stderr[-1500:]}")

    def flip_byte(d):
        b = m["buffers"][1]
        with open(os.path.join(d, "gpu.data"), "r+b") as f:
            f.seek(b["offset"] + 12345)
            c = f.read(1)
            f.seek(b["offset"] + 12345)
            f.write(bytes([c[0] ^ 0x40]))

    def truncate(d):
        os.truncate(os.path.join(d, "gpu.data"), m["data_bytes"] // 2)

    def newer(d):
        mm = json.load(open(os.path.join(d, "manifest.json")))
        mm["version"]["major"] = 2
        json.dump(mm, open(os.path.join(d, "manifest.json"), "w"))

    def no_criu(d):
        shutil.rmtree(os.path.join(d, "cpu"))

    def bad_criu(d):
        cpu = os.path.join(d, "cpu")
        for f in os.listdir(cpu):
            if f.startswith("pstree"):
                open(os.path.join(cpu, f), "wb").close()
        os.makedirs(cpu, exist_ok=True)

    refused("corrupt", flip_byte, "checksum mismatch")
    refused("truncated", truncate, "truncated")
    refused("newer", newer, "newer")
    refused("nocpu", no_criu, "cpu")
    # the manifest's checksums of cpu/ (format 1.1) refuse it before CRIU runs
    refused("badcpu", bad_criu, "cpu/pstree.img is 0 bytes")

    def bad_criu_v10(d):   # an image without them (1.0): CRIU itself refuses it
        bad_criu(d)
        mm = json.load(open(os.path.join(d, "manifest.json")))
        mm["version"]["minor"] = 0
        del mm["cpu"]["files"]
        json.dump(mm, open(os.path.join(d, "manifest.json"), "w"))

    refused("badcpu10", bad_criu_v10, "CRIU")
    if DEVICE == "sim":
        # A device with too little memory for the snapshot (the sim device shrunk to 4 MiB).
        r = phos("restore", "--device", DEVICE, snap, stdin=REQS, extra_env={"PHOS_SIM_MEMORY": str(4 << 20)})
        check(r.returncode != 0 and "MiB free" in r.stderr and not answers(r),
              f"too little GPU memory: rc {r.returncode}: {r.stderr[-1500:]}")
    # A refused restore releases everything it took: no executor is left behind.
    check(executors() == [], f"executors left after refusals: {executors()}")

    # Fault injection: nothing that looks complete, and the old snapshot survives.
    for fault, needle in (("gpu_data_alloc", "No space left"), ("criu_dump", "criu_dump"),
                          ("snapshot_commit", "commit")):
        out = os.path.join(tmp, "f-" + fault.split(":")[0])
        r = snapshot(out, extra_env={"PHOS_FAULT": fault})
        check(r.returncode != 0 and needle in r.stderr, f"fault {fault}: rc {r.returncode}: {r.stderr[-1500:]}")
        check(not os.path.exists(out), f"fault {fault}: no snapshot left")
        check(not [d for d in os.listdir(tmp) if d.startswith("f-") and ".tmp-" in d], f"fault {fault}: no leftovers")
        # Over an existing snapshot, the old one is kept intact.
        r = snapshot(snap, extra_env={"PHOS_FAULT": fault})
        check(r.returncode != 0, f"fault {fault} over an existing snapshot fails")
        check(answers(restore(snap)) == ref, f"fault {fault}: the old snapshot still restores")

    # A read error mid-restore fails that restore cleanly; the next one works.
    r = phos("restore", "--device", DEVICE, snap, stdin=REQS, extra_env={"PHOS_FAULT": "uio_read:1"})
    check(r.returncode != 0 and "reading gpu.data" in r.stderr and not answers(r),
          f"read error mid-restore: rc {r.returncode}: {r.stderr[-1500:]}")
    check(answers(restore(snap)) == ref, "a restore after a failed one works")

    # The snapshotter killed mid-way (after the dumps, before the commit).
    out = os.path.join(tmp, "killed")
    r = snapshot(out, extra_env={"PHOS_FAULT": "snapshot_kill"})
    check(r.returncode != 0, "killed snapshotter exits non-zero")
    check(not looks_complete(out), "a killed snapshot is not complete")
    left = [d for d in os.listdir(tmp) if d.startswith("killed.tmp-")]
    check(len(left) == 1, f"the killed snapshotter left its temporary directory for the sweep: {left}")
    r = snapshot(out)
    check(r.returncode == 0 and looks_complete(out), f"a later snapshot works: {r.stderr[-1500:]}")
    check(not [d for d in os.listdir(tmp) if d.startswith("killed.tmp-")], "the sweep removed the killed one's leftovers")

    # Every example: the restored function answers as the original process does.
    examples = {
        "vecadd": (["--elements", "65536"], ['{"n": 4096, "seed": 7}', '{}', '{"n": 1000, "bias": 2}']),
        "gemm": ([], ['{"m": 64, "n": 48, "k": 32, "seed": 3}', '{"m": 32, "n": 32, "k": 32, "batch": 3}']),
        "mlp": (["--weights-mib", "4"], ['{"batch": 4, "seed": 1, "check": true}', '{"batch": 2, "seed": 9}']),
    }
    for name, (args, reqs) in examples.items():
        prog = program("functions", "examples", name)
        stdin = "".join(r + "\n" for r in reqs)
        want = answers(phos("run", "--device", DEVICE, "--", prog, *args, stdin=stdin))
        d = os.path.join(tmp, "ex-" + name)
        p = phos("snapshot", "--device", DEVICE, "-o", d, "--", prog, *args)
        check(p.returncode == 0, f"{name}: snapshot failed: {p.stderr[-1500:]}")
        got = answers(phos("restore", "--device", DEVICE, d, stdin=stdin))
        check(len(want) == len(reqs) and all(a.get("ok") for a in want), f"{name}: reference answers {want}")
        check(got == want, f"{name}: restored answers differ:\n  {got}\n  {want}")

    # Bad input to the CLI.
    r = phos("restore", "--device", DEVICE, os.path.join(tmp, "does-not-exist"))
    check(r.returncode != 0 and "manifest" in r.stderr, f"restore of a missing dir: {r.stderr[-500:]}")
    r = phos("snapshot", "--device", DEVICE, "-o", os.path.join(tmp, "x"), "--", "/bin/false")
    check(r.returncode != 0 and "exited" in r.stderr and not os.path.exists(os.path.join(tmp, "x")),
          f"a program that never serves: {r.stderr[-500:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("snapshot")
