#!/usr/bin/env python3
"""Checkpoints of a running training job, side by side (issue 11).

`functions/examples/train` (D = H = 2048, two streams, cuBLAS and custom
kernels) with S GiB of state, nearly all of it frozen (--frozen-mib: state
that a training step does not write, as a frozen backbone), so that well
under 10% of the state is written per second. For each size, in one run:

  phos-stw, phos-cow, phos-recopy  `phos-fn run --checkpointable`, one
        `phos-fn checkpoint --mode M` in the middle of the run (--repeat N:
        N of them, one after another, the median's figures recorded, every
        sample's stall and pause beside them); the manifest
        gives the program's stall (its records held, CPU dump included) and
        the checkpoint's total time; the run must end with the checksum of an
        uninterrupted run, and so must a restore of the checkpoint
  driver-api+criu  the same train natively: the driver checkpoint API (lock,
        checkpoint: GPU memory to host) + `criu dump --leave-running` +
        restore, unlock; the program is held for all of it
  limit  state bytes / pinned D2H (bench/bandwidth, the same run): the
        least a stop-the-world copy into memory can take

Checkpoints go to --dir (default /dev/shm: into memory, so that the copy
engine, not this machine's disk, is measured; a disk-backed --dir gives the
durable figure). Records {"bench": "checkpoint", "case": "train-<S>GiB",
"system", "metric": stall_s | total_s | ..., ...} in
bench/results/checkpoint.json, checks in checkpoint.checks.json, a chart in
checkpoint.png. Targets (issue 11): cow stall <= 5% of stw's at 16 GiB;
recopy stall <= 10% of stw's; stw's device copy >= 80% of pinned D2H.

stw copies the state into a pinned host copy made at the ask, before the
stop, and holds the program only for that copy and the CPU dump; gpu.data
is hashed and written after (copy_s, host_copy in the manifest). Every
mode's stall holds CRIU's dump of the CPU side, the same in each:
device_stall_s (stall_s - cpu_dump_s) is the part of the engine's own; cpu_frozen_s is
how long CRIU kept the program frozen (its dump.log: seized to unfrozen).

The records are written after each system, so a run stopped by the device's
10-minute limit keeps what it measured; --modes none runs the baseline alone
(16 GiB with --repeat 3 does not fit in one call with it).

usage: bench/checkpoint.py BUILD [--sizes 1,4,16] [--dir DIR] [--modes stw,cow,recopy] [--no-baseline] [--repeat N]
       [--device cuda|sim --unit-mib 4 --width 64]   (sim: a dry run of the script, never a measurement)
"""
import argparse
import datetime
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
GIB = 1 << 30
WIDTH = 2048
EVERY = 50

records, checks = [], []


def log(msg):
    print(msg, flush=True)


def record(case, system, metric, value, unit):
    records.append({"bench": "checkpoint", "case": case, "system": system, "metric": metric, "value": value,
                    "unit": unit, "device": DEVICE, "date": DATE})


def check(name, ok, detail=""):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    log(f"  check {'ok  ' if ok else 'FAIL'} {name} {detail}")


