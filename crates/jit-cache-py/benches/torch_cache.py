"""`cargo xtask bench torch` (`benches/torch_cache.py`): jit_cache.torch beside Inductor's own caches.

A second process's ``torch.compile`` of one small function on the CPU (the tests' worker,
``tests/torch_worker.py``: Inductor's C++ backend, g++), timed from the call to its answer
(the compile) and as a whole process (torch's import included):

- none: a fresh ``TORCHINDUCTOR_CACHE_DIR`` and no store (every fresh start today);
- Inductor's local cache: the same ``TORCHINDUCTOR_CACHE_DIR`` an earlier process filled;
- the store: a fresh ``TORCHINDUCTOR_CACHE_DIR`` (a new host or container), ``JIT_CACHE_TORCH=1``
  on a root an earlier process filled;
- a fleet hit on one redis-server: the store on a fresh root with ``JIT_CACHE_REMOTE`` (fetched,
  verified, published locally) beside Inductor's own Redis backend
  (``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1``, ``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1``), each
  with a fresh ``TORCHINDUCTOR_CACHE_DIR``.

On the CPU a hit from a remote cache (Inductor's or the store's) still builds the graph's C++
kernel with g++: the FX graph entry holds its source, not the built library (on a GPU, Triton's
kernels are bundled into the entry). Figures are medians of ``--runs`` processes, peers
alternated; no assertion: figures on a shared VM move by 10-20%.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "tests" / "torch_worker.py"


def run(env: Dict[str, str]) -> Dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(WORKER)], env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["wall"] = wall
    return report


def base_env() -> Dict[str, str]:
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("JIT_CACHE", "TORCHINDUCTOR_")):
            del env[name]
    return env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import torch

    tmp = Path(tempfile.mkdtemp(prefix="jit-cache-torch-bench-"))
    n = [0]

    def fresh(name: str) -> str:
        n[0] += 1
        return str(tmp / f"{name}-{n[0]}")

    sock = tmp / "redis.sock"
    redis = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert redis.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.01)
        local_dir = fresh("inductor-local")
        root = fresh("root")
        store_remote = f"redis+unix://{sock}"
        inductor_redis = {
            "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
            "TORCHINDUCTOR_REDIS_URL": f"unix://{sock}",
        }
        # Filled once each: Inductor's local cache, the store's root (and the fleet through
        # it), Inductor's Redis keys.
        run({**base_env(), "TORCHINDUCTOR_CACHE_DIR": local_dir})
        run({**base_env(), "TORCHINDUCTOR_CACHE_DIR": fresh("i"), "JIT_CACHE_TORCH": "1",
             "JIT_CACHE_DIR": root, "JIT_CACHE_REMOTE": store_remote})
        run({**base_env(), "TORCHINDUCTOR_CACHE_DIR": fresh("i"), **inductor_redis})

        peers = {
            "none (fresh Inductor cache)": lambda: {"TORCHINDUCTOR_CACHE_DIR": fresh("i")},
            "Inductor's local cache": lambda: {"TORCHINDUCTOR_CACHE_DIR": local_dir},
            "the store (fresh Inductor cache)": lambda: {
                "TORCHINDUCTOR_CACHE_DIR": fresh("i"), "JIT_CACHE_TORCH": "1", "JIT_CACHE_DIR": root},
            "fleet hit: the store on Redis (fresh root)": lambda: {
                "TORCHINDUCTOR_CACHE_DIR": fresh("i"), "JIT_CACHE_TORCH": "1",
                "JIT_CACHE_DIR": fresh("root"), "JIT_CACHE_REMOTE": store_remote},
            "fleet hit: Inductor's Redis backend": lambda: {
                "TORCHINDUCTOR_CACHE_DIR": fresh("i"), **inductor_redis},
        }
        results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in peers}
        for _ in range(args.runs):
            for name, extra in peers.items():
                results[name].append(run({**base_env(), **extra()}))
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.runs} runs each, medians")
    print(f"{'second process':<44} {'compile s':>10} {'process s':>10}  counters")
    none = statistics.median(r["seconds"] for r in results["none (fresh Inductor cache)"])
    for name, runs in results.items():
        compile_s = statistics.median(r["seconds"] for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        counters = runs[-1]["inductor"]
        fx = {k: v for k, v in counters.items() if k.startswith("fxgraph_cache_")}
        print(f"{name:<44} {compile_s:>10.2f} {wall:>10.2f}  {fx}  ({none / compile_s:.1f}x of none)")


if __name__ == "__main__":
    main()
