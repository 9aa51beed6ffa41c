"""Do two `cuemem bench` runs rank the same? Per engine and conversation, every question's ranked hits (their turn
ids, top 50) and recall figures are compared between two output folders; a refactoring that changes no behaviour
leaves them identical (issue 32: "recall on LoCoMo test is unchanged for every engine").

    python benchmarks/compare_runs.py bench-out/locomo-test-before bench-out/locomo-test-after

Prints one line per engine (conversations and questions compared, rankings that differ, recall@10 of each run) and
exits 1 when any ranking or figure differs, 2 when the runs share no conversation.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

FIGURES = ("recall@1", "recall@10", "recall@budget", "ndcg@10")


def questions(run: Path, engine: str) -> dict[tuple[str, str], dict]:
    """Every question of one engine's checkpoints, by (conversation, question id)."""
    out: dict[tuple[str, str], dict] = {}
    for path in sorted((run / "checkpoints" / engine).glob("*.json")):
        data = json.loads(path.read_text())
        for q in data["questions"]:
            out[(path.stem, q["id"])] = q
    return out


def same(x: object, y: object) -> bool:
    """Equal figures (two NaN, the recall of a question without evidence, count as equal)."""
    both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
    return both_nan or x == y


def compare(before: Path, after: Path) -> int:
    """Print the comparison; the exit status (0 same, 1 different, 2 nothing to compare)."""
    engines = sorted(p.name for p in (before / "checkpoints").iterdir() if (after / "checkpoints" / p.name).is_dir())
    status, compared = 0, 0
    for engine in engines:
        a, b = questions(before, engine), questions(after, engine)
        shared = sorted(a.keys() & b.keys())
        if not shared:
            continue
        compared += 1
        rankings = sum(a[k]["top"] != b[k]["top"] for k in shared)
        figures = sum(any(not same(a[k].get(f), b[k].get(f)) for f in FIGURES) for k in shared)
        scored = [k for k in shared if a[k]["evidence"] and str(a[k]["category"]) in ("1", "2", "3", "4")]
        r10 = [sum(run[k]["recall@10"] for k in scored) / max(len(scored), 1) for run in (a, b)]
        conversations = len({c for c, _ in shared})
        print(
            f"{engine:12} {conversations} conversations, {len(shared)} questions; differing rankings: {rankings},"
            f" differing figures: {figures}; R@10 (categories 1-4) {r10[0]:.3f} -> {r10[1]:.3f}"
        )
        if rankings or figures:
            status = 1
    return status if compared else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
