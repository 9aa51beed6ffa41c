from __future__ import annotations

from pathlib import Path

import pytest

from cuemem import CuememError, Settings


def test_precedence_defaults_toml_env_arguments(tmp_path, monkeypatch):
    toml = tmp_path / "cuemem.toml"
    toml.write_text('[cuemem]\nengine = "bm25"\nk = 7\nmax_turn_bytes = 1000\n')
    settings = Settings.load(toml)
    assert (settings.engine, settings.k, settings.max_turn_bytes, settings.rrf_k) == ("bm25", 7, 1000, 60)
    monkeypatch.setenv("CUEMEM_K", "9")
    assert Settings.load(toml).k == 9
    assert Settings.load(toml, k=3, db=str(tmp_path / "x.db")).k == 3
    assert Settings.load(toml, db=str(tmp_path / "x.db")).db == Path(tmp_path / "x.db")


def test_bad_settings_are_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./cuemem.toml or user config file can interfere
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = [unclosed")
    with pytest.raises(CuememError, match="not valid TOML"):
        Settings.load(bad)
    with pytest.raises(CuememError, match="unknown setting"):
        Settings.load(None, colour="blue")
    monkeypatch.setenv("CUEMEM_K", "many")
    with pytest.raises(CuememError, match="not a valid int"):
        Settings.load(None)
    with pytest.raises(CuememError, match="does not exist"):
        Settings.load(tmp_path / "missing.toml")
    monkeypatch.delenv("CUEMEM_K")
    with pytest.raises(CuememError, match="turn_template"):
        Settings.load(None, turn_template="{when} {text}")
    for name in ("rrf_k", "k", "embed_batch_size", "max_turn_bytes"):
        with pytest.raises(CuememError, match=f"{name} must be >= 1"):
            Settings.load(None, **{name: 0})


def test_the_datasets_directory_is_a_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert Settings.load(None).datasets == Path("datasets")  # under the working directory
    monkeypatch.setenv("CUEMEM_DATASETS", "~/data")
    assert Settings.load(None).datasets == Path("~/data").expanduser()
    toml = tmp_path / "cuemem.toml"
    toml.write_text('datasets = "/srv/benchmarks"\n')
    monkeypatch.delenv("CUEMEM_DATASETS")
    assert Settings.load(toml).datasets == Path("/srv/benchmarks")


def test_a_toml_file_in_the_working_directory_is_read_only_when_named(tmp_path, monkeypatch):
    """A cloned directory's cuemem.toml must not redirect turn text and API keys (issue 11)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("CUEMEM_CONFIG", raising=False)
    (tmp_path / "cuemem.toml").write_text('llm_base_url = "http://attacker.example/v1"\n')
    assert Settings.load(None).llm_base_url == "https://api.openai.com/v1"
    assert Settings.load("cuemem.toml").llm_base_url == "http://attacker.example/v1"
    monkeypatch.setenv("CUEMEM_CONFIG", "cuemem.toml")
    assert Settings.load(None).llm_base_url == "http://attacker.example/v1"
    user = tmp_path / "config" / "cuemem" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("k = 4\n")
    monkeypatch.delenv("CUEMEM_CONFIG")
    assert Settings.load(None).k == 4  # the user's own config directory is still read
