"""Search latency of one engine under two settings, on one store, with the questions interleaved (B, A, A, B, ...)
so that the machine's drift falls on both alike:

    python benchmarks/settings_ab.py --engine stitch --size 10000 --a revise_near=0 --b revise_near=8 \
        --queries 400 --db bench-out/ab-10k.db --cache bench-out/perf-embed-cache.db --datasets ../shared/datasets

The store (LoCoMo turns repeated under new ids, as in benchmarks/perf.py; its synthetic look-alike turns when no
LoCoMo file is found, which the output says) is built once with MiniLM embeddings (cached in `--cache`) and kept
at `--db`; each side opens it with its own `Memory`, so neither shares the other's engine state (they share the
embedder, and every question is embedded before the timing). Both sides first search 20 questions (the cold
readings), then the timed ones.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file
from perf import source_turns, turns_for

from cuemem.bench.metrics import percentile


def _setting(text: str) -> tuple[str, Any]:
    """`KEY=VALUE`: the value read as JSON (a number, true, a list), else as the string it is."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"a setting is KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="stitch")
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--a", nargs="*", type=_setting, default=[], help="KEY=VALUE settings of side A")
    parser.add_argument("--b", nargs="*", type=_setting, default=[], help="KEY=VALUE settings of side B")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--db", default="bench-out/ab-10k.db")
    parser.add_argument("--cache", default="bench-out/perf-embed-cache.db")
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    source = "LoCoMo" if dataset_file(LOCOMO).is_file() else "synthetic look-alike"

    from cuemem import Memory
    from cuemem.embed import MiniLMEmbedder
    from cuemem.embed.cached import CachedEmbedder

    embedder = CachedEmbedder(MiniLMEmbedder(), Path(args.cache))
    db = Path(args.db)
    built = db.with_suffix(".built")
    stamp = f"{args.engine} {args.size} {source}\n"
    if built.exists() and built.read_text() != stamp:
        parser.error(f"{db} holds another store ({built.read_text().strip()}): remove it or name another --db")
    if not built.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        with Memory(db, engine=args.engine, embedder=embedder) as memory:
            turns = turns_for(args.size)
            for start in range(0, len(turns), 1024):
                memory.add(turns[start : start + 1024], user_id="bench")
        built.write_text(stamp)
    _, questions = source_turns()
    rng = random.Random(1)
    sample = [rng.choice(questions) for _ in range(args.queries)]
    embedder.embed_query(sample)  # every question's vector cached before the timing
    sides = {
        "a": Memory(db, engine=args.engine, embedder=embedder, **dict(args.a)),
        "b": Memory(db, engine=args.engine, embedder=embedder, **dict(args.b)),
    }
    try:
        for memory in sides.values():
            for question in sample[:20]:
                memory.search(question, user_id="bench", k=10, budget_tokens=4096)
        times: dict[str, list[float]] = {"a": [], "b": []}
        for n, question in enumerate(sample):
            for side in ("a", "b") if n % 2 else ("b", "a"):
                start = time.perf_counter()
                sides[side].search(question, user_id="bench", k=10, budget_tokens=4096)
                times[side].append((time.perf_counter() - start) * 1000)
    finally:
        for memory in sides.values():
            memory.close()
        embedder.close()
    print(f"{args.engine}, {args.size:,} {source} turns, {args.queries} questions")
    for side, settings in (("a", args.a), ("b", args.b)):
        ms = times[side]
        shown = " ".join(f"{k}={v}" for k, v in settings) or "(defaults)"
        print(
            f"{side} {shown}: p50 {percentile(ms, 50):.1f} ms, "
            f"p95 {percentile(ms, 95):.1f} ms, mean {sum(ms) / len(ms):.1f} ms ({len(ms)} searches)"
        )


if __name__ == "__main__":
    main()
