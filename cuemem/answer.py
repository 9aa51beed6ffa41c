"""The reader: answer a question from retrieved turns, citing only turn ids that were in its context.

The model answers from the packed excerpts, then *chooses* the supporting ids under a token-trie constraint
among the ids present in its context, so a citation can never name a turn the reader did not see. (Choosing the
evidence first and answering from it alone cited evidence for 3 of the demo's 8 questions instead of 6.)
"""

from __future__ import annotations

from collections.abc import Sequence

from .engines.structure import context_block
from .llm import LLMClient, LLMError
from .types import Answer, Retrieval

ABSTAIN = "The memory does not say."  # what the reader replies when its excerpts do not hold the answer


def system_prompt(abstain: str = ABSTAIN) -> str:
    """The reader's instructions, with the phrase it replies when the excerpts do not say (abstention)."""
    return (
        "You answer questions about a conversation history using only the excerpts given. "
        "Each excerpt starts with its id in brackets. Reply with a short answer, a few words. "
        f'If the excerpts do not say, reply "{abstain}"'
    )


def read(
    client: LLMClient,
    question: str,
    retrieval: Retrieval,
    *,
    max_tokens: int = 32,
    cite: int = 2,
    margin: float = 2.0,
    now: str | None = None,
    abstain: str = ABSTAIN,
    notes: Sequence[str] = (),
) -> Answer:
    """Answer from the packed hits, then choose up to `cite` supporting ids among those in the context (a second
    one only if its log-probability is within `margin` of the first). `now` is the date the question is asked
    (LongMemEval's question date), which "how long ago" questions need; `abstain` is the reply when the excerpts
    do not say (a benchmark passes its own, e.g. LoCoMo's "Not mentioned in the conversation."); `notes` are lines
    shown after the excerpts (E-mem's master: the assistants' findings, which statement revises which)."""
    if not retrieval.hits:
        return Answer(f"{abstain} (Nothing relevant is in memory.)", [], retrieval, list(notes))
    block, ids = context_block(retrieval.hits)
    when = f"Today is {now}.\n" if now else ""
    noted = "Notes:\n" + "\n".join(f"- {n}" for n in notes) + "\n\n" if notes else ""
    messages = [
        {"role": "system", "content": system_prompt(abstain)},
        {"role": "user", "content": f"Excerpts:\n{block}\n\n{noted}{when}Question: {question}"},
    ]
    text = client.chat(messages, max_tokens=max_tokens).text.strip()
    text = text.split("\n")[0].strip() or abstain  # small models run on past the answer
    asked = [
        *messages,
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Give the id of the excerpt that supports your answer."},
    ]
    try:
        chosen = client.choose(asked, ids, k=min(cite, len(ids)))
    except LLMError:
        return Answer(text, [], retrieval, list(notes))  # the answer stands; it just cites nothing
    best = chosen[0].logprob
    if best is None:  # the backend reports no log-probabilities: cite its first choice only
        return Answer(text, [chosen[0].option], retrieval, list(notes))
    cited = [c.option for c in chosen if c.logprob is not None and c.logprob >= best - margin]
    return Answer(text, cited, retrieval, list(notes))
