"""The asked attribute (issue 34): once a search has found the goal a question is about, what decides among that
goal's turns is the rest of the question.

A turn's text is mostly its goal's name ("the status call for project Phoenix is at 5 pm"), and so is the
question's ("what is the cut-off for project Phoenix?"): every turn of the goal matches the question about as well,
whichever attribute it states. The *goal words* are the question's content words that most of the best candidates
say too; the question without them names the attribute it asks for ("what is the cut-off"), and the candidates are
ordered again by their similarity to that. Pure word bookkeeping: no word list, no knowledge of any domain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .text import _WORD, GENERAL_STOPWORDS, analyze


def goal_words(question: str, best: Sequence[str], share: int = 2) -> set[str]:
    """The question's content words that at least `share` of the `best` candidates' texts say too."""
    asked = set(analyze(question))
    said = Counter(word for text in best for word in set(analyze(text)) & asked)
    return {word for word, n in said.items() if n >= share}


def asked_attribute(question: str, goal: set[str]) -> str:
    """The question without its goal words ("what is the cut-off for project Phoenix" -> "what is the cut-off
    for"); "" when the question has no goal words to take out, or when no word would be left that says what is
    asked: none outside the general stop words ("how much is the", "where did I get my"; one such word, "which
    manager is it", is enough)."""
    if not goal:
        return ""
    words = _WORD.findall(question)
    kept = [w for w in words if _key(w) not in goal]
    if not analyze(" ".join(kept), stopwords=GENERAL_STOPWORDS):
        return ""
    return " ".join(kept)


def _key(word: str) -> str:
    word = word.lower()
    return word[:-2] if word.endswith("'s") else word


__all__ = ["asked_attribute", "goal_words"]
