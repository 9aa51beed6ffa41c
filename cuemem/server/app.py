"""`cuemem serve`: the versioned REST API over one `Memory` (issue 17; docs/design.md layout, `server/`).

`create_app` is the app factory: it builds the server's shared state (`state.py`), answers every error in one JSON
shape (`errors.py`: `{"error": "<kind>", "message": "..."}`, never a 500 for bad input), includes one router per
resource (`routers/`), mounts the MCP server at /mcp/ behind the API keys and wraps the whole app in the body-size
limit and request metrics (`middleware.py`). Each /v1 request is admitted by its API key, bound to a namespace
prefix, through one dependency (`deps.key_scope`): whatever ids a request names, it reaches only that prefix (403
otherwise). Library calls run in the server's thread pool, off the event loop: reads run side by side, writes are
serialised per namespace.
"""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .. import __version__
from ..memory import Memory
from . import errors
from .deps import token_of
from .errors import ApiError, status_of
from .keys import KeyRing
from .limits import Limits
from .middleware import LimitsAndMetrics, McpAuth, current_namespace, mcp_model_lane
from .routers import agent, keys, memories, namespaces, page, search
from .state import ServerState

__all__ = ["ApiError", "ServerState", "create_app", "current_namespace", "status_of", "token_of"]

# The order routes are matched in: /v1/memories/search before /v1/memories/{turn_id:path}.
ROUTERS = (page.router, search.router, memories.router, namespaces.router, agent.router, keys.router)

DESCRIPTION = (
    "Long-term memory for LLM agents. Every /v1 route needs an API key (`Authorization: Bearer "
    "cm_...` or `X-API-Key`), bound to a namespace prefix: requests outside it are refused with 403."
)


def create_app(
    memory: Memory,
    keys: KeyRing,
    limits: Limits | None = None,
    *,
    files_root: Any = None,
    mcp: bool = True,
    host: str = "127.0.0.1",
    agent_policy: str = "guided",
    allowed_engines: Sequence[str] | None = None,
) -> FastAPI:
    """The FastAPI app serving `memory`: REST under /v1, /healthz, /metrics, the browser page at /, and the MCP
    server (streamable HTTP) at /mcp/ when the `mcp` SDK is installed. `host`, the address served, sets the MCP
    endpoint's DNS-rebinding protection (loopback: only local Host/Origin headers). `allowed_engines`: the engines
    a request may name (None: every registered engine by its name; "*": any, variants included)."""
    from ..agent.loop import POLICIES

    if agent_policy not in POLICIES:
        raise ValueError(f"unknown agent policy {agent_policy!r}: choose {', '.join(POLICIES)}")
    state = ServerState(
        memory=memory,
        keys=keys,
        limits=limits or Limits(),
        files_root=files_root,
        agent_policy=agent_policy,
        allowed_engines=tuple(allowed_engines) if allowed_engines is not None else None,
    )
    mcp_app = _mcp_app(state, host) if mcp else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_app is not None:  # a mounted app's lifespan is not run: the host app's enters it (server/mcp.py)
            async with mcp_app.router.lifespan_context(mcp_app):
                yield
        else:
            yield

    app = FastAPI(title="cuemem", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.cuemem = state
    memory.on_forget(state.forget_agents)  # any delete, whichever way it comes (REST, MCP), forgets the agents
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    if mcp_app is not None:
        app.mount("/mcp", McpAuth(mcp_app, state))
    app.add_middleware(LimitsAndMetrics, state=state)
    return app


def _mcp_app(state: ServerState, host: str) -> Any:
    """The MCP app (stateless streamable HTTP, `server/mcp.py`) in the namespace of each request's key; None
    without the `mcp` SDK."""
    try:
        from .mcp import streamable_http_app
    except ImportError:
        return None
    return streamable_http_app(state.memory, current_namespace, host=host, model_bound=lambda: mcp_model_lane(state))
