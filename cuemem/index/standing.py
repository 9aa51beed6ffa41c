"""Standing facts (issue 34 item 5; docs/design.md design 3, the preference memory's typed records): a sentence
about oneself that states a value, a goal, a state or a cause ("Honestly, I believe family dinners come before any
work deadline."), which a later message may need while sharing few words with it ("My manager wants me to stay late
Thursday, but that's our night to eat together."). The cues are data: the `standing` block of the profile rule
table (`cuemem/data/profile_rules.json`); `profile` keeps each such sentence as a record, every other engine finds
the turns that say one (`engines/standing.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import CuememError

STANDING_TYPES = ("value", "goal", "state", "cause")
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
MIN_WORDS = 4  # a shorter sentence ("I love it.") states no standing fact worth keeping whole
MAX_TEXT = 5000  # characters of a turn read for its sentences

# A message (not a question) or a question about oneself: the standing facts may bear on it.
SELF = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|our|us)\b", re.IGNORECASE)
QUESTION = re.compile(
    r"\?\s*$|^\s*(?:what|when|where|who|whom|whose|which|why|how|did|does|do|is|are|was|were|can|could|would|will|"
    r"should|has|have|had)\b",
    re.IGNORECASE,
)


class StandingCueError(CuememError):
    """A `standing` block of a rule table that cannot be used (a wrong shape, an unknown type, a bad pattern)."""


def bears_on_self(query: str, gate: str = "message") -> bool:
    """Whether standing facts may bear on a query: a message rather than a question ("message"), or also a question
    in the first person ("self")."""
    return not QUESTION.search(query) or (gate == "self" and bool(SELF.search(query)))


@dataclass(frozen=True)
class Standing:
    """Cues of standing facts: a sentence about oneself (`own` matches, `other` does not) that states a cause, a
    goal, a state or a value (`cues`, checked in order) is a standing fact of that type."""

    own: re.Pattern[str]
    other: re.Pattern[str]
    cues: tuple[tuple[str, re.Pattern[str]], ...]

    def kind(self, sentence: str) -> str:
        """The standing type a sentence states, "" for none."""
        if not self.own.search(sentence) or self.other.search(sentence):
            return ""
        return next((kind for kind, cue in self.cues if cue.search(sentence)), "")

    def of_text(self, text: str) -> str:
        """The standing type of a turn: that of its first sentence of at least MIN_WORDS words that states one."""
        plain = (text or "")[:MAX_TEXT].replace("\u2019", "'")
        for sentence in (s.strip() for s in SENTENCE.split(plain)):
            if len(sentence.split()) >= MIN_WORDS and (kind := self.kind(sentence)):
                return kind
        return ""


NO_STANDING = Standing(re.compile(r"(?!x)x"), re.compile(r"(?!x)x"), ())


def parse_standing(data: Any, where: str) -> Standing:
    """A rule table's `standing` block ({"self": re, "other": re, "types": {type: [re, ...]}}); none without one."""
    if data is None:
        return NO_STANDING
    if not isinstance(data, dict) or not isinstance(data.get("types"), dict):
        raise StandingCueError(f"{where}: 'standing' must be an object with an object 'types'")
    try:
        own = re.compile(str(data.get("self", r"\bI\b")), re.IGNORECASE)
        other = re.compile(str(data.get("other", r"(?!x)x")), re.IGNORECASE)
        cues = []
        for kind, patterns in data["types"].items():
            if kind not in STANDING_TYPES:
                raise StandingCueError(f"{where}: standing type {kind!r}; types: {', '.join(STANDING_TYPES)}")
            if not isinstance(patterns, list):
                raise StandingCueError(f"{where}: standing type {kind!r} needs a list of patterns")
            cues += [(kind, re.compile(str(p), re.IGNORECASE)) for p in patterns]
    except re.error as exc:
        raise StandingCueError(f"{where}: a standing cue does not compile: {exc}") from exc
    return Standing(own, other, tuple(cues))


@lru_cache(maxsize=1)
def shipped_standing() -> Standing:
    """The cues of the shipped rule table (`cuemem/data/profile_rules.json`)."""
    raw = resources.files("cuemem.data").joinpath("profile_rules.json").read_text(encoding="utf-8")
    return parse_standing(json.loads(raw).get("standing"), "profile_rules.json")


__all__ = [
    "NO_STANDING",
    "SENTENCE",
    "STANDING_TYPES",
    "Standing",
    "StandingCueError",
    "bears_on_self",
    "parse_standing",
    "shipped_standing",
]
