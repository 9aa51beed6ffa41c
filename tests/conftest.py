from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _var in [v for v in os.environ if v.startswith("CUEMEM_")]:
    del os.environ[_var]

from cuemem import Memory  # noqa: E402
from cuemem.embed import HashingEmbedder  # noqa: E402

ENGINES = ["fullcontext", "bm25", "dense", "hybrid"]


@pytest.fixture
def make_memory(tmp_path: Path) -> Iterator[Callable[..., Memory]]:
    """Memories on temporary stores; the fast model-free hashing embedder unless a test asks otherwise."""
    opened: list[Memory] = []

    def factory(engine: str = "hybrid", name: str = "mem.db", **kwargs: object) -> Memory:
        kwargs.setdefault("embedder", HashingEmbedder())
        memory = Memory(tmp_path / name, engine=engine, **kwargs)  # type: ignore[arg-type]
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
