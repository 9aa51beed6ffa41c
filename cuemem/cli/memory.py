"""The memory commands: add, ingest, search, ask, stats, profile, get, delete, reindex, history, namespaces, and
engines (what can index and search them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from ..engines import available_engines, describe
from ..errors import CuememError
from ..formats import sniff_format
from ..types import Namespace
from ._common import (
    AgentOpt,
    JsonOpt,
    RunOpt,
    UserOpt,
    app,
    caught_up,
    handles_errors,
    namespace,
    open_memory,
    settings,
    state,
)
from .output import console, err, plural, print_json, print_json_line, print_retrieval, progress_bar, say, visible
from .transfer import report

KOpt = Annotated[int | None, typer.Option("-k", help="How many hits (default: setting k).")]
UseOpt = Annotated[str | None, typer.Option("--use", help="Engine (default: the engine setting).")]


@app.command()
@handles_errors
def add(
    text: Annotated[str, typer.Argument(help="The turn's text ('-' reads standard input).")],
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    session_id: Annotated[str, typer.Option(help="Session the turn belongs to.")] = "default",
    speaker: Annotated[str, typer.Option(help="Who said it.")] = "user",
    timestamp: Annotated[str | None, typer.Option(help="When it was said (free text or ISO).")] = None,
    turn_id: Annotated[str | None, typer.Option("--id", help="Turn id (default: derived from content).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add one turn."""
    if text == "-":
        text = sys.stdin.buffer.read().decode("utf-8")
    message: dict[str, Any] = {"text": text, "speaker": speaker, "timestamp": timestamp}
    if turn_id:
        message["id"] = turn_id
    with open_memory() as memory:
        result = memory.add(message, session_id=session_id, **namespace(user_id, agent_id, run_id))
    if as_json:
        print_json({"added": result.added, "skipped": result.skipped})
    elif result.added:
        say(f"added {result.added[0]}")
    else:
        say(f"already stored: {result.skipped[0]}")


def ingest_format(path: Path, file_format: str) -> str:
    """The format to read `path` in. A `.json` file is one JSON document: when it does not even begin as JSON lines
    (its first line is not a whole JSON object), it is read as LoCoMo, so that a JSON file in another shape gets
    one clear error instead of a rejection for each of its lines."""
    if file_format != "auto" or path.suffix.lower() != ".json" or not path.is_file():
        return file_format
    detected = sniff_format(path)
    if detected == "jsonl" and not _starts_as_jsonl(path):
        return "locomo"
    return detected


def _starts_as_jsonl(path: Path) -> bool:
    """Whether the file's first non-blank line is a whole JSON object (one turn, as JSONL has it)."""
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    return isinstance(json.loads(line), dict)
                except (ValueError, RecursionError):
                    return False
    return False


