"""BM25 (Robertson & Zaragoza; Lucene's idf) over a namespace's items, built in memory and grown incrementally.

Chosen over SQLite FTS5 by measurement and for correctness (see BENCHMARKS.md, "Why these backends"): FTS5
computes idf over the whole table, so one user's history would change another's ranking; here every index
holds exactly one namespace's documents, read from the store with `WHERE ns = ?`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain

import numpy as np

from ..store.vectors import top_k
from .text import analyze

COMPACT_AT = 50_000  # postings in the lists that trigger a compaction (and at least half as many as compacted)
EXTEND_CHUNK = 16_384  # documents `extend` counts and merges at a time


class BM25Index:
    """An inverted index with per-term postings; `add` appends, `search` scores with numpy.

    New postings go to per-term Python lists; once they are many (COMPACT_AT, and half the compacted ones) they
    are merged into one compact block (CSR: every term's documents and term frequencies in two flat arrays, term by
    term, 8 bytes a posting instead of ~20 in lists), so a large namespace costs less to hold (issue 36, item 1) and
    a first search of a common term needs no copy; each merge is a few vectorised passes, O(postings) in all.
    Compacted or not, the scores are the same."""

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        analyzer: Callable[[str], list[str]] = analyze,
        compact_at: int = COMPACT_AT,
    ) -> None:
        self.k1, self.b, self.analyzer, self.compact_at = k1, b, analyzer, compact_at
        self.keys: list[int] = []
        self._lengths: list[int] = []
        self._vocab: dict[str, int] = {}  # term -> its id, in order of first appearance
        self._postings: dict[str, tuple[list[int], list[int]]] = {}  # added since the last compaction
        self._frozen: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # a listed term's whole posting, as searched
        self._offsets = np.zeros(1, dtype=np.int64)  # the block: term id t's postings are [offsets[t], offsets[t+1])
        self._block_docs = np.zeros(0, dtype=np.int32)
        self._block_tfs = np.zeros(0, dtype=np.float32)
        self._norm: np.ndarray | None = None  # k1 * (1 - b + b * dl / avgdl), recomputed after adds
        self._total = 0
        self._posting_count = 0  # postings in the lists

    def __len__(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:
        """About how much memory the index holds (for the per-namespace cache's bound, `IndexCache`), as measured
        by RSS: ~120 bytes a term and ~150 more while it has listed postings (its two lists), ~20 a listed posting
        (two list slots; a document's number is one shared object), the arrays of the block and of the searched
        terms' frozen postings, ~60 a document."""
        arrays = self._block_docs.nbytes + self._block_tfs.nbytes + self._offsets.nbytes
        arrays += sum(d.nbytes + t.nbytes for d, t in self._frozen.values())
        return 120 * len(self._vocab) + 150 * len(self._postings) + 20 * self._posting_count + arrays + 60 * len(self)

    def add(self, key: int, text: str) -> None:
        doc = len(self.keys)
        counts = Counter(self.analyzer(text))
        self.keys.append(key)
        self._lengths.append(sum(counts.values()))
        self._total += self._lengths[-1]
        self._norm = None
        self._posting_count += len(counts)
        for term, tf in counts.items():
            self._vocab.setdefault(term, len(self._vocab))
            docs, tfs = self._postings.setdefault(term, ([], []))
            docs.append(doc)
            tfs.append(tf)
            self._frozen.pop(term, None)
        if self._posting_count >= max(self.compact_at, len(self._block_docs) // 2):
            self.compact()

    def extend(self, documents: Iterable[tuple[int, str]]) -> None:
        """Add many (key, text) documents at once: the index `add` would build one by one (same scores, test),
        with the postings counted and merged by numpy instead of a Counter and two list appends per term (a
        102k-turn namespace's first search: 1.8 s of `add`)."""
        documents = list(documents)
        if len(documents) < 64:
            for key, text in documents:
                self.add(key, text)
            return
        for start in range(0, len(documents), EXTEND_CHUNK):  # bounded transient memory: a chunk's tokens at a time
            self._extend(documents[start : start + EXTEND_CHUNK])

    def _extend(self, documents: list[tuple[int, str]]) -> None:
        vocab, first = self._vocab, len(self.keys)
        terms = array("q")  # 8 bytes a token, not a list's pointer and int object
        lengths: list[int] = []
        for key, text in documents:
            tokens = self.analyzer(text)
            self.keys.append(key)
            lengths.append(len(tokens))
            terms.extend([vocab.setdefault(token, len(vocab)) for token in tokens])
        self._lengths.extend(lengths)
        self._total += sum(lengths)
        self._norm = None
        if not terms:
            return
        self.compact()  # what is listed joins the block first: the new postings are newer than all of it
        docs = np.repeat(np.arange(first, len(self.keys), dtype=np.int64), lengths)
        pairs, tfs = np.unique(np.frombuffer(terms, dtype=np.int64) * len(self.keys) + docs, return_counts=True)
        term_of, doc_of = np.divmod(pairs, len(self.keys))  # sorted by term, then document
        ids, per_term = np.unique(term_of, return_counts=True)
        self._merge(ids, per_term, doc_of.astype(np.int32), tfs.astype(np.float32))

    def compact(self) -> None:
        """Merge the listed postings into the block: each term's block run moves to its new start, its listed
        documents (all newer) follow it."""
        if not self._postings:
            return
        listed = list(self._postings.values())
        ids = np.fromiter((self._vocab[t] for t in self._postings), dtype=np.int64, count=len(listed))
        lengths = np.fromiter((len(d) for d, _ in listed), dtype=np.int64, count=len(listed))
        total = int(lengths.sum())
        docs = np.fromiter(chain.from_iterable(d for d, _ in listed), dtype=np.int32, count=total)
        tfs = np.fromiter(chain.from_iterable(t for _, t in listed), dtype=np.float32, count=total)
        self._merge(ids, lengths, docs, tfs)

    def _merge(self, ids: np.ndarray, lengths: np.ndarray, new_docs: np.ndarray, new_tfs: np.ndarray) -> None:
        """Into the block: `lengths[j]` new postings of term `ids[j]` (documents newer than the term's block run),
        run after run in `new_docs` / `new_tfs`."""
        old = self._offsets
        old_counts = np.zeros(len(self._vocab), dtype=np.int64)
        old_counts[: len(old) - 1] = np.diff(old)
        counts = old_counts.copy()
        counts[ids] += lengths
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        docs = np.empty(int(offsets[-1]), dtype=np.int32)
        tfs = np.empty(int(offsets[-1]), dtype=np.float32)
        if len(self._block_docs):  # block runs, shifted to their new starts
            at = np.arange(len(self._block_docs)) + np.repeat(offsets[: len(old) - 1] - old[:-1], np.diff(old))
            docs[at], tfs[at] = self._block_docs, self._block_tfs
        total = int(lengths.sum())
        firsts = np.cumsum(lengths) - lengths  # where each term's new run begins among the new postings
        at = np.repeat(offsets[ids] + old_counts[ids] - firsts, lengths) + np.arange(total)
        docs[at], tfs[at] = new_docs, new_tfs
        self._offsets, self._block_docs, self._block_tfs = offsets, docs, tfs
        self._postings, self._frozen, self._posting_count = {}, {}, 0

    def _block_run(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        tid = self._vocab.get(term)
        if tid is None or tid + 1 >= len(self._offsets) or self._offsets[tid] == self._offsets[tid + 1]:
            return None
        start, end = int(self._offsets[tid]), int(self._offsets[tid + 1])
        return self._block_docs[start:end], self._block_tfs[start:end]

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        listed = self._postings.get(term)
        if listed is None:
            return self._block_run(term)
        if term not in self._frozen:
            docs = np.asarray(listed[0], dtype=np.int64)
            tfs = np.asarray(listed[1], dtype=np.float32)
            run = self._block_run(term)
            if run is not None:
                docs, tfs = np.concatenate([run[0], docs]), np.concatenate([run[1], tfs])
            self._frozen[term] = (docs, tfs)
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
