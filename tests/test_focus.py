"""The goal in focus carried forward (index/focus.py; STITCH's contextual intent, issue 34 item 1): a turn that
names no goal is indexed under the goal it continues, a switch needs a recurring name, a quoted value brings its
turn along, and a deleted turn leaves nothing in what later turns inherited.

A known limit, chosen on dev: a goal named for the first time does not switch the focus until its name recurs
(`focus_recur`), so the turns right after its first mention still continue the goal before it."""

from __future__ import annotations

import pytest

from cuemem.engines.stitch.analysis import analyze_steps, calendar_date, load_spacy
from cuemem.index.focus import MAX_SAID, Focus, anchor_words

no_store = pytest.mark.sqlite_only("no store involved")


@no_store
def test_anchor_words_are_lower_case_with_ordinals_as_numbers():
    assert anchor_words("the Second floor of Maria's flat") == {"the", "2", "floor", "of", "maria", "flat"}


@no_store
def test_a_turn_without_a_goal_inherits_the_focus_of_its_session():
    focus = Focus()
    assert focus.step("s1", ["Kestrel Street flat"], "The Kestrel Street flat needs paint.") == []
    # named once so far, so not yet a goal: saying it again continues the turn that said it (a quoted name)
    assert focus.step("s1", ["Kestrel Street flat"], "Kestrel Street flat: the landlord agreed.") == [
        "The Kestrel Street flat needs paint."
    ]
    # "Kestrel" has now named something twice: a turn naming it is a goal's turn, a bare one continues it
    assert focus.step("s1", [], "The painter comes on Thursday.") == ["Kestrel Street flat"]
    assert focus.step("s1", [], "Paint it green, Kestrel Street flat, yes.") == []  # already names it
    assert focus.step("s2", [], "Hello again.") == []  # a new session starts with no goal in focus


@no_store
def test_with_sessions_the_focus_outlives_a_sessions_end_until_a_goal_is_named():
    """`focus_sessions` (off by default: LoCoMo dev lost two questions, docs/benchmarks/came.md): a new session
    that names no goal yet goes on with the last one."""
    focus = Focus()
    for _ in range(3):
        focus.step("s1", ["Kestrel Street flat"], "The Kestrel Street flat needs paint.", sessions=True)
    assert focus.step("s2", [], "And the painter? Thursday.", sessions=True) == ["Kestrel Street flat"]
    focus.step("s2", ["Alder lodge"], "The Alder lodge now.", sessions=True)
    focus.step("s2", ["Alder lodge"], "The Alder lodge sleeps six.", sessions=True)
    focus.step("s2", ["Alder lodge"], "The Alder lodge is fine.", sessions=True)
    assert focus.step("s3", [], "Their kitchen closes at nine.", sessions=True) == ["Alder lodge"]
    assert focus.step("s4", [], "Hello again.") == []  # without it, a session starts with no goal in focus


@no_store
def test_a_name_said_for_the_first_time_does_not_switch_the_focus():
    focus = Focus()
    for _ in range(2):
        focus.step("s", ["Orchard Lane garden"], "About the Orchard Lane garden.")
    # a value named once (a nursery) is not a goal: the turn stays under the garden
    assert focus.step("s", ["Greenway Nursery"], "Greenway Nursery has the hedges.") == ["Orchard Lane garden"]


@no_store
def test_quoting_an_earlier_value_continues_the_turn_that_said_it():
    focus = Focus()
    focus.step("s", [], "The caterer quoted 900 dollars for the buffet.", ["900 dollars"])
    continued = focus.step("s", [], "Forget 900 dollars, they now ask 1200 dollars.", ["900 dollars", "1200 dollars"])
    assert any("caterer quoted 900 dollars for the buffet" in c for c in continued)
    assert focus.step("s", [], "Forget it.", []) == []


@no_store
def test_quoted_values_are_bounded():
    focus = Focus()
    for i in range(MAX_SAID + 50):
        focus.step("s", [], f"item {i}", [f"{i} dollars"])
    assert len(focus.said) == MAX_SAID and "0 dollars" not in focus.said
    assert Focus.from_json(focus.to_json()) == focus


