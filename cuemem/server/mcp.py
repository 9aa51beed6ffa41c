"""The MCP server: cuemem's memory as four tools for any MCP client, over stdio or streamable HTTP (issue 17).

Built on the official MCP Python SDK (`mcp` 2.x, `MCPServer`). The tools are `add_memory`, `search_memory`,
`answer` and `delete_memory`. The namespace is never a tool argument: it is fixed by the server's configuration
(`--user-id`/`--agent-id`/`--run-id`, one namespace per stdio process) or resolved per request by a callable (the
HTTP layer resolves it from the request's API key). A library error (`CuememError`, `ValueError`) comes back to
the client as a tool error (`isError`) carrying the library's message; the server keeps running.

Run it as `python -m cuemem.server.mcp --db memory.db --user-id alice [--transport http --port 8765]`. In stdio
mode only protocol goes to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.applications import Starlette

from .. import __version__
from ..errors import CuememError
from ..memory import Memory
from ..store import display_target
from ..types import Namespace

log = logging.getLogger(__name__)

NamespaceSource = Namespace | Callable[[], Namespace]
"""A fixed namespace, or a callable returning the current request's namespace (called on the event loop, in the
context of the MCP request, before the memory call moves to a worker thread)."""

MAX_K = 100  # hits a search or an answer may ask for: enough for any agent, and bounds one request's work

INSTRUCTIONS = (
    "Long-term memory (cuemem). Store what is worth remembering with add_memory, find it later with "
    "search_memory (hits carry the ids of the turns they come from) or ask answer for a short answer that cites "
    "turn ids; delete_memory forgets one turn by id. Every call works in one fixed namespace (user, agent, run) "
    "chosen by the server's configuration or your API key, never by the tool's arguments."
)

_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------------------- results
class AddedTurns(BaseModel):
    """What add_memory stored: new turn ids, and ids already present (a retried add is a no-op)."""

    added: list[str] = Field(description="ids of the turns stored by this call")
    skipped: list[str] = Field(description="ids already in memory: nothing was written for them")


class MemoryHit(BaseModel):
    """One retrieved piece of history and the ids of the turns it comes from."""

    text: str
    score: float
    turn_ids: list[str] = Field(description="ids of the stored turns this hit comes from (cite these)")
    engine: str = Field(description="the retrieval engine that produced the hit")


class SearchResults(BaseModel):
    """The best hits for a query, best first."""

    hits: list[MemoryHit]
    engine: str = Field(description="the retrieval engine that answered the search")


class AnswerResult(BaseModel):
    """A short answer from memory and the turns it rests on."""

    answer: str
    cited_turn_ids: list[str] = Field(description="ids of the turns the answer rests on")
    dates: list[str] = Field(default_factory=list, description="absolute dates the cited turns show")


class DeletedTurn(BaseModel):
    """Confirmation that a turn and everything derived from it were deleted."""

    deleted: str = Field(description="the id of the deleted turn")


# ---------------------------------------------------------------------------------------------------- server
# What runs a tool call that waits on the language model (answer): the server's model lane, so that MCP answers
# share its bounds with /v1/answer (server/fairness.py); a refusal raises ToolError with its message.
ModelBound = Callable[[], AbstractAsyncContextManager[None]]


def build_server(
    memory: Memory, namespace: NamespaceSource, *, name: str = "cuemem", model_bound: ModelBound | None = None
) -> MCPServer:
    """An MCP server exposing `memory` through four tools, every call in `namespace`, the answers inside
    `model_bound()` when given.

    `namespace` is a fixed Namespace (from the server's configuration) or a callable returning the namespace of
    the current request (e.g. one reading a contextvar an ASGI middleware set from the request's API key). The
    callable runs on the event loop in the request's context; a CuememError, ValueError, LookupError or
    PermissionError it raises becomes a tool error with its message. Memory calls block, so each runs on a
    worker thread (`anyio.to_thread`).
    """

    def current() -> Namespace:
        try:
            resolved = namespace() if callable(namespace) else namespace
        except (CuememError, ValueError, LookupError, PermissionError) as exc:
            raise ToolError(f"no namespace for this request: {exc}") from exc
        if not isinstance(resolved, Namespace):
            raise TypeError(f"the namespace callable returned {type(resolved).__name__}, not a Namespace")
        return resolved

    async def call(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a blocking Memory call on a worker thread; a library error becomes a tool error with its message."""
        try:
            return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))
        except (CuememError, ValueError) as exc:
            raise ToolError(str(exc)) from exc

    async def add_memory(
        text: Annotated[str, Field(description="what to remember: one utterance, fact or note, as plain text")],
        speaker: Annotated[str, Field(description="who said it, e.g. 'user' or 'assistant' or a name")] = "user",
        session_id: Annotated[
            str | None, Field(description="the conversation or session it belongs to (default: 'default')")
        ] = None,
        timestamp: Annotated[
            str | None, Field(description="when it was said, any common date format, e.g. '3 March 2024'")
        ] = None,
        id: Annotated[
            str | None,
            Field(description="a turn id of your own; by default a stable id is derived, so a retry is a no-op"),
        ] = None,
    ) -> AddedTurns:
        """Store one turn (an utterance, fact or note) in long-term memory. Returns the id of the stored turn
        (under `added`), or under `skipped` when that turn was already stored."""
        ns = current()
        message: dict[str, Any] = {"text": text, "speaker": speaker}
        if id is not None:
            message["id"] = id
        result = await call(
            memory.add,
            message,
            user_id=ns.user_id,
            agent_id=ns.agent_id,
            run_id=ns.run_id,
            session_id=session_id,
            timestamp=timestamp,
        )
        return AddedTurns(added=result.added, skipped=result.skipped)

    async def search_memory(
        query: Annotated[str, Field(description="what to look for, e.g. a question or keywords")],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="how many hits to return")] = 5,
    ) -> SearchResults:
        """Search long-term memory. Returns the k most relevant pieces of history, best first, each with its
        score and the ids of the turns it comes from."""
        ns = current()
        retrieval = await call(memory.search, query, user_id=ns.user_id, agent_id=ns.agent_id, run_id=ns.run_id, k=k)
        hits = [
            MemoryHit(text=h.text, score=h.score, turn_ids=list(h.turn_ids), engine=h.engine or retrieval.engine)
            for h in retrieval.hits
        ]
        return SearchResults(hits=hits, engine=retrieval.engine)

    async def answer(
        question: Annotated[str, Field(description="the question to answer from memory")],
        k: Annotated[
            int | None, Field(ge=1, le=MAX_K, description="how many hits to read (default: the server's setting)")
        ] = None,
    ) -> AnswerResult:
        """Answer a question from long-term memory with a language model. Returns a short answer and the ids of
        the turns it cites (only turns it was shown); it says so when memory does not hold the answer."""
        ns = current()
        ask = partial(call, memory.answer, question, user_id=ns.user_id, agent_id=ns.agent_id, run_id=ns.run_id, k=k)
        if model_bound is None:
            result = await ask()
        else:
            async with model_bound():
                result = await ask()
        return AnswerResult(answer=result.text, cited_turn_ids=list(result.cited_turn_ids), dates=list(result.dates))

    async def delete_memory(
        turn_id: Annotated[str, Field(description="the id of the turn to delete (as add_memory or a hit gave it)")],
    ) -> DeletedTurn:
        """Delete one turn from long-term memory, with everything derived from it. Fails if there is no such
        turn."""
        ns = current()
        await call(memory.delete, turn_id, user_id=ns.user_id, agent_id=ns.agent_id, run_id=ns.run_id)
        return DeletedTurn(deleted=turn_id)

    with _keep_root_logging():
        server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=__version__)
    server.add_tool(
        add_memory,
        title="Add to memory",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    )
    server.add_tool(search_memory, title="Search memory", annotations=ToolAnnotations(read_only_hint=True))
    server.add_tool(answer, title="Answer from memory", annotations=ToolAnnotations(read_only_hint=True))
    server.add_tool(
        delete_memory,
        title="Delete from memory",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    return server


@contextlib.contextmanager
def _keep_root_logging() -> Iterator[None]:
    """MCPServer() calls logging.basicConfig (a rich handler on the root logger) when the root has none: inside a
    web server or a library caller that would change everyone's logging, so the root logger is put back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def streamable_http_app(
    memory: Memory,
    namespace: NamespaceSource,
    *,
    name: str = "cuemem",
    path: str = "/",
    host: str = "127.0.0.1",
    transport_security: TransportSecuritySettings | None = None,
    model_bound: ModelBound | None = None,
) -> Starlette:
    """The MCP server over streamable HTTP, as an ASGI (Starlette) app serving MCP at `path`.

    The namespace is resolved per request: the SDK hands each message to its handler in the context of the HTTP
    request that carried it, so a `namespace` callable reading a contextvar that an ASGI middleware set from the
    request's API key sees that request's key (tests/test_mcp.py checks it, keys changing mid-connection too).

    The app is stateless (the SDK's `stateless_http`: no MCP session is kept between HTTP requests) and answers
    in JSON: no per-session task to keep, expire or cap (a stateful manager refuses new sessions past its
    maximum), any worker can answer any request, and plain HTTP clients get plain JSON. The tools never call back
    to the client, which is all that stateless mode gives up.

    Lifespan: the SDK's session manager must be running while requests are served. Run standalone (uvicorn), the
    app's own lifespan does it; mounted in another app, sub-app lifespans are not run, so the host app's lifespan
    must enter the MCP app's (once: the session manager cannot be restarted, so build a new app per host app)::

        mcp_app = streamable_http_app(memory, current_namespace)   # path="/": MCP at the mount point

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with mcp_app.router.lifespan_context(mcp_app):
                yield

        app = FastAPI(lifespan=lifespan)
        app.mount("/mcp", mcp_app)        # endpoint http://host/mcp/ (a POST to /mcp is redirected there, 307)

    For an endpoint at exactly `/mcp` (no redirect), build it with `path="/mcp"` and add its route to the host
    app instead of mounting it: `app.router.routes.extend(mcp_app.routes)` (same lifespan). Middleware of the host
    app (API keys) applies either way.

    Transport security: for `host` 127.0.0.1/localhost/::1 the SDK enables DNS-rebinding protection, allowing only
    local Host/Origin headers; serving under another host name needs `host=` that name (no protection) or explicit
    `transport_security` settings.
    """
    server = build_server(memory, namespace, name=name, model_bound=model_bound)
    return server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        host=host,
        transport_security=transport_security,
    )


# ---------------------------------------------------------------------------------------------------- command line
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cuemem.server.mcp",
        description="Serve a cuemem store as an MCP server (tools add_memory, search_memory, answer, delete_memory)"
        " in one namespace.",
    )
    parser.add_argument("--db", help="the store: a file or a postgresql:// DSN (default: the configured store)")
    parser.add_argument("--user-id", required=True, help="the namespace's user id: every tool call works in it")
    parser.add_argument("--agent-id", help="the namespace's agent id")
    parser.add_argument("--run-id", help="the namespace's run id")
    parser.add_argument("--engine", help="the retrieval engine, e.g. bm25, hybrid (default: the configured one)")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP only; default: 127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="HTTP only; default: 8765")
    parser.add_argument("--path", default="/mcp", help="HTTP only: the MCP endpoint's path; default: /mcp")
    parser.add_argument("--log-level", default="WARNING", help="logging to stderr; default: WARNING")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve one namespace of a store over stdio (default) or streamable HTTP; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        namespace = Namespace(args.user_id, args.agent_id, args.run_id)
        with contextlib.redirect_stdout(sys.stderr):  # nothing but protocol may reach stdout
            memory = Memory(args.db, engine=args.engine)
    except (CuememError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.transport == "stdio":  # ends when the client closes stdin
            log.info("serving %s of %s over stdio", namespace, display_target(memory.settings.db))
            anyio.run(build_server(memory, namespace).run_stdio_async)
        else:
            _serve_http(memory, namespace, args)
    except KeyboardInterrupt:
        pass
    finally:
        memory.close()
    return 0


def _serve_http(memory: Memory, namespace: Namespace, args: argparse.Namespace) -> None:
    import uvicorn

    app = streamable_http_app(memory, namespace, path=args.path, host=args.host)
    log.info(
        "serving %s of %s at http://%s:%d%s",
        namespace,
        display_target(memory.settings.db),
        args.host,
        args.port,
        args.path,
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises it again for the handler it found: make that handler
    # end the call (so the store is closed and the exit status is 0) rather than kill the process.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main_thread else None
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower())
    except _Stopped:
        pass
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Stopped(Exception):
    """SIGTERM arrived while serving HTTP."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


if __name__ == "__main__":
    raise SystemExit(main())
