"""Converting a fetched sentence-transformers model (EmbeddingGemma) to ONNX for `cuemem.embed.onnx` (docs/models.md).

The graph takes the token embeddings (looked up in numpy from a memory-mapped table, so the 805 MB vocabulary never
sits in memory) and the attention mask, and runs the rest of the sentence-transformers pipeline in one piece:
transformer → mean pooling → Dense → Dense → L2 normalisation. Attention masks are built here with plain tensor
operations (bidirectional, with the sliding window of the model's local layers), so no mask helper is traced.
Everything is written to a staging folder and renamed into place with a manifest of the source files' sha256:
a converted folder is complete or absent, and a changed source is noticed (`onnx_cache.check`).

Only the conversion imports torch, transformers and onnx; the embedder itself needs none of them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from . import onnx_cache

log = logging.getLogger("cuemem")

Say = Callable[[str], None]
OPSET = 18
FACTS = ("embed_scale", "max_seq_length", "dim", "pad_token_id", "torch")  # what the embedder reads back


def _wrapper(model: Any) -> Any:
    """The torch module exported: embeddings + mask in, unit sentence vectors out (modules.json after the lookup)."""
    import torch

    transformer = model[0].auto_model
    modes = model[1].pooling_mode
    if tuple([modes] if isinstance(modes, str) else modes) != ("mean",) or not model[1].include_prompt:
        raise EmbeddingError("only mean pooling over every token (prompt included) is converted")
    kinds = [type(m).__name__ for m in list(model)[2:]]
    if kinds != ["Dense"] * (len(kinds) - 1) + ["Normalize"]:
        raise EmbeddingError(f"only Dense layers then Normalize are converted, not {kinds}")
    denses = [m.linear for m in list(model)[2:-1]]
    for m in list(model)[2:-1]:
        if type(m.activation_function).__name__ != "Identity" or getattr(m, "use_residual", False):
            raise EmbeddingError("only Dense layers without activation or residual are converted")
    window = int(getattr(transformer.config, "sliding_window", 0) or 0)
    layer_types = list(getattr(transformer.config, "layer_types", []) or [])
    neg = torch.finfo(torch.float32).min

    class Embedder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer
            self.denses = torch.nn.ModuleList(denses)

        def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            length = inputs_embeds.shape[1]
            keys = attention_mask[:, None, None, :].to(torch.bool)  # B,1,1,L: padding is never attended
            full = torch.where(keys, 0.0, neg).to(torch.float32)
            masks = {"full_attention": full.expand(-1, 1, length, -1)}
            if "sliding_attention" in layer_types:
                pos = torch.arange(length, device=inputs_embeds.device)
                near = (pos[:, None] - pos[None, :]).abs() < window  # bidirectional window (distance < window)
                masks["sliding_attention"] = torch.where(keys & near[None, None], 0.0, neg).to(torch.float32)
            hidden = self.transformer(inputs_embeds=inputs_embeds, attention_mask=masks).last_hidden_state
            weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)  # sentence-transformers Pooling
            for dense in self.denses:
                pooled = dense(pooled)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return Embedder().eval()


def _export(folder: Path, out: Path, say: Say) -> dict[str, Any]:
    """The fp32 graph at `out` (weights in `out`.data) and the token table at `out.parent / embeddings.npy`."""
    import torch
    from sentence_transformers import SentenceTransformer

    say("loading the sentence-transformers model (torch)")
    model = SentenceTransformer(
        str(folder), device="cpu", local_files_only=True, model_kwargs={"attn_implementation": "eager"}
    )
    model.eval()
    transformer: Any = model[0].auto_model
    table: Any = transformer.get_input_embeddings()
    scale = float(getattr(table, "scalar_embed_scale", 1.0))
    weights = table.weight.detach().to(torch.float32).numpy()
    say(f"writing the token table ({weights.nbytes / 1e6:,.0f} MB)")
    np.save(out.parent / "embeddings.npy", weights)
    wrapper = _wrapper(model)
    tok = model.tokenize(["a short example sentence", "title: none | text: another, longer example sentence here"])
    sample = (table(tok["input_ids"]).detach(), tok["attention_mask"])
    say("exporting the graph to ONNX (a minute or more)")
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    with torch.no_grad():
        torch.onnx.export(
            wrapper,
            sample,
            str(out),
            input_names=["inputs_embeds", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_shapes={"inputs_embeds": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}},
            opset_version=OPSET,
            dynamo=True,
            external_data=True,
            optimize=True,
            verify=False,
        )
    return {
        "embed_scale": scale,
        "max_seq_length": int(model.max_seq_length or 0),
        "dim": int(getattr(model, "get_embedding_dimension", model.get_sentence_embedding_dimension)() or 0),
        "pad_token_id": int(model.tokenizer.pad_token_id or 0),
        "torch": torch.__version__,
    }


def _quantize(src: Path, out: Path, intermediate: int) -> None:
    """Dynamic int8 weights, per output channel, for every MatMul with a constant weight except the MLPs' down
    projections (inputs `intermediate` wide): their activations have outliers that per-tensor int8 loses (mean
    cosine to torch 0.981 with them, 0.996 without; docs/benchmarks/models.md)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src), load_external_data=False).graph
    widths = {i.name: list(i.dims) for i in graph.initializer}
    keep = [
        n.name
        for n in graph.node
        if n.op_type == "MatMul" and len(n.input) > 1 and widths.get(n.input[1], [0])[0] == intermediate
    ]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser's advice to pre-process (a shape inference pass) is not needed
    try:
        _quantize_dynamic(quantize_dynamic, QuantType, src, out, keep)
    finally:
        root.setLevel(level)


