"""`cuemem serve` against a real uvicorn server on 127.0.0.1: every endpoint, every error path, key isolation.

The server runs in a thread of the test process (uvicorn on a socket bound to a free loopback port) over a Memory
with the hashing embedder and the deterministic fake model, so every request crosses a real HTTP connection.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
import uvicorn
from conftest import TRIP, open_memory

from cuemem.server.app import create_app
from cuemem.server.keys import KeyRing
from cuemem.server.limits import Limits


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port for the block; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class Server:
    """A running server and its key file: `client(token)` is an httpx client sending that key."""

    def __init__(self, url: str, ring: KeyRing, app: Any) -> None:
        self.url, self.ring, self.app = url, ring, app
        self.admin = ring.create(admin=True, label="tests")[1]
        self.alice = ring.create(user_id="alice")[1]
        self.bob = ring.create(user_id="bob")[1]

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def key(self, user_id: str, agent_id: str | None = None) -> str:
        return self.ring.create(user_id=user_id, agent_id=agent_id)[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("server")
    memory = open_memory(root / "mem.db", "hybrid")
    ring = KeyRing(root / "mem.db.keys")
    files = root / "files"
    files.mkdir()
    (files / "notes.txt").write_text("The spare key is under the blue flowerpot.\n", encoding="utf-8")
    limits = Limits(max_body_bytes=64 * 1024, max_import_bytes=256 * 1024, max_turns=50, rate=0)
    app = create_app(memory, ring, limits, files_root=files)
    with running(app) as url:
        yield Server(url, ring, app)
    memory.close()
    ring.close()


JSON = {"Content-Type": "application/json"}


def add(client: httpx.Client, messages: list[Any], **body: Any) -> httpx.Response:
    return client.post("/v1/memories", json={"messages": messages, **body})


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON error body, checked to be one: {"error": kind, "message": text}."""
    data = response.json()
    assert set(data) == {"error", "message"}, data
    assert data["message"], data
    return data


# ---------------------------------------------------------------------- public routes
def test_health_metrics_and_openapi(server: Server) -> None:
    with server.client() as c:
        health = c.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        schema = c.get("/openapi.json").json()
        for path in (
            "/v1/memories",
            "/v1/memories/search",
            "/v1/answer",
            "/v1/memories/{turn_id}",
            "/v1/sessions/{session_id}",
            "/v1/users/{user_id}",
            "/v1/export",
            "/v1/import",
            "/v1/history",
            "/v1/chat",
            "/v1/keys",
        ):
            assert path in schema["paths"], path
        assert "AddRequest" in schema["components"]["schemas"]
        c.get("/v1/memories/search", params={"q": "x"})  # a 401, to be counted
        text = c.get("/metrics").text
    assert 'cuemem_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert 'cuemem_request_seconds_bucket{route="/healthz",le="+Inf"}' in text
    assert 'cuemem_auth_failures_total{reason="missing"}' in text
    assert "cuemem_uptime_seconds" in text


# ---------------------------------------------------------------------- the memory routes, end to end
def test_add_search_get_delete_round_trip(server: Server) -> None:
    with server.client(server.alice) as c:
        added = add(c, TRIP, session_id="lisbon", timestamp="2024-05-01")
        assert added.status_code == 200, added.text
        body = added.json()
        assert body["added"] == ["d1", "d2", "d3", "d4"] and body["namespace"]["user_id"] == "alice"
        assert add(c, TRIP, session_id="lisbon").json()["skipped"] == ["d1", "d2", "d3", "d4"]  # a retry: no-op

        found = c.get("/v1/memories/search", params={"q": "Who feeds the cat Miso?", "k": 3})
        assert found.status_code == 200, found.text
        hits = found.json()["hits"]
        assert hits and "d4" in hits[0]["turn_ids"] and hits[0]["engine"] == "hybrid"
        assert isinstance(hits[0]["score"], float)

        turn = c.get("/v1/memories/d3").json()
        assert turn["text"] == TRIP[2]["text"] and turn["session_id"] == "lisbon" and "seq" not in turn
        listed = c.get("/v1/memories", params={"session_id": "lisbon"}).json()
        assert [t["id"] for t in listed] == ["d1", "d2", "d3", "d4"]
        sessions = c.get("/v1/sessions").json()
        assert {
            "session_id": "lisbon",
            "turns": 4,
            "first_timestamp": "2024-05-01",
            "last_timestamp": "2024-05-01",
        } in sessions

        assert c.delete("/v1/memories/d4").json()["deleted"] == ["d4"]
        gone = c.get("/v1/memories/d4")
        assert gone.status_code == 404 and error_of(gone)["error"] == "not_found"
        again = c.get("/v1/memories/search", params={"q": "Who feeds the cat Miso?", "k": 5}).json()
        assert all("d4" not in h["turn_ids"] for h in again["hits"])
        assert c.delete("/v1/memories/d4").status_code == 404

        history = c.get("/v1/history", params={"limit": 10})
        assert history.status_code == 200 and history.json()


