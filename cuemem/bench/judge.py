"""LLM-as-judge accuracy ("J"), as many memory papers report it: a judge model labels each answer CORRECT or
WRONG against the gold answer. The label is a constrained choice, so it is always one of the two.

LongMemEval's own evaluation grades each question type by its own rule (its `evaluate_qa.py`); `RULES` states
those rules in our words, and LoCoMo questions get the generous default."""

from __future__ import annotations

from ..llm import LLMClient

PROMPT = (
    "You grade answers to questions about a long conversation. {rule}\n\n"
    "Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}\n\n"
    "Label the generated answer."
)

DEFAULT_RULE = (
    "Be generous: an answer is CORRECT when it refers to the same thing as the gold answer (another wording, or "
    "a date in another format, still counts), and WRONG otherwise."
)

_CONTAINS = (
    "The answer is CORRECT when it contains the gold answer or is equivalent to it, including when it shows all "
    "the intermediate steps that lead to it; it is WRONG when it gives only part of what the gold answer asks for."
)

RULES: dict[str, str] = {
    "single-session-user": _CONTAINS,
    "single-session-assistant": _CONTAINS,
    "multi-session": _CONTAINS,
    "temporal-reasoning": _CONTAINS + " Do not count an off-by-one error in a number of days, weeks or months.",
    "knowledge-update": _CONTAINS + " An answer that also mentions earlier information is CORRECT as long as the "
    "updated answer it gives is the gold answer.",
    "single-session-preference": "The gold answer is a rubric of the personalised reply wanted. The answer is "
    "CORRECT when it uses the user's personal information as the rubric asks, without covering every point.",
    "abstention": "The question cannot be answered from the conversation, and the gold answer explains why. The "
    "answer is CORRECT when it says the information is not available or the question cannot be answered.",
}


def judge(client: LLMClient, question: str, gold: str, answer: str, kind: str | None = None) -> bool:
    """True when the judge labels the answer CORRECT (calls count under the stage "judge"). `kind` picks the
    grading rule (a LongMemEval question type, or "abstention"); other kinds get the generous default."""
    rule = RULES.get(kind or "", DEFAULT_RULE)
    messages = [{"role": "user", "content": PROMPT.format(rule=rule, question=question, gold=gold, answer=answer)}]
    with client.stage("judge"):
        return client.choose(messages, ["CORRECT", "WRONG"])[0].option == "CORRECT"
