# SPDX-License-Identifier: MIT
"""Instances that share a snapshot's buffers on one GPU (issue 42), sim.

A function deployed with "share": true: its first cold start restores every
buffer and moves each big one into shareable memory, mapped read-only; the
pool keeps them (phos_shared_bytes), and every later cold start on the pool
maps them instead of restoring them. A write goes to a private copy first.

- share_probe (4 weight buffers of 4 MiB): 8 instances answer concurrently,
  each mapping the shared buffers (phos_shared_mapped_bytes = 8 x shared);
  an exact kernel that writes a buffer (bump) and an opaque one (bump_table)
  make that instance's copy (phos_shared_cow_bytes_total), and every other
  instance still answers the snapshot's sums: no write is seen elsewhere;
- a new instance after those writes still maps the snapshot's contents;
- mlp and tables: 2 and 8 instances answer right at once with shared
  weights; tables' opaque sum_table copies that instance's tables first;
- a buffer that an instance's first call writes is shared no more: later
  instances restore it privately and copy nothing;
- checkpoints (stw, cow, recopy) of an instance that maps shared buffers and
  wrote one hold every buffer once, and moved to another invoker it answers
  there as it did; the pool's memory outlives the instance (a new one maps
  the snapshot's contents); an instance in a call while its function is
  snapshotted again answers from the old shared buffers;
- remove drops the shared memory (phos_shared_bytes 0), and a deploy without
  share shares nothing; bad "share" values are refused.
"""
import json
import os
import re
import tempfile
import threading
import time

from harness import check, done, Invoker, live_instances, procs, program

PROBE = program("tests", "integration", "share_probe")
MLP = program("functions", "examples", "mlp")
TABLES = program("functions", "examples", "tables")
MIB = 1 << 20
tmp = tempfile.mkdtemp(prefix="phos-sharing-test-")


def metric(inv, name, fn):
    st, text = inv.call("GET", "/metrics")
    check(st == 200, f"/metrics: {st}")
    m = re.search(r'^%s\{function="%s"\} (\d+)$' % (name, fn), text, re.M)
    return int(m.group(1)) if m else None


def metric_settled(inv, name, fn, want, timeout=10.0):
    """name's value for fn once it is want (or the last one seen after
    timeout s): what a call's answer leads to afterwards (the copied buffers
    it reports) is done after the answer is sent, off the call's path."""
    t0 = time.monotonic()
    while True:
        v = metric(inv, name, fn)
        if v == want or time.monotonic() - t0 > timeout:
            return v
        time.sleep(0.05)


def token(inv):
    with open(os.path.join(inv.state, "admin.token")) as f:
        return f.read().strip()


def live(inv, fn):
    st, text = inv.call("GET", "/metrics")
    return sum(int(m.group(1)) for m in re.finditer(
        r'^phos_instances\{function="%s",state="(?:idle|busy)"\} (\d+)$' % fn, text, re.M))


def deploy(inv, name, prog, args, share=True, max_instances=8):
    body = {"name": name, "program": prog, "args": args, "limits": {"max_instances": max_instances}}
    if share is not None:
        body["share"] = share
    st, desc = inv.call("POST", "/system/functions", body)
    check(st == 201, f"deploy {name}: {st} {desc}")


def burst(inv, name, bodies):
    """Every body at once, each on its own connection: [(status, answer)]."""
    out = [None] * len(bodies)

    def one(i):
        out[i] = inv.call("POST", f"/function/{name}", bodies[i], timeout=300)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


