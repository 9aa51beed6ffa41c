"""Transfer: the raw log out as JSONL, and turns in from JSONL or LoCoMo files (derived indexes are rebuilt from
the log, never exported: docs/design.md promise 1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

from .errors import CuememError, ImportFormatError
from .formats import (
    ImportReport,
    count_lines,
    file_lines,
    iter_jsonl,
    iter_locomo_turns,
    read_locomo,
    sniff_format,
    strict_dumps,
)
from .intake import Intake
from .store.base import Store
from .types import Namespace

# (label, total) -> a context yielding advance(n): how long file ingestion shows progress (the CLI passes a bar).
ProgressFactory = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]


class Transfer:
    """Export and import over one store, writing through the intake (validation, log, then the engine)."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.indexer = intake.indexer

    @property
    def store(self) -> Store:
        """The indexer's store (see Intake.store)."""
        return self.indexer.store

    def export(self, out: IO[str], namespaces: Iterable[Namespace]) -> int:
        """Memory.export: each namespace's log as JSONL lines of strict JSON, one turn a line; returns how many."""
        count = 0
        for namespace in namespaces:
            ns = self.store.namespace_id(namespace)
            for turn in self.store.iter_turns(ns):
                data = turn.as_dict()
                data.pop("seq")
                out.write(strict_dumps(data) + "\n")
                count += 1
        return count

    def import_lines(
        self,
        lines: Iterable[str | bytes],
        target: Namespace | None,
        progress: Callable[[int], None] | None = None,
    ) -> ImportReport:
        """Memory.import_: JSONL lines into `target` (one other namespace may be named by the lines, the one
        copied) or, without a target, into the namespace each line names. The lines are taken lazily, one at a
        time, and written in batches: at most one batch of lines is held at once, however many namespaces the
        lines name (bounded memory, issue 33)."""
        report = ImportReport()
        source: Namespace | None = None  # the one other namespace the lines may name when a target is given
        pending: dict[Namespace, list[tuple[int, dict[str, Any]]]] = {}
        held = 0  # lines waiting in `pending`, over every namespace
        seen: dict[Namespace, Counter[str]] = {}  # id-less repeats are counted across the whole file

        def flush(namespace: Namespace) -> None:
            rows = pending.pop(namespace, [])
            turns, rejected = self.intake.validate(
                [data for _, data in rows], namespace, None, None, seen.setdefault(namespace, Counter())
            )
            for i, why in rejected:
                report.reject(rows[i][0], why)
            del rows
            if rejected and progress:
                progress(len(rejected))
            if not turns:
                return
            ns, appended = self.intake.append(namespace, turns)
            report.added += len(appended.added)
            report.skipped += len(appended.skipped)
            self.indexer.sync(self.indexer.engine, ns, namespace)
            if progress:
                progress(len(turns))

        for lineno, data in iter_jsonl(lines, report):
            try:
                named = namespace_of_line(data)
                if target is None:
                    if named is None:
                        raise ImportFormatError("line has no namespace and no --user-id was given")
                    namespace = named
                else:
                    if named is not None and named != target:
                        if source is None:
                            source = named
                        elif named != source:
                            raise ImportFormatError(
                                f"line names namespace ({named}), but this import copies ({source}) into"
                                f" ({target}): import one namespace at a time"
                            )
                    namespace = target
            except (ImportFormatError, ValueError) as exc:
                report.reject(lineno, str(exc))
                continue
            pending.setdefault(namespace, []).append((lineno, data))
            held += 1
            if held >= self.indexer.batch:  # one batch held at most, over every namespace the lines name
                for waiting in list(pending):
                    flush(waiting)
                held = 0
        for namespace in list(pending):
            flush(namespace)
        report.errors.sort(key=lambda e: (str(type(e[0])), e[0]))
        return report

    def ingest_file(
        self,
        path: Path,
        file_format: str,
        ids: tuple[str | None, str | None, str | None],
        samples: Sequence[str] | None,
        progress: ProgressFactory | None,
    ) -> ImportReport:
        """Memory.ingest_file: a JSONL file through `import_lines`, or a LoCoMo file sample by sample, into the
        namespaces `ids` (user, agent, run) names."""
        user_id, agent_id, run_id = ids
        if file_format == "auto":
            file_format = sniff_format(path)
        bar = progress or (lambda label, total: nullcontext(lambda n: None))
        if file_format == "jsonl":
            target = Namespace(user_id, agent_id, run_id) if user_id is not None else None
            with bar(f"ingest {path.name}", count_lines(path)) as advance:
                return self.import_lines(file_lines(path), target, progress=advance)
        if file_format != "locomo":
            raise CuememError(f"unknown format {file_format!r}: choose auto, jsonl or locomo")
        report = ImportReport()
        chosen = [s for s in read_locomo(path, report.errors) if not samples or s.get("sample_id") in samples]
        if run_id is not None and len(chosen) > 1:  # their turn ids (D1:1 ...) repeat: one namespace would drop them
            raise CuememError(
                f"{path} holds {len(chosen)} samples and a run id was given: each sample needs its own namespace;"
                " drop the run id (each sample becomes a run) or choose one sample"
            )
        if user_id is not None:
            Namespace(user_id, agent_id, run_id)  # a bad id given by the caller refuses the call
        for sample in chosen:
            sid = str(sample.get("sample_id", "sample"))
            user = user_id or sid
            run = run_id or (sid if user_id and len(chosen) > 1 else None)
            try:
                Namespace(user, agent_id, run)
            except ValueError as exc:  # a sample id that cannot be a namespace rejects that sample only
                report.errors.append((sid, f"sample skipped: {exc}"))
                continue
            problems: list[str] = []
            turns = list(iter_locomo_turns(sample, problems))
            report.errors += [(sid, why) for why in problems]
            with bar(f"ingest {sid}", len(turns)) as advance:
                for start in range(0, len(turns), self.indexer.batch):
                    chunk = turns[start : start + self.indexer.batch]
                    result = self.intake.add([t for _, t in chunk], (user, agent_id, run), on_error="skip")
                    report.added += len(result.added)
                    report.skipped += len(result.skipped)
                    report.errors += [(sid, f"{chunk[i][0]} ({chunk[i][1].id}): {why}") for i, why in result.rejected]
                    advance(len(chunk))
        return report


def namespace_of_line(data: dict[str, Any]) -> Namespace | None:
    """The namespace a JSONL line names (taken out of the line), or None."""
    raw = data.pop("namespace", None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or "user_id" not in raw:
        raise ImportFormatError("namespace must be an object with a user_id")
    return Namespace(raw["user_id"], raw.get("agent_id"), raw.get("run_id"))
