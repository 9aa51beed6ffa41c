"""The second stage "current values first" (issue 34 item 2; docs/design.md design 3, the confidence + recency
merge), shared by every engine through `refine`: among the top `revise_depth` candidates, a turn whose value a later
candidate replaced (`index/revisions.py`) goes `revise_gap` places below the turn holding the current value, which
takes the best place of its chain (0: below every other candidate). A question about the past
("what was it before?") keeps the history where it was. Hits say when their value was replaced, and the current
value lists its history.

Computed at query time from the items as they are now (a per-version cache of each turn's reading, dropped on any
write or delete): a deleted turn is in no chain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..errors import StoreError
from ..index.revisions import Turn, asks_past, chains, follow, named_elsewhere, other_goal, revised_near
from ..index.statements import READING, Statement, read_statement, reader_version, recalled, stored_reading
from ..store.base import Item
from ..types import Hit
from .base import EngineContext
from .structure import TurnTable

log = logging.getLogger(__name__)
_WARNED = False  # the write-back's unexpected failure is said once per process

CONTEXT = 8  # preceding turns of the session looked at for the goal in focus of a turn that names none

Ranked = list[tuple[int, float]]


Said = Callable[[Item], str]  # an item's words as its turn said them (an engine that stores a summary strips it)


class Reading(NamedTuple):
    """What the stage keeps of an item between searches: its words as said, where and when, and its statement
    (a few objects per item, not the item's whole metadata: the cache holds most of a namespace after a while)."""

    text: str
    session: str
    timestamp: Any
    turn_ids: tuple[str, ...]
    statement: Statement


def as_stored(item: Item) -> str:
    """An item's words as stored: what `Said` is for an engine whose items are the turns' own words."""
    return item.text


def _readings(ctx: EngineContext, space: str, ids: Sequence[int], said: Said = as_stored) -> dict[int, Reading]:
    """Each item's reading, cached for the namespace's epoch: an item never changes once written, so adds keep the
    readings (a search of a namespace being written to would read them all again), a delete drops them. An item
    that was stored with its reading (`statements.stored_reading`, meta key `reading`) is not read again; one
    stored by another version of the reader is read again and written back (`_write_back`)."""
    store, ns = ctx.store, ctx.ns
    name = f"{space}:revisions"
    stale: dict[int, dict[str, Any]] = {}
    with ctx.indexes.lock_for(ctx.ns), store.snapshot():
        version = store.epoch(ns)
        cached = ctx.indexes.view(ns, name, version)
        cache: dict[int, Reading] = cached if isinstance(cached, dict) else {}
        if not isinstance(cached, dict):
            ctx.indexes.keep_view(ns, name, version, cache)
        missing = [i for i in ids if i not in cache]
        if missing:
            for i, item in store.get_items(ns, missing).items():
                text, meta = said(item), item.meta
                statement = recalled(text, meta.get(READING))
                if statement is None:  # none stored, another reader's or damaged: read now
                    statement = read_statement(text)
                    if READING in meta:
                        stale[i] = stored_reading(text, statement)
                session = str(meta.get("session_id") or "")
                cache[i] = Reading(text, session, meta.get("timestamp"), tuple(item.turn_ids), statement)
            ctx.indexes.remeasure(ns)  # the view grew in place: the cache's bound counts it
        found = {i: cache[i] for i in ids if i in cache}
    _write_back(ctx, stale)
    return found


def _write_back(ctx: EngineContext, stale: dict[int, dict[str, Any]]) -> None:
    """Store the fresh readings of items whose stored one an upgrade of the reader made stale, so that the next
    process decodes them instead of reading every turn again (a 10k-turn namespace: search p95 47-48 ms in the
    process that writes back, 36-41 ms in the next ones, as on a new store; docs/benchmarks/stitch.md).
    After the snapshot, best effort: a read-only store, or a write that fails, leaves them to be read again."""
    store = ctx.store
    refresh = getattr(store, "refresh_meta", None)  # a store of a plugin may not have it
    if not stale or store.read_only or refresh is None or reader_version() == "unknown":
        return
    try:
        refresh(ctx.ns, READING, stale)
    except StoreError as exc:  # another writer held the lock: the next search tries again
        log.debug("stored readings not refreshed: %s", exc)
    except Exception as exc:  # a store closed meanwhile, a damaged file: the search goes on, the warning says it
        global _WARNED
        if not _WARNED:
            _WARNED = True
            log.warning("stored statement readings could not be refreshed (%s: %s)", type(exc).__name__, exc)


def current_first(
    ctx: EngineContext,
    space: str,
    table: TurnTable,
    query: str,
    ranked: Ranked,
    said: Said | None = None,
    revisions: bool = True,
) -> tuple[Ranked, dict[str, Any]]:
    """Reorder the head of `ranked` so that each chain's current value comes first and its history just below it;
    returns the ranking and the per-turn revision notes (for the hits' detail). Each item is read in the words
    `said` gives: what its turn said, not what an engine indexed it with. With `revisions` False only the named
    goal comes first (`goal_first`: the look-alikes of another goal go below the others), no chain is made."""
    settings = ctx.settings
    depth = settings.revise_depth
    if depth <= 0 or len(ranked) < 2:
        return ranked, {}
    question = read_statement(query) if settings.goal_first else None
    if not revisions and not (question and question.numbered):
        return ranked, {}  # no goal of the question's to put first: nothing is read
    head, tail = ranked[:depth], ranked[depth:]
    positions = sorted({table.position[i] for i, _ in head if i in table.position})
    around = sorted({p - d for p in positions for d in range(CONTEXT + 1) if p - d >= 0})
    readings = _readings(ctx, space, [table.ids[p] for p in around], said or as_stored)
    turns: list[Turn] = []
    index_of: dict[int, int] = {}
    for p in around:
        item_id = table.ids[p]
        if item_id not in readings:
            continue
        found = readings[item_id]
        index_of[item_id] = len(turns)
        turns.append(Turn(found.text, found.session, found.statement))
    candidates = [index_of[i] for i, _ in head if i in index_of]

    def recurring(name: str) -> bool:
        return table.recurs(name, settings.revise_recurring)

    replaced = (
        chains(turns, candidates, recurring, settings.revise_min_frame, settings.revise_same_values)
        if revisions
        else {}
    )
    # the near chains: among the candidates ranked first, the question has picked their goal and attribute
    if revisions and settings.revise_near > 0:
        near = revised_near(turns, candidates[: settings.revise_near], recurring)
        if near:
            replaced = follow({**near, **replaced})
    item_at = {index: item_id for item_id, index in index_of.items()}
    others = _other_goals(question, turns, candidates, item_at, recurring) if question else set()
    if not replaced and not others:
        return ranked, {}
    current_of = {item_at[i]: item_at[j] for i, j in replaced.items()}
    notes = _notes(readings, current_of)
    keep_history = asks_past(query)
    rank = {item: r for r, (item, _) in enumerate(head)}
    history: dict[int, list[int]] = {}
    if not keep_history:
        for old, new in current_of.items():
            history.setdefault(new, []).append(old)
    place: dict[int, tuple[int, int]] = {}
    for item in rank:
        if item in current_of and not keep_history:
            continue
        members = [item, *history.get(item, [])]
        best = min(rank[m] for m in members)
        place[item] = (best + len(head) if item in others else best, 0)
        for n, old in enumerate(sorted(history.get(item, []), key=lambda m: -table.position.get(m, 0)), 1):
            place[old] = (place[item][0], n) if settings.revise_gap > 0 else (2 * len(head) + rank[old], 0)
    order = sorted(rank, key=lambda item: place.get(item, (rank[item], 0)))
    if settings.revise_gap > 1 and not keep_history:
        order = _below_by(order, history, settings.revise_gap)
    scores = [s for _, s in head]
    return [(item, score) for item, score in zip(order, scores, strict=True)] + tail, notes


def _below_by(order: list[int], history: dict[int, list[int]], gap: int) -> list[int]:
    """`order` with each current value's history moved from just below it to `gap` places below it (`revise_gap`):
    a replaced value stays in reach of a reader without passing the candidates ranked near its current value."""
    moved = {old for olds in history.values() for old in olds}
    out = [item for item in order if item not in moved]
    for item in [i for i in order if i in history]:
        olds = [old for old in order if old in history[item]]  # latest first, as `order` has them
        at = out.index(item) + gap
        out[at:at] = olds
    return out


def _other_goals(
    question: Statement,
    turns: list[Turn],
    candidates: list[int],
    item_at: dict[int, int],
    recurring: Callable[[str], bool],
) -> set[int]:
    """The candidates whose own numbered nouns disagree with the question's (`revisions.other_goal`: "Day 1" for a
    question about "Day 2"), or name the same numbered noun in another recurring place or thing
    (`revisions.named_elsewhere`: "Day 1 in Porto" for "Day 1 of the Lisbon trip"). Only what a turn names itself
    counts: a goal it would inherit is a guess (dev: moving those too cost stitch, whose ranking brings such turns
    up through the goal it resolved at ingest)."""
    if not question.numbered:
        return set()
    return {
        item_at[i]
        for i in candidates
        if (statement := turns[i].statement) is not None
        and (
            other_goal(question.numbered, statement.numbered)
            or (question.named and named_elsewhere(question.named, statement.named, recurring))
        )
    }


def _notes(readings: dict[int, Reading], current_of: dict[int, int]) -> dict[str, Any]:
    """Per turn id: when its value was replaced (the turn holding the current value, its session and time), or
    the earlier values it replaced (its history)."""
    notes: dict[str, Any] = {}
    for old, new in current_of.items():
        old_item, new_item = readings[old], readings[new]
        for turn_id in old_item.turn_ids:
            notes[turn_id] = {
                "replaced_by": list(new_item.turn_ids),
                "replaced_at": new_item.timestamp,
                "replaced_in_session": new_item.session or None,
            }
        for turn_id in new_item.turn_ids:
            entry = notes.setdefault(turn_id, {"history": []})
            entry.setdefault("history", []).append(
                {"turn_ids": list(old_item.turn_ids), "said_at": old_item.timestamp, "text": old_item.text}
            )
    return notes


def hit_detail(detail: dict[str, Any], hit: Hit) -> dict[str, Any]:
    """The query's second-stage detail for one hit: what every hit shares, and the hit's own revision note
    (`revision`: when its value was replaced, or the history its value replaced) where it has one."""
    shared = {k: v for k, v in detail.items() if k != "revisions"}
    revisions = detail.get("revisions") or {}
    note = next((revisions[t] for t in hit.turn_ids if t in revisions), None)
    return shared if note is None else {**shared, "revision": note}


__all__ = ["Said", "as_stored", "current_first", "hit_detail"]
