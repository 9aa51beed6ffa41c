"""What the SQLite and PostgreSQL stores share, written once (docs/design.md promises 1-3): namespaces, the turn log,
derived items and the forgetting cascade; the rest of the derived state is in sql_state.py, the dialect each store
supplies in sql_dialect.py.

Namespaces are hard partitions: every statement below that reads or writes user data names `ns`. Derived rows are
declared by their owners (`DerivedSpec`) and record the turns they cite and depend on; a delete removes exactly
what depends on the deleted turns (or marks an owner for rebuild) in the same transaction, and purges the
namespace's cached model calls and the embeddings no surviving item uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import TurnNotFoundError, UnknownNamespaceError
from ..types import Namespace, Turn
from .base import AppendResult, DerivedSpec, Item, NewItem, canonical_state
from .sql_dialect import NEW_NAMESPACE
from .sql_state import SQLState

# Every derived table keyed by namespace; items' dependants (links, vectors, labels) cascade through foreign keys.
DERIVED_TABLES = ("items", "kv", "embed_cache", "llm_calls", "watermarks")
# The tables a delete of turns removes (or rewrites) rows of that may hold their text: what its scrub rewrites
# (scrub.py); a deleted namespace's row goes too.
TURN_DELETE_TABLES = ("turns", "items", "item_turns", "vectors", "labels", "kv", "embed_cache", "llm_calls", "history")
NAMESPACE_DELETE_TABLES = (*TURN_DELETE_TABLES, "namespaces")


class SQLStore(SQLState):
    """The Store contract over SQL tables of one shape (see the stores' schemas); subclasses are the dialects."""

    _TURN_COLS = "seq, turn_id, session_id, speaker, text, timestamp, metadata"

    # ------------------------------------------------------------------ namespaces
    def namespace_id(self, namespace: Namespace, *, create: bool = False) -> int:
        """The store's id for a namespace; unknown namespaces raise unless `create`."""
        key = tuple(self._enc(v) for v in (namespace.user_id, namespace.agent_id or "", namespace.run_id or ""))
        find = "SELECT id FROM namespaces WHERE user_id=? AND agent_id=? AND run_id=?"
        rows = self._read(find, key)
        if rows:
            return int(rows[0][0])
        if not create:
            raise UnknownNamespaceError(f"unknown namespace ({namespace}): nothing was ever added to it")
        with self._write(NEW_NAMESPACE) as c:
            self._run(
                c,
                "INSERT INTO namespaces(user_id, agent_id, run_id, created_at) VALUES(?,?,?,?) ON CONFLICT DO NOTHING",
                (*key, time.time()),
            )
            return int(self._run(c, find, key).fetchone()[0])

    def _namespace(self, user_id: str, agent_id: str, run_id: str) -> Namespace:
        return Namespace.stored(self._dec(user_id), self._dec(agent_id) or None, self._dec(run_id) or None)

    def namespaces(self) -> list[tuple[Namespace, int]]:
        """Every namespace with its number of turns."""
        rows = self._read(
            "SELECT n.user_id, n.agent_id, n.run_id, (SELECT COUNT(*) FROM turns t WHERE t.ns = n.id)"
            " FROM namespaces n ORDER BY n.id"
        )
        return [(self._namespace(u, a, r), int(count)) for u, a, r, count in rows]

    def _namespace_of(self, ns: int) -> Namespace:
        rows = self._read("SELECT user_id, agent_id, run_id FROM namespaces WHERE id=?", (ns,))
        if not rows:
            raise UnknownNamespaceError(f"namespace id {ns} does not exist")
        return self._namespace(*rows[0])

    # ------------------------------------------------------------------ the raw log
    def append_turns(self, ns: int, turns: Sequence[Turn]) -> AppendResult:
        """Append turns in one transaction; a turn whose id is already logged in `ns` is skipped untouched."""
        result = AppendResult()
        now = time.time()
        enc = self._enc
        with self._write(ns) as c:
            for turn in turns:
                seq = self._insert_id(
                    c,
                    "INSERT INTO turns(ns, turn_id, session_id, speaker, text, timestamp, metadata, added_at)"
                    " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(ns, turn_id) DO NOTHING",
                    (
                        ns,
                        enc(turn.id),
                        enc(turn.session_id),
                        enc(turn.speaker),
                        enc(turn.text),
                        None if turn.timestamp is None else enc(turn.timestamp),
                        json.dumps(turn.metadata, ensure_ascii=False),
                        now,
                    ),
                    "seq",
                )
                if seq is not None:
                    turn.seq = seq
                    result.added.append(turn)
                else:
                    result.skipped.append(turn.id)
            if result.added:  # log positions, not ids: history() names the turns that are still there
                self._log(c, ns, "add", {"seqs": [t.seq for t in result.added], "skipped": len(result.skipped)})
        return result

    def _row_to_turn(self, row: tuple[Any, ...], namespace: Namespace | None) -> Turn:
        seq, turn_id, session_id, speaker, text, timestamp, metadata = row
        dec = self._dec
        return Turn(
            id=dec(turn_id),
            text=dec(text),
            speaker=dec(speaker),
            session_id=dec(session_id),
            timestamp=None if timestamp is None else dec(timestamp),
            metadata=json.loads(metadata),
            namespace=namespace,
            seq=int(seq),
        )

    def get_turn(self, ns: int, turn_id: str) -> Turn:
        rows = self._read(f"SELECT {self._TURN_COLS} FROM turns WHERE ns=? AND turn_id=?", (ns, self._enc(turn_id)))
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
                params.append(self._enc(session_id))
            size = batch if left is None else min(batch, left)
            rows = self._read(sql + " ORDER BY seq LIMIT ?", (*params, size))
            if not rows:
                return
            for row in rows:
                yield self._row_to_turn(row, namespace)
            last = rows[-1][0]
            if left is not None:
                left -= len(rows)

    def count_turns(self, ns: int, *, after_seq: int = 0) -> int:
        """How many turns the namespace holds (past `after_seq`: how many an engine has still to index)."""
        return int(self._read("SELECT COUNT(*) FROM turns WHERE ns=? AND seq>?", (ns, after_seq))[0][0])

    def last_seq(self, ns: int) -> int:
        """The log position of the namespace's newest turn (0 when empty)."""
        rows = self._read("SELECT seq FROM turns WHERE ns=? ORDER BY seq DESC LIMIT 1", (ns,))
        return int(rows[0][0]) if rows else 0

    def seqs_of(self, ns: int, turn_ids: Sequence[str]) -> dict[str, int]:
        """Log positions of the given turn ids (ids not in the log are absent)."""
        out: dict[str, int] = {}
        for test, params in self._in(self._enc(t) for t in dict.fromkeys(turn_ids)):
            for tid, seq in self._read(f"SELECT turn_id, seq FROM turns WHERE ns=? AND turn_id {test}", (ns, *params)):
                out[self._dec(tid)] = int(seq)
        return out

    def turn_ids_for_seqs(self, ns: int, seqs: Iterable[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for test, params in self._in(seqs):
            for seq, tid in self._read(f"SELECT seq, turn_id FROM turns WHERE +ns=? AND seq {test}", (ns, *params)):
                out[int(seq)] = self._dec(tid)
        return out

    def history(self, ns: int, limit: int = 100) -> list[dict[str, Any]]:
        """The namespace's changes, newest first. The history stores no user-given id (ids can carry user text): an
        add records its turns' log positions, named here by the ids of those still in the log; deleted ones are
        only counted ("redacted"). Entries of older versions that kept ids show the surviving ones the same way."""
        with self.snapshot():
            rows = self._read("SELECT id, at, op, detail FROM history WHERE ns=? ORDER BY id DESC LIMIT ?", (ns, limit))
            entries = [{"id": int(i), "at": at, "op": op, **json.loads(detail)} for i, at, op, detail in rows]
            alive = self.turn_ids_for_seqs(ns, sorted({int(q) for e in entries for q in e.get("seqs", ())}))
            named = set(self.seqs_of(ns, [str(t) for e in entries if "seqs" not in e for t in e.get("turn_ids", ())]))
        for entry in entries:
            if "seqs" in entry:
                seqs = [int(q) for q in entry.pop("seqs")]
                ids = [alive[q] for q in seqs if q in alive]
            elif isinstance(entry.get("turn_ids"), list):
                seqs, ids = entry["turn_ids"], [t for t in entry["turn_ids"] if t in named]
                if entry["op"] in ("delete", "delete_session"):
                    entry.pop("session_id", None)
            else:
                continue
            entry["turn_ids"] = ids
            if len(seqs) > len(ids):
                entry["redacted"] = len(seqs) - len(ids)
        return entries

    def _log(self, c: Any, ns: int | None, op: str, detail: dict[str, Any]) -> None:
        self._run(
            c,
            "INSERT INTO history(ns, at, op, detail) VALUES(?,?,?,?)",
            (ns, time.time(), op, json.dumps(detail, ensure_ascii=False)),
        )

    # ------------------------------------------------------------------ forgetting (promise 2)
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int:
        """Delete turns (by id, or a whole session) and, in the same transaction, every derived row that depends
        on them (DerivedSpec says how), the namespace's cached model calls and the embeddings of their text."""
        with self._write(ns) as c:
            if session_id is not None:
                found = self._run(c, "SELECT seq FROM turns WHERE ns=? AND session_id=?", (ns, self._enc(session_id)))
                seqs = [int(r[0]) for r in found.fetchall()]
            else:
                seqs = list(self.seqs_of(ns, list(turn_ids or [])).values())
            if not seqs:
                return 0
            self._forget(c, ns, seqs)
            for test, params in self._in(seqs):
                self._run(c, f"DELETE FROM turns WHERE +ns=? AND seq {test}", (ns, *params))
            # The record of the deletion names no turn or session (ids can carry user text): only how many went.
            self._log(c, ns, "delete_session" if session_id is not None else "delete", {"turns": len(seqs)})
            self._forgot(ns, TURN_DELETE_TABLES)
        return len(seqs)

    def _forget(self, c: Any, ns: int, seqs: Sequence[int]) -> None:
        """Remove the derived rows that depend on the turns `seqs`; items that also cite surviving turns are
        re-ingested from the log (their owners' watermarks step back); owners declared `rebuild` start over."""
        gone = set(seqs)
        affected: set[int] = set()
        for test, params in self._in(sorted(gone)):
            found = self._run(c, f"SELECT item FROM item_turns WHERE ns=? AND turn_seq {test}", (ns, *params))
            affected.update(int(r[0]) for r in found.fetchall())
        redo: dict[str, int] = {}  # space -> first surviving turn of a partly deleted item
        for test, params in self._in(sorted(affected)):
            for space, seq in self._run(
                c,
                "SELECT i.space, it.turn_seq FROM item_turns it JOIN items i ON +i.ns = +it.ns AND i.id = it.item"
                f" WHERE it.item {test} AND +it.ns=? AND it.cited=1",
                (*params, ns),
            ).fetchall():
                if seq not in gone:
                    redo[space] = min(int(seq), redo.get(space, int(seq)))
            self._run(c, f"DELETE FROM items WHERE +ns=? AND id {test}", (ns, *params))
        # The embedding cache keeps only what a surviving item's vector uses: the vectors of the dropped items and
        # remembered embeddings of other texts (vocabulary labels, texts embedded ahead of ingest) may stem from a
        # deleted turn, so they go, and are recomputed when needed.
        self._drop_unused_embeddings(c, ns)
        specs = self._run(c, "SELECT owner, space, on_delete FROM derived_specs").fetchall()
        for owner, space, _ in specs:
            if space in redo:  # step back so the owner re-ingests the surviving turns of the dropped item
                self._rewind(c, ns, owner, redo[space] - 1)
        for owner in sorted({o for o, _, policy in specs if policy == "rebuild"}):
            self._drop_owner(c, ns, owner, [s for o, s, _ in specs if o == owner])
        self._run(c, "DELETE FROM llm_calls WHERE ns=?", (ns,))  # any cached prompt may have quoted a deleted turn
        self._bump_epoch(c, ns)

    # An owner's watermark keys: `owner` and `owner@<embedder>` (no LIKE: names are data).
    _OWNER_KEYS = "(engine=? OR substr(engine, 1, length(?) + 1) = ? || '@')"

    def _rewind(self, c: Any, ns: int, owner: str, upto: int) -> None:
        self._run(
            c,
            f"UPDATE watermarks SET upto=? WHERE ns=? AND upto>? AND {self._OWNER_KEYS}",
            (upto, ns, upto, owner, owner, owner),
        )

    def _drop_owner(self, c: Any, ns: int, owner: str, spaces: Sequence[str]) -> None:
        """All of an owner's derived state in a namespace: items of its spaces, its engine state, its watermarks."""
        for test, params in self._in(spaces):
            self._run(c, f"DELETE FROM items WHERE ns=? AND space {test}", (ns, *params))
        self._run(c, "DELETE FROM kv WHERE ns=? AND engine=?", (ns, owner))
        self._run(c, f"DELETE FROM watermarks WHERE ns=? AND {self._OWNER_KEYS}", (ns, owner, owner, owner))

    def delete_namespace(self, ns: int) -> int:
        """Remove a namespace with its log, every derived row, its cached calls and its history."""
        with self._write(ns) as c:
            count = int(self._run(c, "SELECT COUNT(*) FROM turns WHERE ns=?", (ns,)).fetchone()[0])
            for table in DERIVED_TABLES:
                self._run(c, f"DELETE FROM {table} WHERE ns=?", (ns,))
            self._run(c, "DELETE FROM turns WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            self._run(c, "DELETE FROM history WHERE ns=?", (ns,))
            self._namespace_dropped(c, ns)
            self._run(c, "DELETE FROM namespaces WHERE id=?", (ns,))
            # The record of the deletion names no user: only that a namespace and how many turns went.
            self._log(c, None, "delete_namespace", {"turns": count})
            self._forgot(ns, NAMESPACE_DELETE_TABLES)
        return count

    def clear_derived(self, ns: int) -> None:
        """Drop every derived row of a namespace (the log stays): the first half of a reindex."""
        with self._write(ns) as c:
            for table in ("items", "kv", "watermarks"):
                self._run(c, f"DELETE FROM {table} WHERE ns=?", (ns,))
            self._bump_epoch(c, ns)
            self._log(c, ns, "reindex", {})

    def derived_owners(self) -> list[str]:
        """The owners (engines, variants) that have declared derived state in this store."""
        return sorted({str(o) for (o,) in self._read("SELECT DISTINCT owner FROM derived_specs", ())})

    def drop_derived_owner(self, owner: str) -> int:
        """Every namespace's derived state of one owner nobody uses (issue 33, `cuemem gc`): its items in spaces no
        other owner declares, its engine state, its watermarks and its declaration; the log stays, and the owner
        rebuilds from it if it is used again. Returns how many items went."""
        with self._write() as c:
            specs = self._run(c, "SELECT owner, space FROM derived_specs").fetchall()
            spaces = sorted({s for o, s in specs if o == owner} - {s for o, s in specs if o != owner})
            dropped = 0
            for test, params in self._in(spaces):
                dropped += max(0, self._run(c, f"DELETE FROM items WHERE space {test}", params).rowcount)
            self._run(c, "DELETE FROM kv WHERE engine=?", (owner,))
            self._run(c, f"DELETE FROM watermarks WHERE {self._OWNER_KEYS}", (owner, owner, owner))
            self._run(c, "DELETE FROM derived_specs WHERE owner=?", (owner,))
            if dropped:
                for (ns,) in self._run(c, "SELECT id FROM namespaces").fetchall():
                    self._bump_epoch(c, int(ns))  # in-memory indexes of every process rebuild without those items
        return dropped

    # ------------------------------------------------------------------ derived items
    def declare(self, spec: DerivedSpec) -> None:
        """Record an owner's item spaces and delete policy (idempotent; the latest declaration wins)."""
        known = self._read("SELECT space, on_delete FROM derived_specs WHERE owner=?", (spec.owner,))
        if sorted(known) == sorted((s, spec.on_delete) for s in spec.spaces):
            return
        with self._write() as c:
            self._run(c, "DELETE FROM derived_specs WHERE owner=?", (spec.owner,))
            self._many(
                c,
                "INSERT INTO derived_specs(owner, space, on_delete) VALUES(?,?,?)",
                [(spec.owner, s, spec.on_delete) for s in spec.spaces],
            )

    def put_items(self, ns: int, space: str, items: Sequence[NewItem]) -> None:
        """Insert items; an existing key is kept (idempotent), and an item whose source or dependency turns are
        not all in the log (deleted meanwhile) is not created."""
        if not items:
            return
        with self._write(ns) as c:
            alive: set[int] = set()
            for test, params in self._in(sorted({s for item in items for s in (*item.sources, *item.depends)})):
                found = self._run(c, f"SELECT seq FROM turns WHERE +ns=? AND seq {test}", (ns, *params))
                alive.update(int(r[0]) for r in found.fetchall())
            links: list[tuple[int, int, int, int]] = []
            for item in items:
                cited = set(item.sources)
                wanted = sorted(cited | set(item.depends))
                if any(s not in alive for s in wanted):
                    continue
                item_id = self._insert_id(
                    c,
                    "INSERT INTO items(ns, space, key, text, meta, tokens) VALUES(?,?,?,?,?,?)"
                    " ON CONFLICT(ns, space, key) DO NOTHING",
                    (
                        ns,
                        space,
                        self._enc(item.key),
                        self._enc(item.text),
                        json.dumps(item.meta, ensure_ascii=False),
                        item.tokens,
                    ),
                    "id",
                )
                if item_id is not None:
                    links += [(ns, item_id, s, int(s in cited)) for s in wanted]
            if links:
                self._many(
                    c,
                    "INSERT INTO item_turns(ns, item, turn_seq, cited) VALUES(?,?,?,?) ON CONFLICT DO NOTHING",
                    links,
                )

    def refresh_meta(self, ns: int, key: str, values: Mapping[int, Any]) -> int:
        """Set one metadata key of existing items to a value derived from the item's own words (a statement
        reading stored by an older reader, rewritten by the current one): nothing is created, no epoch moves (what a
        search returns does not change), an item deleted meanwhile is skipped. Another writer is not waited for
        (StoreError: a search makes this write, best effort). Returns how many were rewritten."""
        done = 0
        if not values:
            return done
        with self._write(ns, patient=False) as c:  # a search writes it: another writer is not waited for
            for test, params in self._in(sorted(values)):
                found = self._run(c, f"SELECT id, meta FROM items WHERE +ns=? AND id {test}", (ns, *params))
                rows = []
                for item_id, meta in found.fetchall():
                    changed = {**json.loads(meta), key: values[int(item_id)]}
                    rows.append((json.dumps(changed, ensure_ascii=False), ns, int(item_id)))
                if rows:
                    self._many(c, "UPDATE items SET meta=? WHERE ns=? AND id=?", rows)
                done += len(rows)
        return done

    def item_ids(self, ns: int, space: str, keys: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for test, params in self._in(self._enc(k) for k in keys):
            for key, item_id in self._read(
                f"SELECT key, id FROM items WHERE ns=? AND space=? AND key {test}", (ns, space, *params)
            ):
                out[self._dec(key)] = int(item_id)
        return out

    def items_after(self, ns: int, space: str, after_id: int) -> list[tuple[int, str]]:
        """(id, text) of the space's items newer than `after_id`, in id order: feeds incremental indexes."""
        rows = self._read(
            "SELECT id, text FROM items WHERE ns=? AND space=? AND id>? ORDER BY id", (ns, space, after_id)
        )
        return [(int(i), self._dec(t)) for i, t in rows]

    def get_items(self, ns: int, ids: Sequence[int]) -> dict[int, Item]:
        """Items by id with the ids of the turns they cite (provenance)."""
        out: dict[int, Item] = {}
        dec = self._dec
        for test, params in self._in(ids):
            for item_id, key, text, meta, tokens in self._read(
                f"SELECT id, key, text, meta, tokens FROM items WHERE +ns=? AND id {test}", (ns, *params)
            ):
                out[int(item_id)] = Item(int(item_id), dec(key), dec(text), json.loads(meta), [], int(tokens))
            for item_id, turn_id in self._read(
                # CROSS JOIN and unary +: look up by item id, then turn seq, never scan the namespace.
                f"SELECT it.item, t.turn_id FROM item_turns it CROSS JOIN turns t WHERE it.item {test}"
                " AND +it.ns=? AND +t.ns=? AND t.seq = it.turn_seq AND it.cited=1 ORDER BY t.seq",
                (*params, ns, ns),
            ):
                if int(item_id) in out:
                    out[int(item_id)].turn_ids.append(dec(turn_id))
        return out

    def space_metas(self, ns: int, space: str, keys: Sequence[str] | None = None) -> dict[int, dict[str, Any]]:
        """The metadata (only `keys` of it, when given) of every item of a space that cites a turn (the items of
        `items_in_order`), by id, without their text or provenance: what query-side tables are built from. One
        query, no list of ids sent; each row's JSON is parsed and cut down as it is read, so a large namespace
        never holds every item's whole metadata at once (102k items: 102 MB whole, 53 MB cut)."""
        rows = self._read(
            "SELECT i.id, i.meta FROM items i WHERE i.ns=? AND i.space=? AND EXISTS (SELECT 1 FROM item_turns it"
            " WHERE +it.ns = +i.ns AND it.item = i.id AND it.cited=1)",
            (ns, space),
        )
        out: dict[int, dict[str, Any]] = {}
        for item_id, meta in rows:
            found = json.loads(meta)
            out[int(item_id)] = found if keys is None else {k: found[k] for k in keys if k in found}
        return out

    def items_in_order(self, ns: int, space: str) -> list[tuple[int, int]]:
        """(id, token count) of every item of a space, in log order of their first cited turn."""
        rows = self._read(
            "SELECT i.id, i.tokens FROM items i JOIN item_turns it ON +it.ns = +i.ns AND it.item = i.id"
            " WHERE i.ns=? AND i.space=? AND it.cited=1 GROUP BY i.id, i.tokens ORDER BY MIN(it.turn_seq), i.id",
            (ns, space),
        )
        return [(int(i), int(t)) for i, t in rows]

    def derived_state(self, ns: int) -> dict[str, Any]:
        """Every derived row of a namespace in a canonical, store-independent form (turn ids, not row ids):
        two stores fed the same log compare equal."""
        q, dec = self._read, self._dec
        with self.snapshot():
            return canonical_state(
                ((int(seq), dec(t)) for seq, t in q("SELECT seq, turn_id FROM turns WHERE ns=?", (ns,))),
                (
                    (int(i), space, dec(key), dec(text), meta, int(tokens))
                    for i, space, key, text, meta, tokens in q(
                        "SELECT id, space, key, text, meta, tokens FROM items WHERE ns=?", (ns,)
                    )
                ),
                (
                    (int(i), int(seq), int(cited))
                    for i, seq, cited in q("SELECT item, turn_seq, cited FROM item_turns WHERE ns=?", (ns,))
                ),
                (
                    (int(i), k, dec(label))
                    for i, k, label in q("SELECT item, kind, label FROM labels WHERE ns=?", (ns,))
                ),
                (
                    (int(i), model, digest, self._vec_array(vec).tobytes())
                    for i, model, digest, vec in q("SELECT item, model, text_hash, vec FROM vectors WHERE ns=?", (ns,))
                ),
                (
                    (owner, dec(key), value)
                    for owner, key, value in q("SELECT engine, key, value FROM kv WHERE ns=?", (ns,))
                ),
                ((key, int(upto)) for key, upto in q("SELECT engine, upto FROM watermarks WHERE ns=?", (ns,))),
            )
