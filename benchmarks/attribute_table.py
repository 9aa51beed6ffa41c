"""The asked attribute (issue 34), before and after: recall of `stitch` and `hybrid` with the refine stage off
(`CUEMEM_ATTRIBUTE_WEIGHT=0`) and on (the default), from `cuemem bench` output directories, into a result file
of BENCHMARKS.md (benchmarks/results/retrieval-attribute.json):

    python benchmarks/attribute_table.py --date 2026-11-27 --commit abc1234 \\
        "look-alike|dev (chosen on)|bench-out/came-dev-now|bench-out/cames-0" \\
        "LoCoMo|dev (chosen on)|bench-out/attr0s-locomo-dev,bench-out/attr0-locomo-dev|bench-out/attrs-0" \\
        "look-alike|test (reported)|bench-out/came-test-attr0|bench-out/came-test-attr" \\
        "LoCoMo|test (reported)|bench-out/locomo-test-attr0s,bench-out/locomo-test-attr0|bench-out/locomo-test-attr"

Each argument is DATA|SPLIT|OFF|ON, where OFF and ON are comma-separated directories (an engine is read from the
first that ran it). `--latency NAME=LOG` adds the search latency of a `benchmarks/settings_ab.py` run (side a:
`attribute_weight=0`, side b: `=1`), e.g. `--latency "cold: no candidate embedded yet=bench-out/ab-attr-cold.log"`.
"At rank 1" counts the questions whose first hit is not evidence and is a look-alike (the same
attribute of another goal) or a value since replaced, as a share of all questions.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
from pathlib import Path
from typing import Any

from reference import dump

ENGINES = ("stitch", "hybrid")
COLUMNS = [
    ("data", "conversations", "", "l"),
    ("split", "split", "", "l"),
    ("engine", "engine", "", "l"),
    ("stage", "the asked attribute", "", "l"),
    ("questions", "questions", "d", "r"),
    ("r1", "R@1", ".3f", "r"),
    ("r5", "R@5", ".3f", "r"),
    ("r10", "R@10", ".3f", "r"),
    ("ndcg", "NDCG@10", ".3f", "r"),
    ("lookalike1", "look-alike at rank 1", ".3f", "r"),
    ("superseded1", "replaced value at rank 1", ".3f", "r"),
]


def figures(folders: list[Path], engine: str) -> dict[str, Any]:
    """An engine's recall from the first directory that ran it, and its wrong first hits from the checkpoints."""
    for folder in folders:
        results = json.loads((folder / "results.json").read_text())
        if engine not in results["engines"]:
            continue
        overall = results["engines"][engine]["retrieval"]
        rank1 = {"lookalike_top": 0.0, "superseded_top": 0.0}
        count = 0
        for path in glob.glob(str(folder / "checkpoints" / engine / "*.json")):
            for q in json.loads(Path(path).read_text())["questions"]:
                if not q["evidence"] or q.get("adversarial"):
                    continue
                count += 1
                if q["recall@1"] == 0:
                    for key in rank1:
                        rank1[key] += float(q.get(key) or 0.0)
        return {
            "questions": overall["questions"],
            "r1": overall["recall@1"],
            "r5": overall["recall@5"],
            "r10": overall["recall@10"],
            "ndcg": overall["ndcg@10"],
            "lookalike1": rank1["lookalike_top"] / count if results["dataset"] == "came" and count else None,
            "superseded1": rank1["superseded_top"] / count if results["dataset"] == "came" and count else None,
        }
    raise SystemExit(f"no run of {engine} in {', '.join(map(str, folders))}")


AB_LINE = re.compile(r"^(a|b) .*: p50 ([\d.]+) ms, p95 ([\d.]+) ms, mean ([\d.]+) ms \((\d+) searches\)")


