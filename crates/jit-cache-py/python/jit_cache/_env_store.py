"""The store on the root the environment names (``JIT_CACHE_DIR``, ``JIT_CACHE_TEAM``,
``JIT_CACHE_REMOTE``), one per process, for the integrations (``triton``, ``torch``) alike."""

from __future__ import annotations

import os
import threading
from typing import Optional

from ._errors import DamagedEntryWarning
from ._native import Store, StoredEntry

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


def get_entry(namespace: str, key: str) -> Optional[StoredEntry]:
    """``env_store().get(namespace, key)``, where a damaged entry is a miss even when a filter
    made its ``DamagedEntryWarning`` an exception: the integrations never raise in a compile."""
    try:
        return env_store().get(namespace, key)
    except DamagedEntryWarning:
        return None
