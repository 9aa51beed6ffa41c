"""The benchmark protocol: what a run is (`BenchConfig`) and what a checkpoint's figures depend on (`protocol`),
shared by the runner and the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KS = (1, 5, 10, 20, 50)
DEPTH = 400  # hits read per question: enough to fill a 4,096-token budget with LoCoMo-sized turns

# What the reader replies when its excerpts do not say. LoCoMo's scorer counts category 5 (adversarial) right when
# the answer says the information is "not mentioned" (metrics.locomo_f1); LongMemEval's judge grades abstention by
# meaning, and its figures in BENCHMARKS.md were measured with the same phrase.
ABSTAIN = {"locomo": "Not mentioned in the conversation.", "longmemeval": "Not mentioned in the conversation."}


@dataclass
class BenchConfig:
    dataset: str  # "locomo" or "longmemeval"
    data: Path
    out: Path
    engines: list[str]
    limit: int | None = None
    budget: int = 4096
    answer: bool = False
    answer_budget: int | None = None  # tokens the reader sees (default: settings.answer_budget)
    judge: dict[str, Any] | None = None  # Settings overrides of the judge model (e.g. {"llm": "openai", ...})
    settings: dict[str, Any] = field(default_factory=dict)  # Settings overrides (embedder, turn_template ...)
    embed_cache: Path | None = None  # share embeddings across engines and reruns (ingest times then exclude them)


def protocol(config: BenchConfig) -> dict[str, Any]:
    """What a checkpoint's figures depend on beyond the conversation itself; a checkpoint made under another
    protocol (another budget, reader, judge, embedder or template) is recomputed, not reused."""
    data = Path(config.data)
    size = data.stat().st_size if data.is_file() else None
    abstain = ABSTAIN.get(config.dataset) if config.answer else None
    fields = {"dataset": config.dataset, "data": [data.name, size], "depth": DEPTH,
              "budget": config.budget, "answer": config.answer, "answer_budget": config.answer_budget,
              "abstain": abstain, "judge": config.judge, "settings": config.settings}  # fmt: skip
    return json.loads(json.dumps(fields, sort_keys=True, default=str))


def reusable(record: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A checkpoint is reused when it was made under the same protocol (those written before checkpoints
    recorded it are taken as they are)."""
    return record.get("protocol", wanted) == wanted
