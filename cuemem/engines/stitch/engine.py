"""Engine `stitch`: contextual-intent memory (docs/design.md design 1; STITCH, arXiv 2601.10702).

Each step (turn) is indexed by a thematic scope, event types and key entity types, and stored with a canonical
summary whose references are resolved from earlier steps of the same scope. A question derives a filter of
scopes, event types and entity types; steps rank by label density, with semantic and lexical similarity to
their canonical summary deciding among steps of equal density.

Model-free mode (the default) labels with spaCy and embeddings at full ingest speed; model mode (`stitch-llm`)
makes every label a constrained choice of the model client (see `labellers.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...index.fusion import fuse_positions
from ...index.statements import READING, stored_reading
from ...store.base import DerivedSpec, Item, NewItem, Scores, as_scores
from ...store.vectors import top_order
from ...types import Hit, Turn
from ..base import BaseEngine, EngineContext, variant_name
from ..baselines import prepare_embeddings, turn_document, turn_words
from ..current import hit_detail
from ..hop import GoalGraph, Goals, HopSettings, hop_ranking, path_details
from ..refine import refine, turn_table
from ..structure import hit_text, turn_fields, with_header_tokens
from .analysis import StepAnalysis, analyze_steps, prefetch_spacy, wanted_types
from .labellers import MODEL_WINDOW, Labeller, ModelFreeLabeller, ModelLabeller, Step
from .scope import OpenSegment, centroid
from .state import GOALS, STATE, IngestState, StitchConfig

log = logging.getLogger(__name__)


@dataclass
class StepTable:
    """Query-side view of a namespace's steps: label ids per step item, rebuilt when the store changes."""

    ids: list[int]
    position: dict[int, int]
    id_array: np.ndarray  # `ids` (sorted) as an array: the positions of many items at once, by binary search
    segment: np.ndarray
    scope: np.ndarray
    events: list[frozenset[str]]
    entities: list[frozenset[str]]
    goals: GoalGraph  # steps x the words of their goal (the second hop)
    by_label: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (kind, label) -> its steps' positions

    def carrying(self, kind: str, labels: set[str]) -> np.ndarray:
        """Per step: whether it carries one of `labels` of `kind` ("event" or "entity")."""
        out = np.zeros(len(self.ids), dtype=bool)
        for label in labels:
            out[self.by_label.get((kind, label), _NONE)] = True
        return out


_NONE = np.zeros(0, dtype=np.int64)


