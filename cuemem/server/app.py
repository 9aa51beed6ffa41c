"""`cuemem serve`: the versioned REST API over one `Memory` (issue 17; docs/design.md layout, `server/`).

Every route is a thin layer over a library call, so a bad request gets the library's own message, as JSON:
`{"error": "<kind>", "message": "..."}` with a 4xx status (never a 500 for bad input). Each request is
authenticated by an API key bound to a namespace prefix (`keys.py`); whatever ids a request names, it reaches only
that prefix (403 otherwise). Library calls run in the server's thread pool, off the event loop: reads run side by
side, writes are serialised per namespace.
"""

import contextvars
import json
import logging
import math
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..errors import (
    CuememError,
    EmbeddingError,
    ImportFormatError,
    InvalidTurnError,
    StoreError,
    TurnNotFoundError,
    UnknownEngineError,
    UnknownNamespaceError,
)
from ..llm.base import LLMError
from ..memory import Memory
from ..types import Namespace
from .keys import ApiKey, Forbidden, KeyRing
from .limits import Limits, RateLimiter
from .metrics import Registry

log = logging.getLogger("cuemem.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ApiError(Exception):
    """A request refused with a status, a short kind and a message (rendered as the JSON error body)."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


def status_of(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and error kind a library error maps to: the caller's mistakes are 4xx, an unavailable
    model, embedder or store 503."""
    table: list[tuple[type[BaseException], int, str]] = [
        (Forbidden, 403, "forbidden"),
        (InvalidTurnError, 422, "invalid_turn"),
        (ImportFormatError, 422, "invalid_import"),
        (UnknownNamespaceError, 404, "unknown_namespace"),
        (TurnNotFoundError, 404, "not_found"),
        (UnknownEngineError, 400, "unknown_engine"),
        (LLMError, 503, "model_unavailable"),
        (EmbeddingError, 503, "embedder_unavailable"),
        (StoreError, 503, "store_unavailable"),
        (CuememError, 400, "bad_request"),
        (ValueError, 400, "bad_request"),
    ]
    for kind, status, name in table:
        if isinstance(exc, kind):
            return status, name
    return 500, "internal"


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message}, status_code=status, headers=headers)


# ---------------------------------------------------------------------- request and response models
class NamespaceIn(BaseModel):
    """The ids a request names; the key's own prefix fills in whatever is left out."""

    model_config = ConfigDict(extra="forbid")
    user_id: str | None = Field(None, description="Defaults to the key's user; any other user is refused (403).")
    agent_id: str | None = Field(None, description="Defaults to the key's agent, if it is bound to one.")
    run_id: str | None = None


