"""Mechanisms, not templates (issue 34, Rules): nothing in cuemem/engines, cuemem/index or cuemem/store imports
cuemem.bench, and no string literal there holds the look-alike generator's sentence templates or invented names.

Read from the source with `ast`, like tests/test_layers.py: every import counts (module level, inside functions,
under `if TYPE_CHECKING:`), and so does a module name given to importlib as text. The vocabulary is collected from
the generator itself (cuemem/bench/came_text.py, came_world.py), so it follows the generator when it changes:

- the fragments of its templates between placeholders and punctuation that have three words or more, not all of
  them function words ("Let's sort out", "we're going with", "what's the latest"); of the goal-switch templates
  (`OPEN`) two words are enough ("switching to", "where were we");
- the names it invents for values: hotels, restaurants, venues, shops, clinics ("Quinta Rosa"), clients and
  project codes (whole words, case as written); not its first names and cities, which real conversations share;
- its attribute nouns of three words or more ("place we're staying", "time the sightseeing walk begins").

Docstrings are left out (they cannot change what an engine does, and may quote an example); every other string
literal, f-string parts included, is read, lowercased, with regex escapes such as \\b and \\s dropped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from cuemem.bench import came_text, came_world

PACKAGE = Path(__file__).resolve().parents[1] / "cuemem"
GUARDED = ("engines", "index", "store")  # the packages that must work on any conversation
FORBIDDEN = "cuemem.bench"

# Words that make a fragment generic English when it has nothing else ("what is the", "how much is the").
_FUNCTION_WORDS = """a an the to of for it is are was be will have has do does did can could would we i you me my
our us that this then with so now there about as and or on at in by not what which how much many when where who
it's that's what's there's we're i've let's"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())


# ------------------------------------------------------------------------------------------------ the import rule
def module_name(path: Path) -> tuple[str, bool]:
    """(dotted name, is a package) of a source file under cuemem/."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def bench_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """The names through which `module`'s source reaches cuemem.bench: imports (relative ones resolved against the
    module's package) and module names given as text ("cuemem.bench.came" to importlib)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(source, module)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value.strip()]
        found += [n for n in names if n == FORBIDDEN or n.startswith(FORBIDDEN + ".")]
    return sorted(set(found))


# ------------------------------------------------------------------------------------------------ the vocabulary
def _normal(text: str) -> str:
    """Lowercase words and apostrophes only: regex escapes (\\b, \\s+) and punctuation become spaces."""
    text = re.sub(r"\\[A-Za-z]", " ", text.replace("’", "'").replace("`", "'"))
    return " ".join(re.sub(r"[^\w']+", " ", text.lower()).split())


def _fragments(templates: list[str], min_words: int) -> set[str]:
    out = set()
    for template in templates:
        for part in re.split(r"\{\w+\}|[,.;:?!—()]", template):
            words = _normal(part).split()
            if len(words) >= min_words and not set(words) <= FUNCTION_WORDS:
                out.add(" ".join(words))
    return out


@cache
def vocabulary() -> tuple[frozenset[str], frozenset[str]]:
    """(phrases matched on word boundaries in normal form, names matched as whole words as written)."""
    t = came_text
    sentences = [
        *t.STATE,
        *t.STATE_FOCUS,
        *t.OPTIONS,
        *(s for group in t.DECIDE.values() for s in group),
        *t.REVISE_NAMED,
        *t.REVISE_BY_VALUE,
        *t.Q_RECALL,
        *t.Q_REVISION,
        *t.Q_MULTIHOP,
        *(s for group in t.Q_SYNTHESIS.values() for s in group),
    ]
    nouns = {
        _normal(n)
        for attrs in came_world.KINDS.values()
        for a in attrs
        for n in (*a.said, *a.asked)
        if len(n.split()) >= 3
    }
    phrases = _fragments(sentences, 3) | _fragments(list(t.OPEN), 2) | nouns
    w = came_world
    names = {*w.HOTELS, *w.RESTAURANTS, *w.VENUES, *w.SHOPS, *w.CLINICS, *w.CLIENTS, *w.CODES}
    return frozenset(phrases), frozenset(names)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal but docstrings."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def generator_vocabulary(source: str) -> list[tuple[int, str]]:
    """(line, phrase or name) for each string literal of `source` that holds the generator's vocabulary."""
    phrases, names = vocabulary()
    hits = []
    for line, text in literals(source):
        normal = f" {_normal(text)} "
        hits += [(line, p) for p in sorted(phrases) if f" {p} " in normal]
        hits += [(line, n) for n in sorted(names) if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)]
    return hits


