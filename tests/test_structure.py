"""Speakers, dates and people as structure (issue 13): fields of a turn's item rather than words of its indexed
text, date headers per session block, query-side boosts, pseudo-relevance feedback and model reranking."""

from __future__ import annotations

import re

import pytest

from cuemem.engines.structure import context_block, hit_text, turn_fields
from cuemem.index.bm25 import BM25Index
from cuemem.index.budget import SESSION_HEADER_TOKENS, pack, packed_tokens
from cuemem.index.names import named_speaker, speaker_index
from cuemem.llm import LLMClient, LLMUnavailableError
from cuemem.llm.base import ChatResult, Choice, Usage
from cuemem.types import Hit, Turn

SHORT = ["Yes.", "Okay!", "Sure.", "Thanks!", "Totally.", "Haha, true.", "Nice!", "Right."]
TALK = [
    {"id": "m1", "speaker": "Melanie", "text": "How is the adoption agency process going for you these days?"},
    {"id": "c1", "speaker": "Caroline", "text": "Saturday was lovely, we went hiking by the lake with my family."},
    *[{"id": f"s{i}", "speaker": "Caroline", "text": t} for i, t in enumerate(SHORT)],
    {"id": "m2", "speaker": "Melanie", "text": "I painted a sunset over the sea last week, my favourite so far."},
    {"id": "c2", "speaker": "Caroline", "text": "I painted a sunrise over the lake last year for my friend."},
]


def test_a_name_in_the_query_no_longer_pulls_up_that_speakers_shortest_turns(make_memory):
    query = "What did Caroline say about her weekend hiking?"
    # Before issue 13 every document started with its speaker: BM25 then ranked Caroline's one-word turns high,
    # for the name alone (short documents, same term).
    old = BM25Index()
    for i, turn in enumerate(TALK):
        old.add(i, f"{turn['speaker']}: {turn['text']}")
    old_top = [TALK[i]["id"] for i, _ in old.search(query, 4)]
    assert any(t.startswith("s") for t in old_top)
    memory = make_memory("bm25")
    memory.add(TALK, user_id="u", session_id="s1", timestamp="2023-05-08")
    hits = memory.search(query, user_id="u", k=10).hits
    assert hits[0].turn_ids == ["c1"]
    assert not [h for h in hits if h.turn_ids[0].startswith("s")]  # the name alone matches nothing now
    assert hits[0].text.startswith("Caroline: ") and hits[0].detail["speaker"] == "Caroline"  # shown, not indexed


NAMED = ["What has Mel painted?", "What has Melanie painted?", "Has Mel ever painted anything?"]


@pytest.mark.parametrize("query", NAMED)
def test_a_nickname_or_first_name_in_the_query_boosts_that_persons_turns(make_memory, query):
    plain = make_memory("hybrid", name="plain.db")
    boosted = make_memory("hybrid", name="boosted.db", speaker_boost=1.0)
    for memory in (plain, boosted):
        memory.add(TALK, user_id="u")
    top = boosted.search(query, user_id="u", k=3).hits
    assert top[0].turn_ids == ["m2"] and top[0].detail["structure"]["people"] == ["Melanie"]
    assert {h.turn_ids[0] for h in plain.search(query, user_id="u", k=3).hits} >= {"m2"}


def test_named_speaker_is_the_one_speaker_a_question_names():
    speakers = speaker_index(["Melanie", "Caroline", "Melanie"])
    assert named_speaker("What has Mel painted?", speakers) == ("Melanie", {"Melanie"})  # a nickname
    assert named_speaker("What has Melanie painted?", speakers) == ("Melanie", {"Melanie"})
    assert named_speaker("Did Melanie paint what Caroline painted?", speakers) is None  # two: no one in particular
    assert named_speaker("What did they paint?", speakers) is None
    assert speaker_index(["user", "assistant"]) is None  # generic labels name no one
    assert speaker_index(["Melanie"]) is None  # one speaker: nothing to tell apart
    assert named_speaker("What did Melanie paint?", None) is None


PAINTED = [
    {"id": "m", "speaker": "Melanie", "text": "I painted the boat."},
    {"id": "c", "speaker": "Caroline", "text": "Melanie, we painted and painted the fence, it is painted now."},
    {"id": "x", "speaker": "Caroline", "text": "The weather was lovely by the lake."},
]


def test_said_boost_ranks_first_the_turns_of_the_speaker_a_question_names(make_memory):
    plain = make_memory("hybrid", name="plain.db", said_boost=0.0)
    boosted = make_memory("hybrid", name="boosted.db")  # the default, 0.2
    for memory in (plain, boosted):
        memory.add(PAINTED, user_id="u")
    query = "What has Melanie painted?"
    assert [h.turn_ids[0] for h in plain.search(query, user_id="u", k=2).hits] == ["c", "m"]  # Caroline's words
    assert [h.turn_ids[0] for h in boosted.search(query, user_id="u", k=2).hits] == ["m", "c"]  # Melanie said it
    for other in ("Did Melanie paint what Caroline painted?", "What was painted?"):  # two speakers named, or none
        assert [h.turn_ids for h in boosted.search(other, user_id="u", k=3).hits] == [
            h.turn_ids for h in plain.search(other, user_id="u", k=3).hits
        ]


