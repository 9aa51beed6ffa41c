"""EmbeddingGemma on ONNX Runtime (issue 36 item 4): the conversion cache and its manifest, the choice of runtime
(ONNX when converted, torch with a log line when not), a query path without torch, and the real converted model."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuemem.config import Settings
from cuemem.embed import (
    MatryoshkaEmbedder,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    embed_query,
    make_embedder,
    onnx_cache,
    onnx_select,
)
from cuemem.errors import EmbeddingError
from cuemem.models import get_spec, is_fetched, model_dir

GEMMA = get_spec("embeddinggemma")
REAL = model_dir(GEMMA)


def _fake_source(folder: Path) -> Path:
    """A model folder with small stand-ins for every source file the conversion reads."""
    for rel in onnx_cache.SOURCES:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"contents of {rel}\n", encoding="utf-8")
    return folder


def _fake_conversion(folder: Path, variant: str) -> Path:
    """A converted folder as `onnx_convert.convert` writes one (files, then the manifest), through `staging`."""
    with onnx_cache.staging(folder, variant) as stage:
        (stage / onnx_cache.GRAPH).write_bytes(b"graph")
        (stage / onnx_cache.TABLE).write_bytes(b"table")
        (stage / onnx_cache.TOKENIZER).write_bytes(b"{}")
        manifest = {
            "format": onnx_cache.FORMAT,
            "variant": variant,
            "sources": onnx_cache.source_hashes(folder),
            "files": onnx_cache.file_hashes(stage),
        }
        (stage / onnx_cache.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return onnx_cache.variant_dir(folder, variant)


def test_a_conversion_is_current_until_a_source_changes(tmp_path):
    folder = _fake_source(tmp_path / "model")
    assert "no ONNX conversion" in str(onnx_cache.check(folder, "int8"))
    target = _fake_conversion(folder, "int8")
    assert onnx_cache.check(folder, "int8") is None
    assert not list((folder / "onnx").glob(".staging-*"))
    source = folder / "model.safetensors"
    source.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")  # same bytes, a new mtime: still current
    assert onnx_cache.check(folder, "int8") is None
    source.write_text("other weights of the same size!!!\n"[: source.stat().st_size], encoding="utf-8")
    assert "model.safetensors changed" in str(onnx_cache.check(folder, "int8"))
    _fake_conversion(folder, "int8")  # a reconversion replaces the old folder whole
    assert onnx_cache.check(folder, "int8") is None
    (target / onnx_cache.TABLE).write_bytes(b"t")
    assert "missing or truncated" in str(onnx_cache.check(folder, "int8"))
    (folder / "tokenizer_config.json").unlink()
    _fake_conversion(folder, "int8")
    (folder / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    assert "source files" in str(onnx_cache.check(folder, "int8"))


def test_a_failed_conversion_leaves_nothing_and_keeps_the_previous_one(tmp_path):
    folder = _fake_source(tmp_path / "model")
    _fake_conversion(folder, "fp32")
    with pytest.raises(RuntimeError), onnx_cache.staging(folder, "fp32") as stage:
        (stage / onnx_cache.GRAPH).write_bytes(b"half a graph")
        raise RuntimeError("killed mid-export")
    assert onnx_cache.check(folder, "fp32") is None
    assert (onnx_cache.variant_dir(folder, "fp32") / onnx_cache.GRAPH).read_bytes() == b"graph"
    assert sorted(p.name for p in (folder / "onnx").iterdir()) == ["fp32"]
    assert onnx_cache.remove(folder) and not (folder / "onnx").exists()


@pytest.fixture
def fake_gemma(tmp_path, monkeypatch):
    """A fetched-looking EmbeddingGemma folder (every pinned file present, contents not checked) in a fresh cache."""
    monkeypatch.setenv("CUEMEM_MODEL_CACHE", str(tmp_path))
    monkeypatch.delenv(onnx_select.RUNTIME_ENV, raising=False)
    monkeypatch.setattr(onnx_select, "_WARNED", set())
    folder = model_dir(GEMMA)
    for rel in GEMMA.files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("{}", encoding="utf-8")
    assert is_fetched(GEMMA)
    return folder


def test_without_a_conversion_the_default_embedder_runs_on_torch_and_says_how_to_convert(fake_gemma, caplog):
    with caplog.at_level(logging.WARNING, logger="cuemem"):
        embedder = make_embedder(Settings(embedder="embeddinggemma"))
        make_embedder(Settings(embedder="embeddinggemma"))
    assert isinstance(embedder, SentenceTransformerEmbedder) and embedder.name == "embeddinggemma-300m"
    hints = [r.getMessage() for r in caplog.records if "cuemem models convert embeddinggemma-300m" in r.getMessage()]
    assert len(hints) == 1 and "torch" in hints[0]  # once per process


def test_the_runtime_setting(fake_gemma, monkeypatch, caplog):
    monkeypatch.setenv(onnx_select.RUNTIME_ENV, "onnx")
    with pytest.raises(EmbeddingError, match="cuemem models convert"):
        make_embedder(Settings(embedder="embeddinggemma"))
    _fake_conversion(fake_gemma, "int8")
    assert isinstance(make_embedder(Settings(embedder="embeddinggemma")), OnnxEmbedder)
    monkeypatch.setenv(onnx_select.RUNTIME_ENV, "torch")
    with caplog.at_level(logging.WARNING, logger="cuemem"):
        assert isinstance(make_embedder(Settings(embedder="embeddinggemma")), SentenceTransformerEmbedder)
    assert not caplog.records
    monkeypatch.setenv(onnx_select.RUNTIME_ENV, "tensorflow")
    with pytest.raises(Exception, match="choose auto, onnx, torch"):
        make_embedder(Settings(embedder="embeddinggemma"))


def test_a_converted_model_is_used_and_int8_vectors_have_their_own_space(fake_gemma):
    _fake_conversion(fake_gemma, "fp32")
    fp32 = make_embedder(Settings(embedder="embeddinggemma"))
    assert isinstance(fp32, OnnxEmbedder) and fp32.name == "embeddinggemma-300m"  # torch's vectors: one space
    assert fp32.query_prompt.startswith("task:") and fp32.bm25_weight == 0.2 and fp32.dim == 768
    _fake_conversion(fake_gemma, "int8")
    int8 = make_embedder(Settings(embedder="embeddinggemma"))
    assert isinstance(int8, OnnxEmbedder) and int8.variant == "int8"
    assert int8.name == "embeddinggemma-300m+onnx-int8"
    cut = make_embedder(Settings(embedder="embeddinggemma", embed_dim=256))
    assert isinstance(cut, MatryoshkaEmbedder) and cut.name == "embeddinggemma-300m+onnx-int8@256"


def test_a_stale_conversion_falls_back_to_torch(fake_gemma):
    _fake_conversion(fake_gemma, "int8")
    (fake_gemma / "tokenizer.json").write_text('{"changed": true}', encoding="utf-8")
    assert isinstance(make_embedder(Settings(embedder="embeddinggemma")), SentenceTransformerEmbedder)


def test_the_onnx_embedder_loads_neither_torch_nor_transformers():
    """The query path's imports, in a fresh process: with the real conversion it embeds a query too."""
    code = (
        "import sys\n"
        "from cuemem.config import Settings\n"
        "from cuemem.embed import make_embedder, embed_query\n"
        "from cuemem.embed.onnx import OnnxEmbedder\n"
        "e = make_embedder(Settings(embedder='embeddinggemma'))\n"
        "if isinstance(e, OnnxEmbedder):\n"
        "    assert embed_query(e, ['where did Caroline go?']).shape == (1, 768)\n"
        "print(type(e).__name__, sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
        " if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=root
    ).stdout
    assert out.split()[-1] == "[]", out


