"""Retrieval and answer metrics, each checked against hand-computed cases in tests/test_bench_metrics.py."""

from __future__ import annotations

import math
import re
import statistics
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

# ------------------------------------------------------------------ retrieval


def mean(values: Sequence[float]) -> float:
    """The mean of the values that are not NaN (NaN when none is left): figures with nothing to average over
    are NaN and stay out of averages."""
    kept = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(kept) if kept else math.nan


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank p-th percentile of the values (NaN for none)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def cited(hit_turn_ids: Sequence[Sequence[str]], k: int | None = None) -> set[str]:
    """The turn ids cited by the first k hits (all hits when k is None)."""
    return {t for ids in hit_turn_ids[: k if k is not None else len(hit_turn_ids)] for t in ids}


def evidence_recall(hit_turn_ids: Sequence[Sequence[str]], evidence: Sequence[str], k: int | None = None) -> float:
    """The fraction of a question's evidence turns among the turns the top-k hits cite."""
    if not evidence:
        return math.nan
    return len(set(evidence) & cited(hit_turn_ids, k)) / len(set(evidence))


def ndcg(hit_turn_ids: Sequence[Sequence[str]], evidence: Sequence[str], k: int = 10) -> float:
    """NDCG@k with binary gains over the cited turns in rank order (a hit citing several turns takes several
    positions; a turn cited again counts once), so a perfect ranking scores 1 whatever the hits' sizes."""
    wanted = set(evidence)
    if not wanted:
        return math.nan
    turns = list(dict.fromkeys(t for ids in hit_turn_ids for t in ids))[:k]
    dcg = sum(1.0 / math.log2(rank + 1) for rank, t in enumerate(turns, start=1) if t in wanted)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


# ------------------------------------------------------------------ answers: LoCoMo's official token F1


class _Porter:
    """The original Porter (1980) stemmer. LoCoMo's scorer uses NLTK's default mode, which adds a few extensions
    (e.g. for "-ies" on short words and "dying"); stems differ only on such rare words."""

    vowels = frozenset("aeiou")

    def _cons(self, w: str, i: int) -> bool:
        if w[i] in self.vowels:
            return False
        if w[i] == "y":
            return i == 0 or not self._cons(w, i - 1)
        return True

    def _m(self, stem: str) -> int:
        form = "".join("c" if self._cons(stem, i) else "v" for i in range(len(stem)))
        return form.count("vc")

    def _has_vowel(self, stem: str) -> bool:
        return any(not self._cons(stem, i) for i in range(len(stem)))

    def _double_cons(self, w: str) -> bool:
        return len(w) >= 2 and w[-1] == w[-2] and self._cons(w, len(w) - 1)

    def _cvc(self, w: str) -> bool:
        if len(w) < 3:
            return False
        return (
            self._cons(w, len(w) - 3)
            and not self._cons(w, len(w) - 2)
            and self._cons(w, len(w) - 1)
            and w[-1] not in "wxy"
        )

    def _replace(self, w: str, suffix: str, repl: str, cond: int = 0) -> str | None:
        if w.endswith(suffix):
            stem = w[: len(w) - len(suffix)]
            return stem + repl if self._m(stem) > cond else w
        return None

    def stem(self, w: str) -> str:
        if len(w) <= 2:
            return w
        # 1a
        if w.endswith("sses") or w.endswith("ies"):
            w = w[:-2]
        elif w.endswith("ss"):
            pass
        elif w.endswith("s"):
            w = w[:-1]
        # 1b
        flag = False
        if w.endswith("eed"):
            if self._m(w[:-3]) > 0:
                w = w[:-1]
        elif w.endswith("ed") and self._has_vowel(w[:-2]):
            w, flag = w[:-2], True
        elif w.endswith("ing") and self._has_vowel(w[:-3]):
            w, flag = w[:-3], True
        if flag:
            if w.endswith(("at", "bl", "iz")):
                w += "e"
            elif self._double_cons(w) and w[-1] not in "lsz":
                w = w[:-1]
            elif self._m(w) == 1 and self._cvc(w):
                w += "e"
        # 1c
        if w.endswith("y") and self._has_vowel(w[:-1]):
            w = w[:-1] + "i"
        for table, cond in ((STEP2, 0), (STEP3, 0)):
            for suffix, repl in table:
                if w.endswith(suffix):
                    out = self._replace(w, suffix, repl, cond)
                    w = out if out is not None else w
                    break
        # 4
        for suffix in STEP4:
            if w.endswith(suffix):
                stem = w[: len(w) - len(suffix)]
                if self._m(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                    w = stem
                break
        # 5
        if w.endswith("e"):
            stem = w[:-1]
            if self._m(stem) > 1 or (self._m(stem) == 1 and not self._cvc(stem)):
                w = stem
        if self._m(w) > 1 and self._double_cons(w) and w.endswith("l"):
            w = w[:-1]
        return w


STEP2 = [
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("abli", "able"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
]
STEP3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""), ("ness", "")]
STEP4 = [
    "ement",
    "ance",
    "ence",
    "able",
    "ible",
    "ment",
    "ant",
    "ent",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
    "ion",
    "al",
    "er",
    "ic",
    "ou",
]
STEP4.sort(key=len, reverse=True)
_stemmer = _Porter()


