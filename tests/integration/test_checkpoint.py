# SPDX-License-Identifier: MIT
"""Checkpoints of running programs, stw, cow and recopy (issue 11), on the sim
device:

- train (functions/examples/train) under `phos-fn run --checkpointable`,
  checkpointed at random moments (several seeds, every mode; with and without
  pinned host memory shared with the executor), the original killed, and
  restored from the checkpoint: it goes on from where it was stopped and ends
  with exactly the checksum of an uninterrupted run, its loss lines those of
  the uninterrupted run for the same steps;
- cow: the program's writes race the checkpoint's copies (every step writes
  every weight) and the buffers it was about to write are copied first
  (early_copies in the manifest): into the device reserve (reserve_copies),
  or, with the reserve exhausted (PHOS_COW_RESERVE_BYTES=0), to gpu.data
  before the write runs;
- recopy: the buffers are copied while the program runs, in rounds (one
  buffer a step with PHOS_RECOPY_STEP_BYTES=1, so that training steps run
  between the copies and dirty them again), and the manifest says how many
  rounds and bytes;
- a restored run is checkpointed again (phos-fn restore takes checkpoint
  requests), killed, and restored from that latest checkpoint;
- a function that set device limits and stream attributes (ctx_serve),
  checkpointed in every mode: its restored copy reads the same values (the
  restoring executor set them again from the image) and counts on;
- a serving function (tables) checkpointed in its serve loop, every mode:
  the restored copy answers the requests on the restore's stdin, on its
  stdout, once each; checkpointed and restored again, it still does;
- a checkpoint that fails (a full disk: fault point gpu_data_alloc) fails
  alone: a later one succeeds and the program goes on to the same checksum;
- the executor killed during a checkpoint (fault point checkpoint_kill) leaves
  the previous checkpoint intact and restorable, and no temporary directory;
- periodic checkpoints (--checkpoint-every, every mode, and auto from
  --mtbf): with --restart-on-failure the executor is SIGKILLed twice at
  random moments and the run restarts from its latest checkpoint each time,
  ending with the uninterrupted checksum; only --keep checkpoints stay; a
  periodic checkpoint that meets a full disk fails alone; `phos-fn restore`
  of the checkpoint directory takes its latest; without a checkpoint, or
  with --max-restarts 0, the run fails and says why; a fatal (sticky) GPU
  error, injected on sim, ends the executor and the run restarts alike;
- bad input to `phos-fn checkpoint`, `phos-fn run` and `phos-fn restore`
  gets clear errors, and a directory that is not a checkpoint is never
  replaced.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time

from harness import DEVICE, PHOS_FN, check, done, fn_env, phos, program
from harness import ask as ask_line

TRAIN = program("functions", "examples", "train")
TABLES = program("functions", "examples", "tables")
CTX_SERVE = program("tests", "integration", "ctx_serve")
TABLES_ARGS = ["--tables", "4", "--table-mib", "1"]
STEPS = 4000
EVERY = 100

tmp = tempfile.mkdtemp(prefix="phos-ckpt-test-")
RUN_ENV = {"PHOS_RUN_DIR": os.path.join(tmp, "run")}


def train_args(seed):
    """Seeds of 5 and more read the loss back into pinned host memory
    (cudaMallocHost), a region the restored executor must map again; seeds 3
    and 10 (recopy) have 10 and 2 MiB of frozen state that no step writes
    (10 MiB: more than a recopy step's 4 MiB piece, copied in three); seed 1
    (stw) 5 MiB, more than two pieces of its host copy's pinning."""
    frozen = {1: "5", 3: "10", 10: "2"}
    return ["--steps", str(STEPS), "--seed", str(seed), "--size", "32", "--every", str(EVERY),
            *(["--pinned"] if seed >= 5 else []), *(["--frozen-mib", frozen[seed]] if seed in frozen else [])]


def parse(out):
    """{step: loss line} and the checksum of train's output."""
    losses, checksum = {}, None
    for line in out.splitlines():
        w = line.split()
        if len(w) == 4 and w[0] == "step" and w[2] == "loss":
            losses[int(w[1])] = line
        elif len(w) == 5 and w[0] == "done":
            checksum = w[4]
    return losses, checksum


def reference(seed):
    p = subprocess.run([PHOS_FN, "run", "--device", DEVICE, "--", TRAIN, *train_args(seed)], capture_output=True,
                       text=True, timeout=300, env=fn_env(RUN_ENV))
    check(p.returncode == 0, f"reference run of seed {seed}: {p.returncode} {p.stderr[-500:]}")
    return parse(p.stdout)


def start(seed, extra_env=None):
    """A checkpointable run, paused 300 us after each step (on the CPU side;
    the results do not change) so that it outlasts the checkpoints however
    fast the machine is."""
    env = dict(RUN_ENV)
    env.update(extra_env or {})
    return subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", TRAIN, *train_args(seed),
                             "--pause-us", "300"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=fn_env(env))


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def kill_run(p):
    """SIGKILLs a phos-fn run, its program (the init of its own pid namespace:
    not in phos-fn's process group) and its executor; what it printed."""
    kids = children(p.pid)
    for pid in [p.pid, *kids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return p.communicate(timeout=60)


def checkpoint(pid, out, *extra):
    return phos("checkpoint", *extra, "-o", out, pid, extra_env=RUN_ENV, timeout=300)


def restore(d, *extra):
    return phos("restore", "--device", DEVICE, *extra, d, timeout=300)


def same_steps(ref_losses, losses, what):
    bad = [s for s, line in losses.items() if ref_losses.get(s) != line]
    check(not bad, f"{what}: loss lines differ from the uninterrupted run at steps {bad[:5]}")


def leftovers(d):
    parent, base = os.path.split(d)
    return [n for n in os.listdir(parent) if n.startswith(base + ".tmp-")]


try:
    os.makedirs(RUN_ENV["PHOS_RUN_DIR"])

    # --- checkpointed at random moments, killed, restored -----------------------
    early = reserved = 0
    for seed, mode in ((1, "stw"), (2, "cow"), (3, "recopy"), (4, "cow"), (5, "stw"), (6, "cow"), (8, "recopy")):
        ref_losses, ref_sum = reference(seed)
        check(ref_sum and len(ref_losses) == STEPS // EVERY, f"seed {seed}: reference output {ref_sum} "
              f"{len(ref_losses)} loss lines")
        rng = random.Random(seed)
        ck = os.path.join(tmp, f"ck{seed}")
        # seeds 2, 5, 6: no host copy allowed (ctxpool/executor/staging.h), so stw
        # writes gpu.data while it holds the program and cow copies buffer by
        # buffer between records (the race with writes, the device reserve);
        # seeds 1 and 9, 11 below: through a host copy
        # seed 1: its host copy pinned in 2 MiB pieces, which the copies into
        # it must not straddle (sim refuses such a copy, as the driver does);
        # seed 4: cow through a host copy queued an item at a time, so that
        # records write items whose copy is not even queued yet
        p = start(seed, {"PHOS_RECOPY_STEP_BYTES": "1"} if seed == 3 else
                  {"PHOS_HOST_PIN_PIECE": str(2 << 20)} if seed == 1 else
                  {"PHOS_COW_QUEUE": "1:1:1"} if seed == 4 else
                  {"PHOS_COW_RESERVE_BYTES": "0", "PHOS_HOST_COPY_MAX": "0"} if seed == 6 else
                  {"PHOS_HOST_COPY_MAX": "0"} if seed in (2, 5) else None)
        first = p.stdout.readline()   # it is training
        check(first.startswith("step "), f"seed {seed}: first line {first!r}")
        n = 1 + seed % 2   # one or two checkpoints; the last one counts
        for i in range(n):
            time.sleep(rng.uniform(0.0, 0.5))
            c = checkpoint(p.pid, ck, "--mode", mode)
            check(c.returncode == 0 and f"checkpoint ({mode})" in c.stderr,
                  f"seed {seed}: checkpoint {i}: {c.returncode} {c.stderr}")
        m = json.load(open(os.path.join(ck, "manifest.json")))
        check(m.get("checkpoint", {}).get("mode") == mode and m["checkpoint"]["seq"] > 0,
              f"seed {seed}: the manifest says what it is: {m.get('checkpoint')}")
        early += m.get("checkpoint", {}).get("early_copies", 0)
        if seed >= 5:   # --pinned: its region lies in the host window (proto.h), which every executor
            # keeps free, at the function's own address, so a new executor maps it there again
            # (anywhere else, that address was taken in a restore's executor on an H200)
            win = m["arena"]["base"] + m["arena"]["size"] + (4 << 30)
            regs = m.get("host_regions", [])
            check(regs and all(g["exec_addr"] == g["addr"] and win <= g["addr"]
                               and g["addr"] + g["size"] <= win + (256 << 30) for g in regs),
                  f"seed {seed}: pinned memory in the host window at {win:#x}: "
                  f"{[(hex(g['addr']), hex(g['exec_addr'])) for g in regs]}")
        if mode == "stw":
            mc = m["checkpoint"]
            check(mc.get("host_copy") is (seed != 5) and 0 < mc.get("copy_s", 0) <= mc["stall_s"],
                  f"seed {seed}: stw {'not ' if seed == 5 else ''}through a host copy: {mc}")
        if mode == "cow":
            mc = m["checkpoint"]
            check(mc.get("host_copy") is (seed not in (2, 6)),
                  f"seed {seed}: cow {'not ' if seed in (2, 6) else ''}through a host copy: {mc}")
            reserved += mc.get("reserve_copies", 0)
            if seed == 6:
                check(mc.get("reserve_copies", -1) == 0, f"seed {seed}: an exhausted reserve takes nothing: {mc}")
            elif seed == 4:   # through host memory: a write waits for its buffer's copy, queued first
                check(mc.get("early_copies", 0) >= 1 and mc.get("reserve_copies", -1) == 0,
                      f"seed {seed}: records waited for copies queued for them: {mc}")
            else:
                check(mc.get("reserve_copies", -1) == mc.get("early_copies"),
                      f"seed {seed}: every early copy fits the default reserve: {mc}")
        if mode == "recopy":
            mc = m["checkpoint"]
            check(mc.get("rounds", 0) >= 1 and mc.get("precopy_bytes", 0) > 0
                  and mc.get("stop_bytes", -1) <= m["gpu_bytes"] + 65536,
                  f"seed {seed}: recopy's rounds and bytes: {mc}")
            if seed == 3:
                check(mc["rounds"] >= 2, f"seed {seed}: one buffer a step takes more than one round: {mc}")
                check(mc["stop_bytes"] < 10 << 20 <= mc["precopy_bytes"],
                      f"seed {seed}: the frozen 10 MiB were copied while it ran, in pieces, not at the stop: {mc}")
        kill_run(p)
        # seeds 5, 6 and 8: restored on demand (the training goes on while its
        # buffers stream in; each kernel waits for what it reads)
        r = restore(ck, *(["--on-demand"] if seed >= 5 else []))
        losses, checksum = parse(r.stdout)
        check(r.returncode == 0, f"seed {seed}: restore: {r.returncode} {r.stderr[-800:]}")
        check(checksum == ref_sum, f"seed {seed}: restored run ended with checksum {checksum}, "
              f"uninterrupted {ref_sum}")
        check(losses and max(losses) == STEPS and min(losses) > EVERY,
              f"seed {seed}: the restored run went on from its checkpoint: steps {sorted(losses)[:3]}...")
        same_steps(ref_losses, losses, f"seed {seed}")
        check(not leftovers(ck), f"seed {seed}: temporary directories left: {leftovers(ck)}")

    check(early > 0, "cow: no buffer was copied ahead of a write (the race was not exercised)")
    check(reserved > 0, "cow: no buffer was copied into the device reserve")

    # --- restart from the latest checkpoint of a restored run --------------------
    # a run checkpointed, killed, restored; the restored run checkpointed
    # (phos-fn restore serves checkpoints too), killed, restored again
    ref_losses, ref_sum = reference(7)
    ck = os.path.join(tmp, "chain")
    p = start(7)
    p.stdout.readline()
    time.sleep(0.3)
    c = checkpoint(p.pid, ck)
    check(c.returncode == 0, f"chain: first checkpoint: {c.stderr}")
    kill_run(p)
    seq1 = json.load(open(os.path.join(ck, "manifest.json")))["checkpoint"]["seq"]
    r1 = subprocess.Popen([PHOS_FN, "restore", "--device", DEVICE, ck], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fn_env(RUN_ENV))
    r1.stdout.readline()
    c = checkpoint(r1.pid, ck, "--mode", "cow")
    check(c.returncode == 0, f"chain: checkpoint of the restored run: {c.returncode} {c.stderr}")
    seq2 = json.load(open(os.path.join(ck, "manifest.json")))["checkpoint"]["seq"]
    check(seq2 > seq1, f"chain: the second checkpoint is later in the run ({seq1} then {seq2})")
    kill_run(r1)
    r = restore(ck)
    losses, checksum = parse(r.stdout)
    check(r.returncode == 0 and checksum == ref_sum,
          f"chain: restored twice, the run ends as an uninterrupted one: {checksum} {ref_sum} {r.stderr[-500:]}")
    same_steps(ref_losses, losses, "chain")

    # --- a serving function checkpointed in its serve loop -----------------------
    # It waits for its next request in CPU code (getline on stdin), its
    # answers going to a copy of its stdout with fd 1 pointed at stderr: the
    # restored copy must answer the requests on the restore's stdin, on the
    # restore's stdout, and must not run before its executor has its channel.
    def ask(p, k):
        return ask_line(p, json.dumps({"table": k}))

    def serving(*cmd):
        return subprocess.Popen([PHOS_FN, *cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=fn_env(RUN_ENV))

    for mode in ("stw", "cow", "recopy"):
        ck = os.path.join(tmp, "serve-" + mode)
        p = serving("run", "--checkpointable", "--device", DEVICE, "--", TABLES, *TABLES_ARGS)
        a = ask(p, 1)
        check(a.get("ok") is True, f"{mode}: serving before the checkpoint: {a}")
        c = checkpoint(p.pid, ck, "--mode", mode)
        check(c.returncode == 0, f"{mode}: checkpoint in the serve loop: {c.returncode} {c.stderr}")
        a = ask(p, 2)
        check(a.get("ok") is True and a.get("table") == 2, f"{mode}: the original serves on: {a}")
        kill_run(p)
        # restored, answering on new stdio; checkpointed again there, restored again
        r1 = serving("restore", "--device", DEVICE, ck)
        a = ask(r1, 3)
        check(a.get("ok") is True and a.get("table") == 3, f"{mode}: the restored copy answers: {a} "
              f"{'' if a.get('ok') else r1.stderr.read() if r1.poll() is not None else ''}")
        c = checkpoint(r1.pid, ck, "--mode", mode)
        check(c.returncode == 0, f"{mode}: checkpoint of the restored copy: {c.returncode} {c.stderr}")
        kill_run(r1)
        reqs = "".join(json.dumps({"table": k, "direct": k % 2 == 0}) + "\n" for k in range(4))
        r = phos("restore", "--device", DEVICE, ck, stdin=reqs, timeout=300)
        answers = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        check(r.returncode == 0 and [a.get("table") for a in answers] == [0, 1, 2, 3] and
              all(a.get("ok") is True for a in answers),
              f"{mode}: restored twice, every request answered once: {r.returncode} {answers} {r.stderr[-400:]}")

    # --- limits and stream attributes the program set (ctx_serve) ---------------
    # The image carries their values ("limits", "stream_attrs") and the
    # restoring executor sets them again: the restored copy reads what the
    # original read, and counts on.
    for mode in ("stw", "cow", "recopy"):
        ck = os.path.join(tmp, "ctx-" + mode)
        p = serving("run", "--checkpointable", "--device", DEVICE, "--", CTX_SERVE)
        a1 = ask(p, 0)
        check(a1.get("ok") is True and a1.get("n") == 1, f"{mode}: ctx_serve before the checkpoint: {a1}")
        c = checkpoint(p.pid, ck, "--mode", mode)
        _, said = kill_run(p)
        check(c.returncode == 0, f"{mode}: checkpoint of ctx_serve: {c.returncode} {c.stderr} "
              f"(phos-fn run said: {'' if c.returncode == 0 else said[-3000:]})")
        if c.returncode != 0:
            continue
        with open(os.path.join(ck, "manifest.json")) as f:
            man = json.load(f)
        sa = man.get("stream_attrs", [])
        check(len(man.get("limits", [])) == 2 and len(sa) == 2 and 0 in [x.get("stream") for x in sa],
              f"{mode}: the checkpoint's limits and stream attributes: {man.get('limits')} {sa}")
        r = phos("restore", "--device", DEVICE, ck, stdin="{}\n{}\n", timeout=300)
        got = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        want = [{**a1, "n": 2}, {**a1, "n": 3}]
        check(r.returncode == 0 and got == want,
              f"{mode}: ctx_serve restored from its checkpoint: {r.returncode} {got} (want {want}) {r.stderr[-400:]}")

    ref_losses, ref_sum = reference(4)

    # --- a failed checkpoint (a full disk) fails alone; the program goes on -----
    for mode in ("stw", "recopy"):
        p = start(4, {"PHOS_FAULT": "gpu_data_alloc"})
        p.stdout.readline()
        ck = os.path.join(tmp, "full-" + mode)
        c = checkpoint(p.pid, ck, "--mode", mode)
        check(c.returncode == 1 and "No space left on device" in c.stderr, f"{mode}, disk full: {c.returncode} {c.stderr}")
        check(not os.path.exists(ck) and not leftovers(ck), f"{mode}: a failed checkpoint leaves nothing behind")
        c = checkpoint(p.pid, ck, "--mode", mode)
        check(c.returncode == 0 and os.path.exists(os.path.join(ck, "manifest.json")),
              f"{mode}: the next checkpoint succeeds: {c.returncode} {c.stderr}")
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0 and parse(out)[1] == ref_sum,
              f"{mode}: after a failed checkpoint the program ends as usual: {p.returncode} {parse(out)[1]} {err[-300:]}")

    # --- the executor killed during a checkpoint (every mode) --------------------
    for mode in ("stw", "cow", "recopy"):
        ck = os.path.join(tmp, "ck-kill-" + mode)
        p = start(4, {"PHOS_FAULT": "checkpoint_kill:1"})
        p.stdout.readline()
        c = checkpoint(p.pid, ck, "--mode", mode)
        check(c.returncode == 0, f"{mode}: first checkpoint: {c.stderr}")
        before = open(os.path.join(ck, "manifest.json")).read()
        time.sleep(0.2)
        c = checkpoint(p.pid, ck, "--mode", mode)
        check(c.returncode == 1 and "died during the checkpoint" in c.stderr and "nothing was committed" in c.stderr,
              f"{mode}: executor killed mid-checkpoint: {c.returncode} {c.stderr}")
        check(open(os.path.join(ck, "manifest.json")).read() == before, f"{mode}: the previous checkpoint is untouched")
        check(not leftovers(ck), f"{mode}: temporary directories left: {leftovers(ck)}")
        p.communicate(timeout=120)   # its executor is gone: its CUDA calls fail
        check(p.returncode != 0, f"{mode}: the program whose executor died fails")
        kill_run(p)
        r = restore(ck)
        check(r.returncode == 0 and parse(r.stdout)[1] == ref_sum,
              f"{mode}: the previous checkpoint restores to the same end: {r.returncode} {parse(r.stdout)[1]} "
              f"{r.stderr[-500:]}")

    # --- periodic checkpoints, restart on failure ---------------------------------
    def periodic(seed, args, env=None):
        return subprocess.Popen([PHOS_FN, "run", "--device", DEVICE, *args, "--", TRAIN, *train_args(seed),
                                 "--pause-us", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=fn_env({**RUN_ENV, **(env or {})}))

    def ckpts(d):
        """The complete checkpoints in d (not one being written: ckpt-NNNNNN.tmp-...)."""
        return sorted(n for n in os.listdir(d) if re.fullmatch(r"ckpt-\d{6}", n)) if os.path.isdir(d) else []

    def executor_of(p):
        """The executor under a phos-fn run (a child running phos-executor), or None."""
        for pid in children(p.pid):
            try:
                if "phos-executor" in open(f"/proc/{pid}/cmdline").read():
                    return pid
            except OSError:
                pass
        return None

    for seed, mode in ((9, "stw"), (10, "recopy"), (11, "cow")):
        p_losses, p_sum = reference(seed)
        rng = random.Random(seed)
        d = os.path.join(tmp, f"periodic{seed}")
        # cow: its copies into host memory queued an item at a time, a few
        # ahead, so that records write items whose copy is not queued yet
        p = periodic(seed, ["--checkpoint-dir", d, "--checkpoint-every", "0.2", "--checkpoint-mode", mode,
                            "--keep", "2", "--restart-on-failure"],
                     {"PHOS_LOG": "info", **({"PHOS_COW_QUEUE": "1:1:1"} if mode == "cow" else {})})
        p.stdout.readline()
        kills = 0
        for _ in range(2):
            deadline = time.monotonic() + 20
            while not ckpts(d) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.1, 0.6))
            exe = executor_of(p)
            if exe and p.poll() is None:
                os.kill(exe, signal.SIGKILL)
                kills += 1
                # restored by now: a new executor under the same run
                deadline = time.monotonic() + 20
                while executor_of(p) in (None, exe) and p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
        out, err = p.communicate(timeout=300)
        losses, checksum = parse(out)
        check(kills == 2 and p.returncode == 0 and checksum == p_sum,
              f"periodic {mode}: {kills} executor kills, rc {p.returncode}, checksum {checksum} vs {p_sum}: "
              f"{err[-3000:]}")
        check(err.count("restarting from") == kills, f"periodic {mode}: each restart is said: {err[-600:]}")
        same_steps(p_losses, losses, f"periodic {mode}")
        check(1 <= len(ckpts(d)) <= 2 and not leftovers(os.path.join(d, "x")),
              f"periodic {mode}: --keep 2 leaves at most 2 checkpoints: {os.listdir(d)}")
    # a fatal GPU error that the executor would survive (the sim device's
    # PHOS_SIM_FATAL: a sticky launch failure, as an illegal address is on a
    # GPU): with --restart-on-failure the executor ends with it (status 76)
    # and the run restarts from its latest checkpoint, to the same checksum
    if DEVICE == "sim":
        f_losses, f_sum = reference(12)
        d = os.path.join(tmp, "fatal")
        poison = os.path.join(tmp, "fatal-now")
        p = periodic(12, ["--checkpoint-dir", d, "--checkpoint-every", "0.2", "--restart-on-failure"],
                     {"PHOS_SIM_FATAL": poison})
        p.stdout.readline()
        deadline = time.monotonic() + 20
        while not ckpts(d) and time.monotonic() < deadline:
            time.sleep(0.05)
        open(poison, "w").close()   # the next launch fails, and the device with it
        out, err = p.communicate(timeout=300)
        losses, checksum = parse(out)
        check(not os.path.exists(poison) and p.returncode == 0 and checksum == f_sum and
              "GPU context failed for good" in err and err.count("restarting from") == 1,
              f"a fatal GPU error: restarted from the latest checkpoint, rc {p.returncode}, checksum {checksum} "
              f"vs {f_sum}: {err[-2000:]}")
        same_steps(f_losses, losses, "fatal GPU error")

    # restore of the checkpoint directory: its latest checkpoint
    r = restore(os.path.join(tmp, "periodic10"))
    check(r.returncode == 0 and parse(r.stdout)[1] == reference(10)[1], f"restore of a --checkpoint-dir: {r.stderr[-400:]}")

    # auto interval (Young) and a full disk in one periodic checkpoint
    d = os.path.join(tmp, "auto")
    p = periodic(4, ["--checkpoint-dir", d, "--checkpoint-every", "auto", "--mtbf", "0.5"],
                 {"PHOS_FAULT": "gpu_data_alloc:1"})
    out, err = p.communicate(timeout=300)
    check(p.returncode == 0 and parse(out)[1] == ref_sum and "periodic checkpoint 2 (stw) failed, the program goes on"
          in err and "No space left on device" in err, f"auto, a full disk once: {p.returncode} {err[-600:]}")
    check(len(ckpts(d)) >= 1, f"auto: checkpoints were taken: {os.listdir(d)}")

    # the executor dies before any checkpoint, or with --max-restarts 0
    for extra in (["--checkpoint-every", "600"], ["--checkpoint-every", "0.1", "--max-restarts", "0"]):
        d = os.path.join(tmp, "norestart" + extra[-1])
        p = periodic(4, ["--checkpoint-dir", d, "--restart-on-failure", *extra])
        p.stdout.readline()
        if extra[-1] == "0":
            deadline = time.monotonic() + 20
            while not ckpts(d) and time.monotonic() < deadline:
                time.sleep(0.05)
        exe = executor_of(p)
        if exe:
            os.kill(exe, signal.SIGKILL)
        out, err = p.communicate(timeout=120)
        want = "before any checkpoint" if extra[-1] == "600" else "the executor died (status"
        check(p.returncode != 0 and want in err and "restarting" not in err,
              f"no restart {extra}: rc {p.returncode} {err[-400:]}")

    # bad periodic options
    for args, msg in ((["--checkpoint-every", "1"], "need --checkpoint-dir"),
                      (["--checkpoint-dir", tmp, "--checkpoint-every", "auto"], "needs --mtbf"),
                      (["--checkpoint-dir", tmp, "--checkpoint-every", "-1"], "takes seconds"),
                      (["--checkpoint-dir", tmp, "--checkpoint-every", "1", "--keep", "0"], "--keep takes"),
                      (["--checkpoint-dir", tmp, "--checkpoint-mode", "fast"], "unknown checkpoint mode 'fast'"),
                      (["--checkpoint-dir", tmp, "--max-restarts", "x"], "--max-restarts takes")):
        c = subprocess.run([PHOS_FN, "run", "--device", DEVICE, *args, "--", TRAIN], capture_output=True, text=True,
                           timeout=60, env=fn_env(RUN_ENV))
        check(c.returncode == 2 and msg in c.stderr, f"run {args}: {c.returncode} {c.stderr!r}")

    # --- bad input --------------------------------------------------------------
    notckpt = os.path.join(tmp, "precious")
    os.makedirs(notckpt)
    open(os.path.join(notckpt, "data"), "w").write("keep me")
    p = start(4)
    p.stdout.readline()
    cases = [
        ([], 2, "needs -o DIR"),
        (["-o", os.path.join(tmp, "x")], 2, "exactly one PID"),
        (["-o", os.path.join(tmp, "x"), "12ab"], 2, "'12ab' is not a process id"),
        (["-o", os.path.join(tmp, "x"), "0"], 2, "'0' is not a process id"),
        (["-o", os.path.join(tmp, "x"), str(p.pid), str(p.pid)], 2, "exactly one PID"),
        (["--mode", "fast", "-o", os.path.join(tmp, "x"), str(p.pid)], 2, "unknown checkpoint mode 'fast'"),
        (["-o", os.path.join(tmp, "x"), "2147483646"], 1, "no process 2147483646"),
        (["-o", os.path.join(tmp, "x"), str(os.getpid())], 1, "takes no checkpoints"),
        (["-o", notckpt, str(p.pid)], 1, "exists and is not a checkpoint"),
        (["-o", os.path.join(notckpt, "data"), str(p.pid)], 1, "is not a directory"),
    ]
    for args, code, msg in cases:
        c = phos("checkpoint", *args, extra_env=RUN_ENV)
        check(c.returncode == code and msg in c.stderr, f"checkpoint {args}: {c.returncode} {c.stderr!r}")
    check(os.listdir(notckpt) == ["data"] and open(os.path.join(notckpt, "data")).read() == "keep me",
          "a directory that is not a checkpoint is left alone")
    check(not os.path.exists(os.path.join(tmp, "x")), "refused checkpoints write nothing")
    out, _ = p.communicate(timeout=300)
    check(p.returncode == 0 and parse(out)[1] == ref_sum, "the program was not disturbed by refused requests")
    r = restore(os.path.join(tmp, "missing"))
    check(r.returncode == 1 and "restore refused" in r.stderr, f"restore of nothing: {r.stderr}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("checkpoint")
