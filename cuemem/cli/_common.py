"""What every command shares, written once: the `cuemem` app and its global options, the command's settings and
Memory, the namespace options, and errors reported as one line (usage errors included, with a hint when a global
option comes after the command)."""

from __future__ import annotations

import functools
import shlex
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from ..config import Settings, default_config_file, is_dsn
from ..engines import available_engines
from ..errors import CuememError
from ..memory import Memory
from .output import err, error_line, plural, progress_bar, say

try:  # typer >= 0.22 carries its own copy of click
    from typer._click.exceptions import ClickException, NoSuchOption
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click.exceptions import ClickException, NoSuchOption  # type: ignore[assignment]

F = TypeVar("F", bound=Callable[..., Any])

UserOpt = Annotated[str, typer.Option("--user-id", "-u", help="Namespace: the user.")]
AgentOpt = Annotated[str | None, typer.Option("--agent-id", help="Namespace: the agent (optional).")]
RunOpt = Annotated[str | None, typer.Option("--run-id", help="Namespace: the run (optional).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ENGINE_HELP = f"Engine: {', '.join(available_engines())} (default: setting engine, {Settings.engine})."
GLOBAL_OPTIONS = ("--db", "--engine", "--embedder", "--config")


class State:
    """The global options of this invocation."""

    db: str | None = None
    engine: str | None = None
    embedder: str | None = None
    config: Path | None = None
    config_named: bool = False  # "using config FILE" said once per command


state = State()


def _global_option_hint(exc: NoSuchOption, args: list[str]) -> None:
    """A global option given after the command gets told where it goes, with the command line put right."""
    option = exc.option_name.split("=", 1)[0]
    if option not in GLOBAL_OPTIONS or exc.ctx is None:
        return
    value = next((arg.split("=", 1)[1] for arg in args if arg.startswith(f"{option}=")), None)
    if value is None and option in args[:-1]:
        value = args[args.index(option) + 1]
    root = exc.ctx.find_root().info_name or "cuemem"
    command = exc.ctx.command_path.removeprefix(exc.ctx.find_root().command_path).strip()
    example = " ".join([root, option, shlex.quote(value or option[2:].upper()), command, "…"])
    exc.message = f"{option} is a global option: put it before the command: {example}"
    exc.possibilities = None


def _usage_error(exc: ClickException, args: list[str]) -> NoReturn:
    """A usage error as the command's usage line and one `Error:` line (not typer's boxed panel, which wraps)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # `cuemem models`: the help, as typer shows it
        raise exc
    if isinstance(exc, NoSuchOption):
        _global_option_hint(exc, args)
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        say(ctx.get_usage(), to=err)
    error_line(exc.format_message())
    raise typer.Exit(exc.exit_code)


class CuememGroup(TyperGroup):
    """The top-level command group: usage errors anywhere below it are reported by `_usage_error`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """The global options; the whole command line is kept for the hint of `_global_option_hint`."""
        ctx.meta["cuemem.args"] = list(args)
        try:
            return super().parse_args(ctx, args)
        except ClickException as exc:
            _usage_error(exc, list(args))

    def invoke(self, ctx: Any) -> Any:
        """The command; a usage error in its options or arguments goes to `_usage_error`."""
        try:
            return super().invoke(ctx)
        except ClickException as exc:
            _usage_error(exc, ctx.meta.get("cuemem.args", []))


app = typer.Typer(
    cls=CuememGroup, help="cuemem: long-term memory for LLM agents.", no_args_is_help=True, add_completion=False
)


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
    # no docstring: typer would show it as the app's help
    state.db, state.engine, state.embedder, state.config = db, engine, embedder, config
    state.config_named = False


def settings(**overrides: Any) -> Settings:
    """The command's settings; the config file read, if any, is named on stderr (once)."""
    path = state.config or default_config_file()
    if path is not None and not state.config_named:
        state.config_named = True
        say(f"using config {path}", to=err, style="dim")
    return Settings.load(path, **overrides)


def store_settings(**overrides: Any) -> Settings:
    """The command's settings with the global --db, --engine and --embedder applied."""
    return settings(db=overrides.pop("db", state.db), engine=state.engine, embedder=state.embedder, **overrides)


def open_memory(*, read_only: bool = False, existing: bool = False, **overrides: Any) -> Memory:
    """The Memory of the command. Commands that only read open the store read-only (no write, no waiting);
    `existing`: the command reads (or deletes), so a store file that is not there is an error, not a new file."""
    chosen = store_settings(**overrides)
    if str(chosen.db) == ":memory:":
        raise CuememError("a :memory: store keeps nothing once the command ends: give --db (or CUEMEM_DB) a file")
    if (existing or read_only) and not is_dsn(chosen.db) and not Path(chosen.db).exists():
        raise CuememError(
            f"no store at {chosen.db}: nothing was ever added there (check --db or CUEMEM_DB; add or ingest creates"
            " a store)"
        )
    return Memory(settings=chosen, read_only=read_only)


def namespace(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, Any]:
    """The namespace options as Memory's keyword arguments."""
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


CATCH_UP_NOTICE = 200  # turns still to index above which a search says what it is doing first


def catch_up(memory: Memory, *, engine: str | None = None, **ns: Any) -> None:
    """Index what the engine has not indexed yet before searching, with progress: after a change of embedder
    that is every turn of the namespace, which can take minutes (the search would otherwise seem to hang)."""
    pending = memory.pending(engine=engine, **ns)
    if not pending:
        return
    name = engine or memory.engine.name
    if pending >= CATCH_UP_NOTICE:
        say(
            f"{name} has not indexed {plural(pending, 'turn', sep=',')} of this namespace yet (embedder"
            f" {memory.settings.embedder}): indexing them first",
            to=err,
        )
    with progress_bar(f"index {name}", pending) as advance:
        memory.catch_up(engine=engine, progress=advance, **ns)


@contextmanager
def caught_up(ns: dict[str, Any], engine: str | None = None) -> Iterator[Memory]:
    """The Memory of a reading command (search, ask, stats) on an existing store, its engine's index of the
    namespace caught up with the log first (docs/design.md promise 1: derived state follows the log)."""
    with open_memory(existing=True) as memory:
        catch_up(memory, engine=engine, **ns)
        yield memory


def handles_errors(fn: F) -> F:
    """Report cuemem's own errors as one clear line and exit 1, instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (CuememError, ValueError, KeyError, OSError, sqlite3.Error) as exc:
            error_line(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
            raise typer.Exit(1) from exc

    return wrapper  # type: ignore[return-value]
