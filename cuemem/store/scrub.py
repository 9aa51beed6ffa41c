"""The scrub after a delete (docs/guarantees.md, "A delete reaches the disk"; design promise 2): every acknowledged
delete schedules, on a daemon timer, the store's own way of making the deleted bytes leave its files (SQLite: a
write-ahead-log checkpoint that truncates the log; PostgreSQL: VACUUM FULL of the tables that held deleted rows).

The first delete not yet scrubbed arms the timer; deletes committed before it fires join that scrub, so the bound
is `delay` plus the scrub itself, however many deletes follow. A scrub that is blocked (a reader holds the log, a
transaction holds a table) is tried again with a growing pause; `flush` runs a pending scrub at once (on close).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# Seconds from an acknowledged delete to the start of its scrub, per store, when the caller names none (the setting
# `scrub_after_s`). Tests shorten them.
SQLITE_SCRUB_AFTER_S = 1.0
POSTGRES_SCRUB_AFTER_S = 30.0
RETRY_S = 0.2  # the first pause before a blocked scrub is tried again; doubled each time up to RETRY_MAX_S
RETRY_MAX_S = 10.0

# run(tables, wait) -> the tables still to scrub (empty: done). `wait`: may block as long as the store's timeout.
ScrubRun = Callable[[set[str], bool], set[str]]


class Scrubber:
    """A debounced, retried background scrub of one store."""

    def __init__(self, run: ScrubRun, delay: float, name: str) -> None:
        self._run = run
        self.delay = max(0.0, float(delay))
        self.name = name
        self._lock = threading.Lock()  # guards the fields below
        self._running = threading.Lock()  # one scrub at a time
        self._tables: set[str] = set()
        self._due = False
        self._timer: threading.Timer | None = None
        self._retry = RETRY_S
        self._closed = False
        self.scrubbed_at: float | None = None  # time.monotonic() of the last scrub that left nothing pending
        self.runs = 0

    @property
    def pending(self) -> bool:
        """Whether a delete is waiting for its scrub."""
        with self._lock:
            return self._due

    def schedule(self, tables: Iterable[str] = ()) -> None:
        """A delete committed: scrub `tables` at most `delay` seconds from now (joining a scrub already armed)."""
        with self._lock:
            if self._closed:
                return
            self._tables.update(tables)
            self._due = True
            if self._timer is None:
                self._arm(self.delay)

    def _arm(self, delay: float) -> None:
        timer = threading.Timer(delay, self._fire)
        timer.daemon = True  # never keeps a process alive; close() runs what is pending
        timer.name = f"cuemem-scrub {self.name}"
        self._timer = timer
        timer.start()

    def _take(self) -> set[str] | None:
        with self._lock:
            self._timer = None
            if not self._due or self._closed:
                return None
            tables, self._tables, self._due = self._tables, set(), False
            return tables

    def _fire(self) -> None:
        """The timer's scrub: on failure or a partial scrub, what is left is tried again after a growing pause."""
        with self._running:
            tables = self._take()
            if tables is None:
                return
            left = self._attempt(tables, wait=False)
        if left is None:
            with self._lock:
                self._retry = RETRY_S
            return
        self._requeue(left, backoff=True)

    def _requeue(self, left: set[str], *, backoff: bool) -> None:
        """What a scrub left is pending again, tried after the current pause (growing it with `backoff`)."""
        with self._lock:
            self._tables.update(left)
            self._due = True
            if self._timer is None and not self._closed:
                self._arm(self._retry)
                if backoff:
                    self._retry = min(RETRY_MAX_S, self._retry * 2)

    def _attempt(self, tables: set[str], *, wait: bool) -> set[str] | None:
        """Run one scrub; None when nothing is left to scrub, else what is."""
        self.runs += 1
        try:
            left = self._run(tables, wait)
        except Exception as exc:  # a failed scrub must not kill the timer thread: retried
            log.warning("cuemem: the scrub after a delete in %s failed (will retry): %s", self.name, exc)
            return set(tables) or {""}
        if left:
            return left
        self.scrubbed_at = time.monotonic()
        return None

    def flush(self) -> bool:
        """Run a pending scrub now, waiting as long as the store's timeout allows; True if nothing is left."""
        with self._running:
            with self._lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if not self._due:
                    return True
                tables, self._tables, self._due = self._tables, set(), False
            left = self._attempt(tables, wait=True)
            if left is None:
                return True
            self._requeue(left, backoff=False)
            return False

    def done(self) -> None:
        """An explicit checkpoint scrubbed everything: nothing is pending any more."""
        with self._lock:
            self._tables.clear()
            self._due = False
            self.scrubbed_at = time.monotonic()

    def close(self) -> None:
        """Run what is pending (so a process that deletes and exits leaves nothing), then stop the timer."""
        done = self.flush()
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if not done:
            log.warning(
                "cuemem: %s closed with a scrub after a delete still blocked; deleted text may remain in its files"
                " until the next scrub or Memory.checkpoint()",
                self.name,
            )
