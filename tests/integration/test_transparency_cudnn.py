# SPDX-License-Identifier: MIT
"""Transparency of cuDNN (issue 16): tests/transparency/cudnn/cudnn_serve
builds convolutions through the backend (graph) API as PyTorch's frontend
does (tensors, convolution, operation graph, heuristics, a plan per
configuration until one finalizes; everything but the plans destroyed) and
runs batch normalization (training forward, backward, inference) with
legacy descriptors, every output checked against a CPU reference:

- under phos-fn, natively on a GPU, and after a snapshot at phos_fn_serve is
  restored (stop-the-world and on demand): the plans are made again in the
  new executor from their history, the destroyed descriptors they came from
  included;
- the convolutions captured into CUDA graphs at init (`graph`), the graphs
  launched by each request: the same answers, also restored from a
  snapshot (their plans made again in the new executor at the launch);
- the read/write set of an execution is exactly the bytes of its tensors
  (from their dimensions, strides and data type in the plan's graph);
- checkpoints of the running program (issue 11), every mode: checkpointed
  while it serves, the restored copy answers on (its plans made again from
  their history in the new executor); and checkpointed at random moments of
  a loop of cuDNN calls (`loop N`, several rounds), the original killed, the
  restored copy goes on from where it was stopped and ends with every step
  right (no call naming a cuDNN object is ever half-done in a checkpoint:
  the executor stops only once the channel's fence settled);
- the spatial transformer (cudnn_stf: F.affine_grid and F.grid_sample on
  cuDNN): grid, bilinear sampling and their backward passes against a CPU
  reference, exact sets; on a GPU the same numbers natively;
- RNNs (cudnn_rnn: nn.LSTM, nn.GRU, nn.RNN on cuDNN's v8 calls): a 2-layer
  bidirectional float LSTM, a packed double GRU with dropout states, a
  batch-major bidirectional tanh RNN; forward (training and inference),
  backward data and weights against a CPU reference, under phos-fn,
  natively on a GPU, and after a snapshot taken between the training
  forward and the backward passes is restored (the reserve space kept);
  every pass's set is exact: x, the weights, y, the reserve and the
  workspace by their sizes;
- the CTC loss (cudnn_ctc: F.ctc_loss on cuDNN, host arrays): costs and
  gradients against a CPU reference, everywhere as above; its set reads
  the activations and writes the costs, the gradients and the workspace
  exactly;
- a variant pack naming a uid the graph does not have gets an opaque set,
  and so does a ragged tensor's execution (its offsets are in device memory)
  (sim only: real cuDNN may refuse such packs).
"""
import json
import os
import random
import select
import shutil
import subprocess
import tempfile
import time

from harness import (DEVICE, PHOS_FN, check, checkpoint_everywhere, done, fn_env, program, read_trace, run,
                     serve_everywhere)

PROG = program("tests", "transparency", "cudnn", "cudnn_serve")
STF = program("tests", "transparency", "cudnn", "cudnn_stf")
RNN = program("tests", "transparency", "cudnn", "cudnn_rnn")
CTC = program("tests", "transparency", "cudnn", "cudnn_ctc")
REQS = "x\nx\nx\n"


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [1, 2, 3],
          f"cudnn_serve {what}: {ans}")


