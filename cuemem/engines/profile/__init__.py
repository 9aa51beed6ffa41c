"""Hybrid preference memory (docs/design.md design 3): engines `profile` (pattern rules), `profile-llm` (rules and the
model's extraction); `profile[records_only=true]` is the ablation with records alone (no turns), and
`profile[backend=chroma]` keeps the records in ChromaDB."""

from .consolidate import Profile, Thresholds, consolidate
from .engine import VARIANTS, ProfileEngine, variant
from .records import RECORD_TYPES, Candidate, Record
from .rules import RuleTable, RuleTableError, load_rules, parse_rules
from .state import ProfileConfig

__all__ = [
    "RECORD_TYPES",
    "VARIANTS",
    "Candidate",
    "Profile",
    "ProfileConfig",
    "ProfileEngine",
    "Record",
    "RuleTable",
    "RuleTableError",
    "Thresholds",
    "consolidate",
    "load_rules",
    "parse_rules",
    "variant",
]
