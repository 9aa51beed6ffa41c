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
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import add_datasets_option, apply_datasets_option
from perf import prebuilt_store

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
    embedder, sample, source = prebuilt_store(Path(args.db), args.engine, args.size, Path(args.cache), args.queries)

    from cuemem import Memory

    sides = {
        "a": Memory(Path(args.db), engine=args.engine, embedder=embedder, **dict(args.a)),
        "b": Memory(Path(args.db), engine=args.engine, embedder=embedder, **dict(args.b)),
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
