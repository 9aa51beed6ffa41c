"""The memory agent over HTTP (POST /v1/chat): one turn of a conversation kept by the server (issue 17;
docs/design.md layout, `server/`; the agent is `cuemem.agent`)."""

from typing import Any

from fastapi import APIRouter

from ..deps import BodyWriter
from ..schemas import ChatRequest, jsonable

router = APIRouter(tags=["agent"])


@router.post("/v1/chat")
def chat(body: ChatRequest, caller: BodyWriter) -> dict[str, Any]:
    """One turn with the memory agent: it may search, store and recall memory and use its tools; when a tool
    or memory fails the turn goes on without it and says so. Returns the reply, the steps and the metrics."""
    namespace = caller.bind(body.user_id, body.agent_id, body.run_id)
    message = caller.bounded_text(body.message, "message")
    agent, lock = caller.state.agent(namespace, body.session_id or "chat", body.memory)
    with lock:  # an agent is one conversation: one turn at a time (its own writes are the memory's)
        turn = agent.turn(message, now=body.now)
    return jsonable(turn.as_dict())
