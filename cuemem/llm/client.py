"""One client for every model call (docs/design.md promise 4): validation, a call cache, per-stage accounting.

Every call is keyed by backend, model, method, messages and parameters (and, where one is given, a secret salt);
a repeated call is answered from the cache (so reruns are deterministic and free) and still counted. Counters are
kept per stage (ingest, query, judge ...): calls, cache hits, prompt and completion tokens, seconds.

The cache is anything with the `CallCache` methods: `FileCallCache` (one SQLite file, for calls made on no one's
behalf: `cuemem llm chat`, the benchmark judge), or a store's per-namespace cache, used through a bound view of
the client (`LLMClient.bound`) so that forgetting a namespace's turns can reach the calls made for them.

Errors: backends raise `LLMUnavailableError` / `LLMOutputError` for their own failure modes; the client adds only
a safety net for OS-level failures (`OSError`, which covers `ConnectionError` and `TimeoutError`). Everything
else (a `TypeError`, `KeyError`, `ValueError` ... from our own code) propagates unchanged: a bug is not an outage.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from .base import Backend, ChatResult, Choice, LLMError, LLMOutputError, LLMUnavailableError, Messages, Usage

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


@dataclass
class StageStats:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class Tally:
    """Tokens a piece of work sends to models, counted by one tokenizer over every call's text (cached calls
    included), so a question's cost is the same on every backend and on a rerun (E-mem's tokens per query)."""

    counter: Callable[[str], int]
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, method: str, request: dict[str, Any], response: Any) -> None:
        prompt = "\n".join(m.get("content", "") for m in request.get("messages", []))
        if method == "chat":
            completion = str(response.get("text", "")) if isinstance(response, dict) else ""
        elif method == "choose":
            completion = " ".join(str(o) for o, _ in response)
        elif method == "json":
            completion = str(response)
        else:  # score: continuations are read, not generated
            prompt += "\n" + "\n".join(request.get("continuations", []))
            completion = ""
        p, c = self.counter(prompt), self.counter(completion) if completion else 0
        with self._lock:
            self.calls += 1
            self.prompt_tokens += p
            self.completion_tokens += c

    def as_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


@runtime_checkable
class CallCache(Protocol):
    """Where a client remembers answered calls; `request` and `response` are JSON-able objects."""

    def get(self, key: str) -> Any | None:
        """The response stored under `key`, or None."""
        ...

    def put(
        self, key: str, backend: str, method: str, stage: str, request: Any, response: Any, usage: Usage, seconds: float
    ) -> None:
        """Remember a call the backend answered (replacing any earlier answer under `key`)."""
        ...

    def summary(self) -> list[dict[str, Any]]:
        """Calls made, grouped by backend, stage and method: rows with the keys backend, stage, method, calls,
        prompt_tokens, completion_tokens, seconds."""
        ...

    def count(self) -> int:
        """How many calls are remembered."""
        ...


class LLMClient:
    """Wraps a backend: validates inputs and outputs, caches, retries structured output, counts per stage.

    `salt`, where given, keys the cache with HMAC-SHA256 instead of a plain SHA-256 of the request, so a key
    cannot be recomputed from guessed text without it (an empty salt keeps the plain hash of earlier versions)."""

    def __init__(
        self, backend: Backend, cache: CallCache | None = None, *, json_retries: int = 2, salt: bytes = b""
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.json_retries = json_retries
        self.salt = bytes(salt)
        self._stats: dict[str, StageStats] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    def bound(self, cache: CallCache | None, *, salt: bytes | None = None) -> LLMClient:
        """A view of this client whose calls are cached in `cache` (None: not cached) and keyed with `salt`
        (None: this client's salt). It shares the backend, the per-stage counters, the current stage (per
        thread) and the lock, so `client.bound(c).stage("query")` and `client.stats()` see the same numbers."""
        view = copy.copy(self)  # shallow: the backend, _stats, _local and _lock are the same objects
        view.cache = cache
        if salt is not None:
            view.salt = bytes(salt)
        return view

    def cache_key(self, method: str, request: dict[str, Any]) -> str:
        """The key under which the call `method(request)` is cached by this client (or view)."""
        payload = json.dumps([self.backend.name, method, request], sort_keys=True, ensure_ascii=False).encode()
        if self.salt:
            return hmac.new(self.salt, payload, hashlib.sha256).hexdigest()
        return hashlib.sha256(payload).hexdigest()

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

    @contextmanager
    def tally(self, tally: Tally) -> Iterator[Tally]:
        """Add every call made inside this block (on this thread) to `tally`; threads a piece of work spawns
        enter the same tally themselves (`episodic`'s assistants do)."""
        previous = getattr(self._local, "tally", None)
        self._local.tally = tally
        try:
            yield tally
        finally:
            self._local.tally = previous

    @property
    def current_tally(self) -> Tally | None:
        return getattr(self._local, "tally", None)

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

    def _tally(self, method: str, request: dict[str, Any], response: Any) -> None:
        tally = getattr(self._local, "tally", None)
        if tally is not None:
            tally.add(method, request, response)

    def _call(self, method: str, request: dict[str, Any], run: Callable[[], tuple[Any, Usage]]) -> Any:
        """Answer from the cache, or run the backend and remember the result."""
        cache = self.cache
        key = self.cache_key(method, request) if cache is not None else ""
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                self._count(Usage(), 0.0, cached=True)
                self._tally(method, request, hit)
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
        self._tally(method, request, response)
        if cache is not None:
            cache.put(key, self.backend.name, method, self.current_stage, request, response, usage, seconds)
        return response

    # ------------------------------------------------------------------ the four calls
    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        _check_messages(messages)

        def run() -> tuple[dict[str, Any], Usage]:
            result = self.backend.chat(messages, max_tokens=max_tokens, temperature=temperature)
            return {"text": result.text, "usage": result.usage.as_dict()}, result.usage

        out = self._call("chat", {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}, run)
        return ChatResult(out["text"], Usage(**out["usage"]))

    def stream(self, messages: Messages, *, max_tokens: int = 128) -> Iterator[str]:
        """`chat`, greedy, as pieces of text while the backend decodes them (backends with a `stream` method;
        the others give the whole reply as one piece). The same call as `chat` for the cache and the counters:
        a reply streamed to its end is remembered, and a remembered one comes back as one piece; a stream the
        caller stops early (a reader that needs only the first line) is counted but not remembered."""
        _check_messages(messages)
        request = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        streaming = getattr(self.backend, "stream", None)
        remembered = self.cache is not None and self.cache.get(self.cache_key("chat", request)) is not None
        if remembered or streaming is None:
            yield self.chat(messages, max_tokens=max_tokens).text
            return
        pieces: list[str] = []
        start = time.perf_counter()
        complete = False
        try:
            for piece in streaming(messages, max_tokens=max_tokens):
                pieces.append(piece)
                yield piece
            complete = True
        except OSError as exc:  # the safety net of `_call`
            raise LLMUnavailableError(f"{self.backend.name} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            usage = Usage(0, len(pieces))
            response = {"text": "".join(pieces).strip(), "usage": usage.as_dict()}
            if complete:
                self._call("chat", request, lambda: (response, usage))  # counted and remembered
            else:  # logged like any call, under a key of its own: `chat` must never get a cut reply back
                self._count(usage, 0.0, cached=False)
                self._tally("chat", request, response)
                if self.cache is not None:
                    cut = self.cache_key("chat", {**request, "stopped_after": len(pieces)})
                    seconds = time.perf_counter() - start
                    self.cache.put(
                        cut, self.backend.name, "chat", self.current_stage, request, response, usage, seconds
                    )
            with self._lock:
                self._stats.setdefault(self.current_stage, StageStats()).seconds += time.perf_counter() - start

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
