"""In-memory lexical indexes kept in step with the store: built per namespace, grown by new rows, rebuilt when the
namespace's epoch changes (a delete or a reindex, in any process).

Owned by `Memory` (one cache per Memory), never by the store: each index holds one namespace's rows only, read
with that namespace in the WHERE clause. Catch-up and search run under the namespace's lock, so concurrent searches
never add a row twice or read a half-grown index, and searches of different namespaces never wait for each other.
The cache is bounded (issue 36, item 1): past `max_bytes` (setting `cache_mb`) the namespaces used least recently
are dropped whole, and loaded again from the store on their next search. Vector search is the store's own
capability (`Store.vector_search`).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..store.base import Store
from .bm25 import BM25Index
from .text import ANALYZERS


def approx_nbytes(obj: Any, depth: int = 6) -> int:
    """About how much memory an engine's view holds: numpy arrays by their buffers, containers by their items (a
    long one by a sample of them), objects by their attributes. An estimate for the cache's bound, not an audit."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) + 112
    if isinstance(obj, BM25Index):
        return obj.nbytes()
    size = sys.getsizeof(obj, 64)
    if depth <= 0 or isinstance(obj, str | bytes | int | float | bool | type(None)):
        return size
    if isinstance(obj, dict):
        items: list[Any] = list(obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    elif hasattr(obj, "__slots__"):
        items = [getattr(obj, name, None) for name in obj.__slots__]
    else:
        return size
    if not items:
        return size
    sample = items if len(items) <= 200 else items[:: len(items) // 100][:100]
    each = sum(approx_nbytes(item, depth - 1) for item in sample) / len(sample)
    return size + int(each * len(items))


@dataclass
class _Entry:
    epoch: int
    index: BM25Index
    after: int = 0


@dataclass
class IndexCache:
    """BM25 indexes per (namespace, space, analyzer) over one store, engines' query-side views per namespace, and
    a lock per namespace for both (`lock_for`), within `max_bytes` (0: unbounded).

    Lock order: a namespace's lock first, then the store's (a snapshot); code holding a store snapshot must not
    wait for such a lock, or it deadlocks with a search catching its index up."""

    max_bytes: int = 0
    _entries: dict[tuple[int, str, str], _Entry] = field(default_factory=dict)
    _views: dict[tuple[int, str], tuple[object, object, int]] = field(default_factory=dict)
    _locks: dict[int, threading.RLock] = field(default_factory=dict)
    _used: OrderedDict[int, int] = field(default_factory=OrderedDict)  # namespace -> bytes, least recent first
    _guard: threading.Lock = field(default_factory=threading.Lock)  # the dictionaries themselves
    evictions: int = 0

    def lock_for(self, ns: int) -> threading.RLock:
        """The namespace's lock: its index catch-up, searches and engines' view building run under it."""
        with self._guard:
            lock = self._locks.get(ns)
            if lock is None:
                lock = self._locks[ns] = threading.RLock()
            return lock

    def bm25_search(
        self, store: Store, ns: int, space: str, query: str, k: int, analyzer: str = "extended"
    ) -> list[tuple[int, float]]:
        """Top-k (item id, BM25 score) in one namespace's space, after catching the index up with the store."""
        with self.lock_for(ns):
            epoch = store.epoch(ns)
            key = (ns, space, analyzer)
            with self._guard:
                entry = self._entries.get(key)
                fresh = entry is None or entry.epoch != epoch
                if entry is None or entry.epoch != epoch:
                    entry = self._entries[key] = _Entry(epoch, BM25Index(analyzer=ANALYZERS[analyzer]))
            grown = fresh
            new = store.items_after(ns, space, entry.after)
            if new:
                entry.index.extend(new)
                entry.after = new[-1][0]
                grown = True
            hits = entry.index.search(query, k)
            self._account(ns, remeasure=grown)
            return hits

    def view(self, ns: int, name: str, version: object) -> object | None:
        """An engine's query-side view of a namespace (e.g. a label table), if built for this `version`."""
        with self._guard:
            cached = self._views.get((ns, name))
        if cached is None or cached[0] != version:
            return None
        self._account(ns)
        return cached[1]

    def latest_view(self, ns: int, name: str) -> tuple[Any, object] | None:
        """(version, view) of the view last kept under `name`, whatever its version (a view that grows in place
        of being rebuilt starts from it)."""
        with self._guard:
            cached = self._views.get((ns, name))
        if cached is None:
            return None
        self._account(ns)
        return cached[0], cached[1]

    def keep_view(self, ns: int, name: str, version: object, view: object) -> None:
        size = approx_nbytes(view)
        with self._guard:
            self._views[(ns, name)] = (version, view, size)
        self._account(ns, remeasure=True)

    def drop(self, ns: int) -> None:
        """Forget everything cached for a namespace (after it was deleted). Under the namespace's lock: a search
        that began before the delete, from a snapshot that still held the deleted turns, finishes first, so what
        it built is dropped too and never outlives the delete."""
        with self.lock_for(ns), self._guard:
            self._drop(ns)

    def remeasure(self, ns: int) -> None:
        """Count again what a namespace holds (an engine grew a view it keeps in place)."""
        self._account(ns, remeasure=True)

    def nbytes(self) -> int:
        """About how much memory the cached indexes and views hold."""
        with self._guard:
            return sum(self._used.values())

    def namespaces(self) -> int:
        """How many namespaces have something cached."""
        with self._guard:
            return len(self._used)

    def _drop(self, ns: int) -> None:
        for key in [k for k in self._entries if k[0] == ns]:
            del self._entries[key]
        for vkey in [k for k in self._views if k[0] == ns]:
            del self._views[vkey]
        self._used.pop(ns, None)

    def _account(self, ns: int, *, remeasure: bool = False) -> None:
        """Mark the namespace as used now (re-measuring what it holds after it grew), then evict the least recently
        used others while the cache is over its bound. The namespace in use is never evicted: a bound smaller than
        one namespace holds that one namespace."""
        with self._guard:
            if remeasure or ns not in self._used:
                held = sum(e.index.nbytes() for key, e in self._entries.items() if key[0] == ns)
                held += sum(v[2] for key, v in self._views.items() if key[0] == ns)
                self._used[ns] = held
            self._used.move_to_end(ns)
            if self.max_bytes <= 0:
                return
            total = sum(self._used.values())
            while total > self.max_bytes and len(self._used) > 1:
                oldest = next(iter(self._used))
                total -= self._used[oldest]
                self._drop(oldest)
                self.evictions += 1
