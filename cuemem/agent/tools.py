"""The agent's ordinary tools (docs/design.md design 3, issue 17): a safe calculator, a clock with date arithmetic and a
file search confined to one folder, plus the cues that say which tools a message calls for.

Arguments are derived from the user's message by deterministic parsers, never by executing model output: the
calculator walks a parsed expression tree that admits numbers and arithmetic only, the clock reads dates with
`cuemem.index.dates`, and the file search resolves every path (symlinks included) and refuses what leaves its root.
"""

from __future__ import annotations

import ast
import math
import operator
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ..index.dates import MONTHS, WEEKDAYS, parse_timestamp, resolve_relative

# ---------------------------------------------------------------------------------------------------- results


class ToolError(Exception):
    """A tool refused its input or failed; the agent records it as a failed call and goes on (degradation)."""


@dataclass
class ToolResult:
    """What a tool returns: a short text for the model's notes, a count of items found, and the turn ids behind it
    (memory tools only)."""

    text: str
    found: int = 1
    turn_ids: list[str] = field(default_factory=list)
    value: str = ""  # the exact result (calculator, clock), quoted in the reply when the model's text omits it
    detail: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- calculator

MAX_EXPRESSION_CHARS = 200
MAX_NUMBER_DIGITS = 30
MAX_RESULT_DIGITS = 300  # a power whose result would have more digits is refused before it is computed
MAX_EXPONENT = 1000
MAX_NODES = 100

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _digits(value: float | int) -> float:
    """log10 of a magnitude (0 for zero), for bounding results before they are computed."""
    return math.log10(abs(value)) if value else 0.0


def _power(base: float | int, exponent: float | int) -> float | int:
    """base ** exponent, refused when the exponent or the result would be too large."""
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if abs(base) > 1 and exponent > 0 and exponent * _digits(base) > MAX_RESULT_DIGITS:
        raise ToolError(f"the result would have more than {MAX_RESULT_DIGITS} digits")
    if base == 0 and exponent < 0:
        raise ToolError("zero cannot be raised to a negative power")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("the result is not a real number")
    return result


def _evaluate(node: ast.AST) -> float | int:
    """Walk an expression tree of numbers and arithmetic; anything else (names, calls, attributes) is refused."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, ast.Mult) and _digits(left) + _digits(right) > MAX_RESULT_DIGITS:
            raise ToolError(f"the result would have more than {MAX_RESULT_DIGITS} digits")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as exc:
            raise ToolError("division by zero") from exc
    raise ToolError(f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}")


def calculate(expression: str) -> str:
    """The calculator: a SAFE evaluation of an arithmetic expression (an ast walk over numbers and + - * / // % **
    and parentheses; no names, calls or attributes; bounded length, digits and exponents), formatted."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("no expression given")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    if re.search(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}", text):
        raise ToolError(f"a number has more than {MAX_NUMBER_DIGITS} digits")
    text = re.sub(r"(?<![\d.])0+(?=\d)", "", text)  # "007" is 7, not a syntax error
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise ToolError(f"not an arithmetic expression: {expression!r}") from exc
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError(f"the expression has more than {MAX_NODES} parts")
    try:
        value = _evaluate(tree)
    except OverflowError as exc:
        raise ToolError("the result is too large") from exc
    return format_number(value)


