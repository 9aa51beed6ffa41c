"""CuememStore, the LangGraph BaseStore over Memory (issue 17): LangGraph's store semantics, checked against
LangGraph's own reference implementation (InMemoryStore) on random operation sequences and by the documented
behaviour of BaseStore; cuemem's isolation between users; and a compiled LangGraph graph using the store.

LangGraph ships no store conformance suite (langgraph-checkpoint-conformance covers checkpointers only), so the
differential test against InMemoryStore stands in for one."""

from __future__ import annotations

import asyncio
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from conftest import ENGINES, open_memory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from cuemem import Memory
from cuemem.integrations.langgraph import CuememStore


@pytest.fixture
def memory(make_memory: Any) -> Memory:
    return make_memory("bm25")


@pytest.fixture
def store(memory: Memory) -> CuememStore:
    return CuememStore(memory, user_id="alice")


def triples(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(item.namespace, item.key, item.value) for item in items]


# --------------------------------------------------------------------------- put / get / delete
def test_put_get_replace_delete(store: CuememStore) -> None:
    assert store.get(("memories",), "food") is None
    store.put(("memories",), "food", {"text": "Alice likes spicy ramen.", "n": 1})
    first = store.get(("memories",), "food")
    assert isinstance(first, Item) and not isinstance(first, SearchItem)
    assert (first.namespace, first.key, first.value) == (
        ("memories",),
        "food",
        {"text": "Alice likes spicy ramen.", "n": 1},
    )
    assert first.created_at == first.updated_at and first.created_at.tzinfo is not None
    time.sleep(0.002)
    store.put(("memories",), "food", {"text": "Alice likes miso ramen.", "n": 2})  # replaces, keeps created_at
    second = store.get(("memories",), "food")
    assert second is not None and second.value == {"text": "Alice likes miso ramen.", "n": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert len(store.memory.turns(user_id="alice", agent_id="langgraph", run_id='["memories"]')) == 1
    assert store.get(("memories", "food"), "food") is None and store.get(("other",), "food") is None
    store.delete(("memories",), "food")
    assert store.get(("memories",), "food") is None
    store.delete(("memories",), "food")  # deleting what is not there is no error
    store.delete(("never", "written"), "x")
    store.put(("memories",), "food", {"text": "again"})
    store.batch([PutOp(("memories",), "food", None)])  # a put of None deletes
    assert store.get(("memories",), "food") is None
    assert store.list_namespaces() == []


@pytest.mark.parametrize(
    "key",
    ["", " ", "plain", "a\x00b", "line\nbreak\ttab", "zero\u200bwidth", "\u202eevil", "café", "café", "🦜" * 300],
)
def test_any_key_langgraph_allows(store: CuememStore, key: str) -> None:
    store.put(("keys",), key, {"text": f"value of {key!r}"})
    item = store.get(("keys",), key)
    assert item is not None and item.key == key and item.value == {"text": f"value of {key!r}"}
    assert [i.key for i in store.search(("keys",))] == [key]


def test_lookalike_keys_and_labels_stay_apart(store: CuememStore) -> None:
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    for key in (nfc, nfd, " x", "x", "x "):
        store.put(("k",), key, {"v": key})
    for key in (nfc, nfd, " x", "x", "x "):
        item = store.get(("k",), key)
        assert item is not None and item.value == {"v": key}
    labels = [(nfc,), (nfd,), (" a",), ("a",), ("a\n",), ("a", "b"), ("a", "b\u200b")]
    for namespace in labels:
        store.put(namespace, "k", {"ns": list(namespace)})
    for namespace in labels:
        item = store.get(namespace, "k")
        assert item is not None and item.value == {"ns": list(namespace)} and item.namespace == namespace
    assert store.list_namespaces() == sorted([*labels, ("k",)])


def test_namespace_rules(store: CuememStore) -> None:
    for bad in [(), ("langgraph", "x"), ("a.b",), ("a", ""), ("a\x00",), ("a", 3)]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})  # type: ignore[arg-type]
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(bad, "k", {"v": 1})])  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError):
        store.get(("a.b",), "k")
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("",))])
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces(prefix=("a.b",))
    # every op of a batch is checked before the first runs: nothing of a batch with a bad op is written
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(("bad.label",), "k", {"v": 1})])
    assert store.get(("ok",), "k") is None
    with pytest.raises(ValueError, match="unknown store operation"):
        store.batch(["not an op"])  # type: ignore[list-item]


