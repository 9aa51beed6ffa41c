"""Which runtime runs a registered embedder: ONNX Runtime when a current conversion is there, else torch.

`CUEMEM_EMBED_RUNTIME` decides: `auto` (default) takes ONNX Runtime when `cuemem models convert` has written a
conversion of the installed files, else sentence-transformers on torch with one log line saying how to convert;
`onnx` requires the conversion (a clear error without it); `torch` never uses ONNX. Of the converted variants the
chosen one comes first (`PREFERRED`, measured in docs/benchmarks/models.md; `CUEMEM_ONNX_VARIANT` pins one). A
variant whose vectors are not the torch ones (int8: mean cosine 0.997) has its own name, so the stored vectors of
the two are never mixed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CuememError, EmbeddingError
from ..models import ModelSpec
from .onnx import OnnxEmbedder, onnx_available

log = logging.getLogger("cuemem")

RUNTIME_ENV = "CUEMEM_EMBED_RUNTIME"
VARIANT_ENV = "CUEMEM_ONNX_VARIANT"  # int8 or fp32: only that variant (benchmarks/embedder_runtime.py compares them)
RUNTIMES = ("auto", "onnx", "torch")
PREFERRED = ("int8", "fp32")  # the measured choice first (docs/benchmarks/models.md, "EmbeddingGemma's runtime")
_WARNED: set[str] = set()


def runtime_setting() -> str:
    """`CUEMEM_EMBED_RUNTIME` (auto, onnx or torch); a CuememError for anything else."""
    runtime = os.environ.get(RUNTIME_ENV, "").strip().lower() or "auto"
    if runtime not in RUNTIMES:
        raise CuememError(f"{RUNTIME_ENV}={runtime!r}: choose {', '.join(RUNTIMES)}")
    return runtime


def variant_name(name: str, variant: str) -> str:
    """The space tag of a variant's vectors: the model's own name where they are torch's (fp32), else its own."""
    return name if variant == "fp32" else f"{name}+onnx-{variant}"


def onnx_embedder(
    spec: ModelSpec, locate: Callable[[], Path], dim: int, options: dict[str, Any]
) -> OnnxEmbedder | None:
    """The ONNX embedder of a registered model where the runtime setting and a conversion allow, else None (the
    caller builds the torch one). Checks only file sizes and times: cheap enough for every `make_embedder`."""
    runtime = runtime_setting()
    if runtime == "torch" or not spec.options.get("onnx"):
        return None
    try:
        folder = Path(locate())
    except EmbeddingError:
        if runtime == "onnx":
            raise
        return None  # not fetched: the torch embedder says how to fetch it when it is first used
    reasons = []
    pinned = os.environ.get(VARIANT_ENV, "").strip().lower()
    if pinned and pinned not in PREFERRED:
        raise CuememError(f"{VARIANT_ENV}={pinned!r}: choose {', '.join(PREFERRED)}")
    for variant in [pinned] if pinned else PREFERRED:
        reason = onnx_available(folder, variant)
        if reason is None:
            return OnnxEmbedder(variant_name(spec.name, variant), lambda: folder, dim, variant=variant, **options)
        reasons.append(reason)
    hint = f"run `cuemem models convert {spec.name} --runtime onnx`"
    if runtime == "onnx":
        raise EmbeddingError(f"{RUNTIME_ENV}=onnx but {reasons[0]}: {hint}")
    if spec.name not in _WARNED:
        _WARNED.add(spec.name)
        log.warning(
            "%s runs on torch + sentence-transformers (slower to load and to embed): %s; %s to use ONNX Runtime",
            spec.name,
            reasons[0],
            hint,
        )
    return None
