#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generates the stubs and the linker version script of a stand-in CUDA library.

    gen_stubs.py --lib cudart --node libcudart.so.13 --syms cudart.syms \
                 --stubs stubs.c --map cudart.map  conn.c memory.c ...

The .syms file lists every function the real library exports (one name per
line, from `objdump -T`). The .c files are scanned for what we implement:
definitions that start with PHOS_EXPORT, PHOS_ALIAS(name, target) lines and
the names listed in PHOS_EXPORT_NAMES(...) (definitions a macro writes).
Every listed name we do not implement gets a stub that returns the library's
"not supported" status and logs its name once. The version script puts the
real names in the real version node, phos_fn_* in PHOS_1 and other phos_*
names in PHOS_PRIVATE; any other exported name is an error (a typo, or a name
the real library does not have).
"""
import argparse
import re
import sys

# Names whose real return type is not the status: they must be implemented
# (pointers, structs returned in memory) or get a stub of the right type.
MUST_IMPLEMENT = {
    'cudart': {'cudaGetErrorName', 'cudaGetErrorString', 'cudaCreateChannelDesc',
               '__cudaRegisterFatBinary', '__cudaRegisterFatBinaryEnd', '__cudaRegisterFunction',
               '__cudaRegisterVar', '__cudaUnregisterFatBinary', '__cudaInitModule',
               '__cudaPushCallConfiguration', '__cudaPopCallConfiguration', '__cudaGetKernel',
               '__cudaLaunchKernel', '__cudaLaunchKernel_ptsz'},
    'cublas': {'cublasGetStatusName', 'cublasGetStatusString', 'cublasGetCudartVersion'},
    'cublasLt': {'cublasLtGetStatusName', 'cublasLtGetStatusString', 'cublasLtGetVersion',
                 'cublasLtGetCudartVersion'},
    'cuda': {'cuGetProcAddress', 'cuGetProcAddress_v2', 'cuGetErrorName', 'cuGetErrorString', 'cuInit'},
    'nccl': {'ncclGetErrorString', 'pncclGetErrorString', 'ncclGetLastError', 'pncclGetLastError'},
    'cudnn': {'cudnnGetVersion', 'cudnnGetMaxDeviceVersion', 'cudnnGetCudartVersion', 'cudnnGetErrorString',
              'cudnnGetLastErrorString'},
    'cufft': set(),   # (every export returns a cufftResult)
    'cusparse': {'cusparseGetErrorName', 'cusparseGetErrorString', 'cusparseGetMatType', 'cusparseGetMatFillMode',
                 'cusparseGetMatDiagType', 'cusparseGetMatIndexBase'},
    'curand': set(),  # (every export returns a curandStatus_t)
    'cusolver': set(),  # (every export returns a cusolverStatus_t)
}

# Legacy cuBLAS (cublas.h) returns values, not statuses; their stubs return zero
# of that type. Anything not named here returns the status.
RETURN_KINDS = {
    'void': ['__cudaRegisterHostVar'],
    'float': ['cublasSasum', 'cublasScasum', 'cublasScnrm2', 'cublasSdot', 'cublasSnrm2'],
    'double': ['cublasDasum', 'cublasDdot', 'cublasDnrm2', 'cublasDzasum', 'cublasDznrm2'],
    'cfloat': ['cublasCdotc', 'cublasCdotu'],
    'cdouble': ['cublasZdotc', 'cublasZdotu'],
    'int': ['cublasIcamax', 'cublasIcamin', 'cublasIdamax', 'cublasIdamin', 'cublasIsamax',
            'cublasIsamin', 'cublasIzamax', 'cublasIzamin'],
}
# The legacy void-returning cuBLAS routines (cublasSgemm, cublasSaxpy, ...)
# ignore the returned status: returning one is harmless for them.

STATUS = {'cudart': 'phos_cudart_stub', 'cublas': 'phos_cublas_stub', 'cublasLt': 'phos_cublaslt_stub',
          'cuda': 'phos_cuda_stub',
          'nccl': 'phos_nccl_stub', 'cudnn': 'phos_cudnn_stub', 'cufft': 'phos_cufft_stub',
          'cusparse': 'phos_cusparse_stub',
          'curand': 'phos_curand_stub',
          'cusolver': 'phos_cusolver_stub'}

EXPORT_RE = re.compile(r'^PHOS_EXPORT\b[^(;=]*?\b([A-Za-z_]\w*)\s*\(', re.M)
ALIAS_RE = re.compile(r'^PHOS_ALIAS\(\s*([A-Za-z_]\w*)\s*,', re.M)
NAMES_RE = re.compile(r'^PHOS_EXPORT_NAMES\(([^)]*)\)', re.M)
NAME_RE = re.compile(r'^[A-Za-z_]\w*$')


def implemented(paths):
    names = set()
    for p in paths:
        with open(p, encoding='utf-8') as f:
            text = f.read()
        names.update(EXPORT_RE.findall(text))
        names.update(ALIAS_RE.findall(text))
        for block in NAMES_RE.findall(text):
            names.update(block.split())
    return names


def read_syms(path):
    names = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            if not NAME_RE.match(line):
                sys.exit(f'{path}: not a symbol name: {line!r}')
            names.append(line)
    return names


# The cublasXt routines cublas_xt.c does not run are refused loudly: a program
# that uses them must not take a NOT_SUPPORTED it does not check for a quiet
# success.
LOUD = {'cublas': ('cublasXt', 'phos_cublas_xt_stub')}


def stub(lib, name, index):
    kind = next((k for k, v in RETURN_KINDS.items() if name in v), 'status')
    fn = STATUS[lib]
    if lib in LOUD and name.startswith(LOUD[lib][0]):
        fn = LOUD[lib][1]
    call = f'{fn}("{name}", &logged[{index}])'
    ret = {'status': ('int', f'return {call};'),
           'void': ('void', f'(void){call};'),
           'int': ('int', f'(void){call};\n\treturn 0;'),
           'float': ('float', f'(void){call};\n\treturn 0.0f;'),
           'double': ('double', f'(void){call};\n\treturn 0.0;'),
           'cfloat': ('struct phos_cfloat', f'(void){call};\n\treturn (struct phos_cfloat){{ 0, 0 }};'),
           'cdouble': ('struct phos_cdouble', f'(void){call};\n\treturn (struct phos_cdouble){{ 0, 0 }};'),
           }[kind]
    return (f'PHOS_STUB {ret[0]} {name}(void);\n'
            f'PHOS_STUB {ret[0]} {name}(void)\n{{\n\t{ret[1]}\n}}\n')


TYPEDEF_RE = re.compile(r'\bPFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\)')


def write_proctab(path, typedefs, real):
    """cuGetProcAddress's tables: every export with its address (sorted, for
    bsearch), and for each driver API name the versions cudaTypedefs.h gives
    it (PFN_cuMemAlloc_v2000, _v3020), each mapped to the export that serves
    it: the first version is the plain name, the k-th the name with _v<k>
    (cuMemAlloc, cuMemAlloc_v2), as the driver names its ABI revisions; a
    version whose export does not exist is left out."""
    real_set = set(real)
    versions = {}
    if typedefs:
        with open(typedefs, encoding='utf-8') as f:
            for base, ver, suffix in TYPEDEF_RE.findall(f.read()):
                if not suffix:
                    versions.setdefault(base, set()).add(int(ver))
    rows = []
    for base, vs in sorted(versions.items()):
        for k, ver in enumerate(sorted(vs)):
            name = base if k == 0 else f'{base}_v{k + 1}'
            if name in real_set:
                rows.append((base, ver, name))
    names = sorted(real_set)
    out = ['/* Generated by gen_stubs.py from cudaTypedefs.h: do not edit. */',
           '#include "libcuda_procs.h"']
    out += [f'int {n}(void);' for n in names]
    out.append(f'const struct phos_cuda_export phos_cuda_exports[{len(names)}] = {{')
    out += [f'\t{{ "{n}", (void *){n} }},' for n in names]
    out.append('};')
    out.append(f'const unsigned phos_cuda_nexports = {len(names)};')
    out.append(f'const struct phos_cuda_version phos_cuda_versions[{max(len(rows), 1)}] = {{')
    out += [f'\t{{ "{b}", {v}, "{n}" }},' for b, v, n in rows]
    out.append('};')
    out.append(f'const unsigned phos_cuda_nversions = {len(rows)};')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(out) + '\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--lib', required=True, choices=sorted(STATUS))
    ap.add_argument('--node', required=True,
                    help='version node, e.g. libcudart.so.13; "" for a library without symbol versions (NCCL)')
    ap.add_argument('--syms', required=True)
    ap.add_argument('--stubs', required=True)
    ap.add_argument('--map', required=True)
    ap.add_argument('--typedefs', help="cudaTypedefs.h: with --proctab, cuGetProcAddress's table")
    ap.add_argument('--proctab', help='writes the table of exports and of versioned names')
    ap.add_argument('sources', nargs='+')
    a = ap.parse_args()

    real = read_syms(a.syms)
    real_set = set(real)
    ours = implemented(a.sources)
    missing = sorted(MUST_IMPLEMENT[a.lib] - ours)
    if missing:
        sys.exit(f'gen_stubs: these must be implemented, not stubbed: {", ".join(missing)}')
    public = sorted(n for n in ours if n.startswith('phos_fn_'))
    private = sorted(n for n in ours if n.startswith('phos_') and not n.startswith('phos_fn_'))
    stray = sorted(n for n in ours if n not in real_set and not n.startswith('phos_'))
    if stray:
        sys.exit(f'gen_stubs: exported but not in {a.syms}: {", ".join(stray)}')

    todo = [n for n in real if n not in ours]
    out = [f'/* Generated by gen_stubs.py from {a.syms.split("/")[-1]}: do not edit. */',
           f'/* {len(real)} exports, {len(real) - len(todo)} implemented, {len(todo)} stubbed. */',
           '#define PHOS_STUB __attribute__((visibility("default")))',
           f'int {STATUS[a.lib]}(const char *name, int *logged);',
           *([f'int {LOUD[a.lib][1]}(const char *name, int *logged);'] if a.lib in LOUD else []),
           'struct phos_cfloat { float x, y; };',
           'struct phos_cdouble { double x, y; };',
           f'static int logged[{max(len(todo), 1)}];', '']
    for i, n in enumerate(todo):
        out.append(stub(a.lib, n, i))
    with open(a.stubs, 'w', encoding='utf-8') as f:
        f.write('\n'.join(out))

    if a.proctab:
        write_proctab(a.proctab, a.typedefs, real)

    # An empty node: an anonymous version script (libcuda.so.1 has no symbol
    # versions), which cannot carry other nodes.
    if not a.node:
        m = ['/* Generated by gen_stubs.py: do not edit. */', '{', 'global:']
        m += [f'\t{n};' for n in real + public + private]
        m += ['local:', '\t*;', '};']
        with open(a.map, 'w', encoding='utf-8') as f:
            f.write('\n'.join(m) + '\n')
        return

    m = [f'/* Generated by gen_stubs.py: do not edit. */', f'{a.node} {{', 'global:']
    m += [f'\t{n};' for n in real]
    m += ['local:', '\t*;', '};']
    if public:
        m += ['PHOS_1 {', 'global:'] + [f'\t{n};' for n in public] + ['};']
    if private:
        m += ['PHOS_PRIVATE {', 'global:'] + [f'\t{n};' for n in private] + ['};']
    with open(a.map, 'w', encoding='utf-8') as f:
        f.write('\n'.join(m) + '\n')


if __name__ == '__main__':
    main()