def _quantize_dynamic(quantize_dynamic: Any, QuantType: Any, src: Path, out: Path, keep: list[str]) -> None:
    quantize_dynamic(
        str(src),
        str(out),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        nodes_to_exclude=keep,
        use_external_data_format=False,
        extra_options={"MatMulConstBOnly": True},
    )


def _intermediate(folder: Path) -> int:
    """The transformer's MLP width (config.json `intermediate_size`), 0 when it has none."""
    try:
        return int(json.loads((folder / "config.json").read_text(encoding="utf-8")).get("intermediate_size", 0))
    except (OSError, ValueError, TypeError):
        return 0


def convert(folder: Path, *, variant: str = "fp32", force: bool = False, say: Say | None = None) -> Path:
    """Convert the model in `folder` to ONNX (`variant` fp32 or int8) under `folder/onnx/<variant>`; a no-op when
    a conversion of the same source files is there (unless `force`). Returns the converted folder."""
    say = say or (lambda text: log.info("%s", text))
    if variant not in onnx_cache.VARIANTS:
        raise EmbeddingError(f"unknown ONNX variant {variant!r}: choose {', '.join(onnx_cache.VARIANTS)}")
    target = onnx_cache.variant_dir(folder, variant)
    if not force and onnx_cache.check(folder, variant) is None:
        say(f"{target} is up to date")
        return target
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise EmbeddingError(
            "the ONNX conversion needs torch and onnx: pip install 'cuemem[local,onnx-export]'"
        ) from exc
    started = time.perf_counter()
    say("hashing the source files")
    sources = onnx_cache.source_hashes(folder)
    with onnx_cache.staging(folder, variant) as stage:
        fp32 = onnx_cache.variant_dir(folder, "fp32")
        if variant != "fp32" and onnx_cache.check(folder, "fp32") is None:
            say(f"quantising the fp32 conversion at {fp32} to int8")  # no second export: seconds, not a minute
            manifest = onnx_cache.read_manifest(folder, "fp32") or {}
            facts = {k: v for k, v in manifest.items() if k in FACTS}
            _link_or_copy(fp32 / onnx_cache.TABLE, stage / onnx_cache.TABLE)
            _quantize(fp32 / onnx_cache.GRAPH, stage / "int8.onnx", _intermediate(folder))
            _rename_graph(stage / "int8.onnx", stage / onnx_cache.GRAPH)
        else:
            facts = _export(folder, stage / "fp32.onnx", say)
            if variant == "int8":
                say("quantising the weights to int8")
                _quantize(stage / "fp32.onnx", stage / "int8.onnx", _intermediate(folder))
                _rename_graph(stage / "int8.onnx", stage / onnx_cache.GRAPH)
                for leftover in stage.glob("fp32.onnx*"):
                    leftover.unlink()
            else:
                _rename_graph(stage / "fp32.onnx", stage / onnx_cache.GRAPH)
        _compact_tokenizer(folder / "tokenizer.json", stage / onnx_cache.TOKENIZER)
        manifest = {
            "format": onnx_cache.FORMAT,
            "variant": variant,
            "sources": sources,
            "files": onnx_cache.file_hashes(stage),
            "converted_s": round(time.perf_counter() - started, 1),
            **facts,
        }
        (stage / onnx_cache.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    say(f"converted to {target} in {time.perf_counter() - started:,.0f} s")
    return target


def _compact_tokenizer(src: Path, out: Path) -> None:
    """The model's tokenizer.json with its merges as "a b" strings (where no token holds a space) and no
    indentation: the same tokenizer (identical ids on every LoCoMo turn and question), which the `tokenizers`
    library loads with a peak of ~150 MB instead of ~350 MB and in 0.8 s instead of 1.3 s (its 515k merges as
    pairs are buffered one by one while parsing)."""
    data = json.loads(src.read_text(encoding="utf-8"))
    merges = data.get("model", {}).get("merges")
    pairs = isinstance(merges, list) and all(isinstance(m, list) and len(m) == 2 for m in merges)
    if pairs and not any(" " in part for m in merges for part in m):
        data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    out.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file system allows one (the 805 MB table is shared by the variants), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _rename_graph(src: Path, out: Path) -> None:
    """Save a graph under its final name with its weights in one external file beside it: ONNX Runtime maps that
    file instead of parsing the weights out of the graph's protobuf (int8: 239 MB peak to load, not 325 MB)."""
    import onnx

    graph = onnx.load(str(src))
    for leftover in src.parent.glob(src.name + "*"):
        leftover.unlink()
    onnx.save_model(
        graph,
        str(out),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=out.name + ".data",
        size_threshold=1024,
    )
