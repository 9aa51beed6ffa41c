"""Routing (E-mem section 3.2): a question activates windows through three pathways.

- `summary`: the window's summary matches the question (BM25 over summaries fused with summary-vector cosine);
- `dense`: the question's vector is near the window (its best turn, or its centroid);
- `bm25`: the question's words hit the window (its best turn's BM25 score).

`union` (the paper) takes the pathways' rankings in turn, best first, until `max_windows` distinct windows are
active; a window's pathways are those whose ranking reached it within the rounds taken. `weighted` (the official
code's variant) ranks by 0.3 summary + 0.4 dense + 0.3 BM25, each min-max normalised over the windows, with a
strong-BM25 shortcut: a window whose BM25 score is at least `strong_bm25` times the next window's goes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

PATHWAYS = ("dense", "bm25", "summary")  # the order `union` takes them in each round
WEIGHTS = {"summary": 0.3, "dense": 0.4, "bm25": 0.3}


@dataclass
class Activation:
    """An activated window: its position, the pathways that activated it and each pathway's score for it."""

    window: int
    pathways: list[str]
    scores: dict[str, float] = field(default_factory=dict)


def ranking(scores: dict[int, float]) -> list[int]:
    """Windows with a positive score, best first (ties by position)."""
    return [w for w, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])) if s > 0]


def route_union(
    scores: dict[str, dict[int, float]], max_windows: int, pathways: Sequence[str] = PATHWAYS
) -> list[Activation]:
    """Round-robin over the enabled pathways' rankings until `max_windows` distinct windows are active."""
    ranked = {p: ranking(scores.get(p, {})) for p in pathways}
    chosen: list[int] = []
    depth = 0
    while len(chosen) < max_windows and any(depth < len(r) for r in ranked.values()):
        for p in pathways:
            if depth < len(ranked[p]) and ranked[p][depth] not in chosen and len(chosen) < max_windows:
                chosen.append(ranked[p][depth])
        depth += 1
    return [
        Activation(
            w, [p for p in pathways if w in ranked[p][:depth]], {p: scores.get(p, {}).get(w, 0.0) for p in pathways}
        )
        for w in chosen
    ]


def normalised(scores: dict[int, float], windows: int) -> dict[int, float]:
    """Min-max normalised scores over all windows (a window a pathway did not reach scores 0)."""
    values = [scores.get(w, 0.0) for w in range(windows)]
    lo, hi = min(values, default=0.0), max(values, default=0.0)
    if hi <= lo:
        return {w: (1.0 if hi > 0 else 0.0) for w in range(windows) if scores.get(w, 0.0) > 0}
    return {w: (v - lo) / (hi - lo) for w, v in enumerate(values)}


def route_weighted(
    scores: dict[str, dict[int, float]],
    windows: int,
    max_windows: int,
    *,
    weights: dict[str, float] | None = None,
    strong_bm25: float = 2.0,
    pathways: Sequence[str] = PATHWAYS,
) -> list[Activation]:
    """The weighted variant: the top `max_windows` by the weighted sum of normalised pathway scores, after a
    strong-BM25 window (if any). A window's pathways are those whose normalised score for it is at least 0.5."""
    weights = weights or WEIGHTS
    norm = {p: normalised(scores.get(p, {}), windows) for p in pathways}
    total = {w: sum(weights.get(p, 0.0) * norm[p].get(w, 0.0) for p in pathways) for w in range(windows)}
    order = ranking(total)
    bm25 = ranking(scores.get("bm25", {})) if "bm25" in pathways else []
    if bm25 and strong_bm25 > 0:
        best = scores["bm25"][bm25[0]]
        runner_up = scores["bm25"][bm25[1]] if len(bm25) > 1 else 0.0
        if best >= strong_bm25 * runner_up:
            order = [bm25[0], *[w for w in order if w != bm25[0]]]
    return [
        Activation(
            w, [p for p in pathways if norm[p].get(w, 0.0) >= 0.5], {p: scores.get(p, {}).get(w, 0.0) for p in pathways}
        )
        for w in order[:max_windows]
    ]
