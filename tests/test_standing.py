"""Standing facts in every engine (issue 34 item 5): the cues of a standing fact (index/standing.py) and the refine
stage that brings the turns stating one back to a later message (engines/standing.py, standing_first)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import open_memory

from cuemem.config import Settings
from cuemem.engines.profile import RuleTableError, parse_rules
from cuemem.engines.refine import turn_table
from cuemem.errors import CuememError
from cuemem.index.standing import StandingCueError, bears_on_self, parse_standing, shipped_standing
from cuemem.types import Namespace


def test_a_turn_states_a_standing_fact_only_about_its_speaker() -> None:
    cues = shipped_standing()
    assert cues.of_text("Hi! Honestly, I believe family dinners come before any work deadline.") == "value"
    assert cues.of_text("After learning to say no, I feel way less stressed.") == "cause"
    assert cues.of_text("I love it.") == ""  # too short to stand on its own
    assert cues.of_text("Do you believe family dinners come first?") == ""  # about the listener, and a question
    assert cues.of_text("The Thursday report from my manager was late again.") == ""


def test_standing_facts_bear_on_messages_not_on_questions() -> None:
    assert bears_on_self("I ended up volunteering for that project and now I'm overwhelmed.")
    assert not bears_on_self("What did Ana say about family dinners?")
    assert not bears_on_self("Where do I keep my passport?")
    assert bears_on_self("Where do I keep my passport?", gate="self")


def test_a_bad_standing_block_is_a_clear_error() -> None:
    with pytest.raises(StandingCueError):
        parse_standing({"types": {"mood": ["x"]}}, "t")
    with pytest.raises(StandingCueError):
        parse_standing({"types": {"value": ["("]}}, "t")
    with pytest.raises(RuleTableError):  # the profile rule table says the same in its own error
        parse_rules({"rules": [], "standing": {"types": {"value": "not a list"}}})
    with pytest.raises(CuememError):
        Settings(standing_weight=-1)
    with pytest.raises(CuememError):
        Settings(standing_floor=2)


DINNERS = [
    {"id": "f1", "speaker": "Ben", "text": "The Thursday report from my manager was late again."},
    {"id": "s1", "speaker": "Ana", "text": "Honestly, I believe family dinners come before any work deadline."},
    *[
        {
            "id": f"f{i}",
            "speaker": "Ben" if i % 2 else "Ana",
            "text": f"The {w} report for my manager is due late Thursday night.",
        }
        for i, w in enumerate(["sales", "budget", "travel", "team", "office", "audit", "cloud", "hiring"], 2)
    ],
]
MESSAGE = "My manager wants me to stay late Thursday for the report, but Thursday is family dinners night."


@pytest.mark.parametrize("engine", ["hybrid", "stitch"])
def test_a_message_brings_back_the_standing_fact_it_bears_on(tmp_path: Path, engine: str) -> None:
    ranks = {}
    for weight in (0.0, 2.0):
        with open_memory(tmp_path / f"{weight}.db", engine, settings=Settings(standing_weight=weight)) as memory:
            memory.add(DINNERS, user_id="u", session_id="a")
            result = memory.search(MESSAGE, user_id="u", k=10)
            ranks[weight] = result.turn_ids.index("s1")
            if weight:
                assert result.hits[0].detail["standing"] == {"facts": 1, "types": {"value": 1}}
                question = memory.search("What is due Thursday for the manager?", user_id="u", k=3)
                assert "standing" not in question.hits[0].detail  # a question: the stage stays out
            else:
                assert "standing" not in result.hits[0].detail
    assert ranks[2.0] == 0 < ranks[0.0]  # the one statement of a standing fact, first once the stage joins


@pytest.mark.parametrize("engine", ["hybrid", "stitch"])  # every engine's turn items carry turn_fields
def test_the_pool_is_read_at_ingest_grows_with_adds_and_forgets_a_deleted_turn(tmp_path: Path, engine: str) -> None:
    with open_memory(tmp_path / "p.db", engine) as memory:
        memory.add(DINNERS, user_id="u", session_id="a")
        ns = memory.store.namespace_id(Namespace("u"))
        space = "turn" if engine == "hybrid" else "stitch:step"

        def pool() -> dict[str, str]:
            ctx = memory._indexer.context(ns, Namespace("u"))
            memory.search("warm up", user_id="u", k=1)  # the engine catches its index up
            table = turn_table(ctx, space)
            found = memory.store.get_items(ns, [table.ids[p] for p in table.standing])
            return {found[table.ids[p]].turn_ids[0]: kind for p, kind in table.standing.items()}

        assert pool() == {"s1": "value"}
        memory.add(
            [{"id": "s2", "speaker": "Ben", "text": "I'm trying to run a half marathon this spring."}], user_id="u"
        )
        assert pool() == {"s1": "value", "s2": "goal"}  # grown by the new turn
        memory.search(MESSAGE, user_id="u", k=3)  # the standing facts' vectors are kept for the next message
        kept = f"standing-vectors:{memory.embedder.name}"
        assert memory._indexer.indexes.latest_view(ns, kept) is not None
        memory.delete("s1", user_id="u")
        assert memory._indexer.indexes.latest_view(ns, kept) is None  # gone from memory with the delete
        assert pool() == {"s2": "goal"}
        assert "s1" not in memory.search(MESSAGE, user_id="u", k=10).turn_ids


def test_profile_fuses_its_own_records_not_the_stage(tmp_path: Path) -> None:
    with open_memory(tmp_path / "profile.db", "profile") as memory:
        memory.add(DINNERS, user_id="u", session_id="a")
        hits = memory.search(MESSAGE, user_id="u", k=5).hits
        assert all("standing" not in hit.detail for hit in hits)
        assert any(hit.detail.get("profile", {}).get("type") == "value" for hit in hits)
