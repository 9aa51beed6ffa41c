"""Revised values (issue 34 item 2; docs/design.md design 3, the confidence + recency merge): statements that set the
same attribute of the same goal form a chain; the latest is current, the others are its history.

Model-free and language-light. Each turn is read into a statement (`statements.py`: its values, frame, names and
numbered nouns). Its *anchors* are the goal it is about: numbered nouns such as "day 2" or "the second day", and the
names that recur over the conversation, unless said where a value stands ("the lead is Nico"). A turn that names no
anchor inherits those of the nearest preceding turn of its session that does (the goal in focus, carried forward).

A later turn supersedes an earlier one (`supersedes`) when their goals are compatible (they share an anchor and no
numbered noun disagrees) and it states another value of a kind the earlier one states, either for the same attribute
(frame overlap at least `min_frame`) or by quoting the earlier value beside a generic change word ("instead",
"now", "not", "actually", ...). `chains` links each superseded turn to the current one of its chain, and also takes
a name for the same attribute in other words: attribute words said with the same names (`value_profiles`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .statements import CHANGE_WORDS, Statement, read_statement

MIN_FRAME = 0.5  # the share of the smaller frame that two statements of one attribute have in common (dev sweep)
RECURRING = 3  # a name said in this many turns is a goal's anchor; a rarer one is a value (dev sweep)
FRAME_MEASURE = "union"  # "union" (weighted Jaccard) or "min" (containment); dev sweep: docs/benchmarks/came.md
ATTRIBUTE_SHARE = 0.75  # said with one kind of value this often: an attribute word (dev: 0.6-0.9 alike)
TOPIC_SPREAD = 0.6  # a topic noun is said with at most this many goals per saying (dev: 0.4 alike, 0.8 worse)
NEAR_FRAME = 0.5  # the near chains: two names' turns share this much of their attribute words (Jaccard)
SAME_VALUES = 0.3  # two attribute words said with the same names (`value_profiles`, cosine): one attribute (dev)

_PAST = re.compile(
    r"\b(before|originally|original|used\s+to|previous(?:ly)?|old|older|earlier|former(?:ly)?|initial(?:ly)?|"
    r"at\s+first|first\s+(?:\w+\s+){0,3}(?:was|were|had|did)|prior|until|replaced|changed\s+from|history)\b",
    re.I,
)


@dataclass
class Turn:
    """A turn as the primitive sees it: its words, its session and its place in the conversation."""

    text: str
    session: str = ""
    statement: Statement | None = field(default=None, repr=False)


def asks_past(question: str) -> bool:
    """Whether a question asks about an earlier value ("what was the hotel before?"): its history stays in place."""
    return bool(_PAST.search(question or ""))


def compatible(earlier: frozenset[str], later: frozenset[str]) -> bool:
    """Whether two goals (anchor sets) can be the same: they share an anchor, no numbered noun disagrees, and not
    both name an anchor the other lacks ("project Apollo" against "project Atlas"); two turns that name no goal
    at all are about the conversation's one goal."""
    if not earlier and not later:
        return True
    if not earlier & later:
        return False
    if (earlier - later) and (later - earlier):
        return False
    return not _disagree(_numbers(earlier), _numbers(later))


def _by_noun(pairs: Iterable[Sequence[str]]) -> dict[str, set[str]]:
    """Numbered nouns as noun -> its numbers (("day", "1"), ("day", "2") -> day: {1, 2})."""
    out: dict[str, set[str]] = {}
    for noun, number in pairs:
        out.setdefault(noun, set()).add(number)
    return out


def _numbers(anchors: frozenset[str]) -> dict[str, set[str]]:
    """The numbered nouns among a goal's anchors ("day#1", "day#2", "lyon" -> day: {1, 2})."""
    return _by_noun(a.split("#", 1) for a in anchors if "#" in a)


