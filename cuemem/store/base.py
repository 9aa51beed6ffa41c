"""The Store contract (docs/design.md promises 1-3): what engines and Memory may ask of any durable store.

A store holds, per namespace, the raw turn log (the truth) and the derived rows engines build from it: items
(documents an engine indexes) with the turns they cite and depend on, their vectors and labels, engine state and
watermarks, cached embeddings and cached model calls. Every derived row is declared by its owner (`DerivedSpec`)
and records the turns it depends on, so a delete removes, in the same transaction, exactly the rows that depend
on the deleted turns, or, for owners whose state depends on the whole stream, marks them for rebuild.

Vector search is a store capability, so a server-grade store (pgvector) can answer it natively.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from ..types import Namespace, Turn

OnDelete = Literal["rows", "rebuild"]
Scores = tuple[np.ndarray, np.ndarray]  # (item ids as int64, scores as float32), best first


def as_scores(pairs: Sequence[tuple[int, float]]) -> Scores:
    """(item id, score) pairs, as a search returns them, as `Scores` arrays."""
    items = np.fromiter((item for item, _ in pairs), dtype=np.int64, count=len(pairs))
    return items, np.fromiter((score for _, score in pairs), dtype=np.float32, count=len(pairs))


@dataclass(frozen=True)
class DerivedSpec:
    """An owner's declaration of its derived state.

    `owner` names its engine state (kv) and its watermarks (`owner`, `owner@<embedder>`); `spaces` are the item
    spaces it writes. On a delete, `on_delete="rows"` removes exactly the items that depend on a deleted turn and
    re-ingests, from the log, the surviving turns of an item that also covered them; `"rebuild"` (state that
    depends on the whole stream, such as online segmentation and vocabularies) drops all of the owner's derived
    state in that namespace, to be rebuilt from the log on next use.
    """

    owner: str
    spaces: tuple[str, ...]
    on_delete: OnDelete = "rows"


@dataclass
class NewItem:
    """A derived document to store: `sources` are the turns it cites (its provenance, shown with every hit);
    `depends` are further turns whose content went into it (e.g. a resolved reference), forgotten with them."""

    key: str
    text: str
    meta: dict[str, Any]
    sources: Sequence[int]  # turn seqs
    tokens: int = 0
    depends: Sequence[int] = ()


@dataclass
class Item:
    """A stored derived document with the ids of the turns it cites."""

    id: int
    key: str
    text: str
    meta: dict[str, Any]
    turn_ids: list[str]
    tokens: int = 0


@dataclass
class AppendResult:
    """Which turns a write stored and which it skipped because their id was already in the log."""

    added: list[Turn] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass
class CachedCall:
    """One model call remembered for a namespace (the model-call cache lives with the data it quotes)."""

    key: str
    backend: str
    method: str
    stage: str
    request: str  # JSON
    response: str  # JSON
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def text_hash(text: str) -> str:
    """The key of embedding caches: SHA-1 of the exact text embedded."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def canonical_state(
    turns: Iterable[tuple[int, str]],
    items: Iterable[tuple[int, str, str, str, str, int]],
    links: Iterable[tuple[int, int, int]],
    labels: Iterable[tuple[int, str, str]],
    vectors: Iterable[tuple[int, str, str, bytes]],
    kv: Iterable[tuple[str, str, str]],
    watermarks: Iterable[tuple[str, int]],
) -> dict[str, Any]:
    """`Store.derived_state` from a namespace's rows, in one store-independent form (turn ids, not row ids; vectors
    by the SHA-1 of their float32 bytes), so two stores fed the same log compare equal. Rows: turns (seq, turn id),
    items (id, space, key, text, meta JSON, tokens), links (item, turn seq, cited), labels (item, kind, label),
    vectors (item, model, text hash, float32 bytes), kv (owner, key, value JSON), watermarks (key, upto)."""
    ids = dict(turns)
    entries: dict[int, dict[str, Any]] = {}
    names: dict[int, str] = {}
    for item_id, space, key, text, meta, tokens in items:
        names[item_id] = f"{space}/{key}"
        entries[item_id] = {
            "text": text,
            "meta": json.loads(meta),
            "tokens": tokens,
            "cites": [],
            "quotes": [],
            "labels": [],
            "vectors": {},
        }
    for item_id, seq, cited in sorted(links, key=lambda row: row[1]):
        entries[item_id]["cites" if cited else "quotes"].append(ids.get(seq, f"?{seq}"))
    for item_id, kind, label in labels:
        entries[item_id]["labels"].append([kind, label])
    for item_id, model, digest, blob in vectors:
        entries[item_id]["vectors"][model] = [digest, hashlib.sha1(blob).hexdigest()]
    for entry in entries.values():
        entry["labels"].sort()
    state: dict[str, dict[str, Any]] = {}
    for owner, key, value in kv:
        state.setdefault(owner, {})[key] = json.loads(value)
    marks = {}
    for key, upto in watermarks:
        done = [s for s in ids if s <= upto]
        marks[key] = ids[max(done)] if done else None
    return {
        "items": {names[i]: entries[i] for i in sorted(entries, key=lambda i: names[i])},
        "state": state,
        "watermarks": marks,
    }


