"""Turns: store them (POST /v1/memories), list them a page at a time, read and delete one by id (issue 17;
docs/design.md layout, `server/`). The turns are in the durable log when a write returns."""

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ..deps import BodyWriter, Reader, Writer
from ..errors import ApiError
from ..schemas import AddRequest, AddResponse, TurnOut, turn_out

router = APIRouter(tags=["memories"])


@router.post("/v1/memories", response_model=AddResponse)
def add_memories(body: AddRequest, caller: BodyWriter) -> dict[str, Any]:
    """Store turns in the namespace and index them. The turns are in the durable log when this returns."""
    namespace = caller.bind(body.user_id, body.agent_id, body.run_id)
    max_turns = caller.state.limits.max_turns
    if len(body.messages) > max_turns:
        too_many = f"{len(body.messages)} messages in one request; the limit is {max_turns}"
        raise ApiError(422, "invalid_request", too_many)
    messages = [m if isinstance(m, str) else m.model_dump(exclude_none=True) for m in body.messages]
    with caller.write_lock():
        result = caller.state.memory.add(
            messages,
            **caller.ids,
            session_id=body.session_id,
            timestamp=body.timestamp,
            on_error=body.on_error,
        )
    return {
        "added": result.added,
        "skipped": result.skipped,
        "namespace": namespace.as_dict(),
        "rejected": [{"index": i, "reason": why} for i, why in result.rejected],
    }


@router.get("/v1/memories", response_model=list[TurnOut])
def list_memories(
    caller: Reader,
    session_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[dict[str, Any]]:
    """The namespace's turns in log order (one session's with session_id), a page at a time."""
    turns = caller.state.memory.turns(**caller.ids, session_id=session_id)
    return [turn_out(t) for t in turns[offset : offset + limit]]


@router.get("/v1/memories/{turn_id:path}", response_model=TurnOut)
def get_memory(turn_id: str, caller: Reader) -> dict[str, Any]:
    """One turn by id."""
    return turn_out(caller.state.memory.get(turn_id, **caller.ids))


@router.delete("/v1/memories/{turn_id:path}")
def delete_memory(turn_id: str, caller: Writer) -> dict[str, Any]:
    """Delete one turn and everything derived from it."""
    namespace = caller.namespace
    with caller.write_lock():
        caller.state.memory.delete(turn_id, **caller.ids)
    return {"deleted": [turn_id], "namespace": namespace.as_dict()}
