# SPDX-License-Identifier: MIT
"""Cold start of tp_mlp with two ranks on two GPUs (issue 15), side by side in
one run on the two-GPU machine. Each rank holds --mib MiB of weights (default
8192: 2 x 8 GiB). Latency runs from the request until both ranks answered:

  native           two fresh native processes (rank r on GPU r): start, CUDA
                   context, NCCL communicator, weights read from disk
                   (tp_mlp --weights-file), then the request on stdin
  driver-api+criu  `criu restore` of both ranks, checkpointed after init with
                   the NVIDIA driver checkpoint API (bench/ckpt_baseline),
                   cuCheckpointProcessRestore + Unlock, then the request. The
                   driver's checkpoint API (before driver 610) cannot take CUDA
                   IPC memory, which NCCL's P2P and SHM transports use, so
                   these ranks talk over NCCL's socket transport, and CRIU
                   takes their TCP connections (--tcp-established)
  phos-ondemand    one phos-invoker per GPU (PHOS_GPU=r), tp deployed on both
                   (each snapshotted at phos_fn_serve), the request sent to both
                   over HTTP at once: each invoker restores its rank on demand,
                   and the ranks make their communicator again at its first use
  phos-oneprocess  the other shape: one phos-invoker, tp_mlp --one-process 2
                   deployed with "gpus": 2 (one executor over both GPUs, one
                   process driving both ranks); a restore over several GPUs
                   brings the whole snapshot in before the function runs, and
                   the process makes both ranks' communicators again at once
  limit            the weights of both ranks / the pinned H2D bandwidth of both
                   GPUs copying at once, measured in the same run (bench/bandwidth)

The baselines are timed from the start of the restore (or process) to both
answers on stdout, without an HTTP front: that favours them by a millisecond
or so. Every answer's sample of the output (rows 0..7 of column 0) must equal
the native init's, which was checked against the CPU reference.

Records (bench "nccl", case "tp_mlp-2x<size>") replace the earlier tp_mlp
records in bench/results/nccl.json and its checks in nccl.checks.json (the
all-reduce ones of bench/nccl.py stay); the chart is nccl-coldstart.png.

usage: python3 bench/tp_coldstart.py BUILD [--mib 8192] [--reps 3] [--workdir DIR]
                                     [--systems native,driver-api,phos-ondemand,phos-oneprocess]
--systems runs some of the systems (default: all; driver-api stands for both
driver API baselines); the records of the others stay as an earlier run left
them, each with its date.
Needs two GPUs (exits 77 with fewer); --sim runs the phos path and the native
one on the sim device, small, without a GPU (a dry run of this script).
"""
import argparse
import contextlib
import ctypes
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import coldstart as C  # noqa: E402  (HTTP calls, the invoker wrapper)
import snapshot as S  # noqa: E402  (native processes CRIU can take, ckpt_baseline)

RESULTS = os.path.join(HERE, "results")
OUT = os.environ.get("OUT")
DATE = datetime.date.today().isoformat()
MIB = 1 << 20
records, checks = [], []
A = None
DEVICE = "unknown"


def log(msg):
    print(msg, flush=True)


def record(system, metric, value, unit):
    records.append({"bench": "nccl", "case": A.case, "system": system, "metric": metric, "value": value,
                    "unit": unit, "device": DEVICE, "date": DATE})
    v = f"{value:12.4f}" if isinstance(value, (int, float)) else str(value)
    log(f"  {A.case:18s} {system:16s} {metric:28s} {v} {unit}")


def check(name, ok, detail=""):
    checks.append({"check": f"{A.case}: {name}", "ok": bool(ok), "detail": str(detail)[-3000:]})
    log(f"  [{'ok' if ok else 'FAIL'}] {name} {'' if ok else str(detail)[-1500:]}")


def error(system, step, msg):
    record(system, "error", f"{step}: {msg}"[-4000:], "")
    check(f"{system} {step}", False, msg)


