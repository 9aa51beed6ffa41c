"""`cuemem demo`: the shipped sample conversation ingested, searched and answered with cited turns."""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..formats import locomo_turns, read_locomo
from ._common import app, handles_errors, open_memory
from .output import console, plural, print_retrieval, progress_bar, visible

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
    with tempfile.TemporaryDirectory() as tmp, open_memory(db=db or Path(tmp) / "demo.db") as memory:
        user = "maya"
        path = memory.settings.db
        console.rule(f"cuemem demo — engine [bold]{escape(memory.engine.name)}[/bold], store {escape(visible(path))}")
        sessions = len({t.session_id for t in turns})
        console.print(
            f"Ingesting {plural(len(turns), 'turn')} from {plural(sessions, 'session')} of '{sample['sample_id']}' ..."
        )
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
            print_retrieval(result, evidence)
            found += len(evidence & set(result.turn_ids))
            total += len(evidence)
            if answers:
                reply = memory.answer(qa["question"], user_id=user)  # the reader picks its smallest evidence
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
                f" {plural(int(stats.get('calls', 0)), 'model call')} ({stats.get('cached', 0)} cached),"
                f" {stats.get('seconds', 0):.1f} s."
            )
