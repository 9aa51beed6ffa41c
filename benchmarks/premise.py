"""The premise of a question (issue 35 item 3): does the memory attribute what is asked to the person it names?

LoCoMo's category 5 asks about something one speaker said as if the other had ("What did Melanie realize after
her charity race?" when Caroline ran it); the right reply is an abstention. This dumps, per question that names
one of the conversation's speakers, the ranked hits of the answer path's search with each hit's speaker, so that
`cuemem.answer.attributed_elsewhere`'s rule can be chosen on dev and its firing rates reported on test:

    CUEMEM_DATASETS=../shared/datasets python benchmarks/premise.py --split dev \
        --embed-cache bench-out/embed-cache-locomo.db --out bench-out/premise-dev.json
    python benchmarks/premise.py --report bench-out/premise-dev.json

Rates: of category 5 questions, the share the rule abstains on (higher is better); of categories 1-4, the share
(lower is better). Questions that name no speaker, or both, are counted apart: the rule never fires on them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file


def dump(split: str, engine: str, cache: Path, out: Path, k: int) -> None:
    from cuemem import Memory, Settings
    from cuemem.answer import PREMISE_READ, asked_speaker, without_person
    from cuemem.bench.datasets import LOCOMO_DEV
    from cuemem.embed import make_embedder
    from cuemem.embed.cached import CachedEmbedder
    from cuemem.formats import locomo_turns, read_locomo

    samples = read_locomo(dataset_file(LOCOMO))
    wanted = [s for s in samples if (s["sample_id"] in LOCOMO_DEV) == (split == "dev")]
    embedder = CachedEmbedder(make_embedder(Settings(embedder="embeddinggemma")), cache)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sample in wanted:
            sid = sample["sample_id"]
            turns = locomo_turns(sample)
            speaker = {t.id: t.speaker for t in turns}
            with Memory(Path(tmp) / f"{sid}.db", engine=engine, embedder=embedder) as memory:
                memory.add(turns, user_id=sid)
                for qa in sample["qa"]:
                    result = memory.search(qa["question"], user_id=sid, k=k)
                    asked = asked_speaker(qa["question"], result.hits)
                    neutral = (  # as the answer path searches (Memory._premise_search)
                        memory.search(without_person(qa["question"], asked[1]), user_id=sid, k=PREMISE_READ).hits
                        if asked is not None
                        else []
                    )
                    records.append(
                        {
                            "sample": sid,
                            "category": qa["category"],
                            "question": qa["question"],
                            "evidence": qa.get("evidence", []),
                            "speakers": sorted(set(speaker.values())),
                            "hits": [
                                {
                                    "turns": h.turn_ids,
                                    "speaker": speaker.get(h.turn_ids[0], ""),
                                    "score": h.score,
                                    "detail": {key: h.detail.get(key) for key in ("speaker", "people")},
                                }
                                for h in result.hits
                            ],
                            "text": [h.text for h in result.hits],
                            "neutral": [
                                {
                                    "turns": h.turn_ids,
                                    "score": h.score,
                                    "text": h.text,
                                    "detail": {key: h.detail.get(key) for key in ("speaker", "people")},
                                }
                                for h in neutral
                            ],
                        }
                    )
            print(f"{sid}: {len(sample['qa'])} questions", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"split": split, "engine": engine, "k": k, "questions": records}))


def report(path: Path) -> None:
    from cuemem.answer import attributed_elsewhere
    from cuemem.types import Hit

    def hits(found: list[dict[str, Any]]) -> list[Hit]:
        return [Hit(h["text"], h["score"], h["turns"], detail=h["detail"]) for h in found]

    data = json.loads(path.read_text())
    fired: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for q in data["questions"]:
        group = "category 5" if q["category"] == 5 else "categories 1-4"
        first = [{**h, "text": text} for h, text in zip(q["hits"], q["text"], strict=True)]
        neutral = hits(q["neutral"])
        total[group] += 1
        if attributed_elsewhere(q["question"], hits(first), lambda _text, found=neutral: found) is not None:
            fired[group] += 1
    print(f"{path}: split {data['split']}, engine {data['engine']}")
    for group in ("category 5", "categories 1-4"):
        print(f"  {group}: abstains on {fired[group]} of {total[group]} ({fired[group] / max(1, total[group]):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--engine", default="stitch")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--embed-cache", default="bench-out/embed-cache-locomo.db")
    parser.add_argument("--out", default="bench-out/premise-dev.json")
    parser.add_argument("--report", help="a dump of this script: print the rule's rates on it")
    add_datasets_option(parser)
    args = parser.parse_args()
    if args.report:
        report(Path(args.report))
        return
    apply_datasets_option(args)
    dump(args.split, args.engine, Path(args.embed_cache), Path(args.out), args.k)


if __name__ == "__main__":
    main()
