"""A turn's statement (issue 34 item 2; docs/design.md design 3): what one turn says, read model-free for the
revision chains (`revisions.py`). A turn is read (`read_statement`) into its *values* (money, clock times, dates,
percentages, counts with their unit, bare numbers, and the rare capitalised names), its *frame* (the remaining
content words: the attribute), its names and numbered nouns (the goal it may be about) and its change words.

A reading depends only on the text and this code, so an engine may keep it with the item it writes
(`stored_reading`); a search then decodes it (`reading_of`) instead of reading a cold namespace's turns again.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dates import MONTHS, WEEKDAYS
from .focus import ORDINALS
from .names import candidate_names, normalise_name
from .text import STOPWORDS

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
# The change words that say a value was replaced ("instead", "scrap", "fell through ... instead"), not merely that
# something holds now ("now", "not", "new", "correct" are also said of values that stand).
REVISE_WORDS = CHANGE_WORDS - {"now", "not", "new", "correct"}
# Words just before a value that name it as the one replaced ("not X", "instead of X", "forget X", "from X").
OLD_CUES = frozenset(
    ["not", "instead", "from", "forget", "scrap", "scratch", "drop", "cancel", "than", "replacing", "no"]
)
# Words of a question that asks about the past: the history is kept in the ranking for it.
_UNIT_STOP = STOPWORDS | CHANGE_WORDS | {"am", "pm"}
# A name in the place English gives a value, not a goal (`said_as_value`): the complement of a copula ("the
# clinic is Westgate Clinic", "will be Taberna Marina", "it's Villa Sol now"), the object of a change ("moved to
# Tomas", "going with Dario"), the complement of "make" ("make the lead Nico"); or a name followed by what it is
# ("Nina — that's the wrapper", "Villa Norte as the hotel", "put Oskar down as the driver", "Hugo for the wrapper,
# then", "Cantina do Largo, not Bistro Nova", "Villa Sol it is").
_VALUE_BEFORE = re.compile(
    r"(?:\b(?:is|are|was|were|be|been|become|becomes|became)|\b(?:it|that|this)['’]s)\s+(?:now\s+|still\s+)?$"
    # a change's new value ("moved to Tomas"); not where one goes ("going to Lisbon": a trip, a goal)
    r"|\b(?:moved|move|moves|moving|changed|change|changes|changing|switched|switch|switching)"
    r"\s+(?:it\s+|that\s+|over\s+)?to\s+$"
    r"|\b(?:going|go|goes|went|sticking|stick|stay|staying)\s+with\s+$"
    r"|\bmake\s+(?:it|(?:the|our|my|his|her|their)(?:\s+(?!(?:to|for|of|in|at|on|with|from)\b)[a-z]+){1,4})\s+$",
    re.I,
)
_VALUE_AFTER = re.compile(
    r"\s*(?:—|–|--?)\s*that['’]?s\b|\s+(?:down\s+|in\s+)?as\s+(?:the|our|my|his|her|their)\b"
    r"|\s+for\s+the\s+[a-z]+(?:\s+[a-z]+){0,4}\s*,\s*then\b|\s*,?\s+(?:not|instead\s+of)\s+|\s+instead\b"
    r"|\s+it\s+is\s*(?:[,.;!]|$)",  # "Villa Sol it is.", not "In Lisbon it is sunny"
    re.I,
)
_CLAUSE_END = re.compile(r"[.!?;\n]")
_NAME_BEFORE = re.compile(r"(?:[A-Z][\w-]*\s+){1,2}$")  # "is Old Mill Club" read as "Mill Club"; not "It's"


@dataclass(frozen=True, slots=True)
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
    revises: bool = False  # says a word of REVISE_WORDS: a value of it was replaced
    named: frozenset[tuple[str, str, str]] = frozenset()  # numbered nouns with the name beside them (`named_numbers`)
    said: frozenset[str] = frozenset()  # names it says as values (`said_as_value`): a value even when it recurs

    def anchors(self, recurring: Callable[[str], bool], inside: frozenset[str] = frozenset()) -> frozenset[str]:
        """The goal anchors: its numbered nouns and the words of its recurring names not said as values (`said`);
        failing those, the word that opens it when that word recurs and is also said as a name inside a sentence
        (`inside`): "Nordic", not "Put"."""
        words = {w for n in self.names - self.said for w in n.split() if recurring(w)}
        own = frozenset(f"{noun}#{n}" for noun, n in self.numbered) | words
        return own or (frozenset({self.opener}) if self.opener in inside and recurring(self.opener) else frozenset())


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _number(text: str) -> str:
    value = text.replace(",", "")
    return value[:-2] if value.endswith(".0") else value


# "Day 1 in Porto", "the Day 2 hotel in Lisbon": a preposition after the numbered noun or after one word more
_NAMED_AFTER = re.compile(r"(?:\s+[a-z]+)?\s+(?:in|of|at|for|from)\s+(?:the\s+)?([A-Z][\w'-]*)")
_NAMED_BEFORE = re.compile(r"\b([A-Z][\w-]*)(?:'s)?\s+(?:the\s+)?$")  # "Porto day 1", "Lyon's second day"


# A name right after one of these is a value, the one replaced ("scrap Paulo", "instead of Dario", "Tasca, not
# Bistro Nova"); "no" ("Oh no, Jon!"), "from", "than" or "drop" ("drop Nina at school") say nothing of it.
_SAID_REPLACED = re.compile(r"(?:\b(?:scrap|scratch|forget|cancel|replace|replacing)|\binstead\s+of|,\s*not)\s+$", re.I)
_MAKE = re.compile(r"\bmake\s+(?:the|our|my|his|her|their)(?:\s+[a-z]+){1,3}\s+$", re.I)


def _measured(text: str, start: int, noun: str) -> bool:
    """Whether a noun and the number after it are a quantity and its value, not a numbered thing ("Day 2"): the noun
    is plural ("the number of sessions 6") or the two are the complement of "make" ("make the guest count 17")."""
    plural = len(noun) > 3 and noun.endswith("s") and not noun.endswith(("ss", "us", "is"))
    return plural or bool(_MAKE.search(text[max(0, start - 40) : start]))


def said_as_value(text: str, start: int, end: int) -> bool:
    """Whether the name at text[start:end] stands where a value stands (`_VALUE_BEFORE`, `_VALUE_AFTER`), not as a
    goal: never in a question ("Is Carl coming?"), never a possessive ("Nina's housewarming")."""
    if re.match(r"['’]s?\b", text[end : end + 3]):
        return False
    clause_end = _CLAUSE_END.search(text, end)
    if clause_end and clause_end.group() == "?":
        return False
    before = _NAME_BEFORE.sub("", text[max(0, start - 60) : start])
    return bool(_VALUE_BEFORE.search(before) or _VALUE_AFTER.match(text, end))


def _occurrences(text: str, name: str) -> list[tuple[int, int]]:
    """Where `name` is written in `text` as whole words (its words apart by any white space): (start, end) each."""
    pattern = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in name.split()) + r"(?!\w)"
    return [m.span() for m in re.finditer(pattern, text)]


def named_numbers(text: str) -> frozenset[tuple[str, str, str]]:
    """The numbered nouns a turn qualifies with a name right beside them, as (noun, number, name): "Day 1 in Porto",
    "the first day of the Lyon trip", "Porto day 1" -> ("day", "1", "porto"). Only the words next to the numbered
    noun count: "Day 2 dinner is at Cervejaria Ramiro" names its restaurant, not its day."""
    text = (text or "")[:MAX_TEXT]
    spans: list[tuple[str, str, int, int]] = []
    for m in _ORDINAL.finditer(text):
        ordinal = _ORDINALS.get((m.group(1) or "").lower()) or int(m.group(2) or 0)
        spans.append((_singular(m.group(3).lower()), str(ordinal), m.start(), m.end()))
    for m in _NUMBERED.finditer(text):
        if not m.group(1).isdigit():
            spans.append((_singular(m.group(1).lower()), str(int(m.group(2))), m.start(), m.end()))
    out: set[tuple[str, str, str]] = set()
    for noun, number, start, end in spans:
        if noun in STOPWORDS:
            continue
        for found in (_NAMED_AFTER.match(text, end), _NAMED_BEFORE.search(text[max(0, start - 40) : start])):
            name = found.group(1).lower() if found else ""
            if name and name not in STOPWORDS and name != noun:
                out.add((noun, number, name))
    return frozenset(out)


def read_statement(text: str) -> Statement:
    """A turn's values, frame, names, numbered nouns and change words (docs/design.md design 3)."""
    text = (text or "")[:MAX_TEXT]
    named = named_numbers(text)
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
        if _measured(masked, m.start(), noun):
            continue
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
    kept: list[str] = []  # the names as written
    said: set[str] = set()
    opener = ""
    for name in found:
        form = normalise_name(name)
        spans = _occurrences(text, name)
        as_value = any(
            _SAID_REPLACED.search(text[max(0, at - 24) : at]) or said_as_value(text, at, end) for at, end in spans
        )
        # a single capitalised word that opens the turn is as likely a verb ("Put", "Book"): left out, unless
        # what follows says it is a value ("Nina — that's the wrapper")
        if not form or (" " not in name and first is not None and text.lstrip().startswith(name)):
            if form and form not in STOPWORDS and form not in CHANGE_WORDS and as_value:
                names.add(form)
                kept.append(name)
                said.add(form)
                continue
            opener = "" if form in STOPWORDS or form in CHANGE_WORDS else form  # "Now 175 euros.": no name
            continue
        if form in skip or _singular(form) in {noun for noun, _ in numbered}:  # "Day" of "Day 2": a numbered noun
            continue
        names.add(form)
        kept.append(name)
        at = spans[0][0] if spans else -1
        if at >= 0 and set(_WORD.findall(text[max(0, at - 24) : at].lower())[-2:]) & OLD_CUES:
            replaced.add(("name", form))
        if as_value:
            said.add(form)
    words = {w for w in _WORD.findall(masked.lower())}
    unnamed = masked  # the frame is what the turn says outside its names: "make the clinic Lakeside Clinic"
    unfound: set[str] = set()  # the words of a name not found whole (part of it masked as a value): left out
    for name in sorted(kept, key=len, reverse=True):
        spans = _occurrences(unnamed, name)
        if not spans:
            unfound.update(_WORD.findall(name.lower()))
        for start, end in reversed(spans):
            unnamed = unnamed[:start] + " " * (end - start) + unnamed[end:]
    months = {m.lower() for m in MONTHS} | set(WEEKDAYS)
    frame = frozenset(
        _singular(w)
        for w in _WORD.findall(unnamed.lower())
        if len(w) > 2
        and w not in STOPWORDS
        and w not in CHANGE_WORDS
        and w not in skip
        and w not in months
        and w not in unfound
    )
    return Statement(
        {k: frozenset(v) for k, v in values.items()},
        frame,
        frozenset(names),
        frozenset(numbered),
        bool(words & CHANGE_WORDS),
        frozenset(replaced),
        opener,
        bool(words & REVISE_WORDS),
        named,
        frozenset(said),
    )


