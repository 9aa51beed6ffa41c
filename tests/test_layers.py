"""The layers (issue 10): store -> index / llm / embed -> engines -> memory -> agent / integrations -> server / cli /
bench, with no import running upward and no import cycle among cuemem's modules. Read from the source with `ast`:
every import counts, at module level, inside functions, and under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cuemem"

# A module may import only modules of its own layer or lower ones.
LAYERS: list[tuple[int, list[str]]] = [
    (0, ["cuemem.errors", "cuemem.types", "cuemem.config", "cuemem.formats"]),
    (1, ["cuemem.store", "cuemem.store.*", "cuemem.models", "cuemem.models.*"]),
    (2, ["cuemem.index", "cuemem.index.*", "cuemem.llm", "cuemem.llm.*", "cuemem.embed", "cuemem.embed.*"]),
    (3, ["cuemem.engines", "cuemem.engines.*", "cuemem.answer"]),
    (
        4,
        ["cuemem.memory", "cuemem.indexer", "cuemem.indexing", "cuemem.intake", "cuemem.transfer", "cuemem.forgetting"],
    ),
    (5, ["cuemem.agent", "cuemem.agent.*", "cuemem.integrations", "cuemem.integrations.*", "cuemem.migrate"]),
    (
        6,
        [
            "cuemem.server",
            "cuemem.server.*",
            "cuemem.cli",
            "cuemem.cli.*",
            "cuemem.bench",
            "cuemem.bench.*",
            "cuemem",
            "cuemem.__main__",
        ],
    ),
]


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by the name of its __init__)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int | None:
    for layer, patterns in LAYERS:
        for pattern in patterns:
            if module == pattern or (pattern.endswith(".*") and module.startswith(pattern[:-1])):
                return layer
    return None


def imports(module: str, source: str, is_package: bool, known: Collection[str]) -> set[str]:
    """The cuemem modules that `module` imports: `from X import a` is an edge to X.a when that is a module, else to X
    (a package's __init__); relative imports are resolved against the module's package."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return {name for name in found if name in known and name != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        module: imports(module, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)
        for module, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_imports_are_resolved_as_python_resolves_them():
    known = {
        "cuemem",
        "cuemem.errors",
        "cuemem.store",
        "cuemem.store.sqlite",
        "cuemem.engines",
        "cuemem.engines.base",
        "cuemem.engines.stitch",
        "cuemem.engines.stitch.engine",
        "cuemem.engines.stitch.scope",
        "cuemem.engines.stitch.labellers",
        "cuemem.memory",
        "cuemem.llm",
    }
    source = """
from typing import TYPE_CHECKING
import numpy
from ..base import EngineContext
from . import labellers
from .. import stitch
import cuemem.store
from cuemem.llm import LLMClient
if TYPE_CHECKING:
    from .scope import OpenSegment
def late():
    from ...memory import Memory
    from ...store.sqlite import SQLiteStore
"""
    assert imports("cuemem.engines.stitch.engine", source, False, known) == {
        "cuemem.engines.base",
        "cuemem.engines.stitch.labellers",
        "cuemem.engines.stitch",
        "cuemem.store",
        "cuemem.llm",
        "cuemem.engines.stitch.scope",
        "cuemem.memory",
        "cuemem.store.sqlite",
    }
    # In a package's __init__, "." is the package itself.
    assert imports("cuemem.engines.stitch", "from .engine import X\nfrom ..base import Y", True, known) == {
        "cuemem.engines.stitch.engine",
        "cuemem.engines.base",
    }
    assert "cuemem" in modules() and "cuemem.memory" in graph()["cuemem"]


def test_no_import_cycles():
    edges = graph()
    found = cycles(edges)
    detail = [
        " <-> ".join(component)
        + ": "
        + ", ".join(f"{a} -> {b}" for a in component for b in sorted(edges[a]) if b in component)
        for component in found
    ]
    assert not found, "import cycles among cuemem modules:\n" + "\n".join(detail)


def test_no_import_cycles_between_packages():
    """The same one level up: cuemem's subpackages and top-level modules as nodes (embed and index may not lean on
    each other, even through different modules)."""

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges = graph()
    packages: dict[str, set[str]] = {}
    for a, targets in edges.items():
        packages.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a))
    found = cycles(packages)
    detail = [
        " <-> ".join(component)
        + ": "
        + ", ".join(
            sorted(
                f"{a} -> {b}"
                for a, targets in edges.items()
                for b in targets
                if unit(a) in component and unit(b) in component and unit(a) != unit(b)
            )
        )
        for component in found
    ]
    assert not found, "import cycles among cuemem's packages:\n" + "\n".join(detail)


def test_every_module_has_a_layer():
    missing = sorted(module for module in modules() if layer_of(module) is None)
    assert not missing, f"modules outside the layering (give them a layer in LAYERS): {missing}"


def test_no_import_runs_upward():
    edges = graph()
    upward = sorted(
        f"{a} (layer {layer_of(a)}) -> {b} (layer {layer_of(b)})"
        for a, targets in edges.items()
        for b in targets
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)  # type: ignore[operator]
    )
    assert not upward, "imports that run upward through the layers:\n" + "\n".join(upward)


MAX_LINES = 600  # issue 32: small focused modules


def test_no_module_is_over_600_lines():
    """Every module under cuemem/ stays within MAX_LINES lines (split a longer one by concept)."""
    long = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {lines} lines"
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    )
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)
