"""torch.compile's caches in the keyed store: durable, whole or absent, verified, shared.

Select it with no code change::

    JIT_CACHE_TORCH=1 python train.py

(the wheel's ``jit_cache_torch.pth`` installs a lazy import hook at interpreter start, which does
nothing until ``torch._inductor.remote_cache`` is imported and then calls ``install()``), or from
code with ``jit_cache.torch.install()`` before the first compile.

``install()`` makes each of Inductor's remote caches (``RemoteFxGraphCache``,
``RemoteAOTAutogradCache``, ``RemoteAutotuneCache``, ``RemoteBundledAutotuneCache``,
``RemoteDynamoPGOCache``) use the store in place of Redis (their ``backend_override_cls``), and
switches on the FX graph and AOTAutograd caches where the configuration leaves them unset
(``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=0`` or ``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=0`` keep them
off). The others use the store once Inductor's own switches turn them on
(``TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE=1``, ``TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE=1``,
``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO=1``). Inductor's local cache under
``TORCHINDUCTOR_CACHE_DIR`` stays as it is and is asked first.

Where entries live: the root of ``JIT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/jit-cache``, else
``~/.cache/jit-cache``), namespace ``inductor``, one entry per key Inductor computes, under
``v1/<torch.__version__>/`` (so another torch never meets these entries), beside the nvcc and
Triton kernels: ``jit-cache stats``, ``gc``, ``verify`` and ``ls`` cover them. ``JIT_CACHE_TEAM=1``
opens the root group-shared; ``JIT_CACHE_REMOTE=redis://...`` or ``s3://bucket/prefix`` shares
entries with other hosts (each checked against its size and blake3 before it is used).

What holds:

- An entry is published by one durable rename (file fsynced, then the directory): a reader
  finds all of Inductor's bytes or none, after a crash or a kill -9.
- Bytes are checked against their recorded size and digest before they are used: the store
  answers a corrupt entry as a miss with a ``jit_cache.DamagedEntryWarning`` naming it (the
  compile's ``put`` then replaces it), an entry unreadable afterwards is a miss with one warning,
  and a store that cannot be opened leaves Inductor's own caches with one warning: never an
  exception in a compile (not even where a filter makes the warning an error).
- One compile per key for the FX graph and AOTAutograd caches: Inductor asks the cache
  (``get``), compiles on a miss, then stores (``put``); the miss makes this process the key's
  producer, and other processes and hosts asking for the key wait for it (at most
  ``JIT_CACHE_TORCH_WAIT`` seconds, default 120) and then get its entry. A claim whose ``put``
  never comes (the graph was not cacheable, or the compile raised) is released by this thread's
  next lookup in the same cache, or when the process ends. The autotune and PGO caches are not
  coordinated: their ``put`` may come much later than the lookup, or never.
- Entries are written once: a second ``put`` of a key keeps the first (Redis would overwrite).
  Inductor's keys name their contents, except the PGO profile's (``RemoteDynamoPGOCache``),
  whose first profile stays until ``jit-cache gc`` evicts it.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from typing import Dict, Optional, Set, Tuple

from ._env_store import env_store, get_entry
from ._errors import BusyError, Error
from ._native import Producer, Store, StoredEntry

__all__ = ["StoreBackend", "install", "store", "store_key"]

NAMESPACE = "inductor"
"""The store namespace of Inductor's entries."""

ENABLE_ENV = "JIT_CACHE_TORCH"
"""Set (not ``0``) to install the backends when Inductor is imported, with no code change."""

WAIT_ENV = "JIT_CACHE_TORCH_WAIT"
"""Seconds a compile waits for another process compiling the same graph (default 120)."""

DEFAULT_WAIT = 120.0

FORMAT = "v1"
"""The first part of every store key. Bump it when the entries' layout changes."""

VALUE = "value"
"""The one file of an entry: the bytes Inductor put, as it put them."""

# Each remote cache of `torch._inductor.remote_cache`: the name its entries are counted under in
# warnings, and whether its lookup and its put come in one compile (then a miss claims the key).
CACHES: Dict[str, Tuple[str, bool]] = {
    "RemoteFxGraphCache": ("fx-graph", True),
    "RemoteAOTAutogradCache": ("aot-autograd", True),
    "RemoteAutotuneCache": ("autotune", False),
    "RemoteBundledAutotuneCache": ("bundled-autotune", False),
    "RemoteDynamoPGOCache": ("dynamo-pgo", False),
}

_lock = threading.Lock()
_warned: Set[str] = set()
# Claims waiting for their `put`, by store key; and the last claim of each (thread, cache).
_claims: Dict[str, Producer] = {}
_last_claim: Dict[Tuple[int, str], str] = {}


def _after_fork_in_child() -> None:
    # The child starts afresh: the parent's claims and store handle are the parent's (another
    # of its threads may also have held the lock at the fork).
    global _lock, _claims, _last_claim
    _lock = threading.Lock()
    _claims = {}
    _last_claim = {}


os.register_at_fork(after_in_child=_after_fork_in_child)


def store() -> Store:
    """This process's store on the root the environment names (``JIT_CACHE_DIR``, ...)."""
    return env_store()


