"""SCG-MEM's parameters and its ingestion counters (design 2): what the engine, its assimilators and recall share.

The counters are derived state like the schema itself: kept in the store under the engine's name and dropped
with it when a turn is deleted (the engine declares `on_delete="rebuild"`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ScgConfig:
    """The paper's parameters (beam b = 5, 1 hop, top k = 35 concepts, softmax temperature T) and the model-free
    mode's own, with the ablation switches."""

    model: bool = False  # assimilate / accommodate and seed with the model client (scg-llm)
    assimilate: bool = True  # map candidates onto existing concepts (off: accommodation only, scg-noassim)
    constrained: bool = True  # seeds are schema members (off: free keywords + embedding lookup, scg-noconstraint)
    hops: int = 1  # spreading-activation hops: 0, 1 (the paper's default) or 2
    top_k: int = 35  # activated concepts whose turns form the ranking
    beam: int = 5  # beam width b of the constrained search, and the number of seed concepts
    temperature: float = 30.0  # T of P(v|u) = softmax(w_uv / T) (chosen on LoCoMo dev: 1, 10, 30, 100)
    sample: int = 0  # 0: deterministic spreading; n > 0: n neighbours drawn per active concept (seeded)
    seed: int = 0  # the random seed of sampled spreading
    concepts_per_turn: int = 12  # model-free candidates kept per turn (most specific first)
    assimilate_threshold: float = 0.85  # concept-embedding cosine at which a candidate is an existing concept
    seed_threshold: float = 0.5  # cosine at which a query phrase seeds the concept it is nearest to
    seed_max_df: float = 1.0  # concepts in a larger share of the turns do not seed (1: any concept may)
    query_seeds: int = 2  # concepts nearest the whole question's vector, seeding besides its own phrases
    shortlist: int = 24  # model mode: schema concepts offered per turn / question (nearest first), besides "new"
    accept_logprob: float = -6.0  # model mode: log-probability below which a chosen concept does not fit
    length_norm: float = 0.0  # a turn's activation score divided by (its number of concepts) ^ length_norm
    concept_weight: float = 0.1  # weight of the activation ranking in the rank fusion (dev: 0.1 of 0-1)
    concept_boost: float = 0.0  # or as a boost: a fused score times 1 + boost x (activation mass / the top's)
    fusion: bool = True  # combine with BM25 and dense (off: the activation ranking alone, as in the paper)
    fusion_depth: int = 200  # ranks of each list that enter the fusion
    # the second hop (hop.py): pivot turns -> their goal -> the goal's turns, by the asked attribute
    hop_weight: float = 2.0  # weight of the hop ranking in the rank fusion with the first (0: no second hop)
    hop_pivots: int = 1  # top turns of the first ranking that start the hop (weight 1 / rank)
    hop_literal: float = 2.0  # activation of the turns stating the question's values and names, shared among them
    hop_literal_depth: int = 20  # BM25 hits searched for a turn stating each value or name as written
    hop_literal_max: int = 4  # a value or name stated by more turns names no pivot; without a pivot, no hop
    hop_question: float = 1.0  # activation the question's own goal words start with
    hop_width: int = 50  # most activated turns that enter the hop ranking
    hop_attribute: float = 1.0  # hop score = activation x (cosine with the question) ^ hop_attribute
    hop_pair: int = 2  # turns the hop reached best from a pivot the question states, placed right after it
    focus_recur: int = 2  # earlier turns an anchor word must have named before it switches focus (index/focus.py)
    focus_whole: bool = False  # an anchor names a goal when all its words recur (else: any of them)
    focus_quotes: bool = False  # a turn naming no goal but a value it replaces continues its goal (dev: no change)


@dataclass
class ScgState:
    """Counters of a namespace's ingestion (what `stats` reports)."""

    turns: int = 0
    concepts: int = 0
    assimilated: int = 0  # candidate occurrences mapped onto an existing concept
    accommodated: int = 0  # new concepts inserted into the schema
    rejected: int = 0  # model proposals that were not valid concept keys
    keys_generated: int = 0  # keys proposed as existing concepts (assimilation)
    keys_outside: int = 0  # of those, keys that were not in the schema (structural hallucinations)
    fallbacks: int = 0  # model-mode turns that fell back to model-free candidates (model unavailable or garbled)

    @classmethod
    def from_json(cls, raw: Any) -> ScgState:
        data = raw if isinstance(raw, dict) else json.loads(raw) if isinstance(raw, str) else {}
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in known})

    def to_json(self) -> dict[str, int]:
        return asdict(self)


STATE = "state"
FOCUS = "focus"  # the goal in focus at the end of the ingested log (kv, dropped with the engine's state)


def load_json(raw: Any) -> dict[str, Any] | None:
    """A stored JSON object (None when absent)."""
    data = raw if isinstance(raw, dict) else json.loads(raw) if isinstance(raw, str) else None
    return data if isinstance(data, dict) else None


__all__ = ["FOCUS", "STATE", "ScgConfig", "ScgState", "load_json"]
