"""Issue 11, the command line's side: hostile and careless input at the edges (export targets, config files found
in the working directory, rich markup and terminal escapes in stored data, huge --json output)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuemem.cli import app

runner = CliRunner()


def cli(tmp_path: Path, *args: str, **kwargs):
    return runner.invoke(app, ["--db", str(tmp_path / "cli.db"), "--embedder", "hashing", *args], **kwargs)


@pytest.fixture
def no_user_config(tmp_path, monkeypatch):
    """No config file of the machine's user, nor CUEMEM_CONFIG, takes part."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("CUEMEM_CONFIG", raising=False)


# ---------------------------------------------------------------- exports never destroy data


def test_export_onto_the_store_or_its_side_files_is_refused(tmp_path):
    """`cuemem --db m.db export -o m.db` truncated the store to 0 bytes."""
    assert cli(tmp_path, "add", "precious", "-u", "maya", "--id", "p1").exit_code == 0
    db = tmp_path / "cli.db"
    before = db.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(db)
    hard = tmp_path / "hard.jsonl"
    os.link(db, hard)
    for target in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), link, hard, tmp_path / "." / "cli.db"):
        r = cli(tmp_path, "export", "-o", str(target))
        assert r.exit_code == 1 and "store's own file" in r.output and "Traceback" not in r.output, (target, r.output)
    assert db.read_bytes() == before
    r = cli(tmp_path, "get", "p1", "-u", "maya")
    assert r.exit_code == 0 and json.loads(r.stdout)["text"] == "precious"
    store_link = tmp_path / "store-link.db"  # the store reached by a symlink: its side files are the real ones'
    store_link.symlink_to(db)
    r = runner.invoke(app, ["--db", str(store_link), "export", "-o", f"{db}-wal"])
    assert r.exit_code == 1 and "store's own file" in r.output