def store_key(key: str) -> str:
    """The store key of Inductor's ``key``: this format, this torch's version, then the key."""
    import torch

    return f"{FORMAT}/{torch.__version__}/{key}"


def _wait() -> float:
    text = os.environ.get(WAIT_ENV)
    if not text:
        return DEFAULT_WAIT
    try:
        return max(0.0, float(text))
    except ValueError:
        return DEFAULT_WAIT  # never an exception in a compile; the default instead


def _warn_once(what: str, message: str) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(f"jit_cache.torch: {message}", RuntimeWarning, stacklevel=3)


def _read(entry: StoredEntry, cache: str) -> Optional[bytes]:
    try:
        return entry.read(VALUE)
    except (Error, OSError) as e:
        _warn_once(
            f"corrupt:{cache}",
            f"an entry of the {cache} cache is unreadable ({e}); a miss "
            f"(`jit-cache verify` moves it aside)",
        )
        return None
    finally:
        entry.close()


def _release_last_claim(cache: str) -> None:
    """Abandons this thread's previous claim in ``cache`` if its ``put`` never came."""
    with _lock:
        previous = _last_claim.pop((threading.get_ident(), cache), None)
        producer = _claims.pop(previous, None) if previous is not None else None
    if producer is not None:
        producer.abandon()


class StoreBackend:
    """An Inductor ``RemoteCacheBackend`` whose entries are the keyed store's: ``_get`` and
    ``_put``, under Inductor's ``get`` and ``put`` (which count hits, misses and errors) once
    ``install()`` makes it a subclass of Inductor's class."""

    def __init__(self, cache: str = "inductor", coordinated: bool = False) -> None:
        self._name = f"backend:{type(self).__name__}"
        self._cache = cache
        self._coordinated = coordinated

    def _get(self, key: str) -> Optional[bytes]:
        try:
            skey = store_key(key)
            entry = get_entry(NAMESPACE, skey)
            if entry is None:
                _release_last_claim(self._cache)
                # The fleet tier, and for a coordinated cache the wait for another producer.
                wait = _wait() if self._coordinated else 0.0
                claim = store().begin(NAMESPACE, skey, wait=wait)
                if not isinstance(claim, StoredEntry):  # this process is its producer
                    if not self._coordinated:
                        claim.abandon()
                        return None
                    with _lock:
                        _claims[skey] = claim
                        _last_claim[(threading.get_ident(), self._cache)] = skey
                    return None
                entry = claim
        except BusyError as e:
            if self._coordinated:
                _warn_once(f"busy:{self._cache}", f"{e}; compiling here")
            return None
        except (Error, OSError) as e:
            _warn_once("store", f"the store is unusable ({e}); Inductor's caches only")
            return None
        return _read(entry, self._cache)

    def _put(self, key: str, data: bytes) -> None:
        try:
            skey = store_key(key)
            with _lock:
                producer = _claims.pop(skey, None)
            if producer is None:
                # Not claimed here (a cache that is not coordinated, a claim released, a wait
                # that ran out): publish only if nobody else has or is producing, never waiting.
                claim = store().begin(NAMESPACE, skey, wait=0.0)
                if isinstance(claim, StoredEntry):
                    claim.close()  # written once: the first entry stays
                    return
                producer = claim
            producer.write(VALUE, bytes(data))
            producer.commit().close()
        except BusyError:
            return  # another process is producing it
        except (Error, OSError) as e:
            _warn_once(f"put:{self._cache}", f"an entry was not stored ({e})")


@functools.lru_cache(maxsize=None)
def _backend_class() -> type:
    from torch._inductor import remote_cache

    # Inductor's base class keeps its own counts in `get`/`put`; the store's go through it.
    return type("StoreBackend", (StoreBackend, remote_cache.RemoteCacheBackend), {})


def _switch_on() -> None:
    """Turns on the FX graph and AOTAutograd caches where the configuration leaves them unset
    (``None``). The autotune caches are Inductor's to switch on: its bundled one asserts a
    Triton backend hash, which a CPU compile lacks (an ``AssertionError`` in the compile). The
    PGO cache is too: its key does not name its contents (see the module's notes)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    for module, name in (
        (inductor_config, "fx_graph_remote_cache"),
        (functorch_config, "enable_remote_autograd_cache"),
    ):
        if getattr(module, name, False) is None:
            setattr(module, name, True)


def install(*, switch_on: bool = True) -> None:
    """Makes Inductor's remote caches (FX graph, AOTAutograd, autotune, bundled autotune,
    Dynamo PGO) live in the keyed store, namespace ``inductor``.

    ``switch_on=True`` also turns on the FX graph and AOTAutograd caches where the
    configuration leaves them unset (as ``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1`` and
    ``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1`` would); one set to off stays off.
    Call it before the first compile; calling it again changes nothing.
    """
    from torch._inductor import remote_cache

    cls = _backend_class()
    for name, (cache, coordinated) in CACHES.items():
        target = getattr(remote_cache, name, None)
        if target is not None:
            target.backend_override_cls = functools.partial(cls, cache, coordinated)
    if switch_on:
        _switch_on()
