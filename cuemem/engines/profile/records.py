"""Typed memory records of the hybrid preference memory (docs/design.md design 3, the report's "typed records"):
preferences, stable profile facts, dated episodic facts, task-state summaries, tool results, and standing facts
(a value, goal, state or cause the speaker states about themselves; issue 34). Every record keeps
its evidence turn ids (provenance) and its history: a superseded value is kept, never overwritten."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ...index.standing import STANDING_TYPES

RECORD_TYPES = ("preference", "profile", "episodic", "summary", "tool_result", *STANDING_TYPES)
_ARTICLE = re.compile(r"^(?:a|an|the|my|our|some|this|that|these|those)\s+", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def normalise(text: str) -> str:
    """Lower case, single spaces, no leading article or possessive, no trailing punctuation: "My  Favourite
    Drink!" -> "favourite drink"."""
    text = _SPACE.sub(" ", text.strip().lower()).strip(" .,;:!?\"'()")
    while True:
        stripped = _ARTICLE.sub("", text)
        if stripped == text:
            return text.replace("favorite", "favourite")
        text = stripped


def numbers(text: str) -> tuple[str, ...]:
    """The numbers a value states, in order ("17 new postcards" -> ("17",))."""
    return tuple(n.replace(",", "") for n in _NUMBER.findall(text))


@dataclass
class Candidate:
    """One extracted statement before consolidation: what a rule or the model read in one turn."""

    type: str
    key: str  # normalised; "" when the extractor named none (the value's head words stand in)
    value: str
    confidence: float
    seq: int
    turn_id: str
    subject: str
    span: str  # the sentence it was read from
    time: str | None = None  # the turn's date (ISO), when it parsed
    polarity: int = 1  # -1: a negation ("I no longer like tea")
    update: bool = False  # phrased as replacing an earlier value ("I switched to", "now", "anymore")
    old: str = ""  # the value being replaced, where the statement names it ("from Lisbon to Porto")
    source: str = "rule"  # "rule:<name>" or "model"
    fixed_key: bool = False  # the key is a slot named by the rule or the model (home, job, favourite drink)


@dataclass
class Record:
    """A consolidated record. `evidence` lists (turn id, seq) of every statement supporting the current value,
    oldest first; `history` the values it held before, each with its own evidence and when it was superseded."""

    id: str
    type: str
    subject: str
    key: str
    value: str
    confidence: float
    first_seen: int  # seq
    last_seen: int  # seq
    span: str
    evidence: list[tuple[str, int]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    polarity: int = 1
    fixed_key: bool = False
    time: str | None = None  # date of the latest evidence, where known
    first_time: str | None = None
    version: int = 1
    sources: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The record as held in memory (turn seqs beside turn ids)."""
        out = asdict(self)
        out["evidence"] = [list(e) for e in self.evidence]
        return out

    def to_json(self) -> dict[str, Any]:
        """The record as stored: turn ids only (seqs are store-internal, so two stores holding the same log hold
        the same records)."""
        seen = {s: t for t, s in self.evidence}
        for h in self.history:
            seen.update({int(s): str(t) for t, s in h.get("evidence", [])})
        out = asdict(self)
        out["evidence"] = [t for t, _ in self.evidence]
        out["first_seen"], out["last_seen"] = seen.get(self.first_seen), seen.get(self.last_seen)
        out["history"] = [{**h, "evidence": [t for t, _ in h.get("evidence", [])]} for h in self.history]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], seqs: dict[str, int]) -> Record:
        """A stored record with its turn ids' seqs in this store (`seqs`: turn id -> seq)."""
        data = dict(data)
        data["evidence"] = [(t, seqs[t]) for t in data.get("evidence", []) if t in seqs]
        data["history"] = [
            {**h, "evidence": [[t, seqs[t]] for t in h.get("evidence", []) if t in seqs]}
            for h in data.get("history", [])
        ]
        data["first_seen"] = seqs.get(data.get("first_seen") or "", 0)
        data["last_seen"] = seqs.get(data.get("last_seen") or "", 0)
        return cls(**data)

    @staticmethod
    def stored_turns(data: dict[str, Any]) -> list[str]:
        """Every turn id a stored record (to_json) names."""
        return [*data.get("evidence", []), *(t for h in data.get("history", []) for t in h.get("evidence", []))]

    @property
    def item_key(self) -> str:
        """The key of this version's derived item ("preference:user:3@2")."""
        return f"{self.id}@{self.version}"

    @property
    def relation(self) -> str:
        if self.type == "preference":
            return "likes" if self.polarity > 0 else "does not like"
        return "has" if self.polarity > 0 else "no longer has"

    def statement(self) -> str:
        """The record as one line: "user likes (drink): oat milk latte"."""
        if self.type == "preference":
            head = self.key if self.fixed_key and self.key else ""
            return f"{self.subject} {self.relation}{f' ({head})' if head else ''}: {self.value}"
        if self.type in STANDING_TYPES:  # the sentence itself: "Ana (goal): I'm trying to run a half marathon"
            return f"{self.subject} ({self.type}): {self.value}"
        if self.key and self.fixed_key:
            return f"{self.subject}'s {self.key}: {self.value}" + ("" if self.polarity > 0 else " (no longer)")
        return f"{self.subject}: {self.value}" + ("" if self.polarity > 0 else " (no longer)")

    def render(self) -> str:
        """What search embeds and shows: the statement, what it replaced, and the sentence it was read from."""
        if self.type in STANDING_TYPES:  # the value is the sentence it was read from
            return self.statement()
        was = ""
        if self.history:
            last = self.history[-1]
            was = f" (before: {last['value']}{'' if last.get('polarity', 1) > 0 else ', negated'})"
        return f'{self.statement()}{was}. "{self.span}"'

    def cited(self, limit: int) -> list[str]:
        """Turn ids a hit of this record cites: the latest evidence of the current value, then the latest of each
        earlier value, at most `limit` (its full evidence stays in the hit's detail)."""
        current = [t for t, _ in reversed(self.evidence)]
        earlier = [h["evidence"][-1][0] for h in reversed(self.history) if h.get("evidence")]
        head = current[: max(1, limit - min(len(earlier), limit // 2))]
        return list(dict.fromkeys([*head, *earlier, *current]))[:limit]

    def all_turns(self) -> list[str]:
        """Every turn this record rests on, its history included."""
        past = [t for h in self.history for t, _ in h.get("evidence", [])]
        return list(dict.fromkeys([*past, *(t for t, _ in self.evidence)]))
