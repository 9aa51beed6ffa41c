"""Names as structure (issue 13): nicknames, spelling variants, first names, people of a conversation."""

from __future__ import annotations

import time

import pytest

from cuemem.index.names import (
    NICKNAMES,
    PersonIndex,
    candidate_names,
    is_generic_label,
    name_similarity,
    nickname_group,
    normalise_name,
)

# (name in the question, the conversation's known people, the person it must match, or None)
ALIAS_CASES = [
    # nicknames
    ("Mel", ["Melanie", "Caroline"], "Melanie"),
    ("Bill", ["William", "Robert"], "William"),
    ("Liam", ["William", "Robert"], "William"),
    ("Bobby", ["William", "Robert"], "Robert"),
    ("Liz", ["Elizabeth", "Margaret"], "Elizabeth"),
    ("Peggy", ["Elizabeth", "Margaret"], "Margaret"),
    ("Carrie", ["Caroline", "Melanie"], "Caroline"),
    ("Mike", ["Michael", "Jennifer"], "Michael"),
    ("Jenny", ["Michael", "Jennifer"], "Jennifer"),
    ("Jon", ["Jonathan", "Gina"], "Jonathan"),
    ("Kate", ["Katherine", "Deborah"], "Katherine"),
    ("Debbie", ["Katherine", "Deborah"], "Deborah"),
    ("Andy", ["Andrew", "Daniel"], "Andrew"),
    # spelling variants
    ("Carolyn", ["Caroline", "Melanie"], "Caroline"),
    ("John", ["Jon", "Gina"], "Jon"),
    ("Catherine", ["Katherine", "Tom"], "Katherine"),
    ("Melany", ["Melanie", "Caroline"], "Melanie"),
    ("Mell", ["Mel", "Tim"], "Mel"),
    # first-name-only and last-name-only against full names
    ("Mel", ["Melanie Smith", "Caroline Jones"], "Melanie Smith"),
    ("Melanie", ["Melanie Smith", "Caroline Jones"], "Melanie Smith"),
    ("Jones", ["Melanie Smith", "Caroline Jones"], "Caroline Jones"),
    ("Jonathan Smith", ["Jon Smith", "Jon Jones"], "Jon Smith"),
    # possessives and accents
    ("Caroline's", ["Caroline", "Melanie"], "Caroline"),
    ("James'", ["James", "Jane"], "James"),
    ("José's", ["Jose", "Maria"], "Jose"),
    ("Zoe", ["Zoë", "Renée"], "Zoë"),
    ("Renee", ["Zoë", "Renée"], "Renée"),
    ("Lukasz", ["Łukasz", "Piotr"], "Łukasz"),
    ("李雷", ["李雷", "韩梅梅"], "李雷"),
    # negatives: different people are not matched
    ("Melanie", ["Caroline", "Gina"], None),
    ("Gina", ["Jon", "Melanie"], None),
    ("Tim", ["Tom", "Melanie"], None),
    ("Dan", ["Dane", "Jon"], None),
    ("Louise", ["Louis", "Jon"], None),
    ("Maria", ["Mario", "Jon"], None),
    ("Jon Arryn", ["Jon Snow", "Gina"], None),
    ("李磊", ["李雷", "Jon"], None),
    # generic speaker labels: exact label only, never by similarity
    ("users", ["user", "assistant"], None),
    ("Assistant", ["user", "assistant"], "assistant"),
    ("speaker 2", ["speaker 1", "Melanie"], None),
    ("Speaker_1", ["speaker 1", "Melanie"], "speaker 1"),
]


@pytest.mark.parametrize(("name", "people", "expected"), ALIAS_CASES)
def test_resolve_alias_table(name: str, people: list[str], expected: str | None) -> None:
    index = PersonIndex.build(speakers=people)
    matches = index.resolve(name)
    if expected is None:
        assert matches == []
    else:
        assert matches, f"{name!r} matched none of {people}"
        assert matches[0][0] == expected
        assert 0.85 <= matches[0][1] <= 1.0


