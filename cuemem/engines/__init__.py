"""Engine registry: built-in engines by name, plus any registered under the `cuemem.engines` entry point."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib.metadata import entry_points

from ..errors import UnknownEngineError
from .base import Engine, EngineContext
from .baselines import BM25Engine, DenseEngine, FullContext, HybridEngine
from .scg import VARIANTS as SCG_VARIANTS
from .scg import variant as scg_variant
from .stitch import VARIANTS as STITCH_VARIANTS
from .stitch import variant as stitch_variant

__all__ = ["Engine", "EngineContext", "available_engines", "get_engine"]

BUILTIN: dict[str, Callable[[], Engine]] = {
    "fullcontext": FullContext,
    "bm25": BM25Engine,
    "dense": DenseEngine,
    "hybrid": HybridEngine,
    **{name: partial(stitch_variant, name) for name in STITCH_VARIANTS},
    **{name: partial(scg_variant, name) for name in SCG_VARIANTS},
}


def available_engines() -> dict[str, Callable[[], Engine]]:
    engines = dict(BUILTIN)
    for ep in entry_points(group="cuemem.engines"):
        engines.setdefault(ep.name, ep.load())
    return engines


def get_engine(name: str) -> Engine:
    engines = available_engines()
    if name not in engines:
        raise UnknownEngineError(f"unknown engine {name!r}; available: {', '.join(sorted(engines))}")
    return engines[name]()
