"""A disk-backed embedding cache shared across stores: each distinct text is embedded once per model.

The store's own cache is per namespace (deleting a namespace deletes its cached vectors). Benchmarks put every
conversation, and every engine, into a separate namespace or store, so the same text would be embedded again and
again; wrapping the embedder in `CachedEmbedder` makes the second engine and a rerun cost only lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..store.base import text_hash
from ..store.caches import EmbeddingFile
from .base import Embedder, embed_query
from .sentence import MatryoshkaEmbedder


class CachedEmbedder:
    """Wraps an embedder; vectors are kept in a SQLite file keyed by (model name, text hash)."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        self.inner = inner
        self.name = inner.name  # same vector space, same watermark key
        self.dim = inner.dim
        self.bm25_weight = float(getattr(inner, "bm25_weight", 1.0))  # the fusion weight measured for the model
        self.path = Path(path)
        self._file = EmbeddingFile(self.path)
        self.hits = 0
        self.misses = 0

    def _lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        return self._file.lookup(self.name, hashes)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        seen: set[str] = set()

        def cached(hashes: list[str]) -> dict[str, np.ndarray]:
            found = self._lookup(hashes)
            seen.update(found)
            return found

        hashes, vectors = embed_texts_cached(self.inner, texts, cached)
        fresh = {h: v for h, v in zip(hashes, vectors, strict=True) if h not in seen}
        self.hits += len(texts) - len(fresh)
        self.misses += len(fresh)
        if fresh:
            self._file.put(self.name, list(fresh.items()))
        return vectors

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, cached apart from documents (`name#query`): an asymmetric model embeds them differently."""
        key = f"{self.name}#query"
        found = self._file.lookup(key, [text_hash(t) for t in texts])
        hashes, vectors = embed_texts_cached(_QueryView(self.inner), texts, lambda hs: dict(found))
        fresh = [(h, v) for h, v in zip(hashes, vectors, strict=True) if h not in found]
        if fresh:
            self._file.put(key, fresh)
        return vectors

    def close(self) -> None:
        self._file.close()


class _QueryView:
    """An embedder whose `embed` is another's `embed_query` (so the cache helper serves both kinds)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return embed_query(self.inner, texts)


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


def cached_embedder(embedder: Embedder, path: str | Path) -> tuple[Embedder, CachedEmbedder]:
    """`embedder` with its vectors kept in the file at `path`, and the cache itself (for its hit counts). A Matryoshka
    cut caches the full vectors, so that every cut of the same model reads the same rows."""
    if isinstance(embedder, MatryoshkaEmbedder):
        shared = CachedEmbedder(embedder.inner, path)
        return MatryoshkaEmbedder(shared, embedder.dim), shared
    shared = CachedEmbedder(embedder, path)
    return shared, shared
