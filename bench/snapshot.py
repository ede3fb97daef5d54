# SPDX-License-Identifier: MIT
"""Snapshot and stop-the-world restore of the example function `mlp`, phos-fn
side by side with the baseline a user would otherwise pick, in one run on the
GPU machine (issue 3):

  phos-full        phos-fn snapshot / phos-fn restore --stats (GPU data through
                   the executor's staging pipeline, CPU state through CRIU)
  driver-api+criu  the NVIDIA driver checkpoint API on a native mlp:
                   lock + checkpoint (bench/ckpt_baseline) + `criu dump`, then
                   `criu restore` + restore + unlock
  limit            pinned H2D / D2H bandwidth measured in the same run
                   (bench/bandwidth); bytes / bandwidth per size

for 1, 4 and 16 GiB of weights, the image in the page cache (nothing is
dropped between steps). Both restores are checked: the restored function must
answer a request exactly as the native process did before the snapshot.

Writes bench/results/<name>.json (records {"bench","case","system","metric",
"value","unit","device","date"}; a failed step is a record with metric
"error"), <name>.checks.json and <name>.png, and copies them to $OUT.

usage: python3 bench/snapshot.py BUILD_DIR [--sizes 1,4,16] [--systems phos,baseline]
         [--workdir DIR] [--warm-gpu auto|on|off] [--name snapshot] [--keep-images]

CRIU: $PHOS_CRIU (an executable, e.g. the wrapper tools/gpu-check writes),
else BUILD_DIR/criu/criu, else `criu` on PATH.

Baseline recipe (what made CRIU take a process the driver API checkpointed):
the native mlp runs in its own session (setsid), stdin is a named FIFO that
this script keeps open read-write across dump and restore, stdout/stderr are
regular files it only reads; dump `criu dump -t PID -D IMG --shell-job`,
restore `criu restore -D IMG --shell-job -d --pidfile F`; this script is a
child subreaper so the restored process is its child again. The driver calls
run while the process is not frozen (its restore thread must run).
"""
import argparse
import ctypes
import datetime
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
OUT = os.environ.get("OUT")
DATE = datetime.date.today().isoformat()
GIB = 1 << 30
REQUEST = {"batch": 8, "seed": 1, "check": False}
PR_SET_CHILD_SUBREAPER = 36

records = []
checks = []
A = None          # parsed arguments
DEVICE = "unknown"
BW = {}           # bandwidth.cu's answer
CRIU_EXTRA = []   # dump/restore options that worked for the baseline (reused for later sizes)


# ---- output ---------------------------------------------------------------

def log(msg):
    print(msg, flush=True)


def record(case, system, metric, value, unit):
    records.append({"bench": "snapshot", "case": case, "system": system, "metric": metric,
                    "value": value, "unit": unit, "device": DEVICE, "date": DATE})
    v = f"{value:12.4f}" if isinstance(value, (int, float)) else str(value)
    log(f"  {case:22s} {system:16s} {metric:28s} {v} {unit}")


def error(case, system, step, msg):
    msg = f"{step}: {msg}"
    record(case, system, "error", msg[-4000:], "")
    checks.append({"check": f"{case} {system} {step}", "ok": False, "detail": msg[-4000:]})


def check(name, ok, detail=""):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    log(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}")


class StepError(Exception):
    pass


# ---- processes ------------------------------------------------------------

