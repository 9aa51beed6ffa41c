"""The second hop (SCG-MEM's spreading activation over goals; docs/design.md design 2, issue 34 item 3), shared
by the engines that link their turns to goals at ingest (scg, stitch).

A multi-hop question names a *pivot* ("the day whose lodging is 170 euros") and asks an attribute of the goal the
pivot belongs to ("the hour of its walk"); the answer turn shares no word with the question, only the goal. Each
turn is linked at ingest to its goal: the anchors of the goal in focus (index/focus.py), its own when it names one,
else those it inherits ("Make it 170 now." continues the day in focus). Goal words are concepts of a second
bipartite layer of the associative graph (turns x goal words, weighted by IDF as the paper weighs concepts).

At query time activation starts on the first ranking's top turns (the pivot candidates, weighted by rank) and on
the question's own goal words; it spreads turn -> goal words -> turns, each turn receiving the IDF-weighted cosine
of its goal with the pivot's. Numbers and names in a goal identify it ("day 1" is not "day 3", "Paula's book club"
is not "Elias's"; a name is a word of one the conversation says at least twice, `TurnTable.name_words`): a turn
whose goal holds numbers or names none of which the pivot's holds receives nothing from that pivot. The goal's
turns are then ordered by their similarity to the question (the asked attribute) times their activation, and this
hop ranking is fused with the first by reciprocal rank. Each hop hit keeps its path: the pivot turn, the shared
goal words, the activation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..index.focus import Focus, anchor_words
from ..index.fusion import reciprocal_rank_fusion
from ..index.names import normalise_name
from ..index.text import STOPWORDS
from ..store.vectors import top_order
from ..types import Hit
from .base import EngineContext
from .refine import turn_table

if TYPE_CHECKING:  # imported where used: a process that builds no graph never loads scipy
    from scipy import sparse


def goal_words(anchors: Sequence[str]) -> list[str]:
    """The words of a goal's anchors that identify it: lower-cased, ordinals as numbers, no stop words."""
    words = {w for a in anchors for w in anchor_words(a)}
    return sorted(w for w in words if w not in STOPWORDS or w.isdigit())


MOST_REACHED = 40  # the most activated turns scored, in hop widths: each needs its vector read
MAX_SAID = 2_000  # values remembered with the goal they were said for (the oldest forgotten first)


@dataclass
class Goals:
    """The goal each turn belongs to, carried over the log: the goal in focus (index/focus.py), and the goal each
    value was last said for, so that a turn naming no goal but naming a value as the one it replaces ("Forget 150,
    it's 170 now.") continues the goal that value was said for, across sessions too."""

    focus: Focus = field(default_factory=Focus)
    said: dict[str, list[Any]] = field(default_factory=dict)  # value -> [turn count when said, goal anchors]
    count: int = 0

    def step(
        self,
        session: str | None,
        anchors: Sequence[str],
        text: str,
        values: Sequence[str],
        *,
        recur: int,
        whole: bool,
        quotes: bool,
        sessions: bool = False,
        replaced: Sequence[str] | None = None,
    ) -> list[str]:
        """Advance over one turn; returns the anchors of its goal (lower-cased). With `replaced`, only the values
        the turn names as the old ones are quoted ("scrap 2:30 pm; we go with 11:45 am": the goal 2:30 pm was
        said for, not the goal that last said 11:45 am)."""
        named = any(self.focus.is_goal(a, recur, whole) for a in anchors)
        keys = list(dict.fromkeys(v.lower().strip() for v in [*values, *anchors]))
        self.focus.step(session, list(anchors), text, recur=recur, whole=whole, quotes=False, sessions=sessions)
        asked = keys if replaced is None else list(dict.fromkeys(v.lower().strip() for v in replaced))
        quoted = [self.said[k] for k in asked if k in self.said] if quotes and not named else []
        if quoted:  # the value said last is the one being replaced or referred to
            self.focus.anchors = list(max(quoted, key=lambda q: q[0])[1])
        goal = list(dict.fromkeys(a.lower() for a in self.focus.anchors))
        self.count += 1
        for key in keys:
            self.said.pop(key, None)
            self.said[key] = [self.count, goal]
        while len(self.said) > MAX_SAID:
            self.said.pop(next(iter(self.said)))
        return goal

    def to_json(self) -> dict[str, Any]:
        return {"focus": self.focus.to_json(), "said": self.said, "count": self.count}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Goals:
        if not data:
            return cls()
        return cls(Focus.from_json(data.get("focus")), dict(data.get("said", {})), int(data.get("count", 0)))


