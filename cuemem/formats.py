"""Readers for conversation files: JSONL (one turn per line, the export format) and LoCoMo-format JSON (a list
of samples, or one sample). `Memory.ingest_file` drives them; the CLI only shows progress and the report."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .errors import ImportFormatError
from .types import Turn

_SESSION = re.compile(r"^session_(\d+)$")
# Turn metadata keys, and the LoCoMo fields they are read from.
LOCOMO_METADATA = {"image_caption": "blip_caption", "img_url": "img_url", "query": "query"}


def too_long_number() -> str:
    """The words for a JSON number longer than Python reads (`sys.get_int_max_str_digits`)."""
    return f"a number is too long (over {sys.get_int_max_str_digits():,} digits): write long numbers as strings"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (JSON numbers are finite): write null or a string instead")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)  # one decoder: json.loads with options makes one a call


def strict_loads(text: str | bytes) -> Any:
    """json.loads refusing NaN, Infinity and -Infinity, which Python accepts but JSON (RFC 8259) does not."""
    if isinstance(text, bytes):
        return json.loads(text, parse_constant=_refuse_constant)  # json.loads finds a UTF-16 or -32 text's encoding
    return _STRICT.decode(text)


def json_reason(exc: ValueError) -> str:
    """Why json.loads refused a text (not a JSONDecodeError): a number too long to convert, or a non-finite one."""
    return too_long_number() if "digits" in str(exc) else str(exc)


def _where(msg: str) -> str:
    """json's message followed by "at": "Unterminated string starting at" already ends in it (no "at at")."""
    return msg if msg.endswith(" at") else f"{msg} at"


def read_locomo(path: str | Path, errors: list[tuple[int | str, str]] | None = None) -> list[dict[str, Any]]:
    """The samples of a LoCoMo-format file (a JSON list of samples, or a single sample object).

    Without `errors`, a sample with no "conversation" object refuses the file. With an `errors` list, such a
    sample is reported there ("sample N", why) and skipped, and the file is refused only when no sample is valid.
    """
    try:
        data = strict_loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path} is not valid UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"{path} is not valid JSON: {_where(exc.msg)} line {exc.lineno}") from exc
    except RecursionError as exc:
        raise ImportFormatError(f"{path} is nested too deeply to read") from exc
    except ValueError as exc:  # a number too long to convert, NaN
        raise ImportFormatError(f"{path} is not valid JSON: {json_reason(exc)}") from exc
    samples = data if isinstance(data, list) else [data]
    good: list[dict[str, Any]] = []
    bad: list[tuple[int | str, str]] = []
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            bad.append((f"sample {i}", "has no 'conversation' object: not LoCoMo format"))
            continue
        sample.setdefault("sample_id", f"sample-{i}")
        good.append(sample)
    if bad and (errors is None or not good):
        where, why = bad[0]
        raise ImportFormatError(f"{path}: {where} {why}")
    if errors is not None:
        errors += bad
    return good


def _turn_problem(raw: Any) -> str | None:
    """Why a LoCoMo turn cannot be read (None when it can)."""
    if not isinstance(raw, dict):
        return f"is a {type(raw).__name__}, not an object"
    for key in ("text", "speaker"):
        if key in raw and not isinstance(raw[key], str):
            return f"has a {key} of type {type(raw[key]).__name__}, not a string"
    dia_id = raw.get("dia_id")
    if dia_id is not None and (not isinstance(dia_id, str | int) or isinstance(dia_id, bool)):
        return f"has a dia_id of type {type(dia_id).__name__}, not a string"
    return None


def iter_locomo_turns(sample: dict[str, Any], errors: list[str] | None = None) -> Iterator[tuple[str, Turn]]:
    """(position, turn) for each turn of a LoCoMo sample, as `locomo_turns`; the position reads "session_3 turn 5".
    A turn that cannot be read raises ImportFormatError, or with an `errors` list is reported there ("session_3
    turn 5 is a str, not an object") and skipped, every other turn kept."""
    conversation = sample["conversation"]
    numbers = sorted(
        int(m.group(1)) for key, value in conversation.items() if (m := _SESSION.match(key)) and isinstance(value, list)
    )
    for n in numbers:
        date = conversation.get(f"session_{n}_date_time")
        for position, raw in enumerate(conversation[f"session_{n}"], start=1):
            where = f"session_{n} turn {position}"
            problem = _turn_problem(raw)
            if problem is not None:
                if errors is None:
                    raise ImportFormatError(f"{where} {problem}")
                errors.append(f"{where} {problem}")
                continue
            metadata = {key: raw[field] for key, field in LOCOMO_METADATA.items() if raw.get(field)}
            yield (
                where,
                Turn(
                    id=str(raw.get("dia_id") or f"D{n}:{position}"),
                    text=raw.get("text", ""),
                    speaker=raw.get("speaker", "unknown"),
                    session_id=f"session_{n}",
                    timestamp=date,
                    metadata=metadata,
                ),
            )


