"""The `cuemem` command, driven as a user would (typer's runner; real files; exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuemem.cli import app
from cuemem.index.tokens import minilm_dir

runner = CliRunner()


def cli(tmp_path: Path, *args: str, embedder: str = "hashing"):
    return runner.invoke(app, ["--db", str(tmp_path / "cli.db"), "--embedder", embedder, *args])


def test_add_search_get_delete(tmp_path):
    r = cli(
        tmp_path,
        "add",
        "Day 1 is the Apollo Hotel, 120 euros",
        "-u",
        "maya",
        "--id",
        "d1",
        "--timestamp",
        "3 May",
    )
    assert r.exit_code == 0 and "added d1" in r.output
    r = cli(tmp_path, "add", "Day 1 is the Apollo Hotel, 120 euros", "-u", "maya", "--id", "d1")
    assert "already stored: d1" in r.output
    r = cli(tmp_path, "search", "Apollo hotel", "-u", "maya", "--json")
    data = json.loads(r.output)
    assert r.exit_code == 0 and data["hits"][0]["turn_ids"] == ["d1"] and data["engine"] == "stitch"
    r = cli(tmp_path, "get", "d1", "-u", "maya")
    assert json.loads(r.output)["timestamp"] == "3 May"
    r = cli(tmp_path, "delete", "-u", "maya", "d1")
    assert r.exit_code == 0 and "deleted 1" in r.output
    r = cli(tmp_path, "get", "d1", "-u", "maya")
    assert r.exit_code == 1 and "no turn 'd1'" in r.output


def test_errors_are_one_clear_line(tmp_path):
    assert cli(tmp_path, "add", "a turn of someone else", "-u", "someone").exit_code == 0
    r = cli(tmp_path, "search", "x", "-u", "ghost")
    assert r.exit_code == 1 and "unknown namespace" in r.output and "Traceback" not in r.output
    r = cli(tmp_path, "add", "", "-u", "maya")
    assert r.exit_code == 1 and "text is empty" in r.output
    r = cli(tmp_path, "--engine", "nope", "namespaces")
    assert r.exit_code == 1 and "unknown engine" in r.output
    r = cli(tmp_path, "delete", "-u", "maya")
    assert r.exit_code == 1 and "exactly one" in r.output


def test_ingest_jsonl_keeps_good_lines_and_reports_bad_ones(tmp_path):
    path = tmp_path / "turns.jsonl"
    path.write_bytes(
        b'{"id": "a", "text": "first", "session_id": "s1"}\n{broken\n{"id": "b", "text": "second", "speaker": "bot"}\n'
    )
    r = cli(tmp_path, "ingest", str(path), "-u", "u1")
    assert r.exit_code == 1  # something was rejected ...
    assert "added 2 turns" in r.output and "2: malformed JSON" in r.output  # ... and the rest kept
    r = cli(tmp_path, "namespaces", "--json")
    assert json.loads(r.output) == [{"user_id": "u1", "agent_id": None, "run_id": None, "turns": 2}]


def test_ingest_locomo_export_import_reindex(tmp_path):
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "A",
            "speaker_b": "B",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "A", "dia_id": "D1:1", "text": "I went to a support group."},
                {
                    "speaker": "B",
                    "dia_id": "D1:2",
                    "text": "Look at this!",
                    "blip_caption": "a photo of a dog",
                },
            ],
            "session_2_date_time": "2 pm on 9 May, 2023",
            "session_3_date_time": "never happened",
            "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "Back again."}],
        },
        "qa": [],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    r = cli(tmp_path, "ingest", str(path))
    assert r.exit_code == 0 and "added 3 turns" in r.output
    r = cli(tmp_path, "search", "dog photo", "-u", "conv-x", "--json", "--use", "bm25")
    top = json.loads(r.output)["hits"][0]
    assert top["turn_ids"] == ["D1:2"] and "a photo of a dog" in top["text"] and top["text"].startswith("B: ")
    assert "8 May, 2023" in top["detail"]["timestamp"] and top["detail"]["date"].startswith("2023-05-08")
    r = cli(tmp_path, "stats", "-u", "conv-x", "--use", "bm25")
    assert r.exit_code == 0 and json.loads(r.output) == {"turns": 3, "unparsed_timestamps": 0}
    out = tmp_path / "export.jsonl"
    assert cli(tmp_path, "export", "-o", str(out)).exit_code == 0
    assert len(out.read_text().splitlines()) == 3
    r = runner.invoke(app, ["--db", str(tmp_path / "other.db"), "--embedder", "hashing", "import", str(out)])
    assert r.exit_code == 0 and "added 3 turns" in r.output
    r = cli(tmp_path, "reindex")
    assert r.exit_code == 0 and "reindexed 3 turns" in r.output
    r = cli(tmp_path, "history", "-u", "conv-x")
    assert '"op": "reindex"' in r.output


def test_malformed_conversation_files_are_reported(tmp_path):
    bad_turn = {"conversation": {"session_1": ["just a string"], "session_1_date_time": "today"}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([bad_turn]))
    r = cli(tmp_path, "ingest", str(path), "--format", "locomo")
    assert r.exit_code == 1 and "session_1 turn 1 is a str" in r.output
    path.write_text("[{not json")
    r = cli(tmp_path, "ingest", str(path), "--format", "locomo")
    assert r.exit_code == 1 and "not valid JSON" in r.output
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("not a database " * 200)
    r = runner.invoke(app, ["--db", str(not_a_db), "namespaces"])
    assert r.exit_code == 1 and "cannot open" in r.output and "Traceback" not in r.output


def test_locomo_samples_without_ids_get_their_own_namespaces(tmp_path):
    def sample(text: str) -> dict:
        return {"conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": text}]}}

    path = tmp_path / "two.json"
    path.write_text(json.dumps([sample("first conversation"), sample("second conversation")]))
    r = cli(tmp_path, "ingest", str(path))
    assert r.exit_code == 0 and "added 2 turns" in r.output
    r = cli(tmp_path, "namespaces", "--json")
    assert [ns["user_id"] for ns in json.loads(r.output)] == ["sample-0", "sample-1"]


def test_auto_format_reads_pretty_printed_locomo_and_caps_error_listings(tmp_path):
    """LoCoMo's file is indented JSON whose first key is a long "qa" list: it must not be read as JSONL."""
    sample = {
        "qa": [{"question": f"question {i}?", "answer": "a", "evidence": ["D1:1"], "category": 4} for i in range(200)],
        "conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hello there"}]},
        "sample_id": "conv-p",
    }
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps([sample], indent=4))
    r = cli(tmp_path, "ingest", str(path))
    assert r.exit_code == 0 and "added 1 turn," in r.output
    one = tmp_path / "one.json"  # a single sample object, also indented
    one.write_text(json.dumps({**sample, "sample_id": "conv-q"}, indent=2))
    assert cli(tmp_path, "ingest", str(one)).exit_code == 0
    noise = tmp_path / "noise.jsonl"
    noise.write_text("\n".join(["{bad"] * 100 + ['{"id": "ok", "text": "kept"}']))
    r = cli(tmp_path, "ingest", str(noise), "-u", "n")
    assert r.exit_code == 1 and "added 1 turn," in r.output
    listed = [line for line in r.output.splitlines() if line.startswith("rejected ")]
    assert len(listed) == 20 and "80 more rejected" in r.output and "100 rejected in all" in r.output