class StitchEngine(BaseEngine):
    """STITCH: steps keyed by (thematic scope, event type, entity types), retrieved by label density."""

    uses_embedder = True

    def __init__(self, config: StitchConfig | None = None, name: str = "stitch") -> None:
        self.config = config or StitchConfig()
        self.name = name

    # ------------------------------------------------------------------ names
    def space(self, kind: str) -> str:
        return f"{self.name}:{kind}"

    @property
    def derived(self) -> DerivedSpec:
        """Online segmentation, scope links and vocabularies depend on every earlier step: a delete drops this
        engine's derived state in the namespace and it is rebuilt from the log (no deleted word survives in a
        vocabulary, a gist, a resolved reference or a segment)."""
        return DerivedSpec(self.name, (self.space("step"), self.space("segment")), "rebuild")

    @property
    def uses_llm(self) -> bool:
        """Model mode calls the model per step: Memory ingests it in small batches (each holds the write lock)."""
        return self.config.model

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Embed the steps' documents ahead of ingest, outside the write lock (the cache serves `ingest`)."""
        prepare_embeddings(ctx, turns)

    def stats(self, ctx: EngineContext) -> dict[str, int]:
        """Counters worth reporting: steps indexed, model-mode labels that fell back to model-free mode, and
        timestamps that did not parse as dates (kept raw)."""
        state = self.state(ctx)
        unparsed = turn_table(ctx, self.space("step")).unparsed
        return {"steps": state.steps, "llm_fallbacks": state.fallbacks, "unparsed_timestamps": unparsed}

    def labeller(self, ctx: EngineContext) -> Labeller:
        return ModelLabeller(self.config, ctx) if self.config.model else ModelFreeLabeller(self.config, ctx)

    def state(self, ctx: EngineContext) -> IngestState:
        return IngestState.from_json(ctx.store.kv_get(ctx.ns, self.name, STATE))

    def search_state(self, ctx: EngineContext) -> IngestState:
        """The ingest state as searches read it (never written back), cached until the next write or delete: the
        namespace's epoch and this engine's watermark, which ingest moves in the transaction that writes the state
        (reading and parsing the state was ~4 ms of a search at 10,000 turns). Called inside the store's snapshot,
        as `retrieve` reads the state and the labels of one moment."""
        ns, name = ctx.ns, f"{self.name}:state"
        with ctx.indexes.lock_for(ns):
            version = ctx.indexed_version(self.name)
            cached = ctx.indexes.view(ns, name, version)
            if isinstance(cached, IngestState):
                return cached
            state = self.state(ctx)
            ctx.indexes.keep_view(ns, name, version, state)
            return state

    # ------------------------------------------------------------------ ingest
    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Label, resolve and store each new step; merge synonyms every k_update steps. All state is read and
        written in one store transaction (Memory runs one indexer per namespace and engine), and the result
        depends only on the log, not on how it was batched."""
        step_space = self.space("step")
        existing = ctx.store.item_ids(ctx.ns, step_space, [t.id for t in turns])
        turns = [t for t in turns if t.id not in existing and t.seq is not None]
        if not turns:
            return
        docs = [turn_document(t, ctx.settings.turn_template) for t in turns]
        analyses = analyze_steps([turn_words(t) for t in turns])  # not the date prefix: it would tag every step
        hashes, vectors = ctx.embed(docs)  # the raw turn's embedding: the same vector `dense` stores
        labeller = self.labeller(ctx)
        with ctx.store.transaction(ctx.ns):
            state = self.state(ctx)
            inherited, sources = self._carry_focus(ctx, state, turns, docs, analyses, hashes, vectors)
            goals = self._goals(ctx, turns, analyses)
            for i, turn in enumerate(turns):
                step = Step(turn, docs[i], analyses[i], vectors[i], hashes[i], inherited[i], sources[i])
                self._ingest_step(ctx, labeller, state, step, goals[i])
                if state.since_merge >= self.config.k_update:
                    self._merge_synonyms(ctx, state)
                    state.since_merge = 0
            fallbacks = getattr(labeller, "fallbacks", 0)
            if fallbacks:
                state.fallbacks += fallbacks
                log.warning(
                    "%s: %d labels fell back to model-free mode in this batch (%d in all)",
                    self.name,
                    fallbacks,
                    state.fallbacks,
                )
            ctx.store.kv_set(ctx.ns, self.name, STATE, state.to_json())

    def _carry_focus(
        self,
        ctx: EngineContext,
        state: IngestState,
        turns: Sequence[Turn],
        docs: list[str],
        analyses: list[StepAnalysis],
        hashes: list[str],
        vectors: np.ndarray,
    ) -> tuple[list[list[str]], list[list[str]]]:
        """The goal in focus carried over the batch (index/focus.py): each step's inherited anchors, and the earlier
        turns they came from (the step depends on them: it is forgotten with them). A step that inherits is
        embedded with them (its document and "(re: anchors)"), so dense search finds it under its goal as BM25 does
        through its canonical summary."""
        if not (self.config.use_focus and self.config.use_coref):
            return [[] for _ in turns], [[] for _ in turns]
        recur = self.config.focus_recur
        inherited: list[list[str]] = []
        sources: list[list[str]] = []
        for t, a in zip(turns, analyses, strict=True):
            inherited.append(
                state.focus.step(
                    t.session_id,
                    a.anchors,
                    turn_words(t),
                    a.values,
                    recur=recur,
                    whole=self.config.focus_whole,
                    quotes=self.config.focus_quotes,
                    gather=self.config.focus_gather,
                    replies=self.config.focus_replies,
                    sessions=self.config.focus_sessions,
                    turn=t.id,
                    replaced=a.replaced,
                )
            )
            sources.append(list(state.focus.depends))
        todo = [i for i, anchors in enumerate(inherited) if anchors]
        if todo:
            new_hashes, new_vectors = ctx.embed([canonical_summary(docs[i], inherited[i]) for i in todo])
            for j, i in enumerate(todo):
                hashes[i], vectors[i] = new_hashes[j], new_vectors[j]
        return inherited, sources

    def _goals(self, ctx: EngineContext, turns: Sequence[Turn], analyses: list[StepAnalysis]) -> list[list[str]]:
        """Each step's goal (engines/hop.py `Goals`): its own anchors when it names one, else the goal of a value
        it names as replaced (`goal_quotes`), else the goal in focus it continues; the state carried in the store
        between batches."""
        cfg = self.config
        if cfg.hop_weight <= 0:
            return [[] for _ in turns]
        raw = ctx.store.kv_get(ctx.ns, self.name, GOALS)
        goals = Goals.from_json(raw if isinstance(raw, dict) else None)
        out = [
            goals.step(
                t.session_id,
                a.anchors,
                turn_words(t),
                a.values,
                recur=cfg.focus_recur,
                whole=cfg.focus_whole,
                quotes=cfg.goal_quotes,
                sessions=cfg.focus_sessions,
                replaced=a.replaced,
            )
            for t, a in zip(turns, analyses, strict=True)
        ]
        ctx.store.kv_set(ctx.ns, self.name, GOALS, goals.to_json())
        return out

    def _ingest_step(
        self, ctx: EngineContext, labeller: Labeller, state: IngestState, step: Step, goal: Sequence[str] = ()
    ) -> None:
        store, ns, cfg = ctx.store, ctx.ns, self.config
        step_space = self.space("step")
        if labeller.shift(state, step):
            self._close_segment(ctx, state)
            state.open = OpenSegment(segment=state.segments, session=step.turn.session_id)
            state.scope_of_open = state.segments
            state.segments += 1
        events = state.events.add_all(labeller.events(state, step)) if cfg.use_event else []
        types = state.entities.add_all(labeller.entity_types(state, step)) if cfg.use_entity else []
        antecedents = labeller.antecedents(state, step, events) if cfg.use_coref else []
        summary = canonical_summary(turn_words(step.turn), antecedents)
        # The turns a resolved reference quotes: the summary depends on them too (forgotten with them).
        quoted = [r["turn"] for r in state.recent if set(r["mentions"]) & set(antecedents)] + step.sources
        depends = list(store.seqs_of(ns, quoted).values()) if quoted else []
        meta = {
            **turn_fields(step.turn),
            "segment": state.open.segment,
            "events": events,
            "entity_types": types,
            "resolved": antecedents,
            READING: stored_reading(spoken_text(summary, antecedents)),  # read once here, not at every cold search
        }
        with_header_tokens([meta], ctx.tokens.count_many)
        tokens = ctx.tokens.count(hit_text(summary, meta))
        store.put_items(ns, step_space, [NewItem(step.turn.id, summary, meta, [step.turn.seq or 0], tokens, depends)])
        item = store.item_ids(ns, step_space, [step.turn.id]).get(step.turn.id)
        if item is None:  # its turn was deleted meanwhile
            return
        store.put_vectors(ns, step_space, ctx.embedder.name, [(item, step.text_hash, step.vector)])
        rows = [(item, "segment", f"g{state.open.segment}"), (item, "scope", f"s{state.scope_of_open}")]
        rows += [(item, "event", e) for e in events] + [(item, "entity", t) for t in types]
        rows += [(item, "goal", a) for a in dict.fromkeys(goal)]
        store.put_labels(ns, rows)
        state.open.members.append(step.turn.id)
        state.open.vectors.append([float(x) for x in step.vector])
        state.open.gist = list(dict.fromkeys(state.open.gist + step.analysis.mentions[:3]))[-12:]
        recent = {
            "turn": step.turn.id,
            "segment": state.open.segment,
            "session": step.turn.session_id,
            "events": events,
            "mentions": step.analysis.mentions[:6],
            "text": step.doc[:300],
        }
        state.recent = [*state.recent, recent][-max(cfg.segment_window, MODEL_WINDOW) :]
        state.steps += 1
        state.since_merge += 1

    def _close_segment(self, ctx: EngineContext, state: IngestState) -> None:
        """Store the closing segment (its gist and centroid) and link it to an earlier segment of the same goal."""
        seg = state.open
        if seg.segment < 0 or not seg.members:
            return
        store, ns = ctx.store, ctx.ns
        space, model = self.space("segment"), f"{ctx.embedder.name}#centroid"
        vector = centroid(seg)
        scope = state.scope_of_open
        members = list(store.item_ids(ns, self.space("step"), seg.members).values())
        if self.config.use_scope and self.config.link_threshold <= 1.0:
            best = ctx.nearest(space, model, vector, 1)
            if best and best[0][1] >= self.config.link_threshold:
                linked = store.get_items(ns, [best[0][0]]).get(best[0][0])
                if linked is not None:
                    scope = int(linked.meta["scope"])
                    store.relabel(ns, "scope", {f"s{state.scope_of_open}": f"s{scope}"}, items=members)
        gist = "; ".join(seg.gist) or f"segment {seg.segment}"
        key = f"g{seg.segment}"
        seqs = list(store.seqs_of(ns, seg.members).values())
        store.put_items(ns, space, [NewItem(key, gist, {"scope": scope}, seqs, ctx.tokens.count(gist))])
        item = store.item_ids(ns, space, [key]).get(key)
        if item is not None:
            store.put_vectors(ns, space, model, [(item, f"centroid:{key}", vector)])

    def _merge_synonyms(self, ctx: EngineContext, state: IngestState) -> None:
        """Every k_update steps: fold synonym labels together and relabel the stored steps."""

        def embed(labels: Sequence[str]) -> np.ndarray:
            return ctx.embed(labels, remember=True)[1]  # labels recur at every merge: cached after the first

        for kind, vocab in (("event", state.events), ("entity", state.entities)):
            mapping = vocab.merge_synonyms(embed, self.config.synonym_threshold)
            if not mapping:
                continue
            ctx.store.relabel(ctx.ns, kind, mapping)
            if kind == "event":  # coreference compares recent steps' event types: keep them valid too
                for recent in state.recent:
                    recent["events"] = list(dict.fromkeys(mapping.get(e, e) for e in recent["events"]))

    # ------------------------------------------------------------------ retrieve
    def step_table(self, ctx: EngineContext, state: IngestState) -> StepTable:
        """Labels of every step, cached per namespace until the next write or delete."""
        store, ns = ctx.store, ctx.ns
        version = (store.epoch(ns), state.steps, state.segments)
        name = f"{self.name}:steps"
        with ctx.indexes.lock_for(ctx.ns):
            cached = ctx.indexes.view(ns, name, version)
            if isinstance(cached, StepTable):
                return cached
            labels: dict[int, dict[str, list[str]]] = {}
            for item, kind, label in store.labels_in_space(ns, self.space("step")):
                labels.setdefault(item, {}).setdefault(kind, []).append(label)
            ids = sorted(labels)
            segments: dict[str, int] = {}
            scopes: dict[str, int] = {}
            by_label: dict[tuple[str, str], list[int]] = {}
            for position, i in enumerate(ids):
                for kind in ("event", "entity"):
                    for label in set(labels[i].get(kind, [])):
                        by_label.setdefault((kind, label), []).append(position)
            table = StepTable(
                ids=ids,
                position={item: i for i, item in enumerate(ids)},
                id_array=np.asarray(ids, dtype=np.int64),
                segment=np.array([segments.setdefault(labels[i].get("segment", ["?"])[0], len(segments)) for i in ids]),
                scope=np.array([scopes.setdefault(labels[i].get("scope", ["?"])[0], len(scopes)) for i in ids]),
                events=[frozenset(labels[i].get("event", [])) for i in ids],
                entities=[frozenset(labels[i].get("entity", [])) for i in ids],
                goals=GoalGraph.build([(i, a) for i in ids for a in labels[i].get("goal", [])]),
                by_label={key: np.asarray(rows, dtype=np.int64) for key, rows in by_label.items()},
            )
            ctx.indexes.keep_view(ns, name, version, table)
            return table

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        cfg = self.config
        # the state, the epoch and the labels of one moment (a table never goes stale), read under the index
        # cache's lock: every reader takes that lock before the store's, never the other way round
        with ctx.indexes.lock_for(ctx.ns), ctx.store.snapshot():
            state = self.search_state(ctx)
            table = self.step_table(ctx, state)
        n = len(table.ids)
        if n == 0 or k <= 0:
            return []
        step_space = self.space("step")
        prefetch_spacy()  # a fresh process loads spaCy while the embedder loads for the query's vector
        query_vector = ctx.embed_query(query)
        asked = analyze_query(query)
        events, types = self.labeller(ctx).query_filter(state, query, query_vector, asked)

        def similarity(vector: np.ndarray) -> np.ndarray:
            return _dense_array(ctx.nearest_scores(step_space, ctx.embedder.name, vector, n), table, fill=-1.0)

        asked_similarity = similarity(query_vector)  # read again by the hop: computed once

        def ranking(text: str, vector: np.ndarray) -> list[tuple[int, float]]:
            lexical = _dense_array(as_scores(ctx.bm25(step_space, text, n)), table, fill=0.0)
            semantic = asked_similarity if vector is query_vector else similarity(vector)
            lists = [lexical, semantic]
            bm25_weight, dense_weight = ctx.fusion_weights()
            weights = [bm25_weight, dense_weight]
            if cfg.use_scope:
                for scores, weight in ((lexical, bm25_weight), (semantic, dense_weight)):
                    relevance = _group_max(scores, table.segment) + cfg.link_weight * _group_max(scores, table.scope)
                    lists.append(relevance + 0.01 * scores)  # within a scope, the step's own similarity decides
                    weights.append(weight * cfg.scope_weight)
            depth = min(n, cfg.fusion_depth)
            rankings = [top_order(s, depth, positive_only=False) for s in lists]
            fused = fuse_positions(rankings, n, k=ctx.settings.rrf_k, weights=weights)
            ranked = self._rank_by_density(table, fused, lists, set(events), set(types), max(k, depth))
            return [(table.ids[i], score) for i, score in ranked]

        first, paths = hop_ranking(
            ctx,
            step_space,
            table.goals,
            ranking(query, query_vector),
            asked.anchors,
            asked.values,
            query_vector,
            self.hop,
            cosines=lambda items: _cosines_of(asked_similarity, table, items, query_vector),
        )
        ranked, detail = refine(ctx, step_space, query, query_vector, first, ranking, said_by_step)
        hits = ctx.hits_from_items(ranked[:k], self.name)
        for hit, path in zip(hits, path_details(ctx, hits, paths), strict=True):
            hit.detail = {**hit.detail, **hit_detail(detail, hit), "filter": {"events": events, "entity_types": types}}
            if path is not None:
                hit.detail["hop"] = path
            hit.text = spoken_text(hit.text, hit.detail.get("resolved") or [])
        return hits

    @property
    def hop(self) -> HopSettings:
        return HopSettings.of(self.config)

    def _rank_by_density(
        self,
        table: StepTable,
        fused: tuple[np.ndarray, np.ndarray],
        lists: list[np.ndarray],
        events: set[str],
        types: set[str],
        k: int,
    ) -> list[tuple[int, float]]:
        """Label density: how many of the query's filter labels a step carries (event types, entity types, and in
        strict ranking the query's best scopes), over the fused (positions, scores), best first."""
        cfg = self.config
        positions, fused_scores = fused
        use_events = cfg.use_event and bool(events)
        use_types = cfg.use_entity and bool(types)
        event_match = table.carrying("event", events)[positions] if use_events else np.zeros(len(positions), bool)
        type_match = table.carrying("entity", types)[positions] if use_types else np.zeros(len(positions), bool)
        if cfg.ranking == "strict":
            scopes: set[int] = set()
            if cfg.use_scope:
                scopes = {int(table.scope[i]) for i in positions[:3].tolist()}
            in_scope = np.isin(table.scope[positions], list(scopes))
            density = event_match.astype(int) + type_match.astype(int) + in_scope.astype(int)
            matched = np.flatnonzero(density > 0)
            if len(matched) == 0:  # the filter matches nothing: fall back to dense search
                order = top_order(lists[1], k, positive_only=False)
                return [(int(i), float(lists[1][i])) for i in order]
            matched = matched[np.lexsort((matched, -fused_scores[matched], -density[matched]))]
            matched = matched[: min(k, cfg.k_retrieve)]
            return list(
                zip(positions[matched].tolist(), (density[matched] + fused_scores[matched]).tolist(), strict=True)
            )
        if use_events or use_types:  # the fused similarity boosted by the labels carried, stable for ties
            fused_scores = fused_scores * (1.0 + cfg.event_boost * event_match + cfg.entity_boost * type_match)
            order = top_order(fused_scores, k, positive_only=False)
            positions, fused_scores = positions[order], fused_scores[order]
        return list(zip(positions[:k].tolist(), fused_scores[:k].tolist(), strict=True))


