"""Memory: add / search / get / delete / export / import / history / reindex — the public face of cuemem.

The raw turn log is committed first (that is the acknowledgement); engines then catch up from a per-engine
watermark, so a crash between the two only delays indexing, and every derived index can be rebuilt from the
log (docs/design.md promise 1).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from .answer import ABSTAIN, read
from .config import Settings
from .embed import make_embedder
from .embed.base import Embedder
from .engines import Engine, EngineContext, get_engine
from .errors import CuememError, ImportFormatError, InvalidTurnError, TurnNotFoundError
from .formats import ImportReport, count_lines, file_lines, iter_jsonl, iter_locomo_turns, read_locomo, sniff_format
from .index.budget import pack
from .index.live import IndexCache
from .index.tokens import TokenCounter, default_counter
from .llm import LLMClient, make_client
from .store import as_target, open_store
from .store.base import DerivedSpec, Store
from .store.caches import StoreCallCache
from .types import Answer, Namespace, Retrieval, Turn

log = logging.getLogger(__name__)

Message = str | bytes | Mapping[str, Any] | Turn
# (label, total) -> a context yielding advance(n): how long file ingestion shows progress (the CLI passes a bar).
ProgressFactory = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]
INGEST_BATCH = 256  # turns per engine ingest call: bounds memory and gives progress bars a pulse
MODEL_BATCH = 8  # for engines that call a model per turn: each batch holds the write lock, so keep it short
MAX_METADATA_DEPTH = 100  # deeper metadata is refused: it could exhaust the stack when the store serialises it


@dataclass
class AddResult:
    """What an add did: ids stored, ids already present (no-op), and inputs rejected with the reason."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)


