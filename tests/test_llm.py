"""The model client around any backend (a deterministic fake here), and the OpenAI-compatible backend against a
local HTTP server that the test starts: JSON mode, retries after 5xx, timeouts, malformed output, guided choice."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, Literal

import pytest
from conftest import local_http_server, send_json
from pydantic import BaseModel

from cuemem.llm import (
    CallCache,
    ChatResult,
    Choice,
    FileCallCache,
    LLMClient,
    LLMError,
    LLMOutputError,
    LLMUnavailableError,
    LocalBackend,
    OpenAIBackend,
    Usage,
)
from cuemem.llm.trie import TokenTrie

USER = [{"role": "user", "content": "hi"}]


class FakeBackend:
    """Deterministic: chat echoes, choose picks the options in the order given (or a scripted stray one)."""

    name = "fake:1"

    def __init__(self, json_replies: list[str] | None = None, stray: str | None = None) -> None:
        self.calls = 0
        self.json_replies = json_replies or []
        self.stray = stray

    def chat(self, messages, *, max_tokens, temperature):
        self.calls += 1
        return ChatResult(f"echo: {messages[-1]['content']}", Usage(3, 2))

    def json(self, messages, schema, *, max_tokens):
        self.calls += 1
        return self.json_replies.pop(0), Usage(5, 5)

    def choose(self, messages, options, k, beam):
        self.calls += 1
        picked = [self.stray] if self.stray else options[:k]
        return [Choice(o, -float(i)) for i, o in enumerate(picked)], Usage(4, 1)

    def score(self, messages, continuations):
        self.calls += 1
        return [-float(len(c)) for c in continuations], Usage(1, 1)


class Trip(BaseModel):
    city: str
    nights: int
    booked: bool
    kind: Literal["hotel", "hostel"]


def test_trie_gives_every_option_its_own_leaf():
    trie = TokenTrie([[1, 2], [1], [1, 2, 3], [1, 2]], terminator=0)
    assert trie.walk([1, 0]).option == 1
    assert trie.walk([1, 2, 0]).option == 0  # the first of two identical sequences wins
    assert trie.walk([1, 2, 3, 0]).option == 2
    assert trie.walk([1, 2]).option is None and trie.depth == 4


def test_cache_makes_reruns_free_and_counts_per_stage(tmp_path):
    backend = FakeBackend()
    client = LLMClient(backend, FileCallCache(tmp_path / "calls.db"))
    with client.stage("ingest"):
        first = client.chat(USER)
    with client.stage("query"):
        again = client.chat(USER)
        client.choose(USER, ["a", "b"])
    assert first == again and backend.calls == 2  # the second chat came from the cache
    stats = client.stats()
    assert stats["ingest"] == {
        "calls": 1,
        "cached": 0,
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "seconds": stats["ingest"]["seconds"],
    }
    assert stats["query"]["calls"] == 2 and stats["query"]["cached"] == 1 and stats["query"]["prompt_tokens"] == 4
    fresh = LLMClient(FakeBackend(), FileCallCache(tmp_path / "calls.db"))  # another process, same cache file
    assert fresh.chat(USER) == first and fresh.backend.calls == 0
    assert {(r["stage"], r["method"]) for r in fresh.cache.summary()} == {("ingest", "chat"), ("query", "choose")}


def test_choose_validates_input_and_never_returns_a_stranger():
    client = LLMClient(FakeBackend())
    assert [c.option for c in client.choose(USER, ["x", "x", "y"], k=5)] == ["x", "y"]  # deduped, k clipped
    for bad in ([], [""], ["ok", 3]):
        with pytest.raises(ValueError):
            client.choose(USER, bad)
    with pytest.raises(ValueError):
        client.choose(USER, ["a"], k=0)
    with pytest.raises(ValueError):
        client.chat([{"role": "user"}])
    with pytest.raises(LLMOutputError, match="not one of the options"):
        LLMClient(FakeBackend(stray="z")).choose(USER, ["a", "b"])


def test_json_validates_and_retries_then_fails_clearly():
    good = '{"city": "Lisbon", "nights": 2, "booked": true, "kind": "hotel"}'
    client = LLMClient(FakeBackend(json_replies=["{not json", '{"city": "Lisbon"}', good]), json_retries=2)
    assert client.json(USER, Trip) == Trip(city="Lisbon", nights=2, booked=True, kind="hotel")
    client = LLMClient(FakeBackend(json_replies=["{}", "{}", "{}"]), json_retries=2)
    with pytest.raises(LLMOutputError, match="no valid Trip after 3 tries"):
        client.json(USER, Trip)


# --------------------------------------------------------------------------- OpenAI-compatible backend
class FakeChat(BaseHTTPRequestHandler):
    """/v1/chat/completions with scripted behaviour per request: a status, "slow", "garbage", or a reply."""

    script: ClassVar[list[object]] = []
    bodies: ClassVar[list[dict]] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        action = type(self).script.pop(0) if type(self).script else "auto"
        if action == "slow":
            time.sleep(1.5)
            action = "auto"
        if isinstance(action, int):
            return self._send(action, b'{"error": "scripted"}')
        if action == "garbage":
            return self._send(200, b"<html>gateway page</html>")
        if action == "auto":
            action = self._auto(body)
        payload = {"choices": [{"message": {"content": action}}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
        self._send(200, json.dumps(payload).encode())

    def _auto(self, body: dict) -> str:
        if "guided_choice" in body:
            return body["guided_choice"][-1]
        fmt = body.get("response_format")
        if fmt:
            schema = fmt["json_schema"]["schema"]
            choice = schema["properties"].get("choice")
            if choice:
                options = choice["enum"] if "enum" in choice else choice["items"]["enum"]
                return json.dumps({"choice": options[0] if "enum" in choice else options[: choice["minItems"]]})
            return json.dumps({"city": "Lisbon", "nights": 3, "booked": False, "kind": "hostel"})
        return "Paris."

    def _send(self, status: int, payload: bytes) -> None:
        send_json(self, status, payload)


@pytest.fixture
def endpoint():
    FakeChat.script, FakeChat.bodies = [], []
    with local_http_server(FakeChat) as url:
        yield url


def openai_client(url: str, **kwargs) -> LLMClient:
    kwargs.setdefault("backoff", 0.01)
    return LLMClient(OpenAIBackend("test-model", url, "sk-test", **kwargs))


def test_openai_chat_and_json_mode(endpoint):
    client = openai_client(endpoint)
    assert client.chat(USER).text == "Paris."
    assert FakeChat.bodies[-1]["model"] == "test-model" and FakeChat.bodies[-1]["messages"] == USER
    trip = client.json(USER, Trip)
    assert trip == Trip(city="Lisbon", nights=3, booked=False, kind="hostel")
    fmt = FakeChat.bodies[-1]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["title"] == "Trip"
    assert client.stats()["other"]["prompt_tokens"] == 14


def test_openai_retries_5xx_and_429_then_succeeds(endpoint):
    FakeChat.script = [500, 429, 503]
    assert openai_client(endpoint, retries=3).chat(USER).text == "Paris."
    assert len(FakeChat.bodies) == 4


def test_openai_gives_up_clearly(endpoint):
    FakeChat.script = [500, 500]
    with pytest.raises(LLMUnavailableError, match="failed after 2 tries: HTTP 500"):
        openai_client(endpoint, retries=1).chat(USER)
    FakeChat.script = [400]
    with pytest.raises(LLMUnavailableError, match="refused"):
        openai_client(endpoint, retries=3).chat(USER)
    assert len(FakeChat.bodies) == 3  # the 400 was not retried
    FakeChat.script = ["slow", "slow"]
    with pytest.raises(LLMUnavailableError, match="timed out"):
        openai_client(endpoint, retries=1, timeout=0.3).chat(USER)
    with pytest.raises(LLMUnavailableError, match="ConnectError"):
        openai_client("http://127.0.0.1:9/v1", retries=0).chat(USER)


def test_openai_malformed_output(endpoint):
    FakeChat.script = ["garbage"]
    with pytest.raises(LLMOutputError, match="unexpected body"):
        openai_client(endpoint).chat(USER)
    FakeChat.script = ["{broken", '{"city": 1}', "[]"]
    with pytest.raises(LLMOutputError, match="no valid Trip after 3 tries"):
        openai_client(endpoint).json(USER, Trip)
    FakeChat.script = ['{"choice": "Rome"}'] * 3  # a server that ignores the enum, every time
    with pytest.raises(LLMOutputError, match="'Rome', which is not one of the options"):
        openai_client(endpoint).choose(USER, ["Paris", "London"])
    FakeChat.script = ['{"choice": "Rome"}']  # once: the validated retry gets a member
    assert [c.option for c in openai_client(endpoint).choose(USER, ["Paris", "London"])] == ["Paris"]


def test_openai_guided_and_enum_choice(endpoint):
    guided = openai_client(endpoint, choice_mode="guided")
    assert [c.option for c in guided.choose(USER, ["Paris", "London"])] == ["London"]
    assert FakeChat.bodies[-1]["guided_choice"] == ["Paris", "London"]
    enum = openai_client(endpoint)
    assert [c.option for c in enum.choose(USER, ["Paris", "London", "Rome"], k=2)] == ["Paris", "London"]
    schema = FakeChat.bodies[-1]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["choice"]["items"]["enum"] == ["Paris", "London", "Rome"]
    with pytest.raises(LLMUnavailableError, match="local backend"):
        enum.score(USER, ["x"])


class Raising(FakeBackend):
    """Every method raises the given exception."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def chat(self, messages, *, max_tokens, temperature):
        raise self.error

    def json(self, messages, schema, *, max_tokens):
        raise self.error

    def choose(self, messages, options, k, beam):
        raise self.error

    def score(self, messages, continuations):
        raise self.error


