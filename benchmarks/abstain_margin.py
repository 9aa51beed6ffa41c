"""Does the reader's own likelihood tell an unanswerable question from an answerable one? (issue 35, abstention)

    python benchmarks/abstain_margin.py run --out bench-out/abstain-margin.json \\
        --like bench-out/reader-said.json
    python benchmarks/abstain_margin.py report bench-out/abstain-margin.json

`run` replays `benchmarks/reader_dev.py`'s answer path (the default reader, 320 evidence tokens, date order) over
the retrievals kept beside --like (its .retr.pkl: the same questions and rankings, copied beside --out). Where
the reader answers (does not abstain), the answer's check (`answer_verify`, computed, never acting) is replaced by
three log-probability margins under the same prompt: the whole reply against the whole abstention phrase
(`whole`), the same per word (`per_word`), and their first words only (`first`). `report` prints, per margin, the
AUC of answerable against category-5 questions and of right (F1 >= 0.5) against wrong answers, then what
abstaining below each decile of the margin would give: F1 over categories 1-4, abstention on answerable and on
category-5 questions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reader_dev

from cuemem import answer
from cuemem.llm import LLMClient, LLMError

MARGINS = ("whole", "per_word", "first")


def run(args: argparse.Namespace) -> None:
    like = args.like.with_suffix(".retr.pkl")
    if not like.exists():
        raise SystemExit(f"{like} not found: run benchmarks/reader_dev.py first (its retrievals are reused)")
    shutil.copyfile(like, args.out.with_suffix(".retr.pkl"))
    shutil.copyfile(args.like.with_suffix(".db"), args.out.with_suffix(".db"))  # the premise check searches it
    phrase = reader_dev.PHRASE
    seen: list[dict[str, Any] | None] = []

    def margins(client: LLMClient, messages: list, text: str) -> float | None:
        """In place of the answer's check: the margins of `text` over the abstention phrase (kept in `seen`)."""
        first_words = [text.split()[0], phrase.split()[0]] if text.split() else []
        try:
            whole = {c.option: c.logprob for c in client.choose(messages, [text, phrase], k=2)}
            first = {c.option: c.logprob for c in client.choose(messages, first_words, k=2)} if first_words else {}
        except LLMError:
            whole, first = {}, {}
        if None in (whole.get(text), whole.get(phrase)):
            seen.append(None)  # one entry per answered question, in order
            return None
        words = max(1, len(text.split()))
        seen.append(
            {
                "whole": whole[text] - whole[phrase],
                "per_word": whole[text] / words - whole[phrase] / len(phrase.split()),
                "first": (first[first_words[0]] - first[first_words[1]]) if len(first) == 2 else None,
            }
        )
        return None

    answer._support = margins  # type: ignore[assignment]
    sys.argv = ["reader_dev.py", "--split", "dev", "--out", str(args.out), "--data", str(args.data), "m320:320:::-1e9"]
    reader_dev.main()
    results = json.loads(args.out.read_text())
    answered = [r for r in results["m320"]["records"] if not r["abstained"]]
    if len(answered) != len(seen):
        raise SystemExit(f"{len(answered)} answers but {len(seen)} margins: the answer path changed")
    for record, found in zip(answered, seen, strict=True):
        record["margins"] = found
    args.out.write_text(json.dumps(results, indent=1))


def auc(high: list[float], low: list[float]) -> float:
    pairs = sum((a > b) + 0.5 * (a == b) for a in high for b in low)
    return pairs / max(1, len(high) * len(low))


def report(args: argparse.Namespace) -> None:
    records = json.loads(args.results.read_text())["m320"]["records"]
    answerable = [r for r in records if r["cat"] != "5"]
    unanswerable = [r for r in records if r["cat"] == "5"]
    print(
        f"{len(answerable)} answerable, {len(unanswerable)} category 5; the reader answered "
        f"{sum(not r['abstained'] for r in answerable)} and {sum(not r['abstained'] for r in unanswerable)} of them"
    )
    for name in MARGINS:

        def value(r: dict[str, Any], name: str = name) -> float | None:
            m = r.get("margins")
            return None if m is None else m.get(name)

        scored = [r for r in records if value(r) is not None]
        ans = [value(r) for r in scored if r["cat"] != "5"]
        c5 = [value(r) for r in scored if r["cat"] == "5"]
        right = [value(r) for r in scored if r["cat"] != "5" and r["f1"] >= 0.5]
        wrong = [value(r) for r in scored if r["cat"] != "5" and r["f1"] < 0.5]
        print(
            f"\n{name}: AUC answerable > category 5 {auc(ans, c5):.3f}; right > wrong answers {auc(right, wrong):.3f}"  # type: ignore[arg-type]
        )
        print("| abstain below | F1 1-4 | abstains on answerable | abstains on category 5 |")
        print("|---:|---:|---:|---:|")
        cuts = sorted(value(r) for r in scored)  # type: ignore[type-var]
        for threshold in [None, *(cuts[len(cuts) * d // 10] for d in range(1, 6))]:

            def abstains(r: dict[str, Any], t: float | None = threshold) -> bool:
                v = value(r)
                return r["abstained"] or (t is not None and v is not None and v < t)

            # an answer turned into the abstention scores 0 (a reader's own abstention keeps the score it had)
            f1 = sum(0.0 if abstains(r) and not r["abstained"] else r["f1"] for r in answerable) / len(answerable)
            a1 = sum(map(abstains, answerable)) / len(answerable)
            a5 = sum(map(abstains, unanswerable)) / max(1, len(unanswerable))
            label = "never" if threshold is None else f"{threshold:.2f}"
            print(f"| {label} | {f1:.3f} | {a1:.3f} | {a5:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--like", type=Path, required=True, help="a reader_dev.py output whose retrievals to reuse")
    r.add_argument("--data", type=Path, default=Path("../shared/datasets/locomo/locomo10.json"))
    p = sub.add_parser("report")
    p.add_argument("results", type=Path)
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
