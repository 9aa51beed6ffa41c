"""EmbeddingGemma on ONNX Runtime: the sentence-transformers pipeline without torch (docs/models.md, BENCHMARKS.md).

The same weights, converted once by `cuemem models convert` (`onnx_convert`): the `tokenizers` library reads the
model's tokenizer.json (bos + text + eos, truncated at the model's max sequence length, padded on the right), the
token vectors come from a memory-mapped table (only the rows used are read), and one ONNX graph runs the
transformer, mean pooling, both Dense layers and the normalisation. Importing this module or embedding a query
loads neither torch, transformers nor sentence-transformers: a CLI search starts in a second or two.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from . import onnx_cache
from .base import Prompted, normalize

log = logging.getLogger("cuemem")

# One session per converted folder and thread count in a process (as sentence._LOADED does for torch models).
_SESSIONS: dict[tuple[Any, ...], tuple[Any, Any, np.ndarray, dict[str, Any]]] = {}
_SESSIONS_LOCK = threading.Lock()


def threads_default() -> int:
    """ONNX Runtime's intra-op threads: `CUEMEM_ONNX_THREADS`, else every core this process may use."""
    configured = os.environ.get("CUEMEM_ONNX_THREADS", "").strip()
    if configured:
        return max(1, int(configured))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _release_freed_memory() -> None:
    """Hand the C heap's freed pages back to the system (glibc's malloc_trim); nothing elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _open(folder: Path, variant: str, threads: int) -> tuple[Any, Any, np.ndarray, dict[str, Any]]:
    """Tokenizer, session, token table and manifest of a converted model, loaded once per process."""
    target = onnx_cache.variant_dir(folder, variant)
    key = (str(target.resolve()), threads, *(p.stat().st_mtime_ns for p in sorted(target.iterdir())))
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            manifest = onnx_cache.read_manifest(folder, variant) or {}
            compact = target / onnx_cache.TOKENIZER
            tokenizer = Tokenizer.from_file(str(compact if compact.is_file() else folder / "tokenizer.json"))
            _release_freed_memory()  # what parsing the tokenizer's JSON left behind (~180 MB)
            tokenizer.no_padding()
            tokenizer.enable_truncation(int(manifest.get("max_seq_length") or 2048))
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            try:
                session = ort.InferenceSession(
                    str(target / onnx_cache.GRAPH), sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own exception types
                raise EmbeddingError(f"cannot load the ONNX model at {target}: {exc}") from exc
            table = np.load(target / onnx_cache.TABLE, mmap_mode="r")
            _SESSIONS[key] = (tokenizer, session, table, manifest)
        return _SESSIONS[key]


class OnnxEmbedder(Prompted):
    """A converted sentence-transformers model on ONNX Runtime (CPU); loads lazily on the first call.

    `locate` returns the model folder (its `onnx/<variant>` holds the conversion); `name` tags stored vectors. It
    embeds exactly what `SentenceTransformerEmbedder` does for the same model, prompts included."""

    def __init__(
        self,
        name: str,
        locate: Callable[[], Path],
        dim: int,
        *,
        variant: str = "fp32",
        query_prompt: str = "",
        document_prompt: str = "",
        bm25_weight: float = 1.0,
        batch_size: int = 32,
        threads: int = 0,
        on_load: Callable[[], object] | None = None,
    ) -> None:
        self.name = name
        self.dim = dim
        self.variant = variant
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.bm25_weight = bm25_weight
        self.batch_size = batch_size
        self.threads = threads or threads_default()
        self._locate = locate
        self._on_load = on_load
        self._loaded: tuple[Any, Any, np.ndarray, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any, np.ndarray, dict[str, Any]]:
        with self._lock:
            if self._loaded is None:
                folder = Path(self._locate())
                reason = onnx_cache.check(folder, self.variant)
                if reason is not None:
                    raise EmbeddingError(f"{reason}: run `cuemem models convert {folder.name} --runtime onnx`")
                if self._on_load is not None:
                    self._on_load()
                self._loaded = _open(folder, self.variant, self.threads)
        return self._loaded

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tokenizer, session, table, manifest = self._load()
        encodings = tokenizer.encode_batch([prompt + t for t in texts])
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        order = np.argsort([-len(i) for i in ids], kind="stable")  # similar lengths together: little padding
        scale = np.float32(manifest.get("embed_scale", 1.0))
        pad = int(manifest.get("pad_token_id", 0))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Dynamic int8 quantises each call's activations with one range for the whole batch, so a text's vector
        # would depend on its batch-mates (and their padding): quantised variants embed one text a call, which
        # costs nothing measurable (docs/benchmarks/models.md) and keeps a text's vector the same in any batch.
        size = self.batch_size if self.variant == "fp32" else 1
        for start in range(0, len(order), size):
            chosen = order[start : start + size]
            width = max(len(ids[i]) for i in chosen)
            batch = np.full((len(chosen), width), pad, dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            embeds = np.asarray(table[batch], dtype=np.float32) * scale  # Gemma scales its token vectors
            (vectors,) = session.run(None, {"inputs_embeds": embeds, "attention_mask": mask})
            out[chosen] = vectors
        return normalize(out)


def onnx_available(folder: Path, variant: str) -> str | None:
    """None when the ONNX runtime and a current conversion are there; else why the torch path is used instead."""
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime or tokenizers is not installed ({exc})"
    return onnx_cache.check(folder, variant)
