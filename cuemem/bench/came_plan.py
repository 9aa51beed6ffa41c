"""The CAME planner: interleaves goals into acts and their turns, and replays a plan for exact ground truth."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .came_text import ACK, ASIDE, DECIDE, OPEN, OPTIONS, REVISE_BY_VALUE, REVISE_NAMED, STATE, STATE_FOCUS, capital
from .came_world import Attribute, Goal, render

OPEN_GOALS = 3  # goals in play at once: the planner interleaves them
STAY = 0.55  # chance that the next act stays on the goal in focus
SAME_SPEAKER = 0.45  # chance that a speaker goes on (dialogue is not turn-taking)
REVISE = 0.4  # chance that a stated value is revised later (again with half that chance)
CHOICE = 0.35  # chance that a place is settled by two options and a reference to one of them
SMALL_TALK = 0.18  # chance of small talk between acts


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
        self.turns.append({"id": tid, "speaker": self.speakers[self.speaker], "text": capital(text)})
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