def test_answer_cites_turns(server: Server) -> None:
    key = server.key("answerer")
    with server.client(key) as c:
        add(c, TRIP)
        reply = c.post("/v1/answer", json={"question": "Where is Day 2?", "k": 3})
        assert reply.status_code == 200, reply.text
        data = reply.json()
        assert isinstance(data["text"], str) and data["hits"]
        shown = {tid for h in data["hits"] for tid in h["turn_ids"]}
        assert set(data["cited_turn_ids"]) <= shown


def sse(text: str) -> list[tuple[str, Any]]:
    """The (event, data) pairs of a server-sent event stream."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_answer_streams_as_server_sent_events(server: Server) -> None:
    key = server.key("streamer")
    with server.client(key) as c:
        add(c, TRIP)
        whole = c.post("/v1/answer", json={"question": "Where is Day 2?", "k": 3}).json()
        with c.stream("POST", "/v1/answer/stream", json={"question": "Where is Day 2?", "k": 3}) as reply:
            assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
            events = sse(reply.read().decode())
        missing = c.post("/v1/answer/stream", json={"question": "x?", "user_id": "streamer", "k": 0})
        assert missing.status_code == 422  # a bad request is refused before any event
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "answer" and set(kinds[:-1]) == {"token"}
    assert "".join(data["text"] for kind, data in events if kind == "token") == events[-1][1]["text"]
    final = events[-1][1]
    assert final["text"] == whole["text"] and final["cited_turn_ids"] == whole["cited_turn_ids"]
    assert final["model"] == whole["model"] == "fake:deterministic"  # the reply says which model answered
    assert set(final["cited_turn_ids"]) <= set(final["evidence_turn_ids"])


def test_sessions_users_export_import(server: Server) -> None:
    key = server.key("carol")
    with server.client(key) as c:
        add(c, [{"id": "a1", "text": "Session one: I adopted a greyhound named Biscuit."}], session_id="s1")
        add(c, [{"id": "b1", "text": "Session two: we repainted the kitchen yellow."}], session_id="s2")
        exported = c.get("/v1/export")
        assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
        lines = exported.text.splitlines()
        assert [json.loads(line)["id"] for line in lines] == ["a1", "b1"]

        assert c.delete("/v1/sessions/s1").json()["deleted_turns"] == 1
        assert c.delete("/v1/sessions/s1").status_code == 404
        assert [t["id"] for t in c.get("/v1/memories").json()] == ["b1"]

        body = (exported.text + "this is not json\n").encode()
        imported = c.post("/v1/import", content=body, headers={"Content-Type": "application/x-ndjson"})
        assert imported.status_code == 200, imported.text
        report = imported.json()
        assert report["added"] == 1 and report["skipped"] == 1 and report["errors"][0]["line"] == 3
        assert sorted(t["id"] for t in c.get("/v1/memories").json()) == ["a1", "b1"]

        deleted = c.delete("/v1/users/carol")
        assert deleted.status_code == 200 and deleted.json()["deleted"][0]["turns"] == 2
        missing = c.get("/v1/memories/search", params={"q": "greyhound"})
        assert missing.status_code == 404 and error_of(missing)["error"] == "unknown_namespace"


def test_import_refuses_other_tenants_lines(server: Server) -> None:
    """An import copies one namespace into the key's own; a file mixing tenants is refused line by line."""
    key = server.key("dave")
    lines = [
        {"id": "x1", "text": "from erin", "namespace": {"user_id": "erin"}},
        {"id": "x2", "text": "from frank", "namespace": {"user_id": "frank"}},
    ]
    with server.client(key) as c:
        body = "\n".join(json.dumps(line) for line in lines)
        report = c.post("/v1/import", content=body).json()
        assert report["added"] == 1 and report["errors"][0]["line"] == 2
        assert [t["namespace"]["user_id"] for t in c.get("/v1/memories").json()] == ["dave"]
        assert c.post("/v1/import", content=body, params={"user_id": "erin"}).status_code == 403


