"""jit_cache.Cache with the real nvcc: builds, hits, rebuild reasons, errors, GIL, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from pathlib import Path
from typing import Callable

import pytest

import jit_cache
from conftest import KERNEL

HEADER_USER = '#include "tile.cuh"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] *= TILE; }\n'


def test_a_kernel_is_built_then_hit_with_its_bytes_and_a_pinned_path(cache: jit_cache.Cache) -> None:
    first = cache.get_or_build(jit_cache.Source.text("scale.cu", KERNEL), arch="sm_90")
    assert first.outcome == "built" and first.reasons == [] and first.warning is None
    assert first.data[:4] == b"\x7fELF", "a cubin is an ELF file"
    with open(first.path, "rb") as f:
        assert f.read() == first.data, "the path holds the answer's bytes"
    again = cache.get_or_build(jit_cache.Source.text("scale.cu", KERNEL), arch=["sm_90"])
    assert again.outcome == "hit" and again.data == first.data
    assert os.fspath(again) == again.path
    closed = cache.get_or_build(jit_cache.Source.text("scale.cu", KERNEL))
    closed.close()
    with pytest.raises(RuntimeError):
        closed.data  # a closed answer's pin and bytes are gone


def test_a_header_edit_is_reported_in_reasons(cache: jit_cache.Cache, tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "tile.cuh").write_text("#define TILE 64\n")
    src = tmp_path / "k.cu"
    src.write_text(HEADER_USER)
    assert cache.get_or_build(src, include_dirs=[inc]).outcome == "built"
    assert cache.get_or_build(str(src), include_dirs=[str(inc)]).outcome == "hit"
    (inc / "tile.cuh").write_text("#define TILE 128\n")
    explained = cache.explain(src, include_dirs=[inc])
    assert explained["action"] == "rebuild", explained
    rebuilt = cache.get_or_build(src, include_dirs=[inc])
    assert rebuilt.outcome == "rebuilt"
    assert any("tile.cuh" in r for r in rebuilt.reasons), rebuilt.reasons


def test_a_compile_error_raises_compile_error_with_diagnostics(cache: jit_cache.Cache) -> None:
    bad = jit_cache.Source.text("bad.cu", 'extern "C" __global__ void k() { undeclared = 1; }\n')
    with pytest.raises(jit_cache.CompileError) as caught:
        cache.get_or_build(bad)
    e = caught.value
    assert e.cause == "source" and e.exit_code not in (None, 0)
    errors = [d for d in e.diagnostics if d.severity == "error"]
    assert errors and errors[0].line == 1 and "undeclared" in errors[0].message, e.diagnostics
    assert errors[0].file and errors[0].file.endswith("bad.cu"), errors[0]
    assert "undeclared" in e.stderr and e.command, "the compiler's stderr and command are kept"
    with pytest.raises(jit_cache.CompileError) as again:
        cache.get_or_build(bad)
    assert again.value.from_record, "the recorded failure is replayed without compiling"
    assert isinstance(e, jit_cache.Error) and not isinstance(e, jit_cache.CacheError)


def test_invalid_requests_and_roots_raise_typed_errors(cache: jit_cache.Cache, tmp_path: Path) -> None:
    with pytest.raises(jit_cache.InvalidSpecError):
        cache.get_or_build(jit_cache.Source.text("k.cu", KERNEL), flags=["--no-such-option"])
    with pytest.raises(ValueError):
        cache.get_or_build(jit_cache.Source.text("k.cu", KERNEL), kind="elf")  # type: ignore[arg-type]
    with pytest.raises(jit_cache.CacheError) as caught:
        cache.get_or_build(tmp_path / "missing.cu")
    assert caught.value.path and caught.value.path.endswith("missing.cu"), caught.value.path
    (tmp_path / "link-target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "link-target")
    with pytest.raises(jit_cache.CacheError) as unsafe:
        jit_cache.Cache(tmp_path / "link")
    assert unsafe.value.path, "the refused root is named"


def test_build_many_stats_gc_and_verify(cache: jit_cache.Cache) -> None:
    results = cache.build_many(
        [
            {"source": jit_cache.Source.text("a.cu", KERNEL), "defines": ["A=1"]},
            {"source": jit_cache.Source.text("b.cu", KERNEL), "defines": {"B": 2}},
            {"source": jit_cache.Source.text("bad.cu", "not cuda\n")},
        ],
        parallelism=2,
    )
    assert [type(r).__name__ for r in results] == ["Answer", "Answer", "CompileError"], results
    stats = cache.stats()
    assert stats["entries"] == 2 and stats["built"] >= 2 and stats["failures"] == 1, stats
    report = cache.verify()
    assert report["checked"] == 2 and report["corrupt"] == [], report
    del results
    gone = cache.gc(max_size=0)
    assert gone["evicted"] == 2, gone
    assert cache.stats()["entries"] == 0


def test_other_python_threads_run_while_a_kernel_compiles(cache: jit_cache.Cache) -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        answer = cache.get_or_build(jit_cache.Source.text("gil.cu", KERNEL))
    finally:
        stop.set()
        t.join()
    assert answer.outcome == "built"
    assert ticks > 100_000, f"the counting thread ran during the compile ({ticks} ticks)"


def test_ctrl_c_in_the_main_thread_interrupts_a_compile_and_publishes_nothing_wrong(
    tmp_path: Path,
    slow_nvcc: str,
    sigint_raises: None
) -> None:
    cache = jit_cache.Cache(tmp_path / "cache", nvcc=slow_nvcc)
    src = jit_cache.Source.text("slow.cu", KERNEL)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_build(src)
    took = time.monotonic() - started
    assert took < 1.5, f"KeyboardInterrupt {took - 0.5:.2f} s after the signal"
    # The abandoned compile finishes on its helper and publishes by the library's protocol:
    # the next request gets a whole, verified artifact (waiting for that flight, or a hit).
    answer = cache.get_or_build(src)
    assert answer.outcome in ("built", "hit") and answer.data[:4] == b"\x7fELF"
    assert cache.verify()["corrupt"] == []


def test_ctrl_c_interrupts_a_compile_in_a_child_process_within_a_second(
    tmp_path: Path,
    slow_nvcc: str,
    sigint_default: Callable[[], object]
) -> None:
    root = tmp_path / "cache"
    script = textwrap.dedent(
        f"""
        import jit_cache
        cache = jit_cache.Cache({str(root)!r}, nvcc={slow_nvcc!r})
        print("waiting", flush=True)
        cache.get_or_build(jit_cache.Source.text("slow.cu", {KERNEL!r}))
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(1.0)  # inside the 3 s compile
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)
    took = time.monotonic() - sent
    assert "KeyboardInterrupt" in err and took < 1.0, f"{took:.2f} s: {err}"
    # The killed process's compile died with it (its process group): nothing half-made shows.
    after = jit_cache.Cache(root, nvcc=slow_nvcc)
    assert after.verify()["corrupt"] == [] and after.stats()["entries"] == 0
