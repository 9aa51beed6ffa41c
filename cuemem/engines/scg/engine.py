"""Engine `scg`: schema-constrained generative memory (docs/design.md design 2; SCG-MEM, arXiv 2604.20117).

Ingest grounds each turn in concepts of the namespace's cognitive schema (assimilation) or adds new ones
(accommodation), and links the turn to them; the links are the associative graph's incidence matrix. A question
is grounded the same way in seed concepts, which are schema members by construction (constrained decoding in
model mode, schema lookups in model-free mode); activation spreads from them over the graph, and the turns of the
`top_k` most activated concepts rank by the activation mass (times IDF) of the concepts they hold, fused by
reciprocal rank with BM25 and dense similarity (`fusion`), then refined like every ranking engine (dates, people).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...index.fusion import reciprocal_rank_fusion
from ...llm.base import LLMError
from ...store.base import DerivedSpec, NewItem, text_hash
from ...types import Hit, Turn
from ..base import BaseEngine, EngineContext, variant_name
from ..baselines import prepare_embeddings, turn_document, turn_words
from ..current import hit_detail
from ..hop import GoalGraph, Goals, HopSettings, Path, hop_ranking, path_details
from ..refine import refine, turn_table
from ..structure import hit_text, turn_fields, with_header_tokens
from .assimilate import NEW_CONCEPT, ModelAssimilator, TextAssimilator, concept_messages
from .concepts import Candidate, TextConcepts, extract_concepts
from .graph import AssociativeGraph, spread_activation, top_concepts
from .schema import Schema
from .state import FOCUS, STATE, ScgConfig, ScgState, load_json

if TYPE_CHECKING:  # imported where used: a process that builds no graph never loads scipy
    from scipy import sparse

log = logging.getLogger(__name__)


@dataclass
class Recall:
    """Query-side view of a namespace: the schema and the associative graph, rebuilt when the store changes."""

    schema: Schema
    graph: AssociativeGraph
    transition: sparse.csr_matrix
    goals: GoalGraph


@dataclass
class Seeds:
    """A question's seed concepts (key -> initial activation) and the structural-hallucination count."""

    weights: dict[str, float]
    generated: int = 0
    outside: int = 0
    free: list[str] | None = None  # unconstrained keywords, where they were generated
    anchors: list[str] | None = None  # what the question names (its own goal, for the second hop)
    values: list[str] | None = None  # the times, amounts and dates it states (the pivot's value)


