"""The benchmark reference: result files in benchmarks/results/*.json, BENCHMARKS.md rendered from them.

    python benchmarks/reference.py render [--check]        # BENCHMARKS.md (and README.md's engine table) from results
    python benchmarks/reference.py collect bench-out/locomo-test --name retrieval-locomo-test \\
        --command "cuemem bench locomo --split test --engines bm25,dense,hybrid --out bench-out/locomo-test"
    python benchmarks/reference.py suite --name suite-after --summary "1,697 passed, 2 skipped in 452.1s" \\
        --total-seconds 540 --command "make test"

A result file holds one headline measurement: its figures, and for every run behind them the date, the machine,
the exact command, the commit and a note ("runs"; each engine or table names its run). `collect` turns a
`cuemem bench` output directory (its results.json, cuemem/bench/report.py) into one, `--merge` adds its engines to
an existing file (a new run of some engines beside older ones). Rendering is deterministic: the same files give
the same bytes, and `render --check` fails when BENCHMARKS.md (or README.md's block between
<!-- bench:engines --> and <!-- /bench:engines -->) is not what the files give. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_render import ENGINE_LINES, HEADLINE, fmt, render

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- bench:engines -->", "<!-- /bench:engines -->"
FORMAT = 1  # the result files' format version


def load_results(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """Every result file in the folder, by file name (the order never depends on the file system)."""
    results = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data.setdefault("name", path.stem)
        results.append(data)
    return results


def dump(data: dict[str, Any]) -> str:
    """A result file's text: sorted-free, indented JSON as written (keys in insertion order), one final newline."""
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def git_commit(root: Path = ROOT) -> str | None:
    """The working tree's commit (short), or None outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def machine() -> str:
    """This machine in words: cores, memory, Python."""
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    return (
        f"{os.cpu_count()} cores{memory}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"
    )


def collect(
    bench_dir: Path,
    name: str,
    command: str,
    *,
    results_dir: Path = RESULTS,
    date: str | None = None,
    machine_text: str | None = None,
    commit: str | None = None,
    note: str = "",
    kind: str | None = None,
    title: str | None = None,
    heading: str | None = None,
    run_id: str | None = None,
    merge: bool = False,
    engines: list[str] | None = None,
) -> Path:
    """Write (or, with merge, update) results_dir/name.json from a `cuemem bench` output directory's results.json:
    every engine's retrieval, per-category, cost, answer and schema blocks, as the harness wrote them."""
    source = bench_dir / "results.json"
    bench = json.loads(source.read_text(encoding="utf-8"))
    chosen = {e: v for e, v in bench["engines"].items() if engines is None or e in engines}
    if not chosen:
        raise SystemExit(f"{source}: none of the engines {engines} is in it")
    kind = kind or ("answers" if any(v.get("answer") for v in chosen.values()) else "retrieval")
    date = date or dt.datetime.fromtimestamp(source.stat().st_mtime, dt.UTC).date().isoformat()
    run = {
        "date": date,
        "machine": machine_text or machine(),
        "command": command,
        "commit": commit if commit is not None else git_commit(),
        "source": f"collected from {bench_dir}/results.json by benchmarks/reference.py collect",
        "note": note,
    }
    path = results_dir / f"{name}.json"
    if merge and path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in ("dataset", "split", "budget_tokens"):
            if key in data and data[key] != bench.get(key):
                raise SystemExit(f"{path}: {key} is {data[key]!r}, the run's is {bench.get(key)!r}: not merged")
    else:
        data = {
            "format": FORMAT,
            "name": name,
            "kind": kind,
            "section": kind,
            "order": 100,
            "heading": heading or _title(bench),
            "title": title or _title(bench),
            "note": "",
            "dataset": bench["dataset"],
            "split": bench.get("split"),
            "types": bench.get("types") or [],
            "budget_tokens": bench.get("budget_tokens"),
            "questions": None,
            "settings": bench.get("settings") or {},
            "runs": {},
            "engines": {},
        }
        if path.exists():  # a replaced file keeps its place and wording in BENCHMARKS.md
            kept = json.loads(path.read_text(encoding="utf-8"))
            data.update({k: kept[k] for k in ("section", "order", "heading", "title") if k in kept})
    run_id = run_id or _next_id(data["runs"])
    data["runs"][run_id] = run
    for engine, value in chosen.items():
        data["engines"][engine] = {"run": run_id, **{k: v for k, v in value.items() if k != "run"}}
    first = next(iter(chosen.values()))
    data["questions"] = first.get("retrieval", {}).get("questions", data.get("questions"))
    if title:
        data["title"] = title
    if heading:
        data["heading"] = heading
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(data), encoding="utf-8")
    return path


