"""Serving under hostile load (issue 33): one key cannot stall the others, and no key can make the server grow.

A real uvicorn server over a model that takes a second and a half per answer: one key floods answers far past its
share while /healthz, /metrics and another key's search must answer at once; requests naming engines the server
does not allow are refused without a byte written. Runs on both stores (conftest BOTH_STORES).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from conftest import open_memory
from fakes import FakeBackend
from test_server import running

from cuemem.errors import UnknownEngineError
from cuemem.indexer import MAX_NAMED_ENGINES
from cuemem.llm import LLMClient
from cuemem.server.app import create_app
from cuemem.server.errors import ApiError
from cuemem.server.fairness import Lane
from cuemem.server.keys import KeyRing
from cuemem.server.limits import Limits


class GatedBackend(FakeBackend):
    """The fake model, answering only once the test opens its gate: a model-bound request holds its worker until
    then, however loaded the machine is (no timing in the test's verdict)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered = threading.Event(), threading.Event()

    def chat(self, messages, *, max_tokens, temperature):  # type: ignore[no-untyped-def]
        self.entered.set()
        self.gate.wait(120)
        return super().chat(messages, max_tokens=max_tokens, temperature=temperature)


def _serve(tmp_path: Path, **app_options: object):  # type: ignore[no-untyped-def]
    backend = GatedBackend()
    backend.gate.set()  # open unless a test closes it
    memory = open_memory(tmp_path / "fair.db", "bm25", llm=LLMClient(backend), llm_cache="off")
    memory.add(["The hotel is close to the river.", "We booked the train for Friday."], user_id="alice")
    memory.add(["Bob's dentist appointment is on Monday."], user_id="bob")
    ring = KeyRing(tmp_path / "fair.keys")
    keys = {user: ring.create(user_id=user)[1] for user in ("alice", "bob")}
    app = create_app(memory, ring, Limits(rate=0), mcp=False, **app_options)  # type: ignore[arg-type]
    return memory, ring, keys, app


def test_one_key_flooding_answers_cannot_stall_health_metrics_or_another_key(tmp_path: Path) -> None:
    """45 answers at once from one key (more than the server's 40 threads: the probe's stall) over a model that
    does not answer until the test lets it: the key's share waits on the model, every other answer is refused with
    429 and Retry-After, and /healthz, /metrics and another key's search all answer, while the model still holds
    its answers (before issue 33 they waited for a thread as long as the model did)."""
    memory, ring, keys, app = _serve(tmp_path)
    backend = memory.llm.backend
    backend.gate.clear()
    with running(app) as url:
        flood = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=120)
        other = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=120)

        def ask(i: int) -> tuple[int, str | None, bool]:
            r = flood.post("/v1/answer", json={"question": f"Where is the hotel, take {i}?", "user_id": "alice"})
            return r.status_code, r.headers.get("retry-after"), backend.gate.is_set()

        try:
            with ThreadPoolExecutor(45) as pool:
                answers = [pool.submit(ask, i) for i in range(45)]
                assert backend.entered.wait(60), "no answer reached the model"
                deadline = time.monotonic() + 60
                while sum(a.done() for a in answers) < 45 - Limits().model_per_key and time.monotonic() < deadline:
                    time.sleep(0.05)
                for path in ("/healthz", "/metrics", "/v1/memories/search"):
                    r = other.get(path, params={"q": "dentist", "user_id": "bob"} if "search" in path else None)
                    assert r.status_code == 200, (path, r.text)
                    assert not backend.gate.is_set()  # answered while the model still holds the flood's answers
                early = [a.result() for a in answers if a.done()]
                backend.gate.set()
                results = [a.result() for a in answers]
        finally:
            backend.gate.set()
            flood.close()
            other.close()
    memory.close()
    ring.close()
    assert len(early) == 45 - Limits().model_per_key
    assert all(status == 429 and retry == "1" and not opened for status, retry, opened in early), early
    assert sorted(status for status, _, _ in results).count(200) == Limits().model_per_key


