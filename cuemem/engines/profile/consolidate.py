"""Consolidation of the hybrid preference memory (design 3, the report's "merge by semantic equivalence, recency
and cumulative confidence"): a candidate reinforces the record it is equivalent to, supersedes the record it
contradicts (the old value goes to `history`), or starts a record of its own. Near-duplicates never accumulate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .records import Candidate, Record, normalise, numbers

Similarity = Callable[[str, str], float]  # cosine of two texts' embeddings


@dataclass
class Thresholds:
    """Cosine thresholds of `match_text` embeddings: `same` = the same statement (reinforce), `update` = close
    enough for a statement phrased as a change to replace it, `key` = two slot names that mean the same."""

    same: float = 0.8
    update: float = 0.3
    key: float = 0.85


@dataclass
class Outcome:
    """What consolidating one candidate did."""

    action: str  # "new" | "reinforce" | "supersede" | "earlier" (an older statement filed into history)
    record: Record
    replaced: str = ""


@dataclass
class Profile:
    """The consolidated records of a namespace and the counter that names new ones (a function of the log)."""

    records: dict[str, Record] = field(default_factory=dict)
    counter: int = 0
    upto: int = 0  # the last turn seq consolidated (replays of turns at or below it are skipped)
    upto_id: str = ""  # that turn's id (what is stored)

    def new_id(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}:{self.counter}"

    def to_json(self) -> dict[str, Any]:
        """The profile as stored: records by turn ids (Record.to_json), the counter, the last turn consolidated."""
        return {"records": [r.to_json() for r in self.records.values()], "counter": self.counter, "upto": self.upto_id}

    @classmethod
    def from_json(cls, data: dict[str, Any], seqs_of: Callable[[list[str]], dict[str, int]]) -> Profile:
        """A stored profile, its turn ids mapped to this store's seqs by `seqs_of`."""
        rows = data.get("records", [])
        named = {str(t) for row in rows for t in row.get("evidence", [])}
        named |= {str(t) for row in rows for h in row.get("history", []) for t in h.get("evidence", [])}
        seqs = seqs_of(sorted(named | ({data["upto"]} if data.get("upto") else set())))
        records = [Record.from_json(row, seqs) for row in rows]
        upto = str(data.get("upto") or "")
        return cls({r.id: r for r in records}, int(data.get("counter", 0)), seqs.get(upto, 0), upto)


def match_text(key: str, value: str, fixed: bool) -> str:
    """The text whose embedding decides equivalence: "key: value" for a named slot, else the value."""
    return f"{key}: {normalise(value)}" if fixed and key else normalise(value)


def noisy_or(a: float, b: float) -> float:
    """Cumulative confidence of two independent supporting statements."""
    return 1 - (1 - a) * (1 - b)


def _newer(c: Candidate, r: Record) -> bool | None:
    """Recency: True if the candidate is newer than the record's current value, False if older, None if the two
    are equally recent (same date, and the candidate is not phrased as a change)."""
    if c.time and r.time:
        if c.time[:10] > r.time[:10]:
            return True
        if c.time[:10] < r.time[:10]:
            return False
        return True if c.update else None
    return c.seq >= r.last_seen