def test_a_date_window_in_the_query_boosts_the_turns_of_that_period(make_memory):
    memory = make_memory("hybrid", date_boost=1.0)
    memory.add(
        {"id": "may", "text": "We went to the park with the dog."},
        user_id="u",
        session_id="a",
        timestamp="1:56 pm on 8 May, 2023",
    )
    memory.add(
        {"id": "june", "text": "We went to the park with the kids."},
        user_id="u",
        session_id="b",
        timestamp="01.06.2023, 18:13:08",
    )
    memory.add(
        {"id": "later", "text": "We went to the park again."},
        user_id="u",
        session_id="c",
        timestamp="2023/07/20 (Thu) 09:00",
    )
    june = memory.search("Where did we go in June 2023?", user_id="u", k=3).hits
    assert june[0].turn_ids == ["june"] and june[0].detail["structure"]["window"] == "June 2023"
    may = memory.search("Where did we go on 8 May 2023?", user_id="u", k=3).hits
    assert may[0].turn_ids == ["may"]
    # a relative window resolves against when the question is asked, and only then
    relative = memory.search("Where did we go last week?", user_id="u", k=3, now="2023-07-27")
    assert relative.hits[0].turn_ids == ["later"]
    assert memory.search("Where did we go last week?", user_id="u", k=3).hits[0].detail["structure"]["window"] is None


def test_relative_dates_resolve_against_the_turns_own_date_and_show_in_the_hit():
    turn = Turn(
        id="t",
        text="I went to the support group yesterday and again two weeks ago.",
        speaker="Caroline",
        session_id="D1",
        timestamp="1:56 pm on 8 May, 2023",
    )
    meta = turn_fields(turn)
    assert meta["date"] == "2023-05-08T13:56:00" and meta["speaker"] == "Caroline"
    assert meta["dates"][0][:3] == ["2023-05-07", "2023-05-07", "day"]
    shown = hit_text(turn.text, meta)
    assert shown.startswith("Caroline: I went") and "yesterday = 7 May 2023" in shown
    assert "8 May" not in shown  # the turn's own date goes in its session header, once per block


def test_an_unparsable_timestamp_is_kept_raw_counted_and_never_fatal(make_memory, caplog):
    memory = make_memory("hybrid")
    report = memory.add([{"id": "a", "text": "Back from the trip."}], user_id="u", timestamp="sometime in spring-ish")
    assert report.added == ["a"]
    hit = memory.search("trip", user_id="u").hits[0]
    assert hit.detail["date"] is None and hit.detail["timestamp"] == "sometime in spring-ish"
    assert memory.engine_stats(user_id="u") == {"turns": 1, "unparsed_timestamps": 1}
    assert "did not parse" in caplog.text
    block, _ = context_block([hit])
    assert block.splitlines()[0] == "## sometime in spring-ish (session default)"


def hit(tid: str, session: str, when: str | None, tokens: int = 10) -> Hit:
    detail = {"form": 2, "session_id": session, "date": when, "timestamp": when, "speaker": "A", "header_tokens": 9}
    return Hit(text=f"A: words of {tid}", score=1.0, turn_ids=[tid], tokens=tokens, detail=detail)


def test_the_packer_prints_one_date_header_per_session_block_in_date_order():
    old = Hit(text="[old] x", score=0.5, turn_ids=["o"], tokens=3)
    hits = [
        hit("b1", "B", "2023-06-01T00:00:00"),
        hit("a1", "A", "2023-05-08T13:56:00"),
        hit("b2", "B", "2023-06-01T00:00:00"),
        old,
    ]
    block, ids = context_block(hits)
    lines = block.splitlines()
    assert lines == [
        "## 8 May 2023 (session A)",
        "[a1] A: words of a1",
        "## 1 June 2023 (session B)",
        "[b1] A: words of b1",
        "[b2] A: words of b2",
        "[o] [old] x",
    ]
    assert set(ids) == {"a1", "b1", "b2", "o"}
    assert packed_tokens(hits) == 33 + 2 * 9  # each block's heading at its recorded cost
    # the header is charged with a block's first hit only
    assert [h.turn_ids[0] for h in pack(hits, 10 + 9)] == ["b1"]
    assert [h.turn_ids[0] for h in pack(hits, 20 + 9)] == ["b1", "b2"]
    assert [h.turn_ids[0] for h in pack(hits, 10 + 8)] == ["o"]  # b1 and its heading no longer fit; "o" does
    # a hit stored without the count is charged the fallback
    bare = Hit(text="A: x", score=1.0, turn_ids=["z"], tokens=5, detail={"form": 2, "session_id": "Z", "date": None})
    assert packed_tokens([bare]) == 5 + SESSION_HEADER_TOKENS


