"""Memory: add / search / get / delete / export / import / history / reindex — the public face of cuemem.

The raw turn log is committed first (the acknowledgement); engines then catch up from a per-engine watermark, so a
crash between the two only delays indexing, and every derived index can be rebuilt from the log (docs/design.md
promise 1). Memory composes its parts: the indexer (engines, contexts, catch-up), the intake (validation, the log,
then the engine), transfer (export, import, files) and forgetting (deletes, reindex)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext, suppress
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from .answer import ABSTAIN, EVIDENCE_TOKENS, PREMISE_READ, Search, final, read, read_stream
from .config import Settings
from .embed import make_embedder
from .embed.base import Embedder
from .engines import BaseEngine, Engine, EngineContext, as_engine, available_engines, get_engine
from .errors import CuememError, TurnNotFoundError, UnknownNamespaceError
from .forgetting import Forgetting
from .formats import ImportReport
from .index.budget import pack
from .indexer import INGEST_BATCH, MODEL_BATCH, Indexer
from .indexing import BackgroundIndexer
from .intake import AddResult, Ids, Intake, Message
from .llm import LLMClient, make_client
from .store import as_target, open_store
from .store.base import Store
from .transfer import ProgressFactory, Transfer
from .types import Answer, Namespace, Retrieval, Turn, check_id_length

log = logging.getLogger(__name__)

__all__ = ["INGEST_BATCH", "MODEL_BATCH", "AddResult", "ImportReport", "Memory", "Message", "ProgressFactory"]


class Memory:
    """Long-term memory over one store. `engine` picks the retrieval strategy: a registered name (default:
    settings.engine) or an engine instance, e.g. `cuemem.engines.stitch.variant("stitch", k_update=100)`.
    `read_only=True` opens the store for reading only: it never writes (nor waits behind a writer), searches what
    is already indexed, and refuses writes with StoreError. `settings` is copied, never changed: `path` and
    `engine` replace its db and engine in the copy."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        engine: str | Engine | None = None,
        embedder: Embedder | str | None = None,
        llm: LLMClient | None = None,
        settings: Settings | None = None,
        read_only: bool = False,
        **overrides: Any,
    ) -> None:
        instance = as_engine(engine) if engine is not None and not isinstance(engine, str) else None
        name = instance.name if instance is not None else engine if isinstance(engine, str) else None
        # a copy of the caller's settings, never the caller's own: `path` and `engine` replace its db and engine
        self.settings = replace(settings) if settings is not None else Settings.load(db=path, engine=name, **overrides)
        self.settings.db = as_target(path) if settings is not None and path is not None else self.settings.db
        self.settings.engine = name if settings is not None and name is not None else self.settings.engine
        # the scrub after deletes (cuemem/store/scrub.py): the setting, else (None) the store's default
        store: Store = open_store(self.settings.db, read_only=read_only, scrub_after_s=self.settings.scrub_after_s)
        self.engine: BaseEngine = instance if instance is not None else get_engine(self.settings.engine)
        if isinstance(embedder, str):  # a name, as the setting takes it ("minilm", "hashing", a folder)
            self.settings.embedder, embedder = embedder, None
        self._embedder = embedder
        self._llm = llm
        # the batch sizes are read here, so that setting cuemem.memory.INGEST_BATCH sizes a new Memory's batches
        self._indexer = Indexer(
            store, self.settings, self.engine, lambda: self.embedder, lambda: self.llm, (INGEST_BATCH, MODEL_BATCH)
        )
        self.indexes = self._indexer.indexes  # in-memory lexical indexes and engines' query-side views
        self.tokens = self._indexer.tokens
        self._intake = Intake(self._indexer)
        self._transfer = Transfer(self._intake)
        self._forgetting = Forgetting(self._indexer)
        # index_in_background: adds are acknowledged once durable, a worker thread indexes (cuemem/indexing.py)
        self.background: BackgroundIndexer | None = None
        if self.settings.index_in_background and not read_only:
            self.background = BackgroundIndexer(
                self._index_now,
                lambda ns: self._indexer.pending(None, ns),
                backlog=lambda: [namespace for namespace, _ in self.store.namespaces()],
                prepare=self._prepare_across,
            )
            self._intake.defer = self.background.submit
            self.on_forget(self.background.forget)  # a delete clears the namespace's retry state

    # ------------------------------------------------------------------ plumbing
    @property
    def store(self) -> Store:
        """The durable store; held once, by the indexer, which every part reads it through."""
        return self._indexer.store

    @store.setter
    def store(self, store: Store) -> None:
        self._indexer.store = store

    def close(self) -> None:
        """Stop the background indexer (waiting a while for its pass in progress; the rest stays in the log), then close
        the store."""
        if self.background is not None:
            self.background.close()
        self.store.close()

    def _index_now(self, namespace: Namespace) -> int:
        """The background indexer's step: the memory's engine catches the namespace up (0 if it is gone)."""
        try:
            ns = self.store.namespace_id(namespace)
        except UnknownNamespaceError:  # deleted since its add: nothing to index
            return 0
        return self._indexer.sync(self.engine, ns, namespace)

    def _prepare_across(self, namespaces: list[Namespace]) -> int:
        """The background indexer's batch: the new turns of several namespaces embedded in one call (not for an
        embedder cheaper than the reads it adds)."""
        if getattr(self.embedder, "cheap", False):
            return 0
        targets = []
        for namespace in namespaces:
            with suppress(UnknownNamespaceError):  # deleted since its add
                targets.append((self.store.namespace_id(namespace), namespace))
        return self._indexer.prepare_across(self.engine, targets)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.settings)
        return self._embedder

    @property
    def llm(self) -> LLMClient:
        """The model client (created on first use, so memories that never ask a model never load one)."""
        if self._llm is None:  # no file cache: every call of Memory's is made for a namespace (see llm_for)
            self._llm = make_client(self.settings, file_cache=False)
        return self._llm

    def _engine(self, name: str | None) -> BaseEngine:
        return self._indexer.get(name)

    def llm_for(self, ns: int) -> LLMClient:
        """The model client for calls made on a namespace's behalf: cached in the store with that namespace's
        turns (so every delete there forgets them), keyed with the store's salt; no cache when llm_cache=off."""
        return self._indexer.llm_for(ns)

    def _context(self, ns: int, namespace: Namespace, progress: Callable[[int], None] | None = None) -> EngineContext:
        return self._indexer.context(ns, namespace, progress)

    def _progress_key(self, engine: BaseEngine) -> str:
        """Watermarks are per engine, and per embedding model for engines that embed."""
        return self._indexer.progress_key(engine)

    @staticmethod
    def namespace(user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Namespace:
        return Namespace(user_id, agent_id, run_id)

    # ------------------------------------------------------------------ writing
    def add(
        self,
        messages: Message | Iterable[Message],
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        session_id: str | None = None,
        timestamp: str | None = None,
        on_error: str = "raise",
        progress: Callable[[int], None] | None = None,
    ) -> AddResult:
        """Store turns in the namespace and index them with the engine. `messages`: a string, a dict ({"role"|"speaker",
        "content"|"text", "id"?, "timestamp"?, "metadata"?, "session_id"?}), a Turn, or a list of these. An id-less
        message gets a deterministic id (session, speaker, text, timestamp, repeat count in this call), so a retried
        add is a no-op, and an identical id-less message in a later call is taken for a retry: give ids or timestamps
        to store true repeats. on_error="raise" (default): an invalid message raises InvalidTurnError and nothing is
        written; "skip": the valid ones are stored and the rest reported in `AddResult.rejected`."""
        return self._intake.add(messages, (user_id, agent_id, run_id), session_id, timestamp, on_error, progress)

    # ------------------------------------------------------------------ reading
    def search(
        self,
        query: str,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        k: int | None = None,
        budget_tokens: int | None = None,
        engine: str | None = None,
        now: str | None = None,
    ) -> Retrieval:
        """The k best hits for the query in this namespace, packed into `budget_tokens` when given. `now`, when
        the query is asked (any common date format), resolves its relative dates ("last week") for date boosts."""
        return self._search(query, (user_id, agent_id, run_id), k, budget_tokens, engine, now)

    def answer(
        self,
        question: str,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        k: int | None = None,
        budget_tokens: int | None = None,
        engine: str | None = None,
        now: str | None = None,
        abstain: str | None = None,
    ) -> Answer:
        """Search, pack the hits into `budget_tokens` (settings.answer_budget by default) and have the model
        answer; the answer cites only turn ids that were in its context. Model calls count as stage "query".
        `now`, the date the question is asked, is given to the model for questions relative to it; `abstain` is
        the reply the model is told to give when its excerpts do not say (the reader's default otherwise)."""
        return final(
            self.answer_stream(
                question,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                k=k,
                budget_tokens=budget_tokens,
                engine=engine,
                now=now,
                abstain=abstain,
            )
        )

    @property
    def reader(self) -> Callable[..., Answer]:
        """`cuemem.answer.read` with this memory's reader settings (the check of its answer, `answer_verify`)."""
        return functools.partial(read, verify=self.settings.answer_verify)

    def answer_stream(
        self,
        question: str,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        k: int | None = None,
        budget_tokens: int | None = None,
        engine: str | None = None,
        now: str | None = None,
        abstain: str | None = None,
    ) -> Iterator[str | Answer]:
        """`answer`, streamed: pieces of the answer's text as the model decodes them, then the `Answer` (the last
        item). An engine with its own answering step (`episodic`'s master) gives its text as one piece."""
        budget = self.settings.answer_budget if budget_tokens is None else budget_tokens
        retrieval = self._search(question, (user_id, agent_id, run_id), k, None, engine, now)
        yield from self.read_stream(question, retrieval, budget_tokens=budget, now=now, abstain=abstain)

    def _search(
        self, query: str, ids: Ids, k: int | None, budget_tokens: int | None, engine: str | None, now: str | None
    ) -> Retrieval:
        """Search (and the retrieval answer reads): the namespace of `ids` (user, agent, run) caught up first."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        k = self.settings.k if k is None else k
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        namespace = Namespace(*ids)
        chosen, ns = self._indexer.caught_up(engine, namespace)
        start = time.perf_counter()
        # model calls of a retrieval (seeding, labelling the question) count as "query"; a memory whose engine
        # calls no model never creates a client here
        with self.llm.stage("query") if self._llm is not None or chosen.uses_llm else nullcontext():
            hits = chosen.retrieve(self._indexer.context(ns, namespace, now=now), query, k, budget_tokens)
        return Retrieval(
            query=query,
            hits=pack(hits, budget_tokens),
            engine=chosen.name,
            namespace=namespace,
            seconds=time.perf_counter() - start,
            budget_tokens=budget_tokens,
        )

    def read(
        self,
        question: str,
        retrieval: Retrieval,
        *,
        budget_tokens: int | None = None,
        now: str | None = None,
        abstain: str | None = None,
    ) -> Answer:
        """Answer from a retrieval already made (its hits packed into `budget_tokens`): through the engine's own
        answering step where it has one (`episodic`'s master), else the reader. Model calls count as "query"."""
        return final(self.read_stream(question, retrieval, budget_tokens=budget_tokens, now=now, abstain=abstain))

    def read_stream(
        self,
        question: str,
        retrieval: Retrieval,
        *,
        budget_tokens: int | None = None,
        now: str | None = None,
        abstain: str | None = None,
    ) -> Iterator[str | Answer]:
        """`read`, streamed: pieces of the answer's text as the reader decodes them, then the `Answer` (the last
        item). An engine with its own answering step (`episodic`'s master) gives its text as one piece."""
        ns = self.store.namespace_id(retrieval.namespace)
        client = self.llm_for(ns)
        engine = self.engine if retrieval.engine in ("", self.engine.name) else self._engine(retrieval.engine)
        abstain = ABSTAIN if abstain is None else abstain
        with client.stage("query"):
            if type(engine).answer is not BaseEngine.answer:  # its own step: answered whole
                ctx = self._indexer.context(ns, retrieval.namespace, now=now)
                answer = engine.answer(
                    ctx,
                    client,
                    question,
                    retrieval,
                    reader=self.reader,
                    budget_tokens=budget_tokens,
                    now=now,
                    abstain=abstain,
                )
                yield answer.text
                yield answer
                return
            yield from read_stream(
                client,
                question,
                retrieval,
                now=now,
                abstain=abstain,
                verify=self.settings.answer_verify,
                search=self._premise_search(retrieval, now) if self.settings.answer_premise else None,
                evidence_tokens=EVIDENCE_TOKENS if budget_tokens is None else budget_tokens,
            )

    def _premise_search(self, retrieval: Retrieval, now: str | None) -> Search:
        """The search the answer's premise check runs (cuemem.answer.attributed_elsewhere): the retrieval's
        namespace and engine, the best PREMISE_READ hits."""
        ids = (retrieval.namespace.user_id, retrieval.namespace.agent_id, retrieval.namespace.run_id)
        return lambda text: self._search(text, ids, PREMISE_READ, None, retrieval.engine or None, now).hits

    def get(self, turn_id: str, *, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Turn:
        check_id_length(turn_id, "turn id")  # no turn can have a longer one: say so, not "not found"
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        return self.store.get_turn(ns, turn_id)

    def turns(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None, session_id: str | None = None
    ) -> list[Turn]:
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        return list(self.store.iter_turns(ns, session_id=session_id))

    def namespaces(self) -> list[tuple[Namespace, int]]:
        return self.store.namespaces()

    def history(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        return self.store.history(ns, limit)

    # ------------------------------------------------------------------ deleting and rebuilding
    def delete(self, turn_id: str, *, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> None:
        """Delete one turn and everything derived from it."""
        check_id_length(turn_id, "turn id")
        if not self._forgetting.delete_turns(Namespace(user_id, agent_id, run_id), [turn_id]):
            raise TurnNotFoundError(f"no turn {turn_id!r} for user {user_id!r}")

    def delete_session(
        self, session_id: str, *, user_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> int:
        return self._forgetting.delete_turns(Namespace(user_id, agent_id, run_id), session_id=session_id)

    def delete_all(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> list[tuple[Namespace, int]]:
        """Delete a namespace and every namespace under it: with only `user_id`, all of the user's namespaces
        (every agent and run); with `agent_id`, that agent's namespace and all its runs; with `run_id`, exactly
        the namespace named. Logs, every derived row, cached model calls and history go, in one transaction.
        Returns each namespace deleted with its number of turns; raises UnknownNamespaceError when there is none."""
        return self._forgetting.delete_all(user_id, agent_id, run_id)

    def on_forget(self, listener: Callable[[Namespace], None]) -> None:
        """Call `listener(namespace)` after every delete or reindex of a namespace, so that state kept outside the
        store (a server's chat agents and their recent turns) is dropped with the turns it may quote."""
        self._forgetting.listeners.append(listener)

    def engine_stats(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None, engine: str | None = None
    ) -> dict[str, Any]:
        """What the engine reports about a namespace (e.g. STITCH's steps and model-mode fallbacks); {} if none."""
        namespace = Namespace(user_id, agent_id, run_id)
        return dict(self._engine(engine).stats(self._context(self.store.namespace_id(namespace), namespace)))

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the store file and truncate it: after a delete, no page of the deleted
        turns is left in either file (freed pages are zeroed: secure_delete). Every delete schedules this by
        itself (docs/guarantees.md); calling it scrubs now."""
        self.store.checkpoint()

    def derived_state(self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> dict[str, Any]:
        """Every derived row of a namespace in a store-independent form: two stores fed the same log compare
        equal (used to check that concurrent and crashed ingests equal a sequential one)."""
        return self.store.derived_state(self.store.namespace_id(Namespace(user_id, agent_id, run_id)))

    def pending(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None, engine: str | None = None
    ) -> int:
        """How many of the namespace's turns the engine has not indexed yet (e.g. after a change of embedder, every
        one of them: the next search embeds them all first)."""
        return self._indexer.pending(engine, Namespace(user_id, agent_id, run_id))

    def catch_up(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        engine: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Index the turns the engine has not indexed yet, reporting progress; returns how many it indexed
        (search does this by itself, silently; long catch-ups deserve a progress bar)."""
        namespace = Namespace(user_id, agent_id, run_id)
        return self._indexer.sync(self._engine(engine), self.store.namespace_id(namespace), namespace, progress)

    def index_pending(self, engine: str | None = None) -> dict[Namespace, int]:
        """Catch up every namespace with turns the engine (default: the memory's) has not indexed; the turns indexed
        per namespace (`cuemem worker`'s pass; safe beside servers and other workers: `Indexer.sync` takes turns)."""
        done: dict[Namespace, int] = {}
        for namespace, _ in self.namespaces():
            try:  # a namespace caught up costs one read: sync compares its watermark with the log first
                done[namespace] = self._indexer.sync(
                    self._engine(engine), self.store.namespace_id(namespace), namespace
                )
            except UnknownNamespaceError:  # deleted since it was listed
                continue
            except CuememError as exc:  # one namespace failing (a model, a store hiccup) does not stop the others
                log.warning("cuemem: indexing %s failed: %s", namespace, exc)
                done[namespace] = 0
        return done

    def reindex(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Drop derived indexes and rebuild them from the raw log (one namespace, or all when no user_id)."""
        return self._forgetting.reindex(self._indexer.targets(user_id, agent_id, run_id), progress)

    def gc(self, keep: Iterable[str] | None = None, *, dry_run: bool = False) -> dict[str, int]:
        """Drop the derived state of engines nobody uses (issue 33): every owner in the store but the memory's
        engine and `keep` (default: every registered engine by its name, so "name[field=value]" variants go).
        Returns {owner: items dropped}; with `dry_run`, the owners that would go (0 items counted)."""
        kept = {self.engine.name, *(keep if keep is not None else available_engines())}
        gone = [owner for owner in self.store.derived_owners() if owner not in kept]
        if dry_run:
            return dict.fromkeys(gone, 0)
        return {owner: self.store.drop_derived_owner(owner) for owner in gone}

    # ------------------------------------------------------------------ typed records (engine `profile`)
    def profile(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        subject: str | None = None,
        engine: str | None = None,
    ) -> dict[str, Any]:
        """The current preferences and profile facts of a namespace's subject (default: the speaker with the most
        records) as a dict, each value with its confidence, evidence turn ids and earlier values."""
        chosen, ctx = self._indexer.record_keeper(engine, Namespace(user_id, agent_id, run_id))
        return dict(chosen.profile(ctx, subject))

    def records(
        self,
        query: str | None = None,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        types: Sequence[str] | None = None,
        k: int | None = None,
        now: str | None = None,
        engine: str | None = None,
    ) -> list[dict[str, Any]]:
        """A namespace's typed records (with their history), by relevance to `query` (similarity and recency) or
        all, newest first; `types` picks record types (preference, profile, episodic, summary, tool_result)."""
        chosen, ctx = self._indexer.record_keeper(engine, Namespace(user_id, agent_id, run_id), now=now)
        return [{**r.to_json(), "score": round(score, 4)} for r, score in chosen.records(ctx, query, types=types, k=k)]

    def export(
        self, out: IO[str], *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> int:
        """Write the raw log (one namespace, or all) as JSONL, one turn a line; derived indexes are rebuilt."""
        return self._transfer.export(out, self._indexer.targets(user_id, agent_id, run_id))

    def import_(
        self,
        lines: Iterable[str | bytes],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> ImportReport:
        """Add turns from JSONL lines (the export format); a bad line is reported by number and every good one
        kept. Lines are read one at a time and written in batches, so any iterable of lines streams.

        With a `user_id`, every line goes into the namespace given here, whatever the line's own "namespace"
        says: importing alice's export with user_id="bob" copies it into bob. The lines may name one namespace
        besides the one given (the one being copied); a line naming yet another is rejected by its number, so a
        file mixing several tenants is never merged into one. Without a user_id, each line's own "namespace"
        decides, and a line without one is rejected.
        """
        target = Namespace(user_id, agent_id, run_id) if user_id is not None else None
        return self._transfer.import_lines(lines, target, progress)

    def ingest_file(
        self,
        path: str | Path,
        *,
        file_format: str = "auto",
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        samples: Sequence[str] | None = None,
        progress: ProgressFactory | None = None,
    ) -> ImportReport:
        """Ingest a conversation file: JSONL (the export format, streamed line by line; a bad line is reported by
        number and every good one kept; see `import_` for which namespace each line goes to) or LoCoMo JSON (each
        sample into namespace `user_id` or, by default, its sample id; with a user_id and several samples, each
        sample becomes a run; a bad turn or sample is reported by sample id and position and every good one
        kept). `file_format` is auto, jsonl or locomo."""
        return self._transfer.ingest_file(Path(path), file_format, (user_id, agent_id, run_id), samples, progress)
