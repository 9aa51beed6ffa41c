"""The documentation cannot go stale (issue 32): the site builds with warnings as errors, and every example in
README.md and docs/*.md runs.

A fenced ```python, ```bash, ```sh or ```console block is an example. An HTML comment on the line before it says
how it runs:

- none: run here, with the model-free `hashing` embedder, in a temporary directory (one per page, the page's blocks
  in order, so that a later block may use what an earlier one wrote);
- `<!-- example: needs-server -->`: run by `test_server_examples` against a `cuemem serve` it starts on a free port
  (`localhost:8000` in the text becomes that port; the line that starts the server is left out);
- `<!-- example: needs-model -->`: run by `test_model_examples` with the default models, skipped when they are not
  fetched;
- `<!-- example: demo -->`: the README's `make demo` output, checked by `test_readme_demo_output`;
- `<!-- example: skip REASON -->`: not run (needs data, a PostgreSQL server, a download).

In a ```console block, lines starting with `$ ` are commands and the lines after them their output; shown output is
checked (a `...` in it stands for anything, and so does each decimal number: timings and scores vary).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
LANGS = {"python", "bash", "sh", "console"}
MARKER = re.compile(r"<!--\s*example:\s*([\w-]+)\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```\s*([\w-]*)\s*$")


@dataclass
class Example:
    """One fenced block of a page: where it is, its language, its text and its marker."""

    page: Path
    line: int
    lang: str
    code: str
    kind: str  # "run", "needs-server", "needs-model", "skip"

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples(page: Path) -> Iterator[Example]:
    """The runnable fenced blocks of a page, with the marker on the line before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.groups()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in LANGS:
            continue
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        kind = marker.group(1) if marker else "run"
        assert kind in ("run", "needs-server", "needs-model", "demo", "skip"), f"{page.name}:{start + 1}: {kind!r}?"
        if kind == "skip":
            assert marker is not None and marker.group(2), f"{page.name}:{start + 1}: say why an example is skipped"
        code = textwrap.dedent("\n".join(body)) if indent else "\n".join(body)
        yield Example(page, start + 1, lang, code + "\n", kind)


ALL = [ex for page in PAGES for ex in examples(page)]


def env_for(tmp: Path, *, models: bool = False) -> dict[str, str]:
    """The examples' environment: this checkout's code, the venv's `cuemem` first on PATH, the user's data, config
    and call cache in `tmp`; the `hashing` embedder unless the real models are wanted."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUEMEM_")}
    # the model cache, and this worker's share of the cores (conftest): llama.cpp's and ONNX Runtime's threads spin,
    # and a pool larger than the cores left to it runs several times slower beside the other workers
    for name in ("CUEMEM_MODEL_CACHE", "CUEMEM_LLM_THREADS", "CUEMEM_ONNX_THREADS") if models else ():
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        XDG_DATA_HOME=str(tmp / "xdg-data"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
        CUEMEM_LLM_CACHE=str(tmp / "llm-calls.db"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        COLUMNS="120",
    )
    if not models:
        env["CUEMEM_EMBEDDER"] = "hashing"
    return env


def console_steps(code: str) -> list[tuple[str, list[str]]]:
    """A console block as (command, shown output lines); a command's lines ending in a backslash continue it."""
    steps: list[tuple[str, list[str]]] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            assert not steps, f"output before any command: {lines[i]!r}"
            i += 1
            continue
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        shown: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        steps.append(("\n".join(command), shown))
    return steps


def shown_matches(shown: list[str], actual: str) -> bool:
    """Whether the shown output is what ran: line by line, `...` standing for anything and any decimal number for
    any number."""
    pattern = ""
    for line in shown:
        parts = re.split(r"(\.\.\.|\d+\.\d+)", line.rstrip())
        regex = "".join(
            ".*" if p == "..." else r"[\d.]+" if re.fullmatch(r"\d+\.\d+", p) else re.escape(p) for p in parts
        )
        pattern += regex + r"\s*\n"
    return re.fullmatch(pattern, actual.rstrip() + "\n", flags=re.S) is not None


