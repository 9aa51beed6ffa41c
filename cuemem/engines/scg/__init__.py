"""SCG-MEM, schema-constrained generative memory (docs/design.md design 2): engines `scg` (model-free), `scg-llm`
(model mode) and the ablations `scg-noconstraint`, `scg-noassim`, `scg-hop0`, `scg-hop2`."""

from .concepts import extract_concepts, normalise_concept
from .engine import VARIANTS, ScgEngine, variant
from .graph import AssociativeGraph, spread_activation
from .schema import Schema
from .state import ScgConfig, ScgState

__all__ = [
    "VARIANTS",
    "AssociativeGraph",
    "ScgConfig",
    "ScgEngine",
    "ScgState",
    "Schema",
    "extract_concepts",
    "normalise_concept",
    "spread_activation",
    "variant",
]