def canonical_summary(doc: str, antecedents: Sequence[str]) -> str:
    """The step as stored for retrieval: its text with what its references point to (the raw turn stays in the
    log untouched)."""
    return f"{doc} (re: {'; '.join(antecedents)})" if antecedents else doc


def spoken_text(summary: str, antecedents: Sequence[str]) -> str:
    """A hit's text as the turn said it: its canonical summary without the "(re: ...)" it was indexed with (what
    the step continues stays in the hit's detail, `resolved`)."""
    suffix = canonical_summary("", antecedents)
    return summary.replace(suffix, "", 1) if antecedents else summary


def said_by_step(item: Item) -> str:
    """A step's words as its turn said them: the canonical summary without what it was indexed with."""
    return spoken_text(item.text, item.meta.get("resolved") or [])


def analyze_query(query: str) -> StepAnalysis:
    analysis = analyze_steps([query])[0]
    analysis.entity_types = wanted_types(query, analysis)
    return analysis


def _dense_array(scored: Scores, table: StepTable, fill: float) -> np.ndarray:
    """The scores as an array over the table's steps (`fill` for a step the arrays do not hold); the items are
    found in the table by binary search over its ids, which are sorted, all at once."""
    out = np.full(len(table.ids), fill, dtype=np.float32)
    items, scores = scored
    if len(items) and len(table.id_array):
        found = np.minimum(np.searchsorted(table.id_array, items), len(table.id_array) - 1)
        kept = table.id_array[found] == items
        out[found[kept]] = scores[kept]
    return out


