# SPDX-License-Identifier: MIT
"""phos_fn: the function contract for Python programs (include/phos/fn.h's).

A Python function initialises (imports, loads its weights to the GPU, warms
up), then calls serve(handler): the snapshot point, as phos_fn_serve() is for
C functions:

    import phos_fn

    def handle(req):                  # req.body: bytes; req.json(): parsed
        return {"answer": 42}         # dict/list: JSON; str or bytes: as is;
                                      # (status, body) for an error status
    phos_fn.serve(handle)

Under phos-fn, serve() calls phos_fn_serve_impl of the stand-in libcudart
(the one the function's CUDA calls reach; ctypes, no extension to build), so
the runtime snapshots the process there and feeds it requests; a handler
may print to stdout freely (responses travel on their own descriptor). Run
natively (no stand-in), it serves one JSON request per line on stdin, one
response per line on stdout, as fn.h's fallback does. An exception in the
handler answers 500 with {"error": "..."}; the function goes on.
"""
import ctypes
import json
import sys
import traceback

__all__ = ["Request", "serve"]


class Request:
    """One request: its body (bytes) and content type."""

    def __init__(self, body, content_type="application/json"):
        self.body = body
        self.content_type = content_type

    def json(self):
        return json.loads(self.body) if self.body.strip() else {}


class _CRequest(ctypes.Structure):
    _fields_ = [("body", ctypes.c_void_p), ("len", ctypes.c_size_t), ("content_type", ctypes.c_char_p)]


class _CResponse(ctypes.Structure):
    _fields_ = [("body", ctypes.c_void_p), ("len", ctypes.c_size_t), ("content_type", ctypes.c_char_p)]


_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_CRequest), ctypes.POINTER(_CResponse))
# Content types handed to the runtime must outlive the call: kept here, by name.
_CONTENT_TYPES = {}


def _answer(handler, req):
    """(status, body bytes, content type or None) of handler(req)."""
    try:
        out = handler(req)
        status = 200
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], int):
            status, out = out
        ctype = None
        if isinstance(out, (dict, list)):
            out = json.dumps(out)
        elif isinstance(out, bytes):
            ctype = "application/octet-stream"
        elif out is None:
            out = ""
        elif not isinstance(out, str):
            raise TypeError(f"a handler returns a dict, list, str, bytes or (status, body), not {type(out).__name__}")
        if not 100 <= status <= 599:
            raise ValueError(f"a handler's status must be 100..599, not {status}")
        return status, out.encode() if isinstance(out, str) else out, ctype
    except Exception as e:   # the function goes on; the caller gets why
        traceback.print_exc(file=sys.stderr)
        return 500, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode(), None


def _impl():
    """phos_fn_serve_impl of the stand-in libcudart, or None when running natively."""
    try:
        lib = ctypes.CDLL("libcudart.so.13")
        impl = lib.phos_fn_serve_impl
    except (OSError, AttributeError):
        return None
    impl.argtypes = [_HANDLER, ctypes.c_void_p]
    impl.restype = ctypes.c_int
    return impl


def _serve_stdio(handler):
    for line in sys.stdin.buffer:
        line = line.rstrip(b"\r\n")
        if not line:
            continue
        _, body, _ = _answer(handler, Request(line))
        sys.stdout.buffer.write(body + b"\n")
        sys.stdout.flush()
    return 0


def serve(handler):
    """Serves requests with handler(Request) until there are none left; returns 0,
    or non-zero when the runtime failed."""
    impl = _impl()
    if impl is None:
        return _serve_stdio(handler)
    libc = ctypes.CDLL(None)
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.malloc.restype = ctypes.c_void_p

    def trampoline(state, creq, cresp):
        r = creq.contents
        body = ctypes.string_at(r.body, r.len) if r.body and r.len else b""
        ctype = r.content_type.decode(errors="replace") if r.content_type else "application/json"
        status, out, out_ctype = _answer(handler, Request(body, ctype))
        if out:
            p = libc.malloc(len(out))   # the runtime frees it (fn.h)
            if not p:
                return 500
            ctypes.memmove(p, out, len(out))
            cresp.contents.body = p
            cresp.contents.len = len(out)
        if out_ctype:
            cresp.contents.content_type = _CONTENT_TYPES.setdefault(out_ctype, out_ctype.encode())
        return 0 if status == 200 else status

    callback = _HANDLER(trampoline)   # kept alive for the whole serve
    return impl(callback, None)
