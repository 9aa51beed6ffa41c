"""What an agent turn did and cost (docs/design.md design 3: tool success, memory hit rate, latency and tokens are
recorded): `ToolCall`, `AgentTurn`, and the `AgentMetrics` aggregator the server renders as Prometheus text."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger("cuemem.agent")


@dataclass
class ToolCall:
    """One tool the agent ran: its arguments, outcome, time and a summary of its output. `chosen_by` says who picked
    it: "model" (a constrained choice among several), "rule" (the only candidate), or "fallback" (the model failed)."""

    tool: str
    args: dict[str, Any]
    ok: bool
    error: str = ""
    seconds: float = 0.0
    output: str = ""
    found: int = 0  # hits for memory tools, matching lines for file search, 1 for a computed result
    chosen_by: str = "model"
    turn_ids: list[str] = field(default_factory=list)  # memory tools: the turn ids of their hits, best first

    @property
    def useful(self) -> bool:
        """A call that worked and found something (a memory search with hits, a computed result)."""
        return self.ok and self.found > 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "useful": self.useful}


@dataclass
class AgentTurn:
    """One answered message: the reply, the turn ids it cites, the tool calls, what was degraded (human sentences),
    the decisions taken (options offered, action chosen, by whom) and the turn's metrics."""

    message: str
    reply: str
    cited_turn_ids: list[str] = field(default_factory=list)
    steps: list[ToolCall] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    stored_turn_ids: list[str] = field(default_factory=list)  # the turns this turn wrote (message, reply, facts)
    memory_enabled: bool = True
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0

    @property
    def tool_calls(self) -> int:
        return len(self.steps)

    @property
    def tool_failures(self) -> int:
        return sum(1 for s in self.steps if not s.ok)

    @property
    def memory_hit(self) -> bool:
        """Whether a memory tool returned at least one hit this turn."""
        return any(s.ok and s.found > 0 for s in self.steps if s.tool in RECALL_TOOLS)

    def metrics(self) -> dict[str, Any]:
        """The turn's metrics, as logged (one JSON line on the `cuemem.agent` logger)."""
        return {
            "latency_s": round(self.latency_s, 4),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tool_failures": self.tool_failures,
            "memory_hit": self.memory_hit,
            "memory_enabled": self.memory_enabled,
            "degraded": len(self.degraded),
            "tools": [f"{s.tool}:{'ok' if s.ok else 'failed'}" for s in self.steps],
        }

    def as_dict(self) -> dict[str, Any]:
        """The turn as JSON-safe data (the `POST /v1/chat` reply)."""
        return {
            "message": self.message,
            "reply": self.reply,
            "cited_turn_ids": list(self.cited_turn_ids),
            "steps": [s.as_dict() for s in self.steps],
            "degraded": list(self.degraded),
            "decisions": [dict(d) for d in self.decisions],
            "stored_turn_ids": list(self.stored_turn_ids),
            "metrics": self.metrics(),
        }


MEMORY_TOOLS = ("search_memory", "store_memory", "recall_profile")
RECALL_TOOLS = ("search_memory", "recall_profile")  # the tools whose hits count as a memory hit


class AgentMetrics:
    """Counts over agent turns (thread-safe): turns, degraded turns, memory hits, tool calls by tool and outcome,
    total latency, tokens and model calls; `snapshot()` is what the server renders as Prometheus text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start the counts again from zero."""
        with self._lock:
            self.turns = 0
            self.degraded_turns = 0
            self.memory_hits = 0
            self.memory_turns = 0  # turns with memory enabled (the memory hit rate's denominator)
            self.latency_s = 0.0
            self.prompt_tokens = 0
            self.completion_tokens = 0
            self.model_calls = 0
            self.tool_calls: dict[str, dict[str, int]] = {}

    def record(self, turn: AgentTurn) -> None:
        """Add one turn's metrics."""
        with self._lock:
            self.turns += 1
            self.degraded_turns += int(bool(turn.degraded))
            self.memory_turns += int(turn.memory_enabled)
            self.memory_hits += int(turn.memory_hit)
            self.latency_s += turn.latency_s
            self.prompt_tokens += turn.prompt_tokens
            self.completion_tokens += turn.completion_tokens
            self.model_calls += turn.model_calls
            for step in turn.steps:
                counts = self.tool_calls.setdefault(step.tool, {"ok": 0, "failed": 0})
                counts["ok" if step.ok else "failed"] += 1

    def snapshot(self) -> dict[str, Any]:
        """The counts as a JSON-safe dict."""
        with self._lock:
            return {
                "turns": self.turns,
                "degraded_turns": self.degraded_turns,
                "memory_turns": self.memory_turns,
                "memory_hits": self.memory_hits,
                "latency_seconds_total": round(self.latency_s, 6),
                "prompt_tokens_total": self.prompt_tokens,
                "completion_tokens_total": self.completion_tokens,
                "model_calls_total": self.model_calls,
                "tool_calls": {tool: dict(counts) for tool, counts in sorted(self.tool_calls.items())},
            }


METRICS = AgentMetrics()  # every Agent records here unless given its own


def log_turn(turn: AgentTurn) -> None:
    """Log a turn's metrics as one JSON line at INFO on the `cuemem.agent` logger."""
    if log.isEnabledFor(logging.INFO):
        log.info(json.dumps({"event": "agent_turn", **turn.metrics()}, sort_keys=True))
