"""Model-free engines (`stitch`, `scg`, `hybrid` ...): ingest throughput and query latency on this machine.

    python benchmarks/stitch_perf.py --turns 5000 --sizes 10000 --out bench-out/stitch_perf.json
    python benchmarks/stitch_perf.py --engine scg --turns 10000 --sizes 10000 --out bench-out/scg_perf.json

Ingest is measured twice, each in its own subprocess: cold (MiniLM embeds every turn, as a first ingest does)
and with the embeddings already cached (what the labelling itself costs: spaCy, segmentation, vocabularies,
coreference, writes; for `scg` the concepts, assimilation and the schema). Query latency is p50/p95 of
`Memory.search(k=10, budget 4,096)` over LoCoMo questions on a store of the given size (LoCoMo turns repeated
under new ids, as in benchmarks/perf.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf import peak_mb, source_turns, turns_for

from cuemem.bench.metrics import percentile


def _memory(db: Path, engine: str, cache: Path | None):
    from cuemem import Memory
    from cuemem.embed import MiniLMEmbedder
    from cuemem.embed.cached import CachedEmbedder

    embedder = MiniLMEmbedder() if cache is None else CachedEmbedder(MiniLMEmbedder(), cache)
    return Memory(db, engine=engine, embedder=embedder)


def phase_ingest(engine: str, n: int, cache: str) -> dict:
    turns = turns_for(n)
    with tempfile.TemporaryDirectory() as tmp, _memory(Path(tmp) / "b.db", engine, Path(cache) if cache else None) as m:
        m.embedder.embed(["warm up"])  # model load is not ingest
        from cuemem.engines.stitch.analysis import load_spacy

        load_spacy()
        start = time.perf_counter()
        for i in range(0, n, 256):
            m.add(turns[i : i + 256], user_id="bench")
        seconds = time.perf_counter() - start
    return {
        "engine": engine,
        "turns": n,
        "cached_embeddings": bool(cache),
        "seconds": seconds,
        "turns_per_s": n / seconds,
        "peak_rss_mb": peak_mb(),
    }


def phase_search(engine: str, size: int, queries: int, cache: str) -> dict:
    _, questions = source_turns()
    rng = random.Random(1)
    sample = [rng.choice(questions) for _ in range(queries)]
    turns = turns_for(size)
    with tempfile.TemporaryDirectory() as tmp, _memory(Path(tmp) / "s.db", engine, Path(cache)) as m:
        start = time.perf_counter()
        for i in range(0, size, 1024):
            m.add(turns[i : i + 1024], user_id="bench")
        build = time.perf_counter() - start
        start = time.perf_counter()
        m.search(sample[0], user_id="bench", k=10)
        first = (time.perf_counter() - start) * 1000
        ms = []
        for q in sample:
            start = time.perf_counter()
            m.search(q, user_id="bench", k=10, budget_tokens=4096)
            ms.append((time.perf_counter() - start) * 1000)
    return {
        "engine": engine,
        "stored_turns": size,
        "build_seconds": build,
        "first_query_ms": first,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "queries": len(ms),
        "peak_rss_mb": peak_mb(),
    }


def run_phase(*args: str) -> dict:
    import subprocess

    done = subprocess.run([sys.executable, __file__, "--phase", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engine", default="stitch")
    parser.add_argument("--cache", default="bench-out/stitch-perf-embed-cache.db", help="embedding cache file")
    parser.add_argument("--out", default="bench-out/stitch_perf.json")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        name, *rest = args.phase
        if name == "ingest":
            result = phase_ingest(rest[0], int(rest[1]), rest[2] if len(rest) > 2 else "")
        else:
            result = phase_search(rest[0], int(rest[1]), int(rest[2]), rest[3])
        print(json.dumps(result))
        return
    report: dict = {"ingest": [], "search": []}
    cold = run_phase("ingest", args.engine, str(args.turns))
    print(f"ingest {args.engine} cold      {cold['turns_per_s']:7.1f} turns/s  peak {cold['peak_rss_mb']:.0f} MB")
    run_phase("ingest", args.engine, str(args.turns), args.cache)  # fills the cache
    warm = run_phase("ingest", args.engine, str(args.turns), args.cache)
    print(f"ingest {args.engine} embeddings cached {warm['turns_per_s']:7.1f} turns/s")
    report["ingest"] += [cold, warm]
    for size in [int(s) for s in args.sizes.split(",")]:
        r = run_phase("search", args.engine, str(size), str(args.queries), args.cache)
        print(
            f"search {size:>7} {args.engine} p50 {r['p50_ms']:6.1f} ms  p95 {r['p95_ms']:6.1f} ms"
            f"  first {r['first_query_ms']:6.0f} ms  peak {r['peak_rss_mb']:.0f} MB"
        )
        report["search"].append(r)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