def _title(bench: dict[str, Any]) -> str:
    names = {"locomo": "LoCoMo", "longmemeval": "LongMemEval-S", "came": "Look-alike conversations (came)"}
    split = f", {bench['split']} split" if bench.get("split") else ", every conversation"
    types = f" ({', '.join(bench['types'])})" if bench.get("types") else ""
    return f"{names.get(bench['dataset'], bench['dataset'])}{split}{types}"


def _next_id(runs: dict[str, Any]) -> str:
    """The next free run id: r1, r2, ..."""
    n = 1
    while f"r{n}" in runs:
        n += 1
    return f"r{n}"


SUMMARY = re.compile(r"([\d,]+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
DURATION = re.compile(r"in ([\d.]+)s")


def parse_pytest_summary(line: str) -> dict[str, Any]:
    """pytest's last line ("1697 passed, 2 skipped in 802.33s (0:13:22)") as counts and seconds."""
    counts: dict[str, int] = {}
    for n, word in SUMMARY.findall(line):
        counts["error" if word.startswith("error") else word] = int(n.replace(",", ""))
    seconds = DURATION.search(line)
    return {
        "passed": counts.get("passed", 0),
        "skipped": counts.get("skipped", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0),
        "pytest_seconds": float(seconds.group(1)) if seconds else None,
    }


def suite(
    name: str,
    summary: str,
    command: str,
    *,
    total_seconds: float | None = None,
    results_dir: Path = RESULTS,
    label: str = "after",
    date: str | None = None,
    machine_text: str | None = None,
    commit: str | None = None,
    note: str = "",
    workers: int | None = None,
) -> Path:
    """Write results_dir/name.json, a test-suite timing, from pytest's summary line and the wall time in all. An
    existing file keeps its earlier runs (the history of what made the suite slower or faster): the new one is
    added as the next run and becomes the headline."""
    figures = parse_pytest_summary(summary)
    path = results_dir / f"{name}.json"
    data = (
        json.loads(path.read_text(encoding="utf-8"))
        if path.exists()
        else {
            "format": FORMAT,
            "name": name,
            "kind": "suite",
            "title": f"The test suite, {label}",
            "section": "suite",
            "label": label,
            "note": "",
            "runs": {},
        }
    )
    run_id = f"r{len(data['runs']) + 1}"
    data["runs"][run_id] = {
        "date": date or dt.datetime.now(dt.UTC).date().isoformat(),
        "machine": machine_text or machine(),
        "command": command,
        "commit": commit if commit is not None else git_commit(),
        "source": "measured; pytest's summary line: " + summary.strip(),
        "note": note,
    }
    data["suite"] = {**figures, "total_seconds": total_seconds, "workers": workers, "run": run_id}
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(data), encoding="utf-8")
    return path


