"""Tables and ranked misses from a `cuemem bench came` run (issue 27), for BENCHMARKS.md.

    python benchmarks/came_report.py tables bench-out/came-test
    python benchmarks/came_report.py losses bench-out/came-test --engine stitch --against hybrid --examples 3

`tables` prints recall@10 per engine, size and question type, then recall@budget, the look-alike rate (the
top-ranked wrong turn states the same attribute of another goal) and the superseded rate per engine and size, the
same per engine and size for questions whose evidence leaves its goal implicit and for the others (issue 34; "—"
for a run made before questions carried the flag), and the answer scores when the run answered. `losses` lists
questions where --engine's recall@10 is below --against's, by type, with both ranked lists (top 5): ✓ evidence,
≈ look-alike, ✗ superseded value, · other.
The run's directory holds came.json (the generated conversations) and checkpoints/<engine>/<conversation>.json.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

SIZES = ("S", "M", "L")
TYPES = ("revision", "recall", "multi-hop", "synthesis")
GOALS = ("implicit", "named")  # an evidence turn leaves its goal implicit / every evidence turn names it


def load(run: Path) -> tuple[dict[str, Any], dict[str, dict[str, list[dict[str, Any]]]]]:
    """(results.json, {engine: {conversation id: questions}}) of a run."""
    results = json.loads((run / "results.json").read_text())
    per: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for engine in results["engines"]:
        per[engine] = {}
        for path in sorted((run / "checkpoints" / engine).glob("*.json")):
            record = json.loads(path.read_text())
            per[engine][record["conversation"]] = record["questions"]
    return results, per


def fmt(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}"


def goal_lines(engines: dict[str, Any]) -> list[str]:
    """Per engine and size, the implicit and named blocks: recall@1 / @10 / @budget, look-alike and superseded
    rates, and the questions; a dash for what the run's results lack."""
    cols = ("recall@1", "recall@10", "recall@budget", "lookalike_top", "superseded_top")
    lines = [
        "",
        "Goal left implicit by an evidence turn, or named (recall@1 / recall@10 / recall@budget / look-alike rate"
        " / superseded rate; questions):",
        "",
        "| engine | " + " | ".join(f"{s} {g}" for s in SIZES for g in GOALS) + " |",
        "|---|" + "---|" * (len(SIZES) * len(GOALS)),
    ]
    for name, e in engines.items():
        by = e.get("by_size", {})
        cells = []
        for s in SIZES:
            for g in GOALS:
                block = by.get(s, {}).get(g)
                cells.append(
                    "—"
                    if block is None
                    else " / ".join(fmt(block.get(c)) for c in cols) + f"; {block.get('questions', 0)}"
                )
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def tables(run: Path) -> str:
    results, _ = load(run)
    engines = results["engines"]
    lines = [
        "Recall@10 by size and question type:",
        "",
        "| engine | " + " | ".join(f"{s} {t}" for s in SIZES for t in TYPES) + " |",
        "|---|" + "---:|" * (len(SIZES) * len(TYPES)),
    ]
    for name, e in engines.items():
        by = e.get("by_size", {})
        cells = [fmt(by.get(s, {}).get(t, {}).get("recall@10")) for s in SIZES for t in TYPES]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    cols = ("recall@10", "recall@budget", "lookalike_top", "superseded_top")
    lines += [
        "",
        "All types, per size (recall@10 / recall@budget / look-alike rate / superseded rate):",
        "",
        "| engine | " + " | ".join(SIZES) + " | questions (S / M / L) |",
        "|---|" + "---|" * (len(SIZES) + 1),
    ]
    for name, e in engines.items():
        by = e.get("by_size", {})
        cells = [" / ".join(fmt(by.get(s, {}).get("all", {}).get(c)) for c in cols) for s in SIZES]
        counts = " / ".join(str(by.get(s, {}).get("all", {}).get("questions", 0)) for s in SIZES)
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {counts} |")
    lines += goal_lines(engines)
    if any(e.get("answer") for e in engines.values()):
        lines += [
            "",
            "Answers (exact match / contains / token F1 on the structured answer), all sizes run:",
            "",
            "| engine | " + " | ".join(TYPES) + " | all |",
            "|---|" + "---|" * (len(TYPES) + 1),
        ]
        for name, e in engines.items():
            cells = []
            for t in [*TYPES, "all"]:
                blocks = [e["by_size"][s][t] for s in e.get("by_size", {}) if t in e["by_size"][s]]
                n = sum(b["questions"] for b in blocks)
                if not n or "em" not in blocks[0]:
                    cells.append("–")
                    continue
                avg = {k: sum(b[k] * b["questions"] for b in blocks) / n for k in ("em", "contains", "f1")}
                cells.append(f"{avg['em']:.2f} / {avg['contains']:.2f} / {avg['f1']:.2f}")
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    cost = ["", "| engine | ingest turns/s | search p50 / p95 ms |", "|---|---:|---:|"]
    for name, e in engines.items():
        c = e["cost"]
        cost.append(f"| `{name}` | {c['turns_per_s']:.1f} | {c['latency_p50_ms']:.1f} / {c['latency_p95_ms']:.1f} |")
    return "\n".join(lines + cost)


