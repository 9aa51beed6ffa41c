"""Assistants (E-mem section 3.3): each activated window, with the question, yields evidence from its raw turns.

Model mode: the model reads the whole window (excerpts led by their turn ids), says in one line what answers the
question, then *chooses* the supporting turns among the window's own ids under a token-trie constraint, so an
assistant can never cite a turn outside its window. Model-free mode: the window's best turns in the question's
fused ranking, with their neighbours inside the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...llm import LLMClient

NOTHING = "nothing here"
ASSISTANT_PROMPT = (
    "You read one part of a conversation history: excerpts, each led by its id in brackets. "
    f'In one line, say what in these excerpts answers the question. If nothing does, reply "{NOTHING}".'
)


@dataclass
class Evidence:
    """What one assistant found in its window: anchor turns (item ids, best first), their neighbours, a note."""

    window: int
    anchors: list[int] = field(default_factory=list)
    neighbours: list[int] = field(default_factory=list)
    note: str = ""
    found: bool = True  # False where the assistant said its window holds nothing for the question
    error: str = ""  # the model failed and the model-free evidence stands in

    @property
    def items(self) -> list[int]:
        return [*self.anchors, *(i for i in self.neighbours if i not in self.anchors)]


def local_evidence(
    window: int, members: Sequence[int], rank: dict[int, int], per_window: int, neighbours: int
) -> Evidence:
    """Model-free: the window's `per_window` turns ranked best by the question's fused ranking (`rank`: item id
    -> position), and up to `neighbours` turns either side of each, inside the window."""
    placed = sorted((rank[i], pos) for pos, i in enumerate(members) if i in rank)
    anchors = [members[pos] for _, pos in placed[:per_window]]
    return Evidence(window, anchors, around(members, anchors, neighbours), found=bool(anchors))


def around(members: Sequence[int], anchors: Sequence[int], neighbours: int) -> list[int]:
    """Up to `neighbours` turns either side of each anchor inside the window (its `members`), anchors excluded,
    nearest first per anchor."""
    position = {item: p for p, item in enumerate(members)}
    out: list[int] = []
    for anchor in anchors:
        for d in range(1, neighbours + 1):
            for near in (position[anchor] - d, position[anchor] + d):
                if 0 <= near < len(members) and members[near] not in anchors and members[near] not in out:
                    out.append(members[near])
    return out


def assistant_messages(block: str, question: str, now: str | None = None) -> list[dict[str, str]]:
    """The assistant's prompt: its raw window and the question."""
    when = f"Today is {now}.\n" if now else ""
    return [
        {"role": "system", "content": ASSISTANT_PROMPT},
        {"role": "user", "content": f"Excerpts:\n{block}\n\n{when}Question: {question}"},
    ]


def model_evidence(
    client: LLMClient,
    block: str,
    ids: Sequence[str],
    question: str,
    *,
    per_window: int,
    margin: float,
    note_tokens: int,
    now: str | None = None,
) -> tuple[str, list[str]]:
    """Model mode: the assistant's one-line note, then up to `per_window` supporting turn ids chosen under
    constraint among `ids` (a further id only within `margin` log-probability of the first). Raises LLMError."""
    messages = assistant_messages(block, question, now)
    note = client.chat(messages, max_tokens=note_tokens).text.strip().split("\n")[0].strip()
    asked = [
        *messages,
        {"role": "assistant", "content": note or NOTHING},
        {"role": "user", "content": "Give the id of the excerpt that supports your line."},
    ]
    chosen = client.choose(asked, list(ids), k=min(per_window, len(ids)))
    best = chosen[0].logprob
    if best is None:
        return note, [chosen[0].option]
    return note, [c.option for c in chosen if c.logprob is not None and c.logprob >= best - margin]


def says_nothing(note: str) -> bool:
    """Whether an assistant's note says its window does not answer the question."""
    lowered = note.lower().strip(" .\"'")
    return not lowered or lowered.startswith(NOTHING) or lowered in {"nothing", "none", "n/a"}
