"""Engine `episodic`: episodic context reconstruction (docs/design.md design 4; E-mem, arXiv 2601.21714).

Ingest keeps every turn raw (one item per turn, with its vector) and cuts the log into overlapping token windows
(`episodes.segment`); each closed window gets a summary (extractive, or model-made in `summary="model"`), stored
as an item citing the window's turns. A question activates at most `max_windows` windows through three pathways
(`routing`), each activated window's assistant extracts evidence from its raw turns (`assistants`), and `search`
returns the evidence turns first (then, with `fill`, the rest of the question's fused ranking), so recall is
measured like every engine's. `answer` runs the master (`master`): evidence in time order, revisions resolved,
answered by the reader with cited turn ids. With `adaptive`, a cheap router sends confident, simple questions down
the fast path (System 1: the fused ranking straight to the reader) and the rest down the episodic path (System 2).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...index.bm25 import BM25Index
from ...index.budget import pack
from ...index.fusion import reciprocal_rank_fusion
from ...llm import LLMClient, LLMError
from ...store.base import DerivedSpec, NewItem
from ...types import Answer, Hit, Retrieval, Turn
from ..base import BaseEngine, EngineContext, Reader, variant_name
from ..baselines import embed_missing, index_turns, prepare_embeddings
from ..current import hit_detail
from ..refine import refine, turn_table
from ..structure import context_block, session_header
from .assistants import Evidence, around, local_evidence, model_evidence, says_nothing
from .episodes import extractive_summary, segment
from .master import Statement, revision_notes, revisions
from .routing import PATHWAYS, Activation, route_union, route_weighted
from .state import EpisodicConfig

log = logging.getLogger(__name__)
Ranked = list[tuple[int, float]]

SUMMARY_PROMPT = "Summarise this part of a conversation in one or two sentences: who talks, about what, and when."
# System 1 is for questions that ask for one stated fact; these forms need the episode around it (time, reasons,
# counts, comparisons, inference).
DEEP_FORM = re.compile(
    r"\b(when|how long|how many|how often|why|would|could|likely|before|after|first|last|since|ago|both|"
    r"compare|change[sd]?|differ\w*|all|every|ever)\b",
    re.IGNORECASE,
)


@dataclass
class Episodes:
    """The namespace's windows at one moment, with what routing reads (cached until the next write or delete)."""

    items: list[int]  # turn items in log order
    windows: list[range]  # positions in `items`
    member: dict[int, list[int]]  # turn item -> the windows holding it
    summaries: list[str]
    kinds: list[str]  # "extractive" | "model" | "extractive (model failed)" | "extractive (open window)"
    summary_vectors: np.ndarray
    summary_index: BM25Index
    centroids: np.ndarray | None = None

    def members(self, window: int) -> list[int]:
        return [self.items[p] for p in self.windows[window]]


