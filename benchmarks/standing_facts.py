"""Standing facts (issue 34 item 5): does a later message bring back the value, goal, state or cause it bears on?

The fixture is the project's own: 40 hand-written exchanges, each a first-person statement of a value, a goal, a
state or a cause, a short reply from the other speaker, and a later message that needs the statement but shares
few words with it ("After learning to say no, I feel way less stressed." ... "I ended up volunteering for that
project and now I'm overwhelmed."). The exchanges are inserted at the ends of sessions of the LoCoMo dev
conversations (conv-26/30/41/42/43), read from the datasets directory at run time (no LoCoMo text is kept here),
spoken by that conversation's own speakers; each later message becomes a question whose evidence is the statement
turn. Exchanges 0, 2, 4, ... are category `standing-dev` (tune), 1, 3, 5, ... `standing-test` (report).

    python benchmarks/standing_facts.py --out /work/bench/standing-facts.json
    cuemem bench locomo --data /work/bench/standing-facts.json --types standing-dev --engines hybrid,profile ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file

DEV_CONVERSATIONS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")

# (kind, statement, later message)
EXCHANGES: tuple[tuple[str, str, str], ...] = (
    (
        "value",
        "Honestly, I believe family dinners come before any work deadline.",
        "My manager wants me to stay late Thursday for the quarterly report, but that's our night to eat together.",
    ),
    (
        "value",
        "Being honest with people matters more to me than keeping the peace.",
        "A coworker asked me to cover for her lie to the boss and I don't know what to say.",
    ),
    (
        "value",
        "I care a lot about not wasting money on stuff I don't need.",
        "There's a huge sale on gadgets this weekend and everyone at the office is buying the new smartwatch.",
    ),
    (
        "value",
        "For me, spending time outdoors is what keeps me sane.",
        "I've been stuck at a desk for two weeks straight with this deadline.",
    ),
    (
        "value",
        "I think everyone deserves a second chance, even when they mess up badly.",
        "My cousin just got out of rehab and asked if he could crash at my place.",
    ),
    (
        "value",
        "I value my independence; I'd rather figure things out myself than ask for help.",
        "The new team lead keeps offering to walk me through every task step by step.",
    ),
    (
        "value",
        "Animals have feelings too, and I won't support anything that hurts them.",
        "My buddies invited me to a rodeo next Saturday.",
    ),
    (
        "value",
        "I've always believed that learning never stops, no matter your age.",
        "My grandma, who is 78, wants to sign up for a coding class.",
    ),
    (
        "value",
        "Sustainability is a big deal for me, I try to keep my footprint small.",
        "The cheapest option to get to the wedding has three layovers, and the train takes two days.",
    ),
    (
        "value",
        "Quality time with friends means more to me than expensive gifts.",
        "My birthday is coming up and my partner asked what present I'd want.",
    ),
    (
        "goal",
        "I'm trying to run a half marathon before I turn forty.",
        "My knee started aching after yesterday's long jog, maybe I should just skip training for a while.",
    ),
    (
        "goal",
        "My plan is to save enough for a down payment on a house by next spring.",
        "A friend invited me on a two-week trip to Bali in January.",
    ),
    (
        "goal",
        "I want to learn Spanish well enough to talk with my in-laws without a translator.",
        "My husband's parents are visiting from Madrid next month.",
    ),
    (
        "goal",
        "I'm aiming to publish my first novel within two years.",
        "I got offered a promotion but it would mean sixty-hour weeks.",
    ),
    (
        "goal",
        "I've set myself a goal of cutting sugar out of my diet completely.",
        "The office is throwing a cake party for Ana's farewell today.",
    ),
    (
        "goal",
        "I really hope to switch careers into nursing eventually.",
        "The community college just posted its schedule for anatomy classes.",
    ),
    (
        "goal",
        "I'm working toward getting my pilot's license this year.",
        "Weather's been terrible, and the flight school cancelled my lessons twice.",
    ),
    ("goal", "My goal is to read fifty books this year.", "It's already October and I've only finished twenty-two."),
    (
        "goal",
        "I plan to adopt a rescue dog once I move into a bigger apartment.",
        "The landlord just approved my transfer to the two-bedroom unit upstairs.",
    ),
    (
        "goal",
        "I'm determined to get back on stage and perform again.",
        "A local theater is holding open auditions next week.",
    ),
    (
        "state",
        "Lately I've been feeling really lonely since my roommate moved out.",
        "I spent the whole weekend by myself again, didn't talk to a single person.",
    ),
    (
        "state",
        "I've been struggling with insomnia for a couple of months now.",
        "I drank three coffees this afternoon just to get through the meeting.",
    ),
    (
        "state",
        "My back has been killing me ever since I hurt it lifting boxes.",
        "We're helping my sister move this Saturday, she's got a piano.",
    ),
    (
        "state",
        "I'm in a pretty tight spot financially right now.",
        "Everyone wants to go to that fancy steakhouse for Jake's birthday.",
    ),
    (
        "state",
        "I'm still grieving my father, some days are harder than others.",
        "Father's Day ads are everywhere this week.",
    ),
    ("state", "I've been burnt out at work and can barely focus.", "My boss just handed me two more projects to lead."),
    (
        "state",
        "I'm pregnant with our second child, due in the fall.",
        "I was thinking of booking a roller coaster park trip for September.",
    ),
    (
        "state",
        "I get anxious in big crowds, it's been like that since college.",
        "We got tickets for the stadium concert, sold out with sixty thousand people.",
    ),
    ("state", "I've been sober for eight months now.", "The team is celebrating the launch at a wine bar tonight."),
    (
        "state",
        "My eyesight has gotten really bad, especially at night.",
        "I need to drive back from the lake after the party ends at 11.",
    ),
    (
        "cause",
        "After learning to say no, I feel way less stressed.",
        "I ended up volunteering for that project and now I'm overwhelmed.",
    ),
    (
        "cause",
        "Ever since I started journaling every morning, my anxiety has calmed down a lot.",
        "I've skipped writing for the past week and my mind is racing again.",
    ),
    (
        "cause",
        "I quit my old job because the commute was eating three hours of my day.",
        "The new company wants me in the downtown office five days a week.",
    ),
    (
        "cause",
        "Cutting out caffeine after noon is what finally fixed my sleep.",
        "I'm lying awake at 2am again after that afternoon espresso.",
    ),
    (
        "cause",
        "I stopped going to the gym because the trainer there made me feel judged.",
        "My doctor says I need to exercise more but I dread walking into a fitness center.",
    ),
    (
        "cause",
        "Moving closer to my parents made everything easier with the kids.",
        "We got a job offer in another state, and it pays a lot more.",
    ),
    (
        "cause",
        "Because my mom was a teacher, I grew up loving books.",
        "I walked into a library yesterday and got all nostalgic.",
    ),
    (
        "cause",
        "Therapy helped me understand that my anger came from feeling unheard.",
        "I snapped at my brother when he talked over me at dinner.",
    ),
    (
        "cause",
        "Walking the dog every evening is the reason I've lost weight.",
        "Rex has been at my parents' place for a month and the scale is creeping up.",
    ),
    (
        "cause",
        "I broke up with him because he never made time for me.",
        "He texted me out of nowhere saying he's changed and has more free time now.",
    ),
)

REPLIES = (
    "That makes a lot of sense.",
    "I admire that about you.",
    "Good for you, really.",
    "Thanks for telling me that.",
    "I hear you, that's a lot.",
    "That's a great way to see it.",
    "Wow, I didn't know that.",
    "Keep me posted on that!",
)


def sessions(conversation: dict[str, Any]) -> list[int]:
    """The numbers of a LoCoMo conversation's sessions that hold turns, in order."""
    found = [int(k.split("_")[1]) for k in conversation if k.startswith("session_") and k.count("_") == 1]
    return sorted(n for n in found if conversation.get(f"session_{n}"))