def latency_rows(specs: list[str]) -> list[dict[str, Any]]:
    """One row per side of each settings_ab.py log."""
    rows = []
    for spec in specs:
        name, log = spec.rsplit("=", 1)
        for line in Path(log).read_text().splitlines():
            found = AB_LINE.match(line)
            if found:
                side, p50, p95, _mean, searches = found.groups()
                stage = "off" if side == "a" else "on (default)"
                rows.append(
                    {"case": name, "stage": stage, "searches": int(searches), "p50": float(p50), "p95": float(p95)}
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", help="DATA|SPLIT|OFF|ON")
    parser.add_argument("--date", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/retrieval-attribute.json"))
    parser.add_argument("--latency", action="append", default=[], help="NAME=LOG of a settings_ab.py run")
    args = parser.parse_args()
    rows = []
    for pair in args.pairs:
        data, split, off, on = pair.split("|")
        for engine in ENGINES:
            for stage, folders in (("off", off), ("on (default)", on)):
                paths = [Path(p) for p in folders.split(",")]
                rows.append({"data": data, "split": split, "engine": engine, "stage": stage, **figures(paths, engine)})
    result = {
        "format": 1,
        "name": "retrieval-attribute",
        "kind": "tables",
        "section": "retrieval",
        "order": 45,
        "heading": "The asked attribute: the goal's turns ordered by what the question asks of it",
        "title": (
            "`stitch` and `hybrid` with the refine stage `attribute_first` off (CUEMEM_ATTRIBUTE_WEIGHT=0) and on "
            "(weight 1, top 10: chosen on dev), EmbeddingGemma (ONNX int8), budget 4,096 tokens. Look-alike "
            "conversations: seeds 0-3 (dev) and 100-102 (test), sizes S and M, 120 evenly spaced questions per M "
            "conversation; LoCoMo: conv-26/30/41/42/43 (dev) and conv-44/47/48/49/50 (test), categories 1-4. "
            "At rank 1: the share of the questions whose first hit is no evidence and is a look-alike (the same "
            "attribute of another goal) or a value since replaced"
        ),
        "runs": {
            "a34": {
                "date": args.date,
                "machine": "2 cores, 24 GiB, Linux x86_64, Python 3.11.7; two benchmark runs sharing it",
                "command": (
                    "cuemem bench came --size S,M --seed 0-3 --engines stitch,hybrid --embed-cache "
                    "bench-out/came-embed-dev.db --max-questions 120 --out bench-out/cames-0\n"
                    "cuemem bench locomo --split dev --engines stitch,hybrid --embed-cache "
                    "bench-out/embed-cache-locomo.db --out bench-out/attrs-0\n"
                    "# the same with CUEMEM_ATTRIBUTE_WEIGHT=0 (off), and with --seed 100-102 / --split test\n"
                    "python benchmarks/attribute_table.py ... (this file's docstring)"
                ),
                "commit": args.commit,
                "source": "measured; collected by benchmarks/attribute_table.py",
                "note": (
                    "Chosen on dev, reported once on test. Variants tried on dev (docs/benchmarks/came.md, 'The asked "
                    "attribute'): the vectors dense search indexes (date and speaker first) in place of the words as "
                    "said, the goal's own turns first in the stage's order, the stage after current values first."
                ),
            }
        },
        "tables": [
            {
                "title": "",
                "run": "a34",
                "columns": [{"key": k, "label": label, "format": f, "align": a} for k, label, f, a in COLUMNS],
                "rows": rows,
            }
        ],
    }
    if args.latency:
        result["runs"]["a34l"] = {
            "date": args.date,
            "machine": "2 cores, 24 GiB, Linux x86_64, Python 3.11.7; the machine otherwise idle",
            "command": (
                "python benchmarks/settings_ab.py --engine stitch --size 10000 --a attribute_weight=0 "
                "--b attribute_weight=1 --queries 200 --db bench-out/ab-cold.db --cache bench-out/ab-cold-cache.db "
                "--datasets ../shared/datasets   # twice: cold, then warm"
            ),
            "commit": args.commit,
            "source": "measured by benchmarks/settings_ab.py",
            "note": (
                "MiniLM (the benchmark's embedder), a 10,000-turn store of LoCoMo turns under new ids, questions "
                "interleaved between the sides. Cold: neither the store's embedding cache nor the benchmark's "
                "embedding file held any turn's words as said (removed from copies of both), so each search embeds "
                "the candidates it meets first; warm: the same run again, which finds them in the store."
            ),
        }
        result["tables"].append(
            {
                "title": "Search latency of `stitch` at 10,000 turns, the stage off and on",
                "run": "a34l",
                "columns": [
                    {"key": "case", "label": "case", "format": "", "align": "l"},
                    {"key": "stage", "label": "the asked attribute", "format": "", "align": "l"},
                    {"key": "searches", "label": "searches", "format": "d", "align": "r"},
                    {"key": "p50", "label": "p50 ms", "format": ".1f", "align": "r"},
                    {"key": "p95", "label": "p95 ms", "format": ".1f", "align": "r"},
                ],
                "rows": latency_rows(args.latency),
            }
        )
    args.out.write_text(dump(result))
    print(f"wrote {args.out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
