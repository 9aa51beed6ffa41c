"""Request limits and the per-key rate limit of `cuemem serve` (issue 17): bad or greedy input gets a clear 4xx."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Limits:
    """Bounds on what one request may ask; every one is a `cuemem serve` option."""

    max_body_bytes: int = 1 << 20  # a JSON request body
    max_import_bytes: int = 64 << 20  # a JSONL import body
    max_turns: int = 500  # messages in one POST /v1/memories
    max_k: int = 100
    max_budget_tokens: int = 32_000
    max_query_chars: int = 4_000
    rate: float = 20.0  # requests per second per key, sustained (0: no rate limit)
    burst: int = 40  # requests a key may make at once before the rate applies
    # Fair sharing (fairness.py): answers, chat and model-mode searches run in the model lane, other /v1 and MCP
    # requests in the memory lane; each lane runs `workers` at once, lets `queue` more wait, `per_key` of one key's.
    model_workers: int = 1
    model_queue: int = 4
    model_per_key: int = 2
    memory_workers: int = 8
    memory_queue: int = 32
    memory_per_key: int = 4


@dataclass
class RateLimiter:
    """A token bucket per key: `burst` requests at once, then `rate` a second; thread-safe."""

    rate: float
    burst: int
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str, now: float | None = None) -> float:
        """Spend one request of `key`'s bucket: 0.0 when allowed, else the seconds until one is free."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        """A Retry-After header value (whole seconds, at least 1)."""
        return str(max(1, math.ceil(wait)))
