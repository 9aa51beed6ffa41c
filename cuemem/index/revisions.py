"""Revised values (issue 34 item 2; docs/design.md design 3, the confidence + recency merge): statements that set the
same attribute of the same goal form a chain; the latest is current, the others are its history.

Model-free and language-light. A turn is read (`read_statement`) into its *values* (money, clock times, dates,
percentages, counts with their unit, bare numbers, and the rare capitalised names), its *anchors* (the goal it is
about: numbered nouns such as "day 2" or "the second day", and the names that recur over the conversation), and its
*frame* (the remaining content words: the attribute). A turn that names no anchor inherits those of the nearest
preceding turn of its session that does (the goal in focus, carried forward).

A later turn supersedes an earlier one (`supersedes`) when their goals are compatible (they share an anchor and no
numbered noun disagrees) and it states another value of a kind the earlier one states, either for the same attribute
(frame overlap at least `min_frame`) or by quoting the earlier value beside a generic change word ("instead",
"now", "not", "actually", ...). `chains` links each superseded turn to the current one of its chain.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from .dates import MONTHS, WEEKDAYS
from .focus import ORDINALS
from .names import candidate_names, normalise_name
from .text import STOPWORDS

MIN_FRAME = 0.5  # the share of the smaller frame that two statements of one attribute have in common (dev sweep)
RECURRING = 3  # a name said in this many turns is a goal's anchor; a rarer one is a value (dev sweep)
FRAME_MEASURE = "union"  # "union" (weighted Jaccard) or "min" (containment); dev sweep: docs/benchmarks/came.md
MAX_TEXT = 2000  # characters of a turn read

_CURRENCY = r"(?:euros?|eur|dollars?|usd|bucks|pounds?|gbp|yen|francs?|pesos?|rupees?|kr|chf)"
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_MONEY = re.compile(rf"[$€£¥]\s?({_NUMBER})(?:\s?[kK]\b)?|\b({_NUMBER})\s?(?:{_CURRENCY}\b|[$€£¥])", re.I)
_TIME = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\b\.?|\b(\d{1,2}):(\d{2})\b|\b(noon|midnight)\b", re.I)
_MONTH = "|".join(m.lower() for m in MONTHS)
_DATE = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b|\b({_MONTH})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b"
    rf"|\b({'|'.join(WEEKDAYS)})\b",
    re.I,
)
_PERCENT = re.compile(rf"\b({_NUMBER})\s?(?:%|percent\b|per\s+cent\b)", re.I)
_ORDINALS = {w: int(n) for w, n in ORDINALS.items() if int(n) > 0}  # the ordinals focus.py reads, as numbers
_ORDINAL = re.compile(r"\b(?:(" + "|".join(_ORDINALS) + r")|(\d{1,3})(?:st|nd|rd|th))\s+([a-z]+)\b", re.I)
_NUMBERED = re.compile(r"\b([A-Za-z]+)\s+#?(\d{1,4})\b(?!\s*[:.,]\d)")
_BARE = re.compile(rf"(?<![\w:.,$€£¥]){_NUMBER}(?![\w:%])")
_UNIT = re.compile(rf"\b({_NUMBER})\s+([a-z]+)\b")
_WORD = re.compile(r"[a-z]+")
# Generic English words that mark a change of a value (never a generator's sentence).
CHANGE_WORDS = frozenset(
    [
        "instead",
        "not",
        "now",
        "changed",
        "change",
        "changes",
        "moved",
        "move",
        "update",
        "updated",
        "correction",
        "correct",
        "actually",
        "scrap",
        "scratch",
        "forget",
        "replace",
        "replaced",
        "rather",
        "switch",
        "switched",
        "new",
        "longer",
        "anymore",
        "cancel",
        "cancelled",
        "canceled",
        "revised",
        "revise",
    ]
)
# Words just before a value that name it as the one replaced ("not X", "instead of X", "forget X", "from X").
OLD_CUES = frozenset(
    ["not", "instead", "from", "forget", "scrap", "scratch", "drop", "cancel", "than", "replacing", "no"]
)
# Words of a question that asks about the past: the history is kept in the ranking for it.
_PAST = re.compile(
    r"\b(before|originally|original|used\s+to|previous(?:ly)?|old|older|earlier|former(?:ly)?|initial(?:ly)?|"
    r"at\s+first|first\s+(?:\w+\s+){0,3}(?:was|were|had|did)|prior|until|replaced|changed\s+from|history)\b",
    re.I,
)
_UNIT_STOP = STOPWORDS | CHANGE_WORDS | {"am", "pm"}


@dataclass(frozen=True)
class Statement:
    """What one turn says: its values by kind, its attribute words (frame), and its own goal anchors."""

    values: dict[str, frozenset[str]]
    frame: frozenset[str]
    names: frozenset[str]  # normalised capitalised names (anchors or values: decided by how often they recur)
    numbered: frozenset[tuple[str, str]]  # (noun, number): "day 2", "the second day", "room 12"
    changes: bool  # says a generic change word
    replaced: frozenset[tuple[str, str]] = (
        frozenset()
    )  # (kind, value) it names as the old one ("not X", "instead of X")
    opener: str = ""  # a capitalised word opening the turn: a name or a verb ("Put", "Book"); an anchor only alone

    def anchors(self, recurring: Callable[[str], bool], inside: frozenset[str] = frozenset()) -> frozenset[str]:
        """The goal anchors: its numbered nouns and the words of its recurring names; failing those, the word that
        opens it when that word recurs and is also said as a name inside a sentence (`inside`): "Nordic", not "Put"."""
        words = {w for n in self.names for w in n.split() if recurring(w)}
        own = frozenset(f"{noun}#{n}" for noun, n in self.numbered) | words
        return own or (frozenset({self.opener}) if self.opener in inside and recurring(self.opener) else frozenset())


@dataclass
class Turn:
    """A turn as the primitive sees it: its words, its session and its place in the conversation."""

    text: str
    session: str = ""
    statement: Statement | None = field(default=None, repr=False)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _number(text: str) -> str:
    value = text.replace(",", "")
    return value[:-2] if value.endswith(".0") else value


def read_statement(text: str) -> Statement:
    """A turn's values, frame, names, numbered nouns and change words (docs/design.md design 3)."""
    text = (text or "")[:MAX_TEXT]
    values: dict[str, set[str]] = {}
    masked = text
    replaced: set[tuple[str, str]] = set()

    def take(kind: str, value: str, m: re.Match[str]) -> None:
        nonlocal masked
        values.setdefault(kind, set()).add(value)
        if set(_WORD.findall(text[max(0, m.start() - 24) : m.start()].lower())[-2:]) & OLD_CUES:
            replaced.add((kind, value))
        masked = masked[: m.start()] + " " * (m.end() - m.start()) + masked[m.end() :]

    for m in _MONEY.finditer(text):
        take("money", _number(m.group(1) or m.group(2)), m)
    for m in _TIME.finditer(masked):
        if m.group(6):
            take("time", m.group(6).lower(), m)
            continue
        hour = int(m.group(1) or m.group(4))
        minute = m.group(2) or m.group(5) or "00"
        if m.group(3):
            hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
        take("time", f"{hour:02d}:{minute}", m)
    for m in _DATE.finditer(masked):
        if m.group(5):
            take("date", m.group(5).lower(), m)
        else:
            day, month = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            take("date", f"{month.lower()} {int(day)}", m)
    for m in _PERCENT.finditer(masked):
        take("percent", _number(m.group(1)), m)
    numbered: set[tuple[str, str]] = set()
    skip: set[str] = set()
    for m in _ORDINAL.finditer(masked):
        noun = _singular(m.group(3).lower())
        if noun not in _UNIT_STOP:
            numbered.add((noun, str(_ORDINALS.get((m.group(1) or "").lower()) or int(m.group(2) or 0))))
            skip |= {m.group(1 if m.group(1) else 2).lower(), m.group(3).lower()}
    for m in _NUMBERED.finditer(masked):
        noun = m.group(1).lower()
        if noun not in _UNIT_STOP and not m.group(1).isdigit():
            numbered.add((_singular(noun), str(int(m.group(2)))))
            skip.add(noun)
            masked = masked[: m.start()] + " " * (m.end() - m.start()) + masked[m.end() :]
    for m in _UNIT.finditer(masked):
        unit = _singular(m.group(2))
        if unit not in _UNIT_STOP:
            take(unit, _number(m.group(1)), m)
            skip.add(m.group(2))
    for m in _BARE.finditer(masked):
        take("number", _number(m.group(0)), m)
    found = candidate_names(text)
    first = _WORD.search(text.lower())
    names = set()
    opener = ""
    for name in found:
        form = normalise_name(name)
        # a single capitalised word that opens the turn is as likely a verb ("Put", "Book"): left out
        if not form or (" " not in name and first is not None and text.lstrip().startswith(name)):
            opener = form
            continue
        if form in skip or _singular(form) in {noun for noun, _ in numbered}:  # "Day" of "Day 2": a numbered noun
            continue
        names.add(form)
        at = text.find(name)
        if at >= 0 and set(_WORD.findall(text[max(0, at - 24) : at].lower())[-2:]) & OLD_CUES:
            replaced.add(("name", form))
    name_words = {w for n in names for w in n.split()}
    words = {w for w in _WORD.findall(masked.lower())}
    months = {m.lower() for m in MONTHS} | set(WEEKDAYS)
    frame = frozenset(
        _singular(w)
        for w in words
        if len(w) > 2
        and w not in STOPWORDS
        and w not in CHANGE_WORDS
        and w not in name_words
        and w not in skip
        and w not in months
    )
    return Statement(
        {k: frozenset(v) for k, v in values.items()},
        frame,
        frozenset(names),
        frozenset(numbered),
        bool(words & CHANGE_WORDS),
        frozenset(replaced),
        opener,
    )


