"""A production-like workload (issue 36 item 5): many namespaces of power-law sizes in one PostgreSQL database,
several `cuemem serve` processes, clients mixing writes and searches over hot and cold namespaces, a kill -9.

1. Seed (once; `--reuse` keeps it for later runs): N turns (`--turns`, default 1,000,000) over K namespaces
   (`--namespaces`, default 10,000) whose sizes follow a power law (Zipf, `--zipf` exponent 1.0: the largest
   ~100k turns at the defaults, 2 over 50k, 90% under 100), written with the store's bulk methods from several
   processes (benchmarks/production_seed.py; engine hybrid, `--embedder hashing` or `minilm`). One API key per
   namespace (a key is bound to one user; an admin key reads no memory).
2. Start to first answer: a fresh server, timed from its start to the answer of its first search, once in the
   largest (hot) namespace and once in the smallest (cold) one.
3. Load: S servers (`--servers`, default 4) on the database, C client threads (`--clients`, default 64) for D
   seconds (`--duration`, default 60), each request on a namespace picked hot (by size) or cold (uniform) at
   `--hot-share` (0.5); a write (POST of one turn) at `--write-fraction` (0.5), else a search; every 10th request
   a GET of another namespace's turn with this namespace's key (must be a 404). Search latency split hot / cold
   and first touch (the namespace's first search on that server since it started) / warm; acknowledged writes/s;
   peak RSS per server (/proc VmHWM and sampled VmRSS); 5xx; busy refusals retried (as benchmarks/load.py).
   At `--kill-after` seconds server 0 gets SIGKILL; its clients move to the others; it is started again
   `--restart-after` seconds later and its clients come back.
4. Checked afterwards, through the restarted server: every acknowledged write readable by id with its text, each
   once in its namespace's listing (no duplicates), no listing or hit showing another namespace's turn.
5. `--servers-curve 1,2,4`: the write-only load (each client its own namespaces) on 1, 2, then 4 servers:
   acknowledged writes/s for each.

    python benchmarks/production.py --pgserver /tmp/cuemem-prod-pg --reuse --servers-curve 1,2,4 \\
        --out bench-out/i36/production.json
    python benchmarks/production.py --pgserver /tmp/cuemem-prod-small --turns 20000 --namespaces 200 \\
        --servers 2 --clients 8 --duration 10 --servers-curve 1,2 --curve-duration 5 --out bench-out/prod-small.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import BUSY_RETRIES, Client, Fleet, _error_kind, free_port, latency, start_server, warm_up
from production_report import problems, table
from production_seed import (
    NamespacePicker,
    TurnMaker,
    make_keys,
    owner,
    power_law_sizes,
    seed,
    size_summary,
    user_of,
)

from cuemem.store import display_target

DATABASE = "cuemem_production"
VERIFY_THREADS = 4  # below a server's memory lanes (8): the check is not a load test
CROSS_EVERY = 10  # every 10th request of a client also GETs another namespace's turn with its own key


# --------------------------------------------------------------------------- the database and the seed
def database(args: argparse.Namespace) -> tuple[str, Any]:
    """The DSN (--db, or a database of a pgserver cluster in --pgserver, created when missing; dropped first when
    not --reuse) and the pgserver handle (kept open for the run)."""
    if args.db:
        return args.db, None
    import psycopg
    from scale import start_postgres

    pg, info = start_postgres(args.pgserver, args.shared_buffers)
    args.postgres = info
    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
    if not exists or not args.reuse:
        recreate(pg)
    return str(pg.get_uri(database=DATABASE)), pg


def recreate(pg: Any) -> None:
    """The benchmark's database in the pgserver cluster, empty."""
    import psycopg

    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')