class Memory:
    """Long-term memory over one store. `engine` picks the retrieval strategy: a registered name (default:
    settings.engine) or an engine instance, e.g. `cuemem.engines.stitch.variant("stitch", k_update=100)`.
    `read_only=True` opens the store for reading only: it never writes (nor waits behind a writer), searches what
    is already indexed, and refuses writes with StoreError."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        engine: str | Engine | None = None,
        embedder: Embedder | None = None,
        llm: LLMClient | None = None,
        settings: Settings | None = None,
        read_only: bool = False,
        **overrides: Any,
    ) -> None:
        instance = engine if engine is not None and not isinstance(engine, str) else None
        name = instance.name if instance is not None else (engine if isinstance(engine, str) else None)
        self.settings = settings or Settings.load(db=path, engine=name, **overrides)
        if settings is not None:
            if path is not None:
                self.settings.db = as_target(path)
            if name is not None:
                self.settings.engine = name
        self.store: Store = open_store(self.settings.db, read_only=read_only)
        self.indexes = IndexCache()  # in-memory lexical indexes and engines' query-side views, per namespace
        self.engine: Engine = instance if instance is not None else get_engine(self.settings.engine)
        self._engines: dict[str, Engine] = {self.engine.name: self.engine}
        self._embedder = embedder
        self._llm = llm
        self.tokens: TokenCounter = default_counter()
        self._forget_listeners: list[Callable[[Namespace], None]] = []

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.store.close()

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

    def _engine(self, name: str | None) -> Engine:
        if name is None:
            return self.engine
        if name not in self._engines:
            self._engines[name] = get_engine(name)
        return self._engines[name]

    def llm_for(self, ns: int) -> LLMClient:
        """The model client for calls made on a namespace's behalf: cached in the store with that namespace's
        turns (so every delete there forgets them), keyed with the store's salt; no cache when llm_cache=off."""
        if self.settings.llm_cache == "off":
            return self.llm.bound(None)
        return self.llm.bound(StoreCallCache(self.store, ns), salt=self.store.salt)

    def _context(self, ns: int, namespace: Namespace, progress: Callable[[int], None] | None = None) -> EngineContext:
        return EngineContext(
            store=self.store,
            ns=ns,
            namespace=namespace,
            settings=self.settings,
            tokens=self.tokens,
            indexes=self.indexes,
            embedder_factory=lambda: self.embedder,
            llm_factory=lambda: self.llm_for(ns),
            progress=progress,
        )

    def _progress_key(self, engine: Engine) -> str:
        """Watermarks are per engine, and per embedding model for engines that embed."""
        return f"{engine.name}@{self.embedder.name}" if getattr(engine, "uses_embedder", False) else engine.name

    def _sync(
        self, engine: Engine, ns: int, namespace: Namespace, progress: Callable[[int], None] | None = None
    ) -> int:
        """Feed the engine every logged turn past its watermark; returns how many turns it ingested.

        One indexer per (namespace, engine) across threads and processes: each batch's watermark check, turn
        read, engine writes and new watermark happen inside one write transaction (BEGIN IMMEDIATE), so
        concurrent indexers take turns and a concurrent ingest equals a sequential one. An engine's `prepare`
        (embedding, cached in the store) runs before, without the lock, so the lock is held for labelling and
        writes only; engines that call a model per turn take small batches, so other writers wait seconds.
        """
        key = self._progress_key(engine)
        if self.store.watermark(ns, key) >= self.store.last_seq(ns):
            return 0  # caught up: a read, no lock taken
        if self.store.read_only:
            log.warning(
                "%s has not indexed every turn of (%s) and the store is open read-only: results cover what is indexed",
                engine.name,
                namespace,
            )
            return 0
        self.store.declare(_spec(engine))
        ctx = self._context(ns, namespace, progress)
        uses_llm = getattr(engine, "uses_llm", False)
        size = MODEL_BATCH if uses_llm else INGEST_BATCH
        prepare = getattr(engine, "prepare", None)
        done = 0
        while True:
            if prepare is not None:  # lock-free work first (embeddings into the namespace's cache)
                ahead = list(self.store.iter_turns(ns, after_seq=self.store.watermark(ns, key), limit=size))
                if not ahead:
                    return done
                prepare(ctx, ahead)
            # model calls made while indexing count as "ingest", whether turns arrive by add or are caught up
            with self.store.transaction(), self.llm.stage("ingest") if uses_llm else nullcontext():
                batch = list(self.store.iter_turns(ns, after_seq=self.store.watermark(ns, key), limit=size))
                if batch:
                    engine.ingest(ctx, batch)
                    self.store.set_watermark(ns, key, max(t.seq or 0 for t in batch))
            if not batch:
                return done
            done += len(batch)
            if progress:
                progress(len(batch))

    @staticmethod
    def namespace(user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Namespace:
        return Namespace(user_id, agent_id, run_id)

    def _targets(self, user_id: str | None, agent_id: str | None, run_id: str | None) -> list[Namespace]:
        """The one namespace named, or every namespace when no user_id is given."""
        if user_id is not None:
            return [Namespace(user_id, agent_id, run_id)]
        return [namespace for namespace, _ in self.store.namespaces()]

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
        """Store turns in the namespace and index them with the engine.

        `messages` is a string, a dict ({"role"|"speaker", "content"|"text", "id"?, "timestamp"?, "metadata"?,
        "session_id"?}), a Turn, or a list of these. A message without an id gets a deterministic one from its
        session, speaker, text, timestamp and its repeat count within this call, so retrying the same add is a
        no-op; the flip side is that an identical id-less message in a later call (same session, speaker, text
        and timestamp) is taken for a retry and skipped: give ids or timestamps to store true repeats. With
        on_error="raise" (default) any invalid message raises InvalidTurnError and nothing is written; with
        "skip" the valid ones are stored and the rest reported in `AddResult.rejected`.
        """
        if on_error not in ("raise", "skip"):
            raise ValueError("on_error must be 'raise' or 'skip'")
        namespace = Namespace(user_id, agent_id, run_id)
        if isinstance(messages, str | bytes | Mapping | Turn):
            messages = [messages]
        turns, rejected = self._validate(list(messages), namespace, session_id, timestamp)
        if rejected and on_error == "raise":
            detail = "; ".join(f"message {i}: {why}" for i, why in rejected[:5])
            more = f" (and {len(rejected) - 5} more)" if len(rejected) > 5 else ""
            raise InvalidTurnError(f"nothing was added: {detail}{more}")
        result = AddResult(rejected=rejected)
        if not turns:
            return result
        ns = self.store.namespace_id(namespace, create=True)
        appended = self.store.append_turns(ns, turns)
        result.added = [t.id for t in appended.added]
        result.skipped = appended.skipped
        try:
            self._sync(self.engine, ns, namespace, progress)
        except CuememError as exc:
            raise type(exc)(
                f"{len(result.added)} turns were stored in the log, but indexing them with {self.engine.name!r}"
                f" failed: {exc}. Indexing resumes from the log on the next add or search."
            ) from exc
        return result

    def _validate(
        self,
        messages: list[Message],
        namespace: Namespace,
        session_id: str | None,
        timestamp: str | None,
        seen: Counter[str] | None = None,
    ) -> tuple[list[Turn], list[tuple[int, str]]]:
        """Turns and rejections; `seen` counts id-less repeats (pass one Counter to span several calls)."""
        turns: list[Turn] = []
        rejected: list[tuple[int, str]] = []
        seen = Counter() if seen is None else seen
        for index, message in enumerate(messages):
            try:
                turn = self._to_turn(message, namespace, session_id, timestamp, seen)
            except InvalidTurnError as exc:
                rejected.append((index, str(exc)))
            else:
                turns.append(turn)
        return turns, rejected

    def _to_turn(
        self,
        message: Message,
        namespace: Namespace,
        session_id: str | None,
        timestamp: str | None,
        seen: Counter[str],
    ) -> Turn:
        if isinstance(message, Turn):
            data: dict[str, Any] = {
                "id": message.id,
                "text": message.text,
                "speaker": message.speaker,
                "session_id": message.session_id,
                "timestamp": message.timestamp,
                "metadata": message.metadata,
            }
        elif isinstance(message, str | bytes):
            data = {"text": message}
        elif isinstance(message, Mapping):
            data = dict(message)
        else:
            raise InvalidTurnError(f"a message must be a string, a dict or a Turn, not {type(message).__name__}")
        text = data.get("text", data.get("content"))
        text = _clean_text(text, self.settings.max_turn_bytes)
        speaker = _clean_field(data.get("speaker", data.get("role", "user")), "speaker")
        session = _clean_field(data.get("session_id") or session_id or "default", "session_id")
        stamp = data.get("timestamp") or timestamp
        if stamp is not None:
            stamp = _clean_field(stamp, "timestamp")
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InvalidTurnError("metadata must be a JSON object")
        if _deeper_than(metadata, MAX_METADATA_DEPTH):
            raise InvalidTurnError(f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep")
        try:
            json.dumps(metadata, ensure_ascii=False).encode("utf-8")
        except RecursionError as exc:
            raise InvalidTurnError("metadata is nested too deeply") from exc
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise InvalidTurnError(f"metadata is not JSON-serialisable UTF-8: {exc}") from exc
        turn_id = data.get("id")
        if turn_id is None:
            basis = json.dumps([session, speaker, text, stamp], ensure_ascii=False)
            key = hashlib.sha256(basis.encode("utf-8")).hexdigest()  # a digest: the count holds no text
            seen[key] += 1
            basis += f"#{seen[key]}"
            # Keyed with the store's salt: stable within this store (a retried add is a no-op), but no one can
            # confirm a guess of a deleted turn's words from an id left in the history.
            turn_id = "t-" + hmac.new(self.store.salt, basis.encode("utf-8"), hashlib.sha256).hexdigest()[:16]
        else:
            turn_id = _clean_field(turn_id, "id")
        return Turn(
            id=turn_id,
            text=text,
            speaker=speaker,
            session_id=session,
            timestamp=stamp,
            metadata=dict(metadata),
            namespace=namespace,
        )

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
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        k = self.settings.k if k is None else k
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        namespace = Namespace(user_id, agent_id, run_id)
        ns = self.store.namespace_id(namespace)
        chosen = self._engine(engine)
        self._sync(chosen, ns, namespace)
        start = time.perf_counter()
        ctx = self._context(ns, namespace)
        ctx.now = now
        # model calls of a retrieval (seeding, labelling the question) count as "query"; a memory whose engine
        # calls no model never creates a client here
        uses_llm = self._llm is not None or getattr(chosen, "uses_llm", False)
        with self.llm.stage("query") if uses_llm else nullcontext():
            hits = chosen.retrieve(ctx, query, k, budget_tokens)
        hits = pack(hits, budget_tokens)
        return Retrieval(
            query=query,
            hits=hits,
            engine=chosen.name,
            namespace=namespace,
            seconds=time.perf_counter() - start,
            budget_tokens=budget_tokens,
        )

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
        budget = self.settings.answer_budget if budget_tokens is None else budget_tokens
        retrieval = self.search(
            question,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            k=k,
            budget_tokens=budget,
            engine=engine,
            now=now,
        )
        return self.read(question, retrieval, budget_tokens=budget, now=now, abstain=abstain)

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
        ns = self.store.namespace_id(retrieval.namespace)
        client = self.llm_for(ns)
        engine = self.engine if retrieval.engine in ("", self.engine.name) else self._engine(retrieval.engine)
        abstain = ABSTAIN if abstain is None else abstain
        with client.stage("query"):
            own = getattr(engine, "answer", None)
            if callable(own):
                ctx = self._context(ns, retrieval.namespace)
                ctx.now = now
                return own(
                    ctx, client, question, retrieval, reader=read, budget_tokens=budget_tokens, now=now, abstain=abstain
                )
            packed = replace(retrieval, hits=pack(retrieval.hits, budget_tokens), budget_tokens=budget_tokens)
            return read(client, question, packed, now=now, abstain=abstain)

    def get(self, turn_id: str, *, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Turn:
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        return self.store.get_turn(ns, turn_id)

    def turns(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        session_id: str | None = None,
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
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        if self.store.delete_turns(ns, [turn_id]) == 0:
            raise TurnNotFoundError(f"no turn {turn_id!r} for user {user_id!r}")
        self.indexes.drop(ns)  # the in-memory indexes would rebuild on the next search; drop their text now
        self._forget(ns, Namespace(user_id, agent_id, run_id))

    def delete_session(
        self, session_id: str, *, user_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> int:
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        count = self.store.delete_turns(ns, session_id=session_id)
        self.indexes.drop(ns)
        if count:
            self._forget(ns, Namespace(user_id, agent_id, run_id))
        return count

    def delete_all(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> list[tuple[Namespace, int]]:
        """Delete a namespace and every namespace under it: with only `user_id`, all of the user's namespaces
        (every agent and run); with `agent_id`, that agent's namespace and all its runs; with `run_id`, exactly
        the namespace named. Logs, every derived row, cached model calls and history go, in one transaction.
        Returns each namespace deleted with its number of turns; raises UnknownNamespaceError when there is none."""
        try:
            named = Namespace(user_id, agent_id, run_id)  # validates and normalises the ids
        except ValueError:
            # An id a store of an older version kept as it was (Namespace.stored) can still be deleted by its name.
            named = Namespace.stored(user_id, agent_id, run_id)
            if not any(ns == named for ns, _ in self.store.namespaces()):
                raise
        targets = [
            namespace
            for namespace, _ in self.store.namespaces()
            if namespace.user_id == named.user_id
            and (namespace.agent_id == named.agent_id or (agent_id is None and run_id is None))
            and (run_id is None or namespace.run_id == named.run_id)
        ]
        if not targets:
            self.store.namespace_id(named)  # raises UnknownNamespaceError
        deleted, ids = [], []
        with self.store.transaction():  # all or nothing
            for namespace in targets:
                ids.append(self.store.namespace_id(namespace))
                deleted.append((namespace, self.store.delete_namespace(ids[-1])))
        for ns, (namespace, _) in zip(ids, deleted, strict=True):
            self.indexes.drop(ns)  # nothing of theirs stays in this process's memory either
            self._forget(ns, namespace)
        return deleted

    def on_forget(self, listener: Callable[[Namespace], None]) -> None:
        """Call `listener(namespace)` after every delete or reindex of a namespace, so that state kept outside the
        store (a server's chat agents and their recent turns) is dropped with the turns it may quote."""
        self._forget_listeners.append(listener)

    def _forget(self, ns: int, namespace: Namespace) -> None:
        """Tell the engine a namespace lost turns, for derived state kept outside the store (the profile engine's
        Chroma records): it drops that state now; it is rebuilt from the log on next use. Then tell the listeners."""
        forget = getattr(self.engine, "forget", None)
        if forget is not None:
            forget(self._context(ns, namespace))
        for listener in self._forget_listeners:
            listener(namespace)

    def engine_stats(
        self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None, engine: str | None = None
    ) -> dict[str, Any]:
        """What the engine reports about a namespace (e.g. STITCH's steps and model-mode fallbacks); {} if none."""
        namespace = Namespace(user_id, agent_id, run_id)
        chosen = self._engine(engine)
        stats = getattr(chosen, "stats", None)
        return dict(stats(self._context(self.store.namespace_id(namespace), namespace))) if stats else {}

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the store file and truncate it: after a delete, no page of the deleted
        turns is left in either file (freed pages are zeroed: secure_delete)."""
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
        chosen = self._engine(engine)
        ns = self.store.namespace_id(Namespace(user_id, agent_id, run_id))
        return self.store.count_turns(ns, after_seq=self.store.watermark(ns, self._progress_key(chosen)))

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
        return self._sync(self._engine(engine), self.store.namespace_id(namespace), namespace, progress)

    def reindex(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Drop derived indexes and rebuild them from the raw log (one namespace, or all when no user_id)."""
        targets = self._targets(user_id, agent_id, run_id)
        total = 0
        for namespace in targets:
            ns = self.store.namespace_id(namespace)
            self.store.clear_derived(ns)
            self._forget(ns, namespace)
            total += self._sync(self.engine, ns, namespace, progress)
        return total

    # ------------------------------------------------------------------ typed records (engine `profile`)
    def _records_engine(self, engine: str | None, namespace: Namespace) -> tuple[Any, EngineContext]:
        chosen = self._engine(engine)
        if not hasattr(chosen, "profile"):
            raise CuememError(f"engine {chosen.name!r} keeps no records: use a profile engine (e.g. engine='profile')")
        ns = self.store.namespace_id(namespace)
        self._sync(chosen, ns, namespace)
        return chosen, self._context(ns, namespace)

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
        chosen, ctx = self._records_engine(engine, Namespace(user_id, agent_id, run_id))
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
        chosen, ctx = self._records_engine(engine, Namespace(user_id, agent_id, run_id))
        ctx.now = now
        return [
            {**record.to_json(), "score": round(score, 4)}
            for record, score in chosen.records(ctx, query, types=types, k=k)
        ]

    # ------------------------------------------------------------------ export / import
    def export(
        self,
        out: IO[str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> int:
        """Write the raw log (one namespace, or all) as JSONL, one turn a line; derived indexes are rebuilt."""
        targets = self._targets(user_id, agent_id, run_id)
        count = 0
        for namespace in targets:
            ns = self.store.namespace_id(namespace)
            for turn in self.store.iter_turns(ns):
                data = turn.as_dict()
                data.pop("seq")
                out.write(json.dumps(data, ensure_ascii=False) + "\n")
                count += 1
        return count

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
        report = ImportReport()
        target = Namespace(user_id, agent_id, run_id) if user_id is not None else None
        source: Namespace | None = None  # the one other namespace the lines may name when a target is given
        pending: dict[Namespace, list[tuple[int, dict[str, Any]]]] = {}
        seen: dict[Namespace, Counter[str]] = {}  # id-less repeats are counted across the whole file

        def flush(namespace: Namespace) -> None:
            rows = pending.pop(namespace, [])
            turns, rejected = self._validate(
                [data for _, data in rows], namespace, None, None, seen.setdefault(namespace, Counter())
            )
            report.errors.extend((rows[i][0], why) for i, why in rejected)
            if rejected and progress:
                progress(len(rejected))
            if not turns:
                return
            ns = self.store.namespace_id(namespace, create=True)
            appended = self.store.append_turns(ns, turns)
            report.added += len(appended.added)
            report.skipped += len(appended.skipped)
            self._sync(self.engine, ns, namespace)
            if progress:
                progress(len(turns))

        for lineno, data in iter_jsonl(lines, report):
            try:
                named = _namespace_of_line(data)
                if target is None:
                    if named is None:
                        raise ImportFormatError("line has no namespace and no --user-id was given")
                    namespace = named
                else:
                    if named is not None and named != target:
                        if source is None:
                            source = named
                        elif named != source:
                            raise ImportFormatError(
                                f"line names namespace ({named}), but this import copies ({source}) into"
                                f" ({target}): import one namespace at a time"
                            )
                    namespace = target
            except (ImportFormatError, ValueError) as exc:
                report.errors.append((lineno, str(exc)))
                continue
            pending.setdefault(namespace, []).append((lineno, data))
            if len(pending[namespace]) >= INGEST_BATCH:
                flush(namespace)
        for namespace in list(pending):
            flush(namespace)
        report.errors.sort(key=lambda e: (str(type(e[0])), e[0]))
        return report

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
        path = Path(path)
        if file_format == "auto":
            file_format = sniff_format(path)
        bar = progress or (lambda label, total: nullcontext(lambda n: None))
        if file_format == "jsonl":
            with bar(f"ingest {path.name}", count_lines(path)) as advance:
                return self.import_(
                    file_lines(path), user_id=user_id, agent_id=agent_id, run_id=run_id, progress=advance
                )
        if file_format != "locomo":
            raise CuememError(f"unknown format {file_format!r}: choose auto, jsonl or locomo")
        report = ImportReport()
        chosen = [s for s in read_locomo(path, report.errors) if not samples or s.get("sample_id") in samples]
        if run_id is not None and len(chosen) > 1:  # their turn ids (D1:1 ...) repeat: one namespace would drop them
            raise CuememError(
                f"{path} holds {len(chosen)} samples and a run id was given: each sample needs its own namespace;"
                " drop the run id (each sample becomes a run) or choose one sample"
            )
        if user_id is not None:
            Namespace(user_id, agent_id, run_id)  # a bad id given by the caller refuses the call
        for sample in chosen:
            sid = str(sample.get("sample_id", "sample"))
            user = user_id or sid
            run = run_id or (sid if user_id and len(chosen) > 1 else None)
            try:
                Namespace(user, agent_id, run)
            except ValueError as exc:  # a sample id that cannot be a namespace rejects that sample only
                report.errors.append((sid, f"sample skipped: {exc}"))
                continue
            problems: list[str] = []
            turns = list(iter_locomo_turns(sample, problems))
            report.errors += [(sid, why) for why in problems]
            with bar(f"ingest {sid}", len(turns)) as advance:
                for start in range(0, len(turns), INGEST_BATCH):
                    chunk = turns[start : start + INGEST_BATCH]
                    result = self.add(
                        [t for _, t in chunk], user_id=user, agent_id=agent_id, run_id=run, on_error="skip"
                    )
                    report.added += len(result.added)
                    report.skipped += len(result.skipped)
                    report.errors += [(sid, f"{chunk[i][0]} ({chunk[i][1].id}): {why}") for i, why in result.rejected]
                    advance(len(chunk))
        return report


def _spec(engine: Engine) -> DerivedSpec:
    """An engine's declared derived state; an engine (plugin) that declares none is rebuilt after any delete."""
    spec = getattr(engine, "derived", None)
    return spec if isinstance(spec, DerivedSpec) else DerivedSpec(engine.name, (), "rebuild")


def _namespace_of_line(data: dict[str, Any]) -> Namespace | None:
    """The namespace a JSONL line names (taken out of the line), or None."""
    raw = data.pop("namespace", None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or "user_id" not in raw:
        raise ImportFormatError("namespace must be an object with a user_id")
    return Namespace(raw["user_id"], raw.get("agent_id"), raw.get("run_id"))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _clean_text(text: Any, max_bytes: int) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidTurnError(f"text is not valid UTF-8 (byte {exc.start})") from exc
    if not isinstance(text, str):
        raise InvalidTurnError(f"text must be a string, got {type(text).__name__}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidTurnError(f"text is not valid UTF-8 (unpaired surrogate at {exc.start})") from exc
    if not text.strip():
        raise InvalidTurnError("text is empty")
    if size > max_bytes:
        raise InvalidTurnError(
            f"text is {size:,} bytes, over the {max_bytes:,}-byte limit per turn (CUEMEM_MAX_TURN_BYTES);"
            " split it into several turns"
        )
    return text


def _clean_field(value: Any, name: str) -> str:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidTurnError(f"{name} must be a string, got {type(value).__name__}")
    value = str(value)
    if not value.strip():
        raise InvalidTurnError(f"{name} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTurnError(f"{name} is not valid UTF-8") from exc
    if len(value) > 1000:
        raise InvalidTurnError(f"{name} is longer than 1,000 characters")
    return value
