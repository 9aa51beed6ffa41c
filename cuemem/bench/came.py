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
  attribute of other goals), so a report can say which wrong turn an engine preferred, and `implicit`: whether an
  evidence turn leaves its goal implicit (its act has named False), so a report can split the results by it.
- **Determinism.** One `random.Random` per (size, seed); the file is byte-identical per seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .came_plan import CHOICE, OPEN_GOALS, REVISE, SAME_SPEAKER, SMALL_TALK, STAY, Planner, Task, replay
from .came_questions import questions, unnamed_turns
from .came_text import (
    ACK,
    ASIDE,
    DATES_OF_SESSIONS,
    DECIDE,
    OPEN,
    OPTIONS,
    Q_MULTIHOP,
    Q_RECALL,
    Q_REVISION,
    Q_SYNTHESIS,
    REVISE_BY_VALUE,
    REVISE_NAMED,
    STATE,
    STATE_FOCUS,
)
from .came_world import (
    CITIES,
    CLIENTS,
    CLINICS,
    CODES,
    DATES,
    EVENTS,
    HOTELS,
    ITEMS,
    KIND_NOUN,
    KINDS,
    MONTHS,
    PEOPLE,
    RESTAURANTS,
    SHOPS,
    SPEAKERS,
    THERAPIES,
    TIMES,
    VENUES,
    Attribute,
    Goal,
    make_goals,
    render,
)

# the names that lived here before the split (issue 32) stay importable from here
__all__ = [
    "ACK",
    "ASIDE",
    "CATEGORIES",
    "CHOICE",
    "CITIES",
    "CLIENTS",
    "CLINICS",
    "CODES",
    "DATES",
    "DATES_OF_SESSIONS",
    "DECIDE",
    "EVENTS",
    "GENERATOR",
    "HOTELS",
    "ITEMS",
    "KINDS",
    "KIND_NOUN",
    "MONTHS",
    "OPEN",
    "OPEN_GOALS",
    "OPTIONS",
    "PEOPLE",
    "Q_MULTIHOP",
    "Q_RECALL",
    "Q_REVISION",
    "Q_SYNTHESIS",
    "RESTAURANTS",
    "REVISE",
    "REVISE_BY_VALUE",
    "REVISE_NAMED",
    "SAME_SPEAKER",
    "SHOPS",
    "SIZES",
    "SMALL_TALK",
    "SPEAKERS",
    "STATE",
    "STATE_FOCUS",
    "STAY",
    "THERAPIES",
    "TIMES",
    "VENUES",
    "Attribute",
    "Goal",
    "Planner",
    "Task",
    "conversation",
    "dumps",
    "generate",
    "make_goals",
    "parse_seeds",
    "parse_sizes",
    "render",
    "replay",
    "write",
]

GENERATOR = "came-4"
SIZES = {"S": 8, "M": 48, "L": 136}  # goals per conversation: turns come out about 1x / 6x / 17x
CATEGORIES = ("revision", "recall", "multi-hop", "synthesis")


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
    qa = questions(rng, goals, history, dia, unnamed_turns(planner.acts, dia))
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
