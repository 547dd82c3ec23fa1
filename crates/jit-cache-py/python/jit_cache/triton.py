"""Triton's kernels in the keyed store: durable, whole groups, one compile per kernel.

Select it with no code change::

    TRITON_CACHE_MANAGER=jit_cache.triton:CacheManager python train.py

or from code with ``jit_cache.triton.install()``, which also answers ``triton_key()`` (Triton's
hash of its own 500 MB library and sources, about 0.75 s in every process) from a per-host
identity cache.

Where entries live: the root of ``JIT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/jit-cache``, else
``~/.cache/jit-cache``), namespace ``triton``, beside the nvcc kernels: ``jit-cache stats``,
``gc``, ``verify`` and ``ls`` cover them. ``JIT_CACHE_TEAM=1`` opens the root group-shared (mode
2770); ``JIT_CACHE_REMOTE=redis://...`` or ``s3://bucket/prefix`` (with ``AWS_ENDPOINT_URL``,
``AWS_REGION`` and the credentials) shares entries with other hosts (each file checked against
its size and blake3 before it is used); ``JIT_CACHE_TRITON_WAIT`` is how long a compile waits for
another process compiling the same kernel (seconds, default 120).

What holds, and what Triton's own ``FileCacheManager`` lacks:

- A kernel's files (``.source``, ``.ttir``, ``.ttgir``, ``.llir``, ``.ptx``, ``.cubin``, ``.json``)
  are one entry, published by one durable rename when Triton calls ``put_group`` (every file
  fsynced, then the directory): a reader finds the whole group or none, after a crash, a kill -9
  or a power cut.
- One compile per kernel: the first ``get_group`` miss makes this process the key's producer;
  every other thread, process or host asking for the key waits for it (bounded) and gets its
  group. A producer that dies or never calls ``put_group`` releases the key at once; a waiter
  whose wait runs out compiles privately (uncached, with one warning).
- Paths answered by ``get_group`` stay valid for the process: the entry is pinned (the 256 most
  recent groups of a process; older ones until an eviction takes them), and eviction by
  ``jit-cache gc`` skips pinned entries.
- On NFS or Lustre the root follows the shared protocol (no ``os.removedirs``, no ESTALE or
  ENOENT surfacing to Triton); eviction is ``jit-cache gc``'s.

``put_group`` rewrites the group's paths (the dict Triton passes, which ``compile`` then hands to
``CompiledKernel``) to the published entry's: the staging paths ``put`` returned are gone once the
entry is published. Managers made with ``override=True`` or ``dump=True`` (``TRITON_KERNEL_OVERRIDE``,
``TRITON_KERNEL_DUMP``) are Triton's ``FileCacheManager``: those are a user's directories, not a
cache.

For users who keep Triton's ``RemoteCacheManager``, ``RemoteBackend`` is a
``TRITON_REMOTE_CACHE_BACKEND`` whose files go through the keyed store and its fleet tier::

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager \\
    TRITON_REMOTE_CACHE_BACKEND=jit_cache.triton:RemoteBackend \\
    JIT_CACHE_REMOTE=redis://cache.lan:6379/0 python train.py
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from triton import knobs as _knobs
from triton.runtime import cache as _triton_cache

from . import durable
from ._env_store import env_store, get_entry
from ._errors import BusyError, Error
from ._native import Producer, Store, StoredEntry

__all__ = ["CacheManager", "RemoteBackend", "install", "store"]

NAMESPACE = "triton"
"""The store namespace of Triton's entries."""

WAIT_ENV = "JIT_CACHE_TRITON_WAIT"
"""Seconds a compile waits for another process compiling the same kernel (default 120)."""

DEFAULT_WAIT = 120.0

HELD_ENTRIES = 256
"""How many entries a process keeps pinned (one descriptor each), most recently answered first."""

_lock = threading.Lock()
_held: "collections.OrderedDict[str, StoredEntry]" = collections.OrderedDict()
_private_dirs: List[str] = []
_warned: Set[str] = set()