# ---------------------------------------------------------------------- keys
def test_missing_wrong_and_revoked_keys_are_401(server: Server) -> None:
    with server.client() as c:
        for response in (
            c.get("/v1/memories/search", params={"q": "x"}),
            c.get("/v1/memories/search", params={"q": "x"}, headers={"Authorization": "Bearer cm_nope_nope"}),
            c.get("/v1/memories/search", params={"q": "x"}, headers={"X-API-Key": server.alice + "x"}),
            c.get("/v1/memories/search", params={"q": "x"}, headers={"Authorization": "Basic abc"}),
        ):
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
            assert error_of(response)["error"] == "unauthorized"
    key_record, token = server.ring.create(user_id="gina")
    with server.client(token) as c:
        assert c.get("/v1/whoami").json()["user_id"] == "gina"
    with server.client(server.admin) as c:
        assert c.delete(f"/v1/keys/{key_record.id}").json() == {"revoked": key_record.id}
        assert c.delete(f"/v1/keys/{key_record.id}").status_code == 404
    with server.client(token) as c:
        assert c.get("/v1/whoami").status_code == 401


def test_keys_are_hashed_at_rest(server: Server) -> None:
    _, token = server.ring.create(user_id="hank")
    secret = token.removeprefix("cm_").partition("_")[2]  # as KeyRing.verify reads it: the secret may hold '_'
    assert len(secret) >= 40
    raw = b"".join(p.read_bytes() for p in server.ring.path.parent.glob(server.ring.path.name + "*"))
    assert secret.encode() not in raw and token.encode() not in raw


def test_admin_key_manages_keys_and_reads_no_memory(server: Server) -> None:
    with server.client(server.admin) as c:
        created = c.post("/v1/keys", json={"user_id": "ivy", "agent_id": "planner", "label": "ci"})
        assert created.status_code == 201, created.text
        token = created.json()["key"]
        assert created.json()["agent_id"] == "planner"
        listed = c.get("/v1/keys").json()
        assert any(k["id"] == created.json()["id"] for k in listed) and all("key" not in k for k in listed)
        refused = c.get("/v1/memories/search", params={"q": "x"})
        assert refused.status_code == 403 and "admin" in error_of(refused)["message"]
        bad = c.post("/v1/keys", json={"user_id": "a\u202eb"})
        assert bad.status_code == 400 and "U+202E" in error_of(bad)["message"]
    with server.client(server.alice) as c:
        assert c.post("/v1/keys", json={"user_id": "alice"}).status_code == 403
        assert c.get("/v1/keys").status_code == 403
    with server.client(token) as c:  # bound to (ivy, planner): its agent is filled in, another agent refused
        assert add(c, ["The planner key writes here."]).json()["namespace"] == {
            "user_id": "ivy",
            "agent_id": "planner",
            "run_id": None,
        }
        assert add(c, ["elsewhere"], agent_id="other").status_code == 403
        assert add(c, ["a run of the planner"], run_id="r1").json()["namespace"]["run_id"] == "r1"
        assert c.delete("/v1/users/ivy", params={"agent_id": "other"}).status_code == 403
        removed = c.delete("/v1/users/ivy").json()["deleted"]  # only the planner's namespaces: its prefix
        assert sorted(d["namespace"]["run_id"] or "" for d in removed) == ["", "r1"]


