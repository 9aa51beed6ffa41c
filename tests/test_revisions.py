"""Revised values (issue 34 item 2): the chain primitive (index/revisions.py) and the stage "current values first"
that every engine runs in refine (engines/current.py). Conversations here are hand-written, in several domains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cuemem.config import Settings
from cuemem.errors import CuememError
from cuemem.index.revisions import (
    Turn,
    asks_past,
    chains,
    compatible,
    frame_overlap,
    goals_in_focus,
    named_elsewhere,
    other_goal,
    read_statement,
    revised_near,
    value_profiles,
    word_roles,
)
from cuemem.index.statements import named_numbers
from cuemem.types import Namespace


def _recurring(*names: str) -> Callable[[str], bool]:
    return lambda word: word in names


def _chains(texts: list[tuple[str, str]], recurring: Callable[[str], bool]) -> dict[int, int]:
    turns = [Turn(text, session) for session, text in texts]
    return chains(turns, list(range(len(turns))), recurring)


def test_values_of_many_kinds_are_read() -> None:
    s = read_statement("We moved the party to March 3rd, for 40 guests, with a $1,200 budget and drinks at 7 pm.")
    assert s.values["money"] == {"1200"}
    assert s.values["date"] == {"march 3"}
    assert s.values["guest"] == {"40"}
    assert s.values["time"] == {"19:00"}
    assert s.changes  # "moved"
    numbered = read_statement("On the second floor of Building 7 the meeting room is Orchid.")
    assert {("floor", "2"), ("building", "7")} <= numbered.numbered


def test_a_revised_rent_supersedes_the_old_one_but_not_another_flats() -> None:
    texts = [
        ("1", "The Maple Street flat: rent is $1,450 a month, deposit $900."),
        ("1", "And the Harbour Road flat asks $1,300 a month in rent."),
        ("1", "Maple Street viewing went well."),
        ("2", "Harbour Road landlord confirmed the keys are ready."),
        ("2", "Maple Street flat update: the rent is now $1,520 a month."),
    ]
    got = _chains(texts, _recurring("maple", "street", "harbour", "road"))
    assert got == {0: 4}  # the old Maple Street rent is history; Harbour Road's rent is another goal's value


def test_a_verb_opening_a_turn_is_no_goal_anchor() -> None:
    for text in ("Now 175 euros.", "Rather 9 pm, please.", "Forget 150 euros, it's 200 euros now."):
        assert read_statement(text).opener == ""  # else "now" recurs and becomes a goal of its own
    assert read_statement("Nordic, what a summit.").opener == "nordic"


def test_an_anchorless_turn_continues_the_goal_in_focus() -> None:
    texts = [
        ("1", "Let's talk about the Rivera wedding."),
        ("1", "The Rivera wedding caterer quoted 85 dollars per head."),
        ("1", "Then the Okafor anniversary: 60 dollars per head."),
        ("2", "Back to the Rivera wedding."),
        ("2", "They revised it, 92 dollars per head now instead of 85 dollars."),
    ]
    got = _chains(texts, _recurring("rivera", "okafor"))
    assert got == {1: 4}


def test_a_quoted_old_value_with_a_change_word_is_replaced() -> None:
    texts = [
        ("1", "Dentist for Noor is booked: Thursday at 3 pm with Dr Haddad."),
        ("1", "Dr Haddad's office is near the station."),
        ("1", "Noor also needs new glasses."),
        ("2", "Scratch the 3 pm one for Noor, they can only do 4:30 pm."),
    ]
    got = _chains(texts, _recurring("noor", "haddad"))
    assert got.get(0) == 3


def test_an_old_value_quoted_with_no_cue_before_it_is_the_one_replaced() -> None:
    texts = [
        ("1", "The Okafor recital starts at 6 pm in the small hall."),
        ("1", "Okafor parents will bring snacks."),
        ("2", "The 6 pm slot is gone, they gave us 7:30 pm instead."),
    ]
    assert _chains(texts, _recurring("okafor")) == {0: 2}
    # two values of one kind and no change word: a list of options, not a revision
    listed = [texts[0], ("2", "The hall is free at 6 pm and at 7:30 pm.")]
    assert _chains(listed, _recurring("okafor")) == {}
    # a change word, but neither value is the earlier turn's: nothing is quoted as replaced
    other = [texts[0], ("2", "Now the choir sings at 5 pm and 8 pm.")]
    assert _chains(other, _recurring("okafor")) == {}
    # "now", "not": said of values that stand as well, so the earlier value is not taken as replaced
    for kept in (
        "The Okafor recital still starts at 6 pm, but now the reception is at 8 pm.",
        "The Okafor recital is at 6 pm, not sure if the reception is at 8 pm.",
        "Now I remember: the Okafor recital is at 6 pm and the dinner at 8 pm.",
    ):
        assert _chains([texts[0], ("2", kept)], _recurring("okafor")) == {}, kept


def test_numbered_goals_do_not_mix() -> None:
    assert not compatible(frozenset({"stage#1", "lumen"}), frozenset({"stage#2", "lumen"}))
    assert compatible(frozenset({"stage#1", "lumen"}), frozenset({"stage#1", "lumen"}))
    assert not compatible(frozenset({"apollo", "keystone"}), frozenset({"atlas", "keystone"}))
    texts = [
        ("1", "Sprint 4 of the Lumen app: the demo is on May 12."),
        ("1", "Sprint 5 of the Lumen app: the demo is on June 2."),
        ("1", "The Lumen app team is happy."),
    ]
    assert _chains(texts, _recurring("lumen")) == {}


def test_a_look_alike_of_another_goal_is_told_apart() -> None:
    def numbered(text: str) -> frozenset[tuple[str, str]]:
        return read_statement(text).numbered

    asked = numbered("Which demo room did we get for sprint 5 of the Lumen app?")
    assert asked == {("sprint", "5")}
    assert other_goal(asked, numbered("Sprint 4 of the Lumen app: the demo room is Orchid."))  # disagrees
    assert other_goal(asked, numbered("Sprint 2 of the Orion build starts Monday."))  # nothing else shared
    assert not other_goal(asked, numbered("Lumen app, sprint 5: we got Maple for it."))  # the same goal
    assert not other_goal(asked, numbered("Sprint 5 dinner is booked at Cervejaria Ramiro."))  # a name is no goal
    assert not other_goal(asked, numbered("The Lumen app backlog is groomed."))  # names no number
    assert not other_goal(frozenset(), numbered("Sprint 4 of the Lumen app."))  # the question names none


def test_a_numbered_noun_put_in_another_place_is_told_apart() -> None:
    """`named_numbers` / `named_elsewhere`: the names right beside a numbered noun say whose it is ("Week 2 in
    Oslo" is not "week 2 of the Bergen tour"); a name elsewhere in the turn is a value, not the goal."""
    asked = named_numbers("Which hall do we play in week 2 of the Bergen tour?")
    assert asked == {("week", "2", "bergen")}
    assert named_numbers("Oslo week 2: the Sentrum hall.") == {("week", "2", "oslo")}
    assert named_numbers("The first week in Bergen is sold out.") == {("week", "1", "bergen")}
    assert named_numbers("Week 2 merch is printed at Trykk Bergen.") == set()  # beside it: no name
    recurring = _recurring("bergen", "oslo", "sentrum")
    assert named_elsewhere(asked, named_numbers("Week 2 in Oslo is at the Sentrum hall."), recurring)
    assert not named_elsewhere(asked, named_numbers("Bergen week 2 moved to Grieghallen."), recurring)  # its own
    assert not named_elsewhere(asked, named_numbers("Week 3 in Oslo is quiet."), recurring)  # another week
    assert not named_elsewhere(asked, named_numbers("Week 2 in Tromso is at Kulturhuset."), _recurring("bergen"))
    assert not named_elsewhere(frozenset(), named_numbers("Week 2 in Oslo."), recurring)  # the question names none


TOURS = [
    {"id": "t1", "speaker": "Kai", "text": "Bergen tour planning starts now."},
    {"id": "t2", "speaker": "Kai", "text": "Week 2 of the Bergen tour: we play the Ole Bull hall."},
    {"id": "t3", "speaker": "Kai", "text": "Bergen sold out fast."},
    {"id": "t4", "speaker": "Kai", "text": "Oslo tour planning starts too."},
    {"id": "t5", "speaker": "Kai", "text": "Yes, week 2 in Oslo we play the hall at Sentrum, a big hall."},
    {"id": "t6", "speaker": "Kai", "text": "Oslo sold out as well."},
]


def test_the_named_place_ranks_before_a_look_alike_of_the_same_number(make_memory) -> None:
    before, after = _off_and_on(make_memory, TOURS, "Which hall do we play in week 2 of the Bergen tour?", 6)
    assert after.index("t2") < after.index("t5")  # Oslo's week 2 goes below Bergen's
    assert after.index("t5") > before.index("t5")


def test_the_asked_attribute_reads_its_goal_words_from_the_named_goals_turns(make_memory, monkeypatch) -> None:
    """The named goal comes first before the asked attribute takes its goal words from the best three candidates:
    the look-alike place's week 2 is not among what that stage is given first."""
    from cuemem.engines import refine as refine_module

    seen: list[list[int]] = []
    attribute_first = refine_module.attribute_first

    def recording(ctx: Any, query: str, ranked: Any, said: Any = None) -> Any:
        seen.append([item for item, _ in ranked])
        return attribute_first(ctx, query, ranked, said)

    monkeypatch.setattr(refine_module, "attribute_first", recording)
    memory = make_memory("hybrid")
    memory.add(TOURS, user_id="u", session_id="a")
    memory.search("Which hall do we play in week 2 of the Bergen tour?", user_id="u", k=6)
    ns = memory.store.namespace_id(Namespace("u"))
    oslo = memory.store.item_ids(ns, "turn", ["t5"])["t5"]
    assert seen and oslo in seen[0] and seen[0].index(oslo) == len(seen[0]) - 1  # below every other candidate


def test_a_turn_naming_no_goal_inherits_the_one_in_focus_but_is_not_told_apart_by_it() -> None:
    turns = [Turn("Sprint 4 of the Lumen app starts Monday."), Turn("Make it Maple instead.")]
    assert goals_in_focus(turns, [0, 1], _recurring("lumen")) == {
        0: {"sprint#4", "lumen"},
        1: {"sprint#4", "lumen"},
    }
    # the goal stage reads what a turn names itself: the inherited "sprint 4" is a guess, not a look-alike's mark
    assert not other_goal(frozenset({("sprint", "5")}), read_statement(turns[1].text).numbered)


def test_the_readings_do_not_depend_on_a_sets_order() -> None:
    # a goal naming two sprints shares one with a question about either: no "last one wins" between them
    both = frozenset({("sprint", "4"), ("sprint", "5")})
    assert not other_goal(frozenset({("sprint", "5")}), both)
    assert compatible(frozenset({"lumen", "sprint#4"}), frozenset({"lumen", "sprint#4", "sprint#5"}))
    assert other_goal(frozenset({("sprint", "6")}), both)
    # weights summed exactly: 0.1 + 0.2 + 0.3 is 0.6 or 0.6000000000000001 by the order of a float sum
    weight = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.6}.__getitem__
    assert frame_overlap(frozenset("abc"), frozenset("abcd"), weight) == 0.5