try:
    inv = Invoker(os.path.join(tmp, "a"), tmp, extra=("--pool", "8", "--max-instances", "16"))

    # bad values
    for bad, says in (("yes", "share must be true or false"), (1, "share must be true or false")):
        st, body = inv.call("POST", "/system/functions", {"name": "bad", "program": PROBE, "share": bad})
        check(st == 400 and says in json.dumps(body), f"share {bad!r} refused: {st} {body}")
    st, body = inv.call("POST", "/system/functions", {"name": "bad", "program": PROBE, "share": True, "gpus": 2})
    check(st == 400 and "one GPU" in json.dumps(body), f"share over 2 GPUs refused: {st} {body}")

    # --- share_probe: reads share, writes copy ---
    deploy(inv, "probe", PROBE, ["4", "4"])
    st, base = inv.call("POST", "/function/probe", {"op": "sum", "buf": 1})
    check(st == 200 and "sum" in base, f"the first (filling) call: {st} {base}")
    shared = metric(inv, "phos_shared_bytes", "probe")
    check(shared == 4 * 4 * MIB, f"the pool holds the 4 weight buffers shared: {shared}")
    st, d = inv.call("GET", "/system/functions/probe")
    check(st == 200 and d.get("hot") is False, f"filled: the executors no longer pin its gpu.data: {st} {d}")
    sums = {}
    for k in range(4):
        st, a = inv.call("POST", "/function/probe", {"op": "sum", "buf": k})
        check(st == 200, f"sum {k}: {st} {a}")
        sums[k] = a["sum"]
    got = burst(inv, "probe", [{"op": "sum", "buf": k % 4, "sleep_ms": 1500} for k in range(8)])
    check(all(st == 200 and a["sum"] == sums[k % 4] for k, (st, a) in enumerate(got)),
          f"8 concurrent calls answer the snapshot's sums: {got}")
    check(live(inv, "probe") == 8, f"8 instances live: {live(inv, 'probe')}")
    mapped = metric(inv, "phos_shared_mapped_bytes", "probe")
    check(mapped == 8 * shared, f"all 8 map the shared buffers: {mapped} (shared {shared})")
    check(metric(inv, "phos_shared_cow_bytes_total", "probe") == 0, "reads copy nothing")

    # an exact write: that instance's copy of buffer 2 only
    st, a = inv.call("POST", "/function/probe", {"op": "bump", "buf": 2, "by": 1})
    check(st == 200 and a["sum"] != sums[2], f"bump answers the bumped sum: {a} (was {sums[2]})")
    bumped = a["sum"]
    check(metric(inv, "phos_shared_cow_bytes_total", "probe") == 4 * MIB,
          f"one buffer copied: {metric(inv, 'phos_shared_cow_bytes_total', 'probe')}")
    got = burst(inv, "probe", [{"op": "sum", "buf": 2, "sleep_ms": 1500} for _ in range(8)])
    seen = sorted(a["sum"] for st, a in got if st == 200)
    check(len(seen) == 8 and seen.count(bumped) == 1 and seen.count(sums[2]) == 7,
          f"only the writer sees its write: {seen} (bumped {bumped}, snapshot {sums[2]})")
    # an opaque write: that instance copies every shared buffer still shared
    st, a = inv.call("POST", "/function/probe", {"op": "bump_table", "buf": 0, "by": 2})
    check(st == 200 and a["sum"] != sums[0], f"bump_table: {st} {a}")
    cow = metric(inv, "phos_shared_cow_bytes_total", "probe")
    check(cow in (4 * MIB + 3 * 4 * MIB, 4 * MIB + 4 * 4 * MIB),
          f"the opaque kernel's instance copied what it still shared: {cow}")
    got = burst(inv, "probe", [{"op": "sum", "buf": 0, "sleep_ms": 1500} for _ in range(8)])
    seen = sorted(a["sum"] for st, a in got if st == 200)
    check(len(seen) == 8 and seen.count(sums[0]) == 7, f"the opaque write stays private: {seen}")
    mapped = metric(inv, "phos_shared_mapped_bytes", "probe")
    check(mapped < 8 * shared, f"the writers map less: {mapped}")
    # past max_instances: one more instance after all that still maps the snapshot's contents
    st, body = inv.call("DELETE", "/system/functions/probe")
    check(st == 200, f"remove probe: {st} {body}")
    check(metric(inv, "phos_shared_bytes", "probe") is None, "probe's metrics go with it")

    # --- learning: a buffer the first call writes is shared no more ---
    deploy(inv, "learn", PROBE, ["4", "4"])
    st, a = inv.call("POST", "/function/learn", {"op": "sum", "buf": 3})
    check(st == 200, f"learn: the snapshot's sum: {st} {a}")
    fresh = a["sum"]
    inv.call("DELETE", "/system/functions/learn")
    deploy(inv, "learn", PROBE, ["4", "4"])
    st, a = inv.call("POST", "/function/learn", {"op": "bump", "buf": 3, "by": 1})
    check(st == 200 and a["sum"] != fresh, f"learn: the filling call writes buffer 3: {st} {a}")
    once = a["sum"]
    check(metric(inv, "phos_shared_cow_bytes_total", "learn") == 4 * MIB, "the filling instance copied buffer 3")
    # (learnt after the answer is sent: inv_invoke_done)
    shared = metric_settled(inv, "phos_shared_bytes", "learn", 3 * 4 * MIB)
    check(shared == 3 * 4 * MIB, f"buffer 3, written by a first call, is shared no more: {shared}")
    # new instances restore buffer 3 privately, from the snapshot: their
    # first call writes it without a copy, and starts from the snapshot's
    got = burst(inv, "learn", [{"op": "bump", "buf": 3, "by": 1, "sleep_ms": 1500} for _ in range(4)])
    seen = sorted(a["sum"] for st, a in got if st == 200)
    check(len(seen) == 4 and seen.count(once) >= 3, f"each new instance bumps the snapshot's buffer: {seen} "
          f"(once {once})")
    check(live(inv, "learn") >= 4, f"learn: new instances: {live(inv, 'learn')}")
    check(metric(inv, "phos_shared_cow_bytes_total", "learn") == 4 * MIB,
          f"no new instance copied: {metric(inv, 'phos_shared_cow_bytes_total', 'learn')}")
    mapped = metric(inv, "phos_shared_mapped_bytes", "learn")
    check(mapped == live(inv, "learn") * shared, f"every instance maps the other three: {mapped}")
    inv.call("DELETE", "/system/functions/learn")

    # --- a deploy without share: nothing shared ---
    deploy(inv, "plain", PROBE, ["2", "4"], share=None)
    st, a = inv.call("POST", "/function/plain", {"op": "sum", "buf": 1})
    check(st == 200, f"plain: {st} {a}")
    check(metric(inv, "phos_shared_bytes", "plain") == 0, "a function without share holds nothing shared")
    st, d = inv.call("GET", "/system/functions/plain")
    check(st == 200 and d.get("hot") is True, f"a function without share stays hot: {st} {d}")
    st, body = inv.call("DELETE", "/system/functions/plain")

    # --- checkpoints and a move of an instance that maps shared buffers ---
    inv.stop()
    inv = Invoker(os.path.join(tmp, "ckpt"), tmp, extra=("--pool", "4"))
    b = Invoker(os.path.join(tmp, "ckpt-b"), tmp, extra=("--pool", "2"))
    for x in (inv, b):
        deploy(x, "probe", PROBE, ["4", "4"], max_instances=2)
    sums = {k: inv.call("POST", "/function/probe", {"op": "sum", "buf": k})[1]["sum"] for k in range(4)}
    st, a = inv.call("POST", "/function/probe", {"op": "bump", "buf": 2, "by": 3})
    check(st == 200 and a["sum"] != sums[2], f"bump before the checkpoints: {st} {a}")
    bumped = a["sum"]
    (iid,) = [i["instance"] for i in live_instances(inv, "probe")]
    for mode in ("stw", "cow", "recopy"):
        st, body = inv.call("POST", f"/system/functions/probe/instances/{iid}/checkpoint", {"mode": mode})
        check(st == 200 and body.get("gpu_bytes", 0) >= 4 * 4 * MIB,
              f"{mode} checkpoint holds every buffer, shared ones once: {st} {body}")
        got = [inv.call("POST", "/function/probe", {"op": "sum", "buf": k})[1].get("sum") for k in range(4)]
        check(got == [sums[0], sums[1], bumped, sums[3]], f"after the {mode} checkpoint: {got}")
    st, body = inv.call("POST", f"/system/functions/probe/instances/{iid}/migrate",
                        {"to": f"http://127.0.0.1:{b.port}", "to_token": token(b)}, timeout=300)
    check(st == 200, f"the instance moved to B: {st} {body}")
    got = [b.call("POST", "/function/probe", {"op": "sum", "buf": k})[1].get("sum") for k in range(4)]
    check(got == [sums[0], sums[1], bumped, sums[3]], f"B answers as the moved instance did: {got}")
    # the memory A's pool holds outlived the instance: a new one maps the snapshot's contents
    got = [inv.call("POST", "/function/probe", {"op": "sum", "buf": k})[1].get("sum") for k in range(4)]
    check(got == [sums[0], sums[1], sums[2], sums[3]], f"a new instance on A maps the snapshot: {got}")
    check(metric(inv, "phos_shared_bytes", "probe") == 4 * 4 * MIB, "A still holds the shared buffers")
    # a re-snapshot while an instance maps the old buffers: it answers on from them
    slow = []
    t = threading.Thread(target=lambda: slow.append(
        inv.call("POST", "/function/probe", {"op": "sum", "buf": 1, "sleep_ms": 4000}, timeout=120)))
    t.start()
    time.sleep(1)
    st, body = inv.call("POST", "/system/functions/probe/snapshot", timeout=300)
    check(st == 200, f"re-snapshot: {st} {body}")
    got = burst(inv, "probe", [{"op": "sum", "buf": 1}] * 2)
    check(all(st == 200 and a["sum"] == sums[1] for st, a in got), f"the new snapshot's instances: {got}")
    t.join()
    check(slow and slow[0][0] == 200 and slow[0][1]["sum"] == sums[1],
          f"the old instance answered from the old shared buffers: {slow}")
    b.stop()

    # --- mlp and tables, 2 and 8 instances at once ---
    for name, prog, args, req, n in (
            ("mlp", MLP, ["--width", "1024", "--layers", "4"], {"batch": 8, "seed": 3, "check": True}, 2),
            ("mlp8", MLP, ["--width", "1024", "--layers", "4"], {"batch": 8, "seed": 4, "check": True}, 8),
            ("tables", TABLES, ["--tables", "4", "--table-mib", "2"], {"table": 1, "direct": True}, 2),
            ("tables8", TABLES, ["--tables", "4", "--table-mib", "2"], {"table": 2, "direct": True}, 8)):
        # an invoker each: every cold start finds a pooled executor (own executors do not share)
        inv.stop()
        inv = Invoker(os.path.join(tmp, name), tmp, extra=("--pool", "8"))
        deploy(inv, name, prog, args, max_instances=n)
        st, first = inv.call("POST", f"/function/{name}", req)
        check(st == 200 and first.get("ok"), f"{name}: the first call: {st} {first}")
        shared = metric(inv, "phos_shared_bytes", name)
        check(shared and shared > 0, f"{name}: weights shared: {shared}")
        keys = ("argmax", "top_prob") if prog == MLP else ("sum",)
        # A burst of short calls can finish on the warm instance before the
        # invoker scales out (a loaded 2-core machine): bursts again, each
        # checked, until more than one instance serves (the live ones stay).
        for _ in range(4):
            got = burst(inv, name, [req] * (3 * n))
            check(all(st == 200 and a.get("ok") for st, a in got), f"{name}: {3 * n} calls at once: {got}")
            check(all(st == 200 and {k: a[k] for k in keys} == {k: first[k] for k in keys} for st, a in got),
                  f"{name}: every instance answers as the first")
            inst = live(inv, name)
            if inst > 1:
                break
        print(f"{name}: {3 * n} calls at once served by {inst} instances", flush=True)
        check(1 < inst <= n, f"{name}: {inst} instances")
        check(metric(inv, "phos_shared_cow_bytes_total", name) == 0, f"{name}: exact calls copy nothing")
    # tables' opaque kernel: that instance copies its tables first, and answers right
    st, a = inv.call("POST", "/function/tables8", {"table": 3})
    check(st == 200 and a.get("ok"), f"tables8 opaque call: {st} {a}")
    check(metric(inv, "phos_shared_cow_bytes_total", "tables8") > 0, "the opaque kernel copied first")
    got = burst(inv, "tables8", [{"table": 3, "direct": True}] * 16)
    check(all(st == 200 and a.get("ok") for st, a in got), f"tables8 after the copy: {got}")
    inv.stop()
    done("sharing")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
