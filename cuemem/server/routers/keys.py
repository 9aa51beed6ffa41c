"""The key's own identity (/v1/whoami) and key management, admin keys only (/v1/keys) (issue 17; docs/design.md
layout, `server/`). A key's token is shown once, in the response that creates it; it is stored hashed."""

from typing import Any

from fastapi import APIRouter

from ..deps import Admin, AnyKey
from ..errors import ApiError
from ..schemas import KeyRequest

router = APIRouter(tags=["keys"])


@router.get("/v1/whoami")
def whoami(caller: AnyKey) -> dict[str, Any]:
    """The key's id and the namespace prefix it is bound to."""
    return caller.key.as_dict()


@router.post("/v1/keys", status_code=201)
def create_key(body: KeyRequest, caller: Admin) -> dict[str, Any]:
    """Create a key; its token is in this response only (it is stored hashed)."""
    created, token = caller.state.keys.create(
        user_id=body.user_id, agent_id=body.agent_id, admin=body.admin, label=body.label
    )
    return {**created.as_dict(), "key": token}


@router.get("/v1/keys")
def list_keys(caller: Admin) -> list[dict[str, Any]]:
    """Every live key (ids and bindings; never secrets)."""
    return [k.as_dict() for k in caller.state.keys.live()]


@router.delete("/v1/keys/{key_id}")
def revoke_key(key_id: str, caller: Admin) -> dict[str, Any]:
    """Revoke a key at once."""
    if not caller.state.keys.revoke(key_id):
        raise ApiError(404, "not_found", f"no live key {key_id!r}")
    return {"revoked": key_id}
