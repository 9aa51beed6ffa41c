"""The engine interface: strategies that read and write through the store (docs/design.md promise 6)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..config import Settings
from ..embed.base import Embedder, embed_query
from ..embed.cached import embed_texts_cached
from ..errors import CuememError
from ..index.live import IndexCache
from ..index.statements import READING
from ..index.tokens import TokenCounter
from ..llm.client import LLMClient
from ..store.base import DerivedSpec, Scores, Store
from ..types import Answer, Hit, Namespace, Retrieval, Turn
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

    def indexed_version(self, engine: str) -> tuple[int, int, str]:
        """What an engine's query-side view of this namespace is kept for: the namespace's epoch (moved by deletes
        and reindexes) and the engine's watermark (moved by ingest, in the transaction that writes its state), for
        an engine that embeds (the indexer's progress key, `engine@embedder`)."""
        name = self.embedder.name
        return self.store.epoch(self.ns), self.store.watermark(self.ns, f"{engine}@{name}"), name

    def nearest_scores(self, space: str, model: str, vector: np.ndarray, k: int) -> Scores:
        """`nearest` as arrays (item ids, cosines), best first: for an engine that scores every item."""
        return self.store.vector_scores(self.ns, space, model, np.asarray(vector, dtype=np.float32), k)

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
                detail={key: value for key, value in it.meta.items() if key != READING},
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


Reader = Callable[..., Answer]  # cuemem.answer.read: (client, question, retrieval, *, now, abstain, notes)


@runtime_checkable
class Engine(Protocol):
    """What any engine must have: a name, `ingest` and `retrieve` (a plugin may have only these; Memory wraps
    it in `PluginEngine`, which supplies the other hooks' defaults). Built-in engines subclass `BaseEngine`."""

    name: str

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None: ...

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]: ...


class BaseEngine(ABC):
    """The engine contract with its optional hooks' defaults (docs/design.md promise 6).

    `ingest` must be idempotent (re-ingesting a turn changes nothing) and a function of the log alone (the
    same turns in the same order give the same derived state, however they are batched): the store may replay
    turns after a crash or a delete. `retrieve` returns hits best first; Memory packs them into the budget.
    `derived` declares the engine's item spaces and what a delete does to them (store/base.py, DerivedSpec).
    An engine whose index depends on the embedder sets `uses_embedder = True`, so that its progress is tracked
    per embedding model and a new model re-embeds from the log."""

    name: str
    uses_embedder: bool = False
    # `prepare` embeds the turns' documents (`baselines.ahead_documents`) into the namespace's cache, so a worker
    # may embed them for several namespaces in one batch (Indexer.prepare_across)
    embeds_ahead: bool = False

    @property
    def uses_llm(self) -> bool:
        """Whether ingest calls a model (Memory then ingests in small batches and counts the calls as "ingest")."""
        return False

    @property
    def derived(self) -> DerivedSpec:
        """The engine's derived state; by default none declared, so it is rebuilt from the log after any delete."""
        return DerivedSpec(self.name, (), "rebuild")

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Lock-free work ahead of `ingest` (e.g. embeddings into the namespace's cache); by default none."""
        return None

    @abstractmethod
    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Index turns from the log (idempotent, a function of the log alone)."""

    @abstractmethod
    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        """The k best hits for the query, best first."""

    def answer(
        self,
        ctx: EngineContext,
        client: LLMClient,
        question: str,
        retrieval: Retrieval,
        *,
        reader: Reader,
        budget_tokens: int | None,
        now: str | None,
        abstain: str,
    ) -> Answer:
        """Answer from a retrieval: by default `reader` picks the smallest evidence within `budget_tokens`."""
        options = {} if budget_tokens is None else {"evidence_tokens": budget_tokens}
        return reader(client, question, retrieval, now=now, abstain=abstain, **options)

    def forget(self, ctx: EngineContext) -> None:
        """After a delete: drop derived state kept outside the store (rebuilt from the log); by default none."""
        return None

    def stats(self, ctx: EngineContext) -> Mapping[str, Any]:
        """What the engine reports about a namespace (e.g. steps, fallbacks); by default nothing."""
        return {}


class PluginEngine(BaseEngine):
    """A third-party engine that does not subclass BaseEngine, with the defaults for the hooks it lacks; any
    other attribute (its `config`, a `profile` method) is read from the engine itself."""

    def __init__(self, plugin: Engine) -> None:
        self.plugin = plugin
        self.name = plugin.name
        self.uses_embedder = bool(getattr(plugin, "uses_embedder", False))

    def __getattr__(self, attr: str) -> Any:
        if attr == "plugin":  # not set yet (e.g. while unpickling): never recurse
            raise AttributeError(attr)
        return getattr(self.plugin, attr)

    @property
    def uses_llm(self) -> bool:
        return bool(getattr(self.plugin, "uses_llm", False))

    @property
    def derived(self) -> DerivedSpec:
        spec = getattr(self.plugin, "derived", None)
        return spec if isinstance(spec, DerivedSpec) else super().derived

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        own = getattr(self.plugin, "prepare", None)
        if own is not None:
            own(ctx, turns)

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        self.plugin.ingest(ctx, turns)

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        return self.plugin.retrieve(ctx, query, k, budget_tokens)

    def answer(
        self,
        ctx: EngineContext,
        client: LLMClient,
        question: str,
        retrieval: Retrieval,
        *,
        reader: Reader,
        budget_tokens: int | None,
        now: str | None,
        abstain: str,
    ) -> Answer:
        own = getattr(self.plugin, "answer", None)
        if not callable(own):
            return super().answer(
                ctx, client, question, retrieval, reader=reader, budget_tokens=budget_tokens, now=now, abstain=abstain
            )
        return own(
            ctx, client, question, retrieval, reader=reader, budget_tokens=budget_tokens, now=now, abstain=abstain
        )

    def forget(self, ctx: EngineContext) -> None:
        own = getattr(self.plugin, "forget", None)
        if own is not None:
            own(ctx)

    def stats(self, ctx: EngineContext) -> Mapping[str, Any]:
        own = getattr(self.plugin, "stats", None)
        return own(ctx) if own is not None else {}


@runtime_checkable
class RecordKeeper(Protocol):
    """An engine that keeps typed records (the profile engines): Memory.profile and Memory.records read them."""

    name: str

    def profile(self, ctx: EngineContext, subject: str | None = None) -> Mapping[str, Any]: ...

    def records(
        self, ctx: EngineContext, query: str | None, *, types: Sequence[str] | None = None, k: int | None = None
    ) -> list[tuple[Any, float]]: ...


def as_engine(engine: Engine) -> BaseEngine:
    """The engine itself when it subclasses BaseEngine, else wrapped in PluginEngine (hooks' defaults)."""
    return engine if isinstance(engine, BaseEngine) else PluginEngine(engine)


def unwrap(engine: Engine) -> Engine:
    """The engine a PluginEngine wraps (whose code versions a benchmark's results), else the engine itself."""
    return engine.plugin if isinstance(engine, PluginEngine) else engine