def format_number(value: float | int) -> str:
    """A result as people write it: integers whole, other numbers to 10 significant digits, no trailing zeros."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        raise ToolError("the result is not a finite number")
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:.10g}"
    return text


_WORD_OPS = [
    (r"\bto the power of\b", "**"),
    (r"\bmultiplied by\b", "*"),
    (r"\bdivided by\b", "/"),
    (r"\btimes\b", "*"),
    (r"\bplus\b", "+"),
    (r"\bminus\b", "-"),
    (r"\bmod(?:ulo)?\b", "%"),
    (r"(?<=\d)\s*[x×]\s*(?=\d)", "*"),
    (r"\bsquared\b", "**2"),
    (r"\bcubed\b", "**3"),
]
_DATE_LIKE = re.compile(r"\b\d+(?:-\d+){2,}\b|\b\d{3,}-\d{3,}\b|\b\d{1,2}[:/.]\d{1,2}(?:[:/.]\d{2,4})?\b")
_PERCENT_OF = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent)\s+of\s+(\d+(?:\.\d+)?)", re.I)
_EXPRESSION = re.compile(r"[-+(]*\s*\d[\d.,\s+\-*/%()]*")


def extract_expression(message: str) -> str | None:
    """The arithmetic a message asks for ("what is 17 * 23?", "12 plus 30 divided by 5", "15% of 80"), as an
    expression the calculator accepts; None when there is none (a lone number or a date is not arithmetic)."""
    text = _DATE_LIKE.sub(" ", message.lower())
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators: 1,200 -> 1200
    text = _PERCENT_OF.sub(lambda m: f"({m.group(1)} / 100 * {m.group(2)})", text)
    for pattern, symbol in _WORD_OPS:
        text = re.sub(pattern, f" {symbol} ", text)
    best = None
    for match in _EXPRESSION.finditer(text):
        candidate = match.group(0).strip().rstrip(".,").strip()
        candidate = candidate.rstrip("+-*/% (").strip()
        if not re.search(r"\d\s*\)*\s*(\*\*|[-+*/%])\s*\(*\s*[-+]?\s*\d", candidate):
            continue  # a lone number, "3 days", a list "1, 2"
        if candidate.count("(") != candidate.count(")"):
            candidate = candidate.strip("()")
        if best is None or len(candidate) > len(best):
            best = candidate
    return best


# ---------------------------------------------------------------------------------------------------- clock

_CLOCK_CUES = re.compile(
    r"\b(today|tomorrow|yesterday|date|dates|day|days|weekday|week|weeks|month|months|year|years|time|clock|"
    r"o'clock|until|till|since|ago|from now|later|"
    + "|".join(WEEKDAYS)
    + "|"
    + "|".join(m.lower() for m in MONTHS)
    + r")\b",
    re.I,
)
_CLOCK_QUESTIONS = re.compile(
    r"\b(what(?:'s| is| was| will)? (?:the )?(?:date|day|time|weekday)|what day|which day|how many (?:days|weeks)|"
    r"how long (?:until|till|since|ago)|days? (?:until|till|since|between|from|to|left)|"
    r"(?:in|after) \w+ (?:days?|weeks?|months?|years?)|\w+ (?:days?|weeks?|months?|years?) (?:ago|from now|later)|"
    r"today's date|current (?:date|time)|day of the week|what time)\b",
    re.I,
)


def as_datetime(now: str | datetime | None) -> datetime:
    """The moment of a turn: `now` (any format `parse_timestamp` reads) or the real clock."""
    if isinstance(now, datetime):
        return now
    if now is not None:
        parsed = parse_timestamp(now)
        if parsed is None:
            raise ToolError(f"cannot read the date {now!r}")
        return parsed
    return datetime.now().replace(microsecond=0)


def _day_text(d: date) -> str:
    return f"{WEEKDAYS[d.weekday()].capitalize()} {d.day} {MONTHS[d.month - 1]} {d.year} ({d.isoformat()})"


def clock(message: str, now: str | datetime | None = None) -> ToolResult:
    """The clock: today's date and time (from `now` or the real clock) and the date arithmetic a message asks for:
    "in 3 days", "10 days ago", "how many days until 2027-01-01", "days between A and B", "what day is 4 July"."""
    moment = as_datetime(now)
    today = moment.date()
    lines = [f"Now: {_day_text(today)}, {moment:%H:%M}."]
    spans = [s for s in resolve_relative(message, today) if s.granularity == "day"]
    lowered = message.lower()
    value = ""
    counting = re.search(r"\b(how many|how long|number of)\b|\bdays? (until|till|since|between|left|to)\b", lowered)
    if counting and len(spans) >= 2:
        first, second = spans[0].start, spans[1].start
        days = abs((second - first).days)
        lines.append(f"From {_day_text(first)} to {_day_text(second)}: {days} days.")
        value = f"{days} days"
    elif counting and spans:
        target = spans[0].start
        days = (target - today).days
        if days >= 0:
            lines.append(f"{_day_text(target)} is {days} days from today.")
        else:
            lines.append(f"{_day_text(target)} was {-days} days ago.")
        value = f"{abs(days)} days"
    elif spans:
        for span in spans:
            lines.append(f'"{span.phrase}" is {_day_text(span.start)}.')
        day = spans[0].start
        value = WEEKDAYS[day.weekday()].capitalize() if re.search(r"\b(what|which) day\b|weekday", lowered) else ""
        value = value or f"{day.day} {MONTHS[day.month - 1]} {day.year}"
    elif re.search(r"\btime\b", lowered):
        value = f"{moment:%H:%M}"
    else:
        value = f"{today.day} {MONTHS[today.month - 1]} {today.year}"
    return ToolResult(" ".join(lines), 1, value=value)


def asks_about_time(message: str) -> bool:
    """Whether a message asks the clock something (a date question, or date arithmetic)."""
    return bool(_CLOCK_QUESTIONS.search(message)) or (
        is_question(message) and bool(_CLOCK_CUES.search(message)) and bool(resolve_relative(message, date.today()))
    )


# ---------------------------------------------------------------------------------------------------- file search

MAX_FILE_BYTES = 1_000_000
MAX_FILES = 2_000
MAX_FILE_HITS = 5
_STOPWORD_TEXT = (
    "a an the and or but if of to in on at for with by from is are was were be been am do does did have has had i me "
    "my mine we our you your he she it its they them their this that these those what which who whom whose when "
    "where why how can could would should will shall may might must not no yes so than then there here about into "
    "over under again just also very too any some all each file files folder folders note notes document documents "
    "search find look please tell say said told know remember"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def content_words(text: str) -> list[str]:
    """A text's words worth matching: lower-cased, three letters or more, no stop words, in order, no repeats."""
    words = re.findall(r"[^\W_][\w'-]*", text.lower())
    return list(dict.fromkeys(w for w in words if len(w) >= 3 and w not in _STOPWORDS))


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, with every symlink resolved, lies under `root` (itself resolved)."""
    try:
        path.resolve(strict=True).relative_to(root.resolve(strict=True))
    except (OSError, ValueError, RuntimeError):
        return False
    return True


def _read_text(path: Path) -> str | None:
    """A small text file's content, None for binaries (a NUL byte or not UTF-8) and large files."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_search(root: Path | None, message: str, *, limit: int = MAX_FILE_HITS) -> ToolResult:
    """The file search: the lines of text files under `root` holding the most of the message's words. Files and
    folders whose resolved path leaves `root` (symlinks pointing out, `..`) are refused; binaries and files over
    MAX_FILE_BYTES are skipped; at most MAX_FILES files are read and `limit` lines returned."""
    if root is None:
        raise ToolError("no folder to search was configured")
    base = Path(root)
    if not base.is_dir():
        raise ToolError(f"the folder {base} does not exist")
    words = content_words(message)
    if not words:
        raise ToolError("no words to search for")
    hits: list[tuple[int, str, int, str]] = []
    refused = read = 0
    for folder, dirs, names in os.walk(base, followlinks=False):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and inside(base, here / d))
        for name in sorted(names):
            path = here / name
            if not inside(base, path):
                refused += 1
                continue
            if read >= MAX_FILES:
                break
            read += 1
            text = _read_text(path)
            if text is None:
                continue
            relative = path.relative_to(base).as_posix()
            for lineno, line in enumerate(text.splitlines(), 1):
                lowered = line.lower()
                score = sum(1 for w in words if w in lowered)
                if score:
                    hits.append((score, relative, lineno, line.strip()[:200]))
    hits.sort(key=lambda h: (-h[0], h[1], h[2]))
    best = hits[:limit]
    if not best:
        note = f" ({refused} paths outside the folder refused)" if refused else ""
        return ToolResult(f"No file under the folder mentions {', '.join(words[:6])}.{note}", 0)
    lines = [f"{rel}:{lineno}: {line}" for _, rel, lineno, line in best]
    return ToolResult("\n".join(lines), len(best), detail={"files": sorted({h[1] for h in best}), "refused": refused})