def _disagree(a: dict[str, set[str]], b: dict[str, set[str]]) -> bool:
    """Whether a numbered noun of both has no number in common ("day 1" against "day 2")."""
    return any(not (numbers & b[noun]) for noun, numbers in a.items() if noun in b)


def frame_overlap(a: frozenset[str], b: frozenset[str], weight: Callable[[str], float]) -> float:
    """How much two frames share: the weight of their shared attribute words over the lighter frame's weight
    (FRAME_MEASURE "min"), or over both frames' ("union", a weighted Jaccard); each word weighted by its rarity."""
    whole = _sum(a | b, weight) if FRAME_MEASURE == "union" else min(_sum(a, weight), _sum(b, weight))
    return _sum(a & b, weight) / whole if whole > 0 else 0.0


def _sum(words: frozenset[str], weight: Callable[[str], float]) -> float:
    """The words' weights summed exactly (`math.fsum`): a float sum in a set's order would differ in its last bit
    from one process to the next, and an overlap of exactly `min_frame` would then pass or fail by chance."""
    return math.fsum(weight(w) for w in words)


def supersedes(
    later: Statement,
    earlier: Statement,
    later_goal: frozenset[str],
    earlier_goal: frozenset[str],
    recurring: Callable[[str], bool],
    min_frame: float = MIN_FRAME,
    weight: Callable[[str], float] = lambda w: 1.0,
) -> bool:
    """Whether `later` replaces a value `earlier` stated: their goals are compatible and a kind of value both state
    has a new value in `later`, either for the same attribute (frame overlap) or with the old value quoted beside a
    change word ("forget X, it's Y now")."""
    if not compatible(earlier_goal, later_goal):
        return False
    stated = _stated(later, recurring), _stated(earlier, recurring)
    return _replaces(later, *stated, lambda kind: frame_overlap(earlier.frame, later.frame, weight) >= min_frame)


def _stated(statement: Statement, recurring: Callable[[str], bool]) -> dict[str, frozenset[str]]:
    """The values a turn states by kind, its names said as values or that do not recur among them (another
    recurring name is a goal's)."""
    names = frozenset(n for n in statement.names if n in statement.said or not any(recurring(w) for w in n.split()))
    return {**statement.values, "name": names} if names else dict(statement.values)


def _replaces(
    later: Statement,
    new_values: dict[str, frozenset[str]],
    old_values: dict[str, frozenset[str]],
    same_frame: Callable[[str], bool],
) -> bool:
    """`supersedes` once the goals are known to be compatible, with each side's values already read (`_stated`);
    `same_frame(kind)` says whether the two turns' frames are about the same attribute for that kind of value."""
    for kind, old in old_values.items():
        said = new_values.get(kind)
        if not said:
            continue
        named_old = {v for v in said if (kind, v) in later.replaced}
        if not named_old and later.revises and len(said) > 1:
            # no cue before either value ("X fell through, so Y instead"): a word saying a value was replaced and
            # two values of one kind, one of them the earlier turn's, quote the earlier value as the one replaced
            # ("now", "not" are not enough: "it still starts at 6 pm, but now the reception is at 8 pm")
            named_old = set(said & old)
        new = said - named_old
        if not new or not (new - old) or (old & new):  # no new value, or the earlier one says the new value too
            continue
        if later.changes and old & named_old:
            return True
        if same_frame(kind):
            return True
    return False


def goals_in_focus(
    turns: Sequence[Turn],
    candidates: Sequence[int],
    recurring: Callable[[str], bool],
) -> dict[int, frozenset[str]]:
    """For `turns` in conversation order: the goal of each candidate (the indexes given), its own anchors or, when
    it names none, those of the nearest preceding turn that does (the goal in focus, carried forward)."""
    for turn in turns:
        if turn.statement is None:
            turn.statement = read_statement(turn.text)
    goals: dict[int, frozenset[str]] = {}
    focus: frozenset[str] = frozenset()
    wanted = set(candidates)
    inside = frozenset(w for turn in turns if turn.statement for n in turn.statement.names for w in n.split())
    for i, turn in enumerate(turns):
        assert turn.statement is not None
        own = turn.statement.anchors(recurring, inside)
        if own:
            focus = own
        if i in wanted:
            goals[i] = own or focus
    return goals


