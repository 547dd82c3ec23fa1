"""Durable writes, a JIT kernel cache and the nvcc launcher, from Python.

Four uses, a few lines each::

    # 1. Crash-safe writes: readers see the old file or the whole new one.
    from jit_cache import durable
    durable.put("out/model.json", b"{}")
    with durable.Batch() as b:              # many files, two flushes; nothing if the block raises
        for i in range(100):
            b.put(f"out/part-{i}.bin", bytes(4096))
    with durable.lock("out/.lock", timeout=5):   # flock; TimeoutError after 5 s
        ...

    # 2. The kernel cache: compiled once however many threads and processes ask.
    import jit_cache
    cache = jit_cache.Cache()                # $JIT_CACHE_DIR, else ~/.cache/jit-cache
    answer = cache.get_or_build("kernels/gemm.cu", include_dirs=["kernels/include"], arch="sm_90")
    print(answer.outcome, answer.reasons)    # "rebuilt", ["header `tile.cuh` changed (...)"]
    module = load_cubin(answer.path)         # the path stays valid while `answer` is alive
    gemm = jit_cache.KernelSpec("kernels/gemm.cu", arch="sm_90")   # a request, made once
    cache.get_or_build(gemm)

    # 3. A build directory gated by content (FlashInfer #4489: ninja trusts mtimes).
    from jit_cache import fingerprint
    m = fingerprint.Manifest()
    m.add_tree("source:csrc", "csrc"); m.add_bytes("build.ninja", ninja_text)
    with fingerprint.gate("build/mod", m) as g:   # wiped unless its manifest matches
        print(g.reasons)                          # why it was wiped
        run_ninja("build/mod")                    # the manifest is committed only on success

    # 4. A keyed store for a JIT with its own key and bytes (Triton: ``jit_cache.triton``;
    #    torch.compile's Inductor caches: ``jit_cache.torch``, or JIT_CACHE_TORCH=1).
    store = jit_cache.Store()
    claim = store.begin("triton", key, wait=60)   # the entry, or this process is its one producer
    if isinstance(claim, jit_cache.Producer):
        with claim:                               # committed (fsynced, one rename) at the end;
            claim.write("k.cubin", cubin)         # abandoned if the block raises
        claim = store.get("triton", key)
    print(claim.path("k.cubin"))                  # valid while `claim` is alive

Reports are dicts typed as ``TypedDict``s (``jit_cache.Stats``, ...) and states are
``Literal``s (``jit_cache.Outcome``, ...), for annotations.

The nvcc launcher is the ``jit-cache`` command that ``pip install`` puts on PATH (a native
binary, no Python start per call): ``FLASHINFER_NVCC_LAUNCHER=jit-cache``,
``PYTORCH_NVCC="jit-cache $CUDA_HOME/bin/nvcc"``, ``CMAKE_CUDA_COMPILER_LAUNCHER=jit-cache``.
"""

from __future__ import annotations

from . import durable, fingerprint
from ._errors import (
    BusyError,
    CacheError,
    CompileError,
    DamagedEntryWarning,
    Diagnostic,
    Error,
    InvalidSpecError,
    PackError,
)
from ._native import (
    Answer,
    Cache,
    KernelSpec,
    Producer,
    Source,
    Store,
    StoredEntry,
    __version__,
    list_pack,
)
from ._types import (
    BatchReport,
    Cause,
    Explanation,
    ExportReport,
    GcReport,
    ImportReport,
    KernelOptions,
    KernelRequest,
    Kind,
    Outcome,
    PackEntry,
    Severity,
    Stats,
    VerifyReport,
)

__all__ = [
    "Answer",
    "BatchReport",
    "BusyError",
    "Cache",
    "CacheError",
    "Cause",
    "CompileError",
    "DamagedEntryWarning",
    "Diagnostic",
    "Error",
    "Explanation",
    "ExportReport",
    "GcReport",
    "ImportReport",
    "InvalidSpecError",
    "KernelOptions",
    "KernelRequest",
    "KernelSpec",
    "Kind",
    "Outcome",
    "PackEntry",
    "PackError",
    "Producer",
    "Severity",
    "Stats",
    "VerifyReport",
    "Source",
    "Store",
    "StoredEntry",
    "__version__",
    "durable",
    "fingerprint",
    "launcher_path",
    "list_pack",
]


def launcher_path() -> str:
    """The path of the ``jit-cache`` command installed with this package.

    It is the native binary in the environment's scripts directory (``bin/``); no Python
    starts when a build system runs it.
    """
    import os
    import shutil
    import sysconfig

    candidate = os.path.join(sysconfig.get_path("scripts"), "jit-cache")
    if os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("jit-cache")
    if found is None:
        raise FileNotFoundError("the jit-cache command is not installed beside this package")
    return found
