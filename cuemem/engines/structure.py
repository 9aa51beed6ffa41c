"""Turns' structure for retrieval (issue 13): the speaker, the date and the people of a turn as fields of its item,
not words of its indexed text, and the query-side use of them.

Ingest (`turn_fields`) parses the turn's timestamp in any common format into a canonical date (an unparsable one
is kept raw and counted, never fatal), resolves the turn's relative dates ("yesterday", "two weeks ago") against
it, and lists the people it names. The indexed text is the turn's words alone: a query naming a person no longer
pulls up that person's shortest turns because each one starts with the name. Hits show the speaker, carry the
date in their metadata, and the packer prints one date header per session block (`index/budget.py`).

Query side (`QueryStructure`, `structural_boost`): a question that names a person boosts the turns that person
said or that mention them (nicknames, spelling variants and first names matched by `index/names.py`); a question
that names one of the speakers boosts the turns that speaker said (`said_boost`); a question with a date or period
("in May 2023", "last week" against the question's date) boosts the turns of that window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property
from typing import Any

from ..index.budget import session_key
from ..index.dates import DateSpan, format_day, parse_timestamp, query_window, resolve_relative
from ..index.names import (
    PersonIndex,
    candidate_names,
    named_speakers,
    normalise_name,
    speaker_index,
)
from ..index.standing import STANDING_TYPES, shipped_standing
from ..types import Hit, Turn

FORM = 2  # items written with structure; older items (text "[date] speaker: words") are shown as stored
MAX_SPANS = 8  # resolved date expressions kept per turn
MAX_PEOPLE = 8  # names kept per turn
MAX_CLUSTERED = 60  # the most often mentioned names clustered into people (pairwise: bounded)


def turn_fields(turn: Turn) -> dict[str, Any]:
    """An item's structured fields for a turn: session, speaker, raw and canonical date, resolved relative dates,
    the people it names, and the standing fact it states, if any (`index.standing`: its speaker's value, goal,
    state or cause)."""
    when = parse_timestamp(turn.timestamp) if turn.timestamp else None
    spans = resolve_relative(turn.text, when)[:MAX_SPANS] if when is not None else []
    fields: dict[str, Any] = {
        "form": FORM,
        "session_id": turn.session_id,
        "speaker": turn.speaker,
        "timestamp": turn.timestamp,
        "date": when.isoformat() if when is not None else None,
        "dates": [[s.start.isoformat(), s.end.isoformat(), s.granularity, s.phrase] for s in spans],
        "people": candidate_names(turn.text)[:MAX_PEOPLE],
    }
    standing = shipped_standing().of_text(turn.text)
    if standing:  # most turns state none: no key
        fields["standing"] = standing
    return fields


def hit_text(words: str, meta: dict[str, Any]) -> str:
    """What a hit shows a reader: the speaker and the words, with each relative date resolved ("yesterday" =
    7 May 2023). The date itself goes in the session header, once per block."""
    if meta.get("form") != FORM:
        return words
    resolved = "; ".join(
        f"{phrase.strip(' .,;:!?')} = {_span_label(start, end, kind)}" for start, end, kind, phrase in meta["dates"]
    )
    return f"{meta['speaker']}: {words}" + (f" [{resolved}]" if resolved else "")


def session_header(meta: dict[str, Any]) -> str:
    """The header of a session block in a packed context: its date (raw where it did not parse)."""
    when = meta.get("date")
    if when:
        return format_day(datetime.fromisoformat(when))
    return str(meta.get("timestamp") or f"session {meta.get('session_id', '?')}")


def session_heading(meta: dict[str, Any]) -> str:
    """The line that opens a session block in a reader's context (its tokens are stored as `header_tokens`)."""
    return f"## {session_header(meta)} (session {meta.get('session_id', '?')})"


def with_header_tokens(metas: list[dict[str, Any]], count: Callable[[list[str]], list[int]]) -> None:
    """Record in each item's fields what its session heading costs, so the packer charges the real figure."""
    for meta, tokens in zip(metas, count([session_heading(m) for m in metas]), strict=True):
        meta["header_tokens"] = tokens


def _span_label(start: str, end: str, kind: str) -> str:
    return DateSpan(date.fromisoformat(start), date.fromisoformat(end), kind, "").label()


MAX_FORMS = 20_000  # names whose normalised form a table remembers