def guarded_sources() -> list[Path]:
    return sorted(p for package in GUARDED for p in (PACKAGE / package).rglob("*.py"))


# ------------------------------------------------------------------------------------------------ the rules
def test_engines_index_and_store_never_import_the_bench() -> None:
    assert len(guarded_sources()) > 20
    wrong = {}
    for path in guarded_sources():
        module, is_package = module_name(path)
        found = bench_imports(module, path.read_text(encoding="utf-8"), is_package)
        if found:
            wrong[module] = found
    assert not wrong, f"engines, index and store must not import cuemem.bench: {wrong}"


def test_engines_index_and_store_hold_none_of_the_generators_templates_or_names() -> None:
    wrong = {}
    for path in guarded_sources():
        hits = generator_vocabulary(path.read_text(encoding="utf-8"))
        if hits:
            wrong[str(path.relative_to(PACKAGE.parent))] = hits
    assert not wrong, f"the look-alike generator's phrasing or names in engine code (issue 34, Rules): {wrong}"


# ------------------------------------------------------------------------------------------------ the checkers fail
def test_the_vocabulary_holds_the_generators_phrasing_and_names_not_plain_english() -> None:
    phrases, names = vocabulary()
    assert {"switching to", "let's sort out", "where were we", "we're going with", "place we're staying"} <= phrases
    assert {"Quinta Rosa", "Tasca do Largo", "Garden Hall", "Northwind", "Apollo"} <= names
    assert not {"what is the", "how much is the", "instead", "for the"} & phrases
    assert not {"Lisbon", "Maria", "Tom"} & names  # real names that any conversation may hold


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("cuemem.engines.stitch.cues", "from cuemem.bench.came_text import OPEN\n"),
        ("cuemem.engines.stitch.cues", "from ...bench import came\n"),
        ("cuemem.engines.stitch.cues", "from ... import bench\n"),
        ("cuemem.index.text", "def f():\n    import cuemem.bench.came as c\n    return c\n"),
        ("cuemem.store.sqlite", "import importlib\nm = importlib.import_module('cuemem.bench.came_world')\n"),
    ],
)
def test_the_import_checker_finds_every_way_in(module: str, source: str) -> None:
    assert bench_imports(module, source)


def test_the_import_checker_lets_other_imports_be() -> None:
    source = "from ..index import bm25\nfrom cuemem.benchmarks_helper import x\nimport cuemem.types\nNAME = 'bench'\n"
    assert bench_imports("cuemem.engines.stitch.engine", source) == []


@pytest.mark.parametrize(
    "source",
    [
        'SWITCH_CUES = ("switching to", "moving on to")\n',
        'OPEN = re.compile(r"\\bLet\'s\\s+sort\\s+out\\b", re.I)\n',
        'def f(text):\n    return "Quinta Rosa" in text\n',
        'def f(goal):\n    return f"Okay, switching to {goal}."\n',
        "LODGING = {'bed for the night': 'hotel'}\n",
        "CLIENT = 'project Orion for Northwind'\n",
    ],
)
def test_the_vocabulary_checker_finds_pasted_phrasing(source: str) -> None:
    assert generator_vocabulary(source)


def test_the_vocabulary_checker_lets_docstrings_and_plain_words_be() -> None:
    source = (
        '"""A turn such as "Okay, switching to Day 2 of the Lisbon trip." opens a scope."""\n'
        "CUES = ('instead', 'switch to', 'what is the')\n"
        "PLACES = ('Lisbon', 'Porto')\n"
        "KIND = 'quintessential'\n"
    )
    assert generator_vocabulary(source) == []
