"""The memory agent's ReAct loop (docs/design.md design 3, issue 17): at each step the model picks the next action by a
constrained choice among tool names and "answer"; tools run with arguments derived from the message; the reply is
written from the tool observations and cites the memory turns it uses; failures degrade the turn, never end it.

Policies (`policy=`):
- "guided" (default): the keyword cues (tools.cues) narrow the options to a shortlist and the model chooses among
  it. First step: the cued tools — or, when none is cued and memory is on, search_memory for a question and
  store_memory for a statement — then "answer" (two options or more, memory off and nothing cued aside). Later
  steps: the cued tools not run yet, then "answer" (the model chooses whenever that is two options or more).
- "model": every available tool not yet run, and "answer", at every step: the model alone decides.
- "rules": the cued tools in a fixed order, then answer; no model choice (the fallback when the model fails).

The model's choice (benchmarks/agent.py --choice-study measured it with the shipped SmolLM2 on a labelled set): a
few-shot prompt with one line per offered tool, and calibrated scores — each option's log-probability minus its
log-probability for a content-free message ("N/A", computed once per option list), which removes the small
model's bias towards the shortest option ("answer").
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UnknownNamespaceError
from ..index.tokens import default_counter
from ..llm import LLMClient, Tally
from ..types import Hit, Namespace
from . import tools
from .metrics import MEMORY_TOOLS, METRICS, AgentMetrics, AgentTurn, ToolCall, log_turn
from .prompts import (
    ANSWER,
    ANSWER_LINE,
    EXAMPLES,
    NOTE_CHARS,
    QUESTION_SYSTEM,
    STATEMENT_SYSTEM,
    TOOLS,
)
from .prompts import Observation as _Observation
from .prompts import choice_prompt as _choice_prompt
from .prompts import cited as _cited
from .prompts import clean_reply as _clean_reply
from .prompts import plain as _plain
from .prompts import reply_prompt as _reply_prompt
from .prompts import summary as _summary
from .prompts import with_notes as _with_notes
from .prompts import with_values as _with_values
from .tools import ToolError, ToolResult

if TYPE_CHECKING:
    from ..memory import Memory

log = logging.getLogger("cuemem.agent")

# the prompt names that lived here before the split (issue 32) stay importable from here
__all__ = [
    "ACTIONS",
    "ANSWER",
    "ANSWER_LINE",
    "EXAMPLES",
    "MAX_MESSAGE_CHARS",
    "NOTE_CHARS",
    "NULL_MESSAGE",
    "ORDER",
    "POLICIES",
    "QUESTION_SYSTEM",
    "STATEMENT_SYSTEM",
    "TOOLS",
    "Agent",
]

NULL_MESSAGE = "N/A"  # the content-free message of the calibration
ACTIONS = (*TOOLS, ANSWER)
ORDER = ("calculator", "clock", "file_search", "search_memory", "recall_profile", "store_memory")  # the fixed policy
POLICIES = ("guided", "model", "rules")
MAX_MESSAGE_CHARS = 20_000


class Agent:
    """A ReAct agent over one namespace of a Memory, with memory tools (search_memory, store_memory, recall_profile)
    and ordinary tools (calculator, clock, file_search). One Agent is one conversation: not for concurrent use."""

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        llm: LLMClient | None = None,
        memory_enabled: bool = True,
        tool_budget: int = 4,
        files_root: Path | str | None = None,
        session_id: str | None = None,
        on_turn: Callable[[AgentTurn], None] | None = None,
        metrics: AgentMetrics | None = None,
        policy: str = "guided",
        history_turns: int = 2,
        k: int = 5,
        budget_tokens: int = 400,
        reply_tokens: int = 48,
    ) -> None:
        """Set up the conversation (design 3's agent). `history_turns`: how many earlier exchanges of this
        conversation the reply prompt shows (working memory, there with memory off too); `k`, `budget_tokens`: the
        hits a memory search returns; `reply_tokens`: the reply's length limit."""
        if tool_budget < 0:
            raise ValueError(f"tool_budget must be >= 0, got {tool_budget}")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}: choose {', '.join(POLICIES)}")
        self.memory = memory
        self.namespace = Namespace(user_id, agent_id, run_id)
        self._llm = llm
        self.memory_enabled = memory_enabled
        self.tool_budget = tool_budget
        self.files_root = Path(files_root) if files_root is not None else None
        self.session_id = session_id
        self.on_turn = on_turn
        self.metrics = metrics if metrics is not None else METRICS
        self.policy = policy
        self.k = k
        self.budget_tokens = budget_tokens
        self.reply_tokens = reply_tokens
        self.history: deque[tuple[str, str]] = deque(maxlen=max(0, history_turns))
        self._stored: list[str] = []  # turn ids store_memory wrote this turn
        self._baselines: dict[tuple[str, ...], dict[str, float]] = {}  # calibration, per option list
        self._last_error = ""  # why the model's choice failed this turn

    # ------------------------------------------------------------------ the turn
    def turn(self, message: str, *, now: str | None = None, on_token: Callable[[str], None] | None = None) -> AgentTurn:
        """Answer one message (design 3's ReAct turn): choose and run tools within the budget, reply from their
        observations, store the exchange in memory (when enabled), record and log the metrics. Tool, memory and
        model failures degrade the turn and are said in the reply; only bad input (an empty message, an
        unreadable `now`) raises ValueError. `on_token` receives the model's reply piece by piece as it is
        decoded (the turn's `reply` is that text, cleaned, with any notes after it)."""
        if not isinstance(message, str) or not message.strip():
            raise ValueError("message must be a non-empty string")
        if len(message) > MAX_MESSAGE_CHARS:
            raise ValueError(f"message is longer than {MAX_MESSAGE_CHARS:,} characters")
        message = message.strip()
        try:
            moment = tools.as_datetime(now)
        except ToolError as exc:
            raise ValueError(str(exc)) from exc
        stamp = now if now is not None else moment.isoformat(timespec="seconds")
        start = time.perf_counter()
        self._stored, self._last_error = [], ""
        result = AgentTurn(message=message, reply="", memory_enabled=self.memory_enabled)
        tally = Tally(default_counter().count)
        client = self._client(result)
        observations: list[_Observation] = []
        stored_message = False
        with client.tally(tally) if client is not None else nullcontext():
            stored_message = self._act(client, message, moment, stamp, result, observations)
            reply = self._reply(client, message, moment, result, observations, on_token)
        result.cited_turn_ids = _cited(reply, message, observations)
        if self.memory_enabled:
            reply = self._remember(message, reply, stamp, stored_message, result)
        result.reply = _with_notes(reply, result.degraded)
        result.latency_s = time.perf_counter() - start
        result.prompt_tokens, result.completion_tokens, result.model_calls = (
            tally.prompt_tokens,
            tally.completion_tokens,
            tally.calls,
        )
        self.history.append((message, result.reply))
        self.metrics.record(result)
        log_turn(result)
        if self.on_turn is not None:
            try:
                self.on_turn(result)
            except Exception:  # a broken observer must not break the conversation
                log.exception("the on_turn callback failed")
        return result

    def _client(self, result: AgentTurn) -> LLMClient | None:
        """The model client: the one given, else the memory's client bound to this namespace's cache (or the
        memory's unbound one); None, with a degraded note, when there is none."""
        if self._llm is not None:
            return self._llm
        try:
            if self.memory_enabled:
                try:
                    ns = self.memory.store.namespace_id(self.namespace, create=True)
                    return self.memory.llm_for(ns)
                except Exception as exc:  # the store is down: the model may still be there
                    log.warning("agent: no namespace-bound model client (%s); using the unbound one", exc)
            return self.memory.llm
        except Exception as exc:
            result.degraded.append(f"the model was unavailable: {_reason(exc)}; replied without it")
            return None

    # ------------------------------------------------------------------ acting
    def available(self) -> list[str]:
        """The tools this agent can run: memory tools with memory on, file search with a folder to search."""
        return [
            t
            for t in ORDER
            if (t not in MEMORY_TOOLS or self.memory_enabled) and (t != "file_search" or self.files_root is not None)
        ]

    def _options(self, message: str, cued: list[str], used: list[str], down: bool) -> list[str]:
        """The actions offered at a step, by policy (see the module docstring); always ends with "answer" or is
        only cued tools. Once memory failed this turn (`down`), its tools are no longer offered."""
        available = [t for t in self.available() if t not in used and not (down and t in MEMORY_TOOLS)]
        if self.policy == "model":
            return [*available, ANSWER]
        remaining = [t for t in cued if t in available]
        if self.policy == "guided":
            if not used:
                kind = "search_memory" if tools.is_question(message) else "store_memory"
                if kind in available and not remaining:
                    remaining.append(kind)
            return [*remaining, ANSWER]
        if remaining:
            return remaining + ([ANSWER] if used else [])
        if not used and not cued and "search_memory" in available and tools.is_question(message):
            return ["search_memory", ANSWER]
        return [ANSWER]

    def _act(
        self,
        client: LLMClient | None,
        message: str,
        moment: datetime,
        stamp: str,
        result: AgentTurn,
        observations: list[_Observation],
    ) -> bool:
        """The ReAct steps (design 3): choose an action among the options, run it, observe; stop at "answer" or
        at the tool budget. Returns whether store_memory stored the whole message."""
        cued = tools.cues(message, memory=self.memory_enabled, files=self.files_root is not None)
        cued = sorted(cued, key=ORDER.index)
        used: list[str] = []
        model_ok = client is not None
        stored_message = down = False
        while True:
            options = self._options(message, cued, used, down)
            if options == [ANSWER]:
                break
            if len(used) >= self.tool_budget:
                result.decisions.append({"options": options, "chosen": ANSWER, "by": "budget"})
                break
            choice, by = self._decide(client if model_ok else None, message, options, observations, cued)
            if by == "fallback" and model_ok and client is not None:
                model_ok = False
                result.degraded.append(f"the model could not choose a tool ({self._last_error}); used a fixed policy")
            result.decisions.append({"options": options, "chosen": choice, "by": by})
            if choice == ANSWER:
                break
            used.append(choice)
            call, observation = self._run(choice, message, moment, stamp, by)
            result.steps.append(call)
            if observation is not None:
                observations.append(observation)
                stored_message = stored_message or observation.value == "stored the message"
            if not call.ok:
                down = down or choice in MEMORY_TOOLS
                what = "memory was unavailable" if choice in MEMORY_TOOLS else f"the {choice} tool failed"
                result.degraded.append(f"{what}: {call.error}; answered without it")
        return stored_message

    def _decide(
        self,
        client: LLMClient | None,
        message: str,
        options: list[str],
        observations: list[_Observation],
        cued: list[str],
    ) -> tuple[str, str]:
        """The next action: the only option ("rule"), the model's constrained choice among the options ("model"),
        or, by the fixed policy, when the policy is "rules" or the model fails ("fallback")."""
        if len(options) == 1:
            return options[0], "rule"
        if self.policy == "rules":
            return _fixed(options, cued), "rule"
        if client is None:
            self._last_error = self._last_error or "no model"
            return _fixed(options, cued), "fallback"
        try:
            choice = self._calibrated_choice(client, message, options, observations)
        except Exception as exc:  # any model failure: the fixed policy takes over for this turn
            log.warning("agent: the model failed to choose an action: %s", exc)
            self._last_error = _reason(exc)
            return _fixed(options, cued), "fallback"
        if choice not in options:  # the client validates; this is the agent's own guard
            self._last_error = f"chose {choice!r}, not an option"
            return _fixed(options, cued), "fallback"
        return choice, "model"

    def _calibrated_choice(
        self, client: LLMClient, message: str, options: list[str], observations: list[_Observation]
    ) -> str:
        """The model's constrained choice: every option's log-probability for this message minus its
        log-probability for a content-free one (the option list's baseline, computed once per agent)."""
        ranked = client.choose(_choice_prompt(message, options, observations), options, k=len(options))
        key = tuple(options)
        if key not in self._baselines:
            null = client.choose(_choice_prompt(NULL_MESSAGE, options, []), options, k=len(options))
            self._baselines[key] = {c.option: _logprob(c.logprob) for c in null}
        baseline = self._baselines[key]
        scored = [(_logprob(c.logprob) - baseline.get(c.option, 0.0), c.option) for c in ranked]
        return max(scored, key=lambda s: s[0])[1]

    def _run(
        self, tool: str, message: str, moment: datetime, stamp: str, by: str
    ) -> tuple[ToolCall, _Observation | None]:
        """Run one tool with arguments derived from the message; any exception becomes a failed call."""
        args: dict[str, Any] = {}
        start = time.perf_counter()
        try:
            if tool == "calculator":
                expression = tools.extract_expression(message)
                args = {"expression": expression or ""}
                if expression is None:
                    raise ToolError("no arithmetic found in the message")
                value = tools.calculate(expression)
                out = ToolResult(f"{expression} = {value}", 1, value=value)
            elif tool == "clock":
                args = {"message": message, "now": moment.isoformat(timespec="seconds")}
                out = tools.clock(message, moment)
            elif tool == "file_search":
                args = {"words": tools.content_words(message)[:12], "root": str(self.files_root)}
                out = tools.file_search(self.files_root, message)
            elif tool == "search_memory":
                args = {"query": message, "k": self.k}
                out = self._search(message, moment)
            elif tool == "recall_profile":
                args = {"user_id": self.namespace.user_id}
                out = self._profile(moment)
            elif tool == "store_memory":
                fact = _fact(message)
                args = {"text": fact}
                out = self._store(fact, message, stamp)
            else:
                raise ToolError(f"unknown tool {tool!r}")
        except Exception as exc:  # degradation: a failing tool or memory never ends the turn
            if not isinstance(exc, ToolError):
                log.warning("agent: %s failed: %s", tool, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            call = ToolCall(tool, args, False, _reason(exc), time.perf_counter() - start, "", 0, by)
            return call, None
        call = ToolCall(
            tool,
            args,
            True,
            "",
            time.perf_counter() - start,
            _summary(out.text),
            out.found,
            by,
            list(dict.fromkeys(out.turn_ids)),
        )
        hits = list(zip(out.turn_ids, out.detail.get("texts", []), strict=False))
        return call, _Observation(tool, out.text, out.value, hits)

    # ------------------------------------------------------------------ memory tools
    def _search(self, query: str, moment: datetime) -> ToolResult:
        """search_memory: the namespace's best hits for the message, the user's own turns first."""
        ns = self.namespace
        try:
            retrieval = self.memory.search(
                query,
                user_id=ns.user_id,
                agent_id=ns.agent_id,
                run_id=ns.run_id,
                k=self.k,
                budget_tokens=self.budget_tokens,
                now=moment.isoformat(timespec="seconds"),
            )
        except UnknownNamespaceError:
            return ToolResult("Memory is empty for this user.", 0)
        users = [h for h in retrieval.hits if h.detail.get("speaker") != "assistant"]
        replies = [h for h in retrieval.hits if h.detail.get("speaker") == "assistant"]
        return _hits_result(users + replies[:1])  # the user's own words first; one earlier reply at most

    def _profile(self, moment: datetime) -> ToolResult:
        """recall_profile: the engine's profile (preferences and facts with evidence) where it keeps one, else a
        memory search for the user's preferences."""
        ns = self.namespace
        if not hasattr(self.memory.engine, "profile"):
            result = self._search("What do I like, prefer, love or use? My favourite things.", moment)
            result.text = f"(No profile kept by engine {self.memory.engine.name!r}; memory search instead.)\n" + (
                result.text
            )
            return result
        try:
            profile = self.memory.profile(user_id=ns.user_id, agent_id=ns.agent_id, run_id=ns.run_id)
        except UnknownNamespaceError:
            return ToolResult("No profile yet for this user.", 0)
        lines, ids, texts = [], [], []
        for kind in ("preferences", "profile"):
            for key, entry in profile.get(kind, {}).items():
                negative = " (dislikes)" if entry.get("polarity") == "negative" else ""
                line = f"{key}: {entry.get('value')}{negative}"
                evidence = [str(e) for e in entry.get("evidence", [])][-1:]
                lines.append(f"[{evidence[0]}] {line}" if evidence else line)
                for turn_id in evidence:
                    ids.append(turn_id)
                    texts.append(line)
        if not lines:
            return ToolResult("No preferences or profile facts are known yet.", 0)
        return ToolResult("\n".join(lines), len(lines), ids, detail={"texts": texts})

    def _store(self, fact: str, message: str, stamp: str) -> ToolResult:
        """store_memory: save the stated fact as a user turn (marked as stored by the agent)."""
        ns = self.namespace
        whole = fact == message
        added = self.memory.add(
            {"speaker": "user", "text": fact, "metadata": {} if whole else {"via": "store_memory"}},
            user_id=ns.user_id,
            agent_id=ns.agent_id,
            run_id=ns.run_id,
            session_id=self.session_id,
            timestamp=stamp,
        )
        ids = added.added or added.skipped
        self._stored = list(ids)
        return ToolResult(f"Stored: {fact}", 1, value="stored the message" if whole else "stored a fact")

    def _remember(self, message: str, reply: str, stamp: str, stored_message: bool, result: AgentTurn) -> str:
        """Store the exchange (design 3: the conversation streams into memory): the user's message (unless
        store_memory already did) and the reply; a failure is a degraded note, the reply stands."""
        ns = self.namespace
        turns = [] if stored_message else [{"speaker": "user", "text": message}]
        turns.append({"speaker": "assistant", "text": _with_notes(reply, result.degraded)})
        result.stored_turn_ids.extend(self._stored)
        try:
            added = self.memory.add(
                turns,
                user_id=ns.user_id,
                agent_id=ns.agent_id,
                run_id=ns.run_id,
                session_id=self.session_id,
                timestamp=stamp,
            )
        except Exception as exc:
            log.warning("agent: could not store the turn: %s", exc)
            result.degraded.append(f"memory could not save this exchange: {_reason(exc)}")
            return reply
        result.stored_turn_ids.extend(added.added)
        return reply

    # ------------------------------------------------------------------ replying
    def _reply(
        self,
        client: LLMClient | None,
        message: str,
        moment: datetime,
        result: AgentTurn,
        observations: list[_Observation],
        on_token: Callable[[str], None] | None = None,
    ) -> str:
        """The reply (design 3): the model writes it from the observations (streamed to `on_token` where given);
        exact tool results it leaves out are quoted after it; with no model, a plain summary of the observations."""
        if client is not None:
            try:
                prompt = _reply_prompt(message, moment, observations, list(self.history), result.degraded)
                limit = self.reply_tokens if prompt[0]["content"] != STATEMENT_SYSTEM else min(24, self.reply_tokens)
                if on_token is None:
                    text = client.chat(prompt, max_tokens=limit).text
                else:
                    pieces = []
                    for piece in client.stream(prompt, max_tokens=limit):
                        pieces.append(piece)
                        on_token(piece)
                    text = "".join(pieces)
                text = _clean_reply(text)
                if text:
                    return _with_values(text, observations)
                result.degraded.append("the model gave an empty reply; replied with the tool results")
            except Exception as exc:
                log.warning("agent: the model failed to reply: %s", exc)
                result.degraded.append(f"the model was unavailable: {_reason(exc)}; replied with the tool results")
        if not observations:
            return "I could not produce an answer this time."
        return "Here is what I found: " + " | ".join(_plain(o) for o in observations)


# ---------------------------------------------------------------------------------------------------- helpers


def _fixed(options: list[str], cued: list[str]) -> str:
    """The fixed policy: the first cued tool offered (ORDER), else search_memory if offered, else the first tool
    offered that is cued, else answer."""
    for tool in ORDER:
        if tool in options and tool in cued:
            return tool
    if "search_memory" in options and "search_memory" not in cued and ANSWER in options and not cued:
        return "search_memory"
    return ANSWER if ANSWER in options else options[0]


def _logprob(value: float | None) -> float:
    """A choice's log-probability; a backend that gives none ranks by order, so its options all count as 0."""
    return 0.0 if value is None else value


def _reason(exc: BaseException) -> str:
    """An exception as a short human phrase."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:200].rstrip(" .")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _hits_result(hits: list[Hit]) -> ToolResult:
    """Memory hits as a tool result: "[turn id] text" lines."""
    if not hits:
        return ToolResult("Nothing relevant in memory.", 0)
    lines, ids, texts = [], [], []
    for hit in hits:
        text = " ".join(hit.text.split())[:NOTE_CHARS]
        turn_id = hit.turn_ids[0] if hit.turn_ids else "?"
        lines.append(f"[{turn_id}] {text}")
        ids.append(turn_id)
        texts.append(text)
    return ToolResult("\n".join(lines), len(hits), ids, detail={"texts": texts})


def _fact(message: str) -> str:
    """What store_memory saves: the message's sentences that state something about the user (the whole message
    when every sentence does, or none is recognised)."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", message) if s.strip()]
    facts = [s for s in sentences if tools.cues(s, memory=True, files=False) == ["store_memory"]]
    if not facts or len(facts) == len(sentences):
        return message
    return " ".join(facts)
