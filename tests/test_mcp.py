"""The MCP server (issue 17): round trips with the MCP SDK's own client over stdio (a real subprocess), in process
(for `answer`, which needs the fake model) and over streamable HTTP (a real uvicorn server, the app mounted in a
FastAPI app the way the REST server mounts it, the namespace resolved per request from a header)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
import pytest
import uvicorn
from conftest import open_memory
from fastapi import FastAPI
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from cuemem import Memory
from cuemem.errors import InvalidTurnError, TurnNotFoundError
from cuemem.server.mcp import build_server, streamable_http_app
from cuemem.types import Namespace

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
TOOLS = {"add_memory", "search_memory", "answer", "delete_memory"}
T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]], seconds: float = 60) -> T:
    """Run an async test body under a deadline, so a stuck transport fails the test instead of hanging it."""

    async def bounded() -> T:
        with anyio.fail_after(seconds):
            return await fn()

    return anyio.run(bounded)


def stdio(db: Path, user_id: str) -> StdioServerParameters:
    """`python -m cuemem.server.mcp` on a store, in one namespace, with a model-free engine."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    args = ["-m", "cuemem.server.mcp", "--db", str(db), "--user-id", user_id, "--engine", "bm25"]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call."""
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


def found(result: CallToolResult) -> set[str]:
    """Every turn id cited by a search_memory result's hits."""
    return {tid for hit in ok(result)["hits"] for tid in hit["turn_ids"]}


# ---------------------------------------------------------------------------------------------------- stdio
def test_stdio_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    with Memory(tmp_path / "scratch.db", engine="bm25") as scratch:  # the library's own messages, for comparison
        with pytest.raises(InvalidTurnError) as empty:
            scratch.add("   ", user_id="alice")
        scratch.add("x", user_id="alice")
        with pytest.raises(TurnNotFoundError) as missing:
            scratch.delete("no-such-turn", user_id="alice")

    async def body() -> None:
        async with Client(stdio(db, "alice")) as client:
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} == TOOLS
            assert all(tool.description for tool in tools.tools)
            assert "namespace" not in str([tool.input_schema for tool in tools.tools]).lower()

            added = ok(await client.call_tool("add_memory", {"text": "Day 1 is the Apollo Hotel, 120 euros a night."}))
            assert len(added["added"]) == 1 and added["skipped"] == []
            hotel = added["added"][0]
            again = ok(await client.call_tool("add_memory", {"text": "Day 1 is the Apollo Hotel, 120 euros a night."}))
            assert again == {"added": [], "skipped": [hotel]}  # a retried add is a no-op
            mine = ok(
                await client.call_tool(
                    "add_memory",
                    {
                        "text": "Lena is allergic to shellfish.",
                        "speaker": "Theo",
                        "session_id": "s2",
                        "timestamp": "10 March 2024",
                        "id": "D2:5",
                    },
                )
            )
            assert mine["added"] == ["D2:5"]

            hits = ok(await client.call_tool("search_memory", {"query": "Which hotel on Day 1?", "k": 3}))
            assert hits["engine"] == "bm25"
            assert hits["hits"][0]["turn_ids"] == [hotel] and "Apollo" in hits["hits"][0]["text"]
            assert "D2:5" in found(await client.call_tool("search_memory", {"query": "what is Lena allergic to"}))

            # library errors come back as tool errors carrying the library's message; the server stays up
            error = await client.call_tool("add_memory", {"text": "   "})
            assert error.is_error and str(empty.value) in text_of(error)
            error = await client.call_tool("delete_memory", {"turn_id": "no-such-turn"})
            assert error.is_error and str(missing.value) in text_of(error)
            error = await client.call_tool("search_memory", {"query": " "})
            assert error.is_error and "query must be a non-empty string" in text_of(error)
            error = await client.call_tool("search_memory", {"query": "hotel", "k": 0})  # refused by the schema
            assert error.is_error and "k" in text_of(error)

            assert ok(await client.call_tool("delete_memory", {"turn_id": hotel})) == {"deleted": hotel}
            assert hotel not in found(await client.call_tool("search_memory", {"query": "Which hotel on Day 1?"}))
            error = await client.call_tool("delete_memory", {"turn_id": hotel})
            assert error.is_error and hotel in text_of(error)

    run(body)
    with Memory(db, engine="bm25") as memory:  # the calls went to the store, in alice's namespace
        assert [t.id for t in memory.turns(user_id="alice")] == ["D2:5"]