@dataclass
class GoalGraph:
    """Turns x goal words (1 where the turn's goal holds the word), IDF over the turns that have a goal."""

    turns: list[int]  # turn item ids, in row order
    row: dict[int, int]
    words: list[str]
    index: dict[str, int]
    incidence: sparse.csr_matrix  # turns x words, IDF-weighted, rows L2-normalised
    numbers: sparse.csr_matrix  # turns x words, 1 where the word is a number
    has_number: np.ndarray  # per turn: its goal holds a number
    idf: np.ndarray  # per word
    anchors: dict[int, list[str]] = field(default_factory=dict)  # turn item -> its goal's anchors (for the path)
    present: sparse.csr_matrix | None = None  # turns x words, 1 where the turn's goal holds the word
    _named: tuple[frozenset[str], GoalGraph] | None = field(default=None, repr=False)

    def with_names(self, names: frozenset[str]) -> GoalGraph:
        """The graph whose identifying words are its numbers and the words of `names` (the conversation's names:
        "Paula's book club night" is not "Elias's"), kept for the same names."""
        if not names or self.present is None:
            return self
        if self._named is not None and self._named[0] is names:
            return self._named[1]
        from scipy import sparse

        mask = np.array([w.isdigit() or w in names for w in self.words], dtype=np.float64)
        numbers = (self.present @ sparse.diags(mask)).tocsr()
        numbers.eliminate_zeros()
        named = replace(self, numbers=numbers, has_number=np.diff(numbers.indptr) > 0, _named=None)
        self._named = (names, named)
        return named

    @classmethod
    def build(cls, links: Sequence[tuple[int, str]]) -> GoalGraph:
        """From (turn item, goal anchor) links."""
        from scipy import sparse

        anchors: dict[int, list[str]] = {}
        for item, anchor in links:
            anchors.setdefault(item, []).append(anchor)
        turns = list(anchors)
        row = {t: i for i, t in enumerate(turns)}
        index: dict[str, int] = {}
        r, c = [], []
        for i, t in enumerate(turns):
            for w in goal_words(anchors[t]):
                r.append(i)
                c.append(index.setdefault(w, len(index)))
        shape = (len(turns), len(index))
        ones = sparse.csr_matrix((np.ones(len(r)), (np.array(r, dtype=np.int64), np.array(c, dtype=np.int64))), shape)
        df = np.asarray(ones.sum(axis=0)).ravel()
        idf = np.log((1.0 + len(turns)) / (1.0 + df)) + 1.0
        weighted = (ones @ sparse.diags(idf)).tocsr()
        norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
        weighted = (sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ weighted).tocsr()
        words = list(index)
        digit = np.array([w.isdigit() for w in words], dtype=np.float64)
        numbers = (ones @ sparse.diags(digit)).tocsr()
        numbers.eliminate_zeros()
        has_number = np.diff(numbers.indptr) > 0
        return cls(turns, row, words, index, weighted, numbers, has_number, idf, anchors, ones.tocsr())

    def vector(self, words: Sequence[str]) -> sparse.csr_matrix:
        """A goal given by its words, as a row like the incidence's (IDF-weighted, normalised; unknown words
        dropped)."""
        from scipy import sparse

        cols = sorted({self.index[w] for w in words if w in self.index})
        weights = self.idf[cols] / max(float(np.linalg.norm(self.idf[cols])), 1e-12) if cols else np.zeros(0)
        return sparse.csr_matrix((weights, ([0] * len(cols), cols)), shape=(1, len(self.words)))

    def spread(self, source: sparse.csr_matrix, numbers: set[int]) -> np.ndarray:
        """Activation each turn receives from one source goal: the cosine of the goals, 0 where the turn's goal
        holds numbers and none of the source's."""
        sim = np.asarray(self.incidence @ source.T.toarray()).ravel()
        if numbers:
            shared = np.asarray(self.numbers[:, sorted(numbers)].sum(axis=1)).ravel() > 0
            sim = np.where(self.has_number & ~shared, 0.0, sim)
        return sim


