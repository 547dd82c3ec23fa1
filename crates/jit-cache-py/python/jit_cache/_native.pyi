"""Types of ``jit_cache._native`` (the PyO3 extension), checked against it by ``mypy.stubtest``.

The ``Literal``s and ``TypedDict``s come from ``jit_cache._types``; the exceptions are the
classes of ``jit_cache._errors``, which the extension imports once and raises.
"""

from __future__ import annotations

from types import TracebackType
from typing import Dict, Iterable, List, Optional, Sequence, Type, Union, final

from typing_extensions import Unpack

from jit_cache._errors import BusyError as BusyError
from jit_cache._errors import CacheError as CacheError
from jit_cache._errors import CompileError as CompileError
from jit_cache._errors import DamagedEntryWarning as DamagedEntryWarning
from jit_cache._errors import Diagnostic as Diagnostic
from jit_cache._errors import Error as Error
from jit_cache._errors import InvalidSpecError as InvalidSpecError
from jit_cache._errors import PackError as PackError
from jit_cache._types import (
    BatchReport,
    BytesLike,
    ExportReport,
    Explanation,
    GcReport,
    ImportReport,
    Kind,
    KernelOptions,
    KernelRequest,
    Outcome,
    PackEntry,
    PackKind,
    Request,
    Stats,
    StrPath,
    VerifyReport,
    WheelIdentity,
)

__all__ = [
    "__version__",
    "MANIFEST_FILE",
    "Error",
    "CacheError",
    "BusyError",
    "PackError",
    "InvalidSpecError",
    "CompileError",
    "DamagedEntryWarning",
    "Diagnostic",
    "Cache",
    "Answer",
    "Source",
    "KernelSpec",
    "list_pack",
    "Store",
    "StoredEntry",
    "Producer",
    "put",
    "fsync",
    "fsync_dir",
    "atomic_rename",
    "lock",
    "Batch",
    "Lock",
    "hash_file",
    "hash_tree",
    "wheel_identity",
    "gate",
    "Manifest",
    "Gate",
]

__version__: str
"""The package's version."""

MANIFEST_FILE: str
"""The manifest's file inside a gated build directory."""

@final
class Source:
    """Where a kernel's source comes from: a file, or text compiled from a private copy."""

    @staticmethod
    def text(name: str, text: str) -> Source:
        """Source text compiled as a file named ``name`` (such as ``"scale.cu"``); quoted
        includes then resolve only through the include directories."""
    @staticmethod
    def file(path: StrPath) -> Source:
        """A source file; quoted includes resolve relative to its directory, as nvcc does."""

@final
class KernelSpec:
    """One kernel request, checked once and reusable: a source (a path or a ``Source``) and the
    options ``Cache.get_or_build`` takes. Pass it where a source goes, without keyword
    arguments."""

    def __new__(cls, source: Union[StrPath, Source], **options: Unpack[KernelOptions]) -> KernelSpec: ...
    @property
    def name(self) -> str:
        """The kernel's name (the source file's stem unless ``name`` was given)."""
    @property
    def kind(self) -> Kind:
        """What it compiles to."""

@final
class Answer:
    """A compiled kernel: ``path`` stays valid while the answer is alive (or until ``close()``)."""

    @property
    def path(self) -> str:
        """The artifact's path, valid while this answer is alive and not closed."""
    @property
    def data(self) -> bytes:
        """The artifact's bytes."""
    @property
    def outcome(self) -> Outcome:
        """How the request was answered."""
    @property
    def reasons(self) -> List[str]:
        """Why an earlier variant could not be used (for ``"rebuilt"``)."""
    @property
    def warning(self) -> Optional[str]:
        """Set when the artifact was compiled privately, uncached: says why."""
    @property
    def name(self) -> str:
        """The kernel's name."""
    def close(self) -> None:
        """Releases the pin on the entry now (the path may then be evicted)."""
    def __fspath__(self) -> str: ...
    def __enter__(self) -> Answer: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Cache:
    """A kernel cache rooted at one directory."""

    def __new__(
        cls,
        root: Optional[StrPath] = None,
        *,
        team: bool = False,
        remote: Optional[str] = None,
        nvcc: Optional[StrPath] = None,
    ) -> Cache:
        """Opens the cache at ``root`` (default: ``$JIT_CACHE_DIR``, else
        ``$XDG_CACHE_HOME/jit-cache``, else ``~/.cache/jit-cache``). ``team=True`` opens a
        group-shared root (mode 2770); ``remote="redis://..."`` or ``"s3://bucket/prefix"``
        shares kernels with other hosts; ``nvcc`` names the compiler (default: ``NVCC``,
        ``CUDA_HOME``, ``PATH``)."""
    @property
    def root(self) -> str:
        """The root directory."""
    def get_or_build(self, source: Request, **options: Unpack[KernelOptions]) -> Answer:
        """The compiled kernel for ``source``: from memory, from the cache, or compiled once
        however many threads and processes ask at once. Raises ``CompileError`` when it does
        not compile."""
    def retry(self, source: Request, **options: Unpack[KernelOptions]) -> Answer:
        """Forgets a recorded compile failure for the request and compiles again."""
    def explain(self, source: Request, **options: Unpack[KernelOptions]) -> Explanation:
        """What ``get_or_build`` would do, and why, without compiling."""
    def build_many(
        self, requests: Iterable[Union[Request, KernelRequest]], *, parallelism: Optional[int] = None
    ) -> List[Union[Answer, Error]]:
        """Builds many kernels with at most ``parallelism`` compiles at once. Returns, in order,
        an ``Answer`` or the exception (``CompileError``, ``CacheError``) for each: one failure
        never hides the others."""
    def stats(self) -> Stats:
        """Entries, bytes, builds and failures recorded, hits and builds counted, the
        filesystem and the protocol chosen for it."""
    def gc(self, *, max_size: Optional[int] = None, max_age: Optional[float] = None) -> GcReport:
        """Evicts entries past ``max_size`` bytes (least recently used first) or older than
        ``max_age`` seconds; entries in use are skipped."""
    def verify(self) -> VerifyReport:
        """Checks every entry's bytes against its digest; corrupt ones are moved aside."""
    def export_pack(
        self,
        path: StrPath,
        *,
        name: Optional[str] = None,
        arch: Union[str, Sequence[str], None] = None,
        kind: Union[PackKind, Sequence[PackKind], None] = None,
    ) -> ExportReport:
        """Writes the entries taken into a pack at ``path`` (replaced durably if it exists):
        all of them by default, or those whose name matches the glob ``name``, built for one
        of ``arch``, of one of ``kind``. Damaged entries are left out and listed."""
    def import_pack(self, path: StrPath) -> ImportReport:
        """Imports the pack at ``path``: every entry is verified and matched against this host
        before it is published, never replacing one. Raises ``PackError`` (with ``offset`` and
        ``entry``) for a damaged pack."""
    def save_state(self) -> None:
        """Saves this process's counts and stat cache now (as dropping the handle does)."""

