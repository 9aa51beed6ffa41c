"""The standing facts a message bears on (issue 34 item 5; docs/design.md design 3, the preference memory's typed
records), shared by every engine through `refine` (`profile` keeps its own records of them and fuses those
instead): for a message rather than a question, the turns whose speaker states a value, a goal, a state or a cause
of their own are ranked by similarity to the message, and that ranking is fused with the engine's. The pool is
small (a few dozen such turns in hundreds), which is what brings a statement back to a message that shares few
words with it.

Which turns state one is read at ingest (`structure.turn_fields`, the cues of `index/standing.py`) and kept in the
item's fields, so the namespace's TurnTable holds it: nothing is read again at query time, and a deleted turn's
type goes with its item. A store indexed before the field existed finds none until `cuemem reindex`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..embed.base import normalize
from ..index.fusion import reciprocal_rank_fusion
from ..index.standing import bears_on_self
from .base import EngineContext
from .structure import TurnTable

Ranked = list[tuple[int, float]]


def standing_first(
    ctx: EngineContext, table: TurnTable, query: str, query_vector: np.ndarray, ranked: Ranked
) -> tuple[Ranked, dict[str, Any] | None]:
    """For a message (not a question: `bears_on_self`), the standing-fact turns of `table` whose vectors are at least
    `standing_floor` similar to it, best `standing_depth` first, fused with `ranked` by reciprocal rank at
    `standing_weight`. Returns the ranking and what was fused (None: the ranking is kept)."""
    settings = ctx.settings
    if settings.standing_weight <= 0 or not ranked or not table.standing or not bears_on_self(query):
        return ranked, None
    kinds = {table.ids[pos]: kind for pos, kind in table.standing.items()}
    ids, matrix = _standing_vectors(ctx, list(kinds))
    if not ids:
        return ranked, None
    asked = np.asarray(query_vector, dtype=np.float32)
    similarity = matrix @ (asked / max(float(np.linalg.norm(asked)), 1e-12))
    order = np.argsort(-similarity, kind="stable")[: settings.standing_depth]
    found = [ids[j] for j in order if similarity[j] >= settings.standing_floor]
    if not found:
        return ranked, None
    fused = reciprocal_rank_fusion(
        [[i for i, _ in ranked], found], k=settings.rrf_k, weights=[1.0, settings.standing_weight]
    )
    types: dict[str, int] = {}
    for i in found:
        types[kinds[i]] = types.get(kinds[i], 0) + 1
    return [(int(i), s) for i, s in fused], {"facts": len(found), "types": dict(sorted(types.items()))}


def _standing_vectors(ctx: EngineContext, items: list[int]) -> tuple[list[int], np.ndarray]:
    """The standing-fact items that have a vector, and their vectors normalised: kept in the namespace's
    in-memory state until its next write (a delete drops that state), not read again for every message; the view
    is built as `profile`'s current records are (under the cache's lock, in one snapshot of the store)."""
    store, ns = ctx.store, ctx.ns
    name = f"standing-vectors:{ctx.embedder.name}"
    with ctx.indexes.lock_for(ns), store.snapshot():
        version = (store.epoch(ns), store.last_seq(ns))
        kept = ctx.indexes.view(ns, name, version)
        if isinstance(kept, tuple):
            return kept
        vectors = store.item_vectors(ns, ctx.embedder.name, items)
        ids = [i for i in items if i in vectors]
        matrix = normalize(np.stack([vectors[i] for i in ids])) if ids else np.zeros((0, 1), dtype=np.float32)
        ctx.indexes.keep_view(ns, name, version, (ids, matrix))
        return ids, matrix


__all__ = ["standing_first"]
