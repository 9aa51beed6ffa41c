"""The benchmark harness on small fixtures written here: loaders, protocol, results schema, resumption."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from cuemem.bench.datasets import load_locomo, load_longmemeval
from cuemem.bench.runner import BenchConfig, conversations, run
from cuemem.llm.local import gguf_path


def locomo_fixture(path: Path) -> Path:
    def conv(sid: str, words: list[str]) -> dict:
        turns = [{"speaker": "A", "dia_id": f"D1:{i + 1}", "text": w} for i, w in enumerate(words)]
        turns[1]["blip_caption"] = "a photo of a red kayak"
        return {
            "sample_id": sid,
            "conversation": {"session_1_date_time": "1 May 2023", "session_1": turns},
            "qa": [
                {"question": "Who owns the kayak?", "answer": "Ana", "evidence": ["D1:2"], "category": 4},
                {
                    "question": "Which hotel on day 2?",
                    "answer": "Casa Azul",
                    "evidence": ["D1:3; D1:04"],
                    "category": 1,
                },
                {"question": "Unanswerable?", "adversarial_answer": "x", "evidence": ["D9:9"], "category": 5},
                {"question": "How many?", "answer": 3, "evidence": [], "category": 2},
            ],
        }

    words = ["I like tea", "Look at my new boat", "Day 2 hotel is Casa Azul", "It costs 110 euros", "Bye"]
    path.write_text(json.dumps([conv("c1", words), conv("c2", list(reversed(words)))]))
    return path


def test_locomo_loader_parses_evidence_conventions(tmp_path):
    convs = list(load_locomo(locomo_fixture(tmp_path / "l.json")))
    assert [c.id for c in convs] == ["c1", "c2"] and len(convs[0].turns) == 5
    q = convs[0].questions
    assert q[0].evidence == ["D1:2"] and q[0].category == "4"
    assert q[1].evidence == ["D1:3", "D1:4"]  # "D1:3; D1:04": regex-extracted and normalised
    assert q[2].evidence == [] and q[2].adversarial and q[2].answer == "x"  # D9:9 resolves to no turn
    assert q[3].answer == "3"  # integer answers become strings
    # LoCoMo's field name stays in the loader: the turn carries the generic key the indexers read
    assert convs[0].turns[1].metadata == {"image_caption": "a photo of a red kayak"}


def test_longmemeval_loader_streams_gzip_with_turn_and_session_evidence(tmp_path):
    item = {
        "question_id": "q1_abs",
        "question_type": "knowledge-update",
        "question": "Where?",
        "answer": 7,
        "question_date": "2023/05/30 (Tue) 21:56",
        "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/05/01", "2023/05/02"],
        "haystack_sessions": [
            [{"role": "user", "content": "hi"}],
            [{"role": "user", "content": "in Lisbon", "has_answer": True}, {"role": "assistant", "content": "noted"}],
        ],
        "answer_session_ids": ["s2"],
    }
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump([item, {**item, "question_id": "q2"}], fh)
    convs = list(load_longmemeval(path))
    assert len(convs) == 2 and [t.id for t in convs[0].turns] == ["s1:1", "s2:1", "s2:2"]
    q = convs[0].questions[0]
    assert q.evidence == ["s2:1"] and q.evidence_sessions == ["s2"] and q.adversarial and q.answer == "7"
    assert convs[0].turns[1].timestamp == "2023/05/02" and not convs[1].questions[0].adversarial
    assert len(list(load_longmemeval(path, limit=1))) == 1


def test_runner_writes_the_documented_schema_and_resumes(tmp_path):
    data = locomo_fixture(tmp_path / "l.json")
    config = BenchConfig("locomo", data, tmp_path / "out", ["bm25", "hybrid"], settings={"embedder": "hashing"})
    results = run(config)
    for name in ("bm25", "hybrid"):
        e = results["engines"][name]
        assert set(e) == {"retrieval", "by_category", "cost", "answer"}
        assert {"recall@1", "recall@5", "recall@10", "recall@20", "recall@50", "recall@budget", "ndcg@10"} <= set(
            e["retrieval"]
        )
        assert e["retrieval"]["questions"] == 4  # categories 1-4 with evidence, 2 per conversation
        assert e["cost"]["turns"] == 10 and e["cost"]["turns_per_s"] > 0
    bm25 = results["engines"]["bm25"]
    # BM25 returns only turns sharing a query term: "It costs 110 euros" (D1:4) never matches "Which hotel on
    # day 2?", so that question's recall is 1/2 and the mean (1 + 1/2) / 2; dense ranks every turn.
    assert bm25["retrieval"]["recall@10"] == 0.75 and bm25["by_category"]["1"]["recall@10"] == 0.5
    assert results["engines"]["hybrid"]["retrieval"]["recall@budget"] == 1.0
    # the kayak is only in the image caption of D1:2: BM25 finds it first
    assert bm25["by_category"]["4"]["recall@1"] == 1.0

    def strict(constant: str) -> None:
        raise AssertionError(f"results.json holds {constant}: not strict JSON")

    # category 5's evidence resolves to no turn, so its figures average nothing: null, not NaN
    saved = json.loads((tmp_path / "out" / "results.json").read_text(), parse_constant=strict)
    assert saved["engines"]["bm25"]["by_category"]["5"]["recall@10"] is None
    assert saved["engines"]["bm25"]["retrieval"] == bm25["retrieval"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.startswith("# locomo")
    # LoCoMo keeps its per-category table (issue 34); the look-alike failure classes are not its
    assert "## Recall@10 by category" in report and "| engine | 1 | 2 | 4 | 5 |" in report
    assert "| `bm25` | 0.500 |" in report and "implicit" not in report
    assert (tmp_path / "out" / "recall_at_k.png").stat().st_size > 1000
    # Resume: checkpoints are reused, nothing is ingested again.
    checkpoint = tmp_path / "out" / "checkpoints" / "bm25" / "c1.json"
    before = json.loads(checkpoint.read_text())["ingest_seconds"]
    again = run(config)
    assert json.loads(checkpoint.read_text())["ingest_seconds"] == before
    assert again["engines"]["bm25"]["retrieval"] == bm25["retrieval"]


def test_locomo_types_are_named_as_the_help_names_them_and_none_found_is_an_error(tmp_path):
    data = locomo_fixture(tmp_path / "l.json")
    config = BenchConfig("locomo", data, tmp_path / "out", ["bm25"], settings={"embedder": "hashing"})
    named = run(replace(config, types=("multi-hop", "4")))  # a name, or the file's number
    assert set(named["engines"]["bm25"]["by_category"]) == {"1", "4"}
    with pytest.raises(ValueError, match=r"no question of type open-domain in .*multi-hop, temporal"):
        run(replace(config, types=("open-domain",)))  # the fixture has none: said, not a report of nothing


def test_unknown_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="locomo, longmemeval or came"):
        run(BenchConfig("nope", tmp_path, tmp_path / "o", ["bm25"]))


@pytest.mark.xdist_group("smollm2")  # the shipped model: loaded once, on one worker
@pytest.mark.timeout(900)  # the model really runs: minutes on a loaded machine; the limit guards against a hang
@pytest.mark.skipif(gguf_path() is None, reason="the shipped local model is not installed")
def test_answer_metrics_with_the_local_model(tmp_path):
    data = locomo_fixture(tmp_path / "l.json")
    settings = {"embedder": "hashing", "llm_model": "smollm2-135m", "llm_cache": str(tmp_path / "calls.db")}
    # it judges too, on the default runtime (llama.cpp): the torch runtime's constrained choice is test_llm_local's
    judge = {"llm": "llamacpp", "llm_model": "smollm2-135m", "llm_cache": str(tmp_path / "judge.db")}
    config = BenchConfig(
        "locomo", data, tmp_path / "out", ["bm25"], limit=1, answer=True, judge=judge, settings=settings
    )
    answer = run(config)["engines"]["bm25"]["answer"]
    assert answer["questions"] == 3  # non-adversarial questions of one conversation
    assert answer["judged"] == 3 and 0.0 <= answer["judge_accuracy"] <= 1.0  # a CORRECT/WRONG label each
    assert "| judge accuracy | judged |" in (tmp_path / "out" / "report.md").read_text()
    for key in ("locomo_f1", "set_f1", "bleu1", "category_5_locomo_f1"):
        assert 0.0 <= answer[key] <= 1.0
    record = json.loads((tmp_path / "out" / "checkpoints" / "bm25" / "c1.json").read_text())
    assert all(q["prediction"] and set(q["cited"]) <= {f"D1:{i}" for i in range(1, 6)} for q in record["questions"])
    # answer + cite for the 2 questions BM25 finds something for; "Unanswerable?" and "How many?" share no term
    # with any turn, so the reader says it doesn't know without calling the model
    assert record["llm"]["query"]["calls"] == 4
    assert sum(q["prediction"].startswith("Not mentioned in the conversation") for q in record["questions"]) == 2


def test_resume_recomputes_checkpoints_made_under_another_protocol_in_a_fresh_namespace(tmp_path):
    from cuemem import Memory
    from cuemem.config import Settings

    data = locomo_fixture(tmp_path / "l.json")
    out = tmp_path / "out"
    # An interrupted run left a stray turn in c1's namespace: the protocol starts c1 from a fresh one.
    with Memory(settings=Settings.load(db=out / "stores" / "bm25.db", engine="bm25", embedder="hashing")) as m:
        m.add([{"id": "stray", "text": "the hotel kayak boat tea"}], user_id="locomo:c1")
    config = BenchConfig("locomo", data, out, ["bm25"], settings={"embedder": "hashing"})
    first = run(config)["engines"]["bm25"]
    checkpoint = out / "checkpoints" / "bm25" / "c1.json"
    record = json.loads(checkpoint.read_text())
    assert record["protocol"]["budget"] == 4096
    assert all("stray" not in hit for q in record["questions"] for hit in q["top"])
    # Another budget: the old checkpoints do not count for it, every conversation is run again.
    tight = run(BenchConfig("locomo", data, out, ["bm25"], budget=8, settings={"embedder": "hashing"}))
    assert json.loads(checkpoint.read_text())["protocol"]["budget"] == 8
    assert tight["engines"]["bm25"]["retrieval"]["recall@budget"] < first["retrieval"]["recall@budget"]
    assert tight["engines"]["bm25"]["retrieval"]["recall@10"] == first["retrieval"]["recall@10"]
    # A checkpoint written before checkpoints recorded their protocol is reused as it is.
    legacy = json.loads(checkpoint.read_text())
    del legacy["protocol"]
    legacy["ingest_seconds"] = 123.0
    checkpoint.write_text(json.dumps(legacy))
    run(BenchConfig("locomo", data, out, ["bm25"], settings={"embedder": "hashing"}))
    assert json.loads(checkpoint.read_text())["ingest_seconds"] == 123.0


def test_report_counts_model_calls_made_not_cache_hits_and_keeps_abstention_out_of_types(tmp_path):
    from cuemem.bench.report import summarize

    def q(qid: str, recall: float) -> dict:
        figures = {
            key: recall
            for key in ("recall@1", "recall@5", "recall@10", "recall@20", "recall@50", "recall@budget", "ndcg@10")
        }
        return {
            "id": qid,
            "category": "temporal-reasoning",
            "adversarial": qid.endswith("_abs"),
            "evidence": ["s1:1"],
            "latency_ms": 1.0,
            "context_tokens": 10,
            **figures,
        }

    llm = {
        "ingest": {"calls": 8, "cached": 6, "prompt_tokens": 100, "completion_tokens": 4},
        "query": {"calls": 3, "cached": 1, "prompt_tokens": 50, "completion_tokens": 2},
    }
    conv = {"turns": 4, "ingest_seconds": 2.0, "llm": llm, "questions": [q("q1", 1.0), q("q1_abs", 0.0)]}
    engine = summarize(BenchConfig("longmemeval", tmp_path, tmp_path, ["x"]), {"x": [conv]})["engines"]["x"]
    cost = engine["cost"]
    # 2 of 8 ingest calls reached the model (6 came from the call cache) over 4 turns; 2 of 3 query calls
    assert cost["llm_calls_per_turn"] == 0.5 and cost["llm_cache_hits"] == 7
    assert cost["llm_calls_per_question"] == 1.0  # 2 model calls over the 2 questions
    # the abstention question (with evidence turns) counts neither in the headline nor in its type
    assert engine["retrieval"]["questions"] == 1
    assert engine["by_category"]["temporal-reasoning"]["questions"] == 1
    assert engine["by_category"]["temporal-reasoning"]["recall@10"] == 1.0


def test_a_checkpoint_is_recomputed_when_the_engine_config_or_code_changes(tmp_path, monkeypatch):
    from dataclasses import replace

    from cuemem.engines.stitch import VARIANTS

    data = locomo_fixture(tmp_path / "l.json")
    config = BenchConfig("locomo", data, tmp_path / "out", ["stitch"], limit=1, settings={"embedder": "hashing"})
    checkpoint = tmp_path / "out" / "checkpoints" / "stitch" / "c1.json"

    def ingest_seconds() -> float:
        return json.loads(checkpoint.read_text())["ingest_seconds"]

    run(config)
    engine = json.loads(checkpoint.read_text())["protocol"]["engine"]
    assert engine["name"] == "stitch" and engine["config"]["k_retrieve"] == 40 and len(engine["code"]) == 16
    first = ingest_seconds()
    run(config)
    assert ingest_seconds() == first  # same engine, same configuration: reused
    # Another configuration of the same engine name: the checkpoint does not count for it.
    monkeypatch.setitem(VARIANTS, "stitch", replace(VARIANTS["stitch"], k_retrieve=39))
    run(config)
    record = json.loads(checkpoint.read_text())
    assert record["ingest_seconds"] != first and record["protocol"]["engine"]["config"]["k_retrieve"] == 39
    # Other code (as recorded by a checkpoint made before an edit of cuemem/engines/stitch/): recomputed too.
    record["protocol"]["engine"]["code"] = "0" * 16
    record["ingest_seconds"] = -1.0
    checkpoint.write_text(json.dumps(record))
    run(config)
    assert ingest_seconds() >= 0 and json.loads(checkpoint.read_text())["protocol"]["engine"]["code"] != "0" * 16


def test_engine_fingerprint_versions_an_engine_by_its_own_package(tmp_path):
    from cuemem.bench.protocol import engine_fingerprint, engine_sources, source_digest
    from cuemem.engines import get_engine

    bm25, hybrid, stitch, strict = (get_engine(n) for n in ("bm25", "hybrid", "stitch", "stitch-strict"))
    assert engine_sources(bm25)[0].name == "baselines.py"
    assert [p.name for p in engine_sources(bm25)].count("baselines.py") == 1
    assert engine_sources(stitch)[0].parent.name == "stitch"
    # shared primitives version every engine that composes them
    for engine in (bm25, stitch):
        names = {f"{p.parent.name}/{p.name}" for p in engine_sources(engine)}
        assert {"engines/base.py", "index/fusion.py", "index/bm25.py"} <= names
    assert engine_fingerprint(bm25)["config"] is None and engine_fingerprint(bm25)["version"]
    assert engine_fingerprint(bm25)["code"] == engine_fingerprint(hybrid)["code"]
    assert engine_fingerprint(stitch)["code"] == engine_fingerprint(strict)["code"]
    assert engine_fingerprint(stitch)["config"] != engine_fingerprint(strict)["config"]
    source = tmp_path / "engine.py"
    source.write_text("x = 1\n")
    before = source_digest([source])
    source.write_text("x = 2\n")
    assert source_digest([source]) != before


def test_the_reader_abstains_generically_and_the_benchmark_in_locomo_words():
    from cuemem.answer import ABSTAIN, read, system_prompt
    from cuemem.bench.metrics import locomo_f1
    from cuemem.bench.protocol import ABSTAIN as BENCH_ABSTAIN
    from cuemem.llm import ChatResult, Choice, LLMClient, Usage
    from cuemem.types import Hit, Namespace, Retrieval

    class Silent:  # says nothing, then cites the first id
        name = "silent:1"

        def __init__(self) -> None:
            self.systems: list[str] = []

        def chat(self, messages, *, max_tokens, temperature):
            self.systems.append(messages[0]["content"])
            return ChatResult("\n", Usage(1, 1))

        def choose(self, messages, options, k, beam):
            return [Choice(o, -float(i)) for i, o in enumerate(options[:k])], Usage(1, 1)

    found = Retrieval("q", [Hit("A: hello", 1.0, ["a"], 3)], "bm25", Namespace("u"))
    nothing = Retrieval("q", [], "bm25", Namespace("u"))
    backend = Silent()
    client = LLMClient(backend)
    assert "not mentioned" not in ABSTAIN.lower() and "conversation" not in ABSTAIN
    assert read(client, "Where?", found).text == ABSTAIN  # empty output falls back to the phrase
    assert read(client, "Where?", nothing).text.startswith(ABSTAIN)
    assert backend.systems[-1] == system_prompt() and f'reply exactly "{ABSTAIN}"' in backend.systems[-1]
    locomo = BENCH_ABSTAIN["locomo"]
    assert read(client, "Where?", found, abstain=locomo).text == locomo
    assert read(client, "Where?", nothing, abstain=locomo).text.startswith(locomo)
    assert f'reply exactly "{locomo}"' in backend.systems[-1]
    # LoCoMo's scorer counts the benchmark's phrase as the right reply to an adversarial (category 5) question
    assert locomo_f1(locomo, "anything", "5") == 1.0 and locomo_f1(ABSTAIN, "anything", "5") == 0.0
    assert set(BENCH_ABSTAIN) == {"locomo", "longmemeval", "came"}


def test_the_benchmark_reads_the_named_config_file_and_a_changed_file_reruns(tmp_path):
    """`cuemem --config X bench`: the runner's settings come from X too, and X's contents are part of the protocol."""
    data = locomo_fixture(tmp_path / "l.json")
    out = tmp_path / "out"
    toml = tmp_path / "cuemem.toml"
    toml.write_text('embedder = "hashing"\nturn_template = "{text}"\n')
    run(BenchConfig("locomo", data, out, ["bm25"], config_file=toml))
    checkpoint = out / "checkpoints" / "bm25" / "c1.json"
    first = json.loads(checkpoint.read_text())["protocol"]["config_file"]
    assert first and json.loads(checkpoint.read_text())["protocol"]["resolved"]["turn_template"] == "{text}"
    from cuemem import Memory
    from cuemem.config import Settings

    with Memory(settings=Settings.load(toml, db=out / "stores" / "bm25.db", engine="bm25"), read_only=True) as m:
        assert m.settings.turn_template == "{text}"  # the file's template
        assert m.search("hotel", user_id="locomo:c1").hits
    toml.write_text('embedder = "hashing"\n')
    run(BenchConfig("locomo", data, out, ["bm25"], config_file=toml))
    assert json.loads(checkpoint.read_text())["protocol"]["config_file"] != first


def test_max_questions_samples_evenly_and_enters_the_protocol(tmp_path):
    from cuemem.bench.protocol import BenchConfig, protocol, sample_questions

    assert sample_questions(list(range(10)), 4) == [0, 2, 5, 7]
    assert sample_questions(list(range(3)), 5) == [0, 1, 2] and sample_questions(list(range(3)), None) == [0, 1, 2]
    full = BenchConfig("locomo", tmp_path / "x.json", tmp_path, ["bm25"])
    part = BenchConfig("locomo", tmp_path / "x.json", tmp_path, ["bm25"], max_questions=4)
    assert "max_questions" not in protocol(full) and protocol(part)["max_questions"] == 4


def test_max_turns_keeps_a_prefix_and_the_questions_it_answers(tmp_path):
    from cuemem.bench.datasets import Conversation, Question
    from cuemem.bench.runner import prefix
    from cuemem.types import Turn

    turns = [Turn(id=f"D1:{i}", text=f"turn {i}", session_id="D1") for i in range(1, 6)]
    asked = [
        Question(id="q1", text="a", answer="x", category="1", evidence=["D1:1", "D1:2"], adversarial=False),
        Question(id="q2", text="b", answer="y", category="2", evidence=["D1:2", "D1:5"], adversarial=False),
        Question(id="q3", text="c", answer="z", category="5", evidence=[], adversarial=True),
    ]
    cut = prefix(Conversation("c", turns, asked), 3)
    assert [t.id for t in cut.turns] == ["D1:1", "D1:2", "D1:3"] and [q.id for q in cut.questions] == ["q1"]


def test_a_reader_given_by_environment_is_part_of_the_protocol(tmp_path, monkeypatch):
    from cuemem.bench.protocol import BenchConfig, protocol

    config = BenchConfig("locomo", tmp_path / "x.json", tmp_path, ["bm25"], answer=True)
    monkeypatch.setenv("CUEMEM_LLM_MODEL", "smollm2-135m")
    small = protocol(config)
    monkeypatch.setenv("CUEMEM_LLM_MODEL", "qwen2.5-coder-1.5b")
    assert protocol(config) != small and protocol(config)["resolved"]["llm_model"] == "qwen2.5-coder-1.5b"
    monkeypatch.setenv("CUEMEM_EMBED_DIM", "256")
    assert protocol(config)["resolved"]["embed_dim"] == 256


def test_the_split_is_fixed_by_id_and_the_harness_runs_one_split(tmp_path):
    from cuemem.bench.datasets import LOCOMO_DEV, split_of

    assert split_of("locomo", "conv-26") == "dev" and split_of("locomo", "conv-50") == "test"
    assert len(LOCOMO_DEV) == 5
    ids = [f"q{i:04d}" for i in range(1000)]
    dev = [i for i in ids if split_of("longmemeval", i) == "dev"]
    assert 400 < len(dev) < 600  # about half, by the id's hash
    assert dev == [i for i in ids if split_of("longmemeval", i) == "dev"]  # stable: a function of the id alone
    data = locomo_fixture(tmp_path / "l.json")
    samples = json.loads(data.read_text())
    samples[0]["sample_id"], samples[1]["sample_id"] = "conv-44", "conv-26"
    data.write_text(json.dumps(samples))
    every = [c.id for c in conversations(BenchConfig("locomo", data, tmp_path / "o", ["bm25"]))]
    for split in ("dev", "test"):
        chosen = [c.id for c in conversations(BenchConfig("locomo", data, tmp_path / "o", ["bm25"], split=split))]
        assert chosen == [c for c in every if split_of("locomo", c) == split] and len(chosen) == 1
    limited = conversations(BenchConfig("locomo", data, tmp_path / "o", ["bm25"], limit=1, split="test"))
    assert [c.id for c in limited] == [c for c in every if split_of("locomo", c) == "test"][:1]


def test_the_benchmark_runs_every_engine_in_one_postgresql_database(tmp_path):
    """Issue 26: `cuemem --db postgresql://… bench` keeps every engine in one database, each engine's conversations in
    namespaces of their own, with the same figures as the per-engine SQLite files."""
    import os
    import tempfile

    from conftest import PG

    PG.start(Path(tempfile.gettempdir()) / f"cuemem-pg-{os.getpid()}")
    try:
        data = locomo_fixture(tmp_path / "l.json")
        engines = ["bm25", "hybrid"]
        on_files = run(BenchConfig("locomo", data, tmp_path / "files", engines, settings={"embedder": "hashing"}))
        dsn = PG.dsn("bench_one_store")
        shared = run(BenchConfig("locomo", data, tmp_path / "pg", engines, settings={"embedder": "hashing"}, store=dsn))
        for name in engines:
            assert shared["engines"][name]["retrieval"] == on_files["engines"][name]["retrieval"]
        assert not (tmp_path / "pg" / "stores").exists()
        from cuemem.store import open_store

        with open_store(dsn, read_only=True) as store:
            users = sorted(ns.user_id for ns, _ in store.namespaces())
        assert users == ["locomo:c1#bm25", "locomo:c1#hybrid", "locomo:c2#bm25", "locomo:c2#hybrid"]
    finally:
        PG.drop_created()
