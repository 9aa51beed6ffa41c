"""Sentence-transformers embedders by name: the shipped MiniLM, a fetched EmbeddingGemma, or any local folder.

EmbeddingGemma is asymmetric: documents and queries get different prompts (`title: none | text: ` and
`task: search result | query: `), so the embedder protocol has `embed` (documents) and `embed_query`. Its
Matryoshka training lets a vector be cut to 512, 256 or 128 dimensions and renormalised (`MatryoshkaEmbedder`);
the cut vector lives in its own space (`name@dim`), never mixed with the full one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from .base import Prompted, embed_query, normalize


def _quiet_offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


# One model per folder and device in a process: embedders of the same model (one per Memory, per server settings,
# per test) share it instead of loading it again (seconds, and its size in memory, each time). Keyed by the
# folder's files (name, size, mtime), so a replaced copy reloads; a failed load is not kept.
_LOADED: dict[tuple[Any, ...], Any] = {}
_LOADED_LOCK = threading.Lock()


def _load_shared(loader: Callable[..., Any], path: Path, device: str) -> Any:
    """The sentence-transformers model in `path` on `device`, loaded once per process."""
    folder = path.resolve()
    files = sorted(f for f in folder.iterdir() if f.is_file()) if folder.is_dir() else []
    key = (loader, str(folder), device, *((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    with _LOADED_LOCK:
        if key not in _LOADED:
            # trust_remote_code stays off: a folder's own code never runs.
            _LOADED[key] = loader(str(folder), device=device, local_files_only=True)
        return _LOADED[key]


class SentenceTransformerEmbedder(Prompted):
    """A sentence-transformers folder on CPU, offline; loads lazily on the first call.

    `locate` returns the folder (raising EmbeddingError with the install or fetch command when it is missing);
    `name` tags stored vectors, so two models never share a space. A query or two runs on one torch thread (see
    `embed`); batches use every core."""

    def __init__(
        self,
        name: str,
        locate: Callable[[], Path],
        dim: int,
        *,
        query_prompt: str = "",
        document_prompt: str = "",
        bm25_weight: float = 1.0,
        batch_size: int = 64,
        device: str = "cpu",
        on_load: Callable[[], object] | None = None,
    ) -> None:
        self.name = name
        self.dim = dim
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.bm25_weight = bm25_weight  # the fusion weight measured for this model against BM25 (registry)
        self.batch_size = batch_size
        self.device = device
        self._locate = locate
        self._on_load = on_load
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = self._locate()
                _quiet_offline()
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise EmbeddingError("sentence-transformers is missing: pip install 'cuemem[local]'") from exc
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                if self._on_load is not None:
                    self._on_load()
                try:
                    self._model = _load_shared(SentenceTransformer, Path(path), self.device)
                except (OSError, ValueError, RuntimeError) as exc:
                    raise EmbeddingError(f"cannot load the embedding model at {path}: {exc}") from exc
        return self._model

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        import torch

        # A query or two runs on one torch thread: right after numpy's BLAS threads (a dense search), torch's
        # 2-thread pool contends with them, p95 91 ms vs 13 ms on one (benchmarks/embedder.py, BENCHMARKS.md).
        small = len(texts) <= 4
        with self._lock if small else contextlib.nullcontext():
            threads = torch.get_num_threads()
            if small:
                torch.set_num_threads(1)
            try:
                vectors = model.encode(
                    list(texts),
                    prompt=prompt or None,
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            finally:
                if small:
                    torch.set_num_threads(threads)
        return normalize(vectors)


class MatryoshkaEmbedder:
    """The first `dim` coordinates of another embedder's vectors, renormalised (Matryoshka representation
    learning): a smaller index at a measured cost in recall (BENCHMARKS.md). Its own space: `inner.name@dim`."""

    def __init__(self, inner: Any, dim: int) -> None:
        if dim < 1 or dim > inner.dim:
            raise EmbeddingError(f"embed_dim {dim} must be between 1 and the model's {inner.dim}")
        self.inner = inner
        self.dim = dim
        self.name = f"{inner.name}@{dim}"
        self.bm25_weight = getattr(inner, "bm25_weight", 1.0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return normalize(np.asarray(self.inner.embed(texts))[:, : self.dim])

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return normalize(np.asarray(embed_query(self.inner, texts))[:, : self.dim])


def folder_embedder(path: str | Path, *, batch_size: int = 64) -> SentenceTransformerEmbedder:
    """Any local sentence-transformers folder by path: no prompts, named by folder and a digest of its location."""
    folder = Path(path).expanduser().resolve()
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        raise EmbeddingError(f"{folder} is not a sentence-transformers folder (no modules.json or config.json)")
    dim = _folder_dim(folder)
    digest = hashlib.sha256(str(folder).encode("utf-8")).hexdigest()[:8]
    return SentenceTransformerEmbedder(f"st:{folder.name}-{digest}", lambda: folder, dim, batch_size=batch_size)


def _folder_dim(folder: Path) -> int:
    """The output dimension a folder declares (the last Dense layer, else the transformer's hidden size)."""
    import json

    for dense in sorted(folder.glob("*_Dense/config.json"), reverse=True):
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(json.loads(dense.read_text(encoding="utf-8"))["out_features"])
    with contextlib.suppress(OSError, ValueError, KeyError):
        return int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["hidden_size"])
    raise EmbeddingError(f"cannot tell the embedding dimension of {folder}")
