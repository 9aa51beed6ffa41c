"""Embedders: the real shipped MiniLM offline, and the OpenAI-compatible client against a local server."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import numpy as np
import pytest
from conftest import local_http_server, send_json

from cuemem import EmbeddingError
from cuemem.embed import HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder
from cuemem.index.tokens import minilm_dir


@pytest.mark.skipif(minilm_dir() is None, reason="shipped MiniLM package not installed")
def test_minilm_runs_offline_and_ranks_paraphrases_closer():
    embedder = MiniLMEmbedder()
    vectors = embedder.embed(["I booked a hotel room", "I reserved a room at a hotel", "My cat likes fish"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    assert embedder.embed([]).shape == (0, 384)


def test_hashing_embedder_is_deterministic_and_normalised():
    a, b = HashingEmbedder().embed(["hotel price day two"]), HashingEmbedder().embed(["hotel price day two"])
    assert np.array_equal(a, b) and np.isclose(np.linalg.norm(a), 1.0)


class FakeEmbeddings(BaseHTTPRequestHandler):
    """A tiny OpenAI-compatible /embeddings endpoint with a scripted failure mode."""

    script: ClassVar[list[int]] = []
    requests = 0

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        type(self).requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = type(self).script.pop(0) if type(self).script else 200
        if status == 200:
            data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
            payload = json.dumps({"data": list(reversed(data))}).encode()
        elif status == 299:  # 200 with garbage
            status, payload = 200, b"<html>not json</html>"
        else:
            payload = b'{"error": "boom"}'
        send_json(self, status, payload)


@pytest.fixture
def server():
    FakeEmbeddings.script, FakeEmbeddings.requests = [], 0
    with local_http_server(FakeEmbeddings) as url:
        yield url


def test_openai_embedder_orders_normalises_and_batches(server):
    embedder = OpenAIEmbedder("m", server, "key", batch_size=2)
    vectors = embedder.embed(["a", "bbb", "cc"])
    assert vectors.shape == (3, 3) and FakeEmbeddings.requests == 2
    expected = np.array([[1, 1, 0], [3, 1, 0], [2, 1, 0]], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(vectors, expected)  # out-of-order "data" is put back in input order
    assert embedder.dim == 3


def test_openai_embedder_retries_5xx_then_succeeds(server):
    FakeEmbeddings.script = [500, 503]
    vectors = OpenAIEmbedder("m", server, retries=3).embed(["x"])
    assert vectors.shape == (1, 3) and FakeEmbeddings.requests == 3


def test_openai_embedder_fails_clearly(server):
    FakeEmbeddings.script = [400]
    with pytest.raises(EmbeddingError, match="HTTP 400"):
        OpenAIEmbedder("m", server).embed(["x"])
    assert FakeEmbeddings.requests == 1  # a client error is not retried
    FakeEmbeddings.script = [299]
    with pytest.raises(EmbeddingError, match="unexpected body"):
        OpenAIEmbedder("m", server).embed(["x"])
    with pytest.raises(EmbeddingError, match="ConnectError"):
        OpenAIEmbedder("m", "http://127.0.0.1:9/v1", retries=1, timeout=2).embed(["x"])


def test_endpoint_down_loses_no_turn(tmp_path):
    """If the embedder fails during add, the turns are already in the log; indexing catches up later."""
    from cuemem import Memory

    broken = OpenAIEmbedder("m", "http://127.0.0.1:9/v1", retries=0, timeout=2)
    with Memory(tmp_path / "m.db", engine="dense", embedder=broken) as memory:
        with pytest.raises(EmbeddingError, match="1 turns were stored in the log"):
            memory.add({"id": "a", "text": "kept despite the outage"}, user_id="u")
        assert memory.get("a", user_id="u").text == "kept despite the outage"
    with Memory(tmp_path / "m.db", engine="dense", embedder=HashingEmbedder()) as memory:
        assert memory.search("outage", user_id="u").turn_ids == ["a"]


def test_cached_embedder_embeds_each_distinct_text_once_and_persists(tmp_path):
    from cuemem.embed.cached import CachedEmbedder

    class Counting(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(dim=64)
            self.seen: list[str] = []

        def embed(self, texts):
            self.seen.extend(texts)
            return super().embed(texts)

    inner = Counting()
    cached = CachedEmbedder(inner, tmp_path / "cache.db")
    first = cached.embed(["a cat", "a dog", "a cat"])
    assert inner.seen == ["a cat", "a dog"]
    assert cached.name == inner.name and cached.dim == 64
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_allclose(first, HashingEmbedder(dim=64).embed(["a cat", "a dog", "a cat"]))
    cached.close()

    again = CachedEmbedder(Counting(), tmp_path / "cache.db")  # a rerun: nothing embedded again
    np.testing.assert_array_equal(again.embed(["a dog", "a cat"]), first[[1, 0]])
    assert again.inner.seen == [] and again.hits == 2
    assert again.embed([]).shape == (0, 64)
