"""Indexing off the request path (issue 36, item 3): an add is acknowledged once its turns are durable in the log;
embedding and the engine's indexing run in a background worker, batched per namespace.

Nothing is lost or hidden by deferring: the log is the source of truth, a search catches its namespace up before
it reads (so it sees every acknowledged turn, paying only for the part the worker has not reached), and indexing
is safe across threads and processes (`Indexer.sync`: one batch at a time under the store's write lock, watermark
included). A worker that stops, or a namespace whose indexing keeps failing, is reported, never silent: see
`BackgroundIndexer.health`, which the server's /healthz and /metrics read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .types import Namespace

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0  # a namespace whose indexing failed is tried again after this, doubling up to a minute
MAX_RETRY_SECONDS = 60.0
FAILING = 5  # a namespace that failed this many passes in a row makes the worker unhealthy (/healthz: 503)
ACROSS = 32  # namespaces due together whose new turns are embedded in one batch before their passes


@dataclass
class IndexerHealth:
    """What the worker reports: is it running, how much is waiting, and what went wrong last."""

    running: bool
    queued_namespaces: int
    backlog_turns: int
    indexed_turns: int
    failures: int
    last_error: str
    failing_namespaces: int = 0  # namespaces whose last FAILING passes all failed

    @property
    def problem(self) -> str:
        """Why the worker cannot be relied on ("" when it can): stopped, or failing on every try."""
        if not self.running:
            return f"the indexing worker stopped{': ' + self.last_error if self.last_error else ''}"
        if self.failing_namespaces:
            return f"indexing keeps failing for {self.failing_namespaces} namespaces: {self.last_error}"
        return ""


class BackgroundIndexer:
    """One thread that catches namespaces up after their adds, in the order they were submitted (a namespace
    submitted again while it waits keeps its place: its later turns are indexed in the same pass)."""

    def __init__(
        self,
        catch_up: Callable[[Namespace], int],
        pending: Callable[[Namespace], int],
        *,
        backlog: Callable[[], Iterable[Namespace]] | None = None,
        prepare: Callable[[list[Namespace]], object] | None = None,
        name: str = "cuemem-indexer",
    ) -> None:
        """`catch_up` indexes a namespace, `pending` counts what it has not indexed; `backlog`, the namespaces that
        may hold unindexed turns when the worker starts (acknowledged by a process that stopped before indexing
        them): the worker queues those with pending turns first. `prepare` embeds the new turns of several
        namespaces in one batch ahead of their passes (Indexer.prepare_across; a failure there only costs speed:
        each pass embeds what it does not find)."""
        self._catch_up = catch_up
        self._pending = pending
        self._backlog = backlog
        self._prepare = prepare
        self._prepared: set[Namespace] = set()  # embedded ahead since their last submit
        self._scanning = backlog is not None  # the start's scan for unindexed turns is not over
        self._streak: dict[Namespace, int] = {}
        self._queue: OrderedDict[Namespace, float] = OrderedDict()  # namespace -> not before (monotonic seconds)
        self._backoff: dict[Namespace, float] = {}
        self._busy: Namespace | None = None
        self._cond = threading.Condition()
        self._closed = False
        self.indexed_turns = 0
        self.failures = 0
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the request side
    def submit(self, namespace: Namespace) -> None:
        """Index the namespace's new turns soon (an add committed them to the log)."""
        with self._cond:
            if self._closed:  # closing: the turns stay in the log, for the next search or worker
                log.debug("cuemem: %s submitted after the indexer closed", namespace)
                return
            if namespace not in self._queue:
                self._queue[namespace] = 0.0
            self._prepared.discard(namespace)
            self._cond.notify()

    def forget(self, namespace: Namespace) -> None:
        """A delete in the namespace: drop its retry state (a queued pass stays: after a delete of some of its
        turns the rest may still need indexing; after a delete of all, the pass finds nothing and ends)."""
        with self._cond:
            self._backoff.pop(namespace, None)
            self._streak.pop(namespace, None)
            self._prepared.discard(namespace)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or being indexed (True), or `timeout` seconds passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy is not None or self._scanning:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if not self._thread.is_alive():
                    return False
                self._cond.wait(left if left is not None else 0.5)
            return True

    def health(self) -> IndexerHealth:
        """The worker's state now; the backlog counts the turns not yet indexed in every namespace it holds."""
        with self._cond:
            waiting = list(self._queue) + ([self._busy] if self._busy is not None else [])
        backlog = 0
        for namespace in dict.fromkeys(waiting):
            try:
                backlog += self._pending(namespace)
            except Exception:  # a namespace deleted meanwhile, a store briefly away: not part of the backlog
                continue
        return IndexerHealth(
            running=self._thread.is_alive() and not self._closed,
            queued_namespaces=len(waiting),
            backlog_turns=backlog,
            indexed_turns=self.indexed_turns,
            failures=self.failures,
            last_error=self.last_error,
            failing_namespaces=sum(1 for n in list(self._streak.values()) if n >= FAILING),
        )

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking namespaces and wait up to `timeout` seconds for the pass in progress (what is left stays in
        the log: the next search or worker indexes it). A pass still running then goes on until its batch ends;
        if the store closes under it, it fails and is logged, and nothing acknowledged is lost."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ the worker
    def _next(self) -> Namespace | None:
        """The first namespace due, waiting for one; None once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = next((ns for ns, at in self._queue.items() if at <= now), None)
                if due is not None:
                    del self._queue[due]
                    self._busy = due
                    return due
                soonest = min(self._queue.values(), default=None)
                self._cond.wait(None if soonest is None else max(0.01, soonest - now))
            return None

    def _queue_backlog(self) -> None:
        """Queue the namespaces that hold unindexed turns at start (a server restarted after a crash)."""
        if self._backlog is None:
            return
        try:
            self._scan(self._backlog)
        finally:
            with self._cond:
                self._scanning = False
                self._cond.notify_all()

    def _scan(self, backlog: Callable[[], Iterable[Namespace]]) -> None:
        try:
            for namespace in backlog():
                if self._closed:
                    return
                try:
                    if self._pending(namespace):
                        self.submit(namespace)
                except Exception:  # deleted meanwhile, or unreadable now: its next add or search catches it up
                    continue
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("cuemem: the indexer could not list the namespaces to catch up: %s", exc)

    def _prepare_with(self, namespace: Namespace) -> None:
        """Embed the new turns of `namespace` and of the namespaces due with it in one batch (up to ACROSS), unless
        they were since their last submit."""
        if self._prepare is None:
            return
        with self._cond:
            now = time.monotonic()
            due = [ns for ns, at in self._queue.items() if at <= now]
            group = [ns for ns in [namespace, *due] if ns not in self._prepared][:ACROSS]
            if len(group) < 2:
                return
            self._prepared.update(group)
        try:
            self._prepare(group)
        except Exception as exc:  # only speed is lost: each pass embeds what it does not find cached
            log.debug("cuemem: embedding ahead across %d namespaces failed: %s", len(group), exc)

    def _run(self) -> None:
        try:
            self._queue_backlog()
            while (namespace := self._next()) is not None:
                self._prepare_with(namespace)
                try:
                    self.indexed_turns += self._catch_up(namespace)
                    self._backoff.pop(namespace, None)
                    self._streak.pop(namespace, None)
                except Exception as exc:  # kept in the log: tried again later, and reported meanwhile
                    self.failures += 1
                    self._streak[namespace] = self._streak.get(namespace, 0) + 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    wait = min(MAX_RETRY_SECONDS, self._backoff.get(namespace, RETRY_SECONDS / 2) * 2)
                    self._backoff[namespace] = wait
                    log.warning("cuemem: indexing %s failed (retrying in %.0f s): %s", namespace, wait, exc)
                    with self._cond:
                        self._queue.setdefault(namespace, time.monotonic() + wait)
                finally:
                    with self._cond:
                        self._busy = None
                        self._prepared.discard(namespace)
                        self._cond.notify_all()
        except BaseException as exc:  # the thread itself failed: say so in health(), never silently
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("cuemem: the indexing worker stopped: %s", self.last_error)
            raise