def sh(cmd, timeout, env=None, cwd=None, stdin_data=None):
    """Runs cmd; returns (rc, wall seconds, stdout, stderr). A timeout is rc 124."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([str(c) for c in cmd], input=stdin_data, capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=cwd)
        return p.returncode, time.perf_counter() - t0, p.stdout, p.stderr
    except OSError as e:
        return 127, time.perf_counter() - t0, "", str(e)
    except subprocess.TimeoutExpired as e:
        def s(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return 124, time.perf_counter() - t0, s(e.stdout), s(e.stderr) + f"\n(timed out after {timeout} s)"


def descendants():
    """Pids of every live descendant of this process (we are a subreaper: orphans come back to us)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            parent[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            pass
    out, todo = [], [os.getpid()]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def reap(pid, timeout=30):
    """Waits for a child that no Popen owns; True once it is gone."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            r, _ = os.waitpid(pid, os.WNOHANG)
            if r == pid:
                return True
        except ChildProcessError:
            return not os.path.exists(f"/proc/{pid}")
        time.sleep(0.01)
    return False


def kill_leftovers(keep=()):
    """SIGKILLs every process this script started (transitively) except keep; reaps them."""
    pids = [p for p in descendants() if p not in keep]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in pids:
        reap(p, timeout=10)
    return pids


def gpu_apps():
    rc, _, out, _ = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], 30)
    return out.strip() if rc == 0 else "?"


def gpu_used_mib():
    rc, _, out, _ = sh(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], 30)
    try:
        return int(out.split()[0])
    except (IndexError, ValueError):
        return None


def settle_gpu(keep, floor_mib):
    """Kills our leftovers and waits (up to 30 s) until GPU memory is back to floor_mib (+1 GiB)."""
    killed = kill_leftovers(keep)
    deadline = time.time() + 30
    used = gpu_used_mib()
    while used is not None and floor_mib is not None and used > floor_mib + 1024 and time.time() < deadline:
        time.sleep(0.5)
        used = gpu_used_mib()
    if killed:
        log(f"  (killed leftovers {killed})")
    if used is not None and floor_mib is not None and used > floor_mib + 1024:
        log(f"  warning: {used} MiB still used on the GPU (floor {floor_mib}); apps: {gpu_apps()}")


def read_line(fd, timeout, buf):
    """One line from a pipe fd (buf holds what was read past it); None on EOF or timeout."""
    deadline = time.time() + timeout
    while b"\n" not in buf[0]:
        left = deadline - time.time()
        if left <= 0:
            return None
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf[0] += chunk
    line, buf[0] = buf[0].split(b"\n", 1)
    return line.decode(errors="replace")


def wait_lines(path, n, timeout, proc_alive=None):
    """Waits until the file at path holds n complete lines; returns them (None on timeout or death)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if len(lines) > n:
            return [x.decode(errors="replace") for x in lines[:n]]
        if proc_alive and not proc_alive():
            return None
        time.sleep(0.0005)
    return None


def tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError as e:
        return f"({e})"


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


# The parts of a response that must survive a snapshot (timing-free): mlp's;
# bench/torch_coldstart.py sets torch_mlp's.
ANSWER_KEYS = ("ok", "batch", "seed", "width", "layers", "weights_bytes", "argmax", "top_prob")


def answer(line):
    """The ANSWER_KEYS of a response (None when it is not JSON)."""
    try:
        r = json.loads(line)
    except (TypeError, ValueError):
        return None
    return {k: r.get(k) for k in ANSWER_KEYS}


# ---- environment ----------------------------------------------------------

def native_env():
    """The environment of a native CUDA program: the real libraries, never phos's preload."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    preload = os.path.join(A.build, "preload")
    parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
             if p and not os.path.abspath(p).startswith(preload)]
    if "/usr/local/cuda/lib64" not in parts:
        parts.append("/usr/local/cuda/lib64")
    env["LD_LIBRARY_PATH"] = ":".join(parts)
    return env


def find_criu():
    env = os.environ.get("PHOS_CRIU")
    if env:
        return env
    local = os.path.join(A.build, "criu", "criu")
    if os.access(local, os.X_OK):
        return local
    return shutil.which("criu") or "criu"


def criu_errors(logpath):
    try:
        with open(logpath, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if "Error" in ln and "RLIMIT_NOFILE" not in ln]
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(lines[-15:]) or tail(logpath, 1500)


def gpu_info():
    rc, _, out, _ = sh(["nvidia-smi", "--query-gpu=name,driver_version,persistence_mode",
                        "--format=csv,noheader"], 30)
    if rc != 0 or not out.strip():
        return "unknown (nvidia-smi failed)", "unknown"
    f = [x.strip() for x in out.strip().splitlines()[0].split(",")]
    return f"{f[0]}, {f[1]}", (f[2] if len(f) > 2 else "unknown")


# ---- limit ----------------------------------------------------------------

def bandwidth():
    log("pinned/pageable bandwidth (bench/bandwidth, native)")
    rc, wall, out, err = sh([os.path.join(A.build, "bench", "bandwidth"), "--mib", 1024, "--reps", 5], 300,
                            env=native_env())
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        error("bandwidth-1GiB", "limit", "bandwidth", f"exit {rc}: {err[-2000:]}")
        return
    BW.update(json.loads(lines[-1]))
    for k in ("h2d_pinned_gbs", "d2h_pinned_gbs", "h2d_pageable_gbs"):
        record("bandwidth-1GiB", "limit", k[:-4], BW[k], "GB/s")
    # A durable snapshot cannot go faster than the disk takes writes: measure
    # O_DIRECT sequential writes (4 GiB in 4 MiB blocks) on the work directory's disk.
    os.makedirs(A.workdir, exist_ok=True)
    probe = os.path.join(A.workdir, "disk-write-probe")
    rc, wall, out, err = sh(["dd", "if=/dev/zero", f"of={probe}", "bs=4M", "count=1024", "oflag=direct",
                             "conv=fsync"], 300)
    if rc == 0 and wall > 0:
        BW["disk_write_gbs"] = 4 * 2**30 / wall / 1e9
        record("disk-4GiB", "limit", "disk_write_direct", BW["disk_write_gbs"], "GB/s")
    else:
        error("disk-4GiB", "limit", "disk write", err[-1000:])
    try:
        os.unlink(probe)
    except OSError:
        pass


# ---- phos-fn --------------------------------------------------------------

def phos(size_gib, case):
    """phos-fn snapshot then stop-the-world restore; returns a dict of results (absent keys: failed)."""
    res = {}
    phos_fn = os.path.join(A.build, "invoker", "phos-fn")
    mlp = os.path.join(A.build, "functions", "examples", "mlp")
    work = os.path.join(A.workdir, f"phos-{size_gib}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    img = os.path.join(work, "img")
    sstats, rstats = os.path.join(work, "snapshot-stats.json"), os.path.join(work, "restore-stats.json")
    timeout = 120 + 30 * size_gib

    log(f"phos-full, {size_gib} GiB: snapshot")
    rc, wall, out, err = sh([phos_fn, "snapshot", "--device", "cuda", "--stats", sstats, "-o", img, "--",
                             mlp, "--weights-mib", size_gib * 1024], timeout)
    if rc != 0:
        raise StepError(f"phos-fn snapshot exited {rc}: {err[-3000:]}")
    record(case, "phos-full", "snapshot_wall_s", wall, "s")
    try:
        with open(sstats) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        raise StepError(f"snapshot stats {sstats}: {e}")
    for k in ("total_s", "init_s", "gpu_dump_s", "cpu_dump_s", "commit_s"):
        if k in s:
            record(case, "phos-full", k, s[k], "s")
    for k in ("gpu_bytes", "data_bytes"):
        if k in s:
            record(case, "phos-full", k, s[k], "B")
    res["gpu_bytes"] = s.get("gpu_bytes")
    # The part comparable to the baseline's checkpoint: everything after init.
    parts = [s.get(k) for k in ("gpu_dump_s", "cpu_dump_s", "commit_s")]
    if all(isinstance(x, (int, float)) for x in parts):
        res["checkpoint_s"] = sum(parts)
        record(case, "phos-full", "checkpoint_s", res["checkpoint_s"], "s")
    if s.get("gpu_bytes") and s.get("gpu_dump_s"):
        gbs = s["gpu_bytes"] / s["gpu_dump_s"] / 1e9
        record(case, "phos-full", "gpu_dump_gbs", gbs, "GB/s")
        if BW.get("d2h_pinned_gbs"):
            res["dump_frac"] = gbs / BW["d2h_pinned_gbs"]
            record(case, "phos-full", "gpu_dump_vs_pinned_d2h", res["dump_frac"], "fraction")
        # The data goes to the disk (O_DIRECT), so the limit is the slower of the two.
        lim = min(x for x in (BW.get("d2h_pinned_gbs"), BW.get("disk_write_gbs")) if x) if BW else None
        if lim:
            res["dump_limit_frac"] = gbs / lim
            record(case, "phos-full", "gpu_dump_vs_limit", res["dump_limit_frac"], "fraction")
    record(case, "phos-full", "image_bytes", du(img), "B")
    settle_gpu(A.keep, A.floor)
    os.sync()
    # The dump wrote gpu.data with O_DIRECT: read the image once so that the restore
    # measured here starts with it in the page cache, as this case says.
    sh(["sh", "-c", f"find {img} -type f -exec cat {{}} + > /dev/null"], timeout)

    log(f"phos-full, {size_gib} GiB: restore (image in the page cache)")
    errf = open(os.path.join(work, "restore.stderr"), "wb")
    t0 = time.perf_counter()
    p = subprocess.Popen([phos_fn, "restore", "--device", "cuda", "--stats", rstats, img], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=errf, start_new_session=True)
    errf.close()
    try:
        p.stdin.write((json.dumps(REQUEST) + "\n").encode())
        p.stdin.flush()
        line = read_line(p.stdout.fileno(), timeout, [b""])
        t_first = time.perf_counter() - t0
        if line is None:
            raise StepError(f"no response from the restored function: {tail(os.path.join(work, 'restore.stderr'))}")
        res["first_response_s"] = t_first
        res["answer"] = answer(line)
        record(case, "phos-full", "first_response_s", t_first, "s")
        p.stdin.close()
        rc = p.wait(timeout=120)
        if rc != 0:
            error(case, "phos-full", "restore exit", f"phos-fn restore exited {rc}: "
                  f"{tail(os.path.join(work, 'restore.stderr'))}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    try:
        with open(rstats) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        raise StepError(f"restore stats {rstats}: {e}")
    for k in ("gpu_restore_s", "open_s", "load_s", "data_s", "cpu_restore_s", "ready_s"):
        if k in r:
            record(case, "phos-full", k, r[k], "s")
    if isinstance(r.get("ready_s"), (int, float)):
        res["restore_s"] = r["ready_s"]
        record(case, "phos-full", "restore_s", r["ready_s"], "s")
    gb = r.get("gpu_bytes") or res.get("gpu_bytes")
    res["gpu_bytes"] = gb
    if gb and r.get("data_s"):
        # The buffer contents' part of the restore: page cache -> pinned staging -> GPU.
        gbs = gb / r["data_s"] / 1e9
        record(case, "phos-full", "gpu_restore_gbs", gbs, "GB/s")
        if BW.get("h2d_pinned_gbs"):
            res["restore_frac"] = gbs / BW["h2d_pinned_gbs"]
            record(case, "phos-full", "gpu_restore_vs_pinned_h2d", res["restore_frac"], "fraction")
    if not A.keep_images:
        shutil.rmtree(work, ignore_errors=True)
    return res


# ---- baseline: driver checkpoint API + CRIU -------------------------------

class Native:
    """A native mlp that CRIU can dump and restore: own session, stdin a FIFO that we hold
    open read-write (so it never sees EOF while it is dumped), stdout/stderr regular files."""

    def __init__(self, work, argv):
        self.fifo = os.path.join(work, "stdin.fifo")
        self.out = os.path.join(work, "stdout.txt")
        self.err = os.path.join(work, "stderr.txt")
        os.mkfifo(self.fifo)
        self.wfd = os.open(self.fifo, os.O_RDWR)
        rfd = os.open(self.fifo, os.O_RDONLY)
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.p = subprocess.Popen(argv, stdin=rfd, stdout=out, stderr=err, cwd=work, env=native_env(),
                                      start_new_session=True, close_fds=True)
        os.close(rfd)
        self.pid = self.p.pid
        self.restored = False
        self.lines = 0

    def alive(self):
        if not self.restored:
            return self.p.poll() is None
        try:
            r, _ = os.waitpid(self.pid, os.WNOHANG)
            return r == 0
        except ChildProcessError:
            return os.path.exists(f"/proc/{self.pid}")

    def ask(self, req, timeout):
        """Sends one request; returns (response line, seconds) or raises StepError."""
        t0 = time.perf_counter()
        os.write(self.wfd, (json.dumps(req) + "\n").encode())
        self.lines += 1
        got = wait_lines(self.out, self.lines, timeout, self.alive)
        if got is None:
            raise StepError(f"no response (alive={self.alive()}): {tail(self.err)}")
        return got[-1], time.perf_counter() - t0

    def reap_dumped(self):
        """After `criu dump` killed it: reap, so that its pid is free for `criu restore`."""
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise StepError("the dumped process is still alive after criu dump")

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.restored:
            reap(self.pid)
        else:
            self.p.wait()
        os.close(self.wfd)


def ckpt(ops, pid, timeout):
    """bench/ckpt_baseline OPS PID; returns (wall s, {op: driver s}) or raises StepError."""
    tool = os.path.join(A.build, "bench", "ckpt_baseline")
    rc, wall, out, err = sh([tool, ops, pid], timeout, env=native_env())
    calls = {}
    for ln in out.splitlines():
        try:
            j = json.loads(ln)
        except ValueError:
            continue
        calls[j["op"]] = j.get("s")
        if j["op"] == "init":
            log(f"  (ckpt_baseline needed cuInit: {j})")
    if rc != 0:
        raise StepError(f"ckpt_baseline {ops} {pid} exited {rc}: {out[-1500:]} {err[-1500:]}")
    return wall, calls


def gpu_handles(pid):
    """What of the GPU a process still holds: /dev/nvidia* mappings and descriptors (for the log)."""
    maps = fds = 0
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = sum(1 for ln in f if "/dev/nvidia" in ln)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                fds += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/nvidia")
            except OSError:
                pass
    except OSError as e:
        return f"? ({e})"
    return f"{maps} /dev/nvidia* mappings, {fds} /dev/nvidia* descriptors"


def driver_state(pid):
    tool = os.path.join(A.build, "bench", "ckpt_baseline")
    rc, _, out, err = sh([tool, "state", pid], 60, env=native_env())
    for ln in out.splitlines():
        if '"state"' in ln:
            return json.loads(ln)["state"]
    return f"? ({err.strip()[-300:]})"


DUMP_OPTION_SETS = [[], ["--ext-unix-sk", "--link-remap", "--file-locks"]]


def baseline(size_gib, case):
    global CRIU_EXTRA
    res = {}
    criu = find_criu()
    work = os.path.join(A.workdir, f"baseline-{size_gib}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    img = os.path.join(work, "img")
    timeout = 120 + 30 * size_gib
    argv = (A.function.split() if A.function else [os.path.join(A.build, "functions", "examples", "mlp")]) + \
        ["--weights-mib", str(size_gib * 1024)]

    log(f"driver-api+criu, {size_gib} GiB: start native mlp")
    fn = Native(work, argv)
    try:
        line, t_init = fn.ask(REQUEST, timeout)
        before = answer(line)
        if not (before and before.get("ok")):
            raise StepError(f"native mlp answered {line[:500]}")
        res["answer_native"] = before
        record(case, "driver-api+criu", "init_to_first_response_s", t_init, "s")
        if not A.no_driver_api:
            log(f"  state before: {driver_state(fn.pid)}; holds {gpu_handles(fn.pid)}")

        log(f"driver-api+criu, {size_gib} GiB: checkpoint (lock, checkpoint, criu dump)")
        t_ckpt = 0.0
        calls = {}
        if not A.no_driver_api:
            t_ckpt, calls = ckpt("lock,checkpoint", fn.pid, timeout)
            log(f"  state after checkpoint: {driver_state(fn.pid)}; holds {gpu_handles(fn.pid)}")
        dumped = None
        sets = [CRIU_EXTRA] if CRIU_EXTRA else DUMP_OPTION_SETS
        for extra in sets:
            shutil.rmtree(img, ignore_errors=True)
            os.makedirs(img)
            rc, t_dump, out, err = sh([criu, "dump", "-t", fn.pid, "-D", img, "--shell-job", "-o", "dump.log",
                                       *extra], timeout)
            if rc == 0:
                dumped = extra
                break
            log(f"  criu dump {' '.join(extra) or '(no extra options)'} failed, exit {rc}:\n"
                f"{criu_errors(os.path.join(img, 'dump.log'))}\n{err[-1000:]}")
            if not fn.alive():
                break
        if dumped is None:
            raise StepError(f"criu dump failed with every option set: "
                            f"{criu_errors(os.path.join(img, 'dump.log'))}")
        CRIU_EXTRA = dumped
        fn.reap_dumped()
        log(f"  criu dump options: --shell-job {' '.join(dumped)}")
        if "lock" in calls:
            record(case, "driver-api+criu", "lock_driver_s", calls["lock"], "s")
        if "checkpoint" in calls:
            record(case, "driver-api+criu", "checkpoint_driver_s", calls["checkpoint"], "s")
        record(case, "driver-api+criu", "lock_checkpoint_wall_s", t_ckpt, "s")
        record(case, "driver-api+criu", "criu_dump_s", t_dump, "s")
        res["checkpoint_s"] = t_ckpt + t_dump
        record(case, "driver-api+criu", "checkpoint_s", res["checkpoint_s"], "s")
        record(case, "driver-api+criu", "image_bytes", du(img), "B")
        settle_gpu(A.keep, A.floor)
        os.sync()  # as for phos: cached, written back

        log(f"driver-api+criu, {size_gib} GiB: restore (criu restore, restore, unlock; image in the page cache)")
        pidfile = os.path.join(work, "restored.pid")
        t0 = time.perf_counter()
        rc, t_rest, out, err = sh([criu, "restore", "-D", img, "--shell-job", "-d", "--pidfile", pidfile,
                                   "-o", "restore.log", *dumped], timeout)
        if rc != 0:
            raise StepError(f"criu restore exited {rc}: {criu_errors(os.path.join(img, 'restore.log'))}\n"
                            f"{err[-1000:]}")
        with open(pidfile) as f:
            rpid = int(f.read().strip())
        fn.restored = True
        fn.pid = rpid
        calls = {}
        t_drv = 0.0
        if not A.no_driver_api:
            t_drv, calls = ckpt("restore,unlock", rpid, timeout)
        t_ready = time.perf_counter() - t0
        line, t_req = fn.ask(REQUEST, timeout)
        t_first = time.perf_counter() - t0
        record(case, "driver-api+criu", "criu_restore_s", t_rest, "s")
        if "restore" in calls:
            record(case, "driver-api+criu", "restore_driver_s", calls["restore"], "s")
        if "unlock" in calls:
            record(case, "driver-api+criu", "unlock_driver_s", calls["unlock"], "s")
        record(case, "driver-api+criu", "restore_unlock_wall_s", t_drv, "s")
        res["restore_s"] = t_ready
        record(case, "driver-api+criu", "restore_s", t_ready, "s")
        res["first_response_s"] = t_first
        record(case, "driver-api+criu", "first_response_s", t_first, "s")
        res["answer"] = answer(line)
        same = res["answer"] == before
        check(f"{case}: driver-api+criu restored mlp answers as before the checkpoint", same,
              "" if same else f"before {before} after {res['answer']}")
    finally:
        fn.close()
        if not A.keep_images:
            shutil.rmtree(work, ignore_errors=True)
    return res


# ---- the run --------------------------------------------------------------

def run_size(size_gib):
    case = f"mlp-{size_gib}GiB-pagecache"
    got = {}
    for system, fn in (("phos-full", phos), ("driver-api+criu", baseline)):
        if (system == "phos-full" and "phos" not in A.systems) or \
           (system == "driver-api+criu" and "baseline" not in A.systems):
            continue
        try:
            got[system] = fn(size_gib, case)
        except StepError as e:
            error(case, system, "run", str(e))
        except Exception as e:  # noqa: BLE001 - one failing step must not stop the others
            error(case, system, "run", repr(e))
        settle_gpu(A.keep, A.floor)

    ph, bl = got.get("phos-full", {}), got.get("driver-api+criu", {})
    gpu_bytes = ph.get("gpu_bytes") or size_gib * GIB
    if BW.get("h2d_pinned_gbs"):
        record(case, "limit", "restore_s", gpu_bytes / BW["h2d_pinned_gbs"] / 1e9, "s")
    if BW.get("d2h_pinned_gbs"):
        record(case, "limit", "checkpoint_s", gpu_bytes / BW["d2h_pinned_gbs"] / 1e9, "s")
    if ph.get("restore_s") and bl.get("restore_s"):
        x = bl["restore_s"] / ph["restore_s"]
        record(case, "phos-full", "restore_speedup_vs_baseline", x, "x")
        if size_gib >= 16:
            check(f"{case}: phos restore >= 10x faster than driver-api+criu", x >= 10, f"{x:.1f}x")
    if ph.get("first_response_s") and bl.get("first_response_s"):
        record(case, "phos-full", "first_response_speedup_vs_baseline",
               bl["first_response_s"] / ph["first_response_s"], "x")
    if ph.get("checkpoint_s") and bl.get("checkpoint_s"):
        record(case, "phos-full", "checkpoint_speedup_vs_baseline", bl["checkpoint_s"] / ph["checkpoint_s"], "x")
    if "restore_frac" in ph:
        check(f"{case}: phos GPU restore >= 80% of pinned H2D", ph["restore_frac"] >= 0.8,
              f"{ph['restore_frac'] * 100:.0f}%")
    if "dump_limit_frac" in ph:
        check(f"{case}: phos GPU dump >= 80% of min(pinned D2H, disk write)", ph["dump_limit_frac"] >= 0.8,
              f"{ph['dump_limit_frac'] * 100:.0f}% (of pinned D2H alone: {ph.get('dump_frac', 0) * 100:.0f}%)")
    if ph.get("answer") is not None:
        ref = bl.get("answer_native")
        ok = ph["answer"].get("ok") and (ref is None or ph["answer"] == ref)
        check(f"{case}: phos restored mlp answers ok" + (" and as the native mlp" if ref else ""), ok,
              "" if ok else f"phos {ph['answer']} native {ref}")


def chart(path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(no matplotlib: no chart)")
        return
    get = {(r["case"], r["system"], r["metric"]): r["value"] for r in records}
    sizes = A.sizes
    cases = [f"mlp-{s}GiB-pagecache" for s in sizes]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    systems = [("driver-api+criu", "#888"), ("phos-full", "#2a7")]
    w = 0.38
    for ax, metric, title in ((axes[0], "checkpoint_s", "checkpoint (s)"),
                              (axes[1], "restore_s", "stop-the-world restore, page cache (s)")):
        for i, (system, color) in enumerate(systems):
            xs = [k + (i - 0.5) * w for k in range(len(cases))]
            vals = [get.get((c, system, metric)) for c in cases]
            ok = [(x, v) for x, v in zip(xs, vals) if isinstance(v, (int, float)) and v > 0]
            ax.bar([x for x, _ in ok], [v for _, v in ok], w, color=color)
            for x, v in zip(xs, vals):
                if isinstance(v, (int, float)) and v > 0:
                    ax.annotate(f"{v:.3g}", (x, v), ha="center", va="bottom", fontsize=8)
                else:  # y in axes coordinates: at the bottom whatever the scale
                    ax.annotate("no result", (x, 0.02), xycoords=ax.get_xaxis_transform(), ha="center",
                                fontsize=8, rotation=90, color=color)
        lim = [get.get((c, "limit", metric)) for c in cases]
        if any(isinstance(v, (int, float)) for v in lim):
            ax.plot(range(len(cases)), [v if isinstance(v, (int, float)) else float("nan") for v in lim], "k_",
                    ms=60, mew=2)
        labels = []
        for s, c in zip(sizes, cases):
            x = get.get((c, "phos-full", metric.replace("_s", "_speedup_vs_baseline")))
            labels.append(f"{s} GiB" + (f"\nphos {x:.1f}x faster" if isinstance(x, (int, float)) else ""))
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(labels)
        ax.set_xlim(-0.6, len(cases) - 0.4)
        ax.set_yscale("log")
        ax.set_ylim(top=ax.get_ylim()[1] * 2)  # room for the labels above the bars
        ax.set_title(title)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=color, label=system) for system, color in systems]
    handles.append(Line2D([], [], color="k", lw=2, label="limit"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9)
    fig.suptitle(f"mlp snapshot / restore, {DEVICE}, {DATE}; limit = GPU bytes / pinned bandwidth "
                 f"(H2D {BW.get('h2d_pinned_gbs', 0):.1f}, D2H {BW.get('d2h_pinned_gbs', 0):.1f} GB/s)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--sizes", default="1,4,16", help="GiB of weights, comma-separated (default 1,4,16)")
    p.add_argument("--systems", default="phos,baseline", help="phos,baseline (default both)")
    p.add_argument("--workdir", default=os.environ.get("PHOS_BENCH_DIR", "/var/tmp/phos-bench-snapshot"),
                   help="where images go (a disk; default /var/tmp/phos-bench-snapshot)")
    p.add_argument("--warm-gpu", choices=("auto", "on", "off"), default="auto",
                   help="hold a CUDA context for the whole run so that the GPU stays initialised "
                        "(auto: when persistence mode is off; a serving host keeps it initialised)")
    p.add_argument("--name", default="snapshot", help="results file name (default snapshot)")
    p.add_argument("--keep-images", action="store_true")
    # For trying the CRIU half of the baseline without a GPU: no driver calls, and a stand-in program.
    p.add_argument("--no-driver-api", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--function", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    a.systems = set(a.systems.split(","))
    return a


def main():
    global A, DEVICE
    A = parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    os.makedirs(A.workdir, exist_ok=True)
    # Restored processes are reparented to us (not to init), so that we can wait for them and kill them.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log(f"warning: PR_SET_CHILD_SUBREAPER failed: {os.strerror(ctypes.get_errno())}")
    DEVICE, persistence = gpu_info()
    log(f"device: {DEVICE}; persistence mode {persistence}; CRIU {find_criu()}; work dir {A.workdir}")
    rc, _, out, _ = sh(["df", "-T", A.workdir], 10)
    log(out.strip())

    A.keep = set()
    holder = None
    if A.warm_gpu == "on" or (A.warm_gpu == "auto" and persistence.lower() != "enabled"):
        holder = subprocess.Popen([os.path.join(A.build, "bench", "bandwidth"), "--hold"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=native_env())
        line = read_line(holder.stdout.fileno(), 120, [b""])
        if line and "holding" in line:
            log(f"holding a CUDA context for the run (pid {holder.pid})")
            A.keep.add(holder.pid)
        else:
            log("warning: could not hold a CUDA context; the GPU may be de-initialised between steps")
            holder.kill()
            holder.wait()
            holder = None
    record("run", "limit", "gpu_kept_initialised", 1 if holder else 0, "bool")
    A.floor = gpu_used_mib()

    try:
        bandwidth()
        settle_gpu(A.keep, A.floor)
        for size in A.sizes:
            run_size(size)
    finally:
        kill_leftovers(A.keep)
        if holder:
            holder.stdin.close()
            try:
                holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()

    names = [f"{A.name}.json", f"{A.name}.checks.json", f"{A.name}.png"]
    with open(os.path.join(RESULTS, names[0]), "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.join(RESULTS, names[1]), "w") as f:
        json.dump(checks, f, indent=1)
    try:
        chart(os.path.join(RESULTS, names[2]))
    except Exception as e:  # noqa: BLE001 - the numbers matter more than the picture
        log(f"chart failed: {e!r}")
    if OUT:
        for name in names:
            if os.path.exists(os.path.join(RESULTS, name)):
                shutil.copy(os.path.join(RESULTS, name), OUT)
    failed = [c for c in checks if not c["ok"]]
    log(f"snapshot: {len(checks) - len(failed)}/{len(checks)} checks ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
