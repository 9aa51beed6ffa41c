"""Embedders by name: the registry's names, EmbeddingGemma's prompts and Matryoshka cuts, folders by path, query
caching, and a namespace searched after a change of embedder. The EmbeddingGemma tests run where it is fetched."""

from __future__ import annotations

import numpy as np
import pytest

from cuemem import CuememError, EmbeddingError
from cuemem.config import Settings
from cuemem.embed import HashingEmbedder, MatryoshkaEmbedder, MiniLMEmbedder, embed_query, make_embedder
from cuemem.embed.cached import CachedEmbedder
from cuemem.index.tokens import minilm_dir
from cuemem.models import get_spec, is_fetched

GEMMA = get_spec("embeddinggemma")
needs_gemma = pytest.mark.skipif(
    not is_fetched(GEMMA), reason="EmbeddingGemma is not fetched: cuemem models fetch embeddinggemma"
)


class Asymmetric(HashingEmbedder):
    """A fake asymmetric model: queries get a prefix word, as EmbeddingGemma's prompts do."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.queries: list[str] = []

    def embed_query(self, texts):
        self.queries.extend(texts)
        return self.embed([f"question {t}" for t in texts])


def test_embedders_by_name(monkeypatch):
    monkeypatch.setenv("CUEMEM_EMBED_RUNTIME", "torch")  # the names on ONNX Runtime: tests/test_embed_onnx.py
    assert isinstance(make_embedder(Settings(embedder="minilm")), MiniLMEmbedder)
    assert isinstance(make_embedder(Settings(embedder="all-minilm-l6-v2")), MiniLMEmbedder)
    assert make_embedder(Settings(embedder="hashing")).name == "hashing-512"
    gemma = make_embedder(Settings(embedder="embeddinggemma"))  # built lazily: no file is opened yet
    assert gemma.name == "embeddinggemma-300m" and gemma.dim == 768
    assert getattr(gemma, "bm25_weight", None) == 0.2 and getattr(gemma, "query_prompt", "").startswith("task:")
    cut = make_embedder(Settings(embedder="embeddinggemma", embed_dim=256))
    assert isinstance(cut, MatryoshkaEmbedder) and cut.name == "embeddinggemma-300m@256" and cut.dim == 256
    assert make_embedder(Settings(embedder="embeddinggemma", embed_dim=768)).name == "embeddinggemma-300m"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"embedder": "nomic"}, "unknown embedder 'nomic'"),
        ({"embedder": "qwen2.5-coder-0.5b"}, "language model, not an embedder"),
        ({"embedder": "embeddinggemma", "embed_dim": 300}, "not one embeddinggemma-300m was trained for"),
        ({"embedder": "minilm", "embed_dim": 128}, "embed_dim is for Matryoshka models"),
        ({"embedder": "./no/such/folder"}, "not a sentence-transformers folder"),
    ],
)
def test_a_bad_embedder_setting_is_a_clear_error(settings, message):
    with pytest.raises(CuememError, match=message):
        make_embedder(Settings(**settings))


def test_an_unfetched_model_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_MODEL_CACHE", str(tmp_path))
    embedder = make_embedder(Settings(embedder="embeddinggemma"))
    with pytest.raises(EmbeddingError, match="cuemem models fetch embeddinggemma-300m"):
        embedder.embed(["a turn"])


def test_matryoshka_cut_keeps_the_leading_coordinates_renormalised():
    inner = HashingEmbedder(dim=512)
    cut = MatryoshkaEmbedder(inner, 128)
    full = inner.embed(["the apollo hotel in lisbon"])
    expected = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    np.testing.assert_allclose(cut.embed(["the apollo hotel in lisbon"]), expected, rtol=1e-6)
    assert cut.name == "hashing-512@128"
    with pytest.raises(EmbeddingError, match="between 1 and"):
        MatryoshkaEmbedder(inner, 1024)


def test_queries_go_through_embed_query_and_are_cached_apart(tmp_path):
    inner = Asymmetric()
    assert not np.allclose(embed_query(inner, ["hotel"]), inner.embed(["hotel"]))
    np.testing.assert_allclose(embed_query(HashingEmbedder(), ["hotel"]), HashingEmbedder().embed(["hotel"]))
    cached = CachedEmbedder(inner, tmp_path / "cache.db")
    document, query = cached.embed(["hotel"]), cached.embed_query(["hotel"])
    assert not np.allclose(document, query)  # the same text as a document and as a query: two entries
    np.testing.assert_allclose(cached.embed_query(["hotel"]), query)
    assert inner.queries == ["hotel", "hotel"]  # the second query came from the cache
    cached.close()


def test_wrappers_keep_the_fusion_weight_measured_for_the_model(tmp_path):
    inner = Asymmetric()
    inner.bm25_weight = 0.2
    cached = CachedEmbedder(inner, tmp_path / "cache.db")
    assert cached.bm25_weight == 0.2 and MatryoshkaEmbedder(cached, 32).bm25_weight == 0.2
    assert CachedEmbedder(HashingEmbedder(), tmp_path / "other.db").bm25_weight == 1.0
    cached.close()


def test_hybrid_follows_the_fusion_weights(make_memory, tmp_path):
    """With BM25's weight at 0 (here: measured for the model, through the benchmark's cache), hybrid ranks as dense."""
    turns = [
        {"id": f"t{i}", "text": text, "session_id": "s"}
        for i, text in enumerate(
            [
                "the apollo hotel had a rooftop pool",
                "we booked the apollo for two nights",
                "hotel hotel hotel prices",
                "my sister adopted a puppy",
                "the pool at the hotel was closed",
            ]
        )
    ]
    inner = HashingEmbedder(dim=64)
    inner.bm25_weight = 0.0  # type: ignore[attr-defined]
    hybrid = make_memory("hybrid", embedder=CachedEmbedder(inner, tmp_path / "cache.db"))
    hybrid.add(turns, user_id="u")
    dense = hybrid.search("hotel pool", user_id="u", engine="dense", k=5).turn_ids
    assert hybrid.search("hotel pool", user_id="u", k=5).turn_ids == dense
    equal = make_memory("hybrid", name="equal.db", embedder=HashingEmbedder(dim=64))
    equal.add(turns, user_id="u")
    assert equal.search("hotel pool", user_id="u", k=5).turn_ids != dense  # an equal vote from BM25 changes it


def test_engines_embed_queries_with_the_query_prompt(make_memory):
    inner = Asymmetric()
    memory = make_memory("dense", embedder=inner)
    memory.add([{"id": "t1", "text": "we stayed at the apollo hotel", "session_id": "s"}], user_id="u")
    memory.search("which hotel", user_id="u")
    assert inner.queries == ["which hotel"]


def test_a_namespace_indexed_at_full_size_is_searched_after_a_cut(make_memory, tmp_path):
    """Switching embedder (here: a Matryoshka cut of the same model) re-embeds from the log into its own space."""
    turns = [
        {"id": "t1", "text": "we stayed at the apollo hotel in lisbon", "session_id": "s"},
        {"id": "t2", "text": "my sister adopted a puppy", "session_id": "s"},
    ]
    full = make_memory("hybrid", embedder=HashingEmbedder(dim=512))
    full.add(turns, user_id="u")
    assert full.search("apollo hotel", user_id="u").turn_ids[0] == "t1"
    full.close()
    cut = make_memory("hybrid", embedder=MatryoshkaEmbedder(HashingEmbedder(dim=512), 128))
    assert cut.pending(user_id="u") == 2
    assert cut.search("apollo hotel", user_id="u").turn_ids[0] == "t1"
    rows = cut.store._query("SELECT model, COUNT(*) FROM vectors GROUP BY model ORDER BY model")
    assert rows == [("hashing-512", 2), ("hashing-512@128", 2)]


@pytest.mark.skipif(minilm_dir() is None, reason="shipped MiniLM package not installed")
def test_any_sentence_transformers_folder_by_path():
    folder = minilm_dir()
    embedder = make_embedder(Settings(embedder=str(folder)))
    assert embedder.name.startswith(f"st:{folder.name}-") and embedder.dim == 384
    np.testing.assert_allclose(embedder.embed(["a hotel"]), MiniLMEmbedder().embed(["a hotel"]), atol=1e-5)


@needs_gemma
def test_embeddinggemma_prompts_queries_and_documents_and_ranks_the_answer_first():
    gemma = make_embedder(Settings(embedder="embeddinggemma"))
    docs = gemma.embed(
        [
            "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
            "Melanie: I painted a sunrise over the lake last week.",
            "Caroline: My grandma gave me this necklace when I was a kid in Sweden.",
        ]
    )
    query = embed_query(gemma, ["Where did Caroline's necklace come from?"])
    assert docs.shape == (3, 768) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert int(np.argmax(docs @ query[0])) == 2
    assert not np.allclose(query, gemma.embed(["Where did Caroline's necklace come from?"]))  # prompts differ
    cut = make_embedder(Settings(embedder="embeddinggemma", embed_dim=256))
    small = cut.embed(["Melanie: I painted a sunrise over the lake last week."])
    assert small.shape == (1, 256)
    np.testing.assert_allclose(small[0], docs[1, :256] / np.linalg.norm(docs[1, :256]), atol=1e-4)
