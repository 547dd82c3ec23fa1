"""``JIT_CACHE_TORCH=1``: installs ``jit_cache.torch`` once Inductor's remote caches are imported.

The wheel's ``jit_cache_torch.pth`` imports this module at interpreter start only when
``JIT_CACHE_TORCH`` is set (and not ``0``). It adds one finder to ``sys.meta_path`` that answers
for ``torch._inductor.remote_cache`` alone: after that module runs, ``jit_cache.torch.install()``
runs. A process that never imports Inductor pays for one failed name comparison per import.
An error while installing is a warning: the user's import and compile go on without the store.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Optional, Sequence

TARGET = "torch._inductor.remote_cache"


def _install() -> None:
    try:
        from . import torch as jit_cache_torch

        jit_cache_torch.install()
    except Exception as e:  # never the user's import's failure
        warnings.warn(f"jit_cache.torch: not installed ({e!r})", RuntimeWarning, stacklevel=2)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]],
        target: Optional[ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != TARGET:
            return None
        # Once: the real finders find the module; its loader runs it, then the install.
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def activate() -> None:
    """Installs now if Inductor's remote caches are already imported, else at their import."""
    if TARGET in sys.modules:
        _install()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


activate()