def other_goal(asked: frozenset[tuple[str, str]], numbered: frozenset[tuple[str, str]]) -> bool:
    """Whether a turn is about another goal than the one a question names (a look-alike: "Day 1 of the Lyon trip"
    for a question about "Day 2 of the Lyon trip"): a numbered noun of both (`Statement.numbered`) disagrees. Two
    goals that merely name different things are not told apart: a recurring name may be the goal ("the Porto trip")
    or a value stated for it ("dinner at Cervejaria Ramiro"), which a model-free reading cannot tell (dev:
    docs/benchmarks/came.md)."""
    return bool(asked and numbered) and _disagree(_by_noun(asked), _by_noun(numbered))


def named_elsewhere(
    asked: frozenset[tuple[str, str, str]], said: frozenset[tuple[str, str, str]], recurring: Callable[[str], bool]
) -> bool:
    """Whether a turn puts a numbered noun of the question in another place or thing than the question does: "Day 1
    in Porto" for "Day 1 of the Lisbon trip" (each side's `Statement.named`). Both names must recur in the
    conversation (a goal's anchor, not a value said once), and the turn must name none of the question's for that
    numbered noun."""
    mine: dict[tuple[str, str], set[str]] = {}
    for noun, number, name in asked:
        if recurring(name):
            mine.setdefault((noun, number), set()).add(name)
    theirs: dict[tuple[str, str], set[str]] = {}
    for noun, number, name in said:
        if (noun, number) in mine and recurring(name):
            theirs.setdefault((noun, number), set()).add(name)
    return any(names and not (names & mine[key]) for key, names in theirs.items())


@dataclass(frozen=True)
class Roles:
    """What each frame word of some turns is: an *attribute* word goes with one kind of value ("tour" with
    clock times, "night" with money); a *topic* noun goes with no one kind and with few goals ("backpack",
    "farewell party"); every other word is generic ("make", "going", "update")."""

    attribute: frozenset[str]
    topic: frozenset[str]


def word_roles(turns: Sequence[Turn], goals: dict[int, frozenset[str]], recurring: Callable[[str], bool]) -> Roles:
    """Each frame word's role over `turns` (read, with the goal in focus of every turn): an attribute word when at
    least two turns stating values say it and ATTRIBUTE_SHARE of them state one kind; a topic noun when it is said
    at least twice, with at most TOPIC_SPREAD goals per saying, and is no attribute word."""
    said: Counter[str] = Counter()
    valued: Counter[str] = Counter()
    together: Counter[tuple[str, str]] = Counter()
    spread: dict[str, set[frozenset[str]]] = {}
    for i, turn in enumerate(turns):
        assert turn.statement is not None
        stated = _stated(turn.statement, recurring)
        for word in turn.statement.frame:
            said[word] += 1
            spread.setdefault(word, set()).add(goals.get(i, frozenset()))
            if stated:
                valued[word] += 1
                together.update((word, kind) for kind in stated)
    best: Counter[str] = Counter()
    for (word, _), n in together.items():
        best[word] = max(best[word], n)
    attribute = frozenset(w for w, n in valued.items() if n >= 2 and best[w] >= ATTRIBUTE_SHARE * n)
    topic = frozenset(
        w for w, n in said.items() if n >= 2 and w not in attribute and len(spread[w]) <= TOPIC_SPREAD * n
    )
    return Roles(attribute, topic)


