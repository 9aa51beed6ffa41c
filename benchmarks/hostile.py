"""Serving under hostile load (issue 33): what one key can do to the others, measured on a real `cuemem serve`.

One server (its own process, default settings unless `--embedder`/`--engine` say otherwise: EmbeddingGemma and the
local Qwen2.5-Coder reader) over a fresh SQLite store, or PostgreSQL with `--pgserver DIR`. The demo conversation is
stored for two users, each with its own key. Then:

1. **flood**: the first key sends `--flood` answers at once (new questions: no cache), at its burst; meanwhile a
   prober measures `/healthz` and the second key's search every 0.1 s for `--probe-seconds`. Reported: the
   flood's statuses and how fast the refusals came, and the probes' latency p50/p95/max (target: p95 <= 200 ms).
2. **variants**: `--variants` searches naming a new `episodic[window=N]` each; reported: the statuses and the
   store's growth in bytes (target: 0 growth, every one a clear 400).

    python benchmarks/hostile.py --out benchmarks/results/hostile.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from load import free_port, latency, start_server

from cuemem.server.keys import KeyRing


def demo_turns() -> list[dict[str, Any]]:
    """The demo conversation's turns, as messages of POST /v1/memories."""
    from cuemem.formats import locomo_turns, read_locomo

    with resources.as_file(resources.files("cuemem") / "data" / "demo_conversation.json") as path:
        sample = read_locomo(path)[0]
    return [
        {"id": t.id, "speaker": t.speaker, "text": t.text, "session_id": t.session_id} for t in locomo_turns(sample)
    ]


def store_bytes(db: str) -> int:
    """The SQLite store's bytes (main file, WAL, shared memory); 0 for a DSN."""
    path = Path(db)
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) if path.exists() else 0


def flood(url: str, flooder: str, other: str, n: int, probe_seconds: float) -> dict[str, Any]:
    """`n` answers at once from one key while another key's search and /healthz are timed (n = 0: no flood, the
    same probes on the idle server)."""
    statuses: Counter[int] = Counter()
    refusal_seconds: list[float] = []
    probes: dict[str, list[float]] = {"healthz": [], "other_search": []}
    failures: Counter[str] = Counter()
    stop = threading.Event()

    def ask(i: int) -> None:
        with httpx.Client(base_url=url, headers={"X-API-Key": flooder}, timeout=600) as c:
            start = time.monotonic()
            r = c.post("/v1/answer", json={"question": f"Which hotel did Maya book, take {i}?"})
            statuses[r.status_code] += 1
            if r.status_code in (429, 503):
                refusal_seconds.append(time.monotonic() - start)

    def probe() -> None:
        with httpx.Client(base_url=url, headers={"X-API-Key": other}, timeout=60) as c:
            while not stop.is_set():
                for name, path, params in (
                    ("healthz", "/healthz", None),
                    ("other_search", "/v1/memories/search", {"q": "Which hotel did Maya book?"}),
                ):
                    start = time.monotonic()
                    try:
                        ok = c.get(path, params=params).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    probes[name].append(time.monotonic() - start)
                    failures[name] += not ok
                time.sleep(0.1)

    prober = threading.Thread(target=probe, daemon=True)
    with ThreadPoolExecutor(max(1, n)) as pool:
        futures = [pool.submit(ask, i) for i in range(n)]
        time.sleep(0.3)
        prober.start()
        time.sleep(probe_seconds)
        stop.set()
        prober.join()
        for f in futures:
            f.result()
    return {
        "flood_requests": n,
        "flood_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "refusal_ms": latency(refusal_seconds),
        "healthz_ms": latency(probes["healthz"]),
        "other_search_ms": latency(probes["other_search"]),
        "probe_failures": dict(failures),
    }