@functools.cache
def reader_version() -> str:
    """A digest of the code that reads a statement (this module and the ones it reads with): a reading stored by
    another version of it is read again, never trusted. Where the sources are not installed (compiled files
    only), the package's version stands for them."""
    here = Path(__file__).parent
    digest = hashlib.blake2b(digest_size=8)
    try:
        for name in ("statements.py", "names.py", "names_tables.py", "dates.py", "focus.py", "text.py"):
            digest.update((here / name).read_bytes())
    except OSError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            digest.update(version("cuemem").encode())
        except PackageNotFoundError:
            return "unknown"  # no way to tell versions apart: trust no stored reading
    return digest.hexdigest()


READING = "reading"  # the meta key of an item's stored reading (left out of the hits' detail)


def _text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def stored_reading(text: str, statement: Statement | None = None) -> dict[str, Any]:
    """A turn's reading as JSON, to keep with the item an engine writes at ingest: a search that reads the turn
    for the first time (a cold namespace) then decodes it instead of reading the text again. It names the text it
    read and the reader's version (`recalled` checks both); `statement` is the reading when it was just made."""
    if statement is None:
        statement = read_statement(text)
    return {
        "v": reader_version(),
        "of": _text_digest(text),
        "values": {kind: sorted(values) for kind, values in statement.values.items()},
        "frame": sorted(statement.frame),
        "names": sorted(statement.names),
        "numbered": sorted(statement.numbered),
        "changes": statement.changes,
        "replaced": sorted(statement.replaced),
        "opener": statement.opener,
        "revises": statement.revises,
        "named": sorted(statement.named),
        "said": sorted(statement.said),
    }


