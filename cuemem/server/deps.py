"""The one dependency for an API key's scope: who calls, with what access, on which namespace (issue 17;
docs/design.md layout, `server/`).

`key_scope(access, ids)` admits the request's key (401 when missing or not valid, 429 over its rate), checks its
access (an admin route needs an admin key, 403) and collects the namespace ids the request names. The namespace is
bound by `ApiKey.scope` (the key's prefix fills in what the request leaves out; anything outside it is 403) when the
route first asks for it, after the request's own validation, so a malformed request is a 422 whoever it names.
(No `from __future__ import annotations` here: FastAPI reads the dependencies' annotations at run time.)
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import Depends, Request

from ..types import Namespace
from .errors import ApiError
from .keys import ApiKey, Forbidden
from .state import ServerState

Access = Literal["read", "write", "admin"]
Ids = Literal["query", "path", "route"]
Wanted = tuple[str | None, str | None, str | None]


def token_of(headers: Mapping[str, str]) -> str | None:
    """The API key a request carries (lower-cased header names): `X-API-Key`, else `Authorization: Bearer`."""
    token = headers.get("x-api-key")
    auth = headers.get("authorization", "")
    if token is None and auth[:7].lower() == "bearer ":
        token = auth[7:].strip()
    return token or None


@dataclass
class Caller:
    """One request's admitted key, its access and the namespace ids it names (bound on first use)."""

    state: ServerState
    key: ApiKey
    access: Access
    wanted: Wanted = (None, None, None)
    _namespace: Namespace | None = field(default=None, repr=False)

    def bind(self, user_id: str | None, agent_id: str | None, run_id: str | None) -> Namespace:
        """The namespace these ids reach under the key's prefix (`ApiKey.scope`); 403 outside it."""
        try:
            self._namespace = self.key.scope(user_id, agent_id, run_id)
        except Forbidden as exc:
            raise ApiError(403, "forbidden", str(exc)) from exc
        return self._namespace

    @property
    def namespace(self) -> Namespace:
        """The namespace the request reaches: the one bound, else the ids it named in its query string or path."""
        return self._namespace if self._namespace is not None else self.bind(*self.wanted)

    @property
    def ids(self) -> dict[str, Any]:
        """The namespace's ids as keyword arguments of a `Memory` call."""
        return self.namespace.as_dict()

    def write_lock(self) -> threading.Lock:
        """The lock serialising writes to the request's namespace (only a write route takes it)."""
        if self.access != "write":
            raise RuntimeError(f"a {self.access} route does not write")  # a bug in the route, not the request
        return self.state.write_lock(self.namespace)

    def bounded_k(self, k: int | None) -> int | None:
        """`k` checked against the server's limit (422 outside 1..max_k)."""
        limit = self.state.limits.max_k
        if k is not None and not 1 <= k <= limit:
            raise ApiError(422, "invalid_request", f"k must be between 1 and {limit}, got {k}")
        return k

    def bounded_budget(self, budget: int | None) -> int | None:
        """`budget_tokens` checked against the server's limit (422 outside 1..max_budget_tokens)."""
        limit = self.state.limits.max_budget_tokens
        if budget is not None and not 1 <= budget <= limit:
            raise ApiError(422, "invalid_request", f"budget_tokens must be between 1 and {limit}, got {budget}")
        return budget

    def bounded_text(self, text: str, name: str) -> str:
        """A query, question or message checked: not blank, and within the server's length limit (422)."""
        limit = self.state.limits.max_query_chars
        if not text.strip():
            raise ApiError(422, "invalid_request", f"{name} must be a non-empty string")
        if len(text) > limit:
            raise ApiError(422, "invalid_request", f"{name} is {len(text)} characters; the limit is {limit}")
        return text


def key_scope(access: Access = "read", ids: Ids = "query") -> Any:
    """The dependency giving a route its `Caller`. `access`: read, write (the route takes the namespace's write
    lock) or admin (key management: an admin key, else 403). `ids`, where the namespace ids come from: "query"
    (user_id, agent_id, run_id in the query string), "path" (user_id in the path, the others in the query string)
    or "route" (the route binds what it reads itself, a JSON body or the import's query string, or none)."""

    def admit(request: Request) -> Caller:
        state: ServerState = request.app.state.cuemem
        key = state.admit(token_of(request.headers))
        if access == "admin" and not key.admin:
            raise ApiError(403, "forbidden", "key management needs an admin key (cuemem keys create --admin)")
        return Caller(state, key, access)

    Admitted = Annotated[Caller, Depends(admit)]

    def from_query(
        caller: Admitted, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Caller:
        caller.wanted = (user_id, agent_id, run_id)
        return caller

    def from_path(caller: Admitted, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Caller:
        caller.wanted = (user_id, agent_id, run_id)
        return caller

    dependency: dict[Ids, Callable[..., Caller]] = {"query": from_query, "path": from_path, "route": admit}
    return Depends(dependency[ids])


Reader = Annotated[Caller, key_scope("read")]
Writer = Annotated[Caller, key_scope("write")]
BodyReader = Annotated[Caller, key_scope("read", ids="route")]
BodyWriter = Annotated[Caller, key_scope("write", ids="route")]
Admin = Annotated[Caller, key_scope("admin", ids="route")]
AnyKey = BodyReader  # any valid key, admin or not; it binds no namespace unless the route asks
