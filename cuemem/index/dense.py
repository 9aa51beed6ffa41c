"""Dense search: cosine similarity over a namespace's unit-normalised vectors, a cached numpy matrix.

Chosen over sqlite-vec by measurement (BENCHMARKS.md, "Why these backends"). Vectors are durable in the
store; this matrix is a cache grown by appending rows and rebuilt when the namespace's epoch changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..embed.base import Embedder
from ..store.sqlite import text_hash
from .bm25 import top_k


class DenseIndex:
    """Rows of float32 unit vectors keyed by item id; appends are buffered and stacked on the next search."""

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self.keys: list[int] = []
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._pending: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: int, vector: np.ndarray) -> None:
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self.dim is None:
            self.dim = vec.shape[0]
            self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        if vec.shape[0] != self.dim:
            raise ValueError(f"vector of dimension {vec.shape[0]} added to an index of dimension {self.dim}")
        self.keys.append(key)
        self._pending.append(vec)

    def matrix(self) -> np.ndarray:
        if self._pending:
            self._matrix = np.vstack([self._matrix, np.stack(self._pending)])
            self._pending = []
        return self._matrix

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k (key, cosine similarity), best first."""
        matrix = self.matrix()
        if len(self.keys) == 0 or k <= 0:
            return []
        scores = matrix @ np.asarray(query_vector, dtype=np.float32).reshape(-1)
        return top_k(scores, k, self.keys, positive_only=False)


def embed_texts_cached(
    embedder: Embedder,
    texts: Sequence[str],
    cached: Callable[[list[str]], dict[str, np.ndarray]],
    *,
    chunk_size: int = 512,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[str], np.ndarray]:
    """Embed texts, taking what the cache (by text hash) already holds; returns (hashes, vectors).

    Texts go to the embedder `chunk_size` at a time and it batches them itself: sentence-transformers sorts a
    call's texts by length before padding, which measured 1.7x faster than calls of 32 (BENCHMARKS.md).
    """
    hashes = [text_hash(t) for t in texts]
    known = cached(hashes)
    first: dict[str, int] = {}
    for i, h in enumerate(hashes):
        if h not in known:
            first.setdefault(h, i)
    todo = list(first.values())
    for start in range(0, len(todo), chunk_size):
        chunk = todo[start : start + chunk_size]
        vectors = embedder.embed([texts[i] for i in chunk])
        for i, vec in zip(chunk, vectors, strict=True):
            known[hashes[i]] = vec
        if progress:
            progress(len(chunk))
    if not texts:
        return [], np.zeros((0, embedder.dim), dtype=np.float32)
    return hashes, np.stack([known[h] for h in hashes]).astype(np.float32)
