"""Pattern extraction of the hybrid preference memory (design 3, the report's "fast pattern rules", always on):
explicit preference, negation, profile and dated-fact cues read from a speaker's own sentences, each with its
confidence and the matched span. The rule table is data (`cuemem/data/profile_rules.json`, or a file of the same
shape named by `ProfileConfig.rules`), so a language or a domain is a new table, not new code."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ...errors import CuememError
from ...index.standing import NO_STANDING, SENTENCE, Standing, StandingCueError, parse_standing
from ...types import Turn
from .records import RECORD_TYPES, Candidate, normalise

MAX_VALUE_WORDS = 12
MAX_SPAN = 300
# A value that only points elsewhere says nothing on its own.
EMPTY_VALUES = frozenset(
    {
        "it",
        "that",
        "this",
        "them",
        "those",
        "these",
        "one",
        "him",
        "her",
        "you",
        "so",
        "to",
        "something",
        "anything",
        "everything",
        "things",
        "stuff",
        "lot",
        "a lot",
        "more",
        "too",
        "how",
        "what",
        "when",
        "there",
        "here",
    }
)


TRAILING_TIME = re.compile(
    r"(?:\s+(?:last|this|next|every)\s+(?:week|month|year|weekend|summer|winter|spring|fall|autumn|night|time)|"
    r"\s+(?:yesterday|today|tonight|recently|lately|now|again|these days|nowadays|\d+\s+\w+\s+ago|a while ago))+$",
    re.IGNORECASE,
)


LEADING_FILLER = re.compile(
    r"^(?:(?:so|well|honestly|actually|anyway|turns out|it turns out|these days|lately|now|and|but|oh)[, ]+)+",
    re.IGNORECASE,
)


class RuleTableError(CuememError):
    """A rule table that cannot be used (unreadable file, bad JSON, unknown type, a pattern that does not compile)."""


@dataclass(frozen=True)
class Rule:
    name: str
    type: str
    pattern: re.Pattern[str]
    confidence: float
    key: str = ""
    polarity: int = 1
    update: bool = False


@dataclass(frozen=True)
class RuleTable:
    rules: tuple[Rule, ...]
    update_cues: re.Pattern[str]
    standing: Standing = NO_STANDING

    def extract(self, turn: Turn, subject: str | None = None) -> list[Candidate]:
        """Every statement the rules read in a turn, sentence by sentence; where two rules match overlapping words
        of a sentence, the earlier rule wins."""
        out: list[Candidate] = []
        text = (turn.text or "").replace("\u2019", "'")  # a typographic apostrophe reads as a plain one
        for sentence in (s.strip() for s in SENTENCE.split(text)):
            if len(sentence) < 4:
                continue
            taken: list[tuple[int, int]] = []
            cue = bool(self.update_cues.search(sentence))
            found: list[tuple[int, Candidate]] = []
            for rule in self.rules:
                for match in rule.pattern.finditer(sentence):
                    start, end = match.span()
                    if any(start < b and a < end for a, b in taken):
                        continue
                    candidate = self._candidate(rule, match, turn, subject, sentence, cue)
                    if candidate is not None:
                        taken.append((start, end))
                        found.append((start, candidate))
            found.sort(key=lambda x: x[0])
            for (_, before), (_, after) in itertools.pairwise(found):
                # "I no longer play tennis, these days I love yoga": the new value replaces the one just negated
                if before.polarity < 0 < after.polarity and after.update and not after.old:
                    after.old = before.value
            out += [c for _, c in found]
            kind = self.standing.kind(sentence)
            if kind and len(sentence.split()) >= 4:
                out.append(_standing(kind, sentence, turn, subject))
        return out

    @staticmethod
    def _candidate(
        rule: Rule, match: re.Match[str], turn: Turn, subject: str | None, sentence: str, cue: bool
    ) -> Candidate | None:
        groups = match.groupdict()
        value = clean_value(groups.get("v") or "")
        if not value:
            return None
        named = normalise(groups.get("k") or "")
        key = rule.key or named
        old = clean_value(groups.get("old") or "")
        return Candidate(
            type=rule.type,
            key=key,
            value=value,
            confidence=rule.confidence,
            seq=turn.seq or 0,
            turn_id=turn.id,
            subject=subject or turn.speaker,
            span=sentence[:MAX_SPAN],
            polarity=rule.polarity,
            update=rule.update or cue,
            old=old,
            source=f"rule:{rule.name}",
            fixed_key=bool(key),
        )


def _standing(kind: str, sentence: str, turn: Turn, subject: str | None) -> Candidate:
    """A standing fact: the whole sentence is the value (its meaning, not a slot, is what a later message meets)."""
    value = LEADING_FILLER.sub("", sentence).strip()[:MAX_SPAN]
    return Candidate(
        type=kind,
        key="",
        value=value,
        confidence=0.6,
        seq=turn.seq or 0,
        turn_id=turn.id,
        subject=subject or turn.speaker,
        span=sentence[:MAX_SPAN],
        source=f"standing:{kind}",
    )


def clean_value(text: str) -> str:
    """A value as stored: trimmed, without a trailing time phrase ("Porto last month" -> "Porto"), at most
    MAX_VALUE_WORDS words, "" when it only points elsewhere."""
    words = LEADING_FILLER.sub("", TRAILING_TIME.sub("", text.strip(" ,;:-\"'()"))).split()
    value = " ".join(words[:MAX_VALUE_WORDS]).rstrip(" ,;:-.!?")
    bare = normalise(value)
    if len(bare) < 2 or bare in EMPTY_VALUES or not any(c.isalnum() for c in bare):
        return ""
    return value


def load_rules(path: str | Path | None = None) -> RuleTable:
    """The rule table: the shipped one, or the file at `path` (validated: a clear RuleTableError, never a crash
    halfway through ingest)."""
    key = str(Path(path).expanduser().resolve()) if path else ""
    return _load(key)


@lru_cache(maxsize=8)
def _load(path: str) -> RuleTable:
    try:
        if path:
            raw = Path(path).read_text(encoding="utf-8")
        else:
            raw = resources.files("cuemem.data").joinpath("profile_rules.json").read_text(encoding="utf-8")
        data = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RuleTableError(f"profile rule table {path or '(shipped)'} cannot be read: {exc}") from exc
    return parse_rules(data, path or "(shipped)")


def parse_rules(data: Any, where: str = "rule table") -> RuleTable:
    """A RuleTable from the JSON shape of `profile_rules.json`."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RuleTableError(f"{where}: expected an object with a list 'rules'")
    clause = str(data.get("clause", r"[^.;!?\n]{1,80}?"))
    rules = []
    for number, row in enumerate(data["rules"]):
        if not isinstance(row, dict):
            raise RuleTableError(f"{where}: rule {number} is not an object")
        name = str(row.get("name", f"rule{number}"))
        kind = row.get("type")
        if kind not in RECORD_TYPES:
            raise RuleTableError(f"{where}: rule {name!r} has type {kind!r}; types: {', '.join(RECORD_TYPES)}")
        try:
            confidence = float(row.get("confidence", 0.5))
            polarity = int(row.get("polarity", 1))
            pattern = re.compile(str(row["pattern"]).replace("{clause}", clause), re.IGNORECASE)
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise RuleTableError(f"{where}: rule {name!r} is not usable: {exc}") from exc
        if not 0 < confidence <= 1 or polarity not in (1, -1):
            raise RuleTableError(f"{where}: rule {name!r} needs 0 < confidence <= 1 and polarity 1 or -1")
        if "v" not in pattern.groupindex:
            raise RuleTableError(f"{where}: rule {name!r} has no value group (?P<v>...)")
        rules.append(
            Rule(
                name,
                kind,
                pattern,
                confidence,
                normalise(str(row.get("key", ""))),
                polarity,
                bool(row.get("update", False)),
            )
        )
    try:
        cues = re.compile(str(data.get("update_cues", r"(?!x)x")), re.IGNORECASE)
    except re.error as exc:
        raise RuleTableError(f"{where}: update_cues does not compile: {exc}") from exc
    try:
        standing = parse_standing(data.get("standing"), where)
    except StandingCueError as exc:
        raise RuleTableError(str(exc)) from exc
    return RuleTable(tuple(rules), cues, standing)