@pytest.mark.parametrize(
    ("a", "b", "low", "high"),
    [
        ("Mel", "Mel", 1.0, 1.0),
        ("Bill", "William", 1.0, 1.0),
        ("Caroline", "Carolyn", 0.85, 0.99),
        ("Jon", "John", 0.85, 1.0),
        ("Katherine", "Catherine", 0.85, 0.99),
        ("Melanie", "Melany", 0.85, 0.99),
        ("Mel", "Melanie Smith", 0.9, 0.99),
        ("Smith", "Melanie Smith", 0.85, 0.94),
        ("Caroline", "Melanie", 0.0, 0.79),
        ("Jon", "Gina", 0.0, 0.79),
        ("Tim", "Tom", 0.0, 0.0),
        ("user", "users", 0.0, 0.0),
        ("", "Mel", 0.0, 0.0),
    ],
)
def test_name_similarity_bands(a: str, b: str, low: float, high: float) -> None:
    assert low <= name_similarity(a, b) <= high
    assert name_similarity(a, b) == name_similarity(b, a)


def test_first_name_match_outranks_last_name_match() -> None:
    assert name_similarity("Melanie", "Melanie Smith") > name_similarity("Smith", "Melanie Smith")


def test_normalise_name() -> None:
    assert normalise_name("José's") == "jose"
    assert normalise_name("  Renée   O'Brien-Smith ") == "renee obrien smith"
    assert normalise_name("James’") == "james"
    assert normalise_name("Łukasz") == "lukasz"
    assert normalise_name("Ross") == "ross"
    assert normalise_name("") == ""


def test_nickname_table_is_data_and_groups_are_symmetric() -> None:
    assert len(NICKNAMES) >= 80
    assert {"bill", "will", "billy", "liam"} <= NICKNAMES["william"]
    assert "melanie" in nickname_group("Mel") and "mel" in nickname_group("Melanie")
    assert {"samuel", "samantha"} <= nickname_group("Sam")
    assert nickname_group("Zebedee") == {"zebedee"}
    assert nickname_group("") == frozenset()
    for canonical, nicks in NICKNAMES.items():
        for nick in nicks:
            assert canonical in nickname_group(nick) and nick in nickname_group(canonical)


def test_generic_labels() -> None:
    assert is_generic_label("User") and is_generic_label("speaker_1") and is_generic_label("Speaker 12")
    assert not is_generic_label("Melanie")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Mel paint?", ["Mel"]),
        ("When did Jon's dog die?", ["Jon"]),
        ("What is Caroline's job?", ["Caroline"]),
        ("Did Melanie and Caroline go to the LGBTQ parade on Monday?", ["Melanie", "Caroline"]),
        ("How did Jonathan Smith meet Dr. Anna Lee in May?", ["Jonathan Smith", "Anna Lee"]),
        ("What did James' sister, Zoë, say?", ["James", "Zoë"]),
        ("Painting is fun, said Mel. I like painting.", ["Mel"]),
        ("Who is Mel? Mel's friend Mel said hi.", ["Mel"]),
        ("What did I tell you on Sunday in January?", []),
        ("Who is 李雷?", []),
        ("", []),
        ("Forget Garden Room, it's Garden Club now.", ["Garden Room", "Garden Club"]),  # the verb is no name
        ("Okay. Scrap Hotel Mar; call Nina instead.", ["Hotel Mar", "Nina"]),
        # a lowercase particle inside a name keeps it whole; one no name word follows is no part of it
        ("We eat at Taberna do Largo, then Casa da Música.", ["Taberna do Largo", "Casa da Música"]),
        ("Ludwig van Beethoven wrote it for Anna von Berg.", ["Ludwig van Beethoven", "Anna", "Berg"]),
        ("Did Anna do Pilates yesterday?", ["Anna", "Pilates"]),  # not after a given name: "do" is a verb there
        ("Ask Tom do it. Then Lisa de, Lisa.", ["Tom", "Lisa"]),
        ("I met Marta de la Cruz.", ["Marta", "Cruz"]),  # one particle only: "de la" splits
    ],
)
def test_candidate_names(text: str, expected: list[str]) -> None:
    assert candidate_names(text) == expected


def test_clustering_mel_melanie_mell_is_one_person_named_by_the_speaker() -> None:
    index = PersonIndex.build(speakers=["Melanie", "Caroline"], mentioned=["Mell", "Mel", "Melanie", "Mel", "Carrie"])
    assert index.people() == ["Melanie", "Caroline"]
    assert index.aliases("Melanie") == {"Melanie", "Mel", "Mell"}
    assert index.aliases("Caroline") == {"Caroline", "Carrie"}
    assert index.aliases("Nobody") == set()
    assert index.match_query("What did Mel paint?") == {"Melanie": 1.0}
    assert index.match_query("what did mell paint") == {"Melanie": 1.0}  # lower-case alias as a whole word