class ScgEngine(BaseEngine):
    """SCG-MEM: turns keyed by schema concepts, recalled by spreading activation over the associative graph."""

    uses_embedder = True
    embeds_ahead = True

    def __init__(self, config: ScgConfig | None = None, name: str = "scg") -> None:
        self.config = config or ScgConfig()
        self.name = name

    def space(self, kind: str) -> str:
        return f"{self.name}:{kind}"

    @property
    def derived(self) -> DerivedSpec:
        """Assimilation depends on every earlier turn (a concept's key is the text of the turn that brought it): a
        delete drops this engine's schema, graph and counters in the namespace, rebuilt from the log, so no key
        worded by a deleted turn survives and a concept left with no turn disappears."""
        return DerivedSpec(self.name, (self.space("turn"), self.space("concept")), "rebuild")

    @property
    def uses_llm(self) -> bool:
        return self.config.model

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Embed the turns' documents ahead of ingest, outside the write lock (the cache serves `ingest`)."""
        prepare_embeddings(ctx, turns)

    def state(self, ctx: EngineContext) -> ScgState:
        return ScgState.from_json(ctx.store.kv_get(ctx.ns, self.name, STATE))

    def stats(self, ctx: EngineContext) -> dict[str, int]:
        """Turns, concepts in the schema, assimilated / accommodated counts, structural hallucinations at ingest
        (keys proposed as existing concepts that were not), model-mode fallbacks, unparsed timestamps."""
        state = self.state(ctx)
        unparsed = turn_table(ctx, self.space("turn")).unparsed
        return {**state.to_json(), "unparsed_timestamps": unparsed}

    # ------------------------------------------------------------------ the schema
    def load_schema(self, ctx: EngineContext) -> Schema:
        """The namespace's schema from the store: concept keys, lemma forms and vectors, in insertion order."""
        store, ns = ctx.store, ctx.ns
        names: dict[int, dict[str, str]] = {}
        for item, kind, label in store.labels_in_space(ns, self.space("concept")):
            names.setdefault(item, {})[kind] = label
        ids = sorted(i for i, labels in names.items() if "key" in labels)
        vectors = store.item_vectors(ns, ctx.embedder.name, ids)
        schema = Schema()
        for item in ids:
            schema.add(names[item]["key"], names[item].get("lemma", names[item]["key"]), vectors.get(item))
        return schema

    def assimilator(self, ctx: EngineContext) -> TextAssimilator:
        def embed(texts: list[str]) -> np.ndarray:
            return ctx.embed(texts, remember=True)[1]

        if self.config.model:
            return ModelAssimilator(self.config, embed, ctx.llm)
        return TextAssimilator(self.config, embed)

    # ------------------------------------------------------------------ ingest
    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Ground each new turn in the schema (assimilate, then accommodate) and store the turn with its concept
        links, and the new concepts with their vectors, in one transaction. The result depends only on the log."""
        store, ns = ctx.store, ctx.ns
        turn_space, concept_space = self.space("turn"), self.space("concept")
        existing = store.item_ids(ns, turn_space, [t.id for t in turns])
        turns = [t for t in turns if t.id not in existing and t.seq is not None]
        if not turns:
            return
        words = [turn_words(t) for t in turns]
        found = extract_concepts(words, self.config.concepts_per_turn)
        doc_hashes, doc_vectors = ctx.embed([turn_document(t, ctx.settings.turn_template) for t in turns])
        known = self.load_schema(ctx)  # read ahead, outside the write lock: one indexer per namespace and engine
        fresh = list(dict.fromkeys(c.key for f in found for c in f.candidates if c.key not in known))
        phrase = dict(zip(fresh, ctx.embed(fresh, remember=True)[1], strict=True)) if fresh else {}
        assimilator = self.assimilator(ctx)
        model = ctx.embedder.name
        with store.transaction(ns):
            state = self.state(ctx)
            focus = Goals.from_json(load_json(store.kv_get(ns, self.name, FOCUS)))
            goals = [self._goal(focus, t, w, f) for t, w, f in zip(turns, words, found, strict=True)]
            schema = self.load_schema(ctx) if len(known) != state.concepts else known
            vectors = phrase  # keys already in the schema at the start of the batch need none
            grounded = []
            for turn, text, concepts, vector in zip(turns, words, found, doc_vectors, strict=True):
                grounded.append(assimilator.ground(schema, state, concepts, vectors, f"{turn.speaker}: {text}", vector))
            metas = [{**turn_fields(t), "concepts": g.keys} for t, g in zip(turns, grounded, strict=True)]
            with_header_tokens(metas, ctx.tokens.count_many)
            shown = [hit_text(w, m) for w, m in zip(words, metas, strict=True)]
            store.put_items(
                ns,
                turn_space,
                [
                    NewItem(t.id, w, m, [t.seq or 0], n)
                    for t, w, m, n in zip(turns, words, metas, ctx.tokens.count_many(shown), strict=True)
                ],
            )
            ids = store.item_ids(ns, turn_space, [t.id for t in turns])
            rows = [(ids[t.id], h, v) for t, h, v in zip(turns, doc_hashes, doc_vectors, strict=True) if t.id in ids]
            store.put_vectors(ns, turn_space, model, rows)
            store.put_labels(
                ns,
                [(ids[t.id], "concept", k) for t, g in zip(turns, grounded, strict=True) if t.id in ids for k in g.keys]
                + [(ids[t.id], "goal", a) for t, g in zip(turns, goals, strict=True) if t.id in ids for a in g],
            )
            new = [(t, c) for t, g in zip(turns, grounded, strict=True) for c in g.new]
            store.put_items(
                ns,
                concept_space,
                [NewItem(key, key, {"lemma": lemma, "turn": t.id}, [t.seq or 0], 0) for t, (key, lemma, _) in new],
            )
            cids = store.item_ids(ns, concept_space, [key for _, (key, _, _) in new])
            labels, concept_vectors = [], []
            for _, (key, lemma, vec) in new:
                if key in cids:
                    labels += [(cids[key], "key", key), (cids[key], "lemma", lemma)]
                    if vec is not None:
                        concept_vectors.append((cids[key], text_hash(key), vec))
            store.put_labels(ns, labels)
            store.put_vectors(ns, concept_space, model, concept_vectors)
            state.turns += len(turns)
            state.concepts = len(schema)
            fallbacks = getattr(assimilator, "fallbacks", 0)
            if fallbacks:
                log.warning(
                    "%s: %d turns fell back to model-free concepts in this batch (%d in all)",
                    self.name,
                    fallbacks,
                    state.fallbacks,
                )
            store.kv_set(ns, self.name, STATE, state.to_json())
            store.kv_set(ns, self.name, FOCUS, focus.to_json())

    def _goal(self, goals: Goals, turn: Turn, text: str, found: TextConcepts) -> list[str]:
        """The anchors of the goal a turn belongs to (hop.py `Goals`): its own when it names one, else the goal of
        a value it names as replaced ("scrap 2:30 pm"), else the goal in focus it continues."""
        if self.config.hop_weight <= 0:
            return []
        cfg = self.config
        return goals.step(
            turn.session_id,
            found.anchors,
            text,
            found.values,
            recur=cfg.focus_recur,
            whole=cfg.focus_whole,
            quotes=cfg.focus_quotes,
            replaced=found.replaced,
        )

    # ------------------------------------------------------------------ recall
    def recall_view(self, ctx: EngineContext) -> Recall:
        """The schema, graph and transition matrix of one moment, cached until the next write or delete."""
        store, ns = ctx.store, ctx.ns
        name = f"{self.name}:recall"
        with ctx.indexes.lock_for(ctx.ns), store.snapshot():
            state = self.state(ctx)
            version = (store.epoch(ns), state.turns, state.concepts, ctx.embedder.name)
            cached = ctx.indexes.view(ns, name, version)
            if isinstance(cached, Recall):
                return cached
            links, goal_links = [], []
            for item, kind, label in store.labels_in_space(ns, self.space("turn")):
                if kind == "concept":
                    links.append((item, label))
                elif kind == "goal":
                    goal_links.append((item, label))
            schema = self.load_schema(ctx)
            graph = AssociativeGraph.build(links)
            view = Recall(schema, graph, graph.transition(self.config.temperature), GoalGraph.build(goal_links))
            ctx.indexes.keep_view(ns, name, version, view)
            return view

    def seeds(self, ctx: EngineContext, view: Recall, query: str, query_vector: np.ndarray) -> Seeds:
        """The question's seed concepts (section 3.4): schema members matched by string, lemma or embedding
        (model-free), chosen under the trie constraint (model mode), or, without the constraint, free keywords
        looked up by embedding. At most `beam` seeds, the most specific (similarity x IDF) first."""
        cfg, schema, graph = self.config, view.schema, view.graph
        found = extract_concepts([query], cfg.concepts_per_turn)[0]
        candidates = found.candidates
        weights: dict[str, float] = {}
        result = Seeds(weights, anchors=found.anchors, values=found.values)
        if not cfg.constrained:  # the paper's ablation: generate keywords freely, then look them up
            free = [c.key for c in candidates]
            result.free, result.generated = free, len(free)
            result.outside = sum(1 for k in free if k not in schema)
            if free:
                for vec in ctx.embed(free, remember=False)[1]:
                    for concept, cos in schema.nearest(vec, 1):
                        weights[concept] = max(weights.get(concept, 0.0), float(cos))
            return self._top_seeds(result, graph)
        if cfg.model and len(schema):
            try:
                chosen = self._model_seeds(ctx, view, query, query_vector, candidates)
                chosen.anchors, chosen.values = found.anchors, found.values
                return self._top_seeds(chosen, graph)
            except LLMError as exc:
                log.warning("%s: seeding fell back to model-free matching: %s", self.name, exc)
        unmatched: list[str] = []
        for cand in candidates:
            key = schema.lookup(cand.key, cand.lemma)
            if key is not None:
                weights[key] = 1.0
            else:
                unmatched.append(cand.key)
        if unmatched:
            for vec in ctx.embed(unmatched, remember=False)[1]:
                for concept, cos in schema.nearest(vec, 1):
                    if cos >= cfg.seed_threshold:
                        weights[concept] = max(weights.get(concept, 0.0), float(cos))
        for concept, cos in schema.nearest(query_vector, cfg.query_seeds):
            if cos >= cfg.seed_threshold:
                weights[concept] = max(weights.get(concept, 0.0), float(cos))
        result.generated = len(weights)
        result.outside = sum(1 for k in weights if k not in schema)  # by construction 0 (measured)
        return self._top_seeds(result, graph)

    def _model_seeds(
        self, ctx: EngineContext, view: Recall, query: str, query_vector: np.ndarray, candidates: list[Candidate]
    ) -> Seeds:
        """Constrained beam search over the shortlisted schema keys: the b best are the seeds."""
        cfg, schema = self.config, view.schema
        named = [k for k in (schema.lookup(c.key, c.lemma) for c in candidates) if k is not None]
        near = [k for k, _ in schema.nearest(query_vector, cfg.shortlist)]
        options = list(dict.fromkeys(named + near))[: cfg.shortlist]
        if not options:  # concepts without vectors and none named: nothing to choose among
            return Seeds({})
        chosen = ctx.llm.choose(
            concept_messages(query, "Which concept of the index is this question about?"),
            options,
            k=min(cfg.beam, len(options)),
            beam=cfg.beam,
        )
        weights: dict[str, float] = {}
        top = max((c.logprob or 0.0) for c in chosen)
        generated = outside = 0
        for choice in chosen:
            generated += 1
            if choice.option not in schema or choice.option == NEW_CONCEPT:
                outside += 1
                continue
            weights[choice.option] = float(np.exp((choice.logprob or 0.0) - top))
        return Seeds(weights, generated, outside)

    def _top_seeds(self, seeds: Seeds, graph: AssociativeGraph) -> Seeds:
        def specificity(key: str) -> float:
            i = graph.index.get(key)
            return float(graph.idf[i]) if i is not None else 0.0

        n = len(graph.turns)
        share = self.config.seed_max_df if n >= 50 else 1.0  # a share means little in a short history

        def usable(key: str) -> bool:
            i = graph.index.get(key)
            return i is not None and graph.idf[i] > 0 and graph.df[i] <= share * n

        ranked = sorted(
            ((k, w) for k, w in seeds.weights.items() if usable(k)), key=lambda kv: (-kv[1] * specificity(kv[0]), kv[0])
        )
        seeds.weights = dict(ranked[: self.config.beam])
        return seeds

    def activation_ranking(self, view: Recall, seeds: Seeds) -> tuple[list[tuple[int, float]], list[str]]:
        """Turns of the `top_k` most activated concepts, by the activation x IDF of the concepts they hold."""
        cfg, graph = self.config, view.graph
        if not seeds.weights or not graph.turns:
            return [], []
        activation = spread_activation(
            graph, view.transition, seeds.weights, cfg.hops, sample=cfg.sample, seed=cfg.seed
        )
        top = top_concepts(activation, cfg.top_k)
        mass = np.zeros(len(graph.concepts))
        mass[top] = activation[top] * graph.idf[top]
        scores = np.asarray(graph.incidence @ mass).ravel()
        if cfg.length_norm > 0:  # a turn holding many concepts is hit more easily: divide by (its count)^norm
            scores = scores / np.maximum(np.diff(graph.incidence.indptr), 1) ** cfg.length_norm
        order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        return [(graph.turns[i], float(scores[i])) for i in order], [graph.concepts[i] for i in top]

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        cfg = self.config
        view = self.recall_view(ctx)
        if k <= 0:
            return []
        turn_space = self.space("turn")
        query_vector = ctx.embed_query(query)
        seeds = self.seeds(ctx, view, query, query_vector)
        activated, concepts = self.activation_ranking(view, seeds)

        mass = dict(activated)
        top_mass = max(mass.values(), default=0.0)

        def ranking(text: str, vector: np.ndarray) -> list[tuple[int, float]]:
            if not cfg.fusion:
                return activated
            depth = max(k, cfg.fusion_depth)
            bm25_weight, dense_weight = ctx.fusion_weights()
            lists = [
                [i for i, _ in ctx.bm25(turn_space, text, depth)],
                [i for i, _ in ctx.nearest(turn_space, ctx.embedder.name, vector, depth)],
            ]
            weights = [bm25_weight, dense_weight]
            if cfg.concept_weight > 0 and text == query:  # a second round (expansion) keeps the question's own
                lists.append([i for i, _ in activated[:depth]])
                weights.append(cfg.concept_weight)
            fused = reciprocal_rank_fusion(lists, k=ctx.settings.rrf_k, weights=weights)
            if cfg.concept_boost > 0 and top_mass > 0:  # activation as a boost: 1 + boost x normalised mass
                fused = [(i, s * (1.0 + cfg.concept_boost * mass.get(i, 0.0) / top_mass)) for i, s in fused]
                fused.sort(key=lambda x: -x[1])
            return fused

        first = ranking(query, query_vector)
        paths: dict[int, Path] = {}
        if cfg.hop_weight > 0 and first:
            first, paths = self.hop(ctx, view, first, seeds, query_vector)
        ranked, detail = refine(ctx, turn_space, query, query_vector, first, ranking)
        hits = ctx.hits_from_items(ranked[:k], self.name)
        keys = {
            "seeds": seeds.weights,
            "activated": concepts[:10],
            "keys_generated": seeds.generated,
            "keys_outside": seeds.outside,
        }
        if seeds.free is not None:
            keys["free_keywords"] = seeds.free
        for hit, path in zip(hits, path_details(ctx, hits, paths), strict=True):
            hit.detail = {**hit.detail, **hit_detail(detail, hit), "concepts": keys}
            if path is not None:
                hit.detail["hop"] = path
        return hits

    def hop(
        self,
        ctx: EngineContext,
        view: Recall,
        first: list[tuple[int, float]],
        seeds: Seeds,
        query_vector: np.ndarray,
    ) -> tuple[list[tuple[int, float]], dict[int, Path]]:
        """The second hop (engines/hop.py) over the turn space, from the question's values and names."""
        settings = HopSettings.of(self.config)
        anchors, values = seeds.anchors or [], seeds.values or []
        return hop_ranking(ctx, self.space("turn"), view.goals, first, anchors, values, query_vector, settings)


VARIANTS: dict[str, ScgConfig] = {
    "scg": ScgConfig(),
    "scg-llm": ScgConfig(model=True),
    "scg-noconstraint": ScgConfig(constrained=False),
    "scg-noassim": ScgConfig(assimilate=False),
    "scg-hop0": ScgConfig(hops=0),
    "scg-hop2": ScgConfig(hops=2),
}


def variant(name: str, **overrides: Any) -> ScgEngine:
    """A named SCG-MEM variant (model-free default, model mode, the ablations), under a name that records any
    overrides (`variant_name`, e.g. "scg[temperature=5.0]")."""
    return ScgEngine(replace(VARIANTS[name], **overrides), name=variant_name(name, overrides))


__all__ = ["VARIANTS", "ScgConfig", "ScgEngine", "variant"]
