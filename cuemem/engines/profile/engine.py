"""Engine `profile`: hybrid preference memory (docs/design.md design 3; the "Long-Horizon Context Retention … Hybrid
Memory Systems and Vector Storage" report).

Ingest keeps every turn (one item per turn, with its vector, for the turn ranking) and reads typed records out of
each speaker's own words: pattern rules always (`rules`), the model too where configured (`extract`). Each
candidate is consolidated (`consolidate`): it reinforces an equivalent record, supersedes the one it contradicts
(the old value kept as history), or starts a record. Records live in a backend (`backends`: the store, or
ChromaDB). A question is answered from records scored by similarity and recency, fused with the turns' own ranking;
a record's hit cites its evidence turns, so recall is measured like every engine's. `profile()` returns a
subject's current preferences and profile as a dict.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ...config import beside_store
from ...index.dates import parse_timestamp
from ...index.fusion import reciprocal_rank_fusion
from ...index.standing import bears_on_self
from ...store.base import DerivedSpec
from ...types import Hit, Turn
from ..base import BaseEngine, EngineContext, variant_name
from ..baselines import embed_missing, fused_ranking, index_turns, prepare_embeddings
from ..current import hit_detail
from ..refine import refine
from .backends import ChromaRecords, RecordBackend, StoreRecords
from .consolidate import Outcome, Profile, Thresholds, consolidate, match_text
from .extract import model_candidates
from .records import STANDING_TYPES, Candidate, Record, normalise
from .rules import MAX_SPAN, RuleTable, load_rules
from .state import ProfileConfig

log = logging.getLogger(__name__)
REQUEST = re.compile(
    r"^(?:can you|could you|would you|please|help me|i need|i want|i'd like|i would like|"
    r"how (?:do|can|should) i|what (?:should|can) i|any (?:tips|ideas|suggestions))\b",
    re.IGNORECASE,
)
TOOL_SPEAKERS = frozenset({"tool", "function"})
# Questions records are for: about the asker's own state, a preference, a change, or asking for advice.
PERSONAL = re.compile(
    r"\b(?:i|my|me|mine|i'm|i've|i'd|myself|prefer\w*|favou?rite|like|likes|love|enjoy\w*|recommend\w*|"
    r"suggest\w*|advice|tips|now|currently|current|these days|anymore|still|usually)\b",
    re.IGNORECASE,
)


class ProfileEngine(BaseEngine):
    """Typed records from rules and the model, consolidated by meaning, recency and confidence, searched beside
    the turns."""

    uses_embedder = True
    embeds_ahead = True

    def __init__(self, config: ProfileConfig | None = None, name: str = "profile") -> None:
        self.config = config or ProfileConfig()
        self.config.check()
        self.name = name
        self._rules: RuleTable | None = None
        self._chroma: dict[str, ChromaRecords] = {}

    def space(self, kind: str) -> str:
        return f"{self.name}:{kind}"

    @property
    def derived(self) -> DerivedSpec:
        """Consolidation depends on the order of the whole stream: a delete drops the namespace's records (and
        their history) and rebuilds them from the log, so no record, value or history entry keeps a deleted turn."""
        return DerivedSpec(self.name, (self.space("turn"), self.space("record")), "rebuild")

    @property
    def uses_llm(self) -> bool:
        return self.config.model

    @property
    def rules(self) -> RuleTable:
        if self._rules is None:
            self._rules = load_rules(self.config.rules or None)
        return self._rules

    def backend(self, ctx: EngineContext) -> RecordBackend:
        if self.config.backend == "sqlite":
            return StoreRecords(self.name, self.space("record"))
        path = self.config.chroma_path or str(beside_store(ctx.settings.db, ".chroma"))
        if path not in self._chroma:
            self._chroma[path] = ChromaRecords(Path(path).expanduser(), self.name)
        return self._chroma[path]

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Embed the turns' documents ahead of ingest, outside the write lock (the cache serves `ingest`)."""
        prepare_embeddings(ctx, turns)

    # ------------------------------------------------------------------ ingest
    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        """Store the turns raw, then extract and consolidate the records their speakers state."""
        index_turns(ctx, turns, self.space("turn"))
        embed_missing(ctx, self.space("turn"), turns)
        backend = self.backend(ctx)
        if not ctx.store.kv_get(ctx.ns, self.name, "built"):  # a first build, or a rebuild after a delete
            backend.drop(ctx)
            ctx.store.kv_set(ctx.ns, self.name, "built", True)
        profile = backend.load(ctx)
        fresh = [t for t in turns if (t.seq or 0) > profile.upto]
        if not fresh:
            return
        changed: dict[str, Record] = {}
        similar = Similar(ctx)
        limits = Thresholds(self.config.same, self.config.update, self.config.key_same)
        stats = ctx.store.kv_get(ctx.ns, self.name, "stats") or {}
        for turn in fresh:
            for candidate in self.candidates(ctx, turn, profile, stats):
                outcome: Outcome = consolidate(profile, candidate, similar, limits)
                changed[outcome.record.id] = outcome.record
                stats[outcome.action] = stats.get(outcome.action, 0) + 1
            if (turn.seq or 0) > profile.upto:
                profile.upto, profile.upto_id = turn.seq or 0, turn.id
        records = list(changed.values())
        _, vectors = ctx.embed([r.render() for r in records]) if records else ([], np.zeros((0, 1), np.float32))
        backend.save(ctx, profile, records, vectors)
        ctx.store.kv_set(ctx.ns, self.name, "stats", stats)

    def candidates(self, ctx: EngineContext, turn: Turn, profile: Profile, stats: dict[str, int]) -> list[Candidate]:
        """What one turn states: rule matches, the model's fact (model mode), the task it asks for, a tool's result."""
        speaker = (turn.speaker or "").strip()
        when = _iso(turn.timestamp)
        if speaker.lower() in TOOL_SPEAKERS:
            name = normalise(str(turn.metadata.get("tool") or "tool"))
            return [
                Candidate(
                    "tool_result",
                    f"{name} result",
                    turn.text[:MAX_SPAN],
                    0.9,
                    turn.seq or 0,
                    turn.id,
                    speaker,
                    turn.text[:MAX_SPAN],
                    when,
                    source="tool",
                    fixed_key=True,
                )
            ]
        if speaker.lower() in self.config.skipped:
            return []
        found = self.rules.extract(turn)
        for c in found:
            c.time = when
        if self.config.model:
            mine = sorted((r for r in profile.records.values() if r.subject == speaker), key=lambda r: -r.last_seen)
            keys = [r.key for r in mine if r.fixed_key and r.type in ("preference", "profile", "episodic")]
            window = self._window(ctx, turn)
            extra, why = model_candidates(ctx.llm, window, speaker, keys, when)
            if why:
                stats[f"model_{why.split(':')[0]}"] = stats.get(f"model_{why.split(':')[0]}", 0) + 1
            if why.startswith("failed"):  # the turn goes on with the rules' records; `cuemem stats` counts these
                log.warning("profile: the model's extraction failed on turn %s, rules only: %s", turn.id, why)
            taken = {normalise(c.value) for c in found}
            found += [c for c in extra if normalise(c.value) not in taken]
        request = next((s.strip() for s in re.split(r"(?<=[.!?])\s+", turn.text) if REQUEST.match(s.strip())), "")
        if request:  # the task state of this exchange: the latest thing asked for in the session
            found.append(
                Candidate(
                    "summary",
                    normalise(f"task {turn.session_id or 'chat'}"),
                    request[:MAX_SPAN],
                    0.6,
                    turn.seq or 0,
                    turn.id,
                    speaker,
                    request[:MAX_SPAN],
                    when,
                    update=True,
                    source="request",
                    fixed_key=True,
                )
            )
        return found

    def _window(self, ctx: EngineContext, turn: Turn) -> list[Turn]:
        """The turn and the few before it in its session (model mode reads them together)."""
        earlier = [
            t
            for t in ctx.store.iter_turns(ctx.ns, after_seq=max(0, (turn.seq or 0) - 4 * self.config.window))
            if (t.seq or 0) < (turn.seq or 0) and t.session_id == turn.session_id
        ]
        return [*earlier[-(self.config.window - 1) :], turn] if self.config.window > 1 else [turn]

    # ------------------------------------------------------------------ reading
    def stats(self, ctx: EngineContext) -> dict[str, int]:
        """Records by type, consolidation outcomes, model outcomes (model mode)."""
        profile = self.backend(ctx).load(ctx)
        out: dict[str, int] = {"records": len(profile.records)}
        for record in profile.records.values():
            out[f"records_{record.type}"] = out.get(f"records_{record.type}", 0) + 1
            out["history_values"] = out.get("history_values", 0) + len(record.history)
        for key, value in (ctx.store.kv_get(ctx.ns, self.name, "stats") or {}).items():
            out[str(key)] = int(value)
        return out

    def records(
        self, ctx: EngineContext, query: str | None = None, *, types: Sequence[str] | None = None, k: int | None = None
    ) -> list[tuple[Record, float]]:
        """The namespace's records, by relevance to `query` (similarity and recency) or, without one, all of them
        newest first; `types` limits them to some record types."""
        kinds = tuple(types) if types else self.config.searched_types
        if query is None:
            profile = self.backend(ctx).load(ctx)
            chosen = sorted((r for r in profile.records.values() if r.type in kinds), key=lambda r: -r.last_seen)
            return [(r, 1.0) for r in chosen[:k]]
        return self.scored_records(ctx, ctx.embed_query(query), kinds, k or self.config.record_depth)

    def scored_records(
        self, ctx: EngineContext, vector: np.ndarray, types: Sequence[str], k: int, floor: float | None = None
    ) -> list[tuple[Record, float]]:
        """Records by similarity × recency: score = sim · (1 − w + w · 2^(−age / half-life)), age in days before
        the question (ctx.now, else the namespace's latest dated turn); undated records do not decay. A record
        whose similarity is below `floor` (default: the config's) is left out."""
        floor = self.config.floor if floor is None else floor
        found = self.backend(ctx).search(ctx, vector, max(k * 3, k), types)
        now = _reference_time(ctx)
        w, half = self.config.recency, self.config.half_life
        scored = []
        for record, sim in found:
            if sim < floor:
                continue
            decay = 1.0
            when = _date(record.time)
            if now is not None and when is not None:
                decay = math.pow(2.0, -max(0.0, (now - when).days) / half)
            scored.append((record, sim * (1 - w + w * decay)))
        scored.sort(key=lambda x: -x[1])
        return scored[:k]

    def profile(self, ctx: EngineContext, subject: str | None = None) -> dict[str, Any]:
        """A subject's current records as a dict: preferences and profile facts by key (value, confidence, since,
        evidence, earlier values), dated facts and task state as lists. The subject defaults to the speaker with
        the most records."""
        records = list(self.backend(ctx).load(ctx).records.values())
        counts: dict[str, int] = {}
        for r in records:
            counts[r.subject] = counts.get(r.subject, 0) + 1
        subject = subject or (max(counts, key=lambda s: (counts[s], s)) if counts else "")
        out: dict[str, Any] = {
            "subject": subject,
            "preferences": {},
            "profile": {},
            "episodic": [],
            "task_state": [],
            "tool_results": {},
            "standing": [],
        }
        for r in sorted(records, key=lambda r: r.last_seen):
            if r.subject != subject and r.type != "tool_result":  # tool results belong to the conversation
                continue
            entry = {
                "value": r.value,
                "polarity": "positive" if r.polarity > 0 else "negative",
                "confidence": round(r.confidence, 3),
                "since": r.first_time or r.time,
                "evidence": r.all_turns(),
                "history": [h["value"] for h in r.history],
            }
            if r.type == "preference":
                out["preferences"][r.key] = entry
            elif r.type == "profile":
                out["profile"][r.key] = entry
            elif r.type == "episodic":
                out["episodic"].append({"key": r.key, **entry})
            elif r.type == "summary":
                out["task_state"].append({"key": r.key, **entry})
            elif r.type in STANDING_TYPES:
                out["standing"].append({"type": r.type, **entry})
            else:
                out["tool_results"][r.key] = entry
        return out

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        """Three rankings fused (RRF): the slot records, the standing facts (a message about oneself only: issue
        34), and the turns."""
        cfg = self.config
        vector = ctx.embed_query(query)
        records = self.scored_records(ctx, vector, cfg.slot_types, cfg.record_depth)
        record_hits = [self._hit(ctx, r, s) for r, s in records]
        standing_hits: list[Hit] = []
        if cfg.standing_types and cfg.standing_weight > 0 and bears_on_self(query, cfg.standing_gate):
            found = self.scored_records(ctx, vector, cfg.standing_types, cfg.standing_depth, cfg.standing_floor)
            standing_hits = [self._hit(ctx, r, s) for r, s in found]
        if cfg.records_only:
            return sorted([*record_hits, *standing_hits], key=lambda h: -h.score)[:k]
        weight = cfg.record_weight if PERSONAL.search(query) else cfg.other_weight
        if weight <= 0:
            record_hits = []
        space, depth = self.space("turn"), max(cfg.depth, k)
        ranked, detail = refine(
            ctx,
            space,
            query,
            vector,
            fused_ranking(ctx, space, query, vector, depth),
            lambda text, v: fused_ranking(ctx, space, text, v, depth),
            standing=False,  # its own records of the standing facts are fused below
        )
        turn_hits = ctx.hits_from_items(ranked[: max(k, depth)], self.name)
        for hit in turn_hits:
            hit.detail = {**hit.detail, **hit_detail(detail, hit)}
        fused = reciprocal_rank_fusion(
            [
                [f"r{i}" for i in range(len(record_hits))],
                [f"s{i}" for i in range(len(standing_hits))],
                [f"t{i}" for i in range(len(turn_hits))],
            ],
            k=ctx.settings.rrf_k,
            weights=(weight, cfg.standing_weight, 1.0),
        )
        lists = {"r": record_hits, "s": standing_hits, "t": turn_hits}
        out: list[Hit] = []
        shown: set[str] = set()
        for key, score in fused:
            hit = lists[key[0]][int(key[1:])]
            if set(hit.turn_ids) <= shown:
                continue  # every turn it cites is already cited by a better hit: it would only repeat them
            shown.update(hit.turn_ids)
            out.append(replace(hit, score=float(score)))
            if len(out) == k:
                break
        return out

    def _hit(self, ctx: EngineContext, record: Record, score: float) -> Hit:
        text = record.render()
        detail = {
            "profile": {
                "record": record.id,
                "type": record.type,
                "key": record.key,
                "value": record.value,
                "confidence": round(record.confidence, 3),
                "polarity": record.polarity,
                "history": [h["value"] for h in record.history],
                "evidence": record.all_turns(),
                "sources": record.sources,
            },
            "date": record.time,
        }
        return Hit(
            text=text,
            score=score,
            turn_ids=record.cited(self.config.cite),
            tokens=ctx.tokens.count(text),
            engine=self.name,
            detail=detail,
        )

    def forget(self, ctx: EngineContext) -> None:
        """After a delete: the backend drops the namespace's records now (they are rebuilt from the log)."""
        self.backend(ctx).drop(ctx)


