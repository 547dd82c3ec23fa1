"""One process of the torch tests and benchmark: ``torch.compile`` of one small function on the
CPU (Inductor's C++ backend, g++), called once; prints a JSON report on its last line.

    python torch_worker.py [--install] [--torch-version V] [--start-file F] [--kill-at POINT]
                           [--function N]

The store is used as a user would: ``JIT_CACHE_TORCH=1`` in the environment (the wheel's
``.pth`` hook), or ``--install`` (``jit_cache.torch.install()``). ``--torch-version`` makes this
torch report another version string (an upgrade, as the store's keys see it); ``--start-file``
prints ``ready`` and waits until that file exists before compiling (so that processes start
together); ``--kill-at`` kills this process with SIGKILL at one point of the first store put
(``write-before``, ``write-after``, ``commit-after``); ``--function`` picks one of a few
functions (another graph, another key).

The report: the compile's seconds, Inductor's and AOTAutograd's counters, and the output's
values.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict

parser = argparse.ArgumentParser()
parser.add_argument("--install", action="store_true")
parser.add_argument("--torch-version")
parser.add_argument("--start-file")
parser.add_argument("--kill-at", choices=["write-before", "write-after", "commit-after"])
parser.add_argument("--function", type=int, default=0)
args = parser.parse_args()

warnings.filterwarnings("ignore", message=".*triton not found.*")

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

if args.torch_version:
    torch.__version__ = args.torch_version

import jit_cache._env_store as env_store  # noqa: E402
import jit_cache.torch as jct  # noqa: E402
from jit_cache import StoredEntry  # noqa: E402

if args.install:
    jct.install()


class _KillingProducer:
    """A producer that kills this process at one point of its put (the store's own underneath)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, name: str, data: bytes) -> str:
        if args.kill_at == "write-before":
            os.kill(os.getpid(), signal.SIGKILL)
        path = self.real.write(name, data)
        if args.kill_at == "write-after":
            os.kill(os.getpid(), signal.SIGKILL)
        return str(path)

    def commit(self) -> Any:
        entry = self.real.commit()
        os.kill(os.getpid(), signal.SIGKILL)
        return entry

    def abandon(self) -> None:
        self.real.abandon()


class _KillingStore:
    def __init__(self, real: Any) -> None:
        self.real = real

    def get(self, namespace: str, key: str) -> Any:
        return self.real.get(namespace, key)

    def begin(self, namespace: str, key: str, *, wait: float) -> Any:
        claim = self.real.begin(namespace, key, wait=wait)
        return claim if isinstance(claim, StoredEntry) else _KillingProducer(claim)


if args.kill_at:
    # The process's one store (`jit_cache._env_store`), which `jit_cache.torch` asks.
    env_store._store = _KillingStore(jct.store())  # type: ignore[assignment]

FUNCTIONS: Dict[int, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    0: lambda x, y: torch.sin(x) * y + 1,
    1: lambda x, y: torch.cos(x) - y * 2,
}

if args.start_file:
    print("ready", flush=True)
    while not Path(args.start_file).exists():
        time.sleep(0.01)

compiled = torch.compile(FUNCTIONS[args.function])
x = torch.arange(8, dtype=torch.float32)
started = time.perf_counter()
out = compiled(x, x)
seconds = time.perf_counter() - started
print(
    json.dumps(
        {
            "seconds": seconds,
            "inductor": dict(counters["inductor"]),
            "aot_autograd": dict(counters["aot_autograd"]),
            "out": out.tolist(),
            "installed": type(torch._inductor.remote_cache.RemoteFxGraphCache.backend_override_cls).__name__,
        }
    ),
    flush=True,
)
sys.exit(0)