class MessageIn(BaseModel):
    """One turn to store: `text` (or `content`), `speaker` (or `role`), optional id, session, timestamp, metadata."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    content: str | None = None
    speaker: str | None = None
    role: str | None = None
    id: str | None = None
    session_id: str | None = None
    timestamp: str | None = None
    metadata: dict[str, Any] | None = None


class AddRequest(NamespaceIn):
    messages: list[MessageIn | str] = Field(..., min_length=1, description="Turns to store, oldest first.")
    session_id: str | None = Field(None, description="Session for messages that name none (default 'default').")
    timestamp: str | None = Field(None, description="Timestamp for messages that give none.")
    on_error: Literal["raise", "skip"] = Field(
        "raise", description="raise: any invalid message refuses the whole request; skip: store the valid ones."
    )


class Rejection(BaseModel):
    index: int
    reason: str


class AddResponse(BaseModel):
    added: list[str]
    skipped: list[str]
    rejected: list[Rejection]
    namespace: dict[str, str | None]


class HitOut(BaseModel):
    text: str
    score: float
    turn_ids: list[str]
    tokens: int
    engine: str
    detail: dict[str, Any]


class SearchResponse(BaseModel):
    query: str
    engine: str
    namespace: dict[str, str | None]
    seconds: float
    budget_tokens: int | None
    tokens: int
    hits: list[HitOut]


class AnswerRequest(NamespaceIn):
    question: str = Field(..., min_length=1)
    k: int | None = Field(None, ge=1)
    budget_tokens: int | None = Field(None, ge=1)
    engine: str | None = None
    now: str | None = Field(None, description="When the question is asked (any common date format).")


class AnswerResponse(BaseModel):
    text: str
    cited_turn_ids: list[str]
    notes: list[str]
    hits: list[HitOut]


class TurnOut(BaseModel):
    id: str
    text: str
    speaker: str
    session_id: str
    timestamp: str | None
    metadata: dict[str, Any]
    namespace: dict[str, str | None] | None


class SessionOut(BaseModel):
    session_id: str
    turns: int
    first_timestamp: str | None
    last_timestamp: str | None


class ChatRequest(NamespaceIn):
    message: str = Field(..., min_length=1)
    session_id: str | None = Field(None, description="The conversation; its agent keeps the recent turns.")
    now: str | None = None
    memory: bool = Field(True, description="false: the agent neither searches nor stores memory this turn.")


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str | None = None
    agent_id: str | None = None
    admin: bool = False
    label: str = Field("", max_length=200)


class ImportResponse(BaseModel):
    added: int
    skipped: int
    errors: list[dict[str, Any]]


def _turn_out(turn: Any) -> dict[str, Any]:
    data = turn.as_dict()
    data.pop("seq", None)
    return data


# ---------------------------------------------------------------------- the server's state
@dataclass
class ServerState:
    """What one server process shares between requests: the memory, its keys, limits, metrics and agents."""

    memory: Memory
    keys: KeyRing
    limits: Limits = field(default_factory=Limits)
    metrics: Registry = field(default_factory=Registry)
    started: float = field(default_factory=time.time)
    files_root: Any = None  # the folder the chat agent's file search may read (None: no file search)
    agent_policy: str = "guided"  # the chat agent's tool choice (cuemem.agent.loop.POLICIES)
    _write_locks: list[threading.Lock] = field(default_factory=lambda: [threading.Lock() for _ in range(64)])
    _agents: OrderedDict[tuple[Namespace, str, bool], tuple[Any, threading.Lock]] = field(default_factory=OrderedDict)
    _agents_lock: threading.Lock = field(default_factory=threading.Lock)
    agent_metrics: Any = None

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(self.limits.rate, self.limits.burst)
        m = self.metrics
        m.describe("cuemem_requests_total", "counter", "HTTP requests by method, route and status.")
        m.describe("cuemem_request_seconds", "histogram", "HTTP request latency by route.")
        m.describe("cuemem_errors_total", "counter", "Requests answered with an error, by kind.")
        m.describe("cuemem_auth_failures_total", "counter", "Requests refused for a missing or wrong key.")
        m.describe("cuemem_rate_limited_total", "counter", "Requests refused by the per-key rate limit.")

    def write_lock(self, namespace: Namespace) -> threading.Lock:
        """The lock serialising writes to a namespace (striped: a bounded set of locks, however many users)."""
        return self._write_locks[hash(namespace) % len(self._write_locks)]

    def agent(self, namespace: Namespace, session_id: str, memory_enabled: bool) -> tuple[Any, threading.Lock]:
        """The chat agent of a conversation and its lock (an agent is one conversation: one turn at a time), kept
        for its recent turns; the 256 most recent conversations are kept."""
        from ..agent import Agent, AgentMetrics  # the agent loads only where chat is used

        key = (namespace, session_id, memory_enabled)
        with self._agents_lock:
            if self.agent_metrics is None:
                self.agent_metrics = AgentMetrics()
            entry = self._agents.pop(key, None)
            if entry is None:
                agent = Agent(
                    self.memory,
                    user_id=namespace.user_id,
                    agent_id=namespace.agent_id,
                    run_id=namespace.run_id,
                    memory_enabled=memory_enabled,
                    session_id=session_id,
                    files_root=self.files_root,
                    metrics=self.agent_metrics,
                    policy=self.agent_policy,
                )
                entry = (agent, threading.Lock())
            self._agents[key] = entry
            while len(self._agents) > 256:
                self._agents.popitem(last=False)
        return entry

    def forget_agents(self, namespace: Namespace) -> None:
        """Drop a namespace's chat agents (their recent turns), after any delete there (`Memory.on_forget`)."""
        with self._agents_lock:
            for key in [key for key in self._agents if key[0] == namespace]:
                del self._agents[key]

    def admit(self, token: str | None) -> ApiKey:
        """The key a request carries, checked (401 when missing or not valid) and charged to its rate (429)."""
        if not token:
            self.metrics.inc("cuemem_auth_failures_total", reason="missing")
            raise ApiError(
                401,
                "unauthorized",
                "an API key is required: send 'Authorization: Bearer cm_...'",
                {"WWW-Authenticate": "Bearer"},
            )
        key = self.keys.verify(token)
        if key is None:
            self.metrics.inc("cuemem_auth_failures_total", reason="invalid")
            raise ApiError(
                401,
                "unauthorized",
                "the API key is not valid (unknown, revoked or mistyped)",
                {"WWW-Authenticate": "Bearer"},
            )
        wait = self.limiter.take(key.id)
        if wait > 0:
            self.metrics.inc("cuemem_rate_limited_total")
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests for this key: retry in {wait:.2f} s",
                {"Retry-After": RateLimiter.retry_after(wait)},
            )
        return key

    def scrape(self) -> str:
        """The /metrics text: the request counters plus model calls and agent turns read now."""
        extra: list[tuple[str, str, str, dict[str, str], float]] = []
        client = self.memory._llm
        stages = sorted(client.stats().items()) if client is not None else []  # one snapshot for every series
        model_series = [  # (name, help, the stage's field, extra labels); series grouped by name, as the format wants
            ("cuemem_model_calls_total", "Model calls by stage.", "calls", {}),
            ("cuemem_model_cached_calls_total", "Model calls answered from the cache.", "cached", {}),
            ("cuemem_model_tokens_total", "Model tokens by stage and kind.", "prompt_tokens", {"kind": "prompt"}),
            (
                "cuemem_model_tokens_total",
                "Model tokens by stage and kind.",
                "completion_tokens",
                {"kind": "completion"},
            ),
            ("cuemem_model_seconds_total", "Seconds spent in model calls.", "seconds", {}),
        ]
        for name, text, column, labels in model_series:
            for stage, stats in stages:
                extra.append((name, "counter", text, {"stage": stage, **labels}, stats[column]))
        if self.agent_metrics is not None:
            extra.extend(_agent_series(self.agent_metrics.snapshot()))
        extra.append(
            ("cuemem_uptime_seconds", "gauge", "Seconds since the server started.", {}, time.time() - self.started)
        )
        return self.metrics.render(extra)


