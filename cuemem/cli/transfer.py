"""Moving the turn log in and out: export (all or nothing, never onto the store), import, migrate between stores,
and the report every ingest and import prints."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any, cast

import typer

from ..config import is_dsn
from ..errors import CuememError
from ..formats import ImportReport, count_lines, file_lines
from ..migrate import migrate as migrate_log
from ._common import AgentOpt, JsonOpt, RunOpt, app, handles_errors, namespace, open_memory, store_settings
from .output import (
    SafeJsonStream,
    err,
    error_line,
    plural,
    print_json,
    progress_bar,
    reason,
    say,
)

SHOWN_ERRORS = 20


def report(result: ImportReport, as_json: bool) -> None:
    """What an ingest or import did: the counts, then each rejected line or turn (the first SHOWN_ERRORS), exit
    code 1 when anything was rejected (every good line is kept all the same)."""
    errors = [(where, reason(why)) for where, why in result.errors]
    total = result.rejected
    if as_json:
        data: dict[str, Any] = {"added": result.added, "skipped": result.skipped, "errors": errors}
        if result.unlisted:
            data["unlisted_errors"] = result.unlisted
        print_json(data)
    else:
        say(f"added {plural(result.added, 'turn')}, {result.skipped} already stored")
        for where, why in errors[:SHOWN_ERRORS]:
            error_line(f"{where}: {why}", label="rejected", style="yellow")
        if total > SHOWN_ERRORS:
            listed = f"--json lists the first {len(errors):,}" if result.unlisted else "--json lists them all"
            say(f"... and {total - SHOWN_ERRORS:,} more rejected ({listed})", to=err)
        if total:
            say(f"{total:,} rejected in all; every other line was kept", to=err)
    if total:
        raise typer.Exit(1)


@app.command()
@handles_errors
def export(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    user_id: Annotated[str | None, typer.Option("--user-id", "-u", help="Only this user (default: all).")] = None,
    agent_id: AgentOpt = None,
    run_id: RunOpt = None,
) -> None:
    """Export the raw turn log as JSONL (to --output: all or nothing, an existing file is replaced only on success)."""
    ns = namespace(user_id, agent_id, run_id)
    if output is None:
        with open_memory(read_only=True) as memory:
            n = memory.export(cast(IO[str], SafeJsonStream(sys.stdout)), **ns)
    else:
        db = store_settings().db
        if not is_dsn(db):
            refuse_store_files(output, Path(db))
        with open_memory(read_only=True) as memory, replaced_on_success(output) as fh:
            n = memory.export(fh, **ns)
    say(f"exported {plural(n, 'turn')}", to=err)


def refuse_store_files(output: Path, db: Path) -> None:
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
def replaced_on_success(output: Path) -> Iterator[Any]:
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
    total = count_lines(path)  # before the store is opened: a mistyped file name creates no store
    with open_memory() as memory, progress_bar(f"import {path.name}", total) as advance:
        result = memory.import_(file_lines(path), user_id=user_id, progress=advance)
    report(result, as_json)


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
    result = migrate_log(source, target, progress=progress_bar)
    if as_json:
        print_json(result.as_dict())
        return
    for n in result.namespaces:
        say(
            f"{n.namespace}: {plural(n.turns, 'turn')}, {n.copied} copied, {n.skipped} already there,"
            f" sha256 {n.checksum[:16]}"
        )
    say(
        f"migrated {plural(len(result.namespaces), 'namespace')}, {plural(result.turns, 'turn')} ({result.copied}"
        f" copied, {result.skipped} already there) from {result.source} to {result.target} in {result.seconds:.1f} s:"
        " counts and log checksums verified"
    )