@no_store
def test_anchors_are_names_and_numbered_things_not_values():
    first, second, third = analyze_steps(
        [
            "Let's plan Room 12 of the Harbor Clinic.",
            "The checkup costs 90 dollars at 7:30 pm.",
            "For the second floor of the Harbor Clinic we want blue tiles.",
        ]
    )
    assert "Room 12" in first.anchors and any("Harbor Clinic" in a for a in first.anchors)
    assert second.anchors == [] and "7:30 pm" in second.values
    assert any("second floor" in a for a in third.anchors)


@no_store
def test_a_thing_of_a_name_anchors_as_the_names_thing():
    """ "the dental plan for Ana" names what "Ana's dental plan" names: the anchor keeps the owned noun, else every
    one of Ana's things would be one goal (the focus of "Ana" alone, a look-alike for each of them); so does "the
    book Caroline wrote"."""
    possessive, prepositional, of, numbered, two_names, clause = analyze_steps(
        [
            "I want to get Ana's dental plan settled today.",
            "Riverside Clinic is the clinic for the dental plan for Ana.",
            "The birthday party of Caroline was fun.",
            "Day 3 of the Lisbon trip: dinner at 8.",
            "Let's sort out project Falcon for Copperfield.",
            "I loved the book Caroline wrote.",
        ]
    )
    assert anchor_words(possessive.anchors[0]) == {"ana", "dental", "plan"}
    assert {"ana", "dental", "plan"} in [anchor_words(a) for a in prepositional.anchors]
    assert [anchor_words(a) for a in of.anchors] == [{"caroline", "birthday", "party"}]
    assert sorted(numbered.anchors) == ["Day 3", "Lisbon trip"]  # the numbered day names itself
    assert sorted(two_names.anchors) == ["Copperfield", "project Falcon"]  # a named thing owns nothing more
    assert [anchor_words(a) for a in clause.anchors] == [{"caroline", "book"}]  # the thing she is the subject of


@no_store
def test_a_name_said_as_a_value_is_quoted_not_an_anchor():
    """A name given as the value of something ("Paula as the person wrapping it", "the venue will be Harbour Club",
    "Marco it is") is quoted like an amount and switches no goal; a date is a value ("April 15" is no numbered
    thing); a clause right after its noun phrase says whose it is ("the game night Tomas is hosting", however the
    parser hung the clause); a name that owns its thing already owns nothing more ("the delivery for Dario's
    watch")."""
    chosen, copula, picked, thing, contact, dated = analyze_steps(
        [
            "Book it: Paula as the person wrapping it.",
            "There, the venue will be Harbour Club.",
            "Marco it is, for the wrapper for the coffee grinder for Rita.",
            "This is Caroline's painting.",
            "Going back to the game night Tomas is hosting: the venue moved to Corner Loft.",
            "April 15, not April 12, for the delivery for Dario's watch.",
        ]
    )
    assert chosen.anchors == [] and "Paula" in chosen.values
    assert copula.anchors == [] and "Harbour Club" in copula.values
    assert [anchor_words(a) for a in picked.anchors] == [{"rita", "coffee", "grinder"}]  # Marco is no goal
    assert [anchor_words(a) for a in thing.anchors] == [{"caroline", "painting"}]  # a thing, not a value
    assert {"tomas", "game", "night"} in [anchor_words(a) for a in contact.anchors]
    assert [anchor_words(a) for a in dated.anchors] == [{"dario", "watch"}]
    assert {"April 15", "April 12"} <= set(dated.values)
    soon, deadline, morning, shelf, ours, newer = analyze_steps(
        [
            "I will email Tomas as soon as possible.",
            "The deadline is April 15.",
            "In the morning Tomas booked the hotel.",
            "The book on the shelf Caroline wrote is great.",
            "The budget for our Lisbon trip is 900 euros.",
            "The venue will be the new Harbour Club.",
        ]
    )
    assert soon.anchors == ["Tomas"]  # "as soon as": no value
    assert deadline.anchors == [] and "April" not in deadline.values  # a date, whole
    assert morning.anchors == ["Tomas"]  # the clause has its object: the morning is not Tomas's
    assert [anchor_words(a) for a in shelf.anchors] == [{"caroline", "book"}]  # the parser's relative clause
    assert [anchor_words(a) for a in ours.anchors] == [{"lisbon", "trip", "budget"}]  # "our" owns nothing
    assert not any("harbour" in anchor_words(a) for a in newer.anchors) and "Harbour Club" in newer.values
    moved, made, guide = analyze_steps(
        [
            "Going back to Oslo day 2: the caterer moved to Fjord Kitchen.",
            "Update for the Birch Hall gala: make the host Ingrid.",
            "Back to Bergen day 3: the guide moved to Lars.",
        ]
    )
    # where the revision chains' reader puts a value (statements.said_as_value), not the goal
    assert "Fjord Kitchen" in moved.values and [anchor_words(a) for a in moved.anchors] == [{"oslo"}, {"day", "2"}]
    assert "Ingrid" in made.values and [anchor_words(a) for a in made.anchors] == [{"birch", "hall", "gala"}]
    assert "Lars" in guide.values and [anchor_words(a) for a in guide.anchors] == [{"bergen"}, {"day", "3"}]