def test_clustering_without_speakers_prefers_the_full_frequent_form() -> None:
    index = PersonIndex.build(speakers=[], mentioned=["Gina", "Gina Lopez", "Gina", "Gina Lopez", "Jon"])
    assert index.people() == ["Gina Lopez", "Jon"]
    assert index.aliases("Gina Lopez") == {"Gina", "Gina Lopez"}


def test_different_given_names_are_not_chained_through_a_shared_nickname() -> None:
    index = PersonIndex.build(speakers=["Melanie"], mentioned=["Mel", "Melissa"])
    assert index.people() == ["Melanie", "Melissa"]
    assert [p for p, _ in index.resolve("Melissa")] == ["Melissa"]
    assert {p for p, _ in index.resolve("Mel")} == {"Melanie", "Melissa"}
    assert index.resolve("Mel")[0][0] == "Melanie"  # the observed alias first


def test_first_name_only_is_ambiguous_between_full_names() -> None:
    index = PersonIndex.build(speakers=["user", "assistant"], mentioned=["Jon Snow", "Jon Arryn", "Jon"])
    assert set(index.people()) == {"user", "assistant", "Jon Snow", "Jon Arryn"}
    assert index.ambiguous == {"Jon": ["Jon Arryn", "Jon Snow"]}
    assert {p for p, _ in index.resolve("Jon")} == {"Jon Snow", "Jon Arryn"}
    assert set(index.match_query("When did Jon's dog die?")) == {"Jon Snow", "Jon Arryn"}
    assert list(index.match_query("What did Jon Arryn say?")) == ["Jon Arryn"]


def test_generic_labels_match_only_by_exact_mention() -> None:
    index = PersonIndex.build(speakers=["user", "assistant"], mentioned=["Caroline"])
    assert index.match_query("What did the assistant recommend to Caroline?") == {"assistant": 1.0, "Caroline": 1.0}
    assert index.match_query("What did Ursula say?") == {}
    assert index.resolve("Users") == []


def test_stopword_aliases_need_a_capital() -> None:
    index = PersonIndex.build(speakers=["Will", "Gina"])
    assert index.match_query("What will Gina do?") == {"Gina": 1.0}
    assert index.match_query("What did Will do?") == {"Will": 1.0}
    assert index.match_query("Will Gina come?") == {"Gina": 1.0}


def test_extra_names_from_an_entity_recogniser() -> None:
    index = PersonIndex.build(speakers=["Melanie"])
    assert index.match_query("what did she paint", extra_names=["mel"]) == {"Melanie": 1.0}


@pytest.mark.parametrize(
    "text",
    ["", " ", "'s", "’", "---", "\x00\n\t", "李雷", "Zoë Renée Łukasz", "🙂🙂", "A" * 100_000, "Mel " * 50_000],
)
def test_hostile_inputs_do_not_raise(text: str) -> None:
    start = time.perf_counter()
    normalise_name(text)
    nickname_group(text)
    name_similarity(text, "Melanie")
    name_similarity(text, text)
    candidate_names(text)
    index = PersonIndex.build(speakers=[text, "Melanie", ""], mentioned=[text, text[:10], "", "Mel"])
    index.resolve(text)
    index.match_query(text)
    index.aliases(text)
    assert time.perf_counter() - start < 5


def test_many_distinct_mentions_stay_fast() -> None:
    mentioned = [f"Person{chr(65 + i % 26)}{chr(65 + i // 26 % 26)}x{i}" for i in range(5000)]
    start = time.perf_counter()
    index = PersonIndex.build(speakers=["Melanie"], mentioned=mentioned)
    assert index.people()[0] == "Melanie"
    assert time.perf_counter() - start < 20


def test_a_query_full_of_names_against_many_people_stays_fast() -> None:
    people = [f"{a}{b}ander {a}{b}son" for a in "BCDFGHJKLM" for b in "aeiou"]
    index = PersonIndex.build(speakers=["Melanie"], mentioned=people)
    query = ", ".join(f"{a}{b}{c}ly" for a in "BCDFGHJKLM" for b in "aeiou" for c in "rstn")
    start = time.perf_counter()
    index.match_query(query)
    assert time.perf_counter() - start < 5