def test_key_never_reaches_outside_its_prefix(server: Server) -> None:
    with server.client(server.alice) as c:
        add(c, [{"id": "secret-1", "text": "Alice's locker code is 4512."}])
    with server.client(server.bob) as c:
        for response in (
            c.get("/v1/memories/search", params={"q": "locker code", "user_id": "alice"}),
            c.get("/v1/memories/secret-1", params={"user_id": "alice"}),
            c.delete("/v1/memories/secret-1", params={"user_id": "alice"}),
            c.delete("/v1/users/alice"),
            c.delete("/v1/sessions/default", params={"user_id": "alice"}),
            c.get("/v1/export", params={"user_id": "alice"}),
            c.get("/v1/history", params={"user_id": "alice"}),
            add(c, ["planted"], user_id="alice"),
            c.post("/v1/answer", json={"question": "locker code?", "user_id": "alice"}),
            c.post("/v1/chat", json={"message": "locker code?", "user_id": "alice"}),
            c.get("/v1/memories/search", params={"q": "locker", "user_id": "alice\u0301"}),
        ):
            assert response.status_code == 403, (response.request.url, response.text)
            assert error_of(response)["error"] == "forbidden"
        assert c.get("/v1/memories/secret-1").status_code in (404,)  # bob's own namespace has no such turn
        assert c.delete("/v1/memories/secret-1").status_code == 404
    with server.client(server.alice) as c:
        assert c.get("/v1/memories/secret-1").status_code == 200


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    users=st.lists(
        st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=12).filter(
            str.strip
        ),
        min_size=2,
        max_size=3,
        unique_by=lambda u: u.strip(),
    ),
    turn_ids=st.lists(st.text("abc123-_", min_size=1, max_size=6), min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 10_000),
)
def test_property_zero_cross_key_reads_or_deletes(
    server: Server, users: list[str], turn_ids: list[str], seed: int
) -> None:
    """Random users (any letters), keys and turn ids, the same ids in every namespace: each key reads, lists,
    searches and deletes only its own turns, whatever ids the requests name."""
    import unicodedata

    names = [unicodedata.normalize("NFC", u).strip() for u in users]
    if len(set(names)) < len(names):
        return
    users = [f"{name}-{seed}" for name in names]
    tokens = {u: server.key(u) for u in users}
    for u in users:
        with server.client(tokens[u]) as c:
            response = add(c, [{"id": t, "text": f"{u} wrote {t} about topic {t}"} for t in turn_ids])
            assert response.status_code == 200, response.text
    owner, other = users[0], users[1]
    with server.client(tokens[other]) as c:
        for t in turn_ids:
            own = c.get(f"/v1/memories/{t}").json()
            assert own["text"].startswith(f"{other} wrote"), own
            assert c.get(f"/v1/memories/{t}", params={"user_id": owner}).status_code == 403
            assert c.delete(f"/v1/memories/{t}", params={"user_id": owner}).status_code == 403
        hits = c.get("/v1/memories/search", params={"q": f"{owner} wrote", "k": 20}).json()["hits"]
        assert hits and all(f"{other} wrote" in h["text"] for h in hits), hits
        assert not any(re.search(rf"(^|\s){re.escape(owner)} wrote", h["text"]) for h in hits), hits
        listed = c.get("/v1/memories").json()
        assert {t["namespace"]["user_id"] for t in listed} == {other}
        assert c.delete(f"/v1/memories/{turn_ids[0]}").status_code == 200  # its own copy goes ...
    with server.client(tokens[owner]) as c:  # ... and the owner's stays whole
        assert sorted(t["id"] for t in c.get("/v1/memories").json()) == sorted(turn_ids)
    for u in users:  # ids may hold '/', '?', '#' or '%': percent-encoded, they address the user all the same
        with server.client(tokens[u]) as cu:
            assert cu.delete(f"/v1/users/{quote(u, safe='')}").status_code == 200


