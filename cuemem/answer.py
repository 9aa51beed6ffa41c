"""The reader: answer a question from the smallest evidence that holds it, citing only turns it was shown.

E-mem's point (fewer, better tokens): the reader sees a few excerpts, not a packed kilobyte. `evidence` keeps the
best-ranked hits within `answer_evidence` tokens (the ranking already puts current values before replaced ones
and the named goal before look-alikes); each excerpt shows its turn id, its date, the goal it belongs to where the
turn leaves it implicit ("re: Lisbon trip"), every relative date resolved to an absolute one by code
("yesterday = 7 May 2023"), and, for a value replaced later, which turn replaced it.

The model answers from those excerpts; its reply is cut to what it adds to the question (`concise`: "Lena is
allergic to shellfish." → "shellfish"). It cites the shown turns that say the answer (`holding`); where none says
all of it, the model *chooses* the supporting ids under constraint among the ids it was shown, so a citation can
never name a turn it did not see. When the excerpts do not hold the answer it replies
"The memory does not say." `read_stream` gives the answer's text as it is decoded, then the whole `Answer`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime

from .index.dates import format_day
from .index.names import is_generic_label, named_speaker, speaker_index
from .index.text import STOPWORDS
from .llm import LLMClient, LLMError
from .types import Answer, Hit, Retrieval

ABSTAIN = "The memory does not say."  # what the reader replies when its excerpts do not hold the answer
EVIDENCE_TOKENS = 320  # settings.answer_budget: tokens of excerpts the reader sees (chosen on dev, BENCHMARKS)
EVIDENCE_TURNS = 6  # at most this many excerpts, however short
PREMISE_DEPTH = 2  # attributed_elsewhere: how many best statements must all be another speaker's (LoCoMo dev)
PREMISE_READ = 3  # ... among this many best hits of the search without the name (LoCoMo dev, BENCHMARKS.md)
CONCISE_WORDS = 4  # concise: an answer of fewer words is left whole
GOAL_WORDS = 5  # a goal in focus longer than this (a quoted turn) is not shown as "re: ..."
_RESOLVED = re.compile(r"\[([^\[\]]+ = [^\[\]]+)\]\s*$")
Search = Callable[[str], Sequence[Hit]]  # a text searched for in the question's namespace, best hit first
_LIST_MARK = re.compile(r"^(?:[-*•]|\d{1,2}[.)])\s*")


def system_prompt(abstain: str = ABSTAIN) -> str:
    """The reader's instructions, with the phrase it replies when the excerpts do not say (abstention)."""
    return (
        "You answer a question about a conversation using only the excerpts given. Each excerpt starts with its"
        " id in brackets, the day it was said and who said it. A date in parentheses is the day that words such"
        ' as "yesterday" or "last week" refer to: use it when asked when something happened. Answer in a few'
        " words: a name, a date, a number or a short phrase. If a value changed, give the latest one. Only if no"
        f' excerpt is about the question, reply exactly "{abstain}"'
    )


