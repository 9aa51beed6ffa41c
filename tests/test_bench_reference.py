"""The benchmark reference (benchmarks/reference.py): BENCHMARKS.md is rendered from benchmarks/results/*.json,
byte for byte; a `cuemem bench` output directory becomes a result file; README.md's engine block is rewritten."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import reference  # noqa: E402
from reference_render import ENGINE_LINES, answers_section, render  # noqa: E402

from cuemem.bench.protocol import BenchConfig  # noqa: E402
from cuemem.bench.report import summarize  # noqa: E402


def test_render_is_deterministic_and_the_committed_files_are_current() -> None:
    results = reference.load_results()
    assert render(results) == render(reference.load_results())
    assert render(results) == render(list(reversed(results)))  # the order comes from the files, not the list
    assert reference.render_all(check=True) == [], "run `make bench-report` and commit BENCHMARKS.md"
    assert reference.main(["render", "--check"]) == 0


def test_every_result_file_has_its_runs_dated_with_machine_command_and_source() -> None:
    results = reference.load_results()
    names = {r["name"] for r in results}
    assert {"retrieval-locomo-test", "retrieval-came-test", "suite-before", "suite-after"} <= names
    for r in results:
        assert r["kind"] in ("retrieval", "answers", "tables", "suite"), r["name"]
        assert r["runs"], r["name"]
        for run in r["runs"].values():
            assert {"date", "machine", "command", "commit", "source", "note"} <= set(run), r["name"]
            assert run["source"], r["name"]
        for item in [*r.get("engines", {}).values(), *r.get("tables", [])]:
            assert item.get("run", next(iter(r["runs"]))) in r["runs"], r["name"]


def test_check_fails_when_benchmarks_md_is_stale(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    readme = tmp_path / "README.md"
    assert reference.render_all(reference.RESULTS, out, readme) == [str(out)]  # written
    assert reference.render_all(reference.RESULTS, out, readme, check=True) == []
    out.write_text(out.read_text() + "edited by hand\n")
    args = ["render", "--check", "--out", str(out), "--readme", str(readme)]
    assert reference.main(args) == 1


def _bench_dir(tmp_path: Path, answer: bool = False) -> Path:
    """A tiny `cuemem bench` output directory, its results.json made by the harness's own summarize."""
    config = BenchConfig(
        dataset="locomo", data=tmp_path / "locomo10.json", out=tmp_path / "out", engines=["bm25"], split="test"
    )
    config.answer = answer

    def question(i: int, category: str, recall: float) -> dict:
        q = {"id": f"q{i}", "category": category, "adversarial": category == "5", "evidence": ["D1:1"]}
        q |= {f"recall@{k}": recall for k in (1, 5, 10, 20, 50)}
        q |= {"recall@budget": 1.0, "ndcg@10": recall, "latency_ms": 2.0 + i, "context_tokens": 100}
        if answer:
            q |= {"locomo_f1": 0.5, "set_f1": 0.5, "bleu1": 0.25, "answer_ms": 1000.0, "model_tokens": 300}
        return q

    conv = {
        "conversation": "conv-44",
        "turns": 10,
        "ingest_seconds": 0.5,
        "questions": [question(0, "1", 1.0), question(1, "2", 0.0), question(2, "5", 1.0)],
    }
    results = summarize(config, {"bm25": [conv], "hybrid": [conv]})
    config.out.mkdir()
    (config.out / "results.json").write_text(json.dumps(results))
    return config.out


def test_collect_turns_a_bench_directory_into_a_result_file(tmp_path: Path) -> None:
    bench = _bench_dir(tmp_path)
    results = tmp_path / "results"
    path = reference.collect(
        bench,
        "retrieval-locomo-test",
        "cuemem bench locomo --split test --engines bm25,hybrid",
        results_dir=results,
        date="2026-11-30",
        machine_text="a test machine",
        commit="abc1234",
        note="synthetic",
    )
    data = json.loads(path.read_text())
    assert data["kind"] == "retrieval" and data["dataset"] == "locomo" and data["split"] == "test"
    assert data["runs"] == {
        "r1": {
            "date": "2026-11-30",
            "machine": "a test machine",
            "command": "cuemem bench locomo --split test --engines bm25,hybrid",
            "commit": "abc1234",
            "source": f"collected from {bench}/results.json by benchmarks/reference.py collect",
            "note": "synthetic",
        }
    }
    bm25 = data["engines"]["bm25"]
    assert bm25["run"] == "r1"
    assert bm25["retrieval"]["recall@10"] == 0.5 and bm25["retrieval"]["questions"] == 2
    assert bm25["by_category"]["1"]["recall@10"] == 1.0
    text = render(reference.load_results(results))
    assert "| `bm25` | **0.500** | **0.500** | **1.000** |" in text and "abc1234" in text

    # a later run of one engine is merged beside the first: its own run, the other engine kept
    reference.main(
        [
            "collect",
            str(bench),
            "--name",
            "retrieval-locomo-test",
            "--command",
            "again",
            "--engines",
            "hybrid",
            "--merge",
            "--date",
            "2026-12-01",
            "--machine",
            "m",
            "--commit",
            "def5678",
            "--results",
            str(results),
        ]
    )
    merged = json.loads(path.read_text())
    assert set(merged["runs"]) == {"r1", "r2"} and merged["runs"]["r2"]["command"] == "again"
    assert merged["engines"]["hybrid"]["run"] == "r2" and merged["engines"]["bm25"]["run"] == "r1"

    # a new run replacing the file (no --merge) keeps the file's place and wording in BENCHMARKS.md
    merged |= {"order": 10, "title": "Our own words", "heading": "LoCoMo test"}
    path.write_text(json.dumps(merged))
    reference.collect(bench, "retrieval-locomo-test", "third", results_dir=results, date="2026-12-02", commit="0")
    replaced = json.loads(path.read_text())
    assert set(replaced["runs"]) == {"r1"} and replaced["runs"]["r1"]["command"] == "third"
    assert (replaced["order"], replaced["title"], replaced["heading"]) == (10, "Our own words", "LoCoMo test")


