"""In-memory indexes kept in step with the store: built per namespace, grown by new rows, rebuilt on a new epoch.

Each index holds one namespace's rows only, read with that namespace in the WHERE clause. Catch-up and search
run under the store's lock, so concurrent searches never add a row twice or read a half-grown index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..store.sqlite import SQLiteStore
from .bm25 import BM25Index
from .dense import DenseIndex
from .text import ANALYZERS


def _entry(store: SQLiteStore, key: tuple[Any, ...], factory: Callable[[], Any]) -> dict[str, Any]:
    epoch = store.epoch(key[1])
    entry = store.cache.get(key)
    if entry is None or entry["epoch"] != epoch:
        entry = {"epoch": epoch, "index": factory(), "after": 0}
        store.cache[key] = entry
    return entry


def bm25_search(
    store: SQLiteStore, ns: int, space: str, query: str, k: int, analyzer: str = "extended"
) -> list[tuple[int, float]]:
    """Top-k (item id, BM25 score) in one namespace's space, after catching the index up with the store."""
    with store.lock:
        entry = _entry(store, ("bm25", ns, space, analyzer), lambda: BM25Index(analyzer=ANALYZERS[analyzer]))
        for item_id, text in store.items_after(ns, space, entry["after"]):
            entry["index"].add(item_id, text)
            entry["after"] = item_id
        return entry["index"].search(query, k)


def dense_search(
    store: SQLiteStore, ns: int, space: str, model: str, query_vector: np.ndarray, k: int
) -> list[tuple[int, float]]:
    """Top-k (item id, cosine) among one namespace's vectors from one model, after catching up with the store."""
    with store.lock:
        entry = _entry(store, ("dense", ns, space, model), DenseIndex)
        for row_id, item_id, blob in store.vectors_after(ns, space, model, entry["after"]):
            entry["index"].add(item_id, np.frombuffer(blob, dtype=np.float32))
            entry["after"] = row_id
        return entry["index"].search(query_vector, k)
