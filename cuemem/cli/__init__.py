"""The `cuemem` command: a thin layer over Memory, one module per command group (memory, transfer, llm, models,
bench, demo, serve, chat), sharing the options, state and error handling of `_common` and the output of `output`."""

from __future__ import annotations

from . import bench, chat, demo, llm, memory, models, serve, transfer  # noqa: F401  (each registers its commands)
from ._common import app

__all__ = ["app"]
