"""The goal in focus, carried forward (STITCH's contextual intent, docs/design.md design 1): a turn that leaves its
goal implicit ("There, the guest count will be 26.", "Make it 8 instead.") continues the goal of the last turn that
named one, and is indexed under that goal's anchors as well as its own words.

A turn's *anchors* are the phrases that name what it is about (proper names, numbered or ordinal things: "Day 2
of the trip", "Maria's birthday"), read off by the caller's parser. A turn *names a goal* when one of its anchor
words has already named something in `recur` earlier turns: a goal recurs, a value said for the first time does
not. Such a turn switches the focus to its anchors; any other turn inherits the focus of its session. Pure
bookkeeping over words: no model, no word list, no knowledge of any domain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ORDINALS = {
    word: str(i)
    for i, word in enumerate(
        "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split()  # noqa: SIM905
    )
}
WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_SEEN = 20_000  # anchor words remembered; past it, words seen once are forgotten first


def anchor_words(phrase: str) -> set[str]:
    """An anchor's words, lower-cased, ordinals as numbers ("the Second day" -> {"the", "2", "day"})."""
    words = (w.lower() for w in WORD.findall(phrase.replace("'s", "")))
    return {ORDINALS.get(w, w) for w in words}


MAX_FOCUS = 6  # anchors the goal in focus keeps: the goal's name first, then the latest things named under it
MAX_SAID = 2_000  # values remembered with the turn that said them (the oldest forgotten first)
QUOTE_CHARS = 240  # how much of a quoted turn a quoting turn carries


@dataclass
class Focus:
    """The goal in focus of the current session, how often each anchor word has named something, and the turn
    that last said each value."""

    session: str | None = None
    anchors: list[str] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    said: dict[str, str] = field(default_factory=dict)
    last: str = ""  # the previous turn of the session, when it named or stated something (a reply continues it)
    # Where each piece came from (turn ids), so that what a turn inherits is forgotten with the turns it came from:
    focus_turns: list[str] = field(default_factory=list)  # the turns whose anchors the focus holds
    said_by: dict[str, list[str]] = field(default_factory=dict)  # per value: the turns its remembered context holds
    last_by: list[str] = field(default_factory=list)
    depends: list[str] = field(default_factory=list)  # after a step: the earlier turns what it continues came from

    def is_goal(self, anchor: str, recur: int, whole: bool = True) -> bool:
        """An anchor names a goal when every word of it (numbers aside; any word unless `whole`) already named
        something in `recur` earlier turns: a goal's name recurs whole, a value's name seldom does."""
        words = [w for w in anchor_words(anchor) if not w.isdigit()]
        recurs = [self.seen.get(w, 0) >= recur for w in words]
        return bool(words) and (all(recurs) if whole else any(recurs))

    def step(
        self,
        session: str | None,
        anchors: list[str],
        text: str,
        values: Sequence[str] = (),
        *,
        recur: int = 2,
        whole: bool = True,
        quotes: bool = True,
        gather: bool = True,
        replies: bool = False,
        sessions: bool = False,
        turn: str = "",
        replaced: Sequence[str] | None = None,
    ) -> list[str]:
        """Advance over one turn; returns what it continues: the anchors of the goal in focus it does not name, and
        the earlier turn that said a value it quotes ("scrap Casa Azul; we go with Villa Mar"): with `replaced`, only
        the values the turn names as the ones replaced (a value merely said again, an amount two things cost, ties
        nothing), with None every value and name it says that is no goal. With `replies`, a turn that names and
        states nothing ("Go for the cheaper one.") also continues the turn before it; with
        `sessions`, the focus outlives a session's end (a new session that names no goal yet goes on with the last
        one: "And the budget? 1500 euros.")."""
        if session != self.session:
            self.session, self.last, self.last_by = session, "", []
            if not sessions:
                self.anchors, self.focus_turns = [], []
        goals = [a for a in anchors if self.is_goal(a, recur, whole)]
        inherited: list[str] = []
        inherited_by: list[str] = []  # the turns the inherited anchors came from
        depends: list[str] = []
        if goals:
            self.anchors = list(dict.fromkeys(goals))[:MAX_FOCUS]
            self.focus_turns = [turn]
            if gather:
                self.anchors = list(dict.fromkeys([*self.anchors, *anchors]))[:MAX_FOCUS]
        else:
            words = anchor_words(text)
            inherited = [a for a in self.anchors if not anchor_words(a) <= words]
            if inherited:
                inherited_by = list(self.focus_turns)
                depends += inherited_by
            if gather or not self.anchors:
                kept = [*self.anchors, *anchors]
                self.anchors = list(dict.fromkeys(kept[:1] + kept[1:][-(MAX_FOCUS - 1) :]))
                self.focus_turns = list(dict.fromkeys([*self.focus_turns, turn]))[-MAX_FOCUS:]
        keys = [v.lower().strip() for v in [*values, *(a for a in anchors if a not in goals)]]
        asked = keys if replaced is None else [v.lower().strip() for v in replaced]
        found = [k for k in dict.fromkeys(asked) if k in self.said] if quotes else []
        quoted = [self.said[k] for k in found]
        depends += [t for k in found for t in self.said_by.get(k, [])]
        context = " ".join([text, *inherited])[:QUOTE_CHARS]
        # the remembered context holds this turn's words and the anchors it inherited, nothing it quotes: its
        # provenance is those turns only (taking the quoted values' provenance too would grow without bound)
        context_by = list(dict.fromkeys([turn, *inherited_by]))
        for key in keys:
            self.said.pop(key, None)
            self.said_by.pop(key, None)
            self.said[key] = context
            self.said_by[key] = context_by
        while len(self.said) > MAX_SAID:
            oldest = next(iter(self.said))
            self.said.pop(oldest)
            self.said_by.pop(oldest, None)
        for word in {w for a in anchors for w in anchor_words(a)}:
            self.seen[word] = self.seen.get(word, 0) + 1
        if len(self.seen) > MAX_SEEN:
            self.seen = dict(sorted(self.seen.items(), key=lambda kv: -kv[1])[: MAX_SEEN // 2])
        if replies and not anchors and not values and self.last:
            quoted.append(self.last)
            depends += self.last_by
        self.last = text[:QUOTE_CHARS] if anchors or values else ""
        self.last_by = [turn] if anchors or values else []
        self.depends = [t for t in dict.fromkeys(depends) if t != turn]
        return inherited + [q for q in dict.fromkeys(quoted) if q != context]

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "anchors": self.anchors,
            "seen": self.seen,
            "said": self.said,
            "last": self.last,
            "focus_turns": self.focus_turns,
            "said_by": self.said_by,
            "last_by": self.last_by,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Focus:
        return cls(**data) if data else cls()


__all__ = ["Focus", "anchor_words"]