@app.command()
@handles_errors
def ingest(
    path: Annotated[Path, typer.Argument(help="A JSONL file (one turn per line) or a LoCoMo-format JSON file.")],
    user_id: Annotated[
        str | None, typer.Option("--user-id", "-u", help="Namespace (LoCoMo: default sample id).")
    ] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    file_format: Annotated[str, typer.Option("--format", help="auto, jsonl or locomo.")] = "auto",
    sample: Annotated[list[str] | None, typer.Option(help="LoCoMo: only these sample ids.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest a conversation file; bad lines are reported with their numbers and every good line is kept."""
    if not path.exists():  # before the store is opened: a mistyped file name creates no store
        raise CuememError(f"no file {path}")
    chosen = ingest_format(path, file_format)
    with open_memory() as memory:
        try:
            result = memory.ingest_file(
                path,
                file_format=chosen,
                samples=sample,
                progress=progress_bar,
                **namespace(user_id, agent_id, run_id),
            )
        except CuememError as exc:
            if chosen == file_format:
                raise
            raise CuememError(
                f"{exc} (a .json file is read as LoCoMo: a list of samples, each with a 'conversation' object; for"
                " one turn per line, name it .jsonl or give --format jsonl)"
            ) from exc
    report(result, as_json)


@app.command()
@handles_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    k: KOpt = None,
    budget: Annotated[int | None, typer.Option(help="Token budget for the packed hits.")] = None,
    engine: Annotated[str | None, typer.Option("--use", help="Search with this engine instead.")] = None,
    now: Annotated[str | None, typer.Option(help="When the query is asked: resolves 'last week' and the like.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a namespace's memory."""
    ns = namespace(user_id, agent_id, run_id)
    with caught_up(ns, engine) as memory:
        result = memory.search(query, k=k, budget_tokens=budget, engine=engine, now=now, **ns)
    if as_json:
        print_json(result.as_dict())
        return
    print_retrieval(result)
    ms = result.seconds * 1000
    say(f"{plural(len(result.hits), 'hit')}, {plural(result.tokens, 'token')}, {ms:.1f} ms ({result.engine})", to=err)


@app.command()
@handles_errors
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    k: Annotated[int | None, typer.Option("-k", help="How many hits to read (default: setting k).")] = None,
    budget: Annotated[int | None, typer.Option(help="Token budget of the context (default: answer_budget).")] = None,
    now: Annotated[str | None, typer.Option(help="Today's date, for 'how long ago' questions.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from memory with the model, citing the turns it used; the answer is printed as the
    model decodes it (the JSON reply comes whole)."""
    ns = namespace(user_id, agent_id, run_id)
    with caught_up(ns) as memory:
        if as_json:
            result = memory.answer(question, k=k, budget_tokens=budget, now=now, **ns)
        else:
            result = None
            for piece in memory.answer_stream(question, k=k, budget_tokens=budget, now=now, **ns):
                if isinstance(piece, str):
                    console.print(Text(visible(piece), style="bold"), end="", markup=False, highlight=False)
                    console.file.flush()
                else:
                    result = piece
            console.print()
        stats = memory.llm.stats()
    assert result is not None
    if as_json:
        print_json(
            {
                "answer": result.text,
                "cited_turn_ids": result.cited_turn_ids,
                "dates": result.dates,
                "evidence_turn_ids": result.evidence_turn_ids,
                "evidence_tokens": result.evidence_tokens,
                "notes": result.notes,
                "llm": stats,
                "retrieval": result.retrieval.as_dict() if result.retrieval else None,
            }
        )
        return
    say(f"cites: {', '.join(result.cited_turn_ids) or '(nothing)'}")
    if result.dates:
        say(f"dates: {'; '.join(result.dates)}")
    for note in result.notes:  # e.g. episodic's master: which statement revises which
        say(f"note: {note}")
    cited = set(result.cited_turn_ids)
    for hit in result.retrieval.hits if result.retrieval else []:
        if cited & set(hit.turn_ids):
            say(f"  [{','.join(hit.turn_ids)}] {hit.text}")


@app.command()
@handles_errors
def stats(user_id: UserOpt, agent_id: AgentOpt = None, run_id: RunOpt = None, engine: UseOpt = None) -> None:
    """What the engine reports about a namespace, as JSON (turns indexed, timestamps that did not parse as dates,
    STITCH's steps and model-mode fallbacks ...), after catching its index up with the log."""
    ns = namespace(user_id, agent_id, run_id)
    with caught_up(ns, engine) as memory:
        print_json(memory.engine_stats(engine=engine, **ns))


@app.command()
@handles_errors
def profile(
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Records relevant to this, best first.")] = None,
    types: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated record types: preference, profile, episodic, summary, tool_result, and the"
            " standing facts value, goal, state, cause."
        ),
    ] = None,
    records: Annotated[bool, typer.Option("--records", help="Every record with its history, as JSON lines.")] = False,
    subject: Annotated[
        str | None, typer.Option(help="Whose profile (a speaker; default: the one with most records).")
    ] = None,
    engine: Annotated[str | None, typer.Option("--use", help="A profile engine (default: the engine setting).")] = None,
) -> None:
    """The namespace's current preferences and profile as JSON (engine `profile`): each value with its confidence,
    evidence turn ids and earlier values. With --records or --query, the typed records themselves."""
    kinds = [t.strip() for t in types.split(",") if t.strip()] if types else None
    ns = namespace(user_id, agent_id, run_id)
    with open_memory(existing=True) as memory:
        if records or query:
            for row in memory.records(query, types=kinds, engine=engine, **ns):
                print_json_line(row)
            return
        print_json(memory.profile(subject=subject, engine=engine, **ns))


@app.command()
@handles_errors
def get(turn_id: str, user_id: UserOpt, agent_id: AgentOpt = None, run_id: RunOpt = None) -> None:
    """Print one stored turn as JSON."""
    with open_memory(read_only=True) as memory:
        turn = memory.get(turn_id, **namespace(user_id, agent_id, run_id))
    print_json(turn.as_dict())


@app.command()
@handles_errors
def delete(
    user_id: UserOpt,
    turn_id: Annotated[list[str] | None, typer.Argument(help="Turn ids to delete.")] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    session: Annotated[str | None, typer.Option(help="Delete this whole session.")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Delete the whole namespace and every namespace under it.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete turns, a session, or a namespace with every namespace under it, and all derived from them."""
    if sum(bool(x) for x in (turn_id, session, everything)) != 1:
        raise CuememError("give turn ids, or --session S, or --all (exactly one)")
    ns = namespace(user_id, agent_id, run_id)
    deleted: list[tuple[Namespace, int]]  # each namespace deleted from, with its count of turns deleted
    with open_memory(existing=True) as memory:
        if everything:
            deleted = memory.delete_all(**ns)
        elif session:
            deleted = [(Namespace(user_id, agent_id, run_id), memory.delete_session(session, **ns))]
        else:
            for tid in turn_id or []:
                memory.delete(tid, **ns)
            deleted = [(Namespace(user_id, agent_id, run_id), len(turn_id or []))]
    if as_json:
        print_json([{**where.as_dict(), "turns": n} for where, n in deleted])
    elif everything:
        for where, n in deleted:
            say(f"deleted {where}: {plural(n, 'turn')}")
        total = sum(n for _, n in deleted)
        say(f"deleted {plural(total, 'turn')} in {plural(len(deleted), 'namespace')}")
    else:
        say(f"deleted {plural(deleted[0][1], 'turn')}")


@app.command()
@handles_errors
def reindex(
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="Only this user (default: all).")] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
) -> None:
    """Rebuild the engine's derived indexes from the raw turn log."""
    with open_memory(existing=True) as memory:
        total = sum(n for _, n in memory.namespaces())
        with progress_bar(f"reindex ({memory.engine.name})", total) as advance:
            n = memory.reindex(progress=advance, **namespace(user_id, agent_id, run_id))
    say(f"reindexed {plural(n, 'turn')} with {memory.engine.name}")


@app.command()
@handles_errors
def gc(
    keep: Annotated[
        list[str] | None,
        typer.Option(help="An engine whose derived state stays (repeat it). Default: every registered engine."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would go.")] = False,
) -> None:
    """Drop the derived state of engines nobody uses (variants such as episodic[window=512]); the log stays."""
    with open_memory(existing=True) as memory:
        gone = memory.gc(keep, dry_run=dry_run)
    if not gone:
        say("nothing to drop: every engine with derived state is in use")
    for owner, items in gone.items():
        say(f"would drop {owner}" if dry_run else f"dropped {owner} ({plural(items, 'item')})")


@app.command()
@handles_errors
def history(user_id: UserOpt, agent_id: AgentOpt = None, run_id: RunOpt = None, limit: int = 20) -> None:
    """Show the namespace's recent changes as JSON lines."""
    with open_memory(read_only=True) as memory:
        for entry in memory.history(limit=limit, **namespace(user_id, agent_id, run_id)):
            print_json_line(entry)


@app.command()
@handles_errors
def namespaces(as_json: JsonOpt = False) -> None:
    """List namespaces and their turn counts."""
    with open_memory(read_only=True) as memory:
        rows = memory.namespaces()
    if as_json:
        print_json([{**ns.as_dict(), "turns": n} for ns, n in rows])
        return
    for ns, n in rows:
        say(f"{ns}\t{plural(n, 'turn')}")


@app.command()
@handles_errors
def engines(as_json: JsonOpt = False) -> None:
    """List the registered engines, one line each, the default (setting engine, or --engine) marked with *."""
    default = settings(engine=state.engine).engine
    registered = available_engines()
    rows = [(name, describe(name, factory), name == default) for name, factory in registered.items()]
    if default not in registered:  # a variant spec ("episodic[window=512]") or a plugin not installed here
        rows.append((default, describe(default) or "not a registered engine", True))
    if as_json:
        print_json([{"name": n, "description": d, "default": mark} for n, d, mark in rows])
        return
    width = max(len(n) for n, _, _ in rows)
    for name, description, mark in rows:
        say(f"{'*' if mark else ' '} {name:<{width}}  {description}{'  (default)' if mark else ''}")
