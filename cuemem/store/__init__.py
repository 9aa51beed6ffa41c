"""Durable stores: the Store contract (base.py), the embedded SQLite store and the PostgreSQL + pgvector store."""

from __future__ import annotations

from pathlib import Path

from ..config import is_dsn, redact
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
    "as_target",
    "display_target",
    "is_dsn",
    "open_store",
    "redact",
    "text_hash",
]

Target = str | Path


def as_target(target: str | Path) -> str | Path:
    """A store target as settings keep it: a PostgreSQL DSN stays a string, anything else is a file path."""
    return str(target) if is_dsn(str(target)) else Path(target).expanduser()


def display_target(target: str | Path) -> str:
    """A store target fit for messages: a DSN without its password, or the file path."""
    return redact(str(target)) if is_dsn(str(target)) else str(target)


def open_store(target: str | Path, *, read_only: bool = False, scrub_after_s: float | None = None) -> Store:
    """The store a target names: `postgresql://…` opens PostgreSQL (pgvector), anything else a SQLite file.
    `scrub_after_s`: seconds from a delete to the scrub of its bytes from the files (None: the store's default)."""
    if is_dsn(str(target)):
        from .postgres import PostgresStore

        return PostgresStore(str(target), read_only=read_only, scrub_after_s=scrub_after_s)
    return SQLiteStore(target, read_only=read_only, scrub_after_s=scrub_after_s)
