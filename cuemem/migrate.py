"""`cuemem migrate`: move every namespace's raw turn log from one store to another through the export format."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from .config import Settings
from .errors import CuememError, UnknownNamespaceError
from .memory import INGEST_BATCH, Memory, ProgressFactory
from .store import as_target, display_target, is_dsn
from .store.base import DerivedSpec, Store
from .types import Hit, Namespace, Turn

__all__ = [
    "LOG_ONLY",
    "MigrationError",
    "MigrationMismatch",
    "MigrationReport",
    "NamespaceMigration",
    "canonical_line",
    "log_checksums",
    "migrate",
]

LOG_ONLY = "_migrate"  # the engine name (and watermark key) of the memories a migration opens
NamespaceKey = tuple[str, str | None, str | None]  # (user_id, agent_id, run_id) as the export line names it


class MigrationError(CuememError):
    """A migration that could not be carried out (same store twice, a turn the target refused ...)."""


class MigrationMismatch(MigrationError):
    """The target disagrees with the source: a turn id holding other content, or counts or checksums that differ
    after the copy. Nothing in the target was overwritten."""


class _LogOnly:
    """An engine that indexes nothing. `Memory.import_` catches the memory's engine up after each batch it
    appends; with this engine that costs one watermark write, and no embedding model, tokenizer or LLM is
    loaded. Every real engine of the target has no watermark yet, so it indexes the whole log on first use."""

    name = LOG_ONLY
    uses_embedder = False
    uses_llm = False
    derived = DerivedSpec(LOG_ONLY, (), "rebuild")

    def ingest(self, ctx: Any, turns: Sequence[Turn]) -> None:
        return None

    def retrieve(self, ctx: Any, query: str, k: int, budget_tokens: int | None) -> list[Hit]:
        return []


@dataclass
class NamespaceMigration:
    """One namespace's part of a migration: its turns in the source, how many were copied and how many the target
    already held, and the log checksum (`log_checksums`) found equal on both sides."""

    namespace: Namespace
    turns: int = 0
    copied: int = 0
    skipped: int = 0
    checksum: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.namespace.as_dict(),
            "turns": self.turns,
            "copied": self.copied,
            "skipped": self.skipped,
            "sha256": self.checksum,
        }


@dataclass
class MigrationReport:
    """What `migrate` did. It returns only once every namespace's count and checksum matched in the target."""

    source: str  # display_target: never a password
    target: str
    namespaces: list[NamespaceMigration] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def turns(self) -> int:
        return sum(n.turns for n in self.namespaces)

    @property
    def copied(self) -> int:
        return sum(n.copied for n in self.namespaces)

    @property
    def skipped(self) -> int:
        return sum(n.skipped for n in self.namespaces)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "turns": self.turns,
            "copied": self.copied,
            "skipped": self.skipped,
            "verified": True,
            "seconds": round(self.seconds, 3),
            "namespaces": [n.as_dict() for n in self.namespaces],
        }


def canonical_line(data: Mapping[str, Any]) -> str:
    """A turn as the export format writes it (`Memory.export`), in one canonical spelling: without the store's
    own log position (`seq`), keys sorted, compact separators, non-ASCII escaped. Two stores holding the same
    turn give the same line, whatever their row ids or the key order of stored metadata."""
    entry = {key: value for key, value in data.items() if key != "seq"}
    return json.dumps(entry, ensure_ascii=True, sort_keys=True, separators=(",", ":"))


class _Digest:
    """The log checksum of one namespace: SHA-256 over its canonical export lines in log order, one per line."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.count = 0

    def add(self, canonical: str) -> None:
        self.sha.update(canonical.encode("ascii") + b"\n")
        self.count += 1


def _key(data: Mapping[str, Any]) -> NamespaceKey:
    raw = data.get("namespace")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("user_id"), str):
        raise MigrationError(f"an exported line names no namespace: {str(data)[:200]}")
    return raw["user_id"], raw.get("agent_id"), raw.get("run_id")


class _LineSink:
    """A text stream for `Memory.export`: whole lines, as they come, go to `on_line` (nothing is kept but the
    unfinished line). Export escapes newlines inside strings, so "\\n" ends a line and nothing else does."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.tail = ""

    def write(self, chunk: str) -> int:
        text = self.tail + chunk
        *lines, self.tail = text.split("\n")
        for line in lines:
            if line:
                self.on_line(line)
        return len(chunk)

    def flush(self) -> None:
        return None


