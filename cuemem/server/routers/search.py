"""Retrieval: search the namespace's memory (GET /v1/memories/search) and answer a question from it (POST
/v1/answer) (issue 17; docs/design.md layout, `server/`). Both run the same engine call; the answer cites only the
turns it was shown."""

from typing import Annotated, Any

from fastapi import APIRouter, Query

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


@router.post("/v1/answer", response_model=AnswerResponse)
def answer(body: AnswerRequest, caller: BodyReader) -> dict[str, Any]:
    """Search, then have the model answer from the hits; the answer cites only turns it was shown."""
    caller.bind(body.user_id, body.agent_id, body.run_id)
    result = caller.state.memory.answer(
        caller.bounded_text(body.question, "question"),
        **caller.ids,
        k=caller.bounded_k(body.k),
        budget_tokens=caller.bounded_budget(body.budget_tokens),
        engine=caller.state.check_engine(body.engine),
        now=body.now,
    )
    hits = result.retrieval.as_dict()["hits"] if result.retrieval is not None else []
    return jsonable({"text": result.text, "cited_turn_ids": result.cited_turn_ids, "notes": result.notes, "hits": hits})
