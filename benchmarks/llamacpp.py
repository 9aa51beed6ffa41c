"""The optional llama.cpp backend on this machine (needs the `llamacpp` extra built; see README).

python benchmarks/llamacpp.py --out bench-out/llamacpp.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/llamacpp.json")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from cuemem.llm import LlamaCppBackend, LLMClient

    backend = LlamaCppBackend(threads=2)
    start = time.perf_counter()
    backend.load()
    out: dict = {"load_s": time.perf_counter() - start}
    client = LLMClient(backend)  # no cache
    ask = [{"role": "user", "content": "Which concept is about booking a hotel?"}]
    start = time.perf_counter()
    reply = client.chat(ask, max_tokens=64)
    out["chat_64_tokens_s"] = time.perf_counter() - start
    out["chat_completion_tokens"] = reply.usage.completion_tokens
    for n in (5, 50, 5000):
        options = [f"concept {i} {'hotel booking' if i % 11 == 0 else 'weather'}" for i in range(n)]
        lat = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            chosen = client.choose(ask, options, k=1)
            lat.append(time.perf_counter() - start)
            assert chosen[0].option in options
        out[f"choose_{n}_k1_ms"] = statistics.median(lat) * 1000
        print(json.dumps(out), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
