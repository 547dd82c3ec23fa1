"""Fixtures of the jit_cache tests: the real nvcc (required: a missing one fails, never skips)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
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


@pytest.fixture
def s3_env(tmp_path: Path):
    """A SeaweedFS S3 server of the test's own on loopback (``jit-cache-s3``'s test server,
    which ``cargo xtask test`` builds and names in ``JIT_CACHE_S3_TEST_SERVER``): yields the
    environment a client needs (``JIT_CACHE_REMOTE=s3://...``, ``AWS_*``); stopped after, by
    its pid."""
    server = os.environ.get("JIT_CACHE_S3_TEST_SERVER")
    assert server and os.access(server, os.X_OK), (
        "JIT_CACHE_S3_TEST_SERVER must name the S3 test server (cargo xtask test builds it: "
        "cargo build -p jit-cache-s3 --features test-server --example s3_test_server)"
    )
    proc = subprocess.Popen(
        [server, str(tmp_path / "s3")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    env = {}
    weed = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line == "ready":
                break
            name, _, value = line.partition("=")
            env[name] = value
        assert "JIT_CACHE_REMOTE" in env, f"the S3 test server did not start (exit {proc.poll()})"
        weed = int(env.pop("WEED_PID"))
        yield env
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)  # it stops the server (by its pid) when its stdin closes
        except subprocess.TimeoutExpired:
            # Stuck: the server's process group goes by its pid (still ours to name: the
            # example that started it is alive), then the example.
            if weed is not None:
                os.killpg(weed, signal.SIGKILL)
            proc.kill()
            proc.wait()


def require_tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} must be installed (cargo xtask setup installs it)"
    return found


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt in this process for the test, whatever disposition the
    suite was started with: a background job of a non-interactive shell starts with SIGINT
    ignored, and Python then installs no handler of its own."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture
def sigint_default():
    """A `preexec_fn` that gives a child process SIGINT's default disposition (its Python then
    installs the KeyboardInterrupt handler), for the same reason as `sigint_raises`."""
    return lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