tmp = tempfile.mkdtemp(prefix="phos-cudnn-test-")
try:
    serve_everywhere(PROG, REQS, answers_ok, tmp)

    # captured into CUDA graphs at init (as PyTorch's CUDA graphs capture
    # cuDNN): each launch posts the execution again, its plan made ready
    # first (made again in a restored executor), with its exact set
    serve_everywhere(PROG, REQS, answers_ok, tmp, args=("graph",))
    gtrace = os.path.join(tmp, "graph.jsonl")
    p = run(PROG, "graph", stdin="x\nx\n", trace=gtrace)
    recs = [r for r in read_trace(gtrace) if r.get("op") == "dnn_execute"] if os.path.exists(gtrace) else []
    check(p.returncode == 0 and len(recs) == 4 and all("sets" not in r for r in recs),
          f"graph: two executions a request, exact: rc {p.returncode} {[r.get('sets') for r in recs]} "
          f"{p.stderr[-1500:]}")

    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="x\n", trace=trace)
    check(p.returncode == 0, f"cudnn_serve pointers: rc {p.returncode}: {p.stderr[-2000:]}")
    line = [l for l in p.stderr.splitlines() if l.startswith("pointers ")]
    ptr = json.loads(line[0][len("pointers "):]) if line else {}
    recs = [r for r in read_trace(trace) if r.get("op") == "dnn_execute"] if os.path.exists(trace) else []
    check(len(recs) == 2, f"two dnn_execute records (the double and the float convolution), got {len(recs)}")
    if recs and ptr:
        # x 2x3x8x8, w 4x3x3x3, y 2x4x8x8 doubles: read and written (a plan's direction is not known)
        want = sorted([[ptr["x"], 2 * 3 * 8 * 8 * 8], [ptr["w"], 4 * 3 * 3 * 3 * 8], [ptr["y"], 2 * 4 * 8 * 8 * 8]])
        ws = [r for r in recs[0]["writes"] if r not in want]
        check(sorted(recs[0]["reads"]) == want, f"the execution reads {recs[0]['reads']}, want {want}")
        check(sorted(w for w in recs[0]["writes"] if w in want) == want and
              all(r[0] not in (ptr["x"], ptr["w"], ptr["y"]) for r in ws),
              f"the execution writes {recs[0]['writes']}, want {want} and the workspace")
        check("sets" not in recs[0], f"the execution's set is exact: {recs[0].get('sets')}")

    # the spatial transformer (F.affine_grid, F.grid_sample): forward and
    # backward checked by the program against its CPU reference; its sets are
    # the tensors and the grid exactly; on a GPU the same numbers natively
    stf_trace = os.path.join(tmp, "stf.jsonl")
    p = run(STF, trace=stf_trace)
    got = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    check(p.returncode == 0 and got.get("ok") is True,
          f"cudnn_stf under phos-fn: rc {p.returncode} {got} {p.stderr[-1500:]}")
    recs = [r for r in read_trace(stf_trace) if r.get("op") == "dnn_stf"] if os.path.exists(stf_trace) else []
    check(len(recs) >= 2 and all("sets" not in r for r in recs) and
          sorted(len(r["writes"]) for r in recs[:2]) == [1, 1] and
          [n for _, n in recs[0]["reads"]] == [2 * 6 * 4] and [n for _, n in recs[0]["writes"]] == [2 * 5 * 6 * 2 * 4],
          f"cudnn_stf: the grid reads theta and writes the grid exactly: {recs[:2]}")
    if DEVICE == "cuda":
        n = subprocess.run([STF], capture_output=True, text=True, timeout=300)
        nat = json.loads(n.stdout.strip().splitlines()[-1]) if n.stdout.strip() else {}
        # (cuDNN's backward passes sum with atomics: the last digit of a sum may differ run to run)
        check(n.returncode == 0 and nat.keys() == got.keys() and
              all(abs(nat[k] - got[k]) <= 1e-5 * max(1.0, abs(nat[k])) for k in nat if k != "ok") and
              nat.get("ok") is True, f"cudnn_stf natively {nat}, under phos-fn {got}")

    # RNNs: every request runs the backward passes on the reserve of the
    # training forward before it (at init: across the snapshot), then the
    # forward passes again, all checked by the program
    serve_everywhere(RNN, REQS, answers_ok, tmp)
    rtrace = os.path.join(tmp, "rnn.jsonl")
    p = run(RNN, "sizes", stdin="x\n", trace=rtrace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"cudnn_rnn sizes: {p.stdout} {p.stderr[-2000:]}")
    sizes = {l.split()[1]: json.loads(l.split(" ", 2)[2]) for l in p.stderr.splitlines() if l.startswith("sizes ")}
    recs = [r for r in read_trace(rtrace) if r.get("op") == "dnn_rnn"] if os.path.exists(rtrace) else []
    # three training forwards and one dropout seeding at init, then 4 passes a network a request
    check(len(recs) == 4 + 3 * 4 and all("sets" not in r for r in recs),
          f"cudnn_rnn: exact sets: {len(recs)} records, {[r.get('sets') for r in recs]}")
    if recs and "lstm" in sizes:
        z = sizes["lstm"]
        check([z["x"], z["xbytes"]] in recs[0]["reads"] and [z["w"], z["wbytes"]] in recs[0]["reads"] and
              [z["y"], z["ybytes"]] in recs[0]["writes"] and [z["reserve"], z["reserve_bytes"]] in recs[0]["writes"]
              and [z["work"], z["work_bytes"]] in recs[0]["writes"],
              f"the LSTM's training forward reads x and the weights, writes y, the reserve and the workspace: "
              f"{recs[0]} {z}")
        check([z["reserve"], z["reserve_bytes"]] in recs[4]["reads"] and
              [z["reserve"], z["reserve_bytes"]] in recs[4]["writes"] and [z["y"], z["ybytes"]] in recs[4]["reads"],
              f"its backward data pass reads y and reads and writes the reserve: {recs[4]}")
    # the CTC loss: costs and gradients checked by the program, the set exact
    serve_everywhere(CTC, REQS, answers_ok, tmp)
    ctrace = os.path.join(tmp, "ctc.jsonl")
    p = run(CTC, stdin="x\n", trace=ctrace)
    recs = [r for r in read_trace(ctrace) if r.get("op") == "dnn_ctc"] if os.path.exists(ctrace) else []
    # T 12 x B 3 x A 6 floats read; 3 costs, the gradients and the workspace written
    check(p.returncode == 0 and len(recs) == 2 and all("sets" not in r for r in recs) and
          [n for _, n in recs[0]["reads"]] == [12 * 3 * 6 * 4] and
          {3 * 4, 12 * 3 * 6 * 4} <= {n for _, n in recs[0]["writes"]} and len(recs[0]["writes"]) <= 3,
          f"cudnn_ctc: the loss reads the activations and writes costs, gradients and workspace: rc "
          f"{p.returncode} {recs[:1]} {p.stderr[-1000:]}")
    # checkpoints of the running program: restored, it serves on
    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [2, 3],
              f"cudnn_serve {what}: {ans}")

    checkpoint_everywhere(PROG, "x", restored_ok, tmp)

    # ... and in the middle of its cuDNN calls: each step builds variant
    # packs (synchronous calls) and executes plans (asynchronous ones)
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run-loop")}
    steps = 3000 if DEVICE == "sim" else 20000
    rng = random.Random(11)
    for rnd in range(3):
        for mode in ("stw", "cow", "recopy"):
            out = os.path.join(tmp, f"ck-loop-{mode}-{rnd}")
            p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", PROG, "loop",
                                  str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=fn_env(run_env))
            try:
                # once it runs its loop (its first line: 100 steps), at a random moment
                first = p.stdout.readline() if select.select([p.stdout], [], [], 120)[0] else ""
                check(first.startswith("{"), f"loop, round {rnd}: the program runs its loop: {first!r}")
                time.sleep(rng.uniform(0.0, 0.4))
                c = subprocess.run([PHOS_FN, "checkpoint", "--mode", mode, "-o", out, str(p.pid)],
                                   capture_output=True, text=True, timeout=300, env=fn_env(run_env))
            finally:
                p.kill()
                before = [json.loads(l) for l in ([first] if first.startswith("{") else []) +
                          p.communicate()[0].splitlines() if l.startswith("{")]
            if not check(c.returncode == 0, f"loop, round {rnd}: checkpoint ({mode}): rc {c.returncode} "
                                            f"{c.stderr[-1500:]}"):
                continue
            r = subprocess.run([PHOS_FN, "restore", "--device", DEVICE, out], capture_output=True, text=True,
                               timeout=300, env=fn_env())
            lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            check(r.returncode == 0 and lines and lines[-1] == {"step": steps, "failures": 0, "done": True},
                  f"loop, round {rnd}: restored from a {mode} checkpoint: rc {r.returncode} "
                  f"{lines[-1:] if lines else r.stdout[-300:]} {r.stderr[-1500:]}")
            # it goes on where the original was (killed after the checkpoint)
            check(not lines or not before or lines[0]["step"] <= before[-1]["step"] + 100,
                  f"loop, round {rnd}: the restored copy starts at {lines[:1]}, the original was at {before[-1:]}")
            check(not lines or not before or before[-1]["step"] < 100 or lines[0]["step"] > 100,
                  f"loop, round {rnd}: the restored copy starts over: {lines[:1]}, the original was at {before[-1:]}")
            shutil.rmtree(out, ignore_errors=True)

    if DEVICE == "sim":
        trace2 = os.path.join(tmp, "trace-extra.jsonl")
        p = run(PROG, "extra", stdin="x\n", trace=trace2)
        check(p.returncode == 0 and '"ok": true' in p.stdout, f"cudnn_serve extra: {p.stdout} {p.stderr[-2000:]}")
        recs = [r for r in read_trace(trace2) if r.get("op") == "dnn_execute"] if os.path.exists(trace2) else []
        check(recs and all(r.get("sets") == "opaque" for r in recs),
              f"a pack with a uid of no tensor is opaque: {[r.get('sets') for r in recs]}")
        trace3 = os.path.join(tmp, "trace-ragged.jsonl")
        p = run(PROG, "ragged", stdin="x\n", trace=trace3)
        check(p.returncode == 0 and '"ok": true' in p.stdout, f"cudnn_serve ragged: {p.stdout} {p.stderr[-2000:]}")
        recs = [r for r in read_trace(trace3) if r.get("op") == "dnn_execute"] if os.path.exists(trace3) else []
        check([r.get("sets", "exact") for r in recs] == ["opaque", "exact"],
              f"the ragged convolution is opaque, the other exact: {[r.get('sets', 'exact') for r in recs]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_cudnn")
