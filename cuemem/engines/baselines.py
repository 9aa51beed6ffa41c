"""Baselines (docs/design.md, "Baselines"): full context, BM25, dense, and their reciprocal-rank fusion.

All four index the same items: one per turn in the space "turn", whose text is the turn's words (plus an image
caption when the turn carries one) and whose fields are its speaker, date, resolved dates and the people it names
(`structure.turn_fields`, issue 13). Dense search embeds `settings.turn_template` ("{date}{speaker}: {text}" by
default); hits show "speaker: words" with the date in their metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..config import Settings
from ..index.fusion import reciprocal_rank_fusion
from ..store.base import DerivedSpec, NewItem
from ..types import Hit, Turn
from .base import BaseEngine, EngineContext
from .current import hit_detail
from .refine import refine, turn_table
from .structure import hit_text, turn_fields, with_header_tokens

TURN_SPACE = "turn"
Ranked = list[tuple[int, float]]
log = logging.getLogger(__name__)


def turn_words(turn: Turn) -> str:
    """A turn's words with its image caption (metadata "image_caption"), if it carries one."""
    caption = turn.metadata.get("image_caption")
    return f"{turn.text} [image: {caption}]" if caption else turn.text


def turn_document(turn: Turn, template: str = "{date}{speaker}: {text}") -> str:
    """The text dense search embeds for a turn (`settings.turn_template`): by default its date, speaker, words
    and any image caption."""
    text = turn_words(turn)
    date = f"[{turn.timestamp}] " if turn.timestamp else ""
    return template.format(date=date, speaker=turn.speaker, text=text, session=turn.session_id)


def index_turns(ctx: EngineContext, turns: Sequence[Turn], space: str = TURN_SPACE) -> None:
    """Write one item per turn (keyed by its id) into `space`, the baselines' shared "turn" space by default
    (existing items are kept)."""
    existing = ctx.store.item_ids(ctx.ns, space, [t.id for t in turns])
    turns = [t for t in turns if t.id not in existing]
    if not turns:
        return
    words = [turn_words(t) for t in turns]
    metas = [turn_fields(t) for t in turns]
    unparsed = [m["timestamp"] for m in metas if m["timestamp"] and m["date"] is None]
    if unparsed:  # kept raw (hits show it as their session header) and counted by `stats`; never fatal
        log.warning(
            "%d turn timestamp(s) did not parse as a date, kept as written: e.g. %r", len(unparsed), unparsed[0][:80]
        )
    with_header_tokens(metas, ctx.tokens.count_many)
    shown = [hit_text(w, m) for w, m in zip(words, metas, strict=True)]
    ctx.store.put_items(
        ctx.ns,
        space,
        [
            NewItem(t.id, w, meta, [t.seq] if t.seq is not None else [], tokens)
            for t, w, meta, tokens in zip(turns, words, metas, ctx.tokens.count_many(shown), strict=True)
        ],
    )


class TurnIndexer(BaseEngine):
    """What the baselines share: one item per turn in the "turn" space, each depending on its own turn only, so a
    delete removes exactly the deleted turns' items and nothing is rebuilt."""

    name: str

    @property
    def derived(self) -> DerivedSpec:
        return DerivedSpec(self.name, (TURN_SPACE,), "rows")

    def stats(self, ctx: EngineContext) -> dict[str, int]:
        """Turns indexed, and those whose timestamp did not parse as a date (kept raw)."""
        table = turn_table(ctx, TURN_SPACE)
        return {"turns": len(table.ids), "unparsed_timestamps": table.unparsed}


def ahead_documents(settings: Settings, turns: Sequence[Turn]) -> list[str]:
    """The texts an engine that `embeds_ahead` embeds for `turns` before ingest: each turn's document."""
    return [turn_document(t, settings.turn_template) for t in turns]


def prepare_embeddings(ctx: EngineContext, turns: Sequence[Turn]) -> None:
    """Embed the turns' documents into the namespace's embedding cache ahead of ingest, outside the write lock."""
    ctx.embed(ahead_documents(ctx.settings, turns), remember=True)


