"""The second stages a ranking engine composes after its first ranking (issue 13): pseudo-relevance feedback for
multi-hop questions, a round per speaker a question names, the standing facts a message bears on (`standing.py`),
structural boosts (people, dates), the asked attribute (issue 34), current values first (issue 34: `current.py`)
and model reranking. Each is set by `Settings` and off
where its weight is 0 (reranking: "off"); `hybrid` and `stitch` share them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..index.attribute import asked_attribute, goal_words
from ..index.dates import format_day
from ..index.fusion import reciprocal_rank_fusion
from ..index.names import without_names
from ..index.text import analyze
from ..llm import LLMError
from ..llm.rerank import likelihood_relevance
from ..store.base import Item
from .base import EngineContext
from .current import Said, as_stored, current_first
from .standing import standing_first
from .structure import QueryStructure, TurnTable, hit_text, structural_boost

log = logging.getLogger(__name__)

Ranked = list[tuple[int, float]]
MAX_SPEAKERS = 4  # the speakers of one question given a round of their own (each costs a ranking and an embedding)
# A first-stage ranking for a (query text, query vector): the engine's own, run again for a second round.
Rank = Callable[[str, np.ndarray], Ranked]


def refine(
    ctx: EngineContext,
    space: str,
    query: str,
    query_vector: np.ndarray,
    ranked: Ranked,
    rank: Rank,
    said: Said | None = None,
    standing: bool = True,
) -> tuple[Ranked, dict[str, Any]]:
    """Expansion, a round per speaker named, standing facts, then structure, the named goal first, the asked
    attribute, current values first and reranking, over an engine's first ranking of `space` (best first). Returns
    the new ranking and what each stage saw (for the hits' detail). `said` gives an item's words as its turn said
    them, for an engine that stores a summary (current values first reads those). `standing`: whether the standing
    facts join (an engine that keeps its own records of them, `profile`, fuses those instead)."""
    settings = ctx.settings
    table = turn_table(ctx, space)
    asked = QueryStructure.read(query, table, ctx.now)
    detail: dict[str, Any] = {"structure": asked.describe()}
    if settings.expand_weight > 0 and ranked:
        ranked, detail["expansion"] = expand(ctx, query, query_vector, ranked, rank)
    if settings.each_speaker_weight > 0 and ranked:
        ranked, speakers = each_speaker(ctx, table, asked, query, ranked, rank)
        if speakers:
            detail["speakers"] = speakers
    if standing:
        ranked, facts = standing_first(ctx, table, query, query_vector, ranked)
        if facts:
            detail["standing"] = facts
    ranked = structural_boost(table, ranked, asked, settings.speaker_boost, settings.date_boost, settings.said_boost)
    if settings.goal_first and settings.attribute_weight > 0 and ranked:
        # the named goal first, before the asked attribute takes its goal words from the best three candidates
        ranked, _ = current_first(ctx, space, table, query, ranked, said, revisions=False)
    if settings.attribute_weight > 0 and ranked:
        ranked, attribute = attribute_first(ctx, query, ranked, said)
        if attribute:
            detail["attribute"] = attribute
    ranked, revisions = current_first(ctx, space, table, query, ranked, said)
    if revisions:
        detail["revisions"] = revisions
    if settings.rerank == "model" and ranked:
        ranked = rerank(ctx, query, ranked)
    return ranked, detail


def turn_table(ctx: EngineContext, space: str) -> TurnTable:
    """The namespace's TurnTable for a space, cached until the next write or delete: after adds it grows by the new
    items (a search of a namespace being written to reads only what was added), after a delete (a new epoch) it
    is built anew. The store is read in one snapshot taken under the cache's lock (the lock order every reader
    keeps: cache lock, then store)."""
    store, ns = ctx.store, ctx.ns
    name = f"{space}:structure"
    with ctx.indexes.lock_for(ctx.ns), store.snapshot():
        version = (store.epoch(ns), store.last_seq(ns))
        older = ctx.indexes.latest_view(ns, name)
        if older is not None and older[0] == version and isinstance(older[1], TurnTable):
            return older[1]
        if older is not None and older[0][0] == version[0] and isinstance(older[1], TurnTable):
            after = older[1].ids[-1] if older[1].ids else 0
            new = [i for i, _ in store.items_after(ns, space, after)]
            cited = {i: item.meta for i, item in store.get_items(ns, new).items() if item.turn_ids}
            table = older[1].grown(cited)
        else:
            table = TurnTable.build(store.space_metas(ns, space, TurnTable.KEYS))
        ctx.indexes.keep_view(ns, name, version, table)
        return table


def feedback_terms(ctx: EngineContext, items: Sequence[int], query: str) -> list[str]:
    """The people and dates of the first round's top items that the query does not already name."""
    found = ctx.store.get_items(ctx.ns, list(items))
    words = query.lower()
    terms: list[str] = []
    for item in items:
        meta = found[item].meta if item in found else {}
        names = list(meta.get("people") or [])
        if meta.get("date"):
            names.append(format_day(datetime.fromisoformat(meta["date"])))
        terms += [n for n in names if n.lower() not in words]
    return list(dict.fromkeys(terms))


