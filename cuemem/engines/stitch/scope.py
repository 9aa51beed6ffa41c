"""Thematic scope without a model (STITCH, design 1, model-free mode): segment the stream where the topic shifts,
and link a closed segment to an earlier one that pursues the same goal, so both share one scope.

A step opens a new segment at a session boundary, after `segment_max` steps, or when its embedding's cosine to
the mean of the segment's last `segment_window` steps falls below `segment_threshold`. When a segment closes, its
centroid is compared with earlier segments' centroids; at `link_threshold` or above it joins that segment's scope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


@dataclass
class OpenSegment:
    """The segment being grown: what the next step is compared with, and what closing it needs."""

    segment: int = -1
    session: str | None = None
    members: list[str] = field(default_factory=list)  # the steps' turn ids (never row ids: see state.py)
    vectors: list[list[float]] = field(default_factory=list)  # the members' vectors (at most segment_max)
    gist: list[str] = field(default_factory=list)  # the members' salient mentions: a running gist

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> OpenSegment:
        return cls(**data) if data else cls()


def topic_shift(
    segment: OpenSegment, vector: np.ndarray, session: str | None, *, window: int, threshold: float, max_steps: int
) -> bool:
    """True when a step starts a new segment: new session, full segment, or low similarity to the recent window."""
    if segment.segment < 0 or session != segment.session or len(segment.members) >= max_steps:
        return True
    recent = np.asarray(segment.vectors[-window:], dtype=np.float32)
    return float(unit(recent.mean(axis=0)) @ vector) < threshold


def centroid(segment: OpenSegment) -> np.ndarray:
    return unit(np.asarray(segment.vectors, dtype=np.float32).mean(axis=0))