def seeded(dsn: str, args: argparse.Namespace, sizes: list[int], pg: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """The tokens of the namespaces' keys and the seed's record: reused from --state when --reuse and it matches,
    else seeded now (into an empty database)."""
    from cuemem import Memory

    state: Path = args.state
    state.mkdir(parents=True, exist_ok=True)
    meta = {
        "turns": args.turns,
        "namespaces": args.namespaces,
        "zipf": args.zipf,
        "engine": "hybrid",
        "embedder": args.embedder,
        "db": display_target(dsn),
    }
    record, tokens = state / "seed.json", state / "tokens.json"
    with Memory(dsn, engine="hybrid", embedder="hashing") as memory:
        present = len(memory.namespaces())
    if args.reuse and record.exists() and tokens.exists() and (state / "production.keys").exists():
        old = json.loads(record.read_text(encoding="utf-8"))
        if old.get("meta") == meta and present >= args.namespaces:
            print(f"reusing the seeded database ({old['seed']['seconds']} s to seed)", file=sys.stderr)
            return json.loads(tokens.read_text(encoding="utf-8")), {**old["seed"], "reused": True}
        print("the seeded database does not match: seeding again", file=sys.stderr)
    if present and pg is None:
        raise SystemExit(f"{display_target(dsn)} already holds {present} namespaces: give an empty database")
    if present:  # a pgserver database seeded differently: afresh
        recreate(pg)
    print(f"seeding {args.turns:,} turns over {args.namespaces:,} namespaces ...", file=sys.stderr)
    done = seed(dsn, sizes, args.embedder, args.seed_workers, args.seed_batch)
    print(f"seeded in {done['seconds']} s ({done['turns_per_s']:,} turns/s)", file=sys.stderr)
    keys = make_keys(state, args.namespaces)
    record.write_text(json.dumps({"meta": meta, "seed": done}, indent=1), encoding="utf-8")
    return keys, {**done, "reused": False}


# --------------------------------------------------------------------------- measuring the servers
def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS since the process started) in MB, from /proc (empty if it is gone)."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


class RssWatch:
    """Peak RSS per server life (a restarted server is a new life): VmHWM read last, VmRSS sampled twice a second."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.lives: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        for i, process in enumerate(list(self.fleet.processes)):
            if process is None:
                continue
            life = self.lives.setdefault(f"server-{i}/pid-{process.pid}", {"peak_rss_mb": 0.0})
            now = proc_status(process.pid)
            if now:
                life["peak_rss_mb"] = round(max(life["peak_rss_mb"], now.get("VmRSS", 0.0)), 1)
                life["vm_hwm_mb"] = round(now.get("VmHWM", 0.0), 1)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def stop(self) -> dict[str, dict[str, float]]:
        """The figures, sampled a last time (once: later calls only return them)."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.sample()
        return self.lives


def first_answer(dsn: str, keys: Path, args: argparse.Namespace, root: Path, user: str, token: str) -> dict[str, Any]:
    """A fresh server, from its start to the answer of its first search (in `user`'s namespace); its RSS then."""
    port = free_port()
    start = time.perf_counter()
    process = start_server(dsn, port, keys, args, root / f"first-{user}.log")
    healthy = time.perf_counter() - start
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": token}, timeout=600) as c:
            asked = time.perf_counter()
            response = c.get("/v1/memories/search", params={"q": "what did we plan for dinner", "k": 5})
            done = time.perf_counter()
            second = time.perf_counter()
            c.get("/v1/memories/search", params={"q": "the garden and the river", "k": 5})
            again = time.perf_counter() - second
        rss = proc_status(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)
    return {
        "user": user,
        "status": response.status_code,
        "start_to_healthz_s": round(healthy, 2),
        "first_search_ms": round(1000 * (done - asked), 1),
        "start_to_first_answer_s": round(done - start, 2),
        "second_search_ms": round(1000 * again, 1),
        "rss_after_mb": round(rss.get("VmRSS", float("nan")), 1),
    }


# --------------------------------------------------------------------------- the clients
class Shared:
    """What the clients of a phase share: the tokens, the namespaces' first touch per server, the words."""

    def __init__(self, tokens: dict[str, str], count: int, servers: int, maker: TurnMaker) -> None:
        self.tokens = [tokens[user_of(i)] for i in range(count)]
        self.count = count
        self.maker = maker
        self.tag = secrets.token_hex(3)  # this run's written turns: ids and session unique across --reuse runs
        self.session = f"load-{self.tag}"
        self._touched: list[set[int]] = [set() for _ in range(servers)]
        self._lock = threading.Lock()

    def touch(self, server: int, index: int) -> bool:
        """Whether this is the namespace's first search on the server since the server started."""
        with self._lock:
            first = index not in self._touched[server]
            self._touched[server].add(index)
            return first

    def restarted(self, server: int) -> None:
        with self._lock:
            self._touched[server] = set()


