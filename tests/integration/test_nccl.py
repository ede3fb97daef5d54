# SPDX-License-Identifier: MIT
"""The NCCL stand-in against the sim device's shared-memory collectives, with
one process per rank under `phos-fn run` (each its own executor):

- every forwarded call (sums, max/min/prod/avg, fp16, broadcasts, reduce,
  all-gather, reduce-scatter, a send/recv ring, groups, split, finalize,
  destroy, ncclMemAlloc, queries) with 1, 2 and 3 ranks;
- the executor's read/write sets of collectives, sized as each defines;
- bad arguments: ncclInvalidArgument; APIs not forwarded: ncclInvalidUsage;
- an aborted communicator: the peer waiting in an all-reduce gets an error;
- a rank killed before a collective: the others get an error, not a hang;
- tp_mlp with 1 and 2 ranks matches its CPU reference, and with 1 rank after
  snapshot and restore;
- a single-rank communicator used after snapshot and restore; both ranks of a
  two-rank one snapshotted and restored together (they meet again through a
  file), and one rank restored alone (an error, then ncclInvalidUsage).

With PHOS_TEST_DEVICE=cuda (tools/gpu-check) rank r runs on GPU r
(PHOS_GPU=r: its executor owns that GPU, which the function sees as device 0),
so the multi-rank parts run up to as many ranks as the host has GPUs: NCCL
refuses two ranks on one GPU, and one GPU runs the single-rank parts only.
The aborted and dead ranks and the lone restored rank stay on sim: the real
NCCL waits for a peer that never comes until the communicator is aborted.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from harness import DEVICE, PHOS_FN, check, checkpoint_refused, done, fn_env, gpu_count, phos, program, read_trace

CALLS = program("tests", "integration", "nccl_calls")
TP_MLP = program("functions", "examples", "tp_mlp")

# Every check the calls mode makes (nccl_calls.cu).
CALL_CHECKS = {"init", "count", "user_rank", "cu_device", "async_error", "allreduce_sum", "allreduce_max_i32",
               "allreduce_min_i32", "allreduce_prod_i32", "allreduce_avg_i32", "allreduce_inplace_f64",
               "allreduce_sum_f16", "broadcast", "bcast", "reduce_max", "allgather", "reduce_scatter",
               "sendrecv_ring", "group_two_allreduce", "split_count", "split_rank", "split_allreduce",
               "split_nocolor", "memalloc_device", "version", "error_string"}
BAD_CHECKS = {"bad_null_comm", "bad_type", "bad_op", "bad_root", "bad_peer", "bad_null_buf", "bad_overflow",
              "bad_host_buf", "bad_too_big", "bad_stale_comm", "bad_rank", "bad_nranks", "bad_initall_2",
              "bad_null_version", "bad_group_end", "refused_register", "last_error", "initall_1"}


def lines(text):
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


SIM = DEVICE != "cuda"
MAX_RANKS = 3 if SIM else gpu_count()


def rank_env(r, env):
    """env for rank r: on cuda its own GPU."""
    return {**(env or {}), **({} if SIM else {"PHOS_GPU": str(r)})}


def ranks(prog, mode_args, n, tmp, env=None, timeout=60, trace=False):
    """Runs n ranks of prog at once ({r} in mode_args: the rank): [(returncode, records, stderr,
    seconds)] by rank."""
    idfile = os.path.join(tmp, f"id-{time.monotonic_ns()}")
    procs = []
    for r in range(n):
        cmd = [PHOS_FN, "run", "--device", DEVICE]
        if trace:
            cmd += ["--trace", os.path.join(tmp, f"trace-{r}.jsonl")]
        cmd += ["--", prog, *[a.replace("{r}", str(r)) for a in mode_args], str(r), str(n), idfile]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=fn_env(rank_env(r, env)),
                                      start_new_session=True))
    t0 = time.monotonic()
    res = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            # the whole session: the function and its executor hold the pipes too
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            err += "\n(timed out)"
        res.append((p.returncode, lines(out), err, time.monotonic() - t0))
    return res


def checks_of(recs):
    return {r["check"]: r for r in recs if "check" in r}


tmp = tempfile.mkdtemp(prefix="phos-nccl-test-")
env = {"PHOS_NCCL_TIMEOUT_MS": "20000"}
MULTI = MAX_RANKS >= 2
try:
    # The GPU of a rank's executor (--gpu, PHOS_GPU): one the device lacks, or
    # a value that is no ordinal, stops the run with the reason; 0 runs.
    if SIM:
        for args, extra, want in ((["--gpu", "1"], {}, "GPU 1 (--gpu or PHOS_GPU) is not there: the sim device has 1"),
                                  ([], {"PHOS_GPU": "x"}, "bad GPU 'x'"),
                                  ([], {"PHOS_GPU": "-1"}, "bad GPU '-1'")):
            p = phos("run", "--device", DEVICE, *args, "--", TP_MLP, "0", "1", os.path.join(tmp, "id-gpu"),
                     extra_env={**env, **extra}, timeout=60)
            check(p.returncode != 0 and want in p.stderr, f"{args} {extra}: rc {p.returncode}, {p.stderr[-400:]}")
        p = phos("run", "--device", DEVICE, "--gpu", "0", "--", TP_MLP, "0", "1", os.path.join(tmp, "id-gpu0"),
                 extra_env=env, timeout=60)
        check(p.returncode == 0 and any(g.get("ok") for g in lines(p.stdout)), f"--gpu 0: {p.stderr[-400:]}")

    # Every forwarded call, 1, 2 and 3 ranks.
    for n in (n for n in (1, 2, 3) if n <= max(MAX_RANKS, 1)):
        res = ranks(CALLS, ["calls"], n, tmp, env=env, trace=(n == 2))
        for r, (rc, recs, err, _) in enumerate(res):
            got = checks_of(recs)
            bad = sorted(k for k, v in got.items() if not v["ok"])
            missing = sorted(CALL_CHECKS - set(got))
            check(rc == 0 and not bad and not missing,
                  f"{n} ranks, rank {r}: rc {rc}, failed {bad}, missing {missing}: {err[-800:]}")
        if n == 2:
            # Read/write sets: all-gather of 70000 floats reads 280000 bytes and
            # writes 2 x 280000; reduce-scatter of 30000 reads 2 x 120000, writes 120000.
            recs = read_trace(os.path.join(tmp, "trace-0.jsonl"))
            ag = [x for x in recs if x.get("op") == "nccl_all_gather"]
            rs = [x for x in recs if x.get("op") == "nccl_reduce_scatter"]
            check(len(ag) == 1 and [r[1] for r in ag[0]["reads"]] == [280000]
                  and [r[1] for r in ag[0]["writes"]] == [560000], f"all-gather set {ag}")
            check(len(rs) == 1 and [r[1] for r in rs[0]["reads"]] == [240000]
                  and [r[1] for r in rs[0]["writes"]] == [120000], f"reduce-scatter set {rs}")
            red = [x for x in recs if x.get("op") == "nccl_reduce"]
            check(len(red) == 1 and red[0]["writes"], f"reduce at the root writes its recv: {red}")
            red1 = [x for x in read_trace(os.path.join(tmp, "trace-1.jsonl")) if x.get("op") == "nccl_reduce"]
            check(len(red1) == 1 and red1[0]["writes"] == [], f"reduce elsewhere writes nothing: {red1}")

    # Bad arguments and refused APIs, 2 ranks.
    res = ranks(CALLS, ["bad"], 2 if MULTI else 1, tmp, env=env)
    for r, (rc, recs, err, _) in enumerate(res):
        got = checks_of(recs)
        bad = sorted(k for k, v in got.items() if not v["ok"])
        missing = sorted(BAD_CHECKS - set(got))
        check(rc == 0 and not bad and not missing, f"bad, rank {r}: rc {rc}, failed {bad}, missing {missing}: {err[-800:]}")
    check("ncclCommInitAll of 2 devices refused" in res[0][2], f"InitAll of 2 says why: {res[0][2][-400:]}")

    # An aborted communicator: rank 1 waits in an all-reduce, rank 0 aborts.
    if SIM:
        res = ranks(CALLS, ["abort"], 2, tmp, env=env, timeout=40)
        c0, c1 = checks_of(res[0][1]), checks_of(res[1][1])
        check(c0.get("after_abort", {}).get("ok"), f"a handle used after ncclCommAbort is invalid: {c0}")
        check(c1.get("peer_aborted", {}).get("ok") and c1.get("still_failed", {}).get("ok"),
              f"the peer of an aborted rank gets an error: {c1} {res[1][2][-500:]}")
        check(res[1][3] < 15, f"... at once ({res[1][3]:.1f} s)")

        # A rank killed before a collective: the others get an error, not a hang.
        res = ranks(CALLS, ["die"], 3, tmp, env=env, timeout=50)
        for r in (0, 1):
            c = checks_of(res[r][1])
            check(c.get("peer_died", {}).get("ok"), f"rank {r} sees its dead peer: {c} {res[r][2][-500:]}")
            check(res[r][3] < 25, f"rank {r} got its error in {res[r][3]:.1f} s")
        check(res[2][0] != 0, "the killed rank failed")

    # tp_mlp: 1 and 2 ranks match the CPU reference.
    for n in (1, 2) if MULTI else (1,):
        res = ranks(TP_MLP, [], n, tmp, env=env)
        for r, (rc, recs, err, _) in enumerate(res):
            out = [x for x in recs if "ok" in x]
            check(rc == 0 and len(out) == 1 and out[0]["ok"] and out[0]["rank"] == r and out[0]["nranks"] == n,
                  f"tp_mlp {n} ranks, rank {r}: rc {rc} {out} {err[-800:]}")

    # tp_mlp's big models (bench/tp_coldstart.py): weights made on the device,
    # checked against the sampled CPU reference, saved per rank; read back with
    # --no-check they answer the same sample; another rank's file is refused.
    n = 2 if MULTI else 1
    big = ["--weights-mib", "2", "--width", "128"]
    wf = [os.path.join(tmp, f"tpw{r}") for r in range(n)]
    saved = ranks(TP_MLP, big + ["--save-weights", os.path.join(tmp, "tpw{r}")], n, tmp, env=env)
    first = []
    for r, (rc, recs, err, _) in enumerate(saved):
        out = [x for x in recs if "ok" in x]
        first += out
        check(rc == 0 and len(out) == 1 and out[0]["ok"] and out[0]["max_abs_err"] is not None
              and out[0]["weights_bytes"] == 2 << 20 and os.path.getsize(wf[r]) == 64 + (2 << 20),
              f"big tp_mlp rank {r} of {n}, weights saved: rc {rc} {out} {err[-800:]}")
    loaded = ranks(TP_MLP, big + ["--no-check", "--weights-file", os.path.join(tmp, "tpw{r}")], n, tmp, env=env)
    for r, (rc, recs, err, _) in enumerate(loaded):
        out = [x for x in recs if "ok" in x]
        check(rc == 0 and len(out) == 1 and out[0]["max_abs_err"] is None and first
              and out[0]["sample"] == first[0]["sample"],
              f"big tp_mlp rank {r} of {n} from its file: rc {rc} {out} {err[-800:]}")
    if n == 2 and SIM:
        # sim only: rank 1 refuses the file after the communicator is made,
        # and the real NCCL's rank 0 then waits for it in its all-reduce
        wrong = ranks(TP_MLP, big + ["--weights-file", wf[0]], 2, tmp, env=env)
        check(wrong[1][0] != 0 and "is not the weights file of rank 1" in wrong[1][2],
              f"rank 1 refuses rank 0's file: rc {wrong[1][0]} {wrong[1][2][-500:]}")
    p = subprocess.run([TP_MLP, "0", "1", os.path.join(tmp, "x"), "--weights-mib", "3", "--width", "7"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "usage" in p.stderr, f"a size that is no whole shape: {p.returncode} {p.stderr}")

    # tp_mlp with one rank snapshotted after init: the restored copy answers
    # each request with a forward pass that still matches the reference.
    snapm = os.path.join(tmp, "snap-tp")
    p = phos("snapshot", "--device", DEVICE, "-o", snapm, "--", TP_MLP, "0", "1", os.path.join(tmp, "id-tp"),
             extra_env=env)
    check(p.returncode == 0, f"snapshot of tp_mlp: {p.stderr[-800:]}")
    if p.returncode == 0:
        p = phos("restore", "--device", DEVICE, snapm, stdin="{}\n{}\n", extra_env=env)
        got = lines(p.stdout)
        check(p.returncode == 0 and len(got) == 2 and all(g.get("ok") and g.get("nranks") == 1 for g in got),
              f"restored tp_mlp: rc {p.returncode} {got} {p.stderr[-800:]}")

    # A single-rank communicator and its split made before phos_fn_serve, used
    # after a restore.
    snap = os.path.join(tmp, "snap")
    idfile = os.path.join(tmp, "id-serve")
    p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", CALLS, "serve", "0", "1", idfile, extra_env=env)
    check(p.returncode == 0, f"snapshot: {p.stderr[-800:]}")
    if p.returncode == 0:
        for _ in range(2):   # twice: each restore re-creates it in a fresh executor
            p = phos("restore", "--device", DEVICE, snap, stdin='{"a":1}\n{"a":2}\n', extra_env=env)
            got = lines(p.stdout)
            check(p.returncode == 0 and len(got) == 2 and all(g.get("result") == 0 and g.get("sum") == 6
                                                               and g.get("count") == 1 and g.get("child_result") == 0
                                                               and g.get("child_sum") == 6 for g in got)
                  and [g.get("calls") for g in got] == [1, 2],
                  f"restored communicator: rc {p.returncode} {got} {p.stderr[-800:]}")
    # A checkpoint of it running is refused: restored mid-call, it would call
    # communicators its new executor never made.
    checkpoint_refused(CALLS, '{"a":1}', "NCCL communicators", tmp,
                       args=["serve", "0", "1", os.path.join(tmp, "id-ckpt")])
    if MULTI:
        # Both ranks of a two-rank communicator (and of its split) snapshotted,
        # then restored together: they meet again through files named by the
        # old ids and all-reduce as before.
        rdir = os.path.join(tmp, "reinit")
        os.makedirs(rdir)
        idfile = os.path.join(tmp, "id-serveall")
        senv = {**env, "PHOS_NCCL_REINIT_DIR": rdir}
        snaps = [os.path.join(tmp, f"pair{r}") for r in range(2)]
        sp = [subprocess.Popen([PHOS_FN, "snapshot", "--device", DEVICE, "-o", snaps[r], "--", CALLS, "serveall",
                                str(r), "2", idfile], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=fn_env(rank_env(r, senv))) for r in range(2)]
        outs = [q.communicate(timeout=120) for q in sp]
        check(all(q.returncode == 0 for q in sp), f"snapshots of both ranks: {[o[1][-400:] for o in outs]}")
        if all(q.returncode == 0 for q in sp):
            for attempt in range(2):   # twice: the same snapshots restored again
                rp = [subprocess.Popen([PHOS_FN, "restore", "--device", DEVICE, snaps[r]], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=fn_env(rank_env(r, env)))
                      for r in range(2)]
                t0 = time.monotonic()
                for q in rp:
                    q.stdin.write('{"a":1}\n{"a":2}\n')
                    q.stdin.close()
                outs = []
                for q in rp:
                    try:
                        outs.append((q.stdout.read(), q.stderr.read(), q.wait(timeout=60)))
                    except subprocess.TimeoutExpired:
                        q.kill()
                        outs.append(("", "(timed out)", -1))
                for r, (out, err, rc) in enumerate(outs):
                    got = lines(out)
                    check(rc == 0 and len(got) == 2 and all(g.get("result") == 0 and g.get("sum") == 12
                                                             and g.get("count") == 2 and g.get("child_result") == 0
                                                             and g.get("child_sum") == 12 for g in got)
                          and [g.get("calls") for g in got] == [2, 4],
                          f"restore {attempt} of rank {r} of 2: rc {rc} {got} {err[-800:]}")
                check(time.monotonic() - t0 < 30, "restored ranks meet in bounded time")
            check(os.listdir(rdir) == [], f"the meeting files are gone: {os.listdir(rdir)}")

        # tp_mlp's two ranks snapshotted after init, then restored together:
        # each request's forward pass all-reduces again and matches the
        # CPU reference.
        idfile = os.path.join(tmp, "id-tp2")
        snaps = [os.path.join(tmp, f"tp2-{r}") for r in range(2)]
        sp = [subprocess.Popen([PHOS_FN, "snapshot", "--device", DEVICE, "-o", snaps[r], "--", TP_MLP, str(r), "2",
                                idfile], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=fn_env(rank_env(r, senv))) for r in range(2)]
        outs = [q.communicate(timeout=120) for q in sp]
        check(all(q.returncode == 0 for q in sp), f"snapshots of tp_mlp's 2 ranks: {[o[1][-400:] for o in outs]}")
        if all(q.returncode == 0 for q in sp):
            rp = [subprocess.Popen([PHOS_FN, "restore", "--device", DEVICE, snaps[r]], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=fn_env(rank_env(r, env))) for r in range(2)]
            for q in rp:
                q.stdin.write("{}\n{}\n")
                q.stdin.close()
            for r, q in enumerate(rp):
                try:
                    out, err, rc = q.stdout.read(), q.stderr.read(), q.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    q.kill()
                    out, err, rc = "", "(timed out)", -1
                got = lines(out)
                check(rc == 0 and len(got) == 2 and all(g.get("ok") and g.get("rank") == r and g.get("nranks") == 2
                                                         for g in got),
                      f"restored tp_mlp rank {r} of 2: rc {rc} {got} {err[-800:]}")
            check(os.listdir(rdir) == [], f"the meeting files are gone: {os.listdir(rdir)}")

    if SIM:
        # Rank 0 of two restored alone: its first use waits for rank 1 up to
        # the timeout and fails; later uses answer ncclInvalidUsage (5).
        snap2 = os.path.join(tmp, "snap2")
        idfile = os.path.join(tmp, "id-serve2")
        peer = subprocess.Popen([PHOS_FN, "run", "--device", DEVICE, "--", CALLS, "serve", "1", "2", idfile],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=fn_env(env))
        p = phos("snapshot", "--device", DEVICE, "-o", snap2, "--", CALLS, "serve", "0", "2", idfile,
                 extra_env={**senv, "PHOS_NCCL_TIMEOUT_MS": "1500"})
        peer.communicate(timeout=60)
        check(p.returncode == 0 and peer.returncode == 0, f"snapshot of rank 0 of 2: {p.stderr[-800:]}")
        if p.returncode == 0:
            t0 = time.monotonic()
            p = phos("restore", "--device", DEVICE, snap2, stdin='{"a":1}\n{"a":2}\n',
                     extra_env={**env, "PHOS_NCCL_TIMEOUT_MS": "1500"})
            got = lines(p.stdout)
            check(p.returncode == 0 and [g.get("result") for g in got] == [2, 5]
                  and all(g.get("count") == 2 for g in got),
                  f"a lone restored rank of two: ncclSystemError, then ncclInvalidUsage: {got} {p.stderr[-800:]}")
            check(time.monotonic() - t0 < 20, f"... in bounded time ({time.monotonic() - t0:.1f} s)")
            check(os.listdir(rdir) == [], f"no meeting file left: {os.listdir(rdir)}")

    # Left behind: a segment no process maps any more (a test running beside
    # this one, test_nccl_invoker, may hold segments of its own meanwhile);
    # a second's grace for one whose last rank is unlinking it now.
    def leftovers():
        mapped = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/maps") as f:
                    mapped.update(ln.rsplit("/", 1)[-1].split(" (deleted)")[0].strip() for ln in f
                                  if "/dev/shm/phos-nccl-" in ln)
            except OSError:
                pass
        return [f for f in os.listdir("/dev/shm") if f.startswith("phos-nccl-") and f not in mapped]
    left = leftovers()
    for _ in range(10):
        if not left:
            break
        time.sleep(0.1)
        left = leftovers()
    check(not left, f"no communicator segments left behind: {left}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("nccl")
