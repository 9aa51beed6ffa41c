"""The scale benchmark's phases (benchmarks/scale.py), each run in its own subprocess: load, bulk load, HNSW build,
search, recall against exact, the duplicate check and full-text search."""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf import peak_mb, source_turns
from scale_data import (
    CONFIG,
    DIMS,
    RECALL_TARGET,
    SPACE,
    USER,
    as_turn,
    base_vectors,
    dims,
    documents,
    latencies,
    lme_vectors,
    make_embedder,
    mark_shared,
    memory_at,
    minilm_cached,
    noise_sigma,
    perturbed,
    queries,
    rss_mb,
    scale_turns,
)

from cuemem.bench.metrics import percentile


def phase_load(target: str, n: int, batch: int, bulk: bool) -> dict:
    """Ingest n turns through Memory.add (hybrid engine) in calls of `batch` turns."""
    import cuemem.memory

    turns = scale_turns(n)
    unique = len({t["text"] for t in turns})
    if bulk:
        cuemem.memory.INGEST_BATCH = batch
    with memory_at(target, n) as memory:
        if bulk and hasattr(memory.store, "_maybe_index"):
            memory.store._maybe_index = lambda *a, **k: None  # the HNSW index is built afterwards, timed
        start = time.perf_counter()
        for i in range(0, n, batch):
            memory.add(turns[i : i + batch], user_id=USER)
        seconds = time.perf_counter() - start
        mark_shared(memory)
        stored = memory.store.count_turns(memory.store.namespace_id(memory.namespace(USER)))
    assert stored == n, f"stored {stored} of {n} turns"
    return {
        "turns": n,
        "unique_texts": unique,
        "path": "bulk" if bulk else "add",
        "call_turns": batch,
        "engine_batch": cuemem.memory.INGEST_BATCH,
        "seconds": seconds,
        "turns_per_s": n / seconds,
        "peak_rss_mb": peak_mb(),
    }


class CachedHashing:
    """cuemem's HashingEmbedder with each feature's (bucket, sign) remembered: the same vectors, computed fast."""

    def __init__(self, dim: int = DIMS) -> None:
        from cuemem.embed.hashing import HashingEmbedder

        self.inner = HashingEmbedder(dim)
        self.name = self.inner.name
        self._memo: dict[str, tuple[int, float]] = {}

    def _slot(self, feature: str) -> tuple[int, float]:
        import hashlib

        value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        slot = self._memo[feature] = (value % self.inner.dim, 1.0 if (value >> 63) & 1 else -1.0)
        return slot

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        from cuemem.embed.hashing import normalize

        out = np.zeros((len(texts), self.inner.dim), dtype=np.float32)
        memo = self._memo
        for row, text in enumerate(texts):
            vec = out[row]
            for feature in self.inner._features(text):
                slot = memo.get(feature) or self._slot(feature)
                vec[slot[0]] += slot[1]
        return normalize(out)


