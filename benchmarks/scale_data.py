"""The scale benchmark's data (benchmarks/scale.py): settings shared with its phase subprocesses, turns, queries
split dev/test, and the embedders that stand in for a real one at 1M turns."""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf import source_turns

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


def memory_at(target: str, n: int = 0) -> Any:
    from cuemem import Memory

    return Memory(target, engine="hybrid", embedder=make_embedder(n))


def mark_shared(memory: Any) -> None:
    """bm25 and dense index exactly the hybrid engine's items and vectors: mark them caught up."""
    store = memory.store
    ns = store.namespace_id(memory.namespace(USER))
    last = store.last_seq(ns)
    for name in ("bm25", "dense"):
        engine = memory._engine(name)
        store.declare(engine.derived)
        with store.transaction():
            store.set_watermark(ns, memory._progress_key(engine), last)


def latencies(ms: list[float]) -> dict:
    return {
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "mean_ms": statistics.mean(ms),
        "queries": len(ms),
    }


# --------------------------------------------------------------------------- phases (each in a subprocess)
