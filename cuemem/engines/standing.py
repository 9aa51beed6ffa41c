"""The standing facts a message bears on (issue 34 item 5; docs/design.md design 3, the preference memory's typed
records), shared by every engine through `refine` (`profile` keeps its own records of them and fuses those
instead): for a message rather than a question, the turns whose speaker states a value, a goal, a state or a cause
of their own (`index/standing.py`) are ranked by similarity to the message, and that ranking is fused with the
engine's. The pool is small (a few dozen such turns in hundreds), which is what brings a statement back to a
message that shares few words with it.

Which turns state one is read from their words as said when a message first needs it, and kept for the namespace's
epoch: adds grow it by the new items, a delete drops it (it holds item ids and types, no text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..index.fusion import reciprocal_rank_fusion
from ..index.standing import bears_on_self, shipped_standing
from ..store.base import Item
from .base import EngineContext
from .current import Said

Ranked = list[tuple[int, float]]
CHUNK = 2000  # items read at a time while the pool is first built


@dataclass
class StandingPool:
    """The items of a space that state a standing fact (item id -> type), read up to item id `upto`."""

    upto: int = 0
    kinds: dict[int, str] = field(default_factory=dict)


def _as_stored(item: Item) -> str:
    return item.text


def standing_pool(ctx: EngineContext, space: str, said: Said | None = None) -> dict[int, str]:
    """Item id -> standing type of the namespace's items of `space` whose words as said (`said`, else their text)
    state a standing fact of their speaker; cached for the namespace's epoch and grown by the items added since."""
    store, ns = ctx.store, ctx.ns
    name = f"{space}:standing"
    words = said or _as_stored
    cues = shipped_standing()
    with ctx.indexes.lock_for(ns), store.snapshot():
        version = (store.epoch(ns), store.last_seq(ns))
        older = ctx.indexes.latest_view(ns, name)
        if older is not None and isinstance(older[1], StandingPool) and older[0] == version:
            return older[1].kinds
        pool = StandingPool()
        if older is not None and isinstance(older[1], StandingPool) and older[0][0] == version[0]:
            pool = StandingPool(older[1].upto, dict(older[1].kinds))  # the same epoch: grown by the new items
        new = [i for i, _ in store.items_after(ns, space, pool.upto)]
        for start in range(0, len(new), CHUNK):
            for i, item in store.get_items(ns, new[start : start + CHUNK]).items():
                if item.turn_ids and (kind := cues.of_text(words(item))):
                    pool.kinds[i] = kind
        pool.upto = max(new, default=pool.upto)
        ctx.indexes.keep_view(ns, name, version, pool)
        return pool.kinds


def standing_first(
    ctx: EngineContext, space: str, query: str, query_vector: np.ndarray, ranked: Ranked, said: Said | None = None
) -> tuple[Ranked, dict[str, Any] | None]:
    """For a message (not a question: `bears_on_self`), the standing-fact turns whose vectors are at least
    `standing_floor` similar to it, best `standing_depth` first, fused with `ranked` by reciprocal rank at
    `standing_weight`. Returns the ranking and what was fused (None: the ranking is kept)."""
    settings = ctx.settings
    if settings.standing_weight <= 0 or not ranked or not bears_on_self(query):
        return ranked, None
    kinds = standing_pool(ctx, space, said)
    vectors = ctx.store.item_vectors(ctx.ns, ctx.embedder.name, list(kinds)) if kinds else {}
    if not vectors:
        return ranked, None
    ids = list(vectors)
    matrix = np.stack([vectors[i] for i in ids]).astype(np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    asked = np.asarray(query_vector, dtype=np.float32)
    similarity = matrix @ (asked / max(float(np.linalg.norm(asked)), 1e-12))
    order = [j for j in np.argsort(-similarity, kind="stable")[: settings.standing_depth]]
    found = [ids[j] for j in order if similarity[j] >= settings.standing_floor]
    if not found:
        return ranked, None
    fused = reciprocal_rank_fusion(
        [[i for i, _ in ranked], found], k=settings.rrf_k, weights=[1.0, settings.standing_weight]
    )
    kinds_found: dict[str, int] = {}
    for i in found:
        kinds_found[kinds[i]] = kinds_found.get(kinds[i], 0) + 1
    return [(int(i), s) for i, s in fused], {"facts": len(found), "types": dict(sorted(kinds_found.items()))}


__all__ = ["StandingPool", "standing_first", "standing_pool"]