def list_pack(path: StrPath) -> List[PackEntry]:
    """The entries of the pack at ``path``, without importing it: its header and index are
    checked."""

def put(path: StrPath, data: BytesLike, mode: Optional[int] = None) -> None:
    """Replaces ``path`` with ``data`` durably: a temp beside it, write, fsync, rename, fsync
    the directory. Readers see the old file or the whole new one, never a part."""

def fsync(path: StrPath) -> None:
    """fsyncs a file or directory."""

def fsync_dir(path: StrPath) -> None:
    """fsyncs a directory (its entries: what a rename or a create changed)."""

def atomic_rename(src: StrPath, dst: StrPath) -> None:
    """Renames ``src`` over ``dst`` and fsyncs the directories involved."""

@final
class Batch:
    """Many files written at once: each old-or-new on its own, two flushes for the whole
    batch. As a context manager it commits when the block ends normally and discards when it
    raises."""

    def __new__(cls) -> Batch: ...
    def put(self, path: StrPath, data: BytesLike) -> None:
        """Writes ``data`` to a temp beside ``path``; renamed over it by ``commit``."""
    def commit(self) -> BatchReport:
        """Flushes every staged file, renames each over its target, flushes the renames."""
    def discard(self) -> None:
        """Removes every staged temp; nothing is published."""
    def __len__(self) -> int:
        """How many files are staged."""
    def __enter__(self) -> Batch: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Lock:
    """A held ``flock``, released by ``release()`` or at the end of a ``with`` block."""

    @property
    def path(self) -> str:
        """The lock file."""
    @property
    def held(self) -> bool:
        """Whether this process still holds it."""
    def release(self) -> None:
        """Releases the lock (the lock file stays)."""
    def __enter__(self) -> Lock: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

def lock(path: StrPath, timeout: Optional[float] = None, *, shared: bool = False) -> Lock:
    """Takes a ``flock`` on ``path`` (created when missing, never deleted): exclusive, or
    shared with ``shared=True``; waits forever, or ``timeout`` seconds and then raises
    ``TimeoutError``."""

def hash_file(path: StrPath) -> str:
    """The content digest (blake3, hex) of a file."""

def hash_tree(path: StrPath, *, ignore: Sequence[str] = ...) -> str:
    """The content digest (hex) of a tree: relative paths, kinds, exec bits and contents; never
    mtimes. ``ignore`` adds glob patterns to the defaults (``.git``, ``__pycache__``, ...)."""

def wheel_identity(site_packages: StrPath, distribution: str) -> WheelIdentity:
    """The identity of an installed distribution from its ``RECORD`` rows (or, for an editable
    install, its source tree)."""

