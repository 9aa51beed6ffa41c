"""Recall by split from `cuemem bench` checkpoints (issue 13): the same figures for any run, made with or without
`--split`, so runs from before the split existed compare with runs after it.

    python benchmarks/split_summary.py bench-out/i12/gemma768 bench-out/i13/test-gemma

For each output directory and engine, per split: questions (categories 1-4 / non-abstention, with evidence),
recall@10, recall@10 on LoCoMo category 1, recall@5, recall@budget, mean context tokens, mean search ms.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuemem.bench.datasets import split_of


def main() -> None:
    for root in map(Path, sys.argv[1:]):
        for engine_dir in sorted((root / "checkpoints").iterdir()):
            rows: dict[str, list[dict]] = {"dev": [], "test": []}
            for path in sorted(engine_dir.glob("*.json")):
                conv = json.loads(path.read_text())
                dataset = "locomo" if conv["conversation"].startswith("conv-") else "longmemeval"
                kept = [q for q in conv["questions"] if not q["adversarial"] and q["evidence"]]
                rows[split_of(dataset, conv["conversation"])] += kept
            for split, qs in rows.items():
                if not qs:
                    continue

                def mean(key: str, sel: list[dict] = qs) -> float:
                    return statistics.fmean(q[key] for q in sel) if sel else float("nan")

                cat1 = [q for q in qs if q["category"] == "1"]
                print(
                    f"{root.name:>14} {engine_dir.name:>10} {split:4} n={len(qs):4} R@10={mean('recall@10'):.3f}"
                    f" cat1={mean('recall@10', cat1):.3f} R@5={mean('recall@5'):.3f}"
                    f" R@budget={mean('recall@budget'):.3f} ctx={mean('context_tokens'):.0f}"
                    f" ms={mean('latency_ms'):.0f}"
                )


if __name__ == "__main__":
    main()
