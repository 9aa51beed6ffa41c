"""The PostgreSQL store's scrub after deletes (docs/guarantees.md, "A delete reaches the disk"): VACUUM FULL of the
partitions that held a delete's rows (the tables holding user text are hash-partitioned by namespace,
postgres_schema.py), then CHECKPOINT; and `checkpoint()`, the same over every table."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from ..errors import StoreError
from .postgres_schema import PARTITIONED, SCHEMA, TEXT_TABLES, partition_name
from .postgres_vectors import MAINTENANCE_WORK_MEM
from .sql import SQLStore

try:  # the optional extra `postgres`
    import psycopg
except ImportError:  # pragma: no cover - reported when a DSN is opened
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger("cuemem.store.postgres")
BLOCK = 8192  # PostgreSQL's page: an index of that size is its metapage alone


class PgScrub(SQLStore):
    """VACUUM FULL of what held deleted rows: the deleted namespace's partitions, or (checkpoint) every table."""

    path: str
    read_only: bool
    timeout: float
    _bound: Any
    _partitions: int
    _partition_of: dict[int, int]

    def _getconn(self, *, check: bool = False) -> Any:
        raise NotImplementedError

    def _putconn(self, conn: Any) -> None:
        raise NotImplementedError

    def _unavailable(self, exc: BaseException, doing: str) -> StoreError:
        raise NotImplementedError

    def checkpoint(self) -> None:
        """PostgreSQL's meaning of SQLite's checkpoint: VACUUM FULL rewrites every table that holds user text (so
        no live table or index file keeps a deleted row), then CHECKPOINT flushes it. It cannot promise that
        freed disk blocks, old WAL segments, replicas or backups are wiped: that is the operator's (README)."""
        if self.read_only:
            return
        held = self._vacuum_until_clean(self._ever_written())
        if self._scrubber is not None:
            if held:
                self._scrubber.schedule(held)  # still held at the deadline: the background scrub goes on trying
                log.warning("cuemem: a checkpoint of %s left dead rows in %s (an old transaction)", self.path, held)
            else:
                self._scrubber.done()

    def _ever_written(self) -> list[str]:
        """The tables holding user text, with each partitioned one replaced by its partitions that hold or ever
        held a row: a partition whose heap and TOAST are empty and whose indexes are a bare metapage (one page)
        never held a byte of text, and rewriting the 144 partitions of a small store costs a second for nothing."""
        written = self._query(
            "SELECT c.relname FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid"
            " JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace"
            " WHERE n.nspname = %s AND p.relname = ANY(%s) AND (pg_relation_size(c.oid) > 0"
            " OR (c.reltoastrelid <> 0 AND pg_relation_size(c.reltoastrelid) > 0)"
            " OR EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND pg_relation_size(x.indexrelid) > %s))",
            (SCHEMA, list(PARTITIONED), BLOCK),
        )
        return [t for t in TEXT_TABLES if t not in PARTITIONED] + [str(name) for (name,) in written]

    def _vacuum_until_clean(self, tables: Iterable[str]) -> set[str]:
        """VACUUM FULL of `tables` (each table lock waited for up to the store's timeout), again for those whose new
        file still holds dead rows, until none does or the store's timeout has passed; returns those still holding
        them. A transaction older than the delete keeps
        them: another session's read, a scrub running in the background, or PostgreSQL's own autovacuum ANALYZE,
        which holds a snapshot while it samples any table of the database. Once it ended, a rewrite drops them."""
        deadline = time.monotonic() + self.timeout
        held = self._vacuum_full(tables, self.timeout)
        while held and time.monotonic() < deadline:
            time.sleep(0.05)
            held = self._vacuum_full(held, self.timeout)
        return held

    def _vacuum_full(self, tables: Iterable[str], lock_timeout: float) -> set[str]:
        """VACUUM FULL of `tables` (TEXT_TABLES or their partitions, in TEXT_TABLES' order), then CHECKPOINT; returns
        the tables whose new file still holds dead rows, because a transaction older than the delete may still see
        them (they are copied over: scrub them again once it ended)."""
        held: set[str] = set()
        kept = re.compile(r"(\d+) dead row versions cannot be removed yet")

        def notice(diag: Any) -> None:
            found = kept.search(f"{diag.message_primary or ''} {diag.message_detail or ''}")
            if found and int(found.group(1)) > 0:
                held.add(table)

        conn = self._getconn()
        conn.add_notice_handler(notice)
        table = ""
        try:
            # VACUUM FULL needs each table to itself: waiting without end behind another session's open transaction
            # would also queue every read of that table behind it. Give up after `lock_timeout` and say so.
            conn.execute(f"SET lock_timeout = {max(1, int(lock_timeout * 1000))}")
            conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            for table in _in_table_order(tables):
                conn.execute(f"VACUUM (FULL, VERBOSE) {SCHEMA}.{table}")
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
            conn.remove_notice_handler(notice)
            with suppress(psycopg.Error):
                conn.execute("RESET lock_timeout")
                conn.execute("RESET maintenance_work_mem")
            self._putconn(conn)
        return held

    def partition_of(self, c: Any, ns: int) -> str:
        """The suffix of the partitions that hold namespace `ns`: "_p<r>", r its hash's remainder (the same in every
        partitioned table: one modulus, one key type)."""
        remainder = self._partition_of.get(ns)
        if remainder is None:
            remainder = int(
                c.execute(
                    "SELECT r FROM generate_series(0, %s) r"
                    " WHERE satisfies_hash_partition(%s::regclass, %s, r, %s::bigint)",
                    (self._partitions - 1, f"{SCHEMA}.turns", self._partitions, ns),
                ).fetchone()[0]
            )
            self._partition_of[ns] = remainder
        return partition_name("", remainder)

    def _scrub_targets(self, ns: int, tables: Iterable[str]) -> set[str]:
        """Of a partitioned table, only the partition holding `ns` held its deleted rows."""
        suffix = self.partition_of(self._bound.conn, ns)
        return {table + suffix if table in PARTITIONED else table for table in tables}

    def _scrub(self, tables: set[str], wait: bool) -> set[str]:
        """The scrub after a delete (scrub.py): VACUUM FULL of the tables that held deleted rows. In the background
        a table lock is waited for 1 s at most (a VACUUM FULL queued behind a long reader would stall every query
        of the table meanwhile) and a partial scrub is retried later, after a pause; a waited scrub (flush, on
        close) rewrites again at once until nothing is held or the store's timeout has passed."""
        if wait:
            return self._vacuum_until_clean(tables)
        return self._vacuum_full(tables, min(1.0, self.timeout))


_PARTITION = re.compile(r"(\w+?)(?:_p\d+)?")


def _in_table_order(tables: Iterable[str]) -> list[str]:
    """Tables or partitions of TEXT_TABLES, in TEXT_TABLES' order (anything else is not a cuemem table: dropped)."""
    order = {table: i for i, table in enumerate(TEXT_TABLES)}
    known = [(order[m.group(1)], t) for t in set(tables) if (m := _PARTITION.fullmatch(t)) and m.group(1) in order]
    return [t for _, t in sorted(known)]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
