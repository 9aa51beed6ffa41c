"""A disk-backed embedding cache shared across stores: each distinct text is embedded once per model.

The store's own cache is per namespace (deleting a namespace deletes its cached vectors). Benchmarks put every
conversation, and every engine, into a separate namespace or store, so the same text would be embedded again and
again; wrapping the embedder in `CachedEmbedder` makes the second engine and a rerun cost only lookups.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..store.sqlite import text_hash
from .base import Embedder


class CachedEmbedder:
    """Wraps an embedder; vectors are kept in a SQLite file keyed by (model name, text hash)."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        self.inner = inner
        self.name = inner.name  # same vector space, same watermark key
        self.dim = inner.dim
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors(model TEXT, text_hash TEXT, vec BLOB, PRIMARY KEY(model, text_hash))"
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        hashes = [text_hash(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = list(dict.fromkeys(hashes[start : start + 500]))
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT text_hash, vec FROM vectors WHERE model=? AND text_hash IN ({marks})", [self.name, *part]
                )
                found.update((h, np.frombuffer(v, dtype=np.float32)) for h, v in rows)
        first: dict[str, int] = {}
        for i, h in enumerate(hashes):
            if h not in found:
                first.setdefault(h, i)  # one embedding per distinct text
        missing = list(first.values())
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            vectors = np.asarray(self.inner.embed([texts[i] for i in missing]), dtype=np.float32)
            with self._lock, self._db:
                self._db.executemany(
                    "INSERT OR IGNORE INTO vectors(model, text_hash, vec) VALUES(?,?,?)",
                    [(self.name, hashes[i], vec.tobytes()) for i, vec in zip(missing, vectors, strict=True)],
                )
            for i, vec in zip(missing, vectors, strict=True):
                found[hashes[i]] = vec
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[h] for h in hashes]).astype(np.float32, copy=False)

    def close(self) -> None:
        with self._lock:
            self._db.close()