def expand(
    ctx: EngineContext, query: str, query_vector: np.ndarray, ranked: Ranked, rank: Rank
) -> tuple[Ranked, dict[str, Any]]:
    """Pseudo-relevance feedback for the second hop: a second round whose BM25 query is the top hits' people and
    dates that the question does not name, and whose vector moves toward the top hits' mean (Rocchio); the two
    rounds fused by reciprocal rank (the second weighted expand_weight)."""
    settings = ctx.settings
    top = [item for item, _ in ranked[: settings.expand_depth]]
    terms = feedback_terms(ctx, top, query)
    vectors = ctx.store.item_vectors(ctx.ns, ctx.embedder.name, top)
    vector = np.asarray(query_vector, dtype=np.float32)
    vector = vector / (np.linalg.norm(vector) or 1.0)
    if vectors:
        rows = np.stack([v / (np.linalg.norm(v) or 1.0) for v in vectors.values()])
        vector = vector + rows.mean(axis=0)
        vector = vector / (np.linalg.norm(vector) or 1.0)
    second = rank(" ".join(terms), vector)
    fused = reciprocal_rank_fusion(
        [[i for i, _ in ranked], [i for i, _ in second]], k=ctx.settings.rrf_k, weights=[1.0, settings.expand_weight]
    )
    return [(int(i), s) for i, s in fused], {"terms": terms[:12]}


def each_speaker(
    ctx: EngineContext, table: TurnTable, structure: QueryStructure, query: str, ranked: Ranked, rank: Rank
) -> tuple[Ranked, dict[str, str]]:
    """Questions over several people ("What do Jon and Gina both like?"; E-mem's gathering of what each one said):
    for each speaker the question names (the first MAX_SPEAKERS), a second round of the engine's ranking with the
    other speakers' names taken out, kept to the items that speaker said, fused with the first ranking by reciprocal
    rank (each at `each_speaker_weight`). Returns the ranking and each speaker's question (empty where fewer than
    two are named: the ranking is kept)."""
    named = structure.speakers[:MAX_SPEAKERS]  # read once per question (QueryStructure)
    if len(named) < 2:
        return ranked, {}
    lists, weights, asked = [[i for i, _ in ranked]], [1.0], {}
    for name, _, said in named:
        others = set().union(*(forms for other, forms, _ in named if other != name))
        alone = without_names(query, others)
        if not alone or not said:
            continue
        own = [i for i, _ in rank(alone, ctx.embed_query(alone)) if table.position.get(i) in said]
        lists.append(own)
        weights.append(ctx.settings.each_speaker_weight)
        asked[name] = alone
    if not asked:
        return ranked, {}
    fused = reciprocal_rank_fusion(lists, k=ctx.settings.rrf_k, weights=weights)
    return [(int(i), s) for i, s in fused], asked


def rerank(ctx: EngineContext, query: str, ranked: Ranked) -> Ranked:
    """Rescore the top `rerank_depth` items by the model's likelihood (llm/rerank.py), fused with their current
    order by reciprocal rank (weight rerank_weight); the rest keep their place below. A model failure keeps the
    ranking as it was (and is logged)."""
    settings = ctx.settings
    head, tail = ranked[: settings.rerank_depth], ranked[settings.rerank_depth :]
    found = ctx.store.get_items(ctx.ns, [i for i, _ in head])
    head = [(i, s) for i, s in head if i in found]
    client = ctx.llm
    try:
        with client.stage("rerank"):
            scores = likelihood_relevance(client, query, [hit_text(found[i].text, found[i].meta) for i, _ in head])
    except LLMError as exc:
        log.warning("reranking skipped, the model failed: %s", exc)
        return ranked
    by_model = [head[j][0] for j in np.argsort(-np.asarray(scores), kind="stable")]
    return fuse_head(head, by_model, tail, settings.rerank_weight, settings.rrf_k)


def fuse_head(head: Ranked, second: Sequence[int], tail: Ranked, weight: float, k: int) -> Ranked:
    """The head of a ranking fused with a second order of its items by reciprocal rank (the second at `weight`);
    the tail stays below the head, its scores squeezed under the lowest fused score."""
    fused = reciprocal_rank_fusion([[i for i, _ in head], list(second)], k=k, weights=[1.0, weight])
    floor = min((s for _, s in fused), default=0.0)
    scale = max((s for _, s in tail), default=0.0)
    out = [(int(i), s) for i, s in fused]
    return out + [(i, floor * (s / scale if scale > 0 else 0.0) * 0.999) for i, s in tail]


