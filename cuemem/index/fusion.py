"""Reciprocal-rank fusion (Cormack et al., SIGIR 2009): score(d) = sum over rankings of 1 / (k + rank)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[K]], k: int = 60) -> list[tuple[K, float]]:
    """Fuse ranked lists of keys (best first, ranks from 1); ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
