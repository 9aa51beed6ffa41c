"""Durable stores: the Store contract (base.py) and the embedded SQLite store."""

from .base import AppendResult, CachedCall, DerivedSpec, Item, NewItem, Store, text_hash
from .sqlite import SQLiteStore, StoreError

__all__ = [
    "AppendResult",
    "CachedCall",
    "DerivedSpec",
    "Item",
    "NewItem",
    "SQLiteStore",
    "Store",
    "StoreError",
    "text_hash",
]
