"""The memory agent's own scripted benchmark (issue 17, docs/design.md design 3): short / medium / long conversations in
which earlier turns state preferences and facts and later turns ask for them (plus a few calculator and clock
tasks), run with the shipped model and memory off, on, and down (the store closed under the agent).

Tiers (the report's three), all written for this benchmark:
- short: 2 conversations of 5 turns, all said to the agent;
- medium: 1 conversation of 20 turns over two days, with look-alike facts (a sister's drink, a brother's city);
- long: 60 turns of earlier sessions (facts, changed preferences and many look-alike distractors), added to the
  memory's log as they happened (not replayed through the agent, to keep the run short), then a live session of 10
  turns said to the agent. With memory off the agent never sees the earlier sessions, as in real use.

The agent shows its model the user's last 2 messages of the live conversation in every mode (working memory), so
short-range questions can succeed without long-term memory; everything older needs it.

Measures, per tier and mode, over the question turns:
- success: an expected answer string appears in the reply (case-insensitive) — the only criterion; citing the
  right turn is reported apart (`cited`), it does not count as success;
- evidence: for memory questions, the turn stating the answer is among the memory tools' hits;
- memory hit rate: turns where a memory tool returned at least one hit;
- tool efficiency: tool calls per turn, share of calls that were useful (ok and found something), tool calls per
  successful task;
- latency p50/p95 (every turn) and model tokens per turn (one tokenizer over every model call's text);
- completed: turns that returned a reply (every turn must, memory down included), degraded turns.

    nice python benchmarks/agent.py --out bench-out/i17/agent [--tiers short,medium,long] [--model smollm2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from cuemem import Memory
from cuemem.agent import Agent, AgentMetrics, AgentTurn
from cuemem.config import Settings
from cuemem.embed import make_embedder
from cuemem.embed.base import Embedder
from cuemem.llm import LLMClient, LocalBackend

MODES = ("off", "on", "down")
START = datetime(2026, 3, 2, 9, 0)

# A step: {"say": text} or {"ask": text, "expect": [any of], "kind": memory|calc|clock, "evidence": say-label};
# a say step may carry a "label" that a later question names as its evidence.
SHORT: list[dict[str, Any]] = [
    {
        "name": "short-1",
        "steps": [
            {"say": "Hi! I'm Priya, and my favourite drink is chai.", "label": "drink"},
            {"say": "I live in Porto, close to the river."},
            {"ask": "What is 17 * 23?", "expect": ["391"], "kind": "calc"},
            {"say": "I'm allergic to peanuts, so keep that in mind."},
            {"ask": "What is my favourite drink?", "expect": ["chai"], "kind": "memory", "evidence": "drink"},
        ],
    },
    {
        "name": "short-2",
        "steps": [
            {"say": "My dog is called Biscuit and he is a beagle.", "label": "dog"},
            {"say": "I work as a pharmacist at the city hospital."},
            {"ask": "How many days until 2026-12-25?", "expect": ["298"], "kind": "clock"},
            {"say": "My favourite band is Radiohead."},
            {"ask": "What is my dog's name?", "expect": ["Biscuit"], "kind": "memory", "evidence": "dog"},
        ],
    },
]

MEDIUM: list[dict[str, Any]] = [
    {
        "name": "medium-1",
        "steps": [
            {"say": "Hello, I'm Tomas. I just moved to Lyon for a new job.", "label": "city"},
            {"say": "I work as a sound engineer at a small studio.", "label": "job"},
            {"say": "My brother lives in Marseille and works in a bakery."},
            {"say": "I prefer aisle seats when I fly.", "label": "seat"},
            {"say": "The weather has been rainy all week."},
            {"say": "My favourite food is ramen.", "label": "food"},
            {"say": "My sister loves sushi, she eats it every Friday."},
            {"ask": "What is 12 plus 30 divided by 5?", "expect": ["18"], "kind": "calc"},
            {"say": "I play the cello in an amateur orchestra.", "label": "instrument"},
            {"say": "My cat is called Pixel.", "label": "cat"},
            {"say": "Pixel is afraid of the vacuum cleaner."},
            {"say": "I went hiking in the Alps last weekend."},
            {"ask": "Which city do I live in?", "expect": ["Lyon"], "kind": "memory", "evidence": "city"},
            {"say": "My neighbour's cat is called Mochi."},
            {"ask": "What is my cat's name?", "expect": ["Pixel"], "kind": "memory", "evidence": "cat"},
            {"say": "I usually drink green tea in the afternoon."},
            {"ask": "What do I work as?", "expect": ["sound engineer"], "kind": "memory", "evidence": "job"},
            {"ask": "What day of the week is 4 July 2026?", "expect": ["Saturday"], "kind": "clock"},
            {"ask": "What is my favourite food?", "expect": ["ramen"], "kind": "memory", "evidence": "food"},
            {"ask": "Which instrument do I play?", "expect": ["cello"], "kind": "memory", "evidence": "instrument"},
        ],
    }
]

_FRIENDS = ["Ana", "Ben", "Chloe", "Dev", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
_DRINKS = ["black coffee", "lemonade", "oolong tea", "hot chocolate", "kombucha", "espresso", "mint tea", "cola"]
_CITIES = ["Berlin", "Oslo", "Nairobi", "Osaka", "Quito", "Tallinn", "Perth", "Bilbao"]
_FILLER = [
    "The train was late again this morning.",
    "I watched a documentary about octopuses.",
    "We should plan something for the long weekend.",
    "My phone battery keeps dying.",
    "I finally cleaned the balcony.",
    "The new cafe downstairs opened today.",
    "I'm reading a novel about lighthouse keepers.",
    "Traffic was terrible on the ring road.",
]


def _long_history() -> list[dict[str, Any]]:
    """60 turns of earlier sessions: the user's facts (one preference changed), the assistant's replies, and
    look-alike statements about friends and family (their drinks, cities, pets) between fillers."""
    facts = [
        ("drink-old", "user", "My favourite drink is black coffee, I have it every morning."),
        ("home", "user", "I live in Ghent, in an old flat near the canal."),
        ("pet", "user", "My rabbit is called Clover."),
        ("sport", "user", "I play badminton on Tuesday evenings."),
        ("birthday", "user", "My birthday is on 14 May."),
        ("diet", "user", "I'm vegetarian, no meat for me."),
        ("car", "user", "I drive a blue Skoda."),
        ("drink", "user", "I switched from black coffee to matcha, matcha is my favourite drink now."),
    ]
    turns: list[dict[str, Any]] = []
    fact_at = {0: 0, 6: 1, 12: 2, 18: 3, 24: 4, 30: 5, 36: 6, 48: 7}
    filler = 0
    for i in range(60):
        if i in fact_at:
            label, speaker, text = facts[fact_at[i]]
        elif i % 3 == 1:
            friend = _FRIENDS[(i // 3) % len(_FRIENDS)]
            choice = (i // 3) % 3
            if choice == 0:
                text = f"My friend {friend}'s favourite drink is {_DRINKS[i % len(_DRINKS)]}."
            elif choice == 1:
                text = f"My friend {friend} lives in {_CITIES[i % len(_CITIES)]}."
            else:
                text = f"My friend {friend}'s rabbit is called {['Pepper', 'Nutmeg', 'Tofu'][i % 3]}."
            label, speaker = "", "user"
        elif i % 3 == 2:
            label, speaker, text = "", "assistant", "Thanks for telling me, noted."
        else:
            label, speaker, text = "", "user", _FILLER[filler % len(_FILLER)]
            filler += 1
        day = START - timedelta(days=60 - i)
        turns.append(
            {
                "id": f"L{i:02d}",
                "speaker": speaker,
                "text": text,
                "timestamp": day.isoformat(),
                "session_id": f"s{i // 10}",
                "label": label,
            }
        )
    return turns


LONG: list[dict[str, Any]] = [
    {
        "name": "long-1",
        "history": _long_history(),
        "steps": [
            {"say": "Good morning! Back again."},
            {"ask": "What is my favourite drink?", "expect": ["matcha"], "kind": "memory", "evidence": "drink"},
            {"ask": "Which city do I live in?", "expect": ["Ghent"], "kind": "memory", "evidence": "home"},
            {"ask": "What is 15% of 80?", "expect": ["12"], "kind": "calc"},
            {"ask": "What is my rabbit called?", "expect": ["Clover"], "kind": "memory", "evidence": "pet"},
            {"say": "I had a long day at work."},
            {"ask": "Which sport do I play?", "expect": ["badminton"], "kind": "memory", "evidence": "sport"},
            {"ask": "What date is it in 10 days?", "expect": ["12 March 2026"], "kind": "clock"},
            {"ask": "What car do I drive?", "expect": ["Skoda"], "kind": "memory", "evidence": "car"},
            {"ask": "Do I eat meat?", "expect": ["vegetarian"], "kind": "memory", "evidence": "diet"},
        ],
    }
]

TIERS = {"short": SHORT, "medium": MEDIUM, "long": LONG}


def run_conversation(
    conv: dict[str, Any],
    mode: str,
    llm: LLMClient,
    embedder: Embedder,
    engine: str,
    metrics: AgentMetrics,
    policy: str = "guided",
) -> list[dict[str, Any]]:
    """Say a conversation's steps to a fresh agent in one mode; one record per step."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        memory = Memory(Path(tmp) / "m.db", engine=engine, embedder=embedder, llm=llm, llm_cache="off")
        labels: dict[str, list[str]] = {}
        history = conv.get("history", [])
        if history and mode != "off":
            memory.add([{k: v for k, v in t.items() if k != "label"} for t in history], user_id="bench")
            memory.search("warm up", user_id="bench")  # index now, not inside the first timed turn
            labels = {t["label"]: [t["id"]] for t in history if t["label"]}
        if mode == "down":
            memory.close()  # the store is gone: every memory call fails from here on
        agent = Agent(
            memory,
            user_id="bench",
            llm=llm,
            memory_enabled=mode != "off",
            session_id="live",
            metrics=metrics,
            policy=policy,
        )
        try:
            for i, step in enumerate(conv["steps"]):
                now = (START + timedelta(minutes=2 * i)).isoformat(timespec="minutes")
                text = step.get("say") or step["ask"]
                try:
                    turn: AgentTurn | None = agent.turn(text, now=now)
                    error = ""
                except Exception as exc:  # counted against the agent: every turn must complete
                    turn, error = None, f"{type(exc).__name__}: {exc}"
                row: dict[str, Any] = {
                    "conversation": conv["name"],
                    "step": i,
                    "message": text,
                    "error": error,
                    "kind": step.get("kind", "say"),
                }
                if turn is not None:
                    row |= turn.as_dict()
                    if "label" in step:
                        labels[step["label"]] = turn.stored_turn_ids[:-1]
                if "ask" in step:
                    row["expect"] = step["expect"]
                    row["success"] = answered(turn.reply if turn else "", step["expect"])
                    if step.get("evidence"):
                        wanted = set(labels.get(step["evidence"], []))
                        hits = {tid for s in (turn.steps if turn else []) for tid in s.turn_ids}
                        row["evidence_hit"] = bool(wanted & hits)
                        row["evidence_cited"] = bool(wanted & set(turn.cited_turn_ids if turn else []))
                rows.append(row)
                print(
                    f"  [{mode:4}] {conv['name']} {i:2d} {row.get('metrics', {}).get('latency_s', 0):5.1f}s "
                    f"{'OK ' if row.get('success') else '   ' if 'ask' in step else ' - '} {text[:40]!r} -> "
                    f"{(turn.reply if turn else error)[:80]!r}",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            if mode != "down":
                memory.close()
    return rows


def answered(reply: str, expect: list[str]) -> bool:
    """Task success: an expected answer appears in the reply as whole words (case-insensitive), the agent's notes
    on what was degraded ("(Note: ...)") left out."""
    text = reply.split(" (Note: ")[0]
    return any(re.search(rf"(?<!\w){re.escape(e)}(?!\w)", text, re.I) for e in expect)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The measures of one (tier, mode) over its rows (see the module docstring)."""
    asks = [r for r in rows if "success" in r]
    memory_asks = [r for r in asks if r["kind"] == "memory"]
    tool_asks = [r for r in asks if r["kind"] in ("calc", "clock")]
    done = [r for r in rows if "metrics" in r]
    calls = [s for r in done for s in r["steps"]]
    successes = sum(r["success"] for r in asks)
    latencies = [r["metrics"]["latency_s"] for r in done]

    def share(items: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(bool(r.get(key)) for r in items) / len(items), 3) if items else None

    def mean(key: str) -> float | None:
        return round(statistics.mean(r["metrics"][key] for r in done), 1) if done else None

    question_hits = [{"hit": r.get("metrics", {}).get("memory_hit", False)} for r in asks]

    return {
        "turns": len(rows),
        "completed": len(done),
        "degraded_turns": sum(bool(r["degraded"]) for r in done),
        "questions": len(asks),
        "success": share(asks, "success"),
        "memory_success": share(memory_asks, "success"),
        "tool_success": share(tool_asks, "success"),
        "evidence_in_hits": share(memory_asks, "evidence_hit"),
        "evidence_cited": share(memory_asks, "evidence_cited"),
        "memory_hit_rate": round(sum(r["metrics"]["memory_hit"] for r in done) / len(done), 3) if done else None,
        "memory_hit_rate_questions": share(question_hits, "hit"),
        "tool_calls_per_turn": round(len(calls) / len(done), 2) if done else None,
        "useful_call_ratio": round(sum(s["useful"] for s in calls) / len(calls), 3) if calls else None,
        "tool_calls_per_success": round(len(calls) / successes, 2) if successes else None,
        "tool_failures": sum(not s["ok"] for s in calls),
        "model_choices": sum(1 for r in done for d in r["decisions"] if d["by"] == "model"),
        "decisions_by": {
            by: sum(1 for r in done for d in r["decisions"] if d["by"] == by)
            for by in ("model", "rule", "budget", "fallback")
        },
        "latency_p50_s": round(_percentile(latencies, 0.5), 2),
        "latency_p95_s": round(_percentile(latencies, 0.95), 2),
        "prompt_tokens_per_turn": mean("prompt_tokens"),
        "completion_tokens_per_turn": mean("completion_tokens"),
    }


def markdown(results: dict[str, Any]) -> str:
    """The results as a Markdown table, one row per (tier, mode)."""
    head = (
        "| tier | memory | turns | completed | degraded | questions | success | memory Qs | tool Qs | evidence in"
        " hits | cited | memory hit rate (Qs) | tool calls/turn | useful calls | calls/success | p50 s | p95 s |"
        " tokens/turn (prompt+completion) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def f(value: Any) -> str:
        return "–" if value is None else f"{value:.0%}" if isinstance(value, float) and value <= 1 else str(value)

    for tier, modes in results["tiers"].items():
        for mode, s in modes.items():
            lines.append(
                f"| {tier} | {mode} | {s['turns']} | {s['completed']} | {s['degraded_turns']} | {s['questions']} | "
                f"{f(s['success'])} | {f(s['memory_success'])} | {f(s['tool_success'])} | "
                f"{f(s['evidence_in_hits'])} | {f(s['evidence_cited'])} | {f(s['memory_hit_rate_questions'])} | "
                f"{s['tool_calls_per_turn']} | {f(s['useful_call_ratio'])} | {s['tool_calls_per_success'] or '–'} | "
                f"{s['latency_p50_s']} | {s['latency_p95_s']} | "
                f"{s['prompt_tokens_per_turn']}+{s['completion_tokens_per_turn']} |"
            )
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> str:
    """Write agent.json and agent.md into `out`; returns the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "agent.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    table = markdown(results)
    (out / "agent.md").write_text(
        f"Agent benchmark: model {results['model']}, engine {results['engine']}, embedder {results['embedder']}, "
        f"{results['seconds']} s\n\n{table}"
    )
    return table


def rescore(path: Path, out: Path) -> None:
    """Score a saved run again with the current `answered` (the replies are kept in its rows)."""
    results = json.loads(path.read_text())
    for key, rows in results["rows"].items():
        for row in rows:
            if "expect" in row:
                wanted = next(
                    s["expect"]
                    for conv in TIERS[key.split("/")[0]]
                    for i, s in enumerate(conv["steps"])
                    if conv["name"] == row["conversation"] and i == row["step"]
                )
                row["expect"] = wanted
                row["success"] = answered(row.get("reply", ""), wanted)
        tier, mode = key.split("/")
        results["tiers"][tier][mode] = summarise(rows)
    print(write(results, out))


# ---------------------------------------------------------------------------------------------------- choice study
CHOICE_SET = Path(__file__).with_name("agent_choice.json")


def choice_split(items: list[list[str]]) -> dict[str, str]:
    """dev/test by a stable hash, stratified: within each first label, messages sorted by md5 alternate dev, test."""
    groups: dict[str, list[str]] = {}
    for message, labels in items:
        groups.setdefault(labels.split("|")[0], []).append(message)
    split = {}
    for group in groups.values():
        for i, message in enumerate(sorted(group, key=lambda m: hashlib.md5(m.encode()).hexdigest())):
            split[message] = "dev" if i % 2 == 0 else "test"
    return split


def _old_choice_prompt(message: str, options: list[str]) -> list[dict[str, str]]:
    """The first agent's choice prompt (before the study), kept to measure it."""
    old = {
        "search_memory": "look up what the user said in earlier conversations",
        "recall_profile": "list the user's known preferences and profile facts",
        "store_memory": "save a fact or preference the user just stated",
        "calculator": "compute arithmetic in the message",
        "clock": "today's date and time, date arithmetic",
        "file_search": "search the user's files for words of the message",
    }
    described = "\n".join(f"- {o}: {old.get(o, 'reply to the user now')}" for o in options)
    return [
        {"role": "system", "content": f"You are an assistant with tools. Pick the next action.\nActions:\n{described}"},
        {"role": "user", "content": f"Message: {message}\nDone so far:\n- nothing yet\nNext action?"},
    ]


def choice_study(llm: LLMClient, out: Path) -> dict[str, Any]:
    """First-action accuracy on the labelled set (all tools available: memory on, a files folder), per policy and
    prompt: the first agent's "model" prompt; the few-shot prompt over all tools, raw and calibrated ("model");
    the cue shortlist with the few-shot prompt, raw and calibrated ("guided", the default); the keyword rules."""
    from cuemem.agent import loop, tools

    items = json.loads(CHOICE_SET.read_text())["items"]
    split = choice_split(items)
    variants = [
        "model, first prompt",
        "model, few-shot",
        "model, few-shot calibrated",
        "guided, few-shot",
        "guided, few-shot calibrated (default)",
        "rules",
    ]
    agents = {
        policy: Agent(cast(Any, None), user_id="study", llm=llm, policy=policy, files_root=out, metrics=AgentMetrics())
        for policy in ("model", "guided", "rules")
    }  # one agent per policy: each option list's calibration baseline is computed once
    rows = []
    for message, labels in items:
        cued = sorted(tools.cues(message, memory=True, files=True), key=loop.ORDER.index)
        picks: dict[str, Any] = {}
        every = agents["model"]._options(message, cued, [], False)
        picks[variants[0]] = llm.choose(_old_choice_prompt(message, every), every, k=1)[0].option
        picks[variants[1]] = llm.choose(loop._choice_prompt(message, every, []), every, k=1)[0].option
        picks[variants[2]] = agents["model"]._calibrated_choice(llm, message, every, [])
        shortlist = agents["guided"]._options(message, cued, [], False)
        picks[variants[3]] = llm.choose(loop._choice_prompt(message, shortlist, []), shortlist, k=1)[0].option
        picks[variants[4]] = agents["guided"]._calibrated_choice(llm, message, shortlist, [])
        rule_options = agents["rules"]._options(message, cued, [], False)
        picks[variants[5]] = agents["rules"]._decide(None, message, rule_options, [], cued)[0]
        good = labels.split("|")
        rows.append(
            {
                "message": message,
                "labels": good,
                "split": split[message],
                "shortlist": shortlist,
                "picks": picks,
                "correct": {v: picks[v] in good for v in variants},
            }
        )
        print(
            f"  {split[message]:4} {message[:44]!r:48} {labels:30} " + " ".join(str(picks[v]) for v in variants),
            file=sys.stderr,
            flush=True,
        )
    table = {
        v: {s: round(statistics.mean(r["correct"][v] for r in rows if r["split"] == s), 3) for s in ("dev", "test")}
        for v in variants
    }
    results = {
        "model": llm.backend.name,
        "items": len(rows),
        "dev": sum(r["split"] == "dev" for r in rows),
        "accuracy": table,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "choice.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["| policy, prompt | dev | test |", "|---|---|---|"]
    lines += [f"| {v} | {table[v]['dev']:.0%} | {table[v]['test']:.0%} |" for v in variants]
    (out / "choice.md").write_text(
        f"First-action accuracy, {llm.backend.name}, {results['dev']} dev / {len(rows) - results['dev']} test"
        " messages\n\n" + "\n".join(lines) + "\n"
    )
    print("\n".join(lines))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for agent.json and agent.md")
    parser.add_argument("--tiers", default="short,medium,long")
    parser.add_argument("--modes", default=",".join(MODES), help="memory off, on, down (store closed)")
    parser.add_argument("--model", default="smollm2", help="a local model registry name (default: the shipped one)")
    parser.add_argument("--engine", default="profile", help="memory engine (default: profile, design 3's)")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--limit", type=int, help="at most this many conversations per tier")
    parser.add_argument(
        "--policy",
        default="guided",
        choices=("guided", "model", "rules"),
        help="guided: cued tools, the model picks among several; model: the model alone decides",
    )
    parser.add_argument("--rescore", type=Path, help="recompute the measures of a saved agent.json (no model run)")
    parser.add_argument(
        "--choice-study",
        action="store_true",
        help="measure first-action accuracy on benchmarks/agent_choice.json instead (into --out)",
    )
    args = parser.parse_args()
    if args.choice_study:
        choice_study(LLMClient(LocalBackend(model=args.model)), args.out)
        return
    if args.rescore:
        rescore(args.rescore, args.out)
        return
    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [t for t in tiers if t not in TIERS] + [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown tier or mode: {', '.join(unknown)}")
    llm = LLMClient(LocalBackend(model=args.model))  # no call cache: every call really runs the model
    embedder = make_embedder(Settings(embedder=args.embedder))
    llm.chat([{"role": "user", "content": "hi"}], max_tokens=1)  # load the model outside the timed turns
    results: dict[str, Any] = {
        "model": llm.backend.name,
        "engine": args.engine,
        "embedder": embedder.name,
        "policy": args.policy,
        "tool_budget": 4,
        "history_turns": 2,
        "tiers": {},
        "rows": {},
        "metrics": {},
    }
    started = time.perf_counter()
    for tier in tiers:
        conversations = TIERS[tier][: args.limit] if args.limit else TIERS[tier]
        for mode in modes:
            metrics = AgentMetrics()
            rows = []
            for conv in conversations:
                rows += run_conversation(conv, mode, llm, embedder, args.engine, metrics, args.policy)
            results["tiers"].setdefault(tier, {})[mode] = summarise(rows)
            results["rows"][f"{tier}/{mode}"] = rows
            results["metrics"][f"{tier}/{mode}"] = metrics.snapshot()
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(write(results, args.out))


if __name__ == "__main__":
    main()
