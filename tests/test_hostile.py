"""Hostile and careless input at the library's edges (issue 11): files whose bad lines, turns or samples must
reject only themselves, imports that must stay in the namespace they were given, namespace ids that look alike,
and ingest that streams. The CLI's `ingest` and `import` call `Memory.ingest_file` and `Memory.import_`."""

from __future__ import annotations

import io
import itertools
import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TRIP, open_memory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuemem import Memory, UnknownNamespaceError
from cuemem.embed import HashingEmbedder
from cuemem.formats import count_lines, file_lines

DEEP = b"[" * 100_000 + b"]" * 100_000  # one line nested 100k levels deep


def turn_line(turn_id: str, text: str, **extra: Any) -> bytes:
    return json.dumps({"id": turn_id, "text": text, **extra}).encode()


def ids(memory: Memory, user: str, **ns: Any) -> list[str]:
    return [t.id for t in memory.turns(user_id=user, **ns)]


# ---------------------------------------------------------------- a bad line or turn rejects only itself
def test_a_deeply_nested_jsonl_line_rejects_only_itself(make_memory, tmp_path):
    memory = make_memory("bm25")
    lines = [turn_line("a", "first"), DEEP, b'{"id": "x", "text": ' + DEEP + b"}", turn_line("b", "second")]
    report = memory.import_(lines, user_id="u")
    assert report.added == 2 and [n for n, _ in report.errors] == [2, 3]
    assert "nested too deeply" in report.errors[0][1]
    assert ids(memory, "u") == ["a", "b"]
    path = tmp_path / "deep.jsonl"  # the same through ingest_file, the format sniffed
    path.write_bytes(b"\n".join([turn_line("c", "third"), DEEP, turn_line("d", "fourth")]))
    report = memory.ingest_file(path, user_id="v")
    assert report.added == 2 and [n for n, _ in report.errors] == [2]
    assert ids(memory, "v") == ["c", "d"]


def test_a_bad_first_jsonl_line_does_not_make_the_file_locomo(make_memory, tmp_path):
    memory = make_memory("bm25")
    path = tmp_path / "first-bad.jsonl"
    path.write_bytes(b"\n".join([b"[1, 2]", turn_line("a", "kept"), b"[" + DEEP]))
    report = memory.ingest_file(path, user_id="u")
    assert report.added == 1 and [n for n, _ in report.errors] == [1, 3]
    assert ids(memory, "u") == ["a"]


def test_a_number_too_long_to_convert_rejects_only_its_line(make_memory):
    memory = make_memory("bm25")
    report = memory.import_(
        [b'{"id": "n", "text": "x", "metadata": {"n": ' + b"9" * 5000 + b"}}", turn_line("a", "kept")], user_id="u"
    )
    assert report.added == 1 and [n for n, _ in report.errors] == [1]


def test_metadata_nested_deep_enough_to_exhaust_the_stack_later_is_refused(make_memory):
    memory = make_memory("bm25")
    deep = b'{"id": "d", "text": "x", "metadata": {"a": ' + b"[" * 900 + b"]" * 900 + b"}}"
    report = memory.import_([deep, turn_line("a", "kept")], user_id="u")
    assert report.added == 1 and report.errors == [(1, "metadata is nested more than 100 levels deep")]
    fine = {"id": "f", "text": "x", "metadata": {"a": [[[{"b": [1]}]]]}}
    assert memory.add(fine, user_id="u").added == ["f"]


def locomo(*samples: Any) -> bytes:
    return json.dumps(list(samples)).encode()


def test_a_bad_locomo_turn_rejects_only_itself(make_memory, tmp_path):
    memory = make_memory("bm25")
    session_1 = [
        {"speaker": "A", "dia_id": "D1:1", "text": "kept one"},
        "just a string",
        {"speaker": "B", "dia_id": "D1:3", "text": 42},
        {"speaker": ["B"], "dia_id": "D1:4", "text": "a list for a speaker"},
        {"speaker": "B", "dia_id": {"x": 1}, "text": "a dict for an id"},
        {"speaker": "A", "dia_id": "D1:6", "text": ""},
        {"speaker": "A", "dia_id": "D1:7", "text": "kept two"},
    ]
    session_3 = [None, {"speaker": "B", "dia_id": "D3:2", "text": "kept three"}]
    conversation = {"session_1": session_1, "session_3": session_3, "session_1_date_time": "today"}
    path = tmp_path / "conv.json"
    path.write_bytes(locomo({"sample_id": "c1", "conversation": conversation}))
    report = memory.ingest_file(path)
    assert report.added == 3
    assert ids(memory, "c1") == ["D1:1", "D1:7", "D3:2"]
    assert [where for where, _ in report.errors] == ["c1"] * 6
    reasons = [why for _, why in report.errors]
    for position in (
        "session_1 turn 2 is a str",
        "session_1 turn 3 has a text of type int",
        "session_1 turn 4 has a speaker",
        "session_1 turn 5 has a dia_id",
        "session_1 turn 6 (D1:6): text",
        "session_3 turn 1 is a NoneType",
    ):
        assert sum(why.startswith(position) for why in reasons) == 1, (position, reasons)


