"""Cache files beside the store, each a SQLite file owned by this layer (no other layer opens a database):
the model-call log for unscoped calls, the per-namespace call cache inside a store, and a shared embedding file.

A call cache maps a request's key to its validated response; `LLMClient` computes keys and JSON-able payloads.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .base import CachedCall, Store

log = logging.getLogger(__name__)


class TokenUsage(Protocol):
    """What a call cache records of a call's usage (`cuemem.llm.Usage` has these)."""

    prompt_tokens: int
    completion_tokens: int


class FileCallCache:
    """A SQLite file of answered calls; also the log of every distinct model call made.

    Deleted rows are overwritten (`secure_delete`), and `purge` empties the file and its write-ahead log, so a
    purged prompt leaves no bytes behind. A new file is created readable by its owner only.
    """

    def __init__(self, path: str | Path) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            if not Path(path).exists():
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite gives -wal/-shm the same mode
        self.path = str(path)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA secure_delete=ON")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS calls(key TEXT PRIMARY KEY, backend TEXT, method TEXT, stage TEXT,"
                " request TEXT, response TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL,"
                " at REAL)"
            )

    def get(self, key: str) -> Any | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM calls WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(
        self,
        key: str,
        backend: str,
        method: str,
        stage: str,
        request: Any,
        response: Any,
        usage: TokenUsage,
        seconds: float,
    ) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO calls VALUES(?,?,?,?,?,?,?,?,?,?)",
                (
                    key,
                    backend,
                    method,
                    stage,
                    json.dumps(request, ensure_ascii=False),
                    json.dumps(response, ensure_ascii=False),
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    seconds,
                    time.time(),
                ),
            )

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def summary(self) -> list[dict[str, Any]]:
        """Calls made (not cache hits), grouped by backend, stage and method, with tokens and seconds."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT backend, stage, method, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(seconds)"
                " FROM calls GROUP BY backend, stage, method ORDER BY backend, stage, method"
            ).fetchall()
        keys = ("backend", "stage", "method", "calls", "prompt_tokens", "completion_tokens", "seconds")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def purge(self) -> int:
        """Delete every remembered call and truncate the write-ahead log; returns how many were deleted.

        A checkpoint blocked by another connection's open read is waited for (the busy timeout, 30 s); if it is
        still blocked, the log is left for the next checkpoint and a warning is logged."""
        with self._lock:
            deleted = self._conn.execute("DELETE FROM calls").rowcount
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.warning("call cache %s: purged, but a reader kept the write-ahead log from being truncated", self.path)
        return deleted

    def close(self) -> None:
        """Close the connection (the file stays)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> FileCallCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreCallCache:
    """The model-call cache of one namespace, kept in the store beside the turns its prompts quote (purged by
    every delete in the namespace); what `LLMClient.bound` caches into for calls made on that namespace's behalf."""

    def __init__(self, store: Store, ns: int) -> None:
        self.store, self.ns = store, ns

    def get(self, key: str) -> Any:
        found = self.store.cached_call(self.ns, key)
        return None if found is None else json.loads(found)

    def put(
        self,
        key: str,
        backend: str,
        method: str,
        stage: str,
        request: Any,
        response: Any,
        usage: TokenUsage,
        seconds: float,
    ) -> None:
        request_json = json.dumps(request, ensure_ascii=False)
        response_json = json.dumps(response, ensure_ascii=False)
        call = CachedCall(
            key,
            backend,
            method,
            stage,
            request_json,
            response_json,
            usage.prompt_tokens,
            usage.completion_tokens,
            seconds,
        )
        self.store.cache_call(self.ns, call)

    def summary(self) -> list[dict[str, Any]]:
        return self.store.call_summary()

    def count(self) -> int:
        return sum(int(row["calls"]) for row in self.store.call_summary())


class EmbeddingFile:
    """Vectors by (model, text hash) in a SQLite file shared across stores and reruns (benchmarks)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors(model TEXT, text_hash TEXT, vec BLOB, PRIMARY KEY(model, text_hash))"
        )
        self._lock = threading.Lock()

    def lookup(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = list(dict.fromkeys(hashes[start : start + 500]))
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT text_hash, vec FROM vectors WHERE model=? AND text_hash IN ({marks})", [model, *part]
                )
                found.update((h, np.frombuffer(v, dtype=np.float32)) for h, v in rows)
        return found

    def put(self, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO vectors(model, text_hash, vec) VALUES(?,?,?)",
                [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in rows],
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
