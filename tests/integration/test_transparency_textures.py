# SPDX-License-Identifier: MIT
"""Issue 12, CUDA arrays, texture objects and surface objects, run as ordinary
CUDA programs (tests/transparency/textures/; on sim through the twins of
tests/transparency/twins.c and the sampling helpers of runtime/device/sim/sim_tex.h):

- arrays: 1D, 2D, 3D and 2D layered arrays, with and without surface
  load/store; cudaArrayGetInfo and cudaGetChannelDesc; copies between arrays
  and host memory, pitched device memory and other arrays, whole and in parts,
  on a stream too; the deprecated cudaMemcpyToArray/FromArray (a copy across
  rows included); cudaMemcpy3D with offset boxes; a copy past an array's
  width refused with cudaErrorInvalidValue; under phos-fn only, a second
  cudaFreeArray refused (natively CUDA crashes on it);
- textures: textures on arrays (point filtering with clamp and with border,
  linear filtering with normalized coordinates and wrap, uchar4 read as
  normalized floats, signed shorts, a 3D texture, a 2D layered one), on linear
  memory (tex1Dfetch, float and normalized bytes) and on pitched memory; the
  descriptors read back; surfaces written and read by kernels (2D, out of
  range accesses dropped or read as 0, and 3D), the arrays copied back;
- texture_serve: arrays, textures (their handles with a hole below them) and
  a surface made during init serve requests under phos-fn run, and after a
  snapshot at phos_fn_serve is restored (stop-the-world and on demand): the
  arrays' contents, a kernel's surface writes included, and the handles come
  back, and a texture made after the restore takes a free handle.

Each program checks its own results against a CPU reference (natively too on
a GPU); the trace shows every kernel forwarded.
"""
import os
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, done, program, read_trace, run, serve_everywhere

ARRAYS = program("tests", "transparency", "textures", "arrays")
TEXTURES = program("tests", "transparency", "textures", "textures")
SERVE = program("tests", "transparency", "textures", "texture_serve")
REQS = "x\nx\nx\n"
# kernels each program launches (mangled, as the trace names them), and how often
LAUNCHES = {
    "arrays": {},
    "textures": {"_Z11tex_fetch2dyPfiiffff": 4, "_Z12tex_fetch2d4yP6float4ii": 1, "_Z17tex_fetch2d_shortyPsii": 1,
                 "_Z11tex_fetch3dyPfiiiff": 1, "_Z17tex_fetch_layeredyPfiii": 1, "_Z11tex_fetch1dyPfi": 2,
                 "_Z16tex_surf_write2dyiif": 1, "_Z15tex_surf_read2dyPfii": 1, "_Z16tex_surf_write3dyiii": 1},
}


def native(prog, *args, stdin=""):
    return subprocess.run([prog, *args], input=stdin, capture_output=True, text=True, timeout=300)


tmp = tempfile.mkdtemp(prefix="phos-textures-test-")
try:
    # arrays --free-twice: a second cudaFreeArray, refused under phos-fn;
    # natively CUDA crashes on it, so the native run leaves it out
    for prog, name, args in ((ARRAYS, "arrays", ["--free-twice"]), (TEXTURES, "textures", [])):
        trace = os.path.join(tmp, name + ".trace")
        p = run(prog, *args, trace=trace)
        check(p.returncode == 0 and f"{name}: ok" in p.stdout + p.stderr,
              f"{name} under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        if DEVICE == "cuda":
            p = native(prog)
            check(p.returncode == 0 and f"{name}: ok" in p.stdout,
                  f"{name} natively: rc {p.returncode}\n{p.stderr[-3000:]}")
        if not os.path.exists(trace):
            check(False, f"{name}: no trace")
            continue
        by = {}
        for r in read_trace(trace):
            if r.get("op") == "launch":
                by[r.get("kernel")] = by.get(r.get("kernel"), 0) + 1
        check(by == LAUNCHES[name], f"{name}: launches by kernel {by}, want {LAUNCHES[name]}")

    def check_answers(got, what):
        check(len(got) == 3, f"{what}: {len(got)} of 3 answers: {got}")
        for i, a in enumerate(got):
            check(a.get("ok") is True and a.get("requests") == i + 1, f"{what}: answer {i}: {a}")

    serve_everywhere(SERVE, REQS, check_answers, tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_textures")
