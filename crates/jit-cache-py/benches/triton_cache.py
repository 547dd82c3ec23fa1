"""`cargo xtask bench triton` (`benches/triton_cache.py`): jit_cache.triton beside Triton's own FileCacheManager, in one run.

- a warm ``get_group`` per kernel (the manager made and asked, as ``triton.compile`` does on a
  hit), the first in a process (nothing of this process pinned yet; goal <= half of Triton's,
  which only checks that each file exists) and a repeated one;
- a cold compile of the same 4 kernels (a matmul's four tile shapes, 0.5-1 s each) by 8
  processes started together, each in the same order as the ranks of one job: the compiles
  counted, the CPU of the compile loops summed over the processes (``triton_key()`` included:
  each process's first compile computes it), the CPU of the whole processes, the wall from the
  start signal to the last exit; ours with ``install()`` (the identity cache warmed by an earlier
  process) and without; goal CPU <= 1/4 of Triton's, wall <= 1/2;
- the first (warm) ``triton.compile`` of a fresh process: Triton's manager, ours, and ours after
  ``jit_cache.triton.install()`` (``triton_key()`` from the identity cache); goal <= 50 ms.

The kernels are the tests' (``tests/triton_worker.py``) for sm_90; no GPU is needed. Peers are
timed alternately; figures are medians. No assertion: figures on a shared VM move by 10-20%.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "tests" / "triton_worker.py"
KERNELS = ["add", "scale", "relu", "row_sum"]
MATMULS = ["mm64x64", "mm64x128", "mm128x64", "mm128x128"]

sys.path.insert(0, str(WORKER.parent))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
from triton.runtime import cache as triton_cache  # noqa: E402

import jit_cache.triton as jt  # noqa: E402
import triton_worker  # noqa: E402


def env_for(work: Path, what: str) -> dict:
    env = dict(os.environ)
    env["JIT_CACHE_DIR"] = str(work / f"{what}-jit-cache")
    env["TRITON_CACHE_DIR"] = str(work / f"{what}-triton")
    env.pop("TRITON_CACHE_MANAGER", None)
    return env


def worker(env: dict, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_get_group(work: Path, rounds: int) -> None:
    env = env_for(work, "warm")
    os.environ["JIT_CACHE_DIR"] = env["JIT_CACHE_DIR"]
    os.environ["TRITON_CACHE_DIR"] = env["TRITON_CACHE_DIR"]
    keys = {}
    for name in KERNELS:
        src = triton_worker.source(name)
        triton.knobs.cache.manager_class = jt.CacheManager
        ours = triton.compile(src, target=triton_worker.TARGET)
        triton.knobs.cache.manager_class = triton_cache.FileCacheManager
        theirs = triton.compile(src, target=triton_worker.TARGET)
        assert ours.hash == theirs.hash
        keys[name] = triton_cache._base32(ours.hash)
    first, repeated, file = [], [], []
    for _ in range(rounds):
        for name, key in keys.items():
            group = f"{name}.json"
            t0 = time.perf_counter_ns()
            got = triton_cache.FileCacheManager(key).get_group(group)
            file.append(time.perf_counter_ns() - t0)
            assert got and len(got) == 7
            jt._held.clear()  # nothing of this process pinned: the first get_group of a process
            t0 = time.perf_counter_ns()
            got = jt.CacheManager(key).get_group(group)
            first.append(time.perf_counter_ns() - t0)
            assert got and len(got) == 7
            t0 = time.perf_counter_ns()
            got = jt.CacheManager(key).get_group(group)
            repeated.append(time.perf_counter_ns() - t0)
            assert got and len(got) == 7
    theirs = statistics.median(file) / 1e3
    for what, samples, goal in (
        ("first in a process", first, "(goal <= 0.5x)"),
        ("repeated", repeated, ""),
    ):
        ours = statistics.median(samples) / 1e3
        print(
            f"warm get_group per kernel, {what:<19} {ours:>9.1f} us  Triton {theirs:>8.1f} us"
            f"  {ours / theirs:>5.2f}x  {goal}"
        )


def race(work: Path, what: str) -> dict:
    env = env_for(work, f"race-{what}")
    manager = ["--manager", "triton"] if what == "triton" else []
    if what == "install":
        manager = ["--install"]
        worker(env, "--install", "add")  # the host's identity cache, warm
    start = work / f"start-{what}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = []
    for _ in range(8):
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), *manager, "--start-file", str(start), *MATMULS],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    start.touch()
    reports = []
    for p in procs:
        out, _ = p.communicate()
        assert p.returncode == 0
        reports.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "compiles": sum(r["compiles"] for r in reports),
        "cpu": sum(r["compile_cpu_s"] for r in reports),
        "cpu_with_imports": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "wall": wall,
    }


def bench_race(work: Path, runs: int) -> None:
    results = {"triton": [], "install": [], "jit_cache": []}
    for run in range(runs):
        sub = work / f"race-{run}"
        sub.mkdir()
        for what, samples in results.items():
            samples.append(race(sub, what))
    for ours, label in (("install", "with install()"), ("jit_cache", "CacheManager only")):
        for what, unit in (("compiles", ""), ("cpu", "s"), ("cpu_with_imports", "s"), ("wall", "s")):
            o = statistics.median(r[what] for r in results[ours])
            t = statistics.median(r[what] for r in results["triton"])
            goal = {"cpu": "(goal <= 0.25x)", "wall": "(goal <= 0.5x)"}.get(what, "")
            print(
                f"cold 8 processes x 4 kernels, {label:<17} {what:<16} {o:>8.2f}{unit:<1}"
                f"  Triton {t:>8.2f}{unit:<1}  {o / t:>5.2f}x  {goal}"
            )


def bench_first_compile(work: Path, runs: int) -> None:
    env = env_for(work, "first")
    # Warm both caches and the identity cache.
    worker(env, "--manager", "triton", "add")
    worker(env, "--install", "add")
    worker(env, "--install", "add")
    samples = {"triton": [], "jit_cache": [], "install": []}
    for _ in range(runs):
        samples["triton"].append(worker(env, "--manager", "triton", "add"))
        samples["jit_cache"].append(worker(env, "add"))
        samples["install"].append(worker(env, "--install", "add"))
    for report in samples["install"]:
        assert report["compiles"] == 0 and report["key_from_cache"], report
    theirs = statistics.median(r["first_ms"] for r in samples["triton"])
    for what, label in (("jit_cache", "CacheManager"), ("install", "after install()")):
        ours = statistics.median(r["first_ms"] for r in samples[what])
        print(
            f"first warm compile, fresh process, {label:<16} {ours:>7.1f} ms  Triton {theirs:>7.1f} ms"
            f"  {ours / theirs:>5.2f}x  {'(goal <= 50 ms)' if what == 'install' else ''}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200, help="get_group rounds")
    parser.add_argument("--runs", type=int, default=3, help="races and fresh processes")
    args = parser.parse_args()
    print(f"triton {triton.__version__}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="jit-cache-triton-bench-") as work:
        work = Path(work)
        bench_get_group(work, args.rounds)
        bench_first_compile(work, max(args.runs, 5))
        bench_race(work, args.runs)


if __name__ == "__main__":
    main()
