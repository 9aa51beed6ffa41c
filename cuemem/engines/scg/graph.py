"""The associative graph over concepts and spreading activation (SCG-MEM, design 2, sections 3.3 and 3.4).

Vertices are the schema's concepts; the edge between u and v weighs w_uv = Σ_t IDF(u)·IDF(v) over the turns t
where both occur, IDF(k) = log(N / df(k)) over the N turns. IDF does not depend on t, so w_uv = c_uv·IDF(u)·IDF(v)
with c_uv the number of turns holding both: the store keeps the turn-concept links (one label per link, written
as each turn is ingested), c = AᵀA of that incidence matrix, and the weights are computed exactly at query time
for the current N, never stale when N grows.

Activation spreads from seed concepts to their neighbours with P(v|u) = softmax_v(w_uv / T) over u's neighbours,
hop by hop; each hop passes on the mass that arrived in the previous one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: a process that builds no graph never loads scipy
    from scipy import sparse


@dataclass
class AssociativeGraph:
    """Concepts, turns and their links, with co-occurrence counts and IDF for the current number of turns."""

    concepts: list[str]  # concept keys, in index order
    index: dict[str, int]
    turns: list[int]  # turn item ids, in row order
    incidence: sparse.csr_matrix  # turns x concepts, 1 where the turn holds the concept
    cooccurrence: sparse.csr_matrix  # concepts x concepts, c_uv (zero diagonal)
    df: np.ndarray
    idf: np.ndarray

    @classmethod
    def build(cls, links: Sequence[tuple[int, str]]) -> AssociativeGraph:
        """From (turn item, concept key) links."""
        from scipy import sparse

        index: dict[str, int] = {}
        rows: dict[int, int] = {}
        r, c = [], []
        for item, key in links:
            r.append(rows.setdefault(item, len(rows)))
            c.append(index.setdefault(key, len(index)))
        n_turns, n_concepts = len(rows), len(index)
        incidence = sparse.csr_matrix(
            (np.ones(len(r), dtype=np.float32), (np.array(r, dtype=np.int64), np.array(c, dtype=np.int64))),
            shape=(n_turns, n_concepts),
        )
        incidence.data[:] = 1.0  # a link stated twice is still one occurrence
        df = np.asarray(incidence.sum(axis=0)).ravel()
        idf = np.log(max(n_turns, 1) / np.maximum(df, 1)).astype(np.float64)
        cooc = (incidence.T @ incidence).tocsr()
        cooc.setdiag(0)
        cooc.eliminate_zeros()
        return cls(list(index), index, list(rows), incidence, cooc, df, idf)

    def weights(self) -> sparse.csr_matrix:
        """w_uv = c_uv · IDF(u) · IDF(v) (section 3.3)."""
        from scipy import sparse

        scale = sparse.diags(self.idf)
        return (scale @ self.cooccurrence @ scale).tocsr()

    def weight(self, u: str, v: str) -> float:
        i, j = self.index.get(u), self.index.get(v)
        if i is None or j is None:
            return 0.0
        return float(self.cooccurrence[i, j] * self.idf[i] * self.idf[j])

    def transition(self, temperature: float) -> sparse.csr_matrix:
        """P(v|u) = softmax over u's neighbours of w_uv / T (rows with no neighbour stay empty)."""
        w = self.weights()
        w.eliminate_zeros()  # an edge between two concepts present in every turn weighs 0 (IDF 0): no edge
        out = w.astype(np.float64).tocsr()
        out.sort_indices()
        counts = np.diff(out.indptr)
        if out.nnz == 0:
            return out
        starts = out.indptr[:-1][counts > 0]  # rows with neighbours partition the data array, in order
        z = out.data / max(float(temperature), 1e-6)
        z = np.exp(z - np.repeat(np.maximum.reduceat(z, starts), counts[counts > 0]))
        out.data = z / np.repeat(np.add.reduceat(z, starts), counts[counts > 0])
        return out


def spread_activation(
    graph: AssociativeGraph,
    transition: sparse.csr_matrix,
    seeds: dict[str, float],
    hops: int,
    *,
    sample: int = 0,
    seed: int = 0,
) -> np.ndarray:
    """Activation of every concept after `hops` hops from `seeds` (concept -> initial activation), section 3.4.

    Deterministic by default: each hop passes a concept's newly arrived mass to all its neighbours in proportion to
    P(v|u). With `sample` > 0, each active concept instead passes its mass to `sample` neighbours drawn from P(v|u)
    (random generator seeded by `seed`, so a run is repeatable)."""
    activation = np.zeros(len(graph.concepts), dtype=np.float64)
    for key, value in seeds.items():
        i = graph.index.get(key)
        if i is not None:
            activation[i] += value
    frontier = activation.copy()
    rng = np.random.default_rng(seed)
    for _ in range(max(0, hops)):
        if sample > 0:
            arrived = np.zeros_like(activation)
            for u in np.flatnonzero(frontier):
                start, end = transition.indptr[u], transition.indptr[u + 1]
                if start == end:
                    continue
                picks = rng.choice(transition.indices[start:end], size=sample, p=transition.data[start:end])
                np.add.at(arrived, picks, frontier[u] / sample)
        else:
            arrived = np.asarray(transition.T @ frontier).ravel()
        activation += arrived
        frontier = arrived
    return activation


def top_concepts(activation: np.ndarray, k: int) -> list[int]:
    """The k most activated concepts (ties: lower index, i.e. older, first)."""
    active = np.flatnonzero(activation > 0)
    order = sorted(active.tolist(), key=lambda i: (-float(activation[i]), i))
    return order[:k]


__all__ = ["AssociativeGraph", "spread_activation", "top_concepts"]
