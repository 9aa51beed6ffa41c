"""The goals of CAME look-alike conversations: vocabularies, goal kinds with their attributes, and goal making."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

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
