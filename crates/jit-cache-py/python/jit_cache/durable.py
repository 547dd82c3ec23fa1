"""Crash-safe file operations (the ``durable-fs`` crate).

- ``put(path, data, mode=None)``: a temp beside ``path``, write, fsync, rename, fsync the
  directory. Readers see the old file or the whole new one; after it returns the new one
  survives a power cut (ext4, xfs, btrfs).
- ``Batch()``: many files, each old-or-new on its own, two flushes for the whole batch. As a
  context manager it commits when the block ends and publishes nothing if the block raises.
- ``fsync(path)``, ``fsync_dir(path)``, ``atomic_rename(src, dst)``.
- ``lock(path, timeout=None, *, shared=False)``: an ``flock`` (it vanishes with its holder; the
  lock file is never deleted). A timeout raises ``TimeoutError``; Ctrl-C interrupts the wait.

Paths are ``str`` or ``os.PathLike``; data is bytes-like. Errors are ``OSError`` subclasses
chosen by errno (``FileNotFoundError``, ``PermissionError``, ``TimeoutError``, ...) carrying
``errno``, ``filename`` (``filename2`` for a rename's destination) and ``operation`` (such as
``"fsync directory"``). The GIL is released around every write, fsync and wait.
"""

from __future__ import annotations

from ._native import Batch, Lock, atomic_rename, fsync, fsync_dir, lock, put

__all__ = ["Batch", "Lock", "atomic_rename", "fsync", "fsync_dir", "lock", "put"]