@no_store
def test_a_noun_phrase_the_parser_left_out_of_its_chunks_still_anchors():
    """A phrase whose head hangs by a relation the parser's noun chunks do not take ("Up next: Ingrid's retirement
    party", the head the sentence's root) is read all the same; a name after "for" owns the noun phrase right
    before it even when the parser hung it on the verb ("moving on to the scarf for Oskar"); a name right after a
    noun phrase, subject of a clause, owns that phrase ("the picnic Lotte is organising")."""
    listed, hung, clause = analyze_steps(
        [
            "Up next: Ingrid's retirement party.",
            "Okay, moving on to the scarf for Oskar.",
            "One more thing about the picnic Lotte is organising, the start is 2 pm now.",
        ]
    )
    assert [anchor_words(a) for a in listed.anchors] == [{"ingrid", "retirement", "party"}]
    assert [anchor_words(a) for a in hung.anchors] == [{"oskar", "scarf"}]
    assert {"lotte", "picnic"} in [anchor_words(a) for a in clause.anchors]


@no_store
def test_replies_options_and_replacements_are_values_not_goals():
    """A name is a value, never a goal in focus, when it is a reply standing alone ("And the caterer? Blue Fig."),
    an option given with its price, the value replaced or the one replacing it ("drop Nadia; we'll ask Pavel"),
    and, in a turn that replaces one, any other name standing alone ("Nadia fell through, so Pavel instead"). The
    values named as the old ones are `replaced`. A greeting's name is no reply ("Hey Nadia!"), and an ordinal that
    picks one of several options names no thing ("the second option")."""
    reply, options, dropped, instead, greeting, picked, day = analyze_steps(
        [
            "And the caterer? Blue Fig.",
            "We could book Casa Lumen at 95 euros or Hotel Brisa at 120 euros.",
            "Actually, drop Nadia; we'll ask Pavel.",
            "Nadia fell through, so Pavel instead.",
            "Hey Nadia! Long time no talk.",
            "I prefer the second option, go with that.",
            "Let's plan the second day of the trip.",
        ]
    )
    assert reply.anchors == [] and reply.values == ["Blue Fig"]
    assert options.anchors == [] and {"Casa Lumen", "Hotel Brisa"} <= set(options.values)
    assert dropped.anchors == [] and {"Nadia", "Pavel"} <= set(dropped.values) and dropped.replaced == ["Nadia"]
    assert instead.anchors == [] and {"Nadia", "Pavel"} <= set(instead.values) and instead.replaced == ["Nadia"]
    assert greeting.anchors == ["Nadia"] and greeting.values == []
    assert picked.anchors == []
    assert "second day" in day.anchors
    moved, stated = analyze_steps(["Forget 6:30 pm, it's 7:15 pm now.", "The table is booked for 7:15 pm."])
    assert moved.replaced == ["6:30 pm"] and stated.replaced == []
    # what a name merely stands beside is no cue: a price needs a currency, a replaced name its cue right before it
    lamp, dinner, card, itch, heading = analyze_steps(
        [
            "The lamp for Wanda costs 60 euros.",
            "Dinner with Ines at 7 pm.",
            "We got a card from Maria for the party.",
            "That should scratch that Sandor itch, and Mira agrees.",
            "Here are a few ideas.\n\n**Harbour Festival**: a weekend of music.",
        ]
    )
    assert [anchor_words(a) for a in lamp.anchors] == [{"wanda", "lamp"}]
    assert dinner.anchors == ["Ines"] and card.anchors == ["Maria"]
    assert itch.replaced == [] and "Mira" not in itch.values
    assert "Harbour Festival" not in heading.values


