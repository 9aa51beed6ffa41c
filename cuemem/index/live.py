"""In-memory indexes kept in step with the store: built per namespace, grown by new rows, rebuilt on a new epoch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..store.sqlite import SQLiteStore
from .bm25 import BM25Index
from .dense import DenseIndex


def _fresh(store: SQLiteStore, key: tuple[Any, ...], factory: Any) -> tuple[Any, int]:
    ns = key[1]
    epoch = store.epoch(ns)
    entry = store.cache.get(key)
    if entry is None or entry["epoch"] != epoch:
        entry = {"epoch": epoch, "index": factory(), "after": 0}
        store.cache[key] = entry
    return entry, epoch


def bm25_index(store: SQLiteStore, ns: int, space: str) -> BM25Index:
    """The namespace's BM25 index over one space of items, caught up with the store."""
    entry, _ = _fresh(store, ("bm25", ns, space), BM25Index)
    for item_id, text in store.items_after(ns, space, entry["after"]):
        entry["index"].add(item_id, text)
        entry["after"] = item_id
    return entry["index"]


def dense_index(store: SQLiteStore, ns: int, space: str, model: str) -> DenseIndex:
    """The namespace's dense index over one space's vectors from one embedding model, caught up with the store."""
    entry, _ = _fresh(store, ("dense", ns, space, model), DenseIndex)
    for row_id, item_id, blob in store.vectors_after(ns, space, model, entry["after"]):
        entry["index"].add(item_id, np.frombuffer(blob, dtype=np.float32))
        entry["after"] = row_id
    return entry["index"]
