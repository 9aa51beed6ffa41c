"""Load test of `cuemem serve` (issue 17): concurrent clients writing and searching over loopback, then a kill -9.

Phase 1 (load): a real `cuemem serve` process on 127.0.0.1 and N client threads, each with its own API key (its
own user): every client makes W writes (POST /v1/memories, one turn each) interleaved with W searches (GET
/v1/memories/search). Afterwards every acknowledged write (a 200 received) must be readable (GET /v1/memories),
and no response may be a 5xx. Reported: latency p50/p95/p99 per operation and throughput.

Phase 2 (crash): the same load on a fresh store; after `--kill-after` seconds the server gets SIGKILL; it is
started again on the same store, and every write acknowledged before the kill must be there.

Bounded and loopback only: the server listens on 127.0.0.1, the clients stop after their quota. The rate limit is
off (`--rate 0`): this measures the server, not the limiter.

    python benchmarks/load.py --clients 50 --writes 200 --out bench-out/i17/load.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from cuemem.server.keys import KeyRing

WORDS = ["garden", "harbour", "violin", "ticket", "lantern", "pepper", "orbit", "canyon", "meadow", "copper", "falcon",
         "puzzle", "river", "tundra", "velvet", "marble", "comet", "saddle", "willow", "ember"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(db: Path, port: int, args: argparse.Namespace, log: Path) -> subprocess.Popen[bytes]:
    """`cuemem serve` in its own process (its own session, so a kill reaches only it); waits for /healthz."""
    command = [sys.executable, "-m", "cuemem.cli", "--db", str(db)]
    if args.engine:
        command += ["--engine", args.engine]
    if args.embedder:
        command += ["--embedder", args.embedder]
    command += ["serve", "--port", str(port), "--rate", "0", "--log-level", "warning", "--no-mcp"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}); see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the server did not start in 180 s; see {log}")


def warm_up(url: str, token: str) -> None:
    """One write and one search, so model loading is not counted as the first clients' latency."""
    with httpx.Client(base_url=url, headers={"X-API-Key": token}, timeout=300) as c:
        c.post("/v1/memories", json={"messages": [{"id": "warm", "text": "warming up the embedder"}]})
        c.get("/v1/memories/search", params={"q": "warming up"})
        c.delete("/v1/users/warmup")


