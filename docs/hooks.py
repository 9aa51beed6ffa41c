"""MkDocs hooks: the pages that must not drift are generated from the code at build time.

- `<!-- generated: http-api -->` becomes the reference of every route and schema, read from the server's own
  OpenAPI schema (`cuemem.server.app.create_app(...).openapi()`).
- `<!-- generated: settings -->` becomes the table of every setting, read from `cuemem.config.Settings`: its fields,
  types and defaults, and the comments written beside them in the source.
- `<!-- generated: benchmark-pages -->` becomes a list of the pages in docs/benchmarks/ (when the folder exists),
  which are also added to the navigation.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import os
import re
import tempfile
import tokenize
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

DOCS = Path(__file__).resolve().parent

# Settings whose source line carries no comment: their meaning is written here. The build fails when a setting has
# neither a comment nor an entry, or when an entry names no setting, so the table cannot fall behind the code.
SETTING_NOTES = {
    "engine": "the engine `Memory`, the CLI and the server use (see [Engines](engines.md)); a registered name, "
    "optionally with config fields: `episodic[window=2048]`",
    "embed_base_url": "the endpoint of the `openai` embedder (vLLM, Ollama, a llama.cpp server …)",
    "embed_api_key": "the key of the `openai` embedder; `OPENAI_API_KEY` is read when unset",
    "embed_batch_size": "texts per embedding call",
    "embed_timeout": "seconds before an `openai` embedding request fails",
    "max_turn_bytes": "the largest turn accepted (UTF-8 bytes); larger turns are rejected with a clear error",
    "date_boost": "see `speaker_boost`: the share of its score a hit gains when it is dated inside the date or "
    "period the question names",
    "revise_min_frame": "see `revise_depth`: the share of attribute words (weighted Jaccard) two statements must "
    "share to set the same attribute",
    "revise_recurring": "see `revise_depth`: a name said in this many turns is a goal's anchor, a rarer one a value",
    "expand_depth": "see `expand_weight`: how many top hits the second round feeds back from",
    "rerank_depth": "see `rerank`: how many top hits the model rescores",
    "rerank_weight": "see `rerank`: the weight of the model's ranking",
    "rrf_k": "the constant of reciprocal-rank fusion: a hit at rank r votes 1 / (rrf_k + r)",
    "rrf_dense_weight": "see `rrf_bm25_weight`: the weight of the dense ranking's votes",
    "k": "hits per search when a call does not say",
    "llm_base_url": 'the endpoint of `llm = "openai"`',
    "llm_api_key": 'the key of `llm = "openai"`; `OPENAI_API_KEY` is read when unset',
    "llm_timeout": "seconds before an OpenAI-compatible request fails (then retried)",
    "llm_retries": "retries of an OpenAI-compatible request (with backoff on 429, 5xx and timeouts)",
    "llm_concurrency": "the most OpenAI-compatible requests in flight at once",
}


def on_config(config: Any) -> Any:
    """Add the pages of docs/benchmarks/ (another part of the docs, which may be absent) to the navigation."""
    pages = _benchmark_pages()
    if pages and config.get("nav"):
        config["nav"].append({"Benchmark reference": [f"benchmarks/{p.name}" for p in pages]})
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each generation marker with its generated text."""
    if "<!-- generated: http-api -->" in markdown:
        markdown = markdown.replace("<!-- generated: http-api -->", http_api_markdown())
    if "<!-- generated: settings -->" in markdown:
        markdown = markdown.replace("<!-- generated: settings -->", settings_markdown())
    for name in re.findall(r"<!-- generated: engine-config ([\w-]+) -->", markdown):
        markdown = markdown.replace(f"<!-- generated: engine-config {name} -->", engine_config_markdown(name))
    if "<!-- generated: benchmark-pages -->" in markdown:
        markdown = markdown.replace("<!-- generated: benchmark-pages -->", _benchmark_list(page))
    return markdown


# ---------------------------------------------------------------------------------------------------------- pages


def _benchmark_pages() -> list[Path]:
    folder = DOCS / "benchmarks"
    return sorted(folder.glob("*.md")) if folder.is_dir() else []


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ")


def _benchmark_list(page: Any) -> str:
    pages = _benchmark_pages()
    if not pages:
        return "*(The per-topic benchmark pages of `docs/benchmarks/` are not in this checkout.)*"
    return "\n".join(f"- [{_title(p)}](benchmarks/{p.name})" for p in pages)


# ------------------------------------------------------------------------------------------------------- settings


def _field_comments(source: str, class_name: str = "Settings") -> dict[str, str]:
    """Each field's comment in a dataclass's source: the one on its own line, else the comment lines right above."""
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    out: dict[str, str] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        line = node.lineno
        if line in comments and source.splitlines()[line - 1].lstrip()[:1] != "#":
            out[node.target.id] = comments[line]
            continue
        above: list[str] = []
        row = line - 1
        while row in comments and source.splitlines()[row - 1].lstrip().startswith("#"):
            above.insert(0, comments[row])
            row -= 1
        if above:
            out[node.target.id] = " ".join(above)
    return out


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default_factory is not dataclasses.MISSING:  # a computed default: say what computes it
        doc = (inspect.getdoc(f.default_factory) or "").split("\n")[0]
        return f"`{f.default_factory.__name__}()`: {doc}"
    value = f.default
    if isinstance(value, Path):
        value = str(value)
    return f"`{value!r}`" if value not in (None, "") else ("none" if value is None else '`""`')


