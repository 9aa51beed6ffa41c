"""The model layer: one client (cache, accounting, validation) over a local or OpenAI-compatible backend."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from ..config import Settings
from ..errors import CuememError
from ..store.caches import FileCallCache
from .base import Backend, ChatResult, Choice, LLMError, LLMOutputError, LLMUnavailableError, Usage
from .client import CallCache, LLMClient, Tally
from .llamacpp import LlamaCppBackend
from .local import LocalBackend
from .openai import OpenAIBackend

__all__ = [
    "Backend",
    "CallCache",
    "ChatResult",
    "Choice",
    "FileCallCache",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
    "LLMUnavailableError",
    "LlamaCppBackend",
    "LocalBackend",
    "OpenAIBackend",
    "Tally",
    "Usage",
    "make_client",
]


def default_cache_path() -> Path:
    """The file cache of unscoped model calls (`cuemem llm chat`, the benchmark judge)."""
    return Path(platformdirs.user_cache_dir("cuemem")) / "llm-calls.db"


def make_client(settings: Settings, *, file_cache: bool = True) -> LLMClient:
    """The client named by settings: `llm` = "local" (transformers) or "llamacpp" with `llm_model` a registry
    name (Qwen2.5-Coder-0.5B by default; SmolLM2-135M shipped) or a GGUF path, or "openai" (any compatible endpoint).
    `file_cache=False` gives a client without the `llm_cache` file: Memory binds each call to its namespace's
    cache in the store instead, so no prompt quoting a turn lands in a file that deletes cannot reach."""
    if settings.llm == "local":
        backend: Backend = LocalBackend(model=settings.llm_model)
    elif settings.llm == "llamacpp":
        backend = LlamaCppBackend(
            model=settings.llm_model, quant=settings.llm_quant, threads=settings.llm_threads or None
        )
    elif settings.llm == "openai":
        backend = OpenAIBackend(
            settings.llm_model or "gpt-4o-mini",
            settings.llm_base_url,
            settings.llm_api_key,
            timeout=settings.llm_timeout,
            retries=settings.llm_retries,
            concurrency=settings.llm_concurrency,
            choice_mode=settings.llm_choice_mode,
        )
    else:
        raise CuememError(f"unknown llm {settings.llm!r}: choose local, llamacpp or openai")
    if settings.llm_cache == "off" or not file_cache:
        return LLMClient(backend, None)
    cache = FileCallCache(settings.llm_cache or default_cache_path())
    return LLMClient(backend, cache)
