"""`cargo xtask bench python`: jit_cache from Python beside its peers, in one run.

- a repeated hit through ``Cache.get_or_build`` (32 headers) against the Rust library's
  (``examples/hit_loop.rs``, the same request on the same root); goal within 1.5x, <= 60 us;
- ``durable.put`` of 4 KiB against the atomicwrites-style write-fsync-rename(-fsync dir) in
  pure Python; goal <= 1.0x;
- a ``Batch`` of 100 files against 100 pure-Python durable writes; goal >= 5x faster;
- a launcher hit through the pip-installed ``jit-cache`` against the cargo-built one (each a
  new process, as a build system runs it); goal about 1.0x.

Peers are timed alternately, round by round, so that the machine's drift moves both. Prints
medians and ratios; no assertion (figures on a shared VM move by 10-20%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import jit_cache
from jit_cache import durable


def median_us(samples):
    return statistics.median(samples) / 1000.0


def row(what, ours, peer, goal):
    ratio = ours / peer if peer else float("nan")
    print(f"{what:<58} {ours:>10.1f} us {peer:>10.1f} us {ratio:>7.2f}x   goal {goal}")


def bench_hit(work: Path, rounds: int, nvcc: str):
    inc = work / "inc"
    inc.mkdir()
    includes = []
    for i in range(32):
        (inc / f"h{i}.cuh").write_text(f"#pragma once\n#define H{i} {i}\n")
        includes.append(f'#include "h{i}.cuh"')
    src = work / "k.cu"
    src.write_text("\n".join(includes) + '\nextern "C" __global__ void k(float* x) { x[0] = H31; }\n')
    root = work / "cache"
    cache = jit_cache.Cache(root, nvcc=nvcc)
    cache.get_or_build(src, include_dirs=[inc])
    py = []
    rust = []
    rust_loop = os.environ["JIT_CACHE_RUST_HIT_LOOP"]
    per_round = 200
    for _ in range(rounds):
        for _ in range(per_round):
            started = time.perf_counter_ns()
            answer = cache.get_or_build(src, include_dirs=[inc])
            py.append(time.perf_counter_ns() - started)
            assert answer.outcome == "hit"
            del answer
        out = subprocess.run(
            [rust_loop, str(root), str(src), str(inc), str(per_round)],
            check=True, capture_output=True, text=True, env={**os.environ, "NVCC": nvcc},
        ).stdout
        rust.extend(int(line) for line in out.split())
    row("hit, 32 headers: Cache.get_or_build vs Rust get_or_build", median_us(py), median_us(rust), "<= 1.5x, <= 60 us")


def python_durable_write(path: str, data: bytes) -> None:
    # What atomicwrites does, with the fsync of the directory it lacked (its #12).
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def bench_put(work: Path, rounds: int):
    data = os.urandom(4096)
    ours, peer = [], []
    target = str(work / "put.bin")
    for _ in range(rounds * 20):
        started = time.perf_counter_ns()
        durable.put(target, data)
        ours.append(time.perf_counter_ns() - started)
        started = time.perf_counter_ns()
        python_durable_write(target, data)
        peer.append(time.perf_counter_ns() - started)
    row("durable.put 4 KiB vs pure-Python write-fsync-rename-fsync", median_us(ours), median_us(peer), "<= 1.0x")


def bench_batch(work: Path, rounds: int):
    data = os.urandom(4096)
    ours, peer = [], []
    d = work / "batch"
    d.mkdir()
    for r in range(rounds):
        started = time.perf_counter_ns()
        with durable.Batch() as b:
            for i in range(100):
                b.put(d / f"f{i}", data)
        ours.append(time.perf_counter_ns() - started)
        started = time.perf_counter_ns()
        for i in range(100):
            python_durable_write(str(d / f"f{i}"), data)
        peer.append(time.perf_counter_ns() - started)
    o, p = median_us(ours), median_us(peer)
    print(f"{'Batch of 100 x 4 KiB vs 100 pure-Python durable writes':<58} {o:>10.1f} us {p:>10.1f} us {p / o:>7.2f}x faster   goal >= 5x")


def bench_launcher(work: Path, rounds: int, nvcc: str):
    (work / "l.cu").write_text('__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    env = {**os.environ, "JIT_CACHE_DIR": str(work / "launcher-cache")}
    installed = jit_cache.launcher_path()
    cargo_built = os.environ["JIT_CACHE_CARGO_BIN"]
    cmd = [nvcc, "-arch=sm_90", "-c", "l.cu", "-o", "l.o"]
    subprocess.run([installed, *cmd], cwd=work, env=env, check=True)
    times = {installed: [], cargo_built: []}
    for _ in range(rounds * 5):
        for binary in (installed, cargo_built):
            (work / "l.o").unlink(missing_ok=True)
            started = time.perf_counter_ns()
            subprocess.run([binary, *cmd], cwd=work, env=env, check=True)
            times[binary].append(time.perf_counter_ns() - started)
    row("launcher hit: pip-installed jit-cache vs cargo-built", median_us(times[installed]), median_us(times[cargo_built]), "~1.0x")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    nvcc = os.environ["NVCC"]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp")) as tmp:
        work = Path(tmp)
        print(f"{'measure':<58} {'ours':>13} {'peer':>13} {'ratio':>8}")
        bench_hit(work, args.rounds, nvcc)
        bench_put(work, args.rounds)
        bench_batch(work, args.rounds)
        bench_launcher(work, args.rounds, nvcc)


if __name__ == "__main__":
    main()
