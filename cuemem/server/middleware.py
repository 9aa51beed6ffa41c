"""The server's ASGI middleware, written once: a base that lets what is not HTTP pass and answers a refusal in the one
error shape, and its two uses (issue 17; docs/design.md layout, `server/`): the body-size limit, fair sharing and
the request metrics around the whole app, and the API-key gate of the MCP endpoint at /mcp/.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from starlette.exceptions import HTTPException as StarletteHTTPException

from ..types import Namespace
from .deps import token_of
from .errors import INTERNAL, ApiError, error_response
from .state import ServerState

log = logging.getLogger("cuemem.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def text_headers(scope: Scope) -> dict[str, str]:
    """A request's headers as text, names lower-cased (what `token_of` reads)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}


class Middleware:
    """An ASGI middleware over the server's state: lifespan (anything not HTTP) passes through untouched; an HTTP
    request goes to `handle`, which may `refuse` it before the app sees it."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request (a subclass's own work)."""
        raise NotImplementedError

    @staticmethod
    async def refuse(scope: Scope, receive: Receive, send: Send, exc: ApiError) -> None:
        """Answer the request with the refusal, in the one error shape (`errors.error_response`)."""
        await error_response(exc.status, exc.kind, exc.message, exc.headers)(scope, receive, send)


class LimitsAndMetrics(Middleware):
    """Refuses bodies over the limit (413, before the route reads them), admits memory work to its lane (429/503
    at once past the key's share or the lane's bound: fairness.py) and counts every request by route."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request within its body limit, answer an unhandled error with a 500, count it either way."""
        limits = self.state.limits
        limit = limits.max_import_bytes if scope.get("path") == "/v1/import" else limits.max_body_bytes
        too_large = f"the request body is over the limit of {limit} bytes"
        start = time.perf_counter()
        status = {"code": 500, "started": False}
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            status["code"] = 413
            await self.refuse(scope, receive, send, ApiError(413, "too_large", too_large, {"Connection": "close"}))
            self._count(scope, 413, start)
            return
        seen = 0

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # a body streamed without Content-Length: stopped where it passes the limit
                    raise StarletteHTTPException(413, too_large)
            return message

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        try:
            async with AsyncExitStack() as stack:
                lane = self._lane(scope)
                if lane is not None:
                    try:
                        await stack.enter_async_context(lane[0].admitted(lane[1]))
                    except ApiError as exc:
                        status["code"] = exc.status
                        await self.refuse(scope, receive, send, exc)
                        return
                await self.app(scope, counted_receive, tracked_send)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not status["started"]:
                status["code"] = 500
                await self.refuse(scope, receive, send, ApiError(500, "internal", INTERNAL))
        finally:
            self._count(scope, int(status["code"]), start)

    def _lane(self, scope: Scope) -> tuple[Any, str] | None:
        """The lane of a request whose key is valid, and the key's share in it; None outside the lanes or without
        a valid key (the app refuses that one with a 401 at once)."""
        path = str(scope.get("path", ""))
        engine = None
        if path == "/v1/memories/search":
            engine = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("engine") or [None])[0]
        lane = self.state.lane_for(str(scope.get("method", "")), path, engine)
        if lane is None:
            return None
        key = self.state.keys.verify(token_of(text_headers(scope)))
        return (lane, "k:" + key.id) if key is not None else None

    def _count(self, scope: Scope, code: int, start: float) -> None:
        """Count the request and its latency by method, route template and status (never ids or text)."""
        route = scope.get("route")
        path = getattr(route, "path", None) or "unmatched"
        method = str(scope.get("method", ""))
        m = self.state.metrics
        m.inc("cuemem_requests_total", method=method, route=path, status=str(code))
        m.observe("cuemem_request_seconds", time.perf_counter() - start, route=path)


_MCP_NAMESPACE: contextvars.ContextVar[Namespace | None] = contextvars.ContextVar("cuemem_mcp_namespace", default=None)
_MCP_SHARE: contextvars.ContextVar[str] = contextvars.ContextVar("cuemem_mcp_share", default="")


@asynccontextmanager
async def mcp_model_lane(state: ServerState) -> AsyncIterator[None]:
    """An MCP tool call that waits on the model (answer) runs in the model lane as well, within its request's key's
    share there, as /v1/answer does; a refusal is a tool error saying why and when to retry."""
    from mcp.server.mcpserver.exceptions import ToolError

    async with AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(state.lanes["model"].admitted(_MCP_SHARE.get()))
        except ApiError as exc:
            raise ToolError(f"{exc.kind}: {exc.message}") from exc
        yield


def current_namespace() -> Namespace:
    """The namespace of the MCP request being served (set by `McpAuth` from its key)."""
    namespace = _MCP_NAMESPACE.get()
    if namespace is None:
        raise PermissionError("no API key: this MCP endpoint needs 'Authorization: Bearer cm_...'")
    return namespace


class McpAuth(Middleware):
    """The MCP endpoint's gate: the same keys as /v1; the key's own namespace is the tools' namespace."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit a user key (401 otherwise) and serve the MCP request in its namespace."""
        try:
            key = self.state.admit(token_of(text_headers(scope)))
            if key.admin or key.user_id is None:
                raise ApiError(401, "unauthorized", "the MCP endpoint needs a user API key, not an admin key")
        except ApiError as exc:
            await self.refuse(scope, receive, send, exc)
            return
        bound = _MCP_NAMESPACE.set(Namespace(key.user_id, key.agent_id))
        share = _MCP_SHARE.set("k:" + key.id)  # the key's share in the lanes (as `_lane` names it)
        try:
            await self.app(scope, receive, send)
        finally:
            _MCP_SHARE.reset(share)
            _MCP_NAMESPACE.reset(bound)
