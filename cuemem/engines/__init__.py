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

__all__ = ["BaseEngine", "Engine", "EngineContext", "PluginEngine", "as_engine", "available_engines", "get_engine"]

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
    engines = available_engines()
    if name in engines:
        return as_engine(engines[name]())
    base, _, rest = name.partition("[")
    if rest.endswith("]") and base in FAMILIES:
        return FAMILIES[base](**_overrides(base, rest[:-1]))
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