class Store(Protocol):
    """What engines and Memory are typed against; `SQLiteStore` is the embedded implementation."""

    read_only: bool

    def close(self) -> None: ...
    def transaction(self, ns: int | None = None) -> AbstractContextManager[None]: ...
    def snapshot(self) -> AbstractContextManager[None]: ...
    def checkpoint(self) -> None: ...
    def integrity_check(self) -> str: ...
    @property
    def salt(self) -> bytes: ...

    # namespaces and the raw log
    def namespace_id(self, namespace: Namespace, *, create: bool = False) -> int: ...
    def namespaces(self) -> list[tuple[Namespace, int]]: ...
    def append_turns(self, ns: int, turns: Sequence[Turn]) -> AppendResult: ...
    def get_turn(self, ns: int, turn_id: str) -> Turn: ...
    def iter_turns(
        self, ns: int, *, after_seq: int = 0, session_id: str | None = None, limit: int | None = None
    ) -> Iterator[Turn]: ...
    def count_turns(self, ns: int, *, after_seq: int = 0) -> int: ...
    def last_seq(self, ns: int) -> int: ...
    def seqs_of(self, ns: int, turn_ids: Sequence[str]) -> dict[str, int]: ...
    def history(self, ns: int, limit: int = 100) -> list[dict[str, Any]]: ...

    # forgetting
    def delete_turns(self, ns: int, turn_ids: Sequence[str] | None = None, session_id: str | None = None) -> int: ...
    def delete_namespace(self, ns: int) -> int: ...
    def clear_derived(self, ns: int) -> None: ...
    def derived_owners(self) -> list[str]: ...
    def drop_derived_owner(self, owner: str) -> int: ...

    # derived state
    def declare(self, spec: DerivedSpec) -> None: ...
    def put_items(self, ns: int, space: str, items: Sequence[NewItem]) -> None: ...
    def refresh_meta(self, ns: int, key: str, values: Mapping[int, Any]) -> int: ...
    def item_ids(self, ns: int, space: str, keys: Sequence[str]) -> dict[str, int]: ...
    def items_after(self, ns: int, space: str, after_id: int) -> list[tuple[int, str]]: ...
    def get_items(self, ns: int, ids: Sequence[int]) -> dict[int, Item]: ...
    def space_metas(self, ns: int, space: str, keys: Sequence[str] | None = None) -> dict[int, dict[str, Any]]: ...
    def items_in_order(self, ns: int, space: str) -> list[tuple[int, int]]: ...
    def items_without_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> list[tuple[int, str]]: ...
    def item_vectors(self, ns: int, model: str, item_ids: Sequence[int]) -> dict[int, np.ndarray]: ...
    def put_vectors(self, ns: int, space: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None: ...
    def vector_search(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> list[tuple[int, float]]: ...
    def vector_scores(self, ns: int, space: str, model: str, vector: np.ndarray, k: int) -> Scores: ...
    def put_labels(self, ns: int, rows: Sequence[tuple[int, str, str]]) -> None: ...
    def relabel(self, ns: int, kind: str, mapping: dict[str, str], items: Sequence[int] | None = None) -> int: ...
    def labels_in_space(self, ns: int, space: str) -> list[tuple[int, str, str]]: ...
    def kv_get(self, ns: int, owner: str, key: str, default: Any = None) -> Any: ...
    def kv_set(self, ns: int, owner: str, key: str, value: Any) -> None: ...
    def watermark(self, ns: int, key: str) -> int: ...
    def set_watermark(self, ns: int, key: str, upto: int) -> None: ...
    def epoch(self, ns: int) -> int: ...
    def derived_state(self, ns: int) -> dict[str, Any]: ...

    # caches
    def cached_embeddings(self, ns: int, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...
    def cache_embeddings(self, ns: int, model: str, rows: Sequence[tuple[str, np.ndarray]]) -> None: ...
    def drop_unused_embeddings(self, ns: int) -> None: ...
    def cached_call(self, ns: int, key: str) -> str | None: ...
    def cache_call(self, ns: int, call: CachedCall) -> None: ...
    def call_summary(self) -> list[dict[str, Any]]: ...
