"""PostgreSQL + pgvector at the library level (issue 26): 8 writer and 8 reader processes on one database ingest as
one process would; a server stopped under a Memory gives clear StoreErrors, loses nothing acknowledged, writes
nothing half, and the same Memory works again once the server is back; PostgresStore specifics (redaction, bad
DSNs, unreachable servers, HNSW indexes per namespace partition).

These tests run on PostgreSQL only (this suite is not in conftest.BOTH_STORES): the `pg` fixture starts the tests'
server and creates the databases, dropped after each test."""

from __future__ import annotations

import io
import json
import os
import socket
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PG, Forker, derived_state, state_diff
from fakes import fake_llm
from test_concurrency import ADDS, USER, WORKER, batch

from cuemem import Memory, Settings, StoreError
from cuemem.embed import HashingEmbedder
from cuemem.store import redact
from cuemem.store.base import NewItem
from cuemem.store.postgres import PostgresStore
from cuemem.types import Namespace

ENGINES = ["stitch", "scg", "episodic"]
WRITERS, READERS = 8, 8
TIMEOUT = 1.5  # seconds a Memory waits for a connection while the server is down (the default is 10)


# --------------------------------------------------------------------------- the server and its databases
@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """The DSN of a fresh database per label (dropped after the test); the server is restarted if a test left it
    stopped."""
    PG.start(Path(tempfile.gettempdir()) / f"cuemem-pg-{os.getpid()}")
    stem = f"t26_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**10}"
    try:
        yield lambda label: PG.dsn(f"{stem}_{label}")
    finally:
        start_server()
        PG.drop_created()


def pg_ctl(*args: str) -> None:
    from pgserver import _commands

    # As pgserver runs it: as its own system user when the tests run as root.
    _commands.pg_ctl(["-w", *args], pgdata=PG.server.pgdata, user=PG.server.system_user, timeout=60)


def server_running() -> bool:
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(PG.server.pgdata)
    return info is not None and info.is_running()


def start_server() -> None:
    if PG.server is not None and not server_running():
        PG.server.ensure_postgres_running()  # the same socket folder: DSNs made before stay valid
    assert PG.server is None or server_running()


@contextmanager
def server_stopped(mode: str = "fast") -> Iterator[None]:
    """PostgreSQL stopped (`fast`: sessions are terminated, open transactions rolled back; `immediate`: a crash,
    recovered from the WAL at the next start) for the body; started again after it, whatever happens."""
    pg_ctl("-m", mode, "stop")
    try:
        assert not server_running()
        yield
    finally:
        start_server()


def memory_on(dsn: str, engine: str, tmp_path: Path, timeout: float | None = None) -> Memory:
    """A Memory on the database; with `timeout`, its store waits that long for a connection (not 10 s)."""
    memory = Memory(
        dsn, engine=engine, embedder=HashingEmbedder(), llm=fake_llm(), llm_cache=str(tmp_path / "llm-calls.db")
    )
    if timeout is not None:  # Memory opens its store with the default timeout: reopen it before any use
        memory.store.close()
        memory.store = PostgresStore(dsn, timeout=timeout)
    return memory


def pg_store(memory: Memory) -> PostgresStore:
    assert isinstance(memory.store, PostgresStore)
    return memory.store


def assert_ingested_once(memory: Memory, engine: str, expected: set[str], rebuild_dsn: str, tmp_path: Path) -> None:
    """Every turn stored once, and the derived state equal to that of a fresh database fed the same log by one
    process at once (as test_concurrency.assert_equals_one_sequential_ingest, for any set of turns)."""
    ids = [t.id for t in memory.turns(user_id=USER)]
    assert len(ids) == len(set(ids)), "a turn was stored twice"
    assert set(ids) == expected, f"lost: {sorted(expected - set(ids))}, unexpected: {sorted(set(ids) - expected)}"
    log = io.StringIO()
    assert memory.export(log, user_id=USER) == len(ids)
    (tmp_path / "rebuild").mkdir(exist_ok=True)
    with memory_on(rebuild_dsn, engine, tmp_path / "rebuild") as fresh:
        report = fresh.import_(log.getvalue().splitlines())
        assert report.added == len(ids) and not report.errors
        assert [t.id for t in fresh.turns(user_id=USER)] == ids  # the same log, in the same order
        diff = state_diff(derived_state(memory, user_id=USER), derived_state(fresh, user_id=USER))
    assert not diff, "the ingest under test (first) differs from one sequential ingest (second):\n" + "\n".join(diff)
    assert memory.store.integrity_check() == "ok"