# ---------------------------------------------------------------------- bad input: clear 4xx, never a 500
@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "kind", "says"),
    [
        ("post", "/v1/memories", {"content": b"{not json", "headers": JSON}, 422, "invalid_request", "not valid JSON"),
        ("post", "/v1/memories", {"content": b'{"messages": ["ok"]}'}, 422, "invalid_request", "a JSON object"),
        (
            "post",
            "/v1/memories",
            {"content": b"\xff\xfe\x00garbage", "headers": JSON},
            422,
            "invalid_request",
            "not valid JSON",
        ),
        (
            "post",
            "/v1/memories",
            {"content": '{"messages": ["caf\u00e9"]}'.encode("latin-1"), "headers": JSON},
            400,
            "invalid_request",
            "UTF-8",
        ),
        ("post", "/v1/memories", {"json": {"messages": []}}, 422, "invalid_request", "messages"),
        ("post", "/v1/memories", {"json": {"messages": ["   "]}}, 422, "invalid_turn", "empty"),
        ("post", "/v1/memories", {"json": {"messages": ["ok"], "colour": "red"}}, 422, "invalid_request", "colour"),
        (
            "post",
            "/v1/memories",
            {"json": {"messages": [{"text": "x", "metadata": [1]}]}},
            422,
            "invalid_request",
            "metadata",
        ),
        ("post", "/v1/memories", {"json": {"messages": ["x"] * 51}}, 422, "invalid_request", "limit is 50"),
        ("post", "/v1/memories", {"json": {"messages": ["x" * 70_000]}}, 413, "too_large", "65536"),
        ("post", "/v1/memories", {"json": {"messages": ["x"], "user_id": " "}}, 400, "bad_request", "user_id"),
        (
            "post",
            "/v1/memories",
            {"json": {"messages": [{"text": "x", "id": "y" * 1001}]}},
            422,
            "invalid_turn",
            "longer than 1,000",
        ),
        ("get", "/v1/memories/search", {"params": {"q": "x", "k": 0}}, 422, "invalid_request", "k must be"),
        ("get", "/v1/memories/search", {"params": {"q": "x", "k": 101}}, 422, "invalid_request", "k must be"),
        ("get", "/v1/memories/search", {"params": {"q": "x", "k": "many"}}, 422, "invalid_request", "k"),
        ("get", "/v1/memories/search", {"params": {"q": "  "}}, 422, "invalid_request", "non-empty"),
        ("get", "/v1/memories/search", {"params": {"q": "x" * 5000}}, 422, "invalid_request", "limit is 4000"),
        ("get", "/v1/memories/search", {"params": {"q": "x", "engine": "nope"}}, 400, "unknown_engine", "nope"),
        (
            "get",
            "/v1/memories/search",
            {"params": {"q": "x", "budget_tokens": 10**9}},
            422,
            "invalid_request",
            "budget_tokens",
        ),
        ("get", "/v1/memories/search", {}, 422, "invalid_request", "q"),
        ("post", "/v1/answer", {"json": {"question": ""}}, 422, "invalid_request", "question"),
        ("get", "/v1/memories", {"params": {"limit": -1}}, 422, "invalid_request", "limit"),
        ("get", "/v1/nowhere", {}, 404, "not_found", "Not Found"),
        ("put", "/v1/memories", {}, 405, "method_not_allowed", "Method"),
    ],
)
def test_bad_input_gets_a_clear_4xx(
    server: Server, method: str, path: str, kwargs: dict[str, Any], status: int, kind: str, says: str
) -> None:
    with server.client(server.alice) as c:
        add(c, ["Alice has memories, so her namespace exists."])
        response = getattr(c, method)(path, **kwargs)
    assert response.status_code == status, response.text
    data = error_of(response)
    assert data["error"] == kind and says in data["message"], data


def test_a_streamed_body_over_the_limit_is_a_413(server: Server) -> None:
    """Without Content-Length (chunked), the body is counted as it arrives and refused where it passes the limit
    (64 KiB for JSON, 256 KiB for an import in this server)."""

    def chunks(kib: int) -> Iterator[bytes]:
        yield b'{"messages": ["'
        for _ in range(kib):
            yield b"x" * 1024
        yield b'"]}'

    with server.client(server.alice) as c:
        for path, kib in (("/v1/memories", 100), ("/v1/import", 300)):
            response = c.post(path, content=chunks(kib), headers=JSON)
            assert "content-length" not in response.request.headers
            assert response.status_code == 413, response.text
            assert error_of(response)["error"] == "too_large" and "limit" in error_of(response)["message"]
        assert c.post("/v1/import", content=chunks(100)).status_code == 200  # under the import limit: read


def test_library_messages_reach_the_client(server: Server) -> None:
    """The same message the library raises: a turn over the size limit, with every message named."""
    with server.client(server.alice) as c:
        response = add(c, ["fine", {"text": ""}], on_error="raise")
        assert response.status_code == 422
        assert error_of(response)["message"].startswith("nothing was added: message 1:")
        skipped = add(c, ["kept", {"text": ""}], on_error="skip").json()
        assert skipped["added"] and skipped["rejected"][0]["index"] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=12,
    ),
    route=st.sampled_from(["/v1/memories", "/v1/answer", "/v1/chat", "/v1/keys"]),
)
def test_fuzzed_bodies_never_get_a_500(server: Server, body: Any, route: str) -> None:
    with server.client(server.alice) as c:
        response = c.post(route, content=json.dumps(body, allow_nan=True))
    assert response.status_code < 500, response.text
    error_of(response) if response.status_code >= 400 else None


