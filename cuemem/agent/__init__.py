"""The memory agent (docs/design.md design 3, issue 17): a ReAct loop choosing among memory tools (search_memory,
store_memory, recall_profile) and ordinary tools (calculator, clock, file_search) by constrained choice, with a
per-turn tool budget, graceful degradation and per-turn metrics.

    agent = Agent(memory, user_id="alice")
    turn = agent.turn("What drink do I like?")
    turn.reply, turn.cited_turn_ids, turn.as_dict()
"""

from .loop import ACTIONS, ANSWER, POLICIES, TOOLS, Agent
from .metrics import MEMORY_TOOLS, METRICS, AgentMetrics, AgentTurn, ToolCall, log_turn
from .tools import ToolError, ToolResult, calculate, clock, extract_expression, file_search

__all__ = [
    "ACTIONS",
    "ANSWER",
    "MEMORY_TOOLS",
    "METRICS",
    "POLICIES",
    "TOOLS",
    "Agent",
    "AgentMetrics",
    "AgentTurn",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "calculate",
    "clock",
    "extract_expression",
    "file_search",
    "log_turn",
]