def asks_past(question: str) -> bool:
    """Whether a question asks about an earlier value ("what was the hotel before?"): its history stays in place."""
    return bool(_PAST.search(question or ""))


def compatible(earlier: frozenset[str], later: frozenset[str]) -> bool:
    """Whether two goals (anchor sets) can be the same: they share an anchor, no numbered noun disagrees, and not
    both name an anchor the other lacks ("project Apollo" against "project Atlas"); two turns that name no goal
    at all are about the conversation's one goal."""
    if not earlier and not later:
        return True
    if not earlier & later:
        return False
    if (earlier - later) and (later - earlier):
        return False
    return not _disagree(_numbers(earlier), _numbers(later))


def _by_noun(pairs: Iterable[Sequence[str]]) -> dict[str, set[str]]:
    """Numbered nouns as noun -> its numbers (("day", "1"), ("day", "2") -> day: {1, 2})."""
    out: dict[str, set[str]] = {}
    for noun, number in pairs:
        out.setdefault(noun, set()).add(number)
    return out


def _numbers(anchors: frozenset[str]) -> dict[str, set[str]]:
    """The numbered nouns among a goal's anchors ("day#1", "day#2", "lyon" -> day: {1, 2})."""
    return _by_noun(a.split("#", 1) for a in anchors if "#" in a)


