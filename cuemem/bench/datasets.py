"""Benchmark loaders: LoCoMo (Maharana et al., ACL 2024) and LongMemEval (Wu et al., ICLR 2025).

Each yields `Conversation`s: the turns that go into one fresh namespace, and the questions asked of it, with
evidence as turn ids (LongMemEval also at session level). Conventions follow docs/design.md, "Benchmark data".
"""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError
from ..formats import locomo_turns, read_locomo
from ..types import Turn

EVIDENCE_ID = re.compile(r"D\d+:\d+")

SPLITS = ("dev", "test")
# The fixed development split (issue 13): constants are chosen on `dev`, figures are reported on `test`.
# LoCoMo: the first five conversations of the file are dev, the last five test.
LOCOMO_DEV = frozenset({"conv-26", "conv-30", "conv-41", "conv-42", "conv-43"})
# LoCoMo's question categories by name (`cuemem bench locomo --types`): the file numbers them.
LOCOMO_CATEGORIES = {"multi-hop": "1", "temporal": "2", "open-domain": "3", "single-hop": "4", "adversarial": "5"}


def split_of(dataset: str, conversation_id: str) -> str:
    """The split a conversation (LoCoMo) or question (LongMemEval) belongs to: LoCoMo by conversation id
    (LOCOMO_DEV), LongMemEval by question id (the first byte of its sha256 even = dev, odd = test; stable for
    every id, about half each)."""
    if dataset == "locomo":
        return "dev" if conversation_id in LOCOMO_DEV else "test"
    return "dev" if hashlib.sha256(conversation_id.encode()).digest()[0] % 2 == 0 else "test"


@dataclass
class Question:
    id: str
    text: str
    answer: str
    category: str
    evidence: list[str]  # turn ids that resolve to turns of the conversation
    evidence_sessions: list[str] = field(default_factory=list)
    date: str | None = None
    adversarial: bool = False
    # Look-alike benchmarks (cuemem.bench.came): the turns of values since replaced, and the turns stating the same
    # attribute of other goals; the report says how often the top-ranked wrong turn is one of them.
    superseded: list[str] = field(default_factory=list)
    lookalikes: list[str] = field(default_factory=list)
    # Look-alike benchmarks: whether an evidence turn leaves its goal implicit (issue 34); None where not known.
    implicit: bool | None = None


@dataclass
class Conversation:
    id: str
    turns: list[Turn]
    questions: list[Question]


def load_locomo(path: str | Path, *, limit: int | None = None) -> Iterator[Conversation]:
    """LoCoMo conversations. Evidence ids are extracted with D\\d+:\\d+ (six entries are malformed upstream) and
    normalised ("D30:05" -> "D30:5"); ids that resolve to no turn are dropped. Image captions are in each turn's
    metadata as "image_caption" (cuemem.formats.locomo_turns)."""
    for number, sample in enumerate(read_locomo(path)):
        if limit is not None and number >= limit:
            return
        turns = locomo_turns(sample)
        known = {t.id for t in turns}
        unnamed = _unnamed(sample)
        questions = []
        for i, qa in enumerate(sample.get("qa", [])):
            ids = _turn_ids(qa.get("evidence", []), known)
            adversarial = str(qa.get("category")) == "5"
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(
                Question(
                    id=f"{sample['sample_id']}#{i}",
                    text=qa["question"],
                    answer=str(answer),
                    category=str(qa.get("category")),
                    evidence=ids,
                    adversarial=adversarial,
                    superseded=_turn_ids(qa.get("superseded", []), known),
                    lookalikes=_turn_ids(qa.get("lookalikes", []), known),
                    implicit=_implicit(qa, ids, unnamed),
                )
            )
        yield Conversation(str(sample["sample_id"]), turns, questions)


def _unnamed(sample: dict[str, Any]) -> frozenset[str] | None:
    """A generated conversation's turns that leave their goal implicit, read off its plan (None for any other
    sample): files written before the questions carried `implicit` still get the flag."""
    plan = sample.get("came", {}).get("plan") if isinstance(sample.get("came"), dict) else None
    if not isinstance(plan, list):
        return None
    from .came_questions import unnamed_turns

    return unnamed_turns(plan)


def _implicit(qa: dict[str, Any], evidence: list[str], unnamed: frozenset[str] | None) -> bool | None:
    """The question's `implicit` flag as written, else derived from the plan (any evidence turn unnamed)."""
    if isinstance(qa.get("implicit"), bool):
        return bool(qa["implicit"])
    return None if unnamed is None else any(t in unnamed for t in evidence)


def _turn_ids(raw: Any, known: set[str]) -> list[str]:
    """Turn ids in a LoCoMo evidence list, extracted with D\\d+:\\d+ and normalised; unknown ids dropped."""
    ids: list[str] = []
    values = raw if isinstance(raw, list) else [raw]
    for found in EVIDENCE_ID.findall(" ".join(map(str, values))):
        session, turn = found[1:].split(":")
        normal = f"D{int(session)}:{int(turn)}"
        if normal in known and normal not in ids:
            ids.append(normal)
    return ids


def _open(path: Path) -> Any:
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def load_longmemeval(path: str | Path, *, limit: int | None = None) -> Iterator[Conversation]:
    """LongMemEval items, streamed (the S file is 257 MB unpacked): each question with its own haystack. Turn ids
    are "<session id>:<position>"; turn-level evidence is `has_answer`, session-level `answer_session_ids`."""
    import ijson

    path = Path(path)
    with _open(path) as fh:
        try:
            for number, item in enumerate(ijson.items(fh, "item", use_float=True)):
                if limit is not None and number >= limit:
                    return
                yield _longmemeval_item(item)
        except ijson.JSONError as exc:
            raise ImportFormatError(f"{path} is not LongMemEval JSON: {exc}") from exc


def _longmemeval_item(item: dict[str, Any]) -> Conversation:
    turns, evidence = [], []
    for session_id, date, session in zip(
        item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
    ):
        for position, message in enumerate(session, start=1):
            tid = f"{session_id}:{position}"
            turns.append(
                Turn(
                    id=tid,
                    text=message.get("content") or " ",
                    speaker=message.get("role", "user"),
                    session_id=session_id,
                    timestamp=date,
                )
            )
            if message.get("has_answer"):
                evidence.append(tid)
    qid = str(item["question_id"])
    question = Question(
        id=qid,
        text=item["question"],
        answer=str(item["answer"]),
        category=item["question_type"],
        evidence=evidence,
        evidence_sessions=list(item.get("answer_session_ids", [])),
        date=item.get("question_date"),
        adversarial=qid.endswith("_abs"),
    )
    return Conversation(qid, turns, [question])
