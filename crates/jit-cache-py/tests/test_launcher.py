"""The `jit-cache` command pip installs: the native binary, and the adoption forms the README
shows (a launcher prefix as FlashInfer's and PyTorch's ninja files spell it, CMake's
CMAKE_CUDA_COMPILER_LAUNCHER, DeepGEMM's compiler path as a symlink named nvcc)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict

import jit_cache
from conftest import require_tool

KERNEL = '__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'


def _env(tmp_path: Path) -> Dict[str, str]:
    env = dict(os.environ)
    env["JIT_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def _hits(env: Dict[str, str]) -> int:
    out = subprocess.run(
        [jit_cache.launcher_path(), "--json", "stats"], env=env, check=True, capture_output=True, text=True
    ).stdout
    return int(json.loads(out)["stats"]["hits"])


def test_the_installed_command_is_the_native_binary() -> None:
    path = jit_cache.launcher_path()
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF", f"{path} is the native binary, not a Python script"


def test_flashinfer_and_pytorch_ninja_lines_hit_through_the_installed_launcher(tmp_path: Path, nvcc: str) -> None:
    # FlashInfer: `$nvcc_launcher $nvcc --generate-dependencies-with-compile -MF $out.d ...`
    # with FLASHINFER_NVCC_LAUNCHER=jit-cache; PyTorch: `nvcc = jit-cache /abs/nvcc` from
    # PYTORCH_NVCC="jit-cache $CUDA_HOME/bin/nvcc". Both run the launcher as a prefix.
    (tmp_path / "k.cu").write_text(KERNEL)
    launcher = jit_cache.launcher_path()
    ninja = (
        f"nvcc_launcher = {launcher}\nnvcc = {nvcc}\n"
        "rule cuda\n  command = $nvcc_launcher $nvcc --generate-dependencies-with-compile "
        "-MF $out.d -arch=sm_90 -c $in -o $out\n  deps = gcc\n  depfile = $out.d\n"
        "build k.o: cuda k.cu\n"
    )
    (tmp_path / "build.ninja").write_text(ninja)
    env = _env(tmp_path)

    def run(*a: str) -> None:
        subprocess.run(a, cwd=tmp_path, env=env, check=True, capture_output=True)

    run(require_tool("ninja"))
    first = (tmp_path / "k.o").read_bytes()
    run(require_tool("ninja"), "-t", "clean")
    run(require_tool("ninja"))
    assert (tmp_path / "k.o").read_bytes() == first and _hits(env) == 1, "the rebuild was a hit"


def test_a_symlink_named_nvcc_serves_deepgemm_style_compiles(tmp_path: Path, nvcc: str) -> None:
    # DeepGEMM: DG_JIT_NVCC_COMPILER=<dir>/nvcc, a symlink to the launcher; the real nvcc comes
    # from NVCC (or CUDA_HOME).
    link = tmp_path / "bin" / "nvcc"
    link.parent.mkdir()
    link.symlink_to(jit_cache.launcher_path())
    (tmp_path / "k.cu").write_text(KERNEL)
    env = _env(tmp_path)
    env["NVCC"] = nvcc
    for _ in range(2):
        subprocess.run(
            [str(link), "-arch=sm_90", "-cubin", "-o", "k.cubin", "k.cu"],
            cwd=tmp_path, env=env, check=True, capture_output=True,
        )
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF" and _hits(env) == 1


def test_cmake_cuda_compiler_launcher_hits_after_a_clean(tmp_path: Path, nvcc: str) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES CUDA)\n"
        "set(CMAKE_CUDA_ARCHITECTURES 90)\nadd_library(k OBJECT k.cu)\n"
    )
    env = _env(tmp_path)
    build = tmp_path / "build"
    subprocess.run(
        [require_tool("cmake"), "-S", str(tmp_path), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_COMPILER_LAUNCHER={jit_cache.launcher_path()}"],
        env=env, check=True, capture_output=True,
    )
    for _ in range(2):
        subprocess.run([require_tool("cmake"), "--build", str(build), "--target", "clean"], env=env, check=True, capture_output=True)
        subprocess.run([require_tool("cmake"), "--build", str(build)], env=env, check=True, capture_output=True)
    assert _hits(env) == 1, "the second build after clean was a hit through the launcher"