class Worker(Client):
    """One client thread (load.py's Client: its retries of busy refusals, its move to a live server when its own
    was killed), looping until `stop`: a write or a search on a namespace `choose` picks; it returns home once
    its server is started again."""

    def __init__(
        self, fleet: Fleet, home: int, number: int, shared: Shared, choose: Any, write_fraction: float, stop: Any
    ) -> None:
        super().__init__(fleet, home, "", f"client{number}", "", 0, number, stop)
        self.home, self.number, self.shared, self.choose = home, number, shared, choose
        self.write_fraction = write_fraction
        self.acked: dict[str, str] = {}
        self.by_namespace: dict[int, list[str]] = {}
        self.searches: dict[str, list[float]] = {}  # "hot/first", "cold/warm", ...: seconds

    def _rounds(self) -> None:
        n = 0
        while not self.stop.is_set():
            if self.server != self.home and not self.fleet.is_dead(self.home):
                self.server = self.home
            if self.fleet.is_dead(self.server):  # killed, and (one server) none other to go to: wait for it
                moved = self.fleet.next_live(self.server)
                if moved is None:
                    time.sleep(0.05)
                    continue
                self.server, self.moves = moved, self.moves + 1
            index, heat = self.choose(self.random)
            key = {"X-API-Key": self.shared.tokens[index]}
            if self.random.random() < self.write_fraction:
                self._write(index, key, n)
            else:
                self._search(index, heat, key)
            if n % CROSS_EVERY == CROSS_EVERY - 1 and self.shared.count > 1:
                other = (index + 1 + self.random.randrange(self.shared.count - 1)) % self.shared.count
                theirs = f"{user_of(other)}-0"
                got = self._call("cross_get", lambda c, t=theirs, h=key: c.get(f"/v1/memories/{t}", headers=h))
                if got is not None and got.status_code != 404 and got.status_code < 500:
                    self.cross_key.append(f"get {theirs} with the key of {user_of(index)}: {got.status_code}")
            n += 1

    def _write(self, index: int, key: dict[str, str], n: int) -> None:
        user = user_of(index)
        tid = f"{user}-w{self.shared.tag}c{self.number}n{n}"
        text = f"Note {n} of client {self.number}: the {self.shared.maker.words(self.random, 8)}, code {tid}."
        body = {"messages": [{"id": tid, "text": text}], "session_id": self.shared.session}
        written = self._call("write", lambda c: c.post("/v1/memories", json=body, headers=key))
        if written is not None and written.status_code == 200:
            answer = written.json()
            if tid in answer.get("added", []) or tid in answer.get("skipped", []):  # skipped: a retry found it
                self.acked[tid] = text
                self.by_namespace.setdefault(index, []).append(tid)

    def _search(self, index: int, heat: str, key: dict[str, str]) -> None:
        user = user_of(index)
        first = self.shared.touch(self.server, index)
        query = self.shared.maker.words(self.random)
        found = self._call("search", lambda c: c.get("/v1/memories/search", params={"q": query, "k": 5}, headers=key))
        if found is None or found.status_code != 200:
            return
        self.searches.setdefault(f"{heat}/{'first' if first else 'warm'}", []).append(self.latency["search"][-1])
        data = found.json()
        if data.get("namespace", {}).get("user_id") != user:
            self.cross_key.append(f"search in {user} answered for {data.get('namespace')}")
        self.cross_key += [f"search hit {t} in {user}" for h in data["hits"] for t in h["turn_ids"] if owner(t) != user]


