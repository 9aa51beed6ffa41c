"""Render bench-out/perf.json (from benchmarks/perf.py) as the Markdown tables used in BENCHMARKS.md.

python benchmarks/render.py bench-out/perf.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def render(report: dict) -> str:
    lines = ["**Ingest** (5,000 LoCoMo turns into an empty store, adds of 256 turns)", ""]
    lines += ["| engine | turns/s | seconds | peak RSS |", "|---|---:|---:|---:|"]
    for r in report.get("ingest", []):
        lines.append(f"| `{r['engine']}` | {r['turns_per_s']:,.0f} | {r['seconds']:.1f} | {r['peak_rss_mb']:,.0f} MB |")
    lines += ["", "**Search** (k = 10, 4,096-token budget, 200 queries after one warm-up query)", ""]
    lines += [
        "| stored turns | engine | p50 | p95 | first query (fresh process) | peak RSS |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in report.get("search", []):
        lines.append(
            f"| {r['stored_turns']:,} | `{r['engine']}` | {r['p50_ms']:.1f} ms | {r['p95_ms']:.1f} ms"
            f" | {r['first_query_ms'] / 1000:.1f} s | {r['peak_rss_mb']:,.0f} MB |"
        )
    lines += ["", "**Building the search stores** (`hybrid` ingest, then every engine caught up)", ""]
    lines += ["| turns | seconds | store on disk | peak RSS |", "|---:|---:|---:|---:|"]
    for r in report.get("build", []):
        lines.append(f"| {r['turns']:,} | {r['seconds']:.0f} | {r['db_mb']:.0f} MB | {r['peak_rss_mb']:,.0f} MB |")
    b = report.get("backends")
    if b:
        lines += ["", f"**Backends** ({b['turns']:,} documents / vectors, top-10, index search alone)", ""]
        lines += ["| search | implementation | build | p50 | p95 |", "|---|---|---:|---:|---:|"]
        lines.append(
            f"| lexical | in-memory BM25 (cuemem) | {b['bm25_build_s']:.2f} s | {b['bm25_memory_p50_ms']:.2f} ms"
            f" | {b['bm25_memory_p95_ms']:.2f} ms |"
        )
        lines.append(
            f"| lexical | SQLite FTS5 `bm25()` | {b['fts5_build_s']:.2f} s | {b['fts5_p50_ms']:.2f} ms"
            f" | {b['fts5_p95_ms']:.2f} ms |"
        )
        lines.append(f"| dense | numpy matrix (cuemem) | — | {b['numpy_p50_ms']:.2f} ms | {b['numpy_p95_ms']:.2f} ms |")
        if "sqlite_vec_p50_ms" in b:
            lines.append(
                f"| dense | sqlite-vec {b['sqlite_vec_version']} `vec0` | {b['sqlite_vec_build_s']:.2f} s"
                f" | {b['sqlite_vec_p50_ms']:.2f} ms | {b['sqlite_vec_p95_ms']:.2f} ms |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-out/perf.json").read_text())))
