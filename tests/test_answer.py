"""The answer path (issue 35): the smallest evidence, absolute dates, abstention, citations and streaming."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import open_memory
from fakes import FakeBackend

from cuemem.answer import (
    ABSTAIN,
    attributed_elsewhere,
    concise,
    dates_shown,
    evidence,
    excerpt,
    holding,
    inline_dates,
    read,
    read_stream,
    without_person,
    words_tokens,
)
from cuemem.llm import ChatResult, Choice, LLMClient, Usage
from cuemem.types import Answer, Hit, Namespace, Retrieval


def hit(turn: str, text: str, date: str | None = None, **detail: object) -> Hit:
    fields = {"form": 2, "session_id": turn.split(":")[0], **detail}
    if date:
        fields["date"] = date
    return Hit(text, 1.0, [turn], words_tokens(text), "stitch", fields)


class Streaming(FakeBackend):
    """Streams a scripted reply in pieces; chooses the option that names `cite` first."""

    name = "streaming:1"

    def __init__(self, reply: str, cite: str = "") -> None:
        super().__init__()
        self.reply, self.cite = reply, cite

    def stream(self, messages, *, max_tokens):
        self._record(messages)
        yield from [self.reply[i : i + 3] for i in range(0, len(self.reply), 3)]

    def chat(self, messages, *, max_tokens, temperature):
        self._record(messages)
        return ChatResult(self.reply, Usage(1, 1))

    def choose(self, messages, options, k, beam):
        self._record(messages)
        if options == ["yes", "no"]:  # the reader's check of its answer: yes when it cites anything
            sure = -0.1 if self.cite else -3.0
            return [Choice("yes", sure), Choice("no", -1.0)][:k], Usage(1, 1)
        ranked = sorted(options, key=lambda o: o != self.cite)
        return [Choice(o, -5.0 * i) for i, o in enumerate(ranked[:k])], Usage(1, 1)


def test_relative_dates_are_shown_absolute_next_to_their_phrase():
    said = "I start on the 1st of May, early shifts. [1st of May = 1 May 2024]"
    assert inline_dates(said) == "I start on the 1st of May (1 May 2024), early shifts."
    two = "I went yesterday and last week. [yesterday = 7 May 2023; last week = week of 1 May 2023]"
    assert inline_dates(two) == "I went yesterday (7 May 2023) and last week (week of 1 May 2023)."
    assert inline_dates("Nothing [here] to resolve") == "Nothing [here] to resolve"
    shown = excerpt(hit("D5:3", "Theo: I start on the 1st of May. [1st of May = 1 May 2024]", "2024-04-15T10:00:00"))
    assert shown == "[D5:3] 15 April 2024, Theo: I start on the 1st of May (1 May 2024)."
    assert dates_shown([hit("D5:3", "Theo: on the 1st of May [1st of May = 1 May 2024]", "2024-04-15T10:00:00")]) == {
        "D5:3": ["15 April 2024", "1st of May = 1 May 2024"]
    }


def test_an_excerpt_names_its_goal_and_says_when_its_value_was_replaced():
    day2 = hit(
        "D1:7",
        "Maya: Day 2 is Casa Azul, 95 euros a night.",
        "2024-03-03T14:10:00",
        resolved=["Lisbon trip", "For Day 2 I booked Casa Azul in Alfama, 95 euros a night, a tiny balcony."],
        revision={"replaced_by": ["D3:1"], "replaced_at": "18 March 2024"},
    )
    assert excerpt(day2) == (
        "[D1:7] 3 March 2024, Maya (re: Lisbon trip): Day 2 is Casa Azul, 95 euros a night. (replaced later by D3:1)"
    )  # a quoted turn in focus is too long to be a goal: only "Lisbon trip" shows
    loose = Hit("a plain text hit", 1.0, ["x"], 4)  # another engine's hit: shown as it is
    assert excerpt(loose) == "[x] a plain text hit"


def test_the_smallest_evidence_keeps_rank_order_within_the_budget_and_shows_it_in_date_order():
    hits = [
        hit("D3:1", "Maya: Day 2 is now 110 euros a night.", "2024-03-18T09:00:00"),
        hit("D1:7", "Maya: Day 2 is Casa Azul, 95 euros a night.", "2024-03-03T14:10:00"),
        hit("D2:1", "Theo: " + "long words " * 80, "2024-03-10T09:00:00"),  # too long for what is left: skipped
        *[hit(f"D4:{i}", f"Maya: filler {i}.", "2024-04-02T09:00:00") for i in range(10)],
    ]
    picked = evidence(hits, 60, most=4)
    assert [h.turn_ids[0] for h, _ in picked] == ["D1:7", "D3:1", "D4:0", "D4:1"]  # date order
    assert sum(words_tokens(text) for _, text in picked) <= 60
    assert [h.turn_ids[0] for h, _ in evidence(hits[2:3], 10)] == ["D2:1"]  # the best hit, however long


def test_read_streams_the_first_line_then_the_answer_with_its_citation_and_dates():
    hits = [
        hit("D5:3", "Theo: I start on the 1st of May. [1st of May = 1 May 2024]", "2024-04-15T10:00:00"),
        hit("D5:1", "Theo: I got the job at the bakery!", "2024-04-15T10:00:00"),
    ]
    retrieval = Retrieval("When does Theo start?", hits, "stitch", Namespace("u"))
    backend = Streaming("Theo starts on 1 May 2024, at the bakery.\nThe excerpt D5:3 says so.", cite="D5:3")
    items = list(read_stream(LLMClient(backend), retrieval.query, retrieval))
    *pieces, answer = items
    assert all(isinstance(p, str) for p in pieces) and len(pieces) > 1
    # the reader's first line only, without what restates the question (concise), streamed word by word
    assert "".join(pieces) == "1 May 2024, at the bakery" == answer.text
    assert isinstance(answer, Answer) and answer.cited_turn_ids == ["D5:3"]  # within the margin: one id
    assert answer.dates == ["15 April 2024", "1st of May = 1 May 2024"]
    assert answer.evidence_turn_ids == ["D5:3", "D5:1"] and 0 < (answer.evidence_tokens or 0) < 60
    prompt = backend.sent[0][-1]["content"]
    assert "[D5:3] 15 April 2024, Theo: I start on the 1st of May (1 May 2024)." in prompt
    assert read(LLMClient(backend), retrieval.query, retrieval).text == answer.text  # read: the same, whole
    short = list(read_stream(LLMClient(Streaming("1 May 2024\n", cite="D5:3")), retrieval.query, retrieval))
    assert short[:-1] == ["1 May 2024"] and short[-1].text == "1 May 2024"  # under CONCISE_WORDS: whole, at once


@pytest.mark.parametrize(
    ("reply", "question", "said"),
    [
        ("Lena is allergic to shellfish.", "What is Lena allergic to?", "shellfish"),
        (
            "Mel and her kids painted a sunset with a palm tree in their latest project in July 2023.",
            "What did Mel and her kids paint in their latest project in July 2023?",
            "sunset with a palm tree",
        ),
        ("Maya is staying at the Apollo Hotel.", "Which hotel is Maya staying at?", "Apollo Hotel"),  # a name whole
        (
            "The hotel on Day 1 in Porto is Hotel Ribeira, 140 euros a night.",
            "How much is the hotel on Day 1 in Porto?",
            "Hotel Ribeira, 140 euros a night",
        ),
        (  # an echoed excerpt header goes; "am" (a.m.) is not a function word
            "Theo (re: Fermento bakery): I start on the 1st of May (1 May 2024), from 5 am.",
            "When does Theo start his new job?",
            "1st of May (1 May 2024), from 5 am",
        ),
        ("Yes, Melanie went to the concert.", "Did Melanie go to the concert?", "Yes, Melanie went to the concert."),
        ("7:45 pm is 3500 euros", "For the dinner at 7:45 pm, what is the cost?", "3500 euros"),  # "7:45": 2 words
        ("Theo did not go to the race", "Where did Theo go on Sunday?", "not go to the race"),  # a negation stays
        ("Gina opened it", "What did Gina open?", "Gina opened it"),  # too short to trim
        ("Gina opened the store there", "What did Gina open there?", "store"),
        ("Gina is Gina, it is.", "Who is Gina?", "Gina is Gina, it is."),  # nothing would be left
    ],
)
def test_concise_drops_what_restates_the_question(reply: str, question: str, said: str):
    assert concise(reply, question) == said


def test_concise_drops_a_speakers_name_echoed_before_a_colon_but_keeps_any_other():
    question = "What did Jon say about the studio's opening night?"
    assert concise("Jon: That's a great goal for it!", question, speakers={"Jon", "Gina"}) == "great goal"
    assert concise("Casa Azul: 110 euros a night", "How much is Day 2 now?", speakers={"Maya"}) == (
        "Casa Azul: 110 euros a night"
    )


def test_an_answer_cites_the_shown_turns_that_say_it_without_asking_the_model():
    hits = [
        hit("D1:7", "Maya: Day 2 is Casa Azul, 95 euros a night.", "2024-03-03T14:10:00"),
        hit("D3:1", "Maya: Casa Azul called, Day 2 is now 110 euros a night.", "2024-03-18T09:00:00"),
        hit("D5:3", "Theo: I start on the 1st of May. [1st of May = 1 May 2024]", "2024-04-15T10:00:00"),
    ]
    assert holding("110 euros", hits) == ["D3:1"]
    assert holding("1 May 2024", hits) == ["D5:3"]  # a date resolved in the turn counts
    assert holding("Casa Azul", hits) == ["D1:7", "D3:1"] and holding("Casa Azul", hits, most=1) == ["D1:7"]
    assert holding("Maya", hits) == [] and holding("the", hits) == []  # the speaker's label; no content word
    assert holding("10 euros", hits) == [] and holding("not 95 euros", hits) == []  # numbers whole; negations kept
    assert holding("yes", [hit("D9:1", "Theo: yes, Casa Azul.")]) == []  # a bare yes: the model chooses
    record = Hit("Day 2: 110 euros a night", 1.0, ["D1:7", "D3:1"], 6, "profile", {})  # cites turns it does not quote
    assert holding("110 euros", [record, *hits]) == ["D3:1"]
    retrieval = Retrieval("How much is Day 2 now?", hits, "stitch", Namespace("u"))
    backend = Streaming("110 euros", cite="D1:7")  # the model would cite the replaced value
    answer = read(LLMClient(backend), retrieval.query, retrieval)
    assert answer.cited_turn_ids == ["D3:1"] and len(backend.sent) == 1  # one call: the answer, no choice of ids
    unsaid = read(LLMClient(Streaming("Theo", cite="D5:3")), "Who starts in May?", retrieval)
    assert unsaid.cited_turn_ids == ["D5:3"]  # no shown turn says "Theo" but as its speaker: the model chooses


def test_an_abstention_cites_nothing_and_empty_memory_abstains_without_a_model_call():
    retrieval = Retrieval("Who won?", [hit("D1:1", "Maya: hello", "2024-03-03T14:10:00")], "stitch", Namespace("u"))
    backend = Streaming("The memory does not say.", cite="D1:1")
    answer = read(LLMClient(backend), retrieval.query, retrieval)
    assert answer.text == ABSTAIN and answer.cited_turn_ids == [] and answer.dates == []
    assert len(backend.sent) == 1  # no citation asked for an abstention
    empty = Retrieval("Who won?", [], "stitch", Namespace("u"))
    quiet = Streaming("anything")
    assert read(LLMClient(quiet), "Who won?", empty).text.startswith(ABSTAIN) and quiet.sent == []


def test_memory_answer_stream_ends_with_the_answer_of_memory_answer(tmp_path: Path):
    with open_memory(tmp_path / "m.db", "hybrid") as memory:
        memory.add(
            [
                {"role": "Maya", "content": "Day 1 is the Apollo Hotel near Rossio."},
                {"role": "Theo", "content": "Nice, is Lena coming too?"},
            ],
            user_id="maya",
            session_id="s1",
            timestamp="3 March 2024",
        )
        streamed = list(memory.answer_stream("Which hotel on Day 1?", user_id="maya"))
        whole = memory.answer("Which hotel on Day 1?", user_id="maya")
    *pieces, last = streamed
    assert isinstance(last, Answer) and "".join(pieces) == last.text == whole.text  # the cache: same reply
    assert last.cited_turn_ids == whole.cited_turn_ids and set(last.cited_turn_ids) <= set(last.evidence_turn_ids)


def test_the_readers_check_turns_an_unsupported_answer_into_the_abstention():
    retrieval = Retrieval(
        "Who won?", [hit("D1:1", "Maya: we played chess", "2024-03-03T14:10:00")], "stitch", Namespace("u")
    )
    sure = read(LLMClient(Streaming("Maya", cite="D1:1")), "Who won?", retrieval, verify=0.0)
    assert sure.text == "Maya" and sure.cited_turn_ids == ["D1:1"] and sure.support == pytest.approx(0.9)
    unsure = read(LLMClient(Streaming("Theo")), "Who won?", retrieval, verify=0.0)
    assert unsure.text == ABSTAIN and unsure.cited_turn_ids == [] and unsure.support == pytest.approx(-2.0)
    unchecked = read(LLMClient(Streaming("Theo")), "Who won?", retrieval)
    assert unchecked.text == "Theo" and unchecked.support is None  # no check asked: no extra call


def said(turn: str, speaker: str, text: str, *people: str) -> Hit:
    return hit(turn, f"{speaker}: {text}", "2023-05-08T13:56:00", speaker=speaker, people=list(people))


def test_a_question_about_one_speaker_whose_subject_is_the_others_is_not_answered_with_it():
    """The premise check (attributed_elsewhere): what is asked of Melanie, the memory holds of Caroline. The check
    searches for the question with her name taken out, and looks at who said the best hits."""
    asked = "What did Melanie realize after her charity race?"
    theirs = said(
        "D2:1", "Caroline", "Thanks, Melanie! After the charity race I realized self-care matters.", "Melanie"
    )
    also = said("D2:4", "Caroline", "The race raised money for the shelter.")
    hers = said("D2:2", "Melanie", "Lovely. I painted a lake last week.")
    told = said("D2:3", "Caroline", "Melanie ran the charity race and realized self-care matters.", "Melanie")
    searched: list[str] = []

    def finds(*found: Hit):
        def search(text: str) -> list[Hit]:
            searched.append(text)
            return list(found)

        return search

    first = [hers, theirs]  # the question's own search: her name pulls her turns up
    assert attributed_elsewhere(asked, first, finds(theirs, also)) == ("Caroline", [theirs, also])
    assert searched == ["What did someone realize after her charity race?"]
    assert attributed_elsewhere(asked, first, finds(theirs, hers)) is None  # one of the best is hers
    assert attributed_elsewhere(asked, first, finds(told, also)) is None  # said of her by the other speaker
    assert attributed_elsewhere(asked, first, finds(theirs)) is None  # fewer hits than PREMISE_DEPTH
    question = said("D2:5", "Caroline", "How long did the race take you, Melanie?", "Melanie")
    assert attributed_elsewhere(asked, first, finds(question, theirs, also)) == ("Caroline", [theirs, also])
    assert attributed_elsewhere(asked, first, finds(theirs, question, hers)) is None  # the next statement is hers
    assert attributed_elsewhere(asked, first, finds(theirs, question, question, also)) is None  # only 3 are read
    assert attributed_elsewhere("What did Mel realize?", first, finds(theirs, also)) is not None  # a nickname
    searched.clear()
    assert attributed_elsewhere("What did they realize after the race?", first, finds(theirs, also)) is None
    assert attributed_elsewhere("Did Caroline or Melanie run?", first, finds(theirs, also)) is None  # both named
    assert attributed_elsewhere(asked, [theirs, also], finds(theirs, also)) is None  # one speaker in view
    assert searched == []  # nothing to check: no second search
    user = said("D3:1", "user", "I realized self-care matters after the race.")
    bot = said("D3:2", "assistant", "That is a good thing to realize.")
    assert attributed_elsewhere("What did the user realize?", [bot, user], finds(bot, bot)) is None  # labels
    assert without_person("Where is Mel's bag? Ask mel.", {"Melanie", "Mel"}) == "Where is someone's bag? Ask someone."


def test_the_premise_check_abstains_without_a_model_call_and_can_be_turned_off(tmp_path: Path):
    asked = "What did Melanie realize after her charity race?"
    theirs = said(
        "D2:1", "Caroline", "Thanks, Melanie! After the charity race I realized self-care matters.", "Melanie"
    )
    also = said("D2:4", "Caroline", "The race raised money for the shelter.")
    retrieval = Retrieval(asked, [said("D2:2", "Melanie", "Lovely."), theirs, also], "stitch", Namespace("u"))
    quiet = Streaming("self-care matters", cite="D2:1")
    answer = read(LLMClient(quiet), asked, retrieval, search=lambda _: [theirs, also])
    assert answer.text == f"{ABSTAIN} (The turns about this are Caroline's.)" and quiet.sent == []
    assert answer.cited_turn_ids == [] and answer.evidence_turn_ids == ["D2:1", "D2:4"]
    asked_anyway = read(LLMClient(quiet), asked, retrieval)  # no search given: no check
    assert asked_anyway.text == "self-care matters" and quiet.sent
    turns = [
        ("Caroline", "Thanks, Melanie! After the charity race I realized self-care matters."),
        ("Melanie", "Glad to hear it. I painted a lake last week."),
        ("Caroline", "The charity race raised money for the shelter, and I realized how much it helps."),
        ("Melanie", "My kids loved the lake painting."),
    ]
    for premise in (True, False):
        with open_memory(tmp_path / f"m{premise}.db", "hybrid", answer_premise=premise) as memory:
            memory.add([{"role": who, "content": text} for who, text in turns], user_id="u", session_id="s1")
            reply = memory.answer(asked, user_id="u")
            assert reply.text.startswith(ABSTAIN) == premise, reply.text