def _after_fork_in_child() -> None:
    # The child starts afresh: another thread of the parent may have held the lock at the fork,
    # and the parent's pins, store handle and private directories are the parent's (the native
    # objects are never used or released in the child; dropping them here forgets them).
    global _lock, _held, _private_dirs
    _lock = threading.Lock()
    _held = collections.OrderedDict()
    _private_dirs = []


os.register_at_fork(after_in_child=_after_fork_in_child)


def store() -> Store:
    """This process's store on the root the environment names (``JIT_CACHE_DIR``, ...)."""
    return env_store()


def _wait() -> float:
    text = os.environ.get(WAIT_ENV)
    if not text:
        return DEFAULT_WAIT
    try:
        return max(0.0, float(text))
    except ValueError:
        raise ValueError(f"{WAIT_ENV} must be a number of seconds, not {text!r}") from None


def _warn_once(what: str, message: str) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(f"jit_cache.triton: {message}", RuntimeWarning, stacklevel=3)


def _hold(key: str, entry: StoredEntry) -> StoredEntry:
    """Keeps ``entry`` pinned for the process (the most recent ``HELD_ENTRIES``)."""
    with _lock:
        _held[key] = entry
        _held.move_to_end(key)
        while len(_held) > HELD_ENTRIES:
            _, oldest = _held.popitem(last=False)
            oldest.close()
    return entry


def _held_entry(key: str) -> Optional[StoredEntry]:
    with _lock:
        entry = _held.get(key)
        if entry is not None:
            _held.move_to_end(key)
        return entry


# A stored file's name is one plain component that is not the store's own `meta.json` and does
# not start with `.`; Triton's names are mapped reversibly (`~` marks an escaped name).
def _stored_name(name: str) -> str:
    if name == "meta.json" or name.startswith((".", "~")):
        return "~" + name
    return name


def _triton_name(stored: str) -> str:
    return stored[1:] if stored.startswith("~") else stored


def _group_key(key: str, filename: str) -> str:
    return f"group/{key}/{filename}"


def _file_key(key: str, filename: str) -> str:
    return f"file/{key}/{filename}"


def _paths(entry: StoredEntry) -> Dict[str, str]:
    # `_triton_name` inline: this runs on every warm compile.
    return {(n[1:] if n[0] == "~" else n): path for n, path in entry.paths.items()}


def _as_bytes(data: Any) -> bytes:
    # As Triton's FileCacheManager: bytes are written as they are, anything else as its text.
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    return str(data).encode("utf-8")


def _private_dir() -> str:
    made = tempfile.mkdtemp(prefix="jit-cache-triton-")
    with _lock:
        _private_dirs.append(made)
    return made


@atexit.register
def _remove_private_dirs() -> None:
    for made in _private_dirs:
        shutil.rmtree(made, ignore_errors=True)


