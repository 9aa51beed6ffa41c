"""The Memory API over every engine: idempotence, deletion cascades, reindex, export/import, bad input."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from conftest import ENGINES, TRIP, is_ablation, store_target

from cuemem import InvalidTurnError, Memory, Settings, TurnNotFoundError, UnknownEngineError, UnknownNamespaceError
from cuemem.embed import HashingEmbedder
from cuemem.engines import get_engine


def all_hit_ids(memory: Memory, query: str, user: str = "maya", engine: str | None = None) -> set[str]:
    return set(memory.search(query, user_id=user, k=50, engine=engine).turn_ids)


@pytest.mark.parametrize("engine", ENGINES)
def test_add_is_idempotent_by_turn_id(make_memory, engine):
    memory = make_memory(engine)
    first = memory.add(TRIP, user_id="maya", session_id="s1")
    assert first.added == ["d1", "d2", "d3", "d4"] and first.skipped == []
    again = memory.add(TRIP, user_id="maya", session_id="s1")
    assert again.added == [] and again.skipped == ["d1", "d2", "d3", "d4"]
    # Re-adding the same id with other text is still a no-op: the log is never rewritten.
    changed = memory.add({"id": "d1", "text": "rewritten"}, user_id="maya")
    assert changed.skipped == ["d1"]
    assert memory.get("d1", user_id="maya").text == TRIP[0]["text"]
    assert len(memory.turns(user_id="maya")) == 4
    assert len(memory.search("hotel", user_id="maya", k=50).hits) <= 4


def test_messages_without_ids_get_deterministic_ids(make_memory):
    memory = make_memory("bm25")
    messages = [{"role": "user", "content": "ok"}, {"role": "user", "content": "ok"}, "hello"]
    first = memory.add(messages, user_id="u", session_id="s")
    assert len(set(first.added)) == 3  # the repeated "ok" is two turns
    retry = memory.add(messages, user_id="u", session_id="s")
    assert retry.added == [] and sorted(retry.skipped) == sorted(first.added)


@pytest.mark.parametrize("engine", ENGINES)
def test_search_finds_the_right_turn_with_provenance(make_memory, engine):
    memory = make_memory(engine)
    memory.add(TRIP, user_id="maya", session_id="s1", timestamp="3 March 2024")
    result = memory.search("allergic to shellfish", user_id="maya", k=2)
    assert "d3" in result.turn_ids
    for hit in result.hits:
        assert hit.turn_ids and hit.tokens > 0 and hit.engine == engine
        # the session date is a field of the hit (parsed), not words of its text; the speaker leads the text
        assert hit.detail["date"] == "2024-03-03T00:00:00" and "3 March 2024" not in hit.text
        assert hit.detail["timestamp"] == "3 March 2024" and hit.text.startswith(f"{hit.detail['speaker']}: ")


@pytest.mark.model_variants_on_postgres  # a delete reaches the model-made state on both stores
@pytest.mark.parametrize("engine", ENGINES)
def test_delete_cascades_through_every_index_and_reindex(make_memory, engine):
    memory = make_memory(engine)
    memory.add(TRIP, user_id="maya", session_id="s1")
    memory.add({"id": "p1", "text": "Porto hotel is Hotel Ribeira"}, user_id="maya", session_id="s2")
    assert "d1" in all_hit_ids(memory, "Apollo Hotel Rossio")
    memory.delete("d1", user_id="maya")
    assert "d1" not in all_hit_ids(memory, "Apollo Hotel Rossio")
    assert memory.delete_session("s2", user_id="maya") == 1
    # no engine, including ones that index later, brings them back (each design and baseline: an ablation indexes
    # as its design does, and every engine indexing first is the parametrisation)
    for other in (e for e in ENGINES if not is_ablation(e)):
        assert not {"d1", "p1"} & all_hit_ids(memory, "Apollo Hotel Rossio Porto Ribeira", engine=other)
    memory.reindex(user_id="maya")
    assert not {"d1", "p1"} & all_hit_ids(memory, "Apollo Hotel Rossio Porto Ribeira")
    with pytest.raises(TurnNotFoundError):
        memory.get("d1", user_id="maya")
    with pytest.raises(TurnNotFoundError):
        memory.delete("d1", user_id="maya")
    assert memory.store.integrity_check() == "ok"


def test_delete_leaves_no_derived_rows(make_memory):
    memory = make_memory("hybrid")
    memory.add(TRIP, user_id="maya")
    memory.search("hotel", user_id="maya")
    ns = memory.store.namespace_id(memory.namespace("maya"))
    items = memory.store.item_ids(ns, "turn", ["d1", "d2"])
    memory.store.put_labels(ns, [(items["d1"], "event", "booking"), (items["d2"], "event", "booking")])
    memory.store.kv_set(ns, "stitch", "vocabulary", ["booking"])
    assert memory.store.kv_get(ns, "stitch", "vocabulary") == ["booking"]
    memory.delete("d1", user_id="maya")
    assert memory.store.labels_of(ns, items["d1"]) == []
    assert memory.store.labels_of(ns, items["d2"]) == [("event", "booking")]
    q = memory.store._query
    assert q("SELECT COUNT(*) FROM items WHERE key='d1'")[0][0] == 0
    assert q("SELECT COUNT(*) FROM item_turns")[0][0] == 3
    assert q("SELECT COUNT(*) FROM vectors")[0][0] == 3
    assert q("SELECT COUNT(*) FROM embed_cache")[0][0] == 3
    assert memory.delete_all(user_id="maya") == [(memory.namespace("maya"), 3)]
    for table in ("turns", "items", "item_turns", "vectors", "embed_cache", "watermarks", "kv", "labels", "llm_calls"):
        assert q(f"SELECT COUNT(*) FROM {table}")[0][0] == 0, table
    with pytest.raises(UnknownNamespaceError):
        memory.search("hotel", user_id="maya")


def test_reindex_rebuilds_identical_results(make_memory):
    memory = make_memory("hybrid")
    memory.add(TRIP, user_id="maya")
    before = [(h.turn_ids, round(h.score, 6)) for h in memory.search("hotel night", user_id="maya").hits]
    assert memory.reindex() == 4
    after = [(h.turn_ids, round(h.score, 6)) for h in memory.search("hotel night", user_id="maya").hits]
    assert before == after
    assert [e["op"] for e in memory.history(user_id="maya")][:2] == ["reindex", "add"]


def test_export_import_round_trip(make_memory):
    source = make_memory("hybrid", name="a.db")
    source.add(TRIP, user_id="maya", session_id="s1", timestamp="3 March 2024")
    source.add({"text": "Ünïcödé ✓ 東京", "metadata": {"blip_caption": "a photo"}}, user_id="theo", agent_id="bot")
    buffer = io.StringIO()
    assert source.export(buffer) == 5
    target = make_memory("hybrid", name="b.db")
    report = target.import_(buffer.getvalue().splitlines())
    assert (report.added, report.skipped, report.errors) == (5, 0, [])
    assert {(ns, n) for ns, n in target.namespaces()} == {(ns, n) for ns, n in source.namespaces()}
    for user, agent in (("maya", None), ("theo", "bot")):
        a = [t.as_dict() for t in source.turns(user_id=user, agent_id=agent)]
        b = [t.as_dict() for t in target.turns(user_id=user, agent_id=agent)]
        for row in a + b:
            row.pop("seq")
        assert a == b
    ra = source.search("hotel", user_id="maya")
    rb = target.search("hotel", user_id="maya")
    assert [h.turn_ids for h in ra.hits] == [h.turn_ids for h in rb.hits]
    again = target.import_(buffer.getvalue().splitlines())
    assert (again.added, again.skipped) == (0, 5)


def test_bad_input_gets_a_clear_error_and_loses_nothing(make_memory):
    memory = make_memory("hybrid")
    memory.add(TRIP, user_id="maya")
    bad_inputs = [
        ({"text": ""}, "empty"),
        ({"text": "   \n"}, "empty"),
        ({"text": "x" * 1_000_000}, "limit"),
        (b"caf\xe9 au lait", "UTF-8"),
        ({"text": "bad \udcff surrogate"}, "UTF-8"),
        ({"text": None}, "string"),
        ({"text": "fine", "metadata": "not an object"}, "metadata"),
        (42, "message"),
    ]
    for message, words in bad_inputs:
        with pytest.raises(InvalidTurnError, match=words):
            memory.add([{"id": "new-good", "text": "a good turn"}, message], user_id="maya")
        # The batch was rejected whole: the good turn beside the bad one was not written either ...
        with pytest.raises(TurnNotFoundError):
            memory.get("new-good", user_id="maya")
    # ... and nothing that was stored before is lost.
    assert [t.id for t in memory.turns(user_id="maya")] == ["d1", "d2", "d3", "d4"]
    skip = memory.add([{"id": "g", "text": "good"}, {"text": ""}], user_id="maya", on_error="skip")
    assert skip.added == ["g"] and skip.rejected == [(1, "text is empty")]
    with pytest.raises(UnknownNamespaceError, match="nobody"):
        memory.search("hotel", user_id="nobody")
    with pytest.raises(ValueError):
        memory.search("   ", user_id="maya")
    with pytest.raises(ValueError):
        memory.add("hi", user_id="")
    with pytest.raises(UnknownEngineError, match="available"):
        memory.search("hotel", user_id="maya", engine="nope")


def test_import_reports_bad_lines_and_keeps_good_ones(make_memory):
    memory = make_memory("bm25")
    lines = [
        json.dumps({"id": "a", "text": "first good line"}).encode(),
        b"{not json",
        b"\xff\xfe broken bytes",
        json.dumps(["a", "list"]).encode(),
        json.dumps({"id": "b", "text": ""}).encode(),
        b"",
        json.dumps({"id": "c", "text": "second good line"}).encode(),
    ]
    report = memory.import_(lines, user_id="u")
    assert report.added == 2
    assert [line for line, _ in report.errors] == [2, 3, 4, 5]
    assert "malformed JSON" in report.errors[0][1] and "UTF-8" in report.errors[1][1]
    assert [t.id for t in memory.turns(user_id="u")] == ["a", "c"]


def test_budget_packs_hits(make_memory):
    from cuemem.index.budget import packed_tokens

    memory = make_memory("bm25")
    memory.add(TRIP, user_id="maya")
    full = memory.search("hotel night euros", user_id="maya", k=10)
    # a session block's date header is charged once, with its first hit
    budget = full.hits[0].tokens + full.hits[0].detail["header_tokens"]
    small = memory.search("hotel night euros", user_id="maya", k=10, budget_tokens=budget)
    assert packed_tokens(small.hits) <= budget and len(small.hits) >= 1
    tighter = memory.search("hotel night euros", user_id="maya", k=10, budget_tokens=budget - 1)
    assert full.hits[0].turn_ids not in [h.turn_ids for h in tighter.hits]
    fullcontext = memory.search("anything", user_id="maya", engine="fullcontext", budget_tokens=40)
    assert fullcontext.tokens <= 40
    ids = fullcontext.turn_ids  # the most recent turns that fit, in log order
    assert 1 <= len(ids) < 4 and ids == ["d1", "d2", "d3", "d4"][-len(ids) :]


def test_engines_switch_per_search_and_catch_up(make_memory):
    memory = make_memory("bm25")
    memory.add(TRIP, user_id="maya")
    # "dense" never ingested this namespace: it catches up from the log on first use.
    ns = memory.store.namespace_id(memory.namespace("maya"))
    assert memory.store.watermark(ns, "dense@hashing-512") == 0
    assert "d3" in all_hit_ids(memory, "shellfish allergy", engine="dense")
    assert memory.store.watermark(ns, "dense@hashing-512") > 0


def test_a_new_embedder_re_embeds_from_the_log(make_memory):
    memory = make_memory("dense", embedder=HashingEmbedder(dim=512))
    memory.add(TRIP, user_id="maya")
    memory.close()
    other = make_memory("dense", embedder=HashingEmbedder(dim=256))  # same store, another embedding model
    assert "d3" in all_hit_ids(other, "allergic shellfish")
    models = other.store._query("SELECT model, COUNT(*) FROM vectors GROUP BY model ORDER BY model")
    assert models == [("hashing-256", 4), ("hashing-512", 4)]


def test_import_keeps_idless_repeats_across_chunks(make_memory):
    memory = make_memory("bm25")
    lines = [json.dumps({"text": "ok", "session_id": "s"})]
    lines += [json.dumps({"text": f"filler {i}", "session_id": "s"}) for i in range(300)]
    lines += [json.dumps({"text": "ok", "session_id": "s"})]  # line 302: same words, a later turn
    report = memory.import_(lines, user_id="u")
    assert (report.added, report.skipped, report.errors) == (302, 0, [])
    assert sum(t.text == "ok" for t in memory.turns(user_id="u")) == 2
    again = memory.import_(lines, user_id="u")  # and importing the file again is still a no-op
    assert (again.added, again.skipped) == (0, 302)


def test_pending_and_catch_up_report_what_a_new_embedder_must_index(tmp_path):
    from cuemem import Memory
    from cuemem.embed import HashingEmbedder

    path = store_target(tmp_path / "m.db")
    with Memory(path, engine="dense", embedder=HashingEmbedder(dim=64)) as memory:
        memory.add(TRIP, user_id="maya")
        assert memory.pending(user_id="maya") == 0
    with Memory(path, engine="dense", embedder=HashingEmbedder(dim=128)) as memory:  # another embedding model
        assert memory.pending(user_id="maya") == 4 and memory.pending(user_id="maya", engine="bm25") == 4
        seen: list[int] = []
        assert memory.catch_up(user_id="maya", progress=seen.append) == 4 and sum(seen) == 4
        assert memory.pending(user_id="maya") == 0


@pytest.mark.sqlite_only("the settings object is under test, not the store")
def test_memory_never_changes_the_settings_it_is_given(tmp_path):
    """Memory copies the settings it is given; `path` and `engine` (a name or an instance) change only the copy."""
    settings = Settings.load(db=tmp_path / "given.db", engine="hybrid", embedder="hashing")
    before = dataclasses.asdict(settings)
    with Memory(tmp_path / "other.db", engine="bm25", settings=settings, embedder=HashingEmbedder()) as memory:
        assert memory.settings is not settings
        assert memory.settings.db == tmp_path / "other.db" and memory.settings.engine == "bm25"
        memory.add(TRIP, user_id="maya")
    with Memory(engine=get_engine("fullcontext"), settings=settings, embedder=HashingEmbedder()) as memory:
        assert memory.settings.engine == "fullcontext" and memory.settings.db == tmp_path / "given.db"
    assert dataclasses.asdict(settings) == before
