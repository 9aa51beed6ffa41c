"""The default local reader: a GGUF run by llama.cpp through a prebuilt CPU library (no compiler step).

The library is the CPU build inside the `llama-cpp-cffi` wheel (MIT), installed with `--no-deps` by `make setup`.
Only its compiled CFFI module is loaded, straight from its file: the package's own Python layer imports
transformers and the model hub, which this backend never needs. Measured against the transformers path and ONNX
Runtime GenAI in BENCHMARKS.md ("Choosing the reader's runtime").

What it adds over a plain generate loop:
- **prefix reuse**: the tokens already in the KV cache are kept up to the first difference, so the fixed system
  prompt, and the answer's messages when the citation is chosen next, are not evaluated twice;
- **streaming**: `stream` yields text as it is decoded (whole UTF-8 characters only);
- **constrained choice with log-probabilities**: a short option list is scored token by token (teacher forcing,
  so each choice has its log-probability); a long one is chosen under a GBNF alternation;
- **JSON**: the JSON schema becomes a GBNF grammar (`schema_grammar`).

Failures: LLMUnavailableError when the library or the GGUF file is missing, the model fails to load, a prompt
does not fit the context window or a decode fails; LLMOutputError for a completion without the expected shape.
"""

from __future__ import annotations

import codecs
import glob
import importlib.machinery
import importlib.util
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..models import cache_root
from .base import ChatResult, Choice, LLMUnavailableError, Messages, Usage
from .local import LocalModel, _defused, _resolve, model_label, resolve_local_model

