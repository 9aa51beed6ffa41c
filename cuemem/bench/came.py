"""Look-alike conversations in the manner of CAME-Bench (issue 27): a symbolic planner interleaves goals whose
attributes take look-alike values, revises them and refers back without naming; templates give the surface text;
the plan is replayed for exact ground truth.

STITCH's own benchmark is out of reach here, and LoCoMo rarely asks what contextual intent is for: many goals at
once ("Day 2 of the Lisbon trip" beside "Day 2 of the Porto trip"), values that change ("make it Casa Mar
instead") and references that do not name their object ("take the cheaper one"). `generate` writes such
conversations in the LoCoMo format, so every reader, `cuemem bench`, `cuemem import` and the server load them.

- **Plan.** Goals come in groups (the days of one trip, the projects of one client, the gifts for one person, one
  person's treatments, the events one person hosts); each goal has four attributes (a place, an amount of money, a
  time or date, a person or a count) drawn from pools shared across goals, so values look alike. Three goals
  are open at a time and the planner moves between them; revisions of earlier goals come back much later.
- **Acts.** `open` names a goal; `state` gives a value (naming the goal, or not when it is the one in focus);
  `options` + `decide` give two candidates and pick one by reference ("the cheaper one", "the second"); `revise`
  replaces a value (sometimes by quoting only the old value: "scrap Casa Azul, we go with Villa Mar"); `aside`
  and `ack` are small talk. A speaker often takes several turns in a row.
- **Questions** (`CATEGORIES`): `revision` (a value changed at least once: what is it now), `recall` (a value,
  naming its goal by a phrase other than the statement's), `multi-hop` (one attribute of the goal picked by
  another attribute's value), `synthesis` (a group's total of money or counts). Each carries the answer, the
  evidence (the turns that hold the current value), the superseded turns and the look-alike turns (the same
  attribute of other goals), so a report can say which wrong turn an engine preferred.
- **Determinism.** One `random.Random` per (size, seed); the file is byte-identical per seed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GENERATOR = "came-4"
SIZES = {"S": 8, "M": 48, "L": 136}  # goals per conversation: turns come out about 1x / 6x / 17x
CATEGORIES = ("revision", "recall", "multi-hop", "synthesis")
OPEN_GOALS = 3  # goals in play at once: the planner interleaves them
STAY = 0.55  # chance that the next act stays on the goal in focus
SAME_SPEAKER = 0.45  # chance that a speaker goes on (dialogue is not turn-taking)
REVISE = 0.4  # chance that a stated value is revised later (again with half that chance)
CHOICE = 0.35  # chance that a place is settled by two options and a reference to one of them
SMALL_TALK = 0.18  # chance of small talk between acts

# ------------------------------------------------------------------------------------------------ vocabularies
CITIES = [
    "Lisbon",
    "Porto",
    "Seville",
    "Valencia",
    "Bologna",
    "Verona",
    "Lyon",
    "Nantes",
    "Ghent",
    "Bruges",
    "Krakow",
    "Gdansk",
]
CLIENTS = [
    "Northwind",
    "Bluefin",
    "Redwood",
    "Ironbark",
    "Silverline",
    "Greenleaf",
    "Harbor",
    "Summit",
    "Oakridge",
    "Brightwater",
    "Keystone",
    "Lighthouse",
    "Westwind",
    "Copperfield",
    "Stonebridge",
    "Maplewood",
]
CODES = [
    "Atlas",
    "Apollo",
    "Aurora",
    "Orion",
    "Falcon",
    "Phoenix",
    "Delta",
    "Nova",
    "Zephyr",
    "Comet",
    "Vega",
    "Titan",
    "Helios",
    "Meridian",
    "Polaris",
    "Quartz",
]
PEOPLE = [
    "Ana",
    "Anna",
    "Marta",
    "Marco",
    "Mario",
    "Maria",
    "Bruno",
    "Bruna",
    "Lena",
    "Leon",
    "Nina",
    "Nico",
    "Sara",
    "Sam",
    "Tomas",
    "Tom",
    "Irene",
    "Ines",
    "Paulo",
    "Paula",
    "Rui",
    "Rita",
    "Hugo",
    "Hana",
    "Eva",
    "Elias",
    "Clara",
    "Carl",
    "Dora",
    "Dario",
]
SPEAKERS = ["Maya", "Jonas", "Priya", "Theo", "Greta", "Omar", "Lucia", "Felix"]
ITEMS = [
    "headphones",
    "desk lamp",
    "backpack",
    "coffee grinder",
    "rain jacket",
    "watch",
    "tablet",
    "speaker",
    "yoga mat",
    "camera bag",
    "kettle",
    "board game",
]
THERAPIES = ["physio", "dental", "eye care", "allergy", "dermatology", "nutrition"]
EVENTS = ["birthday dinner", "farewell party", "book club night", "game night", "housewarming", "garden brunch"]
HOTELS = [
    f"{a} {b}"
    for a in ("Casa", "Villa", "Hotel", "Quinta", "Pension", "Residencia")
    for b in ("Azul", "Mar", "Sol", "Verde", "Alta", "Luz", "Rosa", "Norte")
]
RESTAURANTS = [
    f"{a} {b}"
    for a in ("Tasca", "Cantina", "Bistro", "Taberna", "Osteria")
    for b in ("Rosa", "Marina", "do Largo", "Central", "Nova", "da Praia", "Antiga")
]
VENUES = [
    f"{a} {b}"
    for a in ("Garden", "River", "Old Mill", "Harbour", "Lantern", "Corner")
    for b in ("Room", "Hall", "Terrace", "Loft", "Club")
]
SHOPS = [
    f"{a} {b}"
    for a in ("Tech", "Home", "City", "Smart", "Urban")
    for b in ("Corner", "Depot", "Hub", "Store", "Market")
]
CLINICS = [
    f"{a} {b}"
    for a in ("Riverside", "Parkview", "Hillside", "Lakeside", "Central", "Westgate")
    for b in ("Clinic", "Health Centre", "Practice")
]
TIMES = [
    f"{h}:{m} {ap}"
    for ap, hours in (("am", (8, 9, 10, 11)), ("pm", (1, 2, 3, 4, 5, 6, 7, 8)))
    for h in hours
    for m in ("00", "15", "30", "45")
]
MONTHS = ["March", "April", "May", "June"]
DATES = [f"{m} {d}" for m in MONTHS for d in (2, 3, 5, 8, 12, 13, 15, 18, 21, 23, 25, 28)]


@dataclass(frozen=True)
class Attribute:
    """One attribute of a goal kind: its value type and pool, and the nouns that name it in statements and (other
    ones) in questions, so that a question does not share the statement's words."""

    name: str
    kind: str  # place, money, time, date, person, count
    pool: tuple[Any, ...]
    said: tuple[str, ...]  # nouns in statements
    asked: tuple[str, ...]  # nouns in questions
    unit: str = ""  # a count's unit ("guests")