def test_stdio_namespace_is_fixed_by_the_server(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"

    async def body() -> None:
        async with Client(stdio(db, "alice")) as alice:
            secret = ok(await alice.call_tool("add_memory", {"text": "Alice's locker code is 4711."}))["added"][0]
        async with Client(stdio(db, "bob")) as bob:  # same store, another namespace
            error = await bob.call_tool("search_memory", {"query": "locker code"})
            assert error.is_error and "unknown namespace (user=bob)" in text_of(error)
            ok(await bob.call_tool("add_memory", {"text": "Bob's bike lock code is 1234."}))
            assert secret not in found(await bob.call_tool("search_memory", {"query": "Alice locker code 4711"}))
            error = await bob.call_tool("delete_memory", {"turn_id": secret})
            assert error.is_error and secret in text_of(error)
            # a namespace named in the arguments is not accepted as one: the schema has no such field
            sneaky = await bob.call_tool("search_memory", {"query": "locker code", "user_id": "alice"})
            assert secret not in {
                tid for hit in (sneaky.structured_content or {}).get("hits", []) for tid in hit["turn_ids"]
            }
        async with Client(stdio(db, "alice")) as alice:
            assert secret in found(await alice.call_tool("search_memory", {"query": "locker code"}))

    run(body)


def test_stdio_bad_configuration_exits_with_a_message(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuemem.server.mcp",
            "--db",
            str(tmp_path / "m.db"),
            "--user-id",
            "alice",
            "--engine",
            "no-such-engine",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # stdout belongs to the protocol
    assert "unknown engine 'no-such-engine'" in proc.stderr


# ---------------------------------------------------------------------------------------------------- in process
def test_answer_in_process(tmp_path: Path) -> None:
    memory = open_memory(tmp_path / "mem.db", "bm25")  # the deterministic fake model of fakes.py
    server = build_server(memory, Namespace("alice", "planner"))

    async def body() -> None:
        async with Client(server) as client:
            ids = [
                ok(await client.call_tool("add_memory", {"text": text}))["added"][0]
                for text in ("Day 1 is the Apollo Hotel near Rossio.", "Day 2 is Casa Azul in Alfama.")
            ]
            result = ok(await client.call_tool("answer", {"question": "Which hotel on Day 1?", "k": 2}))
            expected = memory.answer("Which hotel on Day 1?", user_id="alice", agent_id="planner", k=2)
            cited, dates = expected.cited_turn_ids, expected.dates
            assert result == {"answer": expected.text, "cited_turn_ids": cited, "dates": dates}
            assert result["answer"] and set(result["cited_turn_ids"]) <= set(ids)
            error = await client.call_tool("answer", {"question": ""})
            assert error.is_error and "query must be a non-empty string" in text_of(error)

    try:
        run(body)
        assert {t.namespace for t in memory.turns(user_id="alice", agent_id="planner")} == {
            Namespace("alice", "planner")
        }
    finally:
        memory.close()


@pytest.mark.parametrize("error", [LookupError, PermissionError])
def test_namespace_callable_failure_is_a_tool_error(tmp_path: Path, error: type[Exception]) -> None:
    def nobody() -> Namespace:
        raise error("no API key on this request")

    with Memory(tmp_path / "mem.db", engine="bm25") as memory:
        server = build_server(memory, nobody)

        async def body() -> None:
            async with Client(server) as client:
                error = await client.call_tool("add_memory", {"text": "hello"})
                assert error.is_error and "no API key on this request" in text_of(error)

        run(body)
        assert memory.namespaces() == []


# ---------------------------------------------------------------------------------------------------- streamable HTTP
CURRENT_USER: contextvars.ContextVar[str] = contextvars.ContextVar("current_user")


def keyed_app(memory: Memory) -> FastAPI:
    """A FastAPI app mounting the MCP app at /mcp as the REST server does: a middleware resolves the namespace
    from the request (here a plain header standing in for an API key) into a contextvar, the lifespan runs the
    MCP app's session manager."""
    mcp_app = streamable_http_app(memory, lambda: Namespace(CURRENT_USER.get()))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp_app.router.lifespan_context(mcp_app):
            yield

    app = FastAPI(lifespan=lifespan)

    @app.middleware("http")
    async def namespace_from_key(request: Any, call_next: Any) -> Any:
        token = CURRENT_USER.set(request.headers.get("x-test-user", ""))
        try:
            return await call_next(request)
        finally:
            CURRENT_USER.reset(token)

    app.mount("/mcp", mcp_app)
    return app


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` under a real uvicorn server on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started or not thread.is_alive():
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


def test_streamable_http_round_trip_with_a_namespace_per_request(tmp_path: Path) -> None:
    with Memory(tmp_path / "mem.db", engine="bm25") as memory, serving(keyed_app(memory)) as base:

        async def body() -> None:
            keys = {user: httpx2.AsyncClient(headers={"x-test-user": user}) for user in ("alice", "bob")}
            async with (
                Client(streamable_http_client(f"{base}/mcp/", http_client=keys["alice"])) as alice,
                Client(streamable_http_client(f"{base}/mcp", http_client=keys["bob"])) as bob,  # redirected to /mcp/
            ):
                assert {tool.name for tool in (await alice.list_tools()).tools} == TOOLS
                turn = ok(await alice.call_tool("add_memory", {"text": "The spare key is under the blue pot."}))
                tid = turn["added"][0]
                assert tid in found(await alice.call_tool("search_memory", {"query": "where is the spare key"}))
                # bob's requests (interleaved on the same server) resolve to bob's namespace
                error = await bob.call_tool("search_memory", {"query": "where is the spare key"})
                assert error.is_error and "unknown namespace (user=bob)" in text_of(error)
                ok(await bob.call_tool("add_memory", {"text": "Bob keeps his key in his pocket."}))
                assert tid not in found(await bob.call_tool("search_memory", {"query": "spare key blue pot"}))
                assert tid in found(await alice.call_tool("search_memory", {"query": "spare key blue pot"}))
                # the namespace follows each request's key, not the connection's first one
                keys["alice"].headers["x-test-user"] = "carol"
                ok(await alice.call_tool("add_memory", {"text": "Carol's key is at the neighbours'."}))

        run(body)
        assert [t.text for t in memory.turns(user_id="bob")] == ["Bob keeps his key in his pocket."]
        assert [t.text for t in memory.turns(user_id="carol")] == ["Carol's key is at the neighbours'."]
        assert [t.text for t in memory.turns(user_id="alice")] == ["The spare key is under the blue pot."]


def test_main_serves_streamable_http(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cuemem.server.mcp",
            "--db",
            str(tmp_path / "mem.db"),
            "--user-id",
            "alice",
            "--engine",
            "bm25",
            "--transport",
            "http",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()
            with socket.socket() as conn:
                if conn.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the server did not start listening"
            time.sleep(0.1)

        async def body() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tid = ok(await client.call_tool("add_memory", {"text": "The boat leaves at 7 from pier 3."}))["added"]
                assert set(tid) <= found(await client.call_tool("search_memory", {"query": "when does the boat leave"}))

        run(body)
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0
    assert out == b""
    with Memory(tmp_path / "mem.db", engine="bm25") as memory:
        assert [t.text for t in memory.turns(user_id="alice")] == ["The boat leaves at 7 from pier 3."]
