"""The cognitive schema (SCG-MEM, design 2, section 3.1): a namespace's concept keys, persisted in the store.

Each concept is an item of the engine's "concept" space (key = the concept key) carrying two labels, its key and
its lemma form, and a vector of the key (its embedding, for assimilation by similarity and for seeding). Each
turn's item carries one "concept" label per concept it was grounded in: the provenance of every concept, and the
incidence matrix the associative graph is computed from. A restart reads the same schema back; `reindex` rebuilds
it from the log.

For constrained decoding the keys become a token trie (`cuemem.llm.trie.TokenTrie`, built by the backend over
the options of each `choose` call), so a generated key outside the schema cannot be decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...store.vectors import top_k


@dataclass
class Schema:
    """The concept keys of a namespace with their lemma forms and vectors: what ingestion matches against."""

    keys: dict[str, int] = field(default_factory=dict)  # concept key -> position
    lemmas: dict[str, str] = field(default_factory=dict)  # lemma form -> concept key (the first with that form)
    _names: list[str] = field(default_factory=list)
    _matrix: np.ndarray | None = None  # unit vectors by row, grown by doubling (a search never copies them)
    _rows: list[int] = field(default_factory=list)  # row -> position of its concept

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: str, lemma: str, vector: np.ndarray | None) -> None:
        if key in self.keys:
            return
        position = len(self.keys)
        self.keys[key] = position
        self._names.append(key)
        self.lemmas.setdefault(lemma, key)
        self.lemmas.setdefault(key, key)
        if vector is not None:
            vec = np.asarray(vector, dtype=np.float32).reshape(-1)
            if self._matrix is None:
                self._matrix = np.zeros((64, vec.shape[0]), dtype=np.float32)
            if vec.shape[0] != self._matrix.shape[1]:
                raise ValueError(f"concept vector of dimension {vec.shape[0]}, schema of {self._matrix.shape[1]}")
            if len(self._rows) == len(self._matrix):
                self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
            self._matrix[len(self._rows)] = vec
            self._rows.append(position)

    def lookup(self, key: str, lemma: str) -> str | None:
        """The concept a candidate names by string: its key, or a concept with the same lemma form."""
        if key in self.keys:
            return key
        return self.lemmas.get(lemma) or self.lemmas.get(key)

    def nearest(self, vector: np.ndarray, k: int = 1) -> list[tuple[str, float]]:
        """The k concepts nearest a vector, with their cosine (vectors are unit length)."""
        if self._matrix is None or not self._rows or k <= 0:
            return []
        scores = self._matrix[: len(self._rows)] @ np.asarray(vector, dtype=np.float32).reshape(-1)
        return [
            (self._names[self._rows[i]], s)
            for i, s in top_k(scores, k, list(range(len(self._rows))), positive_only=False)
        ]


__all__ = ["Schema"]
