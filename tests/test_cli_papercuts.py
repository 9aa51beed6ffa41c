"""Issue 32's papercuts of the command line, each as a newcomer met it: counted nouns, doubled words, errors split
over lines off a terminal, stores created by reading, JSON files read line by line, misplaced global options,
and benchmark data nobody said where to get."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuemem.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def cli(tmp_path: Path, *args: str):
    return runner.invoke(app, ["--db", str(tmp_path / "cli.db"), "--embedder", "hashing", *args])


def run_cuemem(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m cuemem ARGS` in its own process, its output captured (not a terminal), rich's width not set."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "CUEMEM_DB")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "cuemem", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_one_of_a_thing_is_said_in_the_singular(tmp_path):
    """ "deleted 1 turns", "1 conversations"."""
    r = cli(tmp_path, "add", "the only turn", "-u", "maya", "--id", "t1")
    assert r.exit_code == 0
    r = cli(tmp_path, "namespaces")
    assert r.output.split() == ["user=maya", "1", "turn"]
    r = cli(tmp_path, "search", "only turn", "-u", "maya", "--use", "bm25")
    assert r.exit_code == 0 and "1 hit," in r.stderr and "1 hits" not in r.output
    r = cli(tmp_path, "export", "-o", str(tmp_path / "out.jsonl"))
    assert r.exit_code == 0 and r.stderr.endswith("exported 1 turn\n")
    r = cli(tmp_path, "reindex")
    assert r.exit_code == 0 and "reindexed 1 turn with" in r.output
    r = runner.invoke(
        app, ["--db", str(tmp_path / "b.db"), "--embedder", "hashing", "import", str(tmp_path / "out.jsonl")]
    )
    assert r.exit_code == 0 and "added 1 turn, 0 already stored" in r.output
    r = cli(tmp_path, "delete", "-u", "maya", "t1")
    assert r.exit_code == 0 and r.output == "deleted 1 turn\n"
    assert cli(tmp_path, "add", "again", "-u", "maya", "--id", "t2").exit_code == 0
    r = cli(tmp_path, "delete", "--all", "-u", "maya")
    assert r.output.splitlines() == ["deleted user=maya: 1 turn", "deleted 1 turn in 1 namespace"]
    r = runner.invoke(app, ["gen", "came", "--size", "S", "--seed", "3", "-o", str(tmp_path / "c.json")])
    assert r.exit_code == 0 and ": 1 conversation (S × seeds 3)," in r.output and "conversations" not in r.output


def test_a_json_error_says_where_once(tmp_path):
    """ "Unterminated string starting at at column 41": json's message ends in "starting at"."""
    path = tmp_path / "turns.jsonl"
    path.write_text('{"id": "a", "text": "kept"}\n{"id": "b", "text": "never closed}\n')
    r = cli(tmp_path, "ingest", str(path), "-u", "u")
    assert r.exit_code == 1 and "added 1 turn," in r.output
    assert "2: malformed JSON: Unterminated string starting at column 21" in r.stderr and "at at" not in r.output
    r = cli(tmp_path, "ingest", str(path), "-u", "u", "--json")
    assert json.loads(r.stdout)["errors"] == [[2, "malformed JSON: Unterminated string starting at column 21"]]
    locomo = tmp_path / "broken.json"
    locomo.write_text('[{"conversation": {"session_1": "never closed}}]')
    r = cli(tmp_path, "ingest", str(locomo))
    assert r.exit_code == 1 and "Unterminated string starting at line 1" in r.output and "at at" not in r.output


def test_errors_are_one_line_off_a_terminal(tmp_path):
    """Off a terminal rich wrapped messages at 80 columns: a command quoted in an error was split in two."""
    deep = tmp_path / ("a-folder-with-a-long-name-" * 4)
    deep.mkdir()
    store = deep / "memories.db"
    r = run_cuemem("--db", str(store), "search", "where is the hotel", "-u", "maya")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"Error: no store at {store}: nothing was ever added there (check --db or CUEMEM_DB; add or ingest creates"
        " a store)"
    ]
    assert not store.exists()
    r = run_cuemem("search", "where is the hotel", "-u", "maya", "--db", str(store))  # a usage error, too
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "Usage: cuemem search [OPTIONS] {query}",
        f"Error: --db is a global option: put it before the command: cuemem --db {store} search …",
    ]


READERS = [
    ["search", "hotel", "-u", "maya"],
    ["ask", "which hotel?", "-u", "maya"],
    ["get", "t1", "-u", "maya"],
    ["export"],
    ["export", "-o", "out.jsonl"],
    ["stats", "-u", "maya"],
    ["profile", "-u", "maya"],
    ["history", "-u", "maya"],
    ["namespaces"],
    ["reindex"],
    ["delete", "-u", "maya", "t1"],
]


