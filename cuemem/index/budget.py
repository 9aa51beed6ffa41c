"""Packing ranked hits into a token budget: what a reader's context window can hold."""

from __future__ import annotations

from collections.abc import Sequence

from ..types import Hit


def pack(hits: Sequence[Hit], budget_tokens: int | None) -> list[Hit]:
    """Keep hits in rank order while they fit; a hit too large for what is left is skipped, not cut."""
    if budget_tokens is None:
        return list(hits)
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    packed, used = [], 0
    for hit in hits:
        if used + hit.tokens <= budget_tokens:
            packed.append(hit)
            used += hit.tokens
    return packed
