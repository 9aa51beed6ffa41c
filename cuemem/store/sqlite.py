"""The embedded store: SQLite in WAL mode holding the raw turn log and every derived index (DESIGN.md promises 1-3).

Namespaces are hard partitions: every query below that reads or writes user data names `ns` in its WHERE
clause or key. Derived rows (items and what hangs off them: provenance links, vectors, labels) cascade away
with the turns they came from, so a deleted turn can never come back from any engine.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CuememError, TurnNotFoundError, UnknownNamespaceError
from ..types import Namespace, Turn

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    UNIQUE(user_id, agent_id, run_id)
);
-- The durable log: rows are inserted and deleted, never updated.
CREATE TABLE IF NOT EXISTS turns(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    turn_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    added_at REAL NOT NULL,
    UNIQUE(ns, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_by_ns ON turns(ns, seq);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(ns, session_id, seq);
-- Derived documents that engines index (a turn, a window, a record ...), in named spaces.
CREATE TABLE IF NOT EXISTS items(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    space TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    tokens INTEGER NOT NULL DEFAULT 0,
    UNIQUE(ns, space, key)
);
CREATE INDEX IF NOT EXISTS items_by_space ON items(ns, space, id);
-- Provenance: which turns an item came from.
CREATE TABLE IF NOT EXISTS item_turns(
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    turn_seq INTEGER NOT NULL,
    PRIMARY KEY(item, turn_seq)
);
CREATE INDEX IF NOT EXISTS item_turns_by_turn ON item_turns(ns, turn_seq);
CREATE TABLE IF NOT EXISTS vectors(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    space TEXT NOT NULL,
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    UNIQUE(item, model)
);
CREATE INDEX IF NOT EXISTS vectors_by_space ON vectors(ns, space, model, id);
CREATE TABLE IF NOT EXISTS labels(
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY(item, kind, label)
);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(ns, kind, label);
CREATE TABLE IF NOT EXISTS kv(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY(ns, engine, key)
);
CREATE TABLE IF NOT EXISTS embed_cache(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY(ns, text_hash, model)
);
-- How far each engine has ingested each namespace's log (crash-safe catch-up).
CREATE TABLE IF NOT EXISTS watermarks(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    upto INTEGER NOT NULL,
    PRIMARY KEY(ns, engine)
);
-- Bumped whenever derived rows of a namespace are removed: in-memory indexes rebuild on a new epoch.
CREATE TABLE IF NOT EXISTS epochs(ns INTEGER PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS history(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER,
    at REAL NOT NULL,
    op TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS history_by_ns ON history(ns, id);
"""


class StoreError(CuememError):
    """The store file cannot be opened or written (not a cuemem store, locked, disk full ...)."""


