"""The hybrid preference memory's parameters (design 3): record backend, extraction, consolidation, retrieval."""

from __future__ import annotations

from dataclasses import dataclass

from .records import RECORD_TYPES, STANDING_TYPES

BACKENDS = ("sqlite", "chroma")


@dataclass(frozen=True)
class ProfileConfig:
    """Records are consolidated with the cosine thresholds `same` / `update` / `key_same`; search mixes a record's
    similarity with a recency decay of half-life `half_life` days (weight `recency`), and fuses the records with
    the turns' own ranking (`record_weight` against the turns' 1)."""

    backend: str = "sqlite"  # where records live: "sqlite" (the store) or "chroma" (a chromadb.PersistentClient)
    chroma_path: str = ""  # the Chroma directory; "" = beside the store file ("<db>.chroma")
    model: bool = False  # also extract with the model (flat JSON, keys under constraint) over a window of turns
    window: int = 4  # model mode: turns the model reads (the last is the one it extracts from)
    same: float = 0.8  # cosine at or above which two statements are the same (reinforce)
    # cosine (value or slot name) at or above which a statement phrased as a change replaces a record (drift
    # fixture, dev half, MiniLM: 0.25 / 0.3 / 0.35 / 0.45 / 0.5 / 0.6 -> profile() 0.64 / 0.64 / 0.59 / 0.50 /
    # 0.41 / 0.40)
    update: float = 0.3
    key_same: float = 0.85  # cosine at or above which two slot names are the same slot
    half_life: float = 365.0  # days: a record's recency weight halves over this much time before the question
    recency: float = 0.3  # share of a record's score that decays with age (0 = similarity alone)
    record_weight: float = 1.0  # weight of the record ranking beside the turns', for questions about the asker or a
    # preference ("my", "now", "prefer", "recommend" ...; engine.PERSONAL). LoCoMo dev R@10: 1.0 with the gate 0.783,
    # without it 0.718; records off 0.784 (BENCHMARKS.md)
    other_weight: float = 0.5  # the same for every other question (LoCoMo dev: R@10 equal to 0, R@budget +0.003)
    record_depth: int = 30  # records read from the record ranking before fusion
    # weight of the standing facts' own ranking (values, goals, states, causes; issue 34) beside the turns', for a
    # message, or a question in the first person (index.standing.bears_on_self); 0 = standing facts never join the hits.
    # Standing-facts dev half (20 messages), EmbeddingGemma, R@1 / R@10: 0 -> 0.20 / 0.50, 1 -> 0.55 / 0.85,
    # 2 -> 0.60 / 0.90, 3 as 2 (first-person gate alone: 1 -> 0.55 / 0.75, 2, 3, 5 -> 0.60 / 0.75)
    standing_weight: float = 2.0
    # which queries the standing facts join: "message" (not a question) or "self" (also a question in the first
    # person); look-alike dev seeds 0-3 S+M and the standing-facts halves: docs/benchmarks/profile.md
    standing_gate: str = "message"
    standing_depth: int = 30  # standing facts read from their ranking before fusion
    # the cosine floor of the standing facts' ranking: a later message shares few words with the fact it needs,
    # and their cosine is low (0.1-0.46 on the standing-facts dev half, EmbeddingGemma) though it ranks first
    # among the standing facts (dev, weight 2: floor 0 / 0.1 / 0.2 / 0.3 -> R@10 0.75 / 0.75 / 0.70 / 0.50)
    standing_floor: float = 0.1
    # a record whose cosine with the question is below this never joins the hits (LongMemEval dev, MiniLM: 0 / 0.3 /
    # 0.4 / 0.5 -> R@5 0.722 / 0.817 / 0.817 / 0.746, R@10 0.96 / 0.96 / 0.96 / 0.889; LoCoMo dev unchanged)
    floor: float = 0.3
    depth: int = 100  # ranks of the turn-level BM25 / dense rankings fused
    cite: int = 3  # turn ids a record's hit cites (latest evidence, then earlier values'); all are in its detail
    skip_speakers: str = "assistant,system"  # speakers whose words are not about themselves (comma-separated)
    rules: str = ""  # a rule-table JSON file replacing the shipped one ("" = cuemem/data/profile_rules.json)
    types: str = ""  # record types search reads (comma-separated; "" = all)
    records_only: bool = False  # search returns records alone, no turns (an ablation: profile[records_only=1])

    @property
    def searched_types(self) -> tuple[str, ...]:
        chosen = tuple(t.strip() for t in self.types.split(",") if t.strip())
        return chosen or RECORD_TYPES

    @property
    def slot_types(self) -> tuple[str, ...]:
        """The searched types ranked together (every type but the standing facts')."""
        return tuple(t for t in self.searched_types if t not in STANDING_TYPES)

    @property
    def standing_types(self) -> tuple[str, ...]:
        """The searched standing-fact types, ranked on their own."""
        return tuple(t for t in self.searched_types if t in STANDING_TYPES)

    @property
    def skipped(self) -> frozenset[str]:
        return frozenset(s.strip().lower() for s in self.skip_speakers.split(",") if s.strip())

    def check(self) -> None:
        """Clear errors for settings that cannot work."""
        if self.backend not in BACKENDS:
            raise ValueError(f"profile backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        for name in ("same", "update", "key_same", "recency"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"profile {name} must be in [0, 1], got {getattr(self, name)}")
        if self.half_life <= 0 or min(self.window, self.record_depth, self.standing_depth, self.depth, self.cite) < 1:
            raise ValueError("profile half_life must be > 0; window, record_depth, standing_depth, depth, cite >= 1")
        unknown = set(self.searched_types) - set(RECORD_TYPES)
        if unknown:
            raise ValueError(f"profile types must be among {', '.join(RECORD_TYPES)}, got {', '.join(sorted(unknown))}")
