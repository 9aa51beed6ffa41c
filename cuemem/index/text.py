"""Lexical analysis shared by every lexical index: lower-casing, word split, English stop words."""

from __future__ import annotations

import re

# The common English stop-word list (as in scikit-learn / bm25s "en"), kept small and explicit.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves s t don
    """.split()  # noqa: SIM905
)

# Lucene's English stop words (the `bm25s` package's "en"), for comparisons with that common setup.
LUCENE_STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there these they
    this to was will with""".split()  # noqa: SIM905
)

# The rest of spaCy's English stop words (its `STOP_WORDS`, MIT licence; the alphabetic ones): words that say
# nothing of what a question asks ("how much", "where did I get"). Not used for indexing.
GENERAL_STOPWORDS = STOPWORDS | frozenset(
    """
    across afterwards almost alone along already also although always among amongst amount another anyhow anyone
    anything anyway anywhere around back became become becomes becoming beforehand behind beside besides beyond
    bottom ca call cannot done due eight either eleven else elsewhere empty enough even ever every everyone
    everything everywhere except fifteen fifty first five former formerly forty four front full get give go
    hence hereafter hereby herein hereupon however hundred indeed keep last latter latterly least less made make
    many may meanwhile might mine moreover mostly move much must name namely neither never nevertheless next
    nine nobody none noone nothing nowhere often one onto others otherwise part per perhaps please put quite
    rather re really regarding say see seem seemed seeming seems serious several show side since six sixty
    somehow someone something sometime sometimes somewhere still take ten thence thereafter thereby therefore
    therein thereupon third though three throughout thru thus together top toward towards twelve twenty two
    unless upon us used using various via well whatever whence whenever whereafter whereas whereby wherein
    whereupon wherever whether whither whoever whole whose within without yet
    """.split()  # noqa: SIM905
)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_WORD2 = re.compile(r"(?u)\b\w\w+\b")


def analyze(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Lower-cased word tokens without stop words; possessive "'s" is dropped ("Caroline's" -> "caroline")."""
    out = []
    for tok in _WORD.findall(text.lower()):
        if tok.endswith("'s"):
            tok = tok[:-2]
        if tok and tok not in stopwords:
            out.append(tok)
    return out


def analyze_lucene(text: str) -> list[str]:
    """The `bm25s` default analysis: lower-cased tokens of 2+ word characters, Lucene's 33 stop words removed."""
    return [t for t in _WORD2.findall(text.lower()) if t not in LUCENE_STOPWORDS]


ANALYZERS = {"extended": analyze, "lucene": analyze_lucene}