def _agent_series(snapshot: dict[str, Any]) -> list[tuple[str, str, str, dict[str, str], float]]:
    """Prometheus counters from the chat agent's metrics (`AgentMetrics.snapshot`): turns, degraded turns, memory
    hits, latency, tokens and model calls, and tool calls by tool and outcome."""
    series: list[tuple[str, str, str, dict[str, str], float]] = []
    for name, value in sorted(snapshot.items()):
        if isinstance(value, int | float) and not isinstance(value, bool):
            metric = f"cuemem_agent_{name}" if name.endswith("_total") else f"cuemem_agent_{name}_total"
            series.append((metric, "counter", f"Chat agent: {name.replace('_', ' ')}.", {}, float(value)))
    for tool, outcomes in sorted((snapshot.get("tool_calls") or {}).items()):
        for outcome, count in sorted(outcomes.items()):
            series.append(
                (
                    "cuemem_agent_tool_calls_total",
                    "counter",
                    "Chat agent tool calls by tool and outcome.",
                    {"tool": str(tool), "outcome": str(outcome)},
                    float(count),
                )
            )
    return series


# ---------------------------------------------------------------------- ASGI middleware: size limit and metrics
class LimitsAndMetrics:
    """Refuses bodies over the limit (413, before the route reads them) and counts every request by route."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.state.limits
        limit = limits.max_import_bytes if scope.get("path") == "/v1/import" else limits.max_body_bytes
        start = time.perf_counter()
        status = {"code": 500, "started": False}
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, status, limit)
            self._count(scope, status["code"], start)
            return
        seen = 0

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # a body streamed without Content-Length: stopped where it passes the limit
                    raise StarletteHTTPException(413, f"the request body is over the limit of {limit} bytes")
            return message

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not status["started"]:
                response = _error(500, "internal", "internal error: the server's log has the details")
                status["code"] = 500
                await response(scope, receive, send)
        finally:
            self._count(scope, status["code"], start)

    @staticmethod
    async def _refuse(send: Send, status: dict[str, Any], limit: int) -> None:
        body = json.dumps({"error": "too_large", "message": f"the request body is over the limit of {limit} bytes"})
        status["code"] = 413
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})

    def _count(self, scope: Scope, code: int, start: float) -> None:
        route = scope.get("route")
        path = getattr(route, "path", None) or "unmatched"
        method = str(scope.get("method", ""))
        m = self.state.metrics
        m.inc("cuemem_requests_total", method=method, route=path, status=str(code))
        m.observe("cuemem_request_seconds", time.perf_counter() - start, route=path)


# ---------------------------------------------------------------------- the app
def create_app(
    memory: Memory,
    keys: KeyRing,
    limits: Limits | None = None,
    *,
    files_root: Any = None,
    mcp: bool = True,
    host: str = "127.0.0.1",
    agent_policy: str = "guided",
) -> FastAPI:
    """The FastAPI app serving `memory`: REST under /v1, /healthz, /metrics, the browser page at /, and the MCP
    server (streamable HTTP) at /mcp/ when the `mcp` SDK is installed. `host`, the address served, sets the MCP
    endpoint's DNS-rebinding protection (loopback: only local Host/Origin headers)."""
    from ..agent.loop import POLICIES

    if agent_policy not in POLICIES:
        raise ValueError(f"unknown agent policy {agent_policy!r}: choose {', '.join(POLICIES)}")
    state = ServerState(
        memory=memory, keys=keys, limits=limits or Limits(), files_root=files_root, agent_policy=agent_policy
    )
    mcp_app, mcp_lifespan = _mcp_parts(state, host) if mcp else (None, None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_lifespan is not None:
            async with mcp_lifespan():
                yield
        else:
            yield

    app = FastAPI(
        title="cuemem",
        version=__version__,
        description="Long-term memory for LLM agents. Every /v1 route needs an API key (`Authorization: Bearer "
        "cm_...` or `X-API-Key`), bound to a namespace prefix: requests outside it are refused with 403.",
        lifespan=lifespan,
    )
    app.state.cuemem = state
    memory.on_forget(state.forget_agents)  # any delete, whichever way it comes (REST, MCP), forgets the agents
    limits = state.limits

    # ------------------------------------------------------------------ errors: always JSON, always the message
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        state.metrics.inc("cuemem_errors_total", kind=exc.kind)
        return _error(exc.status, exc.kind, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        state.metrics.inc("cuemem_errors_total", kind="invalid_request")
        problems = []
        for err in exc.errors()[:10]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            if err.get("type") == "json_invalid":
                problems.append(f"the body is not valid JSON ({err.get('ctx', {}).get('error', 'decode error')})")
            elif where == "body" and err.get("type") in ("model_attributes_type", "dict_type"):
                problems.append("the body must be a JSON object, sent with 'Content-Type: application/json'")
            else:
                problems.append(f"{where}: {err.get('msg', 'invalid')}")
        return _error(422, "invalid_request", "; ".join(problems) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        kind = kinds.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if message.startswith("There was an error parsing the body"):
            message = "the body is not valid JSON: it could not be decoded (JSON must be UTF-8)"
        return _error(exc.status_code, kind, message)

    async def _library(_: Request, exc: Exception) -> JSONResponse:
        status, kind = status_of(exc)
        state.metrics.inc("cuemem_errors_total", kind=kind)
        if status >= 500:
            log.error("%s: %s", kind, exc, exc_info=status == 500)
        message = str(exc) if status < 500 or kind != "internal" else "internal error: the server's log has the details"
        return _error(status, kind, message)

    for library_error in (CuememError, ValueError, Forbidden):  # anything else is a bug: 500, logged
        app.add_exception_handler(library_error, _library)

    # ------------------------------------------------------------------ auth and rate limit
    def authenticated(request: Request) -> ApiKey:
        return state.admit(token_of(request.headers))

    Key = Annotated[ApiKey, Depends(authenticated)]

    def admin(key: Key) -> ApiKey:
        if not key.admin:
            raise ApiError(403, "forbidden", "key management needs an admin key (cuemem keys create --admin)")
        return key

    def scope(key: ApiKey, user_id: str | None, agent_id: str | None, run_id: str | None) -> Namespace:
        try:
            return key.scope(user_id, agent_id, run_id)
        except Forbidden as exc:
            raise ApiError(403, "forbidden", str(exc)) from exc

    def bounded_k(k: int | None) -> int | None:
        if k is not None and not 1 <= k <= limits.max_k:
            raise ApiError(422, "invalid_request", f"k must be between 1 and {limits.max_k}, got {k}")
        return k

    def bounded_budget(budget: int | None) -> int | None:
        if budget is not None and not 1 <= budget <= limits.max_budget_tokens:
            raise ApiError(
                422, "invalid_request", f"budget_tokens must be between 1 and {limits.max_budget_tokens}, got {budget}"
            )
        return budget

    def bounded_text(text: str, name: str) -> str:
        if not text.strip():
            raise ApiError(422, "invalid_request", f"{name} must be a non-empty string")
        if len(text) > limits.max_query_chars:
            raise ApiError(
                422, "invalid_request", f"{name} is {len(text)} characters; the limit is {limits.max_query_chars}"
            )
        return text

    def ids(namespace: Namespace) -> dict[str, Any]:
        return namespace.as_dict()

    # ------------------------------------------------------------------ public: health, metrics, the page
    @app.get("/healthz", tags=["server"])
    def healthz() -> dict[str, Any]:
        """Liveness and readiness: the store answers a read."""
        try:
            memory.store.epoch(0)  # one indexed read: cheap at any size (counting namespaces' turns is not)
        except Exception as exc:  # the store is the one thing the server cannot go on without
            raise ApiError(503, "store_unavailable", f"the store does not answer: {exc}") from exc
        return {
            "status": "ok",
            "version": __version__,
            "engine": memory.engine.name,
            "uptime_s": round(time.time() - state.started, 1),
        }

    @app.get("/metrics", tags=["server"], response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Prometheus text: requests, latency histograms, errors, model calls, chat agent turns."""
        return PlainTextResponse(state.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8")

    page_headers = {
        "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }

    @app.get("/", tags=["page"], response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        """The memory browser page (static; it reads memory through /v1 with the key typed into it)."""
        return HTMLResponse(_asset("page.html"), headers=page_headers)

    @app.get("/page.js", include_in_schema=False)
    def page_js() -> Response:
        return Response(_asset("page.js"), media_type="text/javascript", headers=page_headers)

    @app.get("/page.css", include_in_schema=False)
    def page_css() -> Response:
        return Response(_asset("page.css"), media_type="text/css", headers=page_headers)

    # ------------------------------------------------------------------ memory
    @app.get("/v1/whoami", tags=["keys"])
    def whoami(key: Key) -> dict[str, Any]:
        """The key's id and the namespace prefix it is bound to."""
        return key.as_dict()

    @app.post("/v1/memories", tags=["memories"], response_model=AddResponse)
    def add_memories(body: AddRequest, key: Key) -> dict[str, Any]:
        """Store turns in the namespace and index them. The turns are in the durable log when this returns."""
        namespace = scope(key, body.user_id, body.agent_id, body.run_id)
        if len(body.messages) > limits.max_turns:
            too_many = f"{len(body.messages)} messages in one request; the limit is {limits.max_turns}"
            raise ApiError(422, "invalid_request", too_many)
        messages = [m if isinstance(m, str) else m.model_dump(exclude_none=True) for m in body.messages]
        with state.write_lock(namespace):
            result = memory.add(
                messages, **ids(namespace), session_id=body.session_id, timestamp=body.timestamp, on_error=body.on_error
            )
        return {
            "added": result.added,
            "skipped": result.skipped,
            "namespace": ids(namespace),
            "rejected": [{"index": i, "reason": why} for i, why in result.rejected],
        }

    @app.get("/v1/memories/search", tags=["memories"], response_model=SearchResponse)
    def search_memories(
        key: Key,
        q: Annotated[str, Query(description="The query.")],
        k: int | None = None,
        budget_tokens: int | None = None,
        engine: str | None = None,
        now: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """The k best hits for the query, with scores, engine labels and the turn ids they rest on."""
        namespace = scope(key, user_id, agent_id, run_id)
        retrieval = memory.search(
            bounded_text(q, "q"),
            **ids(namespace),
            k=bounded_k(k),
            budget_tokens=bounded_budget(budget_tokens),
            engine=engine,
            now=now,
        )
        return _jsonable(retrieval.as_dict())

    @app.get("/v1/memories", tags=["memories"], response_model=list[TurnOut])
    def list_memories(
        key: Key,
        session_id: str | None = None,
        limit: Annotated[int, Query(ge=1, le=5000)] = 500,
        offset: Annotated[int, Query(ge=0)] = 0,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The namespace's turns in log order (one session's with session_id), a page at a time."""
        namespace = scope(key, user_id, agent_id, run_id)
        turns = memory.turns(**ids(namespace), session_id=session_id)
        return [_turn_out(t) for t in turns[offset : offset + limit]]

    @app.get("/v1/sessions", tags=["memories"], response_model=list[SessionOut])
    def list_sessions(
        key: Key, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The namespace's sessions in the order they began, with their turn counts and first/last timestamps."""
        namespace = scope(key, user_id, agent_id, run_id)
        sessions: dict[str, dict[str, Any]] = {}
        for turn in memory.turns(**ids(namespace)):
            entry = sessions.setdefault(
                turn.session_id,
                {
                    "session_id": turn.session_id,
                    "turns": 0,
                    "first_timestamp": turn.timestamp,
                    "last_timestamp": turn.timestamp,
                },
            )
            entry["turns"] += 1
            if turn.timestamp:
                entry["first_timestamp"] = entry["first_timestamp"] or turn.timestamp
                entry["last_timestamp"] = turn.timestamp
        return list(sessions.values())

    @app.get("/v1/memories/{turn_id:path}", tags=["memories"], response_model=TurnOut)
    def get_memory(
        turn_id: str, key: Key, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """One turn by id."""
        namespace = scope(key, user_id, agent_id, run_id)
        return _turn_out(memory.get(turn_id, **ids(namespace)))

    @app.delete("/v1/memories/{turn_id:path}", tags=["memories"])
    def delete_memory(
        turn_id: str, key: Key, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Delete one turn and everything derived from it."""
        namespace = scope(key, user_id, agent_id, run_id)
        with state.write_lock(namespace):
            memory.delete(turn_id, **ids(namespace))
        return {"deleted": [turn_id], "namespace": ids(namespace)}

    @app.delete("/v1/sessions/{session_id:path}", tags=["memories"])
    def delete_session(
        session_id: str, key: Key, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Delete a session's turns and everything derived from them."""
        namespace = scope(key, user_id, agent_id, run_id)
        with state.write_lock(namespace):
            count = memory.delete_session(session_id, **ids(namespace))
        if count == 0:
            raise ApiError(404, "not_found", f"no session {session_id!r} in ({namespace})")
        return {"deleted_turns": count, "session_id": session_id, "namespace": ids(namespace)}

    @app.delete("/v1/users/{user_id:path}", tags=["memories"])
    def delete_user(user_id: str, key: Key, agent_id: str | None = None, run_id: str | None = None) -> dict[str, Any]:
        """Delete a user's memory: every agent and run under the namespace named (only within the key's prefix)."""
        namespace = scope(key, user_id, agent_id, run_id)
        with state.write_lock(namespace):
            deleted = memory.delete_all(**ids(namespace))
        return {"deleted": [{"namespace": ns.as_dict(), "turns": n} for ns, n in deleted]}

    @app.post("/v1/answer", tags=["memories"], response_model=AnswerResponse)
    def answer(body: AnswerRequest, key: Key) -> dict[str, Any]:
        """Search, then have the model answer from the hits; the answer cites only turns it was shown."""
        namespace = scope(key, body.user_id, body.agent_id, body.run_id)
        result = memory.answer(
            bounded_text(body.question, "question"),
            **ids(namespace),
            k=bounded_k(body.k),
            budget_tokens=bounded_budget(body.budget_tokens),
            engine=body.engine,
            now=body.now,
        )
        hits = result.retrieval.as_dict()["hits"] if result.retrieval is not None else []
        return _jsonable(
            {"text": result.text, "cited_turn_ids": result.cited_turn_ids, "notes": result.notes, "hits": hits}
        )

    @app.get("/v1/history", tags=["memories"])
    def history(
        key: Key,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The namespace's recent operations (adds, deletes, reindexes), newest first."""
        namespace = scope(key, user_id, agent_id, run_id)
        return _jsonable(memory.history(**ids(namespace), limit=limit))

    @app.get("/v1/export", tags=["memories"])
    def export(
        key: Key, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> StreamingResponse:
        """The namespace's raw log as JSONL (one turn a line), streamed; `POST /v1/import` reads it back."""
        namespace = scope(key, user_id, agent_id, run_id)
        spool = tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+", encoding="utf-8")  # noqa: SIM115
        try:
            memory.export(spool, **ids(namespace))  # one consistent read, before any byte goes out
        except BaseException:
            spool.close()
            raise
        spool.seek(0)

        def chunks() -> Iterator[bytes]:
            try:
                while block := spool.read(64 * 1024):
                    yield block.encode("utf-8")
            finally:
                spool.close()

        disposition = {"Content-Disposition": 'attachment; filename="cuemem-export.jsonl"'}
        return StreamingResponse(chunks(), media_type="application/x-ndjson", headers=disposition)

    @app.post("/v1/import", tags=["memories"], response_model=ImportResponse)
    async def import_(request: Request, key: Key) -> dict[str, Any]:
        """Add turns from a JSONL body (the export format) into the key's namespace; bad lines are reported by
        number and every good one kept. Query parameters user_id/agent_id/run_id name the target namespace."""
        params = request.query_params
        unknown = set(params) - {"user_id", "agent_id", "run_id"}
        if unknown:
            raise ApiError(422, "invalid_request", f"unknown query parameters: {', '.join(sorted(unknown))}")
        namespace = scope(key, params.get("user_id"), params.get("agent_id"), params.get("run_id"))
        body = await request.body()  # bounded by the middleware (max_import_bytes)
        lines = body.splitlines()

        def run() -> Any:
            with state.write_lock(namespace):
                return memory.import_(lines, **ids(namespace))

        from starlette.concurrency import run_in_threadpool

        report = await run_in_threadpool(run)
        return {
            "added": report.added,
            "skipped": report.skipped,
            "errors": [{"line": where, "reason": why} for where, why in report.errors[:1000]],
        }

    @app.post("/v1/chat", tags=["agent"])
    def chat(body: ChatRequest, key: Key) -> dict[str, Any]:
        """One turn with the memory agent: it may search, store and recall memory and use its tools; when a tool
        or memory fails the turn goes on without it and says so. Returns the reply, the steps and the metrics."""
        namespace = scope(key, body.user_id, body.agent_id, body.run_id)
        message = bounded_text(body.message, "message")
        agent, lock = state.agent(namespace, body.session_id or "chat", body.memory)
        with lock:
            turn = agent.turn(message, now=body.now)
        return _jsonable(turn.as_dict())

    # ------------------------------------------------------------------ key management (admin keys only)
    Admin = Annotated[ApiKey, Depends(admin)]

    @app.post("/v1/keys", tags=["keys"], status_code=201)
    def create_key(body: KeyRequest, _: Admin) -> dict[str, Any]:
        """Create a key; its token is in this response only (it is stored hashed)."""
        created, token = keys.create(user_id=body.user_id, agent_id=body.agent_id, admin=body.admin, label=body.label)
        return {**created.as_dict(), "key": token}

    @app.get("/v1/keys", tags=["keys"])
    def list_keys(_: Admin) -> list[dict[str, Any]]:
        """Every live key (ids and bindings; never secrets)."""
        return [k.as_dict() for k in keys.live()]

    @app.delete("/v1/keys/{key_id}", tags=["keys"])
    def revoke_key(key_id: str, _: Admin) -> dict[str, Any]:
        """Revoke a key at once."""
        if not keys.revoke(key_id):
            raise ApiError(404, "not_found", f"no live key {key_id!r}")
        return {"revoked": key_id}

    if mcp_app is not None:
        app.mount("/mcp", _McpAuth(mcp_app, state))

    app.add_middleware(LimitsAndMetrics, state=state)
    return app


def _jsonable(data: Any) -> Any:
    """Data as JSON has it: numpy numbers become plain ones, non-finite floats null, tuples and sets lists."""
    if isinstance(data, dict):
        return {str(k): _jsonable(v) for k, v in data.items()}
    if isinstance(data, list | tuple | set | frozenset):
        return [_jsonable(v) for v in data]
    if isinstance(data, bool | int | str) or data is None:
        return data
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if hasattr(data, "item"):
        return _jsonable(data.item())
    if hasattr(data, "as_dict"):
        return _jsonable(data.as_dict())
    return str(data)


def _asset(name: str) -> str:
    return resources.files("cuemem.server").joinpath(name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------- MCP over streamable HTTP, behind the keys
def _mcp_parts(state: ServerState, host: str) -> tuple[Any, Any]:
    """The MCP app (stateless streamable HTTP, `server/mcp.py`) and its lifespan; (None, None) without the SDK."""
    try:
        from .mcp import streamable_http_app
    except ImportError:
        return None, None
    mcp_app = streamable_http_app(state.memory, current_namespace, host=host)
    return mcp_app, lambda: mcp_app.router.lifespan_context(mcp_app)


_MCP_NAMESPACE: contextvars.ContextVar[Namespace | None] = contextvars.ContextVar("cuemem_mcp_namespace", default=None)


def current_namespace() -> Namespace:
    """The namespace of the MCP request being served (set by `_McpAuth` from its key)."""
    namespace = _MCP_NAMESPACE.get()
    if namespace is None:
        raise PermissionError("no API key: this MCP endpoint needs 'Authorization: Bearer cm_...'")
    return namespace


def token_of(headers: Mapping[str, str]) -> str | None:
    """The API key a request carries (lower-cased header names): `X-API-Key`, else `Authorization: Bearer`."""
    token = headers.get("x-api-key")
    auth = headers.get("authorization", "")
    if token is None and auth[:7].lower() == "bearer ":
        token = auth[7:].strip()
    return token or None


class _McpAuth:
    """The MCP endpoint's gate: the same keys as /v1; the key's own namespace is the tools' namespace."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        try:
            key = self.state.admit(token_of(headers))
            if key.admin or key.user_id is None:
                raise ApiError(401, "unauthorized", "the MCP endpoint needs a user API key, not an admin key")
        except ApiError as exc:
            await _error(exc.status, exc.kind, exc.message, exc.headers)(scope, receive, send)
            return
        bound = _MCP_NAMESPACE.set(Namespace(key.user_id, key.agent_id))
        try:
            await self.app(scope, receive, send)
        finally:
            _MCP_NAMESPACE.reset(bound)