def test_questions_about_the_past_are_recognised() -> None:
    for q in ("What was the rent before?", "Which caterer did we originally pick?", "What did the slot used to be?"):
        assert asks_past(q), q
    for q in ("What is the rent now?", "Which caterer did we pick?", "When is the demo?"):
        assert not asks_past(q), q


def test_settings_validate_the_revision_constants() -> None:
    assert Settings(revise_depth=0).revise_depth == 0
    for bad in (
        {"revise_depth": -1},
        {"revise_min_frame": 1.5},
        {"revise_recurring": 0},
        {"revise_near": -1},
        {"revise_same_values": 1.5},
        {"revise_gap": -1},
    ):
        with pytest.raises(CuememError):
            Settings(**bad)  # type: ignore[arg-type]


CONFERENCE = [
    {"id": "t1", "speaker": "Ines", "text": "Let's get the Nordic summit travel sorted."},
    {"id": "t2", "speaker": "Ines", "text": "For the Nordic summit, the outbound flight leaves at 9:40 am."},
    {"id": "t3", "speaker": "Ines", "text": "Nordic summit hotel is Fjordlys, 180 dollars a night."},
    {"id": "t4", "speaker": "Ines", "text": "Separately, the Baltic workshop: its outbound flight leaves at 6:15 pm."},
    {"id": "t5", "speaker": "Ines", "text": "Baltic workshop badges are printed."},
    {"id": "t6", "speaker": "Ines", "text": "Baltic workshop agenda is final."},
]
CHANGE = {
    "id": "t7",
    "speaker": "Ines",
    "text": "Nordic summit change: the outbound flight now leaves at 11:05 am instead.",
}