log = logging.getLogger(__name__)
PACKAGE = "llama"  # the import name of the `llama-cpp-cffi` wheel
INSTALL = "pip install --no-deps llama-cpp-cffi==0.4.20 (make setup does)"
DEFAULT_QUANT = "q4_0"  # settings.llm_quant: chosen on dev (BENCHMARKS.md, "The reader's runtime")
SCORED_OPTIONS = 48  # more options than this are chosen under a grammar (no log-probabilities)
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _gbnf_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal (quotes, backslashes and control characters escaped)."""
    return '"' + "".join(_gbnf_char(ch) for ch in text) + '"'


def choice_grammar(options: list[str]) -> str:
    return "root ::= " + " | ".join(gbnf_literal(o) for o in options)


_JSON_RULES = {
    "ws": "[ ]?",
    "char": '[^"\\\\\\x00-\\x1F] | "\\\\" ["\\\\/bfnrt]',
    "string": '"\\"" char* "\\""',
    # JSON's numbers: no leading zero ("05" is not JSON, and a model copies one from "night 05")
    "integer": '"-"? ( "0" | [1-9] [0-9]{0,14} )',
    "number": '"-"? ( "0" | [1-9] [0-9]{0,14} ) ( "." [0-9]{1,10} )?',
    "boolean": '"true" | "false"',
    "null": '"null"',
}


def schema_grammar(schema: dict[str, Any]) -> str:
    """A GBNF grammar accepting the JSON documents of `schema` (objects with their properties in order, enums,
    strings, numbers, integers, booleans, arrays of these; pydantic's `$ref`s followed). A string with a
    `maxLength` is bounded in the grammar; others are unbounded there (`max_tokens` bounds them)."""
    definitions = schema.get("$defs") or schema.get("definitions") or {}
    rules: dict[str, str] = {}

    def rule(spec: dict[str, Any], name: str) -> str:
        spec = _resolve(spec, definitions)
        if "enum" in spec or "const" in spec:
            values = spec.get("enum", [spec.get("const")])
            body = " | ".join(gbnf_literal(json.dumps(v, ensure_ascii=False)) for v in values)
        elif spec.get("type") == "object" or "properties" in spec:
            parts = []
            for i, (key, sub) in enumerate((spec.get("properties") or {}).items()):
                sep = '"," ws ' if i else ""
                parts.append(f'{sep}{gbnf_literal(json.dumps(key))} ws ":" ws {rule(sub, f"{name}-{i}")}')
            body = '"{" ws ' + " ".join(parts) + ' ws "}"' if parts else '"{" ws "}"'
        elif spec.get("type") == "array":
            item = rule(spec.get("items") or {"type": "string"}, f"{name}-item")
            body = f'"[" ws ( {item} ( "," ws {item} ){{0,15}} )? ws "]"'
        elif spec.get("type") in (None, "string") and isinstance(spec.get("maxLength"), int):
            # a bounded string (pydantic's max_length): a small model otherwise runs on until the budget is spent
            body = f'"\\"" char{{0,{max(0, spec["maxLength"])}}} "\\""'
        else:
            kind = spec.get("type")
            kind = kind if isinstance(kind, str) and kind in _JSON_RULES else "string"
            return kind
        rules[name] = body
        return name

    top = rule(schema, "root")
    if top != "root":
        rules["root"] = top
    lines = [f"{name} ::= {body}" for name, body in rules.items()]
    lines += [f"{name} ::= {body}" for name, body in _JSON_RULES.items()]
    return "\n".join(lines)


def _document_budget(schema: dict[str, Any], per_value: int) -> tuple[int, str]:
    """Tokens enough for a document of `schema` (`per_value` for each value, a bounded string's maxLength, four
    values per array), and its keys and punctuation (forced by the grammar, counted on top by the caller)."""
    definitions = schema.get("$defs") or schema.get("definitions") or {}
    properties = _resolve(schema, definitions).get("properties") or {}
    if not properties:
        return (4 * per_value if _resolve(schema, definitions).get("type") == "array" else per_value), "[]"
    total = 0
    for spec in map(lambda p: _resolve(p, definitions), properties.values()):
        bound = spec.get("maxLength")
        total += (
            4 * per_value if spec.get("type") == "array" else max(per_value, bound if isinstance(bound, int) else 0)
        )
    return total, json.dumps(dict.fromkeys(properties, ""))


def library() -> tuple[Any, Any]:
    """(lib, ffi) of the prebuilt llama.cpp CPU library, loaded from its file without running the package's
    `__init__` (which would import transformers and probe for CUDA). LLMUnavailableError when not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    found = (
        glob.glob(str(Path(next(iter(spec.submodule_search_locations))) / "_llama_cpp_cpu*.so"))
        if (spec is not None and spec.submodule_search_locations)
        else []
    )
    if not found:
        raise LLMUnavailableError(f"llama.cpp's prebuilt CPU library is not installed: {INSTALL}")
    try:
        loader = importlib.machinery.ExtensionFileLoader("_llama_cpp_cpu", found[0])
        module_spec = importlib.util.spec_from_file_location("_llama_cpp_cpu", found[0], loader=loader)
        assert module_spec is not None
        module = importlib.util.module_from_spec(module_spec)
        loader.exec_module(module)
    except (ImportError, OSError, AssertionError) as exc:  # a wheel built for another platform or C library
        raise LLMUnavailableError(f"llama.cpp's library cannot be loaded ({exc}): {INSTALL}") from exc
    return module.lib, module.ffi


_LIB: tuple[Any, Any] | None = None
_LIB_LOCK = threading.Lock()


def _native() -> tuple[Any, Any]:
    """The library, loaded once per process, its log silenced and its backend initialised."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            lib, ffi = library()

            @ffi.callback("void(enum ggml_log_level, char *, void *)")
            def quiet(level: Any, text: Any, data: Any) -> None:
                return None

            lib.llama_log_set(quiet, ffi.NULL)
            lib.llama_backend_init()
            _LIB = (lib, ffi)
            _KEEP.append(quiet)
    return _LIB


_KEEP: list[Any] = []  # the log callback must outlive every call into the library
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


@dataclass
class _Loaded:
    """One model in memory with its context: shared by every backend of this process that names the same file,
    so the server and the benchmark load a model once."""

    lib: Any
    ffi: Any
    model: Any
    ctx: Any
    vocab: Any
    template: Any
    n_ctx: int
    n_batch: int
    lock: threading.RLock = field(default_factory=threading.RLock)
    cached: list[int] = field(default_factory=list)  # the tokens whose keys and values are in the KV cache


# Re-encodings llama.cpp's portable CPU build evaluates prompts faster in (BENCHMARKS.md, "The reader's runtime"):
# Q4_0 is repacked for AVX2 at load time (prefill ~1.7x Q4_K_M's on 2 cores), Q8_0 keeps every fetched value.
QUANTS = {"q4_0": 2, "q8_0": 7}  # llama_ftype values


def requantized(model: LocalModel, quant: str) -> Path:
    """The model's GGUF re-encoded as `quant` by llama.cpp's own quantizer, made once in the model cache (a few
    seconds; atomically, so concurrent first loads are safe); the fetched, verified file is left as it is."""
    if quant not in QUANTS:
        raise LLMUnavailableError(f"unknown llm_quant {quant!r}: choose {', '.join(QUANTS)} or '' (as fetched)")
    target = cache_root() / f"{model.converted.removesuffix('-f32')}.{quant}.gguf"
    if target.is_file():
        return target
    lib, ffi = _native()
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=".quant-", suffix=".gguf", dir=target.parent)
    os.close(handle)
    try:
        params = lib.llama_model_quantize_default_params()
        params.ftype = QUANTS[quant]
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        code = lib.llama_model_quantize(
            str(model.gguf).encode("utf-8"), staging.encode("utf-8"), ffi.new("llama_model_quantize_params *", params)
        )
        if code != 0:
            raise LLMUnavailableError(
                f"llama.cpp cannot load {model.gguf} to re-encode it as {quant} (not a GGUF file it reads, or"
                f" truncated; code {code}): fetch it again, or set llm_quant to '' to run it as it is"
            )
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def prepare(models: tuple[str, ...] = ("",), quant: str = DEFAULT_QUANT) -> list[Path]:
    """Re-encode the fetched local models once, ahead of their first answer (`make setup`); a model that is not
    there, or a missing library, is skipped (it fails clearly on first use instead)."""
    done = []
    for name in models:
        try:
            done.append(requantized(resolve_local_model(name), quant))
        except LLMUnavailableError as exc:
            log.info("not re-encoding %s: %s", name or "the default model", exc)
    return done


_MODELS: dict[tuple[str, int, int], _Loaded] = {}
_MODELS_LOCK = threading.Lock()


def _load(path: Path, n_ctx: int, threads: int) -> _Loaded:
    key = (str(path), n_ctx, threads)
    with _MODELS_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        lib, ffi = _native()
        params = lib.llama_model_default_params()
        model = lib.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if model == ffi.NULL:
            raise LLMUnavailableError(f"llama.cpp cannot load {path} (not a GGUF file it reads, or truncated)")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = 512
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        ctx = lib.llama_init_from_model(model, cparams)
        if ctx == ffi.NULL:
            lib.llama_model_free(model)
            raise LLMUnavailableError(f"llama.cpp cannot make a context of {n_ctx} tokens for {path}")
        loaded = _Loaded(
            lib,
            ffi,
            model,
            ctx,
            lib.llama_model_get_vocab(model),
            lib.llama_model_chat_template(model, ffi.NULL),
            n_ctx,
            512,
        )
        _MODELS[key] = loaded
        return loaded


def forget_prompts() -> None:
    """Empty the KV cache of every model this process loaded (promise 2: a delete leaves no trace in caches).
    The cache keeps the last prompt's keys and values for prefix reuse, and a prompt quotes turns: after a
    delete, llama.cpp's clear drops every cell and zeroes its buffers, and the next prompt is evaluated whole."""
    with _MODELS_LOCK:
        loaded = list(_MODELS.values())
    for m in loaded:
        with m.lock:
            m.lib.llama_kv_cache_clear(m.ctx)
            m.cached = []


class LlamaCppBackend:
    """llama.cpp on the CPU, greedy; `stream` for token-by-token answers."""

    def __init__(
        self,
        model_path: str | None = None,
        *,
        model: str = "",
        n_ctx: int = 4096,
        threads: int | None = None,
        quant: str = DEFAULT_QUANT,
    ) -> None:
        """`model`: a registry name or GGUF path (default: the default local model); `model_path` is the older
        spelling. `threads`: every core by default. `quant`: run the GGUF re-encoded as q4_0 (the default) or
        q8_0, or "" for the file as fetched."""
        self._wanted = model_path or model
        self._quant = quant
        self.name = f"llamacpp:{model_label(self._wanted)[0]}[greedy{',' + quant if quant else ''}]"
        self._n_ctx = n_ctx
        self._threads = threads or os.cpu_count() or 1
        self._loaded: _Loaded | None = None

    def load(self) -> _Loaded:
        if self._loaded is None:
            model = resolve_local_model(self._wanted)  # LLMUnavailableError with the install/fetch command
            path = requantized(model, self._quant) if self._quant else model.gguf
            self._loaded = _load(path, self._n_ctx, self._threads)
        return self._loaded

    # -- tokens ------------------------------------------------------------------------------------------------
    def _tokenize(self, m: _Loaded, text: str, *, special: bool) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 16
        buf = m.ffi.new("llama_token[]", size)
        n = m.lib.llama_tokenize(m.vocab, data, len(data), buf, size, special, special)
        if n < 0:
            raise LLMUnavailableError(f"llama.cpp could not tokenize a text of {len(data)} bytes")
        return list(buf[0:n])

    def prompt_tokens(self, messages: Messages, *, generation: bool = True) -> list[int]:
        """The chat template (the GGUF's own) applied to `messages`, tokenized; stored text cannot open a role."""
        m = self.load()
        messages = _defused(messages)
        keep = []
        arr = m.ffi.new("struct llama_chat_message[]", len(messages))
        for i, message in enumerate(messages):
            role = m.ffi.new("char[]", message["role"].encode("utf-8"))
            content = m.ffi.new("char[]", message["content"].encode("utf-8"))
            keep += [role, content]
            arr[i].role, arr[i].content = role, content
        size = 4096 + sum(len(x["content"].encode("utf-8")) * 2 for x in messages)
        buf = m.ffi.new("char[]", size)
        n = m.lib.llama_chat_apply_template(m.template, arr, len(messages), generation, buf, size)
        if n < 0 or n > size:
            raise LLMUnavailableError("llama.cpp cannot apply this model's chat template")
        return self._tokenize(m, m.ffi.buffer(buf, n)[:].decode("utf-8", "replace"), special=True)

    def _prefill(self, m: _Loaded, tokens: list[int], extra: int) -> None:
        """Bring the KV cache to `tokens`, evaluating only what differs from what it holds."""
        if len(tokens) + extra >= m.n_ctx:
            raise LLMUnavailableError(
                f"llama.cpp failed: the prompt ({len(tokens)} tokens) and {extra} more exceed the context window"
                f" of {m.n_ctx}"
            )
        same = 0
        for a, b in zip(m.cached, tokens[:-1], strict=False):  # the last token is always evaluated (its logits)
            if a != b:
                break
            same += 1
        m.lib.llama_kv_cache_seq_rm(m.ctx, 0, same, -1)
        m.cached = tokens[:same]
        self._decode(m, tokens[same:])

    def _decode(self, m: _Loaded, tokens: list[int]) -> None:
        for start in range(0, len(tokens), m.n_batch):
            part = tokens[start : start + m.n_batch]
            arr = m.ffi.new("llama_token[]", part)
            if m.lib.llama_decode(m.ctx, m.lib.llama_batch_get_one(arr, len(part))) != 0:
                m.lib.llama_kv_cache_clear(m.ctx)
                m.cached = []
                raise LLMUnavailableError("llama.cpp failed: llama_decode returned an error")
            m.cached.extend(part)

    def _logprobs(self, m: _Loaded) -> np.ndarray:
        """Log-softmax of the logits after the last evaluated token."""
        n_vocab = m.lib.llama_vocab_n_tokens(m.vocab)
        row = np.frombuffer(m.ffi.buffer(m.lib.llama_get_logits_ith(m.ctx, -1), 4 * n_vocab), dtype=np.float32)
        row = row.astype(np.float64)
        top = row.max()
        return row - top - np.log(np.exp(row - top).sum())

    # -- generation --------------------------------------------------------------------------------------------
    def _generate(self, messages: Messages, max_tokens: int, grammar: str | None, usage: Usage) -> Iterator[str]:
        m = self.load()
        prompt = self.prompt_tokens(messages)
        usage.prompt_tokens = len(prompt)
        with m.lock:
            self._prefill(m, prompt, max_tokens)
            constraint = None
            if grammar is not None:
                constraint = m.lib.llama_sampler_init_grammar(m.vocab, grammar.encode("utf-8"), b"root")
                if constraint == m.ffi.NULL:
                    raise LLMUnavailableError("llama.cpp rejected a grammar")
            utf8 = codecs.getincrementaldecoder("utf-8")("replace")
            piece = m.ffi.new("char[]", 256)
            try:
                for _ in range(max_tokens):
                    token = self._greedy(m, constraint)
                    if m.lib.llama_vocab_is_eog(m.vocab, token):
                        break
                    usage.completion_tokens += 1
                    n = m.lib.llama_token_to_piece(m.vocab, token, piece, 256, 0, False)
                    self._decode(m, [token])
                    text = utf8.decode(m.ffi.buffer(piece, max(n, 0))[:])
                    if text:
                        yield text
                tail = utf8.decode(b"", final=True)
                if tail:
                    yield tail
            finally:
                if constraint is not None:
                    m.lib.llama_sampler_free(constraint)

    def _greedy(self, m: _Loaded, constraint: Any) -> int:
        """The most likely next token, or under a grammar the most likely one it allows. The grammar checks the
        most likely token alone first and the whole vocabulary only when it refuses it (as llama.cpp's own
        sampler does): the same token as masking every step, without checking ~50k tokens per step."""
        n_vocab = m.lib.llama_vocab_n_tokens(m.vocab)
        logits = np.frombuffer(m.ffi.buffer(m.lib.llama_get_logits_ith(m.ctx, -1), 4 * n_vocab), dtype=np.float32)
        token = int(np.argmax(logits))
        if constraint is None:
            return token
        if self._allows(m, constraint, np.array([token], dtype=np.int32), logits)[0] > -np.inf:
            m.lib.llama_sampler_accept(constraint, token)
            return token
        masked = self._allows(m, constraint, np.arange(n_vocab, dtype=np.int32), logits)
        token = int(np.argmax(masked))
        if masked[token] == -np.inf:
            raise LLMUnavailableError("llama.cpp failed: the grammar allows no next token")
        m.lib.llama_sampler_accept(constraint, token)
        return token

    @staticmethod
    def _allows(m: _Loaded, constraint: Any, tokens: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The tokens' logits after the grammar's mask (-inf where it refuses a token)."""
        data = m.ffi.new("llama_token_data[]", len(tokens))
        view = np.frombuffer(m.ffi.buffer(data), dtype=TOKEN_DATA)
        view["id"], view["logit"], view["p"] = tokens, logits[tokens], 0.0
        candidates = m.ffi.new("llama_token_data_array *")
        candidates.data, candidates.size, candidates.selected, candidates.sorted = data, len(tokens), -1, False
        m.lib.llama_sampler_apply(constraint, candidates)
        return view["logit"].copy()

    def stream(self, messages: Messages, *, max_tokens: int = 128) -> Iterator[str]:
        """The greedy reply, piece by piece as it is decoded."""
        yield from self._generate(messages, max_tokens, None, Usage())

    def chat(self, messages: Messages, *, max_tokens: int = 128, temperature: float = 0.0) -> ChatResult:
        usage = Usage()
        text = "".join(self._generate(messages, max_tokens, None, usage))
        return ChatResult(text.strip(), usage)

    def json(self, messages: Messages, schema: dict[str, Any], *, max_tokens: int = 48) -> tuple[str, Usage]:
        """A document of `schema`, decoded under its grammar. `max_tokens` bounds each value, as the transformers
        backend's does (a string with a maxLength gets as many), and the keys and punctuation the grammar forces
        come on top: a budget for the whole document cut two-field replies short, and scg-llm's and profile-llm's
        model calls all failed on the default backend."""
        usage = Usage()
        values, skeleton = _document_budget(schema, max_tokens)
        budget = values + len(self._tokenize(self.load(), skeleton, special=False))
        text = "".join(self._generate(messages, budget, schema_grammar(schema), usage))
        return text, usage

    def choose(self, messages: Messages, options: list[str], k: int = 1, beam: int = 4) -> tuple[list[Choice], Usage]:
        """The k most likely options: scored by their log-probability under the model (teacher forcing) when
        there are at most SCORED_OPTIONS, else chosen one by one under a grammar (no log-probabilities)."""
        if len(options) > SCORED_OPTIONS:
            return self._choose_by_grammar(messages, options, k)
        m = self.load()
        prompt = self.prompt_tokens(messages)
        usage = Usage(len(prompt), 0)
        scores: list[float] = []
        with m.lock:
            longest = max(len(self._tokenize(m, o, special=False)) for o in options)
            self._prefill(m, prompt, longest + 1)
            first = self._logprobs(m)
            for option in options:
                ids = self._tokenize(m, option, special=False) or [0]
                total = float(first[ids[0]])
                for i in range(1, len(ids)):
                    self._decode(m, [ids[i - 1]])
                    total += float(self._logprobs(m)[ids[i]])
                    usage.completion_tokens += 1
                m.lib.llama_kv_cache_seq_rm(m.ctx, 0, len(prompt), -1)
                m.cached = m.cached[: len(prompt)]
                scores.append(total)
        order = sorted(range(len(options)), key=lambda i: -scores[i])[:k]
        return [Choice(options[i], scores[i]) for i in order], usage

    def _choose_by_grammar(self, messages: Messages, options: list[str], k: int) -> tuple[list[Choice], Usage]:
        remaining = list(options)
        chosen: list[Choice] = []
        total = Usage()
        # Under a grammar an option may be spelled in smaller tokens than usual: budget one token per UTF-8 byte.
        longest = max(len(o.encode("utf-8")) for o in options) + 2
        while remaining and len(chosen) < k:
            usage = Usage()
            text = "".join(self._generate(messages, longest, choice_grammar(remaining), usage))
            total.prompt_tokens += usage.prompt_tokens
            total.completion_tokens += usage.completion_tokens
            chosen.append(Choice(text))
            if text not in remaining:
                break  # the client reports the stray answer
            remaining.remove(text)
        return chosen, total

    def score(self, messages: Messages, continuations: list[str]) -> tuple[list[float], Usage]:
        raise LLMUnavailableError("score is offered by the local (transformers) backend, not llama.cpp")
