"""Namespaces are hard partitions: under random interleavings of adds, deletes and searches, for every engine of
the registry, a search in one namespace only ever returns live turns of that namespace, and its text only ever
comes from them (docs/design.md promise 2)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from conftest import ENGINES, open_memory
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cuemem import UnknownNamespaceError

# "it" and "that" refer back: engines that resolve references (stitch) copy earlier turns' words into later ones.
WORDS = ["hotel", "price", "day", "booking", "dinner", "cat", "flight", "lisbon", "porto", "sunglasses", "it", "that"]
NAMESPACES = [
    ("alice", None, None),
    ("bob", None, None),
    ("alice", "agent1", None),
    ("alice", "agent1", "r1"),
]

ns_index = st.integers(min_value=0, max_value=len(NAMESPACES) - 1)
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), ns_index, text, st.sampled_from(["s1", "s2"])),
        st.tuples(st.just("delete"), ns_index, st.integers(min_value=0, max_value=50)),
        st.tuples(st.just("delete_session"), ns_index, st.sampled_from(["s1", "s2"])),
        # None: the memory's own engine (the one that indexed every add); or any other, which indexes on search.
        st.tuples(st.just("search"), ns_index, text, st.one_of(st.none(), st.sampled_from(ENGINES))),
        st.tuples(st.just("reindex"), ns_index),
    ),
    min_size=5,
    max_size=40,
)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=ops)
# A reply that refers back ("it") to a turn that is then deleted: a resolved reference must not keep its text.
@example(
    program=[
        ("add", 0, "hotel price lisbon", "s1"),
        ("add", 0, "hotel price it", "s1"),
        ("add", 1, "hotel", "s1"),
        ("delete", 0, 0),
        ("search", 0, "hotel booking", None),
        ("search", 1, "hotel", None),
    ]
)
def test_namespace_isolation_under_random_interleavings(engine, program):
    with tempfile.TemporaryDirectory() as tmp, open_memory(Path(tmp) / "iso.db", engine) as memory:
        live: dict[int, dict[str, str]] = {i: {} for i in range(len(NAMESPACES))}  # turn id -> session
        counter = 0
        for op in program:
            user, agent, run = NAMESPACES[op[1]]
            who = {"user_id": user, "agent_id": agent, "run_id": run}
            if op[0] == "add":
                counter += 1
                tid = f"t{counter}"  # ids unique across namespaces: a leak would be visible
                memory.add({"id": tid, "text": f"{op[2]} marker{tid}x"}, session_id=op[3], **who)
                live[op[1]][tid] = op[3]
            elif op[0] == "delete" and live[op[1]]:
                tid = sorted(live[op[1]])[op[2] % len(live[op[1]])]
                memory.delete(tid, **who)
                del live[op[1]][tid]
            elif op[0] == "delete_session" and live[op[1]]:
                memory.delete_session(op[2], **who)
                live[op[1]] = {t: s for t, s in live[op[1]].items() if s != op[2]}
            elif op[0] == "search":
                try:
                    result = memory.search(op[2], k=100, engine=op[3], budget_tokens=100_000, **who)
                except UnknownNamespaceError:
                    assert not live[op[1]]
                    continue
                assert set(result.turn_ids) <= set(live[op[1]]), (op, result.turn_ids, live[op[1]])
                for hit in result.hits:  # the text itself must come from a live turn of this namespace
                    markers = set(re.findall(r"marker(t\d+)x", hit.text))
                    assert hit.turn_ids and markers and markers <= set(live[op[1]]), (hit, live[op[1]])
            elif op[0] == "reindex" and live[op[1]]:
                memory.reindex(**who)
        assert memory.store.integrity_check() == "ok"
