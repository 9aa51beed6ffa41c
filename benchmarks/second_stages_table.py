"""Issue 34's second round of 2026-11-27, before and after: the quoted old values (index/revisions.py), questions
over two speakers (refine.each_speaker) and standing facts in every engine (engines/standing.py), from `cuemem
bench` output directories, into a result file of BENCHMARKS.md (benchmarks/results/retrieval-second-stages.json):

    python benchmarks/second_stages_table.py --date 2026-11-27 --commit abc1234 \\
        "look-alike S+M|dev (chosen on)|bench-out/cames-0|bench-out/rq2-came-dev" \\
        "LoCoMo|dev (chosen on)|bench-out/attrs-0|bench-out/es-loc-2" \\
        "look-alike S+M|test (reported)|bench-out/came-test-attr|bench-out/rq2-came-test" \\
        "LoCoMo|test (reported)|bench-out/locomo-test-attr|bench-out/r4-locomo-test" \\
        "standing facts|dev half (chosen on)|bench-out/sf-base|bench-out/sf-final|standing-dev" \\
        "standing facts|test half (reported)|bench-out/sf-base|bench-out/sf-final|standing-test"

Each argument is DATA|SPLIT|BEFORE|AFTER[|CATEGORY]: two directories, and the question category to read (all
questions without one). "Both speakers" is the recall@10 of the LoCoMo questions that name both speakers.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file
from reference import dump

ENGINES = ("stitch", "hybrid")
COLUMNS = [
    ("data", "conversations", "", "l"),
    ("split", "split", "", "l"),
    ("engine", "engine", "", "l"),
    ("change", "second stages", "", "l"),
    ("questions", "questions", "d", "r"),
    ("r1", "R@1", ".3f", "r"),
    ("r5", "R@5", ".3f", "r"),
    ("r10", "R@10", ".3f", "r"),
    ("rbudget", "R@budget", ".3f", "r"),
    ("superseded", "replaced value first", ".3f", "r"),
    ("both", "both speakers R@10", ".3f", "r"),
]


def speakers_of(locomo: Path) -> dict[str, tuple[str, str]]:
    """Each LoCoMo conversation's two speakers' first names."""
    data = json.loads(locomo.read_text())
    return {c["sample_id"]: tuple(c["conversation"][k].split()[0] for k in ("speaker_a", "speaker_b")) for c in data}


def figures(folder: Path, engine: str, category: str | None, speakers: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """An engine's recall in one bench directory (one category's, when given), its share of questions whose top
    wrong turn is a replaced value (look-alike data), and the recall@10 of the questions naming both speakers."""
    results = json.loads((folder / "results.json").read_text())
    block = results["engines"][engine]
    scores = block["by_category"][category] if category else block["retrieval"]
    row: dict[str, Any] = {
        "questions": scores["questions"],
        "r1": scores["recall@1"],
        "r5": scores["recall@5"],
        "r10": scores["recall@10"],
        "rbudget": scores["recall@budget"],
        "superseded": scores.get("superseded_top") if results["dataset"] == "came" else None,
        "both": None,
    }
    if results["dataset"] == "locomo" and not category:
        questions = {c["sample_id"]: c["qa"] for c in json.loads(Path(results["data"]).read_text())}
        both = []
        for path in glob.glob(str(folder / "checkpoints" / engine / "*.json")):
            checkpoint = json.loads(Path(path).read_text())
            names = speakers.get(checkpoint["conversation"])
            for q in checkpoint["questions"]:
                text = questions[checkpoint["conversation"]][int(q["id"].split("#")[1])]["question"]
                named = names and all(re.search(rf"\b{re.escape(n)}\b", text) for n in names)
                if named and q["evidence"] and str(q["category"]) != "5":
                    both.append(q["recall@10"])
        row["both"] = sum(both) / len(both) if both else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", help="DATA|SPLIT|BEFORE|AFTER[|CATEGORY]")
    parser.add_argument("--date", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/retrieval-second-stages.json"))
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    speakers = speakers_of(dataset_file(LOCOMO))
    rows = []
    for pair in args.pairs:
        data, split, before, after, *category = pair.split("|")
        for engine in ENGINES:
            for change, folder in (("before", before), ("after (default)", after)):
                found = figures(Path(folder), engine, category[0] if category else None, speakers)
                rows.append({"data": data, "split": split, "engine": engine, "change": change, **found})
    result = {
        "format": 1,
        "name": "retrieval-second-stages",
        "kind": "tables",
        "section": "retrieval",
        "order": 46,
        "heading": "Quoted old values, questions over two speakers, standing facts in every engine",
        "title": (
            "`stitch` and `hybrid` before and after three changes of issue 34 (2026-11-27): a change word and two "
            "values of one kind quote the earlier turn's as the value replaced; a question naming two speakers "
            "gathers each one's turns (each_speaker_weight 2); a message brings back the turns stating their "
            "speaker's value, goal, state or cause (standing_weight 2). EmbeddingGemma (ONNX int8), budget 4,096 "
            "tokens. Look-alike conversations: seeds 0-3 (dev) and 100-102 (test), sizes S and M, 120 evenly spaced "
            "questions per M conversation; LoCoMo: conv-26/30/41/42/43 (dev) and conv-44/47/48/49/50 (test), "
            "categories 1-4; standing facts: benchmarks/standing_facts.py, 20 messages per half. Replaced value "
            "first: the share of questions whose top wrong turn is a value since replaced. Both speakers: recall@10 "
            "of the LoCoMo questions naming both speakers (67 dev, 81 test)"
        ),
        "runs": {
            "a34b": {
                "date": args.date,
                "machine": "2 cores, 24 GiB, Linux x86_64, Python 3.11.7; two benchmark runs sharing it",
                "command": (
                    "cuemem bench came --size S,M --seed 0-3 --engines stitch,hybrid --embed-cache "
                    "bench-out/came-embed-dev.db --max-questions 120 --out bench-out/rq2-came-dev\n"
                    "cuemem bench locomo --split dev --engines stitch,hybrid --embed-cache "
                    "bench-out/embed-cache-locomo.db --out bench-out/es-loc-2\n"
                    "python benchmarks/standing_facts.py --out bench-out/standing-facts.json\n"
                    "cuemem bench locomo --data bench-out/standing-facts.json --types standing-dev,standing-test "
                    "--engines stitch,hybrid --embed-cache bench-out/embed-cache-locomo.db --out bench-out/sf-final\n"
                    "# test: --seed 100-102 --out bench-out/rq2-came-test, --split test "
                    "--out bench-out/r4-locomo-test; before: runs a34 (bench-out/cames-0, attrs-0, "
                    "came-test-attr, locomo-test-attr) and CUEMEM_STANDING_WEIGHT=0 (bench-out/sf-base)\n"
                    "python benchmarks/second_stages_table.py ... (this file's docstring)"
                ),
                "commit": args.commit,
                "source": "measured; collected by benchmarks/second_stages_table.py",
                "note": (
                    "Chosen on dev, reported once on test. Sweeps (docs/benchmarks/came.md 'Quoted old values', "
                    "retrieval.md 'Questions over two speakers', profile.md 'Standing facts in every engine'): "
                    "each_speaker_weight 0.5/1/2/4, standing_weight 1/2/3, standing_floor 0/0.1/0.2, and the asked "
                    "attribute's depth 10/20/30 (kept at 10). The look-alike and LoCoMo test runs after are those of "
                    "the final code (d9c1cad, after the review narrowed the quoted old values to words that say a "
                    "value was replaced: the same figures as the first version on both look-alike splits); LoCoMo "
                    "dev's is es-loc-2 (18ab031, before the standing stage, which none of its questions opens, and "
                    "with the first version of the quoted old values, which changed none of its rankings); the "
                    "standing-facts runs were made at 19a7ebb, the same stage as the final code's."
                ),
            }
        },
        "tables": [
            {
                "title": "",
                "run": "a34b",
                "columns": [{"key": k, "label": label, "format": f, "align": a} for k, label, f, a in COLUMNS],
                "rows": rows,
            }
        ],
    }
    args.out.write_text(dump(result))
    print(f"wrote {args.out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
