"""BENCHMARKS.md from the result files (benchmarks/reference.py render): headline tables, each with its runs' date,
machine, commit and exact command. Pure functions of the loaded files, so the output is the same bytes every time."""

from __future__ import annotations

from typing import Any

HEADLINE = "retrieval-locomo-test"  # the result file README.md's engine table quotes

# Every built-in engine family, in the order the tables list them, with what it does in one line.
ENGINE_LINES = {
    "bm25": "BM25 over each turn's words (speaker and date are fields, not words)",
    "dense": "cosine similarity of sentence embeddings (EmbeddingGemma by default)",
    "hybrid": "reciprocal-rank fusion of `bm25` and `dense`, plus date-window and named-speaker boosts",
    "fullcontext": "the most recent turns that fit the budget, in log order (no ranking)",
    "stitch": "contextual intent (STITCH): the goal in focus carried forward, event and entity types (the default)",
    "scg": "a concept schema and an associative graph searched by spreading activation (SCG-MEM)",
    "episodic": "raw episodes in windows, routed by three pathways, read by assistants and a master (E-mem)",
    "profile": "typed preference records beside the turns, consolidated as values change",
}

LOCOMO_CATEGORIES = {"1": "cat 1 multi-hop", "2": "cat 2 temporal", "3": "cat 3 open-domain", "4": "cat 4 single-hop"}
CAME_TYPES = ("revision", "recall", "multi-hop", "synthesis")
CAME_GOALS = ("implicit", "named")  # issue 34: an evidence turn leaves its goal implicit / every one names it
SIZES = ("S", "M", "L")
SECTIONS = (
    ("retrieval", "Retrieval"),
    ("answers", "Answers"),
    ("speed", "Speed and memory at 10k, 100k and 1M turns"),
    ("serving", "Serving"),
    ("suite", "The test suite"),
)

TOPICS = {  # docs/benchmarks/<page>.md: what each holds
    "retrieval": "LoCoMo and LongMemEval-S baselines, the dev/test protocol, structure (dates, speakers), "
    "weighted fusion, second stages, the cross-check against an independent BM25",
    "stitch": "STITCH: the model-free engine, its ablations, model mode, throughput",
    "scg": "SCG-MEM: the concept schema, the graph alone, dev choices, model mode, throughput",
    "episodic": "E-mem: routing, window sizes, pathways, answers and tokens, the adaptive router",
    "profile": "hybrid preference memory: LongMemEval-S preference and update questions, LoCoMo, preference drift",
    "came": "look-alike conversations: every engine on generated S / M / L conversations, where each loses",
    "models": "embedders and readers: EmbeddingGemma against MiniLM, Qwen2.5-Coder against SmolLM2, "
    "single-call costs, a fresh `make demo`, answer metrics, the reader's runtime, the smallest evidence",
    "scale": "SQLite and PostgreSQL at 10k / 100k / 1M turns, HNSW recall, BM25 at scale, migration, "
    "the foundation's ingest and search cost",
    "serving": "the HTTP server under load and kill -9 (one SQLite server; two servers on PostgreSQL), "
    "hostile load (one key flooding, engine variants, a 50 MB import), the memory agent",
    "forgetting": "a delete reaching the disk: seconds from an acknowledged delete until no byte of the text is in "
    "the store's files, the cost of PostgreSQL's scrub",
    "suite": "the test suite's run time",
    "decisions": "why these backends (own BM25, numpy vectors) and the tuning decisions measured along the way",
    "harness": "`cuemem bench`: results.json's schema, the metrics, checkpoints",
}

