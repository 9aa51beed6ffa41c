"""The PostgreSQL store's vectors: pgvector columns, exact search in the database, and a partial HNSW index (cosine)
per (namespace, space, model) partition once it holds `hnsw_threshold` vectors (docs/design.md promise 8)."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np

from .base import Scores, as_scores
from .postgres_schema import SCHEMA
from .sql import SQLStore

try:  # the optional extra `postgres`
    from psycopg import sql
except ImportError:  # pragma: no cover - reported when a DSN is opened
    sql = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

HNSW_THRESHOLD = 20_000  # vectors of one (namespace, space, model) above which an HNSW index is built
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 16, 64, 100
# Memory for building an HNSW index, and for the scrub's VACUUM FULL, which builds the indexes of the partition it
# rewrites again: with PostgreSQL's default (64 MB) a 100k-vector graph is built on disk, 86 s instead of 17.5 s
# (benchmarks/delete_to_disk.py pg-scrub, 2 cores).
MAINTENANCE_WORK_MEM = "1GB"


class PgVectors(SQLStore):
    """Vector columns and vector search of the PostgreSQL store (pgvector, HNSW)."""

    hnsw_threshold: int
    _bound: Any  # the connection this thread is inside a transaction or snapshot on (postgres.py)
    _hnsw: dict[tuple[int, str, str], tuple[str, int] | None]  # (ns, space, model) -> (index name, dims)

    @staticmethod
    def _vec_param(vector: np.ndarray) -> Any:
        return vector  # pgvector's adapter writes the array

    @staticmethod
    def _vec_array(value: Any) -> np.ndarray:
        return _array(value)

    def _vectors_added(self, c: Any, ns: int, space: str, model: str, dims: int) -> None:
        self._maybe_index(c, ns, space, model, dims)

    def _namespace_dropped(self, c: Any, ns: int) -> None:
        """A deleted namespace's HNSW indexes go with it."""
        for (name,) in c.execute("SELECT name FROM vector_indexes WHERE ns=%s", (ns,)).fetchall():
            c.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
        c.execute("DELETE FROM vector_indexes WHERE ns=%s", (ns,))

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

    def partition_of(self, c: Any, ns: int) -> str:
        """The suffix of the partitions holding namespace `ns` ("_p<r>"; the store's own, postgres_scrub.py)."""
        raise NotImplementedError

    def build_vector_index(self, ns: int, space: str, model: str, dims: int, *, conn: Any = None) -> str:
        """Create the partial HNSW index (cosine) over one namespace's vectors of one space and model, on the
        partition that holds them."""
        if conn is not None:
            return self._hnsw_on_partition(conn, ns, space, model, dims)
        with self._write(ns) as c:
            c.execute(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            return self._hnsw_on_partition(c, ns, space, model, dims)

    def _hnsw_on_partition(self, c: Any, ns: int, space: str, model: str, dims: int) -> str:
        name = "vec_hnsw_" + hashlib.sha1(f"{ns}\x00{space}\x00{model}".encode()).hexdigest()[:20]
        table = "vectors" + self.partition_of(c, ns)
        c.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw ((vec::vector({dims})) vector_cosine_ops)"
                " WITH (m = {m}, ef_construction = {ef}) WHERE ns = {ns} AND space = {space} AND model = {model}"
            ).format(
                name=sql.Identifier(name),
                table=sql.Identifier(SCHEMA, table),
                dims=sql.Literal(dims),
                m=sql.Literal(HNSW_M),
                ef=sql.Literal(HNSW_EF_CONSTRUCTION),
                ns=sql.Literal(ns),
                space=sql.Literal(space),
                model=sql.Literal(model),
            )
        )
        c.execute(
            "INSERT INTO vector_indexes(ns, space, model, dims, name) VALUES(%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
            (ns, space, model, dims, name),
        )
        # Fresh statistics: with the table's old ones (none, or from when the partition was small) the planner
        # estimates a row or two for the namespace and sorts it through the btree instead of using this index.
        c.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(SCHEMA, table)))
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

    def vector_scores(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> Scores:
        """`vector_search` as arrays (item ids, cosines), best first (the database sends rows: built from them)."""
        return as_scores(self.vector_search(ns, space, model, vector, k))


def _array(value: Any) -> np.ndarray:
    """A pgvector value (numpy array or pgvector's Vector) as float32."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)
