"""In-memory lexical indexes kept in step with the store: built per namespace, grown by new rows, rebuilt when the
namespace's epoch changes (a delete or a reindex, in any process).

Owned by `Memory` (one cache per Memory), never by the store: each index holds one namespace's rows only, read
with that namespace in the WHERE clause. Catch-up and search run under the cache's lock, so concurrent searches
never add a row twice or read a half-grown index. Vector search is the store's own capability
(`Store.vector_search`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..store.base import Store
from .bm25 import BM25Index
from .text import ANALYZERS


@dataclass
class _Entry:
    epoch: int
    index: BM25Index
    after: int = 0


@dataclass
class IndexCache:
    """BM25 indexes per (namespace, space, analyzer) over one store, plus a lock for engines' query-side caches.

    Lock order: this cache's lock first, then the store's (a snapshot); code holding a store snapshot must not
    wait for this lock, or it deadlocks with a search catching its index up."""

    _entries: dict[tuple[int, str, str], _Entry] = field(default_factory=dict)
    _views: dict[tuple[int, str], tuple[object, object]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def bm25_search(
        self, store: Store, ns: int, space: str, query: str, k: int, analyzer: str = "extended"
    ) -> list[tuple[int, float]]:
        """Top-k (item id, BM25 score) in one namespace's space, after catching the index up with the store."""
        with self.lock:
            epoch = store.epoch(ns)
            key = (ns, space, analyzer)
            entry = self._entries.get(key)
            if entry is None or entry.epoch != epoch:
                entry = self._entries[key] = _Entry(epoch, BM25Index(analyzer=ANALYZERS[analyzer]))
            for item_id, text in store.items_after(ns, space, entry.after):
                entry.index.add(item_id, text)
                entry.after = item_id
            return entry.index.search(query, k)

    def view(self, ns: int, name: str, version: object) -> object | None:
        """An engine's query-side view of a namespace (e.g. a label table), if built for this `version`."""
        with self.lock:
            cached = self._views.get((ns, name))
            return cached[1] if cached is not None and cached[0] == version else None

    def keep_view(self, ns: int, name: str, version: object, view: object) -> None:
        with self.lock:
            self._views[(ns, name)] = (version, view)

    def drop(self, ns: int) -> None:
        """Forget everything cached for a namespace (after it was deleted)."""
        with self.lock:
            for key in [k for k in self._entries if k[0] == ns]:
                del self._entries[key]
            for vkey in [k for k in self._views if k[0] == ns]:
                del self._views[vkey]