def _real_variant() -> str | None:
    return next((v for v in onnx_select.PREFERRED if onnx_cache.check(REAL, v) is None), None)


needs_conversion = pytest.mark.skipif(
    _real_variant() is None,
    reason="EmbeddingGemma has no ONNX conversion: cuemem models convert embeddinggemma --runtime onnx (make setup)",
)


@needs_conversion
def test_the_converted_embeddinggemma_ranks_the_answer_first():
    variant = _real_variant()
    assert variant is not None
    gemma = OnnxEmbedder(
        onnx_select.variant_name(GEMMA.name, variant),
        lambda: REAL,
        768,
        variant=variant,
        query_prompt=str(GEMMA.options["query_prompt"]),
        document_prompt=str(GEMMA.options["document_prompt"]),
    )
    texts = [
        "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
        "Melanie: I painted a sunrise over the lake last week.",
        "Caroline: My grandma gave me this necklace when I was a kid in Sweden.",
    ]
    docs = gemma.embed(texts)
    query = embed_query(gemma, ["Where did Caroline's necklace come from?"])
    assert docs.shape == (3, 768) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert int(np.argmax(docs @ query[0])) == 2
    # One at a time or in a padded batch: the same vectors (right padding, masked attention and pooling).
    alone = np.vstack([gemma.embed([t]) for t in texts])
    assert float((alone * docs).sum(1).min()) > 0.9999


@pytest.mark.skipif(not is_fetched(GEMMA), reason="EmbeddingGemma is not fetched: cuemem models fetch embeddinggemma")
def test_the_tokenizers_library_tokenizes_as_sentence_transformers_does():
    """bos + text + eos, truncated at the max sequence length: what transformers' tokenizer gives the model."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(REAL), local_files_only=True)
    ours = Tokenizer.from_file(str(REAL / "tokenizer.json"))
    ours.no_padding()
    ours.enable_truncation(2048)
    texts = [
        "title: none | text: [1:56 pm on 8 May, 2023] Caroline: Hey Mel! Good to see you!  How have you been?",
        "task: search result | query: When did Melanie paint a sunrise? ☀️ 日本",
        "title: none | text: " + "a long turn " * 1500,
    ]
    for text in texts:
        expected = reference(text, truncation="longest_first", max_length=2048)["input_ids"]
        assert ours.encode(text).ids == expected


def test_cuemem_models_convert_is_a_no_op_when_up_to_date_and_checks_its_options(fake_gemma):
    from typer.testing import CliRunner

    from cuemem.cli import app

    runner = CliRunner()
    _fake_conversion(fake_gemma, "int8")
    done = runner.invoke(app, ["models", "convert", "embeddinggemma", "--runtime", "onnx"])
    assert done.exit_code == 0 and "up to date" in done.output and str(fake_gemma / "onnx" / "int8") in done.output
    assert runner.invoke(app, ["models", "convert", "embeddinggemma", "--quantize", "int4"]).exit_code == 1
    assert runner.invoke(app, ["models", "convert", "embeddinggemma", "--runtime", "tensorrt"]).exit_code == 1
    assert runner.invoke(app, ["models", "convert", "minilm"]).exit_code == 1
