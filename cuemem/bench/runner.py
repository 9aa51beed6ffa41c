"""The benchmark protocol: each conversation (LoCoMo) or question haystack (LongMemEval) into a fresh namespace,
ingest, then retrieve every question within the token budget; per-conversation checkpoints make a run resumable.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..answer import abstains
from ..embed import make_embedder
from ..embed.cached import CachedEmbedder, cached_embedder
from ..errors import UnknownNamespaceError
from ..index.budget import pack, packed_tokens
from ..llm import LLMClient, Tally, make_client
from ..memory import INGEST_BATCH, Memory
from .datasets import LOCOMO_CATEGORIES, Conversation, load_locomo, load_longmemeval, split_of
from .judge import judge
from .metrics import bleu1, evidence_recall, locomo_f1, ndcg, set_f1, structured_scores, wrong_top
from .protocol import (
    ABSTAIN,
    DEPTH,
    KS,
    BenchConfig,
    RunSettings,
    engine_fingerprint,
    protocol,
    reusable,
    sample_questions,
)
from .report import summarize, write_report

__all__ = ["BenchConfig", "conversations", "run", "run_conversation"]


def conversations(config: BenchConfig) -> Iterator[Conversation]:
    """The run's conversations: those of its split (all without one) holding questions of `types` (all without
    them; other questions are left out), the first `limit` of them, each cut to `max_turns` when set."""
    if config.dataset in ("locomo", "came"):  # came: cuemem's look-alike conversations, in LoCoMo's format
        loaded = load_locomo(config.data)
    elif config.dataset == "longmemeval":
        loaded = load_longmemeval(config.data)
    else:
        raise ValueError(f"unknown dataset {config.dataset!r}: locomo, longmemeval or came")
    if config.split:
        loaded = (conv for conv in loaded if split_of(config.dataset, conv.id) == config.split)
    if config.types:
        wanted = (
            {LOCOMO_CATEGORIES.get(t, t) for t in config.types} if config.dataset == "locomo" else set(config.types)
        )
        loaded = (replace(conv, questions=[q for q in conv.questions if q.category in wanted]) for conv in loaded)
        loaded = (conv for conv in loaded if conv.questions)
    if config.limit is not None:
        loaded = itertools.islice(loaded, config.limit)
    return (prefix(conv, config.max_turns) for conv in loaded) if config.max_turns else loaded


def prefix(conv: Conversation, n: int) -> Conversation:
    """The conversation's first n turns and the questions whose evidence lies entirely within them (a slow,
    model-labelled engine is measured on a prefix; questions without evidence are dropped too)."""
    turns = conv.turns[:n]
    kept = {t.id for t in turns}
    questions = [q for q in conv.questions if q.evidence and set(q.evidence) <= kept]
    return replace(conv, turns=turns, questions=questions)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _write_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False))
    os.replace(tmp, path)


def run_conversation(
    memory: Memory, config: BenchConfig, conv: Conversation, judge_client: LLMClient | None = None
) -> dict[str, Any]:
    """Ingest one conversation into its own namespace and retrieve (and optionally answer) its questions."""
    user = f"{config.dataset}:{conv.id}" + (f"#{memory.engine.name}" if config.store else "")
    with contextlib.suppress(UnknownNamespaceError):  # left over from an interrupted run: start afresh
        memory.delete_all(user_id=user)
    llm_before = memory.llm.stats()  # the client loads no model until a call is made
    start = time.perf_counter()
    with memory.llm.stage("ingest"):  # model-assisted engines' calls count per ingested turn
        for i in range(0, len(conv.turns), INGEST_BATCH):
            memory.add(conv.turns[i : i + INGEST_BATCH], user_id=user, on_error="skip")
    ingest_seconds = time.perf_counter() - start
    questions = []
    # what reading the whole conversation once costs (speaker and words of every turn): full context's scale
    whole = sum(memory.tokens.count_many([f"{t.speaker}: {t.text}" for t in conv.turns])) if config.answer else 0
    answer_budget = memory.settings.answer_budget if config.answer_budget is None else config.answer_budget
    for q in sample_questions(conv.questions, config.max_questions):
        # Fullcontext *is* the budget (everything that fits); every other engine ranks DEPTH hits, then packs.
        search_budget = config.budget if memory.engine.name == "fullcontext" else None
        start = time.perf_counter()
        searched = Tally(memory.tokens.count)  # model tokens of the search itself (episodic-llm's assistants)
        with memory.llm.tally(searched):
            result = memory.search(q.text, user_id=user, k=DEPTH, budget_tokens=search_budget, now=q.date)
        latency = time.perf_counter() - start
        ranked = [h.turn_ids for h in result.hits]
        packed = [h.turn_ids for h in pack(result.hits, config.budget)]
        record: dict[str, Any] = {
            "id": q.id,
            "category": q.category,
            "adversarial": q.adversarial,
            "evidence": q.evidence,
            "latency_ms": latency * 1000,
            "context_tokens": packed_tokens(pack(result.hits, config.budget)),
            "top": ranked[:50],
        }
        if searched.calls:
            record["search_model"] = searched.as_dict()
        episodic = result.hits[0].detail.get("episodic") if result.hits else None
        if isinstance(episodic, dict):  # E-mem: which path answered, how many windows took part, and how much
            record["system"] = int(episodic.get("system", 2))  # of the gold evidence the assistants' evidence holds
            record["windows"] = len(result.hits[0].detail.get("routing", []))
            found = [h.turn_ids for h in result.hits if h.detail.get("episodic", {}).get("evidence")]
            record["evidence_turns"] = len({t for ids in found for t in ids})
            record["evidence_recall"] = evidence_recall(found, q.evidence)
        for k in KS:
            record[f"recall@{k}"] = evidence_recall(ranked, q.evidence, k)
        record["recall@budget"] = evidence_recall(packed, q.evidence)
        record["ndcg@10"] = ndcg(ranked, q.evidence, 10)
        if config.dataset == "came":
            record.update(wrong_top(ranked, q.evidence, q.superseded, q.lookalikes))
        if q.implicit is not None:  # look-alike conversations: an evidence turn leaves its goal implicit
            record["implicit"] = q.implicit
        keys = result.hits[0].detail.get("concepts") if result.hits else None
        if isinstance(keys, dict) and "keys_generated" in keys:  # SCG-MEM: seed keys proposed / outside the schema
            record["keys_generated"] = int(keys["keys_generated"])
            record["keys_outside"] = int(keys["keys_outside"])
        if q.evidence_sessions:
            sessions = [[t.rsplit(":", 1)[0] for t in ids] for ids in ranked]
            for k in (1, 5, 10):
                record[f"session_recall@{k}"] = evidence_recall(sessions, q.evidence_sessions, k)
        if config.answer:  # the reader sees the same ranking, packed into the answer budget (no second search)
            started = time.perf_counter()
            answered = Tally(memory.tokens.count)
            with memory.llm.tally(answered):  # the engine's answering step (episodic: the master) or the reader
                reply = memory.read(
                    q.text, result, budget_tokens=answer_budget, now=q.date, abstain=ABSTAIN[config.dataset]
                )
            record["answer_ms"] = (time.perf_counter() - started) * 1000
            record["answer_model"] = answered.as_dict()
            record["conversation_tokens"] = whole
            record["model_tokens"] = (
                searched.prompt_tokens
                + searched.completion_tokens
                + answered.prompt_tokens
                + answered.completion_tokens
            )
            record["prediction"] = reply.text
            record["cited"] = reply.cited_turn_ids
            record["abstained"] = abstains(reply.text, ABSTAIN[config.dataset])
            record["answer_total_ms"] = latency * 1000 + record["answer_ms"]  # search + reading, as a user waits
            if reply.evidence_tokens is not None:
                record["evidence_tokens"] = reply.evidence_tokens
                record["evidence_shown"] = evidence_recall([reply.evidence_turn_ids], q.evidence)
            record["gold"] = q.answer
            if config.dataset == "locomo":
                record["locomo_f1"] = locomo_f1(reply.text, q.answer, q.category)
            if config.dataset == "came":  # the structured answer: exact match, contained, token F1
                record.update(structured_scores(reply.text, q.answer))
            record["set_f1"] = set_f1(reply.text, q.answer)
            record["bleu1"] = bleu1(reply.text, q.answer)
            if judge_client is not None and config.dataset == "longmemeval":  # its own rule per question type
                kind = "abstention" if q.adversarial else q.category
                record["judge"] = float(judge(judge_client, q.text, q.answer, reply.text, kind))
            elif judge_client is not None and not q.adversarial:  # LoCoMo: categories 1-4
                record["judge"] = float(judge(judge_client, q.text, q.answer, reply.text))
        questions.append(record)
    llm_after = memory.llm.stats()
    return {
        "conversation": conv.id,
        "turns": len(conv.turns),
        "ingest_seconds": ingest_seconds,
        "engine": memory.engine_stats(user_id=user),  # e.g. stitch-llm's labels that fell back to model-free
        "llm": {
            stage: {k: v - llm_before.get(stage, {}).get(k, 0) for k, v in s.items()} for stage, s in llm_after.items()
        },
        "questions": questions,
        "peak_rss_mb": peak_rss_mb(),  # of the whole process so far: run one engine per process to compare them
    }


def with_flags(record: dict[str, Any], conv: Conversation) -> dict[str, Any]:
    """A reused checkpoint's question records with the `implicit` flag its data gives, where a checkpoint written
    before records carried it lacks it (issue 34: the implicit / named blocks)."""
    flags = {q.id: q.implicit for q in conv.questions if q.implicit is not None}
    for q in record.get("questions", []):
        if "implicit" not in q and q.get("id") in flags:
            q["implicit"] = flags[q["id"]]
    return record


def peak_rss_mb() -> float:
    """The process's peak resident set size in MB (Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run(config: BenchConfig, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Run every engine over the dataset (resuming from checkpoints) and write results.json, report.md, plots."""
    per_engine: dict[str, list[dict[str, Any]]] = {}
    if config.types and next(conversations(config), None) is None:
        named = ", ".join(LOCOMO_CATEGORIES) if config.dataset == "locomo" else "the question types of the file"
        raise ValueError(f"no question of type {', '.join(config.types)} in {config.data}: the types are {named}")
    settings = RunSettings.load(config)  # resolved once: every engine, the shared embedder and the judge read these
    shared: CachedEmbedder | None = None
    embedder: Any = None
    if config.embed_cache is not None:
        embedder, shared = cached_embedder(make_embedder(settings.run), config.embed_cache)
    try:
        for engine in config.engines:
            db = config.store or config.out / "stores" / f"{engine}.db"
            checkpoints = config.out / "checkpoints" / engine
            judge_client = make_client(settings.judge) if config.answer and settings.judge is not None else None
            with Memory(settings=settings.for_engine(engine, db), embedder=embedder) as memory:
                done: list[dict[str, Any]] = []
                wanted = {**protocol(config, settings), "engine": engine_fingerprint(memory.engine)}
                for i, conv in enumerate(conversations(config)):  # streamed again per engine: bounded memory
                    path = checkpoints / f"{_safe(conv.id)}.json"
                    saved = json.loads(path.read_text()) if path.exists() else None
                    if saved is not None and reusable(saved, wanted):
                        done.append(with_flags(saved, conv))
                    else:
                        record = {**run_conversation(memory, config, conv, judge_client), "protocol": wanted}
                        _write_atomic(path, record)
                        done.append(record)
                    if progress:
                        progress(engine, i + 1, config.limit or 0)
            per_engine[engine] = done
    finally:
        if shared is not None:
            shared.close()
    results = summarize(config, per_engine)
    write_report(config, results)
    return results
