"""The PEP 517 backend of the ``jit-cache`` Python package: maturin, plus the CLI binary.

maturin builds the PyO3 extension (``jit_cache._native``) and copies ``wheel-data/`` into the
wheel's ``.data`` directory. Before it builds a wheel, this module builds the ``jit-cache``
binary of crate ``jit-cache-cli`` with the same cargo and profile and puts it at
``wheel-data/scripts/jit-cache``, so that ``pip install`` puts the native command (the CLI and
the nvcc launcher) on PATH: no Python starts when a build system runs it.

Everything else is maturin's own hooks, unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import maturin
from maturin import *  # noqa: F401,F403  (the PEP 517 hooks this module does not override)

HERE = Path(__file__).resolve().parent.parent
SCRIPTS = HERE / "wheel-data" / "scripts"


def _cargo() -> str:
    return os.environ.get("CARGO", "cargo")


def _target_dir() -> Path:
    out = subprocess.run(
        [_cargo(), "metadata", "--format-version", "1", "--no-deps"],
        cwd=HERE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(json.loads(out)["target_directory"])


def _build_cli() -> None:
    """Builds ``jit-cache`` in release mode and stages it as the wheel's script."""
    subprocess.run(
        [_cargo(), "build", "--release", "--locked", "-p", "jit-cache-cli", "--bin", "jit-cache"],
        cwd=HERE,
        check=True,
    )
    built = _target_dir() / "release" / "jit-cache"
    SCRIPTS.mkdir(parents=True, exist_ok=True)
    staged = SCRIPTS / "jit-cache"
    tmp = SCRIPTS / ".jit-cache.tmp"
    shutil.copy2(built, tmp)
    os.replace(tmp, staged)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _build_cli()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _build_cli()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # maturin checks that the data directory exists even when it only writes metadata.
    SCRIPTS.mkdir(parents=True, exist_ok=True)
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    SCRIPTS.mkdir(parents=True, exist_ok=True)
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)