@dataclass
class Profiles:
    """The names each attribute word is said with (`value_profiles`), and how alike two sets of words are by them."""

    of: dict[str, Counter[str]]

    def likeness(self, a: frozenset[str], b: frozenset[str]) -> float:
        """The cosine of the names said with the words of `a` and those said with the words of `b` (0 when either
        side was never said with a name)."""
        left, right = Counter[str](), Counter[str]()
        for words, into in ((a, left), (b, right)):
            for word in sorted(words):
                into.update(self.of.get(word, {}))
        if not left or not right:
            return 0.0
        dot = math.fsum(n * right[w] for w, n in sorted(left.items()) if w in right)
        norm = math.sqrt(math.fsum(n * n for n in left.values()) * math.fsum(n * n for n in right.values()))
        return dot / norm


def value_profiles(turns: Sequence[Turn], attribute: frozenset[str], recurring: Callable[[str], bool]) -> Profiles:
    """Each attribute word -> the words of the names stated with it over `turns` (`_stated`: said as values, or
    too rare to be a goal's): the attribute in other words shows by its values ("the hotel" and "the place we're
    staying" are said with Villa Mar, Casa Rosa and Residencia Sol; "the dinner spot" with Bistro Nova and Tasca
    Marina)."""
    profiles: dict[str, Counter[str]] = {}
    for turn in turns:
        assert turn.statement is not None
        words = turn.statement.frame & attribute
        if not words:
            continue
        said = [w for name in _stated(turn.statement, recurring).get("name", ()) for w in name.split()]
        for word in words if said else ():
            profiles.setdefault(word, Counter()).update(said)
    return Profiles(profiles)


def topics_in_focus(
    turns: Sequence[Turn], goals: dict[int, frozenset[str]], topic: frozenset[str]
) -> dict[int, frozenset[str]]:
    """The topic nouns of each turn, its own or, when it says none, those carried forward from the turns before it
    about the same goal (the thematic scope): "And the catering? 175 euros." after "Maria's farewell party"."""
    out: dict[int, frozenset[str]] = {}
    anchors: frozenset[str] | None = None
    focus: frozenset[str] = frozenset()
    for i, turn in enumerate(turns):
        assert turn.statement is not None
        own = turn.statement.frame & topic
        goal = goals.get(i, frozenset())
        if goal != anchors:
            anchors, focus = goal, own
        elif own:
            focus = own
        out[i] = focus
    return out


