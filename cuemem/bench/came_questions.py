"""CAME questions read off a replayed plan: revision, recall, multi-hop and synthesis, with their evidence."""

from __future__ import annotations

import random
from typing import Any

from .came_text import Q_MULTIHOP, Q_RECALL, Q_REVISION, Q_SYNTHESIS, capital
from .came_world import KIND_NOUN, Goal, render


def questions(
    rng: random.Random,
    goals: list[Goal],
    history: dict,
    dia: dict[str, str],
    unnamed: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The four question types, with answers, evidence (current value's turns), superseded and look-alike turns,
    and `implicit`: whether an evidence turn leaves its goal implicit (its dia id is in `unnamed`, the turns whose
    act has named False; issue 34's failure class). Reads no randomness of its own for the flag."""
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
        return sorted(set(ids), key=dia_order)

    def add(
        category: str,
        question: str,
        answer: str,
        evidence: list[str],
        superseded: list[str],
        looks: list[str],
        structured: dict[str, Any],
    ) -> None:
        evidence = sorted(set(evidence), key=dia_order)
        superseded = sorted(set(superseded) - set(evidence), key=dia_order)
        # a turn is one of evidence / superseded / look-alike (a synthesis member's old value is superseded, not a
        # look-alike of the other members)
        looks = sorted(set(looks) - set(evidence) - set(superseded), key=dia_order)
        out.append(
            {
                "question": question,
                "answer": answer,
                "evidence": evidence,
                "category": category,
                "superseded": superseded,
                "lookalikes": looks,
                "structured": structured,
                "implicit": any(t in unnamed for t in evidence),
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
                capital(q),
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
            capital(q),
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
                    capital(q),
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
            capital(q),
            render(attr, total),
            evidence,
            superseded,
            looks,
            {"group": group, "goals": [k[0] for k in keys], "attribute": attr.name, "value": total},
        )
    return out


def unnamed_turns(acts: list[dict[str, Any]], dia: dict[str, str] | None = None) -> frozenset[str]:
    """The turns whose act leaves its goal implicit (`"named": False`: a value stated for the goal in focus, two
    options offered without naming it, a revision that quotes only the old value), as dia ids (via `dia` when the
    acts hold the planner's own turn ids)."""
    return frozenset(dia[a["turn"]] if dia else a["turn"] for a in acts if a.get("named") is False)


def dia_order(dia_id: str) -> tuple[int, int]:
    session, turn = dia_id[1:].split(":")
    return int(session), int(turn)
