"""Serving: `cuemem keys` (API keys), `cuemem serve` (HTTP, MCP and the page) and `cuemem mcp` (one namespace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import CuememError
from ..store import display_target
from ._common import AgentOpt, JsonOpt, RunOpt, UserOpt, app, handles_errors, open_memory, settings, state
from .output import console, err, print_json, say, visible

keys_app = typer.Typer(
    help="API keys for `cuemem serve`: each bound to a user (optionally one agent); admin keys manage keys.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")
KeysFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--keys-file",
        help="Key file (default: <db>.keys; for a postgresql:// store, one in the user data"
        " dir: servers sharing a database pass the same file).",
    ),
]


def _keyring(keys_file: Path | None) -> Any:
    """The key ring of the store: --keys-file, or the default file beside the store (<db>.keys)."""
    from ..server.keys import KeyRing, default_path

    return KeyRing(keys_file or default_path(settings(db=state.db).db))


@keys_app.command("create")
@handles_errors
def keys_create(
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="The user the key is bound to.")] = None,
    agent_id: AgentOpt = None,
    admin: Annotated[bool, typer.Option("--admin", help="A key-management key, bound to no user.")] = False,
    label: Annotated[str, typer.Option(help="A note to tell keys apart.")] = "",
    keys_file: KeysFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an API key. Its token is printed once: only a hash of it is kept."""
    ring = _keyring(keys_file)
    key, token = ring.create(user_id=user_id, agent_id=agent_id, admin=admin, label=label)
    if as_json:
        print_json({**key.as_dict(), "key": token})
        return
    bound = (
        "admin (key management)"
        if key.admin
        else f"user {key.user_id}" + (f", agent {key.agent_id}" if key.agent_id else "")
    )
    say(f"created key {key.id} for {bound}; keep the token, it is not shown again:", to=err, style="dim")
    print(token)


@keys_app.command("list")
@handles_errors
def keys_list(keys_file: KeysFileOpt = None, as_json: JsonOpt = False) -> None:
    """The live keys: ids and bindings, never tokens."""
    from rich.table import Table

    live = [k.as_dict() for k in _keyring(keys_file).live()]
    if as_json:
        print_json(live)
        return
    table = Table("id", "user", "agent", "admin", "label", "created")
    for k in live:
        table.add_row(
            *(visible(k[c] or "") for c in ("id", "user_id", "agent_id")),
            "yes" if k["admin"] else "",
            visible(k["label"]),
            k["created"],
        )
    console.print(table)


@keys_app.command("revoke")
@handles_errors
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (cuemem keys list).")], keys_file: KeysFileOpt = None
) -> None:
    """Revoke a key at once."""
    if not _keyring(keys_file).revoke(key_id):
        raise CuememError(f"no live key {key_id!r}")
    say(f"revoked {key_id}")