def run_load(
    dsn: str, keys: Path, args: argparse.Namespace, root: Path, shared: Shared, servers: int, choose: Any, **load: Any
) -> dict[str, Any]:
    """One load: `servers` servers, the clients for `duration` s (a kill -9 of server 0 at `kill_after` s and its
    restart `restart_after` s later when given), then the check of every acknowledged write."""
    fleet_args = argparse.Namespace(**{**vars(args), "servers": servers})
    fleet = Fleet(dsn, keys, fleet_args, root, servers)
    rss = RssWatch(fleet)
    clients: list[Worker] = []
    kill: dict[str, Any] = {}
    try:
        for i in range(servers):
            fleet.start(i)
        for url in fleet.urls:  # no delete after: its scrub would VACUUM FULL the shared tables (minutes at 1M)
            warm_up(url, shared_token(keys), forget=False)
        stop = threading.Event()
        clients = [
            Worker(fleet, n % servers, n, shared, choose(n), load["write_fraction"], stop) for n in range(args.clients)
        ]
        start = time.perf_counter()
        for client in clients:
            client.start()
        if load.get("kill_after") is not None:
            time.sleep(load["kill_after"])
            rss.sample()
            kill["acknowledged_before_kill"] = sum(len(c.acked) for c in clients)
            fleet.kill(0)
            kill["killed_at_s"] = round((fleet.killed_at or start) - start, 2)
            time.sleep(load["restart_after"])
            begun = time.perf_counter()
            fleet.start(0)
            shared.restarted(0)
            kill["restart_to_healthz_s"] = round(time.perf_counter() - begun, 2)
        time.sleep(max(0.0, load["duration"] - (time.perf_counter() - start)))
        stop.set()
        for client in clients:
            client.join()
        elapsed = time.perf_counter() - start
        memory = rss.stop()
        checked = verify(fleet.urls[0], shared, clients)
    finally:
        rss.stop()
        fleet.stop_all()
    return summary(clients, elapsed, memory, checked, kill, fleet)


def shared_token(keys: Path) -> str:
    return json.loads((keys.parent / "tokens.json").read_text(encoding="utf-8"))["warmup"]


def patient(request: Any) -> httpx.Response:
    """A request retried while the server refuses it as busy (a full lane: 429/503 "busy"), as a client would."""
    response = request()
    for _ in range(BUSY_RETRIES):
        if response.status_code not in (429, 503) or _error_kind(response) != "busy":
            break
        time.sleep(min(1.0, float(response.headers.get("retry-after") or 1)) * random.uniform(0.2, 1.0))
        response = request()
    return response


def verify(url: str, shared: Shared, clients: list[Worker]) -> dict[str, Any]:
    """Through one server: each acknowledged write readable by id with its text; each once in its namespace's
    listing of this run's session; no listing shows another namespace's turn."""
    acked = {tid: text for c in clients for tid, text in c.acked.items()}
    namespaces = sorted({i for c in clients for i in c.by_namespace})

    def listed(index: int) -> tuple[int, list[str], list[str]]:
        ids: list[str] = []
        with httpx.Client(base_url=url, headers={"X-API-Key": shared.tokens[index]}, timeout=300) as c:
            while True:
                params = {"session_id": shared.session, "limit": 5000, "offset": len(ids)}
                page = patient(lambda p=params: c.get("/v1/memories", params=p))
                page.raise_for_status()
                ids += [t["id"] for t in page.json()]
                if len(page.json()) < 5000:
                    break
        return index, ids, [t for t in ids if owner(t) != user_of(index)]

    def readable(tids: list[str]) -> list[str]:
        missing = []
        with httpx.Client(base_url=url, timeout=300) as c:
            for tid in tids:
                key = {"X-API-Key": shared.tokens[int(owner(tid)[1:])]}
                got = patient(lambda t=tid, k=key: c.get(f"/v1/memories/{t}", headers=k))
                if got.status_code != 200 or got.json().get("text") != acked[tid]:
                    missing.append(f"{tid} ({got.status_code})")
        return missing

    with ThreadPoolExecutor(VERIFY_THREADS) as pool:
        listings = list(pool.map(listed, namespaces))
        ordered = sorted(acked)
        parts = [ordered[i::VERIFY_THREADS] for i in range(VERIFY_THREADS)]
        unread = [t for part in pool.map(readable, parts) for t in part]
    missing = [t.split(" ")[0] for t in unread]
    seen: dict[str, int] = {}
    for _, ids, _ in listings:
        for tid in ids:
            seen[tid] = seen.get(tid, 0) + 1
    duplicates = [t for t, n in seen.items() if n > 1]
    unlisted = [t for t in acked if t not in seen]
    foreign = [t for _, _, other in listings for t in other]
    return {
        "checked_through": url,
        "acknowledged": len(acked),
        "lost": len(set(missing) | set(unlisted)),
        "lost_examples": (unread + [f"{t} (not listed)" for t in unlisted])[:5],
        "duplicates": len(duplicates),
        "duplicate_examples": duplicates[:5],
        "stored_unacknowledged": len(set(seen) - set(acked)),  # committed, the answer lost to the kill: allowed
        "cross_key_in_listings": len(foreign),
    }


