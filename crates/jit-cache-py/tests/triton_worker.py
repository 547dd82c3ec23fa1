"""One process of the Triton tests and benchmark: compiles some of eight kernels with the
real ``triton.compile`` for sm_90 (no GPU needed: Triton's bundled ptxas makes the cubin) and
prints a JSON report on its last line.

    python triton_worker.py [--manager jit_cache|triton] [--install] [--start-file F]
                            [--kill-at POINT] [--hold] KERNEL...

``--manager`` chooses ``jit_cache.triton.CacheManager`` (the default) or Triton's own
``FileCacheManager``; ``--install`` calls ``jit_cache.triton.install()`` first; ``--start-file``
waits until that file exists before compiling (so that many processes start together);
``--kill-at`` kills this process with SIGKILL at one point of the put sequence (``put-N-before``,
``put-N-after``, ``commit-before``, ``commit-after``, N counted from 1); ``--hold`` prints the
report, then waits for a line on stdin and reads every path of every group again before it
exits (the eviction test).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

started = time.perf_counter()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def scale(x, out, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * a, mask=m)


@triton.jit
def relu(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    tl.store(out + offs, tl.where(v > 0, v, 0.0), mask=m)


@triton.jit
def row_sum(x, out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out + row, tl.sum(v, axis=0))


@triton.jit
def matmul(a, b, c, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16))


ELEMENTWISE = {"BLOCK": 128}
MATMUL = {"a": "*fp16", "b": "*fp16", "c": "*fp16", "K": "i32", "sam": "i32", "sak": "i32",
          "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32"}

# Four small kernels (the tests'; about 0.1 s of CPU each to compile) and four tile shapes of
# a matmul (the benchmark's: 0.5-1 s each, closer to a real model's kernels).
KERNELS = {
    "add": (add, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}, ELEMENTWISE),
    "scale": (scale, {"x": "*fp32", "out": "*fp32", "a": "fp32", "n": "i32"}, ELEMENTWISE),
    "relu": (relu, {"x": "*fp32", "out": "*fp32", "n": "i32"}, ELEMENTWISE),
    "row_sum": (row_sum, {"x": "*fp32", "out": "*fp32", "n_cols": "i32"}, ELEMENTWISE),
    **{
        f"mm{bm}x{bn}": (matmul, MATMUL, {"BM": bm, "BN": bn, "BK": 64})
        for bm in (64, 128)
        for bn in (64, 128)
    },
}

TARGET = GPUTarget("cuda", 90, 32)


def source(name: str) -> ASTSource:
    fn, signature, constexprs = KERNELS[name]
    return ASTSource(fn, signature, constexprs)


def kill_points(point: str):
    """Wraps the manager's put sequence so that this process dies at `point`."""
    import jit_cache.triton as jt

    calls = {"put": 0}
    put, put_group = jt.CacheManager.put, jt.CacheManager.put_group
    native_commit = jt.Producer.commit

    def die(where: str) -> None:
        if where == point:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def killing_put(self, data, filename, binary=True):
        calls["put"] += 1
        die(f"put-{calls['put']}-before")
        path = put(self, data, filename, binary)
        die(f"put-{calls['put']}-after")
        return path

    class KillingProducer:
        """Stands in for the native producer so that the kill lands just before or after the
        commit's rename (the commit itself is one call into the library)."""

        def __init__(self, producer):
            self._producer = producer

        def __getattr__(self, name):
            return getattr(self._producer, name)

        def commit(self):
            die("commit-before")
            entry = native_commit(self._producer)
            die("commit-after")
            return entry

    def killing_put_group(self, filename, group):
        if self._producer is not None:
            self._producer = KillingProducer(self._producer)
        return put_group(self, filename, group)

    jt.CacheManager.put = killing_put
    jt.CacheManager.put_group = killing_put_group


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--manager", choices=["jit_cache", "triton"], default="jit_cache")
    parser.add_argument("--install", action="store_true")
    parser.add_argument("--start-file")
    parser.add_argument("--kill-at")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("kernels", nargs="+")
    args = parser.parse_args()

    if args.manager == "jit_cache":
        import jit_cache.triton

        if args.install:
            jit_cache.triton.install()
        else:
            triton.knobs.cache.manager_class = jit_cache.triton.CacheManager
        if args.kill_at:
            kill_points(args.kill_at)
    events = []
    triton.knobs.compilation.listener = lambda **kw: events.append(kw["cache_hit"])
    imported = time.perf_counter()
    if args.start_file:
        print("ready", flush=True)
        while not os.path.exists(args.start_file):
            time.sleep(0.005)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    kernels = {}
    first_ms = None
    for name in args.kernels:
        k0 = time.perf_counter()
        compiled = triton.compile(source(name), target=TARGET)
        if first_ms is None:
            first_ms = (time.perf_counter() - k0) * 1e3
        kernels[name] = {
            "cubin_sha256": hashlib.sha256(compiled.asm["cubin"]).hexdigest(),
            "paths": dict(compiled.metadata_group),
        }
    report = {
        "compiles": events.count(False),
        "hits": events.count(True),
        "kernels": kernels,
        "import_s": imported - started,
        "compile_wall_s": time.perf_counter() - t0,
        "compile_cpu_s": time.process_time() - cpu0,
        "first_ms": first_ms,
        "pid": os.getpid(),
    }
    if args.install:
        from triton.runtime import cache as triton_cache

        report["key_from_cache"] = getattr(triton_cache.triton_key, "answered_from_cache", None)
    print(json.dumps(report), flush=True)
    if args.hold:
        sys.stdin.readline()
        sizes = {}
        for name, kernel in kernels.items():
            for file, path in kernel["paths"].items():
                with open(path, "rb") as f:
                    sizes[file] = len(f.read())
        print(json.dumps({"read_after_gc": sizes}), flush=True)


if __name__ == "__main__":
    main()
