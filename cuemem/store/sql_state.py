"""Derived state besides items, written once for both SQL stores (docs/design.md promises 1-3): vectors and the
embedding cache, labels, engine state, watermarks and epochs, and the model-call cache (see sql_dialect.py for the
dialect the SQL is written in). Every statement names its namespace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import StoreError
from .base import CachedCall
from .sql_dialect import SQLDialect


class SQLState(SQLDialect):
    """Vectors, labels, engine state, watermarks, epochs and cached model calls of a SQL store."""

    # ------------------------------------------------------------------ vectors and the embedding cache
    def items_without_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> list[tuple[int, str]]:
        """(id, text) of those of the given items that have no vector from `model` yet."""
        out: list[tuple[int, str]] = []
        for test, params in self._in(sorted(set(item_ids))):
            rows = self._read(
                f"SELECT i.id, i.text FROM items i WHERE i.id {test} AND +i.ns=? AND NOT EXISTS"
                " (SELECT 1 FROM vectors v WHERE +v.ns = +i.ns AND v.item = i.id AND v.model=?) ORDER BY i.id",
                (*params, ns, model),
            )
            out += [(int(i), self._dec(t)) for i, t in rows]
        return out

    def item_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The vectors from `model` of the given items (those that have one)."""
        out: dict[int, np.ndarray] = {}
        for test, params in self._in(sorted(set(item_ids))):
            for item_id, vec in self._read(
                f"SELECT item, vec FROM vectors WHERE item {test} AND +ns=? AND model=?", (*params, ns, model)
            ):
                out[int(item_id)] = self._vec_array(vec)
        return out

    def put_vectors(self, ns: int, space: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Store (item id, text hash, vector) rows, and remember each vector in the embedding cache."""
        if not rows:
            return
        with self._write(ns) as c:
            alive: set[int] = set()
            for test, params in self._in(sorted({r[0] for r in rows})):
                found = self._run(c, f"SELECT id FROM items WHERE +ns=? AND id {test}", (ns, *params))
                alive.update(int(r[0]) for r in found.fetchall())
            vecs, cache = [], []
            for item_id, digest, vec in rows:
                if item_id not in alive:  # nothing is written for an item deleted while it was being embedded
                    continue
                array = np.asarray(vec, dtype=np.float32).reshape(-1)
                vecs.append((ns, item_id, model, space, digest, self._vec_param(array)))
                cache.append((ns, digest, model, array.tobytes()))
            if not vecs:
                return
            self._many(
                c,
                "INSERT INTO vectors(ns, item, model, space, text_hash, vec) VALUES(?,?,?,?,?,?)"
                " ON CONFLICT DO NOTHING",
                vecs,
            )
            self._many(
                c, "INSERT INTO embed_cache(ns, text_hash, model, vec) VALUES(?,?,?,?) ON CONFLICT DO NOTHING", cache
            )
            self._vectors_added(c, ns, space, model, len(np.asarray(rows[0][2]).reshape(-1)))

    def vector_count(self, ns: int, space: str, model: str) -> int:
        """How many vectors one (namespace, space, model) partition holds."""
        return int(
            self._read("SELECT COUNT(*) FROM vectors WHERE ns=? AND space=? AND model=?", (ns, space, model))[0][0]
        )

    def cache_embeddings(self, ns: int, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None:
        """Remember (text hash, vector) rows of texts that are not items (e.g. vocabulary labels)."""
        if self.read_only or not rows:
            return  # a read-only store remembers nothing; the vectors were still computed
        with self._write(ns) as c:
            self._many(
                c,
                "INSERT INTO embed_cache(ns, text_hash, model, vec) VALUES(?,?,?,?) ON CONFLICT DO NOTHING",
                [(ns, h, model, np.asarray(v, dtype=np.float32).tobytes()) for h, v in rows],
            )

    def drop_unused_embeddings(self, ns: int) -> None:
        """Forget the namespace's cached embeddings that no vector uses (as a delete does): the indexer calls it
        when turns it embedded ahead, outside the write lock, were deleted before it could index them."""
        if self.read_only:
            return
        with self._write(ns) as c:
            self._drop_unused_embeddings(c, ns)

    def cached_embeddings(self, ns: int, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for test, params in self._in(set(hashes)):
            for h, blob in self._read(
                f"SELECT text_hash, vec FROM embed_cache WHERE ns=? AND model=? AND text_hash {test}",
                (ns, model, *params),
            ):
                out[h] = np.frombuffer(bytes(blob), dtype=np.float32)
        return out

    # ------------------------------------------------------------------ labels and engine state
    def put_labels(self, ns: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """(item id, kind, label) rows, e.g. an event type or an entity type of a step."""
        if not rows:
            return
        with self._write(ns) as c:
            self._many(
                c,
                "INSERT INTO labels(ns, item, kind, label) VALUES(?,?,?,?) ON CONFLICT DO NOTHING",
                [(ns, item, kind, self._enc(label)) for item, kind, label in rows],
            )

    def relabel(self, ns: int, kind: str, mapping: dict[str, str], items: Sequence[int] | None = None) -> int:
        """Rename labels of one kind (old -> new), on every item of the namespace or only on `items`; an item
        that already has the new label keeps one copy. Returns how many label rows changed."""
        scopes = [("", [])] if items is None else [(f" AND item {t}", p) for t, p in self._in(items)]
        changed = 0
        with self._write(ns) as c:
            for old, new in mapping.items():
                for scope, extra in scopes:
                    params = [ns, kind, self._enc(old), *extra]
                    where = f"WHERE ns=? AND kind=? AND label=?{scope}"
                    found = self._run(c, f"SELECT item FROM labels {where}", params).fetchall()
                    if found:
                        self._many(
                            c,
                            "INSERT INTO labels(ns, item, kind, label) VALUES(?,?,?,?) ON CONFLICT DO NOTHING",
                            [(ns, item, kind, self._enc(new)) for (item,) in found],
                        )
                    self._run(c, f"DELETE FROM labels {where}", params)
                    changed += len(found)
        return changed

    def labels_in_space(self, ns: int, space: str) -> list[tuple[int, str, str]]:
        """(item id, kind, label) of every labelled item of a space, in item order."""
        rows = self._read(
            "SELECT l.item, l.kind, l.label FROM labels l JOIN items i ON +i.ns = +l.ns AND i.id = l.item"
            " WHERE l.ns=? AND i.ns=? AND i.space=? ORDER BY l.item, l.kind, l.label",
            (ns, ns, space),
        )
        return [(int(i), k, self._dec(label)) for i, k, label in rows]

    def labels_of(self, ns: int, item: int) -> list[tuple[str, str]]:
        rows = self._read("SELECT kind, label FROM labels WHERE ns=? AND item=? ORDER BY kind, label", (ns, item))
        return [(k, self._dec(label)) for k, label in rows]

    def kv_set(self, ns: int, owner: str, key: str, value: Any) -> None:
        """Engine state. Only an owner whose state is rebuilt on delete may keep any (state of an owner declared
        `on_delete="rows"` would outlive the turns it came from)."""
        if self._read("SELECT 1 FROM derived_specs WHERE owner=? AND on_delete='rows' LIMIT 1", (owner,)):
            raise StoreError(f"{owner!r} declared on_delete='rows': its derived state must be items, not engine state")
        with self._write(ns) as c:
            self._run(
                c,
                "INSERT INTO kv(ns, engine, key, value) VALUES(?,?,?,?)"
                " ON CONFLICT(ns, engine, key) DO UPDATE SET value=excluded.value",
                (ns, owner, self._enc(key), json.dumps(value, ensure_ascii=False)),
            )

    def kv_get(self, ns: int, owner: str, key: str, default: Any = None) -> Any:
        rows = self._read("SELECT value FROM kv WHERE ns=? AND engine=? AND key=?", (ns, owner, self._enc(key)))
        return json.loads(rows[0][0]) if rows else default

    # ------------------------------------------------------------------ engine progress and cache epochs
    def watermark(self, ns: int, key: str) -> int:
        rows = self._read("SELECT upto FROM watermarks WHERE ns=? AND engine=?", (ns, key))
        return int(rows[0][0]) if rows else 0

    def set_watermark(self, ns: int, key: str, upto: int) -> None:
        with self._write(ns) as c:
            self._run(
                c,
                "INSERT INTO watermarks(ns, engine, upto) VALUES(?,?,?) ON CONFLICT(ns, engine) DO UPDATE SET"
                " upto = CASE WHEN excluded.upto > watermarks.upto THEN excluded.upto ELSE watermarks.upto END",
                (ns, key, upto),
            )

    def epoch(self, ns: int) -> int:
        rows = self._read("SELECT epoch FROM epochs WHERE ns=?", (ns,))
        return int(rows[0][0]) if rows else 0

    def _bump_epoch(self, c: Any, ns: int) -> None:
        self._run(
            c,
            "INSERT INTO epochs(ns, epoch) VALUES(?, 1) ON CONFLICT(ns) DO UPDATE SET epoch = epochs.epoch + 1",
            (ns,),
        )

    # ------------------------------------------------------------------ the model-call cache
    def cached_call(self, ns: int, key: str) -> str | None:
        """The JSON response of a model call made for this namespace, if it is cached."""
        rows = self._read("SELECT response FROM llm_calls WHERE ns=? AND key=?", (ns, key))
        return rows[0][0] if rows else None

    def cache_call(self, ns: int, call: CachedCall) -> None:
        if self.read_only:
            return  # a read-only store remembers nothing; the call was still made and counted
        columns = ("backend", "method", "stage", "request", "response", "prompt_tokens", "completion_tokens")
        with self._write(ns) as c:
            self._run(
                c,
                f"INSERT INTO llm_calls(ns, key, {', '.join(columns)}, seconds, at) VALUES(?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(ns, key) DO UPDATE SET "
                + ", ".join(f"{col}=excluded.{col}" for col in (*columns, "seconds", "at")),
                (ns, call.key, *(getattr(call, col) for col in columns), call.seconds, time.time()),
            )

    def call_summary(self) -> list[dict[str, Any]]:
        """Cached model calls of every namespace, grouped by backend, stage and method."""
        rows = self._read(
            "SELECT backend, stage, method, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(seconds)"
            " FROM llm_calls GROUP BY backend, stage, method ORDER BY backend, stage, method"
        )
        keys = ("backend", "stage", "method", "calls", "prompt_tokens", "completion_tokens", "seconds")
        return [
            dict(zip(keys, (b, s, m, int(n), int(p or 0), int(cpl or 0), float(sec or 0.0)), strict=True))
            for b, s, m, n, p, cpl, sec in rows
        ]