# --------------------------------------------------------------------------- 8 writers + 8 readers
READER = textwrap.dedent(
    """
    import json, os, random, sys, time
    from cuemem import Memory, UnknownNamespaceError
    from cuemem.embed import HashingEmbedder
    from fakes import fake_llm
    dsn, engine, cache, expected, go, writers_done = sys.argv[1:]
    expected = json.loads(expected)  # turn id -> text
    memory = Memory(dsn, engine=engine, embedder=HashingEmbedder(), llm=fake_llm(), llm_cache=cache)
    print("ready", flush=True)
    deadline = time.time() + 120
    while not os.path.exists(go):
        if time.time() > deadline:
            sys.exit("no go signal")
        time.sleep(0.001)

    def batch_of(turn_id):
        return turn_id.rsplit("t", 1)[0]  # w{writer}b{add}t{i}: the add() call that wrote it

    sizes = {}
    for turn_id in expected:
        sizes[batch_of(turn_id)] = sizes.get(batch_of(turn_id), 0) + 1
    seen, reads, searches, gets = set(), 0, 0, 0
    while True:
        final = os.path.exists(writers_done)  # read after every writer returned: must see every turn
        try:
            ids = [t.id for t in memory.turns(user_id="team")]
        except UnknownNamespaceError:
            ids = []
        now = set(ids)
        assert len(ids) == len(now), "a turn is listed twice"
        assert now <= set(expected), f"unexpected turns: {sorted(now - set(expected))}"
        assert seen <= now, f"turns seen before vanished: {sorted(seen - now)}"
        counts = {}
        for turn_id in now:
            counts[batch_of(turn_id)] = counts.get(batch_of(turn_id), 0) + 1
        half = {b: n for b, n in counts.items() if n != sizes[b]}
        assert not half, f"a reader saw part of an add(): {half}"
        seen = now
        reads += 1
        if ids:
            hits = memory.search("Is the hotel close to the river?", user_id="team", k=5).turn_ids
            assert set(hits) <= set(expected), hits
            searches += 1
            turn = memory.get(random.choice(ids), user_id="team")
            assert turn.text == expected[turn.id], (turn.id, turn.text)
            gets += 1
        if final:
            break
        if reads >= 150 or time.time() > deadline:  # bounded: then wait for the writers and read once more
            while not os.path.exists(writers_done) and time.time() < deadline:
                time.sleep(0.01)
            if not os.path.exists(writers_done):
                sys.exit("the writers did not finish")
        time.sleep(0.005)
    assert seen == set(expected), f"after every add() returned, a reader misses {sorted(set(expected) - seen)}"
    memory.close()
    print(f"done {reads} {searches} {gets}", flush=True)
    """
)


# Every engine runs the same check with four writer processes (test_concurrency.py, on PostgreSQL too); eight
# writers and eight readers run for the default engine.
@pytest.mark.parametrize("engine", [Settings().engine])
def test_eight_writer_and_eight_reader_processes_ingest_as_one(
    pg: Callable[[str], str], tmp_path: Path, engine: str, forker: Forker
):
    """8 processes add disjoint turns to one namespace (3 add() calls each) while 8 more list, search and get in a
    loop: readers only ever see whole add() calls, never lose a turn once seen, and see every turn once the writers
    returned; every turn is stored once and ingested once (derived state = one sequential ingest)."""
    dsn = pg("shared")
    cache, go, writers_done = str(tmp_path / "llm-calls.db"), tmp_path / "go", tmp_path / "writers-done"
    expected = {t["id"]: t["text"] for w in range(WRITERS) for b in range(ADDS) for t in batch(w, b)}
    writers = [
        forker.start(WORKER, dsn, engine, cache, str(w), json.dumps([batch(w, b) for b in range(ADDS)]), str(go))
        for w in range(WRITERS)
    ]
    readers = [
        forker.start(READER, dsn, engine, cache, json.dumps(expected), str(go), str(writers_done))
        for _ in range(READERS)
    ]
    children = writers + readers
    try:
        for child in children:
            child.wait_for(lambda child=child: "ready" in child.lines())
        go.touch()
        failed = [f"writer {child.pid}:\n{child.output()}" for child in writers if child.wait() != 0]
        assert not failed, "\n".join(failed)
        writers_done.touch()
        failed = [f"reader {child.pid}:\n{child.output()}" for child in readers if child.wait() != 0]
        assert not failed, "\n".join(failed)
    finally:
        for child in children:
            if child.status() is None:
                child.kill()
    done = [line.split() for child in readers for line in child.lines() if line.startswith("done")]
    assert len(done) == READERS and all(int(searches) > 0 for _, _, searches, _ in done), done
    with memory_on(dsn, engine, tmp_path) as memory:
        assert_ingested_once(memory, engine, set(expected), pg("rebuild"), tmp_path)


