"""Embedders: the shipped MiniLM (default, offline), any OpenAI-compatible endpoint, and model-free hashing."""

from __future__ import annotations

from ..config import Settings
from ..errors import CuememError
from .base import Embedder
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder
from .openai import OpenAIEmbedder

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder", "OpenAIEmbedder", "make_embedder"]


def make_embedder(settings: Settings) -> Embedder:
    """Build the embedder named by `settings.embedder`: "minilm", "openai" or "hashing"."""
    kind = settings.embedder
    if kind == "minilm":
        return MiniLMEmbedder(batch_size=settings.embed_batch_size)
    if kind == "openai":
        return OpenAIEmbedder(
            settings.embed_model,
            settings.embed_base_url,
            settings.embed_api_key,
            timeout=settings.embed_timeout,
            batch_size=settings.embed_batch_size,
        )
    if kind == "hashing":
        return HashingEmbedder()
    raise CuememError(f"unknown embedder {kind!r}: choose minilm, openai or hashing")
