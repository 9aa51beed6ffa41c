"""Forgetting (docs/design.md promise 1, issue 10): for every engine, a deleted turn leaves no trace — not in any search
result, not in any prompt sent to the model, and not in a single byte of the store's files or the model-call cache
after a checkpoint. Derived text that quotes a deleted turn (a resolved reference, a gist, a window) goes with it,
and deleting a user reaches all of that user's agent and run namespaces.

On PostgreSQL the store's files are the database's own folder (base/<oid>: tables, their TOAST and indexes), checked
beside the test's folder; a checkpoint there is VACUUM FULL of the tables holding user text + CHECKPOINT. Old WAL
segments, replicas and backups are outside what a checkpoint can promise (README)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import (
    ENGINES,
    checkpoint,
    files_containing,
    local_http_server,
    on_postgres,
    open_memory,
    send_json,
    store_roots,
    store_target,
)
from fakes import FakeBackend

from cuemem import Memory, Namespace, Settings, UnknownNamespaceError
from cuemem.embed import HashingEmbedder
from cuemem.llm import LLMClient
from cuemem.store.base import text_hash

# Deletes must reach the model-made state (labels, records, notes) on both stores: the designs' model variants run
# here on PostgreSQL too (tests/conftest.py leaves them to SQLite in the other suites).
pytestmark = pytest.mark.model_variants_on_postgres

QUESTION = "What is the code for my locker?"
ORDINARY = [
    {"id": "o1", "speaker": "Maya", "text": "We are planning a trip to Porto in May."},
    {"id": "o2", "speaker": "Theo", "text": "I will look for train tickets on Friday."},
    {"id": "o3", "speaker": "Maya", "text": "The gym changed my locker to a bigger one."},
]
BOB = [{"id": "b1", "speaker": "Bob", "text": "My locker at work has a blue door."}]


def make_secret(request: pytest.FixtureRequest) -> str:
    """A token found nowhere else, the same on every run of the same test (failures reproduce)."""
    return "zqx" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:24]


def secret_turns(secret: str) -> list[dict[str, str]]:
    """The secret and a later turn of the same session that refers back to it ("it")."""
    return [
        {"id": "secret", "speaker": "Maya", "text": f"The code for my locker is {secret}, please remember it."},
        {"id": "after", "speaker": "Theo", "text": "Did you write it down somewhere safe?"},
    ]


def hit_texts(memory: Memory, query: str, namespace: Namespace) -> list[str]:
    """Texts of everything a search returns in the namespace ([] once the namespace is gone)."""
    try:
        result = memory.search(query, k=50, budget_tokens=100_000, **namespace.as_dict())
    except UnknownNamespaceError:
        return []
    return [hit.text for hit in result.hits]


def files_with(memory: Memory, root: Path, needle: str) -> dict[str, str]:
    """Every file of the store (`root`, and on PostgreSQL the database's folder) whose bytes hold `needle`."""
    found: dict[str, str] = {}
    for folder in store_roots(root, memory):
        found.update({str(folder / name): around for name, around in files_containing(folder, needle).items()})
    return found


def analyze(memory: Memory) -> None:
    """PostgreSQL: what autovacuum does by itself after enough changes, collect the planner's statistics."""
    import psycopg

    with psycopg.connect(str(memory.settings.db), autocommit=True) as conn:
        conn.execute("ANALYZE")


def statistics_with(memory: Memory, needle: str) -> list[tuple[str, str]]:
    """PostgreSQL: (table, column) of the store's planner statistics that quote `needle` (sample values ANALYZE
    keeps in pg_statistic, a catalog in the database's folder, often compressed: a byte scan may not see them)."""
    if not on_postgres():
        return []
    import psycopg

    with psycopg.connect(str(memory.settings.db), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename, attname FROM pg_stats WHERE schemaname = 'cuemem' AND strpos(concat_ws(' ',"
            " most_common_vals::text, histogram_bounds::text, most_common_elems::text), %s) > 0",
            (needle,),
        ).fetchall()
    return [(str(table), str(column)) for table, column in rows]


def cached_vectors_of(memory: Memory, text: str) -> int:
    """How many namespaces' embedding caches hold a vector of exactly `text` (the refine stage's vectors of a
    turn's words as said are kept there: engines/refine.py, said_vectors)."""
    name, digest = memory.embedder.name, text_hash(text)
    return sum(len(memory.store.cached_embeddings(ns, name, [digest])) for _, ns in memory.store.namespaces())


def assert_forgotten(memory: Memory, backend: FakeBackend, root: Path, needle: str, question: str) -> None:
    """No search result in any namespace, no prompt of a fresh answer, no byte of any file holds `needle`.

    The files are checked before the needle itself is searched for: typing the secret again is a new query, which
    a model-assisted engine may legitimately send to (and cache with) its model."""
    namespaces = [namespace for namespace, _ in memory.namespaces()]
    for namespace in namespaces:
        leaked = [t for t in hit_texts(memory, question, namespace) if needle in t]
        assert not leaked, f"search {question!r} in ({namespace}) still returns deleted text: {leaked}"
    backend.clear()
    for namespace in namespaces:
        memory.answer(question, **namespace.as_dict())
    assert needle not in backend.prompts(), f"a fresh answer's prompt still carries {needle!r}:\n{backend.prompts()}"
    checkpoint(memory)
    leaks = files_with(memory, root, needle)
    assert not leaks, f"deleted text {needle!r} is still on disk after a checkpoint: {leaks}"
    kept = statistics_with(memory, needle)
    assert not kept, f"deleted text {needle!r} is still in the planner's statistics of {kept}"
    for namespace in namespaces:
        leaked = [t for t in hit_texts(memory, needle, namespace) if needle in t]
        assert not leaked, f"search {needle!r} in ({namespace}) still returns deleted text: {leaked}"


DELETIONS = ["turn", "session", "namespace", "user"]


# On PostgreSQL every engine deletes a single turn (what must leave the rest of its derived state whole) and one of
# the wider deletions, in turn; on SQLite every engine runs every deletion.
@pytest.mark.postgres_rotates("deletion", DELETIONS)
@pytest.mark.parametrize("deletion", DELETIONS)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_deleted_secret_leaves_no_trace(tmp_path: Path, engine: str, deletion: str, request):
    secret = make_secret(request)
    backend = FakeBackend()
    with open_memory(tmp_path / "mem.db", engine, llm=LLMClient(backend)) as memory:
        # "user": the secret lives in a run namespace, and deleting the user must reach it.
        namespace = Namespace("alice", "agent1", "r1") if deletion == "user" else Namespace("alice")
        where = namespace.as_dict()
        memory.add(ORDINARY, session_id="s1", **where)
        memory.add(secret_turns(secret), session_id="sx", **where)
        memory.add(BOB, user_id="bob", session_id="s1")
        if deletion == "user":
            memory.add(ORDINARY, user_id="alice", session_id="s1")
        seen = hit_texts(memory, QUESTION, namespace)
        assert any(secret in t for t in seen), f"the secret should be retrievable before the delete: {seen}"
        memory.answer(QUESTION, **where)  # the model sees it (and any cache of model calls with it)
        assert secret in backend.prompts()
        words = secret_turns(secret)[0]["text"]
        if engine == "hybrid":  # the asked attribute embedded the secret's words as said ("locker" is the goal)
            assert cached_vectors_of(memory, words), "the secret's words should have a cached vector before"
        checkpoint(memory)
        assert files_with(memory, tmp_path, secret), "the secret should be in the store's files before the delete"
        if on_postgres():
            analyze(memory)  # statistics of the tables now sample the secret, unless its columns keep none

        if deletion == "turn":
            memory.delete("secret", **where)
        elif deletion == "session":
            assert memory.delete_session("sx", **where) == 2
        elif deletion == "namespace":
            memory.delete_all(**where)
        else:
            memory.delete_all(user_id="alice")
        assert cached_vectors_of(memory, words) == 0, "a vector of the deleted words is still cached"
        assert_forgotten(memory, backend, tmp_path, secret, QUESTION)


APOLLO = [
    {"id": "a1", "speaker": "Maya", "text": "We booked the Apollo Hotel in Lisbon for the conference week."},
    {"id": "a2", "speaker": "Theo", "text": "Did you book it for the whole week?"},
    {"id": "a3", "speaker": "Maya", "text": "Yes, from Monday to Friday, breakfast included."},
]


@pytest.mark.parametrize("engine", ENGINES)
def test_derived_text_quoting_a_deleted_turn_goes_with_it(tmp_path: Path, engine: str):
    """Issue 10, defect 1: stitch resolves "it" in a2 to a1's "Apollo Hotel; Lisbon"; deleting a1 must remove that
    from a2's stored summary, from stitch's state (recent steps, gist, segment vectors) and from the file."""
    backend = FakeBackend()
    with open_memory(tmp_path / "mem.db", engine, llm=LLMClient(backend)) as memory:
        memory.add(APOLLO, user_id="maya", session_id="trip")
        memory.add({"id": "z1", "speaker": "Maya", "text": "The cat needs food."}, user_id="maya", session_id="home")
        question = "Did they book the hotel for the whole week?"
        assert any("Apollo" in t for t in hit_texts(memory, question, Namespace("maya")))
        memory.answer(question, user_id="maya")
        memory.delete("a1", user_id="maya")
        for needle in ("Apollo", "Lisbon"):
            assert_forgotten(memory, backend, tmp_path, needle, question)


def test_delete_all_of_a_user_reaches_every_agent_and_run_namespace(tmp_path: Path):
    with open_memory(tmp_path / "mem.db", "hybrid") as memory:
        layout = {
            Namespace("alice"): 2,
            Namespace("alice", "agent1"): 3,
            Namespace("alice", "agent1", "r1"): 1,
            Namespace("alice", "agent2", "r9"): 2,
            Namespace("alicex"): 1,  # another user whose name starts the same
            Namespace("bob", "alice"): 1,  # an agent called alice under another user
            Namespace("bob"): 1,
        }
        for n, (namespace, count) in enumerate(layout.items()):
            turns = [{"id": f"n{n}t{i}", "text": f"note {i} about the hotel"} for i in range(count)]
            memory.add(turns, **namespace.as_dict())
        result = memory.delete_all(user_id="alice")
        left = {namespace for namespace, _ in memory.namespaces()}
        assert left == {Namespace("alicex"), Namespace("bob", "alice"), Namespace("bob")}, (
            f"delete_all(user_id='alice') left {sorted(left, key=str)} (and returned {result!r})"
        )
        assert isinstance(result, list) and dict(result) == {ns: c for ns, c in layout.items() if ns.user_id == "alice"}
        for namespace in layout:
            if namespace.user_id == "alice":
                with pytest.raises(UnknownNamespaceError):
                    memory.search("hotel", **namespace.as_dict())
        # A user with agent namespaces only (nothing under the bare user) is deleted all the same.
        memory.add({"id": "c", "text": "a note"}, user_id="carol", agent_id="helper", run_id="r1")
        assert memory.delete_all(user_id="carol") == [(Namespace("carol", "helper", "r1"), 1)]


def test_delete_all_of_an_agent_reaches_its_runs_only(tmp_path: Path):
    with open_memory(tmp_path / "mem.db", "bm25") as memory:
        for namespace in (
            Namespace("alice"),
            Namespace("alice", "agent1"),
            Namespace("alice", "agent1", "r1"),
            Namespace("alice", "agent1", "r2"),
            Namespace("alice", "agent2"),
        ):
            memory.add({"id": "t", "text": "note about the hotel"}, **namespace.as_dict())
        result = memory.delete_all(user_id="alice", agent_id="agent1")
        left = {namespace for namespace, _ in memory.namespaces()}
        assert left == {Namespace("alice"), Namespace("alice", "agent2")}, (
            f"delete_all(user_id='alice', agent_id='agent1') left {sorted(left, key=str)}, returned {result!r}"
        )
        assert {ns for ns, _ in result} == {
            Namespace("alice", "agent1"),
            Namespace("alice", "agent1", "r1"),
            Namespace("alice", "agent1", "r2"),
        }


@pytest.mark.sqlite_only("SQLite's write-ahead log file beside the store; PostgreSQL: the test below")
def test_checkpoint_empties_the_wal(tmp_path: Path):
    with open_memory(tmp_path / "mem.db", "bm25") as memory:
        memory.add([{"id": f"t{i}", "text": f"turn {i} " + "words " * 50} for i in range(50)], user_id="u")
        wal = tmp_path / "mem.db-wal"
        assert wal.exists() and wal.stat().st_size > 0
        memory.checkpoint()
        assert not wal.exists() or wal.stat().st_size == 0
        assert len(memory.turns(user_id="u")) == 50


@pytest.mark.postgres_only("SQLite: test_checkpoint_empties_the_wal")
def test_checkpoint_rewrites_the_tables_on_postgres(tmp_path: Path):
    """PostgreSQL's meaning of a checkpoint: VACUUM FULL gives every table holding user text a new, compact file
    (the old one, dead rows and all, is removed), and CHECKPOINT flushes it."""
    import psycopg

    with open_memory(tmp_path / "mem.db", "bm25") as memory:
        memory.add([{"id": f"t{i}", "text": f"turn {i} " + "words " * 50} for i in range(50)], user_id="u")
        memory.add({"id": "keep", "text": "a turn that stays"}, user_id="v")
        memory.delete_all(user_id="u")
        dsn = str(memory.settings.db)

        def files() -> dict[str, tuple[int, int]]:
            with psycopg.connect(dsn, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT c.relname, pg_relation_filenode(c.oid), pg_relation_size(c.oid) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'cuemem' AND c.relkind = 'r'"
                ).fetchall()
            return {name: (node, size) for name, node, size in rows}

        def turns(found: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:  # the turn log's partitions
            return {name: file for name, file in found.items() if re.fullmatch(r"turns_p\d+", name)}

        before = turns(files())
        assert sum(size for _, size in before.values()) > 8192  # 50 turns' worth of pages, dead rows included
        memory.checkpoint()
        after = turns(files())
        held = [name for name, (_, size) in before.items() if size]
        assert held and all(after[name][0] != before[name][0] for name in held), "checkpoint did not rewrite them"
        assert sum(size for _, size in after.values()) == 8192, "the turn log should hold one page: the turn kept"
        assert [t.id for t in memory.turns(user_id="v")] == ["keep"]


# --------------------------------------------------------------------------- the model-call cache, as users get it
class OpenAICompatible(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible endpoint: chat replies "Paris.", constrained choices pick the first option."""

    prompts: ClassVar[list[str]] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).prompts.append(json.dumps(body["messages"]))
        content = "Paris."
        fmt = body.get("response_format")
        if fmt:
            choice = fmt["json_schema"]["schema"]["properties"]["choice"]
            options = choice["enum"] if "enum" in choice else choice["items"]["enum"][: choice["minItems"]]
            content = json.dumps({"choice": options[0] if "enum" in choice else options})
        usage = {"prompt_tokens": 7, "completion_tokens": 3}
        payload = {"choices": [{"message": {"content": content}}], "usage": usage}
        send_json(self, 200, json.dumps(payload).encode())


@pytest.mark.parametrize("deletion", ["turn", "namespace"])
def test_the_model_call_cache_forgets_deleted_turns(tmp_path: Path, deletion: str, request):
    """Issue 10, defect 3: with a model client built from settings (llm="openai", llm_cache=...), the prompts of
    `answer` were cached in one global llm-calls.db, deleted turns' text included, and no delete purged them."""
    secret = make_secret(request)
    with local_http_server(OpenAICompatible) as url:
        settings = Settings.load(
            db=store_target(tmp_path / "mem.db"),
            engine="hybrid",
            llm="openai",
            llm_base_url=url,
            llm_api_key="sk-test",
            llm_retries=0,
            llm_cache=str(tmp_path / "llm-calls.db"),
        )
        OpenAICompatible.prompts = []
        with Memory(embedder=HashingEmbedder(), settings=settings) as memory:  # the client is made from settings
            memory.add(ORDINARY + secret_turns(secret), user_id="alice", session_id="s1")
            memory.answer(QUESTION, user_id="alice")
            assert any(secret in prompt for prompt in OpenAICompatible.prompts)  # the endpoint saw it
            if deletion == "turn":
                memory.delete("secret", user_id="alice")
            else:
                memory.delete_all(user_id="alice")
            checkpoint(memory)
            leaks = files_with(memory, tmp_path, secret)
            assert not leaks, f"a deleted turn's text is still in the files after a checkpoint: {leaks}"


@pytest.mark.parametrize("engine", ["hybrid", "stitch", "scg"])
def test_a_deleted_persons_name_leaves_the_structure_too(tmp_path: Path, engine: str, request):
    """Issue 13: names a turn mentions become fields of its item and enter the namespace's people index (names
    clustered into people, matched against questions). Deleting the turn must take the name out of all of it."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]
    name = "Zqx" + "".join(chr(ord("a") + int(c, 16)) for c in digest)  # a name found nowhere else
    turns = [
        {"id": "n1", "speaker": "Maya", "text": f"My cousin {name} moved to Porto yesterday."},
        {"id": "n2", "speaker": "Maya", "text": f"{name} loves the river there."},
    ]
    backend = FakeBackend()
    with open_memory(tmp_path / "mem.db", engine, llm=LLMClient(backend), speaker_boost=0.5) as memory:
        memory.add(ORDINARY, user_id="alice", session_id="s1", timestamp="8 May 2023")
        memory.add(turns, user_id="alice", session_id="s2", timestamp="9 May 2023")
        question = f"Where did {name} move to?"
        hits = memory.search(question, user_id="alice", k=3).hits
        assert hits[0].detail["structure"]["people"] == [name] and name in hits[0].detail["people"]
        memory.delete_session("s2", user_id="alice")
        for hit in memory.search(question, user_id="alice", k=10).hits:
            assert name not in hit.detail["structure"]["people"] and name not in hit.detail["people"]
        ns = memory.store.namespace_id(Namespace("alice"))
        tables = [v for (n, _), (_, v, _) in memory.indexes._views.items() if n == ns and hasattr(v, "by_form")]
        assert tables and all(name.lower() not in t.by_form and name not in t.people.people() for t in tables)
        # scg: the name was a concept of the schema and a vertex of the graph; the rebuilt view has neither
        recalls = [v for (n, _), (_, v, _) in memory.indexes._views.items() if n == ns and hasattr(v, "graph")]
        assert (engine == "scg") == bool(recalls)
        assert all(name.lower() not in v.schema and name.lower() not in v.graph.index for v in recalls)
        assert_forgotten(memory, backend, tmp_path, name, "Who moved to Porto?")  # (the prompt must not name them)


# --------------------------------------------------------------------------- a delete reaches the disk by itself
# Issue 33: after a delete acknowledged by the library, the HTTP server or the CLI, the deleted text leaves the
# store's files within the documented bound (docs/guarantees.md), with no checkpoint called: every delete schedules
# the store's scrub (cuemem/store/scrub.py). The tests shorten the delay; the bound is the delay plus the scrub.
SCRUB_DELAY_S = 0.2
SCRUB_BOUND_S = (
    SCRUB_DELAY_S + 10.0
)  # the delay, then a checkpoint (SQLite) or VACUUM FULL (PostgreSQL) of a tiny store


@pytest.fixture
def quick_scrub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened in the test scrub SCRUB_DELAY_S after a delete (the defaults: 1 s SQLite, 30 s PostgreSQL)."""
    from cuemem.store import scrub

    monkeypatch.setattr(scrub, "SQLITE_SCRUB_AFTER_S", SCRUB_DELAY_S)
    monkeypatch.setattr(scrub, "POSTGRES_SCRUB_AFTER_S", SCRUB_DELAY_S)


def remembered_everywhere(memory: Memory, root: Path, secret: str, engines: Sequence[str] = ENGINES) -> None:
    """Add the secret (and company) for alice, find it with `engines` (all: each keeps derived copies of the
    text), and see its bytes in the store's files."""
    memory.add(ORDINARY, user_id="alice", session_id="s1")
    memory.add(secret_turns(secret), user_id="alice", session_id="sx")
    memory.add(BOB, user_id="bob", session_id="s1")
    for engine in engines:
        hits = memory.search(QUESTION, user_id="alice", k=50, budget_tokens=100_000, engine=engine).hits
        assert any(secret in h.text for h in hits), f"{engine} should find the secret before the delete"
    if on_postgres():
        checkpoint(memory)  # PostgreSQL writes its table files at checkpoints: put the secret on disk first
    assert files_with(memory, root, secret), "the secret should be in the store's files before the delete"


def gone_within(memory: Memory, root: Path, secret: str, bound: float) -> float:
    """Seconds until no byte of the store's files holds `secret`, polled without any checkpoint; fails past `bound`."""
    start = time.monotonic()
    while True:
        leaks = files_with(memory, root, secret)
        waited = time.monotonic() - start
        if not leaks:
            return waited
        assert waited < bound, f"{secret!r} still on disk {waited:.1f} s after the delete, with no checkpoint: {leaks}"
        time.sleep(0.05)


def test_a_library_delete_reaches_the_disk_without_a_checkpoint(tmp_path: Path, quick_scrub: None, request) -> None:
    secret = make_secret(request)
    with open_memory(tmp_path / "mem.db", "hybrid") as memory:
        remembered_everywhere(memory, tmp_path, secret)
        memory.delete("secret", user_id="alice")
        gone_within(memory, tmp_path, secret, SCRUB_BOUND_S)
        assert [t.id for t in memory.turns(user_id="alice")] == ["o1", "o2", "o3", "after"]
        assert memory.search("locker", user_id="bob").hits  # bob's turns are untouched


def test_an_http_delete_reaches_the_disk_without_a_checkpoint(tmp_path: Path, quick_scrub: None, request) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from cuemem.server.app import create_app
    from cuemem.server.keys import KeyRing
    from cuemem.server.limits import Limits

    secret = make_secret(request)
    with open_memory(tmp_path / "mem.db", "hybrid") as memory:
        remembered_everywhere(memory, tmp_path, secret, ["hybrid"])  # every engine: the library test above
        ring = KeyRing(tmp_path / "mem.db.keys")
        token = ring.create(user_id="alice")[1]
        app = create_app(memory, ring, Limits(rate=0), mcp=False)
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
            found = client.get("/v1/memories/search", params={"q": QUESTION, "k": 50}).json()
            assert any(secret in hit["text"] for hit in found["hits"])
            assert client.delete("/v1/memories/secret").json()["deleted"] == ["secret"]
            gone_within(memory, tmp_path, secret, SCRUB_BOUND_S)
            # (the user deleted next, through the same server: their text goes the same way)
            assert client.delete("/v1/users/alice").status_code == 200
            gone_within(memory, tmp_path, "Porto in May", SCRUB_BOUND_S)
        ring.close()


def test_a_cli_delete_leaves_nothing_when_the_command_exits(tmp_path: Path, request) -> None:
    """The command's store scrubs a pending delete when it closes: nothing to wait for once `cuemem delete` exits
    (with the default delays), while another process's Memory still has the store open."""
    from typer.testing import CliRunner

    from cuemem.cli import app

    secret = make_secret(request)
    with open_memory(tmp_path / "mem.db", "hybrid") as memory:
        remembered_everywhere(memory, tmp_path, secret, ["hybrid"])
        target = str(memory.settings.db)
        result = CliRunner().invoke(app, ["--db", target, "--embedder", "hashing", "delete", "-u", "alice", "secret"])
        assert result.exit_code == 0, result.output
        leaks = files_with(memory, tmp_path, secret)
        assert not leaks, f"the deleted text is still on disk when `cuemem delete` exited: {leaks}"


def test_history_keeps_no_id_of_a_deleted_turn(tmp_path: Path, quick_scrub: None, request) -> None:
    """Ids callers give turns can carry user text: once a turn is deleted, no history entry names it, the entry of
    the delete itself records a count (no ids, no session id), and the history's old bytes are scrubbed too."""
    secret = make_secret(request)
    leaky = f"note-{secret}"
    with open_memory(tmp_path / "mem.db", "bm25") as memory:
        memory.add([{"id": leaky, "text": "an ordinary note"}, {"id": "keep", "text": "another"}], user_id="alice")
        memory.add({"id": f"{leaky}-2", "text": "a third note"}, user_id="alice", session_id=f"s-{secret}")
        memory.add({"id": "other", "text": "bob's note"}, user_id="bob")
        if on_postgres():
            checkpoint(memory)
        assert files_with(memory, tmp_path, leaky)
        memory.delete(leaky, user_id="alice")
        assert memory.delete_session(f"s-{secret}", user_id="alice") == 1
        history = memory.history(user_id="alice")
        assert secret not in json.dumps(history), history
        assert [(e["op"], e.get("turns")) for e in history[:2]] == [("delete_session", 1), ("delete", 1)]
        adds = [e for e in history if e["op"] == "add"]
        assert [(e["turn_ids"], e.get("redacted")) for e in adds] == [([], 1), (["keep"], 1)]
        gone_within(memory, tmp_path, secret, SCRUB_BOUND_S)
        assert [e["turn_ids"] for e in memory.history(user_id="bob")] == [["other"]]
