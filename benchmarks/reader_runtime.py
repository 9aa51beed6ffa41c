"""Choosing the reader's runtime (issue 35): the same Qwen2.5-Coder model and prompt on each local runtime.

Each runtime runs in its own process (so its peak memory is its own): load time, prefill speed (prompt tokens per
second, to the first token), decode speed (tokens per second after it), the reply, and peak RSS. The prompt is a
reader's prompt of about `--tokens` tokens (excerpts of a conversation and a question), run `--repeats` times after
one warm-up; the median is reported.

    python benchmarks/reader_runtime.py --model qwen2.5-coder-0.5b --out bench-out/reader-runtime.json
    python benchmarks/reader_runtime.py --model qwen2.5-coder-0.5b --runtimes llamacpp,onnx --onnx-dir DIR

Runtimes: `llamacpp` (llama.cpp's prebuilt CPU library on the GGUF as fetched, Q4_K_M), `llamacpp-q4_0` and
`llamacpp-q8_0` (the same GGUF re-encoded by llama.cpp's quantizer; q4_0 is cuemem's default), `transformers` (the GGUF
de-quantised to float32, cuemem's `local` backend), `onnx` (ONNX Runtime GenAI, int4, a folder made by its model
builder from the de-quantised weights: `python -m onnxruntime_genai.models.builder -i <f32 folder> -o DIR -p int4
-e cpu --extra_options int4_accuracy_level=4`; not a cuemem dependency, measured where installed).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SYSTEM = "You answer a question about a conversation using only the excerpts given. Answer in a few words."


def prompt(tokens: int) -> list[dict[str, str]]:
    lines = []
    i = 0
    while sum(len(line.split()) for line in lines) * 4 // 3 < tokens - 40:
        i += 1
        lines.append(
            f"[D{i}:3] {i} May 2023, Caroline: I went to the support group on day {i} and met Alex, who paints."
        )
    question = "Question: Who paints, and where did Caroline meet them?"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines) + "\n\n" + question}]


def run_llamacpp(model: str, tokens: int, repeats: int, quant: str = "") -> dict[str, Any]:
    from cuemem.llm.llamacpp import LlamaCppBackend, requantized
    from cuemem.llm.local import resolve_local_model

    if quant:
        requantized(resolve_local_model(model), quant)  # made before the clock starts (once, in the cache)
    start = time.perf_counter()
    backend = LlamaCppBackend(model=model, quant=quant)
    backend.load()
    loaded = time.perf_counter() - start
    messages = prompt(tokens)
    rows = []
    for _ in range(repeats + 1):
        m = backend.load()
        m.lib.llama_kv_cache_clear(m.ctx)  # no prefix reuse between repeats: each one evaluates the whole prompt
        m.cached = []
        t0 = time.perf_counter()
        first = None
        pieces = []
        for piece in backend.stream(messages, max_tokens=24):
            if first is None:
                first = time.perf_counter()
            pieces.append(piece)
        t1 = time.perf_counter()
        rows.append((t0, first or t1, t1, len(backend.prompt_tokens(messages)), len(pieces), "".join(pieces)))
    return _summary(f"llamacpp{'-' + quant if quant else ''}", loaded, rows[1:])


def run_transformers(model: str, tokens: int, repeats: int) -> dict[str, Any]:
    import torch

    from cuemem.llm.local import LocalBackend

    start = time.perf_counter()
    backend = LocalBackend(model=model)
    backend.load()
    loaded = time.perf_counter() - start
    messages = prompt(tokens)
    ids = backend.prompt_ids(messages)
    rows = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = backend._model(torch.tensor([ids]), use_cache=True)
            first = time.perf_counter()
            cache, produced = out.past_key_values, []
            token = int(out.logits[0, -1].argmax())
            for _ in range(23):
                produced.append(token)
                out = backend._model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
                cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
        t1 = time.perf_counter()
        rows.append((t0, first, t1, len(ids), len(produced) + 1, backend.tokenizer.decode(produced)))
    return _summary("transformers", loaded, rows[1:])


def run_onnx(folder: str, tokens: int, repeats: int) -> dict[str, Any]:
    import onnxruntime_genai as og  # type: ignore[import-not-found]

    start = time.perf_counter()
    model = og.Model(og.Config(folder))
    tokenizer = og.Tokenizer(model)
    loaded = time.perf_counter() - start
    text = tokenizer.apply_chat_template(json.dumps(prompt(tokens)), add_generation_prompt=True)
    ids = tokenizer.encode(text)
    rows = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + 24, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        first, produced = None, []
        while not generator.is_done() and len(produced) < 24:
            generator.generate_next_token()
            produced.append(int(generator.get_next_tokens()[0]))
            first = first or time.perf_counter()
        t1 = time.perf_counter()
        rows.append((t0, first or t1, t1, len(ids), len(produced), tokenizer.decode(produced)))
    return _summary("onnx", loaded, rows[1:])


def _summary(runtime: str, loaded: float, rows: list[tuple[float, float, float, int, int, str]]) -> dict[str, Any]:
    prefill = [n / (first - t0) for t0, first, _, n, _, _ in rows]
    decode = [(k - 1) / (t1 - first) for _, first, t1, _, k, _ in rows if k > 1 and t1 > first]
    return {
        "runtime": runtime,
        "load_s": round(loaded, 2),
        "prompt_tokens": rows[0][3],
        "prefill_tok_s": round(statistics.median(prefill), 1),
        "decode_tok_s": round(statistics.median(decode), 1) if decode else None,
        "reply_s": round(statistics.median(t1 - t0 for t0, _, t1, _, _, _ in rows), 2),
        "reply": rows[0][5].strip()[:80],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--runtimes", default="llamacpp-q4_0,llamacpp-q8_0,llamacpp,transformers")
    parser.add_argument("--onnx-dir", default="")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # run one runtime in this process
    args = parser.parse_args()
    if args.one:
        if args.one.startswith("llamacpp"):
            result = run_llamacpp(args.model, args.tokens, args.repeats, args.one.partition("-")[2])
        elif args.one == "transformers":
            result = run_transformers(args.model, args.tokens, args.repeats)
        else:
            result = run_onnx(args.onnx_dir, args.tokens, args.repeats)
        print(json.dumps(result))
        return
    results = []
    for runtime in args.runtimes.split(","):
        command = [sys.executable, __file__, "--one", runtime, "--model", args.model, "--tokens", str(args.tokens)]
        command += ["--repeats", str(args.repeats), "--onnx-dir", args.onnx_dir]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            results.append({"runtime": runtime, "error": done.stderr.strip().splitlines()[-1:]})
        else:
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": args.model, "tokens": args.tokens, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
