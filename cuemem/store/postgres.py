"""The server-grade store: PostgreSQL + pgvector, the same contract as the embedded SQLite store (docs/design.md
promises 1-3 and 8).

Selected by a DSN (`postgresql://…`) wherever a store path is accepted. Everything lives in the schema `cuemem`
of the database (postgres_schema.py); every key leads with the namespace, so each query names its partition. The
turn log, derived state and the forgetting cascade are `SQLStore`'s (sql.py); this module is the dialect and what
is PostgreSQL's own. Connections come from a psycopg 3 pool; a write transaction takes advisory locks first
(postgres_schema.write_locks): writers of different namespaces run side by side across processes and machines, those
of one namespace one at a time, as SQLite's `BEGIN IMMEDIATE` makes every writer (one indexer per namespace and
engine, a namespace's log order = its commit order). Readers never wait (MVCC).
Vector search runs in the database (postgres_vectors.py): exact below `hnsw_threshold` vectors of a (namespace,
space, model), through a per-namespace partial HNSW index (cosine) above it. Schema migrations are numbered like
SQLite's (`MIGRATIONS`).

PostgreSQL text cannot hold NUL characters; user text containing one (or the escape character U+E000) is stored
reversibly escaped, so what is read back is exactly what was written.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from ..config import is_dsn, redact
from ..errors import StoreError
from . import scrub
from .postgres_schema import (
    INIT_LOCK,
    MIGRATIONS,
    PARTITIONS,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    WRITE_LOCK,
    decode_text,
    encode_text,
    schema_statements,
    write_locks,
)
from .postgres_scrub import PgScrub, _first_line
from .postgres_vectors import (
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    HNSW_THRESHOLD,
    MAINTENANCE_WORK_MEM,
    PgVectors,
)

log = logging.getLogger(__name__)

try:  # the optional extra `postgres`
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - reported when a DSN is opened
    psycopg = None  # type: ignore[assignment]

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_EF_SEARCH",
    "HNSW_M",
    "HNSW_THRESHOLD",
    "TABLES",
    "WRITE_LOCK",
    "PostgresStore",
    "is_dsn",
    "redact",
]

IDLE_CHECK_SECONDS = 1.0  # a pooled connection idle for longer is checked with a round trip before use
_PINNED_NS = re.compile(r"\+(?=(?:\w+\.)?ns\b)")


@functools.lru_cache(maxsize=1024)
def _to_pg(statement: str) -> str:
    """Shared SQL (SQLite's spelling) as psycopg takes it: `%s` parameters, and without SQLite's planner hint `+ns`,
    which here would keep PostgreSQL off the (ns, …) keys every table leads with."""
    return _PINNED_NS.sub("", statement).replace("%", "%%").replace("?", "%s")


class _Bound(threading.local):
    """The connection this thread is inside a transaction or snapshot on, if any."""

    conn: Any = None
    depth: int = 0
    writing: bool = False
    # the write locks held: "all" (the store-wide lock) or the namespaces whose locks are held (issue 36)
    scope: str | set[int] = "all"
    unscrubbed: set[str] | None = None  # tables this thread's open write transaction deleted from (sql_dialect.py)


class PostgresStore(PgScrub, PgVectors):
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
        scrub_after_s: float | None = None,
        partitions: int = PARTITIONS,
    ) -> None:
        """`scrub_after_s`: seconds from a delete's commit to the VACUUM FULL of the tables that held its rows
        (scrub.py; default POSTGRES_SCRUB_AFTER_S). `partitions`: how many hash partitions by namespace a
        new store's tables holding user text get (fixed then; an existing store keeps its own): more make each
        scrub after a delete rewrite less, fewer make a small store cheaper to create and checkpoint."""
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
        if not 1 <= partitions <= 1024:
            raise StoreError(f"partitions must be between 1 and 1024, got {partitions}")
        self._partitions = partitions  # for a new store; read from the store once it is open
        self._partition_of: dict[int, int] = {}  # namespace id -> its partitions' remainder
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL DSN {self.path}: {_first_line(exc)}") from exc
        self._initialise()
        # Custom plans only: a generic plan of a query on a partitioned table locks every partition when it runs, so
        # a scrub's VACUUM FULL of one partition would hold up every namespace's queries, not only its own.
        options = "-c search_path=cuemem,public -c plan_cache_mode=force_custom_plan"
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
        self._partitions = int(self._query("SELECT value FROM meta WHERE key='partitions'")[0][0])
        if not read_only:
            delay = scrub.POSTGRES_SCRUB_AFTER_S if scrub_after_s is None else scrub_after_s
            self._scrubber = scrub.Scrubber(self._scrub, delay, self.path)

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
                        c.execute(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")  # HNSW rebuilds
                        while current < SCHEMA_VERSION:
                            log.warning("cuemem: migrating %s from schema %d to %d", self.path, current, current + 1)
                            MIGRATIONS[current](c, self._hnsw_on_partition, self._partitions)
                            current += 1
                            c.execute(f"UPDATE {SCHEMA}.meta SET value=%s WHERE key='schema_version'", (str(current),))
                        return
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
                    for statement in schema_statements(self._partitions):
                        c.execute(statement)
                    c.execute("INSERT INTO meta(key, value) VALUES('partitions', %s)", (str(self._partitions),))
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

    # ------------------------------------------------------------------ connections and transactions
    def close(self) -> None:
        """Run a pending scrub (a delete's rows leave the table files before the process may exit), then close."""
        if self._scrubber is not None:
            self._scrubber.close()
        self._pool.close()

    def _unavailable(self, exc: BaseException, doing: str) -> StoreError:
        return StoreError(f"PostgreSQL at {self.path} is unavailable; could not {doing}: {_first_line(exc)}")

    def _getconn(self, *, check: bool = False) -> Any:
        """A pooled connection that works. One that sat idle for over a second (or any, with `check`) is checked
        with a round trip first, and a broken one is replaced at once rather than waited on with the pool's pauses
        between checks, so after the server went away and came back (stopped, restarted, failed over) the next
        request goes through. Connections in steady use are not checked: a search makes ~10 reads, and a check
        before each doubled its round trips (benchmarks/load.py)."""
        deadline = time.monotonic() + self.timeout
        probed = False
        while True:
            if check and not probed:  # one was found broken: if the server refuses a new one, say so now
                self._probe()
                probed = True
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
                if not check:  # the first broken one: its idle siblings were most likely cut off with it (a restart),
                    with suppress(Exception):  # so every idle connection is checked now, in one pass, and the
                        self._pool.check()  # broken ones replaced together rather than met one by one
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

    @property
    def _unscrubbed(self) -> set[str] | None:
        """Per thread here: writers of different namespaces commit side by side (sql_dialect.py `_forgot`)."""
        return self._bound.unscrubbed

    @_unscrubbed.setter
    def _unscrubbed(self, tables: set[str] | None) -> None:
        self._bound.unscrubbed = tables

    def _widen(self, conn: Any, ns: int | None) -> None:
        """A nested write beyond the locks its transaction holds takes the missing one (PostgreSQL detects a
        deadlock with another writer doing the same, and undoes that write)."""
        bound = self._bound
        if bound.scope == "all" or (ns is not None and ns in bound.scope):
            return
        conn.execute(*write_locks(ns)[-1])
        bound.scope = "all" if ns is None else {*bound.scope, ns}

    @contextmanager
    def _write(self, ns: int | None = None, *, patient: bool = True) -> Iterator[Any]:
        """A write transaction (nested: a savepoint) holding the writer lock of namespace `ns`, or of the whole
        store when `ns` is None. Not `patient`: a writer holding the lock is waited for 20 ms at most, then
        StoreError."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; this needs to write")
        bound = self._bound
        if bound.conn is not None:
            if not bound.writing:
                raise StoreError("cannot write inside a snapshot")
            conn, depth = bound.conn, bound.depth
            try:
                self._widen(conn, ns)
                conn.execute(f"SAVEPOINT sp{depth}")
            except psycopg.Error as exc:
                raise self._failed(exc) from exc
            bound.depth += 1
            try:
                yield conn
            except BaseException as exc:
                bound.depth = depth
                self._undo(exc, lambda: self._rollback_to(conn, depth), psycopg.Error, self._failed)
            bound.depth = depth
            try:
                conn.execute(f"RELEASE SAVEPOINT sp{depth}")
            except psycopg.Error as exc:
                raise self._failed(exc) from exc
            return
        try:
            impatient = [] if patient else [("SET LOCAL lock_timeout = '20ms'", ())]
            conn = self._begun(("BEGIN", ()), *impatient, *write_locks(ns))
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        bound.scope = "all" if ns is None else {ns}
        bound.conn, bound.writing, bound.depth = conn, True, 1
        try:
            try:
                yield conn
            except BaseException as exc:
                self._hnsw.clear()
                self._rolled_back()
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                if isinstance(exc, psycopg.Error):
                    raise self._failed(exc) from exc
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                self._hnsw.clear()
                self._rolled_back()  # (or lost with the connection: the scrub is not scheduled; a retry would be)
                if conn.broken or conn.closed:  # lost with the COMMIT sent: the server may have committed first
                    raise StoreError(
                        f"PostgreSQL at {self.path} is unavailable: {_first_line(exc)}; the connection"
                        " was lost while committing, so this write may or may not have been stored"
                    ) from exc
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise self._failed(exc) from exc
        finally:
            bound.conn, bound.writing, bound.depth, bound.scope = None, False, 0, "all"
            self._putconn(conn)
        self._committed()

    def _failed(self, exc: psycopg.Error) -> StoreError:
        """The error a failed write reports; the transaction was undone, so what was stored before is intact."""
        if isinstance(exc, psycopg.errors.LockNotAvailable):  # a write that does not wait (`patient` False)
            return StoreError(f"another writer holds the lock at {self.path}; this write was not waited for")
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

    # ------------------------------------------------------------------ the dialect (sql_dialect.py)
    def _sql(self, sql: str) -> str:
        return _to_pg(sql)

    def _in(self, values: Iterable[Any]) -> Iterator[tuple[str, list[Any]]]:
        values = list(values)
        if values:
            yield "= ANY(?)", [values]

    @staticmethod
    def _enc(text: str) -> str:
        return encode_text(text)

    @staticmethod
    def _dec(text: str) -> str:
        return decode_text(text)

    def _insert_id(self, c: Any, sql: str, params: Sequence[Any], column: str) -> int | None:
        row = c.execute(self._sql(f"{sql} RETURNING {column}"), params).fetchone()
        return None if row is None else int(row[0])

    def _many(self, c: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with c.cursor() as cur:
                cur.executemany(self._sql(sql), rows)

    def _drop_unused_embeddings(self, c: Any, ns: int) -> None:
        """Through the index on (ns, text_hash) of vectors, not one pass over the namespace's hashes."""
        self._run(
            c,
            "DELETE FROM embed_cache e WHERE e.ns=? AND NOT EXISTS"
            " (SELECT 1 FROM vectors v WHERE v.ns = e.ns AND v.text_hash = e.text_hash)",
            (ns,),
        )

    # ------------------------------------------------------------------ forgetting: what is PostgreSQL's own
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int:
        """SQLStore.delete_turns, answering at once when there is nothing to delete: without queueing behind the
        writer lock."""
        if self._bound.conn is None:  # nothing to delete: answer without queueing behind the writer lock
            if session_id is not None:
                found = self._query(
                    "SELECT 1 FROM turns WHERE ns=%s AND session_id=%s LIMIT 1", (ns, encode_text(session_id))
                )
            else:
                found = self._query(
                    "SELECT 1 FROM turns WHERE ns=%s AND turn_id = ANY(%s) LIMIT 1",
                    (ns, [encode_text(t) for t in turn_ids or []]),
                )
            if not found:
                return 0
        return super().delete_turns(ns, turn_ids, session_id)

    def delete_namespace(self, ns: int) -> int:
        """SQLStore.delete_namespace; its HNSW indexes go with it (`_namespace_dropped`)."""
        count = super().delete_namespace(ns)
        self._hnsw.clear()
        return count
