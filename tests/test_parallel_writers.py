"""Writers of different namespaces run side by side on PostgreSQL (issue 36 item 2), across connections as across
processes (advisory locks are the database's); writers of one namespace are still serialised, a write not scoped
to one namespace excludes every other, and a nested write reaching another namespace takes its lock too.

PostgreSQL only (this suite is not in conftest.BOTH_STORES): SQLite has one writer at a time per file, which the
concurrency suite covers on both stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_postgres import pg  # noqa: F401  (the fixture)

from cuemem.store.postgres import PostgresStore
from cuemem.types import Namespace, Turn

WAIT = 0.6  # seconds a blocked writer is given to show it is blocked


def turn(turn_id: str) -> Turn:
    return Turn(id=turn_id, text=f"text of {turn_id}", speaker="user", session_id="s1")


@contextmanager
def writing(store: PostgresStore, ns: int | None) -> Iterator[threading.Event]:
    """A thread inside `store.transaction(ns)` (one turn appended when `ns` is a namespace) until the block ends."""
    inside, leave, errors = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with store.transaction(ns):
                if ns is not None:
                    store.append_turns(ns, [turn(f"held-{ns}")])
                inside.set()
                leave.wait(30)
        except Exception as exc:  # reported by the test
            errors.append(exc)
            inside.set()

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(10) and not errors, errors
    try:
        yield leave
    finally:
        leave.set()
        thread.join(30)
    assert not errors, errors


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`work` started in a thread; the dict gets its "result" or "error" and "seconds"."""
    out: dict[str, Any] = {}

    def run() -> None:
        start = time.perf_counter()
        try:
            out["result"] = work()
        except Exception as exc:
            out["error"] = exc
        out["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@pytest.fixture
def stores(pg: Callable[[str], str]) -> Iterator[tuple[PostgresStore, PostgresStore, int, int]]:  # noqa: F811
    """Two stores (two connection pools: what two server processes hold) on one database, and two namespaces."""
    dsn = pg("writers")
    with PostgresStore(dsn, timeout=5) as one, PostgresStore(dsn, timeout=5) as two:
        a = one.namespace_id(Namespace("alice"), create=True)
        b = one.namespace_id(Namespace("bob"), create=True)
        yield one, two, a, b


def test_writers_of_two_namespaces_do_not_wait_for_each_other(stores: Any):
    one, two, a, b = stores
    with writing(one, a):
        for store in (one, two):  # another thread of the same process, and another "process"
            start = time.perf_counter()
            store.append_turns(b, [turn(f"b-{id(store)}")])
            assert time.perf_counter() - start < WAIT, "a write to bob waited for alice's open write"
        # the writer's uncommitted turn is not visible yet; bob's are committed
        assert [t.id for t in one.iter_turns(a)] == []
        assert len(list(two.iter_turns(b))) == 2
    assert [t.id for t in two.iter_turns(a)] == [f"held-{a}"]


def test_writers_of_one_namespace_still_take_turns(stores: Any):
    one, two, a, _ = stores
    with writing(one, a) as leave:
        thread, out = in_thread(lambda: two.append_turns(a, [turn("second")]))
        thread.join(WAIT)
        assert thread.is_alive(), "a second writer of alice did not wait for the first"
        leave.set()
        thread.join(30)
    assert "error" not in out, out
    # log order is commit order within the namespace
    turns = list(one.iter_turns(a))
    assert [t.id for t in turns] == [f"held-{a}", "second"] and turns[0].seq < turns[1].seq  # type: ignore[operator]


def test_a_store_wide_write_excludes_every_namespace_writer(stores: Any):
    one, two, a, b = stores
    with writing(one, a) as leave:  # a namespace writer is in: the store-wide write waits for it
        wide, wide_out = in_thread(lambda: _store_wide(two))
        wide.join(WAIT)
        assert wide.is_alive(), "a store-wide write did not wait for a namespace writer"
        leave.set()
        wide.join(30)
    assert "error" not in wide_out, wide_out
    with writing(one, None):  # a store-wide writer is in: namespace writers wait for it
        thread, out = in_thread(lambda: two.append_turns(b, [turn("after")]))
        thread.join(WAIT)
        assert thread.is_alive(), "a namespace writer did not wait for a store-wide write"
    thread.join(30)
    assert "error" not in out, out


def _store_wide(store: PostgresStore) -> None:
    with store.transaction():
        store.append_turns(store.namespace_id(Namespace("alice")), [turn("wide")])


def test_creating_namespaces_does_not_wait_for_writers_of_others(stores: Any):
    one, two, a, _ = stores
    with writing(one, a):
        start = time.perf_counter()
        new = two.namespace_id(Namespace("dave"), create=True)
        two.append_turns(new, [turn("d1")])
        assert time.perf_counter() - start < WAIT
    assert new != a and [t.id for t in one.iter_turns(new)] == ["d1"]


def test_a_nested_write_to_another_namespace_takes_its_lock(stores: Any):
    one, two, a, b = stores
    inside, leave = threading.Event(), threading.Event()

    def nested() -> None:
        with one.transaction(a):
            one.append_turns(a, [turn("a1")])
            one.append_turns(b, [turn("b1")])  # a savepoint that widens the transaction to bob's lock
            inside.set()
            leave.wait(30)

    holder = threading.Thread(target=nested)
    holder.start()
    assert inside.wait(10)
    thread, out = in_thread(lambda: two.append_turns(b, [turn("b2")]))
    thread.join(WAIT)
    blocked = thread.is_alive()
    leave.set()
    holder.join(30)
    thread.join(30)
    assert blocked, "bob's writer did not wait for a transaction that wrote to bob"
    assert "error" not in out, out
    assert [t.id for t in one.iter_turns(b)] == ["b1", "b2"]


def test_a_rolled_back_writer_does_not_cancel_another_threads_scrub(stores: Any):
    """What a delete leaves in the files is scrubbed after its commit; that pending work is per transaction, so a
    writer of another namespace rolling back meanwhile does not drop it."""
    one, _, a, b = stores
    one.append_turns(a, [turn("gone")])
    one.append_turns(b, [turn("b1")])
    assert one._scrubber is not None
    deleted, leave = threading.Event(), threading.Event()

    def delete() -> None:
        with one.transaction(a):
            one.delete_turns(a, ["gone"])
            deleted.set()
            leave.wait(30)

    holder = threading.Thread(target=delete)
    holder.start()
    assert deleted.wait(10)
    with pytest.raises(RuntimeError), one.transaction(b):
        one.append_turns(b, [turn("b2")])
        raise RuntimeError("undo bob's write")
    leave.set()
    holder.join(30)
    assert one.scrub_pending(), "the delete's scrub was dropped by another thread's rollback"
    assert [t.id for t in one.iter_turns(b)] == ["b1"]
