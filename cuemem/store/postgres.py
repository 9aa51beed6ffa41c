"""The server-grade store: PostgreSQL + pgvector, the same contract as the embedded SQLite store (docs/design.md
promises 1-3 and 8).

Selected by a DSN (`postgresql://…`) wherever a store path is accepted. Everything lives in the schema `cuemem`
of the database; every key leads with the namespace, so each query names its partition. Connections come from a
psycopg 3 pool; a write transaction takes one transaction-scoped advisory lock first, so writers are serialised
across processes and machines exactly as SQLite's `BEGIN IMMEDIATE` serialises them (one indexer per namespace
and engine, log order = commit order), while readers never wait (MVCC). Vector search runs in the database:
exact below `hnsw_threshold` vectors of a (namespace, space, model), through a per-namespace partial HNSW index
(cosine) above it. Schema migrations are numbered like SQLite's (`MIGRATIONS`).

PostgreSQL text cannot hold NUL characters; user text containing one (or the escape character U+E000) is stored
reversibly escaped, so what is read back is exactly what was written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from ..config import is_dsn, redact
from ..errors import StoreError, TurnNotFoundError, UnknownNamespaceError
from ..types import Namespace, Turn
from .base import AppendResult, CachedCall, DerivedSpec, Item, NewItem, canonical_state

try:  # the optional extra `postgres`
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - reported when a DSN is opened
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

__all__ = ["SCHEMA_VERSION", "PostgresStore", "is_dsn", "redact"]

SCHEMA_VERSION = 1
SCHEMA = "cuemem"
WRITE_LOCK = 0x63756D6D_00000001  # the advisory lock every write transaction holds: one writer at a time
INIT_LOCK = 0x63756D6D_00000002  # creating or migrating the schema
HNSW_THRESHOLD = 20_000  # vectors of one (namespace, space, model) above which an HNSW index is built
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 16, 64, 100
IDLE_CHECK_SECONDS = 1.0  # a pooled connection idle for longer is checked with a round trip before use

TABLES = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces(
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE(user_id, agent_id, run_id)
);
-- The durable log: rows are inserted and deleted, never updated. seq orders the log (writers are serialised).
CREATE TABLE IF NOT EXISTS turns(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    seq BIGSERIAL NOT NULL,
    turn_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    added_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(ns, seq),
    UNIQUE(ns, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(ns, session_id, seq);
CREATE TABLE IF NOT EXISTS derived_specs(
    owner TEXT NOT NULL,
    space TEXT NOT NULL,
    on_delete TEXT NOT NULL,
    PRIMARY KEY(owner, space)
);
CREATE TABLE IF NOT EXISTS items(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    id BIGSERIAL NOT NULL,
    space TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(ns, id),
    UNIQUE(ns, space, key)
);
CREATE INDEX IF NOT EXISTS items_by_space ON items(ns, space, id);
CREATE TABLE IF NOT EXISTS item_turns(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    turn_seq BIGINT NOT NULL,
    cited SMALLINT NOT NULL DEFAULT 1,
    PRIMARY KEY(ns, item, turn_seq),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS item_turns_by_turn ON item_turns(ns, turn_seq);
CREATE TABLE IF NOT EXISTS vectors(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    model TEXT NOT NULL,
    id BIGSERIAL NOT NULL,
    space TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec vector NOT NULL,
    PRIMARY KEY(ns, item, model),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
);
-- Vectors stay inline in the row (compressed only if that saves a quarter, out of line only if the row cannot fit
-- a page): a 512-float vector just passes TOAST's 2 KB threshold, and detoasting each one made an exact scan of
-- 10k vectors take ~100 ms (benchmarks/scale.py).
ALTER TABLE vectors ALTER COLUMN vec SET STORAGE MAIN;
CREATE INDEX IF NOT EXISTS vectors_by_space ON vectors(ns, space, model, id);
CREATE INDEX IF NOT EXISTS vectors_by_hash ON vectors(ns, text_hash);
CREATE TABLE IF NOT EXISTS labels(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY(ns, item, kind, label),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(ns, kind, label);
CREATE TABLE IF NOT EXISTS kv(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY(ns, engine, key)
);
CREATE TABLE IF NOT EXISTS embed_cache(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    text_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    vec BYTEA NOT NULL,
    PRIMARY KEY(ns, text_hash, model)
);
CREATE TABLE IF NOT EXISTS llm_calls(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    key TEXT NOT NULL,
    backend TEXT NOT NULL,
    method TEXT NOT NULL,
    stage TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(ns, key)
);
CREATE TABLE IF NOT EXISTS watermarks(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    upto BIGINT NOT NULL,
    PRIMARY KEY(ns, engine)
);
CREATE TABLE IF NOT EXISTS epochs(ns BIGINT PRIMARY KEY, epoch BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS history(
    id BIGSERIAL PRIMARY KEY,
    ns BIGINT,
    at DOUBLE PRECISION NOT NULL,
    op TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS history_by_ns ON history(ns, id);
-- The HNSW indexes built for large (namespace, space, model) vector sets: partial indexes, one per partition.
CREATE TABLE IF NOT EXISTS vector_indexes(
    ns BIGINT NOT NULL,
    space TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY(ns, space, model)
)
"""
# Columns holding user text, or what is derived from it (vectors, hashes), keep no planner statistics: ANALYZE
# (autovacuum runs it by itself) copies sample values into pg_statistic, where a deleted turn's text would outlive
# checkpoint(). Every query names its keys, so the planner does not need them.
NO_STATISTICS = {
    "namespaces": ("user_id", "agent_id", "run_id"),
    "turns": ("turn_id", "session_id", "speaker", "text", "timestamp", "metadata"),
    "items": ("key", "text", "meta"),
    "vectors": ("text_hash", "vec"),
    "labels": ("label",),
    "kv": ("key", "value"),
    "embed_cache": ("text_hash", "vec"),
    "llm_calls": ("key", "request", "response"),
    "history": ("detail",),
}
TABLES += "".join(
    f";\nALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0"
    for table, columns in NO_STATISTICS.items()
    for column in columns
)

DERIVED_TABLES = ("items", "kv", "embed_cache", "llm_calls", "watermarks")
# Tables holding user text: what checkpoint() rewrites.
TEXT_TABLES = (
    "turns",
    "items",
    "item_turns",
    "vectors",
    "labels",
    "kv",
    "embed_cache",
    "llm_calls",
    "history",
    "namespaces",
)

MIGRATIONS: dict[int, Any] = {}  # version -> function(conn) bringing the schema to version + 1


_ESC = "\ue000"
_ESCAPED = re.compile(_ESC + "(.)", re.S)