def _ids(hits: list) -> list[str]:
    return [h.turn_ids[0] for h in hits]


def _off_and_on(make_memory: Any, turns: list[dict[str, str]], question: str, k: int) -> tuple[list[str], list[str]]:
    """The turn ids `hybrid` ranks for `question` over `turns` with the named goal first off, then on (default)."""
    ranked = []
    for name, options in (("plain.db", {"settings": Settings(goal_first=False)}), ("default.db", {})):
        memory = make_memory("hybrid", name=name, **options)
        memory.add(turns, user_id="u", session_id="a")
        ranked.append(_ids(memory.search(question, user_id="u", k=k).hits))
    return ranked[0], ranked[1]


@pytest.mark.parametrize("engine", ["hybrid", "stitch"])
def test_search_ranks_the_current_value_first_and_forgets_a_deleted_revision(make_memory, engine) -> None:
    memory = make_memory(engine)
    memory.add(CONFERENCE, user_id="u", session_id="s1", timestamp="2024-03-01 10:00")
    memory.add([CHANGE], user_id="u", session_id="s2", timestamp="2024-03-09 08:30")
    hits = memory.search("When does the outbound flight for the Nordic summit leave?", user_id="u", k=10).hits
    ids = _ids(hits)
    assert ids.index("t7") < ids.index("t2")
    assert ids.index("t2") == ids.index("t7") + 5  # revise_gap: five places below the value that replaced it
    assert ids.index("t2") > ids.index("t4")  # and so below the other goal's value ranked near it
    old = hits[ids.index("t2")].detail["revision"]
    assert old["replaced_by"] == ["t7"] and old["replaced_at"] == "2024-03-09 08:30"
    assert hits[ids.index("t7")].detail["revision"]["history"][0]["turn_ids"] == ["t2"]
    assert "revision" not in hits[ids.index("t4")].detail  # the Baltic flight is another goal's value

    past = memory.search("What time did the Nordic summit flight originally leave?", user_id="u", k=10).hits
    assert "t2" in _ids(past)
    assert past[_ids(past).index("t2")].detail["revision"]["replaced_by"] == ["t7"]

    memory.delete("t7", user_id="u")
    after = memory.search("When does the outbound flight for the Nordic summit leave?", user_id="u", k=10).hits
    assert "t7" not in _ids(after)
    assert all("revision" not in h.detail for h in after)  # the old value is current again, no trace of t7


