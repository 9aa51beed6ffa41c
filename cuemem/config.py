"""Settings from arguments, the environment (CUEMEM_*) and a TOML file, in that order of precedence."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from .errors import CuememError


def default_db_path() -> Path:
    """The embedded store lives in the user's data directory unless told otherwise."""
    return Path(platformdirs.user_data_dir("cuemem")) / "cuemem.db"


def is_dsn(target: object) -> bool:
    """Whether a store target names a PostgreSQL database (`postgresql://…`) rather than a SQLite file."""
    return isinstance(target, str) and target.lower().startswith(("postgresql://", "postgres://"))


def redact(dsn: str) -> str:
    """A DSN fit for messages and logs: user, host, port and database; never the password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # psycopg missing (the optional extra), or a DSN it cannot parse
        return "postgresql://(a DSN that could not be parsed)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host", ""))
    where = host if host and not host.startswith("/") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    sock = f"?host={host}" if host.startswith("/") else ""
    return f"postgresql://{user}{where}{port}/{parts.get('dbname', '')}{sock}"


def beside_store(db: Path | str, suffix: str) -> Path:
    """A file that belongs with a store (its API keys, a Chroma folder): `<db><suffix>` beside a SQLite file; for a
    PostgreSQL DSN, in the user data dir under a name derived from the DSN without its password."""
    if not is_dsn(db):
        return Path(f"{db}{suffix}")
    import hashlib

    digest = hashlib.sha1(redact(str(db)).encode("utf-8")).hexdigest()[:12]
    return Path(platformdirs.user_data_dir("cuemem")) / f"postgres-{digest}{suffix}"


def default_config_file() -> Path | None:
    """`$CUEMEM_CONFIG`, else the user config directory's `cuemem/config.toml`, else none.

    Never a file of the working directory: a `cuemem.toml` in a cloned or downloaded directory could otherwise
    send turn text and API keys to a server of its author's choosing. Such a file is read only when named
    (`--config FILE`, `CUEMEM_CONFIG`, `Settings.load(FILE)`)."""
    env = os.environ.get("CUEMEM_CONFIG")
    if env:
        return Path(env)
    candidate = Path(platformdirs.user_config_dir("cuemem")) / "config.toml"
    return candidate if candidate.is_file() else None


@dataclass
class Settings:
    """Every option in one place; each field maps to `CUEMEM_<FIELD>` and to a key of the TOML file."""

    # A SQLite file, or a PostgreSQL DSN (`postgresql://user@host/db`): the server-grade store (README).
    db: Path | str = field(default_factory=default_db_path)
    # "stitch": the best engine on both development sets (LoCoMo dev and the look-alike conversations' dev seeds),
    # model-free (spaCy + the embedder); README "Engines" says why (issue 34).
    engine: str = "stitch"
    # "embeddinggemma" (the default: fetched by `make setup` / `cuemem models fetch embeddinggemma`), "minilm"
    # (shipped, no download), the path of a sentence-transformers folder, "openai" (any OpenAI-compatible
    # endpoint) or "hashing" (model-free). Chosen by measurement: BENCHMARKS.md, "Stronger local models".
    embedder: str = "embeddinggemma"
    embed_dim: int = 0  # 0 = the model's full size; 512/256/128 cut EmbeddingGemma's vectors (Matryoshka)
    embed_model: str = "text-embedding-3-small"  # used by the "openai" embedder
    embed_base_url: str = "https://api.openai.com/v1"
    embed_api_key: str | None = None
    embed_batch_size: int = 32
    embed_timeout: float = 30.0
    max_turn_bytes: int = 256 * 1024
    # The text dense search embeds for a turn. BM25 indexes the words alone; speaker and date are fields (issue 13).
    turn_template: str = "{date}{speaker}: {text}"
    # Structure (issue 13), tuned on LoCoMo's dev split (BENCHMARKS.md, "Retrieval that generalises"): a hit's
    # score gains this share when it is by or about a person the question names (0: no gain measured) / dated
    # inside the date or period the question names (0.5: +0.06 recall@10 on such questions with hybrid).
    speaker_boost: float = 0.0
    date_boost: float = 0.5
    # A hit said by the one speaker a question names ("What did Melanie paint?") gains this share of the best hit's
    # score; nothing changes where the question names no speaker or two, or the speakers are generic labels ("user").
    # 0.2 chosen on LoCoMo dev (0, 0.1, 0.2, 0.3, 0.5): recall@10 stitch 0.803 -> 0.819, hybrid 0.783 -> 0.789.
    said_boost: float = 0.2
    # Query expansion (pseudo-relevance feedback, issue 13): a second retrieval round from the first round's top
    # `expand_depth` hits (their people and dates for BM25, their mean vector for dense), fused with this weight;
    # 0 = off.
    expand_weight: float = 0.0
    expand_depth: int = 3
    # Second-stage reranking of the top `rerank_depth` hits by the local model's likelihood (issue 13):
    # "off" or "model". Off by default: BENCHMARKS.md measures what it adds and costs.
    rerank: str = "off"
    rerank_depth: int = 30
    rerank_weight: float = 1.0
    rrf_k: int = 60
    # Questions over several speakers (issue 34 item 4): for each speaker a question names, a second round without
    # the other names, kept to what that speaker said, fused at this weight; 0 = off. Chosen on dev (docs/benchmarks/
    # retrieval.md, "Questions over two speakers").
    each_speaker_weight: float = 2.0
    # Standing facts (issue 34 item 5, engines/standing.py): for a message (not a question), the turns stating their
    # speaker's value, goal, state or cause, ranked by similarity to it, fused at this weight; 0 = off. `profile`
    # fuses its own records instead (ProfileConfig). Chosen on the standing-facts dev half (docs/benchmarks/
    # profile.md, "Standing facts in every engine").
    standing_weight: float = 2.0
    # How many of the standing-fact turns most similar to a message join the fusion.
    standing_depth: int = 30
    # The least cosine of a standing-fact turn to a message for it to join (dev: 0 and 0.1 alike, 0.2 worse).
    standing_floor: float = 0.1
    # The asked attribute (issue 34, index/attribute.py): the top `attribute_depth` hits ordered again by their
    # similarity to the question without the words most of the best three share with it (the goal's name), fused with
    # their order at this weight; 0 = off. Chosen on dev (docs/benchmarks/came.md, "The asked attribute").
    attribute_weight: float = 1.0
    # How many of the best hits the asked attribute reorders (the embedding cost: one per hit not yet embedded).
    attribute_depth: int = 10
    # How deep below that head the goal's other turns are looked for: an item ranked above `attribute_reach` whose
    # indexed words hold every goal word joins the reordered head (0 = none).
    attribute_reach: int = 30
    # Current values first (issue 34 item 2, docs/design.md design 3): among the top `revise_depth` candidates, the
    # turn holding a chain's current value takes the chain's best place and the replaced ones rank lower (0 = off).
    # Two statements set the same attribute when their attribute words overlap (IDF-weighted Jaccard) at least
    # `revise_min_frame`; a name said in `revise_recurring` turns or more is a goal's anchor, a rarer one a value.
    # Chosen on dev: docs/benchmarks/came.md, "Revised values".
    revise_depth: int = 100
    revise_min_frame: float = 0.6
    revise_recurring: int = 3
    # Where a replaced value goes: this many places below its current value, so that it stays in reach of a reader
    # (and of LongMemEval's knowledge-update questions, which count it as evidence) without passing the candidates
    # ranked near the current value; 1 = just below it, 0 = below every other candidate of the `revise_depth`.
    # Chosen on dev (docs/benchmarks/came.md, "History in reach").
    revise_gap: int = 5
    # The near chains (`revisions.revised_near`): among the `revise_near` candidates ranked first, a later turn that
    # says a change word and states a new amount, time, date or count for the same goal and topic replaces the
    # earlier one (a name only with attribute words in common). 0 = off. Chosen on dev (docs/benchmarks/came.md).
    revise_near: int = 8
    # The attribute in other words: two names for one goal and topic replace each other, where a change word says so,
    # also when the attribute words their turns do not share are said with the same names over the candidates' turns
    # (`revisions.value_profiles`: "the hotel" and "the place we're staying" with Villa Mar and Casa Rosa) at least
    # this alike (cosine). 0 = off. Chosen on dev (docs/benchmarks/came.md, "Values said where a value stands").
    revise_same_values: float = 0.3
    # The named goal first (issue 34): among the same candidates, a turn whose goal is another one than the goal the
    # question names (a look-alike: "Day 1 of the Porto trip" for "Day 2 of the Lyon trip", or "Day 1 in Porto" for
    # "Day 1 of the Lisbon trip") goes below the others, before the asked attribute and again with the revisions.
    goal_first: bool = True
    # Weighted reciprocal-rank fusion: a ranking's votes are multiplied by its weight. The BM25 weight defaults
    # to the one measured for the embedder (1.0 for MiniLM, 0.2 for EmbeddingGemma: BENCHMARKS.md); -1 = that.
    rrf_bm25_weight: float = -1.0
    rrf_dense_weight: float = 1.0
    bm25_stopwords: str = "extended"  # "extended" (129 English stop words) or "lucene" (bm25s/Lucene's 33)
    k: int = 10
    llm: str = "llamacpp"  # "llamacpp" (GGUF on llama.cpp's CPU library), "local" (transformers) or "openai"
    # The model: for local/llamacpp a registry name ("qwen2.5-coder-0.5b" when empty, fetched by `make setup`;
    # "smollm2-135m", shipped; "qwen2.5-coder-1.5b") or a GGUF path; for openai the endpoint's model
    # ("gpt-4o-mini" when empty).
    llm_model: str = ""
    # llamacpp: run the GGUF re-encoded as "q4_0" (fastest prompt evaluation on llama.cpp's portable CPU build) or
    # "q8_0", made once in the model cache; "" = the file as fetched (Q4_K_M). Chosen on dev (BENCHMARKS.md).
    llm_quant: str = "q4_0"
    # llamacpp: threads decoding (0 = every core). Fewer where processes share the cores: llama.cpp's threads spin
    # while they wait for each other, so two processes of 2 threads on 2 cores run several times slower than 1 each.
    llm_threads: int = 0
    llm_base_url: str = "https://api.openai.com/v1"
    llm_api_key: str | None = None
    llm_timeout: float = 60.0
    llm_retries: int = 3
    llm_concurrency: int = 4
    llm_choice_mode: str = "enum"  # "enum" (JSON-schema enum) or "guided" (vLLM guided_choice)
    llm_cache: str = ""  # the call cache's SQLite file; "" = user cache dir, "off" = no cache
    answer_budget: int = 320  # tokens of excerpts the reader sees: the smallest evidence (cuemem/answer.py)
    # The reader's check of its own answer: asked "is that answer stated in the excerpts?", it abstains when
    # log P(yes) - log P(no) is below this (None = no check, one model call less). Chosen on dev (BENCHMARKS.md).
    answer_verify: float | None = None
    # The question's premise: a question naming one speaker whose subject, searched for without the name, is
    # another speaker's turns is answered "The memory does not say." without a model call (one search more;
    # cuemem/answer.py, attributed_elsewhere; BENCHMARKS.md).
    answer_premise: bool = True
    datasets: Path = Path("datasets")  # benchmark data (`cuemem bench`); relative to the working directory
    # The engines a `cuemem serve` request may name besides `engine`, comma-separated: "" = every registered engine
    # by its name (no "name[field=value]" variants), "*" = any engine or variant (`cuemem serve --allow-engine`).
    allowed_engines: str = ""
    # Seconds from an acknowledged delete until the store scrubs the deleted bytes from its files (SQLite: a WAL
    # checkpoint; PostgreSQL: VACUUM FULL of the tables that held them); None = the store's default (1 s / 30 s).
    scrub_after_s: float | None = None
    # Index in a background thread: an add returns once its turns are durable in the log, and a worker embeds and
    # indexes them (a search still sees every acknowledged turn: it catches up what the worker has not reached).
    # Off for the library and the CLI (an add returns indexed); `cuemem serve` turns it on (--index-in-background).
    index_in_background: bool = False
    # MB of in-process state (BM25 indexes, engines' query-side tables) a Memory keeps for the namespaces it
    # serves: past it, the least recently used namespaces are dropped and loaded again on their next search. The
    # namespace in use is always kept, whatever its size. 0 = unbounded.
    cache_mb: int = 512

    def __post_init__(self) -> None:
        if self.cache_mb < 0:
            raise CuememError(f"setting cache_mb must be 0 (unbounded) or more, got {self.cache_mb}")
        for name in ("embed_batch_size", "max_turn_bytes", "rrf_k", "k", "llm_concurrency", "answer_budget"):
            if getattr(self, name) < 1:
                raise CuememError(f"setting {name} must be >= 1, got {getattr(self, name)}")
        if self.bm25_stopwords not in ("extended", "lucene"):
            raise CuememError(f"setting bm25_stopwords must be extended or lucene, got {self.bm25_stopwords!r}")
        if self.revise_depth < 0 or self.revise_recurring < 1 or not 0 <= self.revise_min_frame <= 1:
            raise CuememError("settings revise_depth >= 0, revise_recurring >= 1, revise_min_frame in [0, 1]")
        if self.revise_gap < 0:
            raise CuememError(f"setting revise_gap must be >= 0, got {self.revise_gap}")
        if not 0 <= self.revise_same_values <= 1:
            raise CuememError(f"setting revise_same_values must be in [0, 1] (0 = off), got {self.revise_same_values}")
        if self.revise_near < 0:
            raise CuememError(f"setting revise_near must be >= 0 (0 = off), got {self.revise_near}")
        for name in (
            "speaker_boost",
            "date_boost",
            "said_boost",
            "expand_weight",
            "rerank_weight",
            "attribute_weight",
            "each_speaker_weight",
            "standing_weight",
        ):
            if getattr(self, name) < 0:
                raise CuememError(f"setting {name} must be >= 0, got {getattr(self, name)}")
        if self.expand_depth < 1 or self.rerank_depth < 1 or self.attribute_depth < 1 or self.standing_depth < 1:
            raise CuememError("settings expand_depth, rerank_depth, attribute_depth and standing_depth must be >= 1")
        if self.attribute_reach < 0:
            raise CuememError(f"setting attribute_reach must be >= 0 (0 = none), got {self.attribute_reach}")
        if not -1 <= self.standing_floor <= 1:
            raise CuememError(f"setting standing_floor must be a cosine in [-1, 1], got {self.standing_floor}")
        if self.llm_threads < 0:
            raise CuememError(f"setting llm_threads must be >= 0 (0 = every core), got {self.llm_threads}")
        if self.llm_quant not in ("", "q4_0", "q8_0"):
            raise CuememError(f"setting llm_quant must be q4_0, q8_0 or '' (as fetched), got {self.llm_quant!r}")
        if self.rerank not in ("off", "model"):
            raise CuememError(f"setting rerank must be off or model, got {self.rerank!r}")
        if self.embed_dim < 0:
            raise CuememError(f"setting embed_dim must be >= 0 (0 = the model's full size), got {self.embed_dim}")
        if self.rrf_dense_weight < 0 or (self.rrf_bm25_weight < 0 and self.rrf_bm25_weight != -1):
            raise CuememError("fusion weights must be >= 0 (rrf_bm25_weight -1 = the embedder's measured default)")
        if self.scrub_after_s is not None and not 0 <= self.scrub_after_s <= 3600:
            raise CuememError(f"setting scrub_after_s must be between 0 and 3600 seconds, got {self.scrub_after_s}")
        if self.embed_timeout <= 0:
            raise CuememError(f"setting embed_timeout must be > 0, got {self.embed_timeout}")
        try:
            self.turn_template.format(date="", speaker="", text="", session="")
        except (KeyError, IndexError, ValueError) as exc:
            raise CuememError(
                f"turn_template {self.turn_template!r} is invalid ({exc!r}); use {{date}}, {{speaker}},"
                " {text} and {session}"
            ) from exc

    @classmethod
    def load(cls, config_file: Path | str | None = None, **overrides: Any) -> Settings:
        """Defaults, then the TOML file, then CUEMEM_* variables, then explicit keyword arguments."""
        values: dict[str, Any] = {}
        path = Path(config_file) if config_file else default_config_file()
        if path is not None:
            if not path.is_file():
                raise CuememError(f"config file {path} does not exist")
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise CuememError(f"config file {path} is not valid TOML: {exc}") from exc
            values.update(data.get("cuemem", data))
        for f in fields(cls):
            env = os.environ.get(f"CUEMEM_{f.name.upper()}")
            if env is not None:
                values[f.name] = env
        for key in ("embed_api_key", "llm_api_key"):
            if values.get(key) is None and os.environ.get("OPENAI_API_KEY"):
                values[key] = os.environ["OPENAI_API_KEY"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise CuememError(f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{k: _coerce(known[k].type, k, v) for k, v in values.items()})


def _coerce(annotation: Any, name: str, value: Any) -> Any:
    kind = str(annotation)
    if name == "db":
        return str(value) if is_dsn(str(value)) else Path(value).expanduser()
    if kind.startswith("bool"):
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off", ""):
            return False
        raise CuememError(f"setting {name}={value!r} is not a valid bool: use true or false")
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("Path"):
            return Path(value).expanduser()
    except (TypeError, ValueError) as exc:
        raise CuememError(f"setting {name}={value!r} is not a valid {kind}") from exc
    return value