def _money(lo: int, hi: int, step: int) -> tuple[int, ...]:
    return tuple(range(lo, hi + 1, step))


KINDS: dict[str, tuple[Attribute, ...]] = {
    "trip": (
        Attribute(
            "hotel",
            "place",
            tuple(HOTELS),
            ("hotel", "place we're staying", "accommodation"),
            ("lodging", "bed for the night", "overnight stay"),
        ),
        Attribute(
            "room rate",
            "money",
            _money(90, 260, 10),
            ("room rate", "nightly rate", "price per night"),
            ("daily lodging cost", "cost of a day's lodging"),
        ),
        Attribute(
            "dinner",
            "place",
            tuple(RESTAURANTS),
            ("dinner reservation", "dinner spot", "restaurant"),
            ("place we eat in the evening", "evening meal booking"),
        ),
        Attribute(
            "tour time",
            "time",
            tuple(TIMES),
            ("walking tour", "tour start", "guided tour"),
            ("time the sightseeing walk begins", "hour of the sightseeing walk"),
        ),
    ),
    "project": (
        Attribute(
            "budget",
            "money",
            _money(1000, 9000, 250),
            ("budget", "spending cap", "money we have"),
            ("funding", "amount allotted"),
        ),
        Attribute(
            "deadline", "date", tuple(DATES), ("deadline", "due date", "delivery date"), ("finish-by day", "cut-off")
        ),
        Attribute(
            "lead", "person", tuple(PEOPLE), ("lead", "person in charge", "owner"), ("manager", "one running it")
        ),
        Attribute(
            "review",
            "time",
            tuple(TIMES),
            ("review meeting", "weekly check-in", "status call"),
            ("progress sync hour", "sync slot"),
        ),
    ),
    "gift": (
        Attribute("price", "money", _money(20, 300, 5), ("price", "cost", "damage"), ("amount we pay", "sum we spend")),
        Attribute("shop", "place", tuple(SHOPS), ("shop", "store", "seller"), ("retailer", "place we buy it from")),
        Attribute(
            "delivery",
            "date",
            tuple(DATES),
            ("delivery", "arrival date", "shipping date"),
            ("expected drop-off", "day it reaches us"),
        ),
        Attribute(
            "wrapping",
            "person",
            tuple(PEOPLE),
            ("person wrapping it", "wrapper"),
            ("gift packer", "packing helper"),
        ),
    ),
    "treatment": (
        Attribute(
            "clinic", "place", tuple(CLINICS), ("clinic", "practice", "centre"), ("medical office", "treatment site")
        ),
        Attribute(
            "appointment",
            "time",
            tuple(TIMES),
            ("appointment", "slot", "session time"),
            ("time of the visit", "booked hour"),
        ),
        Attribute(
            "sessions",
            "count",
            tuple(range(3, 15)),
            ("number of sessions", "session count", "visits"),
            ("course length", "total of planned treatments"),
            unit="sessions",
        ),
        Attribute(
            "copay",
            "money",
            _money(15, 95, 5),
            ("copay", "co-payment", "out-of-pocket fee"),
            ("share we pay ourselves", "patient charge"),
        ),
    ),
    "event": (
        Attribute(
            "venue", "place", tuple(VENUES), ("venue", "location", "room we booked"), ("place it is held", "site")
        ),
        Attribute(
            "start", "time", tuple(TIMES), ("start time", "kick-off", "doors"), ("hour it begins", "starting hour")
        ),
        Attribute(
            "guests",
            "count",
            tuple(range(6, 41)),
            ("guest count", "headcount", "number of guests"),
            ("attendance", "expected turnout"),
            unit="guests",
        ),
        Attribute(
            "catering",
            "money",
            _money(100, 900, 25),
            ("catering budget", "food budget", "catering"),
            ("money for meals", "cost of the meals"),
        ),
    ),
}
KIND_NOUN = {"trip": "day", "project": "project", "gift": "gift", "treatment": "treatment", "event": "event"}


