"""What each engine costs on the same conversations: ingest + search seconds, embeddings cached (issue 34's target:
no engine above 2x the default engine's total).

    python benchmarks/engine_cost.py --split test --embed-cache bench-out/embed-cache.db --out bench-out/cost.json

Each engine runs in its own process over the LoCoMo conversations of the split: every conversation is ingested
into its own namespace (256 turns a call, as `cuemem bench` does; the first search, which catches the engine's
indexes up, counts as ingest), then each of its questions is searched once (k = 10, budget 4,096). Vectors come
from the shared embedding cache, so the figures are the engine's own work (fill the cache first with any
`cuemem bench locomo --embed-cache` run of the split). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file

ENGINES = "stitch,scg,episodic,profile,hybrid"


def measure(engine: str, split: str, cache: Path) -> dict:
    """One engine's ingest and search seconds over the split's conversations (this process only)."""
    from cuemem import Memory
    from cuemem.bench.datasets import load_locomo, split_of
    from cuemem.config import Settings
    from cuemem.embed import make_embedder
    from cuemem.embed.cached import cached_embedder

    embedder, _ = cached_embedder(make_embedder(Settings.load(None)), cache)  # as `cuemem bench` caches
    conversations = [c for c in load_locomo(dataset_file(LOCOMO)) if split_of("locomo", c.id) == split]
    ingest = search = 0.0
    turns = questions = 0
    with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "cost.db", engine=engine, embedder=embedder) as m:
        embedder.embed(["model load is not ingest"])
        for conv in conversations:
            start = time.perf_counter()
            for i in range(0, len(conv.turns), 256):
                m.add(conv.turns[i : i + 256], user_id=conv.id)
            m.search("catch up", user_id=conv.id, k=10)
            ingest += time.perf_counter() - start
            turns += len(conv.turns)
            start = time.perf_counter()
            for q in conv.questions:
                m.search(q.text, user_id=conv.id, k=10, budget_tokens=4096, now=q.date)
            search += time.perf_counter() - start
            questions += len(conv.questions)
    return {
        "engine": engine,
        "split": split,
        "conversations": len(conversations),
        "turns": turns,
        "questions": questions,
        "ingest_seconds": ingest,
        "search_seconds": search,
        "total_seconds": ingest + search,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="dev", choices=["dev", "test"])
    parser.add_argument("--engines", default=ENGINES, help=f"comma-separated, the first is the reference ({ENGINES})")
    parser.add_argument("--embed-cache", required=True, help="embedding cache file shared with `cuemem bench`")
    parser.add_argument("--out", default="bench-out/engine-cost.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one engine in this process
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    if args.one:
        print(json.dumps(measure(args.one, args.split, Path(args.embed_cache))))
        return
    rows = []
    for engine in args.engines.split(","):
        command = [sys.executable, __file__, "--one", engine, "--split", args.split, "--embed-cache", args.embed_cache]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{engine} failed:\n{done.stderr[-3000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["times_reference"] = row["total_seconds"] / rows[0]["total_seconds"] if rows else 1.0
        rows.append(row)
        print(
            f"{engine:>10}  ingest {row['ingest_seconds']:6.1f} s  search {row['search_seconds']:6.1f} s"
            f"  total {row['total_seconds']:6.1f} s  x{row['times_reference']:.2f} {rows[0]['engine']}",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
