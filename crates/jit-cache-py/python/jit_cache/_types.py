"""The types of ``jit_cache``'s values: its states as ``Literal``s, its reports as ``TypedDict``s.

They exist at run time (``from jit_cache import Stats``) so that callers can annotate with them;
``_native.pyi`` types the extension with them. Each ``Literal`` lists every value the native
side produces (it raises rather than produce another), and each report's keys are those the
command's ``--json`` prints for it.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, TypedDict, Union

from ._native import KernelSpec, Source


StrPath = Union[str, "os.PathLike[str]"]
"""A path: a ``str`` or an ``os.PathLike`` such as ``pathlib.Path``."""

BytesLike = Union[bytes, bytearray, memoryview]
"""Data written by ``put``, ``Batch.put`` and ``Producer.write``."""

Defines = Union[Iterable[Union[str, Tuple[str, Optional[object]]]], Mapping[str, Optional[object]]]
"""``-D`` definitions: ``"NAME"`` / ``"NAME=VALUE"`` strings, ``(name, value)`` pairs, or a mapping."""

Outcome = Literal["hit", "built", "rebuilt", "fetched"]
"""How ``Cache.get_or_build`` answered: from the cache, compiled for the first time, compiled
again (``Answer.reasons`` says why), or fetched from the remote tier."""

Kind = Literal["cubin", "ptx", "fatbin"]
"""What a kernel request compiles to."""

PackKind = Literal["cubin", "ptx", "fatbin", "object", "shared-library", "stored"]
"""The kinds ``Cache.export_pack`` takes: kernels of an output kind, or stored entries."""

Cause = Literal["source", "timeout", "signal", "environment"]
"""Why a compile failed: only ``"source"`` is the source's fault (recorded and replayed)."""

Severity = Literal["fatal", "error", "warning", "note"]
"""How serious a compiler diagnostic is."""

Protocol = Literal["local", "shared"]
"""The protocol a cache root follows: ``"shared"`` when other hosts may use it."""

FlushStrategy = Literal["Syncfs", "PerFile"]
"""How a committed ``Batch`` was flushed: one ``syncfs`` per filesystem, or per-file ``fsync``."""

PackEntryKind = Literal["kernel", "stored"]
"""What an entry of a pack is."""


class KernelOptions(TypedDict, total=False):
    """The options of a kernel request: ``KernelSpec``'s keyword arguments, which
    ``Cache.get_or_build``, ``Cache.retry`` and ``Cache.explain`` take as well."""

    include_dirs: Union[StrPath, Sequence[StrPath], None]
    defines: Optional[Defines]
    flags: Union[str, Sequence[str], None]
    arch: Union[str, Sequence[str], None]
    kind: Kind
    name: Optional[str]
    timeout: Optional[float]


Request = Union[StrPath, Source, KernelSpec]
"""What a cache call compiles: a path, a ``Source``, or a ``KernelSpec`` (then no options)."""


class _RequestSource(TypedDict):
    source: Union[StrPath, Source]


class KernelRequest(_RequestSource, KernelOptions, total=False):
    """A ``Cache.build_many`` request as a dict: ``"source"`` and the options."""


class RecordedDiagnostic(TypedDict):
    """A diagnostic of a recorded failure, as the record keeps it."""

    file: Optional[str]
    line: Optional[int]
    column: Optional[int]
    severity: Literal["Fatal", "Error", "Warning", "Note"]
    message: str


class RecordedFailure(TypedDict):
    """A recorded compile failure, as ``Cache.explain`` shows it (the command's ``--json``)."""

    name: str
    command: List[str]
    exit_code: Optional[int]
    diagnostics: List[RecordedDiagnostic]
    stderr_tail: str
    from_record: bool
    cause: Union[Literal["source"], Dict[str, Dict[str, Union[int, str]]]]


class _Explained(TypedDict):
    name: str
    key: str
    slot: str


class ExplainHit(_Explained):
    """A valid entry exists at ``path``."""

    action: Literal["hit"]
    path: str


class ExplainBuild(_Explained):
    """Nothing was built for this kernel before."""

    action: Literal["build"]


class ExplainRebuild(_Explained):
    """An earlier variant exists but does not serve, for ``reasons``."""

    action: Literal["rebuild"]
    reasons: List[str]


class ExplainFailedBefore(_Explained):
    """The same inputs failed to compile before; ``failure`` would be raised."""

    action: Literal["failed_before"]
    failure: RecordedFailure


Explanation = Union[ExplainHit, ExplainBuild, ExplainRebuild, ExplainFailedBefore]
"""What ``Cache.explain`` found, told apart by ``action``."""


class Stats(TypedDict):
    """``Cache.stats()``: the root's published ``entries`` and their ``bytes``, builds recorded
    in its event log, keys with a recorded failure, staging directories and trash items present,
    its ``filesystem`` type (``ext4``, ``nfs``, ...) and ``protocol``; requests answered as
    ``hits``, ``built`` or ``fetched`` over every host and process, and those answered but not
    cached (``not_cached``), by reason."""

    entries: int
    bytes: int
    builds_recorded: int
    failures: int
    staging: int
    trash: int
    filesystem: str
    protocol: Protocol
    hits: int
    built: int
    fetched: int
    not_cached: Dict[str, int]


class GcReport(TypedDict):
    """``Cache.gc()``: entries evicted and bytes freed, entries skipped because a reader pinned
    them or a build held their key, leftovers swept (staging, trash, temps)."""

    evicted: int
    bytes_freed: int
    skipped_busy: int
    swept: int


class VerifyReport(TypedDict):
    """``Cache.verify()``: entries checked; corrupt ones as ``[path, reason]``, moved aside
    (``corrupt``) or left in place because a reader holds them (``corrupt_pinned``)."""

    checked: int
    corrupt: List[List[str]]
    corrupt_pinned: List[List[str]]


class ExportReport(TypedDict):
    """``Cache.export_pack()``: what the pack holds."""

    entries: int
    bytes: int
    skipped_damaged: List[List[str]]


class ImportReport(TypedDict):
    """``Cache.import_pack()``: entries in the pack, published, already present, and skipped
    because their recorded inputs do not match this host (``[entry, reason]``); flushes made,
    bytes read, bytes of files shared with the pack by cloning its extents rather than written,
    and why files were written rather than shared (``None`` when none was refused)."""

    entries: int
    imported: int
    present: int
    skipped: List[List[str]]
    flushes: int
    bytes_read: int
    bytes_shared: int
    not_shared: Optional[str]


class PackEntry(TypedDict):
    """An entry of a pack, as ``list_pack`` shows it: a kernel's ``name`` or a stored entry's
    ``namespace/key``; a kernel's output kind, arches, toolchain and headers; the files as
    ``[name, size]``."""

    kind: PackEntryKind
    name: str
    key: str
    variant: str
    output: Optional[str]
    arches: List[str]
    toolchain: Optional[str]
    headers: List[str]
    files: List[List[Union[str, int]]]


class BatchReport(TypedDict):
    """``Batch.commit()``: what was flushed, and how."""

    files: int
    directories: int
    strategy: FlushStrategy
    flushes: int


class WheelIdentity(TypedDict):
    """``fingerprint.wheel_identity()``: an installed distribution's identity."""

    name: str
    version: str
    digest: str
    editable: bool