class CacheManager(_triton_cache.CacheManager):
    """Triton's cache manager on the keyed store (``TRITON_CACHE_MANAGER``).

    Triton makes one per compile (``cls(key, override=, dump=)``) and calls ``get_group``, then on
    a miss ``put`` for each file and ``put_group``; the launcher-stub build and the autotuner call
    ``get_file`` and ``put`` for single files, each published as an entry of its own.
    """

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        self._files: Optional[_triton_cache.FileCacheManager] = None
        if override or dump:
            self._files = _triton_cache.FileCacheManager(key, override=override, dump=dump)
        self._producer: Optional[Producer] = None
        self._group: Optional[str] = None
        self._private: Optional[str] = None

    # Reading.

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        if self._files is not None:
            return self._files.get_group(filename)
        if self._producer is not None and filename == self._group:
            return None  # asked again by its own producer: still being compiled here
        key = _group_key(self.key, filename)
        held = _held_entry(key)
        if held is not None:
            if _knobs.compilation.always_compile:
                self._private = _private_dir()
            return _paths(held)
        try:
            # A hit answers on this thread without a lock; `begin` (a helper thread, the key's
            # lock) only on a miss.
            claim = get_entry(NAMESPACE, key) or store().begin(NAMESPACE, key, wait=_wait())
        except BusyError as e:
            _warn_once("busy", f"{e}; compiling privately, uncached")
            self._private = _private_dir()
            return None
        except (Error, OSError) as e:
            _warn_once("store", f"the store is unusable ({e}); compiling privately, uncached")
            self._private = _private_dir()
            return None
        if isinstance(claim, StoredEntry):
            if _knobs.compilation.always_compile:
                # `TRITON_ALWAYS_COMPILE`: Triton compiles anyway; its files are this compile's
                # own, never a second copy of the entry.
                self._private = _private_dir()
            return _paths(_hold(key, claim))
        # This process is now the key's one producer, until `put_group` or until it is dropped.
        self._producer = claim
        self._group = filename
        return None

    def get_file(self, filename: str) -> Optional[str]:
        if self._files is not None:
            return self._files.get_file(filename)
        for staged in (self._producer.dir if self._producer else None, self._private):
            if staged is not None:
                path = os.path.join(staged, _stored_name(filename))
                if os.path.exists(path):
                    return path
        key = _file_key(self.key, filename)
        entry = _held_entry(key)
        if entry is None:
            try:
                entry = get_entry(NAMESPACE, key)
            except (Error, OSError):
                return None
            if entry is None:
                return None
            _hold(key, entry)
        return entry.path(_stored_name(filename))

    # Writing.

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        if self._files is not None:
            return self._files.put(data, filename, binary=binary)
        data = _as_bytes(data)
        if self._producer is not None:
            return self._producer.write(_stored_name(filename), data)
        if self._private is not None:
            return _write_private(self._private, filename, data)
        return self._put_file(filename, data)

    def _put_file(self, filename: str, data: bytes) -> str:
        """A file outside a group (a launcher stub, autotuner timings): an entry of its own."""
        key = _file_key(self.key, filename)
        try:
            claim = store().begin(NAMESPACE, key, wait=_wait())
            if isinstance(claim, Producer):
                claim.write(_stored_name(filename), data)
                claim = claim.commit()
        except (Error, OSError) as e:
            _warn_once("file", f"{filename} not stored ({e}); kept privately")
            return _write_private(_private_dir(), filename, data)
        path = _hold(key, claim).path(_stored_name(filename))
        assert path is not None, "a published file entry holds its file"
        return path

    def put_group(self, filename: str, group: Dict[str, str]) -> Optional[str]:
        if self._files is not None:
            return self._files.put_group(filename, group)
        producer, self._producer = self._producer, None
        if producer is None or filename != self._group:
            if producer is not None:
                producer.abandon()
            # Not the producer (the wait ran out, or no `get_group` came first): publish only if
            # nobody else is producing, never waiting.
            try:
                claim = store().begin(NAMESPACE, _group_key(self.key, filename), wait=0.0)
            except (Error, OSError):
                return None
            if isinstance(claim, StoredEntry):
                return None
            producer = claim
        # The entry is exactly the group: files put but not named in it are left out, and a
        # named file put elsewhere is copied in.
        names = {_stored_name(name): path for name, path in group.items()}
        for staged in os.listdir(producer.dir):
            if staged not in names:
                os.unlink(os.path.join(producer.dir, staged))
        contents = {}
        for name, path in names.items():
            with open(path, "rb") as f:
                contents[name] = f.read()
            if path != os.path.join(producer.dir, name):
                producer.write(name, contents[name])
        try:
            entry = producer.commit()
        except (Error, OSError) as e:
            # Nothing was published and the staging directory is gone: the caller still gets
            # the files, privately.
            _warn_once("commit", f"a kernel was not stored ({e}); kept privately")
            private = _private_dir()
            for name, data in contents.items():
                group[_triton_name(name)] = _write_private(private, _triton_name(name), data)
            return None
        _hold(_group_key(self.key, filename), entry)
        group.update(_paths(entry))
        return entry.dir


def _write_private(directory: str, filename: str, data: bytes) -> str:
    path = os.path.join(directory, _stored_name(filename))
    with open(path, "wb") as f:
        f.write(data)
    return path


