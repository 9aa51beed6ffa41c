"""Retrieval: search the namespace's memory (GET /v1/memories/search) and answer a question from it (POST
/v1/answer) (issue 17; docs/design.md layout, `server/`). Both run the same engine call; the answer cites only the
turns it was shown."""

import itertools
import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from ...errors import CuememError
from ...types import Answer
from ..deps import BodyReader, Reader
from ..schemas import AnswerRequest, AnswerResponse, SearchResponse, jsonable

router = APIRouter(tags=["memories"])


@router.get("/v1/memories/search", response_model=SearchResponse)
def search_memories(
    caller: Reader,
    q: Annotated[str, Query(description="The query.")],
    k: int | None = None,
    budget_tokens: int | None = None,
    engine: str | None = None,
    now: str | None = None,
) -> dict[str, Any]:
    """The k best hits for the query, with scores, engine labels and the turn ids they rest on."""
    ids = caller.ids  # bound first: a query outside the key's prefix is a 403 before it is checked
    retrieval = caller.state.memory.search(
        caller.bounded_text(q, "q"),
        **ids,
        k=caller.bounded_k(k),
        budget_tokens=caller.bounded_budget(budget_tokens),
        engine=caller.state.check_engine(engine),
        now=now,
    )
    return jsonable(retrieval.as_dict())


def _answer_call(body: AnswerRequest, caller: Any) -> dict[str, Any]:
    """The `Memory.answer` arguments of a request, bounded by the server's limits."""
    caller.bind(body.user_id, body.agent_id, body.run_id)
    return {
        "question": caller.bounded_text(body.question, "question"),
        **caller.ids,
        "k": caller.bounded_k(body.k),
        "budget_tokens": caller.bounded_budget(body.budget_tokens),
        "engine": caller.state.check_engine(body.engine),
        "now": body.now,
    }


def answer_json(result: Answer, model: str) -> dict[str, Any]:
    hits = result.retrieval.as_dict()["hits"] if result.retrieval is not None else []
    return jsonable(
        {
            "text": result.text,
            "cited_turn_ids": result.cited_turn_ids,
            "notes": result.notes,
            "hits": hits,
            "dates": result.dates,
            "evidence_turn_ids": result.evidence_turn_ids,
            "evidence_tokens": result.evidence_tokens,
            "model": model,
        }
    )


@router.post("/v1/answer", response_model=AnswerResponse)
def answer(body: AnswerRequest, caller: BodyReader) -> dict[str, Any]:
    """Search, then have the model answer from the smallest evidence; the answer cites only turns it was shown."""
    memory = caller.state.memory
    result = memory.answer(**_answer_call(body, caller))
    return answer_json(result, memory.llm.backend.name)


def _event(kind: str, data: object) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@router.post("/v1/answer/stream", response_class=StreamingResponse)
def answer_stream(body: AnswerRequest, caller: BodyReader) -> StreamingResponse:
    """`/v1/answer` as server-sent events: `token` events ({"text": piece}) while the model decodes, then one
    `answer` event with the whole reply of `/v1/answer`; a failure after the stream began is an `error` event
    ({"error": kind, "message": ...})."""
    memory = caller.state.memory
    call = _answer_call(body, caller)  # a bad request is refused (4xx) before the stream begins
    pieces = memory.answer_stream(**call)
    first = next(pieces)  # the search and the first piece: an unknown namespace is still a plain 404

    def events() -> Iterator[str]:
        try:
            for piece in itertools.chain([first], pieces):
                if isinstance(piece, str):
                    yield _event("token", {"text": piece})
                else:
                    yield _event("answer", answer_json(piece, memory.llm.backend.name))
        except CuememError as exc:
            yield _event("error", {"error": type(exc).__name__, "message": str(exc)})

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