def words_tokens(text: str) -> int:
    """A tokenizer-free estimate of a text's tokens (4 per 3 words), where no counter is given."""
    return max(1, (len(text.split()) * 4 + 2) // 3)


def excerpt(hit: Hit) -> str:
    """One excerpt as the reader sees it: "[D3:1] 18 March 2024, Maya (re: Lisbon trip): ... [yesterday = ...]"
    (a replaced value says which turn replaced it)."""
    detail = hit.detail
    when = detail.get("date")
    day = format_day(datetime.fromisoformat(when)) if isinstance(when, str) and when[:4].isdigit() else ""
    speaker, said = _speaker_and_words(hit)
    goals = [g for g in detail.get("resolved") or [] if isinstance(g, str) and _names_a_goal(g)]
    who = speaker + (f" (re: {', '.join(goals[:2])})" if goals else "")
    head = ", ".join(x for x in (day, who) if x)
    said = inline_dates(said)
    revision = detail.get("revision") or {}
    later = revision.get("replaced_by") if isinstance(revision, dict) else None
    note = f" (replaced later by {', '.join(later)})" if later else ""
    return f"[{','.join(hit.turn_ids)}] {head}: {said}{note}" if head else f"[{','.join(hit.turn_ids)}] {said}{note}"


def _speaker_and_words(hit: Hit) -> tuple[str, str]:
    """A hit's speaker and its words (a turn's text is stored as "Speaker: words")."""
    text = hit.text
    if hit.detail.get("form") is not None and ": " in text:
        speaker, said = text.split(": ", 1)
        return speaker, said
    return "", text


def inline_dates(text: str) -> str:
    """Each resolved relative date moved next to its phrase: "I start on the 1st of May (1 May 2024), ..." rather
    than a note at the end, which a small reader overlooks."""
    match = _RESOLVED.search(text)
    if not match:
        return text
    body = text[: match.start()].rstrip()
    for part in match.group(1).split(";"):
        phrase, _, label = part.strip().partition(" = ")
        at = body.find(phrase)
        if phrase and at >= 0 and phrase != label:
            end = at + len(phrase)
            body = f"{body[:end]} ({label}){body[end:]}"
        elif phrase != label:
            body += f" [{phrase} = {label}]"
    return body


def _names_a_goal(anchor: str) -> bool:
    """Whether a goal in focus is worth showing: two to GOAL_WORDS words ("Lisbon trip", "Casa Azul") or a
    numbered one ("Day 2"); a lone name ("Mel", "Good") says nothing the excerpt does not."""
    words = anchor.split()
    return 2 <= len(words) <= GOAL_WORDS or (len(words) == 1 and any(ch.isdigit() for ch in anchor))


def first_answer(text: str) -> str:
    """The answer in a reply: its first line, or, where that line only introduces a list ("His goals are:"), the
    list's items joined by commas (small models run on past the answer, but lists are answers too)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if not lines[0].endswith(":") or len(lines) == 1:
        return lines[0]
    items: list[str] = []
    for line in lines[1:]:
        item = _LIST_MARK.sub("", line).strip()
        if not item or (item == line and items):  # the list ended
            break
        items.append(item.rstrip(".;,"))
    return ", ".join(items) or lines[0]


# Words that restate nothing when they open or close an answer: the shared stop words, less those that carry an
# answer's meaning at its edge (a negation, an order in time, a quantity, "am" of "5 am").
_FUNCTION_WORDS = STOPWORDS - frozenset(
    re.findall(r"\w+", "am not no nor before after again more most few all only same other up down off out over under")
)
_YES_NO = frozenset(re.findall(r"\w+", "am is are was were do does did has have had can could will would shall should"))
_ECHO = re.compile(  # an excerpt's header, echoed: "[D5:3] 15 April 2024, Theo (re: Fermento bakery): "
    r"^(?P<id>\[[^\]]*\]\s*)?(?P<day>\d{1,2} [A-Z][a-z]+ \d{4},\s*)?"
    r"(?:(?P<who>[A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*)?)(?P<goal> \(re: [^)]*\))?:\s+)?"
)


def _without_echo(answer: str, speakers: Collection[str]) -> str:
    """The answer without an excerpt's header it repeats: an id, a day or a goal in focus, or a speaker's name
    before a colon ("Jon: That's a great goal!"); "Casa Azul: 110 euros" keeps its name."""
    match = _ECHO.match(answer)
    if match is None or not match.group(0):
        return answer
    if match.group("id") or match.group("day") or match.group("goal") or match.group("who") in speakers:
        return answer[match.end() :].strip() or answer
    return answer


def _stem(word: str) -> str:
    word = re.sub(r"['’]s?$", "", word.lower())
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _open_echo(text: str) -> bool:
    """Whether a reply so far may still be an excerpt's header being echoed ("Theo (re: Fermento" ...)."""
    return ("(re:" in text and "):" not in text) or (text.startswith("[") and "]" not in text)


def concise(answer: str, question: str, *, speakers: Collection[str] = (), shortest: int = CONCISE_WORDS) -> str:
    """The answer without what restates the question (issue 35: "in a few words"): an echoed excerpt header
    ("Theo (re: Fermento bakery): ...", or "Jon: ..." where Jon is one of the `speakers` shown; `_without_echo`) and
    the leading and trailing words that only repeat the question's or are
    function words ("Mel and her kids painted [a sunset with a palm tree] in their latest project"). Answers
    shorter than `shortest` words, answers to yes/no questions and answers that would lose every word stay as
    they are."""
    words = question.split()
    if not words or words[0].lower() in _YES_NO:
        return answer
    body = _without_echo(answer, speakers)
    tokens = body.split()
    if len(tokens) < shortest:
        return body
    asked = {_stem(w) for w in re.findall(r"[\w'’]+", question)}

    def restated(token: str) -> bool:
        """Whether every word of the token ("7:45", "Melanie's") is the question's or a function word."""
        core = re.sub(r"^[^\w]+|[^\w'’]+$", "", token)
        parts = re.findall(r"\w+", re.sub(r"['’]s?$", "", core))
        return all(part.lower() in _FUNCTION_WORDS or _stem(part) in asked for part in parts)

    def named(i: int) -> bool:
        core = re.sub(r"^[^\w]+", "", tokens[i])
        return core[:1].isupper() and i > 0  # a capital that does not just open the sentence

    start, end = 0, len(tokens)
    while start < end and restated(tokens[start]):
        start += 1
    while end > start and restated(tokens[end - 1]):
        end -= 1
    while 0 < start < end and named(start - 1) and named(start) and not tokens[start - 1].endswith((",", ".")):
        start -= 1  # a name is kept whole ("Hotel Ribeira" when asked which hotel)
    while start < end < len(tokens) and named(end) and named(end - 1) and not tokens[end - 1].endswith((",", ".")):
        end += 1
    kept = " ".join(tokens[start:end]).strip(" .,;:")
    if kept.count('"') % 2:
        kept = kept.strip('"')
    return kept or body


def evidence(
    hits: Sequence[Hit],
    budget_tokens: int = EVIDENCE_TOKENS,
    *,
    most: int = EVIDENCE_TURNS,
    count: Callable[[str], int] = words_tokens,
) -> list[tuple[Hit, str]]:
    """The smallest evidence: hits in rank order with their excerpts while they fit `budget_tokens` (at least
    the best one), at most `most`; shown in date order so "the latest" reads top to bottom."""
    chosen: list[tuple[Hit, str, int]] = []
    used = 0
    for rank, hit in enumerate(hits):
        if len(chosen) >= most:
            break
        text = excerpt(hit)
        cost = count(text)
        if chosen and used + cost > budget_tokens:
            continue
        chosen.append((hit, text, rank))
        used += cost
    return [(h, t) for h, t, _ in sorted(chosen, key=lambda c: (_when(c[0]), c[2]))]


def _when(hit: Hit) -> str:
    when = hit.detail.get("date")
    return when if isinstance(when, str) else "~"  # undated after dated


def dates_shown(hits: Sequence[Hit]) -> dict[str, list[str]]:
    """Per turn id, the absolute dates its excerpt shows: the day it was said and each relative date resolved."""
    out: dict[str, list[str]] = {}
    for hit in hits:
        found: list[str] = []
        when = hit.detail.get("date")
        if isinstance(when, str) and when[:4].isdigit():
            found.append(format_day(datetime.fromisoformat(when)))
        match = _RESOLVED.search(hit.text)
        if match:
            found += [part.strip() for part in match.group(1).split(";")]
        for turn_id in hit.turn_ids:
            out[turn_id] = found
    return out


def messages_for(question: str, shown: Sequence[str], *, now: str | None, abstain: str, notes: Sequence[str]) -> list:
    when = f"Today is {now}.\n" if now else ""
    noted = "Notes:\n" + "\n".join(f"- {n}" for n in notes) + "\n\n" if notes else ""
    return [
        {"role": "system", "content": system_prompt(abstain)},
        {"role": "user", "content": "Excerpts:\n" + "\n".join(shown) + f"\n\n{noted}{when}Question: {question}"},
    ]


def read_stream(
    client: LLMClient,
    question: str,
    retrieval: Retrieval,
    *,
    max_tokens: int = 48,
    cite: int = 2,
    margin: float = 2.0,
    now: str | None = None,
    abstain: str = ABSTAIN,
    notes: Sequence[str] = (),
    evidence_tokens: int = EVIDENCE_TOKENS,
    count: Callable[[str], int] = words_tokens,
    verify: float | None = None,
    search: Search | None = None,
) -> Iterator[str | Answer]:
    """`read`, streamed: the answer's text in pieces as the model decodes them, then the `Answer` (last item).
    Given `search` (the question's namespace searched for a text), a question about one speaker whose subject
    another speaker's turns hold is answered with the abstention, without a model call (`attributed_elsewhere`)."""
    if not retrieval.hits:
        text = f"{abstain} (Nothing relevant is in memory.)"
        yield text
        yield Answer(text, [], retrieval, list(notes), evidence_tokens=0)
        return
    elsewhere = attributed_elsewhere(question, retrieval.hits, search) if search is not None else None
    if elsewhere is not None:
        speaker, grounds = elsewhere
        text = f"{abstain} (The turns about this are {speaker}'s.)"
        yield text
        ids = [t for hit in grounds for t in hit.turn_ids]
        yield Answer(text, [], retrieval, list(notes), evidence_tokens=0, evidence_turn_ids=ids)
        return
    picked = evidence(retrieval.hits, evidence_tokens, count=count)
    shown = [text for _, text in picked]
    speakers = {str(hit.detail["speaker"]) for hit, _ in picked if hit.detail.get("speaker")}
    ids = list(dict.fromkeys(t for hit, _ in picked for t in hit.turn_ids))
    messages = messages_for(question, shown, now=now, abstain=abstain, notes=notes)
    pieces: list[str] = []
    printed = ""
    for piece in client.stream(messages, max_tokens=max_tokens):
        pieces.append(piece)
        so_far = "".join(pieces).lstrip()
        line = so_far.split("\n")[0]
        done = "\n" in so_far  # small models run on past the answer: its first line is the answer
        if line.endswith(":"):  # a list follows: it is streamed whole, at the end
            continue
        words = line if done else line.rsplit(" ", 1)[0] if " " in line else ""  # whole words only
        held = _open_echo(words) or abstain.lower().startswith(words.lower()) or abstains(words, abstain)
        if len(words.split()) >= CONCISE_WORDS and not held:
            short = concise(words, question, speakers=speakers)
            if short.startswith(printed) and len(short) > len(printed):
                yield short[len(printed) :]
                printed = short
        if done:
            break
    text = first_answer("".join(pieces)) or abstain
    text = text if abstains(text, abstain) else concise(text, question, speakers=speakers)
    if text != printed:
        yield text[len(printed) :] if text.startswith(printed) else "\n" + text
    tokens = sum(count(s) for s in shown)
    used = {h.turn_ids[0]: h for h, _ in picked}
    dates = dates_shown([h for h, _ in picked])
    shown_ids = [t for h in used.values() for t in h.turn_ids]
    if abstains(text, abstain):
        yield Answer(text, [], retrieval, list(notes), evidence_tokens=tokens, evidence_turn_ids=shown_ids)
        return
    support = _support(client, messages, text) if verify is not None else None
    if support is not None and verify is not None and support < verify:  # the reader's own check says no
        yield Answer(
            abstain, [], retrieval, list(notes), evidence_tokens=tokens, evidence_turn_ids=shown_ids, support=support
        )
        return
    shown_ones = {id(hit) for hit, _ in picked}
    shown_hits = [hit for hit in retrieval.hits if id(hit) in shown_ones]  # the shown hits, in rank order
    cited = holding(text, shown_hits, cite) or _cite(client, messages, text, ids, cite, margin)
    yield Answer(
        text,
        cited,
        retrieval,
        list(notes),
        dates=sorted({d for t in cited for d in dates.get(t, [])}, key=lambda d: (len(d), d)),
        evidence_tokens=tokens,
        evidence_turn_ids=shown_ids,
        support=support,
    )


def read(
    client: LLMClient,
    question: str,
    retrieval: Retrieval,
    *,
    max_tokens: int = 48,
    cite: int = 2,
    margin: float = 2.0,
    now: str | None = None,
    abstain: str = ABSTAIN,
    notes: Sequence[str] = (),
    evidence_tokens: int = EVIDENCE_TOKENS,
    count: Callable[[str], int] = words_tokens,
    verify: float | None = None,
    search: Search | None = None,
) -> Answer:
    """Answer from the smallest evidence among the hits, then choose up to `cite` supporting ids among those
    shown (a second one only if its log-probability is within `margin` of the first). `now` is the date the
    question is asked (LongMemEval's question date), which "how long ago" questions need; `abstain` is the reply
    when the excerpts do not say (a benchmark passes its own, e.g. LoCoMo's "Not mentioned in the
    conversation."); `notes` are lines shown after the excerpts (E-mem's master: the assistants' findings);
    `evidence_tokens` bounds the excerpts, counted by `count`; `search`, where given, checks the question's premise
    (`attributed_elsewhere`)."""
    return final(
        read_stream(
            client,
            question,
            retrieval,
            max_tokens=max_tokens,
            cite=cite,
            margin=margin,
            now=now,
            abstain=abstain,
            notes=notes,
            evidence_tokens=evidence_tokens,
            count=count,
            verify=verify,
            search=search,
        )
    )


def final(stream: Iterable[str | Answer]) -> Answer:
    """The `Answer` a streamed answer ends with (its pieces of text consumed on the way)."""
    *_, last = stream
    if not isinstance(last, Answer):
        raise TypeError(f"an answer stream ended with {type(last).__name__}, not an Answer")
    return last


def attributed_elsewhere(
    question: str, hits: Sequence[Hit], search: Search, depth: int = PREMISE_DEPTH
) -> tuple[str, list[Hit]] | None:
    """The question's premise (issue 35 item 3): it names one of the conversation's speakers (`asked_speaker`),
    yet what it asks about, searched for with that name taken out (`without_person`, PREMISE_READ hits), is what
    another speaker said: the `depth` best of those hits that state something (a turn asking a question, "How
    long do you walk them?", is about its listener, and is passed over) are each another speaker's turn naming the
    asked one only to address them ("Thanks, Mel!"). The memory holds it of someone else, and a reader shown those
    turns would answer a question about one person with another's words. Returns that speaker and those turns,
    else None. Questions naming no speaker, or two, and conversations of generic labels are not checked."""
    asked = asked_speaker(question, hits)
    if asked is None:
        return None
    person, forms = asked
    stated = [h for h in list(search(without_person(question, forms)))[:PREMISE_READ] if "?" not in _said(h)]
    found = stated[:depth]
    if len(found) < depth:
        return None
    said_by = [h.detail.get("speaker") for h in found]
    if not all(isinstance(s, str) and s and s != person and not is_generic_label(s) for s in said_by):
        return None
    if not all(_only_addressed(_said(h), forms) for h in found):
        return None
    return str(said_by[0]), found


def _said(hit: Hit) -> str:
    """A hit's words without the "Speaker: " in front."""
    return hit.text.split(": ", 1)[-1]


def asked_speaker(question: str, hits: Sequence[Hit]) -> tuple[str, set[str]] | None:
    """The one speaker of the hits that `question` names (with the forms it goes by), where it names exactly one
    and the hits show at least two speakers with names (`index.names.named_speaker`)."""
    return named_speaker(question, speaker_index(h.detail.get("speaker") for h in hits))


def without_person(question: str, forms: Iterable[str]) -> str:
    """The question with the person's name (and its possessive) replaced by "someone": what it asks, of no one in
    particular, so that a search ranks the turns about that by content rather than by who is named."""
    for form in sorted(forms, key=len, reverse=True):
        question = re.sub(
            rf"\b{re.escape(form)}(['’]s?)?(?=\W|$)",
            lambda m: "someone's" if m.group(1) else "someone",
            question,
            flags=re.I,
        )
    return question


_GREETING = re.compile(r"(?:^|[.!?]\s*)(?:hey|hi|hello|thanks|thank you|oh|wow|yes|yeah|sure|dear|congrats)$", re.I)


def _only_addressed(text: str, names: Iterable[str]) -> bool:
    """Whether every mention of the person in `text` addresses them, set off as a vocative is ("Thanks, Mel!",
    "Hey Mel, look", "That's great, Mel."), rather than saying something of them ("Mel ran a race")."""
    for name in names:
        for found in re.finditer(rf"\b{re.escape(name)}\b", text, flags=re.I):
            before = text[: found.start()].rstrip()
            opens = not before or before.endswith((",", "!", ".", "?")) or _GREETING.search(before) is not None
            closes = text[found.end() : found.end() + 1] in ("", ",", "!", ".", "?")
            if not (opens and closes):
                return False
    return True


def abstains(text: str, abstain: str = ABSTAIN) -> bool:
    """Whether a reply is the abstention (a small model may shorten or decorate it)."""
    core = abstain.lower().rstrip(".")
    said = text.lower().strip(" .\"'")
    return core in said or said in {"unknown", "not mentioned", "none", "n/a"}


NEGATIONS = frozenset(("no", "not", "never", "nor", "none", "nothing"))
_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*|[^\W\d_]+(?:['’][^\W\d_]+)*")  # a number whole: "1,110" is not "110"


def _content_words(text: str) -> set[str]:
    """A text's words that carry content: lower-cased, numbers whole, possessives dropped, stop words out but the
    negations in ("not allergic" is not "allergic"). Not BM25's `index.text.analyze`, which splits "1,110" in two:
    matching an answer needs the number as said."""
    words = (w[:-2] if w.endswith(("'s", "’s")) else w for w in _TOKEN.findall(text.lower()))
    return {w for w in words if w and (w not in STOPWORDS or w in NEGATIONS)}


def holding(answer: str, hits: Sequence[Hit], most: int = 2) -> list[str]:
    """The turns that hold the answer: the ids of the first `most` turn hits (in rank order) whose words, the dates
    resolved in them included, say every content word of the answer, its numbers whole and its negations too
    ("110 euros" in "Day 2 is now 110 euros a night", not in "1,110 euros"; the speaker's name before a turn's
    words does not count). Only a hit of one turn is read (a record or an episode cites turns it does not quote).
    A citation that needs no model and cannot name a turn that does not say it; empty where no hit says all of
    them, or the answer is a bare yes or no (the model then chooses, `_cite`)."""
    wanted = _content_words(answer)
    if not wanted - {"yes", "no", "not"} or most <= 0:
        return []
    out: list[str] = []
    for hit in hits:
        if len(hit.turn_ids) != 1 or hit.detail.get("form") is None:
            continue
        if wanted <= _content_words(inline_dates(_speaker_and_words(hit)[1])):
            out += [t for t in hit.turn_ids if t not in out]
            if len(out) >= most:
                break
    return out[:most]


def _support(client: LLMClient, messages: list, text: str) -> float | None:
    """How strongly the reader holds its answer to be stated in the excerpts: log P(yes) - log P(no) when asked
    (None where the backend gives no log-probabilities or fails)."""
    asked = [
        *messages,
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Is that answer stated in the excerpts? Reply yes or no."},
    ]
    try:
        chosen = {c.option: c.logprob for c in client.choose(asked, ["yes", "no"], k=2)}
    except LLMError:
        return None
    yes, no = chosen.get("yes"), chosen.get("no")
    return None if yes is None or no is None else yes - no


def _cite(client: LLMClient, messages: list, text: str, ids: list[str], cite: int, margin: float) -> list[str]:
    asked = [
        *messages,
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Give the id of the excerpt that supports your answer."},
    ]
    try:
        chosen = client.choose(asked, ids, k=min(cite, len(ids)))
    except LLMError:
        return []  # the answer stands; it just cites nothing
    best = chosen[0].logprob
    if best is None:  # the backend reports no log-probabilities: cite its first choice only
        return [chosen[0].option]
    return [c.option for c in chosen if c.logprob is not None and c.logprob >= best - margin]