class Run:
    """A train process (natively or under phos-fn run) whose step lines are timestamped."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env, start_new_session=True)
        self.steps, self.done, self.err, self.err_t = [], None, [], []
        self.first = threading.Event()
        self.t_out = threading.Thread(target=self._read, daemon=True)
        self.t_err = threading.Thread(target=self._read_err, daemon=True)
        self.t_out.start()
        self.t_err.start()

    def _read(self):
        for line in self.p.stdout:
            w = line.split()
            if len(w) == 4 and w[0] == "step":
                self.steps.append((time.perf_counter(), int(w[1])))
                self.first.set()
            elif len(w) == 5 and w[0] == "done":
                self.done = w[4]
        self.first.set()

    def _read_err(self):
        for line in self.p.stderr:   # timestamped: where a pause sat
            self.err.append(line)
            self.err_t.append(time.perf_counter())

    def wait(self, timeout):
        rc = self.p.wait(timeout=timeout)
        self.t_out.join(10)
        self.t_err.join(10)
        return rc

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def max_gap(self, t0, t1):
        """The longest time between two step lines that overlaps [t0, t1]."""
        g = self.longest_gap(t0, t1)
        return g[1] - g[0] if g else None

    def longest_gap(self, t0, t1):
        """(start, end) of that gap, or None."""
        ts = [t for t, _ in self.steps]
        gaps = [(a, b) for a, b in zip(ts, ts[1:]) if b >= t0 and a <= t1]
        return max(gaps, key=lambda g: g[1] - g[0]) if gaps else None

    def lines_near(self, a, b, t0, slack=0.3, before=None):
        """The stderr lines from a - before (default: slack) to b + slack, each with its time from t0."""
        before = slack if before is None else before
        return [f"{t - t0:+8.3f} s {line.rstrip()[:200]}" for t, line in zip(self.err_t, self.err)
                if a - before <= t <= b + slack]

    def tail(self):
        return "".join(self.err)[-1500:]


def train_argv(steps, frozen_mib):
    return [os.path.join(A.build, "functions", "examples", "train"), "--size", str(A.width), "--steps", str(steps),
            "--seed", "7", "--every", str(EVERY), "--frozen-mib", str(frozen_mib)]


def phos_fn():
    return os.path.join(A.build, "invoker", "phos-fn")


def env():
    # info: the executor's checkpoint phases, timestamped by Run, say where a pause sat
    e = dict(os.environ, PHOS_RUN_DIR=os.path.join(A.work, "run"), PHOS_LOG=os.environ.get("PHOS_LOG", "info"))
    e.pop("LD_PRELOAD", None)
    return e


def under_phos(argv, checkpointable=True):
    return [phos_fn(), "run", "--device", A.device, *(["--checkpointable"] if checkpointable else []), "--", *argv]


def native(argv):
    """A native process; a dry run on sim goes through phos-fn run instead."""
    return argv if A.device == "cuda" else under_phos(argv, False)


def calibrate():
    """Steps per second of train under phos-fn (the slower of the two), for runs of about A.seconds."""
    r = Run(under_phos(train_argv(4000, 0), False), env())
    rc = r.wait(600)
    if rc != 0 or len(r.steps) < 2:
        raise SystemExit(f"calibration run failed: rc {rc} {r.tail()}")
    (t0, s0), (t1, s1) = r.steps[0], r.steps[-1]
    rate = (s1 - s0) / max(t1 - t0, 1e-6)
    steps = int(max(2000, rate * A.seconds)) // EVERY * EVERY
    log(f"calibration: {rate:.0f} steps/s under phos-fn: {steps} steps a run")
    return steps


def checksum_of(argv, what, timeout):
    r = Run(argv, env())
    rc = r.wait(timeout)
    if rc != 0 or not r.done:
        raise SystemExit(f"{what}: rc {rc} {r.tail()}")
    return r.done


def criu_frozen_s(d):
    """How long CRIU kept the program frozen, from its dump.log: its first
    "Seized task" to "Unfreezing tasks" (None when the log does not say)."""
    seized = unfrozen = None
    try:
        with open(os.path.join(d, "cpu", "dump.log"), errors="replace") as f:
            for line in f:
                if line.startswith("(") and (("Seized task" in line and seized is None) or "Unfreezing tasks" in line):
                    t = float(line[1:line.index(")")])
                    if "Seized task" in line:
                        seized = t
                    else:
                        unfrozen = t
    except (OSError, ValueError):
        return None
    return unfrozen - seized if seized is not None and unfrozen is not None else None


def phos_mode(case, size, mode, steps, frozen, ref):
    """--repeat checkpoints of one run, each into a directory of its own; the
    records are the median one's (by stall) with every sample's stall and
    longest pause beside it; the last checkpoint is the one restored."""
    d = os.path.join(A.dir, f"ck-{size}-{mode}")
    r = Run(under_phos(train_argv(steps, frozen)), env())
    samples = []   # (manifest's checkpoint, dir, t0, t1)
    try:
        if not r.first.wait(600) or not r.steps:
            raise RuntimeError(f"no step line: {r.tail()}")
        time.sleep(A.seconds / 3)
        for k in range(A.repeat):
            dk = f"{d}-{k}"
            shutil.rmtree(dk, ignore_errors=True)
            if k:
                time.sleep(A.seconds / 6)   # the program runs on between them
            t0 = time.perf_counter()
            c = subprocess.run([phos_fn(), "checkpoint", "--mode", mode, "-o", dk, str(r.p.pid)],
                               capture_output=True, text=True, timeout=900, env=env())
            t1 = time.perf_counter()
            if c.returncode != 0:
                raise RuntimeError(f"checkpoint {k}: {c.stderr[-1500:]}")
            samples.append((json.load(open(os.path.join(dk, "manifest.json")))["checkpoint"], dk, t0, t1))
            if r.p.poll() is not None:
                raise RuntimeError(f"the run ended after {k + 1} of {A.repeat} checkpoints: make it longer")
        rc = r.wait(900)
    except Exception:
        r.kill()
        raise
    system = f"phos-{mode}"
    if len(samples) > 1:
        record(case, system, "stall_samples_s", [s_[0]["stall_s"] for s_ in samples], "s")
        record(case, system, "observed_gap_samples_s", [r.max_gap(t0_, t1_) for _, _, t0_, t1_ in samples], "s")
    last = samples[-1][1]
    ck, d, t0, t1 = sorted(samples, key=lambda s_: s_[0]["stall_s"])[len(samples) // 2]   # the median
    m = json.load(open(os.path.join(d, "manifest.json")))
    record(case, system, "stall_s", ck["stall_s"], "s")
    record(case, system, "total_s", ck["total_s"], "s")
    record(case, system, "gpu_s", ck.get("gpu_s", 0), "s")
    if mode == "stw":   # the device copy while held: into a pinned host copy, or through the ring
        record(case, system, "copy_s", ck.get("copy_s", 0), "s")
        record(case, system, "host_copy", 1 if ck.get("host_copy") else 0, "")
    record(case, system, "cpu_dump_s", ck.get("cpu_s", 0), "s")
    record(case, system, "device_stall_s", max(0.0, ck["stall_s"] - ck.get("cpu_s", 0)), "s")
    frozen_s = criu_frozen_s(d)
    # CRIU's dump logs only when asked: the device tool brings back 8 files
    # of $OUT, and one a size and mode crowds out gpu-check's log and results
    if os.environ.get("OUT") and os.environ.get("PHOS_CKPT_DUMP_LOGS") == "1" and \
            os.path.exists(os.path.join(d, "cpu", "dump.log")):
        shutil.copy(os.path.join(d, "cpu", "dump.log"), os.path.join(os.environ["OUT"], f"dump-{case}-{mode}.log"))
    if frozen_s is not None:
        record(case, system, "cpu_frozen_s", frozen_s, "s")
    record(case, system, "state_bytes", m["gpu_bytes"], "B")
    record(case, system, "stop_bytes", ck.get("stop_bytes", 0), "B")
    record(case, system, "precopy_bytes", ck.get("precopy_bytes", 0), "B")
    record(case, system, "rounds", ck.get("rounds", 0), "")
    gap = r.max_gap(t0, t1)
    if gap is not None:
        record(case, system, "observed_gap_s", gap, "s")
        a, b = r.longest_gap(t0, t1)
        log(f"  {system}: the longest step-line gap, {gap:.3f} s, from {a - t0:+.3f} to {b - t0:+.3f} s after the "
            f"checkpoint was asked (it answered at {t1 - t0:+.3f} s); the log around it:")
        for line in r.lines_near(a, b, t0):
            log("    " + line)
    log(f"  {system}: the executor's checkpoint lines:")
    for line in r.lines_near(t0, t1, t0, slack=1.0, before=0.0):
        if "checkpoint" in line:
            log("    " + line)
    log(f"  {system}: stall {ck['stall_s']:.3f} s, total {ck['total_s']:.3f} s, device side {ck.get('gpu_s', 0):.3f} s,"
        f" CPU dump {ck.get('cpu_s', 0):.3f} s (frozen {frozen_s if frozen_s is None else round(frozen_s, 4)} s), device copy while held {ck.get('copy_s', 0):.3f} s"
        f"{' (host copy)' if ck.get('host_copy') else ''}, rounds {ck.get('rounds', 0)}, stop {ck.get('stop_bytes', 0) >> 20} MiB,"
        f" longest step-line gap {gap if gap is None else round(gap, 3)} s")
    check(f"{case}: {system}: the checkpointed run ends as an uninterrupted one", rc == 0 and r.done == ref,
          f"rc {rc} {r.done} vs {ref}")
    rr = Run([phos_fn(), "restore", "--device", A.device, last], env())
    rrc = rr.wait(900)
    check(f"{case}: {system}: the checkpoint restores and ends as an uninterrupted run", rrc == 0 and rr.done == ref,
          f"rc {rrc} {rr.done} vs {ref} {'' if rrc == 0 else rr.tail()}")
    for _, dk, _, _ in samples:
        shutil.rmtree(dk, ignore_errors=True)
    return ck


def ckpt_tool(ops, pid):
    t0 = time.perf_counter()
    p = subprocess.run([os.path.join(A.build, "bench", "ckpt_baseline"), ops, str(pid)], capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"ckpt_baseline {ops}: {p.stdout[-800:]} {p.stderr[-800:]}")
    return time.perf_counter() - t0


def find_criu():
    for c in (os.environ.get("PHOS_CRIU"), os.path.join(A.build, "criu", "criu")):
        if c and os.access(c, os.X_OK):
            return c
    return shutil.which("criu") or "criu"


def baseline(case, steps, frozen, ref):
    img = os.path.join(A.dir, "baseline-img")
    shutil.rmtree(img, ignore_errors=True)
    os.makedirs(img)
    r = Run(train_argv(steps, frozen), env())
    try:
        if not r.first.wait(600) or not r.steps:
            raise RuntimeError(f"no step line: {r.tail()}")
        time.sleep(A.seconds / 3)
        t0 = time.perf_counter()
        t_lock = ckpt_tool("lock,checkpoint", r.p.pid)
        t1 = time.perf_counter()
        d = subprocess.run([find_criu(), "dump", "-t", str(r.p.pid), "-D", img, "--shell-job", "--leave-running",
                            "-o", "dump.log"], capture_output=True, text=True, timeout=900)
        t2 = time.perf_counter()
        if d.returncode != 0:
            raise RuntimeError(f"criu dump: {d.stderr[-800:]} {open(os.path.join(img, 'dump.log')).read()[-1500:]}")
        t_unlock = ckpt_tool("restore,unlock", r.p.pid)
        t3 = time.perf_counter()
        rc = r.wait(900)
    except Exception:
        r.kill()
        raise
    finally:
        shutil.rmtree(img, ignore_errors=True)
    record(case, "driver-api+criu", "stall_s", t3 - t0, "s")
    record(case, "driver-api+criu", "total_s", t3 - t0, "s")
    record(case, "driver-api+criu", "lock_checkpoint_s", t_lock, "s")
    record(case, "driver-api+criu", "criu_dump_s", t2 - t1, "s")
    record(case, "driver-api+criu", "restore_unlock_s", t_unlock, "s")
    log(f"  driver-api+criu: stall = total {t3 - t0:.3f} s (lock+checkpoint {t_lock:.3f}, criu dump {t2 - t1:.3f},"
        f" restore+unlock {t_unlock:.3f})")
    check(f"{case}: driver-api+criu: the checkpointed run ends as an uninterrupted one", rc == 0 and r.done == ref,
          f"rc {rc} {r.done} vs {ref}")
    return t3 - t0


def d2h_gbs():
    if A.device != "cuda":
        return None
    p = subprocess.run([os.path.join(A.build, "bench", "bandwidth"), "--mib", "1024", "--reps", "5"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        log(f"bandwidth: {p.stderr[-500:]}")
        return None
    bw = json.loads(p.stdout.strip().splitlines()[-1])
    record("bandwidth-1GiB", "limit", "d2h_pinned", bw["d2h_pinned_gbs"], "GB/s")
    return bw["d2h_pinned_gbs"]


def chart(path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(no matplotlib: no chart)")
        return False
    cases = sorted({r["case"] for r in records if r["case"].startswith("train-")}, key=lambda c: int(c[6:-3]))
    systems = ["phos-stw", "phos-cow", "phos-recopy", "driver-api+criu", "limit"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric in zip(axes, ("stall_s", "total_s")):
        w = 0.16
        for k, s in enumerate(systems):
            vals = [next((r["value"] for r in records if r["case"] == c and r["system"] == s
                          and r["metric"] == metric), 0) for c in cases]
            ax.bar([i + (k - 2) * w for i in range(len(cases))], vals, w, label=s)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases)
        ax.set_yscale("log")
        ax.set_ylabel(f"{metric[:-2]} (s, log)")
        ax.set_title({"stall_s": "the program's stall", "total_s": "the checkpoint's total time"}[metric])
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"checkpoint of train, {DEVICE}, {DATE}; limit = state bytes / pinned D2H")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def save(final=False):
    """Writes the records and checks so far (after each system, so that a run
    stopped by the device's time limit keeps what it measured), into
    bench/results and $OUT; the chart at the end only."""
    os.makedirs(RESULTS, exist_ok=True)
    names = ["checkpoint.json", "checkpoint.checks.json"]
    for name, data in zip(names, (records, checks)):
        with open(os.path.join(RESULTS, name + ".tmp"), "w") as f:
            json.dump(data, f, indent=1)
        os.replace(os.path.join(RESULTS, name + ".tmp"), os.path.join(RESULTS, name))
    if final and chart(os.path.join(RESULTS, "checkpoint.png")):
        names.append("checkpoint.png")
    if os.environ.get("OUT"):
        for n in names:
            shutil.copy(os.path.join(RESULTS, n), os.environ["OUT"])


def main():
    global A, DEVICE, DATE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--modes", default="stw,cow,recopy")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of a run")
    ap.add_argument("--repeat", type=int, default=1, help="checkpoints per run and mode (records: the median's)")
    ap.add_argument("--unit-mib", type=int, default=1024, help="MiB per size unit (sim dry runs use less)")
    ap.add_argument("--width", type=int, default=WIDTH, help="train --size (sim dry runs use less)")
    A = ap.parse_args()
    if not 1 <= A.repeat <= 20:
        ap.error("--repeat takes 1..20")
    modes = [m for m in A.modes.split(",") if m and m != "none"]   # none: the baseline alone
    if any(m not in ("stw", "cow", "recopy") for m in modes):
        ap.error("--modes takes stw, cow and recopy, comma-separated, or none (the baseline alone)")
    A.build = os.path.abspath(A.build)
    A.dir = tempfile.mkdtemp(prefix="phos-ckpt-bench-", dir=A.dir)
    A.work = tempfile.mkdtemp(prefix="phos-ckpt-bench-work-")
    os.makedirs(os.path.join(A.work, "run"))
    DATE = datetime.date.today().isoformat()
    DEVICE = "sim"
    if A.device == "cuda":
        DEVICE = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True).stdout.strip().splitlines()[0]
    try:
        d2h = d2h_gbs()
        steps = calibrate()
        weights_mib = 2 * A.width * A.width * 4 >> 20   # W1 and dW1; the rest is small
        for size in [int(s) for s in A.sizes.split(",")]:
            case = f"train-{size}GiB"
            frozen = max(0, size * A.unit_mib - weights_mib - 8)
            # long enough for a paced recopy (its steps take at most half of the
            # dispatcher's time while the program runs): 1.5 s a GiB
            case_steps = steps * max(1, math.ceil(size * A.unit_mib / 1024 * 1.5 * A.repeat / A.seconds))
            log(f"== {case}: {frozen} MiB frozen, {weights_mib} MiB of weights and gradients written every step, "
                f"{case_steps} steps")
            ref = checksum_of(native(train_argv(case_steps, frozen)), f"{case}: uninterrupted run", 900)
            got = {}
            for mode in modes:
                try:
                    got[mode] = phos_mode(case, size, mode, case_steps, frozen, ref)
                except Exception as e:   # one failed system does not hide the others
                    check(f"{case}: phos-{mode} ran", False, str(e)[-800:])
                save()
            if not A.no_baseline and A.device == "cuda":
                try:
                    baseline(case, case_steps, frozen, ref)
                except Exception as e:
                    check(f"{case}: driver-api+criu ran", False, str(e)[-800:])
                save()
            state = next((r["value"] for r in records if r["case"] == case and r["metric"] == "state_bytes"), 0)
            if d2h and state:
                record(case, "limit", "stall_s", state / (d2h * 1e9), "s")
                record(case, "limit", "total_s", state / (d2h * 1e9), "s")
            if "stw" in got:
                stw = got["stw"]["stall_s"]
                if "cow" in got and size >= 16:
                    check(f"{case}: cow stall <= 5% of stw's", got["cow"]["stall_s"] <= 0.05 * stw,
                          f"{got['cow']['stall_s']:.3f} vs {stw:.3f} s")
                if "recopy" in got:
                    check(f"{case}: recopy stall <= 10% of stw's", got["recopy"]["stall_s"] <= 0.10 * stw,
                          f"{got['recopy']['stall_s']:.3f} vs {stw:.3f} s")
                    dev = {m: max(0.0, got[m]["stall_s"] - got[m].get("cpu_s", 0)) for m in ("stw", "recopy")}
                    check(f"{case}: recopy's device stall (CRIU's CPU dump aside) <= 10% of stw's",
                          dev["recopy"] <= 0.10 * dev["stw"], f"{dev['recopy']:.3f} vs {dev['stw']:.3f} s")
                held = got["stw"].get("copy_s") or got["stw"].get("gpu_s")
                if d2h and state and held:
                    rate = state / held / 1e9
                    record(case, "phos-stw", "device_copy_gbs", rate, "GB/s")
                    check(f"{case}: stw's device side at >= 80% of pinned D2H", rate >= 0.8 * d2h,
                          f"{rate:.1f} vs {d2h:.1f} GB/s")
    finally:
        shutil.rmtree(A.dir, ignore_errors=True)
        shutil.rmtree(A.work, ignore_errors=True)
    save(final=True)
    bad = [c for c in checks if not c["ok"]]
    log(f"checkpoint: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