def summary(
    clients: list[Worker],
    elapsed: float,
    memory: dict[str, Any],
    checked: dict[str, Any],
    kill: dict[str, Any],
    fleet: Fleet,
) -> dict[str, Any]:
    """The phase's figures."""
    status: dict[str, int] = {}
    for c in clients:
        for codes in c.status.values():
            for code, n in codes.items():
                status[str(code)] = status.get(str(code), 0) + n
    groups: dict[str, list[float]] = {}
    for c in clients:
        for group, values in c.searches.items():
            groups.setdefault(group, []).extend(values)
    search = {g: latency(groups.get(g, [])) for g in ("hot/first", "hot/warm", "cold/first", "cold/warm")}
    search["hot"] = latency(groups.get("hot/first", []) + groups.get("hot/warm", []))
    search["cold"] = latency(groups.get("cold/first", []) + groups.get("cold/warm", []))
    search["all"] = latency([x for c in clients for x in c.latency["search"]])
    acked = sum(len(c.acked) for c in clients)
    result: dict[str, Any] = {
        "servers": len(fleet.urls),
        "clients": len(clients),
        "seconds": round(elapsed, 2),
        "requests": sum(len(v) for c in clients for v in c.latency.values()),
        "acknowledged_writes": acked,
        "acknowledged_writes_per_s": round(acked / elapsed, 1),
        "searches_per_s": round(search["all"]["n"] / elapsed, 1),
        "search_ms": search,
        "write_ms": latency([x for c in clients for x in c.latency["write"]]),
        "status": status,
        "server_errors_5xx": sum(n for code, n in status.items() if code.startswith("5")),
        "busy_refusals_retried": sum(c.busy for c in clients),
        "connection_failures": sum(len(c.failures) for c in clients),
        "connection_failures_on_live_servers": sum(c.live_failures for c in clients),
        "cross_key_reads": sum(len(c.cross_key) for c in clients) + checked["cross_key_in_listings"],
        "cross_key_examples": [x for c in clients for x in c.cross_key][:5],
        "memory_mb": memory,
        "check": checked,
    }
    if kill:
        kill["clients_moved"] = sum(1 for c in clients if c.moves)
        kill["responses_after_kill"] = sum(c.after_kill for c in clients)
        result["kill9"] = kill
    return result