# --------------------------------------------------------------------------- the server goes away
def assert_unavailable(exc: BaseException, dsn: str) -> None:
    """A cuemem StoreError naming the store (without its password) as unavailable: one line, no psycopg type."""
    assert type(exc) is StoreError, f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert message.startswith(f"PostgreSQL at {redact(dsn)} is unavailable"), message
    assert "\n" not in message and "Traceback" not in message, message


def test_a_stopped_server_gives_store_errors_and_the_same_memory_works_again(pg: Callable[[str], str], tmp_path: Path):
    dsn = pg("stop")
    with memory_on(dsn, "stitch", tmp_path, TIMEOUT) as memory:
        acknowledged = {t["id"] for b in range(2) for t in batch(0, b)}
        for b in range(2):
            memory.add(batch(0, b), user_id=USER, session_id="s")
        before = memory.search("Is the hotel close to the river?", user_id=USER, k=5).turn_ids
        assert before

        with server_stopped("fast"):
            calls: dict[str, Callable[[], Any]] = {
                "add": lambda: memory.add(batch(1, 0), user_id=USER, session_id="s"),
                "search": lambda: memory.search("Is the hotel close to the river?", user_id=USER, k=5),
                "get": lambda: memory.get("w0b0t0", user_id=USER),
                "turns": lambda: memory.turns(user_id=USER),
                "delete": lambda: memory.delete("w0b0t0", user_id=USER),
            }
            for name, call in calls.items():
                started = time.monotonic()
                with pytest.raises(StoreError) as raised:
                    call()
                assert_unavailable(raised.value, dsn)
                assert time.monotonic() - started < TIMEOUT + 3, f"{name} took {time.monotonic() - started:.1f} s"

        # The server is back: the same Memory works at once, nothing of the failed add or delete was written.
        started = time.monotonic()
        assert [t.id for t in memory.turns(user_id=USER)] == sorted(acknowledged)
        assert time.monotonic() - started < TIMEOUT + 3
        assert memory.search("Is the hotel close to the river?", user_id=USER, k=5).turn_ids == before
        assert memory.get("w0b0t0", user_id=USER).text == batch(0, 0)[0]["text"]
        result = memory.add(batch(1, 0), user_id=USER, session_id="s")  # the failed add, retried
        assert result.added == [t["id"] for t in batch(1, 0)]
        acknowledged |= set(result.added)
        assert_ingested_once(memory, "stitch", acknowledged, pg("rebuild"), tmp_path)


