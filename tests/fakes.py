"""Deterministic stand-ins for the model, shared by the adversarial suites and by their subprocess writers.

`FakeBackend` implements the Backend protocol of cuemem/llm/base.py without a model: every answer is a pure
function of the request (a stable hash, identical across processes and runs), and every messages list it is
sent is recorded, so a test can assert what a prompt did or did not contain. Import it as `from fakes import ...`
(tests/ is on sys.path under pytest; subprocesses put it on PYTHONPATH).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from typing import Any

from cuemem.llm import LLMClient
from cuemem.llm.base import ChatResult, Choice, Messages, Usage


def stable_hash(*parts: Any) -> str:
    """A hash of JSON-able parts that is the same in every process (unlike hash())."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _tokens(messages: Messages) -> int:
    return sum(len(m.get("content", "")) for m in messages) // 4 + 1


def schema_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """The simplest value valid under a (pydantic-style) JSON schema: first enum member, required fields filled,
    minimum lengths and bounds respected; `$ref`s resolve against `root`'s `$defs`."""
    root = root or schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return schema_instance(root.get("$defs", root.get("definitions", {}))[name], root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return schema_instance(options[0], root)
    if "allOf" in schema:
        return schema_instance(schema["allOf"][0], root)
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: schema_instance(properties[name], root) for name in schema.get("required", properties)}
    if kind == "array":
        item = schema.get("items", {"type": "string"})
        count = schema.get("minItems", 0)
        if schema.get("uniqueItems") and item.get("enum"):
            return item["enum"][:count]
        return [schema_instance(item, root) for _ in range(count)]
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return False
    return None


class FakeBackend:
    """A deterministic model. chat: a short answer derived from the prompt's hash (it never echoes the prompt);
    choose: the options ranked by a stable hash of (messages, option); score: a stable pseudo log-probability per
    continuation; json: the simplest instance of the schema. Every request's messages are kept in `sent`."""

    name = "fake:deterministic"

    def __init__(self) -> None:
        self.sent: list[Messages] = []
        self._lock = threading.Lock()

    def _record(self, messages: Messages) -> None:
        with self._lock:
            self.sent.append(copy.deepcopy(messages))

    def prompts(self) -> str:
        """Everything the backend was ever sent, as one string (for `secret in backend.prompts()`)."""
        with self._lock:
            return "\n".join(m.get("content", "") for messages in self.sent for m in messages)

    def clear(self) -> None:
        with self._lock:
            self.sent.clear()

    def chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> ChatResult:
        self._record(messages)
        return ChatResult(f"answer {stable_hash(messages)[:8]}", Usage(_tokens(messages), 2))

    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int) -> tuple[str, Usage]:
        self._record(messages)
        return json.dumps(schema_instance(schema)), Usage(_tokens(messages), 8)

    def choose(self, messages: Messages, options: list[str], k: int, beam: int) -> tuple[list[Choice], Usage]:
        self._record(messages)
        ranked = sorted(options, key=lambda option: stable_hash(messages, option))
        return [Choice(option, -0.5 * rank) for rank, option in enumerate(ranked[:k])], Usage(_tokens(messages), 1)

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]:
        self._record(messages)
        scores = [-int(stable_hash(messages, c)[:8], 16) / 2**28 for c in continuations]
        return scores, Usage(_tokens(messages), 0)


def fake_llm() -> LLMClient:
    """A model client over a fresh FakeBackend (reach the backend as `client.backend`)."""
    return LLMClient(FakeBackend())