@pytest.mark.skipif(minilm_dir() is None, reason="shipped models not installed")
def test_ask_and_llm_commands_with_the_local_model(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_LLM_CACHE", str(tmp_path / "calls.db"))
    monkeypatch.setenv("CUEMEM_LLM_MODEL", "smollm2-135m")  # the shipped model: the plumbing, quickly
    monkeypatch.setenv("CUEMEM_K", "1")  # ask reads the k setting's number of hits
    assert cli(tmp_path, "add", "My cat Miso is fed by Ines", "-u", "maya", "--id", "m1").exit_code == 0
    assert cli(tmp_path, "add", "The hotel costs 120 euros", "-u", "maya", "--id", "h1").exit_code == 0
    r = cli(tmp_path, "ask", "Who feeds the cat?", "-u", "maya", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["answer"] and set(data["cited_turn_ids"]) <= {"m1", "h1"} and data["llm"]["query"]["calls"] == 2
    assert [hit["turn_ids"] for hit in data["retrieval"]["hits"]] == [["m1"]]
    assert data["evidence_turn_ids"] == ["m1"] and data["evidence_tokens"] > 0
    shown = cli(tmp_path, "ask", "Who feeds the cat?", "-u", "maya")  # streamed to the terminal, then its citations
    assert shown.exit_code == 0 and shown.output.splitlines()[0] == data["answer"]
    assert ("cites: m1" in shown.output) == (data["cited_turn_ids"] == ["m1"])
    r = runner.invoke(app, ["llm", "choose", "What is the capital of France?", "-o", "Paris", "-o", "London"])
    assert r.exit_code == 0 and r.output.strip() == "Paris"
    r = runner.invoke(app, ["llm", "choose", "Capital of France?", "-o", "Paris", "-o", "Rome", "-k", "2", "--json"])
    chosen = json.loads(r.output)
    assert [c["option"] for c in chosen] == ["Paris", "Rome"] and chosen[0]["logprob"] > chosen[1]["logprob"]
    r = cli(tmp_path, "llm", "stats", "--json")
    rows = json.loads(r.output)
    # The reader's calls were made for maya: cached in the store; `llm choose` is unscoped: in the file.
    assert {row["method"] for row in rows if row["cache"] == "store"} == {"chat", "choose"}
    assert {row["method"] for row in rows if row["cache"] == "file"} == {"choose"}


def test_ask_with_the_model_down_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CUEMEM_LLM", "openai")
    monkeypatch.setenv("CUEMEM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CUEMEM_LLM_RETRIES", "0")
    monkeypatch.setenv("CUEMEM_LLM_CACHE", "off")
    assert cli(tmp_path, "add", "kept no matter what", "-u", "u", "--id", "k").exit_code == 0
    r = cli(tmp_path, "ask", "what was kept?", "-u", "u")
    assert r.exit_code == 1 and "ConnectError" in r.output and "Traceback" not in r.output
    assert json.loads(cli(tmp_path, "get", "k", "-u", "u").output)["text"] == "kept no matter what"


def test_bracketed_text_prints_literally(tmp_path):
    """Turns are user text: "[red]" or "[D4]" inside them must print as written, not as rich markup."""
    assert cli(tmp_path, "add", "note [red]alert[/red] about [bold] tags", "-u", "u", "--id", "b1").exit_code == 0
    r = cli(tmp_path, "search", "alert tags note", "-u", "u", "--use", "bm25")
    assert r.exit_code == 0 and "[red]alert[/red]" in r.output and "[bold] tags" in r.output


def test_bench_command_prints_the_table_and_plain_progress_lines_in_a_log(tmp_path, monkeypatch):
    texts = ["I like tea", "My boat is red"]
    turns = [{"speaker": "A", "dia_id": f"D1:{i + 1}", "text": t} for i, t in enumerate(texts)]
    qa = [{"question": "What colour is the boat?", "answer": "red", "evidence": ["D1:2"], "category": 4}]
    sample = {"sample_id": "c1", "conversation": {"session_1_date_time": "1 May 2023", "session_1": turns}, "qa": qa}
    data = tmp_path / "l.json"
    data.write_text(json.dumps([sample, {**sample, "sample_id": "c2"}]))
    out = tmp_path / "out"
    args = ("bench", "locomo", "--data", str(data), "--engines", "bm25", "--limit", "1")
    r = cli(tmp_path, *args, "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "done" not in r.stderr  # stderr is a log here, and work shorter than PROGRESS_EVERY prints nothing
    monkeypatch.setattr("cuemem.cli.output.PROGRESS_EVERY", 0.0)  # a line at every step from now on
    r = cli(tmp_path, *args, "--out", str(tmp_path / "again"))
    assert "locomo · bm25: 1 of 1 done" in r.stderr
    assert "bm25" in r.stdout and "1.000" in r.stdout and "results.json" in r.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["engines"]["bm25"]["retrieval"]["questions"] == 1  # --limit 1: only c1
    r = cli(tmp_path, "ingest", str(data), "-u", "logged")  # every long command reports the same way
    assert r.exit_code == 0 and "ingest" in r.stderr and "done" in r.stderr


def test_delete_all_takes_the_users_agent_and_run_namespaces_and_counts_them(tmp_path):
    """`delete --all -u U` deletes U's namespace and every agent/run namespace under it, one line each."""

    def add(turn_id: str, *where: str) -> None:
        assert cli(tmp_path, "add", f"note {turn_id}", "--id", turn_id, *where).exit_code == 0

    for i in range(3):
        add(f"a{i}", "-u", "alice")
    for i in range(2):
        add(f"g{i}", "-u", "alice", "--agent-id", "agent1")
    add("r0", "-u", "alice", "--agent-id", "agent1", "--run-id", "run1")
    add("b0", "-u", "bob")
    r = cli(tmp_path, "delete", "--all", "-u", "alice", "--agent-id", "agent1", "--json")
    assert r.exit_code == 0, r.output
    deleted = sorted(json.loads(r.output), key=lambda ns: ns["run_id"] or "")
    assert deleted == [
        {"user_id": "alice", "agent_id": "agent1", "run_id": None, "turns": 2},
        {"user_id": "alice", "agent_id": "agent1", "run_id": "run1", "turns": 1},
    ]
    for i in range(2):
        add(f"g{i}", "-u", "alice", "--agent-id", "agent1")
    r = cli(tmp_path, "delete", "--all", "-u", "alice")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "deleted user=alice: 3 turns" in lines and "deleted user=alice,agent=agent1: 2 turns" in lines
    assert lines[-1] == "deleted 5 turns in 2 namespaces"
    r = cli(tmp_path, "namespaces", "--json")
    assert json.loads(r.output) == [{"user_id": "bob", "agent_id": None, "run_id": None, "turns": 1}]


def test_an_in_memory_store_is_refused(tmp_path, monkeypatch):
    r = runner.invoke(app, ["--db", ":memory:", "--embedder", "hashing", "add", "lost at once", "-u", "u"])
    assert r.exit_code == 1 and ":memory:" in r.output and "Traceback" not in r.output
    monkeypatch.setenv("CUEMEM_DB", ":memory:")
    r = runner.invoke(app, ["--embedder", "hashing", "namespaces"])
    assert r.exit_code == 1 and ":memory:" in r.output


def test_search_hits_default_to_the_k_setting_and_engines_come_from_the_registry(tmp_path, monkeypatch):
    from cuemem.engines import available_engines

    for i, text in enumerate(["the red boat", "a red kite", "red wine", "red shoes"]):
        assert cli(tmp_path, "add", text, "-u", "u", "--id", f"t{i}").exit_code == 0

    def hits(*args: str) -> int:
        r = cli(tmp_path, "search", "red", "-u", "u", "--json", *args)
        assert r.exit_code == 0, r.output
        return len(json.loads(r.output)["hits"])

    assert hits() == 4
    monkeypatch.setenv("CUEMEM_K", "2")
    assert hits() == 2 and hits("-k", "3") == 3
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "400"})
    help_text = " ".join(r.output.replace("│", " ").split())
    assert "stitch-nocoref" in help_text
    assert f"Engine: {', '.join(available_engines())}" in help_text


def test_bench_reads_its_default_data_under_the_datasets_setting(tmp_path, monkeypatch):
    sample = {
        "sample_id": "c1",
        "qa": [{"question": "Boat colour?", "answer": "red", "evidence": ["D1:1"], "category": 4}],
        "conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "My boat is red"}]},
    }
    datasets = tmp_path / "datasets"
    (datasets / "locomo").mkdir(parents=True)
    (datasets / "locomo" / "locomo10.json").write_text(json.dumps([sample]))
    monkeypatch.setenv("CUEMEM_DATASETS", str(datasets))
    r = cli(tmp_path, "bench", "locomo", "--engines", "bm25", "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "results.json").read_text())["data"] == str(
        datasets / "locomo" / "locomo10.json"
    )
    monkeypatch.setenv("CUEMEM_DATASETS", str(tmp_path / "nowhere"))
    r = cli(tmp_path, "bench", "longmemeval", "--out", str(tmp_path / "out2"))
    assert r.exit_code == 1 and "CUEMEM_DATASETS" in r.output and "Traceback" not in r.output


def test_reading_commands_open_the_store_read_only(tmp_path):
    """namespaces, export, history and get neither write nor wait behind another process's write transaction."""
    import sqlite3
    import time

    assert cli(tmp_path, "add", "a hotel in Porto", "-u", "maya", "--id", "p1").exit_code == 0
    db = tmp_path / "cli.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process is writing, and holds the lock
    try:
        start = time.perf_counter()
        for args in (["namespaces"], ["export", "-u", "maya"], ["history", "-u", "maya"], ["get", "p1", "-u", "maya"]):
            r = cli(tmp_path, *args)
            assert r.exit_code == 0 and ("maya" in r.output or "p1" in r.output), (args, r.output)
        assert time.perf_counter() - start < 5  # a writable open would wait out the 30 s busy timeout
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    r = cli(tmp_path / "nowhere", "namespaces")
    assert r.exit_code == 1 and "no store at" in r.output


def test_llm_purge_empties_the_call_cache_file(tmp_path, monkeypatch):
    from cuemem.llm import FileCallCache, Usage

    path = tmp_path / "calls.db"
    monkeypatch.setenv("CUEMEM_LLM_CACHE", str(path))
    with FileCallCache(path) as cache:
        cache.put("k", "b", "chat", "other", {"messages": "a secret prompt"}, {"text": "x"}, Usage(), 0.0)
    r = cli(tmp_path, "llm", "purge")
    assert r.exit_code == 0 and "purged 1 cached call from" in r.output
    assert not any(b"a secret prompt" in p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("calls.db"))


def test_keys_commands_show_a_token_once_and_keep_only_its_hash(tmp_path):
    created = cli(tmp_path, "keys", "create", "--user-id", "ann", "--label", "laptop", "--json")
    assert created.exit_code == 0, created.output
    key = json.loads(created.stdout)
    assert key["key"].startswith("cm_") and key["user_id"] == "ann" and key["label"] == "laptop"
    listed = cli(tmp_path, "keys", "list", "--json")
    assert [k["id"] for k in json.loads(listed.stdout)] == [key["id"]] and key["key"] not in listed.output
    secret = key["key"].removeprefix("cm_").partition("_")[2]  # as KeyRing.verify reads it: the secret may hold '_'
    assert len(secret) >= 40 and secret.encode() not in (tmp_path / "cli.db.keys").read_bytes()
    both = cli(tmp_path, "keys", "create", "--admin", "--user-id", "ann")
    assert both.exit_code == 1 and "admin key is bound to no namespace" in both.output
    assert cli(tmp_path, "keys", "revoke", key["id"]).exit_code == 0
    again = cli(tmp_path, "keys", "revoke", key["id"])
    assert again.exit_code == 1 and "no live key" in again.output


def test_chat_with_the_model_down_still_answers_every_turn(tmp_path, monkeypatch):
    """`cuemem chat` reads one turn a line; with the model endpoint down, each turn still gets a reply from its tools
    (the calculator's result), saying what degraded."""
    monkeypatch.setenv("CUEMEM_LLM", "openai")
    monkeypatch.setenv("CUEMEM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CUEMEM_LLM_RETRIES", "0")
    monkeypatch.setenv("CUEMEM_LLM_CACHE", "off")
    lines = "What is 17 * 23?\n\nMy sister is called Ines.\n"  # the empty line is skipped
    args = ["--db", str(tmp_path / "cli.db"), "--embedder", "hashing", "--engine", "bm25"]
    args += ["chat", "-u", "ann", "--json"]
    r = runner.invoke(app, args, input=lines)
    assert r.exit_code == 0, r.output
    decoder, text, turns = json.JSONDecoder(), r.stdout.strip(), []
    while text:  # one JSON document per turn
        turn, end = decoder.raw_decode(text)
        turns.append(turn)
        text = text[end:].strip()
    assert len(turns) == 2 and "391" in turns[0]["reply"]
    assert all(t["degraded"] for t in turns) and any("model" in note for note in turns[0]["degraded"])


def test_engines_lists_every_registered_engine_and_marks_the_default(tmp_path, monkeypatch):
    from cuemem.config import Settings
    from cuemem.engines import available_engines

    def listed(*args: str) -> dict[str, tuple[bool, str]]:
        r = runner.invoke(app, [*args, "engines"])
        assert r.exit_code == 0, r.output
        rows = {}
        for line in r.output.splitlines():
            mark, name, *rest = line[:1], *line[2:].split(maxsplit=1)
            rows[name] = (mark == "*", rest[0] if rest else "")
        return rows

    rows = listed()
    assert set(available_engines()) <= set(rows)
    assert [n for n, (mark, _) in rows.items() if mark] == [Settings().engine]
    assert all(text for _, text in rows.values()) and rows[Settings().engine][1].endswith("(default)")
    # the user's settings choose the default, as for every other command: --engine, then CUEMEM_ENGINE
    assert [n for n, (mark, _) in listed("--engine", "bm25").items() if mark] == ["bm25"]
    monkeypatch.setenv("CUEMEM_ENGINE", "episodic[window=512]")
    rows = listed()
    assert [n for n, (mark, _) in rows.items() if mark] == ["episodic[window=512]"]
    assert "a variant of episodic" in rows["episodic[window=512]"][1]
    r = runner.invoke(app, ["--engine", "stitch", "engines", "--json"])
    data = json.loads(r.output)
    assert [e["name"] for e in data if e["default"]] == ["stitch"]
    assert {e["name"] for e in data} == set(available_engines())