# --------------------------------------------------------------------------- the run
def curve_chooser(count: int, clients: int) -> Any:
    """For the write-only curve: client n writes only to its own namespaces (n, n + C, ...), picked uniformly."""

    def chooser(n: int) -> Any:
        own = list(range(n % count, count, clients)) or [n % count]
        return lambda rng: (rng.choice(own), "own")

    return chooser


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--pgserver", type=Path, help="PostgreSQL (package pgserver) in DIR, database " + DATABASE)
    store.add_argument("--db", help="a PostgreSQL DSN (an empty database, or the one seeded before with --reuse)")
    parser.add_argument(
        "--state", type=Path, default=Path("bench-out/production-state"), help="keys, tokens, seed record"
    )
    parser.add_argument("--reuse", action="store_true", help="keep the database seeded by an earlier run (same sizes)")
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--zipf", type=float, default=1.0, help="the power law's exponent (size ~ 1/rank^zipf)")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--seed-workers", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--seed-batch", type=int, default=2000, help="turns per seed transaction")
    parser.add_argument("--shared-buffers", default="2GB", help="PostgreSQL's shared_buffers (with --pgserver)")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--write-fraction", type=float, default=0.5)
    parser.add_argument("--hot-share", type=float, default=0.5, help="requests on a namespace picked by size")
    parser.add_argument("--kill-after", type=float, default=None, help="seconds (default: a third of --duration)")
    parser.add_argument("--restart-after", type=float, default=3.0, help="seconds from the kill to the restart")
    parser.add_argument("--skip-kill", action="store_true")
    parser.add_argument("--skip-load", action="store_true", help="only the seed, the first answers and the curve")
    parser.add_argument("--servers-curve", default="", help="e.g. 1,2,4: the write-only load on that many servers")
    parser.add_argument("--curve-duration", type=float, default=30.0)
    parser.add_argument("--cache-mb", type=int, default=None, help="the servers' cache_mb setting")
    parser.add_argument("--index-on-add", action="store_true", help="servers index inside each add")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.servers < 1 or args.clients < 1 or args.namespaces < 1 or args.turns < args.namespaces:
        parser.error("need --servers, --clients, --namespaces >= 1 and --turns >= --namespaces")
    args.engine = "hybrid"  # the seed writes hybrid's items and vectors
    args.postgres = {}
    if args.cache_mb is not None:
        os.environ["CUEMEM_CACHE_MB"] = str(args.cache_mb)  # the servers read it (start_server passes the env)
    kill_after = None if args.skip_kill else args.kill_after if args.kill_after is not None else args.duration / 3
    sizes = power_law_sizes(args.turns, args.namespaces, args.zipf)
    print(json.dumps(size_summary(sizes)), file=sys.stderr)
    dsn, _pg = database(args)
    tokens, seed_record = seeded(dsn, args, sizes, _pg)
    keys = args.state / "production.keys"
    result: dict[str, Any] = {
        "store": display_target(dsn),
        "postgres": args.postgres,
        "engine": "hybrid",
        "embedder": args.embedder,
        "indexing": "on add" if args.index_on_add else "background",
        "cache_mb": args.cache_mb,
        "cpus": len(os.sched_getaffinity(0)),
        "sizes": size_summary(sizes),
        "seed": seed_record,
        "settings": {k: getattr(args, k) for k in ("servers", "clients", "duration", "write_fraction", "hot_share")},
    }
    maker = TurnMaker()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result["first_answer"] = {}
        for name, index in (("hot", 0), ("cold", len(sizes) - 1)):
            first = first_answer(dsn, keys, args, root, user_of(index), tokens[user_of(index)])
            result["first_answer"][name] = {**first, "size": sizes[index]}
            print(f"first answer, {name}: {first}", file=sys.stderr)
        picker = NamespacePicker(sizes, args.hot_share)
        if not args.skip_load:
            print(f"load: {args.servers} servers, {args.clients} clients, {args.duration} s", file=sys.stderr)
            shared = Shared(tokens, len(sizes), args.servers, maker)
            result["load"] = run_load(
                dsn,
                keys,
                args,
                root,
                shared,
                args.servers,
                lambda n: picker.pick,
                write_fraction=args.write_fraction,
                duration=args.duration,
                kill_after=kill_after,
                restart_after=args.restart_after,
            )
        curve = [int(x) for x in args.servers_curve.split(",") if x.strip()]
        result["servers_curve"] = []
        for servers in curve:
            print(f"write-only curve: {servers} server(s), {args.curve_duration} s", file=sys.stderr)
            shared = Shared(tokens, len(sizes), servers, maker)
            point = run_load(
                dsn,
                keys,
                args,
                root,
                shared,
                servers,
                curve_chooser(len(sizes), args.clients),
                write_fraction=1.0,
                duration=args.curve_duration,
            )
            result["servers_curve"].append(point)
    wrong = problems(result)
    result["ok"], result["problems"] = not wrong, wrong
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(table(result))
    print(
        "OK: no 5xx, nothing acknowledged lost, no duplicates, zero cross-key reads"
        if not wrong
        else f"FAILED: {wrong}"
    )
    return 0 if not wrong else 1


if __name__ == "__main__":
    raise SystemExit(main())
