"""Speakers and names as structure (issue 13): match the people a question names to a conversation's people.

A question naming a person ("What did Mel paint?", "When did Jon's dog die?") must reach the conversation's
speakers ("Melanie", "Jon", "user") and the people mentioned in its turns, through nicknames, spelling variants
and first-name-only references. Everything here is standard library and model-free: a nickname table (data),
a name normaliser, a token-level name similarity (nickname table, an orthographic variant key, Jaro-Winkler),
a capitalised-sequence name finder, and `PersonIndex`, which clusters a conversation's names into people.

Scores (see `name_similarity`): 1.0 equal names or one nickname group; 0.95 a first name alone against a full
name; 0.92 an orthographic variant ("Jon"/"John" aside, "Mel"/"Mell", "Katherine"/"Catherine"); Jaro-Winkler
(capped at 0.95) for other spellings of names of four letters or more; 0.9 x a last name alone against a full
name. Names of three letters or fewer match only exactly, by nickname or by variant key ("Tim" is not "Tom").
Generic speaker labels ("user", "assistant", "speaker 1") and non-Latin names ("李雷") match only exactly.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .names_tables import (
    DISTINCT_NAMES,
    GENERIC_LABELS,
    LEADING_VERBS,
    NAME_STOPWORDS,
    NICKNAME_GROUPS,
    NICKNAMES,
    TITLES,
)
from .text import STOPWORDS

__all__ = [
    "DEFAULT_THRESHOLD",
    "DISTINCT_NAMES",
    "GENERIC_LABELS",
    "NAME_STOPWORDS",
    "NICKNAMES",
    "Person",
    "PersonIndex",
    "candidate_names",
    "is_generic_label",
    "name_similarity",
    "named_speaker",
    "named_speakers",
    "nickname_group",
    "normalise_name",
    "speaker_index",
    "without_names",
]

DEFAULT_THRESHOLD = 0.85
MAX_TEXT = 5000  # characters of a question or turn looked at; the rest is ignored
_MAX_NAME = 200  # characters of one name compared
_MAX_TOKEN = 40  # characters of one name token given to Jaro-Winkler
_MAX_QUERY_NAMES = 32  # candidate names of one question resolved (and as many extra names)
_MAX_FORMS = 300  # distinct mentioned forms clustered by PersonIndex.build (clustering is quadratic)

FIRST_NAME_FACTOR = 0.95  # "Mel" against "Melanie Smith"
LAST_NAME_FACTOR = 0.9  # "Smith" against "Melanie Smith": high, but below a first-name match
VARIANT_SCORE = 0.92  # same orthographic variant key: "Mel"/"Mell", "Caroline"/"Carolyn"
FUZZY_CAP = 0.95  # Jaro-Winkler never ties an exact or nickname match

_GENERIC_NUMBERED = re.compile(r"(?:speaker|person|user|participant|agent|bot)\s*\d+")
_FOLD = str.maketrans({"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "ı": "i", "ß": "ss"})
_FOLD_MULTI = {"æ": "ae", "œ": "oe", "þ": "th", "ð": "d"}
_POSSESSIVE = re.compile(r"(?<=[^\W_])(?:['’]s|(?<=s)['’])(?=\W|$)", re.IGNORECASE)
_NON_WORD = re.compile(r"[\W_]+")
_SENTENCE_BREAK = re.compile(r"[.!?:;\"“\n]")
# Lowercase words inside a name of several words: "Taberna do Largo", "Casa da Música", "Ludwig van Beethoven".
NAME_PARTICLES = frozenset(("da", "das", "de", "del", "della", "der", "di", "do", "dos", "du", "van", "von"))
_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*(?:['’]s?)?")


def nickname_group(name: str) -> frozenset[str]:
    """All names the nickname table makes equivalent to `name` (normalised, itself included)."""
    key = normalise_name(name)
    if not key:
        return frozenset()
    return NICKNAME_GROUPS.get(key, frozenset({key}))


def normalise_name(name: str) -> str:
    """Fold accents, lower-case, drop possessives and punctuation, collapse spaces: "José's" -> "jose"."""
    if not isinstance(name, str) or not name:
        return ""
    text = _POSSESSIVE.sub("", name[:MAX_TEXT])
    text = re.sub(r"(?<=\w)['’](?=\w)", "", text)  # O'Brien -> OBrien
    text = unicodedata.normalize("NFKD", text.translate(_FOLD))
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    for src, dst in _FOLD_MULTI.items():
        text = text.replace(src, dst)
    return _NON_WORD.sub(" ", text).strip()


def is_generic_label(name: str) -> bool:
    """Whether a (speaker) label names a role such as "user" or "speaker 1" rather than a person."""
    key = normalise_name(name)
    return key in GENERIC_LABELS or bool(_GENERIC_NUMBERED.fullmatch(key))


def _jaro_winkler(a: str, b: str) -> float:
    """Jaro-Winkler similarity of two strings (prefix scale 0.1, prefix up to 4)."""
    if a == b:
        return 1.0
    la, lb = len(a), len(b)
    if not la or not lb:
        return 0.0
    window = max(max(la, lb) // 2 - 1, 0)
    used = [False] * lb
    matched_a = []
    for i, ch in enumerate(a):
        for j in range(max(0, i - window), min(lb, i + window + 1)):
            if not used[j] and b[j] == ch:
                used[j] = True
                matched_a.append(ch)
                break
    m = len(matched_a)
    if not m:
        return 0.0
    matched_b = [b[j] for j in range(lb) if used[j]]
    transpositions = sum(x != y for x, y in zip(matched_a, matched_b, strict=True)) / 2
    jaro = (m / la + m / lb + (m - transpositions) / m) / 3
    prefix = 0
    for x, y in zip(a[:4], b[:4], strict=False):
        if x != y:
            break
        prefix += 1
    return jaro + prefix * 0.1 * (1 - jaro)


def _variant_key(token: str) -> str:
    """A spelling-insensitive key: k->c, ph->f, y->i, inner h dropped, final e dropped (5+ letters), no doubles."""
    t = token.replace("ph", "f").replace("k", "c").replace("y", "i")
    t = t[:1] + t[1:].replace("h", "")
    if len(t) >= 5 and t.endswith("e"):
        t = t[:-1]
    return re.sub(r"(.)\1+", r"\1", t)


def _is_latin(token: str) -> bool:
    """Whether a normalised token is plain ASCII (Latin after folding), so fuzzy matching applies."""
    return token.isascii()


@lru_cache(maxsize=65536)
def _token_similarity(a: str, b: str) -> float:
    """Similarity of two normalised single-word names."""
    if a == b:
        return 1.0
    if not a or not b or not _is_latin(a) or not _is_latin(b) or a.isdigit() or b.isdigit():
        return 0.0
    if b in NICKNAME_GROUPS.get(a, ()):
        return 1.0
    if frozenset((a, b)) in DISTINCT_NAMES:
        return 0.0
    if _variant_key(a) == _variant_key(b):
        return VARIANT_SCORE
    if min(len(a), len(b)) <= 3:
        return 0.0
    return min(_jaro_winkler(a[:_MAX_TOKEN], b[:_MAX_TOKEN]), FUZZY_CAP)


def _tokens(key: str) -> list[str]:
    """Name tokens with leading titles ("dr", "mrs") dropped, unless nothing else is left."""
    toks = key.split()
    while len(toks) > 1 and toks[0] in TITLES:
        toks = toks[1:]
    return toks


def name_similarity(a: str, b: str) -> float:
    """How likely two name strings denote the same person, in [0, 1]."""
    na, nb = (
        normalise_name(a[:_MAX_NAME] if isinstance(a, str) else ""),
        normalise_name(b[:_MAX_NAME] if isinstance(b, str) else ""),
    )
    return _key_similarity(na, nb)


@lru_cache(maxsize=65536)
def _key_similarity(na: str, nb: str) -> float:
    """`name_similarity` of two normalised names."""
    if not na or not nb:
        return 0.0
    if na == nb:
        return 1.0
    if is_generic_label(na) or is_generic_label(nb):
        return 0.0
    ta, tb = _tokens(na), _tokens(nb)
    if ta == tb:
        return 1.0
    if "".join(ta) == "".join(tb):  # "Mary-Jane" / "Maryjane"
        return FIRST_NAME_FACTOR
    if len(ta) == 1 and len(tb) == 1:
        return _token_similarity(ta[0], tb[0])
    if len(ta) == 1 or len(tb) == 1:
        single, full = (ta[0], tb) if len(ta) == 1 else (tb[0], ta)
        return max(
            FIRST_NAME_FACTOR * _token_similarity(single, full[0]),
            LAST_NAME_FACTOR * _token_similarity(single, full[-1]),
        )
    first = _token_similarity(ta[0], tb[0])
    last = _token_similarity(ta[-1], tb[-1])
    score = min(first, last)
    short, long_ = (ta, tb) if len(ta) < len(tb) else (tb, ta)
    if len(short) < len(long_):  # "Mary Ann" against "Mary Ann Smith": a prefix of the longer name
        prefix = min(_token_similarity(x, y) for x, y in zip(short, long_, strict=False))
        score = max(score, FIRST_NAME_FACTOR * prefix)
    return score


def _strip_possessive(word: str) -> tuple[str, bool]:
    """Split a trailing possessive off a word: "Jon's" -> ("Jon", True), "Jones'" -> ("Jones", True)."""
    word = word.replace("’", "'")
    if len(word) > 2 and word[-2:].lower() == "'s":
        return word[:-2], True
    if len(word) > 1 and word.endswith("'"):
        return word[:-1], True
    return word, False


def candidate_names(text: str) -> list[str]:
    """Capitalised word sequences in a question or turn that look like person names, in order, unique."""
    if not isinstance(text, str) or not text:
        return []
    text = text[:MAX_TEXT]
    lower_words = {m.group(0) for m in _WORD.finditer(text) if m.group(0)[0].islower()}
    out: list[str] = []
    seen: set[str] = set()
    seq: list[str] = []

    def flush() -> None:
        """Emit the pending sequence as one candidate."""
        if seq:
            name = " ".join(seq)
            key = normalise_name(name)
            if key and key not in seen:
                seen.add(key)
                out.append(name)
            seq.clear()

    prev_end = 0
    particle = ""  # a lowercase particle after a name word, kept if a name word follows ("Taberna do Largo")
    for m in _WORD.finditer(text):
        gap = text[prev_end : m.start()]
        sentence_start = prev_end == 0 or bool(_SENTENCE_BREAK.search(gap))
        prev_end = m.end()
        if gap.strip() or "\n" in gap:
            flush()
            particle = ""
        base, possessive = _strip_possessive(m.group(0))
        if seq and not particle and not possessive and base in NAME_PARTICLES and not _given_name(seq[-1]):
            particle = base  # not after a given name: "Did Anna do Pilates?" names Anna
            continue
        if (
            len(base) < 2
            or not base[0].isupper()
            or base.lower() in NAME_STOPWORDS
            or base.isupper()  # acronyms: LGBTQ, NASA
            or (sentence_start and base.lower() in lower_words)  # "Painting is fun ... painting"
            or (sentence_start and base.lower() in LEADING_VERBS)  # "Forget Garden Room"
        ):
            flush()
            particle = ""
            continue
        if particle:
            seq.append(particle)
            particle = ""
        seq.append(base)
        if possessive:
            flush()
    flush()
    return out


def _given_name(word: str) -> bool:
    """Whether a word is a given name of the nickname table ("Anna", "Melanie")."""
    return normalise_name(word) in NICKNAME_GROUPS


def _capitalised_mid_sentence(word: str, text: str) -> bool:
    """Whether `word` occurs capitalised in `text` other than as the first word of a sentence."""
    for m in re.finditer(rf"\b{re.escape(word.capitalize())}\b", text):
        before = text[: m.start()].rstrip()
        if before and before[-1] not in '.!?:"“\n':
            return True
    return False


@dataclass
class Person:
    """One person of a conversation: a canonical name, the forms seen for it, and whether it is a speaker."""

    name: str
    aliases: set[str] = field(default_factory=set)
    speaker: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    _forms: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def forms(self) -> frozenset[str]:
        """The normalised forms of the canonical name and aliases."""
        if self._forms is None:
            self._forms = frozenset(k for k in (normalise_name(a) for a in {self.name, *self.aliases}) if k)
        return self._forms


@dataclass
class PersonIndex:
    """The people of a conversation: speakers and mentioned names clustered by name similarity."""

    persons: list[Person] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # mention -> the people it could be
    threshold: float = DEFAULT_THRESHOLD

    @classmethod
    def build(
        cls, speakers: Sequence[str], mentioned: Sequence[str] = (), threshold: float = DEFAULT_THRESHOLD
    ) -> PersonIndex:
        """Cluster speakers (each its own person) and mentioned names into people."""
        index = cls(threshold=threshold)
        seen_speakers: set[str] = set()
        for label in list(speakers or ())[:_MAX_FORMS]:
            if not isinstance(label, str):
                continue
            label = label.strip()[:_MAX_NAME]
            key = normalise_name(label)
            if key and key not in seen_speakers:
                seen_speakers.add(key)
                index.persons.append(Person(name=label, aliases={label}, speaker=True))
        surfaces: dict[str, Counter[str]] = {}
        read: dict[str, tuple[str, str]] = {}  # a mention -> (surface, key): a name recurs, its reading does not change
        for raw in list(mentioned or ())[: 50 * _MAX_FORMS]:
            if not isinstance(raw, str):
                continue
            if raw not in read:
                surface, _ = _strip_possessive(raw.strip()[:_MAX_NAME])
                read[raw] = (surface, normalise_name(surface))
            surface, key = read[raw]
            if key:
                surfaces.setdefault(key, Counter())[surface] += 1
        # Full names first, then frequent and long forms: they anchor the people shorter forms attach to.
        pending = sorted(surfaces, key=lambda k: (-len(k.split()), -sum(surfaces[k].values()), -len(k), k))
        pending = pending[:_MAX_FORMS]
        scores: dict[str, dict[int, float]] = {k: {} for k in pending}
        dirty = set(range(len(index.persons)))
        while pending:
            for key in pending:  # rescore only the people that changed since the last pass
                for i in dirty:
                    scores[key][i] = index._person_score(index.persons[i], key)
            dirty = set()
            rest: list[str] = []
            for key in pending:
                surface = surfaces[key].most_common(1)[0][0]
                exact = [i for i, p in enumerate(index.persons) if key in p.forms()]
                ranked = sorted(((s, i) for i, s in scores[key].items() if s >= threshold), reverse=True)
                if len(exact) == 1:
                    target = exact[0]
                elif len(ranked) == 1 or (ranked and ranked[0][0] - ranked[1][0] >= 0.05):
                    target = ranked[0][1]
                elif ranked:  # "Jon" among "Jon Snow" and "Jon Arryn": attached to neither
                    best = ranked[0][0]
                    index.ambiguous[surface] = sorted(index.persons[i].name for s, i in ranked if best - s < 0.05)
                    continue
                else:
                    rest.append(key)
                    continue
                index._add(index.persons[target], key, surfaces[key])
                dirty.add(target)
            if not dirty and rest:
                # Nothing attached: each remaining form like no person founds one, most prominent first; forms
                # like a person (even one founded just now) wait for the next pass, where ties make them ambiguous.
                held: list[str] = []
                for key in rest:
                    if any(index._person_score(index.persons[i], key) >= threshold for i in dirty):
                        held.append(key)
                        continue
                    index.persons.append(Person(name=surfaces[key].most_common(1)[0][0]))
                    index._add(index.persons[-1], key, surfaces[key])
                    dirty.add(len(index.persons) - 1)
                rest = held
            pending = rest
        for person in index.persons:
            if not person.speaker and person.counts:
                best_key = max(person.counts, key=lambda k: (len(k.split()), person.counts[k], len(k), k))
                person.name = next(a for a in sorted(person.aliases) if normalise_name(a) == best_key)
                person._forms = None
        return index

    @staticmethod
    def _add(person: Person, key: str, surfaces: Counter[str]) -> None:
        """Record a mentioned form (all its surface spellings) as an alias of a person."""
        person.aliases.update(surfaces)
        person._forms = None
        person.counts[key] += sum(surfaces.values())

    def _person_score(self, person: Person, key: str) -> float:
        """Best similarity of a normalised name to a person's forms; 0 where it contradicts one of them."""
        best = 0.0
        toks = _tokens(key)
        first = toks[0] if toks else ""
        for alias in person.forms():
            score = _key_similarity(key, alias)
            alias_toks = _tokens(alias)
            if len(toks) > 1 and len(alias_toks) > 1 and score < self.threshold:
                return 0.0  # "Jon Arryn" is not the person already known as "Jon Snow"
            other = alias_toks[0] if alias_toks else ""
            given_names = first in NICKNAMES and other in NICKNAMES and other not in NICKNAME_GROUPS[first]
            if given_names and _token_similarity(first, other) < self.threshold:
                return 0.0  # two given names, neither a variant of the other: "Melissa" is not "Melanie" ("Mel")
            best = max(best, score)
        return best

    def people(self) -> list[str]:
        """Canonical names of the people: speakers first, then mentioned people in order of discovery."""
        return [p.name for p in self.persons]

    def _person(self, name: str) -> Person | None:
        """The person with this canonical name (exactly, else by normalised form)."""
        for p in self.persons:
            if p.name == name:
                return p
        key = normalise_name(name)
        return next((p for p in self.persons if normalise_name(p.name) == key), None) if key else None

    def aliases(self, person: str) -> set[str]:
        """The surface forms seen for a person (its canonical name included); empty for an unknown person."""
        found = self._person(person)
        return set() if found is None else {found.name, *found.aliases}

    def resolve(self, name: str, threshold: float = DEFAULT_THRESHOLD) -> list[tuple[str, float]]:
        """Canonical people a name may denote, with scores, best first (exact-form matches before ties)."""
        key = normalise_name(name[:_MAX_NAME] if isinstance(name, str) else "")
        if not key:
            return []
        ranked: list[tuple[float, bool, str]] = []
        for p in self.persons:
            keys = p.forms()
            score = self._person_score(p, key)
            if score >= threshold:
                ranked.append((score, key in keys, p.name))
        ranked.sort(key=lambda t: (-t[0], not t[1], t[2]))
        return [(n, s) for s, _, n in ranked]

    def match_query(
        self, query: str, extra_names: Iterable[str] = (), threshold: float = DEFAULT_THRESHOLD
    ) -> dict[str, float]:
        """People a question refers to, best score each: its candidate names (plus `extra_names`, e.g. NER
        PERSON entities) resolved, and any known alias appearing in it as a whole word (case-insensitive)."""
        if not isinstance(query, str):
            return {}
        query = query[:MAX_TEXT]
        scores: dict[str, float] = {}
        exact: set[str] = set()
        for name in [*candidate_names(query)[:_MAX_QUERY_NAMES], *list(extra_names or ())[:_MAX_QUERY_NAMES]]:
            key = normalise_name(name[:_MAX_NAME] if isinstance(name, str) else "")
            for person, score in self.resolve(name, threshold):
                scores[person] = max(scores.get(person, 0.0), score)
                found = self._person(person)
                if key and found is not None and key in found.forms():
                    exact.add(person)
        padded = f" {normalise_name(query)} "
        for p in self.persons:
            for alias in p.forms():
                if alias in STOPWORDS and not is_generic_label(alias):
                    hit = _capitalised_mid_sentence(alias, query)  # "Will", not "will" nor "Will you ...?"
                else:
                    hit = f" {alias} " in padded if alias.isascii() else alias in padded
                if hit:
                    scores[p.name] = 1.0
                    exact.add(p.name)
        return dict(sorted(scores.items(), key=lambda kv: (-kv[1], kv[0] not in exact)))