def test_a_bad_locomo_sample_rejects_only_itself(make_memory, tmp_path):
    memory = make_memory("bm25")
    good = {"sample_id": "ok", "conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]}}
    path = tmp_path / "samples.json"
    path.write_bytes(locomo("not a sample", {"sample_id": "no-conv"}, good, {**good, "sample_id": " "}))
    report = memory.ingest_file(path, file_format="locomo")
    assert report.added == 1 and ids(memory, "ok") == ["D1:1"]
    assert [where for where, _ in report.errors] == ["sample 0", "sample 1", " "]
    assert "'conversation'" in report.errors[0][1] and "sample skipped" in report.errors[2][1]
    path.write_bytes(locomo("not a sample", {"sample_id": "no-conv"}))  # nothing valid: the file is refused
    with pytest.raises(Exception, match="not LoCoMo format"):
        memory.ingest_file(path, file_format="locomo")


# ---------------------------------------------------------------- tenant boundaries
def test_an_import_for_bob_never_writes_into_another_namespace(make_memory, tmp_path):
    memory = make_memory("bm25")
    memory.add({"id": "private", "text": "alice's own turn"}, user_id="alice")
    alice = {"namespace": {"user_id": "alice", "agent_id": None, "run_id": None}}
    lines = [
        turn_line("h1", "hostile line naming alice", **alice),
        turn_line("b1", "plain line"),
        turn_line("b2", "line naming bob", namespace={"user_id": "bob"}),
    ]
    report = memory.import_(lines, user_id="bob")
    assert (report.added, report.errors) == (3, [])
    assert ids(memory, "alice") == ["private"]  # untouched
    assert ids(memory, "bob") == ["h1", "b1", "b2"]
    path = tmp_path / "upload.jsonl"  # `cuemem ingest FILE -u bob`
    path.write_bytes(b"\n".join([turn_line("h2", "another hostile line", **alice)]))
    assert memory.ingest_file(path, user_id="bob").added == 1
    assert ids(memory, "alice") == ["private"] and "h2" in ids(memory, "bob")


def test_importing_alices_export_into_bob_copies_it(make_memory):
    memory = make_memory("bm25")
    memory.add(TRIP[:3], user_id="alice")
    out = io.StringIO()
    assert memory.export(out, user_id="alice") == 3
    report = memory.import_(out.getvalue().splitlines(), user_id="bob")
    assert (report.added, report.skipped, report.errors) == (3, 0, [])
    assert ids(memory, "bob") == ids(memory, "alice") == ["d1", "d2", "d3"]
    report = memory.import_(out.getvalue().splitlines(), user_id="bob", agent_id="bot")
    assert report.added == 3 and ids(memory, "bob", agent_id="bot") == ["d1", "d2", "d3"]


def test_an_import_into_one_namespace_refuses_lines_of_a_second_tenant(make_memory):
    memory = make_memory("bm25")
    lines = [
        turn_line("a1", "alice one", namespace={"user_id": "alice"}),
        turn_line("t1", "theo one", namespace={"user_id": "theo"}),
        turn_line("a2", "alice two", namespace={"user_id": "alice"}),
        turn_line("c1", "carol one", namespace={"user_id": "carol"}),
    ]
    report = memory.import_(lines, user_id="bob")
    assert report.added == 2 and [n for n, _ in report.errors] == [2, 4]
    assert "import one namespace at a time" in report.errors[0][1]
    assert ids(memory, "bob") == ["a1", "a2"]
    assert {ns.user_id for ns, _ in memory.namespaces()} == {"bob"}
    # Without a user_id, each line's own namespace decides (a whole-store export restores every tenant).
    report = memory.import_(lines)
    assert report.added == 4 and ids(memory, "theo") == ["t1"] and ids(memory, "carol") == ["c1"]


# ---------------------------------------------------------------- namespace ids that look alike
def test_namespace_ids_that_look_alike_are_one_namespace(make_memory):
    memory = make_memory("bm25")
    nfd, nfc = unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFC", "café")
    assert nfd != nfc
    memory.add({"id": "c1", "text": "the café turn"}, user_id=nfd, agent_id=" bot ")
    for user in (nfc, nfd, f" {nfc} ", f"{nfd}\t"):
        assert memory.search("café turn", user_id=user, agent_id="bot").turn_ids == ["c1"]
    assert [(ns.user_id, ns.agent_id) for ns, _ in memory.namespaces()] == [(nfc, "bot")]
    out = io.StringIO()
    memory.export(out)
    assert json.loads(out.getvalue())["namespace"]["user_id"] == nfc
    other = make_memory("bm25", name="other.db")  # an import normalises the line's namespace the same way
    line = turn_line("c2", "second", namespace={"user_id": f"{nfd} "})
    assert other.import_([line]).added == 1 and ids(other, nfc) == ["c2"]
    assert other.delete_all(user_id=f" {nfd}") == [(memory.namespace(nfc), 1)]


@pytest.mark.parametrize(
    "char", ["\u202e", "\u202a", "\u2066", "\u2069", "\u200b", "\u200d", "\ufeff", "\x00", "\x1b", "\n"]
)
def test_namespace_ids_with_invisible_or_control_characters_are_refused(make_memory, char):
    memory = make_memory("bm25")
    with pytest.raises(ValueError, match=f"U\\+{ord(char):04X}"):
        memory.add("hi", user_id=f"ali{char}ce")
    with pytest.raises(ValueError, match="U\\+"):
        memory.add("hi", user_id="alice", run_id=f"r{char}1")
    report = memory.import_([turn_line("x", "hi", namespace={"user_id": f"ali{char}ce"})])
    assert report.added == 0 and report.errors[0][0] == 1 and "U+" in report.errors[0][1]
    assert memory.namespaces() == []
    with pytest.raises(UnknownNamespaceError):
        memory.search("hi", user_id="alice")


# ---------------------------------------------------------------- ingest streams
def test_ingest_file_streams_jsonl_without_reading_the_file_whole(make_memory, tmp_path, monkeypatch):
    memory = make_memory("bm25")
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\r\n".join(turn_line(f"t{i}", f"turn number {i}") for i in range(600)) + b"\r\n")

    def refuse(self: Path) -> bytes:
        raise AssertionError(f"{self} was read whole")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    totals: list[int] = []

    def bar(label: str, total: int) -> Any:
        totals.append(total)
        return __import__("contextlib").nullcontext(lambda n: None)

    report = memory.ingest_file(path, user_id="u", progress=bar)
    assert (report.added, report.errors, totals) == (600, [], [600])
    assert ids(memory, "u") == [f"t{i}" for i in range(600)]


def test_import_writes_while_it_reads(make_memory):
    """Lines are taken one at a time and written in batches: the first batch is stored before the last line is
    read, so memory holds a batch, not the file."""
    memory = make_memory("bm25")
    stored_when_read: list[int] = []

    def lines() -> Iterator[bytes]:
        for i in range(700):
            if i == 699:
                stored_when_read.append(len(memory.turns(user_id="u")))
            yield turn_line(f"t{i}", f"turn {i}")

    assert memory.import_(lines(), user_id="u").added == 700
    assert stored_when_read and stored_when_read[0] >= 256


@pytest.mark.parametrize("data", [b"", b"a", b"a\n", b"a\r\nb", b"a\rb\r", b"a\r\r\nb\n\n", b"\r\n\r\n"])
def test_file_lines_match_splitlines(tmp_path, data):
    path = tmp_path / "f"
    path.write_bytes(data)
    assert list(file_lines(path)) == data.splitlines() and count_lines(path) == len(data.splitlines())


# ---------------------------------------------------------------- fuzz: JSONL and LoCoMo input
MAX_TURN_BYTES = 2000
TEXT = st.text(alphabet=st.sampled_from("abc xyz é東✓\t"), min_size=1, max_size=30).filter(str.strip)
# A line is (kind, payload): kinds starting with "ok" are valid turns, the rest must be rejected by number.
LINE = st.one_of(
    st.tuples(st.just("ok"), TEXT),
    st.tuples(st.just("ok-named"), TEXT),  # names the namespace it is imported into
    st.tuples(st.just("empty"), st.sampled_from([b"", b"   ", b"\t"])),
    st.tuples(st.just("not-object"), st.sampled_from([b"[1, 2]", b"42", b'"text"', b"null", b"true"])),
    st.tuples(
        st.just("wrong-type"),
        st.sampled_from(
            [
                {"text": 5},
                {"text": None},
                {"text": ["a"]},
                {"text": "x", "speaker": {}},
                {"text": "x", "metadata": 3},
                {"text": ""},
                {"text": "x", "namespace": "alice"},
            ]
        ),
    ),
    st.tuples(st.just("deep"), st.sampled_from([DEEP, b'{"text": "x", "metadata": ' + DEEP + b"}"])),
    st.tuples(st.just("huge"), st.integers(MAX_TURN_BYTES + 1, MAX_TURN_BYTES * 3)),
    st.tuples(st.just("bad-bytes"), st.sampled_from([b"\xff\xfe", b"caf\xe9", b"\xc3", b"\xed\xa0\x80"])),
    st.tuples(st.just("bad-json"), st.sampled_from([b"{not json", b'{"text": "x"', b"}", b"{'text': 'x'}"])),
    st.tuples(st.just("encoded"), st.tuples(TEXT, st.sampled_from(["utf-16", "utf-8-sig", "latin-1"]))),
)
counter = itertools.count()


def fuzz_memory(base: Path) -> Memory:
    """The test's one store (hypothesis runs every example in the same tmp_path), emptied before each example: as
    empty as a new store, without a new PostgreSQL database per example (about 0.5 s each to create and drop)."""
    memory = open_memory(base / "fuzz.db", "bm25", embedder=HashingEmbedder(), max_turn_bytes=MAX_TURN_BYTES)
    for user in {namespace.user_id for namespace, _ in memory.namespaces()}:
        memory.delete_all(user_id=user)
    assert not memory.namespaces()
    return memory


def render(index: int, kind: str, payload: Any) -> tuple[bytes, str | None, bool]:
    """The line's bytes, the id of the turn it carries if it is valid, and whether it must be reported."""
    turn_id = f"t{index}"
    if kind == "ok":
        return turn_line(turn_id, payload), turn_id, False
    if kind == "ok-named":
        return turn_line(turn_id, payload, namespace={"user_id": "fuzz"}), turn_id, False
    if kind == "empty":
        return payload, None, False
    if kind == "wrong-type":
        return json.dumps({"id": turn_id, **payload}).encode(), None, True
    if kind == "huge":
        return turn_line(turn_id, "h" * payload), None, True
    if kind == "bad-bytes":
        return b'{"id": "' + turn_id.encode() + b'", "text": "' + payload + b'"}', None, True
    if kind == "encoded":
        text, encoding = payload
        line = json.dumps({"id": turn_id, "text": text + "é"}, ensure_ascii=False)
        return line.encode(encoding, errors="replace"), None, True  # not UTF-8 (or a BOM in front): rejected
    return payload, None, True


# The fuzzers run 100 examples on SQLite and 25 on PostgreSQL: the parsing and reporting are the same code for
# both stores, what PostgreSQL adds is where the valid turns are stored.
FUZZ = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
JSONL = {
    "specs": st.lists(LINE, max_size=25),
    "via_file": st.booleans(),
    "separator": st.sampled_from([b"\n", b"\r\n"]),
}


@pytest.mark.sqlite_only("PostgreSQL runs the same fuzz with fewer examples: test_fuzz_jsonl_on_postgres")
@settings(max_examples=100, **FUZZ)
@given(**JSONL)
def test_fuzz_jsonl(tmp_path, specs, via_file, separator):
    check_jsonl(tmp_path, specs, via_file, separator)


@pytest.mark.postgres_only("test_fuzz_jsonl's fuzz, 25 examples")
@settings(max_examples=25, **FUZZ)
@given(**JSONL)
def test_fuzz_jsonl_on_postgres(tmp_path, specs, via_file, separator):
    check_jsonl(tmp_path, specs, via_file, separator)


def check_jsonl(tmp_path, specs, via_file, separator):
    rendered = [render(i, kind, payload) for i, (kind, payload) in enumerate(specs)]
    valid = [turn_id for _, turn_id, _ in rendered if turn_id]
    bad = [n for n, (_, _, reported) in enumerate(rendered, start=1) if reported]
    with fuzz_memory(tmp_path) as memory:
        if via_file:
            path = tmp_path / f"in-{next(counter)}.jsonl"
            path.write_bytes(separator.join(line for line, _, _ in rendered))
            report = memory.ingest_file(path, file_format="jsonl", user_id="fuzz")
        else:
            report = memory.import_([line for line, _, _ in rendered], user_id="fuzz")
        assert [n for n, _ in report.errors] == bad
        assert (report.added, report.skipped) == (len(valid), 0)
        stored = ids(memory, "fuzz") if valid else []
        assert stored == valid  # every valid turn stored exactly once, in file order
        assert {ns.user_id for ns, _ in memory.namespaces()} <= {"fuzz"}


LOCOMO_TURN = st.one_of(
    st.tuples(st.just("ok"), TEXT),
    st.tuples(
        st.just("bad"),
        st.sampled_from(
            [
                "a string",
                7,
                None,
                [1],
                {"text": 5},
                {"text": ""},
                {"text": None},
                {"text": "x", "speaker": 1},
                {"text": "x", "dia_id": [1]},
            ]
        ),
    ),
    st.tuples(st.just("huge"), st.integers(MAX_TURN_BYTES + 1, MAX_TURN_BYTES * 2)),
)
SAMPLE = st.one_of(
    st.lists(st.lists(LOCOMO_TURN, max_size=6), min_size=1, max_size=3),  # sessions of turns
    st.sampled_from(["not a sample", 3, {"conversation": "nope"}, {"sample_id": "x"}]),
)


LOCOMO = {"samples": st.lists(SAMPLE, min_size=1, max_size=3), "indent": st.sampled_from([None, 2])}


@pytest.mark.sqlite_only("PostgreSQL runs the same fuzz with fewer examples: test_fuzz_locomo_on_postgres")
@settings(max_examples=100, **FUZZ)
@given(**LOCOMO)
def test_fuzz_locomo(tmp_path, samples, indent):
    check_locomo(tmp_path, samples, indent)


@pytest.mark.postgres_only("test_fuzz_locomo's fuzz, 25 examples")
@settings(max_examples=25, **FUZZ)
@given(**LOCOMO)
def test_fuzz_locomo_on_postgres(tmp_path, samples, indent):
    check_locomo(tmp_path, samples, indent)


def check_locomo(tmp_path, samples, indent):
    data: list[Any] = []
    expected: dict[str, list[str]] = {}  # sample id -> valid turn ids
    positions: dict[str, list[str]] = {}  # sample id -> reported positions
    bad_samples: list[str] = []
    for s, sample in enumerate(samples):
        if not isinstance(sample, list):
            data.append(sample)
            bad_samples.append(f"sample {s}")
            continue
        sid = f"conv-{s}"
        conversation: dict[str, Any] = {}
        expected[sid], positions[sid] = [], []
        for n, session in enumerate(sample, start=1):
            conversation[f"session_{n}_date_time"] = f"day {n}"
            conversation[f"session_{n}"] = []
            for p, (kind, payload) in enumerate(session, start=1):
                dia_id = f"D{n}:{p}"
                if kind == "ok":
                    raw: Any = {"speaker": "A", "dia_id": dia_id, "text": payload}
                    expected[sid].append(dia_id)
                else:
                    raw = {"speaker": "A", "dia_id": dia_id, "text": "h" * payload} if kind == "huge" else payload
                    positions[sid].append(f"session_{n} turn {p}")
                conversation[f"session_{n}"].append(raw)
        data.append({"sample_id": sid, "conversation": conversation})
    path = tmp_path / f"in-{next(counter)}.json"
    path.write_text(json.dumps(data, indent=indent))
    with fuzz_memory(tmp_path) as memory:
        if not expected:  # no sample is valid: the file is refused, with a clear error
            with pytest.raises(Exception, match="not LoCoMo format"):
                memory.ingest_file(path)
            return
        report = memory.ingest_file(path)
        assert [where for where, _ in report.errors if where in bad_samples] == bad_samples
        for sid, valid in expected.items():
            reported = [why for where, why in report.errors if where == sid]
            # structural problems are reported first, then turns the add refused (empty, too long): each once
            assert sorted(" ".join(why.split(" ")[:3]) for why in reported) == sorted(positions[sid])
            assert (ids(memory, sid) if valid else []) == valid
        assert report.added == sum(len(v) for v in expected.values()) and report.skipped == 0
