"""The embedded store: SQLite in WAL mode holding the raw turn log and every derived row (docs/design.md promises 1-3).

Namespaces are hard partitions: every query below that reads or writes user data names `ns` in its WHERE
clause or key. Derived rows are declared by their owners (`DerivedSpec`) and record the turns they cite and
depend on; a delete removes exactly what depends on the deleted turns (or marks an owner for rebuild) in the same
transaction, purges the namespace's cached model calls, and `secure_delete` zeroes the freed bytes.

Opening never writes unless the file is new or needs a migration; `read_only=True` opens the file read-only, so
reads neither wait behind a writer nor need write access. A file of another application, or of a newer cuemem,
is refused untouched.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StoreError, TurnNotFoundError, UnknownNamespaceError
from ..types import Namespace, Turn
from .base import AppendResult, CachedCall, DerivedSpec, Item, NewItem, canonical_state, text_hash
from .vectors import DenseIndex

__all__ = ["SCHEMA_VERSION", "AppendResult", "Item", "NewItem", "SQLiteStore", "StoreError", "text_hash"]

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

# Every derived table keyed by namespace; items' dependants cascade through foreign keys.
DERIVED_TABLES = ("items", "kv", "embed_cache", "llm_calls", "watermarks")


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


class SQLiteStore:
    """Durable log of raw turns plus derived tables, per namespace; safe to share between threads and processes."""

    def __init__(self, path: str | Path, *, read_only: bool = False, timeout: float = 30.0) -> None:
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

    # ------------------------------------------------------------------ plumbing
    @property
    def salt(self) -> bytes:
        """This store's random salt: derived ids and cache keys are not guessable from content without it."""
        return self._salt

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction (BEGIN IMMEDIATE: one writer across threads and processes). A nested call is a
        savepoint: if it fails, only its own writes are undone, whether or not the caller goes on. Other threads'
        reads meanwhile go through a second connection and see the last commit, without waiting."""
        with self._write():
            yield

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
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; this needs to write")
        with self._lock:
            depth = self._depth
            try:
                self._conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT sp{depth}")
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
                with self._vec_lock:
                    self._vectors.clear()  # matrices may hold rows that are being rolled back
                try:
                    if depth == 0:
                        self._conn.execute("ROLLBACK")
                    else:
                        self._conn.execute(f"ROLLBACK TO sp{depth}")
                        self._conn.execute(f"RELEASE sp{depth}")
                except sqlite3.Error:
                    if isinstance(exc, sqlite3.Error):  # SQLite already rolled back (disk full, I/O error)
                        raise self._write_failed(exc) from exc
                    raise
                if isinstance(exc, sqlite3.Error):
                    raise self._write_failed(exc) from exc
                raise
            self._depth = depth
            if depth > 0:
                self._conn.execute(f"RELEASE sp{depth}")
                return
            self._owner = None
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with self._vec_lock:
                    self._vectors.clear()
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise self._write_failed(exc) from exc

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
        with self._lock:
            try:
                busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot checkpoint {self.path}: {exc}") from exc
        if busy:
            raise StoreError(
                f"{self.path}: another connection is reading, so the write-ahead log could not be truncated yet;"
                " retry the checkpoint when it is done (until then, deleted pages may remain in the log)"
            )

    # ------------------------------------------------------------------ namespaces
    def namespace_id(self, namespace: Namespace, *, create: bool = False) -> int:
        """The store's id for a namespace; unknown namespaces raise unless `create`."""
        key = (namespace.user_id, namespace.agent_id or "", namespace.run_id or "")
        rows = self._query("SELECT id FROM namespaces WHERE user_id=? AND agent_id=? AND run_id=?", key)
        if rows:
            return rows[0][0]
        if not create:
            raise UnknownNamespaceError(f"unknown namespace ({namespace}): nothing was ever added to it")
        with self._write() as c:
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
        return [(Namespace.stored(u, a or None, r or None), count) for u, a, r, count in rows]

    def _namespace_of(self, ns: int) -> Namespace:
        rows = self._query("SELECT user_id, agent_id, run_id FROM namespaces WHERE id=?", (ns,))
        if not rows:
            raise UnknownNamespaceError(f"namespace id {ns} does not exist")
        u, a, r = rows[0]
        return Namespace.stored(u, a or None, r or None)

    # ------------------------------------------------------------------ the raw log
    def append_turns(self, ns: int, turns: Sequence[Turn]) -> AppendResult:
        """Append turns in one transaction; a turn whose id is already logged in `ns` is skipped untouched."""
        result = AppendResult()
        now = time.time()
        with self._write() as c:
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
                    result.added.append(turn)
                else:
                    result.skipped.append(turn.id)
            if result.added:
                self._log(c, ns, "add", {"turn_ids": [t.id for t in result.added], "skipped": len(result.skipped)})
        return result

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
        self,
        ns: int,
        *,
        after_seq: int = 0,
        session_id: str | None = None,
        limit: int | None = None,
        batch: int = 1000,
    ) -> Iterator[Turn]:
        """The namespace's turns in log order (at most `limit`), read in batches (constant memory)."""
        namespace = self._namespace_of(ns)
        last, left = after_seq, limit
        while left is None or left > 0:
            sql = f"SELECT {self._TURN_COLS} FROM turns WHERE ns=? AND seq>?"
            params: list[Any] = [ns, last]
            if session_id is not None:
                sql += " AND session_id=?"
                params.append(session_id)
            size = batch if left is None else min(batch, left)
            rows = self._query(sql + " ORDER BY seq LIMIT ?", (*params, size))
            if not rows:
                return
            for row in rows:
                yield self._row_to_turn(row, namespace)
            last = rows[-1][0]
            if left is not None:
                left -= len(rows)

    def count_turns(self, ns: int, *, after_seq: int = 0) -> int:
        """How many turns the namespace holds (past `after_seq`: how many an engine has still to index)."""
        return self._query("SELECT COUNT(*) FROM turns WHERE ns=? AND seq>?", (ns, after_seq))[0][0]

    def last_seq(self, ns: int) -> int:
        """The log position of the namespace's newest turn (0 when empty)."""
        rows = self._query("SELECT seq FROM turns WHERE ns=? ORDER BY seq DESC LIMIT 1", (ns,))
        return rows[0][0] if rows else 0

    def seqs_of(self, ns: int, turn_ids: Sequence[str]) -> dict[str, int]:
        """Log positions of the given turn ids (ids not in the log are absent)."""
        out: dict[str, int] = {}
        for chunk in _chunks(list(dict.fromkeys(turn_ids)), 500):
            marks = ",".join("?" * len(chunk))
            for tid, seq in self._query(
                f"SELECT turn_id, seq FROM turns WHERE ns=? AND turn_id IN ({marks})", (ns, *chunk)
            ):
                out[tid] = seq
        return out

    def turn_ids_for_seqs(self, ns: int, seqs: Iterable[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for chunk in _chunks(list(seqs), 500):
            marks = ",".join("?" * len(chunk))
            for seq, tid in self._query(
                f"SELECT seq, turn_id FROM turns WHERE +ns=? AND seq IN ({marks})", (ns, *chunk)
            ):
                out[seq] = tid
        return out

    # ------------------------------------------------------------------ forgetting
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int:
        """Delete turns (by id, or a whole session) and, in the same transaction, every derived row that depends
        on them (DerivedSpec says how), the namespace's cached model calls and the embeddings of their text."""
        with self._write() as c:
            if session_id is not None:
                seqs = [r[0] for r in c.execute("SELECT seq FROM turns WHERE ns=? AND session_id=?", (ns, session_id))]
            else:
                seqs = list(self.seqs_of(ns, list(turn_ids or [])).values())
            if not seqs:
                return 0
            deleted_ids = self.turn_ids_for_seqs(ns, seqs)
            self._forget(c, ns, seqs)
            for chunk in _chunks(seqs, 500):
                c.execute(f"DELETE FROM turns WHERE +ns=? AND seq IN ({','.join('?' * len(chunk))})", (ns, *chunk))
            op = "delete_session" if session_id is not None else "delete"
            self._log(c, ns, op, {"turn_ids": sorted(deleted_ids.values()), "session_id": session_id})
        return len(seqs)

    def _forget(self, c: sqlite3.Connection, ns: int, seqs: Sequence[int]) -> None:
        """Remove the derived rows that depend on the turns `seqs`; items that also cite surviving turns are
        re-ingested from the log (their owners' watermarks step back); owners declared `rebuild` start over."""
        gone = set(seqs)
        affected: set[int] = set()
        for chunk in _chunks(list(gone), 500):
            marks = ",".join("?" * len(chunk))
            affected.update(
                r[0]
                for r in c.execute(f"SELECT item FROM item_turns WHERE ns=? AND turn_seq IN ({marks})", (ns, *chunk))
            )
        redo: dict[str, int] = {}  # space -> first surviving turn of a partly deleted item
        for chunk in _chunks(sorted(affected), 500):
            marks = ",".join("?" * len(chunk))
            sql = (
                f"SELECT i.space, it.turn_seq FROM item_turns it JOIN items i ON i.id = it.item"
                f" WHERE it.item IN ({marks}) AND +it.ns=? AND it.cited=1"
            )
            for space, seq in c.execute(sql, (*chunk, ns)):
                if seq not in gone:
                    redo[space] = min(seq, redo.get(space, seq))
            c.execute(f"DELETE FROM items WHERE +ns=? AND id IN ({marks})", (ns, *chunk))
        # The embedding cache keeps only what a surviving item's vector uses: the vectors of the dropped items and
        # remembered embeddings of other texts (vocabulary labels, texts embedded ahead of ingest) may stem from a
        # deleted turn, so they go, and are recomputed when needed.
        c.execute(
            "DELETE FROM embed_cache WHERE ns=? AND text_hash NOT IN (SELECT text_hash FROM vectors WHERE ns=?)",
            (ns, ns),
        )
        specs = c.execute("SELECT owner, space, on_delete FROM derived_specs").fetchall()
        for owner, space, _ in specs:
            if space in redo:  # step back so the owner re-ingests the surviving turns of the dropped item
                self._rewind(c, ns, owner, redo[space] - 1)
        for owner in sorted({o for o, _, policy in specs if policy == "rebuild"}):
            self._drop_owner(c, ns, owner, [s for o, s, _ in specs if o == owner])
        c.execute("DELETE FROM llm_calls WHERE ns=?", (ns,))  # any cached prompt may have quoted a deleted turn
        self._bump_epoch(c, ns)

    @staticmethod
    def _owner_keys(owner: str) -> tuple[str, tuple[str, str, str]]:
        """SQL matching an owner's watermark keys: `owner` and `owner@<embedder>` (no LIKE: names are data)."""
        return "(engine=? OR substr(engine, 1, length(?) + 1) = ? || '@')", (owner, owner, owner)

    def _rewind(self, c: sqlite3.Connection, ns: int, owner: str, upto: int) -> None:
        where, params = self._owner_keys(owner)
        c.execute(f"UPDATE watermarks SET upto=? WHERE ns=? AND upto>? AND {where}", (upto, ns, upto, *params))

    def _drop_owner(self, c: sqlite3.Connection, ns: int, owner: str, spaces: Sequence[str]) -> None:
        """All of an owner's derived state in a namespace: items of its spaces, its engine state, its watermarks."""
        for space in spaces:
            c.execute("DELETE FROM items WHERE ns=? AND space=?", (ns, space))
        c.execute("DELETE FROM kv WHERE ns=? AND engine=?", (ns, owner))
        where, params = self._owner_keys(owner)
        c.execute(f"DELETE FROM watermarks WHERE ns=? AND {where}", (ns, *params))

    def delete_namespace(self, ns: int) -> int:
        """Remove a namespace with its log, every derived row, its cached calls and its history."""
        with self._write() as c:
            count = c.execute("SELECT COUNT(*) FROM turns WHERE ns=?", (ns,)).fetchone()[0]
            for table in DERIVED_TABLES:
                c.execute(f"DELETE FROM {table} WHERE ns=?", (ns,))
            c.execute("DELETE FROM turns WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            c.execute("DELETE FROM history WHERE ns=?", (ns,))
            c.execute("DELETE FROM namespaces WHERE id=?", (ns,))
            # The record of the deletion names no user: only that a namespace and how many turns went.
            self._log(c, None, "delete_namespace", {"turns": count})
        return count

    def clear_derived(self, ns: int) -> None:
        """Drop every derived row of a namespace (the log stays): the first half of a reindex."""
        with self._write() as c:
            for table in ("items", "kv", "watermarks"):
                c.execute(f"DELETE FROM {table} WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            self._log(c, ns, "reindex", {})

    # ------------------------------------------------------------------ derived items
    def declare(self, spec: DerivedSpec) -> None:
        """Record an owner's item spaces and delete policy (idempotent; the latest declaration wins)."""
        known = self._query("SELECT space, on_delete FROM derived_specs WHERE owner=?", (spec.owner,))
        if sorted(known) == sorted((s, spec.on_delete) for s in spec.spaces):
            return
        with self._write() as c:
            c.execute("DELETE FROM derived_specs WHERE owner=?", (spec.owner,))
            c.executemany(
                "INSERT INTO derived_specs(owner, space, on_delete) VALUES(?,?,?)",
                [(spec.owner, s, spec.on_delete) for s in spec.spaces],
            )

    def put_items(self, ns: int, space: str, items: Sequence[NewItem]) -> None:
        """Insert items; an existing key is kept (idempotent), and an item whose source or dependency turns are
        not all in the log (deleted meanwhile) is not created."""
        with self._write() as c:
            for item in items:
                cited = set(item.sources)
                wanted = sorted(cited | set(item.depends))
                if wanted:
                    marks = ",".join("?" * len(wanted))
                    alive = c.execute(
                        f"SELECT COUNT(*) FROM turns WHERE +ns=? AND seq IN ({marks})", (ns, *wanted)
                    ).fetchone()[0]
                    if alive != len(wanted):
                        continue
                cur = c.execute(
                    "INSERT OR IGNORE INTO items(ns, space, key, text, meta, tokens) VALUES(?,?,?,?,?,?)",
                    (ns, space, item.key, item.text, json.dumps(item.meta, ensure_ascii=False), item.tokens),
                )
                if cur.rowcount == 1:
                    c.executemany(
                        "INSERT OR IGNORE INTO item_turns(item, ns, turn_seq, cited) VALUES(?,?,?,?)",
                        [(cur.lastrowid, ns, s, int(s in cited)) for s in wanted],
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
        """Items by id with the ids of the turns they cite (provenance)."""
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
                f" WHERE it.item IN ({marks}) AND +it.ns=? AND +t.ns=? AND it.cited=1 ORDER BY t.seq",
                (*chunk, ns, ns),
            ):
                if item_id in out:
                    out[item_id].turn_ids.append(turn_id)
        return out

    def items_in_order(self, ns: int, space: str) -> list[tuple[int, int]]:
        """(id, token count) of every item of a space, in log order of their first cited turn."""
        return self._query(
            "SELECT i.id, i.tokens FROM items i JOIN item_turns it ON it.item = i.id"
            " WHERE i.ns=? AND i.space=? AND it.cited=1 GROUP BY i.id ORDER BY MIN(it.turn_seq)",
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

    def item_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The vectors from `model` of the given items (those that have one)."""
        out: dict[int, np.ndarray] = {}
        for chunk in _chunks(sorted(set(item_ids)), 500):
            marks = ",".join("?" * len(chunk))
            for item_id, blob in self._query(
                f"SELECT item, vec FROM vectors WHERE item IN ({marks}) AND +ns=? AND model=?", (*chunk, ns, model)
            ):
                out[item_id] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_vectors(self, ns: int, space: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Store (item id, text hash, vector) rows, and remember each vector in the embedding cache."""
        with self._write() as c:
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

    def vector_search(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k (item id, cosine) among one namespace's vectors of one space and model (an in-process matrix,
        grown with new rows and rebuilt when the namespace's epoch changes)."""
        with self._vec_lock:
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
            return index.search(vector, k)

    def cache_embeddings(self, ns: int, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None:
        """Remember (text hash, vector) rows of texts that are not items (e.g. vocabulary labels)."""
        if self.read_only:
            return  # a read-only store remembers nothing; the vectors were still computed
        with self._write() as c:
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

    # ------------------------------------------------------------------ labels and engine state
    def put_labels(self, ns: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """(item id, kind, label) rows, e.g. an event type or an entity type of a step."""
        with self._write() as c:
            c.executemany(
                "INSERT OR IGNORE INTO labels(item, ns, kind, label) VALUES(?,?,?,?)",
                [(item, ns, kind, label) for item, kind, label in rows],
            )

    def relabel(self, ns: int, kind: str, mapping: dict[str, str], items: Sequence[int] | None = None) -> int:
        """Rename labels of one kind (old -> new), on every item of the namespace or only on `items`; an item
        that already has the new label keeps one copy. Returns how many label rows changed."""
        changed = 0
        with self._write() as c:
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

    def labels_of(self, ns: int, item: int) -> list[tuple[str, str]]:
        return self._query("SELECT kind, label FROM labels WHERE ns=? AND item=? ORDER BY kind, label", (ns, item))

    def kv_set(self, ns: int, owner: str, key: str, value: Any) -> None:
        """Engine state. Only an owner whose state is rebuilt on delete may keep any (state of an owner declared
        `on_delete="rows"` would outlive the turns it came from)."""
        if self._query("SELECT 1 FROM derived_specs WHERE owner=? AND on_delete='rows' LIMIT 1", (owner,)):
            raise StoreError(f"{owner!r} declared on_delete='rows': its derived state must be items, not engine state")
        with self._write() as c:
            c.execute(
                "INSERT INTO kv(ns, engine, key, value) VALUES(?,?,?,?)"
                " ON CONFLICT(ns, engine, key) DO UPDATE SET value=excluded.value",
                (ns, owner, key, json.dumps(value, ensure_ascii=False)),
            )

    def kv_get(self, ns: int, owner: str, key: str, default: Any = None) -> Any:
        rows = self._query("SELECT value FROM kv WHERE ns=? AND engine=? AND key=?", (ns, owner, key))
        return json.loads(rows[0][0]) if rows else default

    # ------------------------------------------------------------------ engine progress and cache epochs
    def watermark(self, ns: int, key: str) -> int:
        rows = self._query("SELECT upto FROM watermarks WHERE ns=? AND engine=?", (ns, key))
        return rows[0][0] if rows else 0

    def set_watermark(self, ns: int, key: str, upto: int) -> None:
        with self._write() as c:
            c.execute(
                "INSERT INTO watermarks(ns, engine, upto) VALUES(?,?,?)"
                " ON CONFLICT(ns, engine) DO UPDATE SET upto=MAX(upto, excluded.upto)",
                (ns, key, upto),
            )

    def epoch(self, ns: int) -> int:
        rows = self._query("SELECT epoch FROM epochs WHERE ns=?", (ns,))
        return rows[0][0] if rows else 0

    def _bump_epoch(self, c: sqlite3.Connection, ns: int) -> None:
        c.execute(
            "INSERT INTO epochs(ns, epoch) VALUES(?, 1) ON CONFLICT(ns) DO UPDATE SET epoch = epoch + 1",
            (ns,),
        )

    def derived_state(self, ns: int) -> dict[str, Any]:
        """Every derived row of a namespace in a canonical, store-independent form (turn ids, not row ids):
        two stores fed the same log compare equal."""
        q = self._query
        with self.snapshot():
            return canonical_state(
                q("SELECT seq, turn_id FROM turns WHERE ns=?", (ns,)),
                q("SELECT id, space, key, text, meta, tokens FROM items WHERE ns=?", (ns,)),
                q("SELECT item, turn_seq, cited FROM item_turns WHERE ns=?", (ns,)),
                q("SELECT item, kind, label FROM labels WHERE ns=?", (ns,)),
                q("SELECT item, model, text_hash, vec FROM vectors WHERE ns=?", (ns,)),
                q("SELECT engine, key, value FROM kv WHERE ns=?", (ns,)),
                q("SELECT engine, upto FROM watermarks WHERE ns=?", (ns,)),
            )

    # ------------------------------------------------------------------ the model-call cache
    def cached_call(self, ns: int, key: str) -> str | None:
        """The JSON response of a model call made for this namespace, if it is cached."""
        rows = self._query("SELECT response FROM llm_calls WHERE ns=? AND key=?", (ns, key))
        return rows[0][0] if rows else None

    def cache_call(self, ns: int, call: CachedCall) -> None:
        if self.read_only:
            return  # a read-only store remembers nothing; the call was still made and counted
        with self._write() as c:
            c.execute(
                "INSERT OR REPLACE INTO llm_calls(ns, key, backend, method, stage, request, response, prompt_tokens,"
                " completion_tokens, seconds, at) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                (
                    ns,
                    call.key,
                    call.backend,
                    call.method,
                    call.stage,
                    call.request,
                    call.response,
                    call.prompt_tokens,
                    call.completion_tokens,
                    call.seconds,
                    time.time(),
                ),
            )

    def call_summary(self) -> list[dict[str, Any]]:
        """Cached model calls of every namespace, grouped by backend, stage and method."""
        rows = self._query(
            "SELECT backend, stage, method, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(seconds)"
            " FROM llm_calls GROUP BY backend, stage, method ORDER BY backend, stage, method"
        )
        keys = ("backend", "stage", "method", "calls", "prompt_tokens", "completion_tokens", "seconds")
        return [dict(zip(keys, row, strict=True)) for row in rows]

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
