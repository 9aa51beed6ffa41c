"""Engine registry: built-in engines by name, plus any registered under the `cuemem.engines` entry point."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from importlib.metadata import entry_points

from ..errors import UnknownEngineError
from .base import BaseEngine, Engine, EngineContext, PluginEngine, as_engine
from .baselines import BM25Engine, DenseEngine, FullContext, HybridEngine
from .episodic import VARIANTS as EPISODIC_VARIANTS
from .episodic import variant as episodic_variant
from .profile import VARIANTS as PROFILE_VARIANTS
from .profile import variant as profile_variant
from .scg import VARIANTS as SCG_VARIANTS
from .scg import variant as scg_variant
from .stitch import VARIANTS as STITCH_VARIANTS
from .stitch import variant as stitch_variant

__all__ = [
    "DESCRIPTIONS",
    "BaseEngine",
    "Engine",
    "EngineContext",
    "PluginEngine",
    "as_engine",
    "available_engines",
    "describe",
    "get_engine",
]

BUILTIN: dict[str, Callable[[], Engine]] = {
    "fullcontext": FullContext,
    "bm25": BM25Engine,
    "dense": DenseEngine,
    "hybrid": HybridEngine,
    **{name: partial(stitch_variant, name) for name in STITCH_VARIANTS},
    **{name: partial(scg_variant, name) for name in SCG_VARIANTS},
    **{name: partial(episodic_variant, name) for name in EPISODIC_VARIANTS},
    **{name: partial(profile_variant, name) for name in PROFILE_VARIANTS},
}


def available_engines() -> dict[str, Callable[[], Engine]]:
    engines = dict(BUILTIN)
    for ep in entry_points(group="cuemem.engines"):
        engines.setdefault(ep.name, ep.load())
    return engines


# What each built-in engine does, in one line (`cuemem engines`); a name not here is described by `describe`.
DESCRIPTIONS = {
    "fullcontext": "the most recent turns that fit the budget, in log order (no ranking)",
    "bm25": "BM25 over each turn's words",
    "dense": "cosine similarity of sentence embeddings",
    "hybrid": "reciprocal-rank fusion of bm25 and dense, weighted per embedder",
    "stitch": "STITCH: turns keyed by thematic scope, event and entity types (contextual intent), model-free",
    "stitch-llm": "stitch, its labels chosen by the model",
    "stitch-strict": "stitch, ranked by label density first, then similarity",
    "stitch-noscope": "stitch without the thematic scope (ablation)",
    "stitch-noevent": "stitch without event types (ablation)",
    "stitch-noentity": "stitch without entity types (ablation)",
    "stitch-nocoref": "stitch without coreference (ablation)",
    "scg": "SCG-MEM: a concept schema and an associative graph searched by spreading activation, model-free",
    "scg-llm": "scg, its concepts assimilated and its seeds chosen by the model",
    "scg-noconstraint": "scg seeded by free keywords instead of schema members (ablation)",
    "scg-noassim": "scg without assimilation onto existing concepts (ablation)",
    "scg-hop0": "scg without spreading activation (0 hops; ablation)",
    "scg-hop2": "scg with two hops of spreading activation",
    "episodic": "E-mem: raw overlapping episodes, routed by dense, BM25 and summary pathways, model-free",
    "episodic-llm": "episodic, its windows read by model assistants and a master",
    "episodic-adaptive": "episodic-llm with a router that sends simple questions down the fast path",
    "episodic-weighted": "episodic with weighted routing (the official code's weights)",
    "episodic-nosummary": "episodic without the summary pathway (ablation)",
    "episodic-nodense": "episodic without the dense pathway (ablation)",
    "episodic-nobm25": "episodic without the BM25 pathway (ablation)",
    "profile": "typed preference records beside the turns, consolidated as values change, model-free",
    "profile-llm": "profile, its records also extracted by the model",
}


def describe(name: str, factory: Callable[..., object] | None = None) -> str:
    """One line on what the engine `name` does: DESCRIPTIONS, else "a variant of F" for a variant of a built-in
    family F ("stitch-x", "episodic[window=512]"), else the first sentence of its factory's docstring (a plugin)."""
    if name in DESCRIPTIONS:
        return DESCRIPTIONS[name]
    base = name.partition("[")[0]
    family = base if base in DESCRIPTIONS and base != name else base.partition("-")[0]
    if family in DESCRIPTIONS:
        return f"a variant of {family}: {DESCRIPTIONS[family]}"
    doc = " ".join((getattr(factory, "__doc__", None) or "").strip().split("\n\n")[0].split())
    return doc.split(". ")[0].rstrip(".") if doc else ""


FAMILIES: dict[str, Callable[..., BaseEngine]] = {
    **{name: partial(stitch_variant, name) for name in STITCH_VARIANTS},
    **{name: partial(scg_variant, name) for name in SCG_VARIANTS},
    **{name: partial(episodic_variant, name) for name in EPISODIC_VARIANTS},
    **{name: partial(profile_variant, name) for name in PROFILE_VARIANTS},
}


def get_engine(name: str) -> BaseEngine:
    """The engine registered as `name`; "name[field=value,...]" is a built-in variant with fields of its config
    replaced (typed like their defaults), e.g. "episodic[window=1024,max_windows=3]". A plugin's engine that does
    not subclass BaseEngine comes wrapped in PluginEngine (the hooks' defaults)."""
    if name in BUILTIN:  # a built-in wins over a plugin of its name: no entry point scan (~11 ms) for it
        return as_engine(BUILTIN[name]())
    base, _, rest = name.partition("[")
    if rest.endswith("]") and base in FAMILIES:
        return FAMILIES[base](**_overrides(base, rest[:-1]))
    engines = available_engines()
    if name in engines:
        return as_engine(engines[name]())
    raise UnknownEngineError(f"unknown engine {name!r}; available: {', '.join(sorted(engines))}")


def _overrides(base: str, spec: str) -> dict[str, object]:
    """Typed config overrides from "field=value,..." for the built-in variant family `base`."""
    pairs = dict(part.partition("=")[::2] for part in filter(None, (p.strip() for p in spec.split(","))))
    return typed_overrides(getattr(FAMILIES[base](), "config", None), pairs, base)


def typed_overrides(config: object, pairs: dict[str, str], engine: str = "engine") -> dict[str, object]:
    """Fields of an engine's dataclass config from text values, typed like their defaults (a bool takes 1/0,
    true/false, yes/no); an unknown field or a value of the wrong type is an UnknownEngineError."""
    known = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    out: dict[str, object] = {}
    for key, value in pairs.items():
        if key not in known:
            raise UnknownEngineError(f"engine {engine!r} has no setting {key!r}; settings: {', '.join(sorted(known))}")
        default = getattr(config, key)
        try:
            if isinstance(default, bool):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("1", "true", "yes")
            else:
                out[key] = type(default)(value)
        except ValueError as exc:
            raise UnknownEngineError(f"engine setting {key}={value!r} is not a {type(default).__name__}") from exc
    return out
