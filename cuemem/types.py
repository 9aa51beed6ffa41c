"""Core value types: Turn, Namespace, Hit, Retrieval, Answer (docs/design.md, "Data flow")."""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

# Characters an id may not hold: controls, invisible format characters (bidi overrides and isolates, zero-width
# spaces and joiners, the byte-order mark), surrogates and line/paragraph separators. Ids that look alike must be
# alike, so these are refused rather than stored.
_REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
MAX_ID_CHARS = 1000  # the one length limit of every id: user, agent, run, turn, session, and a key's binding


class IdTooLongError(ValueError):
    """An id is longer than MAX_ID_CHARS characters (the server answers 422)."""


def check_id_length(value: str, name: str) -> str:
    """`value` when it is at most MAX_ID_CHARS characters, else IdTooLongError naming the id (issue 33)."""
    if len(value) > MAX_ID_CHARS:
        raise IdTooLongError(
            f"{name} is {len(value):,} characters, longer than {MAX_ID_CHARS:,}: every id is at most"
            f" {MAX_ID_CHARS:,} characters"
        )
    return value


@dataclass(frozen=True, order=True)
class Namespace:
    """A hard partition of memory: one user, optionally one agent and one run (docs/design.md promise 2).

    Ids are normalised here, once, for the API, the CLI and import alike: Unicode NFC (a composed and a decomposed
    "café" are one id) with surrounding whitespace stripped; an id holding a control or invisible character (bidi
    overrides, zero-width characters, U+FEFF) is refused with ValueError, one longer than MAX_ID_CHARS characters
    with IdTooLongError.
    """

    user_id: str
    agent_id: str | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("user_id", "agent_id", "run_id"):
            value = getattr(self, name)
            if value is None and name != "user_id":
                continue
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"namespace {name} must be a non-empty string, got {value!r}")
            clean = check_id_length(unicodedata.normalize("NFC", value).strip(), f"namespace {name}")
            bad = next((c for c in clean if unicodedata.category(c) in _REFUSED_CATEGORIES), None)
            if bad is not None:
                raise ValueError(
                    f"namespace {name} {clean!r} contains the control or invisible character U+{ord(bad):04X}"
                    f" ({unicodedata.name(bad, 'unnamed')}): ids that look alike must be alike; remove it"
                )
            object.__setattr__(self, name, clean)

    @classmethod
    def stored(cls, user_id: str, agent_id: str | None, run_id: str | None) -> Namespace:
        """A namespace as a store holds it, taken as it is: a store written before ids were normalised may hold
        one that a new Namespace would refuse, and listing, exporting or deleting it must still work."""
        namespace = object.__new__(cls)
        for name, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
            object.__setattr__(namespace, name, value)
        return namespace

    def __str__(self) -> str:
        parts = [f"user={self.user_id}"]
        if self.agent_id:
            parts.append(f"agent={self.agent_id}")
        if self.run_id:
            parts.append(f"run={self.run_id}")
        return ",".join(parts)

    def as_dict(self) -> dict[str, str | None]:
        return {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id}


@dataclass
class Turn:
    """One raw utterance of a conversation, as it was added; the unit of the durable log (promise 1)."""

    id: str
    text: str
    speaker: str = "user"
    session_id: str = "default"
    timestamp: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    namespace: Namespace | None = None
    seq: int | None = None  # position in the store's log, assigned on insert

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["namespace"] = self.namespace.as_dict() if self.namespace else None
        return data


@dataclass
class Hit:
    """One retrieved piece of history with its provenance: the ids of the turns it came from (promise 3)."""

    text: str
    score: float
    turn_ids: list[str]
    tokens: int = 0
    engine: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Retrieval:
    """What a search returns: ranked hits (packed into the token budget when one is given) and timings."""

    query: str
    hits: list[Hit]
    engine: str
    namespace: Namespace
    seconds: float = 0.0
    budget_tokens: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def turn_ids(self) -> list[str]:
        """Every cited turn id, in rank order, without repeats."""
        seen: dict[str, None] = {}
        for hit in self.hits:
            for tid in hit.turn_ids:
                seen.setdefault(tid, None)
        return list(seen)

    @property
    def tokens(self) -> int:
        return sum(h.tokens for h in self.hits)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "engine": self.engine,
            "namespace": self.namespace.as_dict(),
            "seconds": self.seconds,
            "budget_tokens": self.budget_tokens,
            "tokens": self.tokens,
            "hits": [h.as_dict() for h in self.hits],
            "detail": self.detail,
        }


@dataclass
class Answer:
    """A short answer and the turn ids it rests on."""

    text: str
    cited_turn_ids: list[str]
    retrieval: Retrieval | None = None
    notes: list[str] = field(default_factory=list)  # what the answering step says about its evidence (E-mem's master)
    dates: list[str] = field(default_factory=list)  # the absolute dates the cited excerpts show ("7 May 2023")
    evidence_tokens: int | None = None  # tokens of excerpts the reader was shown (None: not the reader's path)
    evidence_turn_ids: list[str] = field(default_factory=list)  # the turns shown to the reader, the only citable
    support: float | None = None  # the reader's check of its answer: log P(yes) - log P(no) (None: not checked)
