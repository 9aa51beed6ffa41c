"""Where converted ONNX models live and whether they still match their source (docs/models.md).

A conversion of the model folder `M` lives in `M/onnx/<variant>/`: `model.onnx` (+ `model.onnx.data`), the token
table `embeddings.npy`, a compact copy of the tokenizer and `manifest.json`, which records the sha256, size and
mtime of every source file the conversion read. A converted folder is written in a staging folder and renamed into
place, so it is complete or absent; `check` says why one cannot be used (missing, or a source changed since),
cheaply: a source whose size and mtime are unchanged is not hashed again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..models.fetcher import file_sha256

FORMAT = 2
VARIANTS = ("int8", "fp32")
GRAPH = "model.onnx"
TABLE = "embeddings.npy"
TOKENIZER = "tokenizer.json"  # the model's own, written compactly (onnx_convert._compact_tokenizer)
MANIFEST = "manifest.json"
# What the conversion reads from a sentence-transformers folder (those present are recorded).
SOURCES = (
    "modules.json",
    "config.json",
    "model.safetensors",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "2_Dense/config.json",
    "2_Dense/model.safetensors",
    "3_Dense/config.json",
    "3_Dense/model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def onnx_root(folder: Path) -> Path:
    return Path(folder) / "onnx"


def variant_dir(folder: Path, variant: str) -> Path:
    """The converted folder of `variant` for the model in `folder` (whether or not it exists)."""
    return onnx_root(folder) / variant


def _fingerprint(path: Path, digest: str | None = None) -> dict[str, Any]:
    st = path.stat()
    return {"sha256": digest or file_sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def source_hashes(folder: Path) -> dict[str, dict[str, Any]]:
    """sha256, size and mtime of each source file of the model in `folder` that exists."""
    return {rel: _fingerprint(Path(folder) / rel) for rel in SOURCES if (Path(folder) / rel).is_file()}


def file_hashes(folder: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file of a converted folder (the manifest aside)."""
    return {
        p.name: {"sha256": file_sha256(p), "size": p.stat().st_size}
        for p in sorted(Path(folder).iterdir())
        if p.is_file() and p.name != MANIFEST
    }


def read_manifest(folder: Path, variant: str) -> dict[str, Any] | None:
    """The manifest of a converted variant, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((variant_dir(folder, variant) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(folder: Path, variant: str) -> str | None:
    """None when `variant` is converted from the current source files; else the reason it cannot be used."""
    target = variant_dir(folder, variant)
    manifest = read_manifest(folder, variant)
    if manifest is None:
        return f"no ONNX conversion at {target}"
    if manifest.get("format") != FORMAT or manifest.get("variant") != variant:
        return f"{target} was converted by another version of cuemem"
    for name, fact in dict(manifest.get("files", {})).items():
        path = target / name
        if not path.is_file() or path.stat().st_size != fact.get("size"):
            return f"{path} is missing or truncated"
    recorded = dict(manifest.get("sources", {}))
    present = {rel for rel in SOURCES if (Path(folder) / rel).is_file()}
    if present != set(recorded):
        return f"the source files of {folder} changed since the conversion"
    for rel, fact in recorded.items():
        path = Path(folder) / rel
        st = path.stat()
        if st.st_size == fact.get("size") and st.st_mtime_ns == fact.get("mtime_ns"):
            continue
        if st.st_size != fact.get("size") or file_sha256(path) != fact.get("sha256"):
            return f"{rel} changed since the conversion"
    return None


@contextlib.contextmanager
def staging(folder: Path, variant: str) -> Iterator[Path]:
    """A fresh staging folder beside the target; renamed to the target when the block succeeds, removed when not."""
    root = onnx_root(folder)
    root.mkdir(parents=True, exist_ok=True)
    stage = root / f".staging-{variant}-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        yield stage
        target = variant_dir(folder, variant)
        old = root / f".old-{variant}-{os.getpid()}"
        if target.exists():
            target.rename(old)
        stage.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def remove(folder: Path) -> bool:
    """Remove every conversion of the model in `folder`; True when there was one."""
    root = onnx_root(folder)
    if not root.exists():
        return False
    shutil.rmtree(root)
    return True