def variants(url: str, token: str, db: str, n: int) -> dict[str, Any]:
    """`n` searches naming a new engine variant each: statuses and the store's growth."""
    before = store_bytes(db)
    statuses: Counter[str] = Counter()
    with httpx.Client(base_url=url, headers={"X-API-Key": token}, timeout=60) as c:
        for i in range(n):
            r = c.get("/v1/memories/search", params={"q": "hotel", "engine": f"episodic[window={100 + i}]"})
            statuses[f"{r.status_code} {r.json().get('error', '')}".strip()] += 1
    return {"requests": n, "statuses": dict(statuses), "store_growth_bytes": store_bytes(db) - before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=40, help="answers sent at once by one key (its burst)")
    parser.add_argument("--probe-seconds", type=float, default=20.0)
    parser.add_argument("--variants", type=int, default=400)
    parser.add_argument("--engine", default="")
    parser.add_argument("--embedder", default="")
    parser.add_argument("--out", type=Path, help="the raw figures (JSON)")
    parser.add_argument("--result", type=Path, help="a result file for BENCHMARKS.md (benchmarks/results/...)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cuemem-hostile-"))
    db, keys = str(root / "store.db"), root / "keys.db"
    ring = KeyRing(keys)
    maya, other = ring.create(user_id="maya")[1], ring.create(user_id="sam")[1]
    ring.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(
        db, port, keys, argparse.Namespace(engine=args.engine, embedder=args.embedder, index_on_add=False), root / "log"
    )
    # start_server passes --rate 0; the flood below stays within the default burst (40) anyway.
    try:
        turns = demo_turns()
        for token in (maya, other):
            with httpx.Client(base_url=url, headers={"X-API-Key": token}, timeout=600) as c:
                assert c.post("/v1/memories", json={"messages": turns}).status_code == 200
                c.get("/v1/memories/search", params={"q": "warm up"})
        with httpx.Client(base_url=url, headers={"X-API-Key": maya}, timeout=600) as c:
            c.post("/v1/answer", json={"question": "Where did Maya stay?"})  # the reader loaded before timing
        result = {
            "command": "python benchmarks/hostile.py " + " ".join(sys.argv[1:]),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip(),
            "date": time.strftime("%Y-%m-%d"),
            "idle": flood(url, maya, other, 0, min(10.0, args.probe_seconds)),
            "flood": flood(url, maya, other, args.flood, args.probe_seconds),
            "variants": variants(url, maya, db, args.variants),
        }
    finally:
        server.terminate()
        server.wait(30)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.result:
        args.result.write_text(json.dumps(as_result(result), ensure_ascii=False, indent=1) + "\n")
    return 0


def as_result(raw: dict[str, Any]) -> dict[str, Any]:
    """The figures as a result file of tables (benchmarks/reference.py renders it into BENCHMARKS.md)."""
    from reference import machine

    f, v = raw["flood"], raw["variants"]
    ms = [("p50", "p50 ms"), ("p95", "p95 ms"), ("p99", "p99 ms"), ("n", "requests")]
    columns = [{"key": "what", "label": "while one key floods answers", "format": "", "align": "l"}]
    columns += [{"key": key, "label": label, "format": "d" if key == "n" else ".0f", "align": "r"} for key, label in ms]
    idle = raw["idle"]
    rows = [
        {"what": "/healthz", **f["healthz_ms"]},
        {"what": "another key's search", **f["other_search_ms"]},
        {"what": "the flood's refusals (429/503)", **f["refusal_ms"]},
        {"what": "(no flood) /healthz", **idle["healthz_ms"]},
        {"what": "(no flood) a search", **idle["other_search_ms"]},
    ]
    statuses = ", ".join(f"{n} × {code}" for code, n in f["flood_statuses"].items())
    return {
        "format": 1,
        "name": "serving-hostile",
        "kind": "tables",
        "section": "serving",
        "order": 30,
        "heading": "Hostile load: one key cannot stall the others, or grow the server",
        "title": f"A real `cuemem serve` (default settings, SQLite): one key sends {f['flood_requests']} answers"
        " at once (new questions) while /healthz and another key's search are timed every 0.1 s; then"
        f" {v['requests']} searches each naming a new engine variant",
        "runs": {
            "r1": {
                "date": raw["date"],
                "machine": machine(),
                "command": raw["command"],
                "commit": raw["commit"],
                "source": "measured by benchmarks/hostile.py",
                "note": "The server, its client threads and both models share the machine's cores.",
            }
        },
        "tables": [
            {
                "title": "",
                "run": "r1",
                "columns": columns,
                "rows": rows,
                "notes": [f"The flood's answers: {statuses}."],
            },
            {
                "title": "",
                "run": "r1",
                "columns": [
                    {"key": "requests", "label": "searches naming a new variant", "format": "d", "align": "r"},
                    {"key": "statuses", "label": "answers", "format": "", "align": "l"},
                    {"key": "growth", "label": "store growth, bytes", "format": "d", "align": "r"},
                ],
                "rows": [
                    {
                        "requests": v["requests"],
                        "statuses": ", ".join(f"{n} × {k}" for k, n in v["statuses"].items()),
                        "growth": v["store_growth_bytes"],
                    }
                ],
            },
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
