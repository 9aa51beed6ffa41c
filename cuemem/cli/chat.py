"""`cuemem chat`: the memory agent, one line a turn on standard input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ._common import AgentOpt, JsonOpt, RunOpt, UserOpt, app, handles_errors, open_memory
from .output import console, err, print_json, say, visible


@app.command()
@handles_errors
def chat(
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    session: Annotated[str, typer.Option(help="The conversation's session id.")] = "chat",
    use_memory: Annotated[bool, typer.Option("--memory/--no-memory", help="Search and store memory.")] = True,
    files: Annotated[Path | None, typer.Option(help="Folder the agent's file search may read.")] = None,
    tool_budget: Annotated[int, typer.Option(help="Most tool calls per turn.")] = 4,
    policy: Annotated[
        str, typer.Option(help="Tool choice: guided (the model picks among cued tools), model, rules.")
    ] = "guided",
    now: Annotated[str | None, typer.Option(help="The date to take as today (default: the clock).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Talk with the memory agent: one line a turn (stdin); it searches, stores and recalls memory and uses tools."""
    from ..agent import Agent

    with open_memory() as memory:
        agent = Agent(
            memory,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            memory_enabled=use_memory,
            tool_budget=tool_budget,
            files_root=files,
            session_id=session,
            policy=policy,
        )
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                err.print("[bold]you>[/bold] ", end="")
            line = sys.stdin.readline()
            if not line:
                break
            if not line.strip():
                continue
            if as_json:
                print_json(agent.turn(line.strip(), now=now).as_dict())
                continue
            streamed: list[str] = []

            def show(piece: str, streamed: list[str] = streamed) -> None:
                if not streamed:
                    console.print(Text("agent> ", style="bold"), end="")
                streamed.append(piece)
                console.print(Text(visible(piece)), end="", highlight=False)
                console.file.flush()

            turn = agent.turn(line.strip(), now=now, on_token=show)
            said = "".join(streamed).strip()
            if said and turn.reply.startswith(said):  # the reply as streamed, with any quoted values after it
                console.print(Text(visible(turn.reply[len(said) :])), highlight=False)
            else:  # no model reply streamed (the model was down), or it was cleaned: the reply as it stands
                if streamed:
                    console.print()
                console.print(Text("agent> ", style="bold") + Text(visible(turn.reply)), highlight=False)
            for note in turn.degraded:
                say(f"  ! {note}", to=err, style="yellow")
            tools = ", ".join(f"{s.tool}{'' if s.ok else ' (failed)'}" for s in turn.steps) or "none"
            cites = f" · cites {', '.join(turn.cited_turn_ids)}" if turn.cited_turn_ids else ""
            say(
                f"  tools: {tools}{cites} · memory hit: {'yes' if turn.memory_hit else 'no'} ·"
                f" {turn.latency_s:.1f} s · {turn.prompt_tokens}+{turn.completion_tokens} tokens",
                to=err,
                style="dim",
            )
