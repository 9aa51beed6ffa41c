"""The master (E-mem section 3.4): aggregates the assistants' evidence into one time-ordered account, resolves
conflicts, and answers through the reader with cited turn ids.

Conflict rule: a later evidence turn that *revises* (it carries a revision cue: "change", "instead", "actually",
"no longer" ...) supersedes an earlier evidence turn that shares two of the question's content words it holds (one,
where it holds only one): the newer statement of the same fact wins, the earlier one leaves the reader's context,
and the answer's notes say so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...index.text import analyze

REVISION = re.compile(
    r"\b(chang(?:e|ed|es|ing)|instead|actually|updat(?:e|ed|ing)|no longer|not anymore|switch(?:ed|ing)?|"
    r"moved?|rather|correction|correct(?:ed)?|cancel(?:led|ed)?|replac(?:e|ed|ing)|revis(?:e|ed|ing)|"
    r"now it'?s|make it)\b",
    re.IGNORECASE,
)
CUE_WORDS = frozenset({"change", "changed", "changes", "changing", "instead", "actually", "update", "updated",
                       "updating", "longer", "anymore", "switch", "switched", "switching", "move", "moved",
                       "rather", "correction", "correct", "corrected", "cancel", "cancelled", "canceled",
                       "replace", "replaced", "replacing", "revise", "revised", "revising", "make"})  # fmt: skip


@dataclass
class Statement:
    """One evidence turn as the master sees it: id, position in the log, words."""

    turn_id: str
    seq: int
    text: str


def revisions(statements: Sequence[Statement], question: str) -> dict[str, str]:
    """Which evidence turn is superseded by which: {earlier id: the latest later id revising it}."""
    asked = set(analyze(question)) - CUE_WORDS
    ordered = sorted(statements, key=lambda s: s.seq)
    words = {s.turn_id: set(analyze(s.text)) - CUE_WORDS for s in ordered}
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