OLD_SECTIONS = (  # the diary's sections (cited by code comments) and where their content lives now
    ("Look-alike conversations (issue 27)", "came"),
    ("Scale-out (issue 26): several servers", "serving"),
    ("Scale-out (issue 26): scale, migration", "scale"),
    ("Serving (issue 17)", "serving"),
    ("Hybrid preference memory (issue 16)", "profile"),
    ("E-mem (issue 15)", "episodic"),
    ("SCG-MEM (issue 14)", "scg"),
    ("Retrieval that generalises (issue 13)", "retrieval"),
    ("Stronger local models (issue 12)", "models"),
    ("Foundation, second pass (issue 10); Foundation: ingest, search latency, peak memory", "scale"),
    ("LoCoMo: baselines side by side; LongMemEval-S: baselines", "retrieval"),
    ("`results.json` schema", "harness"),
    ("STITCH on LoCoMo", "stitch"),
    ("Answer metrics with the shipped model; Model layer; The optional llama.cpp backend", "models"),
    ("Why these backends; Tuning decisions measured along the way", "decisions"),
    ("The test suite (issues 17, 26)", "suite"),
)


def fmt(value: Any, spec: str = "") -> str:
    """A figure as text: None is a dash, numbers by their format spec (',.0f', '.3f', ...), text as it is."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if spec == "d":
        return f"{int(value):,}"
    return format(value, spec) if spec else str(value)


def duration(seconds: float | None) -> str:
    """Seconds as '13 min 22 s'."""
    if seconds is None:
        return "—"
    minutes, rest = divmod(round(seconds), 60)
    if minutes and not rest:
        return f"{minutes} min"
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def engine_order(names: list[str]) -> list[str]:
    """The families' order first (each family's base before its variants), then every other name sorted."""

    def key(name: str) -> tuple[int, str]:
        base = name.split("[")[0].split("-")[0]
        return (list(ENGINE_LINES).index(base) if base in ENGINE_LINES else len(ENGINE_LINES), name)

    return sorted(names, key=key)


def table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    """A Markdown table; align holds 'l' or 'r' per column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def bold_best(rows: list[list[str]], columns: list[int]) -> None:
    """Bold the highest figure of each given column (every tie)."""
    for col in columns:
        values = [float(r[col]) for r in rows if _number(r[col])]
        if len(values) < 2:
            continue
        best = max(values)
        for r in rows:
            if _number(r[col]) and float(r[col]) == best:
                r[col] = f"**{r[col]}**"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def runs_lines(result: dict[str, Any], used: list[str]) -> list[str]:
    """The runs behind a table: id, date, machine, commit, where the figures come from, a note, the command."""
    lines = []
    for run_id in used:
        run = result["runs"][run_id]
        commit = f", commit `{run['commit']}`" if run.get("commit") else ""
        source = run["source"][:1].upper() + run["source"][1:]
        when = ", ".join(x for x in (run.get("date"), run.get("machine")) if x)
        lines.append(f"- **{run_id}**: {when}{commit}. {source}." if when else f"- **{run_id}**: {source}.")
        if run.get("note"):
            lines.append(f"  {run['note']}")
        lines += ["", "  ```bash", *("  " + c for c in run["command"].splitlines()), "  ```"]
    return lines


def _used_runs(result: dict[str, Any], items: list[dict[str, Any]]) -> list[str]:
    used: list[str] = []
    for item in items:
        run_id = item.get("run") or next(iter(result["runs"]))
        if run_id not in used:
            used.append(run_id)
    return used


