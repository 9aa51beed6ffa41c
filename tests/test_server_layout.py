"""The server's layout (issue 32): the REST API keeps every operation of the single-file app it was split from, and
each of its modules stays small.

`OPERATIONS` was captured from the OpenAPI schema of `create_app` before the split into `server/routers/`: method,
path, operation id, summary, tag, parameters (`*` required, in order), JSON body model and response codes. A route
renamed, moved, re-tagged or given other parameters changes what clients and the generated API guide see, so it must
change here on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from conftest import open_memory

import cuemem.server
from cuemem.server.app import create_app
from cuemem.server.keys import KeyRing

OPERATIONS = [
    (
        "DELETE",
        "/v1/keys/{key_id}",
        "revoke_key_v1_keys__key_id__delete",
        "Revoke Key",
        "keys",
        "*key_id",
        "",
        "200 422",
    ),
    (
        "DELETE",
        "/v1/memories/{turn_id}",
        "delete_memory_v1_memories__turn_id__delete",
        "Delete Memory",
        "memories",
        "*turn_id user_id agent_id run_id",
        "",
        "200 422",
    ),
    (
        "DELETE",
        "/v1/sessions/{session_id}",
        "delete_session_v1_sessions__session_id__delete",
        "Delete Session",
        "memories",
        "*session_id user_id agent_id run_id",
        "",
        "200 422",
    ),
    (
        "DELETE",
        "/v1/users/{user_id}",
        "delete_user_v1_users__user_id__delete",
        "Delete User",
        "memories",
        "*user_id agent_id run_id",
        "",
        "200 422",
    ),
    ("GET", "/healthz", "healthz_healthz_get", "Healthz", "server", "", "", "200"),
    ("GET", "/metrics", "metrics_metrics_get", "Metrics", "server", "", "", "200"),
    ("GET", "/v1/export", "export_v1_export_get", "Export", "memories", "user_id agent_id run_id", "", "200 422"),
    (
        "GET",
        "/v1/history",
        "history_v1_history_get",
        "History",
        "memories",
        "limit user_id agent_id run_id",
        "",
        "200 422",
    ),
    ("GET", "/v1/keys", "list_keys_v1_keys_get", "List Keys", "keys", "", "", "200"),
    (
        "GET",
        "/v1/memories",
        "list_memories_v1_memories_get",
        "List Memories",
        "memories",
        "session_id limit offset user_id agent_id run_id",
        "",
        "200 422",
    ),
    (
        "GET",
        "/v1/memories/search",
        "search_memories_v1_memories_search_get",
        "Search Memories",
        "memories",
        "*q k budget_tokens engine now user_id agent_id run_id",
        "",
        "200 422",
    ),
    (
        "GET",
        "/v1/memories/{turn_id}",
        "get_memory_v1_memories__turn_id__get",
        "Get Memory",
        "memories",
        "*turn_id user_id agent_id run_id",
        "",
        "200 422",
    ),
    (
        "GET",
        "/v1/sessions",
        "list_sessions_v1_sessions_get",
        "List Sessions",
        "memories",
        "user_id agent_id run_id",
        "",
        "200 422",
    ),
    ("GET", "/v1/whoami", "whoami_v1_whoami_get", "Whoami", "keys", "", "", "200"),
    ("POST", "/v1/answer", "answer_v1_answer_post", "Answer", "memories", "", "AnswerRequest", "200 422"),
    (
        "POST",
        "/v1/answer/stream",
        "answer_stream_v1_answer_stream_post",
        "Answer Stream",
        "memories",
        "",
        "AnswerRequest",
        "200 422",
    ),
    ("POST", "/v1/chat", "chat_v1_chat_post", "Chat", "agent", "", "ChatRequest", "200 422"),
    ("POST", "/v1/import", "import__v1_import_post", "Import ", "memories", "", "", "200"),
    ("POST", "/v1/keys", "create_key_v1_keys_post", "Create Key", "keys", "", "KeyRequest", "201 422"),
    ("POST", "/v1/memories", "add_memories_v1_memories_post", "Add Memories", "memories", "", "AddRequest", "200 422"),
]


def operations(schema: dict[str, Any]) -> list[tuple[str, ...]]:
    """The schema's operations as `OPERATIONS` lists them."""
    rows = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            params = " ".join(("*" if p.get("required") else "") + p["name"] for p in op.get("parameters", []))
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            body = content.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
            responses = " ".join(sorted(op["responses"]))
            tag = op.get("tags", [""])[0]
            rows.append((method.upper(), path, op["operationId"], op["summary"], tag, params, body, responses))
    return sorted(rows)


@pytest.mark.parametrize("mcp", [False, True])
def test_the_openapi_operations_are_those_of_the_single_file_app(tmp_path: Path, mcp: bool) -> None:
    memory = open_memory(tmp_path / "mem.db", "hybrid")
    ring = KeyRing(tmp_path / "mem.db.keys")
    try:
        schema = create_app(memory, ring, mcp=mcp).openapi()
    finally:
        memory.close()
        ring.close()
    assert operations(schema) == sorted(OPERATIONS)
    assert schema["info"]["title"] == "cuemem"


def test_the_server_modules_stay_small() -> None:
    root = Path(cuemem.server.__file__).parent
    sizes = {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    assert "routers/memories.py" in sizes and "deps.py" in sizes
    assert {name: n for name, n in sizes.items() if n > 600} == {}


def test_the_app_module_keeps_its_names() -> None:
    from cuemem.server import app

    for name in ("create_app", "ApiError", "ServerState", "status_of", "token_of", "current_namespace"):
        assert hasattr(app, name), name
