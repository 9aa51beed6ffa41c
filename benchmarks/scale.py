"""Scale (issue 26): ingest and search at 10k, 100k and 1M turns, SQLite and PostgreSQL + pgvector side by side.

    python benchmarks/scale.py --sizes 10000,100000 --stores sqlite,postgres --out bench-out/scale-100k.json
    python benchmarks/scale.py --sizes 1000000 --stores postgres,sqlite --out bench-out/scale-1m.json
    python benchmarks/scale.py --vectors minilm --sizes 100000 --stores postgres --engines dense  # validation

Turns: LoCoMo's 5,882 turns (locomo/locomo10.json under the datasets setting or --datasets DIR, read in place)
repeated under new ids t0, t1, …; copy 0 is LoCoMo verbatim, every later copy replaces each word of the turn, with
probability 0.2, by a word drawn from LoCoMo's own word distribution (one `random.Random(26)` stream in turn order,
so turn i is the same at every size). Speaker, date and image caption are kept.

--turns lme instead takes the first N distinct sentences of LongMemEval-S (benchmarks/hnsw_real.py: every message
split at sentence ends, at least 3 words, in order of first appearance; speaker = the message's role, timestamp and
session = its session's), with --vectors minilm read from hnsw_real.py's cache (real MiniLM of each sentence), and
LongMemEval-S's distinct questions split the same way: real, distinct text at every size, for the 1M figures.

Queries: LoCoMo's 1,974 distinct questions, split by the first byte of blake2b(question) into dev (even, 983) and
test (odd, 991). Latency is measured on a fixed sample of test questions; HNSW's ef_search is chosen on dev
recall and reported on test recall.

Vectors (--vectors):
  minilm-perturbed (default): each of LoCoMo's 5,882 turn documents and every query is embedded for real with the
    shipped all-MiniLM-L6-v2 (384 dimensions). A turn whose document is not an original's gets its original's
    MiniLM vector plus Gaussian noise (numpy default_rng((26, i)) for turn i, the first turn carrying that
    document), renormalised; the noise scale sigma = sqrt(1/c**2 - 1)/sqrt(384) puts the cosine between a copy and
    its original at about c = --copy-cosine (the measured distribution is reported). A copy whose words all
    survived has its original's document, hence its original's vector, as a real embedder would give it.
    Queries go through real MiniLM at search time (Memory.search embeds them), so latency includes it.
  minilm: real MiniLM of every turn's document (cached under --data; ~450 turns/s on 2 free cores), to validate
    the construction's HNSW recall at sizes where that is affordable.
  hashing: cuemem's model-free HashingEmbedder (512 dimensions, sparse): the first run's vectors.

Every phase runs in its own subprocess (peak RSS is its own; a search phase is a fresh process, so its first query
pays the loads: the in-process BM25 index, the structure table, the SQLite vector matrix; MiniLM is loaded before
it and timed apart). PostgreSQL comes from `pgserver` (a fresh cluster under --data), its settings are recorded.
Data lives under --data (default /tmp).

Paths: at sizes <= --add-limit turns are ingested by `Memory.add` in calls of 256 turns (the hybrid engine, its
default engine batch): that is the ingest figure. Larger stores are bulk-loaded with the store's own methods
(append_turns, put_items, put_vectors) in batches of --bulk turns, writing what the hybrid engine writes, with
PostgreSQL's automatic HNSW build switched off during the load; the HNSW index is then built by
`PostgresStore.build_vector_index` as its own timed phase (with maintenance_work_mem set so the graph fits in
memory). The bm25 and dense engines share the hybrid engine's items and vectors, so their watermarks are set to the
log's end after the load instead of re-reading the log.

Recall (PostgreSQL): the truth is exact cosine top-k in numpy over every vector read back from the store (checked
against the store's own exact search on the first --exact-checks queries); the store's search (HNSW) is run at
each hnsw.ef_search in --ef-sweep, for k=10 at ef and for k=100 at max(ef, 200), the ef the store uses for
k=100 (hybrid reads the dense ranking 100 deep). A hit counts when its score reaches the exact k-th score (ties
among identical vectors are not misses); id_recall counts ids only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import add_datasets_option, apply_datasets_option
from perf import peak_mb, source_turns

from cuemem.bench.metrics import percentile

SEED = 26
REPLACE = 0.2  # per-word replacement probability in copies after the first
USER = "bench"
SPACE = "turn"
DIMS = 512  # hashing vectors
MINILM_DIMS = 384
EF_SWEEP = "40,64,100,200,400"  # hnsw.ef_search values whose recall and latency are measured on dev and test
RECALL_TARGET = 0.95  # the smallest swept ef_search whose dev recall@10 reaches this is chosen
CONFIG: dict[str, Any] = {
    "vectors": "minilm-perturbed",
    "cosine": 0.9,
    "spread": 0.0,
    "data": Path("/tmp/cuemem-scale"),
    "turns": "locomo",
    "lme_cache": Path("/tmp/cuemem-hnsw-real/chunks"),
}


# --------------------------------------------------------------------------- data
def scale_turns(n: int) -> list[dict]:
    """n turns: LoCoMo's, then copies with words replaced from LoCoMo's word distribution (deterministic); with
    --turns lme, the first n distinct LongMemEval-S sentences (hnsw_real.py's)."""
    if CONFIG["turns"] == "lme":
        from hnsw_real import sentence_records

        return sentence_records(n)
    base, _ = source_turns()
    vocab = [w for t in base for w in t["text"].split()]
    rng = random.Random(SEED)
    out = []
    for i in range(n):
        t = dict(base[i % len(base)])
        if i >= len(base):
            t["text"] = " ".join(rng.choice(vocab) if rng.random() < REPLACE else w for w in t["text"].split())
        t["id"] = f"t{i}"
        out.append(t)
    return out


def split_of(question: str) -> str:
    """dev or test, by the first byte of the question's blake2b digest (deterministic, about half each)."""
    import hashlib

    return "dev" if hashlib.blake2b(question.encode("utf-8"), digest_size=8).digest()[0] % 2 == 0 else "test"


def queries(count: int, split: str = "test") -> list[str]:
    """A fixed sample of `count` distinct questions of one split (all of them when count exceeds it): LoCoMo's, or
    LongMemEval-S's with --turns lme."""
    if CONFIG["turns"] == "lme":
        from hnsw_real import questions as lme_questions

        questions = lme_questions()
    else:
        _, questions = source_turns()
    pool = [q for q in dict.fromkeys(questions) if split_of(q) == split]
    return random.Random(1).sample(pool, min(count, len(pool)))


def as_turn(t: dict) -> Any:
    from cuemem.types import Turn

    return Turn(
        t["id"], t["text"], t["speaker"], t.get("session_id") or "default", t.get("timestamp"), t.get("metadata") or {}
    )


def documents(turns: list[dict]) -> list[str]:
    """The documents the hybrid engine embeds for these turns (default turn template)."""
    from cuemem.engines.baselines import turn_document

    return [turn_document(as_turn(t)) for t in turns]


# --------------------------------------------------------------------------- vectors
def minilm() -> Any:
    from cuemem.embed import MiniLMEmbedder

    return MiniLMEmbedder()


def minilm_cached(tag: str, texts: list[str]) -> Any:
    """Real MiniLM vectors of `texts`, cached under --data by a digest of the texts."""
    import hashlib

    import numpy as np

    digest = hashlib.blake2b("\n".join(texts).encode("utf-8"), digest_size=8).hexdigest()
    path = Path(CONFIG["data"]) / f"minilm-{tag}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    out = np.concatenate([minilm().embed(texts[i : i + 4096]) for i in range(0, len(texts), 4096)])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def lme_vectors(n: int) -> Any:
    """Real MiniLM of the first n LongMemEval-S sentences, from hnsw_real.py's cache (fill it first with
    `python benchmarks/hnsw_real.py --n N --embed-only`). They embed each sentence alone, not the engine's
    "[date] speaker: text" document: the index's recall and speed depend on the vectors' spread, not on that."""
    import numpy as np
    from hnsw_real import CHUNK, chunk_path

    paths = [chunk_path(Path(CONFIG["lme_cache"]), i) for i in range(0, n, CHUNK)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"{len(missing)} vector chunks missing, first {missing[0]}: run hnsw_real.py --embed-only")
    return np.concatenate([np.load(p) for p in paths])[:n]


def base_vectors() -> Any:
    """Real MiniLM of LoCoMo's 5,882 original turn documents (copy 0)."""
    base, _ = source_turns()
    return minilm_cached("base", documents(base))


def noise_sigma(cosine: float, dims: int = MINILM_DIMS) -> float:
    """Per-coordinate noise scale that puts a unit vector plus noise at about `cosine` from itself."""
    return (1 / cosine**2 - 1) ** 0.5 / dims**0.5


def perturbed(firsts: list[int], base: Any, sigma: float) -> Any:
    """Vectors by construction: turn index i < len(base) is the original (its real MiniLM vector), any later one
    its original's vector plus Gaussian noise seeded by (SEED, i), renormalised."""
    import numpy as np

    from cuemem.embed.base import normalize

    out = np.empty((len(firsts), base.shape[1]), dtype=np.float32)
    spread = CONFIG["spread"]
    for row, i in enumerate(firsts):
        out[row] = base[i % len(base)]
        if i >= len(base):
            rng = np.random.default_rng((SEED, i))
            scale = sigma
            if spread > 0:  # --copy-spread: each copy's own target cosine, drawn around the mean (real copies vary)
                target = float(np.clip(CONFIG["cosine"] + spread * rng.standard_normal(), 0.6, 0.995))
                scale = noise_sigma(target, base.shape[1])
            out[row] += scale * rng.standard_normal(base.shape[1], dtype=np.float32)
    return normalize(out)


class ScaleEmbedder:
    """Queries through real MiniLM; documents through the construction (--vectors minilm-perturbed: the first
    turn index among the benchmark's turns that carries the document picks the vector) or real MiniLM."""

    def __init__(self, mode: str, cosine: float, n: int = 0) -> None:
        self.mode = mode
        self.inner = minilm()
        self.bm25_weight = getattr(self.inner, "bm25_weight", 1.0)
        self.name = self.inner.name if mode == "minilm" else f"{self.inner.name}+noise@{cosine:g}"
        self.sigma = noise_sigma(cosine)
        self.n = n
        self._first: dict[str, int] | None = None
        self.memo: dict[str, Any] = {}  # query vectors computed ahead (the retrieval-only timing)

    @property
    def dim(self) -> int:
        return MINILM_DIMS

    def embed_query(self, texts: Any) -> Any:
        import numpy as np

        if self.memo and all(t in self.memo for t in texts):
            return np.stack([self.memo[t] for t in texts])
        return self.inner.embed_query(texts)

    def embed(self, texts: Any) -> Any:
        import numpy as np

        if self.mode == "minilm":
            return self.inner.embed(texts)
        if self._first is None:
            self._first = {}
            for i, doc in enumerate(documents(scale_turns(self.n))):
                self._first.setdefault(doc, i)
        known = [self._first.get(t) for t in texts]
        out = np.empty((len(texts), MINILM_DIMS), dtype=np.float32)
        rows = [r for r, i in enumerate(known) if i is not None]
        if rows:
            out[rows] = perturbed([known[r] for r in rows], base_vectors(), self.sigma)  # type: ignore[misc]
        rest = [r for r, i in enumerate(known) if i is None]
        if rest:
            out[rest] = self.inner.embed([texts[r] for r in rest])
        return out


def make_embedder(n: int = 0) -> Any:
    from cuemem.embed.hashing import HashingEmbedder

    if CONFIG["vectors"] == "hashing":
        return HashingEmbedder(DIMS)
    return ScaleEmbedder(CONFIG["vectors"], CONFIG["cosine"], n)


def dims() -> int:
    return DIMS if CONFIG["vectors"] == "hashing" else MINILM_DIMS


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _memory(target: str, n: int = 0) -> Any:
    from cuemem import Memory

    return Memory(target, engine="hybrid", embedder=make_embedder(n))


def _mark_shared(memory: Any) -> None:
    """bm25 and dense index exactly the hybrid engine's items and vectors: mark them caught up."""
    store = memory.store
    ns = store.namespace_id(memory.namespace(USER))
    last = store.last_seq(ns)
    for name in ("bm25", "dense"):
        engine = memory._engine(name)
        store.declare(engine.derived)
        with store.transaction():
            store.set_watermark(ns, memory._progress_key(engine), last)


def _lat(ms: list[float]) -> dict:
    return {
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "mean_ms": statistics.mean(ms),
        "queries": len(ms),
    }


# --------------------------------------------------------------------------- phases (each in a subprocess)
def phase_load(target: str, n: int, batch: int, bulk: bool) -> dict:
    """Ingest n turns through Memory.add (hybrid engine) in calls of `batch` turns."""
    import cuemem.memory

    turns = scale_turns(n)
    unique = len({t["text"] for t in turns})
    if bulk:
        cuemem.memory.INGEST_BATCH = batch
    with _memory(target, n) as memory:
        if bulk and hasattr(memory.store, "_maybe_index"):
            memory.store._maybe_index = lambda *a, **k: None  # the HNSW index is built afterwards, timed
        start = time.perf_counter()
        for i in range(0, n, batch):
            memory.add(turns[i : i + batch], user_id=USER)
        seconds = time.perf_counter() - start
        _mark_shared(memory)
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
    with _memory(target, n) as memory:
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
            with store.transaction():
                store.set_watermark(ns, memory._progress_key(hybrid), max(t.seq or 0 for t in added))
        seconds = time.perf_counter() - start
        _mark_shared(memory)
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
    with _memory(target) as memory:
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
            **_lat(ms),
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
            out["query_embed"] = _lat(qms)
            ms = []
            for q in qs:
                start = time.perf_counter()
                memory.search(q, user_id=USER, k=10, engine=engine)
                ms.append((time.perf_counter() - start) * 1000)
            out["retrieval"] = _lat(ms)
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
        out.update(_lat(ms))
        out["matching_rows_mean"] = statistics.mean(matched)
        conn.execute("DROP TABLE public.bench_fts")
    return out


# --------------------------------------------------------------------------- driver
def run_phase(*args: str) -> dict:
    flags = [
        "--vectors",
        CONFIG["vectors"],
        "--copy-cosine",
        str(CONFIG["cosine"]),
        "--copy-spread",
        str(CONFIG["spread"]),
        "--data",
        str(CONFIG["data"]),
        "--hnsw-m",
        str(CONFIG.get("hnsw_m") or 0),
        "--hnsw-ef-construction",
        str(CONFIG.get("hnsw_ef_construction") or 0),
        "--turns",
        CONFIG["turns"],
        "--lme-cache",
        str(CONFIG["lme_cache"]),
    ]
    cmd = [sys.executable, __file__, *flags, "--phase", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_postgres(root: Path, shared_buffers: str) -> tuple[Any, dict]:
    """A pgserver cluster under root with shared_buffers set (ALTER SYSTEM, then a restart); its versions and
    settings."""
    import pgserver
    import psycopg

    server = pgserver.get_server(root, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        if conn.execute("SHOW shared_buffers").fetchone()[0] != shared_buffers:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
            conn.execute("ALTER SYSTEM SET effective_cache_size = '8GB'")
            restart = True
        else:
            restart = False
    if restart:
        server.cleanup()
        server = pgserver.get_server(root, cleanup_mode="stop")
    info: dict = {}
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        info["version"] = conn.execute("SELECT version()").fetchone()[0]
        info["pgvector"] = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name='vector'"
        ).fetchone()[0]
        for name in (
            "shared_buffers",
            "effective_cache_size",
            "work_mem",
            "maintenance_work_mem",
            "max_parallel_workers_per_gather",
            "max_parallel_maintenance_workers",
            "synchronous_commit",
            "fsync",
            "max_wal_size",
        ):
            info[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    return server, info


def database(server: Any, name: str) -> str:
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.get_uri().replace("/postgres?", f"/{name}?", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--engines", default="bm25,dense,hybrid")
    parser.add_argument("--vectors", default=CONFIG["vectors"], choices=("minilm-perturbed", "minilm", "hashing"))
    parser.add_argument(
        "--turns",
        default="locomo",
        choices=("locomo", "lme"),
        help="lme: distinct LongMemEval-S sentences with their real MiniLM (needs --vectors minilm)",
    )
    parser.add_argument("--lme-cache", default=str(CONFIG["lme_cache"]), help="hnsw_real.py's vector chunks")
    parser.add_argument("--copy-cosine", type=float, default=CONFIG["cosine"], help="minilm-perturbed's target")
    parser.add_argument("--hnsw-m", type=int, default=0, help="--dupcheck only: HNSW m (0: the store's)")
    parser.add_argument("--hnsw-ef-construction", type=int, default=0, help="--dupcheck only (0: the store's)")
    parser.add_argument(
        "--copy-spread",
        type=float,
        default=0.0,
        help="sd of each copy's own target cosine (0: every copy at --copy-cosine; real MiniLM copies"
        " measured sd 0.077)",
    )
    parser.add_argument("--queries", type=int, default=200, help="test questions timed per engine")
    parser.add_argument("--recall-queries", type=int, default=200, help="dev and test questions each, for recall")
    parser.add_argument("--ef-sweep", default=EF_SWEEP, help="hnsw.ef_search values for recall (PostgreSQL)")
    parser.add_argument("--exact-checks", type=int, default=20, help="queries checked against the store's exact")
    parser.add_argument("--add-limit", type=int, default=10000, help="largest size ingested by 256-turn adds")
    parser.add_argument("--bulk", type=int, default=10000, help="turns per add call (and engine batch) above it")
    parser.add_argument("--maintenance-work-mem", default="6GB", help="for the HNSW build")
    parser.add_argument("--shared-buffers", default="4GB")
    parser.add_argument("--fts", action="store_true", help="also measure PostgreSQL full text (side experiment)")
    parser.add_argument(
        "--dupcheck",
        type=int,
        default=0,
        metavar="N",
        help="side experiment: HNSW recall, N vectors, none identical (plain table)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each size's stores (else dropped after it)")
    parser.add_argument("--data", default="/tmp/cuemem-scale")
    parser.add_argument("--out", default="bench-out/scale.json")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    CONFIG.update(
        vectors=args.vectors,
        cosine=args.copy_cosine,
        spread=args.copy_spread,
        data=Path(args.data),
        hnsw_m=args.hnsw_m,
        hnsw_ef_construction=args.hnsw_ef_construction,
        turns=args.turns,
        lme_cache=Path(args.lme_cache),
    )
    if args.turns == "lme" and args.vectors != "minilm":
        parser.error("--turns lme needs --vectors minilm (its vectors are real MiniLM of every sentence)")

    if args.phase:
        name, *rest = args.phase
        if name == "bulk":
            result = phase_bulk(rest[0], int(rest[1]), int(rest[2]))
        elif name == "load":
            result = phase_load(rest[0], int(rest[1]), int(rest[2]), rest[3] == "bulk")
        elif name == "hnsw":
            result = phase_hnsw(rest[0], rest[1])
        elif name == "search":
            result = phase_search(rest[0], rest[1], int(rest[2]))
        elif name == "dupcheck":
            result = phase_dupcheck(rest[0], int(rest[1]), int(rest[2]), rest[3], rest[4])
        elif name == "recall":
            result = phase_recall(rest[0], int(rest[1]), rest[2], int(rest[3]))
        else:
            result = phase_fts(rest[0], int(rest[1]))
        print(json.dumps(result))
        return

    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    stores = args.stores.split(",")
    out = Path(args.out)
    report: dict = {
        "machine": {
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "ram_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "turns": f"LoCoMo ({len(source_turns()[0])} turns) then copies with p={REPLACE} word replacement, seed {SEED}"
        if args.turns == "locomo"
        else "the first N distinct LongMemEval-S sentences (benchmarks/hnsw_real.py)",
        "vectors": args.vectors,
        "embedder": make_embedder().name,
        "dims": dims(),
        "queries": args.queries,
        "split": "dev/test by blake2b(question)[0] % 2"
        + (" (983 dev, 991 test)" if args.turns == "locomo" else " of LongMemEval-S's distinct questions"),
        "runs": [],
    }
    if args.vectors == "minilm-perturbed":
        report["copy_cosine_target"] = args.copy_cosine
        report["noise_sigma"] = noise_sigma(args.copy_cosine)
    server = None
    if "postgres" in stores:
        server, report["postgres"] = start_postgres(data / "pg", args.shared_buffers)
        from cuemem.store import postgres

        report["postgres"]["hnsw"] = {
            "m": postgres.HNSW_M,
            "ef_construction": postgres.HNSW_EF_CONSTRUCTION,
            "ef_search": postgres.HNSW_EF_SEARCH,
            "threshold": postgres.HNSW_THRESHOLD,
        }
        print(json.dumps(report["postgres"]), flush=True)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))

    if args.dupcheck:
        target = database(server, "scale_dupcheck")
        report["dupcheck"] = run_phase(
            "dupcheck", target, str(args.dupcheck), str(args.recall_queries), args.ef_sweep, args.maintenance_work_mem
        )
        print(json.dumps(report["dupcheck"]), flush=True)
        _drop("postgres", target, server)
        save()
        return
    for size in [int(s) for s in args.sizes.split(",")]:
        for kind in stores:
            if kind == "postgres":
                target = database(server, f"scale_{size}")
            else:
                target = str(data / f"scale_{size}.db")
                for suffix in ("", "-wal", "-shm"):
                    Path(target + suffix).unlink(missing_ok=True)
            run: dict = {"store": kind, "turns": size}
            report["runs"].append(run)
            bulk = size > args.add_limit
            if bulk:
                load = run_phase("bulk", target, str(size), str(args.bulk))
            else:
                load = run_phase("load", target, str(size), "256", "add")
            run["load"] = load
            print(
                f"{kind:8s} {size:>8} load ({load['path']}): {load['seconds']:.1f} s = {load['turns_per_s']:.0f}"
                f" turns/s, {load['unique_texts']} unique texts, peak {load['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            if kind == "postgres" and size >= report["postgres"]["hnsw"]["threshold"]:
                run["hnsw"] = run_phase("hnsw", target, args.maintenance_work_mem)
                print(
                    f"{kind:8s} {size:>8} HNSW build {run['hnsw']['seconds']:.1f} s, {run['hnsw']['index_mb']:.0f} MB",
                    flush=True,
                )
            run["store_mb"] = _store_mb(target, server)
            save()
            run["search"] = []
            for engine in [e for e in args.engines.split(",") if e]:
                r = run_phase("search", target, engine, str(args.queries))
                run["search"].append(r)
                print(
                    f"{kind:8s} {size:>8} {engine:7s} p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms"
                    f"  first {r['first_query_ms']:8.0f} ms (+{r['first_query_rss_mb']:.0f} MB)"
                    f"  peak {r['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
                save()
            if kind == "postgres" and args.recall_queries:
                rec = run["recall"] = run_phase(
                    "recall", target, str(args.recall_queries), args.ef_sweep, str(args.exact_checks)
                )
                for ef, row in rec["sweep"].items():
                    print(
                        f"{kind:8s} {size:>8} ef_search {ef:>4}: "
                        + "  ".join(
                            f"{split} r@10 {r['recall@10']:.3f} r@100 {r['recall@100']:.3f}"
                            f" p50 {r['p50_ms@10']:.1f}/{r['p50_ms@100']:.1f} ms"
                            for split, r in row.items()
                        ),
                        flush=True,
                    )
                print(
                    f"{kind:8s} {size:>8} chosen ef_search {rec['chosen_ef']} (hnsw {rec['hnsw']},"
                    f" exact check {rec.get('exact_check')})",
                    flush=True,
                )
                save()
            if kind == "postgres" and args.fts:
                run["fts"] = run_phase("fts", target, str(args.queries))
                print(f"{kind:8s} {size:>8} tsvector/GIN: {json.dumps(run['fts'])}", flush=True)
                save()
            if not args.keep:
                _drop(kind, target, server)
    save()
    print(markdown(report))
    print(f"wrote {out}")


def _store_mb(target: str, server: Any) -> float:
    if server is not None and "://" in target:
        import psycopg

        with psycopg.connect(target) as conn:
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20
    return sum(Path(p).stat().st_size for p in (target, target + "-wal") if Path(p).exists()) / 2**20


def _drop(kind: str, target: str, server: Any) -> None:
    if kind == "postgres":
        import psycopg

        name = target.split("?")[0].rsplit("/", 1)[1]
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(target + suffix).unlink(missing_ok=True)


def markdown(report: dict) -> str:
    lines = [
        "| store | turns | load path | load turns/s | HNSW build s / MB | engine | p50 ms | p95 ms | mean ms"
        " | retrieval-only p50 / p95 ms | first query ms | first-query RSS MB | peak RSS MB |",
        "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        load = run["load"]
        hnsw = f"{run['hnsw']['seconds']:.0f} / {run['hnsw']['index_mb']:.0f}" if "hnsw" in run else "-"
        for r in run.get("search", []):
            ret = f"{r['retrieval']['p50_ms']:.1f} / {r['retrieval']['p95_ms']:.1f}" if "retrieval" in r else "-"
            lines.append(
                f"| {run['store']} | {run['turns']:,} | {load['path']} | {load['turns_per_s']:,.0f} | {hnsw}"
                f" | {r['engine']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['mean_ms']:.1f} | {ret}"
                f" | {r['first_query_ms']:,.0f} | {r['first_query_rss_mb']:,.0f} | {r['peak_rss_mb']:,.0f} |"
            )
    lines += [
        "",
        "| turns | HNSW | ef_search | dev recall@10 | dev recall@100 | test recall@10 | test recall@100"
        " | test min recall@10 | test p50/p95 ms k=10 | test p50/p95 ms k=100 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        rec = run.get("recall")
        if not rec:
            continue
        for ef, row in rec["sweep"].items():
            dev, test = row["dev"], row["test"]
            mark = " (chosen)" if str(ef) == str(rec["chosen_ef"]) else ""
            lines.append(
                f"| {run['turns']:,} | {rec['hnsw']} | {ef}{mark} | {dev['recall@10']:.3f} | {dev['recall@100']:.3f}"
                f" | {test['recall@10']:.3f} | {test['recall@100']:.3f} | {test['min_recall@10']:.2f}"
                f" | {test['p50_ms@10']:.1f} / {test['p95_ms@10']:.1f}"
                f" | {test['p50_ms@100']:.1f} / {test['p95_ms@100']:.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