@pytest.mark.sqlite_only("no store involved")
def test_a_lane_refuses_past_a_keys_share_and_past_its_bound() -> None:
    lane = Lane("model", workers=1, queue=2, per_key=2)
    lane.enter("a")
    lane.enter("a")
    with pytest.raises(ApiError) as share:
        lane.enter("a")
    assert share.value.status == 429 and share.value.headers == {"Retry-After": "1"}
    lane.enter("b")
    with pytest.raises(ApiError) as full:
        lane.enter("c")
    assert full.value.status == 503 and lane.size == 3
    lane.leave("a")
    lane.enter("c")  # a place freed is a place taken
    assert lane.size == 3


def test_requests_name_only_the_engines_the_server_allows(tmp_path: Path) -> None:
    """The probe's flood of `episodic[window=N]` variants: each a clear 400, nothing built, nothing stored."""
    memory, ring, keys, app = _serve(tmp_path)
    store_files = [p for p in tmp_path.iterdir() if p.name.startswith("fair.db")]
    before = sum(p.stat().st_size for p in store_files) if store_files else 0
    with running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}) as c:
        for n in range(20):
            r = c.get(
                "/v1/memories/search", params={"q": "hotel", "user_id": "alice", "engine": f"episodic[window={n + 1}]"}
            )
            assert r.status_code == 400 and r.json()["error"] == "engine_not_allowed", r.text
            assert "cuemem serve --allow-engine" in r.json()["message"]
        r = c.get("/v1/memories/search", params={"q": "hotel", "user_id": "alice", "engine": "nope"})
        assert r.status_code == 400 and r.json()["error"] == "unknown_engine"
        r = c.get("/v1/memories/search", params={"q": "hotel", "user_id": "alice", "engine": "hybrid"})
        assert r.status_code == 200  # a registered engine by its name is allowed by default
    assert set(memory._indexer.engines) <= {"bm25", "hybrid"}
    if store_files:
        after = sum(p.stat().st_size for p in store_files)
        assert after <= before + 256 * 1024, (before, after)  # the hybrid search's own derived rows, no variant's
    memory.close()
    ring.close()


def test_an_allow_list_admits_exactly_the_variants_it_names(tmp_path: Path) -> None:
    memory, ring, keys, app = _serve(tmp_path, allowed_engines=["episodic[window=256]"])
    with running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}) as c:
        ok = c.get("/v1/memories/search", params={"q": "hotel", "user_id": "alice", "engine": "episodic[window=256]"})
        assert ok.status_code == 200, ok.text
        no = c.get("/v1/memories/search", params={"q": "hotel", "user_id": "alice", "engine": "hybrid"})
        assert no.status_code == 400 and "episodic[window=256]" in no.json()["message"]
        model = c.post("/v1/answer", json={"question": "Where is the hotel?", "user_id": "alice", "engine": "dense"})
        assert model.status_code == 400  # answers check the engine too
    memory.close()
    ring.close()


@pytest.mark.sqlite_only("the engine cache is the process's own, whatever the store")
def test_engines_named_in_calls_are_kept_in_a_bounded_cache(tmp_path: Path) -> None:
    """In the library any variant may be named; the engines kept in memory stay bounded (least recently used out)."""
    with open_memory(tmp_path / "lib.db", "bm25") as memory:
        memory.add("The hotel is close to the river.", user_id="u")
        for n in range(MAX_NAMED_ENGINES + 8):
            memory._engine(f"episodic[window={64 + n}]")
        assert len(memory._indexer.engines) <= MAX_NAMED_ENGINES + 1
        assert memory._indexer.engines["bm25"] is memory.engine  # the memory's own engine is never evicted
        with pytest.raises(UnknownEngineError):
            memory.search("hotel", user_id="u", engine="episodic[nope=1]")


