"""Cross-check cuemem's BM25 against the `bm25s` package on LoCoMo (issue: BM25 recall@10 = 0.505 +- 0.03).

    python benchmarks/locomo_bm25_crosscheck.py [--datasets DIR]

All 10 conversations, categories 1-4, questions whose evidence resolves to turns; each turn indexed as
"speaker: text" plus its image caption. Prints recall@10 for bm25s (stopwords="en", Lucene's 33 words), for
cuemem's BM25 with the same tokenizer and stop words, and for cuemem's default analyzer (129 stop words).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file  # noqa: E402

from cuemem.bench.datasets import load_locomo  # noqa: E402
from cuemem.bench.metrics import evidence_recall  # noqa: E402
from cuemem.index.bm25 import BM25Index  # noqa: E402
from cuemem.index.text import analyze  # noqa: E402


def document(turn) -> str:
    caption = turn.metadata.get("image_caption")
    return f"{turn.speaker}: {turn.text}" + (f" [image: {caption}]" if caption else "")


def main() -> None:
    import bm25s
    from bm25s.stopwords import STOPWORDS_EN

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_datasets_option(parser)
    apply_datasets_option(parser.parse_args())
    lucene = frozenset(STOPWORDS_EN)
    convs = list(load_locomo(dataset_file(LOCOMO)))
    analyzers = {
        "cuemem BM25, bm25s tokenizer + Lucene stop words": lambda s: [
            w for w in re.findall(r"(?u)\b\w\w+\b", s.lower()) if w not in lucene
        ],
        "cuemem BM25, default analyzer (129 stop words)": analyze,
    }
    results: dict[str, list[float]] = {"bm25s package, stopwords='en'": []}
    for conv in convs:
        ids = [t.id for t in conv.turns]
        corpus = [document(t) for t in conv.turns]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
        indexes = {}
        for name, analyzer in analyzers.items():
            indexes[name] = BM25Index(analyzer=analyzer)
            for i, text in enumerate(corpus):
                indexes[name].add(i, text)
        for q in conv.questions:
            if q.category not in {"1", "2", "3", "4"} or not q.evidence:
                continue
            docs, scores = retriever.retrieve(
                bm25s.tokenize([q.text], stopwords="en", show_progress=False), k=10, show_progress=False
            )
            ranked = [[ids[d]] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
            results["bm25s package, stopwords='en'"].append(evidence_recall(ranked, q.evidence, 10))
            for name, index in indexes.items():
                ranked = [[ids[d]] for d, _ in index.search(q.text, 10)]
                results.setdefault(name, []).append(evidence_recall(ranked, q.evidence, 10))
    for name, values in results.items():
        print(f"{name:52s} recall@10 {statistics.fmean(values):.3f}  ({len(values)} questions)")


if __name__ == "__main__":
    main()
