"""The production-like benchmark's data (benchmarks/production.py, issue 36 item 5): namespace sizes drawn from a
power law, the namespace picker (hot by size, cold uniform), and the bulk seed of one PostgreSQL database.

The seed writes what the hybrid engine writes (issue 26's bulk path, benchmarks/scale_phases.py `phase_bulk`, per
namespace): the turns (`append_turns`), one item per turn with its structure fields (`put_items`), its vector
(`put_vectors`) and the engines' watermarks, in transactions of about `batch` turns, from several processes. A
copy of a LoCoMo turn keeps its original's structure fields and token counts (computed once by the engine's own
functions); its vector is the hashing embedder's of its own document (checked against the server's), or with
MiniLM its original's real vector plus noise (cosine ~0.9, as issue 26's `minilm-perturbed`).
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SEED = 36
REPLACE = 0.2  # per-word replacement probability in copies of LoCoMo's turns (as benchmarks/scale_data.py)
SEED_SESSION = "seed"
ENGINES = ("hybrid", "bm25", "dense")  # hybrid's items and vectors are bm25's and dense's too: all marked caught up


# --------------------------------------------------------------------------- sizes and picking (pure)
def power_law_sizes(total: int, count: int, exponent: float = 1.0) -> list[int]:
    """`count` namespace sizes, largest first, proportional to 1 / rank**exponent (Zipf), each at least 1 and
    summing to `total` (rounded down, the remainder to the largest fractional parts)."""
    if count < 1 or total < count:
        raise ValueError(f"need at least one turn per namespace: {total} turns over {count} namespaces")
    weights = [1.0 / rank**exponent for rank in range(1, count + 1)]
    scale = total / sum(weights)
    raw = [w * scale for w in weights]
    sizes = [max(1, int(x)) for x in raw]
    left = total - sum(sizes)
    if left > 0:
        by_fraction = sorted(range(count), key=lambda i: (int(raw[i]) - raw[i], i))  # largest fraction first
        for i in itertools.islice(itertools.cycle(by_fraction), left):
            sizes[i] += 1
    while left < 0:  # the floor of 1 took more than the remainder: take it back from the largest
        for i in range(count):
            if left == 0 or sizes[i] <= 1:
                break
            sizes[i] -= 1
            left += 1
    return sizes


def size_summary(sizes: Sequence[int]) -> dict[str, Any]:
    """The distribution printed and recorded: max, p50, p90, p99, min, how many hold 50k+ and under 100 turns."""
    ordered = sorted(sizes)
    n = len(ordered)

    def at(q: float) -> int:
        return ordered[min(n - 1, round(q * (n - 1)))]

    return {
        "namespaces": n,
        "turns": sum(ordered),
        "max": ordered[-1],
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "min": ordered[0],
        "count_ge_50k": sum(1 for s in ordered if s >= 50_000),
        "count_lt_100": sum(1 for s in ordered if s < 100),
        "top10_share": round(sum(ordered[-10:]) / max(1, sum(ordered)), 3),
    }


class NamespacePicker:
    """Which namespace a request goes to: with probability `hot_share` one drawn by size (a namespace holding 10%
    of the turns gets 10% of these), else one uniform over all (most of them small: the cold ones)."""

    def __init__(self, sizes: Sequence[int], hot_share: float) -> None:
        if not sizes or not 0.0 <= hot_share <= 1.0:
            raise ValueError("need namespaces and a hot share in [0, 1]")
        self.cumulative = list(itertools.accumulate(sizes))
        self.total = self.cumulative[-1]
        self.hot_share = hot_share

    def pick(self, rng: random.Random) -> tuple[int, str]:
        """(namespace index, "hot" or "cold")."""
        if rng.random() < self.hot_share:
            return bisect.bisect_right(self.cumulative, rng.random() * self.total), "hot"
        return rng.randrange(len(self.cumulative)), "cold"


def user_of(index: int) -> str:
    """The user id (the namespace, the API key's user) of namespace `index`: p00000 is the largest."""
    return f"p{index:05d}"


def owner(turn_id: str) -> str:
    """The user a turn id belongs to: ids are `<user>-<rest>`."""
    return turn_id.split("-", 1)[0]


# --------------------------------------------------------------------------- turns
class TurnMaker:
    """Turns of a namespace: LoCoMo's (or look-alikes) in order over the whole corpus, copies after the first pass
    with words replaced (deterministic per namespace), each keeping its original's speaker, date and fields."""

    def __init__(self) -> None:
        from perf import source_turns

        self.base = source_turns()[0]
        self.vocab = [w for t in self.base for w in t["text"].split()]

    def turns(self, index: int, offset: int, size: int) -> list[tuple[int, dict[str, Any]]]:
        """(original's index in the base, turn dict) for turns 0..size-1 of namespace `index`, whose first turn is
        the corpus's turn `offset`."""
        rng = random.Random(SEED * 1_000_003 + index)
        out = []
        user = user_of(index)
        for j in range(size):
            g = offset + j
            b = g % len(self.base)
            original = self.base[b]
            text = original["text"]
            if g >= len(self.base):
                text = " ".join(rng.choice(self.vocab) if rng.random() < REPLACE else w for w in text.split())
            turn = {
                "id": f"{user}-{j}",
                "text": text,
                "speaker": original["speaker"],
                "session_id": SEED_SESSION,
                "timestamp": original.get("timestamp"),
                "metadata": original.get("metadata") or {},
            }
            out.append((b, turn))
        return out

    def words(self, rng: random.Random, n: int = 3) -> str:
        return " ".join(rng.choice(self.vocab) for _ in range(n))


# --------------------------------------------------------------------------- the seed (one worker process)
def as_turn(t: dict[str, Any]) -> Any:
    from cuemem.types import Turn

    return Turn(t["id"], t["text"], t["speaker"], t["session_id"], t.get("timestamp"), t.get("metadata") or {})


def base_turns(maker: TurnMaker) -> list[Any]:
    """The originals (LoCoMo's turns or the look-alikes) as turns."""
    return [as_turn({**t, "id": f"base-{i}", "session_id": SEED_SESSION}) for i, t in enumerate(maker.base)]


def seed_worker(
    dsn: str, sizes: list[int], share: tuple[int, int], embedder: str, batch: int, cache: Path | None = None
) -> dict[str, Any]:
    """Seed the namespaces i with i % workers == worker (share = (worker, workers)); returns its counts. `cache`:
    the originals' real vectors (an embedder other than hashing), computed once by `seed`."""
    import numpy as np

    from cuemem import Memory
    from cuemem.engines.baselines import turn_document, turn_words
    from cuemem.engines.structure import hit_text, turn_fields, with_header_tokens
    from cuemem.store.base import NewItem, text_hash

    worker, workers = share
    maker = TurnMaker()
    offsets = [0, *itertools.accumulate(sizes)]
    start = time.perf_counter()
    written = 0
    with Memory(dsn, engine="hybrid", embedder=embedder) as memory:
        store = memory.store
        engines = [memory._engine(name) for name in ENGINES]
        for engine in engines:
            store.declare(engine.derived)
        progress = [memory._progress_key(engine) for engine in engines]
        template = memory.settings.turn_template

        base = base_turns(maker)
        metas = [turn_fields(t) for t in base]
        with_header_tokens(metas, memory.tokens.count_many)
        tokens = memory.tokens.count_many([hit_text(turn_words(t), m) for t, m in zip(base, metas, strict=True)])
        vectors = Vectors(memory.embedder, [turn_document(t, template) for t in base], cache)

        def prepared() -> Iterator[Chunk]:
            """The worker's namespaces in chunks of at most `batch` turns, with documents and vectors (no store)."""
            for i in range(worker, len(sizes), workers):
                made = maker.turns(i, offsets[i], sizes[i])
                for lo in range(0, sizes[i], batch):
                    part = made[lo : lo + batch]
                    turns = [as_turn(t) for _, t in part]
                    bases = [b for b, _ in part]
                    docs = [turn_document(t, template) for t in turns]
                    where = [offsets[i] + lo + j for j in range(len(part))]
                    yield Chunk(i, turns, bases, docs, vectors.of(docs, where, bases))

        store.hnsw_threshold = 2**62  # HNSW indexes are built after the bulk load (seed), not row by row

        def write(group: list[Chunk]) -> None:
            """One transaction (one commit) for the group's chunks, holding their namespaces' writer locks (each
            worker seeds namespaces of its own, so workers never wait for each other)."""
            nss = {c.index: store.namespace_id(memory.namespace(user_of(c.index)), create=True) for c in group}
            with store.transaction(nss[group[0].index]):
                for c in group:
                    ns = nss[c.index]
                    added = store.append_turns(ns, c.turns).added
                    assert len(added) == len(c.turns), f"namespace {c.index}: {len(added)} of {len(c.turns)} new"
                    store.put_items(
                        ns,
                        "turn",
                        [
                            NewItem(t.id, turn_words(t), metas[b], [t.seq or 0], tokens[b])
                            for t, b in zip(added, c.bases, strict=True)
                        ],
                    )
                    ids = store.item_ids(ns, "turn", [t.id for t in added])
                    rows = [
                        (ids[t.id], text_hash(d), np.asarray(v, dtype=np.float32))
                        for t, d, v in zip(added, c.docs, c.vectors, strict=True)
                    ]
                    store.put_vectors(ns, "turn", memory.embedder.name, rows)
                    last = max(t.seq or 0 for t in added)
                    for key in progress:
                        store.set_watermark(ns, key, last)

        group: list[Chunk] = []
        for chunk in prepared():
            group.append(chunk)
            if sum(len(c.turns) for c in group) >= batch:
                write(group)
                written += sum(len(c.turns) for c in group)
                group = []
        if group:
            write(group)
            written += sum(len(c.turns) for c in group)
    return {"worker": worker, "turns": written, "seconds": time.perf_counter() - start}


@dataclass
class Chunk:
    """Turns of one namespace written together, with their originals' indexes, documents and vectors."""

    index: int
    turns: list[Any]
    bases: list[int]
    docs: list[str]
    vectors: Any


class Vectors:
    """The seeded turns' vectors. Hashing: each document's own (the embedder's, with each feature's bucket
    remembered; checked equal on the base documents). MiniLM (any other embedder): the original's real vector,
    copies plus Gaussian noise seeded by their corpus position, renormalised (cosine ~0.9 to the original)."""

    def __init__(self, embedder: Any, base_docs: list[str], cache: Path | None = None) -> None:
        import numpy as np

        from cuemem.embed.hashing import HashingEmbedder

        self.hashing = None
        self.base: Any = None
        if isinstance(embedder, HashingEmbedder):
            from scale_phases import CachedHashing

            self.hashing = CachedHashing(embedder.dim)
            check = base_docs[:200]
            assert np.array_equal(self.hashing.embed(check), embedder.embed(check)), "cached hashing differs"
        else:
            from scale_data import noise_sigma

            self.base = np.load(cache) if cache is not None else embed_all(embedder, base_docs)
            self.sigma = noise_sigma(0.9, self.base.shape[1])

    def of(self, docs: list[str], positions: list[int], bases: list[int]) -> Any:
        import numpy as np

        if self.hashing is not None:
            return self.hashing.embed(docs)
        out = self.base[bases].copy()
        for row, g in enumerate(positions):
            if g >= len(self.base):
                out[row] += self.sigma * np.random.default_rng((SEED, g)).standard_normal(out.shape[1])
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def embed_all(embedder: Any, docs: list[str]) -> Any:
    import numpy as np

    return np.concatenate([embedder.embed(docs[i : i + 512]) for i in range(0, len(docs), 512)]).astype(np.float32)


# --------------------------------------------------------------------------- the seed (all of it) and the keys
def seed(dsn: str, sizes: list[int], embedder: str, workers: int, batch: int) -> dict[str, Any]:
    """Seed every namespace from `workers` processes (each a share of the namespaces, the largest spread over
    them); then ANALYZE. Returns the time taken and the rate."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import numpy as np
    import psycopg

    from cuemem import Memory
    from cuemem.engines.baselines import turn_document

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = None
        # the schema, once, before the workers race for it; a model's vectors of the originals, once for all
        with Memory(dsn, engine="hybrid", embedder=embedder) as memory:
            if embedder != "hashing":
                cache = Path(tmp) / "originals.npy"
                template = memory.settings.turn_template
                docs = [turn_document(t, template) for t in base_turns(TurnMaker())]
                np.save(cache, embed_all(memory.embedder, docs))
        workers = max(1, min(workers, len(sizes)))
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            jobs = [pool.submit(seed_worker, dsn, sizes, (w, workers), embedder, batch, cache) for w in range(workers)]
            done = [job.result() for job in jobs]
    loaded = time.perf_counter() - start
    with Memory(dsn, engine="hybrid", embedder=embedder) as memory:  # each large namespace's HNSW index, once
        store = memory.store
        for namespace, count in store.namespaces():
            if count >= store.hnsw_threshold:
                store.build_vector_index(
                    store.namespace_id(namespace), "turn", memory.embedder.name, memory.embedder.dim
                )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    seconds = time.perf_counter() - start
    turns = sum(d["turns"] for d in done)
    assert turns == sum(sizes), f"seeded {turns} of {sum(sizes)} turns"
    return {
        "turns": turns,
        "workers": workers,
        "batch": batch,
        "load_s": round(loaded, 1),
        "seconds": round(seconds, 1),
        "turns_per_s": round(turns / loaded, 1),
    }


def make_keys(root: Path, count: int) -> dict[str, str]:
    """One API key per namespace (a key is bound to one user: an admin key reads no memory) and one for the
    warm-up, in root/production.keys; their tokens (shown once) in root/tokens.json for the next --reuse."""
    from cuemem.server.keys import KeyRing

    keys = root / "production.keys"
    keys.unlink(missing_ok=True)
    ring = KeyRing(keys)
    try:
        tokens = {user_of(i): ring.create(user_id=user_of(i))[1] for i in range(count)}
        tokens["warmup"] = ring.create(user_id="warmup")[1]
    finally:
        ring.close()
    (root / "tokens.json").write_text(json.dumps(tokens), encoding="utf-8")
    return tokens