def build(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dev conversations with the exchanges inserted and only the later messages as questions."""
    chosen = {s["sample_id"]: json.loads(json.dumps(s)) for s in samples if s["sample_id"] in DEV_CONVERSATIONS}
    placed: dict[str, list[int]] = {c: [] for c in DEV_CONVERSATIONS}
    for i in range(len(EXCHANGES)):
        placed[DEV_CONVERSATIONS[i % len(DEV_CONVERSATIONS)]].append(i)
    out = []
    for cid in DEV_CONVERSATIONS:
        sample = chosen[cid]
        conv = sample["conversation"]
        numbers = sessions(conv)
        early = numbers[: max(1, len(numbers) * 2 // 3)]  # statements in the first two thirds: asked about later
        qa = []
        for j, i in enumerate(placed[cid]):
            kind, statement, message = EXCHANGES[i]
            session = early[(j * len(early)) // len(placed[cid])]
            turns = conv[f"session_{session}"]
            speakers = (conv["speaker_a"], conv["speaker_b"])
            who, other = speakers[(i // 5) % 2], speakers[1 - (i // 5) % 2]
            first = len(turns) + 1
            turns.append({"speaker": who, "dia_id": f"D{session}:{first}", "text": statement})
            turns.append({"speaker": other, "dia_id": f"D{session}:{first + 1}", "text": REPLIES[i % len(REPLIES)]})
            qa.append(
                {
                    "question": message,
                    "answer": statement,
                    "evidence": [f"D{session}:{first}"],
                    "category": f"standing-{'dev' if i % 2 == 0 else 'test'}",
                    "kind": kind,
                    "speaker": who,
                }
            )
        sample["qa"] = qa
        out.append(sample)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where to write the fixture (LoCoMo JSON)")
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    samples = json.loads(dataset_file(LOCOMO).read_text(encoding="utf-8"))
    fixture = build(samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, ensure_ascii=False, indent=1), encoding="utf-8")
    n = sum(len(s["qa"]) for s in fixture)
    print(f"{args.out}: {len(fixture)} conversations, {n} later messages")


if __name__ == "__main__":
    main()