def test_mcp_answers_share_the_model_lane_with_the_keys_http_answers(tmp_path: Path) -> None:
    """An MCP `answer` waits on the model as /v1/answer does, so it runs in the model lane under its key's share
    there: with the key's share held by its HTTP answers (the model not answering yet), the MCP answer is refused
    at once with a tool error saying why, instead of taking another worker to wait on the model."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    memory, ring, keys, _ = _serve(tmp_path)
    app = create_app(memory, ring, Limits(rate=0), mcp=True)
    backend = memory.llm.backend
    backend.gate.clear()
    share = Limits().model_per_key
    with running(app) as url:
        flood = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=120)

        def ask(i: int) -> int:
            return flood.post("/v1/answer", json={"question": f"Where is the hotel, take {i}?"}).status_code

        async def mcp_answer() -> tuple[bool, str, bool]:
            # refused at once when it works; waiting on the held model (the failure) times out after 30 s
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=30)
            async with Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as client:
                result = await client.call_tool("answer", {"question": "When is the train?"})
            await http.aclose()
            text = " ".join(getattr(part, "text", "") for part in result.content)
            return result.is_error, text, backend.gate.is_set()

        try:
            with ThreadPoolExecutor(share) as pool:
                held = [pool.submit(ask, i) for i in range(share)]
                assert backend.entered.wait(60), "no answer reached the model"
                deadline = time.monotonic() + 60
                while state_size(app) < share and time.monotonic() < deadline:
                    time.sleep(0.05)
                refused, message, opened = anyio.run(mcp_answer)
                backend.gate.set()
                assert [h.result() for h in held] == [200] * share
        finally:
            backend.gate.set()
            flood.close()
    memory.close()
    ring.close()
    assert refused and "busy" in message and not opened, message


def state_size(app) -> int:  # type: ignore[no-untyped-def]
    return int(app.state.cuemem.lanes["model"].size)


@pytest.mark.sqlite_only("the lane a request takes does not depend on the store")
def test_model_mode_searches_run_in_the_model_lane(tmp_path: Path) -> None:
    memory, ring, _, app = _serve(tmp_path)
    state = app.state.cuemem
    assert state.lane_for("GET", "/v1/memories/search", "stitch-llm") is state.lanes["model"]
    assert state.lane_for("GET", "/v1/memories/search", None) is state.lanes["memory"]
    assert state.lane_for("POST", "/v1/chat", None) is state.lanes["model"]
    assert state.lane_for("GET", "/healthz", None) is None and state.lane_for("GET", "/metrics", None) is None
    memory.close()
    ring.close()


def test_gc_drops_the_derived_state_of_variants_nobody_uses(tmp_path: Path) -> None:
    """`cuemem gc`: a variant's derived state goes (its items, state, watermarks, declaration), the engines in use
    keep theirs, the log stays, and the variant rebuilds from the log if it is named again."""
    from typer.testing import CliRunner

    from cuemem.cli import app

    path = tmp_path / "gc.db"
    with open_memory(path, "hybrid") as memory:
        memory.add(["The hotel is close to the river.", "We booked the train for Friday."], user_id="u")
        memory.search("hotel", user_id="u")
        variant = "episodic[window=200]"
        assert memory.search("hotel", user_id="u", engine=variant).hits
        before = memory.derived_state(user_id="u")
        assert memory.gc(dry_run=True) == {variant: 0}
        assert memory.store.derived_owners() == sorted(["hybrid", variant])
        dropped = memory.gc()
        assert list(dropped) == [variant] and dropped[variant] > 0
        assert memory.store.derived_owners() == ["hybrid"] and memory.gc() == {}
        after = memory.derived_state(user_id="u")
        assert after != before and len(memory.turns(user_id="u")) == 2
        assert memory.search("hotel", user_id="u").turn_ids  # the engine in use kept its index
        assert memory.search("hotel", user_id="u", engine=variant).hits  # rebuilt from the log when named again
        assert memory.gc(keep=["hybrid", variant]) == {}
        target = str(memory.settings.db)
    r = CliRunner().invoke(app, ["--db", target, "gc", "--dry-run"])
    assert r.exit_code == 0 and "would drop episodic[window=200]" in r.output, r.output
    r = CliRunner().invoke(app, ["--db", target, "gc"])
    assert r.exit_code == 0 and "dropped episodic[window=200]" in r.output, r.output
    r = CliRunner().invoke(app, ["--db", target, "gc"])
    assert r.exit_code == 0 and "nothing to drop" in r.output, r.output
