"""The typed surface: KernelSpec, Producer as a context manager, exceptions imported once, and
states that stay within their Literals."""

from __future__ import annotations

import importlib
import os
import typing
import warnings
from pathlib import Path
from typing import Iterator

import pytest

import jit_cache
import jit_cache._errors
import jit_cache._native
from conftest import KERNEL

HEADER_USER = '#include "tile.cuh"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] *= TILE; }\n'


def test_a_producer_used_with_with_commits_when_the_block_ends(tmp_path: Path) -> None:
    store = jit_cache.Store(tmp_path / "store")
    claim = store.begin("ns", "k", wait=5)
    assert isinstance(claim, jit_cache.Producer)
    with claim as producer:
        assert producer is claim, "__enter__ gives the producer itself"
        producer.write("a.bin", b"payload")
    entry = store.get("ns", "k")
    assert entry is not None, "the block ended normally: the entry was committed"
    assert entry.read("a.bin") == b"payload"
    with pytest.raises(RuntimeError):
        claim.commit()  # committed once, by the block


def test_a_producer_used_with_with_abandons_when_the_block_raises(tmp_path: Path) -> None:
    store = jit_cache.Store(tmp_path / "store")
    claim = store.begin("ns", "k", wait=5)
    assert isinstance(claim, jit_cache.Producer)
    with pytest.raises(ValueError, match="producing failed"):
        with claim:
            claim.write("a.bin", b"half")
            raise ValueError("producing failed")
    assert store.get("ns", "k") is None, "nothing was published"
    again = store.begin("ns", "k", wait=5)
    assert isinstance(again, jit_cache.Producer), "the key was given up: the next caller produces"
    again.abandon()


def test_a_block_that_committed_itself_is_not_committed_twice(tmp_path: Path) -> None:
    store = jit_cache.Store(tmp_path / "store")
    claim = store.begin("ns", "k", wait=5)
    assert isinstance(claim, jit_cache.Producer)
    with claim:
        claim.write("a.bin", b"x")
        entry = claim.commit()
    assert entry.read("a.bin") == b"x" and store.get("ns", "k") is not None


def test_a_damaged_stored_entry_is_a_miss_with_a_warning_naming_it(tmp_path: Path) -> None:
    store = jit_cache.Store(tmp_path / "store")
    claim = store.begin("ns", "k", wait=5)
    assert isinstance(claim, jit_cache.Producer)
    claim.write("a.bin", b"payload")
    with claim.commit() as entry:
        path = Path(entry.dir) / "a.bin"
        directory = entry.dir
    os.chmod(path, 0o644)
    path.write_bytes(b"paylaod")  # same size, other bytes
    with pytest.warns(jit_cache.DamagedEntryWarning) as caught:
        assert store.get("ns", "k") is None, "a damaged entry is a miss"
    assert len(caught) == 1 and directory in str(caught[0].message), [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit_cache.DamagedEntryWarning)
        with pytest.raises(jit_cache.DamagedEntryWarning):
            store.get("ns", "k")
    again = store.begin("ns", "k", wait=5)
    assert isinstance(again, jit_cache.Producer), "the next caller produces it again"
    again.write("a.bin", b"payload")
    again.commit().close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replaced = store.get("ns", "k")
        assert replaced is not None and replaced.read("a.bin") == b"payload", "replaced, no warning"


@pytest.fixture
def reloaded_errors() -> Iterator[None]:
    """`jit_cache._errors` reloaded (new class objects in the module, as a reloader makes),
    then put back as it was."""
    names = ["Error", "CacheError", "BusyError", "PackError", "InvalidSpecError", "CompileError", "DamagedEntryWarning"]
    before = {name: getattr(jit_cache._errors, name) for name in names + ["Diagnostic"]}
    importlib.reload(jit_cache._errors)
    assert jit_cache._errors.CompileError is not before["CompileError"]
    yield
    for name, value in before.items():
        setattr(jit_cache._errors, name, value)


def test_the_exceptions_raised_are_the_classes_jit_cache_exports(
    cache: jit_cache.Cache, reloaded_errors: None
) -> None:
    for name in ["Error", "CacheError", "BusyError", "PackError", "InvalidSpecError", "CompileError", "DamagedEntryWarning"]:
        assert getattr(jit_cache._native, name) is getattr(jit_cache, name), name
    with pytest.raises(jit_cache.InvalidSpecError):
        cache.get_or_build(jit_cache.Source.text("k.cu", KERNEL), flags=["--no-such-option"])
    with pytest.raises(jit_cache.CompileError) as caught:
        cache.get_or_build(jit_cache.Source.text("bad.cu", "not cuda\n"))
    assert all(isinstance(d, jit_cache.Diagnostic) for d in caught.value.diagnostics)


def test_states_stay_within_their_literals(cache: jit_cache.Cache) -> None:
    answer = cache.get_or_build(jit_cache.Source.text("scale.cu", KERNEL))
    assert answer.outcome in typing.get_args(jit_cache.Outcome), answer.outcome
    with pytest.raises(jit_cache.CompileError) as caught:
        cache.get_or_build(jit_cache.Source.text("bad.cu", 'extern "C" __global__ void k() { x = 1; }\n'))
    assert caught.value.cause in typing.get_args(jit_cache.Cause), caught.value.cause
    severities = {d.severity for d in caught.value.diagnostics}
    assert severities and severities <= set(typing.get_args(jit_cache.Severity)), severities


def test_a_kernel_spec_is_one_request_the_cache_calls_take(cache: jit_cache.Cache) -> None:
    source = jit_cache.Source.text("scale.cu", KERNEL)
    spec = jit_cache.KernelSpec(source, arch="sm_90", kind="ptx", name="scaled", defines={"A": 1})
    assert (spec.name, spec.kind) == ("scaled", "ptx")
    built = cache.get_or_build(spec)
    by_keywords = cache.get_or_build(source, arch="sm_90", kind="ptx", name="scaled", defines={"A": 1})
    assert (built.outcome, by_keywords.outcome) == ("built", "hit"), "the same request"
    assert cache.explain(spec)["action"] == "hit"
    assert cache.retry(spec).data == built.data
    many = cache.build_many([spec, {"source": source, "name": "other"}])
    assert [type(r).__name__ for r in many] == ["Answer", "Answer"], many
    with pytest.raises(TypeError, match="KernelSpec"):
        cache.get_or_build(spec, arch="sm_80")
    with pytest.raises(TypeError, match="archs"):
        jit_cache.KernelSpec(source, archs="sm_90")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="archs"):
        cache.build_many([{"source": source, "archs": "sm_90"}])  # type: ignore[list-item]


def test_include_dirs_takes_one_path_object(cache: jit_cache.Cache, tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "tile.cuh").write_text("#define TILE 64\n")
    src = tmp_path / "k.cu"
    src.write_text(HEADER_USER)
    assert cache.get_or_build(src, include_dirs=inc).outcome == "built"