def cuemem_commands(code: str) -> list[list[str]] | None:
    """The argument lists of a bash block made only of plain `cuemem ...` commands (comments, continued lines,
    quoting and `> /dev/null` allowed; no pipe, other redirection, substitution or other program), else None."""
    commands: list[list[str]] = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError:
            return None
        if not words:
            continue
        if words[-2:] == [">", "/dev/null"]:  # output thrown away: the in-process run captures it instead
            words = words[:-2]
        if words[0] != "cuemem" or any(set(w) & set("|&;<>()") or "$" in w or "`" in w for w in words):
            return None
        commands.append(words[1:])
    return commands or None


CLI_DRIVER = textwrap.dedent(
    """
    import json, sys
    from cuemem.cli import app
    for argv in json.load(open(sys.argv[1])):
        try:
            app(args=argv, prog_name="cuemem")
        except SystemExit as exc:
            if exc.code not in (0, None):
                print(f"`cuemem {' '.join(argv)}` exited {exc.code}", file=sys.stderr)
                sys.exit(1)
    """
)


def run_shell(ex: Example, cwd: Path, env: dict[str, str], timeout: float = 280) -> list[str]:
    """Run one bash / sh / console example; the failures, each with where it is and what it printed. A bash block
    of plain `cuemem` commands runs them in order in one process (one import of cuemem, as `bash -e` would stop
    at the first that fails): each command must leave nothing open that the next one would trip over."""
    failures = []
    if ex.lang == "console":
        for command, shown in console_steps(ex.code):
            proc = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            said = proc.stdout + proc.stderr
            if proc.returncode != 0:
                failures.append(f"{ex.where}: `{command}` exited {proc.returncode}:\n{said}")
            elif shown and not shown_matches(shown, proc.stdout):
                failures.append(f"{ex.where}: `{command}` printed\n{proc.stdout}\nnot as shown:\n" + "\n".join(shown))
        return failures
    commands = cuemem_commands(ex.code)
    argv = ["bash", "-e", "-o", "pipefail", "-c", ex.code]
    if commands is not None:
        scratch = Path(tempfile.mkdtemp(dir=cwd.parent))
        (scratch / "argv.json").write_text(json.dumps(commands))
        (scratch / "cli.py").write_text(CLI_DRIVER)
        argv = [sys.executable, str(scratch / "cli.py"), str(scratch / "argv.json")]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        failures.append(f"{ex.where}: exited {proc.returncode}:\n{ex.code}\n{proc.stdout}{proc.stderr}")
    return failures


