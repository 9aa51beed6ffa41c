"""The master (E-mem section 3.4): aggregates the assistants' evidence into one time-ordered account, resolves
conflicts, and answers through the reader with cited turn ids.

Conflict rule: a later evidence turn that *revises* (explicit revision phrasing: "change ... to", "switch to",
"instead", "no longer", "cancel", "replace ... with", "move ... to") supersedes an earlier evidence turn that
shares two of the question's content words it holds (one, where it holds only one; speakers' names do not count):
the newer statement of the same fact wins, the earlier one leaves the reader's context, and the answer's notes
say so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...index.text import analyze

# Explicit revision phrasing only: conversational turns say "actually" and "changing" all the time (on LoCoMo a
# looser list, with "actually", "rather", bare "change", fired on 69 of 77 questions).
REVISION = re.compile(
    r"\b(?:chang(?:e|ed|ing)\b[^.!?]{0,40}?\bto\b|switch(?:ed|ing)?\s+(?:it\s+|that\s+)?to\b|instead\b|"
    r"no longer\b|not anymore\b|correction\b|cancel(?:l?ed|ling)?\b|replac(?:e|ed|ing)\b[^.!?]{0,40}?\bwith\b|"
    r"mov(?:e|ed|ing)\s+(?:it\s+|that\s+)?to\b)",
    re.IGNORECASE,
)
CUE_WORDS = frozenset(
    {
        "change",
        "changed",
        "changing",
        "switch",
        "switched",
        "switching",
        "instead",
        "longer",
        "anymore",
        "correction",
        "cancel",
        "cancelled",
        "canceled",
        "cancelling",
        "replace",
        "replaced",
        "replacing",
        "move",
        "moved",
        "moving",
    }
)


@dataclass
class Statement:
    """One evidence turn as the master sees it: id, position in the log, words."""

    turn_id: str
    seq: int
    text: str
    speaker: str = ""


def revisions(statements: Sequence[Statement], question: str) -> dict[str, str]:
    """Which evidence turn is superseded by which: {earlier id: the latest later id revising it}. Speakers' names
    do not count as shared words (every turn of a person shares them with a question about that person)."""
    names = {w for s in statements for w in analyze(s.speaker)}
    asked = set(analyze(question)) - CUE_WORDS - names
    ordered = sorted(statements, key=lambda s: s.seq)
    words = {s.turn_id: set(analyze(s.text)) - CUE_WORDS - names for s in ordered}
    superseded: dict[str, str] = {}
    for j, newer in enumerate(ordered):
        if not REVISION.search(newer.text):
            continue
        topic = words[newer.turn_id] & asked
        needed = min(2, len(topic))  # "day" alone does not make two statements about Day 2's hotel one fact
        for older in ordered[:j]:
            if needed and len(words[older.turn_id] & topic) >= needed:
                superseded[older.turn_id] = newer.turn_id  # a later reviser overwrites: the latest wins
    return superseded


def revision_notes(superseded: dict[str, str]) -> list[str]:
    """What the master tells the reader (and the answer's notes) about the conflicts it resolved."""
    return [f"[{new}] revises [{old}]; the later statement is current." for old, new in superseded.items()]
