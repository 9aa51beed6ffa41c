"""MiniLM throughput and query latency under the choices cuemem makes (BENCHMARKS.md, "Tuning decisions").

    python benchmarks/embedder.py --out bench-out/embedder.json

1. Ingest: 1,024 LoCoMo turn documents embedded in calls of 32 vs one call (sentence-transformers sorts a call's
   texts by length before padding), at batch sizes 16/32/64.
2. Queries: 200 single-question embeddings with torch on 2 threads vs 1, p50/p95, each followed by what a dense
   search does next (a 10k x 384 numpy matrix product and top-k, on numpy's own BLAS threads) or by a 5 ms sleep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from perf import percentile, source_turns, turns_for

from cuemem.embed import MiniLMEmbedder
from cuemem.engines.baselines import turn_document
from cuemem.types import Turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/embedder.json")
    args = parser.parse_args()
    import torch

    docs = [turn_document(Turn(**t)) for t in turns_for(2048)][1000:2024]
    embedder = MiniLMEmbedder(batch_size=32)
    embedder.embed(["warm up", "the model"])
    out: dict = {"documents": len(docs), "torch_threads": torch.get_num_threads()}

    start = time.perf_counter()
    for i in range(0, len(docs), 32):
        embedder.embed(docs[i : i + 32])
    out["calls_of_32_docs_per_s"] = len(docs) / (time.perf_counter() - start)
    for bs in (16, 32, 64):
        embedder.batch_size = bs
        start = time.perf_counter()
        embedder.embed(docs)
        out[f"one_call_batch_{bs}_docs_per_s"] = len(docs) / (time.perf_counter() - start)
    embedder.batch_size = 32

    import numpy as np

    _, questions = source_turns()
    model = embedder._load()
    matrix = np.random.default_rng(0).standard_normal((10_000, 384)).astype(np.float32)

    def dense_search(vector: np.ndarray) -> None:
        scores = matrix @ vector
        np.argpartition(-scores, 10)[:10]

    for gap in ("numpy", "sleep"):
        for threads in (2, 1):
            torch.set_num_threads(threads)
            lat = []
            for q in questions[:200]:
                start = time.perf_counter()
                vector = model.encode([q], convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
                lat.append((time.perf_counter() - start) * 1000)
                dense_search(vector[0]) if gap == "numpy" else time.sleep(0.005)
            out[f"query_{threads}_thread_after_{gap}_p50_ms"] = percentile(lat, 50)
            out[f"query_{threads}_thread_after_{gap}_p95_ms"] = percentile(lat, 95)
    torch.set_num_threads(out["torch_threads"])
    print(json.dumps(out, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