def every_call(client: LLMClient) -> list:
    return [
        lambda: client.chat(USER),
        lambda: client.json(USER, Trip),
        lambda: client.choose(USER, ["a", "b"]),
        lambda: client.score(USER, ["a"]),
    ]


@pytest.mark.parametrize(
    "error",
    [
        TypeError("bad arg"),
        AttributeError("no attr"),
        KeyError("k"),
        IndexError("i"),
        AssertionError("a"),
        NameError("n"),
        ValueError("v"),
        ZeroDivisionError("z"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_programming_errors_propagate_unchanged(error):
    """A bug in our code (or a backend's) is not an outage: it is never disguised as an LLMError."""
    client = LLMClient(Raising(error))
    for call in every_call(client):
        with pytest.raises(type(error)) as caught:
            call()
        assert caught.value is error and not isinstance(caught.value, LLMError)
    assert client.stats() == {}  # a failed call is not counted


@pytest.mark.parametrize(
    "error", [ConnectionRefusedError("refused"), TimeoutError("slow"), OSError("disk")], ids=lambda e: type(e).__name__
)
def test_os_level_failures_surface_as_unavailable(error):
    """The client's safety net: a backend that lets an OSError (connection, timeout ...) escape is unavailable."""
    for call in every_call(LLMClient(Raising(error))):
        with pytest.raises(LLMUnavailableError, match=type(error).__name__) as caught:
            call()
        assert caught.value.__cause__ is error


def test_backend_failures_surface_as_llm_errors(endpoint):
    with pytest.raises(LLMUnavailableError, match="ConnectError"):  # down: nothing listens on the port
        openai_client("http://127.0.0.1:9/v1", retries=0).chat(USER)
    with pytest.raises(LLMUnavailableError, match="failed after 2 tries"):  # a server that was there and went away
        openai_client(gone_url(), retries=1).chat(USER)
    start = time.perf_counter()
    for bad in ("http://127.0.0.1:80a/v1", "ftp://127.0.0.1/v1", "localhost:8000/v1"):
        with pytest.raises(LLMUnavailableError, match="not a usable URL"):
            openai_client(bad, retries=5, backoff=1.0).chat(USER)
    assert time.perf_counter() - start < 1.0  # a bad setting is not retried
    FakeChat.script = ['{"choice": ["Paris"]}'] * 3  # asked for 2, got 1
    with pytest.raises(LLMOutputError, match="1 distinct options where 2 were asked"):
        openai_client(endpoint).choose(USER, ["Paris", "London"], k=2)


def gone_url() -> str:
    """The URL of a server that has just been shut down (its port now refuses connections)."""
    with local_http_server(FakeChat) as url:
        pass
    return url


class RawReply(BaseHTTPRequestHandler):
    """Answers every POST with the body in `payload` (status 200)."""

    payload: ClassVar[bytes] = b""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        send_json(self, 200, type(self).payload)


GARBAGE = [
    b"<html>gateway page</html>",
    b"[]",
    b'{"choices": []}',
    b'{"choices": [{"message": null}]}',
    b'{"choices": [{"message": {"content": ["a", "b"]}}]}',
    b'{"choices": [{"message": {"content": 3}}]}',
    b'{"choices": [{"message": {"content": "ok"}}], "usage": ["tokens"]}',
    b'{"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": "many"}}',
    b"\xff\xfe",
]


def test_garbage_from_the_server_is_an_output_error():
    with local_http_server(RawReply) as url:
        client = openai_client(url)
        for payload in GARBAGE:
            RawReply.payload = payload
            for call in every_call(client)[:3]:
                with pytest.raises(LLMOutputError, match="unexpected body"):
                    call()


def test_garbage_model_output_is_an_output_error():
    with pytest.raises(LLMOutputError, match="no valid Trip"):
        LLMClient(FakeBackend(json_replies=["</s>", "null", "{}"])).json(USER, Trip)
    with pytest.raises(LLMOutputError, match="not one of the options"):
        LLMClient(FakeBackend(stray="\x00garbage")).choose(USER, ["a", "b"])


def test_local_backend_that_cannot_load_is_unavailable(tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text("{not json")
    for model_dir in (tmp_path / "missing", tmp_path):
        client = LLMClient(LocalBackend(model_dir))
        for call in every_call(client):
            with pytest.raises(LLMUnavailableError, match="cannot load the local model"):
                call()


# --------------------------------------------------------------------------- caches: the file, a store's, bound views
class DictCache:
    """A minimal CallCache (what a store's per-namespace cache provides), keeping only keys and responses."""

    def __init__(self) -> None:
        self.rows: dict[str, Any] = {}
        self.stages: dict[str, str] = {}

    def get(self, key: str) -> Any | None:
        return self.rows.get(key)

    def put(self, key, backend, method, stage, request, response, usage, seconds) -> None:
        self.rows[key] = response
        self.stages[key] = stage

    def summary(self) -> list[dict]:
        return []

    def count(self) -> int:
        return len(self.rows)


def test_file_cache_is_a_call_cache_and_purges_to_the_last_byte(tmp_path):
    path = tmp_path / "calls.db"
    cache = FileCallCache(path)
    assert isinstance(cache, CallCache) and isinstance(DictCache(), CallCache)
    assert cache._conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
    assert (path.stat().st_mode & 0o777) == 0o600
    client = LLMClient(FakeBackend(), cache)
    secret = "the vault code is 7Q-PELICAN-42"
    for i in range(50):
        client.chat([{"role": "user", "content": f"{secret} #{i}"}])
    assert cache.count() == 50 and cache.summary()[0]["calls"] == 50
    other = sqlite3.connect(path)  # another process reading the same file
    assert other.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 50
    other.close()
    assert cache.purge() == 50 and cache.count() == 0 and cache.summary() == []
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    for file in path.parent.iterdir():
        assert secret.encode() not in file.read_bytes(), file.name
    client.chat(USER)  # still usable after a purge
    assert cache.count() == 1
    cache.close()
    with pytest.raises(sqlite3.ProgrammingError):
        cache.count()
    with FileCallCache(path) as reopened:
        assert reopened.count() == 1


def test_bound_view_caches_elsewhere_and_shares_the_counters():
    backend = FakeBackend()
    own = DictCache()
    client = LLMClient(backend, own)
    alice, bob = DictCache(), DictCache()
    a, b, uncached = client.bound(alice), client.bound(bob), client.bound(None)
    assert a.backend is backend and a.cache is alice and client.cache is own
    with a.stage("ingest"):
        assert client.current_stage == "ingest" and b.current_stage == "ingest"  # one stage per thread
        a.chat(USER)
        a.chat(USER)  # from alice's cache
    with client.stage("query"):
        b.chat(USER)  # bob's cache is empty: the model runs
        b.choose(USER, ["x", "y"])
        uncached.chat(USER)
        uncached.chat(USER)  # no cache: both run
    assert backend.calls == 5 and own.count() == 0 and alice.count() == 1 and bob.count() == 2
    assert list(alice.stages.values()) == ["ingest"] and set(bob.stages.values()) == {"query"}
    stats = client.stats()
    assert stats == a.stats() == uncached.stats()
    assert stats["ingest"]["calls"] == 2 and stats["ingest"]["cached"] == 1
    assert stats["query"]["calls"] == 4 and stats["query"]["cached"] == 0
    client.chat(USER)  # unscoped calls keep using the client's own cache
    assert own.count() == 1 and backend.calls == 6


def test_bound_views_count_correctly_from_many_threads():
    client = LLMClient(FakeBackend())

    def work(i: int) -> None:
        view = client.bound(DictCache())
        with view.stage(f"t{i % 2}"):
            for j in range(20):
                view.chat([{"role": "user", "content": f"{i}-{j % 10}"}])  # 10 distinct, 10 repeated

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = client.stats()
    assert stats["t0"]["calls"] == stats["t1"]["calls"] == 80 and stats["t0"]["cached"] == stats["t1"]["cached"] == 40
    assert client.current_stage == "other"


def test_salt_keys_the_cache_so_keys_cannot_be_recomputed_from_text():
    request = {"messages": USER, "max_tokens": 128, "temperature": 0.0}
    payload = json.dumps([FakeBackend.name, "chat", request], sort_keys=True, ensure_ascii=False).encode()
    plain = LLMClient(FakeBackend())
    assert plain.cache_key("chat", request) == hashlib.sha256(payload).hexdigest()  # unsalted: as before
    salted = LLMClient(FakeBackend(), salt=b"store-secret")
    key = salted.cache_key("chat", request)
    assert key == hmac.new(b"store-secret", payload, hashlib.sha256).hexdigest() != plain.cache_key("chat", request)
    assert salted.bound(None).salt == b"store-secret"  # a view keeps the client's salt unless given its own
    other = salted.bound(DictCache(), salt=b"another-store")
    assert other.cache_key("chat", request) not in (key, plain.cache_key("chat", request))

    shared = DictCache()  # the same cache under two salts: neither finds the other's answers
    backend = FakeBackend()
    client = LLMClient(backend)
    client.bound(shared, salt=b"one").chat(USER)
    client.bound(shared, salt=b"two").chat(USER)
    client.bound(shared, salt=b"one").chat(USER)
    assert backend.calls == 2 and shared.count() == 2
    assert hashlib.sha256(payload).hexdigest() not in shared.rows


def test_invalid_json_is_never_cached(tmp_path):
    cache = tmp_path / "calls.db"
    with pytest.raises(LLMOutputError):
        LLMClient(FakeBackend(json_replies=["{}", "{}", "{}"]), FileCallCache(cache)).json(USER, Trip)
    good = '{"city": "Porto", "nights": 1, "booked": true, "kind": "hostel"}'
    again = LLMClient(FakeBackend(json_replies=[good]), FileCallCache(cache))
    assert again.json(USER, Trip).city == "Porto" and again.backend.calls == 1


def test_reader_cites_one_id_when_logprobs_are_unknown(endpoint):
    from cuemem.answer import read
    from cuemem.types import Hit, Namespace, Retrieval

    hits = [Hit("[x] A: hotel", 1.0, ["a"], 3), Hit("[y] B: dinner", 0.5, ["b"], 3)]
    retrieval = Retrieval("q", hits, "bm25", Namespace("u"))
    answer = read(openai_client(endpoint), "Which hotel?", retrieval)
    assert answer.cited_turn_ids == ["a"]  # the enum server picks the first option; no margin without logprobs


def test_judge_labels_by_constrained_choice_and_counts_its_stage():
    from cuemem.bench.judge import judge

    class Strict(FakeBackend):
        def choose(self, messages, options, k, beam):
            assert "Gold answer: Paris" in messages[0]["content"]
            return [Choice("WRONG", -0.1)], Usage(9, 1)

    lenient = LLMClient(FakeBackend())  # picks the first option: CORRECT
    assert judge(lenient, "Capital?", "Paris", "paris") is True
    assert lenient.stats()["judge"]["calls"] == 1
    assert judge(LLMClient(Strict()), "Capital?", "Paris", "Rome") is False


def test_judge_grades_longmemeval_question_types_by_their_own_rules():
    from cuemem.bench.judge import DEFAULT_RULE, RULES, judge

    prompts = []

    class Recording(FakeBackend):
        def choose(self, messages, options, k, beam):
            prompts.append(messages[0]["content"])
            return super().choose(messages, options, k, beam)

    client = LLMClient(Recording())
    judge(client, "How many days between the trips?", "14 days", "15 days", "temporal-reasoning")
    judge(client, "Where do I live now?", "Lisbon", "Porto, then Lisbon", "knowledge-update")
    judge(client, "What did I say about my cat's vet?", "You never mentioned a vet", "Not mentioned", "abstention")
    judge(client, "When did Ana go hiking?", "7 May 2023", "May 7", None)
    assert "off-by-one" in prompts[0] and "updated answer" in prompts[1] and "cannot be answered" in prompts[2]
    assert DEFAULT_RULE in prompts[3] and len({*prompts}) == 4
    assert all(rule not in prompts[3] for rule in RULES.values())


def test_report_aggregates_judge_accuracy_over_categories_1_to_4(tmp_path):
    from cuemem.bench.report import summarize
    from cuemem.bench.runner import BenchConfig

    def q(cat: str, judged: float) -> dict:
        return {
            "id": cat,
            "category": cat,
            "adversarial": cat == "5",
            "evidence": ["D1:1"],
            "latency_ms": 1.0,
            "context_tokens": 10,
            "recall@1": 1.0,
            "recall@5": 1.0,
            "recall@10": 1.0,
            "recall@20": 1.0,
            "recall@50": 1.0,
            "recall@budget": 1.0,
            "ndcg@10": 1.0,
            "set_f1": 0.5,
            "bleu1": 0.5,
            "locomo_f1": 0.5,
            "judge": judged,
        }

    conv = {"turns": 3, "ingest_seconds": 1.0, "llm": {}, "questions": [q("1", 1.0), q("4", 0.0), q("5", 1.0)]}
    config = BenchConfig("locomo", tmp_path, tmp_path, ["bm25"], answer=True)
    answer = summarize(config, {"bm25": [conv]})["engines"]["bm25"]["answer"]
    assert answer["judge_accuracy"] == 0.5 and answer["judged"] == 2  # category 5 is not judged


def test_reader_tells_the_model_the_date_the_question_is_asked():
    from cuemem.answer import read
    from cuemem.types import Hit, Namespace, Retrieval

    prompts = []

    class Recording(FakeBackend):
        def chat(self, messages, *, max_tokens, temperature):
            prompts.append(messages[-1]["content"])
            return super().chat(messages, max_tokens=max_tokens, temperature=temperature)

    retrieval = Retrieval("q", [Hit("[2023/05/20] A: I adopted a cat", 1.0, ["a"], 9)], "bm25", Namespace("u"))
    read(LLMClient(Recording()), "How long ago did I adopt the cat?", retrieval, now="2023/05/30 (Tue) 10:00")
    read(LLMClient(Recording()), "How long ago did I adopt the cat?", retrieval)
    assert prompts[0].endswith("Today is 2023/05/30 (Tue) 10:00.\nQuestion: How long ago did I adopt the cat?")
    assert "Today is" not in prompts[1] and prompts[1].endswith("\n\nQuestion: How long ago did I adopt the cat?")


def test_longmemeval_answers_get_the_question_date_and_are_judged_by_type(endpoint, tmp_path):
    import gzip

    from cuemem.bench.runner import BenchConfig, run

    said = {"role": "user", "content": "I live in Lisbon now", "has_answer": True}
    item = {
        "question_id": "q1_abs",
        "question_type": "knowledge-update",
        "question": "Where do I live?",
        "answer": "You did not say",
        "question_date": "2023/05/30 (Tue) 21:56",
        "haystack_session_ids": ["s1"],
        "haystack_dates": ["2023/05/01"],
        "answer_session_ids": ["s1"],
        "haystack_sessions": [[said]],
    }
    data = tmp_path / "lme.json.gz"
    with gzip.open(data, "wt") as fh:
        json.dump([item, {**item, "question_id": "q2", "answer": "Lisbon"}], fh)
    model = {"llm": "openai", "llm_base_url": endpoint, "llm_api_key": "sk-test", "llm_cache": "off"}
    config = BenchConfig(
        "longmemeval",
        data,
        tmp_path / "out",
        ["bm25"],
        answer=True,
        judge=model,
        settings={"embedder": "hashing", **model},
    )
    answer = run(config)["engines"]["bm25"]["answer"]
    prompts = [b["messages"][-1]["content"] for b in FakeChat.bodies]
    readers = [p for p in prompts if p.startswith("Excerpts:")]
    judged = [p for p in prompts if p.startswith("You grade answers")]
    assert len(readers) == 2 and all("Today is 2023/05/30 (Tue) 21:56.\nQuestion: Where" in p for p in readers)
    # the abstention question by the abstention rule, the other by its type's; both count in the accuracy
    assert "cannot be answered" in judged[0] and "updated answer" in judged[1]
    assert answer["judged"] == 2 and answer["judge_accuracy"] == 1.0  # the fake judge picks CORRECT