SPEAKER_MATCH = 0.95  # how sure the match of a name in a question to a speaker must be (a first name: 0.95)


def speaker_index(speakers: Iterable[Any]) -> PersonIndex | None:
    """The people among a conversation's speakers that have names (generic labels such as "user" are no one's
    name), clustered as `PersonIndex` does; None where fewer than two have one (nothing to tell apart)."""
    named = list(dict.fromkeys(s for s in speakers if isinstance(s, str) and s and not is_generic_label(s)))
    return PersonIndex.build(named) if len(named) >= 2 else None


def named_speakers(question: str, people: PersonIndex | None) -> list[tuple[str, set[str]]]:
    """Every speaker that `question` names, each with the forms it goes by ("Melanie", "Mel"), among `people`, a
    `speaker_index` of a conversation's speakers (None: fewer than two have names, so none is named)."""
    if people is None:
        return []
    named = [p for p, score in people.match_query(question).items() if score >= SPEAKER_MATCH]
    return [(p, {p, *people.aliases(p)}) for p in named]


def named_speaker(question: str, people: PersonIndex | None) -> tuple[str, set[str]] | None:
    """The one speaker that `question` names (`named_speakers`); None where it names none or several."""
    named = named_speakers(question, people)
    return named[0] if len(named) == 1 else None


_TOKEN = re.compile(r"[^\W_][\w'’.-]*")


def without_names(text: str, forms: Iterable[str]) -> str:
    """`text` with every run of up to three words whose normalised form is one of `forms` taken out (possessives
    too): "What do Jon and Gina both like?" without Gina -> "What do Jon and both like?"."""
    wanted = {normalise_name(f) for f in forms} - {""}
    if not isinstance(text, str) or not wanted:
        return text if isinstance(text, str) else ""
    tokens = list(_TOKEN.finditer(text[:MAX_TEXT]))
    cut: list[tuple[int, int]] = []
    i = 0
    while i < len(tokens):
        for n in (3, 2, 1):
            run = tokens[i : i + n]
            if len(run) == n and normalise_name(" ".join(m.group() for m in run)) in wanted:
                cut.append((run[0].start(), run[-1].end()))
                i += n
                break
        else:
            i += 1
    for start, end in reversed(cut):
        text = text[:start] + text[end:]
    return re.sub(r"\s+([,;:?!.])", r"\1", re.sub(r"\s+", " ", text)).strip()