@dataclass
class Goal:
    id: str  # "g3"
    kind: str
    group: str  # "the Lisbon trip"
    names: tuple[str, ...]  # full name first, then shorter ones, all naming only this goal
    attributes: tuple[Attribute, ...]


def render(attr: Attribute, value: Any) -> str:
    """A value as statements and answers write it."""
    if attr.kind == "money":
        return f"{value} euros"
    if attr.kind == "count":
        return str(value)
    return str(value)


def _ordinal(n: int) -> str:
    return ["first", "second", "third", "fourth", "fifth"][n - 1]


def make_goals(rng: random.Random, count: int) -> list[Goal]:
    """`count` goals in groups of 2-4 of one kind; kinds rotate so every size holds every kind, and names repeat
    across groups (Day 2 of two trips, headphones for two people) so that goals look alike too."""
    goals: list[Goal] = []
    used: set[str] = set()
    kinds = list(KINDS)
    cities, clients, people = rng.sample(CITIES, len(CITIES)), rng.sample(CLIENTS, len(CLIENTS)), PEOPLE[:]
    rng.shuffle(people)
    turn = 0
    while len(goals) < count:
        if turn > 50 * count:  # every name combination used: cannot happen for SIZES, guards a larger count
            raise ValueError(f"cannot make {count} distinct goals")
        kind, rounds = kinds[turn % len(kinds)], turn // len(kinds)
        turn += 1
        size = min(rng.randint(2, 4 if kind == "trip" else 3), count - len(goals))
        if size < 1:
            break
        members: list[tuple[str, ...]] = []
        if kind == "trip":
            city = cities[rounds % len(cities)]
            group = f"the {city} trip"
            if group in used:
                group = f"the second {city} trip"
            for d in range(1, size + 1):
                trip = group.removeprefix("the ")
                members.append(
                    (
                        f"Day {d} of {group}",
                        f"{trip.removesuffix(' trip')} day {d}",
                        f"the {_ordinal(d)} day of {group}",
                    )
                )
        elif kind == "project":
            client = clients[rounds % len(clients)]
            group = f"the {client} projects"
            for code in rng.sample(CODES, size):
                members.append((f"project {code} for {client}", f"the {client} {code} project"))
        elif kind == "gift":
            person = people[rounds % len(people)]
            group = f"the gifts for {person}"
            for item in rng.sample(ITEMS, size):
                members.append((f"the {item} for {person}", f"{person}'s {item}"))
        elif kind == "treatment":
            person = people[(rounds + 7) % len(people)]
            group = f"{person}'s treatments"
            for therapy in rng.sample(THERAPIES, size):
                members.append((f"{person}'s {therapy} plan", f"the {therapy} plan for {person}"))
        else:
            person = people[(rounds + 13) % len(people)]
            group = f"the events {person} is hosting"
            for event in rng.sample(EVENTS, size):
                members.append((f"{person}'s {event}", f"the {event} {person} is hosting"))
        if group in used or any(m[0] in used for m in members):
            continue
        used.add(group)
        for names in members:
            used.add(names[0])
            goals.append(Goal(f"g{len(goals) + 1}", kind, group, names, KINDS[kind]))
    return goals


