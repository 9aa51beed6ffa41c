"""E-mem's parameters (design 4): window length and overlap, routing, assistants, the master, adaptive depth."""

from __future__ import annotations

from dataclasses import dataclass

from .routing import PATHWAYS


@dataclass(frozen=True)
class EpisodicConfig:
    """Windows of `window` tokens (the shipped tokenizer's count) overlapping by `overlap`; at most `max_windows`
    activated per question; `evidence` anchor turns per window (plus `neighbours` either side, model-free)."""

    window: int = 4096  # L: tokens per window (the paper's best is 8K with a 4B model)
    overlap: float = 0.1  # delta: share of a window carried into the next
    max_windows: int = 5  # windows a question activates
    routing: str = "union"  # "union" (the paper) or "weighted" (the official code: 0.3 / 0.4 / 0.3)
    pathways: str = ",".join(PATHWAYS)  # enabled pathways, comma-separated (the ablations turn one off)
    window_dense: str = "best"  # dense pathway: the window's best turn ("best") or its centroid ("centroid")
    strong_bm25: float = 2.0  # weighted routing: a window whose BM25 is this many times the next one's goes first
    depth: int = 200  # ranks of the turn-level BM25 / dense rankings read by routing and the assistants
    evidence: int = 8  # anchor turns an assistant returns (model-free; LoCoMo dev R@10 for 2/3/5/8: BENCHMARKS.md)
    neighbours: int = 1  # model-free: turns either side of an anchor, inside its window
    fill: bool = True  # search: after the evidence, the rest of the question's fused ranking
    model: bool = False  # assistants read their raw window with the model client (episodic-llm)
    summary: str = "extractive"  # window summaries: "extractive" or "model" (closed windows)
    adaptive: bool = False  # a cheap router sends confident, simple questions down the fast path (System 1)
    shortlist: int = 8  # model mode: the window's turns offered to choose from (its best in the fused ranking)
    margin: float = 2.0  # model mode: a further evidence id within this log-probability of the first
    note_tokens: int = 32  # model mode: length of an assistant's one-line note
    resolve: bool = True  # the master's conflict rule: a later revision supersedes the earlier statement

    @property
    def enabled_pathways(self) -> tuple[str, ...]:
        return tuple(p for p in PATHWAYS if p in {x.strip() for x in self.pathways.split(",")})

    def check(self) -> None:
        """Clear errors for settings that cannot work."""
        if self.window < 1:
            raise ValueError(f"episodic window must be >= 1 token, got {self.window}")
        if not 0 <= self.overlap < 1:
            raise ValueError(f"episodic overlap must be in [0, 1), got {self.overlap}")
        if self.max_windows < 1:
            raise ValueError(f"episodic max_windows must be >= 1, got {self.max_windows}")
        if self.routing not in ("union", "weighted"):
            raise ValueError(f"episodic routing must be 'union' or 'weighted', got {self.routing!r}")
        unknown = {x.strip() for x in self.pathways.split(",")} - set(PATHWAYS)
        if unknown or not self.enabled_pathways:
            raise ValueError(f"episodic pathways must be among {', '.join(PATHWAYS)}, got {self.pathways!r}")
        if self.window_dense not in ("best", "centroid"):
            raise ValueError(f"episodic window_dense must be 'best' or 'centroid', got {self.window_dense!r}")
        if self.summary not in ("extractive", "model"):
            raise ValueError(f"episodic summary must be 'extractive' or 'model', got {self.summary!r}")
        if self.evidence < 1 or self.shortlist < 1 or self.neighbours < 0 or self.depth < 1:
            raise ValueError("episodic evidence, shortlist and depth must be >= 1, neighbours >= 0")