class Similar:
    """Cosine of two short texts' embeddings, each text embedded once per ingest call (not cached in the store:
    these texts quote turns, and a delete must not leave their vectors behind)."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.vectors: dict[str, np.ndarray] = {}

    def __call__(self, a: str, b: str) -> float:
        if a == b:
            return 1.0
        missing = [t for t in dict.fromkeys((a, b)) if t not in self.vectors]
        if missing:
            _, vectors = self.ctx.embed(missing)
            for text, v in zip(missing, vectors, strict=True):
                self.vectors[text] = v / (np.linalg.norm(v) or 1.0)
        return float(self.vectors[a] @ self.vectors[b])


def _iso(timestamp: str | None) -> str | None:
    parsed = parse_timestamp(timestamp) if timestamp else None
    return parsed.isoformat() if parsed else None


def _date(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).replace(tzinfo=None)
    except ValueError:
        return None


def _reference_time(ctx: EngineContext) -> datetime | None:
    """When the question is asked: ctx.now, else the latest dated turn of the namespace."""
    if ctx.now:
        parsed = parse_timestamp(ctx.now)
        if parsed:
            return parsed.replace(tzinfo=None)
    last = ctx.store.last_seq(ctx.ns)
    latest = None
    for t in ctx.store.iter_turns(ctx.ns, after_seq=max(0, last - 50)):
        parsed = parse_timestamp(t.timestamp) if t.timestamp else None
        if parsed:
            latest = parsed.replace(tzinfo=None)
    return latest


VARIANTS: dict[str, ProfileConfig] = {
    "profile": ProfileConfig(),
    "profile-llm": ProfileConfig(model=True),
}


def variant(name: str, **overrides: Any) -> ProfileEngine:
    """A named profile variant under a name that records any overrides (e.g. "profile[backend=chroma]")."""
    return ProfileEngine(replace(VARIANTS[name], **overrides), name=variant_name(name, overrides))


__all__ = ["VARIANTS", "ProfileConfig", "ProfileEngine", "match_text", "variant"]