def log_checksums(
    memory: Memory, namespaces: Sequence[Namespace] | None = None, advance: Callable[[int], None] | None = None
) -> dict[NamespaceKey, _Digest]:
    """(user_id, agent_id, run_id) -> the namespace's turn count and log checksum, read through `Memory.export`
    (every namespace, or those given; `advance(n)` is told of each INGEST_BATCH turns read). The same function
    serves the source and the target of a migration."""
    digests: dict[NamespaceKey, _Digest] = {}
    read = 0

    def on_line(line: str) -> None:
        nonlocal read
        data = json.loads(line)
        digests.setdefault(_key(data), _Digest()).add(canonical_line(data))
        read += 1
        if advance is not None and read % INGEST_BATCH == 0:
            advance(INGEST_BATCH)

    sink = cast(IO[str], _LineSink(on_line))
    if namespaces is None:
        memory.export(sink)
    for namespace in namespaces or ():
        digests.setdefault((namespace.user_id, namespace.agent_id, namespace.run_id), _Digest())
        try:
            memory.export(sink, user_id=namespace.user_id, agent_id=namespace.agent_id, run_id=namespace.run_id)
        except UnknownNamespaceError:
            continue
    if advance is not None and read % INGEST_BATCH:
        advance(read % INGEST_BATCH)
    return digests


def _log_only_memory(target: str | Path, *, read_only: bool) -> Memory:
    """A Memory that reads and writes the log only: the log-only engine, the model-free embedder, no model-call
    cache, and no limit on a turn's size (the log is copied as the source holds it); no config file is read."""
    settings = Settings(
        db=as_target(target), engine=LOG_ONLY, embedder="hashing", llm_cache="off", max_turn_bytes=1 << 62
    )
    return Memory(settings=settings, engine=_LogOnly(), read_only=read_only)


def _same_target(a: str | Path, b: str | Path) -> bool:
    """Whether two targets name the same store (by path, link or DSN host, port and database)."""
    if is_dsn(str(a)) != is_dsn(str(b)):
        return False
    if is_dsn(str(a)):
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # opening the DSN will say what is missing
            return str(a) == str(b)

        def where(dsn: str) -> tuple[str, str, str]:
            parts = conninfo_to_dict(dsn)
            host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
            port = str(parts.get("port") or "5432")
            return host, port, str(parts.get("dbname") or parts.get("user") or "")

        return where(str(a)) == where(str(b))
    pa, pb = Path(a).expanduser().resolve(), Path(b).expanduser().resolve()
    if pa == pb:
        return True
    return pa.exists() and pb.exists() and os.path.samefile(pa, pb)


class _Copier:
    """Takes the source's export lines one at a time, checks each batch against the target and imports it."""

    def __init__(self, target: Memory, where: str, advance: Callable[[int], None]) -> None:
        self.target = target
        self.where = where
        self.advance = advance
        self.digests: dict[NamespaceKey, _Digest] = {}
        self.results: dict[NamespaceKey, NamespaceMigration] = {}
        self.batch: list[tuple[str, dict[str, Any], str]] = []  # (line, data, canonical line)
        self.batch_key: NamespaceKey | None = None

    def on_line(self, line: str) -> None:
        data = json.loads(line)
        key = _key(data)
        if key != self.batch_key:
            self.flush()
            self.batch_key = key
        canonical = canonical_line(data)
        self.digests.setdefault(key, _Digest()).add(canonical)
        self.batch.append((line, data, canonical))
        if len(self.batch) >= INGEST_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.batch or self.batch_key is None:
            return
        batch, key = self.batch, self.batch_key
        self.batch = []
        try:
            namespace = Namespace(*key)
        except ValueError as exc:
            raise MigrationError(f"namespace {key} cannot be migrated: {exc}") from exc
        result = self.results.setdefault(key, NamespaceMigration(namespace))
        self._check_conflicts(namespace, batch)
        report = self.target.import_([line for line, _, _ in batch])
        if report.errors:
            lineno, why = report.errors[0]
            turn = batch[lineno - 1][1].get("id") if isinstance(lineno, int) else lineno
            raise MigrationError(
                f"{self.where} refused turn {turn!r} of ({namespace}): {why}"
                + (f" (and {len(report.errors) - 1} more)" if len(report.errors) > 1 else "")
            )
        result.copied += report.added
        result.skipped += report.skipped
        self.advance(len(batch))

    def _check_conflicts(self, namespace: Namespace, batch: list[tuple[str, dict[str, Any], str]]) -> None:
        """Turn ids of the batch that the target already holds must hold the same turn there (import would skip
        them silently): a rerun after an interruption finds its own copies; anything else is a mismatch."""
        store = self.target.store
        try:
            ns = store.namespace_id(namespace)
        except UnknownNamespaceError:
            return
        present = store.seqs_of(ns, [str(data.get("id")) for _, data, _ in batch])
        held_turns = _turns_at(store, ns, sorted(present.values()))
        for _, data, canonical in batch:
            turn_id = str(data.get("id"))
            turn = held_turns.get(present.get(turn_id, 0))
            if turn is None:  # not in the target (or deleted there meanwhile): import adds it
                continue
            held = turn.as_dict()
            if canonical_line(held) != canonical:
                differ = sorted(k for k in set(held) | set(data) if k != "seq" and held.get(k) != data.get(k))
                raise MigrationMismatch(
                    f"{self.where} already holds turn {turn_id!r} of ({namespace}) with other content"
                    f" (differing in {', '.join(differ) or 'encoding'}), left as is: migrate into an empty store, or"
                    " delete that namespace from the target first"
                )


