"""Offline simulation (issue 34, recall@1): rerank a run's top 10 by the question's and each candidate's words
left once the goal's words are taken out of both.

    python benchmarks/attribute_sim.py bench-out/came-dev-now --engine stitch
    python benchmarks/attribute_sim.py bench-out/gather-dev --engine stitch

On the look-alike development seeds half of `stitch`'s misses at rank 1 are a turn of the asked goal that states
another attribute (docs/benchmarks/came.md, "Where the rank-1 misses go"): a turn's text is mostly its goal's
name, which the question names too. Here the goal's words are the question's content words that at least two of
its three best candidates also say; the question without them is embedded as a query, each of the top 10
candidates without them as a document (the default embedder), and the two rankings, the run's and this
similarity's, are fused by reciprocal rank (k = 60, the similarity at weight w). Recall@10 cannot change (the same
ten turns); recall@1 is what moves. Reads a `cuemem bench came` or `cuemem bench locomo` output directory (its
checkpoints); embeddings are kept in --cache between runs. `--variant` picks how candidates are compared
(`query` is the form the engines now run: `attribute_first` in cuemem/engines/refine.py; docs/benchmarks/came.md,
"The asked attribute").
"""

from __future__ import annotations

import argparse
import glob
import json
import pickle
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from cuemem.bench.datasets import load_locomo
from cuemem.config import Settings
from cuemem.embed import make_embedder
from cuemem.embed.cached import CachedEmbedder
from cuemem.engines.baselines import turn_document
from cuemem.index.text import STOPWORDS

WORD = re.compile(r"[A-Za-z0-9']+")
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)
TOP = 10


def content_words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text) if w.lower() not in STOPWORDS}


def without(text: str, goal: set[str]) -> str:
    """`text` without the goal's words (all of it when nothing would be left)."""
    return " ".join(w for w in WORD.findall(text) if w.lower() not in goal) or text


def conversations(
    run: Path, locomo: Path
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], dict[str, str]]:
    """Turn texts per conversation, the same as dense search embeds them (date and speaker first), and question
    texts by question id, from came.json or the LoCoMo file."""
    source = run / "came.json"
    turns, documents, questions = {}, {}, {}
    for conv in load_locomo(source if source.exists() else locomo):
        turns[conv.id] = {t.id: t.text for t in conv.turns}
        documents[conv.id] = {t.id: turn_document(t) for t in conv.turns}
        questions.update({q.id: q.text for q in conv.questions})
    return turns, documents, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--engine", default="stitch")
    parser.add_argument("--locomo", type=Path, default=Path("../shared/datasets/locomo/locomo10.json"))
    parser.add_argument("--cache", type=Path, default=Path("bench-out/attribute-sim-cache.pkl"))
    parser.add_argument(
        "--variant",
        choices=("both", "query", "stored", "lexical"),
        default="both",
        help="both: goal words out of question and candidates; query: out of the question only, candidates whole "
        "(their vectors exist at ingest); stored: the same with the candidates as dense search embeds them (date, "
        "speaker, words: the engines' stored vectors); lexical: candidate words (goal out) the question says",
    )
    parser.add_argument("--best", type=int, default=3, help="candidates whose words name the goal (default 3)")
    parser.add_argument("--share", type=int, default=2, help="of them, how many must say a word (default 2)")
    parser.add_argument("--embed-cache", type=Path, help="the run's --embed-cache (stored vectors are looked up)")
    args = parser.parse_args()
    turns, documents, questions = conversations(args.run, args.locomo)
    embedder = make_embedder(Settings.load())
    if args.embed_cache:
        embedder = CachedEmbedder(embedder, args.embed_cache)
    cache: dict[tuple[str, bool], np.ndarray] = pickle.loads(args.cache.read_bytes()) if args.cache.exists() else {}

    def vector(text: str, query: bool) -> np.ndarray:
        if (text, query) not in cache:
            cache[(text, query)] = (embedder.embed_query([text]) if query else embedder.embed([text]))[0]
        return cache[(text, query)]

    cases: list[tuple[set[str], list[str], list[float]]] = []
    for path in sorted(glob.glob(str(args.run / "checkpoints" / args.engine / "*.json"))):
        record: dict[str, Any] = json.loads(Path(path).read_text())
        text = turns[record["conversation"]]
        embedded = documents[record["conversation"]] if args.variant == "stored" else text
        for q in record["questions"]:
            top = [ids[0] for ids in q["top"][:TOP]]
            if q.get("adversarial") or str(q.get("category")) == "5" or not q["evidence"] or not top:
                continue
            question = questions[q["id"]]
            asked = content_words(question)
            shared = Counter(w for t in top[: args.best] for w in content_words(text.get(t, "")) & asked)
            goal = {w for w, n in shared.items() if n >= args.share}
            if args.variant == "lexical":
                rest = asked - goal
                sims = [float(len(content_words(text.get(t, "")) & rest)) for t in top]
            else:
                q_vec = vector(without(question, goal), True)
                kept = goal if args.variant == "both" else set()
                sims = [float(np.dot(q_vec, vector(without(embedded.get(t, ""), kept), False))) for t in top]
            cases.append((set(q["evidence"]), top, sims))
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    args.cache.write_bytes(pickle.dumps(cache))
    print(f"{args.engine} on {args.run}: {len(cases)} questions")
    print("| weight of the attribute similarity | recall@1 |")
    print("|---:|---:|")
    for w in WEIGHTS:
        hits = 0.0
        for evidence, top, sims in cases:
            by_sim = {top[i]: r for r, i in enumerate(np.argsort(-np.array(sims), kind="stable"))}
            fused = max(top, key=lambda t: 1 / (60 + top.index(t)) + w / (60 + by_sim[t]))
            hits += len(evidence & {fused}) / len(evidence)
        print(f"| {w} | {hits / len(cases):.3f} |")


if __name__ == "__main__":
    main()
