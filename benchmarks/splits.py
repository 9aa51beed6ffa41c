"""Per-split figures of a LoCoMo run, read from its checkpoints (dev: conv-26, -30, -41, -42, -43; test: the rest).

    python benchmarks/splits.py bench-out/i15/retrieval

One line per engine: recall@10, recall@budget, NDCG@10 and multi-hop (category 1) recall@10 over categories 1-4,
and for `episodic` engines the gold evidence among the assistants' evidence turns, their number and the windows
per conversation; search p50 in milliseconds.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
from pathlib import Path
from statistics import fmean
from typing import Any

from cuemem.bench.datasets import split_of


def average(questions: list[dict[str, Any]], key: str) -> float:
    values = [q[key] for q in questions if q.get(key) is not None and not math.isnan(float(q[key]))]
    return fmean(values) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a `cuemem bench locomo` output folder")
    args = parser.parse_args()
    for folder in sorted((args.out / "checkpoints").iterdir()):
        rows: dict[str, list[dict[str, Any]]] = {}
        windows: dict[str, list[int]] = {}
        for path in glob.glob(glob.escape(str(folder)) + "/*.json"):
            record = json.loads(Path(path).read_text())
            split = split_of("locomo", record["conversation"])
            windows.setdefault(split, []).append(int(record["engine"].get("windows", 0)))
            rows.setdefault(split, []).extend(
                q for q in record["questions"] if q["evidence"] and q["category"] in {"1", "2", "3", "4"}
            )
        parts = [f"{folder.name:24s}"]
        for split in ("dev", "test"):
            qs = rows.get(split, [])
            latency = sorted(q["latency_ms"] for q in qs) or [math.nan]
            multihop = [q for q in qs if q["category"] == "1"]
            parts.append(
                f"{split}: n {len(qs)} R@10 {average(qs, 'recall@10'):.3f} R@b {average(qs, 'recall@budget'):.3f}"
                f" ndcg {average(qs, 'ndcg@10'):.3f} cat1 {average(multihop, 'recall@10'):.3f}"
                f" evidence {average(qs, 'evidence_recall'):.3f} ev.turns {average(qs, 'evidence_turns'):.1f}"
                f" windows {fmean(windows.get(split, [0])):.1f} p50 {latency[len(latency) // 2]:.0f} ms"
            )
        print(" | ".join(parts))


if __name__ == "__main__":
    main()
