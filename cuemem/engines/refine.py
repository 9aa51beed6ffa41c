"""The second stages a ranking engine composes after its first ranking (issue 13): pseudo-relevance feedback for
multi-hop questions, structural boosts (people, dates), current values first (issue 34: `current.py`) and model
reranking. Each is set by `Settings` and off
where its weight is 0 (reranking: "off"); `hybrid` and `stitch` share them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..index.dates import format_day
from ..index.fusion import reciprocal_rank_fusion
from ..llm import LLMError
from ..llm.rerank import likelihood_relevance
from .base import EngineContext
from .current import Said, current_first
from .structure import QueryStructure, TurnTable, hit_text, structural_boost

log = logging.getLogger(__name__)

Ranked = list[tuple[int, float]]
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
) -> tuple[Ranked, dict[str, Any]]:
    """Expansion, then structure, then reranking, over an engine's first ranking of `space` (best first). Returns
    the new ranking and what each stage saw (for the hits' detail). `said` gives an item's words as its turn said
    them, for an engine that stores a summary (current values first reads those)."""
    settings = ctx.settings
    table = turn_table(ctx, space)
    asked = QueryStructure.read(query, table, ctx.now)
    detail: dict[str, Any] = {"structure": asked.describe()}
    if settings.expand_weight > 0 and ranked:
        ranked, detail["expansion"] = expand(ctx, query, query_vector, ranked, rank)
    ranked = structural_boost(table, ranked, asked, settings.speaker_boost, settings.date_boost, settings.said_boost)
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
    fused = reciprocal_rank_fusion(
        [[i for i, _ in head], by_model], k=settings.rrf_k, weights=[1.0, settings.rerank_weight]
    )
    floor = min((s for _, s in fused), default=0.0)
    scale = max((s for _, s in tail), default=0.0)
    out = [(int(i), s) for i, s in fused]
    # the tail stays below the head: its scores are squeezed under the lowest fused score
    return out + [(i, floor * (s / scale if scale > 0 else 0.0) * 0.999) for i, s in tail]


__all__ = ["Rank", "expand", "feedback_terms", "refine", "rerank", "turn_table"]
