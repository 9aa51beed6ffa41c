"""Optional backend: a GGUF run by llama.cpp (`pip install llama-cpp-python`, an extra): the shipped SmolLM2,
a fetched Qwen2.5-Coder (by registry name) or any GGUF path. The chat template is the GGUF's own.

Constrained calls use llama.cpp grammars: `choose` compiles the options into a GBNF alternation (so the output is
always one of them), `json` passes the JSON schema, which llama-cpp-python turns into a grammar. No log-
probabilities are reported for choices (None), and `score` is not offered: use the transformers backend for it.

Failures: LLMUnavailableError when llama-cpp-python or the GGUF file is missing, the model fails to load, or
llama.cpp fails while generating (llama-cpp-python raises ValueError for a prompt longer than the context window
and RuntimeError for a failed decode); LLMOutputError for a completion without the expected shape.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .base import ChatResult, Choice, LLMOutputError, LLMUnavailableError, Messages, Usage
from .local import model_label, resolve_local_model

_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _gbnf_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal (quotes, backslashes and control characters escaped)."""
    return '"' + "".join(_gbnf_char(ch) for ch in text) + '"'


def choice_grammar(options: list[str]) -> str:
    return "root ::= " + " | ".join(gbnf_literal(o) for o in options)


class LlamaCppBackend:
    def __init__(
        self, model_path: str | None = None, *, model: str = "", n_ctx: int = 4096, threads: int | None = None
    ) -> None:
        """`model`: a registry name or GGUF path (default: the default local model); `model_path` is the older
        spelling."""
        self._wanted = model_path or model
        self.name = f"llamacpp:{model_label(self._wanted)[0]}[greedy]"
        self._n_ctx = n_ctx
        self._threads = threads
        self._llm: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._llm is None:
                try:
                    from llama_cpp import Llama  # type: ignore[import-not-found]  # an optional extra
                except ImportError as exc:
                    raise LLMUnavailableError(
                        f"llama-cpp-python is not installed or cannot be imported ({exc}): it is an optional extra;"
                        " see the README for the build flags"
                    ) from exc
                path = resolve_local_model(self._wanted).gguf  # LLMUnavailableError with the install/fetch command
                try:
                    # Every core: llama-cpp-python's own default is half of them (1 of 2 here, ~2x slower).
                    threads = self._threads or os.cpu_count() or 1
                    self._llm = Llama(model_path=str(path), n_ctx=self._n_ctx, n_threads=threads, verbose=False, seed=0)
                except (OSError, ValueError, RuntimeError) as exc:  # a missing or corrupt file, a failed context
                    raise LLMUnavailableError(f"llama.cpp cannot load {path}: {type(exc).__name__}: {exc}") from exc
        return self._llm

    def _complete(self, messages: Messages, **kwargs: Any) -> tuple[str, Usage]:
        llm = self.load()
        with self._lock:
            try:
                # Greedy for real: llama-cpp-python otherwise applies top-k and a repeat penalty even at temperature 0.
                out = llm.create_chat_completion(
                    messages=messages, temperature=0.0, top_k=1, repeat_penalty=1.0, **kwargs
                )
            except (ValueError, RuntimeError) as exc:  # a prompt over the context window, a failed decode
                raise LLMUnavailableError(f"llama.cpp failed: {type(exc).__name__}: {exc}") from exc
        try:
            usage = out.get("usage") or {}
            text = out["choices"][0]["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError(f"content is a {type(text).__name__}")
            prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMOutputError(f"llama.cpp returned no chat completion: {type(exc).__name__}: {exc}") from exc
        return text, Usage(prompt, completion)

    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        text, usage = self._complete(messages, max_tokens=max_tokens)
        return ChatResult(text.strip(), usage)

    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int = 256) -> tuple[str, Usage]:
        return self._complete(
            messages, max_tokens=max_tokens, response_format={"type": "json_object", "schema": schema}
        )

    def choose(self, messages: Messages, options: list[str], k: int = 1, beam: int = 4) -> tuple[list[Choice], Usage]:
        """k grammar-constrained generations, each excluding the options already chosen."""
        self.load()  # LLMUnavailableError where llama-cpp-python is missing
        from llama_cpp import LlamaGrammar  # type: ignore[import-not-found]

        remaining = list(options)
        chosen: list[Choice] = []
        total = Usage()
        # Under a grammar an option may be spelled in smaller tokens than its usual tokenization: budget one
        # token per UTF-8 byte, the most it can take.
        longest = max(len(o.encode("utf-8")) for o in options) + 2
        while remaining and len(chosen) < k:
            grammar = LlamaGrammar.from_string(choice_grammar(remaining), verbose=False)
            text, usage = self._complete(messages, max_tokens=longest, grammar=grammar)
            total.prompt_tokens += usage.prompt_tokens
            total.completion_tokens += usage.completion_tokens
            chosen.append(Choice(text))
            if text not in remaining:
                break  # the client reports the stray answer
            remaining.remove(text)
        return chosen, total

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]:
        raise LLMUnavailableError("score is offered by the local (transformers) backend, not llama.cpp")
