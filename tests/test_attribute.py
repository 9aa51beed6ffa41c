"""The asked attribute (issue 34): the goal words of a question (index/attribute.py) and the refine stage that
orders a search's best candidates again by what the question asks of the goal (engines/refine.py,
attribute_first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import open_memory

from cuemem.config import Settings
from cuemem.engines.refine import SAID_VECTORS, attribute_first, said_vectors
from cuemem.errors import CuememError
from cuemem.index.attribute import asked_attribute, goal_words
from cuemem.types import Namespace

QUESTION = "When does the florist come for the Rivera wedding?"


def test_the_goal_words_are_the_question_words_most_best_candidates_say() -> None:
    best = [
        "Rivera wedding: the caterer is Bloom Kitchen.",
        "The Lopez gala florist comes on Thursday.",
        "Rivera wedding music is a string quartet.",
    ]
    goal = goal_words(QUESTION, best)
    assert goal == {"rivera", "wedding"}  # "florist" is said by one of the three: it is what is asked
    assert asked_attribute(QUESTION, goal) == "When does the florist come for the"
    assert goal_words(QUESTION, best, share=3) == set()


def test_no_attribute_is_asked_without_goal_words_or_with_nothing_else() -> None:
    assert asked_attribute(QUESTION, set()) == ""
    assert asked_attribute("The Rivera wedding?", {"rivera", "wedding"}) == ""
    assert asked_attribute("Ünïcödé café, Rivera's wedding?", {"rivera", "wedding"}) == "Ünïcödé café"


def test_a_question_that_keeps_only_general_words_asks_no_attribute() -> None:
    """What is left without the goal words must say what is asked: "how much is the", "where did I get my" say
    nothing (spaCy's general stop words), while one attribute word ("which manager is it") is enough."""
    assert asked_attribute("How much is the hotel on Day 1 in Porto?", {"hotel", "day", "1", "porto"}) == ""
    assert asked_attribute("Where did I get my guitar serviced?", {"guitar", "serviced"}) == ""
    assert (
        asked_attribute("For project Aurora, which manager is it?", {"project", "aurora"}) == "For which manager is it"
    )
    assert asked_attribute(QUESTION, {"rivera", "wedding"}) == "When does the florist come for the"


def test_the_general_stop_words_are_spacys() -> None:
    from spacy.lang.en.stop_words import STOP_WORDS

    from cuemem.index.text import GENERAL_STOPWORDS, STOPWORDS

    assert {w for w in STOP_WORDS if w.isalpha() and w.isascii()} - STOPWORDS == GENERAL_STOPWORDS - STOPWORDS
    assert STOPWORDS < GENERAL_STOPWORDS and {"much", "get", "many"} <= GENERAL_STOPWORDS


WEDDING = [
    {"id": "r1", "speaker": "Ana", "text": "Rivera wedding: the Rivera wedding caterer is Bloom Kitchen."},
    {"id": "r3", "speaker": "Ana", "text": "Rivera wedding florist comes Friday morning."},
    {"id": "r2", "speaker": "Ana", "text": "Rivera wedding music is a string quartet."},
    {"id": "r6", "speaker": "Ana", "text": "Lopez gala florist comes Thursday evening."},
    {"id": "r4", "speaker": "Ana", "text": "Rivera wedding photographer is Lena Park."},
    {"id": "r5", "speaker": "Ana", "text": "Rivera wedding cake is lemon."},
]


def _reordered(tmp_path: Path, query: str, weight: float) -> tuple[list[str], Any]:
    """attribute_first over a first ranking in WEDDING's order (the goal-heavy caterer turn first)."""
    with open_memory(tmp_path / f"m{weight}.db", "hybrid", settings=Settings(attribute_weight=weight)) as memory:
        memory.add(WEDDING, user_id="u", session_id="a")
        ns = memory.store.namespace_id(Namespace("u"))
        ctx = memory._indexer.context(ns, Namespace("u"))
        order = [item for item, _ in memory.store.items_in_order(ns, "turn")]
        first = [(item, 1.0 - 0.1 * rank) for rank, item in enumerate(order)]
        ranked, asked = attribute_first(ctx, query, first)
        items = memory.store.get_items(ns, [item for item, _ in ranked])
        assert sorted(item for item, _ in ranked) == sorted(order)  # the same candidates, none lost or added
        return [items[item].turn_ids[0] for item, _ in ranked], asked


def test_the_asked_attribute_of_the_goal_comes_first(tmp_path: Path) -> None:
    ids, asked = _reordered(tmp_path, QUESTION, weight=2.0)
    assert asked == {"goal_words": ["rivera", "wedding"], "attribute": "When does the florist come for the"}
    assert ids[0] == "r3"  # the florist of the Rivera wedding, from second place
    plain, _ = _reordered(tmp_path, QUESTION, weight=0.0)
    assert plain[0] == "r1"  # at weight 0 the ranking is the first one


def test_the_goals_turns_below_the_head_join_it_and_look_alikes_do_not(tmp_path: Path) -> None:
    """`attribute_reach`: a turn of the goal ranked below the reordered head (it says the attribute, little of the
    goal) joins the head when its indexed words hold every goal word; the look-alike goal's florist does not."""
    first_order = ["r1", "r2", "r6", "r4", "r3", "r5"]  # the Rivera florist fifth, under the Lopez gala's

    def ranked(reach: int) -> list[str]:
        settings = Settings(attribute_weight=2.0, attribute_depth=2, attribute_reach=reach)
        with open_memory(tmp_path / f"reach{reach}.db", "hybrid", settings=settings) as memory:
            memory.add(WEDDING, user_id="u", session_id="a")
            ns = memory.store.namespace_id(Namespace("u"))
            ctx = memory._indexer.context(ns, Namespace("u"))
            ids = memory.store.item_ids(ns, "turn", first_order)
            first = [(ids[turn], 1.0 - 0.1 * rank) for rank, turn in enumerate(first_order)]
            out, _ = attribute_first(ctx, QUESTION, first)
            assert sorted(i for i, _ in out) == sorted(ids.values())  # the same candidates, none lost or added
            turn_of = {item: turn for turn, item in ids.items()}
            return [turn_of[item] for item, _ in out]

    below = ranked(0)
    assert below[2:] == ["r6", "r4", "r3", "r5"]  # without reach, below the head nothing moves
    joined = ranked(6)
    assert joined.index("r3") < joined.index("r6") and joined[-1] == "r6"  # the goal's turns joined, the gala's not


def test_said_vectors_are_embedded_once_and_forgotten_with_a_delete(tmp_path: Path) -> None:
    with open_memory(tmp_path / "v.db", "hybrid") as memory:
        memory.add(WEDDING, user_id="u", session_id="a")
        ns = memory.store.namespace_id(Namespace("u"))
        cache = memory._indexer.indexes
        memory.search(QUESTION, user_id="u", k=6)
        held = cache.view(ns, SAID_VECTORS, memory.store.epoch(ns))
        assert isinstance(held, dict) and len(held) == len(WEDDING)
        embedded: list[str] = []
        ctx = memory._indexer.context(ns, Namespace("u"))
        embed = ctx.embed

        def counted(texts: Any, **kwargs: Any) -> Any:
            embedded.extend(texts)
            return embed(texts, **kwargs)

        ctx.embed = counted  # type: ignore[method-assign]
        assert said_vectors(ctx, {i: "unused" for i in held}).keys() == held.keys()
        assert embedded == []  # kept: a second search embeds nothing again
        memory.delete("r3", user_id="u")
        assert cache.latest_view(ns, SAID_VECTORS) is None  # gone from memory with the delete, not merely stale
        memory.search(QUESTION, user_id="u", k=6)
        again = cache.view(ns, SAID_VECTORS, memory.store.epoch(ns))
        assert isinstance(again, dict) and len(again) == len(WEDDING) - 1 and set(again) < set(held)


def test_a_question_without_goal_words_keeps_the_ranking(tmp_path: Path) -> None:
    ids, asked = _reordered(tmp_path, "Which florist did we book?", weight=2.0)
    assert asked is None
    assert ids == [turn["id"] for turn in WEDDING]


def test_search_says_what_it_took_as_the_goal_and_the_attribute(tmp_path: Path) -> None:
    with open_memory(tmp_path / "s.db", "stitch") as memory:
        memory.add(WEDDING, user_id="u", session_id="a")
        hits = memory.search(QUESTION, user_id="u", k=6).hits
        assert hits[0].turn_ids == ["r3"]
        assert {"rivera", "wedding"} <= set(hits[0].detail["attribute"]["goal_words"])
    with open_memory(tmp_path / "off.db", "stitch", settings=Settings(attribute_weight=0)) as memory:
        memory.add(WEDDING, user_id="u", session_id="a")
        assert "attribute" not in memory.search(QUESTION, user_id="u", k=6).hits[0].detail


@pytest.mark.parametrize("bad", [{"attribute_weight": -1.0}, {"attribute_depth": 0}, {"attribute_reach": -1}])
def test_settings_refuse_a_negative_weight_or_an_empty_depth(bad: dict[str, float]) -> None:
    with pytest.raises(CuememError):
        Settings(**bad)  # type: ignore[arg-type]


def test_a_delete_while_the_words_are_embedded_leaves_no_vector_of_the_deleted_turn(tmp_path: Path) -> None:
    """The vectors are remembered in the store after the model ran, outside any lock: a delete that came meanwhile
    must not find its turn's vector written back after it purged the cache."""
    from cuemem.store.base import text_hash

    with open_memory(tmp_path / "d.db", "hybrid") as memory:
        memory.add(WEDDING, user_id="u", session_id="a")
        store = memory.store
        ns = store.namespace_id(Namespace("u"))
        ctx = memory._indexer.context(ns, Namespace("u"))
        order = [item for item, _ in store.items_in_order(ns, "turn")]
        texts = {item: found.text for item, found in store.get_items(ns, order).items()}
        deleted = next(text for text in texts.values() if text.startswith("Rivera wedding florist"))
        embed = ctx.embed

        def deleting_first(batch: Any, **kwargs: Any) -> Any:
            memory.delete("r3", user_id="u")  # the delete lands while the model runs
            return embed(batch, **kwargs)

        ctx.embed = deleting_first  # type: ignore[method-assign]
        said_vectors(ctx, texts)
        model = ctx.embedder.name
        assert store.cached_embeddings(ns, model, [text_hash(deleted)]) == {}
        assert memory._indexer.indexes.latest_view(ns, SAID_VECTORS) is None  # not kept under the old epoch either
        ctx.embed = embed  # type: ignore[method-assign]
        kept = {item: text for item, text in texts.items() if text != deleted}
        said_vectors(ctx, kept)
        assert len(store.cached_embeddings(ns, model, [text_hash(t) for t in kept.values()])) == len(kept)