def test_a_failed_export_leaves_the_old_file_as_it_was(tmp_path):
    """`export -o notes.txt -u typo` emptied notes.txt before finding that the user does not exist."""
    assert cli(tmp_path, "add", "a note", "-u", "maya", "--id", "n1").exit_code == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("my own notes\n")
    r = cli(tmp_path, "export", "-o", str(notes), "-u", "typo")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert notes.read_text() == "my own notes\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "notes" in p.name) == ["notes.txt"]  # no temporary left
    os.chmod(notes, 0o640)
    r = cli(tmp_path, "export", "-o", str(notes), "-u", "maya")
    assert r.exit_code == 0 and "exported 1 turn\n" in r.output
    assert [json.loads(line)["id"] for line in notes.read_text().splitlines()] == ["n1"]
    assert notes.stat().st_mode & 0o777 == 0o640  # replaced, with the mode it had
    fresh = tmp_path / "fresh.jsonl"
    assert cli(tmp_path, "export", "-o", str(fresh)).exit_code == 0 and fresh.read_text().count("\n") == 1
    r = cli(tmp_path, "export", "-o", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert r.exit_code == 1 and "Traceback" not in r.output


# ---------------------------------------------------------------- config files only when named


def test_a_config_file_in_the_working_directory_is_not_read_unless_named(tmp_path, monkeypatch, no_user_config):
    """A cloned directory's ./cuemem.toml could send turn text and OPENAI_API_KEY to any server."""
    from cuemem import Settings

    workdir = tmp_path / "cloned"
    workdir.mkdir()
    (workdir / "cuemem.toml").write_text('llm_base_url = "http://attacker.example/v1"\nk = 1\n')
    monkeypatch.chdir(workdir)
    assert Settings.load(None).llm_base_url == "https://api.openai.com/v1"
    for i in range(3):
        assert cli(tmp_path, "add", f"red thing {i}", "-u", "u", "--id", f"t{i}").exit_code == 0
    r = cli(tmp_path, "search", "red", "-u", "u", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["hits"]) == 3  # k = 1 was not applied
    assert "using config" not in r.stderr
    r = runner.invoke(
        app,
        [
            "--config",
            "cuemem.toml",
            "--db",
            str(tmp_path / "cli.db"),
            "--embedder",
            "hashing",
            "search",
            "red",
            "-u",
            "u",
            "--json",
        ],
    )
    assert r.exit_code == 0 and len(json.loads(r.stdout)["hits"]) == 1  # named: applied ...
    assert r.stderr.count("using config cuemem.toml") == 1  # ... and said, once
    monkeypatch.setenv("CUEMEM_CONFIG", str(workdir / "cuemem.toml"))
    assert Settings.load(None).llm_base_url == "http://attacker.example/v1"
    r = cli(tmp_path, "search", "red", "-u", "u", "--json")
    assert len(json.loads(r.stdout)["hits"]) == 1 and f"using config {workdir / 'cuemem.toml'}" in r.stderr


def test_the_user_config_file_is_still_read_and_named(tmp_path, monkeypatch, no_user_config):
    user_config = tmp_path / "xdg-config" / "cuemem" / "config.toml"
    user_config.parent.mkdir(parents=True)
    user_config.write_text("k = 2\n")
    monkeypatch.chdir(tmp_path)
    for i in range(3):
        assert cli(tmp_path, "add", f"red thing {i}", "-u", "u", "--id", f"t{i}").exit_code == 0
    r = cli(tmp_path, "search", "red", "-u", "u", "--json")
    assert len(json.loads(r.stdout)["hits"]) == 2 and f"using config {user_config}" in r.stderr


# ---------------------------------------------------------------- stored data is printed as data

HOSTILE_IDS = ["x[/]y", "[blink red]mallory", "[/]", "a\x1b[2Jb"]
USER_IDS = HOSTILE_IDS[:3]  # a namespace id with a control character is refused (Namespace); a turn id may hold one
ESCAPES = "clear\x1b[2J title\x1b]0;pwned\x07 csi\x9b31m bidi\u202eevil"


def test_markup_and_escapes_in_ids_and_text_print_literally(tmp_path, no_user_config):
    """A turn or user id with `[/]` crashed add, namespaces, search, history and delete with MarkupError;
    `[blink red]mallory` was listed as `mallory`; ANSI escapes in stored text reached the terminal raw."""
    r = cli(tmp_path, "add", "a turn", "-u", HOSTILE_IDS[3])
    assert r.exit_code == 1 and "U+001B" in r.output and "\x1b" not in r.output  # refused, said, not echoed raw
    for n, user in enumerate(USER_IDS):
        for turn_id in HOSTILE_IDS:
            r = cli(tmp_path, "add", f"hostile {ESCAPES} [bold]{n}", "-u", user, "--id", turn_id)
            assert r.exit_code == 0, r.output
            assert "\x1b" not in r.output and ("added " + turn_id.replace("\x1b", "\\x1b")) in r.output
        r = cli(tmp_path, "search", "hostile clear", "-u", user, "--use", "bm25")
        assert r.exit_code == 0, r.output
        assert "\x1b" not in r.output and "\x9b" not in r.output and "\u202e" not in r.output
        assert "x[/]y" in r.output and "\\x1b[2J" in r.output and "\\x1b]0;pwned\\x07" in r.output
        assert "\\x9b31m" in r.output and "\\u202eevil" in r.output and "[bold]" in r.output
        r = cli(tmp_path, "history", "-u", user)
        assert r.exit_code == 0 and "\x1b" not in r.output and all(json.loads(line) for line in r.stdout.splitlines())
        r = cli(tmp_path, "get", "[/]", "-u", user)
        assert r.exit_code == 0 and "\x1b" not in r.output and "\\u001b[2J" in r.output
    r = cli(tmp_path, "namespaces")
    assert r.exit_code == 0 and "\x1b" not in r.output
    listed = {" ".join(line.split()) for line in r.output.splitlines()}  # (rich expands the tab)
    assert {"user=[blink red]mallory 4 turns", "user=x[/]y 4 turns", "user=[/] 4 turns"} <= listed
    r = cli(tmp_path, "get", "[red]nope[/]", "-u", "[/]")  # an error message quoting user input
    assert r.exit_code == 1 and "[red]nope[/]" in r.output and "Traceback" not in r.output
    r = cli(tmp_path, "delete", "-u", "[/]", "x[/]y", "[blink red]mallory")
    assert r.exit_code == 0 and "deleted 2 turns" in r.output
    r = cli(tmp_path, "delete", "--all", "-u", "[blink red]mallory")
    assert r.exit_code == 0 and "deleted user=[blink red]mallory: 4 turns" in r.output
    r = cli(tmp_path, "export", "-u", "x[/]y")  # JSONL on stdout: escapes written as JSON escapes
    assert r.exit_code == 0 and "\x1b" not in r.stdout and "\x9b" not in r.stdout and "\u202e" not in r.stdout
    assert {json.loads(line)["id"] for line in r.stdout.splitlines()} == set(HOSTILE_IDS)
    assert all(json.loads(line)["text"].startswith(f"hostile {ESCAPES}") for line in r.stdout.splitlines())


def test_rejected_lines_quoting_markup_are_reported_literally(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok", "text": "fine"}\n{"id": "[/]", "text": ""}\n[/]\x1b[2J\n')
    r = cli(tmp_path, "ingest", str(path), "-u", "u")
    assert r.exit_code == 1 and "added 1 turn," in r.output and "Traceback" not in r.output
    assert "\x1b" not in r.output and "2 rejected in all" in r.output


# ---------------------------------------------------------------- --json streams, not pretty-prints


def test_json_output_is_plain_json_written_without_rich(tmp_path, monkeypatch, no_user_config):
    """`--json` went through rich's pretty-printer: 4.5 GB and 250 s for 100k hits."""
    text = f'tricky [/] text {ESCAPES} \\ " end'
    assert cli(tmp_path, "add", text, "-u", "u", "--id", "[/]").exit_code == 0

    def no_rich(*args, **kwargs):
        raise AssertionError("JSON through rich")

    monkeypatch.setattr("rich.console.Console.print_json", no_rich)
    r = cli(tmp_path, "search", "tricky text", "-u", "u", "--json")
    assert r.exit_code == 0, r.output
    hit = json.loads(r.stdout)["hits"][0]
    assert hit["turn_ids"] == ["[/]"] and text in hit["text"]
    assert "\x1b" not in r.stdout and "\x9b" not in r.stdout and "\u202e" not in r.stdout and "\x07" not in r.stdout
    assert "\\u001b[2J" in r.stdout and "\\u009b31m" in r.stdout and "\\u202eevil" in r.stdout
    for args in (
        ["get", "[/]", "-u", "u"],
        ["namespaces", "--json"],
        ["add", "more", "-u", "u", "--json"],
        ["delete", "-u", "u", "[/]", "--json"],
    ):
        r = cli(tmp_path, *args)
        assert r.exit_code == 0 and json.loads(r.stdout) is not None, (args, r.output)


def test_file_names_and_sample_ids_with_markup_in_progress_bars(tmp_path, monkeypatch):
    """Progress bars on a terminal render their description as markup: a sample id `[/]s` crashed them, a file
    named `[blink red]turns.jsonl` showed as `turns.jsonl`; so did the demo's heading for a store under `[/`."""
    import io

    from rich.console import Console

    screen = io.StringIO()
    monkeypatch.setattr("cuemem.cli.output.err", Console(file=screen, force_terminal=True, width=100))
    turns = tmp_path / "[blink red]turns\x1b[2J.jsonl"
    turns.write_text('{"id": "a", "text": "first"}\n')
    r = cli(tmp_path, "import", str(turns), "-u", "u")
    assert r.exit_code == 0, r.output
    assert "import [blink red]turns\\x1b[2J.jsonl" in screen.getvalue()
    sample = {"sample_id": "[/]s", "conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]}}
    locomo = tmp_path / "[bold]l.json"
    locomo.write_text(json.dumps([sample]))
    r = cli(tmp_path, "ingest", str(locomo))
    assert r.exit_code == 0, r.output
    assert "ingest [/]s" in screen.getvalue()
    (tmp_path / "[").mkdir()
    monkeypatch.chdir(tmp_path)  # a short relative path: the heading is never cut short by a long temporary folder
    r = cli(tmp_path, "demo", "--db", str(Path("[") / "]demo.db"), "--no-answers")
    assert r.exit_code == 0 and "[/]demo.db" in r.output, r.output


def test_a_search_after_a_change_of_embedder_says_what_it_indexes_first(tmp_path):
    """A first search with another embedder re-embeds every turn: it says so and shows progress, not silence."""
    from cuemem import Memory
    from cuemem.cli import app
    from cuemem.cli._common import CATCH_UP_NOTICE
    from cuemem.embed import HashingEmbedder

    db = tmp_path / "m.db"
    turns = [{"id": f"t{i}", "text": f"turn {i} about the hotel"} for i in range(CATCH_UP_NOTICE + 10)]
    with Memory(db, engine="bm25", embedder=HashingEmbedder()) as memory:
        memory.add(turns, user_id="maya")
    r = CliRunner().invoke(
        app, ["--db", str(db), "--embedder", "hashing", "--engine", "dense", "search", "hotel", "-u", "maya", "-k", "1"]
    )
    assert r.exit_code == 0, r.output
    assert f"dense has not indexed {CATCH_UP_NOTICE + 10:,} turns" in r.output and "indexing them first" in r.output
    r = CliRunner().invoke(
        app, ["--db", str(db), "--embedder", "hashing", "--engine", "dense", "search", "hotel", "-u", "maya", "-k", "1"]
    )
    assert r.exit_code == 0 and "has not indexed" not in r.output  # caught up: nothing to say