def phase_bulk(target: str, n: int, batch: int) -> dict:
    """Load n turns with the store's own methods in batches (append_turns, put_items, put_vectors), writing what
    the hybrid engine writes. The structure fields and token counts of a copy are its LoCoMo original's (computed
    once by the engine's functions); vectors per --vectors (hashing: HashingEmbedder's of each turn's own
    document, checked)."""
    import numpy as np

    from cuemem.engines.baselines import turn_words
    from cuemem.engines.structure import hit_text, turn_fields, with_header_tokens
    from cuemem.store.base import NewItem, text_hash

    lme = CONFIG["turns"] == "lme"
    base = [] if lme else [as_turn(t) for t in source_turns()[0]]
    turns = scale_turns(n)
    unique = len({t["text"] for t in turns})
    mode = CONFIG["vectors"]
    out: dict = {}
    with memory_at(target, n) as memory:
        store = memory.store
        if hasattr(store, "_maybe_index"):
            store._maybe_index = lambda *a, **k: None  # the HNSW index is built afterwards, timed
        start = time.perf_counter()
        metas = [turn_fields(t) for t in base]
        with_header_tokens(metas, memory.tokens.count_many)
        shown = [hit_text(turn_words(t), m) for t, m in zip(base, metas, strict=True)]
        tokens = memory.tokens.count_many(shown)
        fields_s = time.perf_counter() - start
        start = time.perf_counter()
        if mode == "hashing":
            hashing = CachedHashing()
            check = documents(source_turns()[0][:200])
            assert np.array_equal(hashing.embed(check), memory.embedder.embed(check)), "cached hashing differs"
        elif mode == "minilm" and lme:
            real = lme_vectors(n)
        elif mode == "minilm":
            real = minilm_cached("real", documents(turns))
        else:
            vecs = base_vectors()
            sigma = noise_sigma(CONFIG["cosine"])
            first: dict[str, int] = {}
            cosines: list[float] = []
        out["vectors_prep_s"] = time.perf_counter() - start
        ns = store.namespace_id(memory.namespace(USER), create=True)
        hybrid = memory._engine("hybrid")
        for engine in (hybrid, memory._engine("bm25"), memory._engine("dense")):
            store.declare(engine.derived)
        vector_s = 0.0
        start = time.perf_counter()
        for lo in range(0, n, batch):
            chunk = [as_turn(t) for t in turns[lo : lo + batch]]
            added = store.append_turns(ns, chunk).added
            if lme:  # distinct turns: each its own fields, computed by the engine's functions here (timed apart)
                f0 = time.perf_counter()
                metas = [turn_fields(t) for t in added]
                with_header_tokens(metas, memory.tokens.count_many)
                shown = [hit_text(turn_words(t), m) for t, m in zip(added, metas, strict=True)]
                tokens = memory.tokens.count_many(shown)
                fields_s += time.perf_counter() - f0
                j = list(range(len(added)))
            else:
                j = [int(t.id[1:]) % len(base) for t in added]
            store.put_items(
                ns,
                SPACE,
                [
                    NewItem(t.id, turn_words(t), metas[b], [t.seq or 0], tokens[b])
                    for t, b in zip(added, j, strict=True)
                ],
            )
            ids = store.item_ids(ns, SPACE, [t.id for t in added])
            docs = documents([turns[int(t.id[1:])] for t in added])
            v0 = time.perf_counter()
            if mode == "hashing":
                vectors = hashing.embed(docs)
            elif mode == "minilm":
                vectors = real[[int(t.id[1:]) for t in added]]
            else:
                firsts = [first.setdefault(d, int(t.id[1:])) for t, d in zip(added, docs, strict=True)]
                vectors = perturbed(firsts, vecs, sigma)
                copies = [r for r, i in enumerate(firsts) if i >= len(vecs)]
                cosines += (vectors[copies] * vecs[[firsts[r] % len(vecs) for r in copies]]).sum(1).tolist()
            vector_s += time.perf_counter() - v0
            rows = [(ids[t.id], text_hash(d), v) for t, d, v in zip(added, docs, vectors, strict=True)]
            store.put_vectors(ns, SPACE, memory.embedder.name, rows)
            with store.transaction(ns):
                store.set_watermark(ns, memory._progress_key(hybrid), max(t.seq or 0 for t in added))
        seconds = time.perf_counter() - start
        mark_shared(memory)
        stored = store.count_turns(ns)
    assert stored == n, f"stored {stored} of {n} turns"
    if mode == "minilm-perturbed" and cosines:
        c = np.asarray(cosines)
        out["copy_cosine"] = {
            "target": CONFIG["cosine"],
            "sigma": sigma,
            "copies": len(c),
            "mean": float(c.mean()),
            "std": float(c.std()),
            "min": float(c.min()),
            "max": float(c.max()),
            **{f"p{q}": float(np.percentile(c, q)) for q in (1, 5, 50, 95, 99)},
        }
        out["distinct_vectors"] = len(first)
    return {
        "turns": n,
        "unique_texts": unique,
        "path": "bulk",
        "call_turns": batch,
        "seconds": seconds,
        "turns_per_s": n / seconds,
        "vectors_s": vector_s,
        "base_fields_s": fields_s,
        "peak_rss_mb": peak_mb(),
        **out,
    }