def run_python(batch: list[Example], tmp: Path, env: dict[str, str]) -> list[str]:
    """Run Python examples in one subprocess (one import of cuemem), each in a fresh namespace; the failures."""
    driver = textwrap.dedent(
        """
        import json, os, sys, traceback
        results = []
        for where, code in json.load(open(sys.argv[1])):
            try:
                exec(compile(code, where, "exec"), {"__name__": "__main__"})
            except BaseException:
                results.append(f"{where}:\\n{traceback.format_exc()}")
        json.dump(results, open(sys.argv[2], "w"))
        """
    )
    scratch = Path(tempfile.mkdtemp(dir=tmp.parent))
    (scratch / "blocks.json").write_text(json.dumps([(ex.where, ex.code) for ex in batch]))
    (scratch / "driver.py").write_text(driver)
    proc = subprocess.run(
        [sys.executable, str(scratch / "driver.py"), str(scratch / "blocks.json"), str(scratch / "failures.json")],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return list(json.loads((scratch / "failures.json").read_text()))


def needs_cuemem() -> None:
    if not (BIN / "cuemem").exists():
        pytest.skip(f"no cuemem script beside {sys.executable}: install the package (make setup)")


# ------------------------------------------------------------------------------------------------------- the site


def test_site_builds_without_warnings(tmp_path: Path) -> None:
    """`make docs`: mkdocs --strict, so a broken link, a page left out of the nav or a hook failure fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    api = (tmp_path / "site" / "http-api" / "index.html").read_text(encoding="utf-8")
    assert "/v1/memories/search" in api and "SearchResponse" in api  # generated from the OpenAPI schema
    settings = (tmp_path / "site" / "settings" / "index.html").read_text(encoding="utf-8")
    assert "CUEMEM_ANSWER_BUDGET" in settings and "CUEMEM_DATASETS" in settings  # generated from Settings


def test_pages_stay_inside_the_repository() -> None:
    """Nothing points outside the repository (a clone has no ../shared), and the README stays short."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "](../" not in text, f"{page.name} links outside the repository"
        assert ":8765" not in text, f"{page.name}: `cuemem serve` listens on 8000"
    assert (ROOT / "README.md").stat().st_size <= 12 * 1024


def test_every_example_is_seen() -> None:
    """The parser finds the examples, and the kinds that need something are few enough to run."""
    kinds = {kind: [ex for ex in ALL if ex.kind == kind] for kind in ("run", "needs-server", "needs-model", "skip")}
    assert len(kinds["run"]) >= 15 and kinds["needs-server"] and kinds["needs-model"]
    readme = [ex for ex in ALL if ex.page.name == "README.md"]
    assert {ex.lang for ex in readme} >= {"python", "console", "bash"}


# --------------------------------------------------------------------------------------------------- the examples


RUNNABLE = sorted({ex.page for ex in ALL if ex.kind == "run"})


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_examples_run(page: Path, tmp_path: Path) -> None:
    """Every unmarked example of a page, in order, in one directory, with the hashing embedder; consecutive Python
    blocks share one subprocess (one import of cuemem)."""
    needs_cuemem()
    env = env_for(tmp_path)
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "benchmarks").symlink_to(ROOT / "benchmarks")  # examples of scripts run from the repository's root
    failures: list[str] = []
    python: list[Example] = []
    for ex in [ex for ex in ALL if ex.page == page and ex.kind == "run"] + [None]:
        if ex is not None and ex.lang == "python":
            python.append(ex)
            continue
        if python:
            failures += run_python(python, cwd, env)
            python = []
        if ex is not None:
            failures += run_shell(ex, cwd, env)
    assert not failures, "\n\n".join(failures)


