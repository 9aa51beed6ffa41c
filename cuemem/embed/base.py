"""The embedder protocol: texts in, unit-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """`name` tags stored vectors (so a model change never mixes spaces); `dim` is the vector size."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class Prompted:
    """An embedder whose documents and queries get their own prompts (EmbeddingGemma's asymmetric use): `embed` and
    `embed_query` are `_encode` with the matching prompt."""

    document_prompt: str = ""
    query_prompt: str = ""

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Document vectors (the model's document prompt, if any)."""
        return self._encode(texts, self.document_prompt)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (the model's query prompt, if any)."""
        return self._encode(texts, self.query_prompt)


def normalize(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def embed_query(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Query vectors: the embedder's `embed_query` where it has one (asymmetric models such as EmbeddingGemma
    prompt queries and documents differently), else its ordinary `embed`."""
    method = getattr(embedder, "embed_query", None)
    return method(texts) if callable(method) else embedder.embed(texts)
