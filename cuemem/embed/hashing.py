"""A model-free embedder: signed feature hashing of words and word bigrams (Weinberger et al., 2009).

Useful where no model may load (quick tests, constrained machines); far weaker than MiniLM semantically.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from ..index.text import analyze
from .base import normalize


class HashingEmbedder:
    name = "hashing-512"
    cheap = True  # embedding costs less than the reads that batching it across namespaces would add

    def __init__(self, dim: int = 512) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _features(self, text: str) -> list[str]:
        words = analyze(text)
        return words + [f"{a}_{b}" for a, b in pairwise(words)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dim] += 1.0 if (value >> 63) & 1 else -1.0
        return normalize(out)