def test_collect_marks_answer_runs_and_renders_their_scores(tmp_path: Path) -> None:
    path = reference.collect(
        _bench_dir(tmp_path, answer=True),
        "answers-x",
        "cuemem bench locomo --answer",
        results_dir=tmp_path / "results",
        date="2026-11-30",
        machine_text="m",
        commit="",
    )
    data = json.loads(path.read_text())
    assert data["kind"] == "answers" and data["engines"]["bm25"]["answer"]["locomo_f1"] == 0.5
    text = render(reference.load_results(tmp_path / "results"))
    assert "## Answers" in text and "LoCoMo F1 (cat 1–4)" in text


def test_suite_result_from_pytest_summary(tmp_path: Path) -> None:
    assert reference.parse_pytest_summary("1697 passed, 2 skipped in 802.33s (0:13:22)") == {
        "passed": 1697,
        "skipped": 2,
        "failed": 0,
        "pytest_seconds": 802.33,
    }
    assert reference.parse_pytest_summary("= 3 failed, 1,700 passed, 1 error in 5.0s =")["failed"] == 4
    path = reference.suite(
        "suite-after", "1700 passed, 2 skipped in 420.0s", "make test", total_seconds=500, results_dir=tmp_path
    )
    data = json.loads(path.read_text())
    assert data["suite"]["pytest_seconds"] == 420.0 and data["runs"]["r1"]["command"] == "make test"
    assert "| **after** |" in render([data]) and "7 min" in render([data])
    again = reference.suite("suite-after", "1701 passed in 400.0s", "make test", results_dir=tmp_path)
    data = json.loads(again.read_text())  # a later timing is added: the earlier run is kept, the new one leads
    assert list(data["runs"]) == ["r1", "r2"] and data["suite"]["run"] == "r2" and data["suite"]["passed"] == 1701


@pytest.mark.parametrize("around", [("intro\n", "\nrest\n"), ("", "")])
def test_readme_block_is_replaced_between_the_markers_only(tmp_path: Path, around: tuple[str, str]) -> None:
    before, after = around
    readme = tmp_path / "README.md"
    readme.write_text(f"{before}{reference.BEGIN}\nold table\n{reference.END}{after}")
    out = tmp_path / "BENCHMARKS.md"
    reference.render_all(reference.RESULTS, out, readme)
    text = readme.read_text()
    assert text.startswith(before + reference.BEGIN + "\n| engine | what it does | LoCoMo test R@10 |")
    assert text.endswith(reference.END + after) and "old table" not in text
    assert all(f"| `{engine}` |" in text for engine in ENGINE_LINES)
    locomo = json.loads((reference.RESULTS / "retrieval-locomo-test.json").read_text())
    stitch = f"{locomo['engines']['stitch']['retrieval']['recall@10']:.3f}"  # the figure the result file holds
    assert "| `stitch` | contextual intent" in text and f"| {stitch} |" in text
    assert reference.render_all(reference.RESULTS, out, readme, check=True) == []
    readme.write_text(text.replace(stitch, "0.9"))
    assert reference.render_all(reference.RESULTS, out, readme, check=True) == [str(readme)]


def test_readme_without_markers_is_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# cuemem\nno markers\n")
    assert reference.replace_block(readme.read_text(), "x") is None
    reference.render_all(reference.RESULTS, tmp_path / "BENCHMARKS.md", readme)
    assert readme.read_text() == "# cuemem\nno markers\n"


def test_the_topic_pages_benchmarks_md_links_exist() -> None:
    from reference_render import OLD_SECTIONS, TOPICS

    pages = set(TOPICS) | {page for _, page in OLD_SECTIONS}
    assert all((ROOT / "docs" / "benchmarks" / f"{page}.md").is_file() for page in pages)
    assert {p.stem for p in (ROOT / "docs" / "benchmarks").glob("*.md")} <= set(TOPICS)


def test_an_answer_table_shows_the_structured_scores_the_harness_keeps_with_retrieval() -> None:
    """came's EM, contains and token F1 sit in the harness's retrieval block: the answers table shows them."""
    result = {
        "name": "answers-came",
        "heading": "Look-alike answers",
        "title": "t",
        "runs": {"r1": {"date": "2026-11-27", "machine": "m", "command": "c", "commit": "", "source": "s"}},
        "engines": {
            "stitch": {
                "run": "r1",
                "retrieval": {"recall@10": 0.84, "em": 0.244, "contains": 0.277, "f1": 0.347},
                "answer": {"questions": 632, "answer_seconds_p50": 2.4},
            }
        },
    }
    text = "\n".join(answers_section(result))
    assert "| engine | questions | EM | contains | token F1 | answer s p50 | R@10 | run |" in text
    assert "| `stitch` | 632 | 0.24 | 0.28 | 0.35 | 2.4 | 0.840 | r1 |" in text