@dataclass
class Path:
    """How a turn was reached: from which pivot turn (or the question), through which goal words."""

    pivot: int | None  # turn item id, None for the question itself
    goal: list[str]
    activation: float

    def describe(self, turn_ids: dict[int, str]) -> dict[str, Any]:
        pivot = "question" if self.pivot is None else turn_ids.get(self.pivot, str(self.pivot))
        return {"pivot": pivot, "goal": self.goal, "activation": round(self.activation, 4)}


def second_hop(
    graph: GoalGraph,
    pivots: dict[int, float],
    question_goal: Sequence[str],
    *,
    question_weight: float,
) -> tuple[list[tuple[int, float]], Mapping[int, Path]]:
    """Spread activation from the pivot turns (item -> initial activation) and the question's own goal words
    (activation `question_weight`) to the turns of the same goal, each source's activation shared among the turns
    it reaches in proportion to their goal's cosine with its own; every reached turn with its activation and path
    (the source that gave it the most)."""
    n = len(graph.turns)
    if n == 0:
        return [], {}
    total = np.zeros(n)
    best = np.zeros(n)
    source = np.full(n, -1, dtype=np.int64)
    sources: list[tuple[int | None, list[str]]] = []
    starts: list[tuple[int | None, float, sparse.csr_matrix, set[int], list[str]]] = []
    for item, weight in pivots.items():
        r = graph.row.get(item)
        if r is None or weight <= 0:
            continue
        nums = set(graph.numbers[r].indices.tolist())
        starts.append((item, weight, graph.incidence[r], nums, goal_words(graph.anchors[item])))
    if question_weight > 0 and question_goal:
        vec = graph.vector(question_goal)
        if vec.nnz:
            nums = {c for c in vec.indices.tolist() if graph.numbers[:, c].nnz}
            starts.append((None, question_weight, vec, nums, [w for w in question_goal if w in graph.index]))
    for start, weight, vec, nums, words in starts:
        sim = graph.spread(vec, nums)
        received = weight * sim / max(float(sim.sum()), 1e-12)  # a source's mass is shared among the turns it reaches
        total += received
        better = received > best
        best = np.where(better, received, best)
        source = np.where(better, len(sources), source)
        sources.append((start, words))
    order = np.flatnonzero(total > 0)
    ranked = list(zip(np.asarray(graph.turns, dtype=np.int64)[order].tolist(), total[order].tolist(), strict=True))
    return ranked, ReachedPaths(graph, sources, source, total)


class ReachedPaths(Mapping[int, Path]):
    """Each reached turn's path, made when it is asked for: a hop reaches thousands of turns at 10,000 and keeps
    its width of them, so reading every reached turn's goal words cost most of the hop's time."""

    def __init__(
        self, graph: GoalGraph, sources: list[tuple[int | None, list[str]]], source: np.ndarray, total: np.ndarray
    ) -> None:
        self._graph, self._sources, self._source, self._total = graph, sources, source, total

    def __getitem__(self, item: int) -> Path:
        row = self._graph.row.get(item)
        if row is None or not self._total[row] > 0:
            raise KeyError(item)
        pivot, words = self._sources[int(self._source[row])]
        mine = set(goal_words(self._graph.anchors[item]))
        return Path(pivot, [w for w in words if w in mine], float(self._total[row]))

    def __iter__(self) -> Iterator[int]:
        return iter(np.asarray(self._graph.turns, dtype=np.int64)[self._total > 0].tolist())

    def __len__(self) -> int:
        return int(np.count_nonzero(self._total > 0))


@dataclass(frozen=True)
class HopSettings:
    """An engine's constants for the hop: its config's `hop_*` fields (scg's state.py says what each does; chosen
    on dev: docs/benchmarks/scg.md)."""

    weight: float
    pivots: int
    literal: float
    literal_depth: int
    literal_max: int
    question: float
    width: int
    attribute: float
    pair: int

    @classmethod
    def of(cls, config: Any) -> HopSettings:
        """The `hop_*` fields of an engine's config."""
        return cls(**{f.name: getattr(config, f"hop_{f.name}") for f in fields(cls)})