def resolve_in_root(root: Path, relative: str) -> Path:
    """A path named relative to `root`, refused (ToolError) when it resolves outside it (`..`, absolute paths,
    symlinks pointing out)."""
    candidate = Path(root) / relative
    if not inside(Path(root), candidate):
        raise ToolError(f"{relative!r} is outside the folder")
    return candidate.resolve()


# ---------------------------------------------------------------------------------------------------- cues

_QUESTION_START = re.compile(
    r"^\s*(what|what's|whats|which|who|whom|whose|when|where|why|how|do|does|did|is|are|was|were|can|could|would|"
    r"should|will|have|has|tell me|remind me|recommend|suggest|any)\b",
    re.I,
)
_SELF = re.compile(r"\b(i|i'm|i've|i'd|me|my|mine|we|our|us)\b", re.I)
_PAST = re.compile(r"\b(remember|earlier|before|last time|told you|said|mentioned|again|usual|favou?rite|prefer)", re.I)
_PROFILE = re.compile(
    r"\b(about me|my preferences|my profile|what do you know|recommend|suggest|what should i|pick (?:one|something) "
    r"for me|my tastes?)\b",
    re.I,
)
_STORE = re.compile(
    r"\b(remember|note that|don't forget|do not forget|keep in mind|for the record|from now on)\b|"
    r"\b(i|i'm|my|we|our)\b.*\b(like|love|prefer|hate|dislike|enjoy|favou?rite|am|is|are|live|work|moved|have|has|"
    r"allergic|born|birthday|use|drive|own|switched|started|stopped)\b",
    re.I,
)
_FILE_CUES = re.compile(r"\b(files?|folders?|notes|documents?|docs|my notes|in the folder|\.txt|\.md|grep)\b", re.I)


def is_question(message: str) -> bool:
    """Whether a message asks something (a question mark, or a question word first)."""
    return "?" in message or bool(_QUESTION_START.match(message))


def cues(message: str, *, memory: bool, files: bool) -> list[str]:
    """The tools a message calls for, by deterministic cues (the agent's shortlist; the model chooses among them):
    an arithmetic expression -> calculator; a date question -> clock; a mention of files -> file_search; a question
    about the user or the past -> search_memory; a question about preferences -> recall_profile; a statement of a
    fact or preference about the user -> store_memory."""
    found: list[str] = []
    question = is_question(message)
    if extract_expression(message) is not None:
        found.append("calculator")
    if asks_about_time(message):
        found.append("clock")
    if files and _FILE_CUES.search(message):
        found.append("file_search")
    if memory:
        if question and (_SELF.search(message) or _PAST.search(message)):
            found.append("search_memory")
        if question and _PROFILE.search(message):
            found.append("recall_profile")
        if not question and _STORE.search(message):
            found.append("store_memory")
    return found
