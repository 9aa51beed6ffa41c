"""Preference drift (issue 16): users who change their preferences over sessions; does memory know the value *now*?

The fixture is the project's own, generated from a seed: each user has a name that is not their speaker label half
of the time ("Priya" speaks as "user" or as "Priya"), sessions dated in one of three formats, and several slots
(drink, home, job, diet, ...) whose value changes one to three times, stated in varied phrasings — some the
shipped rules read, some they do not (e.g. "Turns out X is my thing now") — among distractors (an assistant
mentioning other values, a friend's preferences, chit-chat). Users 0..n/2-1 are `dev`, the rest `test`.

For every (user, slot) two measures:
- `profile`: the engine's `profile()` holds the true current value as a current, positive value, and no stale value
  of that slot as one (profile engines only);
- `current@1`: among the hits of "What <slot question> now?", the first hit naming any value the slot ever had
  names the current one (every engine).

    python benchmarks/drift.py --engines hybrid,stitch,profile --users 40 --out bench-out/i16/drift.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cuemem import Memory
from cuemem.config import Settings
from cuemem.embed import make_embedder

SLOTS: dict[str, dict[str, Any]] = {
    "drink": {
        "values": ["green tea", "black coffee", "oat milk lattes", "sparkling water", "chai", "espresso"],
        "question": "What does {name} like to drink",
    },
    "home": {
        "values": ["Lisbon", "Porto", "Berlin", "Toronto", "Osaka", "Nairobi"],
        "question": "Which city does {name} live in",
    },
    "job": {
        "values": ["a nurse", "a data analyst", "a teacher", "a carpenter", "a pilot", "a chef"],
        "question": "What does {name} work as",
    },
    "sport": {
        "values": ["tennis", "bouldering", "swimming", "cycling", "yoga", "running"],
        "question": "Which sport does {name} enjoy",
    },
    "music": {
        "values": ["jazz", "techno", "folk music", "classical music", "hip hop", "k-pop"],
        "question": "What music does {name} listen to",
    },
    "seat": {
        "values": ["window seats", "aisle seats", "exit row seats"],
        "question": "Which seats does {name} prefer on flights",
    },
}
FIRST = {
    "drink": ["I love {v}.", "My favorite drink is {v}.", "I usually have {v} in the morning.", "I prefer {v}."],
    "home": ["I live in {v}.", "I've been living in {v} for years.", "Home for me is {v}."],
    "job": ["I work as {v}.", "I'm {v} by trade.", "At work I'm {v}."],
    "sport": ["I really enjoy {v}.", "I'm into {v}.", "{V} is my favourite sport."],
    "music": ["I love {v}.", "I mostly listen to {v}.", "My favorite music is {v}."],
    "seat": ["I prefer {v} on flights.", "I always book {v}.", "On planes I like {v}."],
}
CHANGE = {
    "drink": [
        "I switched from {old} to {v}.",
        "These days I prefer {v}.",
        "I no longer drink {old}; I'm into {v} now.",
        "Turns out {v} is my thing now.",
        "Actually, I've started drinking {v} instead.",
    ],
    "home": [
        "I moved from {old} to {v}.",
        "I moved to {v} last month.",
        "I now live in {v}.",
        "We relocated, so {v} is home now.",
    ],
    "job": ["I started a new job as {v}.", "I now work as {v}.", "I quit being {old}, I'm {v} now."],
    "sport": [
        "I no longer play {old}, these days I love {v}.",
        "I've switched from {old} to {v}.",
        "Lately I'm really into {v}.",
        "{V} has replaced {old} for me.",
    ],
    "music": [
        "These days I listen to {v}.",
        "I don't like {old} anymore, I love {v} now.",
        "I switched from {old} to {v}.",
        "My favorite music is now {v}.",
    ],
    "seat": ["I now prefer {v}.", "I switched from {old} to {v}.", "No more {old} for me, {v} from now on."],
}
DISTRACT = [
    "My brother loves {x}.",
    "Have you tried {x}? Many people like it.",
    "My friend is really into {x}.",
    "We talked about {x} at dinner, not my thing though.",
    "The weather was lovely today.",
    "Can you remind me to call my mother?",
    "What a week it has been.",
]
ASSISTANT = ["Many people enjoy {x}.", "I can suggest places for {x}.", "Noted. Anything else?"]
NAMES = [
    "Priya",
    "Tomas",
    "Aiko",
    "Kwame",
    "Lena",
    "Mateo",
    "Sofia",
    "Ravi",
    "Ines",
    "Jonas",
    "Amara",
    "Chen",
    "Noor",
    "Felix",
    "Hana",
    "Diego",
    "Zara",
    "Omar",
    "Elif",
    "Yuki",
]
DATE_FORMATS = ["%Y-%m-%d", "%B %d, %Y", "%d/%m/%Y"]


def make_user(rng: random.Random, number: int) -> dict[str, Any]:
    """One user's sessions (turns) and the truth: every value each slot had, the last one current."""
    from datetime import date, timedelta

    name = NAMES[number % len(NAMES)] + ("" if number < len(NAMES) else str(number))
    speaker = name if number % 2 else "user"
    fmt = DATE_FORMATS[number % len(DATE_FORMATS)]
    slots = rng.sample(sorted(SLOTS), 4)
    truth: dict[str, list[str]] = {}
    events: list[tuple[int, str, str]] = []  # (session, slot, text)
    for slot in slots:
        values = rng.sample(SLOTS[slot]["values"], min(len(SLOTS[slot]["values"]), rng.randint(2, 4)))
        truth[slot] = values
        sessions = sorted(rng.sample(range(1, 12), len(values)))
        events.append((sessions[0], slot, rng.choice(FIRST[slot]).format(v=values[0], V=values[0].capitalize())))
        for s, old, new in zip(sessions[1:], values, values[1:], strict=False):
            text = rng.choice(CHANGE[slot]).format(v=new, old=old, V=new.capitalize())
            events.append((s, slot, text))
    turns: list[dict[str, Any]] = []
    start = date(2022, 1, 3) + timedelta(days=rng.randint(0, 300))
    for session in range(1, 13):
        day = (start + timedelta(days=21 * session)).strftime(fmt)
        said = [text for s, _, text in events if s == session]
        for _ in range(rng.randint(1, 3)):
            slot = rng.choice(sorted(SLOTS))
            said.insert(rng.randint(0, len(said)), rng.choice(DISTRACT).format(x=rng.choice(SLOTS[slot]["values"])))
        for text in said:
            turns.append({"speaker": speaker, "text": text, "session_id": f"s{session}", "timestamp": day})
            other = rng.choice(SLOTS[rng.choice(sorted(SLOTS))]["values"])
            turns.append(
                {
                    "speaker": "assistant",
                    "text": rng.choice(ASSISTANT).format(x=other),
                    "session_id": f"s{session}",
                    "timestamp": day,
                }
            )
    for i, t in enumerate(turns):
        t["id"] = f"u{number}-{i}"
    return {"user": f"user{number}", "name": name, "speaker": speaker, "turns": turns, "truth": truth}


