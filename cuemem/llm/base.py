"""The model-client protocol (docs/design.md promises 4, 5, 7): chat, json, choose, score, and typed failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import CuememError

Messages = list[dict[str, str]]


class LLMError(CuememError):
    """A model call failed; engines catch this to fall back to their model-free path."""


class LLMUnavailableError(LLMError):
    """The backend cannot be reached or loaded (endpoint down, timeout, model not installed)."""


class LLMOutputError(LLMError):
    """The model answered, but not with what was asked (invalid JSON, schema violation, not an option)."""


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


@dataclass
class ChatResult:
    text: str
    usage: Usage = field(default_factory=Usage)


@dataclass
class Choice:
    """An option chosen under constraint, with its log-probability under the model (None where unknown)."""

    option: str
    logprob: float | None = None


class Backend(Protocol):
    """What a model provider implements; `LLMClient` adds caching, accounting and validation on top."""

    name: str  # e.g. "local:SmolLM2-135M-Instruct" or "openai:gpt-4o-mini" (part of every cache key)

    def chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> ChatResult: ...

    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int) -> tuple[str, Usage]: ...

    def choose(self, messages: Messages, options: list[str], k: int, beam: int) -> tuple[list[Choice], Usage]: ...

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]: ...