def attribute_first(ctx: EngineContext, query: str, ranked: Ranked, said: Said | None = None) -> tuple[Ranked, Any]:
    """The asked attribute (issue 34, `index/attribute.py`): the top `attribute_depth` items ordered again by the
    similarity of their words as said to the question without its goal words, fused with their order (weight
    `attribute_weight`). Returns the ranking and what was asked (None where the question has no goal words or
    nothing but them)."""
    settings = ctx.settings
    head, tail = ranked[: settings.attribute_depth], ranked[settings.attribute_depth :]
    if len(head) < 2:
        return ranked, None
    items = ctx.store.get_items(ctx.ns, [i for i, _ in head])
    words = said or as_stored
    goal = goal_words(query, [words(items[i]) for i, _ in head[:3] if i in items])
    attribute = asked_attribute(query, goal)
    if not attribute:
        return ranked, None
    joined = goal_turns(ctx, goal, tail[: max(0, settings.attribute_reach - settings.attribute_depth)])
    if joined:
        items.update(joined)
        head = head + [(i, s) for i, s in tail if i in joined]
        tail = [(i, s) for i, s in tail if i not in joined]
    vectors = said_vectors(ctx, {i: words(items[i]) for i, _ in head if i in items})
    asked = np.asarray(ctx.embed_query(attribute), dtype=np.float32)
    asked = asked / (np.linalg.norm(asked) or 1.0)
    similarity = {i: float(np.dot(asked, v)) / (float(np.linalg.norm(v)) or 1.0) for i, v in vectors.items()}
    by_attribute = sorted(similarity, key=lambda i: -similarity[i])
    fused = fuse_head(head, by_attribute, tail, settings.attribute_weight, settings.rrf_k)
    return fused, {"goal_words": sorted(goal), "attribute": attribute}


def goal_turns(ctx: EngineContext, goal: set[str], reach: Ranked) -> dict[int, Item]:
    """The items of `reach` (the ranking below the asked attribute's head) indexed under every goal word: the
    goal's other turns, those that say its attribute in other words or leave the goal implicit and were indexed
    under the goal they continue (stitch's "(re: ...)"). Look-alike goals lack one of the words and stay out."""
    if not goal or not reach:
        return {}
    found = ctx.store.get_items(ctx.ns, [i for i, _ in reach])
    return {i: item for i, item in found.items() if goal <= set(analyze(item.text))}


SAID_VECTORS = "refine:said-vectors"


def said_vectors(ctx: EngineContext, texts: dict[int, str]) -> dict[int, np.ndarray]:
    """The vectors of items' words as said (no date or speaker before them, unlike the vectors dense search
    indexes), embedded when a search first needs them. They are kept with the namespace's in-memory state and in
    its embedding cache in the store (so that the next process finds them), and both are emptied by a delete: the
    memory at once (a new epoch), the store's cache of every vector no item uses."""
    store, ns, cache = ctx.store, ctx.ns, ctx.indexes
    epoch = store.epoch(ns)
    with cache.lock_for(ns):
        known = _held(cache.view(ns, SAID_VECTORS, epoch))  # never changed in place: other searches read it
    missing = [i for i in texts if i not in known]
    if not missing:
        return {i: known[i] for i in texts}
    # embedded outside the lock: other searches of the namespace do not wait for the model
    _, embedded = ctx.embed([texts[i] for i in missing], remember=True)
    new = dict(zip(missing, np.asarray(embedded, dtype=np.float32), strict=True))
    with cache.lock_for(ns):
        if store.epoch(ns) == epoch:
            cache.keep_view(ns, SAID_VECTORS, epoch, {**_held(cache.view(ns, SAID_VECTORS, epoch)), **new})
    if store.epoch(ns) != epoch:
        # a delete came between the reading and the remembering (writes to a namespace are serialised: a later
        # delete purges what was remembered before it), so what it purged may have been written back since;
        # nothing of a deleted turn stays (promise 2)
        store.drop_unused_embeddings(ns)
    return {i: new[i] if i in new else known[i] for i in texts}


def _held(view: object) -> dict[int, np.ndarray]:
    return view if isinstance(view, dict) else {}


__all__ = [
    "Rank",
    "attribute_first",
    "each_speaker",
    "expand",
    "feedback_terms",
    "fuse_head",
    "goal_turns",
    "refine",
    "rerank",
    "said_vectors",
    "turn_table",
]