def fixture(users: int, seed: int = 16) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [make_user(rng, n) for n in range(users)]


def mentions(text: str, value: str) -> bool:
    return value.lower() in text.lower()


def profile_correct(profile: dict[str, Any], values: list[str]) -> bool:
    """The current value is held as current and positive; no stale value is."""
    current = [e for section in ("preferences", "profile") for e in profile.get(section, {}).values()]
    current += [e for e in profile.get("episodic", [])]
    positive = [e["value"] for e in current if e["polarity"] == "positive"]
    has_now = any(mentions(v, values[-1]) for v in positive)
    stale = any(mentions(v, old) for v in positive for old in values[:-1] if not mentions(values[-1], old))
    return has_now and not stale


def run(engines: list[str], users: int, embedder: str, out: Path | None, only: str | None = None) -> dict[str, Any]:
    data = fixture(users)
    split = {u["user"]: ("dev" if n < users // 2 else "test") for n, u in enumerate(data)}
    data = [u for u in data if only is None or split[u["user"]] == only]
    emb = make_embedder(Settings(embedder=embedder))
    results: dict[str, Any] = {"users": users, "embedder": emb.name, "engines": {}}
    for engine in engines:
        rows = []
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "m.db", engine=engine, embedder=emb) as memory:
            for user in data:
                memory.add(user["turns"], user_id=user["user"])
                profile = None
                if hasattr(memory.engine, "profile"):
                    profile = memory.profile(user_id=user["user"], subject=user["speaker"])
                for slot, values in user["truth"].items():
                    question = SLOTS[slot]["question"].format(name=user["name"]) + " now?"
                    hits = memory.search(question, user_id=user["user"], k=10).hits
                    first = next((h.text for h in hits if any(mentions(h.text, v) for v in values)), "")
                    # a hit naming both old and new ("switched from X to Y") counts for the new value
                    held = profile_correct(profile, values) if profile is not None else None
                    rows.append(
                        {
                            "user": user["user"],
                            "split": split[user["user"]],
                            "slot": slot,
                            "changes": len(values) - 1,
                            "current_at_1": mentions(first, values[-1]),
                            "profile": held,
                        }
                    )
        seconds = time.perf_counter() - started
        summary: dict[str, Any] = {"seconds": round(seconds, 1)}
        for part in ("dev", "test"):
            mine = [r for r in rows if r["split"] == part]
            if not mine:
                continue
            summary[part] = {
                "slots": len(mine),
                "current_at_1": round(sum(r["current_at_1"] for r in mine) / len(mine), 3),
            }
            if mine and mine[0]["profile"] is not None:
                summary[part]["profile"] = round(sum(bool(r["profile"]) for r in mine) / len(mine), 3)
        results["engines"][engine] = {"summary": summary, "rows": rows}
        print(engine, json.dumps(summary), file=sys.stderr, flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="hybrid,stitch,profile")
    parser.add_argument("--users", type=int, default=40)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--split", choices=("dev", "test"), help="only this half of the users (tune on dev)")
    parser.add_argument("--show", action="store_true", help="print the first user's turns and truth, then stop")
    args = parser.parse_args()
    if args.show:
        print(json.dumps(fixture(1)[0], indent=1))
        return
    engines = [e.strip() for e in re.split(r",(?![^\[]*\])", args.engines) if e.strip()]  # "profile[a=1,b=2]" is one
    run(engines, args.users, args.embedder, args.out, args.split)


if __name__ == "__main__":
    main()