@no_store
def test_a_turn_naming_the_value_it_replaces_continues_that_values_goal():
    """`Goals` with `replaced`: a turn that names no goal and names the value it replaces belongs to the goal that
    value was said for, even in a later session; a value it merely states again (said for another goal as well)
    does not move it."""
    from cuemem.engines.hop import Goals

    turns = [
        ("S1", "The scarf for Oskar: the person wrapping it is Nadia."),
        ("S1", "The scarf for Oskar, the price is 40 euros."),
        ("S1", "The lamp for Wanda costs 60 euros."),
        ("S1", "The lamp for Wanda, the shop is Nordlicht."),
        ("S2", "Nadia fell through, so Pavel instead."),
        ("S3", "The lamp for Wanda, the wrapper is Bo."),
        ("S3", "Pavel it is, and 40 euros."),
    ]
    goals = Goals()
    labels = []
    for (session, text), a in zip(turns, analyze_steps([t for _, t in turns]), strict=True):
        labels.append(
            goals.step(session, a.anchors, text, a.values, recur=2, whole=False, quotes=True, replaced=a.replaced)
        )
    assert {"wanda", "lamp"} <= {w for a in labels[2] for w in anchor_words(a)}  # named, with its price
    assert {"oskar", "scarf"} <= {w for a in labels[4] for w in anchor_words(a)}
    assert {"wanda", "lamp"} <= {w for a in labels[6] for w in anchor_words(a)}  # no value named as replaced


HOUSE = [
    ("Ines", "Okay, let's talk about the Birchwood cabin for the retreat."),
    ("Rui", "The Birchwood cabin sleeps ten people."),
    ("Ines", "Birchwood cabin it is, then."),
    ("Rui", "Check-in there is at four in the afternoon."),  # the cabin's check-in, never named
    ("Ines", "Now the Alder lodge for the second group."),
    ("Rui", "The Alder lodge sleeps six people."),
    ("Ines", "The Alder lodge is fine."),
    ("Rui", "Their kitchen closes at nine."),
]


def _turns(lines: list[tuple[str, str]]) -> list[dict]:
    return [
        {"id": f"t{i}", "speaker": s, "text": t, "session_id": "S1", "timestamp": "2024-03-02"}
        for i, (s, t) in enumerate(lines)
    ]


def _steps(memory, *turn_ids: str) -> list:
    """The stitch steps of these turns of user "u", in the order asked."""
    ns = memory.store.namespace_id(memory.namespace("u"))
    ids = memory.store.item_ids(ns, "stitch:step", list(turn_ids))
    items = memory.store.get_items(ns, list(ids.values()))
    return [items[ids[t]] for t in turn_ids]


def test_a_turn_that_leaves_its_goal_implicit_is_found_under_the_goal(make_memory):
    memory = make_memory("stitch")
    memory.add(_turns(HOUSE), user_id="u")
    item, kitchen = _steps(memory, "t3", "t7")
    assert any("Birchwood" in a for a in item.meta["resolved"])  # indexed under the cabin it continues
    assert any("Alder" in a for a in kitchen.meta["resolved"]) and not any(
        "Birchwood" in a for a in kitchen.meta["resolved"]
    )
    hits = memory.search("What time is check-in at the Birchwood cabin?", user_id="u", k=3).hits
    assert "t3" in [t for h in hits for t in h.turn_ids]
    assert memory.get("t3", user_id="u").text == HOUSE[3][1]  # the log keeps the raw turn


