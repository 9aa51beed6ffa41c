"""Intake: messages checked and turned into turns, then committed to the log and indexed (docs/design.md
promise 1: the log first, that is the acknowledgement; the engine catches up after)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import CuememError, InvalidTurnError
from .indexer import Indexer
from .store.base import AppendResult, Store
from .types import IdTooLongError, Namespace, Turn, check_id_length

Message = str | bytes | Mapping[str, Any] | Turn
Ids = tuple[str, str | None, str | None]  # a namespace's (user_id, agent_id, run_id), as the caller gave them
MAX_METADATA_DEPTH = 100  # deeper metadata is refused: it could exhaust the stack when the store serialises it


@dataclass
class AddResult:
    """What an add did: ids stored, ids already present (no-op), and inputs rejected with the reason."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)


class Intake:
    """Validation and writing of new turns into one store, indexed by the indexer's engine."""

    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer
        # set by a Memory with index_in_background: called with the namespace instead of indexing inside add
        self.defer: Callable[[Namespace], None] | None = None

    @property
    def store(self) -> Store:
        """The indexer's store: one attribute, so a Memory whose store is replaced writes to the new one."""
        return self.indexer.store

    def add(
        self,
        messages: Message | Iterable[Message],
        ids: Ids,
        session_id: str | None = None,
        timestamp: str | None = None,
        on_error: str = "raise",
        progress: Callable[[int], None] | None = None,
    ) -> AddResult:
        """Memory.add into the namespace of `ids` (user, agent, run): every message valid or nothing written
        (on_error="raise"), or the valid ones ("skip")."""
        if on_error not in ("raise", "skip"):
            raise ValueError("on_error must be 'raise' or 'skip'")
        namespace = Namespace(*ids)
        if isinstance(messages, str | bytes | Mapping | Turn):
            messages = [messages]
        turns, rejected = self.validate(list(messages), namespace, session_id, timestamp)
        if rejected and on_error == "raise":
            detail = "; ".join(f"message {i}: {why}" for i, why in rejected[:5])
            more = f" (and {len(rejected) - 5} more)" if len(rejected) > 5 else ""
            raise InvalidTurnError(f"nothing was added: {detail}{more}")
        result = AddResult(rejected=rejected)
        if not turns:
            return result
        ns, appended = self.append(namespace, turns)
        result.added = [t.id for t in appended.added]
        result.skipped = appended.skipped
        if self.defer is not None:  # acknowledged now, durable in the log; a background worker indexes it
            self.defer(namespace)
            return result
        try:
            self.indexer.sync(self.indexer.engine, ns, namespace, progress)
        except CuememError as exc:
            raise type(exc)(
                f"{len(result.added)} turns were stored in the log, but indexing them with"
                f" {self.indexer.engine.name!r} failed: {exc}. Indexing resumes from the log on the next add or search."
            ) from exc
        return result

    def append(self, namespace: Namespace, turns: list[Turn]) -> tuple[int, AppendResult]:
        """Commit valid turns to the namespace's log (created if new): its id, and the turns added and skipped."""
        ns = self.store.namespace_id(namespace, create=True)
        return ns, self.store.append_turns(ns, turns)

    def validate(
        self,
        messages: list[Message],
        namespace: Namespace,
        session_id: str | None,
        timestamp: str | None,
        seen: Counter[str] | None = None,
    ) -> tuple[list[Turn], list[tuple[int, str]]]:
        """Turns and rejections; `seen` counts id-less repeats (pass one Counter to span several calls)."""
        turns: list[Turn] = []
        rejected: list[tuple[int, str]] = []
        seen = Counter() if seen is None else seen
        for index, message in enumerate(messages):
            try:
                turn = self.to_turn(message, namespace, session_id, timestamp, seen)
            except InvalidTurnError as exc:
                rejected.append((index, str(exc)))
            else:
                turns.append(turn)
        return turns, rejected

    def to_turn(
        self,
        message: Message,
        namespace: Namespace,
        session_id: str | None,
        timestamp: str | None,
        seen: Counter[str],
    ) -> Turn:
        """One message as a turn, or InvalidTurnError saying why not; an id-less message gets a salted id."""
        if isinstance(message, Turn):
            data: dict[str, Any] = {
                "id": message.id,
                "text": message.text,
                "speaker": message.speaker,
                "session_id": message.session_id,
                "timestamp": message.timestamp,
                "metadata": message.metadata,
            }
        elif isinstance(message, str | bytes):
            data = {"text": message}
        elif isinstance(message, Mapping):
            data = dict(message)
        else:
            raise InvalidTurnError(f"a message must be a string, a dict or a Turn, not {type(message).__name__}")
        text = clean_text(data.get("text", data.get("content")), self.indexer.settings.max_turn_bytes)
        speaker = clean_field(data.get("speaker", data.get("role", "user")), "speaker")
        session = clean_field(data.get("session_id") or session_id or "default", "session_id")
        stamp = data.get("timestamp") or timestamp
        if stamp is not None:
            stamp = clean_field(stamp, "timestamp")
        metadata = data.get("metadata") or {}
        check_metadata(metadata)
        turn_id = data.get("id")
        if turn_id is None:
            basis = json.dumps([session, speaker, text, stamp], ensure_ascii=False)
            key = hashlib.sha256(basis.encode("utf-8")).hexdigest()  # a digest: the count holds no text
            seen[key] += 1
            basis += f"#{seen[key]}"
            # Keyed with the store's salt: stable within this store (a retried add is a no-op), but no one can
            # confirm a guess of a deleted turn's words from an id left in the history.
            turn_id = "t-" + hmac.new(self.store.salt, basis.encode("utf-8"), hashlib.sha256).hexdigest()[:16]
        else:
            turn_id = clean_field(turn_id, "id")
        return Turn(
            id=turn_id,
            text=text,
            speaker=speaker,
            session_id=session,
            timestamp=stamp,
            metadata=dict(metadata),
            namespace=namespace,
        )


