"""Load test of `cuemem serve` (issues 17, 26): concurrent clients writing and searching over loopback, then a kill -9.

N `cuemem serve` processes (`--servers`, default 1) on one store (`--db`: a temporary SQLite file by default, or a
PostgreSQL DSN; `--pgserver DIR` starts PostgreSQL + pgvector from the `pgserver` package and gives each phase a
fresh database), sharing one key file (`--keys-file`). C client threads (`--clients`), each with its own API key
(its own user), are spread round-robin over the servers: every client makes W writes (POST /v1/memories, one turn
each), each followed by a search (GET /v1/memories/search), a GET of one of its own acknowledged turns by id, and
every fifth time a GET of another client's turn id (which must be a 404).

Checked: no response is a 5xx; zero cross-key reads (every hit's turn ids, every GET's turn belongs to the
client asking); afterwards every acknowledged write (a 200 listing the id) is readable by id through every live
server. Reported: requests, acknowledged, lost, 5xx, cross-key reads, latency p50/p95/p99 per operation, throughput.

Phase 1 (load): the load as above. Phase 2 (kill9): the same load on a fresh store; after `--kill-after` seconds
one server gets SIGKILL (no shutdown, no flush). With one server the clients stop and the server is started again
on the same store; with several, the others keep serving, the dead server's clients move to a live one (retrying
the request that failed), and the dead server is started again at the end. Every write acknowledged by any
server must be readable through every server, the restarted one included.

A 429 or 503 `busy` (a server's lane is full, issue 33: after a kill the survivors take every client) is retried
after its Retry-After, as a client should, and counted (`busy_refusals_retried`); latency includes those waits.
Any other 5xx is a failure. `--index-on-add` makes the servers index inside each add (default: in the background).

Bounded and loopback only: the servers listen on 127.0.0.1, the clients stop after their quota. The rate limit is
off (`--rate 0`): this measures the server, not the limiter.

    python benchmarks/load.py --clients 50 --writes 200 --out bench-out/i17/load.json
    python benchmarks/load.py --pgserver /tmp/pg --servers 2 --clients 50 --writes 40 --embedder hashing \
        --engine hybrid --kill-after 15 --out bench-out/i26/load-pg.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from cuemem.server.keys import KeyRing
from cuemem.store import display_target, is_dsn

WORDS = [
    "garden",
    "harbour",
    "violin",
    "ticket",
    "lantern",
    "pepper",
    "orbit",
    "canyon",
    "meadow",
    "copper",
    "falcon",
    "puzzle",
    "river",
    "tundra",
    "velvet",
    "marble",
    "comet",
    "saddle",
    "willow",
    "ember",
]
OPS = ("write", "search", "get", "cross_get")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(db: str, port: int, keys: Path, args: argparse.Namespace, log: Path) -> subprocess.Popen[bytes]:
    """`cuemem serve` in its own process (its own session, so a kill reaches only it); waits for /healthz."""
    command = [sys.executable, "-m", "cuemem.cli", "--db", db]
    if args.engine:
        command += ["--engine", args.engine]
    if args.embedder:
        command += ["--embedder", args.embedder]
    command += [
        "serve",
        "--port",
        str(port),
        "--keys-file",
        str(keys),
        "--rate",
        "0",
        "--log-level",
        "warning",
        "--no-mcp",
        "--index-on-add" if args.index_on_add else "--index-in-background",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(
        command, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}):\n{_tail(log)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the server did not start in 180 s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


def warm_up(url: str, token: str, *, forget: bool = True) -> None:
    """One write and one search, so model loading is not counted as the first clients' latency; with `forget`, the
    warm-up user is deleted after (a delete schedules the store's scrub of the tables it touched)."""
    with httpx.Client(base_url=url, headers={"X-API-Key": token}, timeout=300) as c:
        c.post("/v1/memories", json={"messages": [{"id": "warm", "text": "warming up the embedder"}]})
        c.get("/v1/memories/search", params={"q": "warming up"})
        if forget:
            c.delete("/v1/users/warmup")


class Fleet:
    """The servers of a phase: their URLs, processes and which are dead. A server is marked dead before it is
    killed, so a client whose request fails knows whether to move (its server was killed) or not (a real error)."""

    def __init__(self, db: str, keys: Path, args: argparse.Namespace, root: Path, count: int) -> None:
        self.db, self.keys, self.args, self.root = db, keys, args, root
        self.ports = [free_port() for _ in range(count)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.dead: set[int] = set()
        self.killed_at: float | None = None  # time.perf_counter() of the kill
        self._lock = threading.Lock()

    def start(self, i: int) -> None:
        self.processes[i] = start_server(self.db, self.ports[i], self.keys, self.args, self.root / f"server-{i}.log")
        with self._lock:
            self.dead.discard(i)

    def kill(self, i: int) -> None:
        """SIGKILL: no shutdown, no flush; what was acknowledged must survive."""
        process = self.processes[i]
        assert process is not None
        with self._lock:
            self.dead.add(i)
            self.killed_at = time.perf_counter()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.processes[i] = None

    def is_dead(self, i: int) -> bool:
        with self._lock:
            return i in self.dead

    def next_live(self, i: int) -> int | None:
        with self._lock:
            for step in range(1, len(self.urls) + 1):
                j = (i + step) % len(self.urls)
                if j not in self.dead:
                    return j
        return None

    def live(self) -> list[int]:
        with self._lock:
            return [i for i in range(len(self.urls)) if i not in self.dead]

    def stop_all(self) -> None:
        for i, process in enumerate(self.processes):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            self.processes[i] = None


def owner(turn_id: str) -> str:
    """The client a turn id belongs to: ids are `<user>-<n>`."""
    return turn_id.rsplit("-", 1)[0]


class Client(threading.Thread):
    """One client: its own key and user, a home server; `writes` rounds of write, search, get (and a cross-key get
    every fifth round); records every outcome. When its server was killed it moves to the next live one."""

    def __init__(
        self,
        fleet: Fleet,
        home: int,
        token: str,
        user: str,
        neighbour: str,
        writes: int,
        seed: int,
        stop: threading.Event,
    ) -> None:
        super().__init__(daemon=True)
        self.fleet, self.server, self.token, self.user, self.neighbour = fleet, home, token, user, neighbour
        self.writes, self.stop = writes, stop
        self.random = random.Random(seed)
        self.acked: dict[str, str] = {}  # turn id -> its text
        self.latency: dict[str, list[float]] = {op: [] for op in OPS}
        self.status: dict[str, dict[int, int]] = {}  # server URL -> status code -> count
        self.failures: list[str] = []
        self.live_failures = 0  # requests a server that was not killed answered with no response
        self.cross_key: list[str] = []  # what another client's data looked like when it reached this one
        self.own_missing: list[str] = []  # acknowledged turns a GET by id did not find
        self.moves = 0
        self.after_kill = 0  # responses received after the kill
        self.busy = 0  # refusals of a full lane (429/503 "busy", with Retry-After), each retried as a client would
        self._http: dict[int, httpx.Client] = {}

    def http(self, i: int) -> httpx.Client:
        if i not in self._http:
            self._http[i] = httpx.Client(base_url=self.fleet.urls[i], headers={"X-API-Key": self.token}, timeout=120)
        return self._http[i]

    def run(self) -> None:
        try:
            self._rounds()
        finally:
            for c in self._http.values():
                c.close()

    def _rounds(self) -> None:
        for i in range(self.writes):
            if self.stop.is_set():
                return
            tid = f"{self.user}-{i}"
            words = " ".join(self.random.choice(WORDS) for _ in range(8))
            text = f"Note {i} of {self.user}: the {words} plan, code {tid}."
            message = {"id": tid, "text": text, "session_id": f"s{i // 20}"}
            written = self._call("write", lambda c, m=message: c.post("/v1/memories", json={"messages": [m]}))
            if written is not None and written.status_code == 200:
                body = written.json()
                if tid in body.get("added", []) or tid in body.get("skipped", []):  # skipped: a retry found it
                    self.acked[tid] = text
            query = " ".join(self.random.choice(WORDS) for _ in range(3))
            found = self._call("search", lambda c, q=query: c.get("/v1/memories/search", params={"q": q, "k": 5}))
            if found is not None and found.status_code == 200:
                data = found.json()
                if data.get("namespace", {}).get("user_id") != self.user:
                    self.cross_key.append(f"search namespace {data.get('namespace')}")
                self.cross_key += [
                    f"search hit {t}" for h in data["hits"] for t in h["turn_ids"] if owner(t) != self.user
                ]
            if self.acked:
                own = self.random.choice(sorted(self.acked))
                got = self._call("get", lambda c, t=own: c.get(f"/v1/memories/{t}"))
                if got is not None and got.status_code == 200:
                    turn = got.json()
                    if turn.get("id") != own or turn.get("text") != self.acked[own]:
                        self.cross_key.append(f"get {own} returned {turn.get('id')}")
                elif got is not None and got.status_code == 404:
                    self.own_missing.append(own)
            if i % 5 == 4:
                theirs = f"{self.neighbour}-{self.random.randrange(i + 1)}"
                got = self._call("cross_get", lambda c, t=theirs: c.get(f"/v1/memories/{t}"))
                if got is not None and got.status_code != 404 and got.status_code < 500:
                    self.cross_key.append(f"get {theirs} of {self.neighbour}: {got.status_code}")

    def _call(self, kind: str, request: Callable[[httpx.Client], httpx.Response]) -> httpx.Response | None:
        """The request on the client's server; if that server was killed, once more on the next live one."""
        for _attempt in range(2):
            start = time.perf_counter()
            try:
                response = request(self.http(self.server))
                for _ in range(BUSY_RETRIES):  # a full lane refuses at once and says when to come back
                    if response.status_code not in (429, 503) or _error_kind(response) != "busy":
                        break
                    self.busy += 1
                    time.sleep(min(1.0, float(response.headers.get("retry-after") or 1)) * random.uniform(0.2, 1.0))
                    response = request(self.http(self.server))
            except httpx.HTTPError as exc:  # the server went away or a timeout: not acknowledged
                self.failures.append(f"{kind} on {self.fleet.urls[self.server]}: {type(exc).__name__}")
                if not self.fleet.is_dead(self.server):
                    self.live_failures += 1
                    return None  # a live server failed: counted, not retried
                moved = self.fleet.next_live(self.server)
                if moved is None or self.fleet.args.servers < 2:
                    return None
                self.server, self.moves = moved, self.moves + 1
                continue
            done = time.perf_counter()
            self.latency[kind].append(done - start)
            codes = self.status.setdefault(self.fleet.urls[self.server], {})
            codes[response.status_code] = codes.get(response.status_code, 0) + 1
            if self.fleet.killed_at is not None and start > self.fleet.killed_at:
                self.after_kill += 1
            return response
        return None


BUSY_RETRIES = 30


def _error_kind(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(values: list[float]) -> dict[str, Any]:
    """Milliseconds: p50, p95, p99, mean and the count."""
    return {
        "p50": round(1000 * percentile(values, 0.5), 1),
        "p95": round(1000 * percentile(values, 0.95), 1),
        "p99": round(1000 * percentile(values, 0.99), 1),
        "mean": round(1000 * statistics.fmean(values), 1) if values else None,
        "n": len(values),
    }


def unreadable(url: str, tokens: dict[str, str], acked: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Per user, the acknowledged turns that a GET by id through `url` does not return as written (and, listed
    through /v1/memories, the namespace must hold them too)."""

    def check(user: str) -> tuple[str, list[str]]:
        missing: list[str] = []
        with httpx.Client(base_url=url, headers={"X-API-Key": tokens[user]}, timeout=120) as c:
            for tid, text in sorted(acked[user].items()):
                response = c.get(f"/v1/memories/{tid}")
                if response.status_code != 200 or response.json().get("text") != text:
                    missing.append(tid)
            listed = c.get("/v1/memories", params={"limit": 5000})
            stored = {t["id"] for t in listed.json()} if listed.status_code == 200 else set()
            missing += sorted(set(acked[user]) - stored - set(missing))
        return user, missing

    with ThreadPoolExecutor(8) as pool:
        return {user: missing for user, missing in pool.map(check, sorted(acked)) if missing}


@contextmanager
def phase_store(root: Path, args: argparse.Namespace, phase: str, pg: Any) -> Iterator[str]:
    """The store of one phase: a fresh SQLite file, the given DSN, or a fresh database of the started pgserver
    (dropped afterwards)."""
    if pg is None:
        yield args.db if args.db else str(root / "load.db")
        return
    import psycopg

    name = f"cuemem_load_{os.getpid()}_{phase}"
    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield str(pg.get_uri(database=name))
    finally:
        with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_phase(root: Path, db: str, args: argparse.Namespace, kill_after: float | None) -> dict[str, Any]:
    keys = root / "load.keys"
    ring = KeyRing(keys)
    tag = secrets.token_hex(2)  # users unique to the run: a DSN given twice still starts from empty namespaces
    users = [f"c{tag}{root.name[0]}-{i:02d}" for i in range(args.clients)]
    tokens = {user: ring.create(user_id=user)[1] for user in users}
    warm = ring.create(user_id="warmup")[1]
    ring.close()
    fleet = Fleet(db, keys, args, root, args.servers)
    for i in range(args.servers):
        fleet.start(i)
    try:
        for url in fleet.urls:
            warm_up(url, warm)
        stop = threading.Event()
        clients = [
            Client(fleet, n % args.servers, tokens[user], user, users[(n + 1) % len(users)], args.writes, n, stop)
            for n, user in enumerate(users)
        ]
        start = time.perf_counter()
        for client in clients:
            client.start()
        killed_at = running_at_kill = acked_at_kill = None
        victim = 0
        if kill_after is not None:
            time.sleep(kill_after)
            running_at_kill = sum(c.is_alive() for c in clients)
            acked_at_kill = sum(len(c.acked) for c in clients)
            fleet.kill(victim)
            killed_at = (fleet.killed_at or start) - start  # the SIGKILL itself, not the reaping after it
            if args.servers == 1:
                stop.set()  # nothing left to serve: the clients stop, the server is started again below
        for client in clients:
            client.join()
        elapsed = time.perf_counter() - start
        if kill_after is not None:
            fleet.start(victim)  # the killed server, started again on the same store
        acked = {c.user: c.acked for c in clients}
        unread = {fleet.urls[i]: unreadable(fleet.urls[i], tokens, acked) for i in range(args.servers)}
    finally:
        fleet.stop_all()
    status: dict[str, int] = {}
    by_server: dict[str, dict[str, int]] = {}
    for c in clients:
        for url, codes in c.status.items():
            for code, n in codes.items():
                status[str(code)] = status.get(str(code), 0) + n
                per = by_server.setdefault(url, {})
                per[str(code)] = per.get(str(code), 0) + n
    requests = sum(len(v) for c in clients for v in c.latency.values())
    lost = {tid for missing in unread.values() for by_user in missing.values() for tid in by_user}
    result: dict[str, Any] = {
        "servers": args.servers,
        "clients": args.clients,
        "writes_per_client": args.writes,
        "seconds": round(elapsed, 2),
        "requests": requests,
        "throughput_rps": round(requests / elapsed, 1),
        "status": status,
        "status_by_server": by_server,
        "server_errors_5xx": sum(n for code, n in status.items() if code.startswith("5")),
        "connection_failures": sum(len(c.failures) for c in clients),
        "connection_failures_on_live_servers": sum(c.live_failures for c in clients),
        "busy_refusals_retried": sum(c.busy for c in clients),
        "acknowledged_writes": sum(len(v) for v in acked.values()),
        "acknowledged_lost": len(lost),
        "unreadable_by_server": {url: sum(map(len, m.values())) for url, m in unread.items()},
        "lost_examples": {url: {u: ids[:5] for u, ids in list(m.items())[:5]} for url, m in unread.items() if m},
        "own_gets_missing_during_load": sum(len(c.own_missing) for c in clients),
        "cross_key_reads": sum(len(c.cross_key) for c in clients),
        "cross_key_examples": [x for c in clients for x in c.cross_key][:5],
        "latency_ms": {op: latency([x for c in clients for x in c.latency[op]]) for op in OPS},
    }
    if kill_after is not None:
        result.update(
            {
                "killed_server": fleet.urls[victim],
                "killed_at_s": round(killed_at or 0.0, 2),
                "clients_running_at_kill": running_at_kill,
                "acknowledged_before_kill": acked_at_kill,
                "acknowledged_after_kill": result["acknowledged_writes"] - (acked_at_kill or 0),
                "clients_moved": sum(1 for c in clients if c.moves),
                "responses_after_kill": sum(c.after_kill for c in clients),
                "restarted_server_reads_all": not unread[fleet.urls[victim]],
            }
        )
    return result


def verdict(result: dict[str, Any], servers: int) -> list[str]:
    """What went wrong in a phase (empty: nothing)."""
    wrong = []
    if result["server_errors_5xx"]:
        wrong.append(f"{result['server_errors_5xx']} responses were 5xx")
    if result["acknowledged_lost"]:
        wrong.append(f"{result['acknowledged_lost']} acknowledged writes are not readable through every server")
    if result["cross_key_reads"]:
        wrong.append(f"{result['cross_key_reads']} cross-key reads")
    if result["own_gets_missing_during_load"]:
        wrong.append(f"{result['own_gets_missing_during_load']} GETs of acknowledged turns found nothing")
    if "killed_at_s" in result:
        if not result["clients_running_at_kill"]:
            wrong.append("the kill came after the load ended: lower --kill-after or raise --writes")
        if servers > 1 and not result["responses_after_kill"]:
            wrong.append("no live server answered after the kill")
    if result["connection_failures_on_live_servers"]:
        wrong.append(f"{result['connection_failures_on_live_servers']} requests to live servers got no response")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--writes", type=int, default=200, help="writes per client, each followed by a search")
    parser.add_argument("--servers", type=int, default=1, help="`cuemem serve` processes on the one store")
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--db", default=None, help="a PostgreSQL DSN or a SQLite file (default: a temporary file per phase)"
    )
    store.add_argument(
        "--pgserver",
        type=Path,
        default=None,
        help="start PostgreSQL (package pgserver) in DIR; a fresh database per phase",
    )
    parser.add_argument("--engine", default=None, help="default: the configured engine (hybrid)")
    parser.add_argument("--embedder", default=None, help="default: the configured embedder (embeddinggemma)")
    parser.add_argument("--kill-after", type=float, default=20.0, help="seconds of load before the kill -9")
    parser.add_argument("--skip-kill", action="store_true")
    parser.add_argument(
        "--index-on-add", action="store_true", help="servers index inside each add (default: in the background)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.servers < 1 or args.clients < 1:
        parser.error("--servers and --clients must be at least 1")
    pg = None
    if args.pgserver:
        import pgserver

        pg = pgserver.get_server(args.pgserver, cleanup_mode="stop")
    kind = "sqlite (temporary file)"
    if pg is not None:
        kind = "postgresql (pgserver, a fresh database per phase)"
    elif args.db:
        kind = display_target(args.db) if is_dsn(args.db) else f"sqlite ({args.db})"
    result: dict[str, Any] = {
        "engine": args.engine or "default",
        "embedder": args.embedder or "default",
        "indexing": "on add" if args.index_on_add else "background",
        "store": kind,
        "servers": args.servers,
        "cpus": len(os.sched_getaffinity(0)),
    }
    phases = [("load", None)] + ([] if args.skip_kill else [("kill9", args.kill_after)])
    with tempfile.TemporaryDirectory() as tmp:
        for phase, kill_after in phases:
            root = Path(tmp) / phase
            root.mkdir()
            what = f"{args.clients} clients x {args.writes} rounds on {args.servers} server(s), {kind}"
            print(f"phase {phase}: {what}" + (f", kill -9 after {kill_after} s" if kill_after else ""), file=sys.stderr)
            with phase_store(root, args, phase, pg) as db:
                result[phase] = run_phase(root, db, args, kill_after)
            print(json.dumps(result[phase], indent=1), file=sys.stderr)
    wrong = {phase: verdict(result[phase], args.servers) for phase, _ in phases}
    result["ok"] = not any(wrong.values())
    result["problems"] = {phase: w for phase, w in wrong.items() if w}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    if result["ok"]:
        print("OK: no 5xx, nothing acknowledged lost, zero cross-key reads", file=sys.stderr)
    else:
        print(f"FAILED: {result['problems']}", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
