"""Readers for conversation files: JSONL (one turn per line, the export format) and LoCoMo-format JSON (a list
of samples, or one sample). `Memory.ingest_file` drives them; the CLI only shows progress and the report."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ImportFormatError
from .types import Turn

_SESSION = re.compile(r"^session_(\d+)$")
# Turn metadata keys, and the LoCoMo fields they are read from.
LOCOMO_METADATA = {"image_caption": "blip_caption", "img_url": "img_url", "query": "query"}


def read_locomo(path: str | Path) -> list[dict[str, Any]]:
    """The samples of a LoCoMo-format file (a JSON list of samples, or a single sample object)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path} is not valid UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    samples = data if isinstance(data, list) else [data]
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise ImportFormatError(f"{path}: sample {i} has no 'conversation' object: not LoCoMo format")
        sample.setdefault("sample_id", f"sample-{i}")
    return samples


def locomo_turns(sample: dict[str, Any]) -> list[Turn]:
    """Turns of a LoCoMo sample in session order; the session date becomes each turn's timestamp.

    Sessions are found by their `session_N` lists (conv-26 lists more dates than sessions). A shared image's
    caption (LoCoMo's `blip_caption`) goes into the generic metadata key "image_caption", which the indexers add
    to the text; its URL and search query stay as `img_url` and `query`.
    """
    conversation = sample["conversation"]
    numbers = sorted(
        int(m.group(1)) for key, value in conversation.items() if (m := _SESSION.match(key)) and isinstance(value, list)
    )
    turns: list[Turn] = []
    for n in numbers:
        date = conversation.get(f"session_{n}_date_time")
        for position, raw in enumerate(conversation[f"session_{n}"], start=1):
            if not isinstance(raw, dict):
                raise ImportFormatError(f"session_{n} turn {position} is a {type(raw).__name__}, not an object")
            metadata = {key: raw[field] for key, field in LOCOMO_METADATA.items() if raw.get(field)}
            turns.append(
                Turn(
                    id=str(raw.get("dia_id") or f"D{n}:{position}"),
                    text=raw.get("text", ""),
                    speaker=raw.get("speaker", "unknown"),
                    session_id=f"session_{n}",
                    timestamp=date,
                    metadata=metadata,
                )
            )
    return turns


@dataclass
class ImportReport:
    """What an import or ingest did: turns added, turns already stored, and each rejected line or turn (by line
    number for JSONL, by turn id for LoCoMo) with the reason."""

    added: int = 0
    skipped: int = 0
    errors: list[tuple[int | str, str]] = field(default_factory=list)


def sniff_format(path: str | Path) -> str:
    """ "locomo" when the file is one JSON document (a list of samples, or a sample with a "conversation"),
    else "jsonl". Only a file that starts like JSON is parsed whole; a JSONL file fails at its second line."""
    path = Path(path)
    with path.open("rb") as fh:
        head = fh.read(64).lstrip()
    if head[:1] == b"[":
        return "locomo"
    if head[:1] == b"{":
        try:
            data = json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "jsonl"
        return "locomo" if isinstance(data, dict) and "conversation" in data else "jsonl"
    return "jsonl"


def iter_jsonl(lines: Iterable[str | bytes], report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each good line; malformed lines go to `report.errors` with their number."""
    for lineno, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                report.errors.append((lineno, f"not valid UTF-8 (byte {exc.start})"))
                continue
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            report.errors.append((lineno, f"malformed JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(data, dict):
            report.errors.append((lineno, f"expected a JSON object, got {type(data).__name__}"))
            continue
        yield lineno, data