def check_metadata(metadata: Any) -> None:
    """Refuse metadata that is not a strict JSON object of UTF-8 text (no NaN or Infinity), or that nests too deeply
    to serialise (issue 33)."""
    if not isinstance(metadata, Mapping):
        raise InvalidTurnError("metadata must be a JSON object")
    if deeper_than(metadata, MAX_METADATA_DEPTH):
        raise InvalidTurnError(f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep")
    try:
        json.dumps(metadata, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except RecursionError as exc:
        raise InvalidTurnError("metadata is nested too deeply") from exc
    except UnicodeEncodeError as exc:
        raise InvalidTurnError(f"metadata is not JSON-serialisable UTF-8: {exc}") from exc
    except ValueError as exc:
        if "not JSON compliant" in str(exc):
            raise InvalidTurnError(
                "metadata holds NaN or Infinity, which JSON does not allow (strict JSON only): use null or a string"
            ) from exc
        raise InvalidTurnError(f"metadata is not JSON-serialisable UTF-8: {exc}") from exc
    except TypeError as exc:
        raise InvalidTurnError(f"metadata is not JSON-serialisable UTF-8: {exc}") from exc


def deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def clean_text(text: Any, max_bytes: int) -> str:
    """A turn's text: a non-empty UTF-8 string of at most `max_bytes` bytes (bytes are decoded)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidTurnError(f"text is not valid UTF-8 (byte {exc.start})") from exc
    if not isinstance(text, str):
        raise InvalidTurnError(f"text must be a string, got {type(text).__name__}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidTurnError(f"text is not valid UTF-8 (unpaired surrogate at {exc.start})") from exc
    if not text.strip():
        raise InvalidTurnError("text is empty")
    if size > max_bytes:
        raise InvalidTurnError(
            f"text is {size:,} bytes, over the {max_bytes:,}-byte limit per turn (CUEMEM_MAX_TURN_BYTES);"
            " split it into several turns"
        )
    return text


def clean_field(value: Any, name: str) -> str:
    """A turn's id, speaker, session or timestamp: a non-empty UTF-8 string (or int) of at most MAX_ID_CHARS
    characters (`types.check_id_length`, the one limit of every id)."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidTurnError(f"{name} must be a string, got {type(value).__name__}")
    value = str(value)
    if not value.strip():
        raise InvalidTurnError(f"{name} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTurnError(f"{name} is not valid UTF-8") from exc
    try:
        return check_id_length(value, name)
    except IdTooLongError as exc:
        raise InvalidTurnError(str(exc)) from exc