def test_rate_limit_is_a_429_with_retry_after(tmp_path: Path) -> None:
    memory = open_memory(tmp_path / "mem.db", "bm25")
    ring = KeyRing(tmp_path / "keys")
    token = ring.create(user_id="zed")[1]
    other = ring.create(user_id="yan")[1]
    app = create_app(memory, ring, Limits(rate=0.5, burst=3), mcp=False)
    try:
        with running(app) as url, httpx.Client(base_url=url, headers={"X-API-Key": token}) as c:
            codes = [c.get("/v1/whoami").status_code for _ in range(5)]
            assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
            limited = c.get("/v1/whoami")
            assert int(limited.headers["retry-after"]) >= 1 and error_of(limited)["error"] == "rate_limited"
            assert c.get("/v1/whoami", headers={"X-API-Key": other}).status_code == 200  # per key
            assert "cuemem_rate_limited_total" in c.get("/metrics").text
    finally:
        memory.close()
        ring.close()


def test_a_bug_is_a_json_500_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What is not the caller's fault (here a store that fails under the route) is a 500 with no internals."""
    memory = open_memory(tmp_path / "mem.db", "bm25")
    ring = KeyRing(tmp_path / "keys")
    token = ring.create(user_id="zed")[1]
    app = create_app(memory, ring, mcp=False)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk controller on fire at 0xdeadbeef")

    memory.turns = broken  # type: ignore[method-assign]
    try:
        with running(app) as url, httpx.Client(base_url=url, headers={"X-API-Key": token}) as c:
            response = c.get("/v1/memories")
            assert response.status_code == 500
            assert "0xdeadbeef" not in response.text and error_of(response)["error"] == "internal"
    finally:
        memory.close()
        ring.close()


# ---------------------------------------------------------------------- the page
def test_page_is_served_with_a_strict_policy(server: Server) -> None:
    with server.client() as c:
        page = c.get("/")
        script = c.get("/page.js")
    assert page.status_code == 200 and "memory browser" in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert script.status_code == 200 and "textContent" in script.text and "innerHTML" not in script.text


def chromium() -> str | None:
    import os
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI"):
        pytest.fail("CI installs Debian's chromium (.ci/run): the browser page tests must run there")
    return found


def run_chromium(binary: str, tmp_path: Path, *args: str, budget_ms: int = 8000) -> Any:
    import subprocess

    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        f"--virtual-time-budget={budget_ms}",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120, check=False)


