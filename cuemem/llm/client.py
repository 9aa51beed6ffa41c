"""One client for every model call (DESIGN.md promise 4): validation, a SQLite cache, per-stage accounting.

Every call is keyed by backend, model, method, messages and parameters; a repeated call is answered from the
cache (so reruns are deterministic and free) and still counted. Counters are kept per stage (ingest, query,
judge ...): calls, cache hits, prompt and completion tokens, seconds.

Errors: backends raise `LLMUnavailableError` / `LLMOutputError` for their own failure modes; the client adds only
a safety net for OS-level failures (`OSError`, which covers `ConnectionError` and `TimeoutError`). Everything
else (a `TypeError`, `KeyError`, `ValueError` ... from our own code) propagates unchanged: a bug is not an outage.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .base import Backend, ChatResult, Choice, LLMError, LLMOutputError, LLMUnavailableError, Messages, Usage

M = TypeVar("M", bound=BaseModel)


@dataclass
class StageStats:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class CallCache:
    """SQLite table of answered calls; also the log of every distinct model call made."""

    def __init__(self, path: str | Path) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS calls(key TEXT PRIMARY KEY, backend TEXT, method TEXT, stage TEXT,"
                " request TEXT, response TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL,"
                " at REAL)"
            )

    def get(self, key: str) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT response FROM calls WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, backend: str, method: str, stage: str, request: Any, response: Any, usage: Usage,
            seconds: float) -> None:  # fmt: skip
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO calls VALUES(?,?,?,?,?,?,?,?,?,?)",
                (key, backend, method, stage, json.dumps(request, ensure_ascii=False),
                 json.dumps(response, ensure_ascii=False), usage.prompt_tokens, usage.completion_tokens,
                 seconds, time.time()),
            )  # fmt: skip

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def summary(self) -> list[dict[str, Any]]:
        """Calls made (not cache hits), grouped by backend, stage and method, with tokens and seconds."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT backend, stage, method, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(seconds)"
                " FROM calls GROUP BY backend, stage, method ORDER BY backend, stage, method"
            ).fetchall()
        keys = ("backend", "stage", "method", "calls", "prompt_tokens", "completion_tokens", "seconds")
        return [dict(zip(keys, row, strict=True)) for row in rows]


