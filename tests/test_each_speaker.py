"""Questions over several speakers (issue 34 item 4): the speakers a question names and the question without the
others' names (index/names.py), and the refine stage that gathers what each one said (engines/refine.py,
each_speaker)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import open_memory

from cuemem.config import Settings
from cuemem.engines.refine import each_speaker, turn_table
from cuemem.engines.structure import QueryStructure
from cuemem.errors import CuememError
from cuemem.index.names import named_speakers, speaker_index, without_names
from cuemem.types import Namespace


def test_the_question_without_other_names_keeps_everything_else() -> None:
    assert without_names("What do Jon and Gina both like?", {"Gina"}) == "What do Jon and both like?"
    assert without_names("Is Gina's studio near Jon's?", {"gina"}) == "Is studio near Jon's?"
    assert without_names("Did Mary Ann Lee meet Bob?", {"Mary Ann Lee"}) == "Did meet Bob?"
    assert without_names("¿Qué hizo José con Ana?", {"José"}) == "¿Qué hizo con Ana?"  # accents folded to match
    assert without_names("Nothing to take out.", set()) == "Nothing to take out."
    assert without_names("Jon", {"jon"}) == ""


def test_every_named_speaker_is_found_with_its_forms() -> None:
    people = speaker_index(["Melanie", "Caroline"])
    named = dict(named_speakers("What do Caroline and Melanie both paint?", people))
    assert set(named) == {"Melanie", "Caroline"}
    assert named_speakers("What does Caroline paint?", people) == [("Caroline", {"Caroline"})]
    assert named_speakers("What do they paint?", people) == []
    assert named_speakers("What does Caroline paint?", speaker_index(["user", "assistant"])) == []


HOBBIES = [
    {"id": "h1", "speaker": "Ana", "text": "The weather was awful all week."},
    {"id": "h2", "speaker": "Ana", "text": "My Sunday hobby is collecting vintage stamps at the flea market."},
    {"id": "h3", "speaker": "Ben", "text": "Traffic on the bridge was terrible again."},
    {"id": "h4", "speaker": "Ana", "text": "My sister visited us on Friday."},
    {"id": "h5", "speaker": "Ben", "text": "Lately my hobby is restoring old radios in the garage."},
]
QUESTION = "What hobbies do Ana and Ben both have?"


@pytest.mark.parametrize("weight", [1.0, 3.0])
def test_each_speaker_gathers_what_each_one_said(tmp_path: Path, weight: float) -> None:
    with open_memory(tmp_path / "e.db", "hybrid", settings=Settings(each_speaker_weight=weight)) as memory:
        memory.add(HOBBIES, user_id="u", session_id="a")
        ns = memory.store.namespace_id(Namespace("u"))
        ctx = memory._indexer.context(ns, Namespace("u"))
        table = turn_table(ctx, "turn")
        order = [item for item, _ in memory.store.items_in_order(ns, "turn")]
        turn_of = {item: found.turn_ids[0] for item, found in memory.store.get_items(ns, order).items()}
        by_turn = {turn: item for item, turn in turn_of.items()}
        # a first ranking that puts Ben's hobby last; each second round ranks the hobby turns first
        first = [(by_turn[t], 1.0 - 0.1 * r) for r, t in enumerate(["h2", "h1", "h4", "h3", "h5"])]
        asked: list[str] = []

        def rank(query: str, vector: np.ndarray) -> list[tuple[int, float]]:
            asked.append(query)
            return [(by_turn[t], 1.0) for t in ["h5", "h2", "h3", "h4", "h1"]]

        ranked, said = each_speaker(ctx, table, QueryStructure.read(QUESTION, table), QUESTION, first, rank)
        assert said == {"Ana": "What hobbies do Ana and both have?", "Ben": "What hobbies do and Ben both have?"}
        assert sorted(asked) == sorted(said.values())
        ids = [turn_of[item] for item, _ in ranked]
        assert sorted(ids) == sorted(t["id"] for t in HOBBIES)  # the same candidates, none lost or added
        # Ben's hobby climbs from last, above what else he said: his own round ranks it first
        assert ids.index("h5") < min(4, ids.index("h3"))
        if weight >= 3:
            assert ids[:2] == ["h2", "h5"]
        # one speaker named, or none: the ranking is kept and no second round runs
        asked.clear()
        for question in ("What hobby does Ben have?", "What hobbies do they have?"):
            structure = QueryStructure.read(question, table)
            assert each_speaker(ctx, table, structure, question, first, rank) == (first, {})
        assert asked == []


def test_search_says_which_question_each_speaker_was_asked(tmp_path: Path) -> None:
    with open_memory(tmp_path / "s.db", "stitch") as memory:
        memory.add(HOBBIES, user_id="u", session_id="a")
        hits = memory.search(QUESTION, user_id="u", k=5).hits
        assert hits[0].detail["speakers"] == {
            "Ana": "What hobbies do Ana and both have?",
            "Ben": "What hobbies do and Ben both have?",
        }
        assert "speakers" not in memory.search("What hobby does Ben have?", user_id="u", k=5).hits[0].detail
    with open_memory(tmp_path / "off.db", "stitch", settings=Settings(each_speaker_weight=0)) as memory:
        memory.add(HOBBIES, user_id="u", session_id="a")
        assert "speakers" not in memory.search(QUESTION, user_id="u", k=5).hits[0].detail


def test_settings_refuse_a_negative_each_speaker_weight() -> None:
    with pytest.raises(CuememError):
        Settings(each_speaker_weight=-0.5)
