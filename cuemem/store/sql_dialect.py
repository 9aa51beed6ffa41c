"""The dialect under `SQLStore` (sql.py): what the SQLite and PostgreSQL stores say differently, and the plumbing
the shared SQL runs through.

The shared SQL is written in SQLite's spelling: `?` parameters, `IN (…)` lists from `_in`, and a unary `+` before a
namespace column where SQLite must not pick the namespace's index (`+ns`: "look up by the other key"). A dialect
turns that into its own (`_sql`: PostgreSQL's `%s` parameters, no `+`; `_in`: `= ANY(?)` arrays), and supplies the
rest: how a text value is stored (`_enc`/`_dec`), a vector (`_vec_param`/`_vec_array`), the id of a row just
inserted (`_insert_id`), many rows at once (`_many`), the write lock and its transaction (`_write`), reads
(`_query`) and snapshots. The defaults here are SQLite's. Upserts use the syntax both share
(`ON CONFLICT … DO NOTHING / DO UPDATE`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NoReturn, Self

import numpy as np

from ..errors import StoreError
from .scrub import Scrubber

CHUNK = 500  # values per `IN (…)` list
# The writer scope of creating a namespace's row (ids start at 1, so no namespace's own): those writes exclude one
# another, not the writers of existing namespaces (the insert is idempotent on the namespace's unique key).
NEW_NAMESPACE = 0


class SQLDialect:
    """How a SQL store spells and runs the shared statements; each store overrides what it says otherwise."""

    read_only: bool
    _salt: bytes
    _scrubber: Scrubber | None = None  # the scrub after deletes (scrub.py); None for in-memory or read-only stores
    _unscrubbed: set[str] | None = None  # tables the open write transaction deleted from, scrubbed once it commits

    # ------------------------------------------------------------------ the dialect
    def _write(self, ns: int | None = None, *, patient: bool = True) -> AbstractContextManager[Any]:
        """A write transaction holding the writer lock of namespace `ns` (None: of the whole store), yielding its
        connection (nested: a savepoint). Stores with one writer at a time (SQLite) ignore `ns`. Not `patient`:
        another writer holding the lock is waited for a few milliseconds only, then StoreError."""
        raise NotImplementedError

    def _query(self, sql: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read, in the dialect's own SQL."""
        raise NotImplementedError

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one consistent state of the store."""
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        """The shared SQL (SQLite's spelling) in this dialect's."""
        return sql

    def _in(self, values: Iterable[Any]) -> Iterator[tuple[str, list[Any]]]:
        """`(test, params)` pieces matching a column against `values` (`f"col {test}"`); none for no values."""
        values = list(values)
        for start in range(0, len(values), CHUNK):
            chunk = values[start : start + CHUNK]
            yield f"IN ({','.join('?' * len(chunk))})", chunk

    @staticmethod
    def _enc(text: str) -> str:
        """User text as the database can hold it."""
        return text

    @staticmethod
    def _dec(text: str) -> str:
        """User text as it was written (the inverse of `_enc`)."""
        return text

    @staticmethod
    def _vec_param(vector: np.ndarray) -> Any:
        """A float32 vector as the `vectors.vec` column takes it."""
        return vector.tobytes()

    @staticmethod
    def _vec_array(value: Any) -> np.ndarray:
        """A `vectors.vec` value as float32."""
        return np.frombuffer(value, dtype=np.float32)

    def _insert_id(self, c: Any, sql: str, params: Sequence[Any], column: str) -> int | None:
        """Run an `INSERT … ON CONFLICT DO NOTHING` of one row: the new row's `column` (its key), None if skipped."""
        cur = c.execute(self._sql(sql), params)
        return int(cur.lastrowid) if cur.rowcount == 1 else None

    def _many(self, c: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each of `rows`."""
        c.executemany(self._sql(sql), rows)

    def _vectors_added(self, c: Any, ns: int, space: str, model: str, dims: int) -> None:
        """Called in the transaction that stored vectors of a (namespace, space, model) partition."""

    def _drop_unused_embeddings(self, c: Any, ns: int) -> None:
        """Delete the namespace's cached embeddings that no vector uses (SQLite: one pass over its hashes)."""
        self._run(
            c,
            "DELETE FROM embed_cache WHERE ns=? AND text_hash NOT IN (SELECT text_hash FROM vectors WHERE ns=?)",
            (ns, ns),
        )

    def _namespace_dropped(self, c: Any, ns: int) -> None:
        """Called in the transaction that deletes a namespace, before its row goes: the dialect's own rows."""

    # ------------------------------------------------------------------ the scrub after deletes (scrub.py)
    def _forgot(self, ns: int, tables: Iterable[str]) -> None:
        """Called inside the write transaction of a delete in namespace `ns`: once it commits, what held the deleted
        rows of `tables` is scrubbed."""
        if self._scrubber is not None:
            self._unscrubbed = (self._unscrubbed or set()) | self._scrub_targets(ns, tables)

    def _scrub_targets(self, ns: int, tables: Iterable[str]) -> set[str]:
        """What the scrub rewrites for deleted rows of namespace `ns` in `tables` (PostgreSQL: their partitions)."""
        return set(tables)

    def _committed(self) -> None:
        """The outermost write transaction committed: schedule the scrub of what its deletes left in the files."""
        tables, self._unscrubbed = self._unscrubbed, None
        if tables and self._scrubber is not None:
            self._scrubber.schedule(tables)

    def _rolled_back(self) -> None:
        """The outermost write transaction was undone: nothing of it was deleted."""
        self._unscrubbed = None

    def scrub_pending(self) -> bool:
        """Whether a delete is still waiting for its scrub (its bytes may still be in the store's files)."""
        return self._scrubber is not None and self._scrubber.pending

    # ------------------------------------------------------------------ plumbing
    @staticmethod
    def _rollback_to(conn: Any, depth: int) -> None:
        """Undo a nested write: back to its savepoint, which is then released."""
        conn.execute(f"ROLLBACK TO SAVEPOINT sp{depth}")
        conn.execute(f"RELEASE SAVEPOINT sp{depth}")

    @staticmethod
    def _undo(
        exc: BaseException, rollback: Callable[[], object], error: type[Exception], failed: Callable[[Any], StoreError]
    ) -> NoReturn:
        """Roll a failed write back and raise what it reports: a database `error` as `failed(exc)`, its real cause
        (a full disk above all), never the failed rollback that follows it; any other exception as it was."""
        try:
            rollback()
        except error:
            if isinstance(exc, error):  # e.g. SQLite already rolled back (disk full, I/O error)
                raise failed(exc) from exc
            raise
        if isinstance(exc, error):
            raise failed(exc) from exc
        raise exc

    def _run(self, c: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute shared SQL on a connection inside `_write`."""
        return c.execute(self._sql(sql), params)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read in shared SQL."""
        return self._query(self._sql(sql), params)

    @property
    def salt(self) -> bytes:
        """This store's random salt: derived ids and cache keys are not guessable from content without it."""
        return self._salt

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self, ns: int | None = None) -> Iterator[None]:
        """A write transaction, one writer at a time across threads and processes: of namespace `ns` (writers of
        other namespaces run beside it where the store allows, PostgreSQL), or of the whole store when `ns` is
        None. A nested call is a savepoint: if it fails, only its own writes are undone, whether or not the caller
        goes on. Reads in other threads meanwhile see the last commit, without waiting."""
        with self._write(ns):
            yield