def _disagree(a: dict[str, set[str]], b: dict[str, set[str]]) -> bool:
    """Whether a numbered noun of both has no number in common ("day 1" against "day 2")."""
    return any(not (numbers & b[noun]) for noun, numbers in a.items() if noun in b)


def frame_overlap(a: frozenset[str], b: frozenset[str], weight: Callable[[str], float]) -> float:
    """How much two frames share: the weight of their shared attribute words over the lighter frame's weight
    (FRAME_MEASURE "min"), or over both frames' ("union", a weighted Jaccard); each word weighted by its rarity."""
    whole = _sum(a | b, weight) if FRAME_MEASURE == "union" else min(_sum(a, weight), _sum(b, weight))
    return _sum(a & b, weight) / whole if whole > 0 else 0.0


def _sum(words: frozenset[str], weight: Callable[[str], float]) -> float:
    """The words' weights summed exactly (`math.fsum`): a float sum in a set's order would differ in its last bit
    from one process to the next, and an overlap of exactly `min_frame` would then pass or fail by chance."""
    return math.fsum(weight(w) for w in words)


def supersedes(
    later: Statement,
    earlier: Statement,
    later_goal: frozenset[str],
    earlier_goal: frozenset[str],
    recurring: Callable[[str], bool],
    min_frame: float = MIN_FRAME,
    weight: Callable[[str], float] = lambda w: 1.0,
) -> bool:
    """Whether `later` replaces a value `earlier` stated: their goals are compatible and a kind of value both state
    has a new value in `later`, either for the same attribute (frame overlap) or with the old value quoted beside a
    change word ("forget X, it's Y now")."""
    if not compatible(earlier_goal, later_goal):
        return False
    stated = _stated(later, recurring), _stated(earlier, recurring)
    return _replaces(later, *stated, lambda: frame_overlap(earlier.frame, later.frame, weight) >= min_frame)


def _stated(statement: Statement, recurring: Callable[[str], bool]) -> dict[str, frozenset[str]]:
    """The values a turn states by kind, its names that do not recur among them (a recurring name is a goal's)."""
    names = frozenset(n for n in statement.names if not any(recurring(w) for w in n.split()))
    return {**statement.values, "name": names} if names else dict(statement.values)


def _replaces(
    later: Statement,
    new_values: dict[str, frozenset[str]],
    old_values: dict[str, frozenset[str]],
    same_frame: Callable[[], bool],
) -> bool:
    """`supersedes` once the goals are known to be compatible, with each side's values already read (`_stated`);
    `same_frame` says whether the two turns' frames overlap enough to be about the same attribute."""
    same_attribute: bool | None = None  # the frames' overlap, read only for a pair that states a new value
    for kind, old in old_values.items():
        said = new_values.get(kind)
        if not said:
            continue
        named_old = {v for v in said if (kind, v) in later.replaced}
        new = said - named_old
        if not new or not (new - old) or (old & new):  # no new value, or the earlier one says the new value too
            continue
        if later.changes and old & named_old:
            return True
        if same_attribute is None:
            same_attribute = same_frame()
        if same_attribute:
            return True
    return False


