"""The engine contract as a base class (issue 32): every built-in engine subclasses BaseEngine and its hooks have
defaults; a third-party engine registered as a plugin that does not subclass it still works, wrapped in
PluginEngine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from conftest import ENGINES, TRIP, open_memory

import cuemem.engines
from cuemem.engines import BaseEngine, Engine, EngineContext, PluginEngine, as_engine, get_engine
from cuemem.engines.base import unwrap
from cuemem.errors import CuememError
from cuemem.store.base import DerivedSpec
from cuemem.types import Hit, Turn


class Notes:
    """A plugin engine with only the contract's required parts: a name, ingest and retrieve (no BaseEngine)."""

    name = "notes"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        self.seen += [t.id for t in turns]

    def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        words = set(query.lower().split())
        turns = [t for t in ctx.store.iter_turns(ctx.ns) if words & set(t.text.lower().split())]
        return [Hit(t.text, 1.0, [t.id], ctx.tokens.count(t.text), self.name) for t in turns[:k]]


class Chatty(Notes):
    """A plugin engine with some optional hooks of its own (still no BaseEngine)."""

    name = "chatty"
    uses_embedder = False

    def __init__(self) -> None:
        super().__init__()
        self.config = {"depth": 3}
        self.forgotten = 0
        self.prepared = 0

    def prepare(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
        self.prepared += len(turns)

    def forget(self, ctx: EngineContext) -> None:
        self.forgotten += 1

    def stats(self, ctx: EngineContext) -> dict[str, int]:
        return {"seen": len(self.seen)}


class EntryPoint:
    """What importlib.metadata's entry point offers the registry: a name and load()."""

    def __init__(self, name: str, factory: Any) -> None:
        self.name, self.factory = name, factory

    def load(self) -> Any:
        return self.factory


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register Notes and Chatty under the `cuemem.engines` entry point group."""
    found = [EntryPoint("notes", Notes), EntryPoint("chatty", Chatty)]
    monkeypatch.setattr(cuemem.engines, "entry_points", lambda group: found if group == "cuemem.engines" else [])


@pytest.mark.parametrize("name", ENGINES)
def test_every_builtin_engine_subclasses_the_base_class(name):
    engine = get_engine(name)
    assert isinstance(engine, BaseEngine) and isinstance(engine, Engine)
    assert not isinstance(engine, PluginEngine) and as_engine(engine) is engine and unwrap(engine) is engine
    assert isinstance(engine.derived, DerivedSpec) and isinstance(engine.uses_llm, bool)


def test_a_built_in_engine_or_variant_is_found_without_scanning_the_plugins(monkeypatch: pytest.MonkeyPatch):
    """Opening a memory names its engine: a built-in (or a variant of one) is found without reading every installed
    package's entry points; only a name that is neither scans them, and an unknown one is still refused."""
    scanned: list[str] = []

    def entry_points(group: str) -> list[EntryPoint]:
        scanned.append(group)
        return [EntryPoint("notes", Notes)] if group == "cuemem.engines" else []

    monkeypatch.setattr(cuemem.engines, "entry_points", entry_points)
    assert get_engine("hybrid").name == "hybrid" and get_engine("episodic[window=512]").name == "episodic[window=512]"
    assert scanned == []
    assert isinstance(get_engine("notes"), PluginEngine) and scanned == ["cuemem.engines"]
    with pytest.raises(CuememError, match="unknown engine 'nope'"):
        get_engine("nope")


def test_the_base_class_supplies_every_optional_hook():
    class Minimal(BaseEngine):
        name = "minimal"

        def ingest(self, ctx: EngineContext, turns: Sequence[Turn]) -> None:
            return None

        def retrieve(self, ctx: EngineContext, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
            return []

    engine = Minimal()
    assert engine.uses_embedder is False and engine.uses_llm is False
    assert engine.derived == DerivedSpec("minimal", (), "rebuild")  # no declared state: rebuilt after any delete
    assert engine.prepare(None, []) is None and engine.forget(None) is None  # type: ignore[arg-type]
    assert engine.stats(None) == {}  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # ingest and retrieve are required
        type("Incomplete", (BaseEngine,), {"name": "x"})()


def test_a_plugin_engine_without_the_base_class_is_wrapped_with_defaults(plugins, tmp_path):
    assert {"notes", "chatty"} <= set(cuemem.engines.available_engines())
    engine = get_engine("notes")
    assert isinstance(engine, PluginEngine) and isinstance(engine.plugin, Notes) and unwrap(engine) is engine.plugin
    assert engine.name == "notes" and engine.uses_embedder is False and engine.uses_llm is False
    assert engine.derived == DerivedSpec("notes", (), "rebuild")
    with open_memory(tmp_path / "notes.db", "notes") as memory:
        assert memory.add(TRIP, user_id="maya", session_id="s1").added == ["d1", "d2", "d3", "d4"]
        plugin = memory.engine.plugin  # type: ignore[attr-defined]
        assert plugin.seen == ["d1", "d2", "d3", "d4"]
        assert memory.search("shellfish allergic", user_id="maya").turn_ids == ["d3"]
        assert memory.engine_stats(user_id="maya") == {}
        assert memory.answer("who is allergic to shellfish?", user_id="maya").text  # the default reader answers
        memory.delete("d3", user_id="maya")  # no forget hook: nothing to call, nothing fails
        assert memory.search("shellfish allergic", user_id="maya").turn_ids == []
        assert memory.pending(user_id="maya") == 0 and memory.reindex(user_id="maya") == 3
        with pytest.raises(CuememError, match="keeps no records"):
            memory.profile(user_id="maya")


def test_a_plugin_engines_own_hooks_are_called(plugins, tmp_path):
    with open_memory(tmp_path / "chatty.db", "chatty") as memory:
        plugin = memory.engine.plugin  # type: ignore[attr-defined]
        memory.add(TRIP, user_id="maya")
        assert plugin.prepared == 4 and memory.engine_stats(user_id="maya") == {"seen": 4}
        assert memory.engine.config == {"depth": 3}  # any other attribute is the plugin's own
        memory.delete("d1", user_id="maya")
        assert plugin.forgotten == 1


def test_a_plugin_engine_instance_given_to_memory_is_wrapped(tmp_path):
    plugin = Notes()
    with open_memory(tmp_path / "instance.db", plugin) as memory:
        assert isinstance(memory.engine, PluginEngine) and memory.engine.plugin is plugin
        assert memory.settings.engine == "notes"
        memory.add(TRIP, user_id="maya")
        assert plugin.seen == ["d1", "d2", "d3", "d4"]
        assert memory.search("Miso cat", user_id="maya").turn_ids == ["d4"]