def test_a_cli_block_run_in_one_process_stops_at_the_first_failure(tmp_path: Path) -> None:
    """The in-process run of a `cuemem`-only block fails as `bash -e` would: at the command that fails, with its
    message, and runs nothing after it; a block with any other program or shell syntax goes to bash."""
    needs_cuemem()
    assert cuemem_commands("cuemem --db a.db add 'x y' \\\n  --user-id u  # note\ncuemem stats") == [
        ["--db", "a.db", "add", "x y", "--user-id", "u"],
        ["stats"],
    ]
    assert cuemem_commands("cuemem demo --no-answers > /dev/null") == [["demo", "--no-answers"]]
    for shell in ("cuemem export | head", "cuemem export > f", "cuemem get $ID", "printf x", "make setup"):
        assert cuemem_commands(shell) is None, shell
    (tmp_path / "work").mkdir()
    code = "\n".join(
        ["cuemem --db a.db add kept -u u", "cuemem --db nowhere.db get t1 -u u", "cuemem --db b.db add never -u u"]
    )
    example = Example(ROOT / "docs" / "cli.md", 1, "bash", code, "run")
    failures = run_shell(example, tmp_path / "work", env_for(tmp_path))
    assert len(failures) == 1 and "no store at nowhere.db" in failures[0] and "exited 1" in failures[0]
    assert (tmp_path / "work" / "a.db").exists() and not (tmp_path / "work" / "b.db").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_examples(tmp_path: Path) -> None:
    """The `needs-server` examples, in page order, against `cuemem --db srv.db serve` on a free port."""
    needs_cuemem()
    pytest.importorskip("fastapi")
    env = env_for(tmp_path)
    port = free_port()
    env["K"] = subprocess.run(
        ["cuemem", "--db", "srv.db", "keys", "create", "--user-id", "maya"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    server = subprocess.Popen(
        ["cuemem", "--db", "srv.db", "serve", "--port", str(port), "--no-mcp", "--log-level", "warning"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read() if server.stderr else "server exited"
                assert time.monotonic() < deadline, "the server did not answer /healthz in 90 s"
                time.sleep(0.3)
        failures = []
        for ex in (ex for ex in ALL if ex.kind == "needs-server"):
            code = re.sub(r"^.*\bcuemem\b.*\bserve\b.*&.*$\n?", "", ex.code, flags=re.M)
            code = code.replace("localhost:8000", f"127.0.0.1:{port}").replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            failures += run_shell(Example(ex.page, ex.line, ex.lang, code, ex.kind), tmp_path, env)
        assert not failures, "\n\n".join(failures)
    finally:
        server.terminate()
        server.wait(timeout=30)


def default_models_fetched() -> bool:
    from cuemem.models import registry
    from cuemem.models.registry import is_fetched

    return all(is_fetched(registry.get_spec(n)) for n in ("embeddinggemma", "qwen2.5-coder-0.5b"))


@pytest.mark.slow
def test_model_examples(tmp_path: Path) -> None:
    """The `needs-model` examples with the default models (EmbeddingGemma, Qwen2.5-Coder-0.5B), in page order."""
    needs_cuemem()
    if not default_models_fetched():
        pytest.skip("the default models are not fetched: make setup")
    env = env_for(tmp_path, models=True)
    failures = []
    for ex in (ex for ex in ALL if ex.kind == "needs-model"):
        failures += run_shell(ex, tmp_path, env, timeout=600)
    assert not failures, "\n\n".join(failures)


def squash(text: str) -> str:
    """Output with the parts that vary taken out: table wrapping (all whitespace), rules, the temporary path and the
    scores' digits (the int8 embedder's last digit differs between machines; the order is what the rows show)."""
    text = re.sub(r"─+", " ", text)
    text = re.sub(r"\S*/demo\.db", "DB", text)
    text = re.sub(r"(?<![\d.])\d\.\d{3}(?![\d.])", "#.###", text)
    return " ".join(text.split())


@pytest.mark.slow
@pytest.mark.timeout(900)  # the real default models on 2 cores: ~1-2 minutes, more on a loaded machine
def test_readme_demo_output(tmp_path: Path) -> None:
    """`make demo`'s job with the real default models (EmbeddingGemma, Qwen2.5-Coder-0.5B): retrieval with cited
    turns, dates, sessions, then answers citing turns; and the README shows its real output: every retrieval line it
    shows (all but the model's answers) is printed, in order."""
    needs_cuemem()
    if not default_models_fetched():
        pytest.skip("the default models are not fetched: make setup")
    readme = [ex for ex in ALL if ex.page.name == "README.md"]
    demo = next(ex for ex in readme if ex.kind == "demo")
    shown = console_steps(demo.code)[0][1]
    env = env_for(tmp_path, models=True)
    proc = subprocess.run(["cuemem", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = proc.stdout
    assert "engine stitch" in printed and "session_3" in printed and "18 March 2024" in printed  # date column
    found, total = (int(x) for x in printed.split("Evidence recall@5: ")[1].split(" ")[0].split("/"))
    assert total == 10 and found >= 9  # measured 10/10 with EmbeddingGemma (BM25 weight 0.2), 9/10 with MiniLM
    assert printed.count("\nA: ") == 8 and "Answers by llamacpp:qwen2.5-coder-0.5b" in printed
    cited = int(printed.split("[greedy,q4_0]: ")[1].split("/")[0])
    assert cited >= 4  # answers citing an evidence turn: measured 5/8 (4/8 before an answer cited the turns saying it)

    def retrieval(line: str) -> bool:
        return not line.startswith(("A: ", "Answers by "))

    actual = squash("\n".join(filter(retrieval, printed.splitlines())))
    segments: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == "...":
            segments.append([])
        elif retrieval(line):
            segments[-1].append(line)
    position = 0
    for segment in filter(None, segments):
        want = squash("\n".join(segment))
        found_at = actual.find(want, position)
        assert found_at >= 0, f"README shows what `cuemem demo` no longer prints:\n{want}\n\nprinted:\n{actual}"
        position = found_at + len(want)