def recalled(text: str, stored: Any) -> Statement | None:
    """The stored reading (`stored_reading`) of `text`, when it read this very text with this reader and is whole;
    None when it must be read again (none stored, another text's, another reader's, damaged)."""
    version = reader_version()
    if not (isinstance(stored, dict) and stored.get("v") == version != "unknown"):
        return None
    if stored.get("of") != _text_digest(text):
        return None
    try:
        return Statement(
            {str(kind): frozenset(values) for kind, values in stored["values"].items()},
            frozenset(stored["frame"]),
            frozenset(stored["names"]),
            frozenset((str(noun), str(n)) for noun, n in stored["numbered"]),
            bool(stored["changes"]),
            frozenset((str(kind), str(v)) for kind, v in stored["replaced"]),
            str(stored["opener"]),
            bool(stored["revises"]),
            frozenset((str(noun), str(n), str(name)) for noun, n, name in stored["named"]),
            frozenset(str(name) for name in stored["said"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a damaged record


def reading_of(text: str, stored: Any = None) -> Statement:
    """The reading of `text`: the stored one when it is `recalled`, else read now."""
    found = recalled(text, stored)
    return found if found is not None else read_statement(text)


__all__ = [
    "CHANGE_WORDS",
    "OLD_CUES",
    "READING",
    "Statement",
    "named_numbers",
    "read_statement",
    "reader_version",
    "reading_of",
    "recalled",
    "stored_reading",
]
