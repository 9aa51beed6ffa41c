"""A namespace as a whole: its sessions, its history of operations, its raw log out (export) and in (import), and
forgetting a session or a user (issue 17; docs/design.md layout, `server/`; deletes cascade to everything derived)."""

import tempfile
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from ...formats import ImportReport, stream_lines
from ..deps import BodyWriter, Caller, Reader, Writer, key_scope
from ..errors import ApiError
from ..schemas import ImportResponse, SessionOut, jsonable

router = APIRouter(tags=["memories"])

SHOWN_ERRORS = 1000  # rejected lines an import's response lists; `rejected` counts them all
UserWriter = Annotated[Caller, key_scope("write", ids="path")]


@router.get("/v1/sessions", response_model=list[SessionOut])
def list_sessions(caller: Reader) -> list[dict[str, Any]]:
    """The namespace's sessions in the order they began, with their turn counts and first/last timestamps."""
    sessions: dict[str, dict[str, Any]] = {}
    for turn in caller.state.memory.turns(**caller.ids):
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


@router.delete("/v1/sessions/{session_id:path}")
def delete_session(session_id: str, caller: Writer) -> dict[str, Any]:
    """Delete a session's turns and everything derived from them."""
    namespace = caller.namespace
    with caller.write_lock():
        count = caller.state.memory.delete_session(session_id, **caller.ids)
    if count == 0:
        raise ApiError(404, "not_found", f"no session {session_id!r} in ({namespace})")
    return {"deleted_turns": count, "session_id": session_id, "namespace": namespace.as_dict()}


@router.delete("/v1/users/{user_id:path}")
def delete_user(caller: UserWriter) -> dict[str, Any]:
    """Delete a user's memory: every agent and run under the namespace named (only within the key's prefix)."""
    with caller.write_lock():
        deleted = caller.state.memory.delete_all(**caller.ids)
    return {"deleted": [{"namespace": ns.as_dict(), "turns": n} for ns, n in deleted]}


@router.get("/v1/history")
def history(caller: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    """The namespace's recent operations (adds, deletes, reindexes), newest first."""
    return jsonable(caller.state.memory.history(**caller.ids, limit=limit))


@router.get("/v1/export")
def export(caller: Reader) -> StreamingResponse:
    """The namespace's raw log as JSONL (one turn a line), streamed; `POST /v1/import` reads it back."""
    spool = tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+", encoding="utf-8")  # noqa: SIM115
    try:
        caller.state.memory.export(spool, **caller.ids)  # one consistent read, before any byte goes out
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


@router.post("/v1/import", response_model=ImportResponse)
async def import_(request: Request, caller: BodyWriter) -> dict[str, Any]:
    """Add turns from a JSONL body (the export format) into the key's namespace; bad lines are reported by
    number and every good one kept. Query parameters user_id/agent_id/run_id name the target namespace.

    The body is streamed to a temporary file as it arrives (the middleware stops it at max_import_bytes, 413,
    before any line is imported), then read back a line at a time into the import, which writes in batches: the
    server holds one batch of lines, not the body (issue 33). The namespace's write lock is taken only once the
    whole body is in, so a slow upload blocks no other writer."""
    params = request.query_params
    unknown = set(params) - {"user_id", "agent_id", "run_id"}
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown query parameters: {', '.join(sorted(unknown))}")
    caller.bind(params.get("user_id"), params.get("agent_id"), params.get("run_id"))
    with tempfile.TemporaryFile() as spool:
        async for chunk in request.stream():  # bounded by the middleware (max_import_bytes)
            spool.write(chunk)

        def run() -> ImportReport:
            spool.seek(0)
            with caller.write_lock():
                return caller.state.memory.import_(stream_lines(spool), **caller.ids)

        report = await run_in_threadpool(run)
    return {
        "added": report.added,
        "skipped": report.skipped,
        "errors": [{"line": where, "reason": why} for where, why in report.errors[:SHOWN_ERRORS]],
        "rejected": report.rejected,
    }
