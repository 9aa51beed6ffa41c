"""Candidate concepts of a text, and what makes a string a valid concept key (SCG-MEM, design 2).

A concept key is a short normalised phrase ("apollo hotel", "marathon", "adoption agency"): lower-cased, NFKC,
without leading determiners or possessives, punctuation collapsed, at most `MAX_WORDS` words and `MAX_CHARS`
characters, not a stop word, a pronoun or a bare number. Model-free mode reads candidates off spaCy's analysis
(noun chunks, named entities and content-word keyphrases, each with its lemma form); model mode validates the
model's free proposals with the same `normalise_concept`, so both modes grow the same kind of schema.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...index.text import STOPWORDS
from ..stitch.analysis import LIGHT_VERBS as STITCH_LIGHT_VERBS
from ..stitch.analysis import load_spacy, named_and_stated, replaced_values

MAX_WORDS = 4
MAX_CHARS = 48

# Words that never start a concept (determiners, possessives, quantifiers) and nouns too general to be one.
LEADING = frozenset(
    "a an the this that these those my your his her its our their some any every each all no another such"  # noqa: SIM905
    " much many more most few several lots lot".split()
)
GENERIC = frozenset(
    "thing things stuff something anything everything nothing someone anyone everyone one ones lot lots way kind"  # noqa: SIM905
    " sort bit time times day days today tomorrow yesterday people person guy guys yeah yes okay ok hey hi hello"
    " wow thanks thank sure".split()
)
_PUNCT = re.compile(r"[^\w\s'&+-]+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"^[\d\s.,:/'-]+$")
# spaCy entity labels that name things worth a concept (dates, times and amounts are structure, not concepts)
ENTITY_LABELS = frozenset(("PERSON", "GPE", "LOC", "FAC", "ORG", "NORP", "WORK_OF_ART", "EVENT", "PRODUCT", "LANGUAGE"))
KEY_POS = frozenset(("NOUN", "PROPN"))
PHRASE_POS = frozenset(("NOUN", "PROPN", "ADJ", "NUM", "DET", "PRON"))  # DET / PRON: stripped when leading
# Verbs too general to be a concept (their lemma would link every turn): STITCH's light verbs and a few more.
LIGHT_VERBS = STITCH_LIGHT_VERBS | frozenset(
    "look love need try mean hope sound seem keep give put find use guess wish".split()  # noqa: SIM905
)


def normalise_concept(text: str) -> str | None:
    """The concept key a phrase stands for, or None when it is not a valid concept (section 3.1: keys are short,
    normalised phrases; anything else is refused before it can enter the schema)."""
    if not isinstance(text, str):
        return None
    s = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    s = _SPACE.sub(" ", _PUNCT.sub(" ", s)).strip(" '-&+")
    words = [w.strip("'-") for w in s.split(" ")]
    words = [w[:-2] if w.endswith("'s") else w for w in words if w]
    while words and words[0] in LEADING:
        words = words[1:]
    words = [w for w in words if w]
    if not words or len(words) > MAX_WORDS:
        return None
    key = " ".join(words)
    if len(key) > MAX_CHARS or len(key) < 2 or _NUMBER.match(key):
        return None
    if len(words) == 1 and (key in STOPWORDS or key in GENERIC):
        return None
    if all(w in STOPWORDS or w in GENERIC for w in words):
        return None
    return key


@dataclass
class Candidate:
    """One proposed concept: its key and its lemma form (the key of its inflections: "marathons" -> "marathon")."""

    key: str
    lemma: str
    kind: str  # "entity", "chunk", "keyword", "action" (a verb's lemma) or "model" (a model's proposal)


@dataclass
class TextConcepts:
    candidates: list[Candidate] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)  # what the text names: the goals it may be about (hop.py)
    values: list[str] = field(default_factory=list)  # times, amounts, dates and names said as values (hop.py)
    replaced: list[str] = field(default_factory=list)  # the values it names as the old ones (hop.py)


def _lemma_form(tokens: Sequence[Any]) -> str | None:
    return normalise_concept(" ".join(t.lemma_ if t.pos_ in KEY_POS or t.pos_ == "VERB" else t.text for t in tokens))


def _span_tokens(span: Any) -> list[Any]:
    """A span without interjections, adverbs, punctuation and leading determiners or possessives; a name keeps
    its proper nouns only ("hey Caroline" and "cool Caroline" are both "caroline")."""
    tokens = [t for t in span if t.pos_ in PHRASE_POS and t.lower_ not in GENERIC]
    if span.root.pos_ == "PROPN":
        tokens = [t for t in tokens if t.pos_ == "PROPN"]
    while tokens and (tokens[0].pos_ in ("DET", "PRON", "NUM") or tokens[0].lower_ in LEADING):
        tokens = tokens[1:]
    return tokens


def _concepts(doc: Any, limit: int, verbs: bool) -> TextConcepts:
    found: dict[str, Candidate] = {}

    def add(tokens: Sequence[Any], kind: str, lemma_it: bool = True) -> None:
        key = normalise_concept(" ".join(t.text for t in tokens))
        if key is None or key in found:
            return
        lemma = (_lemma_form(tokens) if lemma_it else key) or key
        found[key] = Candidate(key, lemma, kind)

    for ent in doc.ents:
        if ent.label_ in ENTITY_LABELS:
            add(_span_tokens(ent), "entity", lemma_it=False)
    for chunk in doc.noun_chunks:
        if chunk.root.pos_ == "PRON":
            continue
        tokens = _span_tokens(chunk)
        if tokens:
            add(tokens, "chunk")
            if len(tokens) > 1 and tokens[-1].pos_ in KEY_POS:  # the head alone links the phrase to its kind
                add(tokens[-1:], "keyword")
    for token in doc:
        if token.pos_ in KEY_POS and not token.is_stop:
            add([token], "keyword")
    if verbs:  # actions are concepts too: "camped" and "camping" both name "camp"
        for token in doc:
            lemma = token.lemma_.lower()
            if token.pos_ == "VERB" and lemma not in LIGHT_VERBS and not token.is_stop:
                key = normalise_concept(lemma)
                if key is not None and key not in found:
                    found[key] = Candidate(key, key, "action")
    # entities and phrases first: they are the most specific; keep the text order within each kind
    order = {"entity": 0, "chunk": 1, "keyword": 2, "action": 3}
    ranked = sorted(found.values(), key=lambda c: order[c.kind])
    named, stated = named_and_stated(doc)
    return TextConcepts(ranked[:limit], named, stated, replaced_values(doc, stated))


def extract_concepts(
    texts: Sequence[str], limit: int = 12, *, verbs: bool = True, batch_size: int = 64
) -> list[TextConcepts]:
    """Model-free candidate concepts of each text in one spaCy pass: named entities, noun chunks (with their head
    noun), content-word keyphrases and (with `verbs`) action lemmas, most specific first, at most `limit`."""
    nlp = load_spacy()
    return [_concepts(doc, limit, verbs) for doc in nlp.pipe([t[:5000] for t in texts], batch_size=batch_size)]


__all__ = ["Candidate", "TextConcepts", "extract_concepts", "normalise_concept"]