def embed_missing(ctx: EngineContext, space: str, turns: Sequence[Turn]) -> None:
    """Embed the document (`turn_document`) of those turns whose item in `space` has no vector from the current
    embedder, via the cache."""
    embedder = ctx.embedder
    item_ids = ctx.store.item_ids(ctx.ns, space, [t.id for t in turns])
    todo = {item for item, _ in ctx.store.items_without_vectors(ctx.ns, embedder.name, list(item_ids.values()))}
    pending = [(item_ids[t.id], t) for t in turns if item_ids.get(t.id) in todo]
    if not pending:
        return
    hashes, vectors = ctx.embed([turn_document(t, ctx.settings.turn_template) for _, t in pending])
    ctx.store.put_vectors(
        ctx.ns,
        space,
        embedder.name,
        [(item_id, h, v) for (item_id, _), h, v in zip(pending, hashes, vectors, strict=True)],
    )


def fused_ranking(ctx: EngineContext, space: str, query: str, vector: np.ndarray, depth: int) -> Ranked:
    """BM25 over `query` and dense over `vector` among the items of `space`, fused by weighted reciprocal rank
    (`ctx.fusion_weights()`): the first ranking `hybrid` and the engines that keep raw turns share."""
    lexical = [i for i, _ in ctx.bm25(space, query, depth)]
    semantic = [i for i, _ in ctx.nearest(space, ctx.embedder.name, vector, depth)]
    fused = reciprocal_rank_fusion([lexical, semantic], k=ctx.settings.rrf_k, weights=ctx.fusion_weights())
    return [(int(i), s) for i, s in fused]


class FullContext(TurnIndexer):
    """Everything that fits: the most recent turns that fill the budget, returned in log order."""

    name = "fullcontext"
    uses_embedder = False
    default_budget = 4096

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        index_turns(ctx, turns)

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        budget = budget_tokens if budget_tokens is not None else self.default_budget
        chosen: list[tuple[int, float]] = []
        used = 0
        for item_id, n in reversed(ctx.store.items_in_order(ctx.ns, TURN_SPACE)):
            if used + n > budget:
                break
            used += n
            chosen.append((item_id, 0.0))
        chosen.reverse()
        total = len(chosen)
        return ctx.hits_from_items([(i, (r + 1) / total) for r, (i, _) in enumerate(chosen)], self.name)


class BM25Engine(TurnIndexer):
    """Lexical retrieval: BM25 over the turn documents."""

    name = "bm25"
    uses_embedder = False

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        index_turns(ctx, turns)

    def ranked(self, ctx: EngineContext, query: str, depth: int) -> list[tuple[int, float]]:
        return ctx.bm25(TURN_SPACE, query, depth)

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        return ctx.hits_from_items(self.ranked(ctx, query, k), self.name)


class DenseEngine(TurnIndexer):
    """Semantic retrieval: cosine similarity of sentence embeddings of the turn documents."""

    name = "dense"
    uses_embedder = True
    embeds_ahead = True

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        prepare_embeddings(ctx, turns)

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        index_turns(ctx, turns)
        embed_missing(ctx, TURN_SPACE, turns)

    def ranked(self, ctx: EngineContext, query: str, depth: int) -> list[tuple[int, float]]:
        return ctx.nearest(TURN_SPACE, ctx.embedder.name, ctx.embed_query(query), depth)

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        return ctx.hits_from_items(self.ranked(ctx, query, k), self.name)


class HybridEngine(TurnIndexer):
    """BM25 and dense rankings fused by weighted reciprocal rank (k = settings.rrf_k, 60 by default; weights
    `ctx.fusion_weights()`, BM25's measured per embedder)."""

    name = "hybrid"
    uses_embedder = True
    embeds_ahead = True
    depth = 100  # how deep each ranking is read before fusion

    def __init__(self) -> None:
        self.bm25 = BM25Engine()
        self.dense = DenseEngine()

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        prepare_embeddings(ctx, turns)

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        self.dense.ingest(ctx, turns)

    def fused(self, ctx: EngineContext, query: str, vector: np.ndarray, depth: int) -> list[tuple[int, float]]:
        """The first ranking: BM25 over `query` and dense over `vector`, fused by weighted reciprocal rank."""
        return fused_ranking(ctx, TURN_SPACE, query, vector, depth)

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        depth = max(self.depth, k)
        vector = ctx.embed_query(query)
        ranked, detail = refine(
            ctx,
            TURN_SPACE,
            query,
            vector,
            self.fused(ctx, query, vector, depth),
            lambda text, v: self.fused(ctx, text, v, depth),
        )
        hits = ctx.hits_from_items(ranked[:k], self.name)
        for hit in hits:
            hit.detail = {**hit.detail, **hit_detail(detail, hit)}
        return hits
