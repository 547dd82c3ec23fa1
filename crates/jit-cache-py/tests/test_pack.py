"""Kernel packs from Python: export, list and import with the real nvcc, and a damaged pack."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

import jit_cache
from conftest import KERNEL

OTHER = 'extern "C" __global__ void shift(float* x, float a) { x[threadIdx.x] += a; }\n'


def _build_two(cache: jit_cache.Cache) -> List[jit_cache.Answer]:
    return [
        cache.get_or_build(jit_cache.Source.text("scale.cu", KERNEL), arch="sm_90"),
        cache.get_or_build(jit_cache.Source.text("shift.cu", OTHER), arch="sm_90", kind="ptx"),
    ]


def test_a_pack_exported_listed_and_imported_gives_hits_and_the_same_bytes(tmp_path: Path, nvcc: str) -> None:
    source = jit_cache.Cache(tmp_path / "source", nvcc=nvcc)
    built = _build_two(source)
    store = jit_cache.Store(tmp_path / "source")
    producer = store.begin("triton", "k0", wait=5)
    assert isinstance(producer, jit_cache.Producer)
    producer.write("k0.cubin", b"\x7fELF stored")
    producer.commit()

    pack = tmp_path / "all.pack"
    report = source.export_pack(pack)
    assert report["entries"] == 3 and report["skipped_damaged"] == [], report
    again = tmp_path / "again.pack"
    source.export_pack(again)
    assert pack.read_bytes() == again.read_bytes(), "the same entries give the same bytes"

    listed = jit_cache.list_pack(pack)
    assert sorted(e["kind"] for e in listed) == ["kernel", "kernel", "stored"], listed
    assert {e["name"] for e in listed} >= {"scale", "triton/k0"}, listed

    only_ptx = tmp_path / "ptx.pack"
    assert source.export_pack(only_ptx, kind="ptx")["entries"] == 1
    assert source.export_pack(tmp_path / "n.pack", name="sc*", arch=["sm_90"])["entries"] == 1

    target = jit_cache.Cache(tmp_path / "target", nvcc=nvcc)
    imported = target.import_pack(pack)
    assert (imported["imported"], imported["present"], imported["skipped"]) == (3, 0, []), imported
    assert target.import_pack(pack)["present"] == 3, "a second import replaces nothing"
    hits = _build_two(target)
    assert [h.outcome for h in hits] == ["hit", "hit"], [h.outcome for h in hits]
    assert [h.data for h in hits] == [b.data for b in built]
    entry = jit_cache.Store(tmp_path / "target").begin("triton", "k0", wait=5)
    assert isinstance(entry, jit_cache.StoredEntry)
    stored = entry.path("k0.cubin")
    assert stored is not None and open(stored, "rb").read() == b"\x7fELF stored"


def test_a_damaged_pack_raises_pack_error_with_the_offset_and_publishes_nothing(tmp_path: Path, nvcc: str) -> None:
    source = jit_cache.Cache(tmp_path / "source", nvcc=nvcc)
    _build_two(source)
    pack = tmp_path / "all.pack"
    source.export_pack(pack)
    data = bytearray(pack.read_bytes())
    # A byte of the first entry's data (the header is the first 4 KiB block).
    data[4096 + 10] ^= 0xFF
    pack.write_bytes(bytes(data))
    target = jit_cache.Cache(tmp_path / "target", nvcc=nvcc)
    with pytest.raises(jit_cache.PackError) as caught:
        target.import_pack(pack)
    e = caught.value
    assert isinstance(e, jit_cache.CacheError)
    assert e.path == str(pack) and e.offset >= 4096 and e.entry, (e, e.offset, e.entry)
    assert target.stats()["entries"] == 0, "nothing from the damaged part was published"
    with pytest.raises(ValueError):
        source.export_pack(tmp_path / "x.pack", kind="cubn")  # type: ignore[arg-type]
    # A misspelt arch would take nothing: refused by the rule specs follow, no pack written.
    with pytest.raises(jit_cache.InvalidSpecError, match="sm90"):
        source.export_pack(tmp_path / "arch.pack", arch="sm90")
    assert not (tmp_path / "arch.pack").exists()
