"""The exceptions of ``jit_cache`` (filesystem errors are ``OSError`` subclasses instead), and
its one warning category.

The native module imports these classes once, when it is initialised, and raises them by
their class objects (``jit_cache._native.CompileError is jit_cache.CompileError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    # Only for the annotations: `_types` imports `_native`, whose initialisation imports this
    # module for its exception classes.
    from ._types import Cause, Severity


class Error(Exception):
    """Base of the exceptions ``jit_cache`` defines."""


class CacheError(Error):
    """The cache failed: an unsafe or unusable root, the compiler not found, an I/O error.

    ``operation``, ``path`` and ``errno`` say what failed where, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: Optional[str] = None,
        path: Optional[str] = None,
        errno: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.path = path
        self.errno = errno


class BusyError(CacheError, TimeoutError):
    """A stored entry's producer (another thread, process or host) was still at work when the
    wait ran out: produce the bytes without the store. ``path`` is the key's lock file."""


class PackError(CacheError):
    """A kernel pack is truncated or corrupt: ``offset`` is where the damage was found (bytes
    from the start of ``path``), ``entry`` the entry it belongs to (``None`` for the header or
    the index). No entry whose bytes are damaged was published."""

    def __init__(
        self,
        message: str,
        *,
        offset: int = 0,
        entry: Optional[str] = None,
        operation: Optional[str] = None,
        path: Optional[str] = None,
        errno: Optional[int] = None,
    ) -> None:
        super().__init__(message, operation=operation, path=path, errno=errno)
        self.offset = offset
        self.entry = entry


class DamagedEntryWarning(RuntimeWarning):
    """A stored entry failed its check (a file's size or digest, or its metadata, differs from
    what was recorded) and was answered as a miss: the key's next producer replaces it, and
    ``jit-cache verify`` moves it aside. The message names the entry's directory and the check
    that failed. Filter it as any warning (``warnings.simplefilter("error", DamagedEntryWarning)``
    makes it an exception)."""


class InvalidSpecError(CacheError, ValueError):
    """The request is unusable: a hostile name, an option nvcc's table refuses, ..."""


@dataclass(frozen=True)
class Diagnostic:
    """One compiler diagnostic: where, how serious, what."""

    file: Optional[str]
    line: Optional[int]
    column: Optional[int]
    severity: Severity
    message: str

    def __str__(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where += f":{self.line}"
        prefix = f"{where}: " if where else ""
        return f"{prefix}{self.severity}: {self.message}"


class CompileError(Error):
    """The kernel did not compile.

    ``diagnostics`` are the compiler's, parsed; ``stderr`` the end of its standard error;
    ``cause`` is ``"source"`` (the source's fault: recorded, replayed until an input changes or
    ``Cache.retry``), ``"timeout"``, ``"signal"`` or ``"environment"``.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str = "",
        command: Optional[List[str]] = None,
        exit_code: Optional[int] = None,
        diagnostics: Optional[List[Diagnostic]] = None,
        stderr: str = "",
        cause: Cause = "source",
        from_record: bool = False,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.command = command or []
        self.exit_code = exit_code
        self.diagnostics = diagnostics or []
        self.stderr = stderr
        self.cause = cause
        self.from_record = from_record
