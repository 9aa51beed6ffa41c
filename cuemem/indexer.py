"""The indexer: Memory's engines, their contexts, and catching them up with the turn log.

The raw turn log is committed first; each engine then catches up from its own watermark, so a crash between the
two only delays indexing and every derived index can be rebuilt from the log (docs/design.md promise 1).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import nullcontext

from .config import Settings
from .embed.base import Embedder
from .embed.cached import embed_texts_cached
from .engines import BaseEngine, EngineContext, get_engine
from .engines.base import RecordKeeper
from .engines.baselines import ahead_documents
from .errors import CuememError
from .index.live import IndexCache
from .index.tokens import TokenCounter, default_counter
from .llm import LLMClient
from .store.base import Store, text_hash
from .store.caches import StoreCallCache
from .types import Namespace, Turn

log = logging.getLogger(__name__)

INGEST_BATCH = 256  # turns per engine ingest call: bounds memory and gives progress bars a pulse
MODEL_BATCH = 8  # for engines that call a model per turn: each batch holds the write lock, so keep it short
MAX_NAMED_ENGINES = 16  # engines named per call kept at once besides the memory's own (least recently used out)


class Indexer:
    """One store's engines (the memory's own, plus any named per call), the contexts they run in, and the
    catch-up of each (namespace, engine) from the log. `embedder` and `llm` create the model on first use;
    `batches` are the turns per ingest call (INGEST_BATCH, and MODEL_BATCH for an engine that calls a model)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        engine: BaseEngine,
        embedder: Callable[[], Embedder],
        llm: Callable[[], LLMClient],
        batches: tuple[int, int] = (INGEST_BATCH, MODEL_BATCH),
    ) -> None:
        self.store = store
        self.settings = settings
        self.engine = engine
        self.engines: OrderedDict[str, BaseEngine] = OrderedDict({engine.name: engine})
        self._engines_lock = threading.Lock()
        self.embedder = embedder
        self.llm = llm
        self.batch, self.model_batch = batches
        # in-memory lexical indexes and engines' query-side views, per namespace, within the setting cache_mb
        self.indexes = IndexCache(max_bytes=settings.cache_mb << 20)
        self.tokens: TokenCounter = default_counter()

    def get(self, name: str | None) -> BaseEngine:
        """The memory's engine (None) or the one registered as `name`, created once."""
        if name is None:
            return self.engine
        with self._engines_lock:
            chosen = self.engines.pop(name, None) or get_engine(name)
            self.engines[name] = chosen  # the most recently used last
            while len(self.engines) > MAX_NAMED_ENGINES + 1:  # bounded, however many names callers try
                oldest = next(n for n in self.engines if n != self.engine.name)
                del self.engines[oldest]
        return chosen

    def caught_up(self, name: str | None, namespace: Namespace) -> tuple[BaseEngine, int]:
        """The engine chosen (None: the memory's) and the namespace's id, after the engine caught up with its log."""
        ns = self.store.namespace_id(namespace)
        engine = self.get(name)
        self.sync(engine, ns, namespace)
        return engine, ns

    def record_keeper(
        self, name: str | None, namespace: Namespace, now: str | None = None
    ) -> tuple[RecordKeeper, EngineContext]:
        """The engine chosen, caught up, if it keeps typed records (a profile engine), and its context."""
        if not isinstance(engine := self.get(name), RecordKeeper):
            raise CuememError(f"engine {engine.name!r} keeps no records: use a profile engine (e.g. engine='profile')")
        _, ns = self.caught_up(name, namespace)
        return engine, self.context(ns, namespace, now=now)

    def targets(self, user_id: str | None, agent_id: str | None, run_id: str | None) -> list[Namespace]:
        """The one namespace named, or every namespace when no user_id is given."""
        if user_id is not None:
            return [Namespace(user_id, agent_id, run_id)]
        return [namespace for namespace, _ in self.store.namespaces()]

    def llm_for(self, ns: int) -> LLMClient:
        """The model client for calls made on a namespace's behalf: cached in the store with that namespace's
        turns (so every delete there forgets them), keyed with the store's salt; no cache when llm_cache=off."""
        if self.settings.llm_cache == "off":
            return self.llm().bound(None)
        return self.llm().bound(StoreCallCache(self.store, ns), salt=self.store.salt)

    def context(
        self,
        ns: int,
        namespace: Namespace,
        progress: Callable[[int], None] | None = None,
        now: str | None = None,
    ) -> EngineContext:
        """What an engine may use for one namespace (docs/design.md promise 6); `now` dates a query."""
        return EngineContext(
            store=self.store,
            ns=ns,
            namespace=namespace,
            settings=self.settings,
            tokens=self.tokens,
            indexes=self.indexes,
            embedder_factory=self.embedder,
            llm_factory=lambda: self.llm_for(ns),
            progress=progress,
            now=now,
        )

    def progress_key(self, engine: BaseEngine) -> str:
        """Watermarks are per engine, and per embedding model for engines that embed."""
        return f"{engine.name}@{self.embedder().name}" if engine.uses_embedder else engine.name

    def prepare_across(self, engine: BaseEngine, targets: Sequence[tuple[int, Namespace]]) -> int:
        """Embed the unindexed turns of several namespaces in one embedder call, into each namespace's embedding
        cache, for an engine that `embeds_ahead` (issue 36: a model embeds one batch of 64 far faster than 64
        batches of one; the background worker calls this for the namespaces due together). `sync` then finds the
        vectors cached. Each namespace's share is cached inside its write lock and only for turns still logged, so
        a delete is either seen or purges them (promise 2). Returns how many texts were embedded."""
        if not engine.embeds_ahead or len(targets) < 2:
            return 0
        key = self.progress_key(engine)
        embedder = self.embedder()
        jobs: list[tuple[int, list[Turn], list[str]]] = []
        todo: dict[str, str] = {}  # hash -> text, across namespaces
        for ns, _ in targets:
            ahead = list(self.store.iter_turns(ns, after_seq=self.store.watermark(ns, key), limit=self.batch))
            if not ahead:
                continue
            docs = ahead_documents(self.settings, ahead)
            hashes = [text_hash(d) for d in docs]
            known = self.store.cached_embeddings(ns, embedder.name, hashes)
            for h, doc in zip(hashes, docs, strict=True):
                if h not in known:
                    todo.setdefault(h, doc)
            jobs.append((ns, ahead, hashes))
        if len(jobs) < 2 or not todo:
            return 0
        _, vectors = embed_texts_cached(embedder, list(todo.values()), lambda hs: {})
        fresh = dict(zip(todo, vectors, strict=True))
        for ns, ahead, hashes in jobs:
            mine = [(t, h) for t, h in zip(ahead, hashes, strict=True) if h in fresh]
            if not mine:  # all of this namespace's texts were cached already: no write
                continue
            with self.store.transaction(ns):
                logged = self.store.seqs_of(ns, [t.id for t, _ in mine])
                rows = {h: fresh[h] for t, h in mine if logged.get(t.id) == t.seq}
                if rows:
                    self.store.cache_embeddings(ns, embedder.name, list(rows.items()))
        return len(todo)

    def pending(self, name: str | None, namespace: Namespace) -> int:
        """How many of the namespace's turns the engine chosen (None: the memory's) has not indexed yet."""
        engine = self.get(name)
        ns = self.store.namespace_id(namespace)
        return self.store.count_turns(ns, after_seq=self.store.watermark(ns, self.progress_key(engine)))

    def sync(
        self, engine: BaseEngine, ns: int, namespace: Namespace, progress: Callable[[int], None] | None = None
    ) -> int:
        """Feed the engine every logged turn past its watermark; returns how many turns it ingested.

        One indexer per (namespace, engine) across threads and processes: each batch's watermark check, turn
        read, engine writes and new watermark happen inside one write transaction (BEGIN IMMEDIATE), so
        concurrent indexers take turns and a concurrent ingest equals a sequential one. The engine's `prepare`
        (embedding, cached in the store) runs before, without the lock, so the lock is held for labelling and
        writes only; engines that call a model per turn take small batches, so other writers wait seconds.
        """
        key = self.progress_key(engine)
        if self.store.watermark(ns, key) >= self.store.last_seq(ns):
            return 0  # caught up: a read, no lock taken
        if self.store.read_only:
            log.warning(
                "%s has not indexed every turn of (%s) and the store is open read-only: results cover what is indexed",
                engine.name,
                namespace,
            )
            return 0
        self.store.declare(engine.derived)
        ctx = self.context(ns, namespace, progress)
        uses_llm = engine.uses_llm
        size = self.model_batch if uses_llm else self.batch
        prepares = type(engine).prepare is not BaseEngine.prepare  # no read-ahead for engines with nothing to do
        done = 0
        while True:
            # lock-free work first (embeddings into the namespace's cache); the batch is read again under the lock
            if prepares:
                ahead = list(self.store.iter_turns(ns, after_seq=self.store.watermark(ns, key), limit=size))
                if not ahead:
                    return done
                engine.prepare(ctx, ahead)
            # model calls made while indexing count as "ingest", whether turns arrive by add or are caught up
            with self.store.transaction(ns), self.llm().stage("ingest") if uses_llm else nullcontext():
                batch = list(self.store.iter_turns(ns, after_seq=self.store.watermark(ns, key), limit=size))
                if batch:
                    engine.ingest(ctx, batch)
                    self.store.set_watermark(ns, key, max(t.seq or 0 for t in batch))
                if prepares and {t.id for t in ahead} - {t.id for t in batch}:
                    # turns embedded ahead were deleted meanwhile: their vectors may have entered the embedding
                    # cache after the delete purged it; nothing of a deleted turn stays (promise 2)
                    self.store.drop_unused_embeddings(ns)
            if not batch:
                return done
            done += len(batch)
            if progress:
                progress(len(batch))
