"""Who assigns STITCH's labels: spaCy and embeddings (model-free mode) or the model client (model mode).

Both answer the same questions per step: does the scope change here, which event types, which entity types,
which earlier mentions do its references point to; and per question, which event and entity types to filter on.
In model mode every answer is a constrained choice among candidates plus a "new"/"none" option, so a label can
never fall outside its vocabulary (docs/design.md promise 5).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from ...llm.base import LLMError, LLMUnavailableError
from ...types import Turn
from ..base import EngineContext
from .analysis import StepAnalysis
from .scope import topic_shift
from .state import IngestState, StitchConfig

log = logging.getLogger(__name__)


@dataclass
class Step:
    turn: Turn
    doc: str  # the turn as indexed ("[date] speaker: text [image: ...]")
    analysis: StepAnalysis
    vector: np.ndarray  # the doc's embedding (with its inherited anchors, where it has some)
    text_hash: str
    inherited: list[str] = field(default_factory=list)  # anchors of the goal in focus it continues (focus.py)
    sources: list[str] = field(default_factory=list)  # the earlier turns those came from (it depends on them)


class Labeller(Protocol):
    def shift(self, state: IngestState, step: Step) -> bool: ...

    def events(self, state: IngestState, step: Step) -> list[str]: ...

    def entity_types(self, state: IngestState, step: Step) -> list[str]: ...

    def antecedents(self, state: IngestState, step: Step, events: Sequence[str]) -> list[str]: ...

    def query_filter(
        self, state: IngestState, query: str, vector: np.ndarray, analysis: StepAnalysis
    ) -> tuple[list[str], list[str]]: ...


class ModelFreeLabeller:
    """Scope by topic-shift segmentation, events from action phrases, types from NER and noun heads."""

    def __init__(self, config: StitchConfig, ctx: EngineContext) -> None:
        self.config = config
        self.ctx = ctx

    def shift(self, state: IngestState, step: Step) -> bool:
        cfg = self.config
        return topic_shift(
            state.open,
            step.vector,
            step.turn.session_id,
            window=cfg.segment_window,
            threshold=cfg.segment_threshold,
            max_steps=cfg.segment_max,
        )

    def events(self, state: IngestState, step: Step) -> list[str]:
        return step.analysis.actions[:3]

    def entity_types(self, state: IngestState, step: Step) -> list[str]:
        return step.analysis.entity_types

    def compatible(self, state: IngestState, step: Step, events: Sequence[str]) -> list[dict[str, Any]]:
        """Earlier steps a reference may point to: same scope (same session without scopes), most recent first,
        those sharing an event type before the rest."""
        recent = state.recent[-self.config.segment_window :]
        if self.config.use_scope:
            same = [r for r in reversed(recent) if r["segment"] == state.open.segment]
        else:
            same = [r for r in reversed(recent) if r["session"] == step.turn.session_id]
        if self.config.use_event and events:
            same.sort(key=lambda r: not set(r["events"]) & set(events))  # stable: recency within each group
        return same

    def antecedents(self, state: IngestState, step: Step, events: Sequence[str]) -> list[str]:
        if self.config.use_focus:
            return step.inherited
        if not step.analysis.refers:
            return []
        for candidate in self.compatible(state, step, events):
            mentions = [m for m in candidate["mentions"] if m.lower() not in step.doc.lower()]
            if mentions:
                return mentions[:6]
        return []

    def query_filter(
        self, state: IngestState, query: str, vector: np.ndarray, analysis: StepAnalysis
    ) -> tuple[list[str], list[str]]:
        events = [e for e in (state.events.canonical(a) for a in analysis.actions) if e]
        types = [t for t in analysis.entity_types if t in state.entities]
        return list(dict.fromkeys(events)), types


MODEL_WINDOW = 8  # recent steps shown to the model: of the 50-step scope window, what a 135M model can attend to
NEW = "(new label)"
NONE = "(none)"

M = TypeVar("M", bound=Callable[..., Any])


def falls_back(method: M) -> M:
    """When the model fails (LLMError: down, timed out, invalid output), answer as model-free mode does; after an
    unavailable endpoint, the rest of the batch goes model-free at once instead of waiting on every step."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: ModelLabeller, *args: Any, **kwargs: Any) -> Any:
        if not self.unavailable:
            try:
                return method(self, *args, **kwargs)
            except LLMError as exc:
                self.unavailable = isinstance(exc, LLMUnavailableError)
                if self.fallbacks == 0:
                    log.warning("stitch-llm: the model failed (%s); labelling model-free where it does", exc)
        self.fallbacks += 1  # every answer given model-free, counted and reported (engine stats, bench results)
        return getattr(ModelFreeLabeller, name)(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class ModelLabeller(ModelFreeLabeller):
    """Model mode: the model client picks each label among candidates (constrained choice); spaCy and the
    embedder only propose the candidates."""

    def __init__(self, config: StitchConfig, ctx: EngineContext) -> None:
        super().__init__(config, ctx)
        self.fallbacks = 0  # labels that fell back to model-free mode because the model failed
        self.unavailable = False
        self._vectors: dict[str, np.ndarray] = {}  # label embeddings, for shortlists

    def _choose(self, instruction: str, context: str, options: list[str]) -> str:
        messages = [
            {"role": "system", "content": "You label steps of a conversation. Answer with one of the options."},
            {"role": "user", "content": f"{context}\n\n{instruction}\nOptions: " + " | ".join(options)},
        ]
        return self.ctx.llm.choose(messages, options, k=1)[0].option

    def _window(self, state: IngestState) -> str:
        return "\n".join(r["text"] for r in state.recent[-min(self.config.scope_window, MODEL_WINDOW) :])

    @falls_back
    def shift(self, state: IngestState, step: Step) -> bool:
        if state.open.segment < 0 or step.turn.session_id != state.open.session:
            return True  # a new session always opens a scope (no call needed)
        if len(state.open.members) >= self.config.segment_max * 3:
            return True
        gist = ", ".join(state.open.gist) or "(none yet)"
        context = f"Current topic: {gist}\nRecent messages:\n{self._window(state)}\n\nNew message: {step.doc[:300]}"
        answer = self._choose(
            "Does the new message continue the current topic or start a new goal?",
            context,
            ["continues the topic", "starts a new goal"],
        )
        return answer == "starts a new goal"

    def _label_vectors(self, labels: list[str]) -> dict[str, np.ndarray]:
        missing = [label for label in labels if label not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self.ctx.embed(missing, remember=True)[1], strict=True))
        return self._vectors

    @falls_back
    def events(self, state: IngestState, step: Step) -> list[str]:
        proposals = step.analysis.actions[:3]
        if state.steps < self.config.n_start:  # seed phase: the step's own action phrases
            if len(proposals) <= 1:
                return proposals
            return [self._choose("Which action is this message about?", step.doc[:400], proposals)]
        shortlist = state.events.shortlist(step.vector, self._label_vectors(state.events.labels()), self.config.k_event)
        fresh = [p for p in proposals if state.events.canonical(p) not in shortlist]
        options = shortlist + [f"{NEW} {p}" for p in fresh[:2]]
        if not options:
            return []
        answer = self._choose("Which event type is this message?", step.doc[:400], options)
        return [answer.removeprefix(f"{NEW} ")]

    @falls_back
    def entity_types(self, state: IngestState, step: Step) -> list[str]:
        """Known types first, then the types spaCy proposes as new labels; "none" only when spaCy saw none."""
        detected = step.analysis.entity_types
        known = state.entities.labels()
        options = list(dict.fromkeys([t for t in known if t in detected] + detected + known))[:12]
        if not options:
            return []
        if not detected:
            options.append(NONE)
        answer = self._choose("Which kind of information does this message carry?", step.doc[:400], options)
        return [] if answer == NONE else [answer]

    @falls_back
    def antecedents(self, state: IngestState, step: Step, events: Sequence[str]) -> list[str]:
        if not step.analysis.refers:
            return []
        mentions: list[str] = []
        for candidate in self.compatible(state, step, events):
            mentions += [m for m in candidate["mentions"] if m.lower() not in step.doc.lower()]
        mentions = list(dict.fromkeys(mentions))[:8]
        if not mentions:
            return []
        context = f"Earlier: {self._window(state)}\n\nMessage: {step.doc[:300]}"
        answer = self._choose("What does the message refer to?", context, [*mentions, NONE])
        return [] if answer == NONE else [answer]

    @falls_back
    def query_filter(
        self, state: IngestState, query: str, vector: np.ndarray, analysis: StepAnalysis
    ) -> tuple[list[str], list[str]]:
        with self.ctx.llm.stage("query"):  # model calls of a search count per question
            return self._query_filter(state, query, vector, analysis)

    def _query_filter(
        self, state: IngestState, query: str, vector: np.ndarray, analysis: StepAnalysis
    ) -> tuple[list[str], list[str]]:
        events: list[str] = []
        labels = state.events.labels()
        if labels:
            shortlist = state.events.shortlist(vector, self._label_vectors(labels), self.config.k_event)
            answer = self._choose("Which event type is the question about?", query, [*shortlist, NONE])
            events = [] if answer == NONE else [answer]
        types: list[str] = []
        if state.entities.labels():
            options = list(
                dict.fromkeys([t for t in analysis.entity_types if t in state.entities] + state.entities.labels())
            )[:12]
            answer = self._choose("Which kind of information does the question ask for?", query, [*options, NONE])
            types = [] if answer == NONE else [answer]
        return events, types