class LLMClient:
    """Wraps a backend: validates inputs and outputs, caches, retries structured output, counts per stage."""

    def __init__(self, backend: Backend, cache: CallCache | None = None, *, json_retries: int = 2) -> None:
        self.backend = backend
        self.cache = cache
        self.json_retries = json_retries
        self._stats: dict[str, StageStats] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ accounting
    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Count the calls made inside this block under `name` (ingest, query, judge ...)."""
        previous = getattr(self._local, "stage", "other")
        self._local.stage = name
        try:
            yield
        finally:
            self._local.stage = previous

    @property
    def current_stage(self) -> str:
        return getattr(self._local, "stage", "other")

    def stats(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {name: asdict(s) for name, s in self._stats.items()}

    def _count(self, usage: Usage, seconds: float, cached: bool) -> None:
        with self._lock:
            s = self._stats.setdefault(self.current_stage, StageStats())
            s.calls += 1
            s.cached += int(cached)
            if not cached:
                s.prompt_tokens += usage.prompt_tokens
                s.completion_tokens += usage.completion_tokens
                s.seconds += seconds

    def _call(self, method: str, request: dict[str, Any], run: Callable[[], tuple[Any, Usage]]) -> Any:
        """Answer from the cache, or run the backend and remember the result."""
        key = hashlib.sha256(
            json.dumps([self.backend.name, method, request], sort_keys=True, ensure_ascii=False).encode()
        ).hexdigest()
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self._count(Usage(), 0.0, cached=True)
                return hit
        start = time.perf_counter()
        try:
            response, usage = run()
        except LLMError:
            raise
        except OSError as exc:  # safety net (ConnectionError, TimeoutError ...): backends raise LLMErrors themselves
            raise LLMUnavailableError(f"{self.backend.name} failed: {type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - start
        self._count(usage, seconds, cached=False)
        if self.cache is not None:
            self.cache.put(key, self.backend.name, method, self.current_stage, request, response, usage, seconds)
        return response

    # ------------------------------------------------------------------ the four calls
    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        _check_messages(messages)

        def run() -> tuple[dict[str, Any], Usage]:
            result = self.backend.chat(messages, max_tokens=max_tokens, temperature=temperature)
            return {"text": result.text, "usage": result.usage.as_dict()}, result.usage

        out = self._call("chat", {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}, run)
        return ChatResult(out["text"], Usage(**out["usage"]))

    def choose(self, messages: Messages, options: list[str], *, k: int = 1, beam: int = 4) -> list[Choice]:
        """The k best options (each a member of `options`), best first, with log-probabilities."""
        _check_messages(messages)
        unique = list(dict.fromkeys(options))
        if not unique:
            raise ValueError("choose needs at least one option")
        if any(not isinstance(o, str) or not o for o in unique):
            raise ValueError("options must be non-empty strings")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        k = min(k, len(unique))

        allowed = set(unique)

        def run() -> tuple[list[list[Any]], Usage]:
            # Validated before it is cached: an invalid answer is asked again, never remembered.
            total, problem = Usage(), ""
            for _ in range(self.json_retries + 1):
                try:
                    chosen, usage = self.backend.choose(messages, unique, k, beam)
                except LLMOutputError as exc:
                    problem = str(exc)
                    continue
                total.prompt_tokens += usage.prompt_tokens
                total.completion_tokens += usage.completion_tokens
                picked = [c.option for c in chosen]
                stray = [o for o in picked if o not in allowed]
                if stray:
                    problem = f"chose {stray[0]!r}, which is not one of the options"
                elif len(picked) != k or len(set(picked)) != k:
                    problem = f"returned {len(set(picked))} distinct options where {k} were asked for"
                else:
                    return [[c.option, c.logprob] for c in chosen], total
            raise LLMOutputError(f"{self.backend.name} {problem} ({self.json_retries + 1} tries)")

        out = self._call("choose", {"messages": messages, "options": unique, "k": k, "beam": beam}, run)
        return [Choice(o, lp) for o, lp in out]

    def score(self, messages: Messages, continuations: list[str]) -> list[float]:
        _check_messages(messages)
        return self._call(
            "score",
            {"messages": messages, "continuations": continuations},
            lambda: self.backend.score(messages, continuations),
        )

    def json(self, messages: Messages, schema: type[M], *, max_tokens: int = 64) -> M:
        """An instance of the pydantic model `schema`: decoded under the schema where the backend can, then
        validated; a failure is retried (with the error shown to the model) up to `json_retries` times."""
        _check_messages(messages)
        json_schema = schema.model_json_schema()

        def run() -> tuple[str, Usage]:
            # The whole retry dialogue is one cached call: only a valid answer is ever remembered.
            attempt_messages, total = list(messages), Usage()
            for attempt in range(self.json_retries + 1):
                text, usage = self.backend.json(attempt_messages, json_schema, max_tokens=max_tokens)
                total.prompt_tokens += usage.prompt_tokens
                total.completion_tokens += usage.completion_tokens
                try:
                    schema.model_validate_json(text)
                    return text, total
                except ValidationError as exc:
                    if attempt == self.json_retries:
                        raise LLMOutputError(
                            f"{self.backend.name} gave no valid {schema.__name__} after {attempt + 1} tries: {exc}"
                        ) from exc
                    first = str(exc).splitlines()[0]
                    attempt_messages = [
                        *messages,
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": f"That was not valid: {first}. Reply with corrected JSON."},
                    ]
            raise AssertionError("unreachable")

        text = self._call("json", {"messages": messages, "schema": json_schema, "max_tokens": max_tokens}, run)
        return schema.model_validate_json(text)


def _check_messages(messages: Messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} objects")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"each message needs a string 'role' and 'content', got {m!r}")
