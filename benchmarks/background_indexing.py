"""Indexing off the request path (issue 36, item 3): add latency, and how long until an acknowledged turn is
indexed (searchable by vector without a catch-up), under sustained ingest.

A writer adds one turn at a time at `--rate` turns/s, round-robin over `--namespaces` namespaces, for `--seconds`;
with `--mode background` the adds return once durable and the memory's background worker indexes, with `on-add`
each add indexes before it returns. "Indexed after" is measured conservatively: a turn counts as indexed when the
first indexing pass of its namespace that started after its acknowledgement ended.

    python benchmarks/background_indexing.py --embedder minilm --mode background --out bench-out/bg-minilm.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cuemem import Memory
from cuemem.types import Namespace


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="cuemem-bg-"))
    memory = Memory(
        folder / "m.db",
        engine=args.engine,
        embedder=args.embedder,
        llm_cache="off",
        index_in_background=args.mode == "background",
    )
    passes: dict[Namespace, list[tuple[float, float]]] = {}  # namespace -> (started, ended) of indexing passes
    sync = memory._indexer.sync

    def timed(engine: Any, ns: int, namespace: Namespace, progress: Any = None) -> int:
        started = time.perf_counter()
        done = sync(engine, ns, namespace, progress)
        passes.setdefault(namespace, []).append((started, time.perf_counter()))
        return done

    memory._indexer.sync = timed  # type: ignore[method-assign]
    memory.add({"id": "warm", "text": "warming up the embedder"}, user_id="warm")  # the model loads here
    if memory.background is not None:
        memory.background.wait(120)
    acks: list[tuple[Namespace, float]] = []
    add_ms: list[float] = []
    interval = 1.0 / args.rate
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < args.seconds:
        user = f"user-{i % args.namespaces}"
        text = f"Turn {i}: on day {i % 28 + 1} {user} booked table {i % 17} at the harbour restaurant."
        t0 = time.perf_counter()
        memory.add({"id": f"t{i}", "text": text}, user_id=user)
        t1 = time.perf_counter()
        add_ms.append((t1 - t0) * 1000)
        acks.append((Namespace(user), t1))
        i += 1
        time.sleep(max(0.0, start + i * interval - time.perf_counter()))
    elapsed = time.perf_counter() - start
    if memory.background is not None:
        memory.background.wait(600)
    lags: list[float] = []
    for namespace, acked in acks:
        if memory.background is None:
            lags.append(0.0)  # indexed before the add returned
            continue
        ends = [end for begun, end in passes.get(namespace, []) if begun >= acked]
        if ends:
            lags.append(min(ends) - acked)
    memory.close()
    return {
        "mode": args.mode,
        "embedder": args.embedder,
        "engine": args.engine,
        "rate_asked": args.rate,
        "rate_achieved": round(i / elapsed, 1),
        "turns": i,
        "namespaces": args.namespaces,
        "add_ms_p50": round(statistics.median(add_ms), 1),
        "add_ms_p95": round(percentile(add_ms, 0.95), 1),
        "indexed_after_s_p50": round(statistics.median(lags), 2) if lags else None,
        "indexed_after_s_p95": round(percentile(lags, 0.95), 2) if lags else None,
        "turns_measured": len(lags),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["background", "on-add"], default="background")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--engine", default="hybrid")
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