class RemoteBackend(_triton_cache.RemoteCacheBackend):
    """A ``TRITON_REMOTE_CACHE_BACKEND`` for Triton's ``RemoteCacheManager``: each file is an
    entry of the keyed store, fetched from the fleet tier (``JIT_CACHE_REMOTE``) with its size
    and blake3 checked before it is used, and uploaded after it is published here."""

    def __init__(self, key: str) -> None:
        self._key = key

    def get(self, filenames: List[str]) -> Dict[str, bytes]:
        found = {}
        for filename in filenames:
            key = f"remote/{self._key}/{filename}"
            try:
                claim = store().begin(NAMESPACE, key, wait=0.0)
            except (Error, OSError):
                continue
            if isinstance(claim, Producer):
                claim.abandon()  # a miss here and in the fleet
                continue
            found[filename] = claim.read(_stored_name(filename))
        return found

    def put(self, filename: str, data: bytes) -> None:
        key = f"remote/{self._key}/{filename}"
        try:
            claim = store().begin(NAMESPACE, key, wait=_wait())
            if isinstance(claim, Producer):
                claim.write(_stored_name(filename), _as_bytes(data))
                claim.commit()
        except (Error, OSError) as e:
            _warn_once("remote", f"{filename} not stored ({e})")


# `install()`: Triton's key of itself, from a per-host identity cache.

KEY_CACHE_FORMAT = 1
RACY_WINDOW_NS = 2_000_000_000
"""A file changed less than this long before its content was read is never trusted (git's rule,
as fingerprint's stat cache)."""

BOOT_ID = "/proc/sys/kernel/random/boot_id"

# The recordings in progress, by the thread making each: the audit hook is process-wide, and a
# recording sees only its own thread's events, never another call's.
_recordings: Dict[int, Dict[str, Set[str]]] = {}
_audit_installed = False
# One first call of `triton_key()` at a time records and computes; the others wait for its answer.
_key_lock = threading.Lock()


def _after_fork_reset_key_lock() -> None:
    # A thread of the parent may have been computing the key at the fork: the child's copy of
    # the lock would stay held forever, and its recording is of a thread the child lacks.
    global _key_lock, _recordings
    _key_lock = threading.Lock()
    _recordings = {}


os.register_at_fork(after_in_child=_after_fork_reset_key_lock)


def _audit(event: str, args: Tuple[Any, ...]) -> None:
    if not _recordings:
        return
    recording = _recordings.get(threading.get_ident())
    if recording is None:
        return
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        recording["files"].add(os.fsdecode(args[0]))
    elif event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes, os.PathLike)):
        recording["dirs"].add(os.fsdecode(args[0]) or ".")


