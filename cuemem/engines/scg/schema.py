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

from ...store.vectors import DenseIndex


@dataclass
class Schema:
    """The concept keys of a namespace with their lemma forms and vectors: what ingestion matches against."""

    keys: dict[str, int] = field(default_factory=dict)  # concept key -> position
    lemmas: dict[str, str] = field(default_factory=dict)  # lemma form -> concept key (the first with that form)
    vectors: DenseIndex = field(default_factory=DenseIndex)  # keyed by position

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def names(self) -> list[str]:
        return list(self.keys)

    def add(self, key: str, lemma: str, vector: np.ndarray | None) -> None:
        if key in self.keys:
            return
        position = len(self.keys)
        self.keys[key] = position
        self.lemmas.setdefault(lemma, key)
        self.lemmas.setdefault(key, key)
        if vector is not None:
            self.vectors.add(position, vector)

    def lookup(self, key: str, lemma: str) -> str | None:
        """The concept a candidate names by string: its key, or a concept with the same lemma form."""
        if key in self.keys:
            return key
        return self.lemmas.get(lemma) or self.lemmas.get(key)

    def nearest(self, vector: np.ndarray, k: int = 1) -> list[tuple[str, float]]:
        """The k concepts nearest a vector, with their cosine."""
        if len(self.vectors) == 0:
            return []
        names = self.names()
        return [(names[p], s) for p, s in self.vectors.search(vector, k)]


__all__ = ["Schema"]
