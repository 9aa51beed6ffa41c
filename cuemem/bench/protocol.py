"""The benchmark protocol: what a run is (`BenchConfig`) and what a checkpoint's figures depend on (`protocol`,
`engine_fingerprint`), shared by the runner and the report."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import Settings
from ..engines import Engine
from ..engines.base import unwrap
from ..store import as_target

KS = (1, 5, 10, 20, 50)
DEPTH = 400  # hits read per question: enough to fill a 4,096-token budget with LoCoMo-sized turns

# What the reader replies when its excerpts do not say. LoCoMo's scorer counts category 5 (adversarial) right when
# the answer says the information is "not mentioned" (metrics.locomo_f1); LongMemEval's judge grades abstention by
# meaning, and its figures in BENCHMARKS.md were measured with the same phrase.
ABSTAIN = {
    "locomo": "Not mentioned in the conversation.",
    "longmemeval": "Not mentioned in the conversation.",
    "came": "Not mentioned in the conversation.",
}


@dataclass
class BenchConfig:
    dataset: str  # "locomo", "longmemeval" or "came" (cuemem.bench.came's look-alike conversations)
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
    config_file: Path | None = None  # the TOML settings file the run reads (`cuemem --config`), if any
    max_questions: int | None = None  # at most N questions per conversation, evenly spaced (`sample_questions`)
    max_turns: int | None = None  # only each conversation's first N turns, and the questions they answer
    split: str | None = None  # "dev" or "test" (datasets.split_of); None = every conversation
    types: tuple[str, ...] = ()  # only questions of these categories / question types; () = all
    # One store for every engine (a PostgreSQL DSN from `cuemem --db postgresql://… bench`): each engine's
    # conversations then live in namespaces of their own (`<dataset>:<conversation>#<engine>`). None = a SQLite
    # file per engine under out/stores/.
    store: str | None = None


# The settings a benchmark's figures depend on, as resolved from arguments, CUEMEM_* variables and the config file
# (so that `CUEMEM_LLM_MODEL=... cuemem bench` never reuses a checkpoint another reader made).
RESULT_SETTINGS = (
    "embedder",
    "embed_dim",
    "embed_model",
    "embed_base_url",
    "turn_template",
    "rrf_k",
    "rrf_bm25_weight",
    "rrf_dense_weight",
    "bm25_stopwords",
    "max_turn_bytes",
    "speaker_boost",
    "date_boost",
    "said_boost",
    "expand_weight",
    "expand_depth",
    "rerank",
    "rerank_depth",
    "rerank_weight",
    "revise_depth",
    "revise_min_frame",
    "revise_recurring",
    "revise_gap",
    "revise_near",
    "revise_same_values",
    "goal_first",
    "attribute_weight",
    "attribute_depth",
    "attribute_reach",
    "each_speaker_weight",
    "standing_weight",
    "standing_depth",
    "standing_floor",
    "llm",
    "llm_model",
    "llm_base_url",
    "llm_choice_mode",
    "answer_budget",
)


@dataclass(frozen=True)
class RunSettings:
    """A run's settings, resolved once from its arguments, CUEMEM_* variables and the config file (`run`), and the
    judge's (`judge`, from its overrides alone; None without a judge)."""

    run: Settings
    judge: Settings | None = None

    @classmethod
    def load(cls, config: BenchConfig) -> RunSettings:
        """Resolve the run's settings and the judge's."""
        run = Settings.load(config.config_file, **config.settings)
        return cls(run, Settings.load(**config.judge) if config.judge is not None else None)

    def for_engine(self, engine: str, db: str | Path) -> Settings:
        """The run's settings for one engine and its store (a copy: the run's own stay as they were)."""
        return dataclasses.replace(self.run, db=as_target(db), engine=engine)


