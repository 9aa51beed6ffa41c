"""`cuemem llm`: talk to the configured model directly, and read or purge its call logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ..config import is_dsn
from ..errors import CuememError
from ..llm import FileCallCache, LLMClient, make_client
from ..memory import Memory
from ._common import JsonOpt, app, handles_errors, settings, state
from .output import console, plural, print_json, say, table, visible

llm_app = typer.Typer(
    help="Talk to the configured model directly (local Qwen2.5-Coder-0.5B by default).", no_args_is_help=True
)
app.add_typer(llm_app, name="llm")


def _client() -> LLMClient:
    """The configured model's client (the llm settings; its unscoped calls go to the llm_cache file)."""
    return make_client(settings())


@llm_app.command("chat")
@handles_errors
def llm_chat(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    max_tokens: Annotated[int, typer.Option(help="Longest reply.")] = 128,
    as_json: JsonOpt = False,
) -> None:
    """One chat turn with the model."""
    result = _client().chat([{"role": "user", "content": prompt}], max_tokens=max_tokens)
    if as_json:
        print_json({"text": result.text, "usage": result.usage.as_dict()})
    else:
        say(result.text)


@llm_app.command("choose")
@handles_errors
def llm_choose(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    option: Annotated[list[str], typer.Option("--option", "-o", help="An allowed answer (repeat the option).")],
    k: Annotated[int, typer.Option("-k", help="How many options to return, best first.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Choose among the given options under a token-trie constraint: the answer is always one of them."""
    chosen = _client().choose([{"role": "user", "content": prompt}], option, k=k)
    if as_json:
        print_json([{"option": c.option, "logprob": c.logprob} for c in chosen])
    else:
        for c in chosen:
            say(c.option)


@llm_app.command("stats")
@handles_errors
def llm_stats(as_json: JsonOpt = False) -> None:
    """Model calls in the call logs, per backend, stage and method, with tokens and seconds: those made for a
    namespace (cached in the store, "store") and unscoped ones (the llm_cache file, "file")."""
    client = _client()
    rows = [{"cache": "file", **r} for r in (client.cache.summary() if client.cache else [])]
    chosen = settings(db=state.db)
    if is_dsn(chosen.db) or Path(chosen.db).is_file():
        with Memory(settings=chosen, read_only=True) as memory:
            rows += [{"cache": "store", **r} for r in memory.store.call_summary()]
    if as_json:
        print_json(rows)
        return
    text = ("cache", "backend", "stage", "method")
    out = table((*text, "calls", "prompt tok", "completion tok", "seconds"), left=text)
    for r in rows:
        numbers = (str(r["calls"]), str(r["prompt_tokens"]), str(r["completion_tokens"]), f"{r['seconds']:.1f}")
        out.add_row(*(Text(visible(r[col])) for col in text), *numbers)
    console.print(out)


@llm_app.command("purge")
@handles_errors
def llm_purge() -> None:
    """Empty the llm_cache file (unscoped calls: llm chat/choose, the benchmark judge) and truncate its log.
    Calls made for a namespace are cached in the store and go with every delete there."""
    client = _client()
    if not isinstance(client.cache, FileCallCache):
        raise CuememError("no llm_cache file is configured (llm_cache=off): nothing to purge")
    count = client.cache.purge()
    say(f"purged {plural(count, 'cached call')} from {client.cache.path}")