def test_deleting_the_goals_turns_leaves_no_trace_in_what_later_turns_inherited(make_memory):
    memory = make_memory("stitch")
    memory.add(_turns(HOUSE), user_id="u")
    for gone in ("t0", "t1", "t2"):
        memory.delete(gone, user_id="u")
    ns = memory.store.namespace_id(memory.namespace("u"))
    steps = memory.store.get_items(ns, [i for i, _, _ in memory.store.labels_in_space(ns, "stitch:step")])
    assert all("Birchwood" not in " ".join(s.meta["resolved"]) for s in steps.values())
    assert all("Birchwood" not in s.text for s in steps.values())


def test_what_a_turn_inherited_from_a_deleted_turn_leaves_no_embedding_behind(make_memory):
    """A step embedded with what it continues depends on the turns that came from: deleting them drops the step's
    item and vector, and its embedding leaves the cache (only survivors' own texts may stay)."""
    from cuemem.engines.baselines import turn_document
    from cuemem.engines.stitch import canonical_summary
    from cuemem.store.sqlite import text_hash

    memory = make_memory("stitch")
    memory.add(_turns(HOUSE), user_id="u")
    ns = memory.store.namespace_id(memory.namespace("u"))
    model = memory.embedder.name
    steps = memory.store.get_items(ns, [i for i, _, _ in memory.store.labels_in_space(ns, "stitch:step")])
    inheriting = {s.key: s.meta["resolved"] for s in steps.values() if "Birchwood" in " ".join(s.meta["resolved"])}
    assert inheriting
    hashes = [
        text_hash(canonical_summary(turn_document(memory.get(k, user_id="u"), memory.settings.turn_template), r))
        for k, r in inheriting.items()
    ]
    assert memory.store.cached_embeddings(ns, model, hashes)  # embedded with the cabin's anchors
    for gone in ("t0", "t1", "t2"):
        memory.delete(gone, user_id="u")
    assert not memory.store.cached_embeddings(ns, model, hashes)


def test_a_quoted_turn_deleted_takes_the_quote_out_of_the_cache(make_memory):
    """A turn that quotes an earlier value is embedded with the turn that said it; deleting that turn must take
    the embedding of the quote out of the cache at once (it holds the deleted words)."""
    from cuemem.engines.baselines import turn_document
    from cuemem.engines.stitch import canonical_summary
    from cuemem.store.sqlite import text_hash

    lines = [
        ("Ana", "The caterer Brightside quoted 900 dollars for the buffet, secret code 4471."),
        ("Ben", "Hm."),
        ("Ana", "Forget 900 dollars, they now ask 1200 dollars."),
    ]
    memory = make_memory("stitch")
    memory.add(_turns(lines), user_id="u")
    ns = memory.store.namespace_id(memory.namespace("u"))
    (step,) = _steps(memory, "t2")
    assert any("4471" in r for r in step.meta["resolved"])  # it continues the turn it quotes
    quote = text_hash(canonical_summary(turn_document(memory.get("t2", user_id="u")), step.meta["resolved"]))
    assert memory.store.cached_embeddings(ns, memory.embedder.name, [quote])
    memory.delete("t0", user_id="u")
    assert not memory.store.cached_embeddings(ns, memory.embedder.name, [quote])


def test_a_value_merely_said_again_quotes_no_earlier_turn(make_memory):
    """A step continues the turn that said a value only when it names that value as the one replaced ("Forget 900
    dollars"): an amount two things happen to cost ties the second to nothing."""
    lines = [
        ("Ana", "The caterer Brightside quoted 900 dollars for the buffet."),
        ("Ben", "The florist Petalworks wants 900 dollars for the arch."),
        ("Ana", "Forget 900 dollars, Petalworks now asks 700 dollars."),
    ]
    memory = make_memory("stitch")
    memory.add(_turns(lines), user_id="u")
    again, forget = _steps(memory, "t1", "t2")
    assert not any("buffet" in r for r in again.meta["resolved"])  # (the goal in focus it may inherit, not the turn)
    assert any("arch" in r for r in forget.meta["resolved"])  # the turn that said the value it replaces


