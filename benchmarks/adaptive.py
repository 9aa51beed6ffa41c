"""Adaptive depth (issue 15): how many questions the router sends down the fast path, and what that costs.

    python benchmarks/adaptive.py --store bench-out/i15/retrieval/stores/episodic[window=1024].db \\
        --engine "episodic[window=1024]" --embed-cache bench-out/i12/embed-cache.db

Searches an `episodic` store again (nothing is re-ingested) with `adaptive` on and off, at `--max-windows`
windows, and prints per split: the share of questions routed to System 1 (fused ranking straight to the reader,
no assistant), recall@10 of the System 1 and System 2 questions under each mode, and the assistant calls saved
(each System 2 question runs one assistant per activated window: a note and a choice).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from statistics import fmean

from cuemem import Memory
from cuemem.bench.datasets import load_locomo, split_of
from cuemem.bench.metrics import evidence_recall
from cuemem.config import Settings
from cuemem.embed import make_embedder
from cuemem.embed.cached import CachedEmbedder
from cuemem.engines import get_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--engine", default="episodic")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--embed-cache", type=Path, default=None)
    parser.add_argument("--max-windows", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    settings = Settings.load(db=args.store, engine=args.engine)
    data = args.data or settings.datasets / "locomo/locomo10.json"
    embedder = make_embedder(settings)
    if args.embed_cache:
        embedder = CachedEmbedder(embedder, args.embed_cache)
    rows = []
    for adaptive in (False, True):
        engine = get_engine(args.engine)  # the store's engine name: its derived state; query-time fields replaced
        engine.config = dataclasses.replace(engine.config, max_windows=args.max_windows, adaptive=adaptive)  # type: ignore[attr-defined]
        with Memory(settings=settings, embedder=embedder, engine=engine, read_only=True) as memory:
            for conv in load_locomo(data):
                for q in conv.questions:
                    if q.adversarial or not q.evidence:
                        continue
                    hits = memory.search(q.text, user_id=f"locomo:{conv.id}", k=50, now=q.date).hits
                    system = int(hits[0].detail["episodic"]["system"]) if hits else 2
                    windows = len(hits[0].detail.get("routing", [])) if hits else 0
                    rows.append(
                        {
                            "adaptive": adaptive,
                            "id": q.id,
                            "split": split_of("locomo", conv.id),
                            "system": system,
                            "windows": windows,
                            "recall@10": evidence_recall([h.turn_ids for h in hits], q.evidence, 10),
                        }
                    )
    fast = {r["id"] for r in rows if r["adaptive"] and r["system"] == 1}
    report = {}
    for split in ("dev", "test"):
        base = [r for r in rows if not r["adaptive"] and r["split"] == split]
        adapt = [r for r in rows if r["adaptive"] and r["split"] == split]
        one = [r for r in adapt if r["id"] in fast]
        block = {
            "questions": len(base),
            "system1_share": len(one) / max(1, len(adapt)),
            "recall@10_without_router": fmean(r["recall@10"] for r in base),
            "recall@10_with_router": fmean(r["recall@10"] for r in adapt),
            "system1_questions_recall@10_episodic": fmean([r["recall@10"] for r in base if r["id"] in fast] or [0]),
            "system1_questions_recall@10_fast": fmean([r["recall@10"] for r in one] or [0]),
            "assistants_per_question_without": fmean(r["windows"] for r in base),
            "assistants_per_question_with": fmean(r["windows"] if r["system"] == 2 else 0 for r in adapt),
        }
        report[split] = block
        print(split, json.dumps({k: round(v, 3) for k, v in block.items()}))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
