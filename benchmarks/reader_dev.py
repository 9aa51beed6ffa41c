"""Reader variants on a LoCoMo split (issue 35): one search per question, then `Memory.read` per variant.

    python benchmarks/reader_dev.py --split dev --per-conversation 30 --out bench-out/reader-dev.json \\
        --embed-cache bench-out/locomo-embed.db q40:320 q4km:320:: v320:320::-1e9

A variant is NAME:BUDGET[:MODEL[:QUANT[:VERIFY[:ORDER]]]]: the evidence budget in tokens, a registry name or GGUF
path (default: the default reader), llm_quant (default q4_0; "none" = the GGUF as fetched), answer_verify (a
threshold; -1e9 computes the check without ever abstaining, so its values can be studied) and the order the reader
sees the excerpts in ("date", the answer path's, or "rank": the search's order, an experiment that is no setting).
The retrievals are kept beside --out (.retr.pkl), so later variants read the same rankings; variants already in
--out are skipped.
Reported per variant: LoCoMo F1 over categories 1-4 and per category, abstention on answerable and category-5
questions, how often a gold evidence turn was shown, evidence tokens, and latency p50 / p95 (search + read).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

from cuemem import Memory, answer
from cuemem.answer import abstains
from cuemem.bench.datasets import load_locomo, split_of
from cuemem.bench.metrics import locomo_f1
from cuemem.bench.protocol import ABSTAIN, sample_questions
from cuemem.config import Settings
from cuemem.embed import make_embedder
from cuemem.embed.cached import CachedEmbedder

PHRASE = ABSTAIN["locomo"]


def retrieve(args: argparse.Namespace, settings: Settings, db: Path) -> list[tuple[Any, Any, float]]:
    saved = args.out.with_suffix(".retr.pkl")
    if saved.exists():
        return pickle.loads(saved.read_bytes())
    embedder = CachedEmbedder(make_embedder(settings), args.embed_cache) if args.embed_cache else None
    found = []
    with Memory(settings=dataclasses.replace(settings, db=str(db)), embedder=embedder) as memory:
        for conv in load_locomo(args.data):
            if split_of("locomo", conv.id) != args.split:
                continue
            for i in range(0, len(conv.turns), 64):
                memory.add(conv.turns[i : i + 64], user_id=conv.id, on_error="skip")
            for q in sample_questions(conv.questions, args.per_conversation):
                start = time.perf_counter()
                hits = memory.search(q.text, user_id=conv.id, k=30, now=q.date)
                found.append((q, hits, time.perf_counter() - start))
    saved.write_bytes(pickle.dumps(found))
    return found


@contextmanager
def in_rank_order() -> Iterator[None]:
    """The answer path's smallest evidence, shown in the search's rank order instead of date order."""
    chosen_by_date = answer.evidence

    def by_rank(hits: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, str]]:
        rank = {id(hit): r for r, hit in enumerate(hits)}
        return sorted(chosen_by_date(hits, *args, **kwargs), key=lambda shown: rank[id(shown[0])])

    with mock.patch.object(answer, "evidence", by_rank):
        yield


def variant(spec: str, settings: Settings, db: Path, found: list[tuple[Any, Any, float]]) -> dict[str, Any]:
    _name, budget, model, quant, verify, order = ([*spec.split(":"), "", "", "", ""])[:6]
    if order not in ("", "date", "rank"):
        raise SystemExit(f"variant {spec!r}: the order is date or rank, not {order!r}")
    chosen = dataclasses.replace(
        settings,
        db=str(db),
        llm_model=model,
        llm_quant="" if quant == "none" else quant or settings.llm_quant,
        llm_cache="off",
        answer_verify=float(verify) if verify else None,
    )
    records = []
    with Memory(settings=chosen) as memory, in_rank_order() if order == "rank" else nullcontext():
        for q, hits, search_s in found:
            start = time.perf_counter()
            a = memory.read(q.text, hits, budget_tokens=int(budget), now=q.date, abstain=PHRASE)
            records.append(
                {
                    "id": q.id,
                    "cat": str(q.category),
                    "pred": a.text,
                    "gold": q.answer,
                    "f1": locomo_f1(a.text, q.answer, q.category),
                    "seconds": time.perf_counter() - start + search_s,
                    "evidence_tokens": a.evidence_tokens or 0,
                    "abstained": abstains(a.text, PHRASE),
                    "shown": bool(set(q.evidence) & set(a.evidence_turn_ids)),
                    "support": a.support,
                }
            )
    answerable = [r for r in records if r["cat"] != "5"]
    unanswerable = [r for r in records if r["cat"] == "5"]
    waits = sorted(r["seconds"] for r in records)
    summary = {
        "questions": len(records),
        "f1_1_4": statistics.mean(r["f1"] for r in answerable),
        **{f"f1_cat{c}": statistics.mean([r["f1"] for r in answerable if r["cat"] == c] or [0.0]) for c in "1234"},
        "abstains_answerable": statistics.mean(r["abstained"] for r in answerable),
        "abstains_unanswerable": statistics.mean(r["abstained"] for r in unanswerable) if unanswerable else None,
        "evidence_shown": statistics.mean(r["shown"] for r in answerable),
        "evidence_tokens": statistics.mean(r["evidence_tokens"] for r in records),
        "p50_s": waits[len(waits) // 2],
        "p95_s": waits[int(len(waits) * 0.95)],
    }
    return {"summary": summary, "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--per-conversation", type=int, default=30)
    parser.add_argument("--data", type=Path, default=Path("../shared/datasets/locomo/locomo10.json"))
    parser.add_argument("--embed-cache", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    settings = Settings.load()
    db = args.out.with_suffix(".db")
    found = retrieve(args, settings, db)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for spec in args.variants:
        name = spec.split(":")[0]
        if name not in results:
            results[name] = variant(spec, settings, db, found)
            args.out.write_text(json.dumps(results, indent=1))
        print(name, json.dumps(results[name]["summary"]), flush=True)


if __name__ == "__main__":
    main()
