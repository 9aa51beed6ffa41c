"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server) as a cuemem backend.

Structured output uses a JSON-schema response format; `choose` uses vLLM's guided choice where asked, otherwise
an enum schema, and every answer is checked against the option set. Transient failures (connection errors,
timeouts, 408/429/5xx) are retried with exponential backoff; at most `concurrency` requests are in flight.

Failures: LLMUnavailableError when the endpoint cannot be used (connection error, timeout, HTTP error status after
the retries, an unusable URL); LLMOutputError when it answers with something that is not what was asked (a body
that is not a chat completion, a choice that is not JSON or not a list of strings).
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

from .base import ChatResult, Choice, LLMOutputError, LLMUnavailableError, Messages, Usage

if TYPE_CHECKING:
    import httpx

CHOICE_MODES = ("enum", "guided")


class OpenAIBackend:
    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        concurrency: int = 4,
        choice_mode: str = "enum",
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if choice_mode not in CHOICE_MODES:
            raise ValueError(f"choice_mode must be one of {CHOICE_MODES}, got {choice_mode!r}")
        self.model = model
        self.name = f"openai:{model}@{base_url.rstrip('/')}[choice={choice_mode}]"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.retries = retries
        self.backoff = backoff
        self.choice_mode = choice_mode
        self.concurrency = concurrency  # callers may run this many calls at once (episodic assistants do)
        self._slots = threading.BoundedSemaphore(concurrency)
        import httpx  # here, not at import: a process that calls no endpoint never loads it (~0.1 s)

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def _post(self, body: dict[str, Any]) -> tuple[str, Usage]:
        """One completion: its text and usage. Raises LLMUnavailableError when the endpoint cannot be used (down,
        timed out, refused, a bad URL) and LLMOutputError when it answers with a body that is not a completion."""
        import httpx

        last = ""
        for attempt in range(self.retries + 1):
            try:
                with self._slots:
                    response = self._client.post(self.url, json={"model": self.model, **body})
            except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:  # no retry can fix the setting
                raise LLMUnavailableError(f"{self.url} is not a usable URL: {type(exc).__name__}: {exc}") from exc
            except httpx.TimeoutException as exc:
                last = f"timed out ({exc})"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._parse(response)
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code not in (408, 429) and response.status_code < 500:
                    raise LLMUnavailableError(f"{self.url} refused the request: {last}")
            if attempt < self.retries:
                time.sleep(min(self.backoff * 2**attempt, 8.0))
        raise LLMUnavailableError(f"{self.url} failed after {self.retries + 1} tries: {last}")

    def _parse(self, response: httpx.Response) -> tuple[str, Usage]:
        """Text and usage of a chat-completion body; anything else is the server's fault (LLMOutputError)."""
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError(f"content is a {type(text).__name__}")
            usage = data.get("usage") or {}
            prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:  # a foreign body, not our bug
            raise LLMOutputError(
                f"{self.url} answered with an unexpected body ({type(exc).__name__}: {exc}): {response.text[:200]!r}"
            ) from exc
        return text, Usage(prompt, completion)

    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        text, usage = self._post({"messages": messages, "max_tokens": max_tokens, "temperature": temperature})
        return ChatResult(text.strip(), usage)

    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int = 256) -> tuple[str, Usage]:
        return self._post(
            {
                "messages": messages,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "response_format": {
                    "type": "json_schema",
                    # Not "strict": OpenAI's strict mode rejects ordinary pydantic schemas (optional fields,
                    # no additionalProperties); servers that enforce schemas (vLLM, llama.cpp) still do.
                    "json_schema": {"name": schema.get("title", "answer"), "schema": schema, "strict": False},
                },
            }
        )

    def choose(self, messages: Messages, options: list[str], k: int = 1, beam: int = 4) -> tuple[list[Choice], Usage]:
        """k = 1: guided choice or an enum schema; k > 1: an array of k distinct enum items, best first.
        Log-probabilities are not reported by these APIs, so they are None."""
        if k == 1 and self.choice_mode == "guided":
            text, usage = self._post(
                {"messages": messages, "temperature": 0.0, "max_tokens": 256, "guided_choice": options}
            )
            return [Choice(text.strip())], usage
        item = {"type": "string", "enum": options}
        choice = item if k == 1 else {"type": "array", "items": item, "minItems": k, "maxItems": k, "uniqueItems": True}
        schema = {
            "title": "choice",
            "type": "object",
            "properties": {"choice": choice},
            "required": ["choice"],
            "additionalProperties": False,
        }
        text, usage = self.json(messages, schema)
        try:
            picked = json.loads(text)["choice"]
        except (ValueError, KeyError, TypeError) as exc:
            raise LLMOutputError(f"{self.url} did not return a choice: {text[:200]!r}") from exc
        picked = [picked] if isinstance(picked, str) else picked
        if not isinstance(picked, list) or not all(isinstance(p, str) for p in picked):
            raise LLMOutputError(f"{self.url} returned a malformed choice: {text[:200]!r}")
        return [Choice(p) for p in dict.fromkeys(picked)][:k], usage

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]:
        raise LLMUnavailableError("score needs token log-probabilities of given text: use the local backend")