@final
class Manifest:
    """Named inputs of a build, each a content digest (and a short value where there is one)."""

    def __new__(cls) -> Manifest: ...
    def add_file(self, name: str, path: StrPath) -> None:
        """Adds a file's content under ``name`` (such as ``"source:gemm.cu"``); the path is not
        hashed."""
    def add_tree(self, name: str, path: StrPath, *, ignore: Sequence[str] = ...) -> None:
        """Adds a tree under ``name``: its digest, and each file under ``name/relpath``."""
    def add_bytes(self, name: str, data: BytesLike) -> None:
        """Adds bytes-like content under ``name`` (a rendered ``build.ninja``, say)."""
    def add_value(self, name: str, value: str) -> None:
        """Adds a short value (a version, a path that matters) under ``name``."""
    def add_list(self, name: str, items: Sequence[str]) -> None:
        """Adds a list (flags) under ``name``; its diff lists what was added and removed."""
    def add_env(self, var: str) -> None:
        """Adds environment variable ``var`` under ``env:VAR`` (unset and empty differ)."""
    def add_wheel(self, site_packages: StrPath, distribution: str) -> None:
        """Adds an installed distribution under ``wheel:NAME``: its version and the digest of
        its ``RECORD`` rows."""
    @property
    def digest(self) -> str:
        """The manifest's digest (hex): framed components, format version mixed in."""
    def names(self) -> List[str]:
        """Component names, sorted."""
    def diff(self, old: Manifest) -> List[str]:
        """Why ``old`` is stale against this manifest, as sentences."""
    def to_json(self) -> str:
        """The manifest as JSON text."""
    @staticmethod
    def from_json(text: str) -> Manifest:
        """A manifest from ``to_json``'s text."""
    def __len__(self) -> int: ...

@final
class Gate:
    """A build directory held through its check, build and commit. As a context manager it
    commits when the block ends normally and abandons when it raises."""

    @property
    def dir(self) -> str:
        """The build directory."""
    @property
    def fresh(self) -> bool:
        """Whether the directory's committed manifest matched (nothing was wiped)."""
    @property
    def reasons(self) -> List[str]:
        """Why the directory was wiped."""
    def commit(self) -> None:
        """Commits the manifest (durably) and releases the lock."""
    def abandon(self) -> None:
        """Releases the lock without committing: the next build wipes the directory."""
    def __enter__(self) -> Gate: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

def gate(build_dir: StrPath, manifest: Manifest, *, timeout: Optional[float] = None) -> Gate:
    """Opens the gate on ``build_dir`` for the build whose inputs ``manifest`` snapshots: takes
    the directory's lock (waiting up to ``timeout`` seconds, forever by default), and wipes the
    directory unless its committed manifest matches."""

@final
class StoredEntry:
    """A published stored entry: its paths stay valid while it is alive and not closed."""

    @property
    def dir(self) -> str:
        """The entry's directory."""
    @property
    def key(self) -> str:
        """The caller's key."""
    @property
    def files(self) -> List[str]:
        """The names of the entry's files, sorted."""
    @property
    def paths(self) -> Dict[str, str]:
        """Every file's path by name: a new dict at each call."""
    def path(self, name: str) -> Optional[str]:
        """The path of the file ``name`` (valid while this entry is alive), or ``None``."""
    def read(self, name: str) -> bytes:
        """The bytes of the file ``name``, checked against their recorded size and digest."""
    def close(self) -> None:
        """Releases the pin now (the paths may then be evicted)."""
    def __enter__(self) -> StoredEntry: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Producer:
    """The one producer of a stored entry: files written into its directory are published
    together by ``commit``; ``abandon`` (or losing the last reference, or dying) publishes
    nothing. As a context manager it commits when the block ends normally and abandons when it
    raises."""

    @property
    def dir(self) -> str:
        """The staging directory: files written here are part of the entry."""
    @property
    def key(self) -> str:
        """The caller's key."""
    def write(self, name: str, data: BytesLike) -> str:
        """Writes the file ``name`` of the entry (fsynced by ``commit``); returns its staging
        path."""
    def commit(self) -> StoredEntry:
        """Publishes the entry (every file fsynced, ``meta.json`` last, one rename) and answers
        with it, pinned. Raises and publishes nothing on an error."""
    def abandon(self) -> None:
        """Gives the key up with nothing published: the next waiter becomes its producer."""
    def __enter__(self) -> Producer: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Store:
    """A keyed store on one root (the root a ``Cache`` uses)."""

    def __new__(
        cls, root: Optional[StrPath] = None, *, team: bool = False, remote: Optional[str] = None
    ) -> Store:
        """Opens the store at ``root`` (default as ``Cache``'s). ``team=True`` opens a
        group-shared root; ``remote`` fetches missing entries from the fleet and uploads
        produced ones."""
    @property
    def root(self) -> str:
        """The root directory, as given."""
    @property
    def state_dir(self) -> str:
        """The root's directory of state files, shared by its hosts."""
    @property
    def shared(self) -> bool:
        """Whether the root follows the shared protocol (NFS, Lustre, ...)."""
    def get(self, namespace: str, key: str) -> Optional[StoredEntry]:
        """The published entry for ``key`` in ``namespace``, pinned, or ``None``. Never waits.
        An entry that fails its check is ``None`` with a ``DamagedEntryWarning``."""
    def begin(self, namespace: str, key: str, *, wait: float) -> Union[StoredEntry, Producer]:
        """The published entry for ``key``, or a ``Producer``: this process is then the key's
        one producer until it commits or abandons. Waits at most ``wait`` seconds for another
        producer, then raises ``BusyError``."""