# ------------------------------------------------------------------------------------------------ surface text
OPEN = [
    "Let's sort out {goal}.",
    "Okay, switching to {goal}.",
    "Now, about {goal}.",
    "Can we do {goal} for a minute?",
    "Next on my list: {goal}.",
    "Right, {goal} — where were we?",
    "I want to get {goal} settled today.",
]
STATE = [
    "{ref}, the {noun} is {value}.",
    "The {noun} {for_ref} is {value}.",
    "{value} — that's the {noun} {for_ref}.",
    "I've set the {noun} {for_ref}: {value}.",
    "Put down {value} as the {noun} {for_ref}.",
    "Noting it down: {noun} {for_ref}, {value}.",
    "{value} it is, for the {noun} {for_ref}.",
    "So {for_ref} we have {value} as the {noun}.",
    "Confirmed with them: {value} for the {noun} {for_ref}.",
]
STATE_FOCUS = [
    "The {noun} is {value}.",
    "{value} for the {noun}, then.",
    "And the {noun}? {value}.",
    "Book it: {value} as the {noun}.",
    "For that one the {noun} is {value}.",
    "There, the {noun} will be {value}.",
]
OPTIONS = [
    "For the {noun} {for_ref} we could do {a} at {pa} euros or {b} at {pb} euros.",
    "Two candidates for the {noun} {for_ref}: {a} ({pa} euros) and {b} ({pb} euros).",
    "{a} costs {pa} euros, {b} costs {pb} euros — which {noun} {for_ref}?",
]
DECIDE = {
    "cheaper": ["Let's take the cheaper one.", "The cheaper one, book it.", "Go for the less expensive one."],
    "pricier": ["Take the more expensive one, it's worth it.", "The pricier one — book it."],
    "first": ["The first one sounds better, book it.", "Let's go with the first."],
    "second": ["Book the second.", "I prefer the second option, go with that."],
}
REVISE_NAMED = [
    "Change of plan {for_ref}: the {noun} is now {new} instead of {old}.",
    "Update {for_ref}: make the {noun} {new}.",
    "{new}, not {old}, for the {noun} {for_ref} — they changed it.",
    "Going back to {ref}: the {noun} moved to {new}.",
    "Small correction on {ref}, the {noun} is {new} now.",
]
REVISE_BY_VALUE = [
    "Actually, scrap {old}; we're going with {new}.",
    "Forget {old}, it's {new} now.",
    "{old} fell through, so {new} instead.",
]
ASIDE = [
    "How was your weekend, by the way?",
    "It was lovely, we walked by the river.",
    "Did you see the match?",
    "I'm so tired today, the neighbours were loud.",
    "Remind me to water the plants.",
    "The coffee machine at work broke again.",
    "My sister says hi.",
    "It's raining again here.",
    "Have you finished that novel yet?",
    "Almost, two chapters left.",
    "I need a holiday from planning.",
    "The cat knocked my phone off the table this morning.",
    "We should try that bakery on the corner.",
    "My knee is better, thanks for asking.",
    "Traffic was awful this morning.",
    "I found an old photo of us from school.",
    "Let me grab a tea first.",
    "Back, sorry.",
]
ACK = ["Okay.", "Sounds good.", "Great, noted.", "Perfect.", "Got it.", "Fine by me.", "Sure.", "Works for me."]
Q_RECALL = [
    "What is the {noun} for {ref}?",
    "Remind me, what {noun} did we settle on for {ref}?",
    "For {ref}, which {noun} is it?",
    "What did we decide as the {noun} of {ref}?",
]
Q_REVISION = [
    "After all the changes, what is the {noun} for {ref} now?",
    "What's the latest {noun} for {ref}?",
    "It changed at some point — what {noun} is {ref} on now?",
]
Q_MULTIHOP = [
    "What is the {noun2} for the {kind} whose {noun1} is {value}?",
    "For the {kind} with {value} as its {noun1}, what's the {noun2}?",
]
Q_SYNTHESIS = {
    "money": [
        "What does the {noun} come to in total across {group}?",
        "Adding up {group}, how much is the {noun} altogether?",
    ],
    "count": ["How many {unit} in total across {group}?", "Adding up {group}, what is the total {noun}?"],
}
DATES_OF_SESSIONS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# ------------------------------------------------------------------------------------------------ the planner
@dataclass
class Task:
    goal: Goal
    attr: Attribute
    revision: bool = False


