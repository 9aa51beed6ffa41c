"""STITCH's parameters and its online ingestion state (design 1): what the engine and its labellers share.

The state is derived state like any other: it lives in the store under the engine's name, refers to steps by
their turn ids (never by store row ids, so two stores fed the same log hold the same state), and is dropped and
rebuilt from the log when a turn is deleted (the engine declares `on_delete="rebuild"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...index.focus import Focus
from .scope import OpenSegment
from .vocabulary import Vocabulary


@dataclass(frozen=True)
class StitchConfig:
    """The paper's parameters (scope window 50, N_start 50, k_event 5, k_update 50, k_retrieve 40) and the
    model-free mode's own, with the ablation switches."""

    use_scope: bool = True
    use_event: bool = True
    use_entity: bool = True
    use_coref: bool = True
    use_focus: bool = True  # references resolve to the goal in focus (index/focus.py), else to recent mentions
    focus_whole: bool = False  # an anchor is a goal's name when all its words recur (else: any of them)
    focus_gather: bool = False  # what a turn under the goal names joins the focus (dev: 0.810 vs 0.821 without)
    focus_replies: bool = False  # a turn naming and stating nothing continues the turn before it
    focus_quotes: bool = True  # a turn naming the value it replaces ("scrap 2:30 pm") continues the turn that said it
    goal_quotes: bool = True  # ... and belongs to the goal that value was said for (engines/hop.py Goals)
    focus_sessions: bool = False  # the focus outlives a session end (dev: LoCoMo lost 2 questions, won 0)
    focus_recur: int = 2  # earlier turns an anchor word must have named before a turn naming it switches focus
    model: bool = False  # label with the model client (constrained choices) instead of spaCy + embeddings
    scope_window: int = 50  # steps of history the model sees when it decides the scope
    n_start: int = 50  # steps whose event labels seed the vocabulary (zero-shot, no shortlist)
    k_event: int = 5  # event labels shortlisted for the model to choose among (besides "new label")
    k_update: int = 50  # steps between synonym merges of the vocabularies
    k_retrieve: int = 40  # steps returned in strict ranking (soft ranking returns what search asks for)
    # The paper's 4,096-token budget is the caller's: `search(budget_tokens=...)`, `cuemem bench --budget`.
    segment_window: int = 3  # recent steps a new step is compared with (model-free scope)
    segment_threshold: float = 0.2  # cosine below which the topic has shifted
    segment_max: int = 10  # steps after which a segment closes anyway
    link_threshold: float = 0.8  # centroid cosine at which a closed segment joins an earlier one's scope
    link_weight: float = 0.5  # weight of the linked scope's relevance beside the segment's own
    scope_weight: float = 1.0  # weight of the two scope-relevance lists in the fusion, beside the step's own lists
    synonym_threshold: float = 0.85  # label-embedding cosine at which two labels merge
    event_boost: float = 0.05  # label density weights (soft ranking; dev sweep 0, 0.05, 0.1, 0.2: issue 34)
    entity_boost: float = 0.05
    fusion_depth: int = 400  # how deep each similarity list is read before fusion
    ranking: str = "soft"  # "soft": density boosts the fused similarity; "strict": density first, then similarity
    # The second hop (engines/hop.py, composed from scg): each step is linked to its goal at ingest, and a question
    # naming a pivot ("the day whose walk starts at 6:30 pm") reaches the goal's other steps. Constants as scg's.
    hop_weight: float = 2.0  # weight of the hop ranking in the rank fusion with the first (0: no second hop)
    hop_pivots: int = 1  # top steps of the first ranking that start the hop (weight 1 / rank)
    hop_literal: float = 2.0  # activation of the steps stating the question's values and names, shared among them
    hop_literal_depth: int = 20  # BM25 hits searched for a step stating each value or name as written
    hop_literal_max: int = 4  # a value or name stated by more steps names no pivot; without a pivot, no hop
    hop_question: float = 1.0  # activation the question's own goal words start with
    hop_width: int = 50  # most activated steps that enter the hop ranking
    hop_attribute: float = 1.0  # hop score = activation x (cosine with the question) ^ hop_attribute
    hop_pair: int = 2  # steps the hop reached best from a pivot the question states, placed right after it


STATE = "state"  # kv key of the ingestion state (open segment, recent steps, counters)
GOALS = "goals"  # kv key of the goal each value was said for, carried over the log (engines/hop.py Goals)


@dataclass
class IngestState:
    segments: int = 0  # segment ids handed out
    steps: int = 0
    since_merge: int = 0
    fallbacks: int = 0  # model-mode labels that fell back to model-free mode because the model failed
    open: OpenSegment = field(default_factory=OpenSegment)
    scope_of_open: int = -1
    recent: list[dict[str, Any]] = field(default_factory=list)  # last few steps: antecedents for coreference
    events: Vocabulary = field(default_factory=lambda: Vocabulary("event"))
    entities: Vocabulary = field(default_factory=lambda: Vocabulary("entity"))
    focus: Focus = field(default_factory=Focus)

    def to_json(self) -> dict[str, Any]:
        return {
            "segments": self.segments,
            "steps": self.steps,
            "since_merge": self.since_merge,
            "fallbacks": self.fallbacks,
            "open": self.open.to_json(),
            "scope_of_open": self.scope_of_open,
            "recent": self.recent,
            "events": self.events.to_json(),
            "entities": self.entities.to_json(),
            "focus": self.focus.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> IngestState:
        if not data:
            return cls()
        return cls(
            data["segments"],
            data["steps"],
            data["since_merge"],
            data.get("fallbacks", 0),
            OpenSegment.from_json(data["open"]),
            data["scope_of_open"],
            data["recent"],
            Vocabulary.from_json(data["events"], "event"),
            Vocabulary.from_json(data["entities"], "entity"),
            Focus.from_json(data.get("focus")),
        )
