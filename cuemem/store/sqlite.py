"""The embedded store: SQLite in WAL mode holding the raw turn log and every derived row (docs/design.md promises 1-3).

The turn log, derived state and the forgetting cascade are `SQLStore`'s (sql.py), whose SQL is written in SQLite's
spelling; this module keeps what is SQLite's own: the file (pragmas, WAL, `secure_delete`, which zeroes the bytes
a delete frees), its schema and migrations, the write lock (`BEGIN IMMEDIATE`), the reading connection and exact
vector search over an in-process matrix.

Opening never writes unless the file is new or needs a migration; `read_only=True` opens the file read-only, so
reads neither wait behind a writer nor need write access. A file of another application, or of a newer cuemem,
is refused untouched.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StoreError
from . import scrub
from .base import AppendResult, Item, NewItem, Scores, text_hash
from .sql import DERIVED_TABLES, SQLStore
from .vectors import DenseIndex

__all__ = [
    "DERIVED_TABLES",
    "SCHEMA_VERSION",
    "AppendResult",
    "Item",
    "NewItem",
    "SQLiteStore",
    "StoreError",
    "text_hash",
]

SCHEMA_VERSION = 2
APPLICATION_ID = 0x63756D6D  # "cumm": marks a SQLite file as a cuemem store

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
-- Who owns which derived item spaces, and what a delete does to them (DerivedSpec).
CREATE TABLE IF NOT EXISTS derived_specs(
    owner TEXT NOT NULL,
    space TEXT NOT NULL,
    on_delete TEXT NOT NULL,
    PRIMARY KEY(owner, space)
);
-- Derived documents that engines index (a turn, a step, a window, a record ...), in named spaces.
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
-- Dependencies of an item on turns: cited = 1 for its provenance, 0 for turns it only quotes.
CREATE TABLE IF NOT EXISTS item_turns(
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    turn_seq INTEGER NOT NULL,
    cited INTEGER NOT NULL DEFAULT 1,
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
-- Engine state (derived like the rest: dropped with its owner's other rows).
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
-- Model calls made on behalf of a namespace: purged by every delete in it (a prompt may quote any turn).
CREATE TABLE IF NOT EXISTS llm_calls(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    key TEXT NOT NULL,
    backend TEXT NOT NULL,
    method TEXT NOT NULL,
    stage TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    at REAL NOT NULL,
    PRIMARY KEY(ns, key)
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


def _migrate_1_to_2(c: sqlite3.Connection) -> None:
    """v2: items record quoted (not cited) turns, owners declare their spaces, model calls live per namespace.
    Derived rows of v1 are dropped: engines rebuild them from the log (promise 1)."""
    c.execute("ALTER TABLE item_turns ADD COLUMN cited INTEGER NOT NULL DEFAULT 1")
    for table in ("items", "kv", "watermarks"):
        c.execute(f"DELETE FROM {table}")
    # Namespace ids are NFC-normalised and stripped from v2 on (types.Namespace): bring old ids in line, unless
    # that would merge two namespaces (then the old id stays, still listed, exported and deletable as it is).
    for ns, *ids in c.execute("SELECT id, user_id, agent_id, run_id FROM namespaces").fetchall():
        clean = [unicodedata.normalize("NFC", v).strip() for v in ids]
        if (
            clean != ids
            and clean[0]
            and not c.execute("SELECT 1 FROM namespaces WHERE user_id=? AND agent_id=? AND run_id=?", clean).fetchone()
        ):
            c.execute("UPDATE namespaces SET user_id=?, agent_id=?, run_id=? WHERE id=?", (*clean, ns))


MIGRATIONS = {1: _migrate_1_to_2}


class SQLiteStore(SQLStore):
    """Durable log of raw turns plus derived tables, per namespace; safe to share between threads and processes."""

    def __init__(
        self, path: str | Path, *, read_only: bool = False, timeout: float = 30.0, scrub_after_s: float | None = None
    ) -> None:
        """`scrub_after_s`: seconds from a delete's commit to the checkpoint that takes its bytes out of the
        write-ahead log (scrub.py; default SQLITE_SCRUB_AFTER_S)."""
        self.path = Path(path)
        self.read_only = read_only
        self._timeout = timeout
        self._lock = threading.RLock()  # guards the writing connection and its transaction
        self._read_lock = threading.RLock()  # guards the reading connection
        self._vec_lock = threading.RLock()  # guards the vector matrices
        self._depth = 0
        self._owner: int | None = None  # the thread inside the write transaction
        self._reader: sqlite3.Connection | None = None
        self._vectors: dict[tuple[int, str, str], tuple[int, DenseIndex, int]] = {}  # (ns, space, model) -> cache
        memory = str(path) == ":memory:"
        if not memory and not self.path.exists():
            if read_only:
                raise StoreError(f"no store at {self.path}: nothing to read")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target = str(path) if memory else str(self.path)
        uri = False
        if read_only and not memory:
            target, uri = self.path.resolve().as_uri() + "?mode=ro", True
        try:
            self._conn = sqlite3.connect(
                target, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri
            )
            self._conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            # Freed pages are zeroed: a deleted turn's bytes do not linger in the file (stock builds default off).
            self._conn.execute("PRAGMA secure_delete=ON")
            # FULL: a commit is on disk before add() returns, so acknowledged turns survive a crash.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._open()
            if not memory:  # a second connection for reads outside this process's write transaction
                self._reader = sqlite3.connect(
                    target, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri
                )
                self._reader.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                self._reader.execute("PRAGMA query_only=ON")
        except sqlite3.DatabaseError as exc:
            if hasattr(self, "_conn"):
                self._conn.close()
            raise StoreError(f"cannot open {self.path} as a cuemem store: {exc}") from exc
        except StoreError:
            self._conn.close()
            raise
        if not memory and not read_only:
            delay = scrub.SQLITE_SCRUB_AFTER_S if scrub_after_s is None else scrub_after_s
            self._scrubber = scrub.Scrubber(self._scrub, delay, str(self.path))

    def _open(self) -> None:
        """Check what the file is; create, migrate or refuse it. Reads only, unless it is new or old."""
        c = self._conn
        app = c.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            if app not in (0, APPLICATION_ID):
                raise StoreError(f"{self.path} belongs to another application (application_id {app}); left as is")
            if self.read_only:
                raise StoreError(f"{self.path} is empty: not a cuemem store yet")
            self._initialise()
        else:
            self._check(app, tables)
        self._salt = bytes.fromhex(c.execute("SELECT value FROM meta WHERE key='salt'").fetchone()[0])

    def _check(self, app: int, tables: set[str]) -> None:
        c = self._conn
        version = None
        if "meta" in tables:
            row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row and str(row[0]).isdigit() else None
        if version is None or (app not in (0, APPLICATION_ID)) or (app == 0 and "turns" not in tables):
            raise StoreError(f"{self.path} is not a cuemem store (a SQLite file of another application); left as is")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has cuemem schema version {version}, newer than this cuemem supports"
                f" ({SCHEMA_VERSION}); upgrade cuemem. The file was left as is."
            )
        if version < SCHEMA_VERSION:
            if self.read_only:
                raise StoreError(
                    f"{self.path} has cuemem schema version {version}; open it once for writing to migrate it"
                    f" to version {SCHEMA_VERSION}"
                )
            self._migrate(version)

    def _schema(self, c: sqlite3.Connection) -> None:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                c.execute(statement)

    def _wal(self) -> None:
        """Switch the file to WAL, retried until the timeout: processes racing to create one file can be answered
        "database is locked" at once, since SQLite skips the busy wait where waiting could deadlock."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _initialise(self) -> None:
        self._wal()
        with self._write() as c:
            self._schema(c)
            c.execute(f"PRAGMA application_id={APPLICATION_ID}")
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('salt', ?)", (secrets.token_hex(16),))

    def _migrate(self, version: int) -> None:
        self._wal()
        with self._write() as c:
            current = int(c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
            if current >= SCHEMA_VERSION:
                return  # another process migrated it meanwhile
            while current < SCHEMA_VERSION:
                MIGRATIONS[current](c)
                current += 1
            self._schema(c)
            c.execute(f"PRAGMA application_id={APPLICATION_ID}")
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('salt', ?)", (secrets.token_hex(16),))
            self._log(c, None, "migrate", {"from": version, "to": SCHEMA_VERSION})

    # ------------------------------------------------------------------ connections and transactions
    def close(self) -> None:
        """Run a pending scrub (a delete's bytes leave the log before the process may exit), then close."""
        if self._scrubber is not None:
            self._scrubber.close()
        with self._lock:
            self._conn.close()
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one consistent state of the store (a read transaction); nothing may be written inside.
        Inside this thread's own write transaction it changes nothing."""
        if self._owner == threading.get_ident():
            yield
            return
        if self._reader is None:  # ":memory:": one connection, so the snapshot is taken on it
            with self._lock:
                self._conn.execute("BEGIN")
                self._owner = threading.get_ident()
                try:
                    yield
                finally:
                    self._owner = None
                    self._conn.execute("COMMIT")
            return
        with self._read_lock:  # on the reading connection: a writer in another thread is not waited for
            self._reader.execute("BEGIN")
            try:
                yield
            finally:
                self._reader.execute("COMMIT")

    @contextmanager
    def _write(self, ns: int | None = None, *, patient: bool = True) -> Iterator[sqlite3.Connection]:
        """One writer at a time on the whole file, whatever `ns` (SQLite's own lock, `BEGIN IMMEDIATE`). Not
        `patient`: a writer in another thread is not waited for, one in another process 20 ms at most; then
        StoreError."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; this needs to write")
        if not self._lock.acquire(blocking=patient):
            raise StoreError(f"{self.path} is being written by another thread; not waited for")
        try:
            depth = self._depth
            try:
                if not patient and depth == 0:
                    self._conn.execute("PRAGMA busy_timeout=20")
                try:
                    self._conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT sp{depth}")
                finally:
                    if not patient and depth == 0:
                        self._conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot write to {self.path}: {exc}") from exc
            self._depth += 1
            self._owner = threading.get_ident()
            try:
                yield self._conn
            except BaseException as exc:
                self._depth = depth
                if depth == 0:
                    self._owner = None
                    self._rolled_back()
                with self._vec_lock:
                    self._vectors.clear()  # matrices may hold rows that are being rolled back
                conn = self._conn
                undo = (lambda: conn.execute("ROLLBACK")) if depth == 0 else (lambda: self._rollback_to(conn, depth))
                self._undo(exc, undo, sqlite3.Error, self._write_failed)
            self._depth = depth
            if depth > 0:
                self._conn.execute(f"RELEASE SAVEPOINT sp{depth}")
                return
            self._owner = None
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rolled_back()
                with self._vec_lock:
                    self._vectors.clear()
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise self._write_failed(exc) from exc
            self._committed()
        finally:
            self._lock.release()

    def _write_failed(self, exc: sqlite3.Error) -> StoreError:
        """The error a failed write reports: the real cause (a full disk above all), never the failed rollback
        that follows it; the transaction was undone, so what was stored before is intact."""
        if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc).lower():
            return StoreError(
                f"disk full: {self.path} could not be written ({exc}); this write was undone and"
                " everything stored before is intact. Free some space and try again."
            )
        return StoreError(f"could not write to {self.path}: {exc}; this write was undone")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read: inside this thread's write transaction on its connection (it sees its own writes), else on
        the reader connection, so reads never wait for another thread's transaction."""
        if self._owner == threading.get_ident() or self._reader is None:
            lock, conn = self._lock, self._conn
        else:
            lock, conn = self._read_lock, self._reader
        with lock:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot read {self.path}: {exc}") from exc

    def integrity_check(self) -> str:
        return self._query("PRAGMA integrity_check")[0][0]

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the main file and truncate it (after a delete: no old page survives)."""
        if self.read_only or str(self.path) == ":memory:":
            return
        if self._truncate_wal(wait=True):
            raise StoreError(
                f"{self.path}: another connection is reading, so the write-ahead log could not be truncated yet;"
                " retry the checkpoint when it is done (until then, deleted pages may remain in the log)"
            )
        if self._scrubber is not None:
            self._scrubber.done()

    def _truncate_wal(self, *, wait: bool) -> bool:
        """PRAGMA wal_checkpoint(TRUNCATE) on the writing connection (between transactions: it holds the writer
        lock); True when a reader kept it from finishing. Without `wait`, readers are waited for 50 ms only, so
        the background scrub never holds the writer lock for long."""
        with self._lock:
            try:
                if not wait:
                    self._conn.execute("PRAGMA busy_timeout=50")
                try:
                    busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    if not wait:
                        self._conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot checkpoint {self.path}: {exc}") from exc
        return bool(busy)

    def _scrub(self, tables: set[str], wait: bool) -> set[str]:
        """The scrub after a delete (scrub.py): the write-ahead log, which still holds the pages as they were
        before the delete, is folded into the main file (whose freed bytes secure_delete zeroed) and truncated."""
        busy = self._truncate_wal(wait=wait)
        return (tables or {"wal"}) if busy else set()

    # ------------------------------------------------------------------ exact vector search
    def vector_search(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k (item id, cosine) among one namespace's vectors of one space and model (an in-process matrix,
        grown with new rows and rebuilt when the namespace's epoch changes)."""
        with self._vec_lock:
            return self._dense_index(ns, space, model).search(vector, k)

    def vector_scores(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> Scores:
        """`vector_search` as arrays (item ids, cosines), best first."""
        with self._vec_lock:
            return self._dense_index(ns, space, model).scores(vector, k)

    def _dense_index(self, ns: int, space: str, model: str) -> DenseIndex:
        """The namespace's matrix of one space and model, caught up with the rows written since (under the lock)."""
        key = (ns, space, model)
        epoch = self.epoch(ns)
        cached = self._vectors.get(key)
        index, after = (cached[1], cached[2]) if cached is not None and cached[0] == epoch else (DenseIndex(), 0)
        for row_id, item_id, blob in self._query(
            "SELECT id, item, vec FROM vectors WHERE ns=? AND space=? AND model=? AND id>? ORDER BY id",
            (ns, space, model, after),
        ):
            index.add(item_id, np.frombuffer(blob, dtype=np.float32))
            after = row_id
        self._vectors[key] = (epoch, index, after)
        return index
