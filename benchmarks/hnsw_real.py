"""HNSW recall on real, distinct text (issue 26): N distinct LongMemEval-S sentences embedded with the shipped
MiniLM, in a plain pgvector table with the store's HNSW parameters, against exact search.

    python benchmarks/hnsw_real.py --n 200000 --out bench-out/hnsw-real-200k.json

Sentences: every message of longmemeval/longmemeval_s_cleaned.PARTIAL_499of500.json.gz under the datasets setting
(or --datasets DIR; read in place) split at sentence ends and newlines, pieces of at least 3 words, deduplicated in
order of first appearance; the first N. Queries: LongMemEval's distinct questions, split dev/test by scale.py's rule
(blake2b first byte). ef_search is chosen on dev (the smallest swept value whose dev recall@10 reaches 0.95) and
reported on test; recall@100 uses k = 100 at max(ef, 200), as hybrid searches. Vectors are cached under
--data/chunks, 8,192 sentences a file in a fixed order, so a run resumes where it stopped and a smaller N reuses a
larger one's vectors (`--embed-only` fills the cache and stops)."""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import LONGMEMEVAL_S, add_datasets_option, apply_datasets_option, dataset_file
from scale_data import RECALL_TARGET, split_of

CHUNK = 8192
SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


@functools.cache
def _items() -> list[dict]:
    with gzip.open(dataset_file(LONGMEMEVAL_S)) as fh:
        return json.load(fh)


def sentence_records(n: int) -> list[dict]:
    """The first n distinct sentences as turn dicts: a turn keeps its message's role as speaker and its session's
    date and id; ids are s0, s1, … in order of first appearance."""
    seen: dict[str, dict] = {}
    for item in _items():
        if len(seen) >= n:
            break
        for session, date, sid in zip(
            item["haystack_sessions"], item["haystack_dates"], item["haystack_session_ids"], strict=True
        ):
            for message in session:
                for piece in SPLIT.split(message.get("content") or ""):
                    piece = piece.strip()
                    if len(piece.split()) >= 3 and piece not in seen:
                        seen[piece] = {
                            "id": f"s{len(seen)}",
                            "text": piece,
                            "speaker": message.get("role") or "user",
                            "timestamp": date,
                            "session_id": str(sid),
                        }
    return list(seen.values())[:n]


def questions() -> list[str]:
    """LongMemEval-S's distinct questions, in file order."""
    return list(dict.fromkeys(str(item["question"]) for item in _items()))


def chunk_path(folder: Path, start: int) -> Path:
    """The cache file of the CHUNK sentences from index `start` on."""
    return folder / f"minilm-{start:08d}.npy"


def embed_chunks(embedder, texts: list[str], folder: Path):
    """Vectors of texts, cached CHUNK sentences a file, so an interrupted run resumes and a smaller N reuses them."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    parts, start, fresh = [], time.perf_counter(), 0
    for i in range(0, len(texts), CHUNK):
        path = chunk_path(folder, i)
        if not path.exists():
            vectors = np.asarray(embedder.embed(texts[i : i + CHUNK]), dtype=np.float32)
            np.save(path.with_suffix(".tmp.npy"), vectors)
            path.with_suffix(".tmp.npy").replace(path)
            fresh += len(vectors)
            rate = fresh / (time.perf_counter() - start)
            print(f"embedded {i + len(vectors)} / {len(texts)} ({rate:.0f} sentences/s)", file=sys.stderr, flush=True)
        parts.append(np.load(path))
    return np.concatenate(parts)


def main() -> None:
    import numpy as np
    import pgserver
    import psycopg
    from pgvector.psycopg import register_vector

    from cuemem.embed import MiniLMEmbedder
    from cuemem.store.postgres import HNSW_EF_CONSTRUCTION, HNSW_M

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--ef-sweep", default="40,100,200,400")
    parser.add_argument("--data", default="/tmp/cuemem-hnsw-real")
    parser.add_argument("--out", default="bench-out/hnsw-real.json")
    parser.add_argument("--embed-only", action="store_true", help="fill the vector cache up to --n and stop")
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    texts = [r["text"] for r in sentence_records(-(-args.n // CHUNK) * CHUNK)]
    embedder = MiniLMEmbedder()
    start = time.perf_counter()
    matrix = embed_chunks(embedder, texts, data / "chunks")[: args.n]
    texts = texts[: args.n]
    if args.embed_only:
        print(f"embedded {len(texts)} sentences in {time.perf_counter() - start:.0f} s")
        return
    out: dict = {
        "n": len(texts),
        "embed_s": time.perf_counter() - start,
        "m": HNSW_M,
        "ef_construction": HNSW_EF_CONSTRUCTION,
        "questions": {},
    }
    server = pgserver.get_server(data / "pg", cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS bench_real")
        conn.execute(f"CREATE TABLE bench_real (id int PRIMARY KEY, vec vector({matrix.shape[1]}))")
        with conn.cursor() as cur, cur.copy("COPY bench_real (id, vec) FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.set_types(["int4", "vector"])
            for i, v in enumerate(matrix):
                cp.write_row((i, v))
        conn.execute("SET maintenance_work_mem = '4GB'")
        start = time.perf_counter()
        conn.execute(
            f"CREATE INDEX ON bench_real USING hnsw (vec vector_cosine_ops)"
            f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
        )
        out["hnsw_s"] = time.perf_counter() - start
        sweep: dict = {}
        for split in ("dev", "test"):
            qs = [q for q in questions() if split_of(q) == split]
            out["questions"][split] = len(qs)
            qv = embedder.embed_query(qs)
            truth = []
            for v in qv:
                scores = matrix @ v
                top = np.argpartition(-scores, 100)[:100]
                truth.append(scores[top[np.argsort(-scores[top])]])
            for ef in (int(e) for e in args.ef_sweep.split(",")):
                for k in (10, 100):
                    conn.execute(f"SET hnsw.ef_search = {max(ef, 2 * k)}")
                    found, ms = [], []
                    for v, t in zip(qv, truth, strict=True):
                        t0 = time.perf_counter()
                        rows = conn.execute(
                            "SELECT id, 1 - (vec <=> %s) FROM bench_real ORDER BY vec <=> %s LIMIT %s", (v, v, k)
                        ).fetchall()
                        ms.append((time.perf_counter() - t0) * 1000)
                        found.append(sum(1 for _, s in rows if s >= t[k - 1] - 1e-5) / k)
                    res = sweep.setdefault(ef, {}).setdefault(split, {})
                    res[f"recall@{k}"] = statistics.mean(found)
                    res[f"p50_ms@{k}"] = statistics.median(ms)
                    res[f"p95_ms@{k}"] = sorted(ms)[int(0.95 * (len(ms) - 1))]
        out["sweep"] = sweep
        ok = [ef for ef, row in sweep.items() if row["dev"]["recall@10"] >= RECALL_TARGET]
        out["chosen_ef"] = min(ok) if ok else None
        conn.execute("DROP TABLE bench_real")
    server.cleanup()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    for ef, row in sweep.items():
        print(
            f"ef {ef}: "
            + "  ".join(
                f"{s} r@10 {r['recall@10']:.3f} r@100 {r['recall@100']:.3f}"
                f" p50/p95@10 {r['p50_ms@10']:.1f}/{r['p95_ms@10']:.1f} ms"
                for s, r in row.items()
            )
        )
    print(f"n {out['n']}, embed {out['embed_s']:.0f} s, HNSW build {out['hnsw_s']:.0f} s, chosen ef {out['chosen_ef']}")


if __name__ == "__main__":
    main()
