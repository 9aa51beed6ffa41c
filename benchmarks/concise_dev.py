"""LoCoMo F1 of recorded reader replies as they were and cut by `cuemem.answer.concise` (issue 35).

    python benchmarks/concise_dev.py bench-out/reader-said.json s320 r320

Reads a `benchmarks/reader_dev.py` output (its replies must predate `concise`, commit 73da86e or earlier, or they
are cut already) and its retrievals (.retr.pkl beside it, for the question texts); prints, per variant, F1 over
categories 1-4 and per category, before and after. Abstentions are left as they are, as the answer path does.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
from pathlib import Path

from cuemem.answer import concise
from cuemem.bench.metrics import locomo_f1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("variants", nargs="+")
    args = parser.parse_args()
    found = pickle.loads(args.results.with_suffix(".retr.pkl").read_bytes())
    questions = {q.id: q for q, _, _ in found}
    # the speakers of the hits (those of the excerpts shown are among them): an echoed "Name:" is theirs
    speakers = {
        q.id: {str(h.detail["speaker"]) for h in retrieval.hits if h.detail.get("speaker")} for q, retrieval, _ in found
    }
    results = json.loads(args.results.read_text())
    for name in args.variants:
        pairs: dict[str, list[tuple[float, float]]] = {}
        for record in results[name]["records"]:
            if record["cat"] == "5":
                continue
            q = questions[record["id"]]
            cut = record["pred"] if record["abstained"] else concise(record["pred"], q.text, speakers=speakers[q.id])
            pairs.setdefault(record["cat"], []).append((record["f1"], locomo_f1(cut, q.answer, q.category)))
        every = [p for per in pairs.values() for p in per]
        by_cat = {
            c: f"{statistics.mean(a for a, _ in v):.3f} -> {statistics.mean(b for _, b in v):.3f}"
            for c, v in sorted(pairs.items())
        }
        before, after = statistics.mean(a for a, _ in every), statistics.mean(b for _, b in every)
        print(f"{name}: F1 (cat 1-4) {before:.3f} -> {after:.3f} over {len(every)} questions; by category {by_cat}")


if __name__ == "__main__":
    main()