def _samples(run: Path) -> dict[str, dict[str, Any]]:
    return {s["sample_id"]: s for s in json.loads((run / "came.json").read_text())}


def _texts(sample: dict[str, Any]) -> dict[str, str]:
    conv = sample["conversation"]
    return {
        t["dia_id"]: f"{t['speaker']}: {t['text']}"
        for k, v in conv.items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    }


def _mark(turn: str, qa: dict[str, Any]) -> str:
    if turn in qa["evidence"]:
        return "✓"
    if turn in qa.get("lookalikes", []):
        return "≈"
    if turn in qa.get("superseded", []):
        return "✗"
    return "·"


def losses(run: Path, engine: str, against: str, examples: int, top: int = 5) -> str:
    _, per = load(run)
    samples = _samples(run)
    mine = {q["id"]: q for qs in per[engine].values() for q in qs}
    theirs = {q["id"]: q for qs in per[against].values() for q in qs}
    both = [i for i in mine if i in theirs]
    lost = [i for i in both if mine[i]["recall@10"] < theirs[i]["recall@10"]]
    won = [i for i in both if mine[i]["recall@10"] > theirs[i]["recall@10"]]
    lines = [
        f"`{engine}` against `{against}`: {len(lost)} questions lost and {len(won)} won at recall@10, of {len(both)}.",
        "",
    ]
    by_type = Counter(mine[i]["category"] for i in lost)
    lines.append("Lost by type: " + ", ".join(f"{t} {by_type.get(t, 0)}" for t in TYPES))
    why = Counter()
    for i in lost:
        w = mine[i].get("wrong_top")
        sample_id, n = i.rsplit("#", 1)
        qa = samples[sample_id]["qa"][int(n)]
        why[
            "look-alike"
            if w in qa.get("lookalikes", [])
            else "superseded"
            if w in qa.get("superseded", [])
            else "other"
        ] += 1
    lines.append("Top-ranked wrong turn in the lost questions: " + ", ".join(f"{k} {v}" for k, v in why.items()))
    shown = 0
    for t in TYPES:
        for i in [i for i in lost if mine[i]["category"] == t][: max(1, examples // 2)]:
            if shown >= examples * 2:
                break
            sample_id, n = i.rsplit("#", 1)
            sample = samples[sample_id]
            qa = sample["qa"][int(n)]
            texts = _texts(sample)
            lines += [
                "",
                f"**{i}** ({t}) — {qa['question']}  answer: {qa['answer']}; evidence {', '.join(qa['evidence'])}",
                "",
            ]
            for name, q in ((engine, mine[i]), (against, theirs[i])):
                ranks = {
                    t: next((r for r, ids in enumerate(q["top"], start=1) if t in ids), None) for t in qa["evidence"]
                }
                where = ", ".join(f"{t} at {r if r else '>50'}" for t, r in ranks.items())
                lines.append(f"- `{name}` (recall@10 {q['recall@10']:.2f}; evidence {where}):")
                for rank, ids in enumerate(q["top"][:top], start=1):
                    for turn in ids[:2]:
                        lines.append(f"  {rank}. {_mark(turn, qa)} {turn} {texts.get(turn, '?')[:110]}")
            shown += 1
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("tables", "losses"))
    parser.add_argument("run", type=Path)
    parser.add_argument("--engine", default="stitch")
    parser.add_argument("--against", default="hybrid")
    parser.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()
    if args.what == "tables":
        print(tables(args.run))
    else:
        print(losses(args.run, args.engine, args.against, args.examples))


if __name__ == "__main__":
    main()