def phase_hnsw(dsn: str, mwm: str) -> dict:
    """Build the partition's HNSW index with PostgresStore.build_vector_index on a session whose
    maintenance_work_mem is `mwm`."""
    import psycopg

    from cuemem.store import open_store

    store = open_store(dsn)
    try:
        ns = store.namespace_id(_namespace())
        model = make_embedder().name
        with psycopg.connect(dsn) as conn:
            conn.execute("SET search_path = cuemem, public")
            conn.execute(f"SET maintenance_work_mem = '{mwm}'")
            workers = conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
            start = time.perf_counter()
            name = store.build_vector_index(ns, SPACE, model, dims(), conn=conn)
            conn.commit()
            seconds = time.perf_counter() - start
            size = conn.execute("SELECT pg_relation_size(%s)", (f"cuemem.{name}",)).fetchone()[0]
        count = store.vector_count(ns, SPACE, model)
    finally:
        store.close()
    return {
        "vectors": count,
        "model": model,
        "seconds": seconds,
        "index_mb": size / 2**20,
        "maintenance_work_mem": mwm,
        "max_parallel_maintenance_workers": int(workers),
    }


def _namespace() -> Any:
    from cuemem.types import Namespace

    return Namespace(USER, None, None)


def phase_search(target: str, engine: str, count: int) -> dict:
    """Latency of Memory.search(k=10) in a fresh process over `count` test questions: the embedder's model is
    loaded first (timed apart), then the first query (cold: the store's loads) apart, then every query."""
    qs = queries(count, "test")
    with memory_at(target) as memory:
        start = time.perf_counter()
        if engine != "bm25" and hasattr(memory.embedder, "embed_query"):
            memory.embedder.embed_query(["warm up"])
        model_ms = (time.perf_counter() - start) * 1000
        rss0 = rss_mb()
        start = time.perf_counter()
        memory.search(qs[0], user_id=USER, k=10, engine=engine)
        first = (time.perf_counter() - start) * 1000
        rss1 = rss_mb()
        ms = []
        for q in qs:
            start = time.perf_counter()
            memory.search(q, user_id=USER, k=10, engine=engine)
            ms.append((time.perf_counter() - start) * 1000)
        out = {
            "engine": engine,
            "model_load_ms": model_ms,
            "first_query_ms": first,
            "first_query_rss_mb": rss1 - rss0,
            **latencies(ms),
            "rss_mb": rss_mb(),
            "peak_rss_mb": peak_mb(),
        }
        store = memory.store
        out["stored_turns"] = store.count_turns(store.namespace_id(memory.namespace(USER)))
        if engine != "bm25" and hasattr(memory.embedder, "memo"):
            # the query's own embedding is part of the latency above; the same searches with every query vector
            # computed ahead give the retrieval alone
            qms = []
            for q in qs:
                start = time.perf_counter()
                memory.embedder.memo[q] = memory.embedder.embed_query([q])[0]
                qms.append((time.perf_counter() - start) * 1000)
            out["query_embed"] = latencies(qms)
            ms = []
            for q in qs:
                start = time.perf_counter()
                memory.search(q, user_id=USER, k=10, engine=engine)
                ms.append((time.perf_counter() - start) * 1000)
            out["retrieval"] = latencies(ms)
    return out


