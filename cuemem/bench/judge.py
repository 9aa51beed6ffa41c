"""LLM-as-judge accuracy ("J"), as many memory papers report it: a judge model labels each answer CORRECT or
WRONG against the gold answer. The label is a constrained choice, so it is always one of the two."""

from __future__ import annotations

from ..llm import LLMClient

PROMPT = (
    "You grade answers to questions about a long conversation. Be generous: an answer is CORRECT when it refers "
    "to the same thing as the gold answer (another wording, or a date in another format, still counts), and "
    "WRONG otherwise.\n\nQuestion: {question}\nGold answer: {gold}\nGenerated answer: {answer}\n\n"
    "Label the generated answer."
)


def judge(client: LLMClient, question: str, gold: str, answer: str) -> bool:
    """True when the judge labels the answer CORRECT (calls count under the stage "judge")."""
    messages = [{"role": "user", "content": PROMPT.format(question=question, gold=gold, answer=answer)}]
    with client.stage("judge"):
        return client.choose(messages, ["CORRECT", "WRONG"])[0].option == "CORRECT"