def text_hash(text: str) -> str:
    """The key of the embedding cache: SHA-1 of the exact text embedded."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# Every derived table keyed by namespace; items' dependants cascade through foreign keys.
DERIVED_TABLES = ("items", "kv", "embed_cache", "watermarks")


@dataclass
class Item:
    """A derived document: what an engine indexes, with the turns it came from."""

    id: int
    key: str
    text: str
    meta: dict[str, Any]
    turn_ids: list[str]
    tokens: int = 0


@dataclass
class AppendResult:
    """Which turns a write stored and which it skipped because their id was already in the log."""

    added: list[Turn]
    skipped: list[str]


class SQLiteStore:
    """Durable log of raw turns plus derived tables, per namespace; safe to share between threads."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = Path(path) if str(path) != ":memory:" else Path(":memory:")
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()  # guards the connection and the in-memory indexes in `cache`
        self._depth = 0
        self.cache: dict[Any, Any] = {}  # in-memory indexes built from this store (see index/live.py)
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before add() returns, so acknowledged turns survive a crash.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            self._conn.executescript(SCHEMA)
            self._conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self.path} as a cuemem store: {exc}") from exc

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self.lock:
            self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE). A nested call is a savepoint: if it fails, only its own
        writes are undone, whether or not the caller goes on."""
        with self.lock:
            depth = self._depth
            try:
                self._conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT sp{depth}")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot write to {self.path}: {exc}") from exc
            self._depth += 1
            try:
                yield self._conn
            except BaseException:
                self._depth = depth
                if depth == 0:
                    self._conn.execute("ROLLBACK")
                else:
                    self._conn.execute(f"ROLLBACK TO sp{depth}")
                    self._conn.execute(f"RELEASE sp{depth}")
                raise
            self._depth = depth
            if depth > 0:
                self._conn.execute(f"RELEASE sp{depth}")
                return
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"could not commit to {self.path}: {exc}") from exc

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return self._conn.execute(sql, params).fetchall()

    def integrity_check(self) -> str:
        return self._query("PRAGMA integrity_check")[0][0]

    # ------------------------------------------------------------------ namespaces
    def namespace_id(self, namespace: Namespace, *, create: bool = False) -> int:
        """The store's id for a namespace; unknown namespaces raise unless `create`."""
        key = (namespace.user_id, namespace.agent_id or "", namespace.run_id or "")
        rows = self._query("SELECT id FROM namespaces WHERE user_id=? AND agent_id=? AND run_id=?", key)
        if rows:
            return rows[0][0]
        if not create:
            raise UnknownNamespaceError(f"unknown namespace ({namespace}): nothing was ever added to it")
        with self.transaction() as c:
            c.execute(
                "INSERT OR IGNORE INTO namespaces(user_id, agent_id, run_id, created_at) VALUES(?,?,?,?)",
                (*key, time.time()),
            )
            return c.execute("SELECT id FROM namespaces WHERE user_id=? AND agent_id=? AND run_id=?", key).fetchone()[0]

    def namespaces(self) -> list[tuple[Namespace, int]]:
        """Every namespace with its number of turns."""
        rows = self._query(
            "SELECT n.user_id, n.agent_id, n.run_id, (SELECT COUNT(*) FROM turns t WHERE t.ns = n.id)"
            " FROM namespaces n ORDER BY n.id"
        )
        return [(Namespace(u, a or None, r or None), count) for u, a, r, count in rows]

    def _namespace_of(self, ns: int) -> Namespace:
        rows = self._query("SELECT user_id, agent_id, run_id FROM namespaces WHERE id=?", (ns,))
        if not rows:
            raise UnknownNamespaceError(f"namespace id {ns} does not exist")
        u, a, r = rows[0]
        return Namespace(u, a or None, r or None)

    # ------------------------------------------------------------------ the raw log
    def append_turns(self, ns: int, turns: Sequence[Turn]) -> AppendResult:
        """Append turns in one transaction; a turn whose id is already logged in `ns` is skipped untouched."""
        added: list[Turn] = []
        skipped: list[str] = []
        now = time.time()
        with self.transaction() as c:
            for turn in turns:
                cur = c.execute(
                    "INSERT OR IGNORE INTO turns(ns, turn_id, session_id, speaker, text, timestamp, metadata,"
                    " added_at) VALUES(?,?,?,?,?,?,?,?)",
                    (
                        ns,
                        turn.id,
                        turn.session_id,
                        turn.speaker,
                        turn.text,
                        turn.timestamp,
                        json.dumps(turn.metadata, ensure_ascii=False),
                        now,
                    ),
                )
                if cur.rowcount == 1:
                    turn.seq = cur.lastrowid
                    added.append(turn)
                else:
                    skipped.append(turn.id)
            if added:
                self._log(c, ns, "add", {"turn_ids": [t.id for t in added], "skipped": len(skipped)})
        return AppendResult(added, skipped)

    def _row_to_turn(self, row: tuple[Any, ...], namespace: Namespace | None) -> Turn:
        seq, turn_id, session_id, speaker, text, timestamp, metadata = row
        return Turn(
            id=turn_id,
            text=text,
            speaker=speaker,
            session_id=session_id,
            timestamp=timestamp,
            metadata=json.loads(metadata),
            namespace=namespace,
            seq=seq,
        )

    _TURN_COLS = "seq, turn_id, session_id, speaker, text, timestamp, metadata"

    def get_turn(self, ns: int, turn_id: str) -> Turn:
        rows = self._query(f"SELECT {self._TURN_COLS} FROM turns WHERE ns=? AND turn_id=?", (ns, turn_id))
        if not rows:
            raise TurnNotFoundError(f"no turn {turn_id!r} in namespace ({self._namespace_of(ns)})")
        return self._row_to_turn(rows[0], self._namespace_of(ns))

    def iter_turns(
        self, ns: int, *, after_seq: int = 0, session_id: str | None = None, batch: int = 1000
    ) -> Iterator[Turn]:
        """The namespace's turns in log order, read in batches (constant memory)."""
        namespace = self._namespace_of(ns)
        last = after_seq
        while True:
            sql = f"SELECT {self._TURN_COLS} FROM turns WHERE ns=? AND seq>?"
            params: list[Any] = [ns, last]
            if session_id is not None:
                sql += " AND session_id=?"
                params.append(session_id)
            rows = self._query(sql + " ORDER BY seq LIMIT ?", (*params, batch))
            if not rows:
                return
            for row in rows:
                yield self._row_to_turn(row, namespace)
            last = rows[-1][0]

    def count_turns(self, ns: int) -> int:
        return self._query("SELECT COUNT(*) FROM turns WHERE ns=?", (ns,))[0][0]

    def turn_ids_for_seqs(self, ns: int, seqs: Iterable[int]) -> dict[int, str]:
        seqs = list(seqs)
        out: dict[int, str] = {}
        for chunk in _chunks(seqs, 500):
            marks = ",".join("?" * len(chunk))
            for seq, tid in self._query(
                f"SELECT seq, turn_id FROM turns WHERE +ns=? AND seq IN ({marks})", (ns, *chunk)
            ):
                out[seq] = tid
        return out

    # ------------------------------------------------------------------ deletion
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int:
        """Delete turns (by id, or a whole session) and every derived row that came from them."""
        with self.transaction() as c:
            if session_id is not None:
                seqs = [r[0] for r in c.execute("SELECT seq FROM turns WHERE ns=? AND session_id=?", (ns, session_id))]
            else:
                seqs = []
                for chunk in _chunks(list(turn_ids or []), 500):
                    marks = ",".join("?" * len(chunk))
                    seqs += [
                        r[0]
                        for r in c.execute(f"SELECT seq FROM turns WHERE ns=? AND turn_id IN ({marks})", (ns, *chunk))
                    ]
            if not seqs:
                return 0
            deleted_ids = self.turn_ids_for_seqs(ns, seqs)
            partial = False
            for chunk in _chunks(seqs, 500):
                marks = ",".join("?" * len(chunk))
                items = [
                    r[0]
                    for r in c.execute(
                        f"SELECT DISTINCT item FROM item_turns WHERE ns=? AND turn_seq IN ({marks})",
                        (ns, *chunk),
                    )
                ]
                for ichunk in _chunks(items, 500):
                    imarks = ",".join("?" * len(ichunk))
                    # An item that also covered surviving turns must be rebuilt from them: engines re-ingest.
                    survivors = c.execute(
                        f"SELECT COUNT(*) FROM item_turns WHERE item IN ({imarks}) AND turn_seq NOT IN ({marks})",
                        (*ichunk, *chunk),
                    ).fetchone()[0]
                    partial = partial or survivors > 0
                    # The cache forgets what was embedded for these items: their text, and whatever text their
                    # vectors came from (an engine may embed another rendering than the item's text).
                    texts = c.execute(f"SELECT text FROM items WHERE +ns=? AND id IN ({imarks})", (ns, *ichunk))
                    hashes = {text_hash(t) for (t,) in texts}
                    sql = f"SELECT text_hash FROM vectors WHERE item IN ({imarks}) AND +ns=?"
                    embedded = c.execute(sql, (*ichunk, ns))
                    hashes.update(h for (h,) in embedded)
                    c.executemany("DELETE FROM embed_cache WHERE ns=? AND text_hash=?", [(ns, h) for h in hashes])
                    c.execute(f"DELETE FROM items WHERE +ns=? AND id IN ({imarks})", (ns, *ichunk))
                c.execute(f"DELETE FROM turns WHERE +ns=? AND seq IN ({marks})", (ns, *chunk))
            if partial:
                c.execute("DELETE FROM watermarks WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            op = "delete_session" if session_id is not None else "delete"
            self._log(c, ns, op, {"turn_ids": sorted(deleted_ids.values()), "session_id": session_id})
        return len(seqs)

    def delete_namespace(self, ns: int) -> int:
        """Remove a namespace with its log, every derived row and its history."""
        with self.transaction() as c:
            count = c.execute("SELECT COUNT(*) FROM turns WHERE ns=?", (ns,)).fetchone()[0]
            for table in DERIVED_TABLES:
                c.execute(f"DELETE FROM {table} WHERE ns=?", (ns,))
            c.execute("DELETE FROM turns WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            c.execute("DELETE FROM history WHERE ns=?", (ns,))
            c.execute("DELETE FROM namespaces WHERE id=?", (ns,))
            # The record of the deletion names no user: only that a namespace and how many turns went.
            self._log(c, None, "delete_namespace", {"turns": count})
        self.drop_cached(ns)
        return count

    def clear_derived(self, ns: int) -> None:
        """Drop every derived row of a namespace (the log stays): the first half of a reindex."""
        with self.transaction() as c:
            c.execute("DELETE FROM items WHERE ns=?", (ns,))
            c.execute("DELETE FROM kv WHERE ns=?", (ns,))
            c.execute("DELETE FROM watermarks WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            self._log(c, ns, "reindex", {})
        self.drop_cached(ns)

    # ------------------------------------------------------------------ derived items
    def put_items(
        self, ns: int, space: str, rows: Sequence[tuple[str, str, dict[str, Any], Sequence[int], int]]
    ) -> None:
        """Insert (key, text, meta, source turn seqs, token count) items; an existing key is kept (idempotent),
        and an item whose source turns are not all in the log (deleted meanwhile) is not created."""
        with self.transaction() as c:
            for key, text, meta, seqs, tokens in rows:
                wanted = sorted(set(seqs))
                if wanted:
                    marks = ",".join("?" * len(wanted))
                    alive = c.execute(
                        f"SELECT COUNT(*) FROM turns WHERE +ns=? AND seq IN ({marks})", (ns, *wanted)
                    ).fetchone()[0]
                    if alive != len(wanted):
                        continue
                cur = c.execute(
                    "INSERT OR IGNORE INTO items(ns, space, key, text, meta, tokens) VALUES(?,?,?,?,?,?)",
                    (ns, space, key, text, json.dumps(meta, ensure_ascii=False), tokens),
                )
                if cur.rowcount == 1:
                    c.executemany(
                        "INSERT OR IGNORE INTO item_turns(item, ns, turn_seq) VALUES(?,?,?)",
                        [(cur.lastrowid, ns, s) for s in seqs],
                    )

    def item_ids(self, ns: int, space: str, keys: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for chunk in _chunks(list(keys), 500):
            marks = ",".join("?" * len(chunk))
            for key, item_id in self._query(
                f"SELECT key, id FROM items WHERE ns=? AND space=? AND key IN ({marks})", (ns, space, *chunk)
            ):
                out[key] = item_id
        return out

    def items_after(self, ns: int, space: str, after_id: int) -> list[tuple[int, str]]:
        """(id, text) of the space's items newer than `after_id`, in id order: feeds incremental indexes."""
        return self._query(
            "SELECT id, text FROM items WHERE ns=? AND space=? AND id>? ORDER BY id", (ns, space, after_id)
        )

    def get_items(self, ns: int, ids: Sequence[int]) -> dict[int, Item]:
        """Items by id with the ids of their source turns (provenance)."""
        out: dict[int, Item] = {}
        for chunk in _chunks(list(ids), 500):
            marks = ",".join("?" * len(chunk))
            for item_id, key, text, meta, tokens in self._query(
                f"SELECT id, key, text, meta, tokens FROM items WHERE +ns=? AND id IN ({marks})", (ns, *chunk)
            ):
                out[item_id] = Item(item_id, key, text, json.loads(meta), [], tokens)
            for item_id, turn_id in self._query(
                # CROSS JOIN and unary +: look up by item id, then turn seq, never scan the namespace.
                f"SELECT it.item, t.turn_id FROM item_turns it CROSS JOIN turns t ON t.seq = it.turn_seq"
                f" WHERE it.item IN ({marks}) AND +it.ns=? AND +t.ns=? ORDER BY t.seq",
                (*chunk, ns, ns),
            ):
                if item_id in out:
                    out[item_id].turn_ids.append(turn_id)
        return out

    def items_in_order(self, ns: int, space: str) -> list[tuple[int, int]]:
        """(id, token count) of every item of a space, in log order of their first source turn."""
        return self._query(
            "SELECT i.id, i.tokens FROM items i JOIN item_turns it ON it.item = i.id"
            " WHERE i.ns=? AND i.space=? GROUP BY i.id ORDER BY MIN(it.turn_seq)",
            (ns, space),
        )

    # ------------------------------------------------------------------ vectors and the embedding cache
    def items_without_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> list[tuple[int, str]]:
        """(id, text) of those of the given items that have no vector from `model` yet."""
        out: list[tuple[int, str]] = []
        for chunk in _chunks(sorted(set(item_ids)), 500):
            marks = ",".join("?" * len(chunk))
            out += self._query(
                f"SELECT i.id, i.text FROM items i WHERE i.id IN ({marks}) AND +i.ns=? AND NOT EXISTS"
                " (SELECT 1 FROM vectors v WHERE v.item = i.id AND v.model=?) ORDER BY i.id",
                (*chunk, ns, model),
            )
        return out

    def put_vectors(self, ns: int, space: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Store (item id, text hash, vector) rows, and remember each vector in the embedding cache."""
        with self.transaction() as c:
            for item_id, digest, vec in rows:
                blob = np.asarray(vec, dtype=np.float32).tobytes()
                cur = c.execute(  # nothing is written for an item deleted while it was being embedded
                    "INSERT OR IGNORE INTO vectors(item, ns, space, model, text_hash, vec)"
                    " SELECT id, ns, ?, ?, ?, ? FROM items WHERE id=? AND +ns=?",
                    (space, model, digest, blob, item_id, ns),
                )
                if cur.rowcount:
                    c.execute(
                        "INSERT OR IGNORE INTO embed_cache(ns, model, text_hash, vec) VALUES(?,?,?,?)",
                        (ns, model, digest, blob),
                    )

    def vectors_after(self, ns: int, space: str, model: str, after_id: int) -> list[tuple[int, int, bytes]]:
        """(vector row id, item id, float32 bytes) newer than `after_id`: feeds the in-memory dense index."""
        return self._query(
            "SELECT id, item, vec FROM vectors WHERE ns=? AND space=? AND model=? AND id>? ORDER BY id",
            (ns, space, model, after_id),
        )

    def cache_embeddings(self, ns: int, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None:
        """Remember (text hash, vector) rows of texts that are not items (e.g. vocabulary labels)."""
        with self.transaction() as c:
            c.executemany(
                "INSERT OR IGNORE INTO embed_cache(ns, model, text_hash, vec) VALUES(?,?,?,?)",
                [(ns, model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in rows],
            )

    def cached_embeddings(self, ns: int, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for chunk in _chunks(list(set(hashes)), 500):
            marks = ",".join("?" * len(chunk))
            for h, blob in self._query(
                f"SELECT text_hash, vec FROM embed_cache WHERE ns=? AND model=? AND text_hash IN ({marks})",
                (ns, model, *chunk),
            ):
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return out

    # ------------------------------------------------------------------ labels and key-value state
    def put_labels(self, ns: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """(item id, kind, label) rows, e.g. an event type or an entity type of a step."""
        with self.transaction() as c:
            c.executemany(
                "INSERT OR IGNORE INTO labels(item, ns, kind, label) VALUES(?,?,?,?)",
                [(item, ns, kind, label) for item, kind, label in rows],
            )

    def relabel(self, ns: int, kind: str, mapping: dict[str, str], items: Sequence[int] | None = None) -> int:
        """Rename labels of one kind (old -> new), on every item of the namespace or only on `items`; an item
        that already has the new label keeps one copy. Returns how many label rows changed."""
        changed = 0
        with self.transaction() as c:
            for old, new in mapping.items():
                scope, params = "", [ns, kind, old]
                if items is not None:
                    scope = f" AND item IN ({','.join('?' * len(items))})"
                    params += list(items)
                rows = c.execute(f"SELECT item FROM labels WHERE ns=? AND kind=? AND label=?{scope}", params).fetchall()
                c.executemany(
                    "INSERT OR IGNORE INTO labels(item, ns, kind, label) VALUES(?,?,?,?)",
                    [(item, ns, kind, new) for (item,) in rows],
                )
                c.execute(f"DELETE FROM labels WHERE ns=? AND kind=? AND label=?{scope}", params)
                changed += len(rows)
        return changed

    def labels_in_space(self, ns: int, space: str) -> list[tuple[int, str, str]]:
        """(item id, kind, label) of every labelled item of a space, in item order."""
        return self._query(
            "SELECT l.item, l.kind, l.label FROM labels l JOIN items i ON i.id = l.item"
            " WHERE l.ns=? AND i.ns=? AND i.space=? ORDER BY l.item",
            (ns, ns, space),
        )

    def items_with_label(self, ns: int, kind: str, label: str) -> list[int]:
        return [
            r[0] for r in self._query("SELECT item FROM labels WHERE ns=? AND kind=? AND label=?", (ns, kind, label))
        ]

    def labels_of(self, ns: int, item: int) -> list[tuple[str, str]]:
        return self._query("SELECT kind, label FROM labels WHERE ns=? AND item=? ORDER BY kind, label", (ns, item))

    def kv_set(self, ns: int, engine: str, key: str, value: Any) -> None:
        with self.transaction() as c:
            c.execute(
                "INSERT INTO kv(ns, engine, key, value) VALUES(?,?,?,?)"
                " ON CONFLICT(ns, engine, key) DO UPDATE SET value=excluded.value",
                (ns, engine, key, json.dumps(value, ensure_ascii=False)),
            )

    def kv_get(self, ns: int, engine: str, key: str, default: Any = None) -> Any:
        rows = self._query("SELECT value FROM kv WHERE ns=? AND engine=? AND key=?", (ns, engine, key))
        return json.loads(rows[0][0]) if rows else default

    # ------------------------------------------------------------------ engine progress and cache epochs
    def watermark(self, ns: int, engine: str) -> int:
        rows = self._query("SELECT upto FROM watermarks WHERE ns=? AND engine=?", (ns, engine))
        return rows[0][0] if rows else 0

    def set_watermark(self, ns: int, engine: str, upto: int) -> None:
        with self.transaction() as c:
            c.execute(
                "INSERT INTO watermarks(ns, engine, upto) VALUES(?,?,?)"
                " ON CONFLICT(ns, engine) DO UPDATE SET upto=MAX(upto, excluded.upto)",
                (ns, engine, upto),
            )

    def epoch(self, ns: int) -> int:
        rows = self._query("SELECT epoch FROM epochs WHERE ns=?", (ns,))
        return rows[0][0] if rows else 0

    def _bump_epoch(self, c: sqlite3.Connection, ns: int) -> None:
        c.execute(
            "INSERT INTO epochs(ns, epoch) VALUES(?, 1) ON CONFLICT(ns) DO UPDATE SET epoch = epoch + 1",
            (ns,),
        )

    def drop_cached(self, ns: int) -> None:
        with self.lock:
            for key in [k for k in self.cache if isinstance(k, tuple) and len(k) > 1 and k[1] == ns]:
                del self.cache[key]

    # ------------------------------------------------------------------ history
    def _log(self, c: sqlite3.Connection, ns: int | None, op: str, detail: dict[str, Any]) -> None:
        c.execute(
            "INSERT INTO history(ns, at, op, detail) VALUES(?,?,?,?)",
            (ns, time.time(), op, json.dumps(detail, ensure_ascii=False)),
        )

    def history(self, ns: int, limit: int = 100) -> list[dict[str, Any]]:
        """The namespace's changes, newest first."""
        rows = self._query("SELECT id, at, op, detail FROM history WHERE ns=? ORDER BY id DESC LIMIT ?", (ns, limit))
        return [{"id": i, "at": at, "op": op, **json.loads(detail)} for i, at, op, detail in rows]


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]
