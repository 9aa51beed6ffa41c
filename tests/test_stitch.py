"""Engine `stitch` (docs/design.md design 1): vocabularies, merges, coreference, restart, model mode, retrieval."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cuemem import UnknownNamespaceError
from cuemem.embed import HashingEmbedder
from cuemem.engines import get_engine
from cuemem.engines.stitch import StitchEngine, Vocabulary, canonical_summary
from cuemem.engines.stitch.analysis import analyze_steps, wanted_types
from cuemem.llm.base import Choice, Usage
from cuemem.llm.client import LLMClient
from cuemem.memory import MODEL_BATCH
from cuemem.store.sqlite import text_hash

no_store = pytest.mark.sqlite_only("no store involved")

SYNONYMS = {"purchase": "buy", "purchased": "bought", "acquire": "buy"}


class SynonymEmbedder(HashingEmbedder):
    """Hashing vectors, except that a few synonyms embed exactly like their partner (so they must merge)."""

    def embed(self, texts):
        return super().embed([" ".join(SYNONYMS.get(w, w) for w in t.split()) for t in texts])


def conversation(n_sessions: int = 4, per_session: int = 12, seed: int = 0) -> list[dict]:
    """Sessions of trip planning, pets and shopping, with replies that refer back ("it", "that")."""
    rng = random.Random(seed)
    lines = [
        ("Maya", "We booked the Apollo Hotel in Lisbon for Day {d}, it costs {p} euros a night."),
        ("Theo", "Is it close to the river?"),
        ("Maya", "Yes, that one is near Rossio station."),
        ("Theo", "I bought a new guitar on {day} at the music store."),
        ("Maya", "Nice, did you purchase the red one?"),
        ("Theo", "My dog Miso learned to fetch in the park yesterday."),
        ("Maya", "That sounds lovely, how old is he?"),
        ("Theo", "He is three years old."),
        ("Maya", "I painted a sunset with my kids last weekend."),
        ("Theo", "We acquired two tickets for the concert in Porto."),
        ("Maya", "When is that?"),
        ("Theo", "It is on the 14th of June."),
    ]
    turns = []
    for s in range(n_sessions):
        for i in range(per_session):
            speaker, text = lines[(i + s) % len(lines)]
            text = text.format(d=s + 1, p=90 + 10 * s, day=rng.choice(["Monday", "Friday"]))
            turns.append(
                {
                    "id": f"s{s}t{i}",
                    "speaker": speaker,
                    "text": text,
                    "session_id": f"S{s}",
                    "timestamp": f"2023-05-{10 + s:02d}",
                }
            )
    return turns


def stored_labels(memory, engine: StitchEngine, user: str = "u") -> dict[str, dict[str, set[str]]]:
    """turn id -> kind -> labels, as stored."""
    ns = memory.store.namespace_id(memory.namespace(user))
    items = memory.store.get_items(ns, [i for i, _, _ in memory.store.labels_in_space(ns, engine.space("step"))])
    out: dict[str, dict[str, set[str]]] = {}
    for item, kind, label in memory.store.labels_in_space(ns, engine.space("step")):
        out.setdefault(items[item].key, {}).setdefault(kind, set()).add(label)
    return out


def state_of(memory, engine: StitchEngine, user: str = "u"):
    ns = memory.store.namespace_id(memory.namespace(user))
    return engine.state(memory._context(ns, memory.namespace(user)))


def small(name: str = "stitch", **overrides) -> StitchEngine:
    from cuemem.engines.stitch import variant

    return variant(name, **{"k_update": 10, "n_start": 8, **overrides})


@no_store
def test_variants_are_registered_engines():
    for name in (
        "stitch",
        "stitch-llm",
        "stitch-strict",
        "stitch-noscope",
        "stitch-noevent",
        "stitch-noentity",
        "stitch-nocoref",
    ):
        engine = get_engine(name)
        assert isinstance(engine, StitchEngine) and engine.name == name
    assert not get_engine("stitch-noscope").config.use_scope
    assert get_engine("stitch-llm").config.model
    assert get_engine("stitch").config.k_retrieve == 40 and get_engine("stitch").config.n_start == 50


@no_store
def test_model_free_analysis_reads_actions_types_and_references():
    booked, reply = analyze_steps(["Maya booked the Apollo Hotel in Lisbon for 120 euros.", "Is it close?"])
    assert "book" in booked.actions
    assert booked.entity_types == ["Location", "Quantity"]  # GPE -> Location, "120" (CARDINAL) -> Quantity
    assert any("Apollo" in m for m in booked.mentions)
    assert reply.refers and not booked.refers
    question = analyze_steps(["When did Theo buy the guitar?"])[0]
    assert wanted_types("When did Theo buy the guitar?", question)[:2] == ["Date", "Time"]


@no_store
@no_store
def test_spacy_loads_without_torch_and_torch_still_imports_after():
    """thinc (spaCy's backend library) imports torch when it is installed, ~2 s and ~180 MB that the shipped numpy
    pipeline never uses: `load_spacy` keeps it out, and gives the same analysis; torch imports as usual after."""
    pytest.importorskip("torch")
    code = (
        "import sys\n"
        "from cuemem.engines.stitch.analysis import load_spacy\n"
        "doc = load_spacy()('Lena booked the Apollo Hotel in Lisbon on Friday.')\n"
        "print('torch' in sys.modules, [(e.text, e.label_) for e in doc.ents])\n"
        "import torch\n"
        "print(torch.zeros(2).sum().item())\n"
    )
    first, second = _fresh_process(code)[-2:]
    assert first.startswith("False ") and "('Lena', 'PERSON')" in first and "('Lisbon', 'GPE')" in first
    assert second == "0.0"


@no_store
def test_spacy_prefetched_in_the_background_loads_once_and_without_torch():
    """A search starts loading spaCy in the background while the embedder loads (a fresh CLI process overlaps the
    two): a caller that asks meanwhile waits for that one load, and the background load keeps torch out too."""
    code = (
        "import sys\n"
        "from cuemem.engines.stitch import analysis\n"
        "analysis.prefetch_spacy()\n"
        "nlp = analysis.load_spacy()\n"
        "analysis.prefetch_spacy()  # loaded: no second thread\n"
        "print(analysis._load_spacy.cache_info().misses, 'torch' in sys.modules, nlp is analysis.load_spacy())\n"
    )
    assert _fresh_process(code)[-1] == "1 False True"


def _fresh_process(code: str) -> list[str]:
    """The lines `code` prints in a new interpreter (spaCy and its imports loaded from nothing)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()


def test_vocabulary_merge_folds_synonyms_into_the_older_label():
    vocab = Vocabulary("event")
    for word in ["buy", "buy", "paint", "purchase", "acquire"]:
        vocab.add(word)
    mapping = vocab.merge_synonyms(SynonymEmbedder(dim=64).embed, threshold=0.99)
    assert mapping == {"purchase": "buy", "acquire": "buy"}
    assert vocab.labels() == ["buy", "paint"] and vocab.counts["buy"] == 4
    assert vocab.add("purchase") == "buy" and vocab.canonical("acquire") == "buy"  # aliases stay
    assert vocab.merge_synonyms(SynonymEmbedder(dim=64).embed, threshold=0.99) == {}  # nothing fresh
    restored = Vocabulary.from_json(vocab.to_json(), "event")
    assert restored == vocab


def test_labels_are_always_members_of_their_vocabularies_and_merges_keep_them_valid(make_memory):
    engine = small()
    memory = make_memory(engine, embedder=SynonymEmbedder())
    memory.add(conversation(), user_id="u")
    state = state_of(memory, engine)
    labels = stored_labels(memory, engine)
    assert len(labels) == 48
    for turn_labels in labels.values():
        assert turn_labels.get("event", set()) <= set(state.events.labels())
        assert turn_labels.get("entity", set()) <= set(state.entities.labels())
        assert len(turn_labels["scope"]) == 1 and len(turn_labels["segment"]) == 1
    assert state.events.aliases.get("purchase") == "buy"  # merged during ingestion ...
    assert all("purchase" not in t.get("event", set()) for t in labels.values())  # ... and relabelled
    assert any("buy" in t.get("event", set()) for t in labels.values())
    assert state.steps == 48


def test_label_embeddings_are_cached_across_merges(make_memory):
    class Counting(SynonymEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def embed(self, texts):
            self.seen.extend(texts)
            return super().embed(texts)

    verbs = [
        "swim",
        "paint",
        "cook",
        "hike",
        "read",
        "dance",
        "knit",
        "bake",
        "climb",
        "sing",
        "draw",
        "row",
        "ski",
        "surf",
        "skate",
        "garden",
        "fish",
        "jog",
        "sew",
        "carve",
        "write",
        "sketch",
        "film",
        "brew",
    ]
    turns = [
        {"id": f"v{i}", "speaker": "Maya", "text": f"On Sunday I {v} with my sister in Lisbon."}
        for i, v in enumerate(verbs)
    ]
    embedder = Counting()
    memory = make_memory(small(k_update=6), embedder=embedder)
    memory.add(turns, user_id="u")  # four merges, each with new labels to compare with the old ones
    assert embedder.seen.count("swim") == 1 and embedder.seen.count("Location") == 1


def test_coreference_rewrite_never_replaces_the_raw_turn(make_memory):
    engine = small()
    memory = make_memory(engine)
    turns = conversation(n_sessions=1)
    memory.add(turns, user_id="u")
    ns = memory.store.namespace_id(memory.namespace("u"))
    rewritten = 0
    for turn in turns:
        assert memory.get(turn["id"], user_id="u").text == turn["text"]  # the log keeps the raw turn
        item = memory.store.get_items(ns, list(memory.store.item_ids(ns, engine.space("step"), [turn["id"]]).values()))
        (step,) = item.values()
        assert step.text.startswith(turn["text"])  # the words; speaker and date are fields (issue 13)
        if step.meta["resolved"]:
            rewritten += 1
            assert step.text == canonical_summary(step.text.split(" (re: ")[0], step.meta["resolved"])
    assert rewritten >= 3  # "Is it close to the river?" and friends got their antecedents
    hit = memory.search("Is the hotel close to the river?", user_id="u", k=3).hits[0]
    assert hit.turn_ids and hit.engine == engine.name == "stitch[k_update=10,n_start=8]"


def test_a_restart_continues_with_the_same_vocabularies(make_memory):
    turns = conversation()
    engine = small()
    whole = make_memory(engine, name="whole.db")
    whole.add(turns, user_id="u")

    first = make_memory(small(), name="split.db")
    first.add(turns[:20], user_id="u")
    first.close()
    resumed = small()
    again = make_memory(resumed, name="split.db")  # a new process: nothing but the store carries over
    assert state_of(again, resumed).events.labels()  # the vocabulary came back from the store
    again.add(turns[20:], user_id="u")

    assert state_of(again, resumed).to_json() == state_of(whole, engine).to_json()
    assert stored_labels(again, resumed) == stored_labels(whole, engine)


def test_retrieval_ranks_the_matching_step_and_reports_its_filter(make_memory):
    engine = small()
    memory = make_memory(engine)
    memory.add(conversation(), user_id="u")
    hits = memory.search("When did Theo buy the guitar?", user_id="u", k=5).hits
    assert any("guitar" in h.text for h in hits[:2])
    assert hits[0].detail["filter"]["entity_types"][:1] == ["Date"]
    assert "buy" in hits[0].detail["filter"]["events"]
    with pytest.raises(UnknownNamespaceError):
        memory.search("anything", user_id="nobody", k=5)


def test_strict_ranking_returns_at_most_k_retrieve_and_falls_back_to_dense(make_memory):
    engine = small("stitch-strict", k_retrieve=3, use_scope=False)  # the filter: event and entity types only
    memory = make_memory(engine)
    memory.add(conversation(n_sessions=2), user_id="u")
    hits = memory.search("When did Theo buy the guitar?", user_id="u", k=10).hits
    assert 0 < len(hits) <= 3
    fallback = memory.search("zzqx", user_id="u", k=4).hits  # no label and no word matches: dense order
    assert len(fallback) == 4


@pytest.mark.parametrize("name", ["stitch-noscope", "stitch-noevent", "stitch-noentity", "stitch-nocoref"])
def test_ablations_ingest_and_retrieve(make_memory, name):
    memory = make_memory(name)
    memory.add(conversation(n_sessions=2), user_id="u")
    engine = memory.engine
    labels = stored_labels(memory, engine)
    if name == "stitch-noevent":
        assert all("event" not in t for t in labels.values())
    if name == "stitch-noentity":
        assert all("entity" not in t for t in labels.values())
    ns = memory.store.namespace_id(memory.namespace("u"))
    items = memory.store.get_items(ns, [i for i, _, _ in memory.store.labels_in_space(ns, engine.space("step"))])
    if name == "stitch-nocoref":
        assert all(not it.meta["resolved"] for it in items.values())
    assert memory.search("Where is the Apollo Hotel?", user_id="u", k=3).hits


def test_delete_and_reindex_reach_the_stitch_index(make_memory):
    memory = make_memory("stitch")
    memory.add(conversation(n_sessions=2), user_id="u")
    ns = memory.store.namespace_id(memory.namespace("u"))
    steps = memory.store.get_items(ns, [i for i, _, _ in memory.store.labels_in_space(ns, "stitch:step")])
    rewritten = next(it for it in steps.values() if it.meta["resolved"])  # its item text is not what was embedded
    from cuemem.engines.baselines import turn_document

    turn = memory.get(rewritten.key, user_id="u")
    raw_doc, model = turn_document(turn, memory.settings.turn_template), memory.embedder.name
    assert memory.store.cached_embeddings(ns, model, [text_hash(raw_doc)])
    memory.delete(rewritten.key, user_id="u")
    assert not memory.store.cached_embeddings(ns, model, [text_hash(raw_doc)])  # forgotten with the turn
    gone = rewritten.key
    assert all(gone not in h.turn_ids for h in memory.search("Is it close to the river?", user_id="u", k=50).hits)
    memory.reindex(user_id="u")  # rebuilt from the log: as if the deleted turn had never been there
    fresh = make_memory("stitch", name="fresh.db")
    fresh.add([t for t in conversation(n_sessions=2) if t["id"] != gone], user_id="u")
    for query in ("guitar music store", "When is the concert?"):
        rebuilt = [h.turn_ids for h in memory.search(query, user_id="u", k=8).hits]
        assert rebuilt == [h.turn_ids for h in fresh.search(query, user_id="u", k=8).hits]


class ScriptedBackend:
    """A deterministic model: cycles through the options (so "new label"/"none" paths are taken too)."""

    name = "scripted:1"

    def __init__(self) -> None:
        self.requests: list[list[str]] = []

    def choose(self, messages, options, k, beam):
        self.requests.append(list(options))
        pick = options[len(self.requests) % len(options)]
        return [Choice(pick, -0.1)], Usage(len(messages[-1]["content"]) // 4, 1)

    def chat(self, messages, *, max_tokens, temperature):  # pragma: no cover - not used by stitch
        raise AssertionError("stitch never generates free text")

    def json(self, messages, schema, *, max_tokens):  # pragma: no cover
        raise AssertionError("stitch never generates free text")

    def score(self, messages, continuations):  # pragma: no cover
        raise AssertionError


def test_model_mode_labels_by_constrained_choice_and_stays_in_vocabulary(make_memory):
    backend = ScriptedBackend()
    engine = small("stitch-llm")
    memory = make_memory(engine, llm=LLMClient(backend))
    memory.add(conversation(n_sessions=2), user_id="u")
    assert backend.requests, "model mode must ask the model"
    assert any(o.startswith("(new label)") for opts in backend.requests for o in opts)
    assert any(o == "(none)" for opts in backend.requests for o in opts)
    state = state_of(memory, engine)
    for turn_labels in stored_labels(memory, engine).values():
        assert turn_labels.get("event", set()) <= set(state.events.labels())
        assert turn_labels.get("entity", set()) <= set(state.entities.labels())
    stats = memory.llm.stats()
    assert sum(s["calls"] for s in stats.values()) == len(backend.requests)
    calls = len(backend.requests)
    hits = memory.search("When did Theo buy the guitar?", user_id="u", k=3).hits
    assert hits and len(backend.requests) > calls  # the query filter is chosen under constraint too
    f = hits[0].detail["filter"]
    assert set(f["events"]) <= set(state.events.labels()) and set(f["entity_types"]) <= set(state.entities.labels())


@no_store
def test_group_max_is_the_best_score_of_each_group():
    from cuemem.engines.stitch.engine import _group_max

    scores = np.array([0.1, 0.5, -0.2, 0.3], dtype=np.float32)
    np.testing.assert_allclose(_group_max(scores, np.array([0, 0, 1, 1])), [0.5, 0.5, 0.3, 0.3])


class DownBackend(ScriptedBackend):
    """An endpoint that is down (the client turns this into LLMUnavailableError) or answers garbage."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def choose(self, messages, options, k, beam):
        self.requests.append(list(options))
        raise self.error


@pytest.mark.parametrize("error", ["down", "garbage"])
def test_model_mode_falls_back_to_model_free_labels_when_the_model_fails(make_memory, error):
    from cuemem.llm.base import LLMOutputError, LLMUnavailableError

    exc = LLMUnavailableError("connection refused") if error == "down" else LLMOutputError("not an option")
    backend = DownBackend(exc)
    engine = small("stitch-llm")
    memory = make_memory(engine, llm=LLMClient(backend))
    memory.add(conversation(n_sessions=2), user_id="u")  # nothing is lost: every turn is labelled
    labels = stored_labels(memory, engine)
    assert len(labels) == 24
    state = state_of(memory, engine)
    assert state.events.labels() and all(t.get("event", set()) <= set(state.events.labels()) for t in labels.values())
    if error == "down":
        # once down, the batch stops asking: one try per ingest batch (model engines ingest MODEL_BATCH at a time)
        assert len(backend.requests) <= -(-24 // MODEL_BATCH)
    else:
        assert len(backend.requests) > 10  # invalid output is per call: the model is asked again next step
    fallbacks = memory.engine_stats(user_id="u")["llm_fallbacks"]  # counted and reported, not silent
    assert fallbacks >= 24 * 3  # at least scope, entity types and events of each of the 24 steps went model-free
    hits = memory.search("When did Theo buy the guitar?", user_id="u", k=3).hits
    assert hits and hits[0].detail["filter"]["entity_types"][:1] == ["Date"]  # the model-free filter


def test_a_reading_made_stale_by_an_upgrade_is_written_back_once(make_memory, monkeypatch: pytest.MonkeyPatch):
    """An upgrade of the statement reader makes every stored reading stale: the first search that reads a step
    reads it again and stores the new reading (a new process then decodes it instead of reading every turn again),
    the hits do not change, and a read-only store is left as it was."""
    from conftest import TRIP

    from cuemem.index import statements

    memory = make_memory("stitch")
    memory.add(TRIP, user_id="u")
    question = "Which hotel is Day 2 and how much is it?"
    before = memory.search(question, user_id="u", k=4).turn_ids
    ns = memory.store.namespace_id(memory.namespace("u"))
    ids = list(memory.store.item_ids(ns, "stitch:step", [t["id"] for t in TRIP]).values())

    def versions() -> set[str]:
        return {item.meta[statements.READING]["v"] for item in memory.store.get_items(ns, ids).values()}

    old = versions()
    monkeypatch.setattr(statements, "reader_version", lambda: "later")
    reader = make_memory("stitch", read_only=True)
    assert reader.search(question, user_id="u", k=4).turn_ids == before
    assert versions() == old  # read-only: read again in the process, nothing written
    assert make_memory("stitch").search(question, user_id="u", k=4).turn_ids == before
    assert versions() == {"later"}  # written back by that search
    reads: list[str] = []
    real = statements.read_statement
    monkeypatch.setattr(statements, "read_statement", lambda text: reads.append(text) or real(text))
    assert make_memory("stitch").search(question, user_id="u", k=4).turn_ids == before
    assert reads == []  # a new process decodes every stored reading


def test_refresh_meta_rewrites_one_key_of_the_items_that_still_exist(make_memory):
    """`Store.refresh_meta` (what the write-back above uses) keeps the item's other metadata, moves no epoch (no
    search result changes) and never brings back an item deleted meanwhile."""
    from conftest import TRIP

    memory = make_memory("stitch")
    memory.add(TRIP, user_id="u")
    store = memory.store
    ns = store.namespace_id(memory.namespace("u"))
    gone = store.item_ids(ns, "stitch:step", ["d1"])["d1"]
    memory.delete("d1", user_id="u")
    memory.search("hotel", user_id="u")  # stitch's steps are built again from what is left (new ids)
    left = store.item_ids(ns, "stitch:step", ["d2"])["d2"]
    kept = store.get_items(ns, [left])[left].meta
    epoch = store.epoch(ns)
    assert store.refresh_meta(ns, "note", {gone: 1, left: 2}) == 1
    assert store.get_items(ns, [left])[left].meta == {**kept, "note": 2}
    assert store.get_items(ns, [gone]) == {} and store.epoch(ns) == epoch


def test_a_write_back_does_not_wait_for_another_writer(make_memory):
    """`refresh_meta` is written by a search: while another writer holds the lock it gives up at once
    (StoreError, which the search swallows) instead of making the search wait."""
    import time

    from conftest import TRIP, held_in_another_thread

    from cuemem.errors import StoreError

    memory = make_memory("stitch")
    memory.add(TRIP, user_id="u")
    store = memory.store
    ns = store.namespace_id(memory.namespace("u"))
    item = store.item_ids(ns, "stitch:step", ["d1"])["d1"]
    with held_in_another_thread(store.transaction(ns), seconds=10):
        started = time.monotonic()
        with pytest.raises(StoreError):
            store.refresh_meta(ns, "note", {item: 1})
        assert time.monotonic() - started < 2
    assert store.refresh_meta(ns, "note", {item: 1}) == 1