def _vectors_of(dsn: str, ns: int, model: str) -> tuple[Any, Any]:
    """(item ids, unit vectors) of the partition, read back from PostgreSQL."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    items: list[int] = []
    chunks = []
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        with conn.cursor(name="vectors") as cur:
            cur.itersize = 20000
            cur.execute(
                "SELECT item, vec FROM cuemem.vectors WHERE ns=%s AND space=%s AND model=%s", (ns, SPACE, model)
            )
            while rows := cur.fetchmany(20000):
                items += [int(r[0]) for r in rows]
                chunks.append(
                    np.stack(
                        [np.asarray(getattr(r[1], "to_numpy", lambda v=r[1]: v)(), dtype=np.float32) for r in rows]
                    )
                )
    return np.asarray(items), np.concatenate(chunks)


def phase_recall(dsn: str, count: int, efs: str, checks: int) -> dict:
    """HNSW recall against exact on dev and test questions at each ef_search (see the module's doc)."""
    import numpy as np

    from cuemem.embed.base import embed_query
    from cuemem.store import open_store

    store = open_store(dsn)
    embedder = make_embedder()
    model = embedder.name
    out: dict = {"model": model}
    try:
        ns = store.namespace_id(_namespace())
        out["hnsw"] = store._index_of(ns, SPACE, model) is not None
        start = time.perf_counter()
        items, matrix = _vectors_of(dsn, ns, model)
        out["vectors"] = len(items)
        out["read_vectors_s"] = time.perf_counter() - start
        sets = {split: queries(count, split) for split in ("dev", "test")}
        qv = {split: embed_query(embedder, qs) for split, qs in sets.items()}
        truth: dict = {}
        for split, vs in qv.items():
            truth[split] = []
            for v in vs:
                scores = matrix @ v
                top = np.argpartition(-scores, 100)[:100]
                top = top[np.argsort(-scores[top], kind="stable")]
                truth[split].append((items[top], scores[top]))
        # the numpy truth against the store's own exact search
        agree, exact_ms = [], []
        for r in range(min(checks, len(sets["dev"]))):
            start = time.perf_counter()
            exact = store.vector_search(ns, SPACE, model, qv["dev"][r], 100, exact=True)
            exact_ms.append((time.perf_counter() - start) * 1000)
            floor = truth["dev"][r][1][-1] - 1e-5
            agree.append(sum(1 for _, s in exact if s >= floor) / 100)
        if agree:
            out["exact_check"] = {
                "queries": len(agree),
                "recall@100_of_store_exact": statistics.mean(agree),
                "store_exact_k100_p50_ms": percentile(exact_ms, 50),
                "store_exact_k100_p95_ms": percentile(exact_ms, 95),
            }
        sweep: dict = {}
        for ef in (int(e) for e in efs.split(",")):
            row: dict = {}
            for split, vs in qv.items():
                res: dict = {}
                for k in (10, 100):
                    found, ids, ms, short, tied = [], [], [], 0, []
                    for v, (tid, tscore) in zip(vs, truth[split], strict=True):
                        with store.snapshot():
                            store._query("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(ef, 2 * k)),))
                            start = time.perf_counter()
                            approx = store.vector_search(ns, SPACE, model, v, k)
                            ms.append((time.perf_counter() - start) * 1000)
                        floor = tscore[k - 1] - 1e-5
                        found.append(sum(1 for _, s in approx if s >= floor) / k)
                        ids.append(len({i for i, _ in approx} & set(tid[:k].tolist())) / k)
                        short += len(approx) < k
                        if found[-1] < 0.5:  # how many exact top-k share the top score (identical vectors)?
                            tied.append(int((tscore[:k] >= tscore[0] - 1e-6).sum()))
                    res[f"recall@{k}"] = statistics.mean(found)
                    res[f"id_recall@{k}"] = statistics.mean(ids)
                    res[f"min_recall@{k}"] = min(found)
                    res[f"below_half@{k}"] = len(tied)  # queries with recall < 0.5
                    res[f"below_half_top_ties@{k}"] = tied
                    res[f"short_results@{k}"] = short  # queries answered with fewer than k rows
                    res[f"p50_ms@{k}"] = percentile(ms, 50)
                    res[f"p95_ms@{k}"] = percentile(ms, 95)
                row[split] = res
            sweep[ef] = row
        out["sweep"] = sweep
        out["queries"] = {split: len(qs) for split, qs in sets.items()}
        ok = [ef for ef, row in sweep.items() if row["dev"]["recall@10"] >= RECALL_TARGET]
        out["chosen_ef"] = min(ok) if ok else None
    finally:
        store.close()
    return out


def phase_dupcheck(dsn: str, n: int, count: int, efs: str, mwm: str) -> dict:
    """Side experiment, not the store: the same n vectors but every copy with its own noise (seeded by its turn
    index even where its document equals its original's: no identical vectors), in a plain pgvector table with
    the store's HNSW parameters; recall@10 / @100 against numpy exact on dev and test questions per ef_search."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    from cuemem.embed.base import embed_query
    from cuemem.store.postgres import HNSW_EF_CONSTRUCTION, HNSW_M

    vecs = base_vectors()
    matrix = perturbed(list(range(n)), vecs, noise_sigma(CONFIG["cosine"]))
    out: dict = {"vectors": n, "distinct": len(np.unique(matrix[: min(n, 200000)], axis=0))}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS public.bench_vec")
        conn.execute(f"CREATE TABLE public.bench_vec (id int PRIMARY KEY, vec vector({matrix.shape[1]}))")
        start = time.perf_counter()
        with conn.cursor() as cur, cur.copy("COPY public.bench_vec (id, vec) FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.set_types(["int4", "vector"])
            for i, v in enumerate(matrix):
                cp.write_row((i, v))
        out["copy_s"] = time.perf_counter() - start
        conn.execute(f"SET maintenance_work_mem = '{mwm}'")
        start = time.perf_counter()
        m, ef_construction = CONFIG.get("hnsw_m") or HNSW_M, CONFIG.get("hnsw_ef_construction") or HNSW_EF_CONSTRUCTION
        out["hnsw"] = {"m": m, "ef_construction": ef_construction}
        conn.execute(
            f"CREATE INDEX bench_vec_hnsw ON public.bench_vec USING hnsw (vec vector_cosine_ops)"
            f" WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
        )
        out["hnsw_s"] = time.perf_counter() - start
        embedder = make_embedder()
        sweep: dict = {}
        for split in ("dev", "test"):
            qs = queries(count, split)
            qv = embed_query(embedder, qs)
            truth = []
            for v in qv:
                scores = matrix @ v
                top = np.argpartition(-scores, 100)[:100]
                top = top[np.argsort(-scores[top], kind="stable")]
                truth.append((top, scores[top]))
            for ef in (int(e) for e in efs.split(",")):
                for k in (10, 100):
                    conn.execute(f"SET hnsw.ef_search = {max(ef, 2 * k)}")
                    found, origin = [], []
                    for v, (tid, t) in zip(qv, truth, strict=True):
                        sql = "SELECT id, 1 - (vec <=> %s) FROM public.bench_vec ORDER BY vec <=> %s LIMIT %s"
                        rows = conn.execute(sql, (v, v, k)).fetchall()
                        found.append(sum(1 for _, sc in rows if sc >= t[k - 1] - 1e-5) / k)
                        # which LoCoMo originals the exact top-k are copies of, and how many of them HNSW reached
                        want = {int(i) % len(vecs) for i in tid[:k]}
                        origin.append(len(want & {int(i) % len(vecs) for i, _ in rows}) / len(want))
                    res = sweep.setdefault(ef, {}).setdefault(split, {})
                    res[f"recall@{k}"] = statistics.mean(found)
                    res[f"original_recall@{k}"] = statistics.mean(origin)
        out["sweep"] = sweep
        conn.execute("DROP TABLE public.bench_vec")
    return out


def phase_fts(dsn: str, count: int) -> dict:
    """Side experiment, not the store: PostgreSQL full text (to_tsvector + GIN, ts_rank_cd) over the same items,
    with OR queries (BM25's semantics: any query word matches)."""
    import psycopg

    from cuemem.index.text import analyze

    qs = queries(count, "test")
    out: dict = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        ns = conn.execute("SELECT id FROM cuemem.namespaces WHERE user_id=%s", (USER,)).fetchone()[0]
        conn.execute("DROP TABLE IF EXISTS public.bench_fts")
        conn.execute("SET maintenance_work_mem = '1GB'")
        start = time.perf_counter()
        conn.execute(
            "CREATE TABLE public.bench_fts AS SELECT id, to_tsvector('english', text) AS tsv"
            " FROM cuemem.items WHERE ns=%s AND space=%s",
            (ns, SPACE),
        )
        out["tsvector_s"] = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("CREATE INDEX bench_fts_gin ON public.bench_fts USING gin(tsv)")
        conn.execute("ANALYZE public.bench_fts")
        out["gin_build_s"] = time.perf_counter() - start
        out["table_mb"] = conn.execute("SELECT pg_relation_size('public.bench_fts')").fetchone()[0] / 2**20
        out["gin_mb"] = conn.execute("SELECT pg_relation_size('public.bench_fts_gin')").fetchone()[0] / 2**20
        sql = (
            "SELECT id, ts_rank_cd(tsv, q) AS r FROM public.bench_fts, to_tsquery('english', %s) q"
            " WHERE tsv @@ q ORDER BY r DESC, id LIMIT 10"
        )
        ms, matched = [], []
        for q in qs:
            words = [w for w in dict.fromkeys(analyze(q)) if re.fullmatch(r"[a-z0-9]+", w)]
            if not words:
                continue
            start = time.perf_counter()
            conn.execute(sql, (" | ".join(words),)).fetchall()
            ms.append((time.perf_counter() - start) * 1000)
            matched.append(
                conn.execute(
                    "SELECT count(*) FROM public.bench_fts WHERE tsv @@ to_tsquery('english', %s)", (" | ".join(words),)
                ).fetchone()[0]
            )
        out.update(latencies(ms))
        out["matching_rows_mean"] = statistics.mean(matched)
        conn.execute("DROP TABLE public.bench_fts")
    return out


# --------------------------------------------------------------------------- driver
