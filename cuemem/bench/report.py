"""Aggregate per-question records into results.json, report.md and PNG plots (schema: BENCHMARKS.md)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from .metrics import mean, percentile
from .protocol import KS, BenchConfig

log = logging.getLogger(__name__)
RETRIEVAL_KEYS = [f"recall@{k}" for k in KS] + ["recall@budget", "ndcg@10"]


def headline(config: BenchConfig, q: dict[str, Any]) -> bool:
    """Questions in the headline figures: LoCoMo categories 1-4, LongMemEval non-abstention; with evidence."""
    if not q["evidence"]:
        return False
    if config.dataset == "came":  # every generated question has exact evidence
        return True
    return q["category"] in {"1", "2", "3", "4"} if config.dataset == "locomo" else not q["adversarial"]


def retrieval_block(questions: list[dict[str, Any]]) -> dict[str, float]:
    block = {key: mean([q[key] for q in questions]) for key in RETRIEVAL_KEYS}
    block["all@10"] = mean([float(q["recall@10"] == 1.0) for q in questions])
    block["all@budget"] = mean([float(q["recall@budget"] == 1.0) for q in questions])
    for key in (
        "session_recall@1",
        "session_recall@5",
        "session_recall@10",
        "evidence_recall",
        "evidence_turns",
        "lookalike_top",
        "superseded_top",
        "em",
        "contains",
        "f1",
    ):
        if any(key in q for q in questions):
            block[key] = mean([q[key] for q in questions if key in q])
    block["questions"] = len(questions)
    return block


def summarize(config: BenchConfig, per_engine: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    engines: dict[str, Any] = {}
    for engine, convs in per_engine.items():
        questions = [q for c in convs for q in c["questions"]]
        chosen = [q for q in questions if headline(config, q)]
        categories = sorted({q["category"] for q in questions})
        by_category = {  # LoCoMo's category 5 on its own; LongMemEval's abstention questions nowhere, as above
            cat: retrieval_block(
                [
                    q
                    for q in questions
                    if q["category"] == cat
                    and q["evidence"]
                    and not (config.dataset == "longmemeval" and q["adversarial"])
                ]
            )
            for cat in categories
        }
        latencies = sorted(q["latency_ms"] for q in questions)
        turns = sum(c["turns"] for c in convs)
        seconds = sum(c["ingest_seconds"] for c in convs)
        llm_ingest = _sum_llm(convs, "ingest")
        llm_query = _sum_llm(convs, "query")
        engines[engine] = {
            "retrieval": retrieval_block(chosen),
            "by_category": by_category,
            "cost": {
                "conversations": len(convs),
                "turns": turns,
                "ingest_seconds": seconds,
                "turns_per_s": turns / seconds if seconds else math.nan,
                "peak_rss_mb": max((c.get("peak_rss_mb", math.nan) for c in convs), default=math.nan),
                "llm_calls_per_turn": llm_ingest["calls"] / turns if turns else 0.0,
                "llm_cache_hits": llm_ingest["cached"] + llm_query["cached"],
                "llm_tokens_per_turn": (llm_ingest["prompt_tokens"] + llm_ingest["completion_tokens"]) / turns
                if turns
                else 0.0,
                "latency_p50_ms": percentile(latencies, 50),
                "latency_p95_ms": percentile(latencies, 95),
                "context_tokens_per_question": mean([q["context_tokens"] for q in questions]),
                "llm_calls_per_question": llm_query["calls"] / len(questions) if questions else 0.0,
                "llm_tokens_per_question": (llm_query["prompt_tokens"] + llm_query["completion_tokens"])
                / len(questions)
                if questions
                else 0.0,
            },
            "answer": _answer_block(config, questions) if config.answer else None,
        }
        if config.dataset == "came":  # per size (S / M / L, from the conversation id) and question type
            engines[engine]["by_size"] = _came_blocks(convs)
        schema = _schema_block(convs, questions)
        if schema is not None:
            engines[engine]["schema"] = schema
    return {
        "dataset": config.dataset,
        "data": str(config.data),
        "limit": config.limit,
        "max_questions": config.max_questions,
        "max_turns": config.max_turns,
        "split": config.split,
        "types": list(config.types),
        "budget_tokens": config.budget,
        "answer_budget_tokens": config.answer_budget,
        "settings": config.settings,
        "engines": engines,
    }


def came_size(conversation_id: str) -> str:
    """S, M or L from a generated conversation's id ("came-M-7"); "?" for any other id."""
    parts = conversation_id.split("-")
    return parts[1] if len(parts) == 3 and parts[0] == "came" else "?"


# Look-alike conversations' failure classes (issue 34): questions with an evidence turn that leaves its goal
# implicit, and the others; the blocks sit beside the question types in each size.
GOAL_BLOCKS = ("implicit", "named")