def test_the_recorded_heading_cost_is_the_heading_the_reader_sees(make_memory):
    from cuemem.engines.structure import session_heading

    memory = make_memory("hybrid")
    memory.add(TALK[:2], user_id="u", session_id="session_12", timestamp="15 September 2023")
    hit = memory.search("adoption agency", user_id="u", k=1).hits[0]
    block, _ = context_block([hit])
    assert block.splitlines()[0] == session_heading(hit.detail) == "## 15 September 2023 (session session_12)"
    assert hit.detail["header_tokens"] == memory.tokens.count(block.splitlines()[0])


HOPS = [
    {"id": "h1", "speaker": "Caroline", "text": "My sister Emma does not live with us anymore."},
    {"id": "h2", "speaker": "Melanie", "text": "Emma moved to Boston for her new job at the hospital."},
    *[
        {"id": f"x{i}", "speaker": "Melanie", "text": f"The {w} was nice and warm today at work."}
        for i, w in enumerate(["weather", "coffee", "soup", "office", "bus", "tea", "room", "sun"])
    ],
    *[
        {"id": f"y{i}", "speaker": "Caroline", "text": f"The {w} in the city was loud today."}
        for i, w in enumerate(["traffic", "party", "music", "market"])
    ],
]


def test_pseudo_relevance_feedback_reaches_the_second_hop(make_memory):
    query = "Which city does Caroline's sister live in?"
    # feedback alone: the said boost would lift Caroline's turns, and the answer is Melanie's; the asked attribute
    # (another stage, tested in test_attribute.py) would reorder the ten best by "city"
    alone = {"said_boost": 0.0, "attribute_weight": 0.0}
    plain = make_memory("hybrid", name="plain.db", **alone)
    expanded = make_memory("hybrid", name="expanded.db", expand_weight=3.0, expand_depth=1, **alone)
    for memory in (plain, expanded):
        memory.add(HOPS, user_id="u")
    assert plain.search(query, user_id="u", k=1).turn_ids == ["h1"]  # the first hop: the sister is Emma
    before = plain.search(query, user_id="u", k=20).turn_ids.index("h2")
    result = expanded.search(query, user_id="u", k=20)
    assert "Emma" in result.hits[0].detail["expansion"]["terms"]
    assert before >= 8 and result.turn_ids.index("h2") <= 3  # from below the distractors to the top four


class OverlapBackend:
    """Scores a continuation by the words it shares with the question in the prompt (a stand-in for a model's
    likelihood that makes the expected order obvious); `down` makes every call fail."""

    name = "fake:overlap"

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.calls = 0

    def score(self, messages, continuations):
        self.calls += 1
        if self.down:
            raise LLMUnavailableError("the model endpoint is down")
        prompt = messages[-1]["content"]
        asked = set(re.findall(r"\w+", prompt.split("\n")[0].lower())) if prompt.startswith("Question:") else set()
        return [float(len(asked & set(re.findall(r"\w+", c.lower())))) for c in continuations], Usage(1, 1)

    def chat(self, messages, *, max_tokens, temperature):
        return ChatResult("x", Usage(1, 1))

    def choose(self, messages, options, k, beam):
        return [Choice(o, 0.0) for o in options[:k]], Usage(1, 1)

    def json(self, messages, schema, *, max_tokens):
        return "{}", Usage(1, 1)


def test_the_model_reranker_reorders_the_head_and_a_failing_model_keeps_the_ranking(make_memory):
    query = "Did Emma move to Boston for a job at the hospital?"
    off = make_memory("hybrid", name="off.db")
    off.add(HOPS, user_id="u")
    baseline = off.search(query, user_id="u", k=6).turn_ids
    backend = OverlapBackend()
    on = make_memory("hybrid", name="on.db", llm=LLMClient(backend), rerank="model", rerank_depth=6, rerank_weight=3.0)
    on.add(HOPS, user_id="u")
    reranked = on.search(query, user_id="u", k=6).turn_ids
    assert backend.calls == 2 and reranked[0] == "h2" and set(reranked) == set(baseline)
    down = make_memory(
        "hybrid",
        name="down.db",
        llm=LLMClient(OverlapBackend(down=True)),
        rerank="model",
        rerank_depth=6,
        llm_retries=0,
    )
    down.add(HOPS, user_id="u")
    assert down.search(query, user_id="u", k=6).turn_ids == baseline


def test_items_written_before_the_fields_show_as_stored_and_are_not_counted_unparsed():
    from cuemem.engines.structure import TurnTable

    old = {"session_id": "s1", "speaker": "A", "timestamp": "1 May 2023"}  # no "form": an item of an older cuemem
    assert hit_text("[1 May 2023] A: hello", old) == "[1 May 2023] A: hello"
    assert TurnTable.build({1: old}).unparsed == 0
