"""Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, llama.cpp server, TEI ...)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import EmbeddingError
from .base import normalize

if TYPE_CHECKING:
    import httpx


class OpenAIEmbedder:
    """POST {base_url}/embeddings with retries on 429/5xx; raises EmbeddingError with the cause otherwise."""

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        batch_size: int = 64,
        dim: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.batch_size = batch_size
        self._dim = dim
        import httpx  # here, not at import: a process that calls no endpoint never loads it

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def _post(self, texts: list[str]) -> list[list[float]]:
        import httpx

        url = f"{self.base_url}/embeddings"
        last = ""
        for attempt in range(self.retries + 1):
            try:
                response = self._client.post(url, json={"model": self.model, "input": texts})
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        data = sorted(response.json()["data"], key=lambda d: d["index"])
                        vectors = [d["embedding"] for d in data]
                    except (ValueError, KeyError, TypeError) as exc:
                        raise EmbeddingError(
                            f"{url} answered with an unexpected body: {response.text[:200]!r}"
                        ) from exc
                    if len(vectors) != len(texts):
                        raise EmbeddingError(f"{url} returned {len(vectors)} vectors for {len(texts)} texts")
                    return vectors
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code not in (408, 429) and response.status_code < 500:
                    break
            if attempt < self.retries:
                time.sleep(min(0.5 * 2**attempt, 8.0))
        raise EmbeddingError(f"embedding endpoint {url} failed: {last}")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            rows += self._post(list(texts[start : start + self.batch_size]))
        if not rows:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return normalize(np.asarray(rows, dtype=np.float32))
