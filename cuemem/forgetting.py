"""Forgetting: deletes and rebuilds over one store, and telling whoever keeps state outside it (docs/design.md
promise 2: a delete removes the turn and everything derived from it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .indexer import Indexer
from .llm.llamacpp import forget_prompts
from .store.base import Store
from .types import Namespace


class Forgetting:
    """The deletes of turns, sessions and namespaces, and reindexing; after each, the memory's engine and the
    listeners registered with `on_forget` drop what they keep of the namespace."""

    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer
        self.listeners: list[Callable[[Namespace], None]] = []

    @property
    def store(self) -> Store:
        """The indexer's store (see Intake.store)."""
        return self.indexer.store

    def forget(self, ns: int, namespace: Namespace) -> None:
        """Tell the engine a namespace lost turns, for derived state kept outside the store (the profile engine's
        Chroma records): it drops that state now; it is rebuilt from the log on next use. Then tell the listeners."""
        self.indexer.engine.forget(self.indexer.context(ns, namespace))
        forget_prompts()  # the reader's KV cache may hold the last prompt, and a prompt quotes turns
        for listener in self.listeners:
            listener(namespace)

    def delete_turns(
        self, namespace: Namespace, turn_ids: Sequence[str] | None = None, session_id: str | None = None
    ) -> int:
        """Memory.delete and delete_session: turns (by id, or a session's) and everything derived from them;
        returns how many were deleted."""
        ns = self.store.namespace_id(namespace)
        count = self.store.delete_turns(ns, turn_ids, session_id=session_id)
        self.indexer.indexes.drop(ns)  # the in-memory indexes would rebuild on the next search; drop their text now
        if count:
            self.forget(ns, namespace)
        return count

    def delete_all(self, user_id: str, agent_id: str | None, run_id: str | None) -> list[tuple[Namespace, int]]:
        """Memory.delete_all: the namespace named and every one under it, in one transaction."""
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
            self.indexer.indexes.drop(ns)  # nothing of theirs stays in this process's memory either
            self.forget(ns, namespace)
        return deleted

    def reindex(self, namespaces: Iterable[Namespace], progress: Callable[[int], None] | None) -> int:
        """Memory.reindex: drop each namespace's derived state and rebuild it from the log; returns turns indexed."""
        total = 0
        for namespace in namespaces:
            ns = self.store.namespace_id(namespace)
            self.store.clear_derived(ns)
            self.forget(ns, namespace)
            total += self.indexer.sync(self.indexer.engine, ns, namespace, progress)
        return total
