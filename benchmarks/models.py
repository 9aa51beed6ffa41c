"""Embedders and local models side by side on this machine (BENCHMARKS.md, "Stronger local models").

    python benchmarks/models.py --out bench-out/models.json

1. Embedders (MiniLM, EmbeddingGemma at 768): load seconds, documents/s over 512 LoCoMo turn documents in one
   call, and single-query latency p50/p95 over 100 LoCoMo questions (the query prompt included).
2. Local models (SmolLM2-135M and Qwen2.5-Coder-0.5B with transformers; Qwen 0.5B and 1.5B with llama.cpp where
   it is installed): load seconds, and seconds for a reader-sized prompt (LoCoMo turns filling ~1,000 tokens plus
   a question) with up to 32 new tokens, 3 times, median (the reader's call; no cache; each prompt starts
   differently, so llama.cpp's prefix cache cannot serve it).
Models that are not fetched are skipped and listed as such.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from perf import percentile, source_turns, turns_for

from cuemem.config import Settings
from cuemem.embed import embed_query, make_embedder
from cuemem.engines.baselines import turn_document
from cuemem.llm import LlamaCppBackend, LLMClient, LocalBackend
from cuemem.models import get_spec, is_fetched
from cuemem.types import Turn


def embedders(out: dict) -> None:
    docs = [turn_document(Turn(**t)) for t in turns_for(2048)][1000:1512]
    _, questions = source_turns()
    for name in ("minilm", "embeddinggemma"):
        spec = get_spec(name)
        if not spec.shipped and not is_fetched(spec):
            out[name] = "not fetched"
            continue
        embedder = make_embedder(Settings(embedder=name))
        start = time.perf_counter()
        embedder.embed(["warm up"])
        load = time.perf_counter() - start
        start = time.perf_counter()
        embedder.embed(docs)
        docs_per_s = len(docs) / (time.perf_counter() - start)
        latencies = []
        for q in questions[:100]:
            start = time.perf_counter()
            embed_query(embedder, [q])
            latencies.append((time.perf_counter() - start) * 1000)
        latencies.sort()
        out[name] = {
            "load_s": load,
            "docs_per_s": docs_per_s,
            "query_p50_ms": percentile(latencies, 50),
            "query_p95_ms": percentile(latencies, 95),
            "dim": embedder.dim,
        }
        print(name, out[name], flush=True)


def reader_prompt() -> list[dict[str, str]]:
    lines, words = [], 0
    for t in turns_for(400)[:400]:
        line = turn_document(Turn(**t))
        words += len(line.split())
        lines.append(line)
        if words > 700:  # ~1,000 tokens
            break
    question = "When did Caroline go to the LGBTQ support group? Answer in a few words."
    return [{"role": "user", "content": "Conversation excerpts:\n" + "\n".join(lines) + f"\n\nQuestion: {question}"}]


def models(out: dict) -> None:
    messages = reader_prompt()
    runs: list[tuple[str, str, object]] = [
        ("smollm2-135m (transformers)", "smollm2-135m", lambda: LocalBackend(model="smollm2-135m")),
        ("qwen2.5-coder-0.5b (transformers)", "qwen2.5-coder-0.5b", lambda: LocalBackend(model="qwen2.5-coder-0.5b")),
    ]
    if importlib.util.find_spec("llama_cpp") is not None:
        for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
            runs.append((f"{name} (llama.cpp)", name, lambda n=name: LlamaCppBackend(model=n)))
    for label, name, make in runs:
        spec = get_spec(name)
        if not spec.shipped and not is_fetched(spec):
            out[label] = "not fetched"
            continue
        client = LLMClient(make())  # type: ignore[operator]
        start = time.perf_counter()
        client.chat([{"role": "user", "content": "hi"}], max_tokens=1)
        load = time.perf_counter() - start
        seconds, usage = [], None
        for i in range(3):
            # A different question each time: llama.cpp reuses the KV cache of an identical prompt prefix, so
            # repeating one prompt would time only its last token.
            asked = [{"role": "user", "content": messages[0]["content"] + " " * i + f" (take {i})"}]
            asked[0]["content"] = f"Question {i}. " + asked[0]["content"]
            start = time.perf_counter()
            reply = client.backend.chat(asked, max_tokens=32, temperature=0.0)  # the backend: no cache
            seconds.append(time.perf_counter() - start)
            usage = reply.usage
        out[label] = {
            "load_s": load,
            "answer_s": statistics.median(seconds),
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "reply": reply.text,
        }
        print(label, out[label], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/models.json")
    args = parser.parse_args()
    out: dict = {"embedders": {}, "models": {}, "cpus": os.cpu_count()}
    embedders(out["embedders"])
    models(out["models"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