def both(fns):
    """Runs fns at once; their results (an exception is its result)."""
    out = [None] * len(fns)

    def run(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - a result to report
            out[i] = e

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def raise_any(results):
    for r in results:
        if isinstance(r, Exception):
            raise S.StepError(str(r))
    return results


def sample(line):
    """The timing-free part of an answer: (ok, rank, sample)."""
    try:
        r = json.loads(line)
    except (TypeError, ValueError):
        return None
    return r.get("ok"), r.get("rank"), r.get("sample")


def same(got, want, r):
    """An answer of rank r equals the reference (the native init's sample)."""
    return bool(got) and got[0] is True and got[1] == r and got[2] == want


def nccl_lib_dir():
    for d in sorted(glob.glob("/usr/local/lib/python3*/*-packages/nvidia/nccl/lib") +
                    glob.glob("/usr/lib/python3*/*-packages/nvidia/nccl/lib")):
        return d
    return None


def rank_argv(r, idfile, *extra, wrap=True):
    """tp_mlp's rank r; with --sim and wrap, under `phos-fn run --device sim` (the "native" runs)."""
    argv = [os.path.join(A.build, "functions", "examples", "tp_mlp"), str(r), "2", idfile,
            "--weights-mib", str(A.mib), *(["--width", str(A.width)] if A.width else []), *extra]
    if A.sim and wrap:
        return [os.path.join(A.build, "invoker", "phos-fn"), "run", "--device", "sim", "--", *argv]
    return argv


def native_env(extra=None):
    env = S.native_env()
    env["NCCL_NVLS_ENABLE"] = "0"
    lib = nccl_lib_dir()
    if lib and not A.sim:
        env["LD_LIBRARY_PATH"] = f"{env.get('LD_LIBRARY_PATH', '')}:{lib}".strip(":")
    env.update(extra or {})
    return env


@contextlib.contextmanager
def native_env_of(env):
    """snapshot.py's Native (and coldstart.py's CriuCold, through it) start
    their process with S.native_env(): env instead, for a while."""
    saved = S.native_env
    S.native_env = lambda: env
    try:
        yield
    finally:
        S.native_env = saved


# ---- limit -------------------------------------------------------------------

def bandwidth_both():
    """Pinned H2D GB/s of both GPUs copying at once (their sum)."""
    procs = [subprocess.Popen([os.path.join(A.build, "bench", "bandwidth"), "--mib", "1024", "--reps", "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=native_env({"CUDA_VISIBLE_DEVICES": str(r)})) for r in range(2)]
    total = 0.0
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise S.StepError(f"bandwidth on GPU {r}: exit {p.returncode}: {err[-1500:]}")
        gbs = json.loads(lines[-1])["h2d_pinned_gbs"]
        record("limit", f"h2d_pinned_gpu{r}", gbs, "GB/s")
        total += gbs
    record("limit", "h2d_pinned_both", total, "GB/s")
    return total


# ---- native ------------------------------------------------------------------

class NativeRanks:
    """Both ranks as fresh native processes, weights from their files."""

    def __init__(self, files):
        self.files = files
        self.procs = []

    def start_and_ask(self, idfile):
        """Starts both, sends a request at once (read after init); (answers, seconds)."""
        self.close()
        if os.path.exists(idfile):
            os.unlink(idfile)
        t0 = time.perf_counter()
        self.procs = [subprocess.Popen(rank_argv(r, idfile, "--no-check", "--weights-file", self.files[r]),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=native_env()) for r in range(2)]
        for p in self.procs:
            p.stdin.write("{}\n")
            p.stdin.flush()
        got = raise_any(both([lambda p=p: self.line(p, 2) for p in self.procs]))
        return got, time.perf_counter() - t0

    def ask(self):
        t0 = time.perf_counter()
        for p in self.procs:
            p.stdin.write("{}\n")
            p.stdin.flush()
        got = raise_any(both([lambda p=p: self.line(p, 1) for p in self.procs]))
        return got, time.perf_counter() - t0

    @staticmethod
    def line(p, n):
        """The n-th next line of p's stdout (the first is tp_mlp's init report)."""
        ln = ""
        for _ in range(n):
            ln = p.stdout.readline()
            if not ln:
                raise S.StepError(f"rank exited {p.wait()}: {p.stderr.read()[-1500:]}")
        return ln.strip()

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs = []


# ---- driver API + CRIU -------------------------------------------------------

SOCKET_ONLY = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket",
               "NCCL_SOCKET_IFNAME": "lo"}


class CriuRanks:
    def __init__(self, work, files):
        self.work = work
        self.files = files
        self.fns = []
        self.opts = None
        self.saved = []
        self.why = None      # why CRIU could not dump the ranks: the driver's restore alone then
        self.checkpointed = False

    def prepare(self, want):
        criu = S.find_criu()
        shutil.rmtree(self.work, ignore_errors=True)
        idfile = os.path.join(self.work, "id")
        env = native_env(SOCKET_ONLY)
        for r in range(2):
            os.makedirs(os.path.join(self.work, f"rank{r}", "img"))
        with native_env_of(env):   # ours, for the socket transport
            self.fns = [S.Native(os.path.join(self.work, f"rank{r}"),
                                 rank_argv(r, idfile, "--no-check", "--weights-file", self.files[r]))
                        for r in range(2)]
        for fn in self.fns:
            if S.wait_lines(fn.out, 1, A.timeout, fn.alive) is None:
                raise S.StepError(f"a rank did not start: {S.tail(fn.err)}")
            fn.lines = 1
        got = raise_any(both([lambda fn=fn: fn.ask({}, A.timeout)[0] for fn in self.fns]))
        for r, ln in enumerate(got):
            if not same(sample(ln), want, r):
                raise S.StepError(f"rank {r} over sockets answered {ln[:300]}")
        for fn in self.fns:
            S.ckpt("lock,checkpoint", fn.pid, A.timeout)
        self.checkpointed = True
        # NCCL keeps unlinked segments in /dev/shm (its proxy's, tens of MiB): CRIU
        # takes them as ghost files, over its 1 MiB default limit
        common = ["--tcp-established", "--ghost-limit", "1G"]
        tries = (common, common + ["--network-lock", "skip"],
                 common + ["--network-lock", "skip", "--ext-unix-sk", "--link-remap", "--file-locks"])
        for r, fn in enumerate(self.fns):
            img = os.path.join(self.work, f"rank{r}", "img")
            errs = []
            for opts in ([self.opts] if self.opts else tries):
                rc, dt, _, _ = S.sh([criu, "dump", "-t", fn.pid, "-D", img, "--shell-job", "-o", "dump.log",
                                     *opts], A.timeout)
                if rc == 0:
                    self.opts = opts
                    record("driver-api+criu", f"criu_dump_rank{r}_s", dt, "s")
                    break
                errs.append(f"{opts}: {S.criu_errors(os.path.join(img, 'dump.log'))}")
                if not fn.alive():
                    break
            else:
                rc = 1
            if rc != 0:
                if r == 0 and all(f.alive() for f in self.fns):
                    # CRIU cannot take these ranks here; their GPU state is checkpointed:
                    # measure the driver's restore alone, a lower bound of driver API + CRIU
                    self.why = " | ".join(errs)
                    return
                raise S.StepError("criu dump failed: " + " | ".join(errs))
            fn.reap_dumped()
        for fn in self.fns:
            self.saved.append({f: open(f, "rb").read() for f in (fn.out, fn.err)})
            fn.lines0 = fn.lines

    def cold(self):
        """Restores both, asks both; (answers, seconds)."""
        if self.why:
            return self.driver_cold()
        criu = S.find_criu()
        self.kill()
        for fn, saved in zip(self.fns, self.saved):
            for f, data in saved.items():
                with open(f, "wb") as fh:
                    fh.write(data)
            fn.lines = fn.lines0

        def restore(r):
            fn = self.fns[r]
            img = os.path.join(self.work, f"rank{r}", "img")
            pidfile = os.path.join(self.work, f"rank{r}", "restored.pid")
            if os.path.exists(pidfile):
                os.unlink(pidfile)
            rc, _, _, _ = S.sh([criu, "restore", "-D", img, "--shell-job", "-d", "--pidfile", pidfile,
                                "-o", "restore.log", *self.opts], A.timeout)
            if rc != 0:
                raise S.StepError(f"criu restore of rank {r}: {S.criu_errors(os.path.join(img, 'restore.log'))}")
            with open(pidfile) as f:
                fn.pid = int(f.read().strip())
            fn.restored = True
            S.ckpt("restore,unlock", fn.pid, A.timeout)
            return fn.ask({}, A.timeout)[0]

        t0 = time.perf_counter()
        got = raise_any(both([lambda r=r: restore(r) for r in range(2)]))
        return got, time.perf_counter() - t0

    def driver_cold(self):
        """Without CRIU: both ranks' GPU state checkpointed by the driver (untimed), then
        timed: the driver's restore and unlock of both, and the request."""
        if not self.checkpointed:
            raise_any(both([lambda fn=fn: S.ckpt("lock,checkpoint", fn.pid, A.timeout) for fn in self.fns]))
        t0 = time.perf_counter()

        def restore(fn):
            S.ckpt("restore,unlock", fn.pid, A.timeout)
            return fn.ask({}, A.timeout)[0]

        got = raise_any(both([lambda fn=fn: restore(fn) for fn in self.fns]))
        self.checkpointed = False
        return got, time.perf_counter() - t0

    def ask(self):
        t0 = time.perf_counter()
        got = raise_any(both([lambda fn=fn: fn.ask({}, A.timeout)[0] for fn in self.fns]))
        return got, time.perf_counter() - t0

    def kill(self):
        for fn in self.fns:
            if fn.restored:
                try:
                    os.kill(fn.pid, 9)
                except ProcessLookupError:
                    pass
                S.reap(fn.pid)
                fn.restored = False

    def close(self):
        self.kill()
        for fn in self.fns:
            try:
                os.close(fn.wfd)
            except OSError:
                pass


class MlpPair:
    """Where CRIU cannot take the ranks (it cannot dump NCCL's TCP sockets on some hosts):
    driver API + CRIU for the same GPU bytes on each GPU without a communicator, two mlp
    processes of --mib MiB (one per GPU, coldstart.py's CriuCold), restored together."""

    def __init__(self, work):
        self.crs = []
        C.A.unit_mib = A.mib
        for r in range(2):
            with native_env_of(native_env({"CUDA_VISIBLE_DEVICES": str(r)})):
                cr = C.CriuCold(1, os.path.join(work, f"mlp{r}"))
                self.crs.append(cr)
                ans = cr.prepare("tp", A.timeout)
            if not (ans and ans.get("ok")):
                raise S.StepError(f"mlp on GPU {r} answered {ans}")
            self.want = ans

    def cold(self):
        t0 = time.perf_counter()
        got = raise_any(both([lambda cr=cr: cr.cold(json.dumps(C.REQUEST).encode()) for cr in self.crs]))
        return got, time.perf_counter() - t0

    def ask(self):
        t0 = time.perf_counter()
        got = raise_any(both([lambda cr=cr: cr.warm(json.dumps(C.REQUEST).encode()) for cr in self.crs]))
        return got, time.perf_counter() - t0

    def measure(self, reps):
        colds = []
        self.cold()   # the first restore reads the images into the page cache
        for i in range(reps):
            got, dt = self.cold()
            ok = all(st == 200 and S.answer(b) == self.want for st, b in got)
            check(f"driver-api+criu (mlp pair) cold #{i + 1}: both answer as before the dump", ok, got)
            if not ok:
                return None
            colds.append(dt)
        colds.sort()
        record("driver-api+criu", "first_response_s", colds[len(colds) // 2], "s")
        record("driver-api+criu", "workload", f"2 x mlp --weights-mib {A.mib}, one per GPU, no NCCL", "")
        return colds[len(colds) // 2]

    def close(self):
        for cr in self.crs:
            cr.close()


# ---- phos --------------------------------------------------------------------

def invoker_with(env, state, extra):
    """coldstart's Invoker, started with env added to this process's environment
    (which it takes) for the start only."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return C.Invoker(state, extra)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class PhosRanks:
    """One invoker per GPU; tp deployed on both."""

    def __init__(self, work):
        self.work = work
        self.invs = []
        rdir = os.path.join(work, "reinit")
        os.makedirs(rdir, exist_ok=True)
        for r in range(2):
            env = {"PHOS_NCCL_REINIT_DIR": rdir, "PHOS_NCCL_TIMEOUT_MS": "120000", "NCCL_NVLS_ENABLE": "0"}
            if not A.sim:
                env["PHOS_GPU"] = str(r)
            # --run-as self: the ranks meet through files in this work dir
            self.invs.append(invoker_with(env, os.path.join(work, f"state{r}"), ["--run-as", "self"]))

    def deploy(self):
        idfile = os.path.join(self.work, "tp.id")
        t0 = time.perf_counter()
        got = raise_any(both([lambda r=r, inv=inv: C.call(inv.port, "POST", "/system/functions", {
            "name": "tp", "program": rank_argv(r, idfile, wrap=False)[0],
            "args": rank_argv(r, idfile, wrap=False)[1:],
            "limits": {"idle_ms": 1000, "timeout_ms": 900000}}, timeout=A.timeout)
            for r, inv in enumerate(self.invs)]))
        for r, (st, body, _, _) in enumerate(got):
            if st != 201:
                raise S.StepError(f"deploy of rank {r}: {st} {body[:1500]!r}")
        return time.perf_counter() - t0

    def call_both(self):
        t0 = time.perf_counter()
        got = raise_any(both([lambda inv=inv: C.call(inv.port, "POST", "/function/tp", {}, timeout=A.timeout)
                              for inv in self.invs]))
        dt = time.perf_counter() - t0
        for r, (st, body, _, _) in enumerate(got):
            if st != 200:
                raise S.StepError(f"rank {r}: {st} {body[:1500]!r}")
        return [g[1].decode() for g in got], [g[2] for g in got], dt

    def cold(self):
        for inv in self.invs:
            inv.settled("tp")
        answers, hdrs, dt = self.call_both()
        for r, h in enumerate(hdrs):
            if h.get("x-cold-start") not in (None, "true"):
                raise S.StepError(f"rank {r}'s call was not a cold start: {h}")
        return answers, dt

    def ask(self):
        answers, _, dt = self.call_both()
        return answers, dt



class PhosOneProcess:
    """One invoker; tp_mlp --one-process 2 deployed with "gpus": 2."""

    def __init__(self, work):
        self.work = work
        env = {"NCCL_NVLS_ENABLE": "0", **({"PHOS_SIM_GPUS": "2"} if A.sim else {})}
        self.inv = invoker_with(env, os.path.join(work, "state"), [])

    def deploy(self):
        # --no-check: the model was checked by the native init (same weights)
        args = ["--one-process", "2", "--weights-mib", str(A.mib), *(["--width", str(A.width)] if A.width else []),
                "--no-check"]
        t0 = time.perf_counter()
        st, body, _, _ = C.call(self.inv.port, "POST", "/system/functions", {
            "name": "tp1", "program": os.path.join(A.build, "functions", "examples", "tp_mlp"), "args": args,
            "gpus": 2, "limits": {"idle_ms": 1000, "timeout_ms": 900000, "deploy_timeout_ms": 900000}},
            timeout=A.timeout)
        if st != 201:
            raise S.StepError(f"deploy of tp_mlp --one-process 2: {st} {body[:1500]!r}")
        return time.perf_counter() - t0

    def call(self):
        t0 = time.perf_counter()
        st, body, hdrs, _ = C.call(self.inv.port, "POST", "/function/tp1", {}, timeout=A.timeout)
        dt = time.perf_counter() - t0
        if st != 200:
            raise S.StepError(f"tp_mlp --one-process 2: {st} {body[:1500]!r}")
        return [body.decode()], hdrs, dt

    def cold(self):
        self.inv.settled("tp1", standby=False)   # no standby: pooled processes own one GPU
        answers, hdrs, dt = self.call()
        if hdrs.get("x-cold-start") not in (None, "true"):
            raise S.StepError(f"the call was not a cold start: {hdrs}")
        return answers, dt

    def ask(self):
        answers, _, dt = self.call()
        return answers, dt


# ---- the run -----------------------------------------------------------------

def measure(system, cold, warm, want, reps, ranks=(0, 1)):
    """Median cold and warm (after each cold) latency, answers checked (the rank
    each answer names: ranks); the cold median or None."""
    colds, warms = [], []
    for i in range(reps):
        got, dt = cold()
        ok = len(got) == len(ranks) and all(same(sample(g), want, r) for r, g in zip(ranks, got))
        check(f"{system} cold #{i + 1}: every rank answers as the native init", ok, got)
        if not ok:
            return None
        colds.append(dt)
        for _ in range(A.warm_calls):
            got, dt = warm()
            if all(same(sample(g), want, r) for r, g in zip(ranks, got)):
                warms.append(dt)
    colds.sort()
    record(system, "first_response_s", colds[len(colds) // 2], "s")
    if reps > 1:
        record(system, "first_response_min_s", colds[0], "s")
    if warms:
        warms.sort()
        record(system, "warm_response_s", warms[len(warms) // 2], "s")
    return colds[len(colds) // 2]


def run():
    work = A.workdir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    got = {}
    weights = 2 * A.mib * MIB   # both ranks' weights
    record("tp_mlp", "weights_bytes", weights, "B")
    bw = None
    if not A.sim:
        try:
            bw = bandwidth_both()
            record("limit", "weights_over_h2d_both_s", weights / (bw * 1e9), "s")
        except (S.StepError, OSError, subprocess.TimeoutExpired) as e:
            error("limit", "bandwidth", str(e))

    log(f"== tp_mlp 2 x {A.mib} MiB: weights files (native init, checked against the CPU reference)")
    files = [os.path.join(work, f"weights{r}.bin") for r in range(2)]
    idfile = os.path.join(work, "save.id")
    procs = [subprocess.Popen(rank_argv(r, idfile, "--save-weights", files[r]), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=native_env())
             for r in range(2)]
    outs = [p.communicate(timeout=A.timeout) for p in procs]
    inits = [sample(o[0].splitlines()[0]) if o[0] else None for o in outs]
    want = inits[0][2] if inits[0] else None
    ok = all(p.returncode == 0 for p in procs) and all(i and i[0] is True for i in inits) and \
        inits[0][2] == inits[1][2]
    check("native init matches the CPU reference on both ranks", ok, [o[0][:400] + o[1][-800:] for o in outs])
    if not ok:
        return
    # the weights files stay in the page cache, as every image does: warm files for every system

    log("== native cold starts")
    nat = NativeRanks(files) if "native" in A.systems else None
    if nat is None:
        log("  (not in --systems)")
    try:
        if nat:
            got["native"] = measure("native", lambda: nat.start_and_ask(os.path.join(work, "native.id")),
                                    nat.ask, want, A.reps)
    except (S.StepError, OSError, subprocess.TimeoutExpired) as e:
        error("native", "run", str(e))
    finally:
        if nat:
            nat.close()
        save()

    if not A.sim and "driver-api" in A.systems:
        log("== driver-api+criu: both ranks checkpointed, then restored together")
        cr = CriuRanks(os.path.join(work, "criu"), files)
        try:
            t0 = time.perf_counter()
            cr.prepare(want)
            if cr.why:
                log(f"  CRIU cannot dump the ranks here ({cr.why[:600]}); measuring the driver's "
                    "restore alone (driver-api): a lower bound of driver-api+criu")
                record("driver-api", "criu_dump_error", cr.why[:1500], "")
                got["driver-api"] = measure("driver-api", cr.cold, cr.ask, want, A.baseline_reps)
                cr.close()
                log("== driver-api+criu for the same GPU bytes without NCCL: two mlp processes")
                pair = None
                try:
                    pair = MlpPair(os.path.join(work, "mlp-pair"))
                    got["driver-api+criu"] = pair.measure(A.baseline_reps)
                finally:
                    if pair:
                        pair.close()
                    shutil.rmtree(os.path.join(work, "mlp-pair"), ignore_errors=True)
            else:
                record("driver-api+criu", "checkpoint_both_s", time.perf_counter() - t0, "s")
                cr.cold()   # the first restore reads the images into the page cache
                got["driver-api+criu"] = measure("driver-api+criu", cr.cold, cr.ask, want, A.baseline_reps)
        except (S.StepError, OSError, subprocess.TimeoutExpired) as e:
            error("driver-api+criu", "run", str(e))
        finally:
            cr.close()
            shutil.rmtree(cr.work, ignore_errors=True)
            save()

    log("== phos-ondemand: one invoker per GPU")
    ph = None
    try:
        if "phos-ondemand" not in A.systems:
            raise StopIteration
        ph = PhosRanks(os.path.join(work, "phos"))
        record("phos-ondemand", "deploy_with_snapshot_s", ph.deploy(), "s")
        ph.cold()   # the first cold start after the invokers started (prefetch order recorded)
        got["phos-ondemand"] = measure("phos-ondemand", ph.cold, ph.ask, want, A.reps)
    except StopIteration:
        log("  (not in --systems)")
    except (S.StepError, OSError, ValueError) as e:
        error("phos-ondemand", "run", str(e))
    finally:
        if ph:
            for r, inv in enumerate(ph.invs):
                C.keep_log(inv, f"tp-rank{r}")
                inv.stop()

    log("== phos-oneprocess: one invoker, one executor over both GPUs, one process driving both ranks")
    po = None
    try:
        if "phos-oneprocess" not in A.systems:
            raise StopIteration
        po = PhosOneProcess(os.path.join(work, "phos1"))
        record("phos-oneprocess", "deploy_with_snapshot_s", po.deploy(), "s")
        po.cold()
        got["phos-oneprocess"] = measure("phos-oneprocess", po.cold, po.ask, want, A.reps, ranks=("all",))
    except StopIteration:
        log("  (not in --systems)")
    except (S.StepError, OSError, ValueError) as e:
        error("phos-oneprocess", "run", str(e))
    finally:
        if po:
            C.keep_log(po.inv, "tp-oneprocess")
            po.inv.stop()

    # against driver-api+criu; where CRIU cannot run, against the driver's restore
    # alone, which is faster than it: a conservative ratio
    bname = "driver-api+criu" if got.get("driver-api+criu") else "driver-api"
    base = got.get(bname)
    for system in ("phos-ondemand", "phos-oneprocess", "native"):
        v = got.get(system)
        if v and base:
            record(system, "speedup_vs_driver_api", base / v, "x")
            record(system, "speedup_vs_driver_api_baseline", bname, "")
    for system in ("phos-ondemand", "phos-oneprocess"):
        v = got.get(system)
        if v and bw:
            record(system, "first_response_over_limit", v / (weights / (bw * 1e9)), "x")
    v = got.get("phos-ondemand")
    if v and base and not A.sim:
        check(f"phos-ondemand >= 20x faster than {bname} ({base / v:.1f}x)", base / v >= 20)


def chart(path, recs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    vals = {r["system"]: r["value"] for r in recs if r["metric"] == "first_response_s"}
    lim = [r["value"] for r in recs if r["metric"] == "weights_over_h2d_both_s"]
    if lim:
        vals["limit (H2D)"] = lim[0]
    if not vals:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(vals)
    ax.bar(names, [vals[n] for n in names], color=["#888", "#c44", "#e83", "#2a7", "#1b5", "#36c", "#666"][:len(names)])
    ax.set_yscale("log")
    ax.set_ylabel("first response of both ranks (s, log)")
    ax.set_title(f"tp_mlp cold start, 2 ranks x {A.mib // 1024 or A.mib} {'GiB' if A.mib >= 1024 else 'MiB'}")
    for i, n in enumerate(names):
        ax.text(i, vals[n], f"{vals[n]:.2f} s", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


SYSTEMS = ("native", "driver-api", "phos-ondemand", "phos-oneprocess")


def ran(x, key):
    """Whether this run replaces an earlier tp_mlp record or check x: every one
    of a full run; of a partial run (--systems), those of its systems and of
    the case itself (weights, the limit, the native init)."""
    if set(A.systems) == set(SYSTEMS):
        return True
    if key == "case":
        sysname = x.get("system", "")
        return sysname in ("tp_mlp", "limit") or any(sysname.startswith(s) for s in A.systems)
    name = str(x.get("check", "")).split(": ", 1)[-1]
    return name.startswith("native init") or any(name.startswith(s) for s in A.systems)


def save(final=False):
    """Merges this run into nccl.json and nccl.checks.json (the all-reduce records stay, earlier
    tp_mlp ones go); after every system, so that a run cut short leaves what it measured."""
    os.makedirs(RESULTS, exist_ok=True)
    files = []
    for name, new, key in (("nccl.json", records, "case"), ("nccl.checks.json", checks, "check")):
        path = os.path.join(RESULTS, name + (".sim" if A.sim else ""))
        try:
            with open(os.path.join(RESULTS, name)) as f:
                old = [x for x in json.load(f) if not str(x.get(key, "")).startswith("tp_mlp-") or
                       not ran(x, key)]
        except (OSError, ValueError):
            old = []
        with open(path, "w") as f:
            json.dump(old + new, f, indent=1)
        files.append(path)
        if key == "case":   # the chart: this case's records, this run's and the earlier ones kept
            merged = [x for x in old + new if x.get("case") == A.case]
    png = os.path.join(RESULTS, "nccl-coldstart" + (".sim.png" if A.sim else ".png"))
    if final and chart(png, merged):
        files.append(png)
    if OUT:
        for f in files:
            shutil.copy(f, OUT)


def main():
    global A, DEVICE
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--mib", type=int, default=8192, help="weights per rank (MiB)")
    p.add_argument("--width", type=int, default=0, help="tp_mlp --width (default: its own, 8192)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--baseline-reps", type=int, default=2)
    p.add_argument("--warm-calls", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--workdir", default=os.environ.get("PHOS_BENCH_DIR_TP", "/var/tmp/phos-bench-tp"))
    p.add_argument("--systems", default=",".join(SYSTEMS), help="some of " + ",".join(SYSTEMS))
    p.add_argument("--sim", action="store_true", help=argparse.SUPPRESS)
    A = p.parse_args()
    A.systems = [s for s in A.systems.split(",") if s]
    if not A.systems or any(s not in SYSTEMS for s in A.systems):
        p.error("--systems takes some of " + ",".join(SYSTEMS))
    A.build = os.path.abspath(A.build)
    A.device = "sim" if A.sim else "cuda"
    A.case = f"tp_mlp-2x{A.mib // 1024}GiB" if A.mib % 1024 == 0 else f"tp_mlp-2x{A.mib}MiB"
    C.A = S.A = A
    if A.sim:
        os.environ.setdefault("PHOS_SIM_TWINS", os.path.join(A.build, "functions", "examples",
                                                             "libphos-twins-examples.so"))
        DEVICE = "sim (a dry run, not a measurement)"
    else:
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=30).stdout.split("\n")
        except (OSError, subprocess.TimeoutExpired):
            names = []
        names = [n.strip() for n in names if n.strip()]
        if len(names) < 2:
            print(f"tp_coldstart: needs two GPUs ({len(names)} here): skipped")
            return 77
        DEVICE = f"2 x {names[0]}"
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER: restored ranks come back to us
    log(f"device: {DEVICE}; CRIU {S.find_criu()}; work dir {A.workdir}")
    try:
        run()
    finally:
        S.kill_leftovers(set())
    logs = os.path.join(A.workdir, "logs")
    if OUT and os.path.isdir(logs):
        S.sh(["tar", "czf", os.path.join(OUT, "tp-coldstart-logs.tar.gz"), "-C", A.workdir, "logs"], 120)
    shutil.rmtree(A.workdir, ignore_errors=True)
    save(final=True)
    bad = [c for c in checks if not c["ok"]]
    log(f"tp_coldstart: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
