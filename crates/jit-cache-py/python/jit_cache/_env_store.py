"""The store on the root the environment names (``JIT_CACHE_DIR``, ``JIT_CACHE_TEAM``,
``JIT_CACHE_REMOTE``), one per process, for the integrations (``triton``, ``torch``) alike."""

from __future__ import annotations

import os
import threading
from typing import Optional

from ._native import Store

_lock = threading.Lock()
_store: Optional[Store] = None


def _after_fork_in_child() -> None:
    # The child opens its own: the parent's handle is the parent's, and another of its threads
    # may have held the lock at the fork.
    global _lock, _store
    _lock = threading.Lock()
    _store = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def env_store() -> Store:
    """This process's store on the root the environment names."""
    global _store
    if _store is not None:
        return _store
    with _lock:
        if _store is None:
            _store = Store(
                os.environ.get("JIT_CACHE_DIR") or None,
                team=os.environ.get("JIT_CACHE_TEAM", "") not in ("", "0"),
                remote=os.environ.get("JIT_CACHE_REMOTE") or None,
            )
        return _store
