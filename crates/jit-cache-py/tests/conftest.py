"""Fixtures of the jit_cache tests: the real nvcc (required: a missing one fails, never skips)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

import jit_cache


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = os.environ.get("NVCC")
    assert path and os.access(path, os.X_OK), (
        "NVCC must name the real nvcc (cargo xtask setup installs it under target/nvcc-venv); "
        f"got {path!r}"
    )
    return path


@pytest.fixture
def cache(tmp_path: Path, nvcc: str) -> jit_cache.Cache:
    return jit_cache.Cache(tmp_path / "cache", nvcc=nvcc)


KERNEL = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n'


@pytest.fixture
def slow_nvcc(tmp_path: Path, nvcc: str) -> str:
    """An nvcc that sleeps 3 s before each compile of a `.cu` file, then runs the real one."""
    wrapper = tmp_path / "slow-bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in *.cu) sleep 3;; esac; done\n'
        f'exec "{nvcc}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def require_tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} must be installed (cargo xtask setup installs it)"
    return found
