"""Fork safety: a child forked mid-build gets a working handle and never publishes, removes or
releases what its parent's threads hold."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Tuple

import jit_cache
from conftest import KERNEL
from jit_cache import durable

# The parent's handle, as the forked child inherits it (a copy of the parent's memory).
INHERITED: List[jit_cache.Cache] = []


def _child(
    root: str, nvcc: str, batch: durable.Batch, lock: durable.Lock, out: Any
) -> None:
    try:
        cache = jit_cache.Cache(root, nvcc=nvcc)  # a fresh handle of the child's own
        inherited = INHERITED[0]
        hit = inherited.get_or_build(jit_cache.Source.text("warm.cu", KERNEL))
        slow = inherited.get_or_build(jit_cache.Source.text("slow.cu", KERNEL))
        fresh = cache.get_or_build(jit_cache.Source.text("slow.cu", KERNEL))
        refused = []
        calls: List[Tuple[str, Callable[[], object]]] = [
            ("batch", lambda: batch.put(root + "/x", b"x")),
            ("lock", lock.release),
        ]
        for what, call in calls:
            try:
                call()
            except RuntimeError:
                refused.append(what)
        out.put((hit.outcome, slow.outcome, slow.data == fresh.data, slow.data[:4], refused))
    except BaseException as e:  # reported to the parent, which asserts on it
        out.put(repr(e))


def test_a_child_forked_mid_build_gets_a_working_handle_and_inherits_nothing(
    tmp_path: Path,
    slow_nvcc: str
) -> None:
    root = str(tmp_path / "cache")
    cache = jit_cache.Cache(root, nvcc=slow_nvcc)
    # The warm kernel is built before the fork (slowly: the wrapper sleeps on every compile).
    assert cache.get_or_build(jit_cache.Source.text("warm.cu", KERNEL)).outcome == "built"
    batch = durable.Batch()
    batch.put(tmp_path / "parent-file", b"parent")
    lock = durable.lock(tmp_path / "parent.lock")
    # A thread of the parent is compiling (holding the key's lock and a staging directory)
    # when the child is forked.
    building = threading.Thread(
        target=lambda: cache.get_or_build(jit_cache.Source.text("slow.cu", KERNEL))
    )
    building.start()
    time.sleep(1.0)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    INHERITED[:] = [cache]
    child = ctx.Process(target=_child, args=(root, slow_nvcc, batch, lock, out))
    child.start()
    result = out.get(timeout=120)
    child.join(60)
    building.join(60)
    assert child.exitcode == 0, child.exitcode
    hit, slow, same, magic, refused = result  # a string here is the child's exception
    assert hit == "hit", "the inherited handle works in the child (reopened there)"
    assert slow == "hit", "the child waited for the parent's build and used it, never compiled it"
    assert same and magic == b"\x7fELF"
    assert refused == ["batch", "lock"], "the child may not use the parent's batch or lock"
    # The child dropped neither: the parent's temp is still there to commit, its lock held.
    batch.commit()
    assert (tmp_path / "parent-file").read_bytes() == b"parent"
    assert lock.held
    try:
        durable.lock(tmp_path / "parent.lock", timeout=0.1)
        raise AssertionError("the parent's lock was released by the child")
    except TimeoutError:
        pass
    lock.release()
    stats = cache.stats()
    assert stats["entries"] == 2 and cache.verify()["corrupt"] == [], stats
