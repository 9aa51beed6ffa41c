"""STITCH, contextual-intent memory (docs/design.md design 1): engines `stitch` (model-free), `stitch-llm` (model
mode), `stitch-strict` (the paper's strict density ranking) and the ablations `stitch-noscope`, `stitch-noevent`,
`stitch-noentity`, `stitch-nocoref`."""

from .engine import VARIANTS, StitchEngine, canonical_summary, variant
from .state import StitchConfig
from .vocabulary import Vocabulary

__all__ = ["VARIANTS", "StitchConfig", "StitchEngine", "Vocabulary", "canonical_summary", "variant"]