@app.command()
@handles_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    keys_file: KeysFileOpt = None,
    files: Annotated[Path | None, typer.Option(help="Folder the chat agent's file search may read.")] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest JSON request body.")] = 1 << 20,
    max_turns: Annotated[int, typer.Option(help="Most messages in one POST /v1/memories.")] = 500,
    rate: Annotated[float, typer.Option(help="Requests per second per key (0: unlimited).")] = 20.0,
    burst: Annotated[int, typer.Option(help="Requests a key may make at once before the rate applies.")] = 40,
    allow_engine: Annotated[
        list[str] | None,
        typer.Option(
            help="An engine requests may name (repeat it; '*' for any, variants included). Default: the setting"
            " allowed_engines, else every registered engine by name."
        ),
    ] = None,
    model_workers: Annotated[int, typer.Option(help="Answers, chats and model-mode searches run at once.")] = 1,
    model_queue: Annotated[int, typer.Option(help="More of them that may wait (past it: 503).")] = 4,
    model_per_key: Annotated[int, typer.Option(help="One key's of them, running or waiting (past it: 429).")] = 2,
    memory_workers: Annotated[int, typer.Option(help="Other memory requests run at once.")] = 8,
    memory_queue: Annotated[int, typer.Option(help="More of them that may wait (past it: 503).")] = 32,
    memory_per_key: Annotated[int, typer.Option(help="One key's of them, running or waiting (past it: 429).")] = 4,
    mcp: Annotated[bool, typer.Option("--mcp/--no-mcp", help="Serve MCP (streamable HTTP) at /mcp.")] = True,
    agent_policy: Annotated[str, typer.Option(help="The chat agent's tool choice: guided, model, rules.")] = "guided",
    index_in_background: Annotated[
        bool,
        typer.Option(
            "--index-in-background/--index-on-add",
            help="Acknowledge an add once its turns are durable and index them in a background worker (default), or"
            " index inside the add request. Either way a search sees every acknowledged turn.",
        ),
    ] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log/--no-access-log",
            help="uvicorn's access log (off by default: its URLs carry turn and session ids, which may hold user"
            " text and would outlive a delete).",
        ),
    ] = False,
) -> None:
    """Serve memory over HTTP: REST under /v1 (API keys), /healthz, /metrics, MCP at /mcp, the browser page at /."""
    import uvicorn

    from ..server.app import create_app
    from ..server.limits import Limits

    ring = _keyring(keys_file)
    if not ring.live():
        say(f"no API keys yet in {ring.path}: create one with `cuemem keys create --user-id U`", to=err, style="yellow")
    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_turns=max_turns,
        rate=rate,
        burst=burst,
        model_workers=model_workers,
        model_queue=model_queue,
        model_per_key=model_per_key,
        memory_workers=memory_workers,
        memory_queue=memory_queue,
        memory_per_key=memory_per_key,
    )
    memory = open_memory(index_in_background=index_in_background)
    allowed = allow_engine or [e.strip() for e in memory.settings.allowed_engines.split(",") if e.strip()] or None
    application = create_app(
        memory,
        ring,
        limits,
        files_root=files,
        mcp=mcp,
        host=host,
        agent_policy=agent_policy,
        allowed_engines=allowed,
    )
    where = display_target(memory.settings.db)
    say(f"cuemem serving {where} (engine {memory.engine.name}) on http://{host}:{port}/", to=err)
    try:
        uvicorn.run(application, host=host, port=port, log_level=log_level, access_log=access_log)
    finally:
        memory.close()
        ring.close()


@app.command("worker")
@handles_errors
def worker(
    once: Annotated[bool, typer.Option("--once", help="One pass over every namespace, then exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between passes.")] = 1.0,
    engine: Annotated[str | None, typer.Option(help="The engine to index for (default: the setting).")] = None,
) -> None:
    """Index, in a process of its own, the turns adds left unindexed (servers run with --index-in-background, or a
    change of embedder): every namespace is caught up, pass after pass. Safe beside servers and other workers."""
    import time

    memory = open_memory(existing=True)
    say(f"cuemem worker indexing {display_target(memory.settings.db)} (engine {engine or memory.engine.name})", to=err)
    try:
        while True:
            done = {ns: n for ns, n in memory.index_pending(engine).items() if n}
            if done:
                say(f"indexed {sum(done.values())} turns in {len(done)} namespaces", to=err)
            if once:
                break
            time.sleep(max(0.05, interval))
    except KeyboardInterrupt:
        pass
    finally:
        memory.close()


@app.command("mcp")
def mcp_cmd(
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    transport: Annotated[str, typer.Option(help="stdio (for an agent client that starts it) or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP only: the address (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP only: the port.")] = 8765,
) -> None:
    """Serve one namespace as an MCP server (tools add_memory, search_memory, answer, delete_memory). Over HTTP it
    has no keys: keep it on loopback, or use `cuemem serve`, whose /mcp/ takes each key's own namespace."""
    from ..server.mcp import main as mcp_main

    argv = ["--user-id", user_id, "--transport", transport, "--host", host, "--port", str(port)]
    for flag, value in (("--agent-id", agent_id), ("--run-id", run_id), ("--db", state.db), ("--engine", state.engine)):
        if value is not None:
            argv += [flag, str(value)]
    raise typer.Exit(mcp_main(argv))
