"""Episodes (E-mem, arXiv 2601.21714, section 3.1): the log cut into overlapping token windows, kept raw.

A window is a run of consecutive turns (never a rewritten text). Windows roll over as turns arrive: the last one
stays open and grows; when the next turn would take it past `length` tokens it closes, and the next window opens
with the closed one's last turns that fit in `overlap` x `length` tokens carried over. The cut is a pure function
of the turns' order and token counts, so any batching of the same log gives the same windows, and `reindex`
rebuilds them identically.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ...index.text import analyze


def segment(tokens: Sequence[int], length: int, overlap: float) -> list[range]:
    """Windows over turns with these token counts, as ranges of turn positions: each holds at most `length`
    tokens (a single longer turn is a window of its own), and starts with the largest run of the previous
    window's last turns that fits in `overlap` x `length` tokens (never the whole previous window)."""
    if length < 1:
        raise ValueError(f"window length must be >= 1 token, got {length}")
    if not 0 <= overlap < 1:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    carry_budget = int(overlap * length)
    windows: list[range] = []
    start, used = 0, 0
    for i, n in enumerate(tokens):
        if used + n > length and i > start:
            windows.append(range(start, i))
            j, carried = i, 0
            while j - 1 > start and carried + tokens[j - 1] <= carry_budget:
                j -= 1
                carried += tokens[j]
            start, used = j, carried
        used += n
    if len(tokens):
        windows.append(range(start, len(tokens)))
    return windows


def keyphrases(texts: Sequence[str], limit: int = 8) -> list[str]:
    """The window's most frequent content words (3+ letters, no stop words or numbers), ties alphabetical: they
    depend on the window alone, so its summary never changes when later turns arrive."""
    counts = Counter(t for text in texts for t in analyze(text) if len(t) >= 3 and not t.isdigit())
    return [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def central_turns(vectors: np.ndarray, limit: int = 3) -> list[int]:
    """Positions of the turns nearest the window's centroid (cosine), most central first, ties by position."""
    if len(vectors) == 0:
        return []
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    centroid = unit.mean(axis=0)
    scores = unit @ centroid
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))[:limit]


def extractive_summary(
    lines: Sequence[str],
    speakers: Sequence[str],
    dates: Sequence[str],
    vectors: np.ndarray,
    *,
    central: int = 3,
    words: int = 25,
) -> str:
    """A window's summary without a model: its dates and speakers, its keyphrases, and its most central turns
    (cut to `words` words each), in log order."""
    parts = []
    known = [d for d in dates if d]
    if known:
        parts.append(known[0] if known[0] == known[-1] else f"{known[0]} to {known[-1]}")
    people = list(dict.fromkeys(s for s in speakers if s))
    if people:
        parts.append(", ".join(people[:6]))
    topics = keyphrases(lines)
    if topics:
        parts.append("topics: " + ", ".join(topics))
    for i in sorted(central_turns(vectors, central)):
        cut = lines[i].split()
        parts.append(" ".join(cut[:words]) + (" ..." if len(cut) > words else ""))
    return " | ".join(parts)