@contextmanager
def devtools(binary: str, tmp_path: Path) -> Iterator[Any]:
    """Headless chromium driven over its DevTools pipe, so a test can wait in real time.

    `--virtual-time-budget` stops waiting once a response's headers arrive, so a streamed answer that takes real
    seconds on a loaded machine is cut off; polling the page over the pipe waits for it instead."""
    import os
    import subprocess

    commands, child_in = os.pipe()[::-1]  # (write end for us, read end for chromium)
    child_out, replies = os.pipe()[::-1]

    def fds_3_and_4() -> None:  # chromium reads commands on fd 3 and writes replies on fd 4
        a, b = os.dup(child_in), os.dup(child_out)
        os.dup2(a, 3)
        os.dup2(b, 4)

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"]
    process = subprocess.Popen(
        [binary, *flags, f"--user-data-dir={tmp_path / 'chromium-pipe'}", "--remote-debugging-pipe", "about:blank"],
        preexec_fn=fds_3_and_4,
        close_fds=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(child_in)
    os.close(child_out)
    sent = 0
    buffer = b""

    def call(method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        nonlocal sent, buffer
        sent += 1
        message: dict[str, Any] = {"id": sent, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in buffer:
                chunk = os.read(replies, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                buffer += chunk
            raw, buffer = buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == sent:
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return dict(reply["result"])

    try:
        yield call
    finally:
        try:
            call("Browser.close")
            process.wait(20)
        except Exception:
            process.kill()
            process.wait()
        os.close(commands)
        os.close(replies)


def page_when(call: Any, url: str, ready: str, seconds: float = 120.0) -> str:
    """Open `url` and return the page's HTML once the JavaScript expression `ready` is true (or time is up)."""
    target = call("Target.createTarget", url=url)["targetId"]
    session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = call("Runtime.evaluate", session, expression=f"Boolean({ready})", returnByValue=True)
        if done["result"].get("value"):
            break
        time.sleep(0.2)
    html = call("Runtime.evaluate", session, expression="document.documentElement.outerHTML", returnByValue=True)
    return str(html["result"].get("value", ""))


def test_page_shows_a_search_hits_in_headless_chromium(server: Server, tmp_path: Path) -> None:
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium here (apt-get install chromium)")
    token = server.key("page-user")
    with server.client(token) as c:
        add(c, TRIP, session_id="lisbon", timestamp="2024-05-01")
        add(c, [{"id": "x<b>", "text": "<img src=x onerror=alert(1)> is just text here"}], session_id="hostile")
    url = f"{server.url}/#key={token}&q=Who%20feeds%20the%20cat%20Miso%3F"
    with devtools(binary, tmp_path) as call:
        dom = page_when(call, url, "document.querySelector('#hits .hit') && document.querySelector('#timeline .turn')")
    assert 'class="hit"' in dom, dom[-2000:]
    assert "My neighbour Ines will feed the cat Miso twice a day." in dom
    assert 'class="score"' in dom and "hybrid" in dom and ">d4<" in dom  # score, engine, an evidence link
    assert "2 sessions · 5 turns" in dom and "lisbon" in dom  # the timeline
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom and "<img src=x" not in dom  # text, never markup

    ask = f"{server.url}/#key={token}&ask=Who%20feeds%20Miso%3F"
    with devtools(binary, tmp_path) as call:  # the stream takes real seconds on a loaded machine: wait for it
        answered = "document.querySelector('#answer .evidence')"  # the reply's last event shows the cited turns
        failed = "(document.querySelector('#answer .answer-text') && !['', 'answering…'].includes(status.textContent))"
        asked = page_when(call, ask, f"{answered} || {failed}".replace("status.", "document.getElementById('status')."))
    shown = asked[asked.find('id="status"') :][:600]
    assert 'class="answer-text"' in asked and "answered by fake:deterministic" in asked, shown
    assert "cites: " in asked  # the streamed answer, then the turns it cites

    shot = tmp_path / "page.png"
    result = run_chromium(binary, tmp_path, f"--screenshot={shot}", "--window-size=1280,800", url)
    assert shot.exists() and shot.stat().st_size > 10_000, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------- concurrency
def test_concurrent_writers_and_readers(server: Server) -> None:
    """16 clients writing and searching at once through the thread pool: every acknowledged write is readable."""
    from concurrent.futures import ThreadPoolExecutor

    tokens = {f"conc-{i}": server.key(f"conc-{i}") for i in range(4)}
    acknowledged: list[tuple[str, str]] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        user = f"conc-{n % 4}"
        with server.client(tokens[user]) as c:
            for j in range(10):
                tid = f"w{n}-{j}"
                response = add(c, [{"id": tid, "text": f"worker {n} fact {j}: the code word is {tid}"}])
                assert response.status_code == 200, response.text
                with lock:
                    acknowledged.append((user, tid))
                assert c.get("/v1/memories/search", params={"q": f"code word {tid}", "k": 3}).status_code == 200

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(worker, range(16)))
    for user, token in tokens.items():
        with server.client(token) as c:
            stored = {t["id"] for t in c.get("/v1/memories").json()}
        assert {tid for u, tid in acknowledged if u == user} <= stored


# ---------------------------------------------------------------------- MCP behind the same keys
def test_mcp_endpoint_takes_the_keys_namespace(server: Server) -> None:
    """`cuemem serve` mounts the MCP server at /mcp/: the SDK's own client, with a user key, works in that key's
    namespace only; without a valid key the endpoint answers 401."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    token = server.key("mcp-user")

    async def body() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"{server.url}/mcp/", http_client=http)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == {"add_memory", "search_memory", "answer", "delete_memory"}
            added = await client.call_tool("add_memory", {"text": "The MCP client parked on level 3."})
            assert not added.is_error, added
        await http.aclose()

    anyio.run(body)
    with server.client(token) as c:
        assert [t["text"] for t in c.get("/v1/memories").json()] == ["The MCP client parked on level 3."]
    with server.client() as c:
        refused = c.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401 and error_of(refused)["error"] == "unauthorized"
    with server.client(server.admin) as c:
        assert c.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401


# ---------------------------------------------------------------------- the memory agent
def test_chat_turns_use_memory_and_are_counted(server: Server) -> None:
    """POST /v1/chat: the agent's reply, its tool steps and metrics; with memory on it stores the exchange in the
    key's namespace, with memory off it reads and writes none; /metrics counts the turns and tool calls."""
    token = server.key("chat-user")
    with server.client(token) as c:
        add(c, [{"id": "pref", "text": "I prefer window seats on long flights."}])
        first = c.post("/v1/chat", json={"message": "What seat do I prefer on flights?", "session_id": "trip"})
        assert first.status_code == 200, first.text
        turn = first.json()
        assert isinstance(turn["reply"], str) and turn["reply"]
        assert {"latency_s", "tool_calls", "memory_hit", "prompt_tokens"} <= set(turn["metrics"])
        assert all(
            step["tool"] in {"search_memory", "store_memory", "recall_profile", "calculator", "clock", "file_search"}
            for step in turn["steps"]
        )
        stored = {t["id"] for t in c.get("/v1/memories").json()}
        assert set(turn["stored_turn_ids"]) <= stored and len(stored) > 1
        before = len(stored)
        off = c.post("/v1/chat", json={"message": "What is 12 * 7?", "memory": False}).json()
        assert not any(s["tool"] in {"search_memory", "store_memory", "recall_profile"} for s in off["steps"])
        assert len(c.get("/v1/memories").json()) == before
        assert c.post("/v1/chat", json={"message": "   "}).status_code == 422
        text = c.get("/metrics").text
    assert "cuemem_agent_turns_total" in text and "cuemem_agent_tool_calls_total{" in text
    assert 'cuemem_model_calls_total{stage="' in text and 'cuemem_model_tokens_total{kind="prompt",stage="' in text
    state = server.app.state.cuemem
    assert any(key[0].user_id == "chat-user" for key in state._agents)
    state.memory.delete("pref", user_id="chat-user")  # any delete, not only one through REST (MCP, the library)
    assert not any(key[0].user_id == "chat-user" for key in state._agents)  # its recent turns are forgotten too
    with server.client(token) as c:
        assert c.post("/v1/chat", json={"message": "Hello again", "session_id": "trip"}).status_code == 200
        assert any(key[0].user_id == "chat-user" for key in state._agents)
        assert c.delete("/v1/users/chat-user").status_code == 200
    assert not any(key[0].user_id == "chat-user" for key in state._agents)


# ---------------------------------------------------------------------- kill -9 mid-load
def test_kill_9_mid_load_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """`cuemem serve` in its own process, four clients writing; SIGKILL mid-load, restart on the same store:
    every write that got its 200 is there (benchmarks/load.py runs the same at 50 clients)."""
    import os
    import signal
    import subprocess
    import sys

    db = tmp_path / "srv.db"
    ring = KeyRing(str(db) + ".keys")
    tokens = [ring.create(user_id=f"w{i}")[1] for i in range(4)]
    ring.close()

    def start(port: int) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "cuemem.cli",
            "--db",
            str(db),
            "--engine",
            "bm25",
            "--embedder",
            "hashing",
            "serve",
            "--port",
            str(port),
            "--rate",
            "0",
            "--no-mcp",
            "--log-level",
            "warning",
        ]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return process
            except httpx.HTTPError:
                time.sleep(0.1)
        process.kill()
        raise AssertionError("cuemem serve did not start")

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = start(port)
    acked: list[set[str]] = [set() for _ in tokens]
    stop = threading.Event()

    def writer(i: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": tokens[i]}, timeout=10) as c:
            n = 0
            while not stop.is_set():
                tid = f"w{i}-{n}"
                try:
                    response = add(c, [{"id": tid, "text": f"write {n} of client {i}"}])
                except httpx.HTTPError:
                    return  # the server is gone: this write was never acknowledged
                if response.status_code == 200:
                    acked[i].add(tid)
                n += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(tokens))]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    stop.set()
    for thread in threads:
        thread.join(15)
    assert sum(map(len, acked)) > 20  # the kill came mid-load, not before it
    server = start(port)
    try:
        for i, token in enumerate(tokens):
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": token}) as c:
                stored = {t["id"] for t in c.get("/v1/memories", params={"limit": 5000}).json()}
            assert acked[i] <= stored, sorted(acked[i] - stored)[:5]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