def chains(
    turns: Sequence[Turn],
    candidates: Sequence[int],
    recurring: Callable[[str], bool],
    min_frame: float = MIN_FRAME,
    same_values_at: float = SAME_VALUES,
) -> dict[int, int]:
    """For `turns` in conversation order and the indexes of the candidate turns among them: each superseded
    candidate -> the candidate that holds its current value (the latest of its chain). Turns that are not
    candidates serve only as context: the goal in focus that an anchorless candidate inherits, and the names each
    attribute word is said with: two names replace each other also when the words their frames do not share are
    said with the same names (`Profiles.likeness` at least `same_values_at`; 0 = off)."""
    recurring = remembered(recurring)
    goals = goals_in_focus(turns, candidates, recurring)
    frequency: Counter[str] = Counter()
    for turn in turns:
        if turn.statement:
            frequency.update(turn.statement.frame)

    size = len(turns)
    weights = {word: math.log(1 + size / (1 + count)) for word, count in frequency.items()}  # every frame's words
    weight = weights.__getitem__
    sums: dict[frozenset[str], float] = {}  # each frame's weight, summed once

    def same_frame(a: frozenset[str], b: frozenset[str], kind: str) -> bool:  # `frame_overlap`, sums kept
        shared = a & b
        if not shared and min_frame > 0:  # every weight is positive: no shared word, no overlap
            return False
        for frame in (a, b):
            if frame not in sums:
                sums[frame] = _sum(frame, weight)
        part = _sum(shared, weight)
        # the overlap from each frame's sum: exact to ~1e-15, so it decides unless it is that close to the threshold
        near = sums[a] + sums[b] - part if FRAME_MEASURE == "union" else min(sums[a], sums[b])
        if near > 0 and abs(part / near - min_frame) > 1e-9:
            return part / near >= min_frame
        whole = _sum(a | b, weight) if FRAME_MEASURE == "union" else min(sums[a], sums[b])
        return whole > 0 and part / whole >= min_frame

    order = sorted(goals)
    stated = {i: _stated(turns[i].statement, recurring) for i in order}  # type: ignore[arg-type]
    kinds = {i: frozenset(stated[i]) for i in order}
    quoting = _quoting(turns, order, stated, recurring)
    known: list[tuple[frozenset[str], Profiles, dict[int, frozenset[str]]]] = []  # read when first needed

    def same_values(i: int, j: int) -> bool:
        """The attribute in other words: each says a name where a value stands (`Statement.said`), `j` says a
        value was replaced ("moved", "instead", "update"; "now" or "new" are said of values that stand), the two
        are about no different topics (`topics_in_focus`) and the words their frames do not share are said with
        the same names."""
        earlier, later = turns[i].statement, turns[j].statement
        if not 0 < same_values_at <= 1 or not earlier or not later or not later.revises:
            return False
        if not earlier.said or not later.said:  # each says a name where a value stands ("the lead is Nico")
            return False
        if not known:
            every = goals_in_focus(turns, range(len(turns)), recurring)
            roles = word_roles(turns, every, recurring)
            topics = topics_in_focus(turns, every, roles.topic)
            known.append((roles.attribute, value_profiles(turns, roles.attribute, recurring), topics))
        attribute, profiles, topics = known[0]
        if (topics[i] - topics[j]) and (topics[j] - topics[i]):
            return False
        a, b = earlier.frame, later.frame
        return profiles.likeness((a - b) & attribute, (b - a) & attribute) >= same_values_at

    same_goal: dict[tuple[frozenset[str], frozenset[str]], bool] = {}  # candidates share a few goals
    replaced: dict[int, int] = {}
    for a, i in enumerate(order):
        old = turns[i].statement
        assert old is not None
        if not kinds[i]:
            continue
        for j in order[a + 1 :]:
            if not kinds[i] & kinds[j]:  # no kind of value both state: nothing of `i` can be replaced by `j`
                continue
            key = (goals[i], goals[j])
            if key not in same_goal:
                same_goal[key] = compatible(*key)
            new = turns[j].statement
            assert new is not None

            def overlap(kind: str, i: int = i, j: int = j) -> bool:
                frames = turns[i].statement.frame, turns[j].statement.frame  # type: ignore[union-attr]
                return same_frame(*frames, kind) or (kind == "name" and same_values(i, j))

            if (same_goal[key] or quoting.get(j) == i) and _replaces(new, stated[j], stated[i], overlap):
                replaced[i] = j
    return follow(replaced)


def _quoting(
    turns: Sequence[Turn],
    order: list[int],
    stated: dict[int, dict[str, frozenset[str]]],
    recurring: Callable[[str], bool],
) -> dict[int, int]:
    """Each candidate that names no goal of its own but quotes a value as the one it replaces ("Forget 5:45 pm,
    it's 8:15 pm now.") -> the latest earlier candidate that stated that value, when no turn between them (a
    candidate or not) stated it: it continues that goal whatever goal the turns just before it were about."""
    inside = frozenset(w for turn in turns if turn.statement for n in turn.statement.names for w in n.split())

    def states(k: int, quoted: frozenset[tuple[str, str]]) -> bool:
        said = turns[k].statement
        return said is not None and any(value in said.values.get(kind, ()) for kind, value in quoted)

    out: dict[int, int] = {}
    for b, j in enumerate(order):
        later = turns[j].statement
        if later is None or not later.replaced or later.anchors(recurring, inside):
            continue
        for i in reversed(order[:b]):
            if any(value in stated[i].get(kind, ()) for kind, value in later.replaced):
                if not any(states(k, later.replaced) for k in range(i + 1, j)):
                    out[j] = i
                break
    return out


