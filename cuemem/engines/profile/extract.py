"""Model extraction of the hybrid preference memory (design 3, the report's LLM extractor), where a model is
configured: one flat JSON object (type, key, new key, value, confidence) read from a window of recent turns. The
key is decoded under constraint from the namespace's existing keys plus "(new key)" (docs/design.md promise 5), so the
key vocabulary does not fragment; model output is untrusted and checked (a value must come from the window)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, create_model

from ...llm import LLMClient, LLMError
from ...types import Turn
from .records import Candidate, normalise
from .rules import MAX_SPAN, clean_value

NEW_KEY = "(new key)"
MODEL_TYPES = ("preference", "profile", "episodic", "none")
SEED_KEYS = ("home", "job", "employer", "allergy", "diet", "favourite food", "favourite drink", "hobby")
MAX_KEYS = 40
_WORD = re.compile(r"[a-z0-9]{3,}")
_KEY = re.compile(r"^[a-z][a-z0-9' -]{0,38}[a-z0-9]$")

PROMPT = (
    "Read the conversation. Does the LAST message state a lasting fact about its speaker ({subject}): a "
    "preference, a profile fact (home, job, family, possessions) or a dated event or plan? If so, give its type, "
    'its key (one of the keys offered, or "(new key)" and a short new key), its value in a few words taken from '
    'the message, and your confidence from 0 to 1. If not, type "none".'
)


def fact_schema(keys: Sequence[str]) -> type[BaseModel]:
    """The flat schema of one extracted fact, the key an enum of `keys` plus "(new key)"."""
    options = tuple(dict.fromkeys([*keys, NEW_KEY]))
    return create_model(
        "Fact",
        type=(Literal[MODEL_TYPES], ...),  # type: ignore[arg-type]
        key=(Literal[options], ...),  # type: ignore[arg-type]
        new_key=(str, Field("", max_length=40)),
        value=(str, Field(..., max_length=120)),
        confidence=(float, Field(..., ge=0, le=1)),
    )


def vocabulary(existing: Sequence[str]) -> list[str]:
    """The keys a model may choose: the namespace's slot names (most recent first), then the seed keys."""
    return list(dict.fromkeys([*existing, *SEED_KEYS]))[:MAX_KEYS]


def model_candidates(
    client: LLMClient, window: Sequence[Turn], subject: str, keys: Sequence[str], time: str | None
) -> tuple[list[Candidate], str]:
    """What the model reads in the last turn of `window` (at most one fact), and a note of why nothing was taken
    ("" when a fact was, else "none", "ungrounded", "bad key" or "failed: <error>")."""
    turn = window[-1]
    lines = "\n".join(f"{t.speaker}: {t.text[:600]}" for t in window)
    messages = [{"role": "system", "content": PROMPT.format(subject=subject)}, {"role": "user", "content": lines}]
    try:
        fact = client.json(messages, fact_schema(vocabulary(keys)), max_tokens=24)
    except LLMError as exc:
        return [], f"failed: {exc}"[:200]
    data = fact.model_dump()
    if data["type"] == "none":
        return [], "none"
    value = clean_value(str(data["value"]))
    if not value or not grounded(value, turn.text):
        return [], "ungrounded"
    key = data["key"]
    if key == NEW_KEY:
        key = normalise(str(data["new_key"]))
        if not _KEY.match(key) or len(key.split()) > 4:
            return [], "bad key"
    span = next((s for s in re.split(r"(?<=[.!?])\s+", turn.text) if value.lower()[:20] in s.lower()), turn.text)
    candidate = Candidate(
        type=data["type"],
        key=key,
        value=value,
        confidence=float(data["confidence"]) or 0.5,
        seq=turn.seq or 0,
        turn_id=turn.id,
        subject=subject,
        span=span.strip()[:MAX_SPAN],
        time=time,
        source="model",
        fixed_key=True,
    )
    return [candidate], ""


def grounded(value: str, text: str) -> bool:
    """A model's value must come from the message: most of its words (3+ letters) appear in it."""
    words = _WORD.findall(value.lower())
    if not words:
        return False
    present = set(_WORD.findall(text.lower()))
    return sum(w in present for w in words) * 2 >= len(words)
