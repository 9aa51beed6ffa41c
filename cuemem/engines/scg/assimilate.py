"""Assimilation, then accommodation (SCG-MEM, design 2, section 3.2): how a turn's concepts join the schema.

Model-free mode (`TextAssimilator`, the default): the turn's candidate phrases (spaCy noun chunks, entities and
keyphrases) are matched onto existing concepts by normalised string, lemma form, or embedding cosine at or above
`assimilate_threshold` (assimilation); the rest become new concepts (accommodation).

Model mode (`ModelAssimilator`): constrained beam search over a shortlist of the schema's keys plus a reserved
"none of these" option proposes existing concepts; if "none of these" wins, or no proposal scores at or above
`accept_logprob`, the model proposes new concepts freely (JSON), each validated (`normalise_concept`), deduplicated
against the schema by string and embedding, and inserted. A model that fails or garbles its answer leaves the turn
to the model-free candidates (counted as a fallback), so ingestion never stops on a model error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from ...llm.base import LLMError
from .concepts import Candidate, TextConcepts, normalise_concept
from .schema import Schema
from .state import ScgConfig, ScgState

log = logging.getLogger(__name__)

NEW_CONCEPT = "none of these"  # worded as a model would say it: "(new concept)" scored 15 nats below any key
# Words of the prompt and the JSON fields that a small model echoes back as a concept (Qwen 0.5B proposed
# "message" and "conversation" for the first turn, then assimilated every later turn onto them).
FIELD_ECHOES = frozenset(
    (
        "concept",
        "concepts",
        "another",
        "key concept",
        "key concepts",
        "new concept",
        "message",
        "conversation",
        "index",
        "noun phrase",
        "noun phrases",
        "none",
        NEW_CONCEPT,
    )
)
Embed = Callable[[list[str]], np.ndarray]


@dataclass
class Grounding:
    """The concepts a turn was grounded in, and the new ones it brought to the schema (key, lemma, vector)."""

    keys: list[str] = field(default_factory=list)
    new: list[tuple[str, str, np.ndarray | None]] = field(default_factory=list)


class TextAssimilator:
    """Model-free assimilation: string, lemma, then embedding match onto the schema; the rest accommodated."""

    def __init__(self, config: ScgConfig, embed: Embed) -> None:
        self.config = config
        self.embed = embed

    def ground(
        self,
        schema: Schema,
        state: ScgState,
        found: TextConcepts,
        vectors: dict[str, np.ndarray],
        text: str,
        turn_vector: np.ndarray,
    ) -> Grounding:
        return self.place(schema, state, found.candidates, vectors)

    def place(
        self, schema: Schema, state: ScgState, candidates: list[Candidate], vectors: dict[str, np.ndarray]
    ) -> Grounding:
        """Assimilate each candidate onto an existing concept where one fits, else accommodate it."""
        out = Grounding()
        for cand in candidates:
            key = self.existing(schema, cand, vectors.get(cand.key))
            if key is not None:
                state.keys_generated += 1
                if key not in schema:  # cannot happen: matches come from the schema (measured, not assumed)
                    state.keys_outside += 1
                    continue
                state.assimilated += 1
            else:
                key = cand.key
                schema.add(key, cand.lemma, vectors.get(key))
                out.new.append((key, cand.lemma, vectors.get(key)))
                state.accommodated += 1
            if key not in out.keys:
                out.keys.append(key)
        return out

    def existing(self, schema: Schema, cand: Candidate, vector: np.ndarray | None) -> str | None:
        """The existing concept a candidate is (None: it is new). Without assimilation, only the identical key."""
        if cand.key in schema:
            return cand.key
        if not self.config.assimilate:
            return None
        key = schema.lookup(cand.key, cand.lemma)
        if key is not None:
            return key
        if vector is not None:
            best = schema.nearest(vector, 1)
            if best and best[0][1] >= self.config.assimilate_threshold:
                return best[0][0]
        return None


class NewConcepts(BaseModel):
    """The model's free proposals when no existing concept fits (flat: the local backend fills string fields)."""

    concept: str  # lengths are checked by `normalise_concept`: an overlong proposal is refused and counted
    another: str = ""


