"""Packing ranked hits into a token budget: what a reader's context window can hold.

Hits that carry their session and date as fields (issue 13) are printed under one date header per session block
(`answer.context_block`) instead of a date in every hit; packing charges each block's header once, at the cost
counted at ingest (`header_tokens` in the hit's fields)."""

from __future__ import annotations

from collections.abc import Sequence

from ..types import Hit

# What a heading costs where an item did not record it: "## 8 May 2023 (session D1)" counts 11 tokens (MiniLM's
# tokenizer, the shipped counter), LoCoMo's headings 11-12.
SESSION_HEADER_TOKENS = 12


def header_cost(hit: Hit) -> int:
    """Tokens of the heading of a hit's session block."""
    return int(hit.detail.get("header_tokens", SESSION_HEADER_TOKENS))


def session_key(hit: Hit) -> str | None:
    """The session block a hit belongs to, where its date is a field rather than part of its text."""
    if hit.detail.get("form") is None or "session_id" not in hit.detail:
        return None
    return str(hit.detail["session_id"])


def pack(hits: Sequence[Hit], budget_tokens: int | None) -> list[Hit]:
    """Keep hits in rank order while they fit (with their session block's header, once per block); a hit too
    large for what is left is skipped, not cut."""
    if budget_tokens is None:
        return list(hits)
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    packed, used, blocks = [], 0, set()
    for hit in hits:
        block = session_key(hit)
        cost = hit.tokens + (header_cost(hit) if block is not None and block not in blocks else 0)
        if used + cost <= budget_tokens:
            packed.append(hit)
            used += cost
            if block is not None:
                blocks.add(block)
    return packed


def packed_tokens(hits: Sequence[Hit]) -> int:
    """Tokens of packed hits as a reader sees them: the hits and one header per session block."""
    headers = {b: header_cost(h) for h in reversed(hits) if (b := session_key(h)) is not None}
    return sum(h.tokens for h in hits) + sum(headers.values())
