"""Issue 33, input bounds: one length limit for every id, metadata as strict JSON, JSON errors that say what is
wrong, and imports that stream in bounded memory (the library, the server and the CLI; both stores)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cuemem.cli import app as cli_app
from cuemem.errors import ImportFormatError, InvalidTurnError
from cuemem.formats import MAX_LISTED_ERRORS, ImportReport, iter_jsonl, read_locomo, strict_dumps, strict_loads
from cuemem.server.keys import KeyRing
from cuemem.types import MAX_ID_CHARS, IdTooLongError, Namespace, Turn

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cuemem.server.app import create_app
from cuemem.server.limits import Limits

LONG = "x" * (MAX_ID_CHARS + 1)
HUGE = "y" * 900_000
NUMBER = "1" * 5000


@pytest.mark.sqlite_only("no store involved")
def test_the_limit_is_one_thousand_characters() -> None:
    assert MAX_ID_CHARS == 1000
    assert Namespace("u" * MAX_ID_CHARS, "a" * MAX_ID_CHARS, "r" * MAX_ID_CHARS).run_id == "r" * MAX_ID_CHARS
    for ids in ((LONG,), ("u", HUGE), ("u", None, HUGE)):
        with pytest.raises(IdTooLongError, match="longer than 1,000"):
            Namespace(*ids)


# ---------------------------------------------------------------- one id limit, everywhere


def test_every_id_of_the_memory_api_has_the_one_limit(make_memory) -> None:
    memory = make_memory("bm25")
    for ids in ({"user_id": LONG}, {"user_id": "u", "agent_id": HUGE}, {"user_id": "u", "run_id": HUGE}):
        with pytest.raises(IdTooLongError, match="longer than 1,000"):
            memory.add("a turn", **ids)
        with pytest.raises(IdTooLongError):
            memory.search("turn", **ids)
    for message in ({"text": "t", "id": LONG}, {"text": "t", "session_id": LONG}):
        with pytest.raises(InvalidTurnError, match="longer than 1,000"):
            memory.add(message, user_id="u")
    with pytest.raises(InvalidTurnError, match="longer than 1,000"):
        memory.add("t", user_id="u", session_id=LONG)
    at_limit = "i" * MAX_ID_CHARS
    assert memory.add({"text": "t", "id": at_limit}, user_id="u", agent_id=at_limit).added == [at_limit]
    for look_up in (memory.get, memory.delete):  # no turn can have a longer id: said so, not "not found"
        with pytest.raises(IdTooLongError, match="turn id is 1,001 characters"):
            look_up(LONG, user_id="u", agent_id=at_limit)
    assert memory.get(at_limit, user_id="u", agent_id=at_limit).text == "t"
    lines = [json.dumps({"text": "t", "namespace": {"user_id": "u", "agent_id": HUGE}}), json.dumps({"text": "ok"})]
    report = memory.import_(lines, user_id="v")
    assert report.added == 1 and report.errors[0][0] == 1 and "longer than 1,000" in report.errors[0][1]


@pytest.mark.sqlite_only("the key file is SQLite whatever the store")
def test_keys_refuse_long_ids(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "k.keys")
    try:
        for ids in ({"user_id": "u" * 500_000}, {"user_id": "u", "agent_id": HUGE}):
            with pytest.raises(IdTooLongError, match="longer than 1,000"):
                ring.create(**ids)
        assert ring.live() == []
        assert ring.create(user_id="u" * MAX_ID_CHARS)[0].user_id == "u" * MAX_ID_CHARS
    finally:
        ring.close()


@pytest.mark.sqlite_only("the command line on its own SQLite store")
def test_the_cli_refuses_long_ids_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    db = ["--db", str(tmp_path / "cli.db"), "--embedder", "hashing", "--engine", "bm25"]
    for args in (
        ["keys", "create", "--user-id", "u" * 500_000],
        ["keys", "create", "--user-id", "u", "--agent-id", LONG],
        ["add", "a turn", "-u", "u", "--agent-id", LONG],
    ):
        result = runner.invoke(cli_app, [*db, *args])
        assert result.exit_code == 1, result.output
        assert "longer than 1,000" in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) <= 3, result.output  # one error (the terminal may wrap it)


# ---------------------------------------------------------------- metadata is strict JSON


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"deep": [1, math.nan]}])
def test_non_finite_metadata_is_refused(make_memory, bad: Any) -> None:
    memory = make_memory("bm25")
    with pytest.raises(InvalidTurnError, match="NaN or Infinity"):
        memory.add({"text": "t", "metadata": {"x": bad}}, user_id="u")
    assert memory.add({"text": "t", "metadata": {"x": 1.5, "y": None}}, user_id="u").added


def test_an_import_line_with_nan_rejects_only_itself(make_memory) -> None:
    memory = make_memory("bm25")
    lines = ['{"text": "a", "metadata": {"x": NaN}}', '{"text": "b", "metadata": {"x": -Infinity}}', '{"text": "c"}']
    report = memory.import_(lines, user_id="u")
    assert report.added == 1 and [line for line, _ in report.errors] == [1, 2]
    assert all("not JSON" in why for _, why in report.errors), report.errors


def test_export_writes_strict_json_even_for_a_nan_stored_before_the_check(make_memory) -> None:
    memory = make_memory("bm25")
    namespace = Namespace("u")
    ns = memory.store.namespace_id(namespace, create=True)
    old = Turn(id="old", text="from an older version", metadata={"x": math.nan, "y": [math.inf, 2.0]})
    memory.store.append_turns(ns, [old])
    out = _Sink()
    assert memory.export(out, user_id="u") == 1  # type: ignore[arg-type]
    (line,) = out.text.splitlines()
    assert "NaN" not in line and "Infinity" not in line
    assert strict_loads(line)["metadata"] == {"x": None, "y": [None, 2.0]}


@pytest.mark.sqlite_only("no store involved")
def test_strict_dumps() -> None:
    assert strict_dumps({"a": [math.nan, {"b": math.inf}], "c": 1.0}) == '{"a": [null, {"b": null}], "c": 1.0}'
    assert strict_dumps({"é": 1}) == '{"é": 1}'


class _Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)


# ---------------------------------------------------------------- JSON errors say what is wrong


@pytest.mark.sqlite_only("no store involved")
def test_jsonl_lines_say_what_is_wrong() -> None:
    report = ImportReport()
    lines = ["[" * 5000 + "]" * 5000, '{"text": ' + NUMBER + "}", '{"x": Infinity}', '{"text": "fine"}']
    good = list(iter_jsonl(lines, report))
    assert [n for n, _ in good] == [4]
    reasons = dict(report.errors)
    assert "nested too deeply" in reasons[1]
    assert "number is too long" in reasons[2] and "set_int_max_str_digits" not in reasons[2]
    assert "Infinity is not JSON" in reasons[3]


@pytest.mark.sqlite_only("no store involved")
def test_locomo_files_say_what_is_wrong(tmp_path: Path) -> None:
    for name, text, says in (
        ("long.json", '{"conversation": {"n": ' + NUMBER + "}}", "number is too long"),
        ("nan.json", '{"conversation": {"n": NaN}}', "NaN is not JSON"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ImportFormatError, match=says):
            read_locomo(path)


# ---------------------------------------------------------------- imports stream in bounded memory


def test_import_takes_lines_lazily_and_holds_one_batch(make_memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """However many namespaces the lines name, at most one batch of lines waits between reading and writing."""
    memory = make_memory("bm25")
    transfer = memory._transfer
    batch = transfer.indexer.batch
    read = 0
    written = 0
    most_held = 0

    def lines() -> Iterator[str]:
        nonlocal read
        for i in range(3 * batch + 7):
            read += 1
            yield json.dumps({"text": f"turn {i}", "namespace": {"user_id": f"user{i % 40}"}})

    append = transfer.intake.append

    def counting_append(namespace: Namespace, turns: list[Turn]) -> Any:
        nonlocal written, most_held
        most_held = max(most_held, read - written)
        written += len(turns)
        return append(namespace, turns)

    monkeypatch.setattr(transfer.intake, "append", counting_append)
    report = memory.import_(lines())
    assert report.added == 3 * batch + 7 and not report.errors
    assert most_held <= batch, (most_held, batch)


def test_an_import_lists_its_first_rejections_and_counts_the_rest(make_memory) -> None:
    memory = make_memory("bm25")
    report = memory.import_(["1"] * (MAX_LISTED_ERRORS + 5) + ['{"text": "kept"}'], user_id="u")
    assert report.added == 1 and len(report.errors) == MAX_LISTED_ERRORS
    assert report.unlisted == 5 and report.rejected == MAX_LISTED_ERRORS + 5


# ---------------------------------------------------------------- the server


@pytest.fixture
def served(make_memory, tmp_path: Path) -> Iterator[tuple[TestClient, KeyRing]]:
    """The app over a bm25 memory, in process; the key ring to make keys with."""
    memory = make_memory("bm25")
    ring = KeyRing(tmp_path / "srv.keys")
    app = create_app(memory, ring, Limits(rate=0, max_import_bytes=256 * 1024), mcp=False)
    with TestClient(app) as client:
        yield client, ring
    ring.close()


def auth(ring: KeyRing, **ids: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {ring.create(**ids)[1]}"}


def error(response: Any, status: int, kind: str, says: str) -> None:
    assert response.status_code == status, response.text
    data = response.json()
    assert data["error"] == kind and says in data["message"], data


def test_server_refuses_long_ids_with_a_422(served: tuple[TestClient, KeyRing]) -> None:
    client, ring = served
    alice = auth(ring, user_id="alice")
    for body in ({"agent_id": HUGE}, {"run_id": HUGE}, {"user_id": LONG}):
        error(client.post("/v1/memories", json={"messages": ["hi"], **body}, headers=alice), 422, "invalid_id", "1,000")
    response = client.get("/v1/memories/search", params={"q": "hi", "run_id": LONG}, headers=alice)
    error(response, 422, "invalid_id", "longer than 1,000")
    error(client.get(f"/v1/memories/{LONG}", headers=alice), 422, "invalid_id", "turn id")
    error(client.delete(f"/v1/memories/{LONG}", headers=alice), 422, "invalid_id", "turn id")
    admin = auth(ring, admin=True)
    for body in ({"user_id": "u" * 500_000}, {"user_id": "u", "agent_id": LONG}):
        error(client.post("/v1/keys", json=body, headers=admin), 422, "invalid_id", "longer than 1,000")
    assert all(len(k.user_id or "") <= MAX_ID_CHARS for k in ring.live())


def test_server_refuses_nan_metadata(served: tuple[TestClient, KeyRing]) -> None:
    client, ring = served
    alice = auth(ring, user_id="alice")
    for constant in ("NaN", "Infinity", "-Infinity"):
        body = '{"messages": [{"text": "x", "metadata": {"v": ' + constant + "}}]}"
        response = client.post("/v1/memories", content=body, headers={**alice, "Content-Type": "application/json"})
        error(response, 422, "invalid_turn", "NaN or Infinity")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b'{"messages": ["x"], "k": ' + NUMBER.encode() + b"}", "number is too long"),
        (b'{"messages": ["\xff"]}', "UTF-8"),
    ],
)
def test_server_says_what_is_wrong_with_a_json_body(served: tuple[TestClient, KeyRing], body: bytes, says: str) -> None:
    client, ring = served
    headers = {**auth(ring, user_id="alice"), "Content-Type": "application/json"}
    response = client.post("/v1/memories", content=body, headers=headers)
    assert 400 <= response.status_code < 500, response.text
    assert says in response.json()["message"], response.text


def test_server_import_streams_and_reports_each_line(served: tuple[TestClient, KeyRing]) -> None:
    client, ring = served
    alice = auth(ring, user_id="alice")
    lines = [
        {"id": "a", "text": "the kettle is blue"},
        '{"id": "b", "text": "x", "metadata": {"v": NaN}}',
        {"id": "c", "text": "t", "namespace": {"user_id": "alice", "run_id": HUGE[:5000]}},
        "[" * 3000 + "]" * 3000,
        '{"id": "d", "n": ' + NUMBER + "}",
        {"id": "e", "text": "the door is red"},
    ]
    body = "\r\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 777):
            yield body[start : start + 777]

    response = client.post("/v1/import", content=chunks(), headers=alice)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["added"] == 2 and report["rejected"] == 4
    reasons = {e["line"]: e["reason"] for e in report["errors"]}
    assert "NaN is not JSON" in reasons[2] and "longer than 1,000" in reasons[3]
    assert "nested too deeply" in reasons[4] and "number is too long" in reasons[5]
    exported = client.get("/v1/export", headers=alice).text.splitlines()
    assert [strict_loads(line)["id"] for line in exported] == ["a", "e"]
    too_big = client.post("/v1/import", content=b'{"text": "x"}\n' * 20_000, headers=alice)
    error(too_big, 413, "too_large", "over the limit")