def goals_in_focus(
    turns: Sequence[Turn],
    candidates: Sequence[int],
    recurring: Callable[[str], bool],
) -> dict[int, frozenset[str]]:
    """For `turns` in conversation order: the goal of each candidate (the indexes given), its own anchors or, when
    it names none, those of the nearest preceding turn that does (the goal in focus, carried forward)."""
    for turn in turns:
        if turn.statement is None:
            turn.statement = read_statement(turn.text)
    goals: dict[int, frozenset[str]] = {}
    focus: frozenset[str] = frozenset()
    wanted = set(candidates)
    inside = frozenset(w for turn in turns if turn.statement for n in turn.statement.names for w in n.split())
    for i, turn in enumerate(turns):
        assert turn.statement is not None
        own = turn.statement.anchors(recurring, inside)
        if own:
            focus = own
        if i in wanted:
            goals[i] = own or focus
    return goals


def other_goal(asked: frozenset[tuple[str, str]], numbered: frozenset[tuple[str, str]]) -> bool:
    """Whether a turn is about another goal than the one a question names (a look-alike: "Day 1 of the Lyon trip"
    for a question about "Day 2 of the Lyon trip"): a numbered noun of both (`Statement.numbered`) disagrees. Two
    goals that merely name different things are not told apart: a recurring name may be the goal ("the Porto trip")
    or a value stated for it ("dinner at Cervejaria Ramiro"), which a model-free reading cannot tell (dev:
    docs/benchmarks/came.md)."""
    return bool(asked and numbered) and _disagree(_by_noun(asked), _by_noun(numbered))


def chains(
    turns: Sequence[Turn],
    candidates: Sequence[int],
    recurring: Callable[[str], bool],
    min_frame: float = MIN_FRAME,
) -> dict[int, int]:
    """For `turns` in conversation order and the indexes of the candidate turns among them: each superseded
    candidate -> the candidate that holds its current value (the latest of its chain). Turns that are not
    candidates serve only as context: the goal in focus that an anchorless candidate inherits."""
    goals = goals_in_focus(turns, candidates, recurring)
    frequency: Counter[str] = Counter(w for turn in turns if turn.statement for w in turn.statement.frame)

    weights: dict[str, float] = {}
    sums: dict[frozenset[str], float] = {}  # each frame's weight, summed once

    def weight(word: str) -> float:
        found = weights.get(word)
        if found is None:
            found = weights[word] = math.log(1 + len(turns) / (1 + frequency[word]))
        return found

    def same_frame(a: frozenset[str], b: frozenset[str]) -> bool:  # `frame_overlap` with the weights kept
        if FRAME_MEASURE == "union":
            whole = _sum(a | b, weight)
        else:
            for frame in (a, b):
                if frame not in sums:
                    sums[frame] = _sum(frame, weight)
            whole = min(sums[a], sums[b])
        return whole > 0 and _sum(a & b, weight) / whole >= min_frame

    order = sorted(goals)
    stated = {i: _stated(turns[i].statement, recurring) for i in order}  # type: ignore[arg-type]
    kinds = {i: frozenset(stated[i]) for i in order}
    same_goal: dict[tuple[frozenset[str], frozenset[str]], bool] = {}  # candidates share a few goals
    replaced: dict[int, int] = {}
    for a, i in enumerate(order):
        old = turns[i].statement
        assert old is not None
        if not kinds[i]:
            continue
        for j in order[a + 1 :]:
            if not kinds[i] & kinds[j]:  # no kind of value both state: nothing of `i` can be replaced by `j`
                continue
            key = (goals[i], goals[j])
            if key not in same_goal:
                same_goal[key] = compatible(*key)
            new = turns[j].statement
            assert new is not None
            overlap = partial(same_frame, old.frame, new.frame)
            if same_goal[key] and _replaces(new, stated[j], stated[i], overlap):
                replaced[i] = j
    # follow each chain to its current value
    out: dict[int, int] = {}
    for i in replaced:
        j, seen = replaced[i], {i}
        while j in replaced and j not in seen:
            seen.add(j)
            j = replaced[j]
        out[i] = j
    return out


__all__ = [
    "CHANGE_WORDS",
    "MIN_FRAME",
    "RECURRING",
    "Statement",
    "Turn",
    "asks_past",
    "chains",
    "compatible",
    "frame_overlap",
    "goals_in_focus",
    "other_goal",
    "read_statement",
    "supersedes",
]
