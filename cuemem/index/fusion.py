"""Reciprocal-rank fusion (Cormack et al., SIGIR 2009): score(d) = sum over rankings of w / (k + rank).

Weighted: a strong embedder is dragged down by an equal vote from BM25 (EmbeddingGemma on LoCoMo: dense alone
R@10 0.758, equal fusion 0.657, BM25 weight 0.2 0.763; docs/models.md), so each ranking may carry its own weight."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fuse ranked lists of keys (best first, ranks from 1), each scaled by its weight (1.0 each by default);
    ties keep first-seen order. A ranking of weight 0 adds no score (its keys still appear, last)."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