def stating(
    ctx: EngineContext,
    space: str,
    phrases: Sequence[str],
    hop: HopSettings,
    participants: frozenset[str] = frozenset(),
) -> dict[int, float]:
    """Turns whose words hold one of the phrases as written (the question's values and names: its pivot), each
    phrase's weight 1 shared among the turns stating it; a phrase stated by more than `literal_max` turns names
    no pivot, nor does a participant's name (`participants`, normalised: people seldom say their own name, so
    how often a name is said does not tell a participant from a pivot). A turn is read as indexed (a stitch step
    with the turns it continues: read as said, more names are stated by a few turns and start a hop, which cost
    the README demo its Day 2 dinner; docs/benchmarks/came.md)."""
    out: dict[int, float] = {}
    for phrase in dict.fromkeys(p.lower().strip() for p in phrases):
        words = phrase.split()
        if not words or normalise_name(phrase) in participants:
            continue
        found = ctx.bm25(space, phrase, hop.literal_depth)
        items = ctx.store.get_items(ctx.ns, [i for i, _ in found])
        pattern = re.compile(r"(?<!\w)" + r"\W+".join(re.escape(w) for w in words) + r"(?!\w)")
        hits = [i for i, _ in found if i in items and pattern.search(items[i].text.lower())]
        if len(hits) > hop.literal_max:  # said everywhere (a participant's name): no pivot
            continue
        for i in hits:
            out[i] = out.get(i, 0.0) + 1.0 / len(hits)
    return out


def hop_ranking(
    ctx: EngineContext,
    space: str,
    goals: GoalGraph,
    first: list[tuple[int, float]],
    anchors: Sequence[str],
    values: Sequence[str],
    query_vector: np.ndarray,
    hop: HopSettings,
    cosines: Callable[[list[int]], dict[int, float]] | None = None,
) -> tuple[list[tuple[int, float]], dict[int, Path]]:
    """The second hop over `space`: the goal's turns reached from the pivots (the first ranking's top turns, and
    the turns that state a value or name the question states) and from the question's own goal (`anchors`),
    ordered by activation x similarity to the question (the asked attribute), fused by reciprocal rank with the
    first ranking, weighted `weight` x the share of the activation the hop ranking holds. `cosines` gives items'
    cosines with the question where the engine has them already (equal to the store's up to float32 rounding);
    the others are read from the store."""
    if hop.weight <= 0 or not first:
        return first, {}
    participants = frozenset(normalise_name(s) for s in turn_table(ctx, space).speakers if s)
    said = list(dict.fromkeys(v.lower().strip() for v in values))
    named = [a for a in dict.fromkeys(a.lower().strip() for a in anchors) if a not in said]
    stated = stating(ctx, space, said, hop, participants)  # the values: the pivots their mates follow
    literal = dict(stated)
    for item, weight in stating(ctx, space, named, hop, participants).items():
        literal[item] = literal.get(item, 0.0) + weight
    if not literal:  # no value or name of the question is stated by a few turns only: no pivot to hop from
        return first, {}
    pivots: dict[int, float] = {}
    for rank, (item, _) in enumerate(first[: hop.pivots]):
        pivots[item] = pivots.get(item, 0.0) + 1.0 / (rank + 1)
    for item, weight in literal.items():
        pivots[item] = pivots.get(item, 0.0) + hop.literal * weight
    graph = goals.with_names(turn_table(ctx, space).name_words)  # names identify a goal as numbers do
    reached, paths = second_hop(graph, pivots, goal_words(anchors), question_weight=hop.question)
    if not reached:
        return first, {}
    total = sum(a for _, a in reached)
    if len(reached) > hop.width * MOST_REACHED:  # the most activated, in the graph's order (ties keep it)
        keep = np.sort(top_order(np.array([a for _, a in reached]), hop.width * MOST_REACHED, positive_only=False))
        reached = [reached[i] for i in keep.tolist()]
    items = [item for item, _ in reached]
    cosine = cosines(items) if cosines is not None else {}
    missing = [item for item in items if item not in cosine]
    if missing:  # the engine's similarity lacks them (none given, or an approximate search passed them by)
        cosine.update(_cosines(ctx, missing, query_vector))
    scored = sorted(
        ((item, activation * max(cosine.get(item, 0.0), 0.0) ** hop.attribute) for item, activation in reached),
        key=lambda x: -x[1],
    )[: hop.width]
    # how focused the activation is: the share of it the hop ranking holds (a goal every turn shares: little)
    kept = {i for i, _ in scored}
    focus = sum(a for i, a in reached if i in kept) / max(total, 1e-12)
    fused = reciprocal_rank_fusion(
        [[i for i, _ in first], [i for i, _ in scored]], k=ctx.settings.rrf_k, weights=[1.0, hop.weight * focus]
    )
    ranked = [(int(i), s) for i, s in fused]
    if hop.pair > 0:
        ranked = with_mates(ranked, stated, scored, paths, hop.pair)
    return ranked, {i: paths[i] for i, _ in scored}