def _enc(value: str) -> str:
    """Text as PostgreSQL can hold it: NUL (and the escape character itself) escaped reversibly."""
    if "\x00" not in value and _ESC not in value:
        return value
    return value.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")


def _dec(value: str) -> str:
    if _ESC not in value:
        return value
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), value)


def _opt_dec(value: str | None) -> str | None:
    return None if value is None else _dec(value)


class _Bound(threading.local):
    """The connection this thread is inside a transaction or snapshot on, if any."""

    conn: Any = None
    depth: int = 0
    writing: bool = False


class PostgresStore:
    """Durable log of raw turns plus derived tables in PostgreSQL, per namespace; safe to share between threads,
    processes and machines."""

    def __init__(
        self,
        dsn: str,
        *,
        read_only: bool = False,
        timeout: float = 10.0,
        pool_size: int = 8,
        hnsw_threshold: int = HNSW_THRESHOLD,
    ) -> None:
        if psycopg is None:
            raise StoreError(
                "a PostgreSQL store needs the optional extra `postgres`: pip install 'cuemem[postgres]'"
                " (psycopg, psycopg-pool, pgvector)"
            )
        self.dsn = dsn
        self.path = redact(dsn)  # what messages name; never the password
        self.read_only = read_only
        self.timeout = timeout
        self.hnsw_threshold = hnsw_threshold
        self._bound = _Bound()
        self._last_used: dict[int, float] = {}  # id(connection) -> when it went back to the pool
        self._hnsw: dict[tuple[int, str, str], tuple[str, int] | None] = {}
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL DSN {self.path}: {_first_line(exc)}") from exc
        self._initialise()
        options = "-c search_path=cuemem,public"
        if read_only:
            options += " -c default_transaction_read_only=on"
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True, "options": options, "connect_timeout": max(1, int(timeout))},
            configure=self._configure,
            timeout=timeout,
            # A server that was away for long must not leave the pool pausing ever longer between attempts
            # (1, 2, 4 ... s) after it is back: give up an attempt chain after `timeout`; the next request starts
            # a new one at once.
            reconnect_timeout=max(1.0, timeout),
            open=False,
            name="cuemem",
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to {self.path}: no connection within {timeout:g} s") from exc
        self._salt = bytes.fromhex(self._query("SELECT value FROM meta WHERE key='salt'")[0][0])

    # ------------------------------------------------------------------ opening
    def _connect(self) -> Any:
        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout)))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.path}: {_first_line(exc)}") from exc

    def _initialise(self) -> None:
        """Create, migrate or check the schema (under an advisory lock: several processes may open at once)."""
        with self._connect() as c:
            try:
                # Nothing is created before the checks below: a database that is refused is left as it was.
                if self.read_only and not c.execute("SELECT 1 FROM pg_extension WHERE extname='vector'").fetchone():
                    raise StoreError(f"{self.path} is not a cuemem store yet (no pgvector extension)")
                exists = c.execute(
                    "SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name='meta'", (SCHEMA,)
                ).fetchone()
                if exists:
                    version = self._version(c)
                    if version == SCHEMA_VERSION:
                        return
                    if version > SCHEMA_VERSION:
                        raise StoreError(
                            f"{self.path} has cuemem schema version {version}, newer than this cuemem supports"
                            f" ({SCHEMA_VERSION}); upgrade cuemem. The database was left as is."
                        )
                if self.read_only:
                    raise StoreError(
                        f"{self.path} is not a cuemem store yet (or needs a migration): open it once for writing"
                    )
                with c.transaction():
                    c.execute("SELECT pg_advisory_xact_lock(%s)", (INIT_LOCK,))
                    if c.execute(
                        "SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name='meta'",
                        (SCHEMA,),
                    ).fetchone():
                        current = self._version(c)
                        while current < SCHEMA_VERSION:
                            MIGRATIONS[current](c)
                            current += 1
                    elif c.execute(
                        "SELECT 1 FROM pg_class k JOIN pg_namespace n ON n.oid = k.relnamespace"
                        " WHERE n.nspname = %s LIMIT 1",
                        (SCHEMA,),
                    ).fetchone():
                        raise StoreError(
                            f"the schema `{SCHEMA}` of {self.path} holds tables of another application"
                            " (no cuemem meta table); left as is"
                        )
                    c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    c.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                    c.execute(f"SET LOCAL search_path = {SCHEMA}, public")
                    for statement in TABLES.split(";"):
                        if statement.strip():
                            c.execute(statement)
                    c.execute(
                        "INSERT INTO meta(key, value) VALUES('schema_version', %s)"
                        " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                        (str(SCHEMA_VERSION),),
                    )
                    c.execute(
                        "INSERT INTO meta(key, value) VALUES('salt', %s) ON CONFLICT(key) DO NOTHING",
                        (secrets.token_hex(16),),
                    )
            except psycopg.Error as exc:
                raise StoreError(f"cannot open {self.path} as a cuemem store: {_first_line(exc)}") from exc

    @staticmethod
    def _version(c: Any) -> int:
        row = c.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key='schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise StoreError("the schema `cuemem` of this database is not a cuemem store; left as is")
        return int(row[0])

    def _configure(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute(f"SET hnsw.ef_search = {HNSW_EF_SEARCH}")

    # ------------------------------------------------------------------ plumbing
    @property
    def salt(self) -> bytes:
        """This store's random salt: derived ids and cache keys are not guessable from content without it."""
        return self._salt

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self, exc: BaseException, doing: str) -> StoreError:
        return StoreError(f"PostgreSQL at {self.path} is unavailable; could not {doing}: {_first_line(exc)}")

    def _getconn(self, *, check: bool = False) -> Any:
        """A pooled connection that works. One that sat idle for over a second (or any, with `check`) is checked
        with a round trip first, and a broken one is replaced at once rather than waited on with the pool's pauses
        between checks, so after the server went away and came back (stopped, restarted, failed over) the next
        request goes through. Connections in steady use are not checked: a search makes ~10 reads, and a check
        before each doubled its round trips (benchmarks/load.py)."""
        deadline = time.monotonic() + self.timeout
        while True:
            if check:  # a connection was found broken: if the server refuses a new one, say so now, not at the deadline
                self._probe()
            try:
                try:
                    conn = self._pool.getconn(timeout=min(0.05, max(0.001, deadline - time.monotonic())))
                except PoolTimeout:
                    # None free at once: every connection is busy, or the pool is reconnecting to a server that went
                    # away. A probe tells which, so a down server is an error now, not at the deadline.
                    self._probe()
                    conn = self._pool.getconn(timeout=max(0.001, deadline - time.monotonic()))
            except PoolTimeout as exc:
                raise StoreError(
                    f"PostgreSQL at {self.path} is unavailable: no connection within {self.timeout:g} s"
                ) from exc
            except psycopg.OperationalError as exc:
                raise self._unavailable(exc, "get a connection") from exc
            if not check and time.monotonic() - self._last_used.get(id(conn), 0.0) < IDLE_CHECK_SECONDS:
                return conn
            try:
                ConnectionPool.check_connection(conn)
            except psycopg.Error:
                self._putconn(conn)  # broken: the pool closes it and opens a new one
                check = True
                continue
            return conn

    def _probe(self) -> None:
        """Raise StoreError at once when the server refuses a new connection (stopped, unreachable), so a request
        meets a down database with a clear error in milliseconds instead of waiting out the pool's timeout."""
        try:
            psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))).close()
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc, "connect") from exc

    def _begun(self, *statements: tuple[str, tuple[Any, ...]]) -> Any:
        """A pooled connection with `statements` run on it (a transaction begun). A connection found broken by
        them is replaced and they are run once more: nothing had been done on it yet."""
        for attempt in (0, 1):
            conn = self._getconn(check=attempt > 0)
            try:
                for statement, params in statements:
                    conn.execute(statement, params)
                return conn
            except psycopg.Error as exc:
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                self._putconn(conn)
                if attempt or not (isinstance(exc, psycopg.OperationalError) and conn.broken):
                    raise
        raise AssertionError("unreachable")

    def _putconn(self, conn: Any) -> None:
        self._last_used[id(conn)] = time.monotonic()
        with suppress(Exception):
            self._pool.putconn(conn)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction holding the store's writer lock (one writer across threads, processes and
        machines). A nested call is a savepoint: if it fails, only its own writes are undone."""
        with self._write():
            yield

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one consistent state of the store (a REPEATABLE READ, read-only transaction).
        Inside this thread's own transaction it changes nothing."""
        if self._bound.conn is not None:
            yield
            return
        try:
            conn = self._begun(("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", ()))
        except psycopg.Error as exc:
            raise self._unavailable(exc, "start a read") from exc
        self._bound.conn, self._bound.writing = conn, False
        try:
            try:
                yield
            finally:
                with suppress(psycopg.Error):
                    conn.execute("COMMIT")
        finally:
            self._bound.conn = None
            self._putconn(conn)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; this needs to write")
        bound = self._bound
        if bound.conn is not None:
            if not bound.writing:
                raise StoreError("cannot write inside a snapshot")
            conn, depth = bound.conn, bound.depth
            try:
                conn.execute(f"SAVEPOINT sp{depth}")
            except psycopg.Error as exc:
                raise self._failed(exc) from exc
            bound.depth += 1
            try:
                yield conn
            except BaseException as exc:
                bound.depth = depth
                try:
                    conn.execute(f"ROLLBACK TO SAVEPOINT sp{depth}")
                    conn.execute(f"RELEASE SAVEPOINT sp{depth}")
                except psycopg.Error:
                    if isinstance(exc, psycopg.Error):
                        raise self._failed(exc) from exc
                    raise
                if isinstance(exc, psycopg.Error):
                    raise self._failed(exc) from exc
                raise
            bound.depth = depth
            try:
                conn.execute(f"RELEASE SAVEPOINT sp{depth}")
            except psycopg.Error as exc:
                raise self._failed(exc) from exc
            return
        try:
            conn = self._begun(("BEGIN", ()), ("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,)))
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        bound.conn, bound.writing, bound.depth = conn, True, 1
        try:
            try:
                yield conn
            except BaseException as exc:
                self._hnsw.clear()
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                if isinstance(exc, psycopg.Error):
                    raise self._failed(exc) from exc
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                self._hnsw.clear()
                if conn.broken or conn.closed:  # lost with the COMMIT sent: the server may have committed first
                    raise StoreError(
                        f"PostgreSQL at {self.path} is unavailable: {_first_line(exc)}; the connection"
                        " was lost while committing, so this write may or may not have been stored"
                    ) from exc
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise self._failed(exc) from exc
        finally:
            bound.conn, bound.writing, bound.depth = None, False, 0
            self._putconn(conn)

    def _failed(self, exc: psycopg.Error) -> StoreError:
        """The error a failed write reports; the transaction was undone, so what was stored before is intact."""
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(
                f"PostgreSQL at {self.path} is unavailable: {_first_line(exc)}; this write was undone"
                " (nothing of it was stored)"
            )
        if isinstance(exc, psycopg.errors.DiskFull):
            return StoreError(
                f"disk full: {self.path} could not be written ({_first_line(exc)}); this write was"
                " undone and everything stored before is intact"
            )
        return StoreError(f"could not write to {self.path}: {_first_line(exc)}; this write was undone")

    def _query(self, query: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read: on this thread's transaction or snapshot if it is inside one (it sees its own writes), else
        on a pooled connection in autocommit (each read sees the last commit, never waits for a writer)."""
        conn = self._bound.conn
        if conn is not None:
            try:
                return conn.execute(query, params).fetchall()
            except psycopg.OperationalError as exc:
                raise self._unavailable(exc, "read") from exc
            except psycopg.Error as exc:
                raise StoreError(f"cannot read {self.path}: {_first_line(exc)}") from exc
        for attempt in (0, 1):  # a read is idempotent: one that met a broken connection is tried once more
            conn = self._getconn(check=attempt > 0)
            try:
                return conn.execute(query, params).fetchall()
            except psycopg.OperationalError as exc:
                if attempt or not conn.broken:
                    raise self._unavailable(exc, "read") from exc
            except psycopg.Error as exc:
                raise StoreError(f"cannot read {self.path}: {_first_line(exc)}") from exc
            finally:
                self._putconn(conn)
        raise AssertionError("unreachable")

    def integrity_check(self) -> str:
        """'ok', or what is inconsistent: derived rows citing turns that are not in the log, items of a namespace
        that does not exist."""
        problems = []
        orphans = self._query(
            "SELECT COUNT(*) FROM item_turns it WHERE NOT EXISTS"
            " (SELECT 1 FROM turns t WHERE t.ns = it.ns AND t.seq = it.turn_seq)"
        )[0][0]
        if orphans:
            problems.append(f"{orphans} item dependencies on turns not in the log")
        strays = self._query(
            "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.id = i.ns)"
        )[0][0]
        if strays:
            problems.append(f"{strays} items of no namespace")
        return "; ".join(problems) or "ok"

    def checkpoint(self) -> None:
        """PostgreSQL's meaning of SQLite's checkpoint: VACUUM FULL rewrites every table that holds user text (so
        no live table or index file keeps a deleted row), then CHECKPOINT flushes it. It cannot promise that
        freed disk blocks, old WAL segments, replicas or backups are wiped: that is the operator's (README)."""
        if self.read_only:
            return
        conn = self._getconn()
        table = ""
        try:
            # VACUUM FULL needs each table to itself: waiting without end behind another session's open transaction
            # would also queue every read of that table behind it. Give up after `timeout` and say so.
            conn.execute(f"SET lock_timeout = {max(1, int(self.timeout * 1000))}")
            for table in TEXT_TABLES:
                conn.execute(f"VACUUM FULL {SCHEMA}.{table}")
            with suppress(psycopg.errors.InsufficientPrivilege):
                conn.execute("CHECKPOINT")
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(
                f"checkpoint of {self.path} was blocked: another session's open transaction holds the table"
                f" {table!r}, so deleted text may still be in its file; end that transaction and checkpoint again"
            ) from exc
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc, "checkpoint") from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot checkpoint {self.path}: {_first_line(exc)}") from exc
        finally:
            with suppress(psycopg.Error):
                conn.execute("RESET lock_timeout")
            self._putconn(conn)

    # ------------------------------------------------------------------ namespaces
    def namespace_id(self, namespace: Namespace, *, create: bool = False) -> int:
        """The store's id for a namespace; unknown namespaces raise unless `create`."""
        key = (_enc(namespace.user_id), _enc(namespace.agent_id or ""), _enc(namespace.run_id or ""))
        rows = self._query("SELECT id FROM namespaces WHERE user_id=%s AND agent_id=%s AND run_id=%s", key)
        if rows:
            return int(rows[0][0])
        if not create:
            raise UnknownNamespaceError(f"unknown namespace ({namespace}): nothing was ever added to it")
        with self._write() as c:
            c.execute(
                "INSERT INTO namespaces(user_id, agent_id, run_id, created_at) VALUES(%s,%s,%s,%s)"
                " ON CONFLICT DO NOTHING",
                (*key, time.time()),
            )
            row = c.execute("SELECT id FROM namespaces WHERE user_id=%s AND agent_id=%s AND run_id=%s", key).fetchone()
            return int(row[0])

    def namespaces(self) -> list[tuple[Namespace, int]]:
        """Every namespace with its number of turns."""
        rows = self._query(
            "SELECT n.user_id, n.agent_id, n.run_id, (SELECT COUNT(*) FROM turns t WHERE t.ns = n.id)"
            " FROM namespaces n ORDER BY n.id"
        )
        return [(Namespace.stored(_dec(u), _dec(a) or None, _dec(r) or None), int(n)) for u, a, r, n in rows]

    def _namespace_of(self, ns: int) -> Namespace:
        rows = self._query("SELECT user_id, agent_id, run_id FROM namespaces WHERE id=%s", (ns,))
        if not rows:
            raise UnknownNamespaceError(f"namespace id {ns} does not exist")
        u, a, r = rows[0]
        return Namespace.stored(_dec(u), _dec(a) or None, _dec(r) or None)

    # ------------------------------------------------------------------ the raw log
    def append_turns(self, ns: int, turns: Sequence[Turn]) -> AppendResult:
        """Append turns in one transaction; a turn whose id is already logged in `ns` is skipped untouched."""
        result = AppendResult()
        now = time.time()
        with self._write() as c:
            for turn in turns:
                row = c.execute(
                    "INSERT INTO turns(ns, turn_id, session_id, speaker, text, timestamp, metadata, added_at)"
                    " VALUES(%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT(ns, turn_id) DO NOTHING RETURNING seq",
                    (
                        ns,
                        _enc(turn.id),
                        _enc(turn.session_id),
                        _enc(turn.speaker),
                        _enc(turn.text),
                        None if turn.timestamp is None else _enc(turn.timestamp),
                        json.dumps(turn.metadata, ensure_ascii=False),
                        now,
                    ),
                ).fetchone()
                if row is not None:
                    turn.seq = int(row[0])
                    result.added.append(turn)
                else:
                    result.skipped.append(turn.id)
            if result.added:
                self._log(c, ns, "add", {"turn_ids": [t.id for t in result.added], "skipped": len(result.skipped)})
        return result

    _TURN_COLS = "seq, turn_id, session_id, speaker, text, timestamp, metadata"

    def _row_to_turn(self, row: tuple[Any, ...], namespace: Namespace | None) -> Turn:
        seq, turn_id, session_id, speaker, text, timestamp, metadata = row
        return Turn(
            id=_dec(turn_id),
            text=_dec(text),
            speaker=_dec(speaker),
            session_id=_dec(session_id),
            timestamp=_opt_dec(timestamp),
            metadata=json.loads(metadata),
            namespace=namespace,
            seq=int(seq),
        )

    def get_turn(self, ns: int, turn_id: str) -> Turn:
        rows = self._query(f"SELECT {self._TURN_COLS} FROM turns WHERE ns=%s AND turn_id=%s", (ns, _enc(turn_id)))
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
            query = f"SELECT {self._TURN_COLS} FROM turns WHERE ns=%s AND seq>%s"
            params: list[Any] = [ns, last]
            if session_id is not None:
                query += " AND session_id=%s"
                params.append(_enc(session_id))
            size = batch if left is None else min(batch, left)
            rows = self._query(query + " ORDER BY seq LIMIT %s", (*params, size))
            if not rows:
                return
            for row in rows:
                yield self._row_to_turn(row, namespace)
            last = rows[-1][0]
            if left is not None:
                left -= len(rows)

    def count_turns(self, ns: int, *, after_seq: int = 0) -> int:
        """How many turns the namespace holds (past `after_seq`: how many an engine has still to index)."""
        return int(self._query("SELECT COUNT(*) FROM turns WHERE ns=%s AND seq>%s", (ns, after_seq))[0][0])

    def last_seq(self, ns: int) -> int:
        """The log position of the namespace's newest turn (0 when empty)."""
        rows = self._query("SELECT seq FROM turns WHERE ns=%s ORDER BY seq DESC LIMIT 1", (ns,))
        return int(rows[0][0]) if rows else 0

    def seqs_of(self, ns: int, turn_ids: Sequence[str]) -> dict[str, int]:
        """Log positions of the given turn ids (ids not in the log are absent)."""
        wanted = [_enc(t) for t in dict.fromkeys(turn_ids)]
        rows = self._query("SELECT turn_id, seq FROM turns WHERE ns=%s AND turn_id = ANY(%s)", (ns, wanted))
        return {_dec(tid): int(seq) for tid, seq in rows}

    def turn_ids_for_seqs(self, ns: int, seqs: Iterable[int]) -> dict[int, str]:
        rows = self._query("SELECT seq, turn_id FROM turns WHERE ns=%s AND seq = ANY(%s)", (ns, list(seqs)))
        return {int(seq): _dec(tid) for seq, tid in rows}

    # ------------------------------------------------------------------ forgetting
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int:
        """Delete turns (by id, or a whole session) and, in the same transaction, every derived row that depends
        on them (DerivedSpec says how), the namespace's cached model calls and the embeddings of their text."""
        if self._bound.conn is None:  # nothing to delete: answer without queueing behind the writer lock
            if session_id is not None:
                found = self._query("SELECT 1 FROM turns WHERE ns=%s AND session_id=%s LIMIT 1", (ns, _enc(session_id)))
            else:
                found = self._query(
                    "SELECT 1 FROM turns WHERE ns=%s AND turn_id = ANY(%s) LIMIT 1",
                    (ns, [_enc(t) for t in turn_ids or []]),
                )
            if not found:
                return 0
        with self._write() as c:
            if session_id is not None:
                seqs = [
                    int(r[0])
                    for r in c.execute("SELECT seq FROM turns WHERE ns=%s AND session_id=%s", (ns, _enc(session_id)))
                ]
            else:
                seqs = list(self.seqs_of(ns, list(turn_ids or [])).values())
            if not seqs:
                return 0
            deleted_ids = self.turn_ids_for_seqs(ns, seqs)
            self._forget(c, ns, seqs)
            c.execute("DELETE FROM turns WHERE ns=%s AND seq = ANY(%s)", (ns, seqs))
            op = "delete_session" if session_id is not None else "delete"
            self._log(c, ns, op, {"turn_ids": sorted(deleted_ids.values()), "session_id": session_id})
        return len(seqs)

    def _forget(self, c: Any, ns: int, seqs: Sequence[int]) -> None:
        """Remove the derived rows that depend on the turns `seqs`; items that also cite surviving turns are
        re-ingested from the log (their owners' watermarks step back); owners declared `rebuild` start over."""
        gone = set(seqs)
        affected = sorted(
            {
                int(r[0])
                for r in c.execute("SELECT item FROM item_turns WHERE ns=%s AND turn_seq = ANY(%s)", (ns, list(gone)))
            }
        )
        redo: dict[str, int] = {}  # space -> first surviving turn of a partly deleted item
        if affected:
            for space, seq in c.execute(
                "SELECT i.space, it.turn_seq FROM item_turns it JOIN items i ON i.ns = it.ns AND i.id = it.item"
                " WHERE it.ns=%s AND it.item = ANY(%s) AND it.cited=1",
                (ns, affected),
            ).fetchall():
                if seq not in gone:
                    redo[space] = min(int(seq), redo.get(space, int(seq)))
            c.execute("DELETE FROM items WHERE ns=%s AND id = ANY(%s)", (ns, affected))
        # The embedding cache keeps only what a surviving item's vector uses (see SQLiteStore._forget).
        c.execute(
            "DELETE FROM embed_cache e WHERE e.ns=%s AND NOT EXISTS"
            " (SELECT 1 FROM vectors v WHERE v.ns = e.ns AND v.text_hash = e.text_hash)",
            (ns,),
        )
        specs = c.execute("SELECT owner, space, on_delete FROM derived_specs").fetchall()
        for owner, space, _ in specs:
            if space in redo:
                self._rewind(c, ns, owner, redo[space] - 1)
        for owner in sorted({o for o, _, policy in specs if policy == "rebuild"}):
            self._drop_owner(c, ns, owner, [s for o, s, _ in specs if o == owner])
        c.execute("DELETE FROM llm_calls WHERE ns=%s", (ns,))  # any cached prompt may have quoted a deleted turn
        self._bump_epoch(c, ns)

    _OWNER_KEYS = "(engine=%s OR left(engine, length(%s) + 1) = %s || '@')"

    def _rewind(self, c: Any, ns: int, owner: str, upto: int) -> None:
        c.execute(
            f"UPDATE watermarks SET upto=%s WHERE ns=%s AND upto>%s AND {self._OWNER_KEYS}",
            (upto, ns, upto, owner, owner, owner),
        )

    def _drop_owner(self, c: Any, ns: int, owner: str, spaces: Sequence[str]) -> None:
        """All of an owner's derived state in a namespace: items of its spaces, its engine state, its watermarks."""
        if spaces:
            c.execute("DELETE FROM items WHERE ns=%s AND space = ANY(%s)", (ns, list(spaces)))
        c.execute("DELETE FROM kv WHERE ns=%s AND engine=%s", (ns, owner))
        c.execute(f"DELETE FROM watermarks WHERE ns=%s AND {self._OWNER_KEYS}", (ns, owner, owner, owner))

    def delete_namespace(self, ns: int) -> int:
        """Remove a namespace with its log, every derived row, its cached calls, its history and its HNSW
        indexes."""
        with self._write() as c:
            count = int(c.execute("SELECT COUNT(*) FROM turns WHERE ns=%s", (ns,)).fetchone()[0])
            for table in DERIVED_TABLES:
                c.execute(f"DELETE FROM {table} WHERE ns=%s", (ns,))
            c.execute("DELETE FROM turns WHERE ns=%s", (ns,))
            self._bump_epoch(c, ns)
            c.execute("DELETE FROM history WHERE ns=%s", (ns,))
            for (name,) in c.execute("SELECT name FROM vector_indexes WHERE ns=%s", (ns,)).fetchall():
                c.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
            c.execute("DELETE FROM vector_indexes WHERE ns=%s", (ns,))
            c.execute("DELETE FROM namespaces WHERE id=%s", (ns,))
            self._log(c, None, "delete_namespace", {"turns": count})
        self._hnsw.clear()
        return count

    def clear_derived(self, ns: int) -> None:
        """Drop every derived row of a namespace (the log stays): the first half of a reindex."""
        with self._write() as c:
            for table in ("items", "kv", "watermarks"):
                c.execute(f"DELETE FROM {table} WHERE ns=%s", (ns,))
            self._bump_epoch(c, ns)
            self._log(c, ns, "reindex", {})

    # ------------------------------------------------------------------ derived items
    def declare(self, spec: DerivedSpec) -> None:
        """Record an owner's item spaces and delete policy (idempotent; the latest declaration wins)."""
        known = self._query("SELECT space, on_delete FROM derived_specs WHERE owner=%s", (spec.owner,))
        if sorted(known) == sorted((s, spec.on_delete) for s in spec.spaces):
            return
        with self._write() as c:
            c.execute("DELETE FROM derived_specs WHERE owner=%s", (spec.owner,))
            for space in spec.spaces:
                c.execute(
                    "INSERT INTO derived_specs(owner, space, on_delete) VALUES(%s,%s,%s)",
                    (spec.owner, space, spec.on_delete),
                )

    def put_items(self, ns: int, space: str, items: Sequence[NewItem]) -> None:
        """Insert items; an existing key is kept (idempotent), and an item whose source or dependency turns are
        not all in the log (deleted meanwhile) is not created."""
        if not items:
            return
        with self._write() as c:
            wanted_all = sorted({s for item in items for s in (*item.sources, *item.depends)})
            alive = (
                {int(r[0]) for r in c.execute("SELECT seq FROM turns WHERE ns=%s AND seq = ANY(%s)", (ns, wanted_all))}
                if wanted_all
                else set()
            )
            links: list[tuple[int, int, int, int]] = []
            for item in items:
                cited = set(item.sources)
                wanted = sorted(cited | set(item.depends))
                if any(s not in alive for s in wanted):
                    continue
                row = c.execute(
                    "INSERT INTO items(ns, space, key, text, meta, tokens) VALUES(%s,%s,%s,%s,%s,%s)"
                    " ON CONFLICT(ns, space, key) DO NOTHING RETURNING id",
                    (
                        ns,
                        space,
                        _enc(item.key),
                        _enc(item.text),
                        json.dumps(item.meta, ensure_ascii=False),
                        item.tokens,
                    ),
                ).fetchone()
                if row is not None:
                    links += [(ns, int(row[0]), s, int(s in cited)) for s in wanted]
            if links:
                with c.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO item_turns(ns, item, turn_seq, cited) VALUES(%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                        links,
                    )

    def item_ids(self, ns: int, space: str, keys: Sequence[str]) -> dict[str, int]:
        rows = self._query(
            "SELECT key, id FROM items WHERE ns=%s AND space=%s AND key = ANY(%s)", (ns, space, [_enc(k) for k in keys])
        )
        return {_dec(k): int(i) for k, i in rows}

    def items_after(self, ns: int, space: str, after_id: int) -> list[tuple[int, str]]:
        """(id, text) of the space's items newer than `after_id`, in id order: feeds incremental indexes."""
        rows = self._query(
            "SELECT id, text FROM items WHERE ns=%s AND space=%s AND id>%s ORDER BY id", (ns, space, after_id)
        )
        return [(int(i), _dec(t)) for i, t in rows]

    def get_items(self, ns: int, ids: Sequence[int]) -> dict[int, Item]:
        """Items by id with the ids of the turns they cite (provenance)."""
        wanted = list(ids)
        out: dict[int, Item] = {}
        for item_id, key, text, meta, tokens in self._query(
            "SELECT id, key, text, meta, tokens FROM items WHERE ns=%s AND id = ANY(%s)", (ns, wanted)
        ):
            out[int(item_id)] = Item(int(item_id), _dec(key), _dec(text), json.loads(meta), [], int(tokens))
        for item_id, turn_id in self._query(
            "SELECT it.item, t.turn_id FROM item_turns it JOIN turns t ON t.ns = it.ns AND t.seq = it.turn_seq"
            " WHERE it.ns=%s AND it.item = ANY(%s) AND it.cited=1 ORDER BY t.seq",
            (ns, wanted),
        ):
            if int(item_id) in out:
                out[int(item_id)].turn_ids.append(_dec(turn_id))
        return out

    def items_in_order(self, ns: int, space: str) -> list[tuple[int, int]]:
        """(id, token count) of every item of a space, in log order of their first cited turn."""
        rows = self._query(
            "SELECT i.id, i.tokens FROM items i JOIN item_turns it ON it.ns = i.ns AND it.item = i.id"
            " WHERE i.ns=%s AND i.space=%s AND it.cited=1 GROUP BY i.id, i.tokens ORDER BY MIN(it.turn_seq), i.id",
            (ns, space),
        )
        return [(int(i), int(t)) for i, t in rows]

    # ------------------------------------------------------------------ vectors and the embedding cache
    def items_without_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> list[tuple[int, str]]:
        """(id, text) of those of the given items that have no vector from `model` yet."""
        rows = self._query(
            "SELECT i.id, i.text FROM items i WHERE i.ns=%s AND i.id = ANY(%s) AND NOT EXISTS"
            " (SELECT 1 FROM vectors v WHERE v.ns = i.ns AND v.item = i.id AND v.model=%s) ORDER BY i.id",
            (ns, sorted(set(item_ids)), model),
        )
        return [(int(i), _dec(t)) for i, t in rows]

    def item_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The vectors from `model` of the given items (those that have one)."""
        rows = self._query(
            "SELECT item, vec FROM vectors WHERE ns=%s AND model=%s AND item = ANY(%s)",
            (ns, model, sorted(set(item_ids))),
        )
        return {int(i): _array(v) for i, v in rows}

    def put_vectors(self, ns: int, space: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Store (item id, text hash, vector) rows, and remember each vector in the embedding cache; a partition
        that grows past `hnsw_threshold` vectors gets its HNSW index."""
        if not rows:
            return
        with self._write() as c:
            alive = {
                int(r[0])
                for r in c.execute("SELECT id FROM items WHERE ns=%s AND id = ANY(%s)", (ns, [r[0] for r in rows]))
            }
            vecs, cache = [], []
            for item_id, digest, vec in rows:
                if item_id not in alive:  # nothing is written for an item deleted while it was being embedded
                    continue
                array = np.asarray(vec, dtype=np.float32).reshape(-1)
                vecs.append((ns, item_id, model, space, digest, array))
                cache.append((ns, digest, model, array.tobytes()))
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO vectors(ns, item, model, space, text_hash, vec) VALUES(%s,%s,%s,%s,%s,%s)"
                    " ON CONFLICT DO NOTHING",
                    vecs,
                )
                cur.executemany(
                    "INSERT INTO embed_cache(ns, text_hash, model, vec) VALUES(%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                    cache,
                )
            if vecs:
                self._maybe_index(c, ns, space, model, len(vecs[0][5]))

    def _maybe_index(self, c: Any, ns: int, space: str, model: str, dims: int) -> None:
        """Build the partition's HNSW index once it holds `hnsw_threshold` vectors (inside the writing
        transaction: the index exists from the commit on that made the partition large)."""
        if c.execute(
            "SELECT 1 FROM vector_indexes WHERE ns=%s AND space=%s AND model=%s", (ns, space, model)
        ).fetchone():
            return
        count = c.execute(
            "SELECT COUNT(*) FROM (SELECT 1 FROM vectors WHERE ns=%s AND space=%s AND model=%s LIMIT %s) t",
            (ns, space, model, self.hnsw_threshold),
        ).fetchone()[0]
        if count >= self.hnsw_threshold:
            self.build_vector_index(ns, space, model, dims, conn=c)

    def build_vector_index(self, ns: int, space: str, model: str, dims: int, *, conn: Any = None) -> str:
        """Create the partial HNSW index (cosine) over one namespace's vectors of one space and model."""
        name = "vec_hnsw_" + hashlib.sha1(f"{ns}\x00{space}\x00{model}".encode()).hexdigest()[:20]
        statement = sql.SQL(
            "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw ((vec::vector({dims})) vector_cosine_ops)"
            " WITH (m = {m}, ef_construction = {ef}) WHERE ns = {ns} AND space = {space} AND model = {model}"
        ).format(
            name=sql.Identifier(name),
            table=sql.Identifier(SCHEMA, "vectors"),
            dims=sql.Literal(dims),
            m=sql.Literal(HNSW_M),
            ef=sql.Literal(HNSW_EF_CONSTRUCTION),
            ns=sql.Literal(ns),
            space=sql.Literal(space),
            model=sql.Literal(model),
        )
        register = (
            "INSERT INTO vector_indexes(ns, space, model, dims, name) VALUES(%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING"
        )
        # Fresh statistics: with the table's old ones (none, or from when the partition was small) the planner
        # estimates a row or two for the partition and sorts it through the btree instead of using this index.
        analyze = sql.SQL("ANALYZE {}").format(sql.Identifier(SCHEMA, "vectors"))
        if conn is not None:
            conn.execute(statement)
            conn.execute(register, (ns, space, model, dims, name))
            conn.execute(analyze)
        else:
            with self._write() as c:
                c.execute("SET LOCAL maintenance_work_mem = '1GB'")
                c.execute(statement)
                c.execute(register, (ns, space, model, dims, name))
                c.execute(analyze)
        log.info("built HNSW index %s over namespace %d, space %s, model %s", name, ns, space, model)
        return name

    def _index_of(self, ns: int, space: str, model: str) -> tuple[str, int] | None:
        key = (ns, space, model)
        if key not in self._hnsw:
            rows = self._query("SELECT name, dims FROM vector_indexes WHERE ns=%s AND space=%s AND model=%s", key)
            self._hnsw[key] = (rows[0][0], int(rows[0][1])) if rows else None
            return self._hnsw[key]
        return self._hnsw[key]

    def vector_search(
        self, ns: int, space: str, model: str, vector: np.ndarray, k: int, *, exact: bool = False
    ) -> list[tuple[int, float]]:
        """Top-k (item id, cosine) among one namespace's vectors of one space and model, in the database: exact
        below the HNSW threshold (or when `exact`), through the partition's HNSW index above it."""
        if k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        index = None if exact else self._index_of(ns, space, model)
        if index is None or index[1] != len(query):
            rows = self._query(
                "SELECT item, 1 - (vec <=> %s) FROM vectors WHERE ns=%s AND space=%s AND model=%s"
                " ORDER BY vec <=> %s, id LIMIT %s",
                (query, ns, space, model, query, k),
            )
        else:
            # Literals, not parameters: the planner must see the partial index's predicate to use it.
            statement = sql.SQL(
                "SELECT item, 1 - ((vec::vector({d})) <=> %s::vector({d})) FROM vectors WHERE ns = {ns} AND"
                " space = {space} AND model = {model} ORDER BY (vec::vector({d})) <=> %s::vector({d}) LIMIT %s"
            ).format(d=sql.Literal(index[1]), ns=sql.Literal(ns), space=sql.Literal(space), model=sql.Literal(model))
            ef = max(HNSW_EF_SEARCH, 2 * k)
            if ef != HNSW_EF_SEARCH and self._bound.conn is None:
                with self.snapshot():
                    # SET LOCAL returns no rows (a read fetches them): set_config(..., true) is the same, as a query
                    self._query("SELECT set_config('hnsw.ef_search', %s, true)", (str(int(ef)),))
                    rows = self._query(statement, (query, query, k))
            else:
                rows = self._query(statement, (query, query, k))
        out = []
        for item, score in rows:
            value = float(score) if score is not None else 0.0
            out.append((int(item), 0.0 if value != value else value))  # NaN (a zero vector) scores 0
        return out

    def vector_count(self, ns: int, space: str, model: str) -> int:
        return int(
            self._query("SELECT COUNT(*) FROM vectors WHERE ns=%s AND space=%s AND model=%s", (ns, space, model))[0][0]
        )

    def cache_embeddings(self, ns: int, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None:
        """Remember (text hash, vector) rows of texts that are not items (e.g. vocabulary labels)."""
        if self.read_only or not rows:
            return
        with self._write() as c, c.cursor() as cur:
            cur.executemany(
                "INSERT INTO embed_cache(ns, text_hash, model, vec) VALUES(%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                [(ns, h, model, np.asarray(v, dtype=np.float32).tobytes()) for h, v in rows],
            )

    def cached_embeddings(self, ns: int, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self._query(
            "SELECT text_hash, vec FROM embed_cache WHERE ns=%s AND model=%s AND text_hash = ANY(%s)",
            (ns, model, list(set(hashes))),
        )
        return {h: np.frombuffer(bytes(blob), dtype=np.float32) for h, blob in rows}

    # ------------------------------------------------------------------ labels and engine state
    def put_labels(self, ns: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """(item id, kind, label) rows, e.g. an event type or an entity type of a step."""
        if not rows:
            return
        with self._write() as c, c.cursor() as cur:
            cur.executemany(
                "INSERT INTO labels(ns, item, kind, label) VALUES(%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                [(ns, item, kind, _enc(label)) for item, kind, label in rows],
            )

    def relabel(self, ns: int, kind: str, mapping: dict[str, str], items: Sequence[int] | None = None) -> int:
        """Rename labels of one kind (old -> new), on every item of the namespace or only on `items`; an item
        that already has the new label keeps one copy. Returns how many label rows changed."""
        changed = 0
        with self._write() as c:
            for old, new in mapping.items():
                scope, params = "", [ns, kind, _enc(old)]
                if items is not None:
                    scope = " AND item = ANY(%s)"
                    params.append(list(items))
                found = c.execute(
                    f"SELECT item FROM labels WHERE ns=%s AND kind=%s AND label=%s{scope}", params
                ).fetchall()
                if found:
                    with c.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO labels(ns, item, kind, label) VALUES(%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                            [(ns, item, kind, _enc(new)) for (item,) in found],
                        )
                c.execute(f"DELETE FROM labels WHERE ns=%s AND kind=%s AND label=%s{scope}", params)
                changed += len(found)
        return changed

    def labels_in_space(self, ns: int, space: str) -> list[tuple[int, str, str]]:
        """(item id, kind, label) of every labelled item of a space, in item order."""
        rows = self._query(
            "SELECT l.item, l.kind, l.label FROM labels l JOIN items i ON i.ns = l.ns AND i.id = l.item"
            " WHERE l.ns=%s AND i.space=%s ORDER BY l.item, l.kind, l.label",
            (ns, space),
        )
        return [(int(i), k, _dec(label)) for i, k, label in rows]

    def labels_of(self, ns: int, item: int) -> list[tuple[str, str]]:
        rows = self._query("SELECT kind, label FROM labels WHERE ns=%s AND item=%s ORDER BY kind, label", (ns, item))
        return [(k, _dec(label)) for k, label in rows]

    def kv_set(self, ns: int, owner: str, key: str, value: Any) -> None:
        """Engine state. Only an owner whose state is rebuilt on delete may keep any (see SQLiteStore.kv_set)."""
        if self._query("SELECT 1 FROM derived_specs WHERE owner=%s AND on_delete='rows' LIMIT 1", (owner,)):
            raise StoreError(f"{owner!r} declared on_delete='rows': its derived state must be items, not engine state")
        with self._write() as c:
            c.execute(
                "INSERT INTO kv(ns, engine, key, value) VALUES(%s,%s,%s,%s)"
                " ON CONFLICT(ns, engine, key) DO UPDATE SET value=excluded.value",
                (ns, owner, _enc(key), json.dumps(value, ensure_ascii=False)),
            )

    def kv_get(self, ns: int, owner: str, key: str, default: Any = None) -> Any:
        rows = self._query("SELECT value FROM kv WHERE ns=%s AND engine=%s AND key=%s", (ns, owner, _enc(key)))
        return json.loads(rows[0][0]) if rows else default

    # ------------------------------------------------------------------ engine progress and cache epochs
    def watermark(self, ns: int, key: str) -> int:
        rows = self._query("SELECT upto FROM watermarks WHERE ns=%s AND engine=%s", (ns, key))
        return int(rows[0][0]) if rows else 0

    def set_watermark(self, ns: int, key: str, upto: int) -> None:
        with self._write() as c:
            c.execute(
                "INSERT INTO watermarks(ns, engine, upto) VALUES(%s,%s,%s)"
                " ON CONFLICT(ns, engine) DO UPDATE SET upto=GREATEST(watermarks.upto, excluded.upto)",
                (ns, key, upto),
            )

    def epoch(self, ns: int) -> int:
        rows = self._query("SELECT epoch FROM epochs WHERE ns=%s", (ns,))
        return int(rows[0][0]) if rows else 0

    def _bump_epoch(self, c: Any, ns: int) -> None:
        c.execute(
            "INSERT INTO epochs(ns, epoch) VALUES(%s, 1) ON CONFLICT(ns) DO UPDATE SET epoch = epochs.epoch + 1", (ns,)
        )

    def derived_state(self, ns: int) -> dict[str, Any]:
        """Every derived row of a namespace in a canonical, store-independent form (turn ids, not row ids):
        equal to SQLiteStore.derived_state for the same log."""
        q = self._query
        with self.snapshot():
            return canonical_state(
                ((int(seq), _dec(t)) for seq, t in q("SELECT seq, turn_id FROM turns WHERE ns=%s", (ns,))),
                (
                    (int(i), space, _dec(key), _dec(text), meta, tokens)
                    for i, space, key, text, meta, tokens in q(
                        "SELECT id, space, key, text, meta, tokens FROM items WHERE ns=%s", (ns,)
                    )
                ),
                (
                    (int(i), int(seq), cited)
                    for i, seq, cited in q("SELECT item, turn_seq, cited FROM item_turns WHERE ns=%s", (ns,))
                ),
                (
                    (int(i), kind, _dec(label))
                    for i, kind, label in q("SELECT item, kind, label FROM labels WHERE ns=%s", (ns,))
                ),
                (
                    (int(i), model, digest, _array(vec).tobytes())
                    for i, model, digest, vec in q("SELECT item, model, text_hash, vec FROM vectors WHERE ns=%s", (ns,))
                ),
                (
                    (owner, _dec(key), value)
                    for owner, key, value in q("SELECT engine, key, value FROM kv WHERE ns=%s", (ns,))
                ),
                ((key, int(upto)) for key, upto in q("SELECT engine, upto FROM watermarks WHERE ns=%s", (ns,))),
            )

    # ------------------------------------------------------------------ the model-call cache
    def cached_call(self, ns: int, key: str) -> str | None:
        """The JSON response of a model call made for this namespace, if it is cached."""
        rows = self._query("SELECT response FROM llm_calls WHERE ns=%s AND key=%s", (ns, key))
        return rows[0][0] if rows else None

    def cache_call(self, ns: int, call: CachedCall) -> None:
        if self.read_only:
            return
        with self._write() as c:
            c.execute(
                "INSERT INTO llm_calls(ns, key, backend, method, stage, request, response, prompt_tokens,"
                " completion_tokens, seconds, at) VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT(ns, key) DO UPDATE SET response=excluded.response, request=excluded.request,"
                " at=excluded.at",
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
        return [
            dict(zip(keys, (b, s, m, int(n), int(p or 0), int(cpl or 0), float(sec or 0.0)), strict=True))
            for b, s, m, n, p, cpl, sec in rows
        ]

    # ------------------------------------------------------------------ history
    def _log(self, c: Any, ns: int | None, op: str, detail: dict[str, Any]) -> None:
        c.execute(
            "INSERT INTO history(ns, at, op, detail) VALUES(%s,%s,%s,%s)",
            (ns, time.time(), op, json.dumps(detail, ensure_ascii=False)),
        )

    def history(self, ns: int, limit: int = 100) -> list[dict[str, Any]]:
        """The namespace's changes, newest first."""
        rows = self._query("SELECT id, at, op, detail FROM history WHERE ns=%s ORDER BY id DESC LIMIT %s", (ns, limit))
        return [{"id": int(i), "at": at, "op": op, **json.loads(detail)} for i, at, op, detail in rows]


def _array(value: Any) -> np.ndarray:
    """A pgvector value (numpy array or pgvector's Vector) as float32."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