def retrieval_section(result: dict[str, Any]) -> list[str]:
    """One benchmark's retrieval table: every engine side by side, recall@1/@10/@budget, NDCG@10, recall@10 per
    category (LoCoMo 1-4, LongMemEval's types); look-alike conversations add their error rates and a table by
    size and question type."""
    engines = result["engines"]
    names = engine_order(list(engines))
    came = result["dataset"] == "came"
    cats = sorted({c for e in engines.values() for c in e.get("by_category", {})})
    if result["dataset"] == "locomo":
        cats = [c for c in cats if c in LOCOMO_CATEGORIES]
    if came:
        cats = []
    labels = {c: LOCOMO_CATEGORIES.get(c, c) for c in cats}
    header = ["engine", "R@1", "R@10", "R@budget", "NDCG@10"]
    header += ["look-alike rate", "superseded rate"] if came else []
    header += [f"R@10 {labels[c]}" for c in cats] + ["search p50 ms", "run"]
    rows = []
    for name in names:
        e = engines[name]
        r = e.get("retrieval", {})
        row = [f"`{name}`"] + [fmt(r.get(k), ".3f") for k in ("recall@1", "recall@10", "recall@budget", "ndcg@10")]
        if came:
            row += [fmt(r.get("lookalike_top"), ".3f"), fmt(r.get("superseded_top"), ".3f")]
        row += [fmt(e.get("by_category", {}).get(c, {}).get("recall@10"), ".3f") for c in cats]
        p50 = e.get("cost", {}).get("latency_p50_ms")
        row += [fmt(p50, ".1f" if p50 is not None and p50 < 10 else ",.0f"), e.get("run") or next(iter(result["runs"]))]
        rows.append(row)
    recall_cols = [1, 2, 3, 4, *range(5 + (2 if came else 0), 5 + (2 if came else 0) + len(cats))]
    bold_best(rows, recall_cols)
    lines = _heading(result)
    lines += table(header, rows, ["l"] + ["r"] * (len(header) - 2) + ["l"])
    if came:
        lines += ["", *came_sizes(result, names)]
    lines += ["", *runs_lines(result, _used_runs(result, [engines[n] for n in names]))]
    return lines


def came_sizes(result: dict[str, Any], names: list[str]) -> list[str]:
    """Look-alike conversations: recall@10 by size and question type, and each size's recall@10 / @budget."""
    engines = result["engines"]
    header = ["engine"] + [f"{s} {t}" for s in SIZES for t in CAME_TYPES]
    header += [f"{s} all R@10 / R@budget" for s in SIZES]
    rows = []
    for name in names:
        by_size = engines[name].get("by_size", {})
        row = [f"`{name}`"]
        row += [fmt(by_size.get(s, {}).get(t, {}).get("recall@10"), ".3f") for s in SIZES for t in CAME_TYPES]
        for s in SIZES:
            whole = by_size.get(s, {}).get("all", {})
            row.append(f"{fmt(whole.get('recall@10'), '.3f')} / {fmt(whole.get('recall@budget'), '.3f')}")
        rows.append(row)
    bold_best(rows, list(range(1, 1 + len(SIZES) * len(CAME_TYPES))))
    lines = ["Recall@10 by size and question type:", "", *table(header, rows, ["l"] + ["r"] * (len(header) - 1))]
    return lines + came_goals(result, names)


def came_goals(result: dict[str, Any], names: list[str]) -> list[str]:
    """Look-alike conversations, when the run's results carry them (issue 34): per size, the questions whose
    evidence leaves its goal implicit and the others, recall@1 / @10 / @budget with the look-alike and superseded
    rates; nothing for result files made before the blocks existed, a dash for an engine that lacks them."""
    engines = result["engines"]
    if not any(g in b for n in names for b in engines[n].get("by_size", {}).values() for g in CAME_GOALS):
        return []
    cols = ("recall@1", "recall@10", "recall@budget", "lookalike_top", "superseded_top")
    header = ["engine"] + [f"{s} {g}" for s in SIZES for g in CAME_GOALS]
    rows = []
    for name in names:
        by_size = engines[name].get("by_size", {})
        row = [f"`{name}`"]
        for s in SIZES:
            for g in CAME_GOALS:
                block = by_size.get(s, {}).get(g)
                row.append(
                    "—"
                    if block is None
                    else " / ".join(fmt(block.get(c), ".3f") for c in cols) + f" ({fmt(block.get('questions'), 'd')})"
                )
        rows.append(row)
    return [
        "",
        "Goal left implicit by an evidence turn, or named (R@1 / R@10 / R@budget / look-alike rate / superseded"
        " rate (questions)):",
        "",
        *table(header, rows, ["l"] + ["r"] * (len(header) - 1)),
    ]


