"""The request and response models of the REST API (pydantic; they are the OpenAPI schema's components), and the
helpers that turn library results into response bodies (issue 17; docs/design.md layout, `server/`)."""

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
    dates: list[str] = Field(default_factory=list, description="Absolute dates the cited excerpts show.")
    evidence_turn_ids: list[str] = Field(default_factory=list, description="The turns shown to the reader.")
    evidence_tokens: int | None = None
    model: str = Field("", description="The model that answered.")


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
    errors: list[dict[str, Any]] = Field(description="The first 1,000 rejected lines, each with its reason.")
    rejected: int = Field(0, description="How many lines were rejected in all.")


def turn_out(turn: Any) -> dict[str, Any]:
    """A turn as the API returns it: its record without the log's sequence number."""
    data = turn.as_dict()
    data.pop("seq", None)
    return data


def jsonable(data: Any) -> Any:
    """Data as JSON has it: numpy numbers become plain ones, non-finite floats null, tuples and sets lists."""
    if isinstance(data, dict):
        return {str(k): jsonable(v) for k, v in data.items()}
    if isinstance(data, list | tuple | set | frozenset):
        return [jsonable(v) for v in data]
    if isinstance(data, bool | int | str) or data is None:
        return data
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if hasattr(data, "item"):
        return jsonable(data.item())
    if hasattr(data, "as_dict"):
        return jsonable(data.as_dict())
    return str(data)