def _stat_tuple(path: str) -> Optional[List[int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _boot_id() -> str:
    try:
        with open(BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def _key_cache_path() -> Optional[str]:
    try:
        state = store().state_dir
    except (Error, OSError):
        return None
    return os.path.join(os.fspath(state), f"triton-key-{os.uname().nodename}.json")


def _identity() -> Dict[str, Any]:
    import triton

    return {
        "format": KEY_CACHE_FORMAT,
        "boot_id": _boot_id(),
        "triton": triton.__version__,
        "triton_dir": os.path.dirname(os.path.abspath(triton.__file__)),
        "python": sys.version,
    }


def _answered(record: Dict[str, Any], identity: Dict[str, Any]) -> Optional[str]:
    """The recorded key, when every input Triton's function read is as recorded and settled."""
    if record.get("identity") != identity or not identity["boot_id"]:
        return None
    read_at = record["read_at_ns"]
    for path, recorded in record["inputs"]:
        now = _stat_tuple(path)
        if now is None or now != recorded:
            return None
        if max(now[3], now[4]) >= read_at - RACY_WINDOW_NS:
            return None
    return record["key"]


def _recorded_call(original: Callable[[], str]) -> Tuple[Any, ...]:
    """Calls Triton's own ``triton_key`` noting every file it opened and directory it listed (on
    the calling thread; the caller holds ``_key_lock``)."""
    global _audit_installed
    if not _audit_installed:
        sys.addaudithook(_audit)
        _audit_installed = True
    read_at = time.time_ns()
    me = threading.get_ident()
    recording: Dict[str, Set[str]] = {"files": set(), "dirs": set()}
    _recordings[me] = recording
    try:
        value = original()
    finally:
        del _recordings[me]
    paths = sorted(recording["files"] | recording["dirs"])
    return value, read_at, paths


def _sha256(path: str) -> Optional[str]:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def _covers(value: str, paths: List[str]) -> bool:
    """Whether the recording provably holds every input of ``value``.

    Triton's key is its version followed by the sha256 of each file it hashed, joined by ``-``
    (``triton.runtime.cache.triton_key``). The record is complete when every one of those
    digests is the content of a recorded file: a file read where the recording could not see it
    (another thread, a form of the key this check does not know) leaves a digest unmatched, and
    such a record is never saved, since an edit of that file would not invalidate it.
    """
    import triton

    version = triton.__version__
    if not value.startswith(version):
        return False
    wanted = set(value[len(version) :].split("-"))
    if not wanted or any(len(d) != 64 or d.strip("0123456789abcdef") for d in wanted):
        return False
    for path in paths:
        if not wanted:
            break
        if os.path.isfile(path):
            wanted.discard(_sha256(path) or "")
    return not wanted


class _TritonKey:
    """``triton_key()`` answered from the per-host identity cache (see ``install``)."""

    def __init__(self, original: Callable[[], str]) -> None:
        self.original = getattr(original, "__wrapped__", original)
        self.value: Optional[str] = None
        self.answered_from_cache = False

    def __call__(self) -> str:
        value = self.value
        if value is not None:
            return value
        # Threads making their first call at once: one computes (and records), the others wait
        # for its answer instead of recording over it.
        with _key_lock:
            if self.value is None:
                self.value = self._compute()
            return self.value

    def cache_clear(self) -> None:  # as functools.lru_cache's
        self.value = None

    def _compute(self) -> str:
        path = _key_cache_path()
        identity = _identity()
        if path is not None:
            try:
                with open(path, "rb") as f:
                    found = _answered(json.load(f), identity)
            except (OSError, ValueError, KeyError, TypeError):
                found = None
            if found is not None:
                self.answered_from_cache = True
                return found
        value, read_at, paths = _recorded_call(self.original)
        inputs = [(p, _stat_tuple(p)) for p in paths]
        settled = all(
            st is not None and max(st[3], st[4]) < read_at - RACY_WINDOW_NS for _, st in inputs
        )
        if path is not None and settled and identity["boot_id"] and _covers(value, paths):
            record = {"identity": identity, "read_at_ns": read_at, "inputs": inputs, "key": value}
            try:
                durable.put(path, json.dumps(record).encode())
            except OSError:
                pass  # unsaved: the next process computes it again
        return value


def install(*, cache_manager: bool = True) -> None:
    """Makes this process's Triton use the store, and answers ``triton_key()`` from a per-host
    identity cache.

    ``triton_key()`` hashes Triton's ``libtriton.so`` and its Python sources (about 0.75 s, once
    per process). The first call after ``install()`` on a host runs Triton's own function while
    noting every file it opens and every directory it lists (a ``sys.audit`` hook that stays
    installed, idle, afterwards); its answer is saved with each of those paths' ``(device, inode,
    size, mtime, ctime)``, the boot id, Triton's version and directory and the Python version, in
    ``<root>/v2/state/triton-key-<host>.json``. A later process answers with the saved key only
    when all of that is unchanged and every path was already two seconds old when Triton read it
    (git's racy rule): any edit, reinstall, added or removed module, another boot or another
    Triton falls back to Triton's own function, whose answer is saved again. A root that cannot
    be written saves nothing: every process then computes the key itself.

    Threads making their first call at once get one computation (the others wait for it), and
    a record is saved only when it provably lists every input: each digest the key holds is the
    content of a recorded file (a second hash of those files, once per change). A key whose
    form is not Triton's known one, or read where the recording cannot see, is never saved.

    ``cache_manager=True`` also selects ``CacheManager`` (as ``TRITON_CACHE_MANAGER`` would).
    """
    from triton.runtime import autotuner

    current = _triton_cache.triton_key
    if not isinstance(current, _TritonKey):
        answered = _TritonKey(current)
        _triton_cache.triton_key = answered
        if getattr(autotuner, "triton_key", None) is current:
            autotuner.triton_key = answered
    if cache_manager:
        _knobs.cache.manager_class = CacheManager
