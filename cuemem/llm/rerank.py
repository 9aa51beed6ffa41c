"""Second-stage reranking by a language model's likelihood (issue 13): no cross-encoder ships offline, so the
local model scores how much better a passage is predicted with the question in front of it than without.

relevance(passage) = mean log P(passage | "question: Q, a passage that answers it:")
                   - mean log P(passage | "a passage from a conversation:")

a pointwise mutual information per token: the second term takes away what makes a passage likely in itself
(short, common words), so long and short passages compete fairly. Both terms are one batched `score` call each
(every passage is a continuation of the same prompt), so N passages cost two forward passes of N rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from .client import LLMClient

MAX_PASSAGE_CHARS = 600  # a passage is cut here: relevance shows early, and cost grows with length


def _prompt(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def likelihood_relevance(client: LLMClient, question: str, passages: Sequence[str]) -> list[float]:
    """Per-token PMI of each passage with the question (higher = more relevant)."""
    if not passages:
        return []
    cut = [p[:MAX_PASSAGE_CHARS] or " " for p in passages]
    asked = client.score(_prompt(f"Question: {question}\nQuote a passage of the conversation that answers it."), cut)
    prior = client.score(_prompt("Quote a passage of the conversation."), cut)
    lengths = [max(1, len(p.split())) for p in cut]  # words: the same divisor for both terms
    return [(a - b) / n for a, b, n in zip(asked, prior, lengths, strict=True)]


__all__ = ["likelihood_relevance"]