def _came_blocks(convs: list[dict[str, Any]]) -> dict[str, Any]:
    """Retrieval (and answer) blocks per size and question type, each size's "all", and (when the questions carry
    the flag) "implicit" / "named": questions with an evidence turn that leaves its goal implicit, and the rest."""
    out: dict[str, Any] = {}
    for size in sorted({came_size(c["conversation"]) for c in convs}, key="SML?".index):
        questions = [q for c in convs if came_size(c["conversation"]) == size for q in c["questions"] if q["evidence"]]
        blocks = {
            cat: retrieval_block([q for q in questions if q["category"] == cat])
            for cat in sorted({q["category"] for q in questions})
        }
        blocks["all"] = retrieval_block(questions)
        blocks["turns"] = sum(c["turns"] for c in convs if came_size(c["conversation"]) == size)
        flagged = [q for q in questions if isinstance(q.get("implicit"), bool)]
        if flagged:  # checkpoints written before the flag existed carry none: no block rather than a wrong one
            blocks["implicit"] = retrieval_block([q for q in flagged if q["implicit"]])
            blocks["named"] = retrieval_block([q for q in flagged if not q["implicit"]])
        out[size] = blocks
    return out


def _schema_block(convs: list[dict[str, Any]], questions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """SCG-MEM's schema figures (issue 14): concepts, the share of candidate occurrences assimilated onto existing
    concepts, and the structural hallucination rate (keys proposed as schema members that were not, over keys
    proposed) at ingest and at query. None for engines without a schema."""
    stats = [c.get("engine", {}) for c in convs]
    if not stats or not all("keys_generated" in s for s in stats):
        return None

    def total(key: str) -> int:
        return sum(int(s.get(key, 0)) for s in stats)

    placed = total("assimilated") + total("accommodated")
    generated = sum(q.get("keys_generated", 0) for q in questions)
    outside = sum(q.get("keys_outside", 0) for q in questions)
    return {
        "concepts": total("concepts"),
        "concepts_per_conversation": total("concepts") / len(stats),
        "assimilated": total("assimilated"),
        "accommodated": total("accommodated"),
        "assimilated_share": total("assimilated") / placed if placed else math.nan,
        "rejected": total("rejected"),
        "llm_fallbacks": total("fallbacks"),
        "ingest_keys_generated": total("keys_generated"),
        "ingest_hallucination_rate": total("keys_outside") / total("keys_generated")
        if total("keys_generated")
        else 0.0,
        "query_keys_generated": generated,
        "query_hallucination_rate": outside / generated if generated else 0.0,
    }


def _sum_llm(convs: list[dict[str, Any]], stage: str) -> dict[str, float]:
    """A stage's model use over the conversations. Calls answered from the call cache cost nothing and carry no
    token counts, so `calls` counts only the calls the model actually made; `cached` counts the others."""
    out = {"calls": 0.0, "cached": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0}
    for c in convs:
        stats = c.get("llm", {}).get(stage, {})
        for key in out:
            out[key] += stats.get(key, 0)
    out["calls"] -= out["cached"]
    return out


def _answer_block(config: BenchConfig, questions: list[dict[str, Any]]) -> dict[str, Any]:
    main = [q for q in questions if not q["adversarial"]]
    block: dict[str, Any] = {
        "set_f1": mean([q["set_f1"] for q in main]),
        "bleu1": mean([q["bleu1"] for q in main]),
        "questions": len(main),
        "reader_seconds_per_question": mean([q["answer_ms"] / 1000 for q in questions if "answer_ms" in q]),
        # model tokens a question costs (search + answer, counted with the shipped tokenizer, cached calls
        # included) and, for scale, the tokens of the whole conversation a full-context reader would read
        "model_tokens_per_question": mean([q["model_tokens"] for q in questions if "model_tokens" in q]),
        "conversation_tokens_per_question": mean(
            [q["conversation_tokens"] for q in questions if "conversation_tokens" in q]
        ),
    }
    waits = sorted(q["answer_total_ms"] / 1000 for q in questions if "answer_total_ms" in q)
    if waits:  # what a user waits for an answer: the search and the reading
        block["answer_seconds_p50"] = percentile(waits, 50)
        block["answer_seconds_p95"] = percentile(waits, 95)
    shown = [q["evidence_tokens"] for q in questions if "evidence_tokens" in q]
    if shown:  # the smallest evidence: tokens of excerpts the reader saw, and how often they held the evidence
        block["evidence_tokens_per_question"] = mean(shown)
        block["evidence_shown"] = mean([q["evidence_shown"] for q in main if "evidence_shown" in q])
    if any("abstained" in q for q in questions):  # abstention: wanted on unanswerable questions only
        block["abstains_answerable"] = mean([float(q.get("abstained", False)) for q in main])
        adversarial_asked = [q for q in questions if q["adversarial"]]
        block["abstains_unanswerable"] = mean([float(q.get("abstained", False)) for q in adversarial_asked])
    routed = [q["system"] for q in questions if "system" in q]
    if routed:  # episodic: the share of questions answered on the fast path (System 1)
        block["system1_share"] = mean([float(x == 1) for x in routed])
    judged = [
        q["judge"]
        for q in questions
        if "judge" in q and (config.dataset != "locomo" or q["category"] in {"1", "2", "3", "4"})
    ]
    if judged:
        block["judge_accuracy"] = mean(judged)
        block["judged"] = len(judged)
    if config.dataset == "locomo":
        block["locomo_f1"] = mean([q["locomo_f1"] for q in main])
        adversarial = [q for q in questions if q["adversarial"]]
        block["category_5_locomo_f1"] = mean([q["locomo_f1"] for q in adversarial])
        block["by_category_locomo_f1"] = {
            cat: mean([q["locomo_f1"] for q in questions if q["category"] == cat])
            for cat in sorted({q["category"] for q in questions})
        }
    return block


def _nan_to_null(value: Any) -> Any:
    """results.json is strict JSON: a figure with nothing to average over (NaN) is written as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_null(v) for v in value]
    return value


def _fmt(x: Any) -> str:
    return (
        "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}" if isinstance(x, float) else str(x)
    )


def write_report(config: BenchConfig, results: dict[str, Any]) -> None:
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(_nan_to_null(results), indent=1, allow_nan=False))
    engines = results["engines"]
    split = (f", `{config.split}` split" if config.split else "") + (
        f", question types {', '.join(config.types)}" if config.types else ""
    )
    lines = [f"# {config.dataset}{split} — {len(engines)} engines, budget {config.budget} tokens", ""]
    first = next(iter(engines.values()))
    sampled = f" ({config.max_questions} per conversation, evenly spaced)" if config.max_questions else ""
    if config.max_turns:
        sampled += f"; only the first {config.max_turns} turns of each conversation and the questions they answer"
    lines += [f"Headline questions: {first['retrieval']['questions']}{sampled}", "", "## Retrieval", ""]
    cols = [*RETRIEVAL_KEYS, "all@10", "all@budget"]
    lines += ["| engine | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, e in engines.items():
        lines.append(f"| `{name}` | " + " | ".join(_fmt(e["retrieval"][c]) for c in cols) + " |")
    cats = sorted({c for e in engines.values() for c in e["by_category"]})
    lines += [
        "",
        "## Recall@10 by category",
        "",
        "| engine | " + " | ".join(cats) + " |",
        "|---|" + "---:|" * len(cats),
    ]
    for name, e in engines.items():
        lines.append(
            f"| `{name}` | " + " | ".join(_fmt(e["by_category"].get(c, {}).get("recall@10")) for c in cats) + " |"
        )
    if config.dataset == "came":
        lines += _came_lines(engines)
    cost_cols = [
        "turns_per_s",
        "latency_p50_ms",
        "latency_p95_ms",
        "context_tokens_per_question",
        "llm_calls_per_turn",
        "llm_calls_per_question",
        "llm_tokens_per_question",
    ]
    lines += ["", "## Cost", "", "| engine | " + " | ".join(cost_cols) + " |", "|---|" + "---:|" * len(cost_cols)]
    for name, e in engines.items():
        lines.append(f"| `{name}` | " + " | ".join(_fmt(float(e["cost"][c])) for c in cost_cols) + " |")
    schemas = {name: e["schema"] for name, e in engines.items() if e.get("schema")}
    if schemas:
        cols = [
            "concepts_per_conversation",
            "assimilated_share",
            "ingest_hallucination_rate",
            "query_hallucination_rate",
            "llm_fallbacks",
        ]
        lines += [
            "",
            "## Concept schema (SCG-MEM)",
            "",
            "| engine | " + " | ".join(cols) + " |",
            "|---|" + "---:|" * len(cols),
        ]
        for name, block in schemas.items():
            lines.append(f"| `{name}` | " + " | ".join(_fmt(float(block[c])) for c in cols) + " |")
    if config.answer:
        lines += [
            "",
            "## Answers",
            "",
            "| engine | questions | locomo_f1 (1-4) | cat 5 | set_f1 | bleu1 | judge accuracy | judged"
            " | answer s/question | model tokens/question | counted tokens/question | conversation tokens"
            " | evidence tokens | evidence shown | p50 s | p95 s | abstains (answerable) | abstains (unanswerable) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, e in engines.items():
            a = e["answer"]
            lines.append(
                f"| `{name}` | {a['questions']} | {_fmt(a.get('locomo_f1'))}"
                f" | {_fmt(a.get('category_5_locomo_f1'))} | {_fmt(a['set_f1'])} | {_fmt(a['bleu1'])}"
                f" | {_fmt(a.get('judge_accuracy'))} | {a.get('judged', 0)}"
                f" | {_fmt(a.get('reader_seconds_per_question'))}"
                f" | {_fmt(float(e['cost'].get('llm_tokens_per_question', math.nan)))}"
                f" | {_fmt(a.get('model_tokens_per_question'))}"
                f" | {_fmt(a.get('conversation_tokens_per_question'))}"
                f" | {_fmt(a.get('evidence_tokens_per_question'))} | {_fmt(a.get('evidence_shown'))}"
                f" | {_fmt(a.get('answer_seconds_p50'))} | {_fmt(a.get('answer_seconds_p95'))}"
                f" | {_fmt(a.get('abstains_answerable'))} | {_fmt(a.get('abstains_unanswerable'))} |"
            )
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plots(out, engines)


CAME_COLS = ("recall@10", "recall@budget", "lookalike_top", "superseded_top", "em", "contains", "f1")


def _came_lines(engines: dict[str, Any]) -> list[str]:
    """report.md's look-alike section: per size and question type, recall@10 / @budget, the look-alike rate
    (the top-ranked wrong turn is the same attribute of another goal), the superseded rate, and answer scores."""
    lines = [
        "",
        "## By size and question type (look-alike conversations)",
        "",
        "lookalike_top: share of questions whose top-ranked wrong turn states the same attribute of another goal;"
        " superseded_top: ... a value since replaced. em / contains / f1: the reader's reply against the"
        " structured answer (with --answer).",
        "",
        "| engine | size | type | questions | " + " | ".join(CAME_COLS) + " |",
        "|---|---|---|---:|" + "---:|" * len(CAME_COLS),
    ]
    for name, e in engines.items():
        for size, blocks in e.get("by_size", {}).items():
            for cat, block in blocks.items():
                if not isinstance(block, dict) or cat in GOAL_BLOCKS:
                    continue
                lines.append(
                    f"| `{name}` | {size} | {cat} | {block['questions']} | "
                    + " | ".join(_fmt(block.get(c)) for c in CAME_COLS)
                    + " |"
                )
    return lines + _goal_lines(engines)


GOAL_COLS = ("recall@1", "recall@10", "recall@budget", "lookalike_top", "superseded_top")


def _goal_lines(engines: dict[str, Any]) -> list[str]:
    """report.md's failure-class table (issue 34): per engine and size, the questions whose evidence leaves its
    goal implicit against those whose evidence names it, with the look-alike and superseded rates ("—" where a
    run's checkpoints carry no flag)."""
    if not any(g in b for e in engines.values() for b in e.get("by_size", {}).values() for g in GOAL_BLOCKS):
        return []
    lines = [
        "",
        "## Goal named or left implicit (look-alike conversations)",
        "",
        'implicit: questions with an evidence turn that does not name its goal ("There, the guest count will be'
        ' 26."); named: the others.',
        "",
        "| engine | size | evidence | questions | " + " | ".join(GOAL_COLS) + " |",
        "|---|---|---|---:|" + "---:|" * len(GOAL_COLS),
    ]
    for name, e in engines.items():
        for size, blocks in e.get("by_size", {}).items():
            for goal in GOAL_BLOCKS:
                block = blocks.get(goal) or {}
                lines.append(
                    f"| `{name}` | {size} | {goal} | {block.get('questions', '—')} | "
                    + " | ".join(_fmt(block.get(c)) for c in GOAL_COLS)
                    + " |"
                )
    return lines


def _plots(out: Path, engines: dict[str, Any]) -> None:
    try:
        import matplotlib
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'cuemem[bench]'): no plots written")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, e in engines.items():
        ax.plot(KS, [e["retrieval"][f"recall@{k}"] for k in KS], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xticks(KS, [str(k) for k in KS])
    ax.set_xlabel("k (hits)")
    ax.set_ylabel("evidence recall@k")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "recall_at_k.png", dpi=120)
    plt.close(fig)

    cats = sorted({c for e in engines.values() for c in e["by_category"]})
    fig, ax = plt.subplots(figsize=(max(6, len(cats) * 1.2), 4))
    width = 0.8 / max(1, len(engines))
    for i, (name, e) in enumerate(engines.items()):
        values = [e["by_category"].get(c, {}).get("recall@10", 0) or 0 for c in cats]
        ax.bar([x + i * width for x in range(len(cats))], values, width=width, label=name)
    ax.set_xticks([x + width * (len(engines) - 1) / 2 for x in range(len(cats))], cats, rotation=20)
    ax.set_ylabel("evidence recall@10")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "by_category.png", dpi=120)
    plt.close(fig)