class Client(threading.Thread):
    """One client: its own key and user; `writes` writes each followed by a search; records every outcome."""

    def __init__(self, url: str, token: str, user: str, writes: int, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.user, self.writes, self.stop = url, token, user, writes, stop
        self.random = random.Random(seed)
        self.acked: list[str] = []
        self.latency: dict[str, list[float]] = {"write": [], "search": []}
        self.status: dict[int, int] = {}
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"X-API-Key": self.token}, timeout=120) as c:
            for i in range(self.writes):
                if self.stop.is_set():
                    return
                tid = f"{self.user}-{i}"
                words = " ".join(self.random.choice(WORDS) for _ in range(8))
                text = f"Note {i} of {self.user}: the {words} plan, code {tid}."
                message = {"id": tid, "text": text, "session_id": f"s{i // 20}"}
                self._call("write", lambda c=c, m=message: c.post("/v1/memories", json={"messages": [m]}), tid)
                query = " ".join(self.random.choice(WORDS) for _ in range(3))
                self._call("search", lambda c=c, q=query: c.get("/v1/memories/search", params={"q": q, "k": 5}))

    def _call(self, kind: str, request: Any, tid: str | None = None) -> None:
        start = time.perf_counter()
        try:
            response = request()
        except httpx.HTTPError as exc:  # the server went away (phase 2) or a timeout: not acknowledged
            self.failures.append(f"{kind}: {type(exc).__name__}")
            return
        self.latency[kind].append(time.perf_counter() - start)
        self.status[response.status_code] = self.status.get(response.status_code, 0) + 1
        if response.status_code == 200 and tid is not None and tid in response.json().get("added", []):
            self.acked.append(tid)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stored_ids(url: str, tokens: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for user, token in tokens.items():
        with httpx.Client(base_url=url, headers={"X-API-Key": token}, timeout=120) as c:
            response = c.get("/v1/memories", params={"limit": 5000})
            out[user] = {t["id"] for t in response.json()} if response.status_code == 200 else set()
    return out


def run_phase(root: Path, args: argparse.Namespace, kill_after: float | None) -> dict[str, Any]:
    db = root / "load.db"
    ring = KeyRing(str(db) + ".keys")
    tokens = {f"client-{i:02d}": ring.create(user_id=f"client-{i:02d}")[1] for i in range(args.clients)}
    warm = ring.create(user_id="warmup")[1]
    ring.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "server.log"
    server = start_server(db, port, args, log)
    warm_up(url, warm)
    stop = threading.Event()
    clients = [Client(url, token, user, args.writes, seed, stop) for seed, (user, token) in enumerate(tokens.items())]
    start = time.perf_counter()
    for client in clients:
        client.start()
    killed_at = None
    if kill_after is not None:
        time.sleep(kill_after)
        os.killpg(server.pid, signal.SIGKILL)  # no shutdown, no flush: what was acknowledged must survive
        server.wait()
        killed_at = time.perf_counter() - start
        stop.set()
    for client in clients:
        client.join()
    elapsed = time.perf_counter() - start
    if kill_after is not None:
        server = start_server(db, port, args, log)
    stored = stored_ids(url, tokens)
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(60)
    acked = {c.user: set(c.acked) for c in clients}
    lost = {u: sorted(acked[u] - stored[u])[:5] for u in acked if acked[u] - stored[u]}
    status: dict[str, int] = {}
    for c in clients:
        for code, n in c.status.items():
            status[str(code)] = status.get(str(code), 0) + n
    writes = [x for c in clients for x in c.latency["write"]]
    searches = [x for c in clients for x in c.latency["search"]]
    requests = len(writes) + len(searches)
    return {
        "clients": args.clients,
        "writes_per_client": args.writes,
        "seconds": round(elapsed, 2),
        "killed_at_s": None if killed_at is None else round(killed_at, 2),
        "requests": requests,
        "throughput_rps": round(requests / elapsed, 1),
        "status": status,
        "server_errors_5xx": sum(n for code, n in status.items() if code.startswith("5")),
        "connection_failures": sum(len(c.failures) for c in clients),
        "acknowledged_writes": sum(len(v) for v in acked.values()),
        "acknowledged_lost": sum(len(acked[u] - stored[u]) for u in acked),
        "lost_examples": lost,
        "latency_ms": {"write": latency(writes), "search": latency(searches)},
    }


def latency(values: list[float]) -> dict[str, Any]:
    """Milliseconds: p50, p95, p99, mean and the count."""
    return {
        "p50": round(1000 * percentile(values, 0.5), 1),
        "p95": round(1000 * percentile(values, 0.95), 1),
        "p99": round(1000 * percentile(values, 0.99), 1),
        "mean": round(1000 * statistics.fmean(values), 1) if values else None,
        "n": len(values),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--writes", type=int, default=200, help="writes per client, each followed by a search")
    parser.add_argument("--engine", default=None, help="default: the configured engine (hybrid)")
    parser.add_argument("--embedder", default=None, help="default: the configured embedder (embeddinggemma)")
    parser.add_argument("--kill-after", type=float, default=20.0, help="seconds of load before the kill -9")
    parser.add_argument("--skip-kill", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {"engine": args.engine or "default", "embedder": args.embedder or "default",
                              "cpus": os.cpu_count()}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        print(f"phase 1: {args.clients} clients x {args.writes} writes + {args.writes} searches", file=sys.stderr)
        result["load"] = run_phase(Path(tmp) / "load", _mkdir(Path(tmp) / "load") or args, None)
        print(json.dumps(result["load"], indent=1), file=sys.stderr)
        if not args.skip_kill:
            print(f"phase 2: the same load, kill -9 after {args.kill_after} s, restart", file=sys.stderr)
            result["kill9"] = run_phase(Path(tmp) / "kill", _mkdir(Path(tmp) / "kill") or args, args.kill_after)
            print(json.dumps(result["kill9"], indent=1), file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    ok = result["load"]["server_errors_5xx"] == 0 and result["load"]["acknowledged_lost"] == 0
    ok = ok and ("kill9" not in result or result["kill9"]["acknowledged_lost"] == 0)
    print("OK: no 5xx, nothing acknowledged lost" if ok else "FAILED: see the figures above", file=sys.stderr)
    return 0 if ok else 1


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
