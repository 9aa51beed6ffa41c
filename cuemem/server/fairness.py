"""Fair sharing of one server between API keys (issue 33): bounded lanes of work, per key and in total.

A request that does memory work is admitted to a lane before the app sees it: `model` for what waits on the
language model (answers, chat, searches with a model-mode engine), `memory` for the rest of /v1 and /mcp. A lane
runs at most `workers` requests at once; at most `queue` more wait (in the event loop, holding no thread); one key
holds at most `per_key` of its places. Past those bounds the request is refused at once: 429 when the key is over
its share, 503 when the lane is full, both with `Retry-After`. Since the lanes' workers are fewer than the server's
thread pool, /healthz, /metrics and the key checks never wait behind memory work.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from .errors import ApiError

RETRY_AFTER = "1"  # seconds: a lane frees a place as soon as one of its requests ends


@dataclass
class Lane:
    """One kind of work: `workers` running at once, `queue` more waiting, `per_key` of one key's at most."""

    name: str
    workers: int
    queue: int
    per_key: int
    _held: Counter[str] = field(default_factory=Counter)  # running or waiting, by key
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def __post_init__(self) -> None:
        if self.workers < 1 or self.queue < 0 or self.per_key < 1:
            raise ValueError(f"lane {self.name}: workers and per_key must be >= 1 and queue >= 0")

    @property
    def size(self) -> int:
        """Requests in the lane now, running or waiting."""
        return sum(self._held.values())

    def enter(self, key: str) -> None:
        """Take a place for `key`, or refuse at once (429 over the key's share, 503 when the lane is full)."""
        with self._lock:
            if self._held[key] >= self.per_key:
                raise ApiError(
                    429,
                    "busy",
                    f"this key already has {self.per_key} {self.name} requests running or waiting; retry when one"
                    " has answered",
                    {"Retry-After": RETRY_AFTER},
                )
            if self.size >= self.workers + self.queue:
                raise ApiError(
                    503,
                    "busy",
                    f"the server's {self.name} lane is full ({self.workers} running, {self.queue} waiting); retry"
                    " shortly",
                    {"Retry-After": RETRY_AFTER},
                )
            self._held[key] += 1

    def leave(self, key: str) -> None:
        with self._lock:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]

    @asynccontextmanager
    async def admitted(self, key: str) -> AsyncIterator[None]:
        """Run the body as one of the lane's workers, after waiting (no thread held) for a free one."""
        self.enter(key)
        try:
            async with self._semaphore():
                yield
        finally:
            self.leave(key)

    def _semaphore(self) -> asyncio.Semaphore:
        """The workers' semaphore of the event loop serving the requests (one per loop: a test client makes its own)."""
        loop = asyncio.get_running_loop()
        if self._running is None or self._running[0] is not loop:
            self._running = (loop, asyncio.Semaphore(self.workers))
        return self._running[1]