@dataclass
class TurnTable:
    """Query-side view of a namespace's turn items: who said each, who it names, and when (rebuilt on change)."""

    ids: list[int]
    position: dict[int, int]
    people: PersonIndex  # speakers and the most often mentioned names, clustered (co-reference by name)
    by_form: dict[str, frozenset[int]]  # a normalised name -> the items said by or naming it
    spans: list[list[tuple[date, date]]]  # the session date and the resolved dates of each item
    unparsed: int  # items whose timestamp did not parse
    speakers: list[str] = field(default_factory=list)  # in order of first appearance
    mentioned: Counter[str] = field(default_factory=Counter)  # names the items mention, with their counts
    said_by: dict[str, frozenset[int]] = field(default_factory=dict)  # a speaker -> the items they said
    standing: dict[int, str] = field(default_factory=dict)  # position -> the standing fact type its turn states

    # The metadata a table is built from (Store.space_metas reads only these).
    KEYS = ("speaker", "people", "date", "dates", "timestamp", "form", "standing")

    @classmethod
    def build(cls, metas: dict[int, dict[str, Any]]) -> TurnTable:
        return cls([], {}, PersonIndex(), {}, [], 0).grown(metas)

    def grown(self, metas: dict[int, dict[str, Any]]) -> TurnTable:
        """This table with the items of `metas` added, all newer (higher ids) than those it holds: what a
        namespace appended since it was built. Equal to building the table anew from every item, for the cost of
        the new items (and the people's clustering), not of reading and walking the whole namespace again."""
        ids = sorted(metas)
        if ids and self.ids and ids[0] <= self.ids[-1]:
            raise ValueError("a turn table grows by newer items only")
        speakers = list(dict.fromkeys([*self.speakers, *(str(metas[i].get("speaker") or "") for i in ids)]))
        mentioned = self.mentioned + Counter(name for i in ids for name in metas[i].get("people") or [])
        # Clustering compares names pairwise: only the names that recur take part (a long haystack names hundreds
        # of things once); any other name is still matched by its own form (`about`).
        common = {name for name, _ in mentioned.most_common(MAX_CLUSTERED)}
        people = PersonIndex.build([s for s in speakers if s], [n for n in mentioned.elements() if n in common])
        by_form: dict[str, set[int]] = {}
        said_by: dict[str, set[int]] = {}
        forms: dict[str, str] = {}  # this call's: the same few speakers and names recur on every turn
        spans, unparsed = list(self.spans), self.unparsed
        standing = dict(self.standing)
        for pos, i in enumerate(ids, start=len(self.ids)):
            meta = metas[i]
            if meta.get("standing") in STANDING_TYPES:
                standing[pos] = str(meta["standing"])
            said_by.setdefault(str(meta.get("speaker") or ""), set()).add(pos)
            for name in [str(meta.get("speaker") or ""), *(meta.get("people") or [])]:
                form = forms.get(name)
                if form is None:
                    form = forms[name] = normalise_name(name)
                if form:
                    by_form.setdefault(form, set()).add(pos)
            when = meta.get("date")
            item_spans = []
            if when:
                day = datetime.fromisoformat(when).date()
                item_spans.append((day, day))
            elif meta.get("timestamp") and meta.get("form") == FORM:  # older items never parsed theirs
                unparsed += 1
            item_spans += [(date.fromisoformat(s), date.fromisoformat(e)) for s, e, *_ in meta.get("dates") or []]
            spans.append(item_spans)
        frozen = dict(self.by_form)
        for form, items in by_form.items():
            frozen[form] = frozen.get(form, frozenset()) | items
        said = dict(self.said_by)
        for speaker, items in said_by.items():
            said[speaker] = said.get(speaker, frozenset()) | items
        position = dict(self.position)
        position.update((item, n) for n, item in enumerate(ids, start=len(self.ids)))
        return TurnTable(
            [*self.ids, *ids], position, people, frozen, spans, unparsed, speakers, mentioned, said, standing
        )

    def recurs(self, name: str, at_least: int) -> bool:
        """Whether `name` is said by or named in at least `at_least` items (by its normalised form, remembered for
        the table's life: a search asks about the same few names hundreds of times)."""
        forms = self._forms
        form = forms.get(name)
        if form is None:
            if len(forms) >= MAX_FORMS:  # names from questions are unbounded: start again
                forms.clear()
            form = forms[name] = normalise_name(name)
        return len(self.by_form.get(form, ())) >= at_least

    @cached_property
    def name_words(self) -> frozenset[str]:
        """The words of the names said by or named in at least two items (normalised, lower-cased): what tells
        one goal from its look-alike beside its numbers ("Paula's book club night", "Elias's")."""
        return frozenset(w for form, items in self.by_form.items() if len(items) >= 2 for w in form.split())

    @cached_property
    def _forms(self) -> dict[str, str]:
        return {}

    @cached_property
    def speaker_people(self) -> PersonIndex | None:
        """The speakers with names, clustered (`index.names.speaker_index`): built on the table's first question,
        not on every one (pairwise over the speakers)."""
        return speaker_index(self.speakers)

    def said_by_each(self, query: str) -> list[tuple[str, set[str], frozenset[int]]]:
        """Each speaker `query` names (`index.names.named_speakers`): its name, the forms it goes by and the
        positions of the items it said."""
        return [
            (name, forms, frozenset().union(*(self.said_by.get(form, frozenset()) for form in forms)))
            for name, forms in named_speakers(query, self.speaker_people)
        ]

    def about(self, people: dict[str, float], query: str) -> frozenset[int]:
        """The items said by or naming the people a question refers to: every form of each matched person (its
        aliases, nicknames included), and any other name of the question by its own form."""
        forms: set[str] = set()
        for name in people:
            forms |= {normalise_name(a) for a in self.people.aliases(name) | {name}}
        forms |= {normalise_name(n) for n in candidate_names(query)}
        hits: set[int] = set()
        for form in forms:
            hits |= self.by_form.get(form, frozenset())
        return frozenset(hits)