def consolidate(profile: Profile, c: Candidate, similar: Similarity, limits: Thresholds) -> Outcome:
    """Fold one candidate into the profile (section "merge / consolidation" of the report)."""
    pool = [r for r in profile.records.values() if r.subject == c.subject and r.type == c.type]
    target, relation = _find(pool, c, similar, limits)
    if target is None:
        record = Record(
            id=profile.new_id(c.type),
            type=c.type,
            subject=c.subject,
            key=c.key or normalise(c.value),
            value=c.value,
            confidence=c.confidence,
            first_seen=c.seq,
            last_seen=c.seq,
            span=c.span,
            evidence=[(c.turn_id, c.seq)],
            polarity=c.polarity,
            fixed_key=c.fixed_key,
            time=c.time,
            first_time=c.time,
            sources=[c.source],
        )
        if c.old:  # "I moved from Lisbon to Porto" with no Lisbon on record: the old value is history all the same
            record.history.append(_past(c.old, 1, c.confidence, [], None, c.time or c.turn_id, "named as replaced"))
        profile.records[record.id] = record
        return Outcome("new", record)
    if relation == "same":
        _reinforce(target, c)
        return Outcome("reinforce", target)
    newer = _newer(c, target)
    if newer is None:  # equally recent: cumulative confidence decides
        newer = c.confidence > target.confidence
    if not newer:
        target.history.append(
            _past(
                c.value,
                c.polarity,
                c.confidence,
                [(c.turn_id, c.seq)],
                c.time,
                target.time,
                "older or weaker statement",
            )
        )
        target.history.sort(key=lambda h: (str(h.get("since") or ""), h["evidence"][0][1] if h["evidence"] else 0))
        target.version += 1
        return Outcome("earlier", target)
    replaced = target.value
    target.history.append(
        _past(
            target.value,
            target.polarity,
            target.confidence,
            target.evidence,
            target.first_time,
            c.time or c.turn_id,
            "superseded",
        )
    )
    target.value, target.polarity, target.confidence = c.value, c.polarity, c.confidence
    target.evidence = [(c.turn_id, c.seq)]
    target.span, target.time, target.first_time = c.span, c.time, c.time
    target.last_seen = c.seq
    target.version += 1
    target.sources = [*target.sources, c.source][-8:]
    return Outcome("supersede", target, replaced)


def _past(
    value: str,
    polarity: int,
    confidence: float,
    evidence: list[tuple[str, int]],
    since: object,
    until: object,
    reason: str,
) -> dict[str, object]:
    return {
        "value": value,
        "polarity": polarity,
        "confidence": round(confidence, 4),
        "evidence": [list(e) for e in evidence],
        "since": since,
        "until": until,
        "reason": reason,
    }


def _reinforce(r: Record, c: Candidate) -> None:
    r.confidence = noisy_or(r.confidence, c.confidence)
    if c.turn_id not in {t for t, _ in r.evidence}:
        r.evidence.append((c.turn_id, c.seq))
    if c.seq >= r.last_seen:
        r.last_seen, r.span = c.seq, c.span
        r.time = c.time or r.time
    r.version += 1
    if c.source not in r.sources:
        r.sources = [*r.sources, c.source][-8:]


def _find(pool: list[Record], c: Candidate, similar: Similarity, limits: Thresholds) -> tuple[Record | None, str]:
    """The record a candidate concerns and how: ("same" = equivalent statement, "conflict" = another value of
    the same slot), or (None, "") for a new record."""
    if not pool:
        return None, ""
    value = match_text(c.key, c.value, c.fixed_key)
    if c.fixed_key:  # a named slot: the record of the same (or an equivalent) slot, else a new one
        slot = [r for r in pool if r.fixed_key and (r.key == c.key or similar(r.key, c.key) >= limits.key)]
        if not slot:
            return None, ""
        r = max(slot, key=lambda r: r.last_seen)
        same = similar(match_text(r.key, r.value, True), value) >= limits.same or normalise(r.value) == normalise(
            c.value
        )
        return r, "same" if same and _agrees(r, c) else "conflict"
    if c.old:  # the statement names the value it replaces
        for r in sorted(pool, key=lambda r: -r.last_seen):
            if normalise(r.value) == normalise(c.old) or similar(normalise(r.value), normalise(c.old)) >= limits.same:
                return r, "conflict"
    scored = sorted(
        ((similar(match_text(r.key, r.value, r.fixed_key), value), r) for r in pool),
        key=lambda x: (-x[0], -x[1].last_seen),
    )
    best, r = scored[0]
    if best >= limits.same or normalise(r.value) == normalise(c.value):
        return r, "same" if _agrees(r, c) else "conflict"
    if c.update or c.polarity < 0:  # phrased as a change: the closest record by value, or by slot name
        near = [
            (max(similar(normalise(r.value), normalise(c.value)), similar(r.key, normalise(c.value))), r) for r in pool
        ]
        closeness, r = max(near, key=lambda x: (x[0], x[1].last_seen))
        if closeness >= limits.update:
            return r, "conflict"
    return None, ""


def _agrees(r: Record, c: Candidate) -> bool:
    """Equivalent texts still disagree when their polarity or the numbers they state differ ("17 postcards" then
    "25 postcards")."""
    return r.polarity == c.polarity and numbers(r.value) == numbers(c.value)
