# SPDX-License-Identifier: MIT
"""What a pooled executor keeps from one function for the next.

The cuDNN plans a function finalized, and its
handles, for the next function it serves (ctxpool/calls/exec_dnn.c, the plan
cache): a restore makes the function's plans again from their history, and
a plan made the same way on the same handle is taken from the cache instead
of being finalized again (a fused attention's finalize compiles a kernel:
50-65 ms each on the H200, on the first token's path).

tests/transparency/cudnn/cudnn_serve (two convolutions, float and double,
through the backend API; its plans' sources destroyed before phos_fn_serve)
deployed on an invoker with one pooled executor, cold-started twice in it:
- the first cold start (a fresh executor) finalizes its plans;
- the second takes both from the cache, and every answer is still checked
  against the CPU reference (a plan of the other convolution, or of another
  handle, would give wrong numbers or fail);
- a third cold start after the function was removed and deployed again
  also answers right (the cache outlives a function, not its correctness);
- the pooled executor keeps the parsed manifests of the snapshots it
  restored (exec_image_cached): the name deployed again with another
  program (the same snapshot directory, a new manifest) answers as that
  program, not as the manifest read before.
"""
import os
import shutil
import tempfile
import time

from harness import DEVICE, Invoker, check, done, live_instances, program

PROG = program("tests", "transparency", "cudnn", "cudnn_serve")
HIT = "taken from the cache"


def wait_idle(inv, name):
    """Until no instance of name lives and the pooled executor is idle again."""
    for _ in range(300):
        st, metrics, _ = inv.request("GET", "/metrics")
        pending = [ln for ln in str(metrics).splitlines() if ln.startswith("phos_pool_hot_pending ")]
        if not live_instances(inv, name) and pending and pending[0].split()[-1] == "0":
            break
        time.sleep(0.05)
    time.sleep(0.5)


def cold_call(inv, name, what):
    st, body, h = inv.request("POST", f"/function/{name}", {})
    ok = st == 200 and isinstance(body, dict) and body.get("ok") is True
    check(ok and h.get("x-cold-start") == "true", f"{what}: cold and right: {st} {h.get('x-cold-start')} {body}")


tmp = tempfile.mkdtemp(prefix="phos-pool-caches-test-")
try:
    inv = Invoker(os.path.join(tmp, "state"), tmp, extra=["--pool", "1"], device=DEVICE,
                  extra_env={"PHOS_LOG": "debug"})
    try:
        spec = {"name": "conv", "program": PROG, "limits": {"idle_ms": 200}}
        st, body = inv.call("POST", "/system/functions", spec)
        check(st == 201, f"deploy conv: {st} {body}")
        wait_idle(inv, "conv")
        cold_call(inv, "conv", "first cold start")
        first = inv.logtext().count(HIT)
        check(first == 0, f"a fresh executor has no plan to take: {first} taken")

        wait_idle(inv, "conv")
        cold_call(inv, "conv", "second cold start, same executor")
        second = inv.logtext().count(HIT) - first
        check(second == 2, f"the second cold start took both convolutions' plans from the cache: {second} of 2")

        st, body = inv.call("DELETE", "/system/functions/conv")
        check(st in (200, 202, 204), f"remove conv: {st} {body}")
        st, body = inv.call("POST", "/system/functions", spec)
        check(st == 201, f"deploy conv again: {st} {body}")
        wait_idle(inv, "conv")
        cold_call(inv, "conv", "cold start of the function deployed again")

        st, body = inv.call("DELETE", "/system/functions/conv")
        check(st in (200, 202, 204), f"remove conv again: {st} {body}")
        st, body = inv.call("POST", "/system/functions", {"name": "conv", "args": ["5"], "limits": {"idle_ms": 200},
                                                          "program": program("tests", "integration", "stateful")})
        check(st == 201, f"deploy another program as conv: {st} {body}")
        wait_idle(inv, "conv")
        st, body, h = inv.request("POST", "/function/conv", {})
        check(st == 200 and isinstance(body, dict) and body.get("counter") == 100 and "ok" not in body,
              f"the other program answers under the name, from its own snapshot: {st} {body}")
    finally:
        inv.stop()
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("pool_caches")
