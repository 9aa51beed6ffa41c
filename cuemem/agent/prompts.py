"""The agent's prompts and reply text: the tool lines of the choice, the reply's notes, its clean-up, citations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from . import tools

ANSWER = "answer"
TOOLS: dict[str, str] = {
    "search_memory": "recall what the user told you before (names, places, facts)",
    "recall_profile": "the user's tastes, for recommendations",
    "store_memory": "the user tells a new fact about themselves; save it",
    "calculator": "arithmetic with numbers (17*23, 15% of 80)",
    "clock": "today's date, the time, days until or since a date",
    "file_search": "look in the user's files, notes or documents",
}
ANSWER_LINE = "small talk, thanks, general knowledge; reply directly"
# One example per action for the choice prompt (written for it; none is in the labelled study set).
EXAMPLES: dict[str, str] = {
    "calculator": "What is 12 + 7?",
    "clock": "What's the date next Friday?",
    "file_search": "Find my passport number in my documents.",
    "search_memory": "What is my brother called?",
    "recall_profile": "Recommend a film for me.",
    "store_memory": "My favourite fruit is mango.",
    ANSWER: "Hi, nice to meet you!",
}
NOTE_CHARS = 240  # each observation line is cut to this many characters in prompts


@dataclass
class Observation:
    """A tool's result as the reply prompt sees it."""

    tool: str
    text: str
    value: str = ""
    hits: list[tuple[str, str]] = field(default_factory=list)  # (turn id, text) of memory hits, best first


def summary(text: str, limit: int = 160) -> str:
    """A tool output cut for the turn's record."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def choice_prompt(message: str, options: list[str], observations: list[Observation]) -> list[dict[str, str]]:
    """The prompt of a constrained choice of the next action: the options described, the message, what the tools
    found so far."""
    described = "\n".join(f"{o}: {TOOLS.get(o, ANSWER_LINE)}" for o in options)
    shots = "\n".join(f"Message: {EXAMPLES[o]}\nTool: {o}" for o in options if o in EXAMPLES)
    system = f"Pick the tool for the user's message.\nTools:\n{described}\n\nExamples:\n{shots}"
    done = "".join(f"Done: {o.tool}: {summary(o.text, 100)}\n" for o in observations)
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Message: {message}\n{done}Tool:"}]


QUESTION_SYSTEM = (
    "You answer the user's question using the notes. Notes starting with [id] are what the user said before; "
    "other notes are tool results. Reply with a short answer, a few words. If the notes do not say, reply "
    '"I don\'t know."'
)
STATEMENT_SYSTEM = "You are a friendly assistant. Acknowledge the user's message in one short sentence."


def reply_prompt(
    message: str,
    moment: datetime,
    observations: list[Observation],
    history: list[tuple[str, str]],
    degraded: list[str],
) -> list[dict[str, str]]:
    """The reply prompt (shaped for small models, like the reader's): a question is answered in a few words from
    notes — memory hits with their turn ids, tool results, the user's last messages in this conversation — and a
    statement is acknowledged in one sentence."""
    notes = [line[:NOTE_CHARS] for o in observations for line in note_lines(o)]
    seen = "\n".join(notes)
    notes += [f"[recent] user: {user[:NOTE_CHARS]}" for user, _ in history if user[:NOTE_CHARS] not in seen]
    if degraded:
        notes.append("Problems: " + "; ".join(degraded))
    if not tools.is_question(message) and all(o.tool == "store_memory" for o in observations):
        return [{"role": "system", "content": STATEMENT_SYSTEM}, {"role": "user", "content": message}]
    system = f"{QUESTION_SYSTEM} Today is {moment:%A %d %B %Y}."
    body = "Notes:\n" + "\n".join(notes) + "\n\n" if notes else ""
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{body}Question: {message}"}]


def note_lines(observation: Observation) -> list[str]:
    """An observation as note lines: memory hits as they are ("[id] speaker: text"), other tools prefixed."""
    lines = observation.text.splitlines()[:8]
    if observation.hits:
        return lines
    return [f"{observation.tool}: {line}" for line in lines]


_RUN_ON = re.compile(r"(?:^|\n)\s*(?:user|assistant|message|notes|question)\s*:", re.I)


def clean_reply(text: str, limit: int = 400) -> str:
    """The model's reply without what small models run on with (a new "user:" turn, repeated headers), on one
    line, cut at a sentence end within `limit` characters."""
    text = _RUN_ON.split(text.strip(), maxsplit=1)[0]
    text = " ".join(text.split())
    if len(text) > limit:
        cut = text[:limit]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
        text = cut[: end + 1] if end > 0 else cut.rstrip() + "…"
    return text


def with_values(text: str, observations: list[Observation]) -> str:
    """The reply, with each exact tool result (calculator, clock) it does not contain quoted after it."""
    extra = [
        f"({o.tool}: {o.value})"
        for o in observations
        if o.tool in ("calculator", "clock") and o.value and o.value.lower() not in text.lower()
    ]
    return " ".join([text, *extra])


def with_notes(reply: str, degraded: list[str]) -> str:
    """The reply, saying what was degraded (memory or a tool unavailable) when it does not already."""
    notes = [d for d in degraded if d not in reply]
    if not notes:
        return reply
    return f"{reply} (Note: {'; '.join(notes)}.)"


def plain(observation: Observation) -> str:
    """One observation as plain text (the reply when the model is down)."""
    if observation.value and observation.tool in ("calculator", "clock"):
        return f"{observation.tool}: {observation.value}"
    return f"{observation.tool}: {summary(observation.text, 300)}"


def cited(reply: str, message: str, observations: list[Observation]) -> list[str]:
    """The memory turns a reply uses: hits sharing a content word with the reply that the message does not hold,
    in rank order (the reply cites only turns that were in its notes)."""
    said = set(tools.content_words(reply)) - set(tools.content_words(message))
    cited: dict[str, None] = {}
    for o in observations:
        for turn_id, text in o.hits:
            if turn_id != "?" and said & set(tools.content_words(text)):
                cited.setdefault(turn_id, None)
    return list(cited)
