"""Several `cuemem serve` processes on one PostgreSQL database (issue 26), the CI-sized twin of
`benchmarks/load.py --servers 2 --pgserver DIR`.

Two real server processes on 127.0.0.1 share the database and one key file; eight clients, each with its own key,
are spread over both and write, search and read by id. One server gets SIGKILL mid-load; its clients move to the
survivor. Every acknowledged write must then be readable through the survivor, no response may be a 5xx, no client
may ever see another's turn, and a server started again on the same database must see everything too.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
from conftest import PG
from test_server import add

from cuemem.server.keys import KeyRing

CLIENTS = 8
ROUNDS = 12  # writes per client, each followed by a search, a GET by id and a GET of another client's turn
KILL_AFTER_ACKS = 24  # the kill comes once this many writes are acknowledged: mid-load, never after it
QUERY = {"q": "lantern harbour", "k": 5}  # words of every turn: each search has hits to check for other users'


@pytest.fixture
def dsn() -> Iterator[str]:
    """A fresh database on the tests' PostgreSQL, dropped afterwards."""
    PG.start(Path(tempfile.gettempdir()) / f"cuemem-pg-{os.getpid()}")
    try:
        yield PG.dsn(f"serve_{os.getpid()}_{secrets.token_hex(4)}")
    finally:
        PG.drop_created()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(dsn: str, keys: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`cuemem serve` on the database in its own process group (so a kill reaches only it); waits for /healthz."""
    command = [
        sys.executable,
        "-m",
        "cuemem.cli",
        "--db",
        dsn,
        "--engine",
        "hybrid",
        "--embedder",
        "hashing",
        "serve",
        "--port",
        str(port),
        "--keys-file",
        str(keys),
        "--rate",
        "0",
        "--no-mcp",
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"cuemem serve exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"cuemem serve did not start: {log.read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def owner(turn_id: str) -> str:
    return turn_id.rsplit("-", 1)[0]


class Load:
    """Clients on a set of servers; a server is marked dead before it is killed, so a client whose request fails
    knows to move to a live server (and retry there) rather than count a failure."""

    def __init__(self, urls: list[str], tokens: dict[str, str]) -> None:
        self.urls, self.tokens = urls, tokens
        self.dead: set[int] = set()
        self.lock = threading.Lock()
        self.acked: dict[str, dict[str, str]] = {user: {} for user in tokens}  # user -> turn id -> text
        self.acked_after_kill = 0
        self.killed = False
        self.status: dict[int, dict[int, int]] = {i: {} for i in range(len(urls))}  # server -> code -> count
        self.cross_key: list[str] = []
        self.failures: list[str] = []  # requests to a live server that got no response
        self.moved: set[str] = set()

    def call(self, user: str, home: list[int], conns: dict[int, httpx.Client], request: Any) -> httpx.Response | None:
        """The request on the client's server (`home[0]`); if that server was killed, once more on a live one."""
        for _attempt in range(2):
            server = home[0]
            if server not in conns:
                conns[server] = httpx.Client(
                    base_url=self.urls[server], headers={"X-API-Key": self.tokens[user]}, timeout=30
                )
            try:
                response: httpx.Response = request(conns[server])
            except httpx.HTTPError as exc:
                with self.lock:
                    if server not in self.dead:
                        self.failures.append(f"{user} on server {server}: {exc!r}")
                        return None
                    home[0] = next(i for i in range(len(self.urls)) if i not in self.dead)
                    self.moved.add(user)
                continue
            with self.lock:
                codes = self.status[server]
                codes[response.status_code] = codes.get(response.status_code, 0) + 1
            return response
        return None

    def client(self, n: int, user: str, neighbour: str) -> None:
        home, conns = [n % len(self.urls)], dict[int, httpx.Client]()
        try:
            self.rounds(n, user, neighbour, home, conns)
        finally:
            for conn in conns.values():
                conn.close()

    def rounds(self, n: int, user: str, neighbour: str, home: list[int], conns: dict[int, httpx.Client]) -> None:
        for i in range(ROUNDS):
            tid = f"{user}-{i}"
            text = f"Round {i} of {user}: the marker kw{n}x{i} and a lantern by the harbour."
            message = {"id": tid, "text": text}
            written = self.call(user, home, conns, lambda c, m=message: add(c, [m]))
            if written is not None and written.status_code == 200:
                body = written.json()
                if tid in body["added"] or tid in body["skipped"]:  # skipped: the retry of a write that landed
                    with self.lock:
                        self.acked[user][tid] = text
                        if self.killed:
                            self.acked_after_kill += 1
            found = self.call(user, home, conns, lambda c: c.get("/v1/memories/search", params=QUERY))
            if found is not None and found.status_code == 200:
                self.cross_key += [
                    f"{user} saw {t}" for h in found.json()["hits"] for t in h["turn_ids"] if owner(t) != user
                ]
            if self.acked[user]:
                own = sorted(self.acked[user])[-1]
                got = self.call(user, home, conns, lambda c, t=own: c.get(f"/v1/memories/{t}"))
                if got is not None and (got.status_code != 200 or got.json()["id"] != own):
                    self.cross_key.append(f"{user} GET {own}: {got.status_code} {got.text[:100]}")
            theirs = f"{neighbour}-{i // 2}"
            got = self.call(user, home, conns, lambda c, t=theirs: c.get(f"/v1/memories/{t}"))
            if got is not None and got.status_code != 404:
                self.cross_key.append(f"{user} GET {theirs}: {got.status_code}")

    def total_acked(self) -> int:
        with self.lock:
            return sum(map(len, self.acked.values()))


def readable_through(url: str, load: Load) -> dict[str, list[str]]:
    """Per user, the acknowledged turns that `url` does not return by id, or does not list."""
    missing: dict[str, list[str]] = {}
    for user, turns in load.acked.items():
        with httpx.Client(base_url=url, headers={"X-API-Key": load.tokens[user]}, timeout=30) as c:
            lost = [
                tid
                for tid, text in turns.items()
                if (r := c.get(f"/v1/memories/{tid}")).status_code != 200 or r.json()["text"] != text
            ]
            response = c.get("/v1/memories", params={"limit": 5000})
            listed = {t["id"] for t in response.json()} if response.status_code == 200 else set()
        lost += sorted(set(turns) - listed - set(lost))
        if lost:
            missing[user] = lost
    return missing


def test_two_servers_one_database_kill_9_loses_nothing(dsn: str, tmp_path: Path) -> None:
    keys = tmp_path / "shared.keys"
    ring = KeyRing(keys)
    users = [f"u{n}" for n in range(CLIENTS)]
    tokens = {user: ring.create(user_id=user)[1] for user in users}
    ring.close()
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    servers: list[subprocess.Popen[bytes] | None] = [
        serve(dsn, keys, port, tmp_path / f"server-{i}.log") for i, port in enumerate(ports)
    ]
    try:
        load = Load(urls, tokens)
        threads = [
            threading.Thread(target=load.client, args=(n, user, users[(n + 1) % CLIENTS]), daemon=True)
            for n, user in enumerate(users)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while load.total_acked() < KILL_AFTER_ACKS and time.monotonic() < deadline:
            time.sleep(0.05)
        with load.lock:  # marked dead first: a request failing from here on moves to the survivor
            load.dead.add(0)
            load.killed = True
        victim = servers[0]
        assert victim is not None
        os.killpg(victim.pid, signal.SIGKILL)  # no shutdown, no flush
        victim.wait()
        servers[0] = None
        acked_at_kill = load.total_acked()
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads), "the clients did not finish"

        assert KILL_AFTER_ACKS <= acked_at_kill < CLIENTS * ROUNDS  # the kill came mid-load
        assert load.moved, "no client of the killed server moved to the survivor"
        assert load.acked_after_kill > 0  # the survivor kept serving, the moved clients too
        assert load.total_acked() == CLIENTS * ROUNDS  # a write cut off by the kill was retried on the survivor
        assert not load.failures, load.failures[:5]
        assert not load.cross_key, load.cross_key[:5]
        fivexx = {server: n for server, codes in load.status.items() for code, n in codes.items() if code >= 500}
        assert not fivexx, fivexx
        assert sum(load.status[1].values()) > sum(load.status[0].values())  # the survivor took the moved clients

        assert readable_through(urls[1], load) == {}
        # the killed server, started again on the same database, sees every acknowledged write, by id, in lists
        # and in search (a marker word written through the survivor after the kill is found through it)
        servers[0] = serve(dsn, keys, ports[0], tmp_path / "server-0.log")
        assert readable_through(urls[0], load) == {}
        user = sorted(load.moved)[0]
        n = users.index(user)
        last = max(load.acked[user], key=lambda tid: int(tid.rsplit("-", 1)[1]))
        with httpx.Client(base_url=urls[0], headers={"X-API-Key": tokens[user]}, timeout=30) as c:
            hits = c.get("/v1/memories/search", params={"q": f"kw{n}x{last.rsplit('-', 1)[1]}", "k": 3}).json()
        assert last in {t for h in hits["hits"] for t in h["turn_ids"]}, hits
    finally:
        for process in servers:
            stop(process)


def test_a_stopped_database_is_a_503_and_service_resumes_when_it_returns(dsn: str, tmp_path: Path) -> None:
    """PostgreSQL stopped under a running server: writes, reads and /healthz answer 503 `store_unavailable` with the
    store's message (no password, quickly), nothing half-written; once it is back the same server process serves
    again, and the log holds exactly the acknowledged writes."""
    from test_postgres import server_stopped

    keys = tmp_path / "keys"
    ring = KeyRing(keys)
    token = ring.create(user_id="maya")[1]
    ring.close()
    port = free_port()
    server = serve(dsn, keys, port, tmp_path / "server.log")
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            assert add(client, [{"id": "before", "text": "the lantern is in the harbour shed"}]).status_code == 200
            with server_stopped("fast"):
                for response in (
                    add(client, [{"id": "during", "text": "written while the database is down"}]),
                    client.get("/v1/memories/search", params={"q": "lantern"}),
                    client.get("/v1/memories/before"),
                    client.get("/healthz"),
                ):
                    assert response.status_code == 503, response.text
                    body = response.json()
                    assert body["error"] == "store_unavailable" and "unavailable" in body["message"], body
                    assert response.elapsed.total_seconds() < 5, response.elapsed
            assert client.get("/healthz").status_code == 200
            hits = client.get("/v1/memories/search", params={"q": "lantern"}).json()["hits"]
            assert [h["turn_ids"] for h in hits] == [["before"]]
            assert client.get("/v1/memories/during").status_code == 404  # the refused write left nothing
            assert add(client, [{"id": "after", "text": "written once it was back"}]).status_code == 200
            listed = client.get("/v1/memories").json()
            ids = [t["id"] for t in listed["turns"]] if isinstance(listed, dict) else [t["id"] for t in listed]
            assert ids == ["before", "after"]
    finally:
        stop(server)