SPRINTS = [
    {"id": "s1", "speaker": "Ade", "text": "Lumen app planning starts today."},
    {
        "id": "s2",
        "speaker": "Ade",
        "text": "Sprint 4 of the Lumen app: the demo room is Orchid, the big demo room upstairs.",
    },
    {"id": "s3", "speaker": "Ade", "text": "Lumen app, sprint 5: we got Maple for it."},
    {"id": "s4", "speaker": "Ade", "text": "The Lumen app backlog is groomed."},
]


def test_the_named_goal_ranks_before_its_look_alikes(make_memory) -> None:
    before, ids = _off_and_on(make_memory, SPRINTS, "Which demo room did we get for sprint 5 of the Lumen app?", 4)
    assert before[0] == "s2"  # the look-alike wins on words
    assert ids.index("s3") < ids.index("s2")  # sprint 4's room goes below sprint 5's


FRIENDS = [
    {"id": "f1", "speaker": "Jon", "text": "Gina, my dance crew won first place at the regional comp!"},
    {"id": "f2", "speaker": "Gina", "text": "Jon, dancing is my stress relief too. Mia taught me salsa."},
    {"id": "f3", "speaker": "Gina", "text": "Mia is coming to the studio opening, Jon."},
    {"id": "f4", "speaker": "Jon", "text": "Say hi to Mia from me, Gina."},
    {"id": "f5", "speaker": "Gina", "text": "Mia loved the new playlist."},
]


def test_the_speakers_are_no_goal_a_question_names(make_memory) -> None:
    expected, ids = _off_and_on(make_memory, FRIENDS, "How do Jon and Gina both find stress relief?", 5)
    assert expected[0] == "f2"
    assert ids == expected  # "Jon and Gina" is who talks


READ_TEXTS = [
    "We moved the party to March 3rd, for 40 guests, with a $1,200 budget and drinks at 7 pm.",
    "Forget 150 euros, Hotel Ribeira now asks 170 euros for Day 2 of the Porto trip.",
    "On the second floor of Building 7 the meeting room is Orchid, not Lotus.",
    "Book it.",
    "",
    "Ünïcödé café at 9:30, 15% off, room 12 \udcff",
]


@pytest.mark.parametrize("text", READ_TEXTS)
def test_a_stored_reading_decodes_to_the_reading_of_its_text(text: str) -> None:
    import json

    from cuemem.index.statements import reading_of, stored_reading

    stored = json.loads(json.dumps(stored_reading(text)))  # as an item's meta keeps it
    assert reading_of(text, stored) == read_statement(text)


