"""Label vocabularies that grow online and merge synonyms (STITCH, design 1: event and entity-type vocabularies).

A step's label is always a member of its vocabulary: new proposals either map onto a known label (directly or
through an alias left by an earlier merge) or become a new label. Every `k_update` steps the labels added since
the last merge are compared with the rest by embedding similarity; a synonym folds into the older, more frequent
label and the caller relabels stored steps with the returned mapping, so no stored label falls outside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Vocabulary:
    kind: str
    counts: dict[str, int] = field(default_factory=dict)  # label -> steps labelled with it (insertion = age)
    aliases: dict[str, str] = field(default_factory=dict)  # merged-away label or proposal -> surviving label
    fresh: list[str] = field(default_factory=list)  # labels added since the last merge

    def __contains__(self, label: object) -> bool:
        return label in self.counts

    def __len__(self) -> int:
        return len(self.counts)

    def labels(self) -> list[str]:
        return list(self.counts)

    def canonical(self, proposal: str) -> str | None:
        """The vocabulary label a proposal stands for, or None when it is unknown."""
        label = proposal.strip()
        seen = 0
        while label in self.aliases and seen < 100:
            label, seen = self.aliases[label], seen + 1
        return label if label in self.counts else None

    def add(self, proposal: str) -> str:
        """Label a step with `proposal`: the known label it stands for, or a new label."""
        label = self.canonical(proposal)
        if label is None:
            label = proposal.strip()
            if not label:
                raise ValueError(f"empty {self.kind} label")
            self.counts[label] = 0
            self.fresh.append(label)
        self.counts[label] += 1
        return label

    def add_all(self, proposals: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(self.add(p) for p in proposals if p.strip()))

    def shortlist(self, vector: np.ndarray, label_vectors: dict[str, np.ndarray], k: int) -> list[str]:
        """The k labels nearest a step's vector (the candidates a model chooses among, besides "new")."""
        names = [n for n in self.counts if n in label_vectors]
        if not names:
            return []
        matrix = np.stack([label_vectors[n] for n in names])
        order = np.argsort(-(matrix @ vector), kind="stable")[:k]
        return [names[i] for i in order]

    def merge_synonyms(self, embed: Callable[[Sequence[str]], np.ndarray], threshold: float) -> dict[str, str]:
        """Fold each label added since the last merge into its nearest older, at least as frequent label when
        their embeddings' cosine reaches `threshold`; returns {merged label: surviving label}."""
        fresh = [label for label in self.fresh if label in self.counts]
        self.fresh = []
        if not fresh or len(self.counts) < 2:
            return {}
        names = list(self.counts)
        vectors = np.asarray(embed(names), dtype=np.float32)
        index = {n: i for i, n in enumerate(names)}
        age = {n: i for i, n in enumerate(names)}
        mapping: dict[str, str] = {}
        for label in sorted(fresh, key=lambda n: (self.counts[n], -age[n])):  # rarest, newest first
            sims = vectors @ vectors[index[label]]
            best, best_sim = None, threshold
            for other in names:
                if other == label or other in mapping or label in mapping:
                    continue
                older_or_bigger = (self.counts[other], -age[other]) > (self.counts[label], -age[label])
                if older_or_bigger and sims[index[other]] >= best_sim:
                    best, best_sim = other, float(sims[index[other]])
            if best is not None:
                mapping[label] = best
        for old, new in mapping.items():
            while new in mapping:  # a chain a -> b -> c ends at c
                new = mapping[new]
            mapping[old] = new
        for old, new in mapping.items():
            self.counts[new] += self.counts.pop(old)
            self.aliases[old] = new
        for alias, target in self.aliases.items():
            if target in mapping:
                self.aliases[alias] = mapping[target]
        return mapping

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "counts": self.counts, "aliases": self.aliases, "fresh": self.fresh}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None, kind: str) -> Vocabulary:
        if not data:
            return cls(kind)
        return cls(kind, dict(data["counts"]), dict(data["aliases"]), list(data.get("fresh", [])))