class EpisodicEngine(BaseEngine):
    """E-mem: raw overlapping episodes, three-pathway routing, local evidence per window, a master that answers."""

    uses_embedder = True
    embeds_ahead = True

    def __init__(self, config: EpisodicConfig | None = None, name: str = "episodic") -> None:
        self.config = config or EpisodicConfig()
        self.config.check()
        self.name = name

    def space(self, kind: str) -> str:
        return f"{self.name}:{kind}"

    @property
    def derived(self) -> DerivedSpec:
        """A delete shifts every later window's boundaries: the engine's turns, windows and summaries in the
        namespace are dropped and rebuilt from the log, so no window or summary holds a deleted turn."""
        return DerivedSpec(self.name, (self.space("turn"), self.space("window")), "rebuild")

    @property
    def uses_llm(self) -> bool:
        return self.config.model or self.config.summary == "model"

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Embed the turns' documents ahead of ingest, outside the write lock (the cache serves `ingest`)."""
        prepare_embeddings(ctx, turns)

    def stats(self, ctx: EngineContext) -> dict[str, int]:
        """Turns, windows (closed and open), summaries by kind, unparsed timestamps."""
        view = self.episodes(ctx)
        out = {
            "turns": len(view.items),
            "windows": len(view.windows),
            "unparsed_timestamps": turn_table(ctx, self.space("turn")).unparsed,
        }
        for kind in view.kinds:
            key = "summaries_" + kind.split(" ")[0] + ("_fallback" if "failed" in kind else "")
            out[key] = out.get(key, 0) + 1
        return out

    # ------------------------------------------------------------------ ingest
    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Store the new turns raw, then summarise every window that has closed (the last one stays open)."""
        turn_space = self.space("turn")
        index_turns(ctx, turns, turn_space)
        embed_missing(ctx, turn_space, turns)
        order = ctx.store.items_in_order(ctx.ns, turn_space)
        windows = segment([n for _, n in order], self.config.window, self.config.overlap)
        closed = windows[:-1]
        if not closed:
            return
        keys = [self.window_key(w) for w in closed]
        have = ctx.store.item_ids(ctx.ns, self.space("window"), keys)
        todo = [(n, w) for n, (w, key) in enumerate(zip(closed, keys, strict=True)) if key not in have]
        for n, w in todo:
            self._summarise(ctx, n, w, [order[p][0] for p in w])

    @staticmethod
    def window_key(span: range) -> str:
        """A window's item key: its turns' positions in the log ("0-12"), the same in any store holding the
        same log (a delete rebuilds every window)."""
        return f"{span.start}-{span.stop}"

    def _summarise(self, ctx: EngineContext, number: int, span: range, members: list[int]) -> None:
        text, kind = self.summary(ctx, members)
        items = ctx.store.get_items(ctx.ns, members)
        seqs = sorted(ctx.store.seqs_of(ctx.ns, [t for i in members if i in items for t in items[i].turn_ids]).values())
        key = self.window_key(span)
        ctx.store.put_items(
            ctx.ns,
            self.space("window"),
            [
                NewItem(
                    key, text, {"window": number, "summary": kind, "turns": len(members)}, seqs, ctx.tokens.count(text)
                )
            ],
        )
        ids = ctx.store.item_ids(ctx.ns, self.space("window"), [key])
        if key in ids:
            hashes, vectors = ctx.embed([text])
            ctx.store.put_vectors(ctx.ns, self.space("window"), ctx.embedder.name, [(ids[key], hashes[0], vectors[0])])

    def summary(self, ctx: EngineContext, members: list[int], *, closed: bool = True) -> tuple[str, str]:
        """A window's summary and its kind: model-made where `summary="model"` (closed windows only; a failing
        model falls back to the extractive summary, and says so), otherwise extractive."""
        items = ctx.store.get_items(ctx.ns, members)
        present = [i for i in members if i in items]
        if closed and self.config.summary == "model":
            hits = ctx.hits_from_items([(i, 0.0) for i in present], self.name)
            block, _ = context_block(hits)
            try:
                text = ctx.llm.chat(
                    [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": block}], max_tokens=64
                ).text
                text = " ".join(text.split())
                if text:
                    return text, "model"
            except LLMError as exc:
                log.warning("%s: a window summary fell back to extractive: %s", self.name, exc)
            kind = "extractive (model failed)"
        else:
            kind = "extractive" if closed else "extractive (open window)"
        vectors = ctx.store.item_vectors(ctx.ns, ctx.embedder.name, present)
        dim = next((len(v) for v in vectors.values()), 1)
        matrix = np.array([vectors.get(i, np.zeros(dim, dtype=np.float32)) for i in present], dtype=np.float32)
        metas = [items[i].meta for i in present]
        lines = [
            f"{m.get('speaker', '')}: {items[i].text}" if m.get("speaker") else items[i].text
            for i, m in zip(present, metas, strict=True)
        ]
        dates = [session_header(m) if m.get("timestamp") else "" for m in metas]
        return extractive_summary(lines, [str(m.get("speaker") or "") for m in metas], dates, matrix), kind

    # ------------------------------------------------------------------ the windows at query time
    def episodes(self, ctx: EngineContext) -> Episodes:
        """Windows, summaries and their indexes of one moment, cached until the next write or delete."""
        store, ns = ctx.store, ctx.ns
        name = f"{self.name}:episodes"
        with ctx.indexes.lock_for(ctx.ns), store.snapshot():
            version = ctx.indexed_version(self.name)
            cached = ctx.indexes.view(ns, name, version)
            if isinstance(cached, Episodes):
                return cached
            order = store.items_in_order(ns, self.space("turn"))
            items = [i for i, _ in order]
            windows = segment([n for _, n in order], self.config.window, self.config.overlap)
            member: dict[int, list[int]] = {}
            for w, span in enumerate(windows):
                for p in span:
                    member.setdefault(items[p], []).append(w)
            stored = {}
            window_items = [i for i, _ in store.items_in_order(ns, self.space("window"))]
            found = store.get_items(ns, window_items)
            stored_vectors = store.item_vectors(ns, ctx.embedder.name, window_items)
            for i, it in found.items():
                stored[it.key] = (it.text, str(it.meta.get("summary", "extractive")), stored_vectors.get(i))
            summaries, kinds, vectors = [], [], []
            for w, span in enumerate(windows):
                members = [items[p] for p in span]
                key = self.window_key(span)
                if key in stored and stored[key][2] is not None and w < len(windows) - 1:
                    text, kind, vec = stored[key]
                else:  # the open window (or one not summarised yet): extractive, computed now, not stored
                    text, kind = self.summary(ctx, members, closed=False)
                    if w < len(windows) - 1:
                        kind = "extractive"
                    vec = ctx.embed([text])[1][0]
                summaries.append(text)
                kinds.append(kind)
                vectors.append(np.asarray(vec, dtype=np.float32))
            index = BM25Index()
            for w, text in enumerate(summaries):
                index.add(w, text)
            dim = len(vectors[0]) if vectors else 1
            view = Episodes(
                items,
                windows,
                member,
                summaries,
                kinds,
                np.array(vectors, dtype=np.float32).reshape(len(vectors), dim),
                index,
            )
            ctx.indexes.keep_view(ns, name, version, view)
            return view

    def centroids(self, ctx: EngineContext, view: Episodes) -> np.ndarray:
        """Unit centroids of the windows' turn vectors (the dense pathway's `window_dense="centroid"`)."""
        if view.centroids is None:
            vectors = ctx.store.item_vectors(ctx.ns, ctx.embedder.name, view.items)
            dim = view.summary_vectors.shape[1]
            rows = []
            for w in range(len(view.windows)):
                vs = [vectors[i] for i in view.members(w) if i in vectors]
                c = np.mean(vs, axis=0) if vs else np.zeros(dim, dtype=np.float32)
                rows.append(c / max(float(np.linalg.norm(c)), 1e-12))
            view.centroids = np.array(rows, dtype=np.float32)
        return view.centroids

    # ------------------------------------------------------------------ routing
    def pathway_scores(
        self, ctx: EngineContext, view: Episodes, query: str, vector: np.ndarray, lexical: Ranked, semantic: Ranked
    ) -> dict[str, dict[int, float]]:
        """Each pathway's score per window: best-turn BM25, best-turn cosine (or centroid cosine), and the summary
        match (reciprocal-rank fusion of BM25 over the summaries and the summary vectors' cosine)."""
        n = len(view.windows)
        scores: dict[str, dict[int, float]] = {"dense": {}, "bm25": {}, "summary": {}}
        for item, s in lexical:
            for w in view.member.get(item, ()):
                scores["bm25"][w] = max(scores["bm25"].get(w, 0.0), float(s))
        if self.config.window_dense == "centroid":
            cos = self.centroids(ctx, view) @ vector
            scores["dense"] = {w: float(cos[w]) for w in range(n) if cos[w] > 0}
        else:
            for item, s in semantic:
                for w in view.member.get(item, ()):
                    scores["dense"][w] = max(scores["dense"].get(w, float("-inf")), float(s))
            scores["dense"] = {w: s for w, s in scores["dense"].items() if s > 0}
        summary_lexical = [w for w, s in view.summary_index.search(query, n) if s > 0] if n else []
        cos = view.summary_vectors @ vector if n else np.zeros(0)
        summary_dense = [w for w in np.argsort(-cos, kind="stable") if cos[w] > 0]
        fused = reciprocal_rank_fusion([summary_lexical, [int(w) for w in summary_dense]], k=ctx.settings.rrf_k)
        scores["summary"] = {int(w): s for w, s in fused}
        return scores

    def route(self, scores: dict[str, dict[int, float]], windows: int) -> list[Activation]:
        cfg = self.config
        pathways = cfg.enabled_pathways
        if cfg.routing == "weighted":
            return route_weighted(scores, windows, cfg.max_windows, strong_bm25=cfg.strong_bm25, pathways=pathways)
        return route_union(scores, cfg.max_windows, pathways)

    def fast_path(self, query: str, activated: list[Activation], scores: dict[str, dict[int, float]]) -> bool:
        """Adaptive depth: System 1 when the question asks for one stated fact (no time, count, reason or
        inference form) and routing is confident (the dense and BM25 pathways' best windows agree)."""
        if DEEP_FORM.search(query) or not activated:
            return False
        best = {
            p: max(scores.get(p, {}).items(), key=lambda kv: (kv[1], -kv[0]), default=(None, 0.0))[0]
            for p in ("dense", "bm25")
        }
        return best["dense"] is not None and best["dense"] == best["bm25"]

    # ------------------------------------------------------------------ retrieval: routing + assistants
    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        cfg = self.config
        view = self.episodes(ctx)
        if k <= 0 or not view.windows:
            return []
        space, model = self.space("turn"), ctx.embedder.name
        vector = ctx.embed_query(query)
        depth = max(cfg.depth, k)
        lexical = ctx.bm25(space, query, depth)
        semantic = ctx.nearest(space, model, vector, depth)

        def fused(text: str, v: np.ndarray) -> list[tuple[int, float]]:
            lists = (
                ([i for i, _ in lexical], [i for i, _ in semantic])
                if text == query
                else ([i for i, _ in ctx.bm25(space, text, depth)], [i for i, _ in ctx.nearest(space, model, v, depth)])
            )
            return [
                (int(i), s)
                for i, s in reciprocal_rank_fusion(lists, k=ctx.settings.rrf_k, weights=ctx.fusion_weights())
            ]

        ranked, detail = refine(ctx, space, query, vector, fused(query, vector), fused)
        scores = self.pathway_scores(ctx, view, query, vector, lexical, semantic)
        activated = self.route(scores, len(view.windows))
        routing = [
            {"window": a.window, "pathways": a.pathways, "scores": a.scores, "summary": view.kinds[a.window]}
            for a in activated
        ]
        if cfg.adaptive and self.fast_path(query, activated, scores):
            hits = ctx.hits_from_items(ranked[:k], self.name)
            for hit in hits:
                hit.detail = {
                    **hit.detail,
                    **hit_detail(detail, hit),
                    "episodic": {"system": 1, "evidence": False},
                    "routing": routing,
                }
            return hits
        evidence = self.assistants(ctx, view, query, activated, ranked)
        return self.evidence_hits(ctx, view, ranked, evidence, activated, k, {**detail, "routing": routing})

    def assistants(
        self,
        ctx: EngineContext,
        view: Episodes,
        query: str,
        activated: list[Activation],
        ranked: list[tuple[int, float]],
    ) -> list[Evidence]:
        """Each activated window's evidence, in activation order: model mode runs the assistants concurrently
        where the backend takes concurrent calls (an OpenAI-compatible endpoint), one after another otherwise."""
        cfg = self.config
        rank = {item: r for r, (item, _) in enumerate(ranked)}
        local = [
            local_evidence(a.window, view.members(a.window), rank, cfg.evidence, cfg.neighbours) for a in activated
        ]
        if not cfg.model:
            return local
        client = ctx.llm
        stage, tally = client.current_stage, client.current_tally
        shortlists = {
            a.window: local_evidence(a.window, view.members(a.window), rank, cfg.shortlist, 0).anchors
            for a in activated
        }

        def run(fallback: Evidence) -> Evidence:
            with client.stage(stage), client.tally(tally) if tally is not None else nullcontext():
                return self._model_assistant(ctx, client, view, query, fallback, shortlists[fallback.window])

        workers = max(1, min(len(local), int(getattr(client.backend, "concurrency", 1))))
        if workers == 1:
            return [run(e) for e in local]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cuemem-assistant") as pool:
            return list(pool.map(run, local))

    def _model_assistant(
        self,
        ctx: EngineContext,
        client: LLMClient,
        view: Episodes,
        query: str,
        fallback: Evidence,
        shortlist: list[int],
    ) -> Evidence:
        """The model reads the whole raw window, notes what answers the question, and chooses the supporting
        turns among the window's `shortlist` best in the question's ranking, offered in that order (a small
        model's choice among all of a window's ids leans to the first ids offered)."""
        cfg = self.config
        members = view.members(fallback.window)
        hits = ctx.hits_from_items([(i, 0.0) for i in members], self.name)
        block, ids = context_block(hits)
        item_of = ctx.store.item_ids(ctx.ns, self.space("turn"), ids)  # turn items are keyed by turn id
        turn_of = {item: turn for turn, item in item_of.items()}
        options = [turn_of[i] for i in shortlist if i in turn_of] or ids
        try:
            note, chosen = model_evidence(
                client,
                block,
                options,
                query,
                per_window=cfg.evidence,
                margin=cfg.margin,
                note_tokens=cfg.note_tokens,
                now=ctx.now,
            )
        except LLMError as exc:
            log.warning("%s: an assistant fell back to model-free evidence: %s", self.name, exc)
            return replace(fallback, error=str(exc)[:200])
        anchors = [item_of[t] for t in chosen if t in item_of]  # chosen under constraint: always the window's
        return Evidence(
            fallback.window, anchors, around(members, anchors, cfg.neighbours), note, found=not says_nothing(note)
        )

    def evidence_hits(
        self,
        ctx: EngineContext,
        view: Episodes,
        ranked: list[tuple[int, float]],
        evidence: list[Evidence],
        activated: list[Activation],
        k: int,
        detail: dict[str, Any],
    ) -> list[Hit]:
        """Hits: the anchors of windows that found something, then the other windows' anchors (each group in the
        question's fused ranking order), then (with `fill`) the rest of the fused ranking, where the anchors'
        neighbours fall in it (those it misses last); without `fill`, the neighbours after the anchors."""
        score = dict(ranked)
        position = {item: p for p, item in enumerate(view.items)}
        order: list[tuple[int, Evidence, str]] = []
        seen: set[int] = set()

        def take(item: int, ev: Evidence, role: str) -> None:
            if item not in seen:
                seen.add(item)
                order.append((item, ev, role))

        rank = {item: r for r, (item, _) in enumerate(ranked)}
        for group in ([e for e in evidence if e.found], [e for e in evidence if not e.found]):
            chosen = [(item, ev) for ev in group for item in ev.anchors]
            for item, ev in sorted(chosen, key=lambda a: rank.get(a[0], len(rank))):  # stable: choice order kept
                take(item, ev, "anchor")
        rows: list[tuple[int, float]] = [(item, 1.0 / (1 + n)) for n, (item, _, _) in enumerate(order)]
        anchors = set(seen)
        for ev in evidence:
            for item in ev.neighbours:
                take(item, ev, "neighbour")
        if self.config.fill:  # neighbours where the question's ranking puts them, the ones it missed last
            rows += [(item, score[item] * 1e-3) for item, _ in ranked if item not in anchors]
            listed = {item for item, _ in rows}
            rows += [(item, 0.0) for item, _, role in order if role == "neighbour" and item not in listed]
        else:
            rows += [(item, 0.0) for item, _, role in order if role == "neighbour"]
        hits = ctx.hits_from_items(rows[:k], self.name)
        item_of = ctx.store.item_ids(ctx.ns, self.space("turn"), [h.turn_ids[0] for h in hits])
        info: dict[int, tuple[Evidence | None, str]] = {item: (ev, role) for item, ev, role in order}
        windows = {a.window: a for a in activated}
        for hit in hits:
            item = item_of.get(hit.turn_ids[0], -1)
            source, role = info.get(item, (None, "fill"))
            episodic: dict[str, Any] = {
                "system": 2,
                "evidence": source is not None,
                "role": role,
                "seq": position.get(item, -1),
            }
            if source is not None:
                episodic.update(window=source.window, pathways=windows[source.window].pathways, found=source.found)
                if source.note:
                    episodic["note"] = source.note
                if source.error:
                    episodic["error"] = source.error
            hit.detail = {**hit.detail, **hit_detail(detail, hit), "episodic": episodic}
        return hits

    # ------------------------------------------------------------------ the master
    def answer(
        self,
        ctx: EngineContext,
        client: LLMClient,
        question: str,
        retrieval: Retrieval,
        *,
        reader: Reader,
        budget_tokens: int | None,
        now: str | None,
        abstain: str,
    ) -> Answer:
        """The master: the evidence turns that fit the budget (most relevant first), read in time order, the
        superseded statements of revised facts left out (and said so), the assistants' notes, answered by
        `reader` (Memory passes `cuemem.answer.read`), which cites only turns it was shown. System 1 questions
        and retrievals without evidence go to the reader as they are."""
        evidence = [h for h in retrieval.hits if h.detail.get("episodic", {}).get("evidence")]
        if not evidence:
            options = {} if budget_tokens is None else {"evidence_tokens": budget_tokens}
            return reader(client, question, retrieval, now=now, abstain=abstain, **options)
        superseded: dict[str, str] = {}
        if self.config.resolve:
            statements = [
                Statement(
                    h.turn_ids[0], int(h.detail["episodic"].get("seq", -1)), h.text, str(h.detail.get("speaker") or "")
                )
                for h in evidence
                if h.turn_ids
            ]
            superseded = revisions(statements, question)
        kept = [h for h in evidence if not (h.turn_ids and h.turn_ids[0] in superseded)]
        notes = revision_notes(superseded)
        seen_notes: set[str] = set()
        for h in retrieval.hits:
            ep = h.detail.get("episodic", {})
            note = ep.get("note")
            if note and ep.get("found") and note not in seen_notes and len(seen_notes) < self.config.max_windows:
                seen_notes.add(note)
                notes.append(f"window {ep.get('window')}: {note}")
        chosen = pack(kept, budget_tokens)  # the most relevant evidence fits first (rank order) ...
        chosen.sort(key=lambda h: int(h.detail["episodic"].get("seq", -1)))  # ... and is read in time order
        packed = replace(retrieval, hits=chosen, budget_tokens=budget_tokens)
        options = {} if budget_tokens is None else {"evidence_tokens": budget_tokens}
        return reader(client, question, packed, now=now, abstain=abstain, notes=notes, **options)


VARIANTS: dict[str, EpisodicConfig] = {
    "episodic": EpisodicConfig(),
    "episodic-llm": EpisodicConfig(model=True, summary="model", window=1024, max_windows=3, evidence=2),
    "episodic-adaptive": EpisodicConfig(
        model=True, summary="model", window=1024, max_windows=3, evidence=2, adaptive=True
    ),
    "episodic-weighted": EpisodicConfig(routing="weighted"),
    "episodic-nosummary": EpisodicConfig(pathways="dense,bm25"),
    "episodic-nodense": EpisodicConfig(pathways="bm25,summary"),
    "episodic-nobm25": EpisodicConfig(pathways="dense,summary"),
}


def variant(name: str, **overrides: Any) -> EpisodicEngine:
    """A named E-mem variant under a name that records any overrides (e.g. "episodic[window=1024]")."""
    return EpisodicEngine(replace(VARIANTS[name], **overrides), name=variant_name(name, overrides))


__all__ = ["PATHWAYS", "VARIANTS", "EpisodicConfig", "EpisodicEngine", "variant"]