@dataclass
class QueryStructure:
    """What a question asks about beyond its words: people (canonical name -> match score) and a date window."""

    people: dict[str, float]
    window: DateSpan | None
    about: frozenset[int]  # positions in the TurnTable of the items by or about those people
    said: frozenset[int] = frozenset()  # positions of the items said by the one speaker the question names
    # every speaker the question names: (name, forms, positions of the items it said); read once per question
    speakers: list[tuple[str, set[str], frozenset[int]]] = field(default_factory=list)

    @classmethod
    def read(cls, query: str, table: TurnTable, now: str | None = None) -> QueryStructure:
        reference = parse_timestamp(now) if now else None
        people = table.people.match_query(query)
        speakers = table.said_by_each(query)
        said = speakers[0][2] if len(speakers) == 1 else frozenset()  # the said boost: one speaker named, not two
        return cls(people, query_window(query, reference), table.about(people, query), said, speakers)

    def describe(self) -> dict[str, Any]:
        window = None if self.window is None else self.window.label()
        return {"people": sorted(self.people), "window": window}


def structural_boost(
    table: TurnTable,
    scored: Sequence[tuple[int, float]],
    asked: QueryStructure,
    speaker_boost: float,
    date_boost: float,
    said_boost: float = 0.0,
) -> list[tuple[int, float]]:
    """Re-rank (item id, score) pairs: an item about a person the question names gains `speaker_boost` of its
    score, one dated inside the question's window `date_boost`, and one said by the one speaker the question names
    `said_boost` of the best score (a share of the best, so that the gain is the same on any engine's scale); the
    others keep theirs. Best first."""
    window = asked.window
    boosts_people = asked.about and speaker_boost > 0
    boosts_said = asked.said and said_boost > 0
    if not boosts_people and not boosts_said and (window is None or date_boost == 0):
        return sorted(scored, key=lambda x: -x[1])
    best = max((abs(score) for _, score in scored), default=0.0)
    out = []
    for item, score in scored:
        pos = table.position.get(item)
        gain = bonus = 0.0
        if pos is not None:
            if pos in asked.about:
                gain += speaker_boost
            if window is not None and any(s <= window.end and e >= window.start for s, e in table.spans[pos]):
                gain += date_boost
            if pos in asked.said:
                bonus = said_boost * best
        out.append((item, score * (1.0 + gain) + bonus))
    return sorted(out, key=lambda x: -x[1])


__all__ = [
    "FORM",
    "QueryStructure",
    "TurnTable",
    "hit_text",
    "session_header",
    "session_heading",
    "structural_boost",
    "turn_fields",
    "with_header_tokens",
]


def context_block(hits: Sequence[Hit]) -> tuple[str, list[str]]:
    """Excerpts for the prompt, each led by its turn ids, and those ids (the only ones that may be cited).

    Hits whose session and date are fields are grouped into session blocks in date order, each under one header
    ("## 8 May 2023 (session D3)"), keeping rank order inside a block; other hits follow as they came."""
    blocks: dict[str, list[Hit]] = {}
    loose: list[Hit] = []
    for hit in hits:
        key = session_key(hit)
        if key is None:
            loose.append(hit)
        else:
            blocks.setdefault(key, []).append(hit)
    lines: list[str] = []
    ids: list[str] = []

    def excerpt(hit: Hit) -> None:
        lines.append(f"[{','.join(hit.turn_ids)}] {hit.text}")
        ids.extend(t for t in hit.turn_ids if t not in ids)

    for members in sorted(blocks.values(), key=lambda block: _block_date(block[0])):
        lines.append(session_heading(members[0].detail))
        for hit in members:
            excerpt(hit)
    for hit in loose:
        excerpt(hit)
    return "\n".join(lines), ids


def _block_date(hit: Hit) -> tuple[int, str]:
    """Blocks with a parsed date first, in date order; the others after them."""
    when = hit.detail.get("date")
    return (0, str(when)) if when else (1, "")