@dataclass
class Planner:
    """Turns goals into a stream of acts and their surface text, keeping the world state as it goes."""

    rng: random.Random
    goals: list[Goal]
    speakers: tuple[str, str]
    acts: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    focus: str | None = None
    speaker: int = 0
    mentioned: dict[tuple[str, str], list[Any]] = field(default_factory=dict)  # every value said, per (goal, attr)
    current: dict[tuple[str, str], Any] = field(default_factory=dict)

    def say(self, text: str, act: dict[str, Any]) -> str:
        """One turn: the speaker goes on with SAME_SPEAKER's chance, else the other one speaks."""
        if self.turns and self.rng.random() >= SAME_SPEAKER:
            self.speaker = 1 - self.speaker
        tid = f"t{len(self.turns)}"
        self.turns.append({"id": tid, "speaker": self.speakers[self.speaker], "text": _capital(text)})
        self.acts.append({"turn": tid, **act})
        return tid

    def refer(self, goal: Goal) -> tuple[str, str, bool]:
        """(reference, "for" phrase, anaphoric): the goal named (full or short) or, when it is in focus, often
        not named at all."""
        if self.focus == goal.id and self.rng.random() < 0.5:
            return "", "", True
        name = goal.names[0] if self.rng.random() < 0.5 else self.rng.choice(goal.names)
        return name, f"for {name}", False

    def open(self, goal: Goal) -> None:
        self.say(self.rng.choice(OPEN).format(goal=goal.names[0]), {"act": "open", "goal": goal.id})
        self.focus = goal.id

    def aside(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self.say(self.rng.choice(ASIDE), {"act": "aside"})

    def fresh(self, goal: Goal, attr: Attribute) -> Any:
        """A value this (goal, attribute) never had, and never a name the goal's own names hold (the wrapper of
        Bruna's gift is not Bruna), so that no earlier turn can answer for the new value."""
        said = self.mentioned.get((goal.id, attr.name), [])
        names = " ".join(goal.names)
        return self.rng.choice(
            [v for v in attr.pool if v not in said and not re.search(rf"\b{re.escape(str(v))}\b", names)]
        )

    def state(self, goal: Goal, attr: Attribute) -> None:
        value = self.fresh(goal, attr)
        if attr.kind == "place" and self.rng.random() < CHOICE:
            self.choose(goal, attr, value)
            return
        ref, for_ref, anaphoric = self.refer(goal)
        noun = self.rng.choice(attr.said)
        if anaphoric:
            text = self.rng.choice(STATE_FOCUS).format(noun=noun, value=render(attr, value))
        else:
            text = self.rng.choice(STATE).format(ref=ref, for_ref=for_ref, noun=noun, value=render(attr, value))
        self.say(text, {"act": "state", "goal": goal.id, "attr": attr.name, "value": value, "named": not anaphoric})
        self._set(goal, attr, value)
        self.focus = goal.id

    def choose(self, goal: Goal, attr: Attribute, value: Any) -> None:
        """Two candidates with prices, then a pick by reference: cheaper / pricier / first / second."""
        said = self.mentioned.get((goal.id, attr.name), [])
        other = self.rng.choice([v for v in attr.pool if v not in said and v != value])
        prices = self.rng.sample(range(60, 400, 10), 2)
        pick = self.rng.choice(list(DECIDE))
        options = [value, other]
        cheaper = 0 if prices[0] < prices[1] else 1
        chosen = {"cheaper": cheaper, "pricier": 1 - cheaper, "first": 0, "second": 1}[pick]
        if chosen == 1:  # keep `value` the pick: swap the options' order (and prices) instead
            options.reverse()
            prices.reverse()
        _, for_ref, anaphoric = self.refer(goal)
        noun = self.rng.choice(attr.said)
        text = self.rng.choice(OPTIONS).format(
            noun=noun, for_ref=for_ref, a=options[0], b=options[1], pa=prices[0], pb=prices[1]
        )
        text = re.sub(r"\s+([?.:,])", r"\1", text).replace("  ", " ")
        self.say(
            text,
            {
                "act": "options",
                "goal": goal.id,
                "attr": attr.name,
                "options": options,
                "prices": prices,
                "named": not anaphoric,
            },
        )
        self.focus = goal.id
        if self.rng.random() < 0.3:
            self.say(self.rng.choice(ASIDE), {"act": "aside"})
        self.say(self.rng.choice(DECIDE[pick]), {"act": "decide", "goal": goal.id, "attr": attr.name, "pick": pick})
        for v in options:  # both candidates were said: a later revision picks neither
            self.mentioned.setdefault((goal.id, attr.name), []).append(v)
        self.current[(goal.id, attr.name)] = value

    def revise(self, goal: Goal, attr: Attribute) -> None:
        old = self.current[(goal.id, attr.name)]
        new = self.fresh(goal, attr)
        holders = [k for k, v in self.current.items() if k[1] == attr.name and v == old]
        noun = self.rng.choice(attr.said)
        if len(holders) == 1 and self.focus == goal.id and self.rng.random() < 0.4:
            text = self.rng.choice(REVISE_BY_VALUE).format(old=render(attr, old), new=render(attr, new))
            named = False
        else:
            name = self.rng.choice(goal.names)
            text = self.rng.choice(REVISE_NAMED).format(
                ref=name, for_ref=f"for {name}", noun=noun, old=render(attr, old), new=render(attr, new)
            )
            named = True
        self.say(text, {"act": "revise", "goal": goal.id, "attr": attr.name, "value": new, "old": old, "named": named})
        self._set(goal, attr, new)
        self.focus = goal.id

    def _set(self, goal: Goal, attr: Attribute, value: Any) -> None:
        self.mentioned.setdefault((goal.id, attr.name), []).append(value)
        self.current[(goal.id, attr.name)] = value

    def run(self) -> None:
        """Open goals OPEN_GOALS at a time; each act picks a goal (staying in focus with STAY's chance) and does
        its next task; a stated value is queued for revision with REVISE's chance, to come back later."""
        waiting = list(self.goals)
        tasks: dict[str, list[Task]] = {}
        active: list[Goal] = []
        later: list[Task] = []
        while waiting or active or later:
            while len(active) < OPEN_GOALS and waiting:
                goal = waiting.pop(0)
                attrs = list(goal.attributes)
                self.rng.shuffle(attrs)
                tasks[goal.id] = [Task(goal, a) for a in attrs]
                active.append(goal)
            if self.rng.random() < SMALL_TALK:
                self.aside()
            if later and (not active or self.rng.random() < 0.15):
                task = later.pop(self.rng.randrange(len(later)))
                self.revise(task.goal, task.attr)
                if self.rng.random() < REVISE / 2:
                    later.append(task)
                continue
            if not active:
                continue
            focus = next((g for g in active if g.id == self.focus), None)
            goal = focus if focus is not None and self.rng.random() < STAY else self.rng.choice(active)
            if goal.id != self.focus and self.rng.random() < 0.6:
                self.open(goal)
            task = tasks[goal.id].pop(0)
            if task.revision:
                self.revise(goal, task.attr)
            else:
                self.state(goal, task.attr)
                if self.rng.random() < REVISE:
                    if self.rng.random() < 0.5:
                        tasks[goal.id].append(Task(goal, task.attr, revision=True))  # soon, same goal
                    else:
                        later.append(Task(goal, task.attr, revision=True))  # much later
            if self.rng.random() < 0.35:
                self.say(self.rng.choice(ACK), {"act": "ack"})
            if not tasks[goal.id]:
                active.remove(goal)


# ------------------------------------------------------------------------------------------------ ground truth
def replay(acts: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[Any, list[str]]]]:
    """Replay a plan: for each (goal, attribute), every value it took in order, with the turns that hold it (a
    decision holds its value with the options it picked from). The ground truth is read off this."""
    history: dict[tuple[str, str], list[tuple[Any, list[str]]]] = {}
    pending: dict[tuple[str, str], dict[str, Any]] = {}
    for act in acts:
        kind = act["act"]
        if kind in ("state", "revise"):
            history.setdefault((act["goal"], act["attr"]), []).append((act["value"], [act["turn"]]))
        elif kind == "options":
            pending[(act["goal"], act["attr"])] = act
        elif kind == "decide":
            options = pending.pop((act["goal"], act["attr"]))
            prices = options["prices"]
            cheaper = 0 if prices[0] < prices[1] else 1
            index = {"cheaper": cheaper, "pricier": 1 - cheaper, "first": 0, "second": 1}[act["pick"]]
            value = options["options"][index]
            history.setdefault((act["goal"], act["attr"]), []).append((value, [options["turn"], act["turn"]]))
    return history


