# SPDX-License-Identifier: MIT
"""A multi-GPU function through invokers (issues 14 and 15): tp_mlp's two
ranks are two functions of two invokers on this machine (on cuda each
invoker's executors own one GPU: PHOS_GPU=r in its environment; on sim both
share the sim device and its shared-memory collectives). They share no
folder: the unique id and the meetings after a restore pass through the
invokers (deploy "ranks": rank 1's invoker mirrors rank 0's rendezvous
folder, invoker/peer/rendezvous.c).

- bad "ranks" are refused with 400 and the reason;
- the two deploys run together (the ranks meet in ncclCommInitRank through
  the unique-id file tp.id, relative: in each rank's rendezvous folder) and
  both snapshot at phos_fn_serve;
- the first calls, sent to both at once, are cold starts: each invoker
  restores its rank, and the ranks' communicator is made again at its first
  use, the ranks meeting through the rendezvous folder (PHOS_NCCL_REINIT_DIR
  set by the invoker); both answer the forward pass's match with the CPU
  reference, as rank r of 2;
- more calls to both at once answer the same, warm; no meeting file is left
  in rank 0's folder (GET .../rendezvous: tp.id only), which needs a token
  (rank 1 has rank 0's peer token); describe shows the ranks but not the
  leader's token; a remove
  removes the folder.

Needs two GPUs on cuda (exits 77 with fewer).
"""
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time

from harness import DEVICE, Invoker, check, done, gpu_count, procs, program

TP_MLP = program("functions", "examples", "tp_mlp")


if DEVICE == "cuda" and gpu_count() < 2:
    print("nccl_invoker: needs two GPUs: skipped")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="phos-nccl-invoker-test-")
os.chmod(tmp, 0o711)


def both(calls):
    """Runs calls (functions returning a result) at once; their results in order."""
    out = [None] * len(calls)

    def run(i):
        try:
            out[i] = calls[i]()
        except Exception as e:   # a failed call is a result to check, not a crash
            out[i] = (None, str(e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


try:
    invs = []
    for r in range(2):
        env = {"PHOS_NCCL_TIMEOUT_MS": "30000"}
        if DEVICE == "cuda":
            env["PHOS_GPU"] = str(r)
        # As root, the ranks run as the invoker's default user (nobody),
        # who reads the mirrored id in rank 1's folder (the folders sit
        # beside the state folders, in this test's temporary directory,
        # which nobody may pass through); else as ourselves.
        invs.append(Invoker(os.path.join(tmp, f"state{r}"), tmp, extra=[] if os.geteuid() == 0 else ["--run-as", "self"],
                            extra_env=env, device=DEVICE))
    # rank 1 reads rank 0's rendezvous with rank 0's peer token, not its
    # admin token (issue 37, item 2)
    with open(os.path.join(invs[0].state, "peer.token")) as f:
        token0 = f.read().strip()
    leader = f"http://127.0.0.1:{invs[0].port}"

    for bad, why in (({"rank": 2, "nranks": 2}, "ranks.rank must be"), ({"rank": 0, "nranks": 0}, "ranks.nranks"),
                     ({"rank": 1, "nranks": 2}, "needs leader"),
                     ({"rank": 0, "nranks": 2, "leader": leader, "leader_token": token0}, "rank 0 is the leader"),
                     ({"rank": 1, "nranks": 2, "leader": "ftp://x", "leader_token": token0}, "ranks.leader"),
                     ({"rank": 1, "nranks": 2, "leader": leader, "leader_token": "short"}, "leader_token"),
                     ({"rank": 1, "nranks": 2, "x": 1}, "unknown field"), ([1], "must be an object")):
        st, ans = invs[1].call("POST", "/system/functions", {"name": "bad", "program": TP_MLP, "args": ["1", "2", "x"],
                                                             "ranks": bad})
        check(st == 400 and why in str(ans), f"deploy with ranks {bad}: {st} {ans}")

    ranks = [{"rank": 0, "nranks": 2}, {"rank": 1, "nranks": 2, "leader": leader, "leader_token": token0}]
    got = both([lambda r=r: invs[r].call("POST", "/system/functions",
                                         {"name": "tp", "program": TP_MLP, "args": [str(r), "2", "tp.id"],
                                          "ranks": ranks[r]}, timeout=300) for r in range(2)])
    for r, (st, desc) in enumerate(got):
        check(st == 201 and isinstance(desc, dict) and desc.get("ranks", {}).get("rank") == r and
              "leader_token" not in json.dumps(desc), f"deploy of rank {r}: {st} {desc}")

    for attempt in ("cold", "warm", "warm again"):
        t0 = time.monotonic()
        got = both([lambda r=r: invs[r].call("POST", "/function/tp", {}, timeout=120) for r in range(2)])
        took = time.monotonic() - t0
        for r, (st, ans) in enumerate(got):
            check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("rank") == r
                  and ans.get("nranks") == 2,
                  f"{attempt} call of rank {r}: {st} {ans} {'' if st == 200 else invs[r].logtext()[-1500:]}")
        print(f"{attempt} calls of both ranks: {took:.3f} s", flush=True)
    st, rdv = invs[0].call("GET", "/system/functions/tp/rendezvous")
    check(st == 200 and isinstance(rdv, dict) and sorted(rdv.get("files", {})) == ["tp.id"] and
          len(rdv["files"]["tp.id"]) == 2 * 128, f"rank 0's rendezvous folder holds the id alone: {st} {rdv}")
    c = http.client.HTTPConnection("127.0.0.1", invs[0].port, timeout=30)
    c.request("GET", "/system/functions/tp/rendezvous")
    check(c.getresponse().status == 401, "the rendezvous route needs a token (rank 0's peer or admin token)")
    c.close()
    folders = [os.path.join(invs[r].state + ".rendezvous", "tp") for r in range(2)]
    check(all(os.path.exists(os.path.join(d, "tp.id")) for d in folders), f"both folders hold tp.id: {folders}")
    for r in range(2):
        st, _ = invs[r].call("DELETE", "/system/functions/tp", timeout=120)
        check(st in (200, 204) and not os.path.exists(folders[r]), f"remove of rank {r}: {st}, its folder gone")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)

done("nccl_invoker")
