"""A LangGraph `BaseStore` over cuemem's `Memory`: `CuememStore`.

    from cuemem import Memory
    from cuemem.integrations.langgraph import CuememStore

    store = CuememStore(Memory("memory.db", engine="hybrid"), user_id="alice")
    store.put(("memories", "food"), "likes", {"text": "Alice likes spicy ramen."})
    store.search(("memories",), query="what food does she like?", limit=3)
    graph = builder.compile(store=store)  # nodes reach it as `store` / `runtime.store`

How LangGraph's namespaces map onto cuemem's hard partitions
-----------------------------------------------------------
A cuemem namespace is (user_id, agent_id, run_id) and nothing crosses it (docs/design.md promise 2); a LangGraph
namespace is a tuple of labels of any depth. Each LangGraph namespace is one cuemem namespace:

- user_id: the user the store is bound to (`CuememStore(memory, user_id="alice")`): every tuple lives inside
  alice, whatever its labels, so such a store can neither read nor write nor list anything of another user. An
  unbound store (`user_id=None`, for a server that serves every user) takes the user id from the tuple's *first*
  label: ("alice", "memories") is alice's ("memories",). Both views agree: an item a store bound to alice puts at
  ("memories",) is the unbound store's ("alice", "memories"). A first label that is no valid cuemem user id (one
  holding a control or invisible character, or one that Unicode NFC and stripping would change) is refused with
  InvalidNamespaceError by put and get rather than folded into another user (a search under it finds nothing).
  An unbound store puts items at (user_id, label, ...): one label more than the user id.
- agent_id: "langgraph" (the `agent_id` argument), so the store's items never mix with the turns a
  conversation stores for the same user through `Memory.add`, and the store lists only its own namespaces.
- run_id: the labels inside the user, as compact ASCII JSON (`["memories","food"]`): reversible, so
  `list_namespaces` reads the tuples back from `Memory.namespaces()`, and immune to the normalisation cuemem applies
  to ids (labels that differ only by surrounding spaces or Unicode form stay apart).

Within a namespace, an item is one turn of the log:
- session_id: "lg-" + 32 hex digits of an HMAC of the key, keyed with the store's salt (like cuemem's own derived
  ids: no one can confirm a guessed key of a deleted item from the history). Keys may hold anything LangGraph
  allows, control characters included; the raw key is kept in the metadata.
- id: the session id plus a version suffix. A `put` over an existing key first adds the new version, then deletes
  the old one(s), keeping the first `created_at`: a crash between the two leaves both, and every read takes the
  newest (highest log position) until the next put or delete of the key removes the rest. Nothing is ever lost.
- text (what the engine indexes): the fields named by `put(index=[...])`, else the store's `index_fields`, else
  the value's "text", "content" or "memory" string, else the value as JSON; cut to the setting `max_turn_bytes`.
  `index=False` (or a value with no text at those fields) stores a placeholder text: the item is kept, returned by
  `get` and by searches without a query, and never by a search with a query.
- metadata["langgraph"]: the whole value, the key, the labels inside the user, created_at, updated_at (ISO 8601,
  UTC) and whether the item is indexed.

Operations
----------
- `search(prefix, query=...)` runs `Memory.search` (the Memory's engine: BM25, dense, hybrid ...) in every
  namespace under the prefix, keeps the newest version of each item that passes `filter`, asks for more hits
  while filtering leaves fewer than `offset + limit`, and merges the namespaces by score (scores of different
  namespaces come from different indexes: RRF scores of the hybrid engine are rank-based and merge well, raw BM25
  scores less so). An engine hit citing several turns scores each of them. Without a query, the items under the
  prefix that pass `filter` are listed newest first (updated_at), with score None.
- `filter` follows LangGraph's InMemoryStore: top-level keys (a dotted key such as "user.level" reaches into nested
  objects when the value has no such top-level key), exact matches of scalars, nested objects and lists, and the
  operators $eq, $ne, $gt, $gte, $lt and $lte.
- `list_namespaces` lists the namespaces holding at least one item (prefix and suffix, "*" matching any one label,
  max_depth, limit, offset), sorted.
- A batch runs its operations in order (a get after a put in the same batch sees it); all of its namespaces are
  checked before any runs. `abatch` runs the batch in a worker thread, off the event loop.
- TTL is not supported (`supports_ttl` is False): `put(ttl=...)` raises NotImplementedError, as BaseStore does for
  such stores, and so does a PutOp with a ttl given to `batch`; `refresh_ttl` is ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Literal

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        get_text_at_path,
    )
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "cuemem.integrations.langgraph needs LangGraph: pip install 'cuemem[langgraph]' (or langgraph)"
    ) from exc

from ..errors import InvalidTurnError, TurnNotFoundError, UnknownNamespaceError
from ..memory import Memory
from ..types import Namespace, Turn

__all__ = ["DEFAULT_AGENT", "CuememStore"]

DEFAULT_AGENT = "langgraph"  # the cuemem agent_id under which a store keeps its namespaces
SPEAKER = "langgraph"  # the speaker of every item's turn
UNINDEXED_TEXT = "(not indexed)"  # the turn text of an item stored with index=False
TEXT_FIELDS = ("text", "content", "memory")  # a value's fields taken as its text, in this order
META = "langgraph"  # the turn metadata key holding the item
SLOT_PREFIX = "lg-"


class CuememStore(BaseStore):
    """LangGraph's `BaseStore` over a cuemem `Memory`; see the module docstring for the mapping.

    `user_id` binds the store to one user (every namespace lives inside that user); without it the first label of
    each namespace is the user id. `agent_id` is the cuemem agent under which the store keeps its namespaces.
    `index_fields` are the JSON paths whose text is indexed when a put names none (LangGraph's
    `IndexConfig["fields"]`); by default the value's "text", "content" or "memory" string, else its JSON. The store
    does not own the Memory: close the Memory when done.
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str | None = None,
        agent_id: str = DEFAULT_AGENT,
        index_fields: Sequence[str] | None = None,
    ) -> None:
        self.memory = memory
        try:
            self.user_id = Namespace(user_id).user_id if user_id is not None else None
            bound_agent = Namespace("-", agent_id).agent_id
        except ValueError as exc:
            raise InvalidNamespaceError(str(exc)) from exc
        assert bound_agent is not None
        self.agent_id: str = bound_agent
        self.index_fields = list(index_fields) if index_fields is not None else None

    def __repr__(self) -> str:
        bound = f"user_id={self.user_id!r}" if self.user_id is not None else "unbound"
        return f"CuememStore({bound}, agent_id={self.agent_id!r}, db={str(self.memory.settings.db)!r})"

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; every namespace is checked before the first runs."""
        ops = list(ops)
        for op in ops:
            self._check(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            else:
                assert isinstance(op, ListNamespacesOp)
                results.append(self._list_namespaces(op))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread: the store's SQLite and engine work never blocks the event loop."""
        return await asyncio.to_thread(self.batch, list(ops))

    # ------------------------------------------------------------------ mapping
    def _check(self, op: Op) -> None:
        """LangGraph's namespace rules for an op given to batch directly (BaseStore's methods check them too)."""
        if isinstance(op, GetOp):
            _check_labels(op.namespace)
            self._partition(op.namespace)
        elif isinstance(op, PutOp):
            _check_labels(op.namespace)
            if not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
            if self.user_id is None and len(op.namespace) < 2:
                raise InvalidNamespaceError(
                    f"namespace {op.namespace} names only a user: an unbound CuememStore stores items at"
                    " (user_id, label, ...); bind the store to a user (user_id=...) to use shorter namespaces"
                )
            if op.ttl is not None:
                raise NotImplementedError(
                    "TTL is not supported by CuememStore: cuemem keeps an item until it is deleted; set ttl=None"
                )
            self._partition(op.namespace)
        elif isinstance(op, SearchOp):
            _check_labels(op.namespace_prefix)
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                _check_labels(condition.path)
        else:
            raise ValueError(f"unknown store operation {type(op).__name__}")

    def _partition(self, namespace: tuple[str, ...]) -> Namespace:
        """The cuemem namespace holding a LangGraph namespace's items."""
        if self.user_id is not None:
            return Namespace(self.user_id, self.agent_id, _encode(namespace))
        if not namespace:
            raise InvalidNamespaceError("an unbound CuememStore needs namespaces that start with a user id")
        user = namespace[0]
        try:
            clean = Namespace(user).user_id
        except ValueError as exc:
            raise InvalidNamespaceError(f"the first label of {namespace} is no valid user id: {exc}") from exc
        if clean != user:
            raise InvalidNamespaceError(
                f"the first label of {namespace} is the user id {user!r}, which cuemem stores as {clean!r}"
                " (Unicode NFC, surrounding whitespace stripped): use that form"
            )
        return Namespace(user, self.agent_id, _encode(namespace[1:]))

    def _view(self, partition: Namespace) -> tuple[str, ...] | None:
        """The LangGraph namespace of one of this store's cuemem namespaces; None for any other namespace."""
        if partition.agent_id != self.agent_id or partition.run_id is None:
            return None
        if self.user_id is not None and partition.user_id != self.user_id:
            return None
        labels = _decode(partition.run_id)
        if labels is None:
            return None
        return labels if self.user_id is not None else (partition.user_id, *labels)

    def _partitions(self, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Namespace, int]]:
        """This store's non-empty namespaces under `prefix`: (LangGraph namespace, cuemem namespace, turn count),
        sorted by LangGraph namespace."""
        found = []
        for partition, count in self.memory.namespaces():
            view = self._view(partition)
            if view is not None and count > 0 and view[: len(prefix)] == prefix:
                found.append((view, partition, count))
        return sorted(found, key=lambda row: row[0])

    def _slot(self, key: str) -> str:
        """The session id of a key's turns: keyed with the store's salt, and free of any character of the key."""
        digest = hmac.new(self.memory.store.salt, key.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return SLOT_PREFIX + digest.hexdigest()[:32]

    def _turns(self, partition: Namespace, slot: str | None = None) -> list[Turn]:
        """A namespace's turns (of one slot), in log order; none when the namespace does not exist (yet)."""
        try:
            return self.memory.turns(**_ids(partition), session_id=slot)
        except UnknownNamespaceError:
            return []

    def _versions(self, partition: Namespace, slot: str) -> list[Turn]:
        """The item turns of a slot, oldest first (more than one only after a put was cut short)."""
        return [turn for turn in self._turns(partition, slot) if _record(turn) is not None]

    # ------------------------------------------------------------------ operations
    def _get(self, op: GetOp) -> Item | None:
        partition = self._partition(op.namespace)
        versions = [t for t in self._versions(partition, self._slot(op.key)) if _item_record(t)["key"] == op.key]
        return _item(versions[-1], op.namespace) if versions else None

    def _put(self, op: PutOp) -> None:
        partition = self._partition(op.namespace)
        slot = self._slot(op.key)
        old = self._versions(partition, slot)
        if op.value is None:
            if old:
                self.memory.delete_session(slot, **_ids(partition))
            return
        if not isinstance(op.value, Mapping):
            raise InvalidTurnError(f"an item's value must be a mapping (a JSON object), not {type(op.value).__name__}")
        value = dict(op.value)
        now = datetime.now(UTC).isoformat()
        text, indexed = self._text(value, op.index)
        record = {
            "key": op.key,
            "namespace": list(_decode(partition.run_id or "") or ()),
            "value": value,
            "created_at": _item_record(old[-1])["created_at"] if old else now,
            "updated_at": now,
            "indexed": indexed,
        }
        message = {
            "id": f"{slot}-{uuid.uuid4().hex[:16]}",
            "text": text,
            "speaker": SPEAKER,
            "session_id": slot,
            "metadata": {META: record},
        }
        self.memory.add(message, **_ids(partition))  # the new version first: a crash now leaves both
        for turn in old:
            with suppress(TurnNotFoundError):  # a concurrent put or delete of the same key took it already
                self.memory.delete(turn.id, **_ids(partition))

    def _text(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> tuple[str, bool]:
        """The text the engine indexes for a value, and whether there is any."""
        if index is False:
            return UNINDEXED_TEXT, False
        paths = index if index is not None else self.index_fields
        text = ""
        try:
            if paths is not None:
                text = "\n".join(t for path in paths for t in get_text_at_path(value, path) if t.strip())
            else:
                text = next((v for f in TEXT_FIELDS if isinstance(v := value.get(f), str) and v.strip()), "")
                text = text or json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise InvalidTurnError(f"an item's value must be JSON-serialisable: {exc}") from exc
        if not text.strip():
            return UNINDEXED_TEXT, False
        return _cut(text, self.memory.settings.max_turn_bytes), True

    def _search(self, op: SearchOp) -> list[SearchItem]:
        partitions = self._partitions(op.namespace_prefix)
        if not op.query or not op.query.strip():
            listed = [
                (view, turn)
                for view, partition, _ in partitions
                for turn in _newest(self._turns(partition))
                if _matches(_item_record(turn)["value"], op.filter)
            ]
            listed.sort(key=lambda vt: _newest_first(*vt), reverse=True)
            return [_search_item(turn, view) for view, turn in listed[op.offset : op.offset + op.limit]]
        need = max(op.offset, 0) + max(op.limit, 0)
        if need == 0:
            return []
        ranked: list[SearchItem] = []
        for view, partition, count in partitions:
            ranked += self._ranked(view, partition, count, op.query, op.filter, need)
        ranked.sort(key=lambda item: -(item.score or 0.0))  # stable: ties keep namespace order
        return ranked[op.offset : op.offset + op.limit]

    def _ranked(
        self,
        view: tuple[str, ...],
        partition: Namespace,
        count: int,
        query: str,
        filter: dict[str, Any] | None,
        need: int,
    ) -> list[SearchItem]:
        """The best items of one namespace for a query, at least `need` when it holds that many that match."""
        k = max(1, min(need, count))
        newest: dict[str, Turn | None] = {}  # slot -> its newest version
        while True:
            try:
                retrieval = self.memory.search(query, **_ids(partition), k=k)
            except UnknownNamespaceError:  # deleted since it was listed
                return []
            found: dict[str, SearchItem] = {}
            for hit in retrieval.hits:  # best first
                for turn_id in hit.turn_ids:
                    slot = turn_id.rsplit("-", 1)[0]
                    if not slot.startswith(SLOT_PREFIX) or slot in found:
                        continue
                    if slot not in newest:
                        versions = self._versions(partition, slot)
                        newest[slot] = versions[-1] if versions else None
                    turn = newest[slot]
                    record = _record(turn) if turn is not None and turn.id == turn_id else None
                    if record is None or not record.get("indexed", True) or not _matches(record["value"], filter):
                        continue  # an older version, an item kept out of the index, or filtered out
                    assert turn is not None
                    found[slot] = _search_item(turn, view, score=hit.score)
            if len(found) >= need or k >= count or len(retrieval.hits) < k:
                return list(found.values())
            k = min(k * 4, count)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = [view for view, _, _ in self._partitions(())]
        if op.match_conditions:
            names = [n for n in names if all(_matches_path(c, n) for c in op.match_conditions)]
        if op.max_depth is not None:
            names = sorted({n[: op.max_depth] for n in names})
        return names[op.offset : op.offset + op.limit]


# ---------------------------------------------------------------------- helpers
def _ids(partition: Namespace) -> dict[str, Any]:
    return {"user_id": partition.user_id, "agent_id": partition.agent_id, "run_id": partition.run_id}


def _encode(labels: Sequence[str]) -> str:
    return json.dumps(list(labels), ensure_ascii=True, separators=(",", ":"))


def _decode(run_id: str) -> tuple[str, ...] | None:
    """The labels a run id encodes; None when it is not one this module wrote."""
    try:
        labels = json.loads(run_id)
    except ValueError:
        return None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        return None
    return tuple(labels) if _encode(labels) == run_id else None


def _check_labels(namespace: tuple[str, ...]) -> None:
    """LangGraph's label rules: non-empty strings without a period or a NUL byte."""
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(f"a namespace is a tuple of strings, not {type(namespace).__name__}")
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"namespace labels must be strings, got {type(label).__name__} in {namespace}")
        if not label:
            raise InvalidNamespaceError(f"namespace labels cannot be empty strings: {namespace}")
        if "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"namespace labels cannot contain periods or NUL bytes: {namespace}")


def _record(turn: Turn) -> dict[str, Any] | None:
    """The item a turn holds; None for a turn this module did not write."""
    record = turn.metadata.get(META)
    if isinstance(record, dict) and isinstance(record.get("key"), str) and isinstance(record.get("value"), dict):
        return record
    return None


def _newest_first(view: tuple[str, ...], turn: Turn) -> tuple[str, tuple[str, ...], str]:
    """The sort key of listed items (sorted in reverse): updated_at, then namespace and key."""
    record = _item_record(turn)
    return record["updated_at"], view, record["key"]


def _newest(turns: Iterable[Turn]) -> list[Turn]:
    """The newest version of each item among a namespace's turns (in log order)."""
    latest: dict[str, Turn] = {}
    for turn in turns:
        if _record(turn) is not None:
            latest[turn.session_id] = turn
    return list(latest.values())


def _item_record(turn: Turn) -> dict[str, Any]:
    """The item of a turn known to hold one."""
    record = _record(turn)
    if record is None:
        raise ValueError(f"turn {turn.id!r} holds no LangGraph item")
    return record


def _item(turn: Turn, namespace: tuple[str, ...]) -> Item:
    record = _item_record(turn)
    return Item(
        namespace=namespace,
        key=record["key"],
        value=record["value"],
        created_at=datetime.fromisoformat(record["created_at"]),
        updated_at=datetime.fromisoformat(record["updated_at"]),
    )


def _search_item(turn: Turn, namespace: tuple[str, ...], score: float | None = None) -> SearchItem:
    record = _item_record(turn)
    return SearchItem(
        namespace=namespace,
        key=record["key"],
        value=record["value"],
        created_at=datetime.fromisoformat(record["created_at"]),
        updated_at=datetime.fromisoformat(record["updated_at"]),
        score=float(score) if score is not None else None,
    )


def _cut(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8, on a character boundary."""
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", "ignore")


_MISSING = object()


def _lookup(value: Mapping[str, Any], key: str) -> Any:
    """A filter key's value: the top-level field, else a dotted path into nested objects; _MISSING when absent."""
    if key in value:
        return value[key]
    current: Any = value
    for part in key.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a LangGraph filter."""
    if not filter:
        return True
    return all(_compare(_lookup(value, key), wanted) for key, wanted in filter.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if actual is _MISSING:
        actual = None
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(_compare(actual.get(k, _MISSING), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(actual), float(operand)
        except (TypeError, ValueError):
            return False  # a missing or non-numeric field is not in any range
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"unsupported filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt or $lte")


def _matches_path(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a list_namespaces condition ("*" matches any one label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported namespace match type {condition.match_type!r}: use prefix or suffix")
    return all(p == "*" or n == p for n, p in pairs)