def _sessions(rng: random.Random, turns: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Cut the turns into sessions of 12-30 turns, dated a few days apart (LoCoMo's date format)."""
    out = []
    day, month, year = rng.randint(1, 20), rng.randrange(12), 2023
    i = 0
    while i < len(turns):
        n = rng.randint(12, 30)
        hour, minute = rng.randint(8, 21), rng.randrange(0, 60)
        clock = f"{(hour - 1) % 12 + 1}:{minute:02d} {'am' if hour < 12 else 'pm'}"
        out.append((f"{clock} on {day} {DATES_OF_SESSIONS[month]}, {year}", turns[i : i + n]))
        i += n
        day += rng.randint(1, 4)
        if day > 28:
            day -= 28
            month += 1
            if month == 12:
                month, year = 0, year + 1
    return out


def _questions(rng: random.Random, goals: list[Goal], history: dict, dia: dict[str, str]) -> list[dict[str, Any]]:
    """The four question types, with answers, evidence (current value's turns), superseded and look-alike turns."""
    by_id = {g.id: g for g in goals}
    attr_of = {(g.id, a.name): a for g in goals for a in g.attributes}
    out: list[dict[str, Any]] = []

    def turns_of(key: tuple[str, str], which: str) -> list[str]:
        values = history[key]
        chosen = values[-1:] if which == "current" else values[:-1]
        return [dia[t] for _, ts in chosen for t in ts]

    def lookalikes(key: tuple[str, str], kind: str) -> list[str]:
        ids: list[str] = []
        for other, values in history.items():
            if other[1] == key[1] and other[0] != key[0] and by_id[other[0]].kind == kind:
                ids += [dia[t] for _, ts in values for t in ts]
        return sorted(set(ids), key=_dia_order)

    def add(
        category: str,
        question: str,
        answer: str,
        evidence: list[str],
        superseded: list[str],
        looks: list[str],
        structured: dict[str, Any],
    ) -> None:
        evidence = sorted(set(evidence), key=_dia_order)
        superseded = sorted(set(superseded) - set(evidence), key=_dia_order)
        # a turn is one of evidence / superseded / look-alike (a synthesis member's old value is superseded, not a
        # look-alike of the other members)
        looks = sorted(set(looks) - set(evidence) - set(superseded), key=_dia_order)
        out.append(
            {
                "question": question,
                "answer": answer,
                "evidence": evidence,
                "category": category,
                "superseded": superseded,
                "lookalikes": looks,
                "structured": structured,
            }
        )

    for goal in goals:
        keys = [(goal.id, a.name) for a in goal.attributes if (goal.id, a.name) in history]
        revised = [k for k in keys if len(history[k]) > 1]
        for key in revised:
            attr = attr_of[key]
            value = history[key][-1][0]
            ref = rng.choice(goal.names)
            q = rng.choice(Q_REVISION).format(noun=rng.choice(attr.asked), ref=ref)
            add(
                "revision",
                _capital(q),
                render(attr, value),
                turns_of(key, "current"),
                turns_of(key, "old"),
                lookalikes(key, goal.kind),
                {"goal": goal.id, "attribute": attr.name, "value": value},
            )
        plain = [k for k in keys if k not in revised] or keys
        key = rng.choice(plain)
        attr = attr_of[key]
        value = history[key][-1][0]
        q = rng.choice(Q_RECALL).format(noun=rng.choice(attr.asked), ref=rng.choice(goal.names))
        add(
            "recall",
            _capital(q),
            render(attr, value),
            turns_of(key, "current"),
            turns_of(key, "old"),
            lookalikes(key, goal.kind),
            {"goal": goal.id, "attribute": attr.name, "value": value},
        )
        # multi-hop: an attribute of the goal picked by another attribute's value, one no other goal ever held
        if rng.random() < 0.7 and len(keys) >= 2:
            pivots = []
            for k in keys:
                v = history[k][-1][0]
                ever = [
                    val
                    for other, vals in history.items()
                    if other[1] == k[1] and other[0] != goal.id and by_id[other[0]].kind == goal.kind
                    for val, _ in vals
                ]
                if v not in ever and v not in [val for val, _ in history[k][:-1]]:
                    pivots.append(k)
            if pivots:
                k1 = rng.choice(pivots)
                k2 = rng.choice([k for k in keys if k != k1])
                a1, a2 = attr_of[k1], attr_of[k2]
                v1, v2 = history[k1][-1][0], history[k2][-1][0]
                q = rng.choice(Q_MULTIHOP).format(
                    noun1=rng.choice(a1.asked),
                    noun2=rng.choice(a2.asked),
                    kind=KIND_NOUN[goal.kind],
                    value=render(a1, v1),
                )
                add(
                    "multi-hop",
                    _capital(q),
                    render(a2, v2),
                    turns_of(k1, "current") + turns_of(k2, "current"),
                    turns_of(k1, "old") + turns_of(k2, "old"),
                    lookalikes(k1, goal.kind) + lookalikes(k2, goal.kind),
                    {"goal": goal.id, "attribute": a2.name, "value": v2, "via": {"attribute": a1.name, "value": v1}},
                )
    groups: dict[str, list[Goal]] = {}
    for goal in goals:
        groups.setdefault(goal.group, []).append(goal)
    for group, members in groups.items():
        if len(members) < 2:
            continue
        summable = [a for a in members[0].attributes if a.kind in ("money", "count")]
        attr = rng.choice(summable)
        keys = [(g.id, attr.name) for g in members if (g.id, attr.name) in history]
        if len(keys) < 2:
            continue
        total = sum(history[k][-1][0] for k in keys)
        template = rng.choice(Q_SYNTHESIS[attr.kind])
        q = template.format(noun=rng.choice(attr.asked), group=group, unit=attr.unit)
        evidence = [t for k in keys for t in turns_of(k, "current")]
        superseded = [t for k in keys for t in turns_of(k, "old")]
        looks = [t for k in keys for t in lookalikes(k, members[0].kind)]
        add(
            "synthesis",
            _capital(q),
            render(attr, total),
            evidence,
            superseded,
            looks,
            {"group": group, "goals": [k[0] for k in keys], "attribute": attr.name, "value": total},
        )
    return out


def _dia_order(dia_id: str) -> tuple[int, int]:
    session, turn = dia_id[1:].split(":")
    return int(session), int(turn)


def conversation(size: str, seed: int) -> dict[str, Any]:
    """One LoCoMo-format sample of the given size and seed, with its plan under "came"."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    rng = random.Random(f"came/{size}/{seed}")
    goals = make_goals(rng, SIZES[size])
    speakers = tuple(rng.sample(SPEAKERS, 2))
    planner = Planner(rng, goals, speakers)  # type: ignore[arg-type]
    planner.run()
    sessions = _sessions(rng, planner.turns)
    body: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    dia: dict[str, str] = {}
    for n, (date, turns) in enumerate(sessions, start=1):
        body[f"session_{n}_date_time"] = date
        rows = []
        for i, turn in enumerate(turns, start=1):
            dia[turn["id"]] = f"D{n}:{i}"
            rows.append({"speaker": turn["speaker"], "dia_id": f"D{n}:{i}", "text": turn["text"]})
        body[f"session_{n}"] = rows
    acts = [{**act, "turn": dia[act["turn"]]} for act in planner.acts]
    history = replay(planner.acts)
    qa = _questions(rng, goals, history, dia)
    return {
        "sample_id": f"came-{size}-{seed}",
        "conversation": body,
        "qa": qa,
        "came": {
            "generator": GENERATOR,
            "size": size,
            "seed": seed,
            "goals": [{"id": g.id, "kind": g.kind, "group": g.group, "names": list(g.names)} for g in goals],
            "plan": acts,
        },
    }


def parse_seeds(text: str) -> list[int]:
    """Seeds from "7" -> [7]; "100-104" -> [100, ..., 104]; "1,5,9" -> [1, 5, 9]."""
    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        lo, dash, hi = part.partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"bad seed {part!r}: a number, a range like 100-104, or a comma list") from None
    if not seeds:
        raise ValueError("no seed given")
    return seeds


def parse_sizes(text: str) -> list[str]:
    sizes = [s.strip().upper() for s in str(text).split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes:
        raise ValueError(f"unknown size {', '.join(bad) or repr(text)}: S, M or L (comma-separated for several)")
    return sizes


def generate(sizes: Iterable[str], seeds: Iterable[int]) -> list[dict[str, Any]]:
    """Conversations for every (size, seed), sizes outermost."""
    return [conversation(size, seed) for size in sizes for seed in seeds]


def dumps(samples: list[dict[str, Any]]) -> str:
    """The file's text: stable key order and separators, so that one seed gives one byte string."""
    return json.dumps(samples, ensure_ascii=False, indent=1) + "\n"


def write(path: str | Path, sizes: Iterable[str], seeds: Iterable[int]) -> list[dict[str, Any]]:
    samples = generate(sizes, seeds)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(samples), encoding="utf-8")
    tmp.replace(path)
    return samples