def test_revisions_read_a_step_as_its_turn_said_it() -> None:
    from cuemem.engines.stitch.engine import canonical_summary, said_by_step
    from cuemem.store.base import Item

    resolved = ["Confirmed with them: 210 euros for the nightly rate.", "Day 3"]
    text = canonical_summary("Going back to day 2: the room rate moved to 190 euros.", resolved)
    item = Item(1, "t9", text, {"resolved": resolved}, ["t9"])
    assert said_by_step(item) == "Going back to day 2: the room rate moved to 190 euros."  # no quoted 210 euros


@no_store
def test_a_remembered_context_depends_on_its_own_turns_only_however_long_the_chain_of_quotes():
    """A value's remembered context holds the words of the turn that said it (and the anchors it inherited),
    never the quotes that turn continued: its provenance stays those few turns, however many turns quote the one
    before (it once grew with every quote, to thousands of turns read and written with each step)."""
    from cuemem.index.focus import MAX_FOCUS

    focus = Focus()
    for n in range(300):
        values = [f"{n} euros", f"{n + 1} euros"]
        focus.step("s1", [], f"Forget {n} euros, it is {n + 1} euros now.", values, turn=f"t{n}")
        assert focus.depends == ([f"t{n - 1}"] if n else [])  # the turn that said the quoted value, no older one
    assert max(len(v) for v in focus.said_by.values()) <= 1 + MAX_FOCUS
    assert focus.said_by["300 euros"] == ["t299"]


def test_a_participants_name_is_no_pivot_of_the_hop(make_memory):
    """People seldom say their own name, so a speaker's name may be said by a few turns only, as a pivot's value
    would be; the hop must not start from it (LoCoMo test: "When did Audrey adopt Pixie?" pulled in one session's
    turns while the hop read steps as said)."""
    import numpy as np

    from cuemem.engines.hop import HopSettings, hop_ranking, stating

    lines = [
        ("Ana", "I adopted a puppy called Pixie last week."),
        ("Ben", "Congrats Ana! How is Pixie doing?"),
        ("Ana", "She loves the park by the river."),
    ]
    memory = make_memory("stitch")
    memory.add(_turns(lines), user_id="u")
    memory.search("Pixie", user_id="u")  # indexed
    namespace = memory.namespace("u")
    ctx = memory._context(memory.store.namespace_id(namespace), namespace)
    engine = memory.engine
    space, hop = engine.space("step"), HopSettings.of(engine.config)
    assert stating(ctx, space, ["Ana"], hop)  # said by a few turns: it would be a pivot
    assert stating(ctx, space, ["Ana"], hop, frozenset({"ana"})) == {}
    table = engine.step_table(ctx, engine.state(ctx))
    first = [(i, 1.0 / (r + 1)) for r, i in enumerate(table.ids)]
    vector = np.ones(memory.embedder.dim, dtype=np.float32)
    assert hop_ranking(ctx, space, table.goals, first, ["Ana"], [], vector, hop) == (first, {})
    assert stating(ctx, space, ["Pixie"], hop, frozenset({"ana", "ben"}))  # a thing's name still is


@no_store
def test_a_places_numbered_day_tagged_as_a_date_is_no_calendar_date():
    """The tagger sometimes reads "Oslo day 2" as one DATE entity; only an entity whose names are months' or
    weekdays' is a calendar date (a value), so the place still names the goal."""
    from spacy.tokens import Doc, Span

    nlp = load_spacy()
    words = ["Back", "to", "Oslo", "day", "2", "on", "Monday", ",", "May", "3", "."]
    pos = ["ADV", "ADP", "PROPN", "NOUN", "NUM", "ADP", "PROPN", "PUNCT", "PROPN", "NUM", "PUNCT"]
    doc = Doc(nlp.vocab, words=words, pos=pos)
    doc.ents = [Span(doc, 2, 5, label="DATE"), Span(doc, 6, 10, label="DATE")]
    assert not calendar_date(doc, doc[2])
    assert calendar_date(doc, doc[8])
    holiday = Doc(
        nlp.vocab, words=["On", "Christmas", "Eve", "2022", "."], pos=["ADP", "PROPN", "PROPN", "NUM", "PUNCT"]
    )
    holiday.ents = [Span(holiday, 1, 4, label="DATE")]
    assert calendar_date(holiday, holiday[1])  # a holiday is a date