PAIR_HEAD = 10  # a pivot ranked among the first this many is followed by its mates
PAIR_STATED = 0.5  # ... when the question's value is stated by at most two turns (its literal activation)


def with_mates(
    ranked: list[tuple[int, float]],
    stated: Mapping[int, float],
    scored: Sequence[tuple[int, float]],
    paths: Mapping[int, Path],
    pair: int,
) -> list[tuple[int, float]]:
    """The second hop's answer next to its pivot: a turn stating the question's value (`stated`: a time, an amount,
    a date or a name said as a value; not a name it is about, which on LoCoMo is the evidence itself) that ranks among
    the first `PAIR_HEAD` is followed at once by the `pair` turns the hop reached best from it (`scored`, by
    activation x similarity to the question), which the fusion alone can leave below turns both lists hold.
    A mate's score is put between the pivot's and the next turn's; no other score changes."""
    head = [item for item, _ in ranked[:PAIR_HEAD]]
    score = dict(ranked)
    moved = set(head)
    for pivot, weight in sorted(stated.items(), key=lambda kv: -kv[1]):
        if weight < PAIR_STATED or pivot not in head:
            continue
        mates = [i for i, _ in scored if i not in moved and paths[i].pivot == pivot][:pair]
        if not mates:
            continue
        moved.update(mates)
        at = head.index(pivot) + 1
        after = head[at] if at < len(head) else next((i for i, _ in ranked if i not in moved), pivot)
        top, below = score[pivot], score[after]
        for j, mate in enumerate(mates, start=1):  # between the pivot and the turn after it: no other score moves
            score[mate] = top - (top - below) * j / (len(mates) + 1)
        head[at:at] = mates
    if len(head) == min(len(ranked), PAIR_HEAD):  # no mate placed
        return ranked
    return [(item, score[item]) for item in [*head, *(i for i, _ in ranked if i not in moved)]]


def _cosines(ctx: EngineContext, items: list[int], query_vector: np.ndarray) -> dict[int, float]:
    """The cosine of each item's stored vector with the question's (read for these items only: a search over the
    whole namespace would cost as much as the namespace is large)."""
    query = np.asarray(query_vector, dtype=np.float32)
    query = query / (float(np.linalg.norm(query)) or 1.0)
    found = {
        i: v for i, v in ctx.store.item_vectors(ctx.ns, ctx.embedder.name, items).items() if v.shape == query.shape
    }
    if not found:
        return {}
    rows = np.stack(list(found.values()))
    norms = np.linalg.norm(rows, axis=1)
    cosines = (rows @ query) / np.where(norms > 0, norms, 1.0)
    return dict(zip(found, cosines.tolist(), strict=True))


def path_details(ctx: EngineContext, hits: Sequence[Hit], paths: dict[int, Path]) -> list[dict[str, Any] | None]:
    """For each hit: how the hop reached it (pivot turn, goal words, activation), or None when it did not. Hits
    and hop items meet by their turn ids (a hit whose item lost its turns is not made, so positions differ)."""
    items = list(paths)  # at most the hop's width
    if not items or not hits:
        return [None] * len(hits)
    wanted = [i for i in dict.fromkeys(paths[i].pivot for i in items) if i is not None]
    pivots = ctx.store.get_items(ctx.ns, wanted) if wanted else {}
    turn_ids = {i: it.turn_ids[0] for i, it in pivots.items() if it.turn_ids}
    found = ctx.store.get_items(ctx.ns, items)
    by_turns = {tuple(found[i].turn_ids): paths[i].describe(turn_ids) for i in items if i in found}
    return [by_turns.get(tuple(hit.turn_ids)) for hit in hits]


__all__ = [
    "GoalGraph",
    "Goals",
    "HopSettings",
    "Path",
    "goal_words",
    "hop_ranking",
    "path_details",
    "second_hop",
    "stating",
    "with_mates",
]