@pytest.mark.parametrize("args", READERS, ids=lambda args: args[0] + ("-o" if "-o" in args else ""))
def test_reading_a_store_that_does_not_exist_creates_nothing(tmp_path, monkeypatch, args):
    """`cuemem --db typo.db search …` created typo.db, then said the namespace was unknown."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["--db", "typo.db", "--embedder", "hashing", *args])
    assert r.exit_code == 1 and r.output.startswith("Error: no store at typo.db: nothing was ever added there")
    assert r.output.count("\n") == 1 and sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_json_file_that_is_not_locomo_is_one_clear_error(tmp_path):
    """A pretty-printed JSON file of another shape was read as JSONL: a rejection for each of its lines."""
    other = tmp_path / "settings.json"
    other.write_text(json.dumps({"name": "not a conversation", "items": [1, 2, 3]}, indent=2))
    r = cli(tmp_path, "ingest", str(other), "-u", "u")
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "rejected" not in r.output
    assert "sample 0 has no 'conversation' object: not LoCoMo format" in r.output and "--format jsonl" in r.output
    words = tmp_path / "notes.json"
    words.write_text("just some\nwords\n")
    r = cli(tmp_path, "ingest", str(words), "-u", "u")
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "not valid JSON" in r.output
    r = cli(tmp_path, "ingest", str(words), "-u", "u", "--format", "jsonl")  # asked for: read line by line
    assert r.exit_code == 1 and "2 rejected in all" in r.output
    lines = tmp_path / "turns.json"  # JSON lines under a .json name are still JSON lines
    lines.write_text('{"id": "a", "text": "first"}\n{"id": "b", "text": "second"}\n')
    r = cli(tmp_path, "ingest", str(lines), "-u", "u")
    assert r.exit_code == 0 and "added 2 turns" in r.output
    r = cli(tmp_path, "ingest", str(tmp_path / "missing.jsonl"), "-u", "u")
    assert r.exit_code == 1 and "no file" in r.output


def test_a_global_option_after_the_command_gets_a_hint(tmp_path):
    r = runner.invoke(app, ["search", "x", "-u", "u", "--db", "f.db"], prog_name="cuemem")
    assert r.exit_code == 2 and "No such option" not in r.output
    assert "Error: --db is a global option: put it before the command: cuemem --db f.db search …" in r.output
    r = runner.invoke(app, ["search", "x", "-u", "u", "--db=my store.db"], prog_name="cuemem")
    assert "cuemem --db 'my store.db' search …" in r.output
    r = runner.invoke(app, ["keys", "list", "--engine", "bm25"], prog_name="cuemem")
    assert (
        r.exit_code == 2
        and "--engine is a global option: put it before the command: cuemem --engine bm25 keys list" in r.output
    )
    r = runner.invoke(app, ["search", "x", "-u", "u", "--jsn"])  # other unknown options: as before, one line
    assert r.exit_code == 2 and "Error: No such option: --jsn" in r.output and "--json" in r.output
    r = runner.invoke(
        app, ["--embedder", "hashing", "demo", "--db", str(tmp_path / "d.db"), "--no-answers", "-k", "1"]
    )  # demo's own --db
    assert r.exit_code == 0 and (tmp_path / "d.db").exists()


def test_bench_without_data_says_where_the_datasets_come_from(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_DATASETS", str(tmp_path / "nowhere"))
    r = cli(tmp_path, "bench", "locomo", "--engines", "bm25", "--out", str(tmp_path / "out"))
    assert r.exit_code == 1 and r.output.count("\n") == 1
    for said in (
        "github.com/snap-research/locomo",
        "data/locomo10.json",
        "--data FILE",
        "CUEMEM_DATASETS",
        "datasets/",
    ):
        assert said in r.output
    assert str(tmp_path / "nowhere" / "locomo" / "locomo10.json") in r.output
    r = cli(tmp_path, "bench", "longmemeval", "--engines", "bm25", "--out", str(tmp_path / "out"))
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "github.com/xiaowu0162/LongMemEval" in r.output
    assert "--data FILE" in r.output and "CUEMEM_DATASETS" in r.output


def test_python_dash_m_runs_the_command():
    for module in ("cuemem", "cuemem.cli"):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        r = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env, check=False
        )
        assert r.returncode == 0 and "Usage: cuemem" in r.stdout and "search" in r.stdout, (module, r.stderr)