def _cosines_of(similarity: np.ndarray, table: StepTable, items: list[int], vector: np.ndarray) -> dict[int, float]:
    """The steps' cosines with the question, read from the similarity the first ranking computed over every step
    (dense search's: the stored vectors taken as unit vectors; the question's divided by its norm), for the steps
    that have a vector."""
    norm = float(np.linalg.norm(vector)) or 1.0
    rows = [(i, table.position[i]) for i in items if i in table.position]
    return {i: float(similarity[r]) / norm for i, r in rows if similarity[r] > -1.0}


def _group_max(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each step's group's best score (a scope is as relevant as its most relevant step)."""
    best = np.full(int(groups.max()) + 1, -np.inf, dtype=np.float32)
    np.maximum.at(best, groups, scores)
    return best[groups]


VARIANTS: dict[str, StitchConfig] = {
    "stitch": StitchConfig(),
    "stitch-llm": StitchConfig(model=True),
    "stitch-strict": StitchConfig(ranking="strict"),
    "stitch-noscope": StitchConfig(use_scope=False),
    "stitch-noevent": StitchConfig(use_event=False),
    "stitch-noentity": StitchConfig(use_entity=False),
    "stitch-nocoref": StitchConfig(use_coref=False),
}


def variant(name: str, **overrides: Any) -> StitchEngine:
    """A named STITCH variant (model-free default, model mode, strict ranking, the four ablations), under a name
    that records any overrides (`variant_name`)."""
    return StitchEngine(replace(VARIANTS[name], **overrides), name=variant_name(name, overrides))


__all__ = ["VARIANTS", "StitchConfig", "StitchEngine", "canonical_summary", "variant"]
