"""What the command prints, written once: stdout and stderr consoles, user data shown literally, JSON streamed,
counted nouns, one-line messages and progress (a bar on a terminal, plain lines in a log)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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

from ..engines.structure import session_header
from ..types import Retrieval

console = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True)

# Stored ids and text are data, never terminal input: control characters (C0 but newline and tab, DEL, C1, and
# the bidirectional overrides and line separators that reorder or break what the reader sees) are shown escaped.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# In JSON the same characters (json.dumps escapes only C0) are written as \uXXXX escapes: the same JSON value.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# json's messages that end in "starting at" ("Unterminated string starting at") meet the reader's own " at column N"
_DOUBLED_AT = re.compile(r"\bstarting at at\b")


def visible(text: object) -> str:
    """`text` with every control character spelled out (`\\x1b`, `\\u202e`), safe to show on a terminal."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], str(text))


def reason(text: object) -> str:
    """A message as the reader should see it: "starting at at column 41" said once ("starting at column 41")."""
    return _DOUBLED_AT.sub("starting at", str(text))


def plural(n: int, noun: str, many: str | None = None, *, sep: str = "") -> str:
    """`n` and its noun, singular for one: "1 turn", "2 turns" (`sep=","` writes 1,234)."""
    return f"{n:{sep}} {noun if n == 1 else many or noun + 's'}"


def say(text: object, *, to: Console | None = None, style: str | None = None) -> None:
    """Print a line that holds user data: no rich markup, no highlighting, no raw control characters, and never
    wrapped (off a terminal rich would break it at 80 columns, splitting a command in two)."""
    (to or console).print(Text(visible(text), style=style or ""), markup=False, highlight=False, soft_wrap=True)


def error_line(message: object, label: str = "Error:", style: str = "red") -> None:
    """One line on stderr, whatever the terminal: a coloured label, then the message literally (README: errors)."""
    line = Text(label, style=style) + Text(f" {visible(reason(message))}")
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def json_safe(chunk: str) -> str:
    """JSON text with what json leaves raw and a terminal would act on written as \\uXXXX escapes."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", chunk)


class SafeJsonStream:
    """A text stream for JSON lines bound for stdout: what json leaves raw and a terminal would act on, escaped."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, chunk: str) -> int:
        return int(self.out.write(json_safe(chunk)))


def print_json(data: Any) -> None:
    """JSON on stdout, streamed by the json module (not rich's pretty-printer, which needs gigabytes and minutes
    for 100k hits); indented; strings are data, with no character a terminal would act on left raw."""
    out, batch = sys.stdout, []
    for chunk in json.JSONEncoder(ensure_ascii=False, indent=2).iterencode(data):
        batch.append(chunk)
        if len(batch) == 4096:  # escaping and writing in batches: 100k hits take ~2 s, no extra memory
            out.write(json_safe("".join(batch)))
            batch.clear()
    out.write(json_safe("".join(batch)) + "\n")
    out.flush()


def print_json_line(data: Any) -> None:
    """One JSON document on one line of stdout (JSON lines output), escaped as `print_json` does."""
    sys.stdout.write(json_safe(json.dumps(data, ensure_ascii=False)) + "\n")


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


def bar_progress(*columns: Any, disable: bool = False) -> Progress:
    """A rich progress display on stderr: the task's description, then `columns`."""
    return Progress(TextColumn("{task.description}"), *columns, console=err, disable=disable)


def bar_label(label: str) -> str:
    """A task description for a bar: descriptions are markup, and labels hold file names and sample ids."""
    return escape(visible(label))


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
    with bar_progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(bar_label(label), total=total)
        yield lambda n: bar.advance(task, n)


@contextmanager
def bytes_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """Progress over bytes as `progress(done, total)`: a rich bar on a terminal, else plain lines (ProgressLog)."""
    if not err.is_terminal:
        log = ProgressLog()
        yield lambda done, total: log.line(label, done, total)
        return
    with bar_progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(bar_label(label), total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def print_retrieval(result: Retrieval, evidence: set[str] | None = None) -> None:
    """The hits as a table: rank, turn ids (✓ on evidence), session, date, score and the text, all literal."""
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


def table(columns: tuple[str, ...], left: tuple[str, ...] = ()) -> Table:
    """A plain table with a bold header: `left` columns (text) left-aligned, the others (figures) right-aligned."""
    out = Table(box=None, header_style="bold")
    for col in columns:
        out.add_column(col, justify="left" if col in left else "right")
    return out