def _turns_at(store: Store, ns: int, seqs: list[int], gap: int = 16) -> dict[int, Turn]:
    """The turns at the given log positions (sorted), read as ranges of the log: one query for a run of nearby
    positions (a rerun finds its earlier copies side by side), instead of one per turn."""
    wanted, found = set(seqs), {}
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and seq - runs[-1][-1] <= gap:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    for run in runs:
        lo, hi = run[0], run[-1]
        for turn in store.iter_turns(ns, after_seq=lo - 1, limit=hi - lo + 1):
            if turn.seq is None or turn.seq > hi:
                break
            if turn.seq in wanted:
                found[turn.seq] = turn
    return found


def _progress(
    progress: ProgressFactory | None, total: int, label: str
) -> AbstractContextManager[Callable[[int], None]]:
    if progress is None:
        return nullcontext(lambda n: None)
    return progress(label, total)


def migrate(source: str | Path, target: str | Path, *, progress: ProgressFactory | None = None) -> MigrationReport:
    """Copy every namespace's raw turn log from `source` to `target` (each a SQLite path or a postgresql:// DSN)
    through the export format: the source's `Memory.export` lines, taken one at a time, go in batches of
    INGEST_BATCH into the target's `Memory.import_`, so the log is streamed, never held whole. `progress` is a
    ProgressFactory, as for `Memory.ingest_file`: called with ("migrate", turns in the source), it yields
    `advance(n)`, called after each batch; then with ("verify", turns copied) for the read-back.

    Only the log is copied (turn ids, text, speaker, session, timestamp, metadata, and their order within each
    namespace). Derived state (indexes, vectors, records, engine state, caches) is NOT copied: each engine
    rebuilds it from the log on its first use in the target. Neither is the store's history of changes, nor its
    salt: an id-less message added again later gets an id of the target's. The migration loads no embedding
    model and no LLM: source and target are opened with a log-only engine (`_LogOnly`), so the catch-up that
    `import_` runs after each batch indexes nothing (the real engines have no watermark in the target yet).

    Idempotent: import skips a turn id the target already holds, so a migration interrupted at any point and run
    again ends with each turn once. A turn id the target holds with other content raises MigrationMismatch
    (nothing is overwritten). Verification: per namespace, the turn count and the log checksum (SHA-256 over the
    canonical export lines in log order, `canonical_line`, no store-internal seq) read back from the target
    through `Memory.export` must equal the source's, else MigrationMismatch. Refuses source == target.
    """
    if _same_target(source, target):
        raise MigrationError(f"source and target are the same store ({display_target(source)}): nothing to migrate")
    start = time.perf_counter()
    report = MigrationReport(display_target(source), display_target(target))
    with ExitStack() as stack:
        src = stack.enter_context(_log_only_memory(source, read_only=True))
        dst = stack.enter_context(_log_only_memory(target, read_only=False))
        if src.store.salt == dst.store.salt:
            raise MigrationError(
                f"{report.source} and {report.target} are the same store (or one is a file copy of the other):"
                " nothing to migrate"
            )
        total = sum(n for _, n in src.store.namespaces())
        with _progress(progress, total, "migrate") as advance:
            copier = _Copier(dst, report.target, advance)
            src.export(cast(IO[str], _LineSink(copier.on_line)))
            copier.flush()
        with _progress(progress, sum(d.count for d in copier.digests.values()), "verify") as advance:
            _verify(copier, dst, report, advance)
    report.seconds = time.perf_counter() - start
    return report


def _verify(copier: _Copier, target: Memory, report: MigrationReport, advance: Callable[[int], None]) -> None:
    """Each migrated namespace's count and log checksum, read back from the target, against the source's."""
    namespaces = [result.namespace for result in copier.results.values()]
    held = log_checksums(target, namespaces, advance)
    for key, sent in copier.digests.items():
        result = copier.results[key]
        got = held.get((result.namespace.user_id, result.namespace.agent_id, result.namespace.run_id), _Digest())
        if got.count != sent.count:
            raise MigrationMismatch(
                f"({result.namespace}) holds {got.count} turns in {report.target} but {sent.count} in"
                f" {report.source}: the target held turns the source does not (or either changed meanwhile)"
            )
        if got.sha.hexdigest() != sent.sha.hexdigest():
            raise MigrationMismatch(
                f"the log checksum of ({result.namespace}) differs between {report.source} and {report.target}:"
                " the same number of turns, but not the same log (other content, or another order)"
            )
        result.turns = sent.count
        result.checksum = sent.sha.hexdigest()
        report.namespaces.append(result)