ANSWER_COLS = (
    ("questions", "questions", "d"),
    ("locomo_f1", "LoCoMo F1 (cat 1–4)", ".3f"),
    ("em", "EM", ".2f"),
    ("contains", "contains", ".2f"),
    ("f1", "token F1", ".2f"),
    ("set_f1", "set F1", ".3f"),
    ("bleu1", "BLEU-1", ".3f"),
    ("judge_accuracy", "judge accuracy", ".3f"),
    ("reader_seconds_per_question", "reader s / question", ".1f"),
    ("answer_seconds_p50", "answer s p50", ".1f"),
    ("answer_seconds_p95", "answer s p95", ".1f"),
    ("model_tokens_per_question", "model tokens / question", ",.0f"),
    ("evidence_tokens_per_question", "evidence tokens / question", ",.0f"),
    ("abstains_unanswerable", "abstains (cat 5)", ".2f"),
    ("abstains_answerable", "abstains (answerable)", ".2f"),
)


def answers_section(result: dict[str, Any]) -> list[str]:
    """One answer run: each engine's reader scores (those any engine has), its recall@10 and, where the run
    scored each question type, token F1 per type."""
    engines = result["engines"]
    names = engine_order(list(engines))
    # the harness keeps the structured answer's scores (came: EM, contains, token F1) with the retrieval metrics
    scored = {
        n: {k: v for k, v in engines[n].get("retrieval", {}).items() if k in ("em", "contains", "f1")} for n in names
    }
    answer = {n: {**scored[n], **(engines[n].get("answer") or {})} for n in names}
    cols = [c for c in ANSWER_COLS if any(answer[n].get(c[0]) is not None for n in names)]
    types = sorted({t for n in names for t, b in engines[n].get("by_category", {}).items() if "f1" in b})
    header = ["engine", *(c[1] for c in cols), *(f"token F1 {t}" for t in types), "R@10", "run"]
    rows = []
    for name in names:
        e = engines[name]
        row = [f"`{name}`", *(fmt(answer[name].get(c[0]), c[2]) for c in cols)]
        row += [fmt(e.get("by_category", {}).get(t, {}).get("f1"), ".2f") for t in types]
        row += [fmt(e.get("retrieval", {}).get("recall@10"), ".3f"), e.get("run") or next(iter(result["runs"]))]
        rows.append(row)
    lines = _heading(result) + table(header, rows, ["l"] + ["r"] * (len(header) - 2) + ["l"])
    return [*lines, "", *runs_lines(result, _used_runs(result, [engines[n] for n in names]))]


def tables_section(result: dict[str, Any]) -> list[str]:
    """A result file of plain tables (speed, serving): columns with keys, labels and format specs, rows of
    figures; each table names its run."""
    lines = _heading(result)
    used: list[str] = []
    for t in result["tables"]:
        cols = t["columns"]
        rows = [[fmt(row.get(c["key"]), c.get("format", "")) for c in cols] for row in t["rows"]]
        lines += [f"**{t['title']}** (run {t['run']})", ""] if t.get("title") else []
        lines += table([c["label"] for c in cols], rows, [c.get("align", "r") for c in cols])
        lines += [""] + [line for note in t.get("notes", []) for line in (note, "")]
        if t["run"] not in used:
            used.append(t["run"])
    return lines + runs_lines(result, used)


def suite_section(suites: list[dict[str, Any]]) -> list[str]:
    """Before / after: each suite file's passed / skipped / failed, pytest's time and the time in all."""
    order = {"before": 0, "after": 1}
    suites = sorted(suites, key=lambda r: (order.get(r.get("label", ""), 2), r["name"]))
    header = ["", "date", "passed", "skipped", "failed", "pytest", "in all", "workers", "run"]
    rows = []
    for r in suites:
        s = r["suite"]
        run = r["runs"][s.get("run", "r1")]
        rows.append(
            [
                f"**{r.get('label', r['name'])}**",
                run.get("date") or "—",
                fmt(s.get("passed"), "d"),
                fmt(s.get("skipped"), "d"),
                fmt(s.get("failed"), "d"),
                duration(s.get("pytest_seconds")),
                duration(s.get("total_seconds")),
                fmt(s.get("workers"), "d"),
                f"{r['name']}: {s.get('run', 'r1')}",
            ]
        )
    lines = [*table(header, rows, ["l", "l", "r", "r", "r", "r", "r", "r", "l"]), ""]
    for r in suites:
        lines += [f"`benchmarks/results/{r['name']}.json`{': ' + r['note'] if r.get('note') else ''}", ""]
        lines += [*runs_lines(r, [r["suite"].get("run", "r1")]), ""]
    return lines[:-1]