def stem(word: str) -> str:
    return _stemmer.stem(word)


def normalize_answer(text: str) -> str:
    """LoCoMo's scorer: lowercase, strip punctuation, the articles a/an/the and the word "and", fix spaces."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 over Porter-stemmed normalised tokens (LoCoMo's `f1_score`)."""
    pred = [stem(w) for w in normalize_answer(prediction).split()]
    truth = [stem(w) for w in normalize_answer(gold).split()]
    common = Counter(pred) & Counter(truth)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


NOT_MENTIONED = ("no information available", "not mentioned")


def locomo_f1(prediction: str, gold: str, category: str) -> float:
    """LoCoMo's official per-category scoring: cat 1 splits the gold on "," and averages each part's best match
    over the prediction's ","-parts; cat 3 keeps the gold up to the first ";"; cat 5 is 1 when the answer says the
    information is not mentioned / not available; otherwise plain token F1."""
    category = str(category)
    if category == "5":
        said = prediction.lower()
        return 1.0 if any(phrase in said for phrase in NOT_MENTIONED) else 0.0
    if category == "3":
        gold = gold.split(";")[0].strip()
    if category == "1":
        preds = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)
    return token_f1(prediction, gold)


def _plain_tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[\s" + re.escape(string.punctuation) + r"]+", str(text).lower()) if t]


def set_f1(prediction: str, gold: str) -> float:
    """The set-based F1 many memory papers report: lowercase, split on whitespace and punctuation, no stemming."""
    pred, truth = set(_plain_tokens(prediction)), set(_plain_tokens(gold))
    same = len(pred & truth)
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """BLEU-1: clipped unigram precision with the brevity penalty (one reference)."""
    pred, truth = _plain_tokens(prediction), _plain_tokens(gold)
    if not pred:
        return 0.0
    clipped = sum((Counter(pred) & Counter(truth)).values())
    precision = clipped / len(pred)
    penalty = 1.0 if len(pred) > len(truth) else math.exp(1 - len(truth) / len(pred))
    return penalty * precision


def wrong_top(
    ranked: Sequence[Sequence[str]], evidence: Sequence[str], superseded: Sequence[str], lookalikes: Sequence[str]
) -> dict[str, Any]:
    """The top-ranked wrong turn (the first turn, in rank order, that is not evidence) and whether it is a
    look-alike (the same attribute of another goal) or a superseded value of the asked one (issue 27's look-alike
    rate). A hit of several turns (an episode) is read in its own turn order."""
    gold = set(evidence)
    for ids in ranked:
        for turn in ids:
            if turn not in gold:
                return {
                    "wrong_top": turn,
                    "lookalike_top": float(turn in set(lookalikes)),
                    "superseded_top": float(turn in set(superseded)),
                }
    return {"wrong_top": None, "lookalike_top": 0.0, "superseded_top": 0.0}


def structured_scores(prediction: str, gold: str) -> dict[str, float]:
    """A reply against a structured answer (a name, an amount, a time): exact match after normalisation
    (lowercase, punctuation and articles dropped, thousands separators removed), whether the gold answer's tokens
    occur in the reply in order (`contains`), and token F1 over the same normal form."""
    pred, want = _structured(prediction), _structured(gold)
    contained = bool(want) and f" {want} " in f" {pred} "
    return {"em": float(pred == want and bool(want)), "contains": float(contained), "f1": token_f1(pred, want)}


def _structured(text: str) -> str:
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())  # 23,000 -> 23000
    text = re.sub(r"€\s*(\d+)", r"\1 euros", text)
    text = re.sub(r"[^\w\s:]", " ", text)
    text = re.sub(r"(?<!\d):|:(?!\d)", " ", text)  # keep 7:30, drop other colons
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))
