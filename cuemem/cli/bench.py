"""`cuemem bench` and `cuemem gen`: engines side by side on LoCoMo, LongMemEval or generated look-alike
conversations (docs/design.md, benchmark data), and the generator of those conversations."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn
from rich.text import Text

from ..config import default_config_file, is_dsn
from ..errors import CuememError
from ._common import app, handles_errors, settings, state
from .output import ProgressLog, bar_label, bar_progress, console, err, plural, say, table, visible

DATASET_FILES = {  # each benchmark's default files under the datasets setting, the first one found is read
    "locomo": ("locomo/locomo10.json",),
    "longmemeval": (
        "longmemeval/longmemeval_s_cleaned.PARTIAL_499of500.json.gz",
        "longmemeval/longmemeval_s_cleaned.json",
    ),
}
DATASET_SOURCES = {  # where each benchmark's data comes from (docs/design.md, benchmark data)
    "locomo": "github.com/snap-research/locomo (data/locomo10.json)",
    "longmemeval": "github.com/xiaowu0162/LongMemEval (longmemeval_s_cleaned.json)",
}
RETRIEVAL_COLUMNS = ("recall@1", "recall@5", "recall@10", "recall@50", "recall@budget", "ndcg@10")


def dataset_file(dataset: str, directory: Path) -> Path:
    """The benchmark's default file under the datasets directory, or an error saying where the data comes from and
    how to point cuemem at it."""
    candidates = [directory / name for name in DATASET_FILES[dataset]]
    for path in candidates:
        if path.is_file():
            return path
    raise CuememError(
        f"no --data given and no {dataset} data at {candidates[-1]}: get it from {DATASET_SOURCES[dataset]}, then"
        f" give --data FILE, or put it there (under the datasets setting: CUEMEM_DATASETS, now {directory}; default"
        " datasets/)"
    )


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
        int | None, typer.Option(help="Tokens of excerpts the reader sees at most (default: answer_budget, 320).")
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
    from ..bench.datasets import SPLITS
    from ..bench.runner import BenchConfig, run

    if dataset not in (*DATASET_FILES, "came"):
        raise CuememError(f"unknown dataset {dataset!r}: locomo, longmemeval or came")
    if split is not None and split not in SPLITS:
        raise CuememError(f"unknown split {split!r}: {' or '.join(SPLITS)}")
    chosen = settings()  # names the config file read, if any
    if dataset != "came" and (size, seed) != ("S", "0"):
        raise CuememError("--size and --seed choose generated conversations: they go with `cuemem bench came`")
    if dataset == "came" and data is None:  # generate, then run: the file lands beside the results
        data = generate_came(size, seed, out / "came.json")
    if data is None:
        data = dataset_file(dataset, chosen.datasets)
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
    with bar_progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), disable=not err.is_terminal) as shown:

        def advance(engine: str, done: int, total: int) -> None:
            if not err.is_terminal:  # a log file: a plain line now and then instead of a bar
                log.line(f"{dataset} · {engine}", done, total)
                return
            if engine not in bars:
                bars[engine] = shown.add_task(bar_label(f"{dataset} · {engine}"), total=total)
            shown.update(bars[engine], completed=done, total=total or None)

        results = run(config, advance)
    out_table = table(("engine", *RETRIEVAL_COLUMNS, "questions"), left=("engine",))
    for name, e in results["engines"].items():
        r = e["retrieval"]
        out_table.add_row(Text(visible(name)), *(f"{r[c]:.3f}" for c in RETRIEVAL_COLUMNS), str(r["questions"]))
    console.print(out_table)
    say(f"wrote {out / 'results.json'}, {out / 'report.md'} and plots")


def _judge_settings(backend: str | None) -> dict[str, Any] | None:
    """The judge's model settings: the same model whichever model reads (CUEMEM_LLM_MODEL does not reach it), so
    that readers are compared under one judge."""
    if backend is None:
        return None
    return {"llm": backend, "llm_model": os.environ.get("CUEMEM_JUDGE_MODEL", "")}


def generate_came(size: str, seed: str, path: Path) -> Path:
    """Write look-alike conversations of the given sizes and seeds to `path`, and say what was written."""
    from ..bench import came

    try:
        sizes, seeds = came.parse_sizes(size), came.parse_seeds(seed)
    except ValueError as exc:
        raise CuememError(str(exc)) from None
    samples = came.write(path, sizes, seeds)
    turns = sum(len(t) for s in samples for k, t in s["conversation"].items() if re.fullmatch(r"session_\d+", k))
    questions = sum(len(s["qa"]) for s in samples)
    say(
        f"wrote {path}: {plural(len(samples), 'conversation')} ({', '.join(sizes)} × seeds {seed}),"
        f" {plural(turns, 'turn')}, {plural(questions, 'question')}"
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
    generate_came(size, seed, output)
