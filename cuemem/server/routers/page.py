"""Public routes, no key needed: liveness (/healthz), Prometheus metrics (/metrics) and the memory browser page at /
with its script and style (issue 17; docs/design.md layout, `server/`)."""

import time
from importlib import resources
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from ... import __version__
from ..errors import ApiError
from ..state import ServerState

router = APIRouter()

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _asset(name: str) -> str:
    """A file of the page shipped in the package (page.html, page.js, page.css)."""
    return resources.files("cuemem.server").joinpath(name).read_text(encoding="utf-8")


def _state(request: Request) -> ServerState:
    """The server's shared state (`create_app` puts it on the app)."""
    state: ServerState = request.app.state.cuemem
    return state


# /healthz reads the store in threads of its own: it never waits behind memory work for the server's thread pool.
HEALTH_THREADS = anyio.CapacityLimiter(2)


@router.get("/healthz", tags=["server"])
async def healthz(request: Request) -> dict[str, Any]:
    """Liveness and readiness: the store answers a read."""
    state = _state(request)
    try:  # one indexed read: cheap at any size (counting namespaces' turns is not)
        await anyio.to_thread.run_sync(state.memory.store.epoch, 0, limiter=HEALTH_THREADS)
    except Exception as exc:  # the store is the one thing the server cannot go on without
        raise ApiError(503, "store_unavailable", f"the store does not answer: {exc}") from exc
    body: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "engine": state.memory.engine.name,
        "uptime_s": round(time.time() - state.started, 1),
    }
    background = state.memory.background
    if background is not None:  # indexing off the request path: its backlog, and a stopped worker is not ready
        health = await anyio.to_thread.run_sync(background.health, limiter=HEALTH_THREADS)
        if health.problem:
            raise ApiError(503, "indexer_stopped", health.problem)
        body["indexing"] = {
            "backlog_turns": health.backlog_turns,
            "queued_namespaces": health.queued_namespaces,
            "failures": health.failures,
            "last_error": health.last_error,
        }
    return body


@router.get("/metrics", tags=["server"], response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text: requests, latency histograms, errors, model calls, chat agent turns."""
    text = await anyio.to_thread.run_sync(_state(request).scrape, limiter=HEALTH_THREADS)  # it may read the store
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/", tags=["page"], response_class=HTMLResponse, include_in_schema=False)
def page() -> HTMLResponse:
    """The memory browser page (static; it reads memory through /v1 with the key typed into it)."""
    return HTMLResponse(_asset("page.html"), headers=PAGE_HEADERS)


@router.get("/page.js", include_in_schema=False)
def page_js() -> Response:
    """The page's script."""
    return Response(_asset("page.js"), media_type="text/javascript", headers=PAGE_HEADERS)


@router.get("/page.css", include_in_schema=False)
def page_css() -> Response:
    """The page's style sheet."""
    return Response(_asset("page.css"), media_type="text/css", headers=PAGE_HEADERS)