def revised_near(
    turns: Sequence[Turn],
    candidates: Sequence[int],
    recurring: Callable[[str], bool],
    name_frame: float = NEAR_FRAME,
) -> dict[int, int]:
    """`chains` for the few candidates a search ranks first (`revise_near`), on looser terms: the question picked them
    for the goal and attribute it asks. A later candidate that says a change word replaces an earlier one when
    their goals are compatible, they name no different topics (`topics_in_focus`: "the desk lamp for Nico" against
    "the tablet for Nico"), it states every kind of value the earlier one states, and it either quotes the earlier
    value as the old one or states another amount, time, date or count of a kind the earlier one states, however
    it words the attribute ("the room rate" against "the price per night": one amount of its kind for a goal and
    topic). A name replaces a name only when the two turns share a word and their attribute words (`word_roles`)
    overlap by at least `name_frame` (Jaccard) or one of them says none ("hotel" against "restaurant" do not)."""
    recurring = remembered(recurring)
    order = sorted(i for i in set(candidates) if 0 <= i < len(turns))
    said: dict[int, Statement] = {}
    for i in order:
        if turns[i].statement is None:
            turns[i].statement = read_statement(turns[i].text)
        said[i] = turns[i].statement  # type: ignore[assignment]
    stated = {i: _stated(said[i], recurring) for i in order}

    def share_a_word(i: int, j: int) -> Callable[[str], bool]:  # what ties two names together
        return lambda kind: kind != "name" or bool(said[i].frame & said[j].frame)

    pairs = [
        (i, j)
        for a, i in enumerate(order)
        for j in order[a + 1 :]
        if said[j].changes
        and stated[i].keys() <= stated[j].keys()  # "X (200 euros) or Y (100 euros)": a new price is no new choice
        and _replaces(said[j], stated[j], stated[i], share_a_word(i, j))
    ]
    if not pairs:  # most searches: no later candidate restates an earlier one's value with a change word
        return {}
    goals = goals_in_focus(turns, range(len(turns)), recurring)
    roles = word_roles(turns, goals, recurring)
    topic = topics_in_focus(turns, goals, roles.topic)

    def same_attribute(i: int, j: int) -> Callable[[str], bool]:
        def test(kind: str) -> bool:
            if not share_a_word(i, j)(kind):
                return False
            if kind != "name":  # an amount, a time, a date, a count: one of its kind for a goal and topic
                return True
            a, b = said[i].frame & roles.attribute, said[j].frame & roles.attribute
            return not a or not b or len(a & b) / len(a | b) >= name_frame

        return test

    replaced: dict[int, int] = {}
    for i, j in pairs:
        if not compatible(goals[i], goals[j]) or ((topic[i] - topic[j]) and (topic[j] - topic[i])):
            continue
        if _replaces(said[j], stated[j], stated[i], same_attribute(i, j)):
            replaced[i] = j
    return follow(replaced)


def remembered(recurring: Callable[[str], bool]) -> Callable[[str], bool]:
    """`recurring` with each word's answer kept for one call of `chains`: the goals, the words' roles and the
    stated values ask about the same few names thousands of times."""
    seen: dict[str, bool] = {}

    def test(word: str) -> bool:
        found = seen.get(word)
        if found is None:
            found = seen[word] = recurring(word)
        return found

    return test


def follow(replaced: dict[int, int]) -> dict[int, int]:
    """Each replaced turn -> the turn holding its current value, following "i is replaced by j" to its end."""
    out: dict[int, int] = {}
    for i in replaced:
        j, seen = replaced[i], {i}
        while j in replaced and j not in seen:
            seen.add(j)
            j = replaced[j]
        out[i] = j
    return out


__all__ = [
    "CHANGE_WORDS",
    "MIN_FRAME",
    "RECURRING",
    "Profiles",
    "Roles",
    "Statement",
    "Turn",
    "asks_past",
    "chains",
    "compatible",
    "follow",
    "frame_overlap",
    "goals_in_focus",
    "named_elsewhere",
    "other_goal",
    "read_statement",
    "revised_near",
    "supersedes",
    "topics_in_focus",
    "value_profiles",
    "word_roles",
]
