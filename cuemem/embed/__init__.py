"""Embedders by name: the shipped MiniLM (default, offline), a fetched EmbeddingGemma, any local
sentence-transformers folder, any OpenAI-compatible endpoint, and model-free hashing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import CuememError, EmbeddingError
from ..models import ModelError, acknowledge_license, fetched_path, get_spec
from .base import Embedder, embed_query
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder
from .onnx import OnnxEmbedder
from .onnx_select import onnx_embedder
from .openai import OpenAIEmbedder
from .sentence import MatryoshkaEmbedder, SentenceTransformerEmbedder, folder_embedder

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "MatryoshkaEmbedder",
    "MiniLMEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "embed_query",
    "make_embedder",
]

CHOICES = "minilm, embeddinggemma, openai, hashing, or the path of a sentence-transformers folder"


def make_embedder(settings: Settings) -> Embedder:
    """The embedder named by `settings.embedder`, cut to `settings.embed_dim` dimensions where that is set."""
    kind = settings.embedder.strip()
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
    if "/" in kind or "\\" in kind or kind.startswith(("~", ".")):
        return _cut(folder_embedder(kind, batch_size=settings.embed_batch_size), settings.embed_dim, ())
    try:
        spec = get_spec(kind)
    except ModelError:
        raise CuememError(f"unknown embedder {kind!r}: choose {CHOICES}") from None
    if spec.kind != "embedder":
        raise CuememError(f"{spec.name} is a language model, not an embedder: choose {CHOICES}")
    if spec.shipped:
        return _cut(MiniLMEmbedder(batch_size=settings.embed_batch_size), settings.embed_dim, ())

    def locate() -> Path:
        try:
            return fetched_path(spec.name)
        except ModelError as exc:
            raise EmbeddingError(str(exc)) from None

    common: dict[str, Any] = {
        "query_prompt": str(spec.options.get("query_prompt", "")),
        "document_prompt": str(spec.options.get("document_prompt", "")),
        "bm25_weight": float(spec.options.get("bm25_weight", 1.0)),  # type: ignore[arg-type]
        "on_load": lambda: acknowledge_license(spec),
    }
    dim = int(spec.options["dim"])  # type: ignore[call-overload]
    full: SentenceTransformerEmbedder | OnnxEmbedder | None = onnx_embedder(spec, locate, dim, common)
    if full is None:
        full = SentenceTransformerEmbedder(spec.name, locate, dim, batch_size=settings.embed_batch_size, **common)
    return _cut(full, settings.embed_dim, tuple(spec.options.get("dims", ())), spec.name)  # type: ignore[arg-type]


def _cut(
    embedder: SentenceTransformerEmbedder | OnnxEmbedder, dim: int, allowed: tuple[int, ...], model: str = ""
) -> Embedder:
    """The embedder itself at its full size (`embed_dim` 0 or equal to it), else a Matryoshka cut; errors name
    `model` (the registered name, whichever runtime runs it)."""
    model = model or embedder.name
    if not dim or dim == embedder.dim:
        return embedder
    if allowed and dim not in allowed:
        dims = "/".join(str(d) for d in allowed)
        raise CuememError(f"embed_dim {dim} is not one {model} was trained for ({dims})")
    if not allowed:
        raise CuememError(f"embed_dim is for Matryoshka models (embeddinggemma); {model} has {embedder.dim}")
    return MatryoshkaEmbedder(embedder, dim)
