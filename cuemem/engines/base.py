"""The engine interface: strategies that read and write through the store (DESIGN.md promise 6)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..config import Settings
from ..embed.base import Embedder
from ..errors import CuememError
from ..index.tokens import TokenCounter
from ..llm.client import LLMClient
from ..store.sqlite import SQLiteStore
from ..types import Hit, Namespace, Turn


@dataclass
class EngineContext:
    """Everything an engine may use for one namespace; engines keep no other state."""

    store: SQLiteStore
    ns: int
    namespace: Namespace
    settings: Settings
    tokens: TokenCounter
    embedder_factory: Callable[[], Embedder]
    progress: Callable[[int], None] | None = None
    llm_factory: Callable[[], LLMClient] | None = None
    _embedder: Embedder | None = field(default=None, repr=False)

    @property
    def embedder(self) -> Embedder:
        """Created on first use, so engines that need no vectors never load a model."""
        if self._embedder is None:
            self._embedder = self.embedder_factory()
        return self._embedder

    @property
    def llm(self) -> LLMClient:
        """The model client, for model-assisted engines (created on first use)."""
        if self.llm_factory is None:
            raise CuememError("this engine needs a model client, but none was given to the engine context")
        return self.llm_factory()

    def hits_from_items(self, scored: Sequence[tuple[int, float]], engine: str) -> list[Hit]:
        """Turn (item id, score) pairs into hits carrying their source turn ids and token counts; an item
        without a live source turn is never returned (every hit has provenance, DESIGN.md promise 3)."""
        items = self.store.get_items(self.ns, [i for i, _ in scored])
        return [
            Hit(text=it.text, score=s, turn_ids=it.turn_ids, tokens=it.tokens, engine=engine, detail=it.meta)
            for it, s in ((items[i], s) for i, s in scored if i in items)
            if it.turn_ids
        ]


@runtime_checkable
class Engine(Protocol):
    """`ingest` must be idempotent (re-ingesting a turn changes nothing): the store may replay turns after a
    crash or a partial delete. `retrieve` returns hits best first; Memory packs them into the budget.
    An engine whose index depends on the embedder sets `uses_embedder = True`, so that its progress is tracked
    per embedding model and a new model re-embeds from the log."""

    name: str
    uses_embedder: bool

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None: ...

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]: ...
