"""jit_cache.fingerprint: content identity, manifests that say why, and the build-directory
gate on FlashInfer #4489's mechanism (ninja reusing a stale object after an edit whose mtime
was set back)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from typing import List
from pathlib import Path

import pytest

from conftest import require_tool
from jit_cache import fingerprint


def test_digests_follow_content_not_mtimes_or_paths(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    (a / "x.cuh").write_text("#define X 1\n")
    before = fingerprint.hash_tree(a)
    os.utime(a / "x.cuh", (1, 1))
    assert fingerprint.hash_tree(a) == before, "touching changes nothing"
    b = tmp_path / "b"
    b.mkdir()
    (b / "x.cuh").write_text("#define X 1\n")
    assert fingerprint.hash_tree(b) == before, "a copy elsewhere hashes the same"
    (a / "x.cuh").write_text("#define X 2\n")
    os.utime(a / "x.cuh", (1, 1))
    assert fingerprint.hash_tree(a) != before, "new bytes under an old mtime differ"
    assert len(fingerprint.hash_file(a / "x.cuh")) == 64


def test_a_manifest_diff_says_why_and_round_trips(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "tile.cuh").write_text("#define TILE 64\n")
    site = sysconfig.get_paths()["purelib"]

    def snapshot(flags: List[str]) -> fingerprint.Manifest:
        m = fingerprint.Manifest()
        m.add_tree("header:inc", tmp_path / "inc")
        m.add_list("flags", flags)
        m.add_value("version", "1")
        m.add_env("JIT_CACHE_TEST_UNSET_VAR")
        m.add_wheel(site, "pytest")
        return m

    old = snapshot(["-O3"])
    assert fingerprint.Manifest.from_json(old.to_json()) == old
    assert json.loads(old.to_json()), "plain JSON"
    (tmp_path / "inc" / "tile.cuh").write_text("#define TILE 128\n")
    new = snapshot(["-O3", "-lineinfo"])
    why = new.diff(old)
    assert any("tile.cuh" in r and "changed" in r for r in why), why
    assert any("-lineinfo" in r for r in why), why
    assert new.digest != old.digest and "wheel:pytest" in new.names()
    identity = fingerprint.wheel_identity(site, "pytest")
    assert identity["name"].lower() == "pytest" and len(identity["digest"]) == 64


def test_the_gate_wipes_a_directory_without_a_matching_manifest_and_commits_on_success(tmp_path: Path) -> None:
    build = tmp_path / "build"
    m = fingerprint.Manifest()
    m.add_value("source", "v1")
    with fingerprint.gate(build, m) as g:
        assert not g.fresh and "no manifest" in g.reasons[0], g.reasons
        (build / "obj.o").write_bytes(b"v1")
    assert (build / fingerprint.MANIFEST_FILE).exists(), "committed after the block"
    with fingerprint.gate(build, m) as g:
        assert g.fresh and g.reasons == [] and (build / "obj.o").exists()
    changed = fingerprint.Manifest()
    changed.add_value("source", "v2")
    with pytest.raises(RuntimeError):
        with fingerprint.gate(build, changed) as g:
            assert not g.fresh and any("source" in r for r in g.reasons), g.reasons
            assert not (build / "obj.o").exists(), "the stale object was wiped"
            raise RuntimeError("the build failed")
    assert not (build / fingerprint.MANIFEST_FILE).exists(), "a failed build is never blessed"
    (build / fingerprint.MANIFEST_FILE).write_text("{not json")
    with fingerprint.gate(build, changed) as g:
        assert not g.fresh and "corrupt" in g.reasons[0], g.reasons


NINJA = """\
rule cc
  command = cc -c $in -o $out
rule link
  command = cc $in -o $out
build obj.o: cc {src}
build prog: link obj.o
"""


def _inputs(src: Path, ninja: str) -> fingerprint.Manifest:
    # The snapshot FlashInfer's PR #4490 takes: the sources' bytes and the rendered ninja file.
    m = fingerprint.Manifest()
    m.add_file(f"source:{src.name}", src)
    m.add_bytes("build.ninja", ninja.encode())
    return m


def _ninja_build(build: Path, src: Path, ninja: str) -> str:
    (build / "build.ninja").write_text(ninja)
    subprocess.run([require_tool("ninja"), "-C", str(build)], check=True, capture_output=True)
    return subprocess.run([str(build / "prog")], check=True, capture_output=True, text=True).stdout


def test_flashinfer_4489_an_edit_with_an_old_mtime_is_rebuilt_behind_the_gate(tmp_path: Path) -> None:
    # FlashInfer's JitSpec.build() writes build.ninja and runs ninja, which decides by mtime.
    # This is its mechanism with a real ninja (and cc, to keep it fast): the bug, then the fix.
    src = tmp_path / "kernel.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("v1"); return 0; }\n')
    ninja = NINJA.format(src=src)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert _ninja_build(plain, src, ninja) == "v1\n"
    old = os.stat(src).st_mtime_ns
    src.write_text('#include <stdio.h>\nint main(void) { puts("v2"); return 0; }\n')
    os.utime(src, ns=(old - 10**9, old - 10**9))  # a reinstalled wheel's older mtime
    assert _ninja_build(plain, src, ninja) == "v1\n", "the bug: ninja reuses the stale object"

    src.write_text('#include <stdio.h>\nint main(void) { puts("v1"); return 0; }\n')
    gated = tmp_path / "gated"
    with fingerprint.gate(gated, _inputs(src, ninja)):
        assert _ninja_build(gated, src, ninja) == "v1\n"
    old = os.stat(src).st_mtime_ns
    src.write_text('#include <stdio.h>\nint main(void) { puts("v2"); return 0; }\n')
    os.utime(src, ns=(old - 10**9, old - 10**9))
    with fingerprint.gate(gated, _inputs(src, ninja)) as g:
        assert not g.fresh and any("kernel.c" in r for r in g.reasons), g.reasons
        assert _ninja_build(gated, src, ninja) == "v2\n", "behind the gate the new bytes are built"
    with fingerprint.gate(gated, _inputs(src, ninja)) as g:
        assert g.fresh, "unchanged inputs keep the directory"
