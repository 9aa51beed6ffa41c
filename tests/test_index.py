"""The shared primitives, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cuemem.embed.cached import embed_texts_cached
from cuemem.index.bm25 import BM25Index
from cuemem.index.budget import pack
from cuemem.index.fusion import fuse_positions, reciprocal_rank_fusion
from cuemem.index.text import analyze
from cuemem.index.tokens import TokenCounter, minilm_dir
from cuemem.store.vectors import DenseIndex, top_order
from cuemem.types import Hit


def test_analyze_lowercases_drops_stopwords_and_possessives():
    assert analyze("The Apollo Hotel's price, on Day 2!") == ["apollo", "hotel", "price", "day", "2"]


def test_bm25_matches_hand_computation():
    index = BM25Index(k1=1.5, b=0.75)
    index.add(10, "hotel price")
    index.add(11, "hotel hotel booking")
    index.add(12, "dinner booking")
    # query "hotel": df=2, N=3 -> idf = ln(1 + (3-2+0.5)/(2+0.5)); avgdl = 7/3
    idf = math.log(1 + 1.5 / 2.5)
    avgdl = 7 / 3

    def term(tf: int, dl: int) -> float:
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))

    result = dict(index.search("hotel", 3))
    assert set(result) == {10, 11}
    assert result[10] == pytest.approx(term(1, 2), rel=1e-5)
    assert result[11] == pytest.approx(term(2, 3), rel=1e-5)
    assert index.search("nothing matches", 3) == []


def test_bm25_grows_incrementally_and_ranks_new_documents():
    index = BM25Index()
    index.add(1, "cat food")
    assert [k for k, _ in index.search("dog", 5)] == []
    index.add(2, "dog walking schedule")
    assert [k for k, _ in index.search("dog", 5)] == [2]


def test_bm25_compaction_keeps_every_score_and_holds_postings_in_less_memory():
    """Postings are merged into a compact block as the index grows (issue 36, item 1); searching a compacted index
    gives exactly what the same index gives uncompacted, at every size along the way."""
    rng = np.random.default_rng(36)
    words = [f"w{i}" for i in range(400)]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(3, 30)), p=_zipf(len(words)))) for _ in range(3000)]
    docs += [f"{d} late{i % 7}" for i, d in enumerate(docs[:200])]  # terms first seen after compactions
    queries = ["w0 w5 w77", "w399 late3", "w12 w12 w350", "late6", "absent words only"]
    plain, compacted = BM25Index(compact_at=10**12), BM25Index(compact_at=500)
    for n, text in enumerate(docs):
        plain.add(n, text)
        compacted.add(n, text)
        if n % 400 == 399 or n == len(docs) - 1:
            for q in queries:
                assert compacted.search(q, 10) == plain.search(q, 10), (n, q)
    assert compacted._posting_count < plain._posting_count and len(compacted._block_docs) > 0
    compacted.compact()
    assert compacted._posting_count == 0 and compacted.nbytes() < plain.nbytes() * 0.6
    for q in queries:
        assert compacted.search(q, 50) == plain.search(q, 50)


@pytest.mark.parametrize("chunk", [16_384, 500])
def test_bm25_extend_builds_the_index_add_builds(chunk: int, monkeypatch: pytest.MonkeyPatch):
    """`extend` (a namespace's first search, or a batch of new items) gives the scores `add` one by one gives: from
    empty, onto listed and compacted postings, with empty documents, repeated terms and new terms mixed in, in one
    chunk or several."""
    from cuemem.index import bm25

    monkeypatch.setattr(bm25, "EXTEND_CHUNK", chunk)
    rng = np.random.default_rng(361)
    words = [f"w{i}" for i in range(300)]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(0, 25)), p=_zipf(len(words)))) for _ in range(2500)]
    docs += [f"{d} fresh{i % 5} fresh{i % 5}" for i, d in enumerate(docs[:300])]
    queries = ["w0 w5 w77", "w299 fresh3", "w12 w12 w250", "fresh4", "absent words only", ""]
    one_by_one, in_batches = BM25Index(compact_at=700), BM25Index(compact_at=700)
    for n, text in enumerate(docs):
        one_by_one.add(10 * n, text)
    # a batch under extend's minimum, one document added alone (listed postings the next batch must go after),
    # then larger batches, past compactions
    for start, end in [(0, 3), (3, 40), (40, 41), (41, 900), (900, 1000), (1000, 2400), (2400, len(docs))]:
        if end - start == 1:
            in_batches.add(10 * start, docs[start])
        else:
            in_batches.extend((10 * n, docs[n]) for n in range(start, end))
    assert in_batches.keys == one_by_one.keys
    for q in queries:
        assert in_batches.search(q, 25) == one_by_one.search(q, 25), q
    assert in_batches.nbytes() <= one_by_one.nbytes() * 1.1


def _zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1)
    return weights / weights.sum()


def test_weighted_rrf_lets_a_strong_ranking_lead():
    lexical, semantic = ["x", "a", "b"], ["a", "b", "x"]
    assert next(key for key, _ in reciprocal_rank_fusion([lexical, semantic], k=60)) == "a"
    weighted = reciprocal_rank_fusion([lexical, semantic], k=60, weights=[0.2, 1.0])
    assert [key for key, _ in weighted] == ["a", "b", "x"]
    assert dict(weighted)["x"] == pytest.approx(0.2 / 61 + 1.0 / 63)
    silent = reciprocal_rank_fusion([["only-lexical"], ["a"]], k=60, weights=[0.0, 1.0])
    assert silent == [("a", 1.0 / 61), ("only-lexical", 0.0)]
    with pytest.raises(ValueError, match="2 weights for 3 rankings"):
        reciprocal_rank_fusion([["a"], ["b"], ["c"]], weights=[1.0, 1.0])


def test_rrf_fuses_by_reciprocal_rank():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"]], k=60))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)
    assert [key for key, _ in reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"]], k=60)] == ["b", "c", "a"]


def test_fused_positions_are_the_fusion_of_the_same_rankings():
    rng = np.random.default_rng(3)
    for trial in range(300):
        size = int(rng.integers(1, 120))
        rankings = [rng.permutation(size)[: int(rng.integers(0, size + 1))] for _ in range(int(rng.integers(0, 5)))]
        weights = [float(w) for w in rng.choice([0.0, 0.2, 0.35, 1.0], size=len(rankings))] if trial % 2 else None
        expected = reciprocal_rank_fusion([r.tolist() for r in rankings], k=60, weights=weights)
        order, scores = fuse_positions(rankings, size, k=60, weights=weights)
        assert list(zip(order.tolist(), scores.tolist(), strict=True)) == expected  # the same floats, in order
    assert fuse_positions([np.array([2, 0]), np.array([0, 2])], 3)[0].tolist() == [2, 0]  # a tie: first seen
    with pytest.raises(ValueError, match="1 weights for 2 rankings"):
        fuse_positions([np.array([0]), np.array([1])], 2, weights=[1.0])


def test_top_order_is_the_stable_sort_cut_at_k():
    rng = np.random.default_rng(5)
    for trial in range(500):
        n = int(rng.integers(0, 200))
        scores = rng.integers(-2, 4, size=n).astype(np.float32) if trial % 2 else rng.normal(size=n)  # ties, or none
        k = int(rng.integers(0, n + 3))
        for positive_only in (True, False):
            expected = np.argsort(-scores, kind="stable")
            if positive_only:
                expected = expected[scores[expected] > 0]
            assert top_order(scores, k, positive_only=positive_only).tolist() == expected[:k].tolist()
    ties = np.array([1.0, 3.0, 1.0, 1.0, 2.0, 1.0])
    assert top_order(ties, 4).tolist() == [1, 4, 0, 2]  # the tie at the cut: the lower indexes
    nan = np.array([np.nan, 1.0, np.nan, 0.5, np.nan])  # NaN last, as the stable sort puts it
    assert top_order(nan, 3, positive_only=False).tolist() == np.argsort(-nan, kind="stable")[:3].tolist() == [1, 3, 0]


def test_pack_keeps_rank_order_and_skips_what_does_not_fit():
    hits = [Hit(text=str(i), score=1.0, turn_ids=[str(i)], tokens=t) for i, t in enumerate([50, 80, 30, 10])]
    packed = pack(hits, 100)
    assert [h.text for h in packed] == ["0", "2", "3"]
    assert sum(h.tokens for h in packed) <= 100
    assert pack(hits, None) == hits
    assert pack(hits, 0) == []
    with pytest.raises(ValueError):
        pack(hits, -1)


def test_dense_index_returns_nearest_by_cosine():
    index = DenseIndex()
    index.add(1, np.array([1.0, 0.0]))
    index.add(2, np.array([0.0, 1.0]))
    index.add(3, np.array([0.6, 0.8]))
    assert [k for k, _ in index.search(np.array([0.0, 1.0]), 2)] == [2, 3]
    with pytest.raises(ValueError):
        index.add(4, np.array([1.0, 0.0, 0.0]))


def test_dense_index_scores_are_its_search_as_arrays_and_grow_with_it():
    rng = np.random.default_rng(7)
    index = DenseIndex()
    for key in rng.permutation(np.arange(1000, 1300)):  # keys in no order, with ties below
        index.add(int(key), rng.normal(size=8))
    index.add(5, np.ones(8))
    index.add(6, np.ones(8))
    for query, k in ((np.ones(8), 3), (rng.normal(size=8), 50), (rng.normal(size=8), 10_000)):
        keys, scores = index.scores(query, k)
        assert keys.dtype == np.int64 and scores.dtype == np.float32
        assert list(zip(keys.tolist(), scores.astype(np.float64).tolist(), strict=True)) == index.search(query, k)
        assert len(keys) == min(k, 302)
    assert index.scores(np.ones(8), 2)[0].tolist() == [5, 6]  # a tie: the row added first
    index.add(7, np.ones(8))  # a row added after a search is in the next one, in its place
    assert index.scores(np.ones(8), 3)[0].tolist() == [5, 6, 7]
    assert [len(a) for a in DenseIndex().scores(np.ones(8), 5)] == [0, 0]


def test_embedding_cache_skips_known_texts():
    calls: list[list[str]] = []

    class Recorder:
        name, dim = "rec", 2

        def embed(self, texts):
            calls.append(list(texts))
            return np.ones((len(texts), 2), dtype=np.float32)

    store: dict[str, np.ndarray] = {}
    hashes, vectors = embed_texts_cached(
        Recorder(), ["a", "b", "a"], lambda hs: {h: store[h] for h in hs if h in store}
    )
    assert calls == [["a", "b"]]  # "a" twice in one call is embedded once
    assert vectors.shape == (3, 2)
    store.update(zip(hashes, vectors, strict=True))
    embed_texts_cached(Recorder(), ["a", "b"], lambda hs: {h: store[h] for h in hs if h in store})
    assert calls == [["a", "b"]]


@pytest.mark.skipif(minilm_dir() is None, reason="shipped MiniLM package not installed")
def test_token_counter_uses_the_real_wordpiece_tokenizer():
    counter = TokenCounter()
    assert counter.name.startswith("wordpiece")
    assert counter.count("hello world") == 2
    assert counter.count("unaffordable") > 1  # split into word pieces
    long_text = "word " * 2000
    assert counter.count(long_text) == 2000  # no truncation at the model's 256-token limit
    assert counter.count_many(["hello world", "hi"]) == [2, 1]


def test_lucene_analyzer_matches_the_bm25s_default():
    from cuemem.index.text import analyze_lucene

    assert analyze_lucene("Caroline: I went to a LGBTQ support group, when?") == [
        "caroline",
        "went",
        "lgbtq",
        "support",
        "group",
        "when",
    ]
    assert analyze("when did I go") == ["go"]  # the extended list drops question words and pronouns
