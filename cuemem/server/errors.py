"""The server's one error shape, `{"error": "<kind>", "message": "..."}` with a 4xx or 5xx status, and the exception
handlers that answer every failure in it (issue 17; docs/design.md layout, `server/`).

A bad request gets the library's own message (never a 500 for bad input); an unavailable model, embedder or store
is a 503; anything else is a bug: a 500 whose details go to the server's log, not to the client.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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
from ..formats import json_reason
from ..llm.base import LLMError
from ..types import IdTooLongError
from .keys import Forbidden

log = logging.getLogger("cuemem.server")

INTERNAL = "internal error: the server's log has the details"


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
        (IdTooLongError, 422, "invalid_id"),
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


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error shape: `{"error": kind, "message": message}` with the status (and any headers)."""
    return JSONResponse({"error": kind, "message": message}, status_code=status, headers=headers)


def _count(request: Request, kind: str) -> None:
    """Count an error answered by kind (`cuemem_errors_total`)."""
    request.app.state.cuemem.metrics.inc("cuemem_errors_total", kind=kind)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    """A refusal raised by a route or a dependency, as it was raised."""
    assert isinstance(exc, ApiError)
    _count(request, exc.kind)
    return error_response(exc.status, exc.kind, exc.message, exc.headers)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """A request that fails validation: 422 with at most ten problems, each naming where it is."""
    assert isinstance(exc, RequestValidationError)
    _count(request, "invalid_request")
    problems = []
    for err in exc.errors()[:10]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        if err.get("type") == "json_invalid":
            problems.append(f"the body is not valid JSON ({err.get('ctx', {}).get('error', 'decode error')})")
        elif where == "body" and err.get("type") in ("model_attributes_type", "dict_type"):
            problems.append("the body must be a JSON object, sent with 'Content-Type: application/json'")
        else:
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return error_response(422, "invalid_request", "; ".join(problems) or "invalid request")


async def _http(_: Request, exc: Exception) -> JSONResponse:
    """Starlette's own refusals (unknown path, wrong method, undecodable body) in the one shape."""
    assert isinstance(exc, StarletteHTTPException)
    kinds = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    kind = kinds.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if message.startswith("There was an error parsing the body"):
        message = f"the body is not valid JSON: {json_problem(exc.__cause__)}"
    return error_response(exc.status_code, kind, message)


def json_problem(cause: BaseException | None) -> str:
    """What made a body unreadable as JSON, in words (FastAPI keeps the parser's error as the cause)."""
    if isinstance(cause, RecursionError):
        return "it is nested too deeply (arrays and objects at most about 1,000 levels deep)"
    if isinstance(cause, UnicodeDecodeError) or cause is None:
        return "it could not be decoded (JSON must be UTF-8)"
    if isinstance(cause, ValueError):
        return json_reason(cause)
    return f"it could not be decoded ({type(cause).__name__})"


async def _library(request: Request, exc: Exception) -> JSONResponse:
    """A library error with its own message and the status `status_of` gives it."""
    status, kind = status_of(exc)
    _count(request, kind)
    if status >= 500:
        log.error("%s: %s", kind, exc, exc_info=status == 500)
    message = str(exc) if status < 500 or kind != "internal" else INTERNAL
    return error_response(status, kind, message)


def install(app: FastAPI) -> None:
    """Answer every failure of `app` in the one error shape: always JSON, always the message."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    for library_error in (CuememError, ValueError, Forbidden):  # anything else is a bug: 500, logged
        app.add_exception_handler(library_error, _library)
