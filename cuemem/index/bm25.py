"""BM25 (Robertson & Zaragoza; Lucene's idf) over a namespace's items, built in memory and grown incrementally.

Chosen over SQLite FTS5 by measurement and for correctness (see BENCHMARKS.md, "Why these backends"): FTS5
computes idf over the whole table, so one user's history would change another's ranking; here every index
holds exactly one namespace's documents, read from the store with `WHERE ns = ?`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from ..store.vectors import top_k
from .text import analyze


class BM25Index:
    """An inverted index with per-term postings; `add` appends, `search` scores with numpy."""

    def __init__(self, k1: float = 1.5, b: float = 0.75, analyzer: Callable[[str], list[str]] = analyze) -> None:
        self.k1, self.b, self.analyzer = k1, b, analyzer
        self.keys: list[int] = []
        self._lengths: list[int] = []
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._frozen: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._norm: np.ndarray | None = None  # k1 * (1 - b + b * dl / avgdl), recomputed after adds
        self._total = 0
        self._posting_count = 0

    def __len__(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:
        """About how much memory the index holds (for the per-namespace cache's bound, `IndexCache`): ~90 bytes a
        term, ~56 a posting (a list slot, a boxed document number, a term frequency, a frozen copy), ~80 a doc."""
        return 90 * len(self._postings) + 56 * self._posting_count + 80 * len(self.keys)

    def add(self, key: int, text: str) -> None:
        doc = len(self.keys)
        counts = Counter(self.analyzer(text))
        self.keys.append(key)
        self._lengths.append(sum(counts.values()))
        self._total += self._lengths[-1]
        self._norm = None
        self._posting_count += len(counts)
        for term, tf in counts.items():
            docs, tfs = self._postings.setdefault(term, ([], []))
            docs.append(doc)
            tfs.append(tf)
            self._frozen.pop(term, None)

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        if term not in self._postings:
            return None
        if term not in self._frozen:
            docs, tfs = self._postings[term]
            self._frozen[term] = (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
        return self._frozen[term]

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top-k (key, score) with score > 0, best first; ties keep the earlier document first."""
        n = len(self.keys)
        terms = set(self.analyzer(query))
        if n == 0 or not terms or k <= 0:
            return []
        if self._norm is None:
            lengths = np.asarray(self._lengths, dtype=np.float32)
            self._norm = self.k1 * (1 - self.b + self.b * lengths / max(self._total / n, 1e-9))
        norm = self._norm
        scores = np.zeros(n, dtype=np.float32)
        for term in terms:
            posting = self._posting(term)
            if posting is None:
                continue
            docs, tfs = posting
            idf = np.log(1.0 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            scores[docs] += idf * tfs * (self.k1 + 1) / (tfs + norm[docs])
        return top_k(scores, k, self.keys)