def locomo_turns(sample: dict[str, Any]) -> list[Turn]:
    """Turns of a LoCoMo sample in session order; the session date becomes each turn's timestamp. A turn that
    cannot be read raises ImportFormatError (`iter_locomo_turns` with an errors list skips it instead).

    Sessions are found by their `session_N` lists (conv-26 lists more dates than sessions). A shared image's
    caption (LoCoMo's `blip_caption`) goes into the generic metadata key "image_caption", which the indexers add
    to the text; its URL and search query stay as `img_url` and `query`.
    """
    return [turn for _, turn in iter_locomo_turns(sample)]


MAX_LISTED_ERRORS = 10_000  # rejections an import lists; past them it only counts (bounded memory, issue 33)


@dataclass
class ImportReport:
    """What an import or ingest did: turns added, turns already stored, and each rejected line or turn with the
    reason: by line number for JSONL; for LoCoMo by sample id, the reason naming the turn's position ("session_3
    turn 5 ..."), or "sample N" for a sample that is not one. An import lists its first MAX_LISTED_ERRORS
    rejections and counts the rest in `unlisted` (a body of a million bad lines must not take a million records)."""

    added: int = 0
    skipped: int = 0
    errors: list[tuple[int | str, str]] = field(default_factory=list)
    unlisted: int = 0

    def reject(self, where: int | str, why: str) -> None:
        """Record one rejection: listed while under MAX_LISTED_ERRORS, counted after."""
        if len(self.errors) < MAX_LISTED_ERRORS:
            self.errors.append((where, why))
        else:
            self.unlisted += 1

    @property
    def rejected(self) -> int:
        """How many lines or turns were rejected, listed or not."""
        return len(self.errors) + self.unlisted


def finite(data: Any) -> Any:
    """Data with every NaN or infinite float replaced by None (null), so it can be written as strict JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


def strict_dumps(data: Any) -> str:
    """One line of strict JSON (RFC 8259): a non-finite float, which only a store written before metadata was
    checked can hold, is written as null, never as a bare NaN (issue 33)."""
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(finite(data), ensure_ascii=False, allow_nan=False)


def sniff_format(path: str | Path) -> str:
    """ "locomo" when the file is one JSON document (a list of samples, or a sample with a "conversation"),
    else "jsonl". A file whose first line is a whole JSON value followed by more lines is JSONL (so a bad first
    line rejects only itself, and a JSONL file is never read whole here); only a document spread over lines is
    parsed whole."""
    path = Path(path)
    with path.open("rb") as fh:
        head = fh.read(64).lstrip()
        if head[:1] not in (b"[", b"{"):
            return "jsonl"
        fh.seek(0)
        first = b""
        while not first.strip():
            first = fh.readline()
        try:
            data = json.loads(first)
        except (ValueError, RecursionError):  # not a whole value on one line: a document spread over lines?
            if head[:1] == b"[":
                return "locomo"
            try:
                data = json.loads(path.read_bytes())
            except (ValueError, RecursionError):
                return "jsonl"
            return "locomo" if isinstance(data, dict) and "conversation" in data else "jsonl"
        while chunk := fh.read(1 << 16):  # a one-line document is the whole file
            if chunk.strip():
                return "jsonl"
        return "locomo" if head[:1] == b"[" or (isinstance(data, dict) and "conversation" in data) else "jsonl"


def file_lines(path: str | Path) -> Iterator[bytes]:
    """A file's lines as bytes.splitlines() gives them (split at \\n, \\r\\n and \\r), read one at a time."""
    with Path(path).open("rb") as fh:
        yield from stream_lines(fh)


def stream_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """An open binary file's lines as `file_lines` gives them, one at a time (a line is held whole, no more)."""
    for line in fh:
        ended = line.endswith(b"\n")
        if ended:
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        if b"\r" not in line:
            yield line
            continue
        parts = line.split(b"\r")
        yield from parts if ended or parts[-1] else parts[:-1]  # the file's last line ends with a lone \r


def count_lines(path: str | Path) -> int:
    """How many lines `file_lines` gives, counted in 1 MiB blocks (for a progress total)."""
    count, last = 0, b""
    with Path(path).open("rb") as fh:
        while block := fh.read(1 << 20):
            count += block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
            count -= int(last == b"\r" and block[:1] == b"\n")  # a \r\n split between blocks
            last = block[-1:]
    return count + int(last not in (b"", b"\n", b"\r"))


def iter_jsonl(lines: Iterable[str | bytes], report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each good line; malformed lines go to `report.errors` with their number. Lines
    are taken one at a time (see `file_lines`), so a file need never be held whole."""
    for lineno, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                report.reject(lineno, f"not valid UTF-8 (byte {exc.start})")
                continue
        if not raw.strip():
            continue
        try:
            data = strict_loads(raw)
        except json.JSONDecodeError as exc:
            report.reject(lineno, f"malformed JSON: {_where(exc.msg)} column {exc.colno}")
            continue
        except RecursionError:  # a bad line only ever rejects itself
            report.reject(lineno, "nested too deeply to read")
            continue
        except ValueError as exc:  # a number too long to convert, NaN
            report.reject(lineno, f"malformed JSON: {json_reason(exc)}")
            continue
        if not isinstance(data, dict):
            report.reject(lineno, f"expected a JSON object, got {type(data).__name__}")
            continue
        yield lineno, data