def resolved_settings(config: BenchConfig, settings: RunSettings | None = None) -> dict[str, Any]:
    """RESULT_SETTINGS as this run resolves them (the judge's too, when there is one); `settings` when the run
    resolved them already."""
    settings = settings or RunSettings.load(config)
    out: dict[str, Any] = {name: getattr(settings.run, name) for name in RESULT_SETTINGS}
    if settings.judge is not None:
        out["judge"] = {name: getattr(settings.judge, name) for name in ("llm", "llm_model", "llm_base_url")}
    return out


def protocol(config: BenchConfig, settings: RunSettings | None = None) -> dict[str, Any]:
    """What a checkpoint's figures depend on beyond the conversation and the engine; a checkpoint made under
    another protocol (another budget, reader, judge, embedder or template, however given) is recomputed, not
    reused. `settings`: the run's, when it resolved them already."""
    data = Path(config.data)
    size = data.stat().st_size if data.is_file() else None
    abstain = ABSTAIN.get(config.dataset) if config.answer else None
    fields = {
        "dataset": config.dataset,
        "data": [data.name, size],
        "depth": DEPTH,
        "budget": config.budget,
        "answer": config.answer,
        "answer_budget": config.answer_budget,
        "abstain": abstain,
        "judge": config.judge,
        "settings": config.settings,
        "resolved": resolved_settings(config, settings),
        "config_file": source_digest([Path(config.config_file)]) if config.config_file else None,
    }
    if config.max_questions:  # only when set: checkpoints of full runs stay valid
        fields["max_questions"] = config.max_questions
    if config.max_turns:
        fields["max_turns"] = config.max_turns
    if config.split:
        fields["split"] = config.split
    if config.types:
        fields["types"] = sorted(config.types)
    return json.loads(json.dumps(fields, sort_keys=True, default=str))


def sample_questions(questions: list[Any], n: int | None) -> list[Any]:
    """At most n questions, evenly spaced through the list (first, ..., near last): a slow reader is measured on
    a subset that keeps the dataset's mix of question categories, where the first n would not (LoCoMo orders
    them roughly by category)."""
    if not n or n >= len(questions):
        return list(questions)
    return [questions[(i * len(questions)) // n] for i in range(n)]


def engine_sources(engine: Engine) -> list[Path]:
    """The source files an engine's behaviour is versioned by: its subpackage of `cuemem.engines` (all of
    `cuemem/engines/stitch/`) or its own module file (`cuemem/engines/baselines.py`, or a plugin's module), and
    for cuemem's own engines the shared parts they compose (`engines/base.py`, `engines/baselines.py`,
    `index/*.py`)."""
    module = sys.modules.get(type(unwrap(engine)).__module__)  # a plugin's own module, not its wrapper's
    file = getattr(module, "__file__", None)
    if file is None:
        return []
    path = Path(file)
    package_dir = Path(__file__).resolve().parents[1]
    engines_dir = package_dir / "engines"
    try:
        top = path.resolve().relative_to(engines_dir).parts[0]
    except (ValueError, IndexError):
        return [path]  # an engine outside cuemem.engines: its own module
    package = engines_dir / top
    own = sorted(package.rglob("*.py")) if package.is_dir() else [package]
    shared = [engines_dir / "base.py", engines_dir / "baselines.py", *sorted((package_dir / "index").glob("*.py"))]
    return own + [p for p in shared if p not in own]


def source_digest(paths: list[Path]) -> str:
    """A short sha256 over the files' names and contents (the engine's code version)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def engine_fingerprint(engine: Engine) -> dict[str, Any]:
    """An engine's identity in a checkpoint's protocol: its name, configuration (its dataclass `config`, if
    any), cuemem's version and a digest of its code; a change in any of them reruns the conversation."""
    config = getattr(engine, "config", None)
    settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else None
    fields = {
        "name": engine.name,
        "config": settings,
        "version": __version__,
        "code": source_digest(engine_sources(engine)),
    }
    return json.loads(json.dumps(fields, sort_keys=True, default=str))


def reusable(record: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A checkpoint is reused when it was made under the same protocol (those written before checkpoints
    recorded it are taken as they are)."""
    return record.get("protocol", wanted) == wanted