def settings_markdown() -> str:
    """The settings table, from `cuemem.config.Settings` and the comments of its source."""
    from cuemem import config

    notes = _field_comments(inspect.getsource(config))
    names = [f.name for f in dataclasses.fields(config.Settings)]
    stale = sorted(set(SETTING_NOTES) - set(names))
    if stale:
        raise PluginError(f"docs/hooks.py SETTING_NOTES names no setting: {', '.join(stale)}")
    rows = [
        "| setting | environment | type | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for f in dataclasses.fields(config.Settings):
        meaning = notes.get(f.name) or SETTING_NOTES.get(f.name)
        if f.name in notes and f.name in SETTING_NOTES:
            meaning = f"{notes[f.name]}; {SETTING_NOTES[f.name]}"
        if not meaning:
            raise PluginError(
                f"setting {f.name} has no comment in cuemem/config.py and no entry in docs/hooks.py SETTING_NOTES"
            )
        kind = str(f.type).replace("|", "or")
        meaning = meaning.replace("|", "\\|")
        rows.append(f"| `{f.name}` | `CUEMEM_{f.name.upper()}` | {kind} | {_default(f)} | {meaning} |")
    return "\n".join(rows)


def engine_config_markdown(engine: str) -> str:
    """The table of an engine family's config fields (set with `engine[field=value]`), from its dataclass."""
    from cuemem.engines import get_engine

    config = getattr(get_engine(engine), "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise PluginError(f"engine {engine} has no config dataclass to document")
    cls = type(config)
    notes = _field_comments(inspect.getsource(inspect.getmodule(cls)), cls.__name__)  # type: ignore[arg-type]
    rows = [
        f"Fields of `{cls.__name__}` (`{engine}[field=value,...]`):",
        "",
        "| field | default | meaning |",
        "|---|---|---|",
    ]
    for f in dataclasses.fields(cls):
        rows.append(f"| `{f.name}` | {_default(f)} | {_cell(notes.get(f.name, ''))} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------------- HTTP API


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of the app `cuemem serve` runs, over a throwaway store (no model is loaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cuemem import Memory
    from cuemem.config import Settings
    from cuemem.server.app import create_app
    from cuemem.server.keys import KeyRing

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "openapi.db"
        memory = Memory(db, settings=Settings(db=db, embedder="hashing", llm_cache="off"))
        keys = KeyRing(Path(tmp) / "keys")
        try:
            return create_app(memory, keys, mcp=False).openapi()
        finally:
            memory.close()
            keys.close()


def _type(schema: dict[str, Any] | bool) -> str:
    if not isinstance(schema, dict):  # JSON Schema's `true`: anything
        return "any"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        optional = any(s.get("type") == "null" for s in schema["anyOf"])
        return " or ".join(kinds) + (" or null" if optional else "")
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return str(schema.get("type", "any"))


def _cell(text: Any) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|")


def _constraints(schema: dict[str, Any]) -> str:
    marks = {"minimum": "≥", "maximum": "≤", "exclusiveMinimum": ">", "minLength": "length ≥", "maxLength": "length ≤"}
    parts = [f"{sign} {schema[key]}" for key, sign in marks.items() if key in schema]
    for sub in schema.get("anyOf", []):
        parts += [f"{sign} {sub[key]}" for key, sign in marks.items() if key in sub]
    return ", ".join(parts)


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", "", _cell(op.get("description") or op.get("summary", "")), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | default | description |", "|---|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            default = f"`{schema['default']}`" if "default" in schema else ""
            desc = _cell(p.get("description") or schema.get("description", ""))
            bounds = _constraints(schema)
            desc = f"{desc} ({bounds})" if bounds and desc else desc or bounds
            required = "yes" if p.get("required") else "no"
            lines.append(f"| `{p['name']}` | {p['in']} | {_type(schema)} | {required} | {default} | {desc} |")
        lines.append("")
    body = op.get("requestBody")
    if body:
        kinds = ", ".join(f"`{k}` {_type(v.get('schema', {}))}" for k, v in body.get("content", {}).items())
        lines += [f"Body: {kinds}." if kinds else "Body: any.", ""]
    responses = [
        f"{code} ({_cell(r.get('description', ''))}"
        + "".join(f": {_type(c.get('schema', {}))}" for c in r.get("content", {}).values() if c.get("schema"))
        + ")"
        for code, r in op.get("responses", {}).items()
    ]
    lines += ["Responses: " + "; ".join(responses) + ".", ""]
    return lines


def _component(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
        for field, sub in props.items():
            default = f"`{sub['default']}`" if "default" in sub and sub["default"] is not None else ""
            desc = _cell(sub.get("description", ""))
            bounds = _constraints(sub)
            desc = f"{desc} ({bounds})" if bounds and desc else desc or bounds
            need = "yes" if field in required else "no"
            lines.append(f"| `{field}` | {_type(sub)} | {need} | {default} | {desc} |")
        lines.append("")
    return lines


def http_api_markdown() -> str:
    """Every route and schema of the server, grouped by tag, from its OpenAPI schema."""
    spec = openapi_schema()
    lines = [f"The schema below is `cuemem serve`'s own (`GET /openapi.json`), version {spec['info']['version']}.", ""]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    for tag, ops in by_tag.items():
        lines += [f"## Routes: {tag}", ""]
        for path, method, op in ops:
            lines += _operation(path, method, op)
    lines += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        lines += _component(name, schema)
    return "\n".join(lines)
