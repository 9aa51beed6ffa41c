"""The engine interface: strategies that read and write through the store (docs/design.md promise 6)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..config import Settings
from ..embed.base import Embedder, embed_query
from ..embed.cached import embed_texts_cached
from ..errors import CuememError
from ..index.live import IndexCache
from ..index.tokens import TokenCounter
from ..llm.client import LLMClient
from ..store.base import DerivedSpec, Store
from ..types import Hit, Namespace, Turn
from .structure import hit_text


@dataclass
class EngineContext:
    """Everything an engine may use for one namespace; engines keep no other state."""

    store: Store
    ns: int
    namespace: Namespace
    settings: Settings
    tokens: TokenCounter
    indexes: IndexCache
    embedder_factory: Callable[[], Embedder]
    progress: Callable[[int], None] | None = None
    llm_factory: Callable[[], LLMClient] | None = None
    now: str | None = None  # when the query is asked (its relative dates resolve against it), if known
    _embedder: Embedder | None = field(default=None, repr=False)

    @property
    def embedder(self) -> Embedder:
        """Created on first use, so engines that need no vectors never load a model."""
        if self._embedder is None:
            self._embedder = self.embedder_factory()
        return self._embedder

    def embed(self, texts: Sequence[str], *, remember: bool = False) -> tuple[list[str], np.ndarray]:
        """(text hashes, vectors) of texts, through this namespace's embedding cache: each distinct text is
        embedded once. Item vectors enter the cache with `store.put_vectors`; `remember=True` caches the new
        vectors now (for texts that are not items, such as vocabulary labels)."""
        name = self.embedder.name
        seen: set[str] = set()

        def cached(hashes: list[str]) -> dict[str, np.ndarray]:
            found = self.store.cached_embeddings(self.ns, name, hashes)
            seen.update(found)
            return found

        hashes, vectors = embed_texts_cached(self.embedder, texts, cached)
        if remember:
            fresh = {h: v for h, v in zip(hashes, vectors, strict=True) if h not in seen}
            if fresh:
                self.store.cache_embeddings(self.ns, name, list(fresh.items()))
        return hashes, vectors

    @property
    def llm(self) -> LLMClient:
        """The model client, for model-assisted engines (created on first use); its calls are cached with this
        namespace's data in the store, so deleting a turn also forgets the prompts that quoted it."""
        if self.llm_factory is None:
            raise CuememError("this engine needs a model client, but none was given to the engine context")
        return self.llm_factory()

    def embed_query(self, query: str) -> np.ndarray:
        """The query's vector (with the embedder's query prompt, where it has one)."""
        return np.asarray(embed_query(self.embedder, [query])[0], dtype=np.float32)

    def fusion_weights(self) -> tuple[float, float]:
        """(BM25 weight, dense weight) for reciprocal-rank fusion: the settings, where the BM25 weight is -1 the
        one measured for this embedder (registry; 1.0 where unknown)."""
        bm25 = self.settings.rrf_bm25_weight
        if bm25 < 0:
            bm25 = float(getattr(self.embedder, "bm25_weight", 1.0))
        return bm25, self.settings.rrf_dense_weight

    def bm25(self, space: str, query: str, k: int) -> list[tuple[int, float]]:
        """Top-k (item id, BM25 score) among this namespace's items of `space`."""
        return self.indexes.bm25_search(self.store, self.ns, space, query, k, self.settings.bm25_stopwords)

    def nearest(self, space: str, model: str, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k (item id, cosine) among this namespace's vectors of `space` from `model` (the store's search)."""
        return self.store.vector_search(self.ns, space, model, np.asarray(vector, dtype=np.float32), k)

    def hits_from_items(self, scored: Sequence[tuple[int, float]], engine: str) -> list[Hit]:
        """Turn (item id, score) pairs into hits carrying their source turn ids and token counts; an item
        without a live source turn is never returned (every hit has provenance, docs/design.md promise 3)."""
        items = self.store.get_items(self.ns, [i for i, _ in scored])
        return [
            Hit(
                text=hit_text(it.text, it.meta),
                score=s,
                turn_ids=it.turn_ids,
                tokens=it.tokens,
                engine=engine,
                detail=it.meta,
            )
            for it, s in ((items[i], s) for i, s in scored if i in items)
            if it.turn_ids
        ]


def variant_name(name: str, overrides: dict[str, object]) -> str:
    """The name of a registered variant run with config overrides, recording them (e.g. "stitch[k_update=100]"),
    so its derived state and watermarks never mix with those of the registered variant in the same store."""
    if not overrides:
        return name
    return name + "[" + ",".join(f"{k}={v}" for k, v in sorted(overrides.items())) + "]"


@runtime_checkable
class Engine(Protocol):
    """`ingest` must be idempotent (re-ingesting a turn changes nothing) and a function of the log alone (the
    same turns in the same order give the same derived state, however they are batched): the store may replay
    turns after a crash or a delete. `retrieve` returns hits best first; Memory packs them into the budget.
    `derived` declares the engine's item spaces and what a delete does to them (store/base.py, DerivedSpec).
    An engine whose index depends on the embedder sets `uses_embedder = True`, so that its progress is tracked
    per embedding model and a new model re-embeds from the log."""

    name: str
    uses_embedder: bool

    @property
    def derived(self) -> DerivedSpec: ...

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None: ...

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]: ...