def readme_block(results: list[dict[str, Any]]) -> str:
    """README.md's engine table: each engine, what it does in a line, and its LoCoMo test recall@10 (one budget)."""
    headline = next((r for r in results if r["name"] == HEADLINE), None)
    engines = headline["engines"] if headline else {}
    lines = [
        "| engine | what it does | LoCoMo test R@10 |",
        "|---|---|---:|",
    ]
    for engine, what in ENGINE_LINES.items():
        recall = engines.get(engine, {}).get("retrieval", {}).get("recall@10")
        lines.append(f"| `{engine}` | {what} | {fmt(recall, '.3f')} |")
    if headline:
        full = engines.get("fullcontext", {}).get("retrieval", {}).get("recall@budget")
        lines += [
            "",
            f"Recall@10 of the evidence turns on {headline['heading']} ({fmt(headline.get('questions'), 'd')}"
            f" questions), budget {headline['budget_tokens']:,} tokens, every engine at its defaults; from"
            " [BENCHMARKS.md](BENCHMARKS.md#locomo-test-split), which `make bench-report` writes with this table."
            + (f" `fullcontext` has no ranking: its recall within the budget is {fmt(full, '.3f')}." if full else ""),
        ]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str | None:
    """text with the part between the engine-table markers replaced by block; None when the markers are absent."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[: start + len(BEGIN)] + "\n" + block + "\n" + text[end:]


def render_all(
    results_dir: Path = RESULTS, benchmarks: Path = BENCHMARKS, readme: Path = README, check: bool = False
) -> list[str]:
    """Write (or, with check, compare) BENCHMARKS.md and README.md's marked block; the paths that differ(ed)."""
    results = load_results(results_dir)
    wanted = {benchmarks: render(results)}
    if readme.exists():
        updated = replace_block(readme.read_text(encoding="utf-8"), readme_block(results))
        if updated is not None:
            wanted[readme] = updated
    differ = []
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            differ.append(str(path))
            if not check:
                path.write_text(text, encoding="utf-8")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("render", help="write BENCHMARKS.md (and README.md's engine block) from the result files")
    r.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    r.add_argument("--results", type=Path, default=RESULTS)
    r.add_argument("--out", type=Path, default=BENCHMARKS)
    r.add_argument("--readme", type=Path, default=README)
    c = sub.add_parser("collect", help="a `cuemem bench` output directory into a result file")
    c.add_argument("bench_dir", type=Path)
    c.add_argument("--name", required=True, help="the result file's name, e.g. retrieval-locomo-test")
    c.add_argument("--command", required=True, help="the exact command that made the directory")
    c.add_argument("--date", help="YYYY-MM-DD (default: results.json's modification date)")
    c.add_argument("--machine", help="the machine in words (default: this one's cores, memory, Python)")
    c.add_argument("--commit", help="default: git rev-parse --short HEAD")
    c.add_argument("--note", default="")
    c.add_argument("--kind", choices=("retrieval", "answers"), help="default: answers when the run answered")
    c.add_argument("--title", help="the sentence under the table's heading (default: dataset and split)")
    c.add_argument("--heading", help="the table's heading (default: dataset and split)")
    c.add_argument("--engines", help="comma list: only these engines of the run")
    c.add_argument("--run-id", help="the run's id in the file (default: r1, r2, ...)")
    c.add_argument("--merge", action="store_true", help="add the engines to the existing file (other runs kept)")
    c.add_argument("--results", type=Path, default=RESULTS)
    s = sub.add_parser("suite", help="a test-suite timing into a result file (suite-*.json)")
    s.add_argument("--name", required=True, help="e.g. suite-after")
    s.add_argument("--summary", required=True, help='pytest\'s last line, e.g. "1697 passed, 2 skipped in 802.3s"')
    s.add_argument("--total-seconds", type=float, help="wall time of the whole command (set-up included)")
    s.add_argument("--command", required=True)
    s.add_argument("--label", default="after", help="before / after")
    s.add_argument("--workers", type=int, help="pytest-xdist workers, if any")
    s.add_argument("--date")
    s.add_argument("--machine")
    s.add_argument("--commit")
    s.add_argument("--note", default="")
    s.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.what == "render":
        differ = render_all(args.results, args.out, args.readme, check=args.check)
        for path in differ:
            print(f"{path} {'differs from the result files' if args.check else 'written'}")
        return 1 if args.check and differ else 0
    if args.what == "collect":
        path = collect(
            args.bench_dir,
            args.name,
            args.command,
            results_dir=args.results,
            date=args.date,
            machine_text=args.machine,
            commit=args.commit,
            note=args.note,
            kind=args.kind,
            title=args.title,
            heading=args.heading,
            run_id=args.run_id,
            merge=args.merge,
            engines=args.engines.split(",") if args.engines else None,
        )
    else:
        path = suite(
            args.name,
            args.summary,
            args.command,
            total_seconds=args.total_seconds,
            results_dir=args.results,
            label=args.label,
            date=args.date,
            machine_text=args.machine,
            commit=args.commit,
            note=args.note,
            workers=args.workers,
        )
    print(f"wrote {path}; now `make bench-report`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