def test_a_stored_reading_is_trusted_only_for_its_own_text_and_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading kept for another text, by another version of the reader, or damaged, is read again from the text:
    an item's meta is user-reachable data and code changes between versions."""
    from cuemem.index import statements

    text = "The venue deposit is now 300 dollars."
    other = statements.stored_reading("The venue deposit is 250 dollars.")
    assert statements.reading_of(text, other) == read_statement(text)  # another text: not taken
    mine = statements.stored_reading(text)
    forged = {**mine, "values": {"money": ["999"]}}
    assert statements.reading_of(text, forged).values["money"] == {"999"}  # taken: same text, same reader
    monkeypatch.setattr(statements, "reader_version", lambda: "another")
    assert statements.reading_of(text, forged) == read_statement(text)  # another reader: read again
    monkeypatch.undo()
    for damaged in ({**mine, "values": 7}, {**mine, "numbered": [[1]]}, {"v": mine["v"]}, "x", None):
        assert statements.reading_of(text, damaged) == read_statement(text)


def test_stitch_keeps_each_steps_reading_and_hits_do_not_show_it(make_memory) -> None:
    import json

    from cuemem.engines.stitch.engine import said_by_step
    from cuemem.index.statements import READING, reading_of

    memory = make_memory("stitch")
    memory.add(
        [
            {
                "id": "t0",
                "speaker": "Ana",
                "text": "Day 2 of the Porto trip: Hotel Ribeira asks 150 euros.",
                "session_id": "s",
            },
            {"id": "t1", "speaker": "Ben", "text": "Actually it is 170 euros now.", "session_id": "s"},
        ],
        user_id="u",
    )
    ns = memory.store.namespace_id(memory.namespace("u"))
    items = memory.store.get_items(ns, list(memory.store.item_ids(ns, "stitch:step", ["t0", "t1"]).values()))
    for item in items.values():
        stored = item.meta[READING]
        assert reading_of(said_by_step(item), stored) == read_statement(said_by_step(item))
        assert stored["of"]  # names the text it read
    hits = memory.search("How much is the hotel on day 2?", user_id="u", k=2).hits
    assert hits and all(READING not in hit.detail for hit in hits)
    memory.delete("t0", user_id="u")  # a reading lives in its step's metadata and goes with it
    memory.search("hotel", user_id="u")  # stitch's steps are built again from what is left
    left = memory.store.get_items(ns, list(memory.store.item_ids(ns, "stitch:step", ["t0", "t1"]).values()))
    assert [item.key for item in left.values()] == ["t1"]
    assert "ribeira" not in json.dumps([item.meta for item in left.values()]).lower()


def _reference_chains(turns: list[Turn], recurring: Callable[[str], bool], min_frame: float) -> dict[int, int]:
    """`chains` as the primitive defines it, pair by pair through `supersedes` and `frame_overlap` (no shortcut)."""
    import math
    from collections import Counter

    from cuemem.index.revisions import follow, supersedes

    candidates = list(range(len(turns)))
    goals = goals_in_focus(turns, candidates, recurring)
    frequency = Counter(w for t in turns if t.statement for w in t.statement.frame)

    def weight(word: str) -> float:
        return math.log(1 + len(turns) / (1 + frequency[word]))

    replaced = {}
    for i in candidates:
        for j in candidates[i + 1 :]:
            old, new = turns[i].statement, turns[j].statement
            if supersedes(new, old, goals[j], goals[i], recurring, min_frame, weight):  # type: ignore[arg-type]
                replaced[i] = j
    return follow(replaced)  # the pairs are what is checked; following them is shared


@pytest.mark.parametrize("min_frame", [0.3, 0.5, 0.6, 1.0])
def test_chains_decide_every_pair_as_supersedes_does(min_frame: float) -> None:
    """The chains' shortcuts (pairs stating no common kind skipped, frame sums kept, the overlap decided from them
    away from the threshold) give exactly the chains of `supersedes` over every pair, on random conversations."""
    import random

    rng = random.Random(7)
    things = ["hotel", "hotel room", "dinner", "museum ticket", "venue", "venue deposit"]
    verbs = ["costs", "is now", "moved to", "comes to", "will be", "changed to", "stays at"]
    values = ["{n} euros", "${n}", "{n} guests", "{h} pm", "March {d}", "{n}"]
    found = 0
    for _ in range(80):
        turns = []
        for _ in range(rng.randint(2, 24)):
            value = rng.choice(values).format(n=rng.randint(1, 400), h=rng.randint(1, 12), d=rng.randint(1, 28))
            goal = rng.choice(["", "", f"Day {rng.randint(1, 3)}: ", "For the Lyon trip, ", "Actually, "])
            text = f"{goal}the {rng.choice(things)} {rng.choice(verbs)} {value}" + rng.choice(["", " instead", "."])
            turns.append(Turn(text, rng.choice(["s1", "s2"])))
        recurring = _recurring("lyon", "trip")
        expected = _reference_chains(turns, recurring, min_frame)
        assert chains(turns, list(range(len(turns))), recurring, min_frame) == expected
        found += len(expected)
    assert found >= 25  # the conversations do revise values


