"""Query-time constants tuned on a split's stores (issue 13: tune on dev, report on test).

    # 1. ingest the split once per engine (the stores are kept under OUT/stores/ENGINE.db)
    cuemem bench locomo --split dev --engines hybrid,stitch --embed-cache EMB --out OUT
    # 2. search those stores again under each setting of a grid (nothing is re-ingested)
    python benchmarks/tune.py --store OUT/stores/stitch.db --engine stitch --split dev \
        --embed-cache EMB --grid speaker_boost=0,0.25,0.5 --grid expand_weight=0,0.5 --out OUT/tune-stitch.json

Every setting here is read at query time (speaker_boost, date_boost, expand_weight, expand_depth, rrf_*,
rerank ...), so one ingest serves the whole grid. A name `engine.FIELD` sets a field of the engine's own config
(e.g. `--grid engine.temperature=1,5,20 --grid engine.hops=0,1,2` for scg); only fields read at query time make
sense there, since the store was ingested under the registered config. Prints recall@10 overall (categories
1-4 / non-abstention), on LoCoMo's category 1, on the questions that name a date or period (`dated@10`),
recall@budget and search milliseconds, per grid point.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cuemem import Memory
from cuemem.bench.datasets import load_locomo, load_longmemeval, split_of
from cuemem.bench.metrics import evidence_recall
from cuemem.bench.protocol import DEPTH
from cuemem.config import Settings
from cuemem.embed import make_embedder
from cuemem.embed.cached import CachedEmbedder
from cuemem.engines import get_engine, typed_overrides
from cuemem.index.budget import pack
from cuemem.index.dates import parse_timestamp, query_window

FILES = {"locomo": "locomo/locomo10.json", "longmemeval": "longmemeval/longmemeval_s_cleaned.PARTIAL_499of500.json.gz"}


def grid(specs: list[str]) -> list[dict[str, str]]:
    axes = []
    for spec in specs:
        name, values = spec.split("=", 1)
        axes.append([(name, v) for v in values.split(",")])
    return [dict(point) for point in itertools.product(*axes)] or [{}]


def configured(name: str, overrides: dict[str, str]) -> object:
    """The registered engine `name` with fields of its config replaced (typed like their defaults), under the
    same name, so that it reads the store's derived state."""
    engine = get_engine(name)
    if overrides:
        config = engine.config  # type: ignore[attr-defined]
        engine.config = dataclasses.replace(config, **typed_overrides(config, overrides, name))  # type: ignore[attr-defined]
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--dataset", default="locomo")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--types", default="", help="only questions of these comma-separated categories (as bench)")
    parser.add_argument("--embedder", default=None)
    parser.add_argument("--embed-cache", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--max-questions", type=int, default=None)
    parser.add_argument("--grid", action="append", default=[], help="NAME=V1,V2,... (repeatable)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = args.data or Settings().datasets / FILES[args.dataset]
    loader = load_locomo if args.dataset == "locomo" else load_longmemeval
    convs = [c for c in loader(data) if split_of(args.dataset, c.id) == args.split]
    wanted = {t.strip() for t in args.types.split(",") if t.strip()}
    if wanted:  # the same selection as `cuemem bench --types`: other questions out, then empty conversations
        convs = [
            c
            for c in (dataclasses.replace(c, questions=[q for q in c.questions if q.category in wanted]) for c in convs)
            if c.questions
        ]
    convs = convs[: args.limit]
    base = {"embedder": args.embedder} if args.embedder else {}
    embedder = make_embedder(Settings.load(**base))
    if args.embed_cache:
        embedder = CachedEmbedder(embedder, args.embed_cache)
    results = []
    for point in grid(args.grid):
        setting = {k: v for k, v in point.items() if not k.startswith("engine.")}
        engine = configured(args.engine, {k[7:]: v for k, v in point.items() if k.startswith("engine.")})
        settings = Settings.load(db=args.store, engine=args.engine, **base, **setting)
        rows = []
        with Memory(settings=settings, embedder=embedder, engine=engine, read_only=True) as memory:
            for conv in convs:
                questions = [q for q in conv.questions if q.evidence and not q.adversarial]
                if args.max_questions:
                    questions = questions[:: max(1, len(questions) // args.max_questions)][: args.max_questions]
                for q in questions:
                    start = time.perf_counter()
                    hits = memory.search(q.text, user_id=f"{args.dataset}:{conv.id}", k=DEPTH, now=q.date).hits
                    ms = (time.perf_counter() - start) * 1000
                    ranked = [h.turn_ids for h in hits]
                    windowed = query_window(q.text, parse_timestamp(q.date) if q.date else None) is not None
                    rows.append(
                        {
                            "category": q.category,
                            "r10": evidence_recall(ranked, q.evidence, 10),
                            "windowed": windowed,
                            "r5": evidence_recall(ranked, q.evidence, 5),
                            "rb": evidence_recall([h.turn_ids for h in pack(hits, args.budget)], q.evidence),
                            "ms": ms,
                        }
                    )
        cat1 = [r for r in rows if r["category"] == "1"]
        dated = [r for r in rows if r["windowed"]]
        summary = {
            **point,
            "questions": len(rows),
            "recall@10": statistics.fmean(r["r10"] for r in rows),
            "recall@5": statistics.fmean(r["r5"] for r in rows),
            "cat1@10": statistics.fmean(r["r10"] for r in cat1) if cat1 else None,
            "recall@budget": statistics.fmean(r["rb"] for r in rows),
            "dated_questions": len(dated),
            "dated@10": statistics.fmean(r["r10"] for r in dated) if dated else None,
            "ms_p50": statistics.median(r["ms"] for r in rows),
        }
        by_cat = {}
        for cat in sorted({r["category"] for r in rows}):
            by_cat[cat] = statistics.fmean(r["r10"] for r in rows if r["category"] == cat)
        summary["by_category@10"] = by_cat
        results.append(summary)
        print(json.dumps(summary), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