def test_values(store: CuememStore) -> None:
    big = {"text": "é" * 300_000, "tags": ["a", {"b": [1, 2.5, None, True]}]}
    store.put(("big",), "k", big)  # the indexed text is cut to max_turn_bytes; the value is kept whole
    item = store.get(("big",), "k")
    assert item is not None and item.value == big
    store.put(("v",), "k", {"text": "kept"})
    with pytest.raises(ValueError):
        store.put(("v",), "k", {"when": object()})  # not JSON: refused, and the old value stays
    with pytest.raises(ValueError):
        store.put(("v",), "k", {"deep": _nested(150)})
    item = store.get(("v",), "k")
    assert item is not None and item.value == {"text": "kept"}
    store.put(("v",), "empty", {})  # an empty value is an item too
    assert (got := store.get(("v",), "empty")) is not None and got.value == {}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_ttl_is_not_supported(store: CuememStore) -> None:
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError):
        store.put(("t",), "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(("t",), "k", {"v": 1}, ttl=1.0)])
    store.put(("t",), "k", {"v": 1}, ttl=None)
    assert store.get(("t",), "k", refresh_ttl=True) is not None
    assert store.search(("t",), refresh_ttl=False)[0].key == "k"


# --------------------------------------------------------------------------- list_namespaces
def test_list_namespaces(store: CuememStore) -> None:
    documented = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f")]
    for namespace in documented:
        store.put(namespace, "k", {"v": 1})
    # BaseStore.list_namespaces' own example
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces() == sorted(documented)
    assert store.list_namespaces(prefix=("a", "b", "d")) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("d", "*")) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",), max_depth=2) == [("a", "b"), ("a", "c")]
    assert store.list_namespaces(max_depth=1) == [("a",)]
    assert store.list_namespaces(limit=2) == sorted(documented)[:2]
    assert store.list_namespaces(limit=2, offset=2) == sorted(documented)[2:4]
    assert store.list_namespaces(prefix=("x",)) == []
    assert store.list_namespaces(prefix=("a", "b", "c", "d", "e")) == []
    store.delete(("a", "c", "f"), "k")  # an emptied namespace is no longer listed
    assert ("a", "c", "f") not in store.list_namespaces()
    ops = [ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a", "b")),), max_depth=3)]
    assert store.batch(ops) == [[("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]]


# --------------------------------------------------------------------------- search
def test_search_filter_and_pagination(store: CuememStore) -> None:
    rows = [
        ("docs", "d1", {"type": "report", "score": 4.5, "tags": ["x", "y"], "meta": {"level": 2, "ok": True}}),
        ("docs", "d2", {"type": "report", "score": 3, "tags": ["x"], "meta": {"level": 3}}),
        ("docs", "d3", {"type": "note", "score": 5, "meta": {"level": 2, "ok": False}}),
        ("other", "d4", {"type": "report", "score": 10}),
    ]
    for label, key, value in rows:
        store.put((label,), key, value)
        time.sleep(0.002)

    def keys(**kwargs: Any) -> list[str]:
        return [item.key for item in store.search(("docs",), **kwargs)]

    assert keys() == ["d3", "d2", "d1"]  # newest first
    assert [i.key for i in store.search(())] == ["d4", "d3", "d2", "d1"]
    assert all(i.score is None for i in store.search(()))
    assert sorted(keys(filter={"type": "report"})) == ["d1", "d2"]
    assert keys(filter={"type": "report", "score": 3}) == ["d2"]
    assert sorted(keys(filter={"score": {"$gt": 3}})) == ["d1", "d3"]
    assert sorted(keys(filter={"score": {"$gte": 3, "$lt": 5}})) == ["d1", "d2"]
    assert sorted(keys(filter={"score": {"$lte": 4.5}, "type": {"$ne": "note"}})) == ["d1", "d2"]
    assert keys(filter={"type": {"$eq": "note"}}) == ["d3"]
    assert keys(filter={"tags": ["x"]}) == ["d2"]  # lists match whole
    assert sorted(keys(filter={"meta": {"level": 2}})) == ["d1", "d3"]  # nested objects match by their fields
    assert keys(filter={"meta.ok": True}) == ["d1"]  # dotted keys reach into nested objects
    assert keys(filter={"missing": {"$gt": 1}}) == []
    assert keys(filter={"missing": None}) == ["d3", "d2", "d1"]
    with pytest.raises(ValueError, match="operator"):
        keys(filter={"score": {"$regex": "x"}})
    pages = [keys(limit=2, offset=0), keys(limit=2, offset=2), keys(limit=2, offset=4)]
    assert pages == [["d3", "d2"], ["d1"], []]
    assert keys(limit=0) == []


@pytest.mark.parametrize("engine", ["bm25", "hybrid"])
def test_search_with_query(make_memory: Any, engine: str) -> None:
    store = CuememStore(make_memory(engine), user_id="alice")
    store.put(("memories", "food"), "ramen", {"text": "Alice likes spicy ramen with extra garlic.", "kind": "like"})
    store.put(("memories", "food"), "olives", {"text": "Alice cannot stand olives on pizza.", "kind": "dislike"})
    store.put(("memories", "travel"), "lisbon", {"text": "Alice flies to Lisbon in May.", "kind": "plan"})
    store.put(("archive",), "ramen", {"text": "An old note: ramen shop closed.", "kind": "note"})
    hits = store.search(("memories",), query="ramen garlic")
    assert hits and hits[0].key == "ramen" and hits[0].namespace == ("memories", "food")
    assert all(isinstance(h, SearchItem) and isinstance(h.score, float) for h in hits)
    assert all(h.namespace[0] == "memories" for h in hits)  # the prefix holds, whatever else matches
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # type: ignore[misc]
    assert store.search(("memories", "travel"), query="Lisbon flight")[0].key == "lisbon"
    assert [h.key for h in store.search((), query="ramen shop closed", limit=1)] == ["ramen"]
    filtered = store.search(("memories",), query="Alice likes ramen, not olives", filter={"kind": "dislike"})
    assert [h.key for h in filtered] == ["olives"]
    assert store.search(("nothing",), query="ramen") == []
    assert store.search(("memories",), query="ramen", limit=0) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_serves_the_store(make_memory: Any, engine: str) -> None:
    """Whatever the engine cites (one turn, windows of several), a query search returns each item once, newest."""
    store = CuememStore(make_memory(engine), user_id="alice")
    store.put(("m",), "a", {"text": "Maya: Day 1 is the Apollo Hotel near Rossio."})
    store.put(("m",), "b", {"text": "Theo: Lena is allergic to shellfish."})
    store.put(("m",), "c", {"text": "Maya: My neighbour Ines will feed the cat Miso."})
    store.put(("m",), "a", {"text": "Maya: Day 1 is the Apollo Hotel near Rossio, 120 euros a night."})
    hits = store.search(("m",), query="Which hotel is Maya staying at on Day 1?", limit=3)
    keys = [h.key for h in hits]
    assert keys and len(keys) == len(set(keys)) and set(keys) <= {"a", "b", "c"}
    assert all(h.value["text"].endswith("a night.") for h in hits if h.key == "a")
    if "llm" not in engine:  # the fake model of the -llm variants answers at random
        assert keys[0] == "a"


def test_search_with_query_fetches_past_filtered_hits(store: CuememStore) -> None:
    """Filtering after retrieval would starve the results; the store asks for more hits until enough pass."""
    for i in range(40):
        store.put(("m",), f"k{i}", {"text": f"hotel booking number {i} hotel hotel", "wanted": i == 37})
    hits = store.search(("m",), query="hotel booking", filter={"wanted": True}, limit=1)
    assert [h.key for h in hits] == ["k37"]
    page1 = store.search(("m",), query="hotel booking", limit=5)
    page2 = store.search(("m",), query="hotel booking", limit=5, offset=5)
    assert len(page1) == len(page2) == 5 and not {h.key for h in page1} & {h.key for h in page2}


def test_index_argument_and_index_fields(memory: Memory) -> None:
    store = CuememStore(memory, user_id="alice")
    store.put(("n",), "hidden", {"text": "the secret lighthouse code"}, index=False)
    store.put(("n",), "title", {"title": "lighthouse keeper", "body": "walrus"}, index=["title"])
    store.put(("n",), "nothing", {"title": 1}, index=["absent"])  # no text at the named fields: not indexed
    assert {h.key for h in store.search(("n",), query="lighthouse")} == {"title"}  # never `hidden`
    assert store.search(("n",), query="walrus") == []  # `body` is not indexed
    assert {i.key for i in store.search(("n",))} == {"hidden", "title", "nothing"}  # listed all the same
    assert (hidden := store.get(("n",), "hidden")) is not None and hidden.value == {
        "text": "the secret lighthouse code"
    }
    store.put(("n",), "hidden", {"text": "the secret lighthouse code"})  # indexed from now on
    assert {h.key for h in store.search(("n",), query="lighthouse")} == {"title", "hidden"}

    fields = CuememStore(memory, user_id="bob", index_fields=["summary", "tags[*]"])
    fields.put(("n",), "a", {"summary": "penguins", "tags": ["ice", "krill"], "text": "zebra"})
    assert [h.key for h in fields.search(("n",), query="krill")] == ["a"]
    assert fields.search(("n",), query="zebra") == []
    fields.put(("n",), "b", {"text": "zebra"}, index=["text"])  # a put's own index overrides index_fields
    assert [h.key for h in fields.search(("n",), query="zebra")] == ["b"]


# --------------------------------------------------------------------------- batches and async
def test_batch_runs_in_order(store: CuememStore) -> None:
    results = store.batch(
        [
            PutOp(("b",), "k", {"text": "one"}),
            GetOp(("b",), "k"),
            PutOp(("b",), "k", {"text": "two"}),
            SearchOp(("b",)),
            ListNamespacesOp(),
            PutOp(("b",), "k", None),
            GetOp(("b",), "k"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[2] is None and results[5] is None
    assert isinstance(results[1], Item) and results[1].value == {"text": "one"}
    assert triples(results[3]) == [(("b",), "k", {"text": "two"})]  # type: ignore[arg-type]
    assert results[4] == [("b",)] and results[6] is None and results[7] == []


def test_async_api_runs_off_the_event_loop(memory: Memory) -> None:
    threads: list[int] = []

    class Recording(CuememStore):
        def batch(self, ops: Any) -> Any:
            threads.append(threading.get_ident())
            return super().batch(ops)

    store = Recording(memory, user_id="alice")

    async def scenario() -> None:
        loop_thread = threading.get_ident()
        await store.aput(("a", "x"), "k1", {"text": "the blue whale sings"})
        await store.aput(("a", "y"), "k2", {"text": "a red fox", "n": 2})
        assert (item := await store.aget(("a", "x"), "k1")) is not None and item.value["text"].startswith("the blue")
        assert [i.key for i in await store.asearch(("a",), query="whale")] == ["k1"]
        assert [i.key for i in await store.asearch(("a",), filter={"n": 2})] == ["k2"]
        assert await store.alist_namespaces(prefix=("a",)) == [("a", "x"), ("a", "y")]
        gathered = await asyncio.gather(*(store.aget(("a", "x"), "k1") for _ in range(4)))
        assert all(g == item for g in gathered)
        await asyncio.gather(*(store.aput(("a", "z"), f"c{i}", {"text": f"concurrent {i}"}) for i in range(8)))
        await asyncio.gather(*(store.aput(("a", "z"), "same", {"text": f"racing {i}"}) for i in range(4)))
        listed = await store.asearch(("a", "z"), limit=20)  # racing puts of one key leave one item
        assert sorted(i.key for i in listed) == [*(f"c{i}" for i in range(8)), "same"]
        await store.adelete(("a", "x"), "k1")
        assert await store.aget(("a", "x"), "k1") is None
        results = await store.abatch([GetOp(("a", "y"), "k2"), ListNamespacesOp()])
        assert isinstance(results[0], Item) and results[1] == [("a", "y"), ("a", "z")]
        assert threads and loop_thread not in threads

    asyncio.run(scenario())


# --------------------------------------------------------------------------- isolation and the mapping
def test_isolation_between_users(memory: Memory) -> None:
    alice, bob = CuememStore(memory, user_id="alice"), CuememStore(memory, user_id="bob")
    alice.put(("memories",), "k", {"text": "Alice's secret: the vault code is 4711"})
    bob.put(("memories",), "k", {"text": "Bob likes tea"})
    bob.put(("bob-only",), "x", {"text": "vault vault vault"})
    assert (a := alice.get(("memories",), "k")) is not None and "4711" in a.value["text"]
    assert (b := bob.get(("memories",), "k")) is not None and b.value == {"text": "Bob likes tea"}
    assert alice.list_namespaces() == [("memories",)]
    assert alice.get(("bob-only",), "x") is None and alice.search(("bob-only",)) == []
    assert all("Bob" not in h.value["text"] for h in alice.search((), query="vault tea"))
    assert all("4711" not in h.value["text"] for h in bob.search((), query="vault code 4711"))
    bob.delete(("memories",), "k")
    assert alice.get(("memories",), "k") is not None
    # a store's items are cuemem namespaces of its user: deleting the user takes them, nothing else
    memory.delete_all(user_id="bob")
    assert bob.list_namespaces() == [] and alice.list_namespaces() == [("memories",)]


def test_store_and_conversation_memory_do_not_mix(memory: Memory) -> None:
    store = CuememStore(memory, user_id="alice")
    memory.add({"id": "t1", "text": "We talked about the vault code."}, user_id="alice")
    memory.add({"id": "t2", "text": "vault"}, user_id="alice", agent_id="langgraph", run_id="not json")
    store.put(("memories",), "k", {"text": "vault code 4711"})
    assert store.list_namespaces() == [("memories",)]
    hits = memory.search("vault code", user_id="alice")
    assert hits.turn_ids == ["t1"]  # the conversation does not see the store's items, nor they it
    assert [h.key for h in store.search((), query="vault")] == ["k"]
    ns = [str(n) for n, _ in memory.namespaces()]
    assert 'user=alice,agent=langgraph,run=["memories"]' in ns


def test_unbound_store_takes_the_user_from_the_first_label(memory: Memory) -> None:
    alice = CuememStore(memory, user_id="alice")
    admin = CuememStore(memory)
    alice.put(("memories", "food"), "k", {"text": "ramen"})
    admin.put(("bob", "memories"), "k", {"text": "tea"})
    assert admin.list_namespaces() == [("alice", "memories", "food"), ("bob", "memories")]
    assert (seen := admin.get(("alice", "memories", "food"), "k")) is not None and seen.value == {"text": "ramen"}
    assert [i.namespace for i in admin.search(("alice",))] == [("alice", "memories", "food")]
    assert [i.key for i in admin.search(("bob",), query="tea")] == ["k"]
    assert CuememStore(memory, user_id="bob").list_namespaces() == [("memories",)]
    for bad in [(" bob", "m"), ("b\u200bob", "m"), ("cafe\u0301", "m")]:
        with pytest.raises(InvalidNamespaceError):
            admin.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="only a user"):
        admin.put(("bob",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        CuememStore(memory, user_id="a\u202eb")
    assert "unbound" in repr(admin) and "alice" in repr(alice)


def test_interrupted_put_loses_nothing(store: CuememStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put adds the new version before deleting the old: cut short between the two, reads see the new one."""
    store.put(("p",), "k", {"text": "old lighthouse"})
    created = store.get(("p",), "k").created_at  # type: ignore[union-attr]

    def crash(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(store.memory, "delete", crash)
        with pytest.raises(KeyboardInterrupt):
            store.put(("p",), "k", {"text": "new lighthouse"})
    assert len(store.memory.turns(user_id="alice", agent_id="langgraph", run_id='["p"]')) == 2
    item = store.get(("p",), "k")
    assert item is not None and item.value == {"text": "new lighthouse"} and item.created_at == created
    assert triples(store.search(("p",))) == [(("p",), "k", {"text": "new lighthouse"})]
    assert triples(store.search(("p",), query="lighthouse")) == [(("p",), "k", {"text": "new lighthouse"})]
    store.put(("p",), "k", {"text": "newest"})  # the next put clears every older version
    assert len(store.memory.turns(user_id="alice", agent_id="langgraph", run_id='["p"]')) == 1
    assert (item := store.get(("p",), "k")) is not None and item.created_at == created


def test_items_persist_across_reopen(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "bm25") as memory:
        CuememStore(memory, user_id="alice").put(("m",), "k", {"text": "persisted"})
    with open_memory(tmp_path / "m.db", "bm25") as memory:
        store = CuememStore(memory, user_id="alice")
        assert (item := store.get(("m",), "k")) is not None and item.value == {"text": "persisted"}
        assert [i.key for i in store.search(("m",), query="persisted")] == ["k"]


# --------------------------------------------------------------------------- against LangGraph's InMemoryStore
LABELS = st.sampled_from(["a", "b", "c"])
NAMESPACES = st.lists(LABELS, min_size=1, max_size=3).map(tuple)
VALUES = st.fixed_dictionaries(
    {"text": st.sampled_from(["red fox", "blue whale", "green tea"]), "n": st.integers(0, 3)},
    optional={"tag": st.sampled_from(["x", "y"]), "nested": st.fixed_dictionaries({"level": st.integers(0, 2)})},
)
FILTERS = st.sampled_from(
    [None, {"n": 1}, {"n": {"$gt": 1}}, {"n": {"$lte": 1}, "tag": "x"}, {"tag": {"$ne": "y"}}, {"nested": {"level": 1}}]
)
OPS = st.one_of(
    st.tuples(st.just("put"), NAMESPACES, st.sampled_from(["k1", "k2", "k3"]), VALUES),
    st.tuples(st.just("delete"), NAMESPACES, st.sampled_from(["k1", "k2", "k3"])),
    st.tuples(st.just("get"), NAMESPACES, st.sampled_from(["k1", "k2", "k3"])),
    st.tuples(st.just("search"), st.lists(LABELS, max_size=2).map(tuple), FILTERS),
    st.tuples(
        st.just("list"),
        st.lists(st.sampled_from(["a", "b", "*"]), max_size=2).map(tuple),
        st.lists(st.sampled_from(["a", "c", "*"]), max_size=2).map(tuple),
        st.one_of(st.none(), st.integers(1, 3)),
        st.integers(1, 4),
        st.integers(0, 2),
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=14))
def test_same_answers_as_langgraph_inmemorystore(tmp_path_factory: pytest.TempPathFactory, ops: list[Any]) -> None:
    """Random puts, deletes, gets, filtered searches and namespace listings give what LangGraph's reference store
    gives (searches compared as sets: InMemoryStore lists in insertion order, CuememStore newest first)."""
    reference = InMemoryStore()
    with open_memory(tmp_path_factory.mktemp("lg") / "m.db", "bm25") as memory:
        store = CuememStore(memory, user_id="alice")
        for op in ops:
            kind, args = op[0], op[1:]
            if kind == "put":
                store.put(*args)
                reference.put(*args)
            elif kind == "delete":
                store.delete(*args)
                reference.delete(*args)
            elif kind == "get":
                ours, theirs = store.get(*args), reference.get(*args)
                assert (ours is None) == (theirs is None)
                if ours is not None and theirs is not None:
                    assert triples([ours]) == triples([theirs])
            elif kind == "search":
                prefix, filter = args
                ours_found = triples(store.search(prefix, filter=filter, limit=100))
                theirs_found = triples(reference.search(prefix, filter=filter, limit=100))
                assert sorted(ours_found, key=repr) == sorted(theirs_found, key=repr)
            else:
                prefix, suffix, max_depth, limit, offset = args
                # InMemoryStore keeps listing a namespace once emptied (or only read); database stores do not
                for namespace in [n for n, items in reference._data.items() if not items]:
                    del reference._data[namespace]
                kwargs = {"prefix": prefix or None, "suffix": suffix or None, "max_depth": max_depth}
                assert store.list_namespaces(**kwargs, limit=limit, offset=offset) == reference.list_namespaces(
                    **kwargs, limit=limit, offset=offset
                )


# --------------------------------------------------------------------------- inside a LangGraph graph
class State(TypedDict, total=False):
    user: str
    fact: str
    question: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user"])
    store.put(namespace, f"fact-{len(store.search(namespace, limit=100))}", {"text": state["fact"]})
    return {}


def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
    assert runtime.store is not None
    hits = runtime.store.search(("memories", state["user"]), query=state["question"], limit=1)
    return {"recalled": [hit.value["text"] for hit in hits]}


async def arecall(state: State, *, store: BaseStore) -> dict[str, Any]:
    hits = await store.asearch(("memories", state["user"]), query=state["question"], limit=1)
    return {"recalled": [hit.value["text"] for hit in hits]}


def build(recaller: Any) -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recaller)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder


def test_inside_a_langgraph_graph(memory: Memory) -> None:
    store = CuememStore(memory)  # unbound: the first label of ("memories", user) is the user id "memories"
    graph = build(recall).compile(store=store)
    out = graph.invoke({"user": "maya", "fact": "Day 1 is the Apollo Hotel.", "question": "which hotel on day 1?"})
    assert out["recalled"] == ["Day 1 is the Apollo Hotel."]
    out = graph.invoke(
        {"user": "maya", "fact": "Lena is allergic to shellfish.", "question": "who is allergic to shellfish?"}
    )
    assert out["recalled"] == ["Lena is allergic to shellfish."]
    out = graph.invoke({"user": "theo", "fact": "Theo starts work in May.", "question": "which hotel on day 1?"})
    assert out["recalled"] == []  # theo's namespace holds no hotel
    assert store.list_namespaces() == [("memories", "maya"), ("memories", "theo")]

    bound = CuememStore(memory, user_id="maya")
    agraph = build(arecall).compile(store=bound)
    out = asyncio.run(agraph.ainvoke({"user": "maya", "fact": "Casa Azul on Day 2.", "question": "Casa Azul"}))
    assert out["recalled"] == ["Casa Azul on Day 2."]
    assert bound.list_namespaces() == [("memories", "maya")] and len(bound.search(("memories",))) == 1