def concept_messages(text: str, question: str) -> list[dict[str, str]]:
    return [
        # no example concepts here: a small model proposes the examples themselves as concepts of any message
        {
            "role": "system",
            "content": "You index a conversation by its key concepts: short noun phrases (one to"
            " three words) naming the people, places, things, activities and topics"
            " a message is about.",
        },
        {"role": "user", "content": f"Message: {text[:1200]}\n\n{question}"},
    ]


class ModelAssimilator(TextAssimilator):
    """Model mode: constrained choice among schema concepts, free generation (validated) for new ones."""

    def __init__(self, config: ScgConfig, embed: Embed, llm: object) -> None:
        super().__init__(config, embed)
        self.llm = llm
        self.fallbacks = 0

    def shortlist(self, schema: Schema, found: TextConcepts, turn_vector: np.ndarray) -> list[str]:
        """The schema keys offered to the model: those the text names by string, then the nearest by embedding."""
        named = [k for k in (schema.lookup(c.key, c.lemma) for c in found.candidates) if k is not None]
        near = [k for k, _ in schema.nearest(turn_vector, self.config.shortlist)]
        return [k for k in dict.fromkeys(named + near) if k != NEW_CONCEPT][: self.config.shortlist]

    def ground(
        self,
        schema: Schema,
        state: ScgState,
        found: TextConcepts,
        vectors: dict[str, np.ndarray],
        text: str,
        turn_vector: np.ndarray,
    ) -> Grounding:
        cfg = self.config
        try:
            out = Grounding()
            fits = False
            options = self.shortlist(schema, found, turn_vector) if len(schema) else []
            if options:
                chosen = self.llm.choose(  # type: ignore[attr-defined]
                    concept_messages(text, "Which concept of the index does this message mention?"),
                    [*options, NEW_CONCEPT],
                    k=min(cfg.beam, len(options) + 1),
                    beam=cfg.beam,
                )
                for choice in chosen:
                    if choice.option == NEW_CONCEPT:
                        break  # every option below "none of these" fits worse than a new concept would
                    if choice.logprob is not None and choice.logprob < cfg.accept_logprob:
                        continue
                    state.keys_generated += 1
                    if choice.option not in schema:  # impossible under the trie constraint (measured)
                        state.keys_outside += 1
                        continue
                    state.assimilated += 1
                    fits = True
                    if choice.option not in out.keys:
                        out.keys.append(choice.option)
            if not fits:
                self.accommodate(schema, state, text, out)
            return out
        except LLMError as exc:  # down, or an answer that stayed invalid after retries
            self.fallbacks += 1
            state.fallbacks += 1
            log.debug("model-mode grounding fell back to model-free candidates: %s", exc)
            return self.place(schema, state, found.candidates, vectors)

    def accommodate(self, schema: Schema, state: ScgState, text: str, out: Grounding) -> None:
        """Free proposals, each validated, deduplicated by string and embedding, then inserted."""
        reply = self.llm.json(  # type: ignore[attr-defined]
            concept_messages(text, "Name the one or two key concepts of this message (short noun phrases)."),
            NewConcepts,
            max_tokens=12,
        )
        keys = []
        for proposal in (reply.concept, reply.another):
            key = normalise_concept(proposal)
            if key is None or key in FIELD_ECHOES:  # a small model may echo the field's name as its value
                state.rejected += int(bool(proposal.strip()))
                continue
            keys.append(key)
        keys = list(dict.fromkeys(keys))
        vectors = dict(zip(keys, self.embed(keys), strict=True)) if keys else {}
        placed = self.place(schema, state, [Candidate(k, k, "model") for k in keys], vectors)
        out.new += placed.new
        out.keys += [k for k in placed.keys if k not in out.keys]


__all__ = ["NEW_CONCEPT", "Grounding", "ModelAssimilator", "NewConcepts", "TextAssimilator", "concept_messages"]