def test_a_quick_restart_between_calls_is_not_noticed(pg: Callable[[str], str], tmp_path: Path):
    """Stopped and started again while idle, with a pool full of connections to the old server: the next calls
    succeed at once (the dead connections are replaced, not waited on with the pool's growing pauses: before, the
    first add() after the restart timed out)."""
    dsn = pg("restart")
    with memory_on(dsn, "stitch", tmp_path, TIMEOUT) as memory:
        store = pg_store(memory)
        memory.add(batch(0, 0), user_id=USER, session_id="s")
        errors: list[BaseException] = []

        def search() -> None:
            try:
                for _ in range(10):
                    memory.search("Is the hotel close to the river?", user_id=USER, k=5)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=search) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert store._pool.get_stats()["pool_available"] > 1  # several idle connections to the old server

        with server_stopped("fast"):
            pass
        # No wait: a connection used within the last second is not checked before use, but a transaction whose BEGIN
        # meets a broken connection is begun again on a checked one, and a read is retried once.
        for b in range(1, 3):
            started = time.monotonic()
            memory.add(batch(0, b), user_id=USER, session_id="s")
            assert time.monotonic() - started < TIMEOUT, f"add() took {time.monotonic() - started:.1f} s"
        assert_ingested_once(
            memory, "stitch", {t["id"] for b in range(3) for t in batch(0, b)}, pg("rebuild"), tmp_path
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_server_crash_under_a_writer_keeps_every_add_whole(pg: Callable[[str], str], tmp_path: Path, engine: str):
    """A thread adds in a loop; PostgreSQL crashes (`-m immediate`) under it. Every add() either returned (its turns
    are there after recovery) or raised StoreError, and then its turns are there whole or not at all, as its
    message says; no other exception escapes. The same Memory then catches up and matches a sequential ingest."""
    dsn = pg("crash")
    with memory_on(dsn, engine, tmp_path, TIMEOUT) as memory:
        memory.add({"id": "warm", "text": "warming up the engine"}, user_id="warm")
        outcomes: list[tuple[int, BaseException | None]] = []
        stop = threading.Event()

        def writer() -> None:
            b = 0
            while not stop.is_set() and b < 200:
                try:
                    memory.add(batch(b % WRITERS, b // WRITERS), user_id=USER, session_id=f"b{b}")
                    outcomes.append((b, None))
                except BaseException as exc:  # judged below
                    outcomes.append((b, exc))
                b += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while sum(exc is None for _, exc in outcomes) < 3 and time.monotonic() < deadline:
                time.sleep(0.005)
            with server_stopped("immediate"):
                deadline = time.monotonic() + 30
                while sum(exc is not None for _, exc in outcomes) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)
        finally:
            stop.set()
            thread.join(60)
        assert not thread.is_alive()

        wrong = [
            f"add {b}: {type(exc).__name__}: {exc}"
            for b, exc in outcomes
            if exc is not None and type(exc) is not StoreError
        ]
        assert not wrong, "\n".join(wrong)
        failed = [(b, exc) for b, exc in outcomes if exc is not None]
        assert len(failed) >= 2 and sum(exc is None for _, exc in outcomes) >= 3, outcomes

        stored = {t.id for t in memory.turns(user_id=USER)}  # the same Memory, after recovery
        expected: set[str] = set()
        for b, exc in outcomes:
            ids = {t["id"] for t in batch(b % WRITERS, b // WRITERS)}
            if exc is None:
                assert ids <= stored, f"add {b} returned but lost {sorted(ids - stored)}"
            else:
                message = str(exc)
                assert "\n" not in message and "Traceback" not in message, message
                assert ids <= stored or not ids & stored, f"add {b} is stored in part: {sorted(ids & stored)}"
                # What the message says happened to the turns (the log write, or indexing after it, failed).
                if message.startswith(f"{len(ids)} turns were stored in the log"):
                    assert ids <= stored, f"add {b} lost {sorted(ids - stored)}, yet says: {message}"
                elif "may or may not have been stored" not in message:  # else: whole or nothing, either is true
                    assert not ids & stored, f"add {b} stored {sorted(ids & stored)}, yet says: {message}"
            if ids <= stored:
                expected |= ids
        assert stored == expected

        memory.add({"id": "after", "text": "The server is back."}, user_id=USER, session_id="after")
        assert_ingested_once(memory, engine, expected | {"after"}, pg("rebuild"), tmp_path)


# --------------------------------------------------------------------------- PostgresStore specifics
def test_redact_never_shows_the_password():
    cases = {
        "postgresql://alice:s3cret@db.example.org:5433/mem?sslmode=require": "postgresql://alice@db.example.org:5433/mem",
        "postgres://alice:s3cret@db.example.org/mem": "postgresql://alice@db.example.org/mem",
        "postgresql://alice@/mem?host=/run/pg&password=s3cret": "postgresql://alice@/mem?host=/run/pg",
        "postgresql://:s3cret@localhost/mem": "postgresql://localhost/mem",
    }
    for dsn, shown in cases.items():
        assert redact(dsn) == shown
    for broken in ("postgresql://alice:s3cret@[::1/mem", "postgresql://alice:s3cret@host/mem?nonsense=%zz"):
        assert "s3cret" not in redact(broken)


def test_a_store_error_never_shows_the_password(pg: Callable[[str], str]):
    dsn = pg("secret").replace("postgres:@", "postgres:s3cret@", 1)
    gone = dsn.replace("?host=", "?host=/nonexistent", 1)
    with pytest.raises(StoreError) as raised:
        PostgresStore(gone, timeout=1)
    assert "s3cret" not in str(raised.value) and "cannot connect to postgresql://postgres@" in str(raised.value)
    with PostgresStore(dsn, timeout=1) as store:  # trust authentication: the password is not checked
        assert "s3cret" not in store.path
    with PostgresStore(dsn, read_only=True, timeout=1) as store, pytest.raises(StoreError) as raised:
        store.namespace_id(Namespace("u"), create=True)
    assert "read-only" in str(raised.value) and "postgresql://postgres@/" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_an_invalid_dsn_is_a_store_error_at_once():
    for dsn in ("postgresql://alice@host/mem?no_such_option=1", "postgresql://alice@host:notaport/mem"):
        started = time.monotonic()
        with pytest.raises(StoreError) as raised:
            PostgresStore(dsn, timeout=1)
        assert time.monotonic() - started < 2
        assert "postgresql://" in str(raised.value) and "\n" not in str(raised.value), str(raised.value)


def test_an_unreachable_server_is_a_store_error_within_the_timeout(tmp_path: Path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused at once
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP but never answers: only the timeout ends the attempt
    try:
        for dsn in (
            f"postgresql://u@127.0.0.1:{port}/mem",
            f"postgresql://u@/mem?host={tmp_path}",
            f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/mem",
        ):
            started = time.monotonic()
            with pytest.raises(StoreError) as raised:
                PostgresStore(dsn, timeout=1)
            assert time.monotonic() - started < 4, dsn
            assert str(raised.value).startswith(f"cannot connect to {redact(dsn)}"), str(raised.value)
    finally:
        silent.close()


def unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    v = rng.standard_normal((n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def add_vectors(
    store: PostgresStore, ns: int, vecs: np.ndarray, prefix: str, space: str = "steps", model: str = "m"
) -> list[int]:
    keys = [f"{prefix}{i}" for i in range(len(vecs))]
    store.put_items(ns, space, [NewItem(key, f"text {key}", {}, []) for key in keys])
    ids = store.item_ids(ns, space, keys)
    store.put_vectors(ns, space, model, [(ids[k], f"h{k}", v) for k, v in zip(keys, vecs, strict=True)])
    return [ids[k] for k in keys]


def index_names(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname='cuemem' AND tablename LIKE 'vectors_p%'"
            " AND indexname LIKE 'vec_hnsw_%'"
        ).fetchall()
    return {r[0] for r in rows}


def test_hnsw_index_per_partition(pg: Callable[[str], str], monkeypatch: pytest.MonkeyPatch):
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    dsn = pg("hnsw")
    rng = np.random.default_rng(26)
    dims = 32
    with PostgresStore(dsn, hnsw_threshold=50, timeout=5) as store:
        ns = store.namespace_id(Namespace("alice"), create=True)
        other = store.namespace_id(Namespace("bob"), create=True)
        queries = unit(rng, 8, dims)

        # Below the threshold: no index, exact search.
        mine = add_vectors(store, ns, unit(rng, 40, dims), "a")
        assert store._query("SELECT COUNT(*) FROM vector_indexes")[0][0] == 0 and not index_names(dsn)
        # Bob's vectors are the queries themselves: they would top every list if they leaked into Alice's.
        theirs = add_vectors(store, other, np.concatenate([queries, unit(rng, 60, dims)]), "b")
        mine += add_vectors(store, ns, unit(rng, 360, dims), "c")
        assert store.vector_count(ns, "steps", "m") == 400

        rows = store._query("SELECT ns, name FROM vector_indexes ORDER BY ns")
        assert [r[0] for r in rows] == [ns, other]  # one index per partition that passed the threshold
        names = {int(n): name for n, name in rows}
        assert index_names(dsn) == set(names.values())

        recalls = []
        for q in queries:
            approx = store.vector_search(ns, "steps", "m", q, 10)
            exact = store.vector_search(ns, "steps", "m", q, 10, exact=True)
            assert len(approx) == len(exact) == 10
            assert {i for i, _ in approx} <= set(mine) and {i for i, _ in exact} <= set(mine)
            recalls.append(len({i for i, _ in approx} & {i for i, _ in exact}) / 10)
            scores = [s for _, s in approx]
            assert scores == sorted(scores, reverse=True)
            theirs_top = store.vector_search(other, "steps", "m", q, 1)
            assert theirs_top[0][0] in theirs and theirs_top[0][1] > 0.999  # Bob finds his own copy of q
        assert np.mean(recalls) >= 0.9, recalls

        # vector_search's statement is answered through the partition's index.
        seen: list[tuple[Any, Any]] = []
        query = store._query
        monkeypatch.setattr(store, "_query", lambda q, p=(): seen.append((q, p)) or query(q, p))
        store.vector_search(ns, "steps", "m", queries[0], 10)
        monkeypatch.undo()
        assert len(seen) == 1
        with psycopg.connect(dsn, autocommit=True, options="-c search_path=cuemem,public") as conn:
            register_vector(conn)
            statement = seen[0][0]
            statement = statement if isinstance(statement, sql.Composable) else sql.SQL(statement)
            plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + statement, seen[0][1]).fetchall())
        assert names[ns] in plan, plan

        # Deleting a namespace drops its partition's index, and only that one.
        store.delete_namespace(ns)
        assert index_names(dsn) == {names[other]}
        assert [r[0] for r in store._query("SELECT ns FROM vector_indexes")] == [other]
        assert store.vector_search(other, "steps", "m", queries[1], 1)[0][0] in theirs
