from __future__ import annotations

import hashlib
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _var in [v for v in os.environ if v.startswith("CUEMEM_")]:
    del os.environ[_var]
# Under pytest-xdist (`make test`) the workers share the cores: each process's torch and BLAS thread pools get
# their share (one thread each for 2 workers on 2 cores), set before numpy or torch is imported and inherited by
# the processes a test starts. Pools larger than the cores left to them spin on each other: on a loaded 2-core
# machine a 16-token answer of the shipped model took 35 s on 2 threads and 10 s on 1 (issue 32).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
if _WORKERS > 1:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for _var in (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "CUEMEM_LLM_THREADS",
        "CUEMEM_ONNX_THREADS",
    ):
        os.environ.setdefault(_var, str(max(1, _CORES // _WORKERS)))

from fakes import fake_llm  # noqa: E402

from cuemem import Memory  # noqa: E402
from cuemem.embed import HashingEmbedder  # noqa: E402
from cuemem.engines import available_engines  # noqa: E402
from cuemem.llm import LlamaCppBackend, LLMClient  # noqa: E402

# The engine registry: every suite parametrised over ENGINES covers engines registered later too.
ENGINES = sorted(available_engines())


def shipped_llm() -> LLMClient:
    """The shipped SmolLM2-135M GGUF on the default runtime (llama.cpp), with this worker's share of the cores, and
    no call cache: a test that uses it really runs the model."""
    threads = int(os.environ.get("CUEMEM_LLM_THREADS") or 0) or None
    return LLMClient(LlamaCppBackend(model="smollm2-135m", threads=threads))


def is_ablation(engine: str) -> bool:
    """A design with one part switched off or one constant changed (`stitch-noscope`, `scg-hop2`): the same code
    paths, stored state and deletes as its design, which the suites run on both stores. `-llm` variants are not
    ablations: they add model-made state (labels, records, notes) that deletes must reach."""
    return "-" in engine and not engine.endswith("-llm")


# Baselines whose stored state is part of another baseline's: bm25 and fullcontext index the turns, dense adds
# their embeddings, and hybrid does both (engines/baselines.py). On PostgreSQL, where the store is what is under
# test, hybrid runs the engine suites for them; on SQLite each runs every suite.
STATE_OF_HYBRID = frozenset({"bm25", "dense", "fullcontext"})


# The suites that stress the store's transactions (a kill mid-ingest, racing writers and deletes, interleaved
# namespaces): an ablation writes through its design's code with one part off, so its design runs these for it.
# The suites about deletes (forgetting, the delete cascade) run every ablation: each stores its own derived state.
STRESS_SUITES = frozenset({"test_crash", "test_isolation", "test_concurrency"})
ON_POSTGRES = [e for e in ENGINES if not is_ablation(e) and e not in STATE_OF_HYBRID]  # the engines PostgreSQL runs


def rotated_in(engine: Any, params: dict[str, Any], name: str, values: Sequence[Any]) -> bool:
    """`@pytest.mark.postgres_rotates(name, values)`: on PostgreSQL an engine runs the first value of the parameter
    and one of the others, a different one for the next engine, so every value still runs on several engines
    (every pair of engine and value runs on SQLite)."""
    value = params.get(name)
    if value not in values or values.index(value) == 0:
        return True
    rank = ON_POSTGRES.index(engine) if engine in ON_POSTGRES else 0
    return values.index(value) == 1 + rank % (len(values) - 1)


def runs(item: pytest.Item) -> bool:
    """Whether the suite runs this engine test. Ablations run the engine suites on SQLite, except the stress suites
    (STRESS_SUITES), which their designs run for them. On PostgreSQL, where the store is what is under test, the
    suites run each design and hybrid (for the baselines whose state is part of its, STATE_OF_HYBRID), and the
    designs' model variants (`-llm`) only in the suites marked `model_variants_on_postgres` (forgetting: deletes
    must reach the model-made state there too; the model variants write that state through the same store calls as
    their designs) and in the PostgreSQL forms of SQLite tests (`postgres_only`); a test marked
    `every_engine_on_postgres` keeps every engine there, one marked `postgres_rotates` some values of a parameter.
    This keeps the whole suite within its time (docs/development.md)."""
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = callspec.params if callspec is not None else {}
    engine = params.get("engine")
    if not isinstance(engine, str):
        return True
    module = getattr(getattr(item, "module", None), "__name__", "").rsplit(".", 1)[-1]
    if is_ablation(engine) and module in STRESS_SUITES:
        return False
    on_postgres = params.get("store_kind") == "postgres" or item.get_closest_marker("postgres_only") is not None
    if not on_postgres:
        return True
    rotates = item.get_closest_marker("postgres_rotates")
    if rotates is not None and not rotated_in(engine, params, *rotates.args):
        return False
    if item.get_closest_marker("every_engine_on_postgres") is not None:
        return True
    model_variant_kept = any(
        item.get_closest_marker(mark) is not None for mark in ("model_variants_on_postgres", "postgres_only")
    )
    return not (
        is_ablation(engine) or engine in STATE_OF_HYBRID or (engine.endswith("-llm") and not model_variant_kept)
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the engine tests that `runs` says the suite does not run."""
    kept = [item for item in items if runs(item)]
    if len(kept) < len(items):
        chosen = set(map(id, kept))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Convert the local models once, before any test starts (and in the main process only, before pytest-xdist
    starts its workers): `make setup` does it already, and then this only checks that the copies are there. A test
    must never pay the one-time conversion (minutes on a loaded machine) inside its timeout."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        from cuemem.llm.local import prepare

        prepare()
    except Exception as exc:  # a failing conversion fails the tests that need the model, with its own message
        print(f"conftest: the local models were not converted ahead: {type(exc).__name__}: {exc}", file=sys.stderr)


# --------------------------------------------------------------------------- both stores
# The suites named here run every test twice, on SQLite and on PostgreSQL + pgvector (issue 26): an autouse
# fixture `store_kind` is parametrised for them, and `store_target(path)` turns a test's store path into a fresh
# PostgreSQL database (one per path, dropped after the test) when the kind is "postgres". A test that is
# SQLite-only carries `@pytest.mark.sqlite_only("why")`, one that is PostgreSQL's form of a SQLite test
# `@pytest.mark.postgres_only("why")`.
STORES = ["sqlite", "postgres"]
BOTH_STORES = {
    "test_isolation",
    "test_crash",
    "test_forgetting",
    "test_concurrency",
    "test_hostile",
    "test_hostile_input",
    "test_memory",
    "test_stitch",
    "test_scg",
    "test_episodic",
    "test_profile",
    "test_store_contract",
    "test_fair_serving",
}
_ACTIVE = {"kind": "sqlite"}
# A database holding an empty cuemem store, made once per PostgreSQL server: each store a test opens for writing
# is created as a copy of it (CREATE DATABASE ... TEMPLATE), instead of making pgvector and the schema every time.
TEMPLATE = "cuemem_template"


class PG:
    """The tests' PostgreSQL: one pgserver instance per session (PostgreSQL + pgvector from the package)."""

    server: Any = None
    uri: str = ""
    created: list[str] = []  # noqa: RUF012  (databases of the running test)

    @classmethod
    def start(cls, root: Path) -> None:
        if cls.server is not None:
            return
        try:
            import pgserver
        except ImportError:
            if os.environ.get("CI"):
                raise
            pytest.skip("pgserver is not installed: pip install -e '.[dev,postgres]'")
        cls.server = pgserver.get_server(root, cleanup_mode="delete")  # stopped and removed when the session ends
        cls.uri = cls.server.get_uri()
        import psycopg

        # Tests only: no fsync to the disk. Commits still reach the operating system before they are acknowledged
        # (synchronous_commit stays on), so a killed client or a crashed server process loses nothing acknowledged;
        # only a crash of the machine could, which no test makes. It makes checkpoints and CREATE DATABASE cheap.
        with psycopg.connect(cls.uri, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET full_page_writes = off")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')  # one left by a crashed run in a reused folder
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        from cuemem.store.postgres import PostgresStore

        # The schema and pgvector, made once by the store itself. With 4 partitions, not 16: a test's store is
        # small, and copying and checkpointing 144 partitions per test made the suite ~40 s slower on 2 cores
        # (tests/test_pg_partitions.py creates stores with the default).
        PostgresStore(cls._uri_of(TEMPLATE), partitions=4).close()

    @classmethod
    def _uri_of(cls, name: str) -> str:
        return cls.uri.replace("/postgres?", f"/{name}?", 1)

    @classmethod
    def dsn(cls, name: str, *, store: bool = False) -> str:
        """The DSN of database `name`, created when new: empty, or with `store` an empty cuemem store (a copy of the
        template, with a salt of its own), which is what opening the empty database for writing would make."""
        import psycopg

        with psycopg.connect(cls.uri, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
                if not (store and cls._clone(conn, name)):
                    conn.execute(f'CREATE DATABASE "{name}"')
                cls.created.append(name)
        return cls._uri_of(name)

    @classmethod
    def _clone(cls, conn: Any, name: str) -> bool:
        """Create `name` as a copy of the template store with a fresh salt; False (nothing left) where it cannot."""
        import psycopg

        for attempt in range(50):
            try:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
                break
            except psycopg.errors.ObjectInUse:  # the template's last connection is still closing
                time.sleep(0.01 * (attempt + 1))
        else:
            return False
        try:
            with psycopg.connect(cls._uri_of(name), autocommit=True) as clone:
                salted = clone.execute(
                    "UPDATE cuemem.meta SET value=%s WHERE key='salt'", (secrets.token_hex(16),)
                ).rowcount
        except psycopg.Error:
            salted = 0
        if salted != 1:  # the store keeps its salt elsewhere now: let it make the database itself
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            return False
        return True

    @classmethod
    def drop_created(cls) -> None:
        import psycopg

        with psycopg.connect(cls.uri, autocommit=True) as conn:
            for name in cls.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cls.created.clear()

    @classmethod
    def data_dir(cls, dsn: str) -> Path:
        """The folder holding one database's files (for the forgetting checks)."""
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
        return Path(cls.server.pgdata) / "base" / str(oid)


def store_target(path: str | Path, *, store: bool = False) -> str:
    """What a test opens as its store: the path itself on SQLite; on PostgreSQL, the DSN of a database named after
    the path (the same path is the same database, in this process and in the processes a test starts). A new
    database is empty, or with `store` (a Memory about to open it for writing) already an empty cuemem store."""
    if _ACTIVE["kind"] != "postgres" or str(path) == ":memory:":
        return str(path)
    digest = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:20]
    return PG.dsn(f"t_{digest}", store=store)


def on_postgres() -> bool:
    return _ACTIVE["kind"] == "postgres"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "store_kind" in metafunc.fixturenames and module in BOTH_STORES:
        kinds = ["sqlite"] if metafunc.definition.get_closest_marker("sqlite_only") else STORES
        if metafunc.definition.get_closest_marker("postgres_only"):
            kinds = ["postgres"]
        metafunc.parametrize("store_kind", kinds, indirect=True)


@pytest.fixture(autouse=True)
def store_kind(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The store the test runs on ("sqlite" unless its suite runs on both stores)."""
    kind = getattr(request, "param", "sqlite")
    if kind == "postgres":
        PG.start(Path(tempfile.gettempdir()) / f"cuemem-pg-{os.getpid()}")
    _ACTIVE["kind"] = kind
    try:
        yield kind
    finally:
        _ACTIVE["kind"] = "sqlite"
        if kind == "postgres" and PG.created:
            PG.drop_created()


def store_roots(root: Path, memory: Memory | None = None) -> list[Path]:
    """The folders whose bytes hold the test's data: `root` (files beside the store, caches) and, on PostgreSQL,
    the database's own folder (not the WAL: README says what a PostgreSQL checkpoint cannot promise)."""
    roots = [root]
    if memory is not None and on_postgres():
        roots.append(PG.data_dir(str(memory.settings.db)))
    return roots


def open_memory(path: str | Path, engine: Any = "hybrid", **kwargs: Any) -> Memory:
    """A Memory as the suites use it: the model-free hashing embedder, a deterministic fake model client (see
    fakes.py) and the unscoped model-call cache in a file beside the store, unless the caller says otherwise.
    On PostgreSQL the path names a database (store_target)."""
    kwargs.setdefault("embedder", HashingEmbedder())
    kwargs.setdefault("llm", fake_llm())
    kwargs.setdefault("llm_cache", str(Path(path).parent / "llm-calls.db"))
    return Memory(store_target(path, store=not kwargs.get("read_only")), engine=engine, **kwargs)


@pytest.fixture
def make_memory(tmp_path: Path) -> Iterator[Callable[..., Memory]]:
    """Memories on temporary stores (see open_memory)."""
    opened: list[Memory] = []

    def factory(engine: Any = "hybrid", name: str = "mem.db", **kwargs: Any) -> Memory:
        memory = open_memory(tmp_path / name, engine, **kwargs)
        opened.append(memory)
        return memory

    yield factory
    for memory in opened:
        memory.close()


TRIP = [
    {"id": "d1", "speaker": "Maya", "text": "Day 1 is the Apollo Hotel near Rossio, 120 euros a night."},
    {"id": "d2", "speaker": "Maya", "text": "For Day 2 I booked Casa Azul in Alfama, 95 euros a night."},
    {"id": "d3", "speaker": "Theo", "text": "Lena is allergic to shellfish, be careful at Ramiro."},
    {"id": "d4", "speaker": "Maya", "text": "My neighbour Ines will feed the cat Miso twice a day."},
]


@contextmanager
def held_in_another_thread(hold: AbstractContextManager[Any], seconds: float = 30) -> Iterator[None]:
    """`hold` (a lock, a write transaction) entered by another thread and kept while the block runs: what a
    concurrent holder looks like to the code under test. Released, and the thread joined, after the block."""
    holding, release = threading.Event(), threading.Event()

    def keep() -> None:
        with hold:
            holding.set()
            release.wait(seconds)

    thread = threading.Thread(target=keep)
    thread.start()
    try:
        assert holding.wait(10), "the other thread never got hold"
        yield
    finally:
        release.set()
        thread.join()


def send_json(handler, status: int, payload: bytes) -> None:
    """Reply from a BaseHTTPRequestHandler with a JSON body."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


@contextmanager
def local_http_server(handler) -> Iterator[str]:
    """A threaded HTTP server on a free loopback port for the duration of a test; yields its /v1 base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()


# --------------------------------------------------------------------------- helpers of the adversarial suites
def files_containing(root: Path, needle: str) -> dict[str, str]:
    """Every file under `root` (store, -wal, -shm, model-call cache, anything) whose bytes contain `needle`
    (UTF-8), with the bytes around its first occurrence."""
    data = needle.encode("utf-8")
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            try:
                content = path.read_bytes()
            except FileNotFoundError:  # removed since the listing (PostgreSQL drops files as it works)
                continue
            at = content.find(data)
            if at >= 0:
                found[str(path.relative_to(root))] = repr(content[max(0, at - 60) : at + len(data) + 60])
    return found


def checkpoint(memory: Memory) -> None:
    """Flush the WAL into the main file and truncate it."""
    memory.checkpoint()


def derived_state(memory: Memory, **namespace: Any) -> dict[str, Any]:
    """Memory.derived_state: every derived row of a namespace, without store-internal ids."""
    return memory.derived_state(**namespace)


def state_diff(a: Any, b: Any, per_section: int = 8) -> list[str]:
    """Where two derived states differ: for each top-level section (items, engine state ...) the number of differing
    paths and up to `per_section` of them, spread over the section, each with both sides (shortened)."""

    def short(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 160 else text[:157] + "..."

    def walk(x: Any, y: Any, where: str, out: list[str]) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y), key=str):
                if key not in x or key not in y:
                    side = "first" if key in x else "second"
                    out.append(f"{where}/{key}: only in the {side}: {short(x.get(key, y.get(key)))}")
                else:
                    walk(x[key], y[key], f"{where}/{key}", out)
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{where}[{i}]", out)
        elif x != y:
            out.append(f"{where}: {short(x)} != {short(y)}")

    sections = sorted(set(a) | set(b), key=str) if isinstance(a, dict) and isinstance(b, dict) else [None]
    lines: list[str] = []
    for section in sections:
        found: list[str] = []
        if section is None:
            walk(a, b, "", found)
        else:
            walk(a.get(section), b.get(section), f"/{section}", found)
        if len(found) > per_section:
            step = (len(found) - 1) / (per_section - 1)
            lines.append(f"/{section}: {len(found)} differences, for instance:")
            found = [found[round(i * step)] for i in range(per_section)]
        lines += found
    return lines


# --------------------------------------------------------------------------- processes, quickly
# The crash and multi-process tests need many short-lived processes per engine; a fresh interpreter pays seconds of
# imports and model loading (spaCy) each time. A zygote warms every registered engine once, then forks a child per
# job: each child is a separate OS process with its own store connections, started in milliseconds.
ZYGOTE = textwrap.dedent(
    """
    import json, os, signal, sys, tempfile, traceback
    from pathlib import Path
    from cuemem import Memory
    from cuemem.embed import HashingEmbedder
    from cuemem.engines import available_engines
    from fakes import fake_llm

    with tempfile.TemporaryDirectory() as tmp:  # load what each engine loads, once, before any fork
        for name in sorted(available_engines()):
            with Memory(Path(tmp) / "warm.db", engine=name, embedder=HashingEmbedder(), llm=fake_llm(),
                        llm_cache=str(Path(tmp) / "llm-calls.db")) as memory:
                memory.add({"id": "warm", "text": "We booked the hotel. Is it close?"}, user_id="warm")
                memory.search("hotel", user_id="warm")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            continue
        status = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            out = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            sys.stdin, sys.stdout, sys.stderr = open(os.devnull), open(1, "w", buffering=1), open(2, "w", buffering=1)
            sys.argv = ["job", *job["argv"]]
            exec(compile(job["code"], "<job>", "exec"), {"__name__": "__main__"})
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            with open(job["out"] + ".tmp", "w") as f:
                f.write(str(status))
            os.replace(job["out"] + ".tmp", job["out"] + ".status")
            os._exit(status)
    """
)


class Child:
    """A process forked by the zygote: its pid, and its output (stdout and stderr) in a file."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out

    def output(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace") if self.out.exists() else ""

    def lines(self) -> list[str]:
        """Complete lines written so far."""
        text = self.output()
        return text.split("\n")[:-1]

    def status(self) -> int | None:
        path = self.out.with_name(self.out.name + ".status")
        return int(path.read_text()) if path.exists() else None

    def wait_for(self, condition: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.time() + timeout
        while not condition():
            if time.time() > deadline:
                self.kill()
                raise AssertionError(f"child {self.pid} timed out; its output:\n{self.output()[-3000:]}")
            if self.status() is not None and not condition():
                raise AssertionError(f"child {self.pid} exited {self.status()}; its output:\n{self.output()[-3000:]}")
            time.sleep(0.005)

    def wait(self, timeout: float = 120.0) -> int:
        self.wait_for(lambda: self.status() is not None, timeout)
        return int(self.status())  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL, and wait until the process is gone."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.005)
        raise AssertionError(f"child {self.pid} survived SIGKILL")


class Forker:
    """Starts the zygote (once per session) and forks children running a script with arguments."""

    def __init__(self, workdir: Path) -> None:
        tests_dir = Path(__file__).resolve().parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir.parent), str(tests_dir)])}
        self.workdir = workdir
        self.log = open(workdir / "zygote.log", "w")  # noqa: SIM115  (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=tests_dir.parent,
        )
        self.replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.count = 0
        self._lock = threading.Lock()
        assert self._reply(300) == "ready", (workdir / "zygote.log").read_text()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(line.strip())
        self.replies.put("")

    def _reply(self, timeout: float) -> str:
        try:
            return self.replies.get(timeout=timeout)
        except queue.Empty:
            return ""

    def start(self, code: str, *argv: str) -> Child:
        with self._lock:
            self.count += 1
            out = self.workdir / f"child-{self.count}.out"
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"code": code, "argv": list(argv), "out": str(out)}) + "\n")
            self.proc.stdin.flush()
            reply = self._reply(30)
        assert reply.isdigit(), f"the zygote did not fork: {(self.workdir / 'zygote.log').read_text()[-3000:]}"
        return Child(int(reply), out)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def forker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forker]:
    """Fork processes from a warm interpreter (see ZYGOTE)."""
    zygote = Forker(tmp_path_factory.mktemp("zygote"))
    yield zygote
    zygote.close()
