"""What one `cuemem serve` process shares between requests: the memory, its keys, limits, metrics and chat agents
(issue 17; docs/design.md layout, `server/`).

Writes are serialised per namespace by a striped lock (a bounded set of locks, however many users); reads run side
by side. Memory work is shared fairly between keys in bounded lanes (fairness.py), and a request may name only the
engines the server allows (`allowed_engines`), so no key can make the server build state without bound. A
conversation's agent is kept for its recent turns and forgotten with any delete in its namespace.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..memory import Memory
from ..types import Namespace
from .errors import ApiError
from .fairness import Lane
from .keys import ApiKey, KeyRing
from .limits import Limits, RateLimiter
from .metrics import Registry


@dataclass
class ServerState:
    """What one server process shares between requests: the memory, its keys, limits, metrics and agents."""

    memory: Memory
    keys: KeyRing
    limits: Limits = field(default_factory=Limits)
    metrics: Registry = field(default_factory=Registry)
    started: float = field(default_factory=time.time)
    files_root: Any = None  # the folder the chat agent's file search may read (None: no file search)
    agent_policy: str = "guided"  # the chat agent's tool choice (cuemem.agent.loop.POLICIES)
    _write_locks: list[threading.Lock] = field(default_factory=lambda: [threading.Lock() for _ in range(64)])
    _agents: OrderedDict[tuple[Namespace, str, bool], tuple[Any, threading.Lock]] = field(default_factory=OrderedDict)
    _agents_lock: threading.Lock = field(default_factory=threading.Lock)
    agent_metrics: Any = None
    # The engines a request may name: None = every registered engine by its name (no "[field=value]" variants);
    # "*" among them = any engine or variant. The memory's own engine is always allowed.
    allowed_engines: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(self.limits.rate, self.limits.burst)
        lim = self.limits
        self.lanes = {
            "model": Lane("model", lim.model_workers, lim.model_queue, lim.model_per_key),
            "memory": Lane("memory", lim.memory_workers, lim.memory_queue, lim.memory_per_key),
        }
        m = self.metrics
        m.describe("cuemem_requests_total", "counter", "HTTP requests by method, route and status.")
        m.describe("cuemem_request_seconds", "histogram", "HTTP request latency by route.")
        m.describe("cuemem_errors_total", "counter", "Requests answered with an error, by kind.")
        m.describe("cuemem_auth_failures_total", "counter", "Requests refused for a missing or wrong key.")
        m.describe("cuemem_rate_limited_total", "counter", "Requests refused by the per-key rate limit.")

    def check_engine(self, name: str | None) -> str | None:
        """`name` if a request may name that engine, else a 400 (the allowed ones listed); None is the default."""
        if name is None or name == self.memory.engine.name:
            return name
        allowed = self.allowed_engine_names()
        if "*" in allowed or name in allowed:
            return name
        from ..engines import get_engine
        from ..errors import UnknownEngineError

        try:
            get_engine(name)  # a name or variant that does not exist says so, as it did before the allow-list
        except UnknownEngineError as exc:
            raise ApiError(400, "unknown_engine", str(exc)[:2000]) from exc
        raise ApiError(
            400,
            "engine_not_allowed",
            f"engine {name[:200]!r} is not served here; this server allows: {', '.join(sorted(allowed))}"
            " (an operator adds others with `cuemem serve --allow-engine`)",
        )

    def allowed_engine_names(self) -> set[str]:
        """The engines requests may name (the memory's own included)."""
        if self.allowed_engines is None:
            from ..engines import available_engines

            return {*available_engines(), self.memory.engine.name}
        return {*self.allowed_engines, self.memory.engine.name}

    def lane_for(self, method: str, path: str, engine: str | None) -> Lane | None:
        """The lane a request runs in: model for answers, chat and searches with a model-mode engine, memory for
        the rest of /v1 and /mcp, none for the server's own routes (health, metrics, the page)."""
        if path in ("/v1/answer", "/v1/answer/stream", "/v1/chat"):
            return self.lanes["model"]
        if path == "/v1/memories/search" and method == "GET" and self._uses_model(engine):
            return self.lanes["model"]
        if path.startswith(("/v1/", "/mcp")):
            return self.lanes["memory"]
        return None

    def _uses_model(self, engine: str | None) -> bool:
        try:
            chosen = self.memory._engine(self.check_engine(engine))
        except Exception:  # not allowed or unknown: the route answers it, quickly
            return False
        return bool(chosen.uses_llm)

    def write_lock(self, namespace: Namespace) -> threading.Lock:
        """The lock serialising writes to a namespace (striped: a bounded set of locks, however many users)."""
        return self._write_locks[hash(namespace) % len(self._write_locks)]

    def agent(self, namespace: Namespace, session_id: str, memory_enabled: bool) -> tuple[Any, threading.Lock]:
        """The chat agent of a conversation and its lock (an agent is one conversation: one turn at a time), kept
        for its recent turns; the 256 most recent conversations are kept."""
        from ..agent import Agent, AgentMetrics  # the agent loads only where chat is used

        key = (namespace, session_id, memory_enabled)
        with self._agents_lock:
            if self.agent_metrics is None:
                self.agent_metrics = AgentMetrics()
            entry = self._agents.pop(key, None)
            if entry is None:
                agent = Agent(
                    self.memory,
                    user_id=namespace.user_id,
                    agent_id=namespace.agent_id,
                    run_id=namespace.run_id,
                    memory_enabled=memory_enabled,
                    session_id=session_id,
                    files_root=self.files_root,
                    metrics=self.agent_metrics,
                    policy=self.agent_policy,
                )
                entry = (agent, threading.Lock())
            self._agents[key] = entry
            while len(self._agents) > 256:
                self._agents.popitem(last=False)
        return entry

    def forget_agents(self, namespace: Namespace) -> None:
        """Drop a namespace's chat agents (their recent turns), after any delete there (`Memory.on_forget`)."""
        with self._agents_lock:
            for key in [key for key in self._agents if key[0] == namespace]:
                del self._agents[key]

    def admit(self, token: str | None) -> ApiKey:
        """The key a request carries, checked (401 when missing or not valid) and charged to its rate (429)."""
        if not token:
            self.metrics.inc("cuemem_auth_failures_total", reason="missing")
            raise ApiError(
                401,
                "unauthorized",
                "an API key is required: send 'Authorization: Bearer cm_...'",
                {"WWW-Authenticate": "Bearer"},
            )
        key = self.keys.verify(token)
        if key is None:
            self.metrics.inc("cuemem_auth_failures_total", reason="invalid")
            raise ApiError(
                401,
                "unauthorized",
                "the API key is not valid (unknown, revoked or mistyped)",
                {"WWW-Authenticate": "Bearer"},
            )
        wait = self.limiter.take(key.id)
        if wait > 0:
            self.metrics.inc("cuemem_rate_limited_total")
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests for this key: retry in {wait:.2f} s",
                {"Retry-After": RateLimiter.retry_after(wait)},
            )
        return key

    def scrape(self) -> str:
        """The /metrics text: the request counters plus model calls and agent turns read now."""
        extra: list[tuple[str, str, str, dict[str, str], float]] = []
        client = self.memory._llm
        stages = sorted(client.stats().items()) if client is not None else []  # one snapshot for every series
        model_series = [  # (name, help, the stage's field, extra labels); series grouped by name, as the format wants
            ("cuemem_model_calls_total", "Model calls by stage.", "calls", {}),
            ("cuemem_model_cached_calls_total", "Model calls answered from the cache.", "cached", {}),
            ("cuemem_model_tokens_total", "Model tokens by stage and kind.", "prompt_tokens", {"kind": "prompt"}),
            (
                "cuemem_model_tokens_total",
                "Model tokens by stage and kind.",
                "completion_tokens",
                {"kind": "completion"},
            ),
            ("cuemem_model_seconds_total", "Seconds spent in model calls.", "seconds", {}),
        ]
        for name, text, column, labels in model_series:
            for stage, stats in stages:
                extra.append((name, "counter", text, {"stage": stage, **labels}, stats[column]))
        if self.agent_metrics is not None:
            extra.extend(_agent_series(self.agent_metrics.snapshot()))
        background = self.memory.background
        if background is not None:
            health = background.health()
            for name, kind, text, value in (
                ("cuemem_index_backlog_turns", "gauge", "Acknowledged turns not indexed yet.", health.backlog_turns),
                (
                    "cuemem_index_queued_namespaces",
                    "gauge",
                    "Namespaces waiting for the indexer.",
                    health.queued_namespaces,
                ),
                ("cuemem_indexed_turns_total", "counter", "Turns indexed in the background.", health.indexed_turns),
                ("cuemem_index_failures_total", "counter", "Failed background indexing passes.", health.failures),
                ("cuemem_index_worker_up", "gauge", "1 while the background indexer runs.", int(health.running)),
            ):
                extra.append((name, kind, text, {}, float(value)))
        extra.append(
            ("cuemem_uptime_seconds", "gauge", "Seconds since the server started.", {}, time.time() - self.started)
        )
        return self.metrics.render(extra)


def _agent_series(snapshot: dict[str, Any]) -> list[tuple[str, str, str, dict[str, str], float]]:
    """Prometheus counters from the chat agent's metrics (`AgentMetrics.snapshot`): turns, degraded turns, memory
    hits, latency, tokens and model calls, and tool calls by tool and outcome."""
    series: list[tuple[str, str, str, dict[str, str], float]] = []
    for name, value in sorted(snapshot.items()):
        if isinstance(value, int | float) and not isinstance(value, bool):
            metric = f"cuemem_agent_{name}" if name.endswith("_total") else f"cuemem_agent_{name}_total"
            series.append((metric, "counter", f"Chat agent: {name.replace('_', ' ')}.", {}, float(value)))
    for tool, outcomes in sorted((snapshot.get("tool_calls") or {}).items()):
        for outcome, count in sorted(outcomes.items()):
            series.append(
                (
                    "cuemem_agent_tool_calls_total",
                    "counter",
                    "Chat agent tool calls by tool and outcome.",
                    {"tool": str(tool), "outcome": str(outcome)},
                    float(count),
                )
            )
    return series
