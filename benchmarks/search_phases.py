"""Where one stitch search goes: each phase timed around its function, over sampled questions, on one store.

    CUEMEM_DATASETS=../shared/datasets python benchmarks/search_phases.py --size 10000 --queries 200 \
        --db bench-out/phases-10k.db --cache bench-out/perf-embed-cache-locomo.db

The store (LoCoMo turns repeated under new ids, as in benchmarks/perf.py; its synthetic look-alike turns when no
LoCoMo file is found) is built once with MiniLM embeddings (cached in `--cache`) and kept at `--db`, so a rerun is
a fresh process on a prebuilt store. One warm-up search, then the timed ones; each line is a phase's mean
milliseconds per search (phases nest: the second stage holds the chains and the readings). The wrappers add a
little time of their own: compare phases, not this total with stitch_perf's.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import add_datasets_option, apply_datasets_option
from perf import prebuilt_store

PHASES = {  # module: functions (a method as Class.name)
    "cuemem.engines.stitch.engine": [
        "analyze_query",
        "hop_ranking",
        "refine",
        "_dense_array",
        "as_scores",
        "StitchEngine.search_state",
        "StitchEngine.step_table",
        "StitchEngine._rank_by_density",
        "reciprocal_rank_fusion",
    ],
    "cuemem.engines.current": ["chains", "revised_near", "_readings", "_other_goals"],
    "cuemem.engines.base": ["EngineContext.bm25", "EngineContext.nearest_scores", "EngineContext.hits_from_items"],
}


def timed(spent: dict[str, float]) -> None:
    """Wrap every phase so that its seconds add up in `spent` under its name."""
    import importlib

    def wrap(owner: Any, attr: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, attr)

        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - start

        setattr(owner, attr, run)

    for module_name, names in PHASES.items():
        module = importlib.import_module(module_name)
        for name in names:
            owner, _, attr = name.rpartition(".")
            wrap(getattr(module, owner) if owner else module, attr, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--db", default="bench-out/phases-10k.db")
    parser.add_argument("--cache", default="bench-out/perf-embed-cache.db")
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    embedder, sample, source = prebuilt_store(Path(args.db), "stitch", args.size, Path(args.cache), args.queries)

    from cuemem import Memory

    spent: dict[str, float] = defaultdict(float)
    timed(spent)
    with Memory(Path(args.db), engine="stitch", embedder=embedder) as memory:
        memory.search(sample[0], user_id="bench", k=10)
        spent.clear()
        whole = 0.0
        for question in sample:
            start = time.perf_counter()
            memory.search(question, user_id="bench", k=10, budget_tokens=4096)
            whole += time.perf_counter() - start
    print(f"{source} turns, {args.size} stored, {len(sample)} questions")
    print(f"{'a whole search':30s} {whole / len(sample) * 1000:7.2f} ms")
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{name:30s} {seconds / len(sample) * 1000:7.2f} ms")


if __name__ == "__main__":
    main()
