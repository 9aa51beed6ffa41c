"""Server memory under a large import (issue 33): RSS of a real `cuemem serve` before a `POST /v1/import` of
`--mb` megabytes of JSONL, after it, and after the user is deleted; and how long the import took.

    python benchmarks/import_memory.py --mb 50 --engine bm25 [--out bench-out/i33/import.json]

The server runs on a temporary SQLite store (engine bm25 by default: no model, so the figures are the import's own
cost); the body is streamed without a Content-Length. Exits 1 when the server ends more than `--slack-mb` above
where it started.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    """The resident memory of a process in MB (VmRSS of /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def write_jsonl(path: Path, megabytes: float) -> int:
    """A JSONL import file of about `megabytes` MB (distinct turns of ~500 bytes); returns how many lines."""
    target = int(megabytes * 1_000_000)
    filler = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 8
    size = count = 0
    with path.open("w", encoding="utf-8") as fh:
        while size < target:
            line = json.dumps(
                {
                    "id": f"t{count}",
                    "text": f"turn {count}: the blue kettle number {count * 7919 % 100003} {filler}",
                    "speaker": "user" if count % 2 else "assistant",
                    "session_id": f"s{count // 200}",
                    "metadata": {"n": count},
                }
            )
            fh.write(line + "\n")
            size += len(line) + 1
            count += 1
    return count


def chunks(path: Path, size: int = 1 << 16) -> Iterator[bytes]:
    """The file in blocks: httpx sends them chunked, with no Content-Length."""
    with path.open("rb") as fh:
        while block := fh.read(size):
            yield block


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="Size of the import body in MB.")
    parser.add_argument("--engine", default="bm25")
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--slack-mb", type=float, default=100.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cuemem = [sys.executable, "-m", "cuemem.cli"]
    with tempfile.TemporaryDirectory(prefix="cuemem-import-") as tmp:
        root = Path(tmp)
        body = root / "body.jsonl"
        lines = write_jsonl(body, args.mb)
        db = ["--db", str(root / "srv.db"), "--engine", args.engine, "--embedder", args.embedder]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        token = subprocess.run(
            [*cuemem, *db, "keys", "create", "--user-id", "bulk"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        port = free_port()
        server = subprocess.Popen(
            [*cuemem, *db, "serve", "--port", str(port), "--no-mcp", "--log-level", "warning", "--rate", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=3600)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the server did not start: {server.stderr.read().decode() if server.stderr else ''}"
                    )
                time.sleep(0.3)
            # one small import and search first, so what is loaded once (engine, store) counts in "before"
            client.post("/v1/import", content=b'{"id": "warm", "text": "warm up"}\n').raise_for_status()
            client.get("/v1/memories/search", params={"q": "warm"}).raise_for_status()
            client.delete("/v1/users/bulk").raise_for_status()
            before = rss_mb(server.pid)
            start = time.perf_counter()
            response = client.post("/v1/import", content=chunks(body))
            seconds = time.perf_counter() - start
            response.raise_for_status()
            report = response.json()
            after_import = rss_mb(server.pid)
            client.delete("/v1/users/bulk").raise_for_status()
            after_delete = rss_mb(server.pid)
        finally:
            client.close()
            server.terminate()
            server.wait(timeout=60)
    result = {
        "mb": args.mb,
        "lines": lines,
        "engine": args.engine,
        "added": report["added"],
        "errors": len(report["errors"]),
        "import_seconds": round(seconds, 1),
        "rss_before_mb": round(before),
        "rss_after_import_mb": round(after_import),
        "rss_after_delete_mb": round(after_delete),
        "growth_mb": round(after_delete - before),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if after_delete - before <= args.slack_mb and report["added"] == lines else 1


if __name__ == "__main__":
    sys.exit(main())
