"""E-mem, episodic context reconstruction (docs/design.md design 4): engines `episodic` (model-free assistants),
`episodic-llm` (the model reads each activated window), `episodic-adaptive` (System 1 / System 2 routing), the
routing variant `episodic-weighted` and the pathway ablations `episodic-nosummary`, `-nodense`, `-nobm25`."""

from .engine import VARIANTS, EpisodicEngine, variant
from .episodes import extractive_summary, segment
from .master import revisions
from .routing import route_union, route_weighted
from .state import EpisodicConfig

__all__ = [
    "VARIANTS",
    "EpisodicConfig",
    "EpisodicEngine",
    "extractive_summary",
    "revisions",
    "route_union",
    "route_weighted",
    "segment",
    "variant",
]