def _heading(result: dict[str, Any]) -> list[str]:
    lines = [f"### {result['heading']}", "", f"{result['title']} (`benchmarks/results/{result['name']}.json`)."]
    if result.get("note"):
        lines += ["", result["note"]]
    return [*lines, ""]


def render(results: list[dict[str, Any]]) -> str:
    """BENCHMARKS.md: the intro, each section's tables from its result files (by their order, then name), the
    topic pages, and where the diary's old sections went."""
    by_section: dict[str, list[dict[str, Any]]] = {key: [] for key, _ in SECTIONS}
    for r in results:
        section = r.get("section") or {"retrieval": "retrieval", "answers": "answers", "suite": "suite"}[r["kind"]]
        by_section[section].append(r)
    lines = [*INTRO]
    for key, title in SECTIONS:
        found = sorted(by_section[key], key=lambda r: (r.get("order", 100), r["name"]))
        if not found:
            continue
        lines += ["", f"## {title}", ""]
        if key == "suite":
            lines += suite_section(found)
            continue
        for i, r in enumerate(found):
            render_one = {"retrieval": retrieval_section, "answers": answers_section}.get(r["kind"], tables_section)
            lines += ([""] if i else []) + render_one(r)
    lines += ["", "## Experiments by topic", "", *TOPIC_INTRO]
    lines += table(
        ["page", "what it holds"],
        [[f"[{p}](docs/benchmarks/{p}.md)", what] for p, what in TOPICS.items()],
        ["l", "l"],
    )
    lines += ["", "## Where the diary's sections went", "", *OLD_INTRO]
    lines += table(
        ["section (by issue)", "now in"],
        [[old, f"[docs/benchmarks/{p}.md](docs/benchmarks/{p}.md)"] for old, p in OLD_SECTIONS],
        ["l", "l"],
    )
    return "\n".join(line.rstrip() for line in lines) + "\n"


INTRO = [
    "<!-- Written by `make bench-report` (python benchmarks/reference.py render) from benchmarks/results/*.json."
    " Do not edit: change or add a result file, then run it again. -->",
    "",
    "# Benchmarks",
    "",
    "The headline measurements of cuemem, each table written from a result file in `benchmarks/results/` that"
    " holds the figures and, for every run behind them, the date, the machine, the commit and the exact command."
    " Unless a run says otherwise the machine is the project's own: 2 cores, 24 GiB, no GPU, Python 3.11, torch"
    " 2.13.0 CPU, often shared with other jobs, so milliseconds are upper bounds. Figures transcribed from the"
    " earlier diary say so in their source (`recorded ... not re-measured`).",
    "",
    "- Regenerate this file: `make bench-report`; `python benchmarks/reference.py render --check` fails when it"
    " is stale.",
    "- Add a run of the harness: `python benchmarks/reference.py collect bench-out/DIR --name NAME --command"
    ' "..."` (`--merge` to add engines to an existing file), then `make bench-report`.',
    "- How each benchmark runs, the experiments behind these choices, and every other figure:"
    " [docs/benchmarks/](docs/benchmarks/) (listed at the end).",
    "",
    "Recall@k is the share of a question's evidence turns cited by the first k hits (R@budget: by the hits packed"
    " into the token budget); per-category columns are recall@10; the best figure of each recall column is bold."
    " Search latency is `Memory.search` end to end as the run measured it.",
]

TOPIC_INTRO = [
    "The experiments behind the headline figures, by topic, with the latest of every repeated measurement:",
    "",
]

OLD_INTRO = [
    "This file used to be a diary by issue; code comments still cite its sections by name. Their content, less"
    " the figures later measurements replaced, is here:",
    "",
]
