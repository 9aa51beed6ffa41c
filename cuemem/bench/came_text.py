"""The surface text of CAME look-alike conversations: templates for acts and questions, and session months."""

from __future__ import annotations

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


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]