def test_without_the_readers_sources_the_package_version_stands_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed as compiled files only, the reader's digest falls back to the package's version (a stored
    reading is then trusted within one version), and to trusting none when even that is unknown."""
    from importlib import metadata
    from pathlib import Path

    from cuemem.index import statements

    def missing(self: Path) -> bytes:
        raise FileNotFoundError(self)

    monkeypatch.setattr(Path, "read_bytes", missing)
    by_version = statements.reader_version.__wrapped__()
    assert by_version not in ("", "unknown") and by_version != statements.reader_version()

    def unknown(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", unknown)
    assert statements.reader_version.__wrapped__() == "unknown"
    monkeypatch.setattr(statements, "reader_version", lambda: "unknown")
    text = "The deposit is 300 dollars."
    forged = {**statements.stored_reading(text), "values": {"money": ["999"]}}
    assert statements.reading_of(text, forged) == read_statement(text)  # no stored reading trusted


# The near chains (issue 34, fourth round): a revision said in other words, among the candidates a search ranks first.
GIFTS = [
    ("1", "Can we sort out Nico's birthday presents?"),
    ("1", "The price of the desk lamp for Nico is 75 dollars."),
    ("1", "The desk lamp for Nico ships on Friday."),
    ("1", "Nico's tablet costs 240 dollars at the mall."),
    ("1", "Nico's tablet arrives on Monday."),
    ("2", "New price for Nico's tablet: 255 dollars now."),
]
TRIP = [
    ("1", "For the Oslo trip we sleep at Fjordlys Lodge."),
    ("1", "Dinner on the Oslo trip is booked at Kafe Solsikke."),
    ("1", "The Oslo trip flight leaves at 7:10 am."),
    ("1", "Ines asked where we sleep: Fjordlys Lodge, near the harbour."),
    ("1", "The Oslo trip budget is 900 dollars."),
    ("1", "Dinner with Ines at Kafe Solsikke sounds lovely."),
    ("2", "Oslo trip change: dinner is at Bistro Havn now."),
]


def _near(texts: list[tuple[str, str]], recurring: Callable[[str], bool]) -> dict[int, int]:
    turns = [Turn(text, session) for session, text in texts]
    return revised_near(turns, list(range(len(turns))), recurring)


def test_words_are_told_apart_as_attributes_topics_and_generic_words() -> None:
    turns = [Turn(text, session) for session, text in GIFTS]
    goals = goals_in_focus(turns, range(len(turns)), _recurring("nico"))
    roles = word_roles(turns, goals, _recurring("nico"))
    assert "price" in roles.attribute  # said twice, with money both times
    assert {"desk", "lamp", "tablet"} <= roles.topic  # said with money and with dates: the things, not attributes
    assert "sort" not in roles.attribute | roles.topic  # said once


def test_the_near_chains_take_a_revision_the_strict_chains_miss() -> None:
    recurring = _recurring("nico")
    assert _chains(GIFTS, recurring) == {}  # "costs ... at the mall" and "New price ...": too few words in common
    assert _near(GIFTS, recurring) == {3: 5}  # the tablet's 240 dollars is replaced; the desk lamp's 75 is not


def test_the_near_chains_keep_another_topics_value() -> None:
    """The desk lamp's price and the tablet's new price share the word "price", a kind and a goal (Nico): only their
    topics tell them apart."""
    turns = [Turn(text, session) for session, text in GIFTS]
    assert 1 not in revised_near(turns, [1, 5], _recurring("nico"))
    lamp_only = [GIFTS[1], GIFTS[2], ("2", "New price for Nico's desk lamp: 80 dollars now.")]
    assert _near(lamp_only, _recurring("nico")) == {0: 2}  # the same topic: replaced


def test_the_near_chains_take_an_amount_whose_attribute_is_worded_otherwise() -> None:
    """An amount, a time, a date or a count is one of its kind for a goal and topic: a later one said with a change
    word replaces it however the attribute is worded ("the rate per night" against "the hotel costs"); a name
    needs a word in common."""
    rate = [
        ("1", "Okay, the cabin in Tromso for Ines."),
        ("1", "The rate per night is 140 euros."),
        ("2", "Small correction on the cabin in Tromso: it costs 165 euros now."),
    ]
    assert _near(rate, _recurring("tromso", "ines")) == {1: 2}
    named = [
        ("1", "Okay, the cabin in Tromso for Ines."),
        ("1", "The caretaker is Solveig."),
        ("2", "Small correction on the cabin in Tromso: Arne now."),
    ]
    assert _near(named, _recurring("tromso", "ines")) == {}


def test_a_name_replaces_a_name_only_for_an_attribute_in_common() -> None:
    recurring = _recurring("oslo", "ines")
    assert _near(TRIP, recurring) == {1: 6}  # the dinner place is replaced; where we sleep is not


@pytest.mark.parametrize("near", [0, 8])
def test_search_ranks_a_revision_in_other_words_first(make_memory, near: int) -> None:
    memory = make_memory("hybrid", settings=Settings(revise_near=near))
    turns = [{"id": f"g{i}", "speaker": "Ana", "text": text} for i, (_, text) in enumerate(GIFTS)]
    memory.add(turns[:5], user_id="u", session_id="a", timestamp="2024-05-01 09:00")
    memory.add(turns[5:], user_id="u", session_id="b", timestamp="2024-05-03 18:00")
    hits = memory.search("How much is Nico's tablet?", user_id="u", k=6).hits
    ids = _ids(hits)
    if near:
        assert ids.index("g5") < ids.index("g3")
        assert hits[ids.index("g3")].detail["revision"]["replaced_by"] == ["g5"]
        assert "revision" not in hits[ids.index("g1")].detail  # the desk lamp's price stands
    else:
        assert "revision" not in hits[ids.index("g3")].detail


@pytest.mark.parametrize("gap", [0, 1, 2])
def test_a_replaced_value_goes_as_far_below_its_current_value_as_the_gap_says(make_memory, gap: int) -> None:
    memory = make_memory("hybrid", settings=Settings(revise_gap=gap))
    turns = [{"id": f"g{i}", "speaker": "Ana", "text": text} for i, (_, text) in enumerate(GIFTS)]
    memory.add(turns[:5], user_id="u", session_id="a", timestamp="2024-05-01 09:00")
    memory.add(turns[5:], user_id="u", session_id="b", timestamp="2024-05-03 18:00")
    ids = _ids(memory.search("How much is Nico's tablet?", user_id="u", k=6).hits)
    if gap:
        assert ids.index("g3") == ids.index("g5") + gap
    else:  # below every other candidate
        assert ids.index("g3") == len(ids) - 1


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Our vet is Greenfield Animal Hospital.", "greenfield animal hospital"),
        ("The Tuesday class moved to Ramona.", "ramona"),
        ("For the quartet we're going with Ingrid.", "ingrid"),
        ("Make the lead singer Tobias.", "tobias"),
        ("Ingrid — that's the cellist for the spring concert.", "ingrid"),
        ("Put Oskar down as the driver.", "oskar"),
        ("The venue will be Old Mill Barn.", "mill barn"),
        ("It's Villa Sol now.", "villa sol"),
        ("Then Tomas left, and the lead is Tom.", "tom"),  # its own words, not inside another name
    ],
)
def test_a_name_where_a_value_stands_is_a_value_even_when_it_recurs(text: str, value: str) -> None:
    statement = read_statement(text)
    assert value in statement.said
    recurs = _recurring(*value.split())  # a recurring name is a goal's anchor unless said as a value
    assert value not in {w for w in statement.anchors(recurs)}
    assert not set(value.split()) & statement.anchors(recurs)


@pytest.mark.parametrize(
    "text",
    [
        "Is Ramona coming to the rehearsal?",  # a question states no value
        "We need new strings for Ingrid's cello.",  # a possessive is the goal
        "The spring concert Ingrid is organising needs a poster.",
        "Oh no, Ramona! Sorry to hear that.",  # "no" before a name replaces nothing
        "We're going to Ingrid's place in May.",
        "I went to Ramona for the weekend.",  # where one goes is a goal, not a value
        "In Ramona it is always sunny.",
        "I'll drop Ingrid at school.",
        "Let's make the trip to Ramona next week.",
    ],
)
def test_a_name_where_a_goal_stands_stays_an_anchor(text: str) -> None:
    statement = read_statement(text)
    assert not statement.said
    assert statement.anchors(_recurring("ramona", "ingrid"))


def test_a_quantity_and_its_value_are_no_numbered_thing() -> None:
    assert not read_statement("Please make the head count 17.").numbered
    assert not read_statement("We booked sessions 6 and more.").numbered  # a plural noun: a quantity
    assert read_statement("Meet me at gate 12.").numbered == {("gate", "12")}
    assert read_statement("Please make the day 2 tour longer.").numbered == {("day", "2")}  # "the day 2": a thing


def test_the_frame_keeps_an_attribute_word_said_outside_a_name() -> None:
    # "clinic" is the attribute here though the new value's name also says it
    assert "clinic" in read_statement("Update for Lena's check-ups: make the clinic Hillside Clinic.").frame
    assert "hospital" not in read_statement("We drove past Mercy Hospital on the way.").frame
    assert "villa" not in read_statement("We booked Villa  Sol for two nights.").frame  # any space between its words


def test_a_recurring_value_said_again_replaces_its_old_value() -> None:
    texts = [
        ("1", "Next up is Omar's recital."),
        ("1", "The accompanist is Ingrid."),
        ("2", "The accompanist is now Tobias."),
        ("3", "Ingrid also said she'd bring cake."),  # Ingrid and Tobias recur: values, not goals, where said so
        ("3", "Tobias sends his regards."),
    ]
    assert _chains(texts, _recurring("omar", "ingrid", "tobias")) == {1: 2}


def test_a_quoted_old_value_continues_its_goal_whatever_turns_came_before() -> None:
    texts = [
        ("1", "For the Brighton trip the ferry leaves at 9:15 am."),
        ("1", "Separately, the Harlow Lodge booking is confirmed."),  # the turn in focus is about another goal
        ("1", "Forget 9:15 am, it's 10:40 am now."),
    ]
    assert _chains(texts, _recurring("brighton", "harlow", "lodge")) == {0: 2}
    # a turn between them (a candidate or not) that stated the value may be the one quoted: no link past it
    between = [
        ("1", "For the Brighton trip the ferry leaves at 9:15 am."),
        ("1", "For the Harlow Lodge the shuttle leaves at 9:15 am."),
        ("1", "Forget 9:15 am, it's 10:40 am now."),
    ]
    turns = [Turn(text, session) for session, text in between]
    assert chains(turns, [0, 2], _recurring("brighton", "harlow", "lodge")) == {}


def test_an_attribute_in_other_words_is_known_by_the_names_said_with_it() -> None:
    texts = [
        ("1", "For the Lisbon flat, the cleaner is Rosa."),
        ("1", "For the Porto flat, the housekeeper is Rosa."),
        ("1", "For the Porto flat, the plumber is Tiago."),
        ("1", "For the Lisbon flat, the plumber is Bruno."),
        ("2", "For the Faro flat, the cleaner is Ines."),
        ("2", "Lisbon flat update: the housekeeper is now Ines."),
    ]
    recurring = _recurring("lisbon", "porto", "faro", "rosa", "ines")
    turns = [Turn(text, session) for session, text in texts]
    for turn in turns:
        turn.statement = read_statement(turn.text)
    roles = word_roles(turns, {}, recurring)
    profiles = value_profiles(turns, roles.attribute, recurring)
    assert profiles.likeness(frozenset({"cleaner"}), frozenset({"housekeeper"})) > 0.9
    assert profiles.likeness(frozenset({"plumber"}), frozenset({"housekeeper"})) == 0.0
    # the Lisbon cleaner is replaced by the housekeeper said in other words; the Lisbon plumber is not
    assert _chains(texts, recurring) == {0: 5}
    assert chains(turns, list(range(len(turns))), recurring, same_values_at=0) == {}  # off: no shared words


def test_names_in_other_words_replace_each_other_only_where_said_as_values() -> None:
    # the same flats as above, but no name stands where a value stands ("the cleaner Rosa came by"): a mention,
    # as chat between people has them ("Thanks, Melanie!"), is no value set for an attribute
    texts = [
        ("1", "For the Lisbon flat, the cleaner Rosa came by."),
        ("1", "For the Porto flat, the housekeeper Rosa came by."),
        ("1", "For the Porto flat, the plumber Tiago came by."),
        ("1", "For the Lisbon flat, the plumber Bruno came by."),
        ("2", "For the Faro flat, the cleaner Ines came by."),
        ("2", "Lisbon flat update: the housekeeper Ines came by."),
    ]
    assert _chains(texts, _recurring("lisbon", "porto", "faro")) == {}
